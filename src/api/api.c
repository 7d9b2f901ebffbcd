/* The HTTP API routes: the shared pieces (the route table, answers and the
 * mapping from ERR_* to a status and the envelope of docs/design/http-api.md
 * §1). The route families are in push.c, fetch.c, changed.c, queues.c,
 * health.c, status.c and metrics.c. */
#include "api/api.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/metrics.h"
#include "base/log.h"
#include "http/resp.h"
#include "http/router.h"
#include "http/server.h"
#include "raft/fsm.h"
#include "raft/node.h"

void api_init(struct api *a, uv_loop_t *loop, struct store *store,
              struct node *node)
{
    memset(a, 0, sizeof(*a));
    a->loop = loop;
    a->store = store;
    a->node = node;
    a->metrics = metrics_new();
    a->gen = (struct uuid7_gen)UUID7_GEN_INIT;
    api_long_poll_limits(a, 0, 0);
    if (node != NULL) {
        fsm_on_change(node_fsm(node), api_changed, a);
    }
}

void api_long_poll_limits(struct api *a, size_t per_conn, size_t per_node)
{
    struct longpoll_limits lim = {per_conn, per_node};

    ASSERT(a->lp.n_parked == 0);
    if (a->lp.parts != NULL) {
        longpoll_free(&a->lp);
    }
    longpoll_init(&a->lp, &lim);
}

void api_free(struct api *a)
{
    ASSERT(a->waiters == NULL); /* (3): api_stop() answered them */
    if (a->has_wake_timer) {
        uv_close((uv_handle_t *)&a->wake_timer, NULL);
        a->has_wake_timer = false;
    }
    longpoll_free(&a->lp);
    metrics_free(a->metrics);
    a->metrics = NULL;
}

/* An integer too long for 64 bits still clamps: its sign picks the end. */
static bool api_huge_int(const struct json_doc *d, int i,
                         const struct api_range *r, int64_t *out)
{
    struct slice s = json_span(d, i);

    if (json_type(d, i) != JSON_NUMBER || memchr(s.ptr, '.', s.len) != NULL ||
        memchr(s.ptr, 'e', s.len) != NULL ||
        memchr(s.ptr, 'E', s.len) != NULL) {
        return false;
    }
    *out = s.ptr[0] == '-' ? r->lo : r->hi;
    return true;
}

bool api_json_int(const struct json_doc *d, int obj, const char *key,
                  const struct api_range *r, int64_t *out)
{
    int i = json_obj_get(d, obj, key);
    int64_t v;

    if (i < 0 || json_is_null(d, i)) {
        *out = r->def;
        return true;
    }
    if (json_get_i64(d, i, &v)) {
        *out = v < r->lo ? r->lo : v > r->hi ? r->hi : v;
        return true;
    }
    return api_huge_int(d, i, r, out);
}

int api_check_name(struct slice name, struct err *err, const char *where, ...)
{
    char field[64];
    va_list ap;

    if (name.len > CMD_NAME_MAX) {
        va_start(ap, where);
        vsnprintf(field, sizeof(field), where, ap);
        va_end(ap);
        return err_set(err, ERR_TOO_BIG,
                       "%s: name of %zu bytes is over the %d-byte limit", field,
                       name.len, CMD_NAME_MAX);
    }
    /* Any bytes otherwise, control bytes and NUL included
     * (docs/design/http-api.md §1): names are length-counted everywhere,
     * object and KV keys percent-encode them, the JSONL envelope escapes
     * them (\u00xx) and log lines quote them (formats.md §1, §6). */
    return 0;
}

int api_routes(struct api *a, struct router *r, struct err *err)
{
    static const struct router_route routes[] = {
        {HTTP_METHOD_POST, "/api/v1/push", api_handle_push},
        {HTTP_METHOD_POST, "/api/v1/fetch", api_handle_fetch},
        {HTTP_METHOD_POST, "/api/v1/partitions/changed", api_handle_changed},
        {HTTP_METHOD_POST, "/api/v1/configure", api_handle_configure},
        {HTTP_METHOD_GET, "/api/v1/resources/queues", api_handle_queues},
        {HTTP_METHOD_GET, "/health", api_handle_health},
        {HTTP_METHOD_GET, "/status", api_handle_status},
        {HTTP_METHOD_POST, "/api/v1/stats/refresh", api_handle_stats_refresh},
        {HTTP_METHOD_GET, "/metrics/prometheus", api_handle_metrics},
        {HTTP_METHOD_GET, "/metrics", api_handle_metrics},
        {HTTP_METHOD_GET, "/api/v1/cluster/members", api_handle_members},
        {HTTP_METHOD_POST, "/api/v1/cluster/members", api_handle_member_add},
        {HTTP_METHOD_DELETE, "/api/v1/cluster/members/:id",
         api_handle_member_remove},
    };

    a->router = r;
    return router_add_table(r, routes, ARRAY_LEN(routes), a, err);
}

void api_respond_error(struct api *a, struct http_req *req, int status,
                       const char *code, const char *msg)
{
    struct buf b;
    struct jw w;
    struct err err;

    UNUSED(a);
    if (code != NULL) {
        http_respond_error(req, status, code, msg);
        return;
    }
    buf_init(&b, BUF_UNLIMITED);
    jw_init(&w, &b);
    jw_obj_begin(&w);
    jw_key(&w, "error");
    jw_text(&w, msg); /* may quote the request, cut at any byte */
    jw_obj_end(&w);
    ASSERT(jw_finish(&w, &err) == 0);
    http_respond_json(req, status, &b);
}

void api_respond_json(struct api *a, struct http_req *req, int status,
                      struct buf *body)
{
    UNUSED(a);
    http_respond_json(req, status, body);
}

const char *api_peer_http(const struct api *a, uint64_t id)
{
    for (size_t i = 0; a != NULL && i < a->n_peers; i++) {
        if (a->peers[i].id == id) {
            return a->peers[i].http;
        }
    }
    return NULL;
}

void api_peer_remember(struct api *a, uint64_t id, const char *http)
{
    struct api_peer *p = NULL;

    for (size_t i = 0; i < a->n_peers; i++) {
        if (a->peers[i].id == id) {
            p = &a->peers[i];
        }
    }
    if (p == NULL) {
        if (a->n_peers == API_MAX_PEERS) {
            return;
        }
        p = &a->peers[a->n_peers++];
    }
    p->id = id;
    snprintf(p->http, sizeof(p->http), "%s", http);
}

/* docs/design/http-api.md §1: 503 with Retry-After: 1, plus "leader" (its
 * HTTP address, where a client can retry) when a leader is known. */
static void api_respond_not_leader(struct api *a, struct http_req *req,
                                   const struct err *err)
{
    uint64_t id = 0;
    const char *addr = NULL;
    struct buf b;
    struct jw w;
    struct err werr;
    size_t len;
    char *body;

    if (a != NULL && a->node != NULL) {
        node_leader(a->node, &id, &addr);
        addr = api_peer_http(a, id);
    }
    buf_init(&b, BUF_UNLIMITED);
    jw_init(&w, &b);
    jw_obj_begin(&w);
    jw_key(&w, "error");
    jw_text(&w, err->msg);
    jw_key(&w, "code");
    jw_cstr(&w, "no_leader");
    if (id != 0 && addr != NULL) {
        jw_key(&w, "leader");
        jw_cstr(&w, addr);
    }
    jw_obj_end(&w);
    ASSERT(jw_finish(&w, &werr) == 0);
    body = buf_steal(&b, &len);
    http_respond_take(req, 503, "application/json", body, len,
                      "Retry-After: 1\r\n");
}

/* docs/design/http-api.md §1: retryable conditions answer 503 with Retry-After:
 * 1. */
void api_respond_err(struct api *a, struct http_req *req, const struct err *err)
{
    char shown[sizeof(err->msg)];

    UNUSED(a);
    switch (err->code) {
    case ERR_INVALID:
        http_respond_error(req, 400, "bad_request", err->msg);
        return;
    case ERR_TOO_BIG:
        http_respond_error(req, 413, "too_large", err->msg);
        return;
    case ERR_NOT_LEADER:
        api_respond_not_leader(a, req, err);
        return;
    case ERR_BUSY:
    case ERR_TIMEOUT:
        http_respond_error_ex(req, 503, "retry", err->msg,
                              "Retry-After: 1\r\n");
        return;
    case ERR_FULL:
        http_respond_error(req, 507, "storage_full", err->msg);
        return;
    case ERR_FORBIDDEN:
        http_respond_error(req, 403, "forbidden", err->msg);
        return;
    case ERR_LIMIT:
        http_respond_error_ex(req, 429, "too_many_requests", err->msg,
                              "Retry-After: 1\r\n");
        return;
    default:
        log_error("api", "%s %s: %s", req->method_name,
                  req->route != NULL ? req->route : "?", err->msg);
        err_public(err->msg, shown, sizeof(shown));
        http_respond_error(req, 500, "internal", shown);
        return;
    }
}
