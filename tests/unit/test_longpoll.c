/* Long polls (api/longpoll.h, api/fetch.c): the registry alone (index,
 * pending list, bounds), then the fetch handler driven without sockets:
 * connections with a recording io, a real store, pushes applied through the
 * real fsm, whose change hook wakes the waiters. */
#include <stdbool.h>
#include <string.h>

#include "harness.h"
#include "push_helpers.h"

#include "api/api.h"
#include "api/longpoll.h"
#include "http/server.h"

static const uint8_t tenant_a[16] = {1};
static const uint8_t tenant_b[16] = {2};

static struct store_fetch_req req_of(const char *q, const char *p)
{
    struct store_fetch_req r;

    memset(&r, 0, sizeof(r));
    r.queue = (struct slice){q, strlen(q)};
    r.partition = (struct slice){p, strlen(p)};
    r.max_bytes = 1024;
    return r;
}

static struct slice sl(const char *s)
{
    return (struct slice){s, strlen(s)};
}

static size_t drain(struct longpoll *lp, struct longpoll_waiter **out,
                    size_t cap)
{
    size_t n = 0;
    struct longpoll_waiter *w;

    while ((w = longpoll_next_pending(lp)) != NULL) {
        EXPECT(w->is_parked && !w->is_pending);
        if (n < cap) {
            out[n] = w;
        }
        n++;
    }
    return n;
}

TEST(touch_wakes_only_the_waiters_of_that_partition)
{
    struct longpoll_limits lim = {0, 0};
    struct longpoll lp;
    struct longpoll_waiter w1, w2, w3;
    struct longpoll_waiter *got[4];
    struct store_fetch_req r1[2] = {req_of("q", "A"), req_of("q", "C")};
    struct store_fetch_req r2[1] = {req_of("q", "B")};
    struct store_fetch_req r3[3] = {req_of("q", "A"), req_of("q", "B"),
                                    req_of("q", "A")};
    struct err err;

    longpoll_init(&lp, &lim);
    memset(&w1, 0, sizeof(w1));
    memset(&w2, 0, sizeof(w2));
    memset(&w3, 0, sizeof(w3));
    EXPECT_EQ_I64(longpoll_park(&lp, &w1, "c1",
                                &(struct longpoll_want){tenant_a, r1, 2, 1},
                                &err),
                  0);
    EXPECT_EQ_I64(longpoll_park(&lp, &w2, "c1",
                                &(struct longpoll_want){tenant_a, r2, 1, 1},
                                &err),
                  0);
    EXPECT_EQ_I64(longpoll_park(&lp, &w3, "c2",
                                &(struct longpoll_want){tenant_a, r3, 3, 1},
                                &err),
                  0);
    EXPECT_EQ_U64(lp.n_parked, 3);
    EXPECT_EQ_U64(lp.n_parts, 3); /* A, B, C */
    EXPECT_EQ_U64(longpoll_conn_parked(&lp, "c1"), 2);

    /* Another partition, another queue, another tenant: nobody. */
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("D"), 1), 0);
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q2"), sl("A"), 1), 0);
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_b, sl("q"), sl("A"), 1), 0);
    EXPECT(longpoll_next_pending(&lp) == NULL);

    /* A: w1 and w3 (once, though it names A twice), in touch order. */
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("A"), 1), 2);
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("A"), 1), 0);
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("B"), 1), 1);
    EXPECT_EQ_U64(drain(&lp, got, 4), 3);
    EXPECT(got[2] == &w2);
    EXPECT((got[0] == &w1 && got[1] == &w3) ||
           (got[0] == &w3 && got[1] == &w1));

    /* An unparked waiter leaves the pending list and the index. */
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("C"), 1), 1);
    longpoll_unpark(&lp, &w1);
    EXPECT(longpoll_next_pending(&lp) == NULL);
    EXPECT_EQ_U64(lp.n_parts, 2); /* C went with its last waiter */
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("C"), 1), 0);
    longpoll_unpark(&lp, &w1); /* twice: nothing */

    /* touch_all: of one tenant, or of every tenant. */
    EXPECT_EQ_U64(longpoll_touch_all(&lp, tenant_b), 0);
    EXPECT_EQ_U64(longpoll_touch_all(&lp, tenant_a), 2);
    EXPECT_EQ_U64(drain(&lp, got, 4), 2);
    EXPECT_EQ_U64(longpoll_touch_all(&lp, NULL), 2);
    longpoll_unpark(&lp, &w2);
    longpoll_unpark(&lp, &w3);
    EXPECT(longpoll_next_pending(&lp) == NULL);
    EXPECT_EQ_U64(lp.n_parked, 0);
    EXPECT_EQ_U64(lp.n_parts, 0);
    EXPECT_EQ_U64(lp.n_conns, 0);
    longpoll_free(&lp);
}

/* A fetch answer of one entry: n records of len bytes from offset, the
 * partition's high watermark hwm. */
struct one_answer {
    struct store_record recs[4];
    struct store_fetch_entry e;
    struct store_fetch_answer ans;
};

static void answer_of(struct one_answer *o, int64_t offset, size_t n,
                      size_t len, int64_t hwm)
{
    memset(o, 0, sizeof(*o));
    for (size_t i = 0; i < n; i++) {
        o->recs[i].offset = offset + (int64_t)i;
        o->recs[i].payload = (struct slice){"xxxxxxxxxxxxxxxx", len};
    }
    o->e.n_records = n;
    o->e.records = n > 0 ? o->recs : NULL;
    o->e.high_watermark = hwm;
    o->ans.n_entries = 1;
    o->ans.entries = &o->e;
}

TEST(a_touch_wakes_only_when_the_appended_weight_can_satisfy)
{
    struct longpoll_limits lim = {0, 0};
    struct longpoll lp;
    struct longpoll_waiter w;
    struct store_fetch_req r = req_of("q", "A");
    struct one_answer o;
    struct err err;

    longpoll_init(&lp, &lim);
    memset(&w, 0, sizeof(w));
    /* minBytes 100; the first read had 2 records of 10 B. */
    EXPECT_EQ_I64(longpoll_park(&lp, &w, "c",
                                &(struct longpoll_want){tenant_a, &r, 1, 100},
                                &err),
                  0);
    answer_of(&o, 0, 2, 10, 2);
    longpoll_seen(&w, &o.ans);
    EXPECT_EQ_U64(w.weight, 20);
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("A"), 50), 0);
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("A"), 29), 0);
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("A"), 1), 1);
    EXPECT(longpoll_next_pending(&lp) == &w);

    /* The re-read stopped at maxBytes before the high watermark: appends
     * cannot change what it reads, so they wake it no more. */
    answer_of(&o, 0, 3, 16, 9);
    longpoll_seen(&w, &o.ans);
    EXPECT(w.links[0].is_capped);
    EXPECT_EQ_U64(w.weight, 48);
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("A"), 1000), 0);
    EXPECT_EQ_U64(w.weight, 48);
    /* A retention trim or a restore re-reads it all the same. */
    EXPECT_EQ_U64(longpoll_touch_all(&lp, tenant_a), 1);
    EXPECT(longpoll_next_pending(&lp) == &w);

    /* Empty reads (offset at the high watermark) are not capped; a huge
     * weight saturates. */
    answer_of(&o, 9, 0, 0, 9);
    longpoll_seen(&w, &o.ans);
    EXPECT(!w.links[0].is_capped);
    EXPECT_EQ_U64(w.weight, 0);
    EXPECT_EQ_U64(
        longpoll_touch(&lp, tenant_a, sl("q"), sl("A"), UINT64_MAX - 1), 1);
    EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl("A"), 5), 0);
    EXPECT_EQ_U64(w.weight, UINT64_MAX);
    longpoll_unpark(&lp, &w);
    longpoll_free(&lp);
}

TEST(bounds_per_connection_and_per_node_refuse_and_free_up)
{
    struct longpoll_limits lim = {2, 3};
    struct longpoll lp;
    struct longpoll_waiter w[5];
    struct store_fetch_req r = req_of("q", "A");
    struct err err;

    longpoll_init(&lp, &lim);
    memset(w, 0, sizeof(w));
    EXPECT_EQ_I64(longpoll_park(&lp, &w[0], "c1",
                                &(struct longpoll_want){tenant_a, &r, 1, 1},
                                &err),
                  0);
    EXPECT_EQ_I64(longpoll_park(&lp, &w[1], "c1",
                                &(struct longpoll_want){tenant_a, &r, 1, 1},
                                &err),
                  0);
    EXPECT_EQ_I64(longpoll_park(&lp, &w[2], "c1",
                                &(struct longpoll_want){tenant_a, &r, 1, 1},
                                &err),
                  ERR_LIMIT);
    EXPECT_STR_EQ(err.msg, "too many long polls on this connection: 2 are "
                           "waiting (QUEEN_MAX_LONG_POLLS_PER_CONN=2)");
    EXPECT(!w[2].is_parked);
    EXPECT_EQ_I64(longpoll_park(&lp, &w[2], "c2",
                                &(struct longpoll_want){tenant_a, &r, 1, 1},
                                &err),
                  0);
    EXPECT_EQ_I64(longpoll_park(&lp, &w[3], "c3",
                                &(struct longpoll_want){tenant_a, &r, 1, 1},
                                &err),
                  ERR_BUSY);
    EXPECT_STR_EQ(err.msg, "too many long polls on this node: 3 are waiting "
                           "(QUEEN_MAX_LONG_POLLS=3)");
    EXPECT_EQ_U64(lp.n_refused_conn, 1);
    EXPECT_EQ_U64(lp.n_refused_node, 1);
    EXPECT_EQ_U64(lp.n_parked, 3);

    /* An answered waiter frees both bounds. */
    longpoll_unpark(&lp, &w[0]);
    EXPECT_EQ_U64(longpoll_conn_parked(&lp, "c1"), 1);
    EXPECT_EQ_I64(longpoll_park(&lp, &w[3], "c1",
                                &(struct longpoll_want){tenant_a, &r, 1, 1},
                                &err),
                  0);
    longpoll_unpark(&lp, &w[1]);
    longpoll_unpark(&lp, &w[2]);
    longpoll_unpark(&lp, &w[3]);
    EXPECT_EQ_U64(lp.n_conns, 0);
    longpoll_free(&lp);
}

TEST(the_index_grows_and_shrinks)
{
    struct longpoll_limits lim = {4, 100000};
    struct longpoll lp;
    static struct longpoll_waiter w[3000];
    static char names[3000][16];
    struct store_fetch_req r;
    struct err err;

    longpoll_init(&lp, &lim);
    memset(w, 0, sizeof(w));
    for (size_t i = 0; i < 3000; i++) {
        snprintf(names[i], sizeof(names[i]), "p%zu", i);
        r = req_of("q", names[i]);
        EXPECT_EQ_I64(longpoll_park(&lp, &w[i], &names[i / 2],
                                    &(struct longpoll_want){tenant_a, &r, 1, 1},
                                    &err),
                      0);
    }
    EXPECT_EQ_U64(lp.n_parts, 3000);
    EXPECT_EQ_U64(lp.n_conns, 1500);
    for (size_t i = 0; i < 3000; i += 7) {
        EXPECT_EQ_U64(longpoll_touch(&lp, tenant_a, sl("q"), sl(names[i]), 1),
                      1);
        EXPECT(longpoll_next_pending(&lp) == &w[i]);
    }
    for (size_t i = 0; i < 3000; i++) {
        longpoll_unpark(&lp, &w[i]);
    }
    EXPECT_EQ_U64(lp.n_parts, 0);
    EXPECT_EQ_U64(lp.n_conns, 0);
    longpoll_free(&lp);
}

TEST(compact_keeps_the_entries_without_the_body)
{
    const char *tail =
        "\",\"maxWaitMs\":500,\"minBytes\":7,\"entries\":[{"
        "\"queue\":\"q\\u0031\",\"partition\":\"p\",\"offset\":3},"
        "{\"queue\":\"q2\",\"offset\":0}]}";
    struct api_fetch f;
    struct buf body;
    const char *code;
    struct err err;

    /* A 1 MiB member the fetch does not need. */
    buf_init(&body, BUF_UNLIMITED);
    EXPECT_EQ_I64(buf_append_str(&body, "{\"pad\":\"", &err), 0);
    for (size_t i = 0; i < 1024; i++) {
        char kib[1024];
        memset(kib, 'x', sizeof(kib));
        EXPECT_EQ_I64(buf_append(&body, kib, sizeof(kib), &err), 0);
    }
    EXPECT_EQ_I64(buf_append_str(&body, tail, &err), 0);
    EXPECT_EQ_I64(api_fetch_parse(&f, body.data, body.len, &code, &err), 0);
    api_fetch_compact(&f);
    memset(body.data, '#', body.len); /* the body is gone */
    buf_free(&body);
    EXPECT(f.doc.toks == NULL);
    EXPECT_EQ_U64(f.n, 2);
    EXPECT_MEM_EQ(f.reqs[0].queue.ptr, f.reqs[0].queue.len, "q1", 2);
    EXPECT_MEM_EQ(f.reqs[0].partition.ptr, f.reqs[0].partition.len, "p", 1);
    EXPECT_EQ_I64(f.reqs[0].offset, 3);
    EXPECT_MEM_EQ(f.reqs[1].queue.ptr, f.reqs[1].queue.len, "q2", 2);
    EXPECT_MEM_EQ(f.reqs[1].partition.ptr, f.reqs[1].partition.len, "Default",
                  7);
    EXPECT_EQ_I64(f.max_wait_ms, 500);
    EXPECT_EQ_U64(f.min_bytes, 7);
    EXPECT(f.arena.cap < 4096); /* the names, not the body */
    api_fetch_free(&f);
}

/* ---- the handler, driven without sockets ---- */

struct tconn {
    struct buf out;
    bool is_closed;
    bool is_released;
    struct http_conn *c;
};

static void tc_write(struct http_conn *c, void *token, const uv_buf_t *bufs,
                     unsigned nbufs, void *arg)
{
    struct tconn *t = arg;
    struct err err;

    for (unsigned i = 0; i < nbufs; i++) {
        buf_append(&t->out, bufs[i].base, bufs[i].len, &err);
    }
    http_conn_write_done(c, token, 0);
}

static void tc_close(struct http_conn *c, void *arg)
{
    struct tconn *t = arg;

    t->is_closed = true;
    http_conn_closed(c);
}

static void tc_release(struct http_conn *c, void *arg)
{
    struct tconn *t = arg;

    UNUSED(c);
    t->is_released = true;
}

static void tc_open(struct tconn *t, struct api *a)
{
    struct http_config cfg = {0};
    struct http_conn_io io = {tc_write, tc_close, tc_release, NULL, t};

    memset(t, 0, sizeof(*t));
    buf_init(&t->out, BUF_UNLIMITED);
    t->c = http_conn_new(&cfg, &io, api_handle_fetch, a);
}

static void tc_fetch(struct tconn *t, const char *partition, int64_t offset)
{
    char body[256];
    char msg[512];
    int n = snprintf(body, sizeof(body),
                     "{\"maxWaitMs\":30000,\"minBytes\":1,\"entries\":[{"
                     "\"queue\":\"lq\",\"partition\":\"%s\",\"offset\":%lld}]}",
                     partition, (long long)offset);
    int m = snprintf(msg, sizeof(msg),
                     "POST /api/v1/fetch HTTP/1.1\r\nHost: t\r\n"
                     "Content-Length: %d\r\n\r\n%s",
                     n, body);

    http_conn_feed(t->c, msg, (size_t)m);
}

static const char *tc_out(const struct tconn *t)
{
    return t->out.data != NULL ? t->out.data : "";
}

static size_t count_of(const char *s, const char *what)
{
    size_t n = 0;

    for (const char *p = strstr(s, what); p != NULL; p = strstr(p + 1, what)) {
        n++;
    }
    return n;
}

static void tc_close_all(struct tconn *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!t[i].is_released) {
            http_conn_abort(t[i].c);
        }
        EXPECT(t[i].is_released);
        buf_free(&t[i].out);
    }
}

TEST(fetch_waiters_wake_on_their_partition_and_are_bounded)
{
    struct env e;
    uv_loop_t loop;
    struct api a;
    struct tconn t[4];

    memset(&e, 0, sizeof(e));
    env_open(&e);
    uv_loop_init(&loop);
    api_init(&a, &loop, e.store, NULL);
    api_long_poll_limits(&a, 2, 3);
    fsm_on_change(e.fsm, api_changed, &a);
    env_push1(&e, 1000, "lq", "A", "a0", "\"a0\"");
    env_push1(&e, 1000, "lq", "B", "b0", "\"b0\"");
    for (size_t i = 0; i < 4; i++) {
        tc_open(&t[i], &a);
    }

    /* t0 waits on A, t1 on B: nothing to say yet. */
    tc_fetch(&t[0], "A", 1);
    tc_fetch(&t[1], "B", 1);
    EXPECT_EQ_U64(a.lp.n_parked, 2);
    EXPECT_STR_EQ(tc_out(&t[0]), "");

    /* A push to B re-reads and answers t1 only. */
    env_push1(&e, 2000, "lq", "B", "b1", "\"b1\"");
    uv_run(&loop, UV_RUN_NOWAIT);
    EXPECT_EQ_U64(a.n_rereads, 1);
    EXPECT(strstr(tc_out(&t[1]), "HTTP/1.1 200") != NULL);
    EXPECT(strstr(tc_out(&t[1]), "\"payload\":\"b1\"") != NULL);
    EXPECT_STR_EQ(tc_out(&t[0]), "");
    EXPECT_EQ_U64(a.lp.n_parked, 1);

    /* A push to a partition nobody names re-reads nobody. */
    env_push1(&e, 3000, "lq", "Z", "z0", "\"z0\"");
    uv_run(&loop, UV_RUN_NOWAIT);
    EXPECT_EQ_U64(a.n_rereads, 1);

    /* Per connection: t0's third long poll is refused with 429 (written
     * behind the two before it, in order). */
    tc_fetch(&t[0], "A", 1);
    tc_fetch(&t[0], "A", 1);
    EXPECT_EQ_U64(a.lp.n_parked, 2);
    EXPECT_EQ_U64(a.lp.n_refused_conn, 1);
    /* Per node: t1 parks the third; t2's is refused with 503 at once. */
    tc_fetch(&t[1], "C", 0);
    tc_fetch(&t[2], "C", 0);
    EXPECT_EQ_U64(a.lp.n_parked, 3);
    EXPECT(strstr(tc_out(&t[2]), "HTTP/1.1 503") != NULL);
    EXPECT(strstr(tc_out(&t[2]), "Retry-After: 1\r\n") != NULL);
    EXPECT(strstr(tc_out(&t[2]),
                  "\"error\":\"too many long polls on this node: 3 are "
                  "waiting (QUEEN_MAX_LONG_POLLS=3)\",\"code\":\"retry\"") !=
           NULL);

    /* A push to A answers both of t0's waiters, then its 429 follows. */
    env_push1(&e, 4000, "lq", "A", "a1", "\"a1\"");
    uv_run(&loop, UV_RUN_NOWAIT);
    EXPECT_EQ_U64(count_of(tc_out(&t[0]), "HTTP/1.1 200"), 2);
    EXPECT(strstr(tc_out(&t[0]), "HTTP/1.1 429") != NULL);
    EXPECT(strstr(tc_out(&t[0]),
                  "\"error\":\"too many long polls on this connection: 2 are "
                  "waiting (QUEEN_MAX_LONG_POLLS_PER_CONN=2)\",\"code\":"
                  "\"too_many_requests\"") != NULL);
    EXPECT_EQ_U64(a.lp.n_parked, 1);

    /* The bounds freed up: t2 parks now. A peer that sends EOF frees its
     * waiter at the next slice (a 503 without a read, which a half-closed
     * peer still gets). */
    tc_fetch(&t[2], "C", 0);
    EXPECT_EQ_U64(a.lp.n_parked, 2);
    http_conn_peer_gone(t[2].c);
    while (a.lp.n_parked > 1) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    EXPECT(strstr(tc_out(&t[2]),
                  "\"error\":\"the client went away during the long poll\","
                  "\"code\":\"retry\"") != NULL);
    EXPECT_EQ_U64(longpoll_conn_parked(&a.lp, t[2].c), 0);

    /* A retention-like change with no partition re-reads every waiter. */
    api_changed(&a, STORE_DEFAULT_TENANT, NULL, NULL, 0);
    uv_run(&loop, UV_RUN_NOWAIT);
    EXPECT_EQ_U64(a.n_rereads, 4);
    EXPECT_EQ_U64(a.lp.n_parked, 1);

    api_stop(&a); /* answers t1's waiter on C */
    EXPECT_EQ_U64(count_of(tc_out(&t[1]), "HTTP/1.1 200"), 2);
    uv_run(&loop, UV_RUN_DEFAULT);
    tc_close_all(t, 4);
    fsm_on_change(e.fsm, NULL, NULL);
    api_free(&a);
    EXPECT_EQ_I64(uv_loop_close(&loop), 0);
    env_close(&e);
}
