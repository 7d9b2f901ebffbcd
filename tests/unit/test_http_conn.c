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

/* One connection under test, with its recording io and handler. */
struct fx {
    struct tio t;
    struct th h;
    struct http_conn *c;
};

/* Open f's connection with cfg (NULL: the defaults), tell the handler
 * whether to answer at once, and feed req unless it is NULL. */
static struct http_conn *fx_open(struct fx *f, const struct http_config *cfg,
                                 bool answer_now, const char *req)
{
    f->c = setup(&f->t, &f->h, cfg);
    f->h.answer_now = answer_now;
    if (req != NULL) {
        feed_str(f->c, req);
    }
    return f->c;
}

static const char *fx_out(struct fx *f)
{
    return out_str(&f->t);
}

/* Complete the writes the transport held back, in order, and complete
 * every later one at once. */
static void fx_finish_writes(struct fx *f)
{
    f->t.defer_writes = false;
    for (int i = 0; i < f->t.nheld; i++) {
        http_conn_write_done(f->c, f->t.held[i], 0);
    }
    f->t.nheld = 0;
}

static bool out_has(struct fx *f, const char *s)
{
    return strstr(fx_out(f), s) != NULL;
}

static bool out_starts(struct fx *f, const char *s)
{
    return strncmp(fx_out(f), s, strlen(s)) == 0;
}

/* The connection handed nreq requests to the handler, its output starts
 * with status, and it closed. */
static void expect_closed_after(struct fx *f, int nreq, const char *status)
{
    EXPECT_EQ_I64(f->h.n, nreq);
    if (!out_starts(f, status)) {
        HARNESS_FAIL("answer should start with \"%s\": \"%.80s\"", status,
                     fx_out(f));
    }
    EXPECT(f->t.is_closed);
}

/* Under cfg, req is refused before the handler sees it: the answer starts
 * with status and the connection closes. */
static void expect_refused_whole(const struct http_config *cfg, const char *req,
                                 const char *status)
{
    struct fx f;

    fx_open(&f, cfg, true, req);
    expect_closed_after(&f, 0, status);
    teardown(&f.t);
}

/* After `end` (peer EOF or shutdown) with one request unanswered, the
 * connection stays open until that answer goes out, then closes; want, if
 * not NULL, is a further text the answer must hold. */
static void expect_answer_before_close(void (*end)(struct http_conn *),
                                       const char *want)
{
    struct fx f;
    struct http_conn *c = fx_open(&f, NULL, false, "GET /1 HTTP/1.1\r\n\r\n");

    end(c);
    EXPECT(!f.t.is_closed);
    th_answer(f.h.reqs[0]);
    if (want != NULL && !out_has(&f, want)) {
        HARNESS_FAIL("answer should hold \"%s\": \"%s\"", want, fx_out(&f));
    }
    EXPECT(out_has(&f, "GET /1"));
    EXPECT(f.t.is_closed);
    teardown(&f.t);
}

/* Each of the n texts is in the output, each after the one before. */
static void expect_in_order(struct fx *f, const char *const *texts, int n)
{
    const char *p = fx_out(f);

    for (int i = 0; i < n; i++) {
        p = strstr(p, texts[i]);
        if (p == NULL) {
            HARNESS_FAIL("\"%s\" (text %d) missing or out of order", texts[i],
                         i);
            return;
        }
    }
}

TEST(get_is_answered_with_exact_bytes)
{
    struct fx f;

    fx_open(&f, NULL, true, "GET /a/b?x=1&y=2 HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT_STR_EQ(fx_out(&f), "HTTP/1.1 200 OK\r\n"
                              "Content-Type: text/plain\r\n"
                              "Content-Length: 21\r\n\r\n"
                              "GET /a/b q=x=1&y=2 b=");
    EXPECT(!f.t.is_closed);
    teardown(&f.t);
}

/* Names match in any case; the whitespace after a value is not the value's
 * (RFC 9110 5.5). */
TEST(headers_are_found_case_insensitively)
{
    struct fx f;
    struct http_req *r;

    fx_open(&f, NULL, false,
            "POST /p HTTP/1.1\r\nContent-Type: application/json\r\n"
            "X-Queen-Tenant: abc \t \r\nX-Empty:  \r\nX-In: a b\t\r\n"
            "Content-Length: 0\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    r = f.h.reqs[0];
    EXPECT_STR_EQ(http_req_header(r, "content-type"), "application/json");
    EXPECT_STR_EQ(http_req_header(r, "x-queen-tenant"), "abc");
    EXPECT_STR_EQ(http_req_header(r, "X-EMPTY"), "");
    EXPECT_STR_EQ(http_req_header(r, "x-in"), "a b");
    EXPECT(http_req_header(r, "missing") == NULL);
    EXPECT(r->method == HTTP_METHOD_POST);
    EXPECT_STR_EQ(r->method_name, "POST");
    EXPECT_EQ_U64(r->body.len, 0);
    th_answer(r);
    teardown(&f.t);
}

TEST(body_split_byte_by_byte_is_whole)
{
    struct fx f;
    struct http_conn *c = fx_open(&f, NULL, true, NULL);
    const char *req = "POST /p HTTP/1.1\r\nContent-Length: 11\r\n\r\n"
                      "hello world";

    for (size_t i = 0; req[i] != '\0'; i++) {
        http_conn_feed(c, req + i, 1);
    }
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT(out_has(&f, "\r\n\r\nPOST /p q= b=hello world"));
    teardown(&f.t);
}

TEST(chunked_body_is_assembled)
{
    struct fx f;

    fx_open(&f, NULL, true,
            "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT(out_has(&f, "b=hello world"));
    teardown(&f.t);
}

TEST(pipelined_answers_leave_in_request_order)
{
    static const char *const want[] = {"GET /1 ", "GET /2 ", "GET /3 "};
    struct fx f;

    fx_open(&f, NULL, false,
            "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n"
            "GET /3 HTTP/1.1\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 3);
    th_answer(f.h.reqs[2]);
    th_answer(f.h.reqs[1]);
    EXPECT_EQ_U64(f.t.out.len, 0); /* /1 is still unanswered */
    th_answer(f.h.reqs[0]);
    expect_in_order(&f, want, 3);
    teardown(&f.t);
}

TEST(answers_wait_for_slow_writes_and_keep_order)
{
    struct fx f;
    struct http_conn *c = fx_open(&f, NULL, true, NULL);

    f.t.defer_writes = true;
    feed_str(c, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
    EXPECT_EQ_I64(f.t.nheld, 2);
    http_conn_write_done(c, f.t.held[0], 0);
    http_conn_write_done(c, f.t.held[1], 0);
    EXPECT(strstr(fx_out(&f), "GET /1") < strstr(fx_out(&f), "GET /2"));
    EXPECT(!f.t.is_closed);
    teardown(&f.t);
}

TEST(body_over_the_limit_is_413_and_closes)
{
    struct http_config cfg = {.max_body_bytes = 10};
    struct fx f;

    fx_open(&f, &cfg, true,
            "POST /p HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello");
    expect_closed_after(&f, 0, "HTTP/1.1 413 Payload Too Large\r\n");
    EXPECT(out_has(&f, "Connection: close\r\n"));
    EXPECT(out_has(&f, "{\"error\":\"request body over the size "
                       "limit\",\"code\":\"too_large\"}"));
    EXPECT(f.t.is_released);
    teardown(&f.t);
}

TEST(body_at_the_limit_is_accepted)
{
    struct http_config cfg = {.max_body_bytes = 10};
    struct fx f;

    fx_open(&f, &cfg, true,
            "POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789");
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT(out_has(&f, "b=0123456789"));
    teardown(&f.t);
}

TEST(chunked_body_over_the_limit_is_413)
{
    struct http_config cfg = {.max_body_bytes = 10};

    expect_refused_whole(&cfg,
                         "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                         "\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n",
                         "HTTP/1.1 413 ");
}

/* max_held_bytes counts a body from its head until its answer is written:
 * a second body that would pass it while the first is unanswered waits,
 * its connection paused (unread, no 100 Continue), and comes in once the
 * first is answered. */
TEST(a_body_past_the_held_bound_waits_unread_until_there_is_room)
{
    struct http_config cfg = {.max_held_bytes = 15};
    struct fx f;

    fx_open(&f, &cfg, false,
            "POST /1 HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"
            "POST /2 HTTP/1.1\r\nContent-Length: 6\r\n"
            "Expect: 100-continue\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT(f.t.is_paused);
    EXPECT(!out_has(&f, "100 Continue"));
    th_answer(f.h.reqs[0]);
    EXPECT(!f.t.is_paused);
    if (!out_has(&f, "b=0123456789") || !out_has(&f, "100 Continue")) {
        HARNESS_FAIL("want /1 answered, then 100: \"%.300s\"", fx_out(&f));
    }
    EXPECT(strstr(fx_out(&f), "b=0123456789") <
           strstr(fx_out(&f), "HTTP/1.1 100 Continue"));
    f.h.answer_now = true;
    feed_str(f.c, "abcdef");
    EXPECT_EQ_I64(f.h.n, 2);
    EXPECT(out_has(&f, "b=abcdef"));
    EXPECT(!out_has(&f, " 503 "));
    EXPECT(!f.t.is_closed);
    teardown(&f.t);
}

TEST(bodies_within_the_held_bound_and_one_alone_past_it_are_taken)
{
    struct http_config cfg = {.max_held_bytes = 15};
    struct fx f;

    /* 10 + 5 held at once fit; then, /1 and /2 answered, 40 alone fits */
    fx_open(&f, &cfg, false,
            "POST /1 HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"
            "POST /2 HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcde");
    EXPECT_EQ_I64(f.h.n, 2);
    EXPECT(!f.t.is_paused);
    th_answer(f.h.reqs[0]);
    th_answer(f.h.reqs[1]);
    f.h.answer_now = true;
    feed_str(f.c, "POST /3 HTTP/1.1\r\nContent-Length: 40\r\n\r\n"
                  "0123456789012345678901234567890123456789");
    EXPECT_EQ_I64(f.h.n, 3);
    EXPECT(out_has(&f, "b=abcde"));
    EXPECT(out_has(&f, "b=0123456789012345678901234567890123456789"));
    EXPECT(!f.t.is_paused);
    EXPECT(!f.t.is_closed);
    teardown(&f.t);
}

/* A chunked body has no length at its head: it waits there while the
 * bound is full, and once let in is counted as it grows. */
TEST(a_chunked_body_waits_at_its_head_while_the_held_bound_is_full)
{
    struct http_config cfg = {.max_held_bytes = 10};
    struct fx f;

    fx_open(&f, &cfg, false,
            "POST /1 HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"
            "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            "3\r\nabc\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT(f.t.is_paused);
    th_answer(f.h.reqs[0]);
    EXPECT(!f.t.is_paused);
    f.h.answer_now = true;
    feed_str(f.c, "3\r\ndef\r\n0\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 2);
    EXPECT(out_has(&f, "b=abcdef"));
    EXPECT(!f.t.is_closed);
    teardown(&f.t);
}

/* Bytes a waiting connection had already read are parsed: a body that
 * completes in them is held at once (over the bound by that read) and
 * handled, and the connection reads again. */
TEST(a_waiting_body_already_read_whole_is_handled)
{
    struct http_config cfg = {.max_held_bytes = 15};
    struct fx f;

    fx_open(&f, &cfg, false,
            "POST /1 HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"
            "POST /2 HTTP/1.1\r\nContent-Length: 6\r\n\r\nabcdef");
    EXPECT_EQ_I64(f.h.n, 2);
    EXPECT(!f.t.is_paused);
    th_answer(f.h.reqs[0]);
    th_answer(f.h.reqs[1]);
    EXPECT(out_has(&f, "b=0123456789"));
    EXPECT(out_has(&f, "b=abcdef"));
    teardown(&f.t);
}

/* A body is released when it is answered, not when its answer is written:
 * a client that sends request 2 before it reads answer 1 must not wait
 * for answer 1's write while the server waits to read request 2. */
TEST(a_body_is_released_at_its_answer_not_at_its_write)
{
    struct http_config cfg = {.max_held_bytes = 15};
    struct fx f;

    fx_open(&f, &cfg, false, NULL);
    f.t.defer_writes = true;
    feed_str(f.c, "POST /1 HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"
                  "POST /2 HTTP/1.1\r\nContent-Length: 6\r\n"
                  "Expect: 100-continue\r\n\r\n");
    EXPECT(f.t.is_paused);
    th_answer(f.h.reqs[0]); /* its write does not complete yet */
    EXPECT(!f.t.is_paused);
    if (!out_has(&f, "b=0123456789") || !out_has(&f, "100 Continue")) {
        HARNESS_FAIL("want answer 1, then 100: \"%.300s\"", fx_out(&f));
    }
    EXPECT(strstr(fx_out(&f), "b=0123456789") <
           strstr(fx_out(&f), "HTTP/1.1 100 Continue"));
    fx_finish_writes(&f);
    f.h.answer_now = true;
    feed_str(f.c, "abcdef");
    EXPECT(out_has(&f, "b=abcdef"));
    teardown(&f.t);
}

/* A waiting chunked body that turns out malformed in the bytes already
 * read is answered 400 and leaves the queue. */
TEST(a_waiting_body_that_fails_in_what_was_read_leaves_the_queue)
{
    struct http_config cfg = {.max_held_bytes = 10};
    struct fx f;

    fx_open(&f, &cfg, false,
            "POST /1 HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"
            "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            "zz\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    th_answer(f.h.reqs[0]);
    EXPECT(out_has(&f, "b=0123456789"));
    EXPECT(out_has(&f, "HTTP/1.1 400 "));
    EXPECT(f.t.is_closed);
    teardown(&f.t);
}

/* A connection closed while its body waits leaves the queue: the next
 * waiting body comes in when there is room. */
TEST(a_connection_closed_while_waiting_leaves_the_queue)
{
    struct http_config cfg = {.max_held_bytes = 15};
    struct fx f;

    fx_open(&f, &cfg, false,
            "POST /1 HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"
            "POST /2 HTTP/1.1\r\nContent-Length: 6\r\n\r\n");
    EXPECT(f.t.is_paused);
    http_conn_abort(f.c);
    EXPECT(f.t.is_closed);
    th_answer(f.h.reqs[0]); /* dropped: the connection is closing */
    EXPECT(f.t.is_released);
    teardown(&f.t);
}

/* RFC 9112 5.1: whitespace between a field name and its colon is a 400,
 * never a header of another name (x-queen-tenant would then be unset and
 * the call run as the default tenant). */
TEST(whitespace_before_a_header_colon_is_400_and_closes)
{
    expect_refused_whole(NULL, "GET /a HTTP/1.1\r\nX-Queen-Tenant : t1\r\n\r\n",
                         "HTTP/1.1 400 Bad Request\r\n");
}

TEST(a_transfer_coding_other_than_chunked_is_501_and_closes)
{
    struct fx f;

    expect_refused_whole(NULL,
                         "POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, "
                         "chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                         "HTTP/1.1 501 Not Implemented\r\n");
    expect_refused_whole(NULL,
                         "POST /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n"
                         "3\r\nabc\r\n0\r\n\r\n",
                         "HTTP/1.1 501 Not Implemented\r\n");
    fx_open(&f, NULL, true,
            "POST /a HTTP/1.1\r\nTransfer-Encoding: , Chunked \r\n\r\n"
            "3\r\nabc\r\n0\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT(out_has(&f, "POST /a q= b=abc"));
    teardown(&f.t);
}

/* A version other than 1.x is answered 505 in HTTP/1.1, never served as
 * if it were 1.0 (HTTP/2.0) or 1.1 (HTTP/0.9). */
TEST(a_version_other_than_1_x_is_505_and_closes)
{
    static const char *const reqs[] = {
        "GET /a HTTP/2.0\r\nHost: h\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "GET /a HTTP/0.9\r\n\r\n",
    };

    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        expect_refused_whole(NULL, reqs[i],
                             "HTTP/1.1 505 HTTP Version Not Supported\r\n");
    }
}

TEST(malformed_request_is_400_and_closes)
{
    struct fx f;

    fx_open(&f, NULL, true,
            "GET /ok HTTP/1.1\r\n\r\nBLAH\x01 / HTTP/1.1\r\n\r\n");
    expect_closed_after(&f, 1, "HTTP/1.1 200 OK\r\n");
    EXPECT(out_has(&f, "HTTP/1.1 400 Bad Request\r\n"));
    EXPECT(out_has(&f, "\"code\":\"bad_request\""));
    teardown(&f.t);
}

TEST(error_waits_behind_an_unanswered_request)
{
    struct fx f;

    fx_open(&f, NULL, false,
            "GET /slow HTTP/1.1\r\n\r\nGET / HTTP/9.9\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT_EQ_U64(f.t.out.len, 0);
    EXPECT(!f.t.is_closed);
    th_answer(f.h.reqs[0]);
    EXPECT(strstr(fx_out(&f), "GET /slow") <
           strstr(fx_out(&f), "HTTP/1.1 400"));
    EXPECT(f.t.is_closed);
    teardown(&f.t);
}

TEST(head_over_the_limit_is_431)
{
    struct http_config cfg = {.max_header_bytes = 64};

    expect_refused_whole(
        &cfg,
        "GET /p HTTP/1.1\r\nX-Long: "
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "\r\n\r\n",
        "HTTP/1.1 431 ");
}

TEST(expect_100_continue_is_answered_first)
{
    struct fx f;
    struct http_conn *c = fx_open(&f, NULL, true,
                                  "POST /p HTTP/1.1\r\nExpect: 100-continue\r\n"
                                  "Content-Length: 2\r\n\r\n");

    EXPECT_STR_EQ(fx_out(&f), "HTTP/1.1 100 Continue\r\n\r\n");
    feed_str(c, "ok");
    EXPECT(out_has(&f, "\r\n\r\nHTTP/1.1 200 OK\r\n"));
    EXPECT(out_has(&f, "b=ok"));
    teardown(&f.t);
}

/* A pipelined request that expects 100-continue behind an unanswered one
 * gets its 100 once the answer ahead of it is written, never before it. */
TEST(expect_behind_an_unanswered_request_gets_its_continue_after_it)
{
    struct fx f;

    fx_open(&f, NULL, false,
            "GET /1 HTTP/1.1\r\n\r\n"
            "POST /2 HTTP/1.1\r\nExpect: 100-continue\r\n"
            "Content-Length: 2\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT(!out_has(&f, "100 Continue"));
    th_answer(f.h.reqs[0]);
    if (!out_has(&f, "HTTP/1.1 200 OK") || !out_has(&f, "100 Continue")) {
        HARNESS_FAIL("want answer 1, then 100: \"%.300s\"", fx_out(&f));
    }
    EXPECT(out_starts(&f, "HTTP/1.1 200 OK"));
    f.h.answer_now = true;
    feed_str(f.c, "ok");
    EXPECT_EQ_I64(f.h.n, 2);
    EXPECT(out_has(&f, "b=ok"));
    teardown(&f.t);
}

/* A connection that reads no more (draining) sends no 100 after its last
 * answer, which announced the close. */
TEST(a_draining_connection_sends_no_continue_after_its_last_answer)
{
    struct fx f;

    fx_open(&f, NULL, false,
            "GET /1 HTTP/1.1\r\n\r\n"
            "POST /2 HTTP/1.1\r\nExpect: 100-continue\r\n"
            "Content-Length: 2\r\n\r\n");
    http_conn_shutdown(f.c);
    f.t.defer_writes = true; /* the close waits for the write */
    th_answer(f.h.reqs[0]);
    EXPECT(out_has(&f, "Connection: close"));
    EXPECT(!out_has(&f, "100 Continue"));
    fx_finish_writes(&f);
    EXPECT(!out_has(&f, "100 Continue"));
    EXPECT(f.t.is_closed);
    teardown(&f.t);
}

TEST(expect_with_a_body_over_the_limit_is_413_without_continue)
{
    struct http_config cfg = {.max_body_bytes = 1};
    struct fx f;

    fx_open(&f, &cfg, true,
            "POST /p HTTP/1.1\r\nExpect: 100-continue\r\n"
            "Content-Length: 2\r\n\r\n");
    EXPECT(out_starts(&f, "HTTP/1.1 413 "));
    EXPECT(!out_has(&f, "100 Continue"));
    teardown(&f.t);
}

TEST(peer_gone_before_the_answer_frees_after_it)
{
    struct fx f;
    struct http_conn *c = fx_open(&f, NULL, false,
                                  "POST /p HTTP/1.1\r\nContent-Length: 3\r\n"
                                  "\r\nabcGET /2 HTTP/1.1\r\n\r\n");

    EXPECT_EQ_I64(f.h.n, 2);
    th_answer(f.h.reqs[1]);
    http_conn_abort(c);
    EXPECT(f.t.is_closed);
    EXPECT(!f.t.is_released); /* req 0 is still with its handler */
    EXPECT_MEM_EQ(f.h.reqs[0]->body.ptr, f.h.reqs[0]->body.len, "abc", 3);
    th_answer(f.h.reqs[0]);
    EXPECT(f.t.is_released);
    EXPECT_EQ_U64(f.t.out.len, 0); /* answers were dropped, not written */
    teardown(&f.t);
}

TEST(eof_after_a_request_still_answers_it)
{
    expect_answer_before_close(http_conn_peer_gone, NULL);
}

TEST(connection_close_answers_then_closes_and_ignores_the_rest)
{
    struct fx f;

    fx_open(&f, NULL, true,
            "GET /1 HTTP/1.1\r\nConnection: close\r\n\r\n"
            "GET /2 HTTP/1.1\r\n\r\n");
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT(out_has(&f, "Connection: close\r\n"));
    EXPECT(!out_has(&f, "GET /2"));
    EXPECT(f.t.is_closed);
    teardown(&f.t);
}

TEST(http_1_0_closes_unless_kept_alive)
{
    struct fx f;
    struct http_conn *c = fx_open(
        &f, NULL, true, "GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");

    EXPECT(out_starts(&f, "HTTP/1.0 200 OK\r\n"));
    EXPECT(out_has(&f, "Connection: keep-alive\r\n"));
    EXPECT(!f.t.is_closed);
    feed_str(c, "GET /2 HTTP/1.0\r\n\r\n");
    EXPECT(out_has(&f, "Connection: close\r\n"));
    EXPECT(f.t.is_closed);
    teardown(&f.t);
}

TEST(head_answer_has_length_but_no_body)
{
    struct fx f;

    fx_open(&f, NULL, true, "HEAD /x HTTP/1.1\r\n\r\n");
    EXPECT_STR_EQ(fx_out(&f), "HTTP/1.1 200 OK\r\n"
                              "Content-Type: text/plain\r\n"
                              "Content-Length: 13\r\n\r\n");
    teardown(&f.t);
}

TEST(shutdown_closes_an_idle_connection_at_once)
{
    struct fx f;

    http_conn_shutdown(fx_open(&f, NULL, true, "GET /1 HTTP/1.1\r\n\r\n"));
    EXPECT(f.t.is_closed);
    EXPECT(f.t.is_released);
    teardown(&f.t);
}

TEST(shutdown_waits_for_the_answer_in_flight)
{
    expect_answer_before_close(http_conn_shutdown, "Connection: close\r\n");
}

TEST(too_many_queued_requests_pause_reading)
{
    struct http_config cfg = {.max_pipelined = 2};
    struct fx f;

    fx_open(&f, &cfg, false, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
    EXPECT(f.t.is_paused);
    th_answer(f.h.reqs[0]);
    EXPECT(!f.t.is_paused);
    th_answer(f.h.reqs[1]);
    teardown(&f.t);
}

TEST(error_envelope_escapes_its_message)
{
    struct fx f;

    fx_open(&f, NULL, false, "GET /1 HTTP/1.1\r\n\r\n");
    http_respond_error_ex(f.h.reqs[0], 503, "retry", "say \"hi\"\n",
                          "Retry-After: 1\r\n");
    EXPECT_STR_EQ(fx_out(&f), "HTTP/1.1 503 Service Unavailable\r\n"
                              "Content-Type: application/json\r\n"
                              "Content-Length: 39\r\n"
                              "Retry-After: 1\r\n\r\n"
                              "{\"error\":\"say \\\"hi\\\"\\n\","
                              "\"code\":\"retry\"}");
    teardown(&f.t);
}

TEST(json_answer_takes_its_buffer_and_large_bodies_go_out_whole)
{
    struct fx f;
    struct buf b;
    struct err err;

    fx_open(&f, NULL, false, "GET /1 HTTP/1.1\r\n\r\n");
    buf_init(&b, BUF_UNLIMITED);
    for (int i = 0; i < 10000; i++) {
        buf_append_str(&b, "0123456789", &err);
    }
    http_respond_json(f.h.reqs[0], 200, &b);
    EXPECT(b.data == NULL);
    EXPECT(out_has(&f, "Content-Length: 100000\r\n"));
    EXPECT_EQ_U64(f.t.out.len, strlen(fx_out(&f)));
    EXPECT(f.t.out.len > 100000);
    teardown(&f.t);
}

TEST(taken_body_leaves_the_request_empty)
{
    struct fx f;
    struct buf body;

    fx_open(&f, NULL, false,
            "POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz");
    http_req_take_body(f.h.reqs[0], &body);
    EXPECT_MEM_EQ(body.data, body.len, "xyz", 3);
    EXPECT_EQ_U64(f.h.reqs[0]->body.len, 0);
    buf_free(&body);
    th_answer(f.h.reqs[0]);
    teardown(&f.t);
}

TEST(hundred_pipelined_requests_in_one_feed_answer_in_order)
{
    char names[100][32];
    const char *want[100];
    struct fx f;
    struct http_conn *c = fx_open(&f, NULL, false, NULL);
    struct buf in;
    struct err err;

    buf_init(&in, BUF_UNLIMITED);
    for (int i = 0; i < 100; i++) {
        buf_printf(&in, &err, "GET /r%d HTTP/1.1\r\n\r\n", i);
        snprintf(names[i], sizeof(names[i]), "GET /r%d q", i);
        want[i] = names[i];
    }
    http_conn_feed(c, in.data, in.len);
    EXPECT_EQ_I64(f.h.n, 100);
    for (int i = 99; i >= 0; i--) {
        th_answer(f.h.reqs[i]);
    }
    expect_in_order(&f, want, 100);
    buf_free(&in);
    teardown(&f.t);
}

TEST(chunked_trailers_are_ignored_and_leave_the_request_intact)
{
    struct fx f;
    struct http_conn *c = fx_open(&f, NULL, false, NULL);
    struct buf in;
    struct err err;

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
    EXPECT_EQ_I64(f.h.n, 1);
    EXPECT(http_req_header(f.h.reqs[0], "x-trailer") == NULL);
    th_answer(f.h.reqs[0]);
    EXPECT(out_has(&f, "POST /t q=q b=ok"));
    buf_free(&in);
    teardown(&f.t);
}

/* Look name up in req's query: the call's result, and the value or "" in
 * out. */
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
    static const struct {
        const char *name;
        int rc;
        const char *value; /* NULL: not checked */
    } cases[] = {
        {"stats", 0, "lanes"},
        {"a", 0, "b c+d%zz"},
        {"flag", 0, ""},
        {"e", 0, ""},
        {"stat", ERR_NOT_FOUND, NULL},
        {"long", ERR_TOO_BIG, NULL},
    };
    struct fx f;
    char v[64];

    fx_open(&f, NULL, false,
            "GET /q?stats=lanes&flag&a=b+c%2Bd%zz&e=&a=2&long="
            "01234567890123456789 HTTP/1.1\r\n\r\n");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = query(f.h.reqs[0], cases[i].name, v, sizeof(v));

        if (rc != cases[i].rc) {
            HARNESS_FAIL("query %s: rc %d != %d", cases[i].name, rc,
                         cases[i].rc);
        }
        if (cases[i].value != NULL && strcmp(v, cases[i].value) != 0) {
            HARNESS_FAIL("query %s: \"%s\" != \"%s\"", cases[i].name, v,
                         cases[i].value);
        }
    }
    th_answer(f.h.reqs[0]);
    teardown(&f.t);
}

TEST(shutdown_answers_every_queued_request_and_closes_after_the_last)
{
    struct fx f;
    const char *o;

    http_conn_shutdown(fx_open(&f, NULL, false,
                               "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n"
                               "GET /3 HTTP/1.1\r\n\r\n"));
    th_answer(f.h.reqs[1]);
    th_answer(f.h.reqs[0]);
    EXPECT(!f.t.is_closed);
    th_answer(f.h.reqs[2]);
    o = fx_out(&f);
    EXPECT(out_has(&f, "GET /1") && out_has(&f, "GET /2") &&
           out_has(&f, "GET /3"));
    /* only the last answer announces the close */
    EXPECT(out_has(&f, "Connection: close"));
    EXPECT(strstr(o, "Connection: close") > strstr(o, "GET /2"));
    EXPECT(strstr(o, "Connection: close") < strstr(o, "GET /3"));
    EXPECT(f.t.is_closed);
    teardown(&f.t);
}
