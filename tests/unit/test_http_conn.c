/* Tests of the HTTP connection without sockets: bytes go in through
 * http_conn_feed, answers come out through a recording io. */
#include <stdbool.h>
#include <string.h>

#include "harness.h"

#include "base/buf.h"
#include "http/resp.h"
#include "http/server.h"

struct tio {
    struct buf out;
    bool is_closed;
    bool is_released;
    bool is_paused;
    bool defer_writes; /* hold write completions until tio_complete */
    void *held[64];
    int nheld;
    struct http_conn *c;
};

struct th {
    struct http_req *reqs[512];
    int n;
    bool answer_now;
};

static void tio_write(struct http_conn *c, void *token, const uv_buf_t *bufs,
                      unsigned nbufs, void *arg)
{
    struct tio *t = arg;
    struct err err;

    for (unsigned i = 0; i < nbufs; i++) {
        buf_append(&t->out, bufs[i].base, bufs[i].len, &err);
    }
    if (t->defer_writes) {
        t->held[t->nheld++] = token;
        return;
    }
    http_conn_write_done(c, token, 0);
}

static void tio_close(struct http_conn *c, void *arg)
{
    struct tio *t = arg;

    t->is_closed = true;
    http_conn_closed(c);
}

static void tio_release(struct http_conn *c, void *arg)
{
    struct tio *t = arg;

    UNUSED(c);
    t->is_released = true;
}

static void tio_pause(struct http_conn *c, bool paused, void *arg)
{
    struct tio *t = arg;

    UNUSED(c);
    t->is_paused = paused;
}

/* Answer "<METHOD> <path> q=<query> b=<body>". */
static void th_answer(struct http_req *req)
{
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_printf(&b, &err, "%s %.*s q=%.*s b=%.*s", req->method_name,
               (int)req->path.len, req->path.ptr, (int)req->query.len,
               req->query.ptr, (int)req->body.len, req->body.ptr);
    http_respond(req, 200, "text/plain", b.data, b.len);
    buf_free(&b);
}

static void th_handler(struct http_req *req, void *arg)
{
    struct th *h = arg;

    h->reqs[h->n++] = req;
    if (h->answer_now) {
        th_answer(req);
    }
}

static struct http_conn *setup(struct tio *t, struct th *h,
                               const struct http_config *cfg_in)
{
    struct http_config cfg = {0};
    struct http_conn_io io = {tio_write, tio_close, tio_release, tio_pause,
                              NULL};

    if (cfg_in != NULL) {
        cfg = *cfg_in;
    }
    memset(t, 0, sizeof(*t));
    memset(h, 0, sizeof(*h));
    io.arg = t;
    buf_init(&t->out, BUF_UNLIMITED);
    h->answer_now = true;
    t->c = http_conn_new(&cfg, &io, th_handler, h);
    return t->c;
}

static void feed_str(struct http_conn *c, const char *s)
{
    http_conn_feed(c, s, strlen(s));
}

/* Close the conn as a peer reset would, and check it is freed. */
static void teardown(struct tio *t)
{
    if (!t->is_released) {
        http_conn_abort(t->c);
    }
    EXPECT(t->is_released);
    buf_free(&t->out);
}

static const char *out_str(struct tio *t)
{
    return t->out.data != NULL ? t->out.data : "";
}

TEST(get_is_answered_with_exact_bytes)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    feed_str(c, "GET /a/b?x=1&y=2 HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_EQ_I64(h.n, 1);
    EXPECT_STR_EQ(out_str(&t), "HTTP/1.1 200 OK\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 21\r\n\r\n"
                               "GET /a/b q=x=1&y=2 b=");
    EXPECT(!t.is_closed);
    teardown(&t);
}

TEST(headers_are_found_case_insensitively)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    h.answer_now = false;
    feed_str(c, "POST /p HTTP/1.1\r\nContent-Type: application/json\r\n"
                "X-Queen-Tenant: abc\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n");
    EXPECT_EQ_I64(h.n, 1);
    EXPECT_STR_EQ(http_req_header(h.reqs[0], "content-type"),
                  "application/json");
    EXPECT_STR_EQ(http_req_header(h.reqs[0], "x-queen-tenant"), "abc");
    EXPECT_STR_EQ(http_req_header(h.reqs[0], "X-EMPTY"), "");
    EXPECT(http_req_header(h.reqs[0], "missing") == NULL);
    EXPECT(h.reqs[0]->method == HTTP_METHOD_POST);
    EXPECT_STR_EQ(h.reqs[0]->method_name, "POST");
    EXPECT_EQ_U64(h.reqs[0]->body.len, 0);
    th_answer(h.reqs[0]);
    teardown(&t);
}

TEST(body_split_byte_by_byte_is_whole)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);
    const char *req = "POST /p HTTP/1.1\r\nContent-Length: 11\r\n\r\n"
                      "hello world";

    for (size_t i = 0; req[i] != '\0'; i++) {
        http_conn_feed(c, req + i, 1);
    }
    EXPECT_EQ_I64(h.n, 1);
    EXPECT(strstr(out_str(&t), "\r\n\r\nPOST /p q= b=hello world") != NULL);
    teardown(&t);
}

TEST(chunked_body_is_assembled)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    feed_str(c, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    EXPECT_EQ_I64(h.n, 1);
    EXPECT(strstr(out_str(&t), "b=hello world") != NULL);
    teardown(&t);
}

TEST(pipelined_answers_leave_in_request_order)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    h.answer_now = false;
    feed_str(c, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n"
                "GET /3 HTTP/1.1\r\n\r\n");
    EXPECT_EQ_I64(h.n, 3);
    th_answer(h.reqs[2]);
    th_answer(h.reqs[1]);
    EXPECT_EQ_U64(t.out.len, 0); /* /1 is still unanswered */
    th_answer(h.reqs[0]);
    {
        const char *o = out_str(&t);
        const char *a = strstr(o, "GET /1 ");
        const char *b = strstr(o, "GET /2 ");
        const char *d = strstr(o, "GET /3 ");

        EXPECT(a != NULL && b != NULL && d != NULL);
        EXPECT(a < b && b < d);
    }
    teardown(&t);
}

TEST(answers_wait_for_slow_writes_and_keep_order)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    t.defer_writes = true;
    feed_str(c, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
    EXPECT_EQ_I64(t.nheld, 2);
    http_conn_write_done(c, t.held[0], 0);
    http_conn_write_done(c, t.held[1], 0);
    EXPECT(strstr(out_str(&t), "GET /1") < strstr(out_str(&t), "GET /2"));
    EXPECT(!t.is_closed);
    teardown(&t);
}

TEST(body_over_the_limit_is_413_and_closes)
{
    struct http_config cfg = {.max_body_bytes = 10};
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, &cfg);

    feed_str(c, "POST /p HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello");
    EXPECT_EQ_I64(h.n, 0);
    EXPECT(strncmp(out_str(&t), "HTTP/1.1 413 Payload Too Large\r\n", 32) == 0);
    EXPECT(strstr(out_str(&t), "Connection: close\r\n") != NULL);
    EXPECT(strstr(out_str(&t), "{\"error\":\"request body over the size "
                               "limit\",\"code\":\"too_large\"}") != NULL);
    EXPECT(t.is_closed);
    EXPECT(t.is_released);
    teardown(&t);
}

TEST(body_at_the_limit_is_accepted)
{
    struct http_config cfg = {.max_body_bytes = 10};
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, &cfg);

    feed_str(c, "POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789");
    EXPECT_EQ_I64(h.n, 1);
    EXPECT(strstr(out_str(&t), "b=0123456789") != NULL);
    teardown(&t);
}

TEST(chunked_body_over_the_limit_is_413)
{
    struct http_config cfg = {.max_body_bytes = 10};
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, &cfg);

    feed_str(c, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                "6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n");
    EXPECT_EQ_I64(h.n, 0);
    EXPECT(strncmp(out_str(&t), "HTTP/1.1 413 ", 13) == 0);
    EXPECT(t.is_closed);
    teardown(&t);
}

TEST(malformed_request_is_400_and_closes)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    feed_str(c, "GET /ok HTTP/1.1\r\n\r\nBLAH\x01 / HTTP/1.1\r\n\r\n");
    EXPECT_EQ_I64(h.n, 1);
    EXPECT(strncmp(out_str(&t), "HTTP/1.1 200 OK\r\n", 17) == 0);
    EXPECT(strstr(out_str(&t), "HTTP/1.1 400 Bad Request\r\n") != NULL);
    EXPECT(strstr(out_str(&t), "\"code\":\"bad_request\"") != NULL);
    EXPECT(t.is_closed);
    teardown(&t);
}

TEST(error_waits_behind_an_unanswered_request)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    h.answer_now = false;
    feed_str(c, "GET /slow HTTP/1.1\r\n\r\nGET / HTTP/9.9\r\n\r\n");
    EXPECT_EQ_I64(h.n, 1);
    EXPECT_EQ_U64(t.out.len, 0);
    EXPECT(!t.is_closed);
    th_answer(h.reqs[0]);
    EXPECT(strstr(out_str(&t), "GET /slow") <
           strstr(out_str(&t), "HTTP/1.1 400"));
    EXPECT(t.is_closed);
    teardown(&t);
}

TEST(head_over_the_limit_is_431)
{
    struct http_config cfg = {.max_header_bytes = 64};
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, &cfg);

    feed_str(c, "GET /p HTTP/1.1\r\nX-Long: "
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                "\r\n\r\n");
    EXPECT_EQ_I64(h.n, 0);
    EXPECT(strncmp(out_str(&t), "HTTP/1.1 431 ", 13) == 0);
    EXPECT(t.is_closed);
    teardown(&t);
}

TEST(expect_100_continue_is_answered_first)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    feed_str(c, "POST /p HTTP/1.1\r\nExpect: 100-continue\r\n"
                "Content-Length: 2\r\n\r\n");
    EXPECT_STR_EQ(out_str(&t), "HTTP/1.1 100 Continue\r\n\r\n");
    feed_str(c, "ok");
    EXPECT(strstr(out_str(&t), "\r\n\r\nHTTP/1.1 200 OK\r\n") != NULL);
    EXPECT(strstr(out_str(&t), "b=ok") != NULL);
    teardown(&t);
}

TEST(expect_with_a_body_over_the_limit_is_413_without_continue)
{
    struct http_config cfg = {.max_body_bytes = 1};
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, &cfg);

    feed_str(c, "POST /p HTTP/1.1\r\nExpect: 100-continue\r\n"
                "Content-Length: 2\r\n\r\n");
    EXPECT(strncmp(out_str(&t), "HTTP/1.1 413 ", 13) == 0);
    EXPECT(strstr(out_str(&t), "100 Continue") == NULL);
    teardown(&t);
}

TEST(peer_gone_before_the_answer_frees_after_it)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    h.answer_now = false;
    feed_str(c, "POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                "GET /2 HTTP/1.1\r\n\r\n");
    EXPECT_EQ_I64(h.n, 2);
    th_answer(h.reqs[1]);
    http_conn_abort(c);
    EXPECT(t.is_closed);
    EXPECT(!t.is_released); /* req 0 is still with its handler */
    EXPECT_MEM_EQ(h.reqs[0]->body.ptr, h.reqs[0]->body.len, "abc", 3);
    th_answer(h.reqs[0]);
    EXPECT(t.is_released);
    EXPECT_EQ_U64(t.out.len, 0); /* answers were dropped, not written */
    teardown(&t);
}

TEST(eof_after_a_request_still_answers_it)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    h.answer_now = false;
    feed_str(c, "GET /1 HTTP/1.1\r\n\r\n");
    http_conn_peer_gone(c);
    EXPECT(!t.is_closed);
    th_answer(h.reqs[0]);
    EXPECT(strstr(out_str(&t), "GET /1") != NULL);
    EXPECT(t.is_closed);
    teardown(&t);
}

TEST(connection_close_answers_then_closes_and_ignores_the_rest)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    feed_str(c, "GET /1 HTTP/1.1\r\nConnection: close\r\n\r\n"
                "GET /2 HTTP/1.1\r\n\r\n");
    EXPECT_EQ_I64(h.n, 1);
    EXPECT(strstr(out_str(&t), "Connection: close\r\n") != NULL);
    EXPECT(strstr(out_str(&t), "GET /2") == NULL);
    EXPECT(t.is_closed);
    teardown(&t);
}

TEST(http_1_0_closes_unless_kept_alive)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    feed_str(c, "GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    EXPECT(strncmp(out_str(&t), "HTTP/1.0 200 OK\r\n", 17) == 0);
    EXPECT(strstr(out_str(&t), "Connection: keep-alive\r\n") != NULL);
    EXPECT(!t.is_closed);
    feed_str(c, "GET /2 HTTP/1.0\r\n\r\n");
    EXPECT(strstr(out_str(&t), "Connection: close\r\n") != NULL);
    EXPECT(t.is_closed);
    teardown(&t);
}

TEST(head_answer_has_length_but_no_body)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    feed_str(c, "HEAD /x HTTP/1.1\r\n\r\n");
    EXPECT_STR_EQ(out_str(&t), "HTTP/1.1 200 OK\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 13\r\n\r\n");
    teardown(&t);
}

TEST(shutdown_closes_an_idle_connection_at_once)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    feed_str(c, "GET /1 HTTP/1.1\r\n\r\n");
    http_conn_shutdown(c);
    EXPECT(t.is_closed);
    EXPECT(t.is_released);
    teardown(&t);
}

TEST(shutdown_waits_for_the_answer_in_flight)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    h.answer_now = false;
    feed_str(c, "GET /1 HTTP/1.1\r\n\r\n");
    http_conn_shutdown(c);
    EXPECT(!t.is_closed);
    th_answer(h.reqs[0]);
    EXPECT(strstr(out_str(&t), "Connection: close\r\n") != NULL);
    EXPECT(strstr(out_str(&t), "GET /1") != NULL);
    EXPECT(t.is_closed);
    teardown(&t);
}

TEST(too_many_queued_requests_pause_reading)
{
    struct http_config cfg = {.max_pipelined = 2};
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, &cfg);

    h.answer_now = false;
    feed_str(c, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
    EXPECT(t.is_paused);
    th_answer(h.reqs[0]);
    EXPECT(!t.is_paused);
    th_answer(h.reqs[1]);
    teardown(&t);
}

TEST(error_envelope_escapes_its_message)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);

    h.answer_now = false;
    feed_str(c, "GET /1 HTTP/1.1\r\n\r\n");
    http_respond_error_ex(h.reqs[0], 503, "retry", "say \"hi\"\n",
                          "Retry-After: 1\r\n");
    EXPECT_STR_EQ(out_str(&t), "HTTP/1.1 503 Service Unavailable\r\n"
                               "Content-Type: application/json\r\n"
                               "Content-Length: 39\r\n"
                               "Retry-After: 1\r\n\r\n"
                               "{\"error\":\"say \\\"hi\\\"\\n\","
                               "\"code\":\"retry\"}");
    teardown(&t);
}

TEST(json_answer_takes_its_buffer_and_large_bodies_go_out_whole)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);
    struct buf b;
    struct err err;

    h.answer_now = false;
    feed_str(c, "GET /1 HTTP/1.1\r\n\r\n");
    buf_init(&b, BUF_UNLIMITED);
    for (int i = 0; i < 10000; i++) {
        buf_append_str(&b, "0123456789", &err);
    }
    http_respond_json(h.reqs[0], 200, &b);
    EXPECT(b.data == NULL);
    EXPECT(strstr(out_str(&t), "Content-Length: 100000\r\n") != NULL);
    EXPECT_EQ_U64(t.out.len, strlen(out_str(&t)));
    EXPECT(t.out.len > 100000);
    teardown(&t);
}

TEST(taken_body_leaves_the_request_empty)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);
    struct buf body;

    h.answer_now = false;
    feed_str(c, "POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz");
    http_req_take_body(h.reqs[0], &body);
    EXPECT_MEM_EQ(body.data, body.len, "xyz", 3);
    EXPECT_EQ_U64(h.reqs[0]->body.len, 0);
    buf_free(&body);
    th_answer(h.reqs[0]);
    teardown(&t);
}

TEST(hundred_pipelined_requests_in_one_feed_answer_in_order)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);
    struct buf in;
    struct err err;
    const char *p;

    h.answer_now = false;
    buf_init(&in, BUF_UNLIMITED);
    for (int i = 0; i < 100; i++) {
        buf_printf(&in, &err, "GET /r%d HTTP/1.1\r\n\r\n", i);
    }
    http_conn_feed(c, in.data, in.len);
    EXPECT_EQ_I64(h.n, 100);
    for (int i = 99; i >= 0; i--) {
        th_answer(h.reqs[i]);
    }
    p = out_str(&t);
    for (int i = 0; i < 100; i++) {
        char want[32];

        snprintf(want, sizeof(want), "GET /r%d q", i);
        p = strstr(p, want);
        EXPECT(p != NULL);
        if (p == NULL) {
            break;
        }
    }
    buf_free(&in);
    teardown(&t);
}

TEST(chunked_trailers_are_ignored_and_leave_the_request_intact)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);
    struct buf in;
    struct err err;

    h.answer_now = false;
    buf_init(&in, BUF_UNLIMITED);
    buf_append_str(&in,
                   "POST /t?q HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                   "\r\n2\r\nok\r\n0\r\nX-Trailer: ",
                   &err);
    for (int i = 0; i < 2000; i++) {
        buf_append_byte(&in, 'z', &err);
    }
    buf_append_str(&in, "\r\n\r\n", &err);
    http_conn_feed(c, in.data, in.len);
    EXPECT_EQ_I64(h.n, 1);
    EXPECT(http_req_header(h.reqs[0], "x-trailer") == NULL);
    th_answer(h.reqs[0]);
    EXPECT(strstr(out_str(&t), "POST /t q=q b=ok") != NULL);
    buf_free(&in);
    teardown(&t);
}

static int query(struct http_req *req, const char *name, char *out, size_t size)
{
    struct buf b;
    struct err err;
    int rc;

    buf_init(&b, 16);
    rc = http_req_query(req, name, &b, &err);
    snprintf(out, size, "%s", b.data != NULL ? b.data : "");
    buf_free(&b);
    return rc;
}

TEST(query_parameters_are_found_and_form_decoded)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);
    char v[64];

    h.answer_now = false;
    feed_str(c, "GET /q?stats=lanes&flag&a=b+c%2Bd%zz&e=&a=2&long="
                "01234567890123456789 HTTP/1.1\r\n\r\n");
    EXPECT_EQ_I64(query(h.reqs[0], "stats", v, sizeof(v)), 0);
    EXPECT_STR_EQ(v, "lanes");
    EXPECT_EQ_I64(query(h.reqs[0], "a", v, sizeof(v)), 0);
    EXPECT_STR_EQ(v, "b c+d%zz");
    EXPECT_EQ_I64(query(h.reqs[0], "flag", v, sizeof(v)), 0);
    EXPECT_STR_EQ(v, "");
    EXPECT_EQ_I64(query(h.reqs[0], "e", v, sizeof(v)), 0);
    EXPECT_STR_EQ(v, "");
    EXPECT_EQ_I64(query(h.reqs[0], "stat", v, sizeof(v)), ERR_NOT_FOUND);
    EXPECT_EQ_I64(query(h.reqs[0], "long", v, sizeof(v)), ERR_TOO_BIG);
    th_answer(h.reqs[0]);
    teardown(&t);
}

TEST(shutdown_answers_every_queued_request_and_closes_after_the_last)
{
    struct tio t;
    struct th h;
    struct http_conn *c = setup(&t, &h, NULL);
    const char *o;

    h.answer_now = false;
    feed_str(c, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n"
                "GET /3 HTTP/1.1\r\n\r\n");
    http_conn_shutdown(c);
    th_answer(h.reqs[1]);
    th_answer(h.reqs[0]);
    EXPECT(!t.is_closed);
    th_answer(h.reqs[2]);
    o = out_str(&t);
    EXPECT(strstr(o, "GET /1") != NULL && strstr(o, "GET /2") != NULL &&
           strstr(o, "GET /3") != NULL);
    /* only the last answer announces the close */
    EXPECT(strstr(o, "Connection: close") != NULL);
    EXPECT(strstr(o, "Connection: close") > strstr(o, "GET /2"));
    EXPECT(strstr(o, "Connection: close") < strstr(o, "GET /3"));
    EXPECT(t.is_closed);
    teardown(&t);
}
