/* Tests of the router, driven through a socketless HTTP connection. */
#include <stdbool.h>
#include <string.h>

#include "harness.h"

#include "base/buf.h"
#include "http/resp.h"
#include "http/router.h"
#include "http/server.h"

/* Route tags are string literals passed as the handler arg. */
#define TAG(s) ((void *)(uintptr_t)(s))

struct rt_fix {
    struct router *r;
    struct http_conn *c;
    struct buf out;
    bool is_released;
};

static void rio_write(struct http_conn *c, void *token, const uv_buf_t *bufs,
                      unsigned nbufs, void *arg)
{
    struct rt_fix *f = arg;
    struct err err;

    for (unsigned i = 0; i < nbufs; i++) {
        buf_append(&f->out, bufs[i].base, bufs[i].len, &err);
    }
    http_conn_write_done(c, token, 0);
}

static void rio_close(struct http_conn *c, void *arg)
{
    UNUSED(arg);
    http_conn_closed(c);
}

static void rio_release(struct http_conn *c, void *arg)
{
    struct rt_fix *f = arg;

    UNUSED(c);
    f->is_released = true;
}

/* Answers "<tag> ns=<ns> key=<key>" with the tag given as arg. */
static void h_tag(struct http_req *req, void *arg)
{
    struct buf b;
    struct err err;
    struct slice key = {"(none)", 6};

    http_req_param_slice(req, "key", &key);
    buf_init(&b, BUF_UNLIMITED);
    buf_printf(&b, &err, "%s ns=%s key=%.*s", (const char *)arg,
               http_req_param(req, "ns") ? http_req_param(req, "ns") : "(none)",
               (int)key.len, key.ptr);
    http_respond(req, 200, "text/plain", b.data, b.len);
    buf_free(&b);
}

static void h_created(struct http_req *req, void *arg)
{
    UNUSED(arg);
    http_respond(req, 201, NULL, NULL, 0);
}

static void fix_setup(struct rt_fix *f)
{
    struct http_config cfg = {0};
    struct http_conn_io io = {rio_write, rio_close, rio_release, NULL, NULL};
    struct err err;

    memset(f, 0, sizeof(*f));
    io.arg = f;
    buf_init(&f->out, BUF_UNLIMITED);
    f->r = router_new();
    EXPECT_EQ_I64(router_add(f->r, HTTP_METHOD_GET, "/health", h_tag,
                             TAG("health"), &err),
                  0);
    EXPECT_EQ_I64(router_add(f->r, HTTP_METHOD_POST, "/api/v1/push", h_tag,
                             TAG("push"), &err),
                  0);
    EXPECT_EQ_I64(router_add(f->r, HTTP_METHOD_GET, "/api/v1/kv/:ns/*key",
                             h_tag, TAG("kv-get"), &err),
                  0);
    EXPECT_EQ_I64(router_add(f->r, HTTP_METHOD_PUT, "/api/v1/kv/:ns/*key",
                             h_tag, TAG("kv-put"), &err),
                  0);
    EXPECT_EQ_I64(router_add(f->r, HTTP_METHOD_GET, "/api/v1/kv/:ns", h_tag,
                             TAG("kv-list"), &err),
                  0);
    EXPECT_EQ_I64(
        router_add(f->r, HTTP_METHOD_POST, "/made", h_created, NULL, &err), 0);
    f->c = http_conn_new(&cfg, &io, router_dispatch, f->r);
}

static void fix_teardown(struct rt_fix *f)
{
    if (!f->is_released) {
        http_conn_abort(f->c);
    }
    EXPECT(f->is_released);
    router_free(f->r);
    buf_free(&f->out);
}

/* Send one request; return the answer's body (after the empty line). */
static const char *ask(struct rt_fix *f, const char *req)
{
    const char *p;

    buf_reset(&f->out);
    http_conn_feed(f->c, req, strlen(req));
    p = f->out.data != NULL ? strstr(f->out.data, "\r\n\r\n") : NULL;
    return p != NULL ? p + 4 : "";
}

static bool status_is(struct rt_fix *f, const char *status_line)
{
    return f->out.data != NULL &&
           strncmp(f->out.data, status_line, strlen(status_line)) == 0;
}

TEST(literal_route_matches_and_ignores_the_query)
{
    struct rt_fix f;

    fix_setup(&f);
    EXPECT_STR_EQ(ask(&f, "GET /health?x=1 HTTP/1.1\r\n\r\n"),
                  "health ns=(none) key=(none)");
    EXPECT(status_is(&f, "HTTP/1.1 200 OK"));
    fix_teardown(&f);
}

TEST(rest_parameter_keeps_slashes_and_params_are_decoded)
{
    struct rt_fix f;

    fix_setup(&f);
    EXPECT_STR_EQ(ask(&f, "GET /api/v1/kv/my%20ns/a/b%2Fc HTTP/1.1\r\n\r\n"),
                  "kv-get ns=my ns key=a/b/c");
    EXPECT_STR_EQ(ask(&f, "PUT /api/v1/kv/n/k HTTP/1.1\r\n"
                          "Content-Length: 0\r\n\r\n"),
                  "kv-put ns=n key=k");
    EXPECT_STR_EQ(ask(&f, "GET /api/v1/kv/n HTTP/1.1\r\n\r\n"),
                  "kv-list ns=n key=(none)");
    EXPECT_STR_EQ(ask(&f, "GET /api/v1/kv/n/ HTTP/1.1\r\n\r\n"),
                  "kv-get ns=n key=");
    EXPECT_STR_EQ(ask(&f, "GET /api/v1/kv/n/100%zz HTTP/1.1\r\n\r\n"),
                  "kv-get ns=n key=100%zz");
    fix_teardown(&f);
}

TEST(unknown_path_is_404_envelope_with_the_path)
{
    struct rt_fix f;

    fix_setup(&f);
    EXPECT_STR_EQ(ask(&f, "GET /api/v1/nope?q=1 HTTP/1.1\r\n\r\n"),
                  "{\"code\":\"no_such_route\",\"error\":\"not found\","
                  "\"path\":\"/api/v1/nope\"}");
    EXPECT(status_is(&f, "HTTP/1.1 404 Not Found"));
    EXPECT(strstr(f.out.data, "Content-Type: application/json\r\n") != NULL);
    /* an empty :ns segment, a trailing slash and extra segments */
    ask(&f, "GET /api/v1/kv/ HTTP/1.1\r\n\r\n");
    EXPECT(status_is(&f, "HTTP/1.1 404 "));
    ask(&f, "GET /health/ HTTP/1.1\r\n\r\n");
    EXPECT(status_is(&f, "HTTP/1.1 404 "));
    ask(&f, "GET /health/x HTTP/1.1\r\n\r\n");
    EXPECT(status_is(&f, "HTTP/1.1 404 "));
    fix_teardown(&f);
}

TEST(unknown_path_with_bytes_that_are_not_utf8_is_quoted_as_utf8)
{
    struct rt_fix f;

    fix_setup(&f);
    /* llhttp lets raw bytes over 0x7f into the path; JSON must not carry
     * them unless they are UTF-8. */
    EXPECT_STR_EQ(ask(&f, "GET /x\xff\xfe\xc3\xa9 HTTP/1.1\r\n\r\n"),
                  "{\"code\":\"no_such_route\",\"error\":\"not found\","
                  "\"path\":\"/x??\xc3\xa9\"}");
    EXPECT(status_is(&f, "HTTP/1.1 404 Not Found"));
    fix_teardown(&f);
}

TEST(known_path_with_another_method_is_405_with_allow)
{
    struct rt_fix f;

    fix_setup(&f);
    EXPECT_STR_EQ(ask(&f, "DELETE /api/v1/kv/n/k HTTP/1.1\r\n\r\n"),
                  "{\"error\":\"method not allowed\","
                  "\"code\":\"method_not_allowed\"}");
    EXPECT(status_is(&f, "HTTP/1.1 405 Method Not Allowed"));
    EXPECT(strstr(f.out.data, "\r\nAllow: GET, PUT\r\n") != NULL);
    fix_teardown(&f);
}

TEST(head_uses_the_get_route)
{
    struct rt_fix f;

    fix_setup(&f);
    EXPECT_STR_EQ(ask(&f, "HEAD /health HTTP/1.1\r\n\r\n"), "");
    EXPECT(status_is(&f, "HTTP/1.1 200 OK"));
    EXPECT(strstr(f.out.data, "Content-Length: 27\r\n") != NULL);
    fix_teardown(&f);
}

TEST(answers_are_counted_by_pattern_and_status)
{
    struct rt_fix f;
    struct buf m;
    struct err err;

    fix_setup(&f);
    ask(&f, "GET /api/v1/kv/a/b HTTP/1.1\r\n\r\n");
    ask(&f, "GET /api/v1/kv/a/c HTTP/1.1\r\n\r\n");
    ask(&f, "POST /made HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    ask(&f, "GET /zzz HTTP/1.1\r\n\r\n");
    ask(&f, "GET /made HTTP/1.1\r\n\r\n");
    EXPECT_EQ_U64(router_count(f.r, "/api/v1/kv/:ns/*key", 200), 2);
    EXPECT_EQ_U64(router_count(f.r, "/made", 201), 1);
    EXPECT_EQ_U64(router_count(f.r, "unmatched", 404), 1);
    EXPECT_EQ_U64(router_count(f.r, "unmatched", 405), 1);
    EXPECT_EQ_U64(router_count(f.r, "/health", 200), 0);
    buf_init(&m, BUF_UNLIMITED);
    EXPECT_EQ_I64(router_metrics(f.r, &m, &err), 0);
    EXPECT_STR_EQ(m.data,
                  "# HELP queen_http_requests_total HTTP requests answered, "
                  "by route pattern and status.\n"
                  "# TYPE queen_http_requests_total counter\n"
                  "queen_http_requests_total{route=\"/api/v1/kv/:ns/*key\","
                  "status=\"200\"} 2\n"
                  "queen_http_requests_total{route=\"/made\",status=\"201\"}"
                  " 1\n"
                  "queen_http_requests_total{route=\"unmatched\","
                  "status=\"404\"} 1\n"
                  "queen_http_requests_total{route=\"unmatched\","
                  "status=\"405\"} 1\n");
    buf_free(&m);
    fix_teardown(&f);
}

TEST(first_registered_route_wins)
{
    struct rt_fix f;
    struct err err;

    fix_setup(&f);
    EXPECT_EQ_I64(router_add(f.r, HTTP_METHOD_GET, "/api/v1/kv/:ns/special",
                             h_tag, TAG("special"), &err),
                  0);
    EXPECT_STR_EQ(ask(&f, "GET /api/v1/kv/n/special HTTP/1.1\r\n\r\n"),
                  "kv-get ns=n key=special");
    fix_teardown(&f);
}

TEST(bad_patterns_are_refused)
{
    struct router *r = router_new();
    struct err err;

    EXPECT_EQ_I64(router_add(r, HTTP_METHOD_GET, "nope", h_tag, NULL, &err),
                  ERR_INVALID);
    EXPECT_EQ_I64(
        router_add(r, HTTP_METHOD_GET, "/a/*rest/b", h_tag, NULL, &err),
        ERR_INVALID);
    EXPECT_EQ_I64(router_add(r, HTTP_METHOD_GET, "/a/:", h_tag, NULL, &err),
                  ERR_INVALID);
    EXPECT_EQ_I64(router_add(r, HTTP_METHOD_GET, "/:a/:b/:c/:d/:e/:f/:g/:h/:i",
                             h_tag, NULL, &err),
                  ERR_INVALID);
    EXPECT_EQ_I64(router_add(r, HTTP_METHOD_GET, "/ok/:a", h_tag, NULL, &err),
                  0);
    router_free(r);
}

TEST(a_table_adds_its_routes_in_order_and_stops_at_a_bad_one)
{
    static const struct router_route table[] = {
        {HTTP_METHOD_GET, "/t/:ns", h_tag},
        {HTTP_METHOD_GET, "nope", h_tag},
        {HTTP_METHOD_GET, "/after", h_tag},
    };
    struct rt_fix f;
    struct err err;

    fix_setup(&f);
    EXPECT_EQ_I64(router_add_table(f.r, table, 1, TAG("tab"), &err), 0);
    EXPECT_STR_EQ(ask(&f, "GET /t/x HTTP/1.1\r\n\r\n"), "tab ns=x key=(none)");
    EXPECT_EQ_I64(router_add_table(f.r, table + 1, 2, TAG("tab"), &err),
                  ERR_INVALID);
    EXPECT(strncmp(err.msg, "route nope: ", 12) == 0);
    EXPECT(strstr(ask(&f, "GET /after HTTP/1.1\r\n\r\n"), "no_such_route") !=
           NULL);
    fix_teardown(&f);
}

/* Lets in /health and requests carrying "x-pass: 1"; answers 401 else. */
static bool guard_pass_header(struct http_req *req, void *arg)
{
    const char *v = http_req_header(req, "x-pass");

    (*(int *)arg)++;
    if ((req->route != NULL && strcmp(req->route, "/health") == 0) ||
        (v != NULL && strcmp(v, "1") == 0)) {
        req->principal = arg;
        return true;
    }
    http_respond_error(req, 401, "unauthorized", "no");
    return false;
}

TEST(a_guard_stands_before_every_handler_404_and_405_and_is_counted)
{
    struct rt_fix f;
    int calls = 0;

    fix_setup(&f);
    router_set_guard(f.r, guard_pass_header, &calls);
    ask(&f, "POST /api/v1/push HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    EXPECT(status_is(&f, "HTTP/1.1 401 "));
    ask(&f, "GET /api/v1/nope HTTP/1.1\r\n\r\n");
    EXPECT(status_is(&f, "HTTP/1.1 401 "));
    ask(&f, "DELETE /api/v1/kv/n/k HTTP/1.1\r\n\r\n");
    EXPECT(status_is(&f, "HTTP/1.1 401 "));
    EXPECT_STR_EQ(ask(&f, "GET /health HTTP/1.1\r\n\r\n"),
                  "health ns=(none) key=(none)");
    EXPECT_STR_EQ(ask(&f, "POST /api/v1/push HTTP/1.1\r\nx-pass: 1\r\n"
                          "Content-Length: 0\r\n\r\n"),
                  "push ns=(none) key=(none)");
    ask(&f, "GET /api/v1/nope HTTP/1.1\r\nx-pass: 1\r\n\r\n");
    EXPECT(status_is(&f, "HTTP/1.1 404 "));
    EXPECT_EQ_I64(calls, 6);
    EXPECT_EQ_U64(router_count(f.r, "/api/v1/push", 401), 1);
    EXPECT_EQ_U64(router_count(f.r, "/api/v1/push", 200), 1);
    EXPECT_EQ_U64(router_count(f.r, "unmatched", 401), 2);
    EXPECT_EQ_U64(router_count(f.r, "unmatched", 404), 1);
    fix_teardown(&f);
}
