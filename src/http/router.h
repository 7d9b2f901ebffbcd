/* The router: a table of {method, pattern, handler} that the API layer fills
 * at start-up, and the per-route request counters behind
 * queen_http_requests_total{route,status}.
 *
 * Patterns are paths of '/'-separated segments:
 *   literal   "/api/v1/push"      matches that segment byte for byte (raw,
 *                                 not decoded);
 *   :name     "/api/v1/kv/:ns"    matches one non-empty segment;
 *   *name     (e.g. key in kv/:ns/ then *key) last segment only: the rest of
 *                                 the path, slashes included (may be empty).
 * Parameters are percent-decoded (base/pct.h rule 2) and read with
 * http_req_param(). The query string never takes part in matching.
 *
 * Dispatch rules:
 *   (1) The first route in registration order whose method and pattern
 *       both match wins. A GET route also answers HEAD.
 *   (2) When some pattern matches but no route has the method: 405
 *       {"error":"method not allowed","code":"method_not_allowed"} with an
 *       Allow header.
 *   (3) When no pattern matches: 404
 *       {"code":"no_such_route","error":"not found","path":<raw path>}
 *       (docs/design/http-api.md §1).
 *   (4) Every answer is counted once under its route's pattern and status;
 *       (2) and (3) are counted under route "unmatched".
 *   (5) With a guard set, no handler runs and no 404 or 405 is answered
 *       unless the guard let the request through; the guard's own answer
 *       is counted like the handler's would have been.
 * Loop thread only; the table must not change while requests run. */
#ifndef QUEEN_HTTP_ROUTER_H
#define QUEEN_HTTP_ROUTER_H

#include "base/buf.h"
#include "base/err.h"
#include "http/server.h"

#define ROUTER_MAX_SEGMENTS 16

struct router;

/* Returns an empty table; free with router_free. */
struct router *router_new(void);
void router_free(struct router *r);

/* Add a route; the pattern is copied, arg is borrowed. Returns 0 or
 * ERR_INVALID (pattern not starting with '/', '*' not last, an empty
 * parameter name, more than HTTP_MAX_PARAMS parameters). */
int router_add(struct router *r, enum http_method method, const char *pattern,
               http_handler_fn fn, void *arg, struct err *err);

/* One row of a module's route table. */
struct router_route {
    enum http_method method;
    const char *pattern;
    http_handler_fn fn;
};

/* Add routes[0..n) in order, each with arg (borrowed), as router_add does.
 * Returns 0, or router_add's ERR_INVALID with the route's pattern in front;
 * the routes before the refused one stay added. */
int router_add_table(struct router *r, const struct router_route *routes,
                     size_t n, void *arg, struct err *err);

/* Called before a request's handler, or before its 404 or 405 answer, with
 * req->route set (NULL when no route matched). Returns true to go on;
 * false after answering req itself. */
typedef bool (*router_guard_fn)(struct http_req *req, void *arg);

/* Put guard in front of every request (NULL: none); arg is borrowed. */
void router_set_guard(struct router *r, router_guard_fn guard, void *arg);

/* The guard's check on a request's head alone, with the guard's arg
 * (router_head_check; NULL: none). */
typedef bool (*router_head_guard_fn)(struct http_req *req, void *arg,
                                     struct http_refusal *out);
void router_set_head_guard(struct router *r, router_head_guard_fn guard);

/* An http_head_check_fn (http_config.head_check, the router as arg): the
 * head guard's verdict; a refusal is counted under the request's route
 * (queen_http_requests_total) as the guard's own answer would be. */
bool router_head_check(struct http_req *req, void *router,
                       struct http_refusal *out);

/* An http_handler_fn: pass it to http_server_start with the router as arg. */
void router_dispatch(struct http_req *req, void *router);

/* Append queen_http_requests_total (HELP, TYPE, then one line per route
 * and status seen, in registration and status order) to out. */
int router_metrics(const struct router *r, struct buf *out, struct err *err);

/* The count for one route pattern ("unmatched" for 404/405) and status. */
uint64_t router_count(const struct router *r, const char *pattern, int status);

#endif
