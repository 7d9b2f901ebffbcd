/* The router: a table of {method, pattern, handler} and the per-route
 * request counters.
 *
 * Matching is a linear scan over a few dozen routes, each a handful of
 * segment compares: cheaper than one allocation, so no trie. A pattern is
 * parsed once at registration into segments that point into a private copy
 * of the pattern whose '/' separators were replaced by NULs, which makes each
 * parameter name a C string for http_req_param(). Counters belong to a
 * pattern, not a route, so GET and POST on one pattern share one label set. */
#include "http/router.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/pct.h"
#include "base/xalloc.h"
#include "http/resp.h"

#define ROUTER_MIN_STATUS 100
#define ROUTER_NSTATUS    500 /* 100..599 */

enum seg_kind { SEG_LIT, SEG_PARAM, SEG_REST };

struct route_seg {
    enum seg_kind kind;
    const char *text; /* literal bytes, or the parameter name */
    size_t len;
};

struct route_pattern {
    char *pattern;
    uint64_t counts[ROUTER_NSTATUS];
};

struct route {
    enum http_method method;
    struct route_pattern *pat;
    char *names; /* the pattern with NULs for '/' */
    struct route_seg segs[ROUTER_MAX_SEGMENTS];
    unsigned nsegs;
    http_handler_fn fn;
    void *arg;
};

struct router {
    struct route *routes;
    size_t nroutes;
    size_t cap;
    struct route_pattern **pats;
    size_t npats;
    struct route_pattern unmatched;
    router_guard_fn guard; /* (5) */
    router_head_guard_fn head_guard;
    void *guard_arg;
};

static const char *const router_method_names[] = {
    [HTTP_METHOD_OTHER] = "OTHER", [HTTP_METHOD_GET] = "GET",
    [HTTP_METHOD_HEAD] = "HEAD",   [HTTP_METHOD_POST] = "POST",
    [HTTP_METHOD_PUT] = "PUT",     [HTTP_METHOD_DELETE] = "DELETE",
    [HTTP_METHOD_PATCH] = "PATCH", [HTTP_METHOD_OPTIONS] = "OPTIONS",
};

struct router *router_new(void)
{
    struct router *r = xcalloc(1, sizeof(*r));

    r->unmatched.pattern = xstrdup("unmatched");
    return r;
}

void router_free(struct router *r)
{
    if (r == NULL) {
        return;
    }
    for (size_t i = 0; i < r->nroutes; i++) {
        free(r->routes[i].names);
    }
    for (size_t i = 0; i < r->npats; i++) {
        free(r->pats[i]->pattern);
        free(r->pats[i]);
    }
    free(r->unmatched.pattern);
    free(r->routes);
    free(r->pats);
    free(r);
}

static struct route_pattern *router_pattern(struct router *r, const char *p)
{
    for (size_t i = 0; i < r->npats; i++) {
        if (strcmp(r->pats[i]->pattern, p) == 0) {
            return r->pats[i];
        }
    }
    r->pats =
        xrealloc(r->pats, (r->npats + 1) * sizeof(struct route_pattern *));
    r->pats[r->npats] = xcalloc(1, sizeof(struct route_pattern));
    r->pats[r->npats]->pattern = xstrdup(p);
    return r->pats[r->npats++];
}

/* Split rt->names (a copy of pattern) into segments. */
static int route_parse(struct route *rt, const char *pattern, struct err *err)
{
    char *p = rt->names + 1;
    unsigned nparams = 0;

    for (;;) {
        char *slash = strchr(p, '/');
        struct route_seg *s = &rt->segs[rt->nsegs];

        if (rt->nsegs == ROUTER_MAX_SEGMENTS) {
            return err_set(err, ERR_INVALID, "route %s: too many segments",
                           pattern);
        }
        if (slash != NULL) {
            *slash = '\0';
        }
        s->kind = *p == ':' ? SEG_PARAM : *p == '*' ? SEG_REST : SEG_LIT;
        s->text = s->kind == SEG_LIT ? p : p + 1;
        s->len = strlen(s->text);
        rt->nsegs++;
        if (s->kind != SEG_LIT &&
            (s->len == 0 || ++nparams > HTTP_MAX_PARAMS)) {
            return err_set(err, ERR_INVALID,
                           "route %s: empty parameter name or too many",
                           pattern);
        }
        if (s->kind == SEG_REST && slash != NULL) {
            return err_set(err, ERR_INVALID, "route %s: *%s must be last",
                           pattern, s->text);
        }
        if (slash == NULL) {
            return 0;
        }
        p = slash + 1;
    }
}

int router_add(struct router *r, enum http_method method, const char *pattern,
               http_handler_fn fn, void *arg, struct err *err)
{
    struct route rt;

    if (pattern[0] != '/') {
        return err_set(err, ERR_INVALID, "route %s: must start with '/'",
                       pattern);
    }
    memset(&rt, 0, sizeof(rt));
    rt.method = method;
    rt.fn = fn;
    rt.arg = arg;
    rt.names = xstrdup(pattern);
    if (route_parse(&rt, pattern, err) != 0) {
        free(rt.names);
        return err->code;
    }
    rt.pat = router_pattern(r, pattern);
    if (r->nroutes == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 16;
        r->routes = xrealloc(r->routes, r->cap * sizeof(*r->routes));
    }
    r->routes[r->nroutes++] = rt;
    return 0;
}

int router_add_table(struct router *r, const struct router_route *routes,
                     size_t n, void *arg, struct err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (router_add(r, routes[i].method, routes[i].pattern, routes[i].fn,
                       arg, err) != 0) {
            return err_wrap(err, "route %s", routes[i].pattern);
        }
    }
    return 0;
}

/* Whether path matches rt; vals receives the raw parameter values. */
static bool route_match(const struct route *rt, struct slice path,
                        struct slice *vals)
{
    const char *p = path.ptr + 1;
    const char *end = path.ptr + path.len;
    unsigned n = 0;

    if (path.len == 0 || path.ptr[0] != '/') {
        return false;
    }
    for (unsigned i = 0; i < rt->nsegs; i++) {
        const struct route_seg *s = &rt->segs[i];
        const char *slash;
        const char *se;

        if (s->kind == SEG_REST) {
            vals[n] = (struct slice){p, (size_t)(end - p)};
            return true;
        }
        slash = memchr(p, '/', (size_t)(end - p));
        se = slash != NULL ? slash : end;
        if (s->kind == SEG_LIT &&
            ((size_t)(se - p) != s->len || memcmp(p, s->text, s->len) != 0)) {
            return false;
        }
        if (s->kind == SEG_PARAM) {
            if (se == p) {
                return false;
            }
            vals[n++] = (struct slice){p, (size_t)(se - p)};
        }
        if (i + 1 == rt->nsegs) {
            return slash == NULL;
        }
        if (slash == NULL) {
            return false;
        }
        p = slash + 1;
    }
    return false;
}

static void route_count(void *arg, int status)
{
    struct route_pattern *pat = arg;

    if (status >= ROUTER_MIN_STATUS &&
        status < ROUTER_MIN_STATUS + ROUTER_NSTATUS) {
        pat->counts[status - ROUTER_MIN_STATUS]++;
    }
}

static void route_set_params(const struct route *rt, struct http_req *req,
                             const struct slice *vals)
{
    unsigned n = 0;
    struct err err;
    int rc = 0;

    buf_reset(&req->params_buf);
    for (unsigned i = 0; i < rt->nsegs; i++) {
        struct http_param *p = &req->params[n];

        if (rt->segs[i].kind == SEG_LIT) {
            continue;
        }
        p->name = rt->segs[i].text;
        p->value_off = (uint32_t)req->params_buf.len;
        rc |= pct_unescape(&req->params_buf, vals[n].ptr, vals[n].len, &err);
        p->value_len = (uint32_t)(req->params_buf.len - p->value_off);
        rc |= buf_append_byte(&req->params_buf, '\0', &err);
        n++;
    }
    ASSERT(rc == 0); /* params_buf is unlimited */
    req->nparams = n;
}

static void router_not_allowed(struct router *r, struct http_req *req)
{
    struct buf allow;
    struct err err;
    int rc;

    buf_init(&allow, BUF_UNLIMITED);
    rc = buf_append_str(&allow, "Allow: ", &err);
    for (size_t i = 0; i < r->nroutes; i++) {
        struct slice vals[HTTP_MAX_PARAMS];
        const char *name = router_method_names[r->routes[i].method];

        if (!route_match(&r->routes[i], req->path, vals) ||
            strstr(allow.data, name) != NULL) {
            continue;
        }
        rc |= buf_printf(&allow, &err, "%s%s", allow.len > 7 ? ", " : "", name);
    }
    rc |= buf_append_str(&allow, "\r\n", &err);
    ASSERT(rc == 0);
    http_respond_error_ex(req, 405, "method_not_allowed", "method not allowed",
                          allow.data);
    buf_free(&allow);
}

/* The path is bytes from the network (a %XX is not decoded, but a raw byte
 * over 0x7f is let in by llhttp): it is quoted as valid UTF-8, so the
 * answer stays JSON. */
static void router_not_found(struct http_req *req)
{
    struct buf b;
    struct jw w;
    struct err err;
    char *path = xmalloc(req->path.len + 1);
    size_t n =
        json_utf8_quote(path, req->path.ptr, req->path.len, req->path.len);
    int rc;

    buf_init(&b, BUF_UNLIMITED);
    jw_init(&w, &b);
    jw_obj_begin(&w);
    jw_key(&w, "code");
    jw_cstr(&w, "no_such_route");
    jw_key(&w, "error");
    jw_cstr(&w, "not found");
    jw_key(&w, "path");
    jw_str(&w, path, n);
    jw_obj_end(&w);
    free(path);
    rc = jw_finish(&w, &err);
    ASSERT(rc == 0); /* unlimited */
    http_respond_json(req, 404, &b);
}

static bool route_method_ok(const struct route *rt, enum http_method m)
{
    return rt->method == m ||
           (rt->method == HTTP_METHOD_GET && m == HTTP_METHOD_HEAD);
}

void router_set_guard(struct router *r, router_guard_fn guard, void *arg)
{
    r->guard = guard;
    r->guard_arg = arg;
}

void router_set_head_guard(struct router *r, router_head_guard_fn guard)
{
    r->head_guard = guard;
}

/* The route that serves req (its parameters in vals), or NULL;
 * *is_path_known when a route has req's path for another method. */
static const struct route *route_find(const struct router *r,
                                      const struct http_req *req,
                                      struct slice *vals, bool *is_path_known)
{
    *is_path_known = false;
    for (size_t i = 0; i < r->nroutes; i++) {
        const struct route *rt = &r->routes[i];

        memset(vals, 0, HTTP_MAX_PARAMS * sizeof(*vals));
        if (!route_match(rt, req->path, vals)) {
            continue;
        }
        if (route_method_ok(rt, req->method)) {
            return rt;
        }
        *is_path_known = true;
    }
    return NULL;
}

/* Count req's answer under rt's pattern (unmatched when rt is NULL). */
static void route_count_as(struct router *r, struct http_req *req,
                           const struct route *rt)
{
    req->on_status = route_count;
    req->on_status_arg = rt != NULL ? rt->pat : &r->unmatched;
}

bool router_head_check(struct http_req *req, void *router,
                       struct http_refusal *out)
{
    struct router *r = router;
    struct slice vals[HTTP_MAX_PARAMS];
    bool is_path_known;

    if (r->head_guard == NULL || r->head_guard(req, r->guard_arg, out)) {
        return true;
    }
    route_count_as(r, req, route_find(r, req, vals, &is_path_known));
    return false;
}

/* (5) */
static bool router_let_in(struct router *r, struct http_req *req)
{
    return r->guard == NULL || r->guard(req, r->guard_arg);
}

void router_dispatch(struct http_req *req, void *router)
{
    struct router *r = router;
    struct slice vals[HTTP_MAX_PARAMS];
    bool is_path_known;
    const struct route *rt = route_find(r, req, vals, &is_path_known);

    route_count_as(r, req, rt);
    if (rt != NULL) {
        route_set_params(rt, req, vals);
        req->route = rt->pat->pattern;
        if (router_let_in(r, req)) {
            rt->fn(req, rt->arg);
        }
        return;
    }
    req->route = NULL;
    if (!router_let_in(r, req)) {
        return;
    }
    if (is_path_known) {
        router_not_allowed(r, req);
    } else {
        router_not_found(req);
    }
}

static int router_metrics_pattern(const struct route_pattern *pat,
                                  struct buf *out, struct err *err)
{
    for (int i = 0; i < ROUTER_NSTATUS; i++) {
        if (pat->counts[i] == 0) {
            continue;
        }
        if (buf_append_str(out, "queen_http_requests_total{route=", err) ||
            json_escape(out, pat->pattern, strlen(pat->pattern), err) ||
            buf_printf(out, err, ",status=\"%d\"} %" PRIu64 "\n",
                       i + ROUTER_MIN_STATUS, pat->counts[i])) {
            return err->code;
        }
    }
    return 0;
}

int router_metrics(const struct router *r, struct buf *out, struct err *err)
{
    if (buf_append_str(out,
                       "# HELP queen_http_requests_total HTTP requests "
                       "answered, by route pattern and status.\n"
                       "# TYPE queen_http_requests_total counter\n",
                       err) != 0) {
        return err->code;
    }
    for (size_t i = 0; i < r->npats; i++) {
        if (router_metrics_pattern(r->pats[i], out, err) != 0) {
            return err->code;
        }
    }
    return router_metrics_pattern(&r->unmatched, out, err);
}

uint64_t router_count(const struct router *r, const char *pattern, int status)
{
    const struct route_pattern *pat = NULL;

    ASSERT(r != NULL);
    if (status < ROUTER_MIN_STATUS ||
        status >= ROUTER_MIN_STATUS + ROUTER_NSTATUS) {
        return 0;
    }
    if (strcmp(pattern, "unmatched") == 0) {
        pat = &r->unmatched;
    }
    for (size_t i = 0; pat == NULL && i < r->npats; i++) {
        if (strcmp(r->pats[i]->pattern, pattern) == 0) {
            pat = r->pats[i];
        }
    }
    return pat != NULL ? pat->counts[status - ROUTER_MIN_STATUS] : 0;
}
