/* The embedded control plane's routes (api/cp.h): tenants, clusters, their
 * status and a cluster's queue configuration, over the proxy tenant's KV
 * rows (cp/registry.h). The s3 routes are in cp_s3.c.
 *
 * Each route is a cp_call whose run() reads this node's applied rows and
 * submits one batch; the batch's callback answers, or submits the next
 * step (a delete marks the row deleting first, then removes the rows, the
 * owning row last, so a crash between the two leaves a row that a repeated
 * DELETE finishes). A lost precondition means another call won a race on
 * the same row: run() starts over from its reads, which, on this node, now
 * include the winner's write (the callback runs after this node applied
 * the batch, so after the winner's). */
#include "api/cp.h"

#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "base/json.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/uuid7.h"
#include "base/xalloc.h"
#include "broker/kv.h"
#include "http/resp.h"
#include "http/router.h"
#include "http/server.h"

/* ---- calls ---- */

int64_t cp_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct cp_call *cp_call_new(struct cp_api *cp, struct http_req *req,
                            cp_run_fn run)
{
    struct cp_call *c = xcalloc(1, sizeof(*c));

    c->cp = cp;
    c->req = req;
    c->run = run;
    buf_init(&c->out, BUF_UNLIMITED);
    return c;
}

void cp_call_free(struct cp_call *c)
{
    buf_free(&c->out);
    free(c);
}

void cp_fail(struct cp_call *c, int status, const char *code, const char *fmt,
             ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    http_respond_error(c->req, status, code, msg);
    cp_call_free(c);
}

void cp_fail_err(struct cp_call *c, const struct err *err)
{
    api_respond_err(c->cp->a, c->req, err);
    cp_call_free(c);
}

void cp_answer(struct cp_call *c, int status)
{
    http_respond_json(c->req, status, &c->out);
    cp_call_free(c);
}

static void cp_on_done(void *arg, const struct kv_answer *ans)
{
    struct cp_call *c = arg;
    struct err err;

    if (ans->status == ERR_PRECONDITION) {
        if (++c->tries >= CP_TRIES) {
            cp_fail(c, 409, "conflict",
                    "another control-plane call changed the same rows %d "
                    "times in a row; try again",
                    CP_TRIES);
            return;
        }
        buf_reset(&c->out);
        c->step = 0;
        c->run(c);
        return;
    }
    if (ans->status != 0) {
        err_set(&err, ans->status, "%s", ans->msg);
        cp_fail_err(c, &err);
        return;
    }
    c->done(c, ans);
}

void cp_submit(struct cp_call *c, const struct kv_op *ops, size_t n,
               cp_done_fn done)
{
    struct kv_batch b = {CP_PROXY_TENANT, ops, n};
    struct err err = {0};

    c->done = done;
    if (kv_submit(c->cp->kv, &b, cp_on_done, c, &err) != 0) {
        cp_fail_err(c, &err);
    }
}

static struct kv_op cp_op(int op, const char *ns, const char *key)
{
    struct kv_op o;

    memset(&o, 0, sizeof(o));
    o.op = op;
    o.ns = (struct slice){ns, strlen(ns)};
    o.key = (struct slice){key, strlen(key)};
    return o;
}

struct kv_op cp_op_put(const char *ns, const char *key, const char *value)
{
    struct kv_op o = cp_op(KV_PUT, ns, key);

    o.value = (struct slice){value, strlen(value)};
    o.forever = true;
    return o;
}

struct kv_op cp_op_claim(const char *ns, const char *key, const char *value)
{
    struct kv_op o = cp_op(KV_PUT_IF_ABSENT, ns, key);

    o.value = (struct slice){value, strlen(value)};
    o.forever = true;
    o.required = true;
    return o;
}

struct kv_op cp_op_del(const char *ns, const char *key)
{
    return cp_op(KV_DELETE, ns, key);
}

/* A put that must find the row at version (required). */
static struct kv_op cp_op_rewrite(const char *ns, const char *key,
                                  const char *value, uint64_t version)
{
    struct kv_op o = cp_op_put(ns, key, value);

    o.has_expect = true;
    o.expect = version;
    o.required = true;
    return o;
}

/* ---- the token ---- */

bool cp_token_ok(const struct cp_api *c, const char *token)
{
    uint8_t d[32];

    if (!c->has_token || token == NULL) {
        return false;
    }
    sha256(token, strlen(token), d);
    return CRYPTO_memcmp(d, c->token_digest, sizeof(d)) == 0;
}

/* The guard's verdict on req's head: true to go on, else *out. Also the
 * head guard (router_set_head_guard): checked before a body is read, no
 * body is held for a caller without the token. */
static bool cp_let_in(struct http_req *req, void *arg, struct http_refusal *out)
{
    const struct cp_api *c = arg;
    bool is_repeated;
    const char *token;

    if (!c->has_token) {
        *out = (struct http_refusal){404, "no_such_route", "not found", NULL};
        return false;
    }
    token = http_req_header_sole(req, CP_TOKEN_HEADER, &is_repeated);
    if (is_repeated || !cp_token_ok(c, token)) {
        *out = (struct http_refusal){401, "unauthorized",
                                     "bad control-plane token", NULL};
        return false;
    }
    req->is_let_in = true; /* its connection earned the idle timeout */
    return true;
}

static bool cp_guard(struct http_req *req, void *arg)
{
    struct http_refusal no;

    if (cp_let_in(req, arg, &no)) {
        return true;
    }
    http_respond_error(req, no.status, no.code, no.msg);
    return false;
}

/* ---- bodies ---- */

/* Parse req's body as a JSON object into d; the members keys[0..n) it
 * reads may appear once each (a repeated one is refused rather than read
 * first-wins, as push does: json.h (5)). False after answering 400. */
static bool cp_body(struct cp_call *c, struct json_doc *d,
                    const char *const *keys, int n)
{
    struct err err;
    int v[2];
    int dup;

    ASSERT(n <= (int)ARRAY_LEN(v));
    memset(d, 0, sizeof(*d));
    if (json_parse(d, c->req->body.ptr, c->req->body.len, NULL, &err) != 0) {
        cp_fail(c, 400, "invalid", "the body is not JSON: %s", err.msg);
        return false;
    }
    if (json_type(d, 0) != JSON_OBJECT) {
        json_doc_free(d);
        cp_fail(c, 400, "invalid", "the body must be a JSON object");
        return false;
    }
    dup = json_obj_pick(d, 0, keys, n, v);
    if (dup >= 0) {
        json_doc_free(d);
        cp_fail(c, 400, "invalid", "duplicate key \"%s\"", keys[dup]);
        return false;
    }
    return true;
}

/* String member key of the body into out[cap]; false when absent, not a
 * string, too long, or holding a NUL (read as a C string, it would be cut
 * there, and a cut name could name another row). */
static bool cp_body_str(const struct json_doc *d, const char *key, char *out,
                        size_t cap)
{
    int i = json_obj_get(d, 0, key);
    struct buf b;
    struct err err;
    bool is_ok;

    if (i < 0 || json_type(d, i) != JSON_STRING) {
        return false;
    }
    buf_init(&b, cap - 1);
    is_ok = json_get_str(d, i, &b, &err) == 0 &&
            (b.len == 0 || memchr(b.data, '\0', b.len) == NULL);
    if (is_ok) {
        memcpy(out, b.len > 0 ? b.data : "", b.len);
        out[b.len] = '\0';
    }
    buf_free(&b);
    return is_ok;
}

/* Answer 400: what (a body member, a part of the path) is no slug. */
static void cp_fail_slug(struct cp_call *c, const char *what)
{
    cp_fail(c, 400, "invalid",
            "%s must be a slug: 1 to %d characters of a-z, 0-9 and '-'", what,
            CP_SLUG_MAX);
}

/* A slug member: false after answering 400. */
static bool cp_body_slug(struct cp_call *c, const struct json_doc *d,
                         const char *key, char *out)
{
    if (!cp_body_str(d, key, out, CP_SLUG_MAX + 1) || !cp_slug_valid(out)) {
        cp_fail_slug(c, key);
        return false;
    }
    return true;
}

/* The route parameter name, whole, into out[cap]: false when the route has
 * none, when it holds a NUL (decoded from %00) or when it does not fit. A
 * parameter is never cut: a cut one could name another row. */
static bool cp_param(const struct cp_call *c, const char *name, char *out,
                     size_t cap)
{
    struct slice v;

    if (!http_req_param_slice(c->req, name, &v) || v.len >= cap ||
        (v.len > 0 && memchr(v.ptr, '\0', v.len) != NULL)) {
        return false;
    }
    memcpy(out, v.len > 0 ? v.ptr : "", v.len);
    out[v.len] = '\0';
    return true;
}

/* The tenant route's :slug into c->slug: false after answering 400. */
static bool cp_param_slug(struct cp_call *c)
{
    if (!cp_param(c, "slug", c->slug, sizeof(c->slug)) ||
        !cp_slug_valid(c->slug)) {
        cp_fail_slug(c, "the tenant in the path");
        return false;
    }
    return true;
}

/* A status member: false after answering 400. */
static bool cp_body_status(struct cp_call *c, enum cp_status *st)
{
    struct json_doc d;
    char text[32];
    bool is_ok;

    if (!cp_body(c, &d, (const char *const[]){"status"}, 1)) {
        return false;
    }
    is_ok = cp_body_str(&d, "status", text, sizeof(text)) &&
            cp_status_parse(text, st);
    json_doc_free(&d);
    if (!is_ok) {
        cp_fail(c, 400, "invalid",
                "status must be one of \"active\", \"push_blocked\" or "
                "\"suspended\"");
    }
    return is_ok;
}

/* ---- rows ---- */

static void cp_w_tenant_row(struct buf *b, const char *id, const char *slug)
{
    struct jw w;
    struct err err;

    jw_init(&w, b);
    jw_obj_begin(&w);
    jw_key(&w, "id");
    jw_cstr(&w, id);
    jw_key(&w, "slug");
    jw_cstr(&w, slug);
    jw_key(&w, "status");
    jw_cstr(&w, "active");
    jw_key(&w, "deleting");
    jw_bool(&w, false);
    jw_key(&w, "created_at_us");
    jw_i64(&w, cp_now_us());
    jw_obj_end(&w);
    ASSERT(jw_finish(&w, &err) == 0);
}

static void cp_w_cluster_row(struct buf *b, const struct cp_call *c)
{
    struct jw w;
    struct err err;

    jw_init(&w, b);
    jw_obj_begin(&w);
    jw_key(&w, "id");
    jw_cstr(&w, c->id);
    jw_key(&w, "slug");
    jw_cstr(&w, c->slug);
    jw_key(&w, "tenant_id");
    jw_cstr(&w, c->tenant_id);
    jw_key(&w, "broker_tenant");
    jw_cstr(&w, c->broker_tenant);
    jw_key(&w, "status");
    jw_cstr(&w, "active");
    jw_key(&w, "deleting");
    jw_bool(&w, false);
    jw_key(&w, "created_at_us");
    jw_i64(&w, cp_now_us());
    jw_obj_end(&w);
    ASSERT(jw_finish(&w, &err) == 0);
}

/* The row raw (an object) with status (NULL: kept) and deleting (when
 * set_deleting) replaced, into out. 0 or ERR_CORRUPT. */
static int cp_row_patch(struct slice raw, const char *status, bool set_deleting,
                        struct buf *out, struct err *err)
{
    struct json_doc d = {0};
    struct jw w;
    int rc = json_parse(&d, raw.ptr, raw.len, NULL, err);

    if (rc == 0 && json_type(&d, 0) != JSON_OBJECT) {
        rc = err_set(err, ERR_CORRUPT, "a control-plane row is not an object");
    }
    if (rc != 0) {
        json_doc_free(&d);
        return rc;
    }
    jw_init(&w, out);
    jw_obj_begin(&w);
    for (int k = json_child(&d, 0); k >= 0; k = json_next(&d, k)) {
        struct slice ks = json_span(&d, k);
        struct slice vs = json_span(&d, k + 1);

        if ((status != NULL && json_str_eq(&d, k, "status")) ||
            (set_deleting && json_str_eq(&d, k, "deleting"))) {
            continue;
        }
        /* The key spliced as a value (jw_raw puts the comma before it),
         * then ':' and the value verbatim; the next splice or key adds its
         * own comma. */
        jw_raw(&w, ks.ptr, ks.len);
        buf_append_byte(out, ':', err);
        buf_append(out, vs.ptr, vs.len, err);
    }
    if (status != NULL) {
        jw_key(&w, "status");
        jw_cstr(&w, status);
    }
    if (set_deleting) {
        jw_key(&w, "deleting");
        jw_bool(&w, true);
    }
    jw_obj_end(&w);
    json_doc_free(&d);
    return jw_finish(&w, err);
}

/* The tenant row of slug (a valid one: the caller checked it): 0 with id,
 * raw row and version; ERR_NOT_FOUND; or a store error. */
static int cp_tenant_find(struct store *s, const char *slug, char id[37],
                          struct buf *row, uint64_t *version, struct err *err)
{
    char key[CP_SLUG_MAX + 8];
    bool found;
    struct json_doc d = {0};
    int rc;

    *version = 0;
    if (!cp_slug_valid(slug)) { /* callers check; a bad one is still no key */
        return err_set(err, ERR_INVALID, "invalid tenant slug");
    }
    snprintf(key, sizeof(key), "slug:%s", slug);
    rc = cp_row_get(s, CP_NS_TENANTS, key, row, version, err);
    found = *version != 0;
    if (rc == 0 && !found) {
        rc = err_set(err, ERR_NOT_FOUND, "no tenant has the slug %s", slug);
    }
    if (rc == 0) {
        rc = json_parse(&d, row->data, row->len, NULL, err);
    }
    if (rc == 0 && !cp_body_str(&d, "id", id, CP_ID_LEN + 1)) {
        rc = err_set(err, ERR_CORRUPT, "tenant %s: its index row has no id",
                     slug);
    }
    json_doc_free(&d);
    if (rc == 0) {
        snprintf(key, sizeof(key), "#%s", id);
        rc = cp_row_get(s, CP_NS_TENANTS, key, row, version, err);
        found = *version != 0;
    }
    if (rc == 0 && !found) {
        rc = err_set(err, ERR_NOT_FOUND, "no tenant has the slug %s", slug);
    }
    return rc;
}

/* Whether the raw row says deleting:true. */
static bool cp_row_deleting(const struct buf *row)
{
    struct json_doc d = {0};
    struct err err;
    bool v = false;

    if (json_parse(&d, row->data, row->len, NULL, &err) == 0) {
        (void)json_get_bool(&d, json_obj_get(&d, 0, "deleting"), &v);
    }
    json_doc_free(&d);
    return v;
}

static void cp_w_cluster(struct jw *w, const struct cp_cluster *cl)
{
    char bt[37];

    uuid7_format(cl->broker_tenant, bt);
    jw_obj_begin(w);
    jw_key(w, "id");
    jw_cstr(w, cl->id);
    jw_key(w, "slug");
    jw_cstr(w, cl->slug);
    jw_key(w, "tenant_id");
    jw_cstr(w, cl->tenant_id);
    jw_key(w, "tenant_slug");
    jw_cstr(w, cl->tenant_slug);
    jw_key(w, "broker_tenant_uuid");
    jw_cstr(w, bt);
    jw_key(w, "status");
    jw_cstr(w, cp_status_name(cl->status));
    jw_key(w, "tenant_status");
    jw_cstr(w, cp_status_name(cl->tenant_status));
    jw_key(w, "effective_status");
    jw_cstr(w, cp_status_name(cp_cluster_merged(cl)));
    jw_key(w, "deleting");
    jw_bool(w, cl->deleting);
    jw_obj_end(w);
}

/* Answer status with the cluster cl rendered. */
static void cp_answer_cluster(struct cp_call *c, int status,
                              const struct cp_cluster *cl)
{
    struct jw w;
    struct err err;

    buf_reset(&c->out);
    jw_init(&w, &c->out);
    cp_w_cluster(&w, cl);
    ASSERT(jw_finish(&w, &err) == 0);
    cp_answer(c, status);
}

bool cp_call_cluster(struct cp_call *c, const char *param)
{
    char v[CP_SLUG_MAX + 1]; /* a slug, or an id (CP_ID_LEN is shorter) */
    struct err err;
    int rc;

    if (!cp_param(c, param, v, sizeof(v)) ||
        !(cp_slug_valid(v) || cp_id_valid(v))) {
        cp_fail(c, 400, "invalid",
                "the cluster in the path must be its id or its slug (1 to %d "
                "characters of a-z, 0-9 and '-')",
                CP_SLUG_MAX);
        return false;
    }
    rc = cp_cluster_find(c->cp->a->store, v, &c->cl, &err);
    if (rc == ERR_NOT_FOUND) {
        cp_fail(c, 404, "cluster_unknown", "no cluster has the id or slug %s",
                v);
        return false;
    }
    if (rc != 0) {
        cp_fail_err(c, &err);
        return false;
    }
    return true;
}

/* ---- tenants ---- */

static void cp_tenant_created(struct cp_call *c, const struct kv_answer *ans)
{
    UNUSED(ans);
    cp_answer(c, 201);
}

static void cp_run_tenant_create(struct cp_call *c)
{
    struct json_doc d;
    struct err err;
    uint64_t version;
    char key[CP_SLUG_MAX + 8];
    char idx[64];
    char rkey[CP_ID_LEN + 2];
    int rc;

    if (!cp_body(c, &d, (const char *const[]){"slug"}, 1)) {
        return;
    }
    if (!cp_body_slug(c, &d, "slug", c->slug)) {
        json_doc_free(&d);
        return;
    }
    json_doc_free(&d);
    rc = cp_tenant_find(c->cp->a->store, c->slug, c->id, &c->out, &version,
                        &err);
    if (rc == 0) {
        cp_answer(c, 200);
        return;
    }
    if (rc != ERR_NOT_FOUND) {
        cp_fail_err(c, &err);
        return;
    }
    uuid7_next(c->id);
    buf_reset(&c->out);
    cp_w_tenant_row(&c->out, c->id, c->slug);
    snprintf(key, sizeof(key), "slug:%s", c->slug);
    snprintf(idx, sizeof(idx), "{\"id\":\"%s\"}", c->id);
    snprintf(rkey, sizeof(rkey), "#%s", c->id);
    {
        struct kv_op ops[] = {cp_op_claim(CP_NS_TENANTS, key, idx),
                              cp_op_put(CP_NS_TENANTS, rkey, c->out.data)};

        cp_submit(c, ops, ARRAY_LEN(ops), cp_tenant_created);
    }
}

static int cp_add_row(void *arg, struct slice value, struct err *err)
{
    struct jw *w = arg;

    UNUSED(err);
    jw_raw(w, value.ptr, value.len);
    return 0;
}

static void cp_handle_tenant_list(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, NULL);
    struct jw w;
    struct err err;

    jw_init(&w, &c->out);
    jw_obj_begin(&w);
    jw_key(&w, "tenants");
    jw_arr_begin(&w);
    if (cp_row_scan(c->cp->a->store, CP_NS_TENANTS, cp_add_row, &w, &err) !=
        0) {
        cp_fail_err(c, &err);
        return;
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    ASSERT(jw_finish(&w, &err) == 0);
    cp_answer(c, 200);
}

static void cp_handle_tenant_create(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, cp_run_tenant_create);

    c->run(c);
}

static void cp_tenant_status_done(struct cp_call *c,
                                  const struct kv_answer *ans)
{
    UNUSED(ans);
    cp_answer(c, 200);
}

/* Rewrite the row of the tenant c->slug (the route's :slug, checked whole)
 * with status st (or with deleting set when st is NULL), then done. A
 * status change of a tenant being deleted answers 409; a repeated mark goes
 * through, so a second DELETE finishes the first. */
static void cp_tenant_rewrite(struct cp_call *c, const char *st,
                              cp_done_fn done)
{
    struct buf row;
    struct err err;
    uint64_t version;
    char rkey[CP_ID_LEN + 2];
    int rc;

    buf_init(&row, BUF_UNLIMITED);
    rc = cp_tenant_find(c->cp->a->store, c->slug, c->id, &row, &version, &err);
    if (rc == 0 && st != NULL && cp_row_deleting(&row)) {
        buf_free(&row);
        cp_fail(c, 409, "deleting", "tenant %s is being deleted", c->slug);
        return;
    }
    if (rc == 0) {
        buf_reset(&c->out);
        rc = cp_row_patch((struct slice){row.data, row.len}, st, st == NULL,
                          &c->out, &err);
    }
    buf_free(&row);
    if (rc == ERR_NOT_FOUND) {
        cp_fail(c, 404, "tenant_unknown", "no tenant has the slug %s", c->slug);
        return;
    }
    if (rc != 0) {
        cp_fail_err(c, &err);
        return;
    }
    snprintf(rkey, sizeof(rkey), "#%s", c->id);
    {
        struct kv_op op =
            cp_op_rewrite(CP_NS_TENANTS, rkey, c->out.data, version);

        cp_submit(c, &op, 1, done);
    }
}

static void cp_run_tenant_status(struct cp_call *c)
{
    enum cp_status st = CP_ACTIVE;

    if (cp_param_slug(c) && cp_body_status(c, &st)) {
        cp_tenant_rewrite(c, cp_status_name(st), cp_tenant_status_done);
    }
}

static void cp_handle_tenant_status(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, cp_run_tenant_status);

    c->run(c);
}

/* DELETE a tenant, step 2: its clusters' rows, their sinks' rows, then the
 * tenant's index and row. */
struct cp_ops {
    struct kv_op *ops;
    size_t n;
    size_t cap;
    struct buf keys; /* NUL-separated key texts the ops point into */
};

static void cp_ops_del(struct cp_ops *o, const char *ns, const char *prefix,
                       const char *arg)
{
    char key[CP_SLUG_MAX + 8];

    if (o->n == o->cap) {
        o->cap = o->cap == 0 ? 16 : o->cap * 2;
        o->ops = xrealloc(o->ops, o->cap * sizeof(*o->ops));
    }
    snprintf(key, sizeof(key), "%s%s", prefix, arg);
    o->ops[o->n++] = cp_op_del(ns, key); /* re-pointed in cp_ops_fix */
    buf_append(&o->keys, key, strlen(key) + 1, &(struct err){0});
}

/* Point each op's key at its copy in keys (which may have moved). */
static void cp_ops_fix(struct cp_ops *o)
{
    size_t off = 0;

    for (size_t i = 0; i < o->n; i++) {
        const char *k = o->keys.data + off;

        o->ops[i].key = (struct slice){k, strlen(k)};
        off += strlen(k) + 1;
    }
}

/* The last batch of a DELETE applied: answer 200 {kind: slug, "removed":
 * true}, with "clusters": c->n_removed when has_clusters (a tenant's). */
static void cp_answer_removed(struct cp_call *c, const char *kind,
                              const char *slug, bool has_clusters)
{
    struct jw w;
    struct err err;

    buf_reset(&c->out);
    jw_init(&w, &c->out);
    jw_obj_begin(&w);
    jw_key(&w, kind);
    jw_cstr(&w, slug);
    jw_key(&w, "removed");
    jw_bool(&w, true);
    if (has_clusters) {
        jw_key(&w, "clusters");
        jw_u64(&w, c->n_removed);
    }
    jw_obj_end(&w);
    ASSERT(jw_finish(&w, &err) == 0);
    cp_answer(c, 200);
}

static void cp_tenant_removed(struct cp_call *c, const struct kv_answer *ans)
{
    UNUSED(ans);
    cp_answer_removed(c, "tenant", c->slug, true);
}

/* The crash test's fault point: the deleting mark applied, nothing
 * removed yet. */
static void cp_crash_point(const struct cp_call *c)
{
    if (c->cp->is_crash_after_mark) {
        log_error("cp", "QUEEN_CP_CRASH_AFTER_MARK fired: aborting");
        abort();
    }
}

static void cp_tenant_marked(struct cp_call *c, const struct kv_answer *ans)
{
    struct cp_cluster *cl = NULL;
    struct cp_ops o = {0};
    struct err err;
    size_t n = 0;

    UNUSED(ans);
    cp_crash_point(c);
    if (cp_cluster_list(c->cp->a->store, &cl, &n, &err) != 0) {
        cp_fail_err(c, &err);
        return;
    }
    buf_init(&o.keys, BUF_UNLIMITED);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(cl[i].tenant_id, c->id) != 0) {
            continue;
        }
        cp_ops_del(&o, CP_NS_S3SINKS, "#", cl[i].id);
        cp_ops_del(&o, CP_NS_CLUSTERS, "slug:", cl[i].slug);
        cp_ops_del(&o, CP_NS_CLUSTERS, "#", cl[i].id);
        c->n_removed++;
    }
    free(cl);
    cp_ops_del(&o, CP_NS_TENANTS, "slug:", c->slug);
    cp_ops_del(&o, CP_NS_TENANTS, "#", c->id);
    cp_ops_fix(&o);
    cp_submit(c, o.ops, o.n, cp_tenant_removed);
    free(o.ops);
    buf_free(&o.keys);
}

static void cp_run_tenant_delete(struct cp_call *c)
{
    if (cp_param_slug(c)) {
        cp_tenant_rewrite(c, NULL, cp_tenant_marked);
    }
}

static void cp_handle_tenant_delete(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, cp_run_tenant_delete);

    c->run(c);
}

/* ---- clusters ---- */

static void cp_cluster_created(struct cp_call *c, const struct kv_answer *ans)
{
    struct err err;

    UNUSED(ans);
    if (cp_cluster_find(c->cp->a->store, c->id, &c->cl, &err) != 0) {
        cp_fail_err(c, &err);
        return;
    }
    cp_answer_cluster(c, 201, &c->cl);
}

/* The cluster slug is taken: the same cluster again (200), or another
 * tenant's (409). */
static void cp_cluster_exists(struct cp_call *c)
{
    if (strcmp(c->cl.tenant_slug, c->tenant_slug) != 0) {
        cp_fail(c, 409, "slug_taken",
                "cluster slug %s belongs to another tenant", c->slug);
        return;
    }
    if (c->cl.deleting) {
        cp_fail(c, 409, "deleting", "cluster %s is being deleted", c->slug);
        return;
    }
    cp_answer_cluster(c, 200, &c->cl);
}

/* The texts a create's batch points into. */
struct cp_create_texts {
    char t_idx_key[CP_SLUG_MAX + 8];
    char t_idx_val[CP_ID_LEN + 16];
    char t_key[CP_ID_LEN + 2];
    struct buf t_row;
    char c_idx_key[CP_SLUG_MAX + 8];
    char c_idx_val[CP_ID_LEN + 16];
    char c_key[CP_ID_LEN + 2];
    struct buf c_row;
};

/* The tenant half of a create: c->tenant_id of an existing tenant (0 ops),
 * or a new one whose two rows go first in the batch (2 ops). Returns the
 * count, or -1 after answering. */
static int cp_cluster_tenant(struct cp_call *c, struct kv_op *ops,
                             struct cp_create_texts *t)
{
    struct buf row;
    struct err err;
    uint64_t version;
    int rc;

    buf_init(&row, BUF_UNLIMITED);
    rc = cp_tenant_find(c->cp->a->store, c->tenant_slug, c->tenant_id, &row,
                        &version, &err);
    if (rc == 0 && cp_row_deleting(&row)) {
        buf_free(&row);
        cp_fail(c, 409, "deleting", "tenant %s is being deleted",
                c->tenant_slug);
        return -1;
    }
    buf_free(&row);
    if (rc == 0) {
        return 0;
    }
    if (rc != ERR_NOT_FOUND) {
        cp_fail_err(c, &err);
        return -1;
    }
    uuid7_next(c->tenant_id);
    snprintf(t->t_idx_key, sizeof(t->t_idx_key), "slug:%s", c->tenant_slug);
    snprintf(t->t_idx_val, sizeof(t->t_idx_val), "{\"id\":\"%s\"}",
             c->tenant_id);
    snprintf(t->t_key, sizeof(t->t_key), "#%s", c->tenant_id);
    cp_w_tenant_row(&t->t_row, c->tenant_id, c->tenant_slug);
    ops[0] = cp_op_claim(CP_NS_TENANTS, t->t_idx_key, t->t_idx_val);
    ops[1] = cp_op_put(CP_NS_TENANTS, t->t_key, t->t_row.data);
    return 2;
}

static void cp_run_cluster_create(struct cp_call *c)
{
    struct json_doc d;
    struct err err;
    struct kv_op ops[4];
    struct cp_create_texts t;
    int n;
    int rc;

    if (!cp_body(c, &d, (const char *const[]){"tenant_slug", "slug"}, 2)) {
        return;
    }
    if (!cp_body_slug(c, &d, "tenant_slug", c->tenant_slug) ||
        !cp_body_slug(c, &d, "slug", c->slug)) {
        json_doc_free(&d);
        return;
    }
    json_doc_free(&d);
    rc = cp_cluster_find(c->cp->a->store, c->slug, &c->cl, &err);
    if (rc == 0) {
        cp_cluster_exists(c);
        return;
    }
    if (rc != ERR_NOT_FOUND) {
        cp_fail_err(c, &err);
        return;
    }
    memset(&t, 0, sizeof(t));
    buf_init(&t.t_row, BUF_UNLIMITED);
    buf_init(&t.c_row, BUF_UNLIMITED);
    n = cp_cluster_tenant(c, ops, &t);
    if (n >= 0) {
        uuid7_next(c->id);
        uuid7_next(c->broker_tenant);
        snprintf(t.c_idx_key, sizeof(t.c_idx_key), "slug:%s", c->slug);
        snprintf(t.c_idx_val, sizeof(t.c_idx_val), "{\"id\":\"%s\"}", c->id);
        snprintf(t.c_key, sizeof(t.c_key), "#%s", c->id);
        cp_w_cluster_row(&t.c_row, c);
        ops[n] = cp_op_claim(CP_NS_CLUSTERS, t.c_idx_key, t.c_idx_val);
        ops[n + 1] = cp_op_put(CP_NS_CLUSTERS, t.c_key, t.c_row.data);
        cp_submit(c, ops, (size_t)n + 2, cp_cluster_created);
    }
    buf_free(&t.t_row);
    buf_free(&t.c_row);
}

static void cp_handle_cluster_create(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, cp_run_cluster_create);

    c->run(c);
}

static void cp_handle_cluster_list(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, NULL);
    struct cp_cluster *cl = NULL;
    struct jw w;
    struct err err;
    size_t n = 0;

    if (cp_cluster_list(c->cp->a->store, &cl, &n, &err) != 0) {
        cp_fail_err(c, &err);
        return;
    }
    jw_init(&w, &c->out);
    jw_obj_begin(&w);
    jw_key(&w, "clusters");
    jw_arr_begin(&w);
    for (size_t i = 0; i < n; i++) {
        cp_w_cluster(&w, &cl[i]);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    free(cl);
    ASSERT(jw_finish(&w, &err) == 0);
    cp_answer(c, 200);
}

static void cp_handle_cluster_get(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, NULL);

    if (cp_call_cluster(c, "id")) {
        cp_answer_cluster(c, 200, &c->cl);
    }
}

static void cp_cluster_status_done(struct cp_call *c,
                                   const struct kv_answer *ans)
{
    struct err err;

    UNUSED(ans);
    if (cp_cluster_find(c->cp->a->store, c->id, &c->cl, &err) != 0) {
        cp_fail_err(c, &err);
        return;
    }
    cp_answer_cluster(c, 200, &c->cl);
}

/* Rewrite the cluster's row (c->cl, just found) with status st (or with
 * deleting set when st is NULL), then done. */
static void cp_cluster_rewrite(struct cp_call *c, const char *st,
                               cp_done_fn done)
{
    struct buf row;
    struct err err;
    uint64_t version;
    bool found;
    char rkey[CP_ID_LEN + 2];
    int rc;

    snprintf(c->id, sizeof(c->id), "%s", c->cl.id);
    snprintf(rkey, sizeof(rkey), "#%s", c->id);
    buf_init(&row, BUF_UNLIMITED);
    rc =
        cp_row_get(c->cp->a->store, CP_NS_CLUSTERS, rkey, &row, &version, &err);
    found = version != 0;
    if (rc == 0 && !found) {
        rc = err_set(&err, ERR_NOT_FOUND, "gone");
    }
    if (rc == 0) {
        buf_reset(&c->out);
        rc = cp_row_patch((struct slice){row.data, row.len}, st, st == NULL,
                          &c->out, &err);
    }
    buf_free(&row);
    if (rc == ERR_NOT_FOUND) {
        cp_fail(c, 404, "cluster_unknown", "no cluster has the id %s", c->id);
        return;
    }
    if (rc != 0) {
        cp_fail_err(c, &err);
        return;
    }
    {
        struct kv_op op =
            cp_op_rewrite(CP_NS_CLUSTERS, rkey, c->out.data, version);

        cp_submit(c, &op, 1, done);
    }
}

static void cp_run_cluster_status(struct cp_call *c)
{
    enum cp_status st = CP_ACTIVE;

    if (!cp_body_status(c, &st) || !cp_call_cluster(c, "id")) {
        return;
    }
    if (c->cl.deleting) {
        cp_fail(c, 409, "deleting", "cluster %s is being deleted", c->cl.slug);
        return;
    }
    cp_cluster_rewrite(c, cp_status_name(st), cp_cluster_status_done);
}

static void cp_handle_cluster_status(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, cp_run_cluster_status);

    c->run(c);
}

static void cp_cluster_removed(struct cp_call *c, const struct kv_answer *ans)
{
    UNUSED(ans);
    cp_answer_removed(c, "cluster", c->cl.slug, false);
}

static void cp_cluster_marked(struct cp_call *c, const struct kv_answer *ans)
{
    struct cp_ops o = {0};

    UNUSED(ans);
    cp_crash_point(c);
    buf_init(&o.keys, BUF_UNLIMITED);
    cp_ops_del(&o, CP_NS_S3SINKS, "#", c->cl.id);
    cp_ops_del(&o, CP_NS_CLUSTERS, "slug:", c->cl.slug);
    cp_ops_del(&o, CP_NS_CLUSTERS, "#", c->cl.id);
    cp_ops_fix(&o);
    cp_submit(c, o.ops, o.n, cp_cluster_removed);
    free(o.ops);
    buf_free(&o.keys);
}

static void cp_run_cluster_delete(struct cp_call *c)
{
    if (cp_call_cluster(c, "id")) {
        cp_cluster_rewrite(c, NULL, cp_cluster_marked);
    }
}

static void cp_handle_cluster_delete(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, cp_run_cluster_delete);

    c->run(c);
}

static void cp_handle_cluster_configure(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, NULL);
    struct api *a = c->cp->a;
    uint8_t tenant[16];

    if (!cp_call_cluster(c, "id")) {
        return;
    }
    if (c->cl.deleting) {
        cp_fail(c, 409, "deleting", "cluster %s is being deleted", c->cl.slug);
        return;
    }
    memcpy(tenant, c->cl.broker_tenant, 16);
    cp_call_free(c); /* configure answers req itself */
    api_configure_for(a, req, tenant);
}

/* ---- the table ---- */

int cp_api_routes(struct cp_api *c, struct api *a, struct kv_service *kv,
                  const struct cp_api_config *cfg, struct router *r,
                  struct err *err)
{
    static const struct router_route routes[] = {
        {HTTP_METHOD_GET, "/api/cp/tenants", cp_handle_tenant_list},
        {HTTP_METHOD_POST, "/api/cp/tenants", cp_handle_tenant_create},
        {HTTP_METHOD_PUT, "/api/cp/tenants/:slug/status",
         cp_handle_tenant_status},
        {HTTP_METHOD_DELETE, "/api/cp/tenants/:slug", cp_handle_tenant_delete},
        {HTTP_METHOD_GET, "/api/cp/clusters", cp_handle_cluster_list},
        {HTTP_METHOD_POST, "/api/cp/clusters", cp_handle_cluster_create},
        {HTTP_METHOD_GET, "/api/cp/clusters/:id", cp_handle_cluster_get},
        {HTTP_METHOD_DELETE, "/api/cp/clusters/:id", cp_handle_cluster_delete},
        {HTTP_METHOD_PUT, "/api/cp/clusters/:id/status",
         cp_handle_cluster_status},
        {HTTP_METHOD_POST, "/api/cp/clusters/:id/configure",
         cp_handle_cluster_configure},
        {HTTP_METHOD_PUT, "/api/cp/clusters/:id/s3", cp_handle_s3_put},
        {HTTP_METHOD_GET, "/api/cp/clusters/:id/s3", cp_handle_s3_get},
        {HTTP_METHOD_DELETE, "/api/cp/clusters/:id/s3", cp_handle_s3_delete},
    };

    memset(c, 0, sizeof(*c));
    c->a = a;
    c->kv = kv;
    c->has_token = cfg->token != NULL && cfg->token[0] != '\0';
    if (c->has_token) {
        sha256(cfg->token, strlen(cfg->token), c->token_digest);
    }
    c->is_tenant_header = cfg->is_tenant_header;
    c->is_s3_embedded = cfg->is_s3_embedded;
    c->is_crash_after_mark = cfg->is_crash_after_mark;
    c->has_seal_key = cfg->seal_key != NULL;
    if (c->has_seal_key) {
        memcpy(c->seal_key, cfg->seal_key, AEAD_KEY_LEN);
    }
    router_set_guard(r, cp_guard, c);
    router_set_head_guard(r, cp_let_in);
    return router_add_table(r, routes, ARRAY_LEN(routes), c, err);
}

void cp_api_free(struct cp_api *c)
{
    OPENSSL_cleanse(c->seal_key, sizeof(c->seal_key));
    OPENSSL_cleanse(c->token_digest, sizeof(c->token_digest));
}
