/* Tests of the sink's pool and task loop (docs/design/protocol.md §2, §8) over
 * the fake broker and the in-memory bucket of driver_fake.h, each wrapped in a
 * mutex because the sink calls them from its threads. Waits poll a real
 * condition with a deadline. */
#include "sink/sink.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "base/isotime.h"
#include "driver_fake.h"
#include "harness.h"

struct rig {
    pthread_mutex_t mu;
    struct fake_broker f;
    struct sink_broker inner;
    struct sink_broker b;
    struct fake_bucket k;
    struct fake_s3 s3;
    bool bucket_down;
    struct sink_config cfg;
    struct sink_node_config node;
    char *queues[3];
    struct sink *s;
    struct sink_node_config node2; /* a second node on the same broker */
    struct sink *s2;
    /* seams the tests script */
    int fail_runs;        /* the next N control steps end the run */
    int64_t block_put_ms; /* the next PUT blocks this long, once, and on
                             until two refreshes came meanwhile */
    bool in_block;
    int refreshes;          /* [fence] batches alone on a lease key */
    int refreshes_in_block; /* ... while a PUT was blocked */
    const char *keep_row;   /* deletes of this key answer applied, do not */
    int64_t refuse_puts_ms; /* > 0: PUTs answer 503 with this Retry-After */
    int puts_refused;
    bool lease_kv_full; /* KV calls on a lease key answer 507 */
};

static int locked_changed(void *arg, const uint8_t t[16],
                          const struct store_changed_req *q, size_t n,
                          struct store_changed_answer *a, struct err *err)
{
    struct rig *r = arg;

    pthread_mutex_lock(&r->mu);
    int rc = r->inner.changed(r->inner.arg, t, q, n, a, err);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int locked_fetch(void *arg, const uint8_t t[16],
                        const struct store_fetch_req *q, size_t n,
                        struct store_fetch_answer *a, struct err *err)
{
    struct rig *r = arg;

    pthread_mutex_lock(&r->mu);
    int rc = r->inner.fetch(r->inner.arg, t, q, n, a, err);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static bool is_lease_key(struct slice k)
{
    return k.len > 6 && memcmp(k.ptr + k.len - 6, ":lease", 6) == 0;
}

static bool is_refresh(const struct kv_op *ops, size_t n)
{
    return n == 1 && ops[0].op == KV_PUT && ops[0].has_expect &&
           ops[0].required && is_lease_key(ops[0].key);
}

static int locked_kv(void *arg, const uint8_t t[16], const struct kv_op *ops,
                     size_t n, int timeout_ms, struct kv_answer *out,
                     struct err *err)
{
    struct rig *r = arg;

    pthread_mutex_lock(&r->mu);
    if (r->lease_kv_full && n >= 1 && is_lease_key(ops[0].key)) {
        pthread_mutex_unlock(&r->mu); /* the data dir is full */
        return err_set(err, ERR_FULL, "insufficient storage");
    }
    if (is_refresh(ops, n)) {
        r->refreshes++;
        r->refreshes_in_block += r->in_block ? 1 : 0;
    }
    if (r->keep_row != NULL && n == 1 && ops[0].op == KV_DELETE &&
        ops[0].key.len == strlen(r->keep_row) &&
        memcmp(ops[0].key.ptr, r->keep_row, ops[0].key.len) == 0) {
        /* The delete "succeeds" but the row stays: a release that did not
         * land, as if the answer came from a leader that then lost it. */
        memset(out, 0, sizeof(*out));
        buf_init(&out->arena, BUF_UNLIMITED);
        out->results = xcalloc(1, sizeof(*out->results));
        out->n_results = 1;
        out->results[0].op = KV_DELETE;
        out->results[0].applied = true;
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    int rc = r->inner.kv(r->inner.arg, t, ops, n, timeout_ms, out, err);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static void pause_ms(long ms);

static int locked_perform(void *arg, const struct s3_http_request *req,
                          struct s3_http_answer *ans, struct err *err)
{
    struct rig *r = arg;
    int rc;

    pthread_mutex_lock(&r->mu);
    if (r->block_put_ms > 0 && strcmp(req->method, "PUT") == 0) {
        /* A long upload: the queue's step blocks, the fake does not. */
        int64_t ms = r->block_put_ms;
        r->block_put_ms = 0;
        r->in_block = true;
        pthread_mutex_unlock(&r->mu);
        pause_ms((long)ms);
        /* A loaded machine may not run the refresher every TTL / 3: the
         * upload goes on until it came twice (a deadline). */
        for (int64_t end = harness_now_ms() + HARNESS_WAIT_MS;;) {
            pthread_mutex_lock(&r->mu);
            if (r->refreshes_in_block >= 2 || harness_now_ms() >= end) {
                break;
            }
            pthread_mutex_unlock(&r->mu);
            pause_ms(10);
        }
        r->in_block = false;
    }
    if (r->refuse_puts_ms > 0 && strcmp(req->method, "PUT") == 0) {
        struct err e;

        buf_reset(ans->body);
        buf_append_str(ans->body, "<Error><Code>SlowDown</Code></Error>", &e);
        ans->etag[0] = '\0';
        ans->content_length = -1;
        ans->status = 503;
        ans->retry_after_ms = r->refuse_puts_ms;
        r->puts_refused++;
        rc = 0;
    } else if (r->bucket_down) {
        rc = err_set(err, ERR_IO, "connect: Connection refused");
    } else {
        rc = bucket_perform(&r->k, req, ans, err);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int64_t at(const char *iso)
{
    int64_t us = 0;

    ASSERT(isotime_parse_us(iso, strlen(iso), &us));
    return us;
}

/* The node's safeTime, as the store would answer it. */
static int rig_safe_time(void *arg, int64_t *now_us)
{
    struct rig *r = arg;

    pthread_mutex_lock(&r->mu);
    *now_us = r->f.safe_time;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int rig_run_check(void *arg, struct err *err)
{
    struct rig *r = arg;
    int rc = 0;

    pthread_mutex_lock(&r->mu);
    if (r->fail_runs > 0) {
        r->fail_runs--;
        rc = err_set(err, ERR_IO, "scripted control task failure");
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* The rig without its sink: tests adjust cfg and node, then rig_sink(). */
static struct rig *rig_new(bool bucket_down)
{
    struct rig *r = xcalloc(1, sizeof(*r));

    pthread_mutex_init(&r->mu, NULL);
    r->bucket_down = bucket_down;
    fake_init(&r->f, "orders");
    fake_broker_seam(&r->f, &r->inner);
    r->b = (struct sink_broker){
        locked_changed, locked_fetch, locked_kv, NULL, r, NULL};
    fake_s3_open(&r->s3, &r->k);
    s3_client_free(r->s3.c);
    r->s3.t = (struct s3_transport){locked_perform, r};
    {
        struct s3_config sc;
        struct err err = {0};

        s3_config_defaults(&sc);
        s3_endpoint_parse(&sc.ep, "QUEEN_S3_ENDPOINT", "http://127.0.0.1:9000",
                          "QUEEN_S3_PREFIX", &err);
        s3_endpoint_set_bucket(&sc.ep, "QUEEN_S3_BUCKET", "lake",
                               "QUEEN_S3_PREFIX", &err);
        sc.ep.path_style = true;
        strcpy(sc.region, "us-east-1");
        strcpy(sc.access_key, "queen");
        strcpy(sc.secret_key, "queen-secret-key");
        sc.max_attempts = 1;
        r->s3.c = s3_client_new(&sc, &r->s3.t, &r->s3.clock);
    }
    r->cfg.is_set = true;
    strcpy(r->cfg.sink, "default");
    r->queues[0] = xstrdup("orders");
    r->cfg.queues = r->queues;
    r->cfg.n_queues = 1;
    strcpy(r->cfg.endpoint, "http://127.0.0.1:9000");
    strcpy(r->cfg.region, "us-east-1");
    strcpy(r->cfg.bucket, "lake");
    strcpy(r->cfg.prefix, "queen");
    r->cfg.start = ENGINE_START_EARLIEST;
    r->cfg.target_bytes = 128 * SINK_MIB;
    r->cfg.max_window_ms = 300000;
    r->node.threads = 2;
    r->node.shutdown_grace_ms = 30000;
    r->node.checkpoint_every = 20;
    r->node.memory_bytes = 512 * SINK_MIB;
    r->node.fetch_concurrency = 4;
    r->node.discovery_interval_ms = 100;
    r->node.lease_ttl_ms = 30000;
    strcpy(r->node.instance, "node-1@test");
    return r;
}

/* The parameters of a sink of node on the rig's broker and bucket. */
static void rig_params(struct rig *r, const struct sink_node_config *node,
                       struct sink_params *p)
{
    memset(p, 0, sizeof(*p));
    p->cfg = &r->cfg;
    p->node = node;
    memcpy(p->tenant, STORE_DEFAULT_TENANT, 16);
    p->tenant_text = "00000000-0000-0000-0000-000000000001";
    p->broker = &r->b;
    p->s3 = r->s3.c;
}

static void rig_sink(struct rig *r)
{
    struct sink_params p;

    rig_params(r, &r->node, &p);
    p.run_check = rig_run_check;
    p.run_check_arg = r;
    r->s = sink_new(&p);
}

static struct rig *rig_open(bool bucket_down)
{
    struct rig *r = rig_new(bucket_down);

    rig_sink(r);
    return r;
}

/* Sink the queues q1, q2, q3 instead of orders. */
static void rig_three_queues(struct rig *r)
{
    free(r->queues[0]);
    r->queues[0] = xstrdup("q1");
    r->queues[1] = xstrdup("q2");
    r->queues[2] = xstrdup("q3");
    r->cfg.n_queues = 3;
}

/* The placement tests' sink: q1, q2, q3 with a 1 s lease TTL. */
static void rig_sink_three(struct rig *r)
{
    rig_three_queues(r);
    r->node.lease_ttl_ms = 1000;
    rig_sink(r);
}

/* Three records, two windows apart, and a safe time past both. */
static void rig_push_three(struct rig *r)
{
    pthread_mutex_lock(&r->mu);
    fake_push(&r->f, "a", at("2026-09-04T10:05:00.000000Z"));
    fake_push(&r->f, "b", at("2026-09-04T10:06:00.000000Z"));
    fake_push(&r->f, "a", at("2026-09-04T11:05:00.000000Z"));
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    pthread_mutex_unlock(&r->mu);
}
static void rig_close(struct rig *r)
{
    sink_free(r->s2);
    sink_free(r->s);
    for (size_t i = 0; i < 3; i++) {
        free(r->queues[i]);
    }
    fake_s3_close(&r->s3);
    bucket_free(&r->k);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* The status block as text. */
static void sink_status_text(struct sink *sk, struct buf *out)
{
    struct status_node node;
    struct status_sink ss;
    struct err err;

    buf_reset(out);
    memset(&node, 0, sizeof(node));
    memset(&ss, 0, sizeof(ss));
    ss.tenant = "00000000-0000-0000-0000-000000000001";
    ss.source = "env";
    ASSERT(sink_status_render(sk, &node, &ss, out, &err) == 0);
}

static void status_text(struct rig *r, struct buf *out)
{
    sink_status_text(r->s, out);
}

static bool status_has(struct rig *r, const char *needle)
{
    struct buf b;

    buf_init(&b, BUF_UNLIMITED);
    status_text(r, &b);
    bool has = strstr(b.data, needle) != NULL;
    buf_free(&b);
    return has;
}

/* Poll pred with a deadline (ms); true when it held. */
static bool wait_for(struct rig *r, const char *needle, int64_t ms)
{
    int64_t end = now_ms() + ms;

    while (now_ms() < end) {
        if (status_has(r, needle)) {
            return true;
        }
        pause_ms(20);
    }
    return false;
}

static bool wait_stopped(struct rig *r, int64_t ms)
{
    int64_t end = now_ms() + ms;

    while (now_ms() < end) {
        if (sink_stopped(r->s)) {
            return true;
        }
        pause_ms(20);
    }
    return false;
}

/* Stop the sink; true when it stopped within ms. */
static bool rig_stop(struct rig *r, int64_t ms)
{
    sink_stop(r->s);
    return wait_stopped(r, ms);
}

static bool rig_has_row(struct rig *r, const char *key)
{
    pthread_mutex_lock(&r->mu);
    bool has = fake_row_get(&r->f, key) != NULL;
    pthread_mutex_unlock(&r->mu);
    return has;
}

/* Wait until the row is (present) or is not (!present); true when it
 * happened before the deadline. */
static bool wait_row(struct rig *r, const char *key, bool present, int64_t ms)
{
    for (int64_t end = now_ms() + ms; now_ms() < end; pause_ms(5)) {
        if (rig_has_row(r, key) == present) {
            return true;
        }
    }
    return false;
}

static int count_threads_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;

    ASSERT(d != NULL);
    while ((e = readdir(d)) != NULL) {
        char path[300];
        char comm[64] = "";
        FILE *f;

        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        f = fopen(path, "r");
        if (f == NULL) {
            continue;
        }
        if (fgets(comm, sizeof(comm), f) != NULL &&
            strncmp(comm, name, strlen(name)) == 0 &&
            comm[strlen(name)] == '\n') {
            n++;
        }
        fclose(f);
    }
    closedir(d);
    return n;
}

TEST(sink_ships_windows_then_drains_and_gives_everything_back)
{
    struct rig *r = rig_open(false);
    struct err err;

    rig_push_three(r);
    EXPECT(status_has(r, "\"running\":false"));
    EXPECT(status_has(r, "\"reachable\":null"));
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT_EQ_I64(count_threads_named("queen-s3"), 2);
    EXPECT_EQ_I64(count_threads_named("queen-s3-main"), 1);
    EXPECT(wait_for(r, "\"windowsCommitted\":2", HARNESS_WAIT_MS));
    EXPECT(status_has(r, "\"reachable\":true"));
    EXPECT(status_has(r, "\"ownedHere\":true"));
    EXPECT(status_has(r, "\"health\":{\"ok\":true,\"queues\":1}"));
    EXPECT(status_has(r, "\"ok\":true,\"sink\":\"default\""));
    EXPECT(status_has(r, "\"records\":3"));
    pthread_mutex_lock(&r->mu);
    EXPECT(fake_row_get(&r->f, "s3:default:orders:lease") != NULL);
    EXPECT(fake_row_get(&r->f, "s3:default:node=node-1%40test") != NULL);
    pthread_mutex_unlock(&r->mu);

    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    EXPECT(status_has(r, "\"state\":\"drained\""));
    EXPECT(status_has(r, "\"running\":false"));
    pthread_mutex_lock(&r->mu);
    EXPECT(fake_row_get(&r->f, "s3:default:orders:lease") == NULL);
    EXPECT(fake_row_get(&r->f, "s3:default:node=node-1%40test") == NULL);
    pthread_mutex_unlock(&r->mu);
    rig_close(r);
}

TEST(an_unreachable_bucket_claims_nothing_and_stops_at_once)
{
    struct rig *r = rig_open(true);
    struct err err;

    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"reachable\":false", HARNESS_WAIT_MS));
    EXPECT(status_has(r, "cannot reach the bucket lake at "
                         "http://127.0.0.1:9000"));
    /* every queue has its row, waiting to claim until the bucket answers */
    EXPECT(status_has(r, "\"queues\":[{\"name\":\"orders\",\"ownedHere\":false,"
                         "\"heldBy\":null,\"state\":\"claiming\""));
    EXPECT(!status_has(r, "queen-secret-key"));
    pthread_mutex_lock(&r->mu);
    EXPECT(fake_row_get(&r->f, "s3:default:orders:lease") == NULL);
    EXPECT_EQ_I64(r->f.kv_calls, 0);
    pthread_mutex_unlock(&r->mu);
    /* At once: well short of the 30 s shutdown grace it must not wait
     * out, with room for a loaded machine. */
    EXPECT(rig_stop(r, 20000));
    rig_close(r);
}

TEST(a_missing_queue_is_looked_for_again)
{
    struct rig *r = rig_open(false);
    struct err err;

    pthread_mutex_lock(&r->mu);
    r->f.queue_exists = false;
    pthread_mutex_unlock(&r->mu);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"state\":\"missing\"", HARNESS_WAIT_MS));
    /* The lease is given back right after the driver stopped Missing. */
    EXPECT(wait_row(r, "s3:default:orders:lease", false, HARNESS_WAIT_MS));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}

TEST(stopping_before_start_is_stopped)
{
    struct rig *r = rig_open(false);

    sink_stop(r->s);
    EXPECT(sink_stopped(r->s));
    rig_close(r);
}

/* ---- placement, the run's ladder, gauges, the refresher ------------------ */

static bool metrics_has(struct rig *r, const char *needle)
{
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    ASSERT(sink_metrics(r->s, &b, &err) == 0);
    bool has = strstr(b.data, needle) != NULL;
    buf_free(&b);
    return has;
}

static bool wait_metric(struct rig *r, const char *needle, int64_t ms)
{
    for (int64_t end = now_ms() + ms; now_ms() < end; pause_ms(10)) {
        if (metrics_has(r, needle)) {
            return true;
        }
    }
    return false;
}

/* Poll has(r, needle) until it answers want (true) or ms pass (false);
 * *before is a time it still answered !want, so the change came after it
 * (the time of the call when it answered want at once). */
static bool wait_change(bool (*has)(struct rig *, const char *), struct rig *r,
                        const char *needle, bool want, int64_t ms,
                        int64_t *before)
{
    *before = now_ms();
    for (int64_t end = now_ms() + ms; now_ms() < end; pause_ms(5)) {
        int64_t t = now_ms();
        if (has(r, needle) == want) {
            return true;
        }
        *before = t;
    }
    return false;
}

/* has(r, needle) stays false until `until` (now_ms()): false when it was
 * seen true before then. A look that ended past `until` proves nothing, so
 * on a loaded machine the window may hold fewer looks, never a wrong one. */
static bool absent_until(bool (*has)(struct rig *, const char *), struct rig *r,
                         const char *needle, int64_t until)
{
    for (;;) {
        bool seen = has(r, needle);
        if (now_ms() >= until) {
            return true;
        }
        if (seen) {
            return false;
        }
        pause_ms(5);
    }
}

/* The 2-TTL cooldown after a give-back (TTL 1 s), less 300 ms for the
 * sink's own steps between reading its clock and releasing the lease:
 * measured from a time the test still saw the lease held, nothing of the
 * give-back may come sooner. */
#define COOLDOWN_FLOOR_MS 1700

/* A row another node wrote: a presence row or a lease. */
static void rig_other_row(struct rig *r, const char *key, const char *inst)
{
    char doc[256];

    snprintf(doc, sizeof(doc),
             "{\"instance\":\"%s\",\"incarnation\":\"00000000000000aa\","
             "\"sinceMs\":1}",
             inst);
    pthread_mutex_lock(&r->mu);
    fake_row_set(&r->f, key, doc);
    pthread_mutex_unlock(&r->mu);
}

/* The presence rows of node-2@test and node-3@test: three nodes live. */
static void rig_two_more_nodes(struct rig *r)
{
    rig_other_row(r, "s3:default:node=node-2%40test", "node-2@test");
    rig_other_row(r, "s3:default:node=node-3%40test", "node-3@test");
}

TEST(a_node_at_its_share_waits_a_ttl_longer_before_claiming)
{
    struct rig *r = rig_new(false);
    struct err err;

    /* A TTL of 5 s, so that a first claim that waited a TTL more is told
     * from one that waited its jitter (< 200 ms) by a bound a loaded
     * machine does not reach. */
    rig_three_queues(r);
    r->node.lease_ttl_ms = 5000;
    rig_sink(r);
    rig_two_more_nodes(r);
    int64_t t0 = now_ms();
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    /* N = 3 from the first beat, so the share is 1 of 3 queues. */
    EXPECT(wait_for(r, "\"held\":1,\"nodes\":3,\"queues\":3,\"share\":1",
                    HARNESS_WAIT_MS));
    int64_t t1 = now_ms();
    EXPECT(wait_for(r, "\"held\":2,", HARNESS_WAIT_MS));
    int64_t t2 = now_ms();
    /* The first claim only waits its jitter, not a TTL; the next one, at
     * the share, waits min(1 s x 1, TTL / 2) + one TTL more: >= 6 s. */
    EXPECT(t1 - t0 < 5000);
    EXPECT(t2 - t0 >= 6000);
    EXPECT(wait_for(r, "\"held\":3,", HARNESS_WAIT_MS));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}

TEST(a_node_over_its_share_gives_queues_back_one_at_a_time)
{
    struct rig *r = rig_new(false);
    struct err err;

    rig_sink_three(r);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"held\":3,\"nodes\":1,\"queues\":3,\"share\":3",
                    HARNESS_WAIT_MS));
    EXPECT(metrics_has(r, "\nqueen_s3_queues_given_back_total 0\n"));
    /* Two more nodes appear: share 1, this node is over by 2. */
    int64_t t_join = now_ms();
    rig_two_more_nodes(r);
    /* The least buffered queue, ties by name: q1, drained and released. */
    int64_t t_held;
    EXPECT(wait_change(rig_has_row, r, "s3:default:q1:lease", false,
                       HARNESS_WAIT_MS, &t_held));
    int64_t t_rel = now_ms();
    EXPECT(t_rel - t_join >= 1000); /* over for a full TTL first */
    EXPECT(status_has(r, "\"givingBack\":\"q1\""));
    EXPECT(wait_metric(r, "\nqueen_s3_queues_given_back_total 1\n",
                       HARNESS_WAIT_MS));
    /* 2-TTL cooldown: nobody takes it, and this node does not either. */
    EXPECT(absent_until(rig_has_row, r, "s3:default:q1:lease",
                        t_held + COOLDOWN_FLOOR_MS));
    EXPECT(rig_has_row(r, "s3:default:q2:lease"));
    /* node-2 takes q1: the give-back is over, the next one follows. */
    rig_other_row(r, "s3:default:q1:lease", "node-2@test");
    EXPECT(wait_for(r, "\"heldBy\":\"node-2@test\"", HARNESS_WAIT_MS));
    EXPECT(wait_row(r, "s3:default:q2:lease", false, HARNESS_WAIT_MS));
    EXPECT(wait_metric(r, "\nqueen_s3_queues_given_back_total 2\n",
                       HARNESS_WAIT_MS));
    rig_other_row(r, "s3:default:q2:lease", "node-3@test");
    EXPECT(wait_for(r, "\"held\":1,\"nodes\":3,\"queues\":3,\"share\":1",
                    HARNESS_WAIT_MS));
    EXPECT(wait_for(r, "\"givingBack\":null", HARNESS_WAIT_MS));
    /* At its share: no third give-back over two more TTLs. */
    EXPECT(!wait_metric(r, "\nqueen_s3_queues_given_back_total 3\n", 2000));
    EXPECT(rig_has_row(r, "s3:default:q3:lease"));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}

TEST(a_queue_given_back_that_nobody_takes_is_claimed_after_two_ttls)
{
    struct rig *r = rig_new(false);
    struct err err;

    rig_sink_three(r);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"held\":3,", HARNESS_WAIT_MS));
    rig_two_more_nodes(r);
    int64_t t_held;
    EXPECT(wait_change(rig_has_row, r, "s3:default:q1:lease", false,
                       HARNESS_WAIT_MS, &t_held));
    EXPECT(wait_row(r, "s3:default:q1:lease", true, HARNESS_WAIT_MS));
    /* 2 TTLs after the give-back */
    EXPECT(now_ms() - t_held >= COOLDOWN_FLOOR_MS);
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}

/* A give-back whose lease row stayed behind (still this instance's, an
 * older incarnation) is no reason to take the queue straight back: the
 * 2-TTL cooldown holds for it as for a free row, or the node would give
 * the queue back and reclaim it over and over. */
TEST(a_queue_given_back_is_not_reclaimed_through_its_own_leftover_row)
{
    struct rig *r = rig_new(false);
    struct err err;

    rig_sink_three(r);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"held\":3,", HARNESS_WAIT_MS));
    pthread_mutex_lock(&r->mu);
    r->keep_row = "s3:default:q1:lease";
    pthread_mutex_unlock(&r->mu);
    rig_two_more_nodes(r);
    int64_t t_before;
    EXPECT(wait_change(metrics_has, r, "\nqueen_s3_queues_given_back_total 1\n",
                       true, HARNESS_WAIT_MS, &t_before));
    EXPECT(rig_has_row(r, "s3:default:q1:lease"));
    /* Not within the cooldown (2 TTLs = 2 s from the give-back). */
    EXPECT(absent_until(status_has, r, "{\"name\":\"q1\",\"ownedHere\":true",
                        t_before + COOLDOWN_FLOOR_MS));
    /* After it, the leftover row is ours to take over. */
    EXPECT(wait_for(r, "{\"name\":\"q1\",\"ownedHere\":true", HARNESS_WAIT_MS));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}

/* A queue name of 465 bytes, the longest whose KV keys fit (s3:default:
 * <name>:committed is 486 bytes, KV_KEY_FITS of "queen-s3"), is given back
 * like any other: the drain finds its task by the whole name. */
TEST(a_queue_with_a_long_name_is_given_back_without_a_crash)
{
    struct rig *r = rig_new(false);
    struct err err;
    char key[600];

    free(r->queues[0]);
    r->queues[0] = xcalloc(466, 1);
    memset(r->queues[0], 'a', 465);
    r->queues[1] = xstrdup("b");
    r->cfg.n_queues = 2;
    r->node.lease_ttl_ms = 1000;
    rig_sink(r);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"held\":2,", HARNESS_WAIT_MS));
    rig_two_more_nodes(r);
    snprintf(key, sizeof(key), "s3:default:%s:lease", r->queues[0]);
    EXPECT(wait_row(r, key, false, HARNESS_WAIT_MS));
    EXPECT(wait_metric(r, "\nqueen_s3_queues_given_back_total 1\n",
                       HARNESS_WAIT_MS));
    EXPECT(rig_has_row(r, "s3:default:b:lease"));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}

TEST(a_run_that_ends_unasked_restarts_on_a_doubling_ladder)
{
    struct rig *r = rig_new(false);
    struct err err;

    r->node.lease_ttl_ms = 3000; /* the control task steps every second */
    rig_sink(r);
    EXPECT(status_has(r, "\"phase\":\"starting\""));
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"ownedHere\":true", HARNESS_WAIT_MS));
    EXPECT(status_has(r, "\"phase\":\"running\",\"error\":null,"
                         "\"restarts\":0,\"lastExit\":null,\"uptimeMs\":"));
    pthread_mutex_lock(&r->mu);
    r->fail_runs = 2;
    pthread_mutex_unlock(&r->mu);
    EXPECT(wait_for(r,
                    "\"phase\":\"backoff\",\"error\":\"scripted control "
                    "task failure\",\"restarts\":1,\"lastExit\":\"the sink "
                    "returned without being stopped\",\"backoffMs\":1000",
                    HARNESS_WAIT_MS));
    /* The run's queues drained and gave their leases back. */
    EXPECT(!rig_has_row(r, "s3:default:orders:lease"));
    EXPECT(status_has(r, "\"state\":\"drained\""));
    EXPECT(wait_for(r,
                    "\"restarts\":2,\"lastExit\":\"the sink returned "
                    "without being stopped\",\"backoffMs\":2000",
                    HARNESS_WAIT_MS));
    EXPECT(wait_for(r, "\"ownedHere\":true", HARNESS_WAIT_MS));
    EXPECT(status_has(r, "\"phase\":\"running\""));
    EXPECT(status_has(r, "\"restarts\":2"));
    EXPECT(rig_has_row(r, "s3:default:orders:lease"));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    EXPECT(status_has(r, "\"phase\":\"stopped\""));
    rig_close(r);
}

TEST(a_queue_this_node_stops_running_leaves_no_gauge_behind)
{
    struct rig *r = rig_new(false);
    struct err err;

    r->node.lease_ttl_ms = 1000;
    rig_sink(r);
    rig_push_three(r);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"windowsCommitted\":2", HARNESS_WAIT_MS));
    EXPECT(metrics_has(r, "\nqueen_s3_lag_seconds{queue=\"orders\"} "));
    EXPECT(metrics_has(r, "\nqueen_s3_safe_lag_seconds "));
    EXPECT(
        metrics_has(r, "\nqueen_s3_discovery_partitions{queue=\"orders\"} "));
    EXPECT(
        metrics_has(r, "\nqueen_s3_checkpoint_age_windows{queue=\"orders\"} "));
    /* Another node takes the lease over. */
    rig_other_row(r, "s3:default:orders:lease", "node-2@test");
    EXPECT(wait_for(r, "\"heldBy\":\"node-2@test\"", HARNESS_WAIT_MS));
    EXPECT(!metrics_has(r, "\nqueen_s3_lag_seconds{"));
    EXPECT(!metrics_has(r, "\nqueen_s3_safe_lag_seconds "));
    EXPECT(!metrics_has(r, "\nqueen_s3_discovery_partitions{"));
    EXPECT(!metrics_has(r, "\nqueen_s3_checkpoint_age_windows{"));
    EXPECT(metrics_has(
        r, "\nqueen_s3_windows_committed_total{queue=\"orders\"} 2\n"));
    EXPECT(metrics_has(r, "# TYPE queen_s3_lag_seconds gauge\n"));
    EXPECT(metrics_has(r, "# TYPE queen_s3_safe_lag_seconds gauge\n"));
    EXPECT(status_has(r, "\"health\":{\"ok\":true,\"queues\":0}"));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}

TEST(a_long_upload_does_not_hold_up_the_lease_refresh)
{
    struct rig *r = rig_new(false);
    struct err err;

    r->node.threads = 1; /* the upload holds the pool's only thread */
    r->node.lease_ttl_ms = 1000;
    rig_sink(r);
    rig_push_three(r);
    pthread_mutex_lock(&r->mu);
    r->block_put_ms = 1500; /* longer than the TTL, at least */
    pthread_mutex_unlock(&r->mu);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"windowsCommitted\":2", HARNESS_WAIT_MS));
    pthread_mutex_lock(&r->mu);
    /* every 333 ms during >= 1.5 s: about 4 heartbeats */
    EXPECT(r->refreshes_in_block >= 2);
    EXPECT(r->block_put_ms == 0);
    pthread_mutex_unlock(&r->mu);
    EXPECT(!status_has(r, "\"state\":\"fenced\""));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    EXPECT(!rig_has_row(r, "s3:default:orders:lease"));
    rig_close(r);
}

/* The refresher finds the lease taken while the queue waits out a 300 s
 * Retry-After: the queue stops Fenced at once (docs/design/protocol.md §3: the
 * driver checks the lost flag at every tick; the refresher makes that tick come
 * now). */
TEST(a_lease_lost_in_a_put_backoff_stops_the_queue_at_once)
{
    struct rig *r = rig_new(false);
    struct err err;

    r->node.lease_ttl_ms = 1000;
    rig_sink(r);
    rig_push_three(r);
    pthread_mutex_lock(&r->mu);
    r->refuse_puts_ms = 300000; /* far past the waits below */
    pthread_mutex_unlock(&r->mu);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    bool refused = false;
    for (int64_t end = now_ms() + HARNESS_WAIT_MS;
         !refused && now_ms() < end;) {
        pthread_mutex_lock(&r->mu);
        refused = r->puts_refused > 0;
        pthread_mutex_unlock(&r->mu);
        pause_ms(10);
    }
    EXPECT(refused);
    rig_other_row(r, "s3:default:orders:lease", "node-2@test");
    /* a refresh (333 ms), the Fenced stop, one TTL, the claim: ~1.5 s */
    EXPECT(wait_for(r, "\"heldBy\":\"node-2@test\"", HARNESS_WAIT_MS));
    EXPECT(status_has(r, "the lease is held by another instance"));
    pthread_mutex_lock(&r->mu);
    EXPECT_EQ_I64(r->puts_refused, 1);
    r->refuse_puts_ms = 0;
    pthread_mutex_unlock(&r->mu);
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    EXPECT(rig_has_row(r, "s3:default:orders:lease")); /* node-2's, kept */
    rig_close(r);
}

static bool sink_has(struct sink *sk, const char *needle)
{
    struct buf b;

    buf_init(&b, BUF_UNLIMITED);
    sink_status_text(sk, &b);
    bool has = strstr(b.data, needle) != NULL;
    buf_free(&b);
    return has;
}

/* Both sinks' status holds its needle at the same moment. */
static bool wait_both(struct rig *r, const char *n1, const char *n2, int64_t ms)
{
    for (int64_t end = now_ms() + ms; now_ms() < end; pause_ms(10)) {
        if (sink_has(r->s, n1) && sink_has(r->s2, n2)) {
            return true;
        }
    }
    return false;
}

/* A second real sink, node-2@test, on the rig's broker and bucket. */
static void rig_second_node(struct rig *r)
{
    struct sink_params p;

    r->node2 = r->node;
    strcpy(r->node2.instance, "node-2@test");
    rig_params(r, &r->node2, &p);
    r->s2 = sink_new(&p);
}

TEST(a_node_that_joins_gets_its_share_from_the_one_already_running)
{
    struct rig *r = rig_new(false);
    struct err err;

    rig_sink_three(r);
    rig_second_node(r);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"held\":3,\"nodes\":1,", HARNESS_WAIT_MS));
    EXPECT_EQ_I64(sink_start(r->s2, &err), 0);
    /* N = 2, share 2: node-1 gives q1 back, node-2 (below its share)
     * takes it while node-1 cools down. */
    EXPECT(wait_both(r, "\"held\":2,\"nodes\":2,\"queues\":3,\"share\":2",
                     "\"held\":1,\"nodes\":2,\"queues\":3,\"share\":2",
                     HARNESS_WAIT_MS));
    EXPECT(sink_has(r->s2, "{\"name\":\"q1\",\"ownedHere\":true"));
    EXPECT(metrics_has(r, "\nqueen_s3_queues_given_back_total 1\n"));
    /* Then it holds still: both at or below their share. */
    EXPECT(!wait_metric(r, "\nqueen_s3_queues_given_back_total 2\n", 3000));
    EXPECT(wait_both(r, "\"held\":2,", "\"held\":1,", HARNESS_WAIT_MS));
    sink_stop(r->s2);
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    for (int64_t end = now_ms() + HARNESS_WAIT_MS;
         !sink_stopped(r->s2) && now_ms() < end;) {
        pause_ms(20);
    }
    EXPECT(sink_stopped(r->s2));
    EXPECT(!rig_has_row(r, "s3:default:node=node-2%40test"));
    rig_close(r);
}

TEST(the_restart_ladder_doubles_to_30_s_and_resets_after_a_healthy_hour)
{
    int64_t ladder = 0;
    const int64_t want[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000};

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        EXPECT_EQ_I64(sink_restart_backoff(&ladder, 5000), want[i]);
    }
    /* One ms short of an hour is not healthy enough; an hour is. */
    EXPECT_EQ_I64(sink_restart_backoff(&ladder, 3599999), 30000);
    EXPECT_EQ_I64(sink_restart_backoff(&ladder, 3600000), 1000);
    EXPECT_EQ_I64(sink_restart_backoff(&ladder, 10), 2000);
}

/* Production's driver configuration: the settings of the sink, the upload
 * overlapped with the reads, and a real jitter source, so nodes that failed
 * together do not retry in step (issue 13 item 13). */
TEST(the_driver_of_a_queue_gets_the_settings_and_a_jitter_source)
{
    struct rig *r = rig_new(false);
    struct sink_params p;
    struct driver_config d;
    double v[64];
    bool differ = false;

    r->node.checkpoint_every = 7;
    r->node.fetch_concurrency = 3;
    rig_params(r, &r->node, &p);
    sink_driver_config(&p, "orders", &d);
    EXPECT_STR_EQ(d.queue, "orders");
    EXPECT_STR_EQ(d.prefix, "queen");
    EXPECT_EQ_U64(d.checkpoint_every, 7);
    EXPECT_EQ_U64(d.fetch_concurrency, 3);
    EXPECT(d.overlap_upload);
    ASSERT(d.random != NULL);
    for (int i = 0; i < 64; i++) {
        v[i] = d.random(d.random_arg);
        EXPECT(v[i] >= 0.0 && v[i] < 1.0);
        differ = differ || (i > 0 && v[i] != v[0]);
    }
    EXPECT(differ);
    rig_close(r);
}

/* ---- one pool for every tenant sink of a node -------------------------- */

#define POOL_TENANT "42000000-0000-0000-0000-000000000002"

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;

    for (const char *p = strstr(hay, needle); p != NULL;
         p = strstr(p + 1, needle)) {
        n++;
    }
    return n;
}

static void pool_metrics_text(struct sink_pool *pool, struct sink *const *s,
                              size_t n, struct buf *out)
{
    struct err err;

    buf_reset(out);
    ASSERT(sink_pool_metrics(pool, s, n, out, &err) == 0);
}

/* The default tenant's sink and a control-plane tenant's on one pool: two
 * threads in all (not two per sink), both ship, the labelled sink's series
 * carry its tenant first, every family is declared once, and freeing the
 * labelled sink takes all of its series with it. */
TEST(tenant_sinks_share_one_pool_and_a_freed_one_leaves_no_series)
{
    struct rig *r = rig_new(false);
    struct sink_config cfg2;
    struct sink_params p;
    struct sink *s[2];
    struct buf b;
    struct err err;

    rig_push_three(r);
    cfg2 = r->cfg;
    strcpy(cfg2.sink, "other"); /* its own lease and presence rows */
    strcpy(cfg2.prefix, "queen2");
    struct sink_pool *pool = sink_pool_new(&r->node);
    rig_params(r, &r->node, &p);
    p.pool = pool;
    s[0] = sink_new(&p);
    rig_params(r, &r->node, &p);
    p.cfg = &cfg2;
    p.pool = pool;
    p.tenant[0] = 0x42;
    p.tenant[15] = 2;
    p.tenant_text = POOL_TENANT;
    p.metrics_tenant = POOL_TENANT;
    s[1] = sink_new(&p);
    EXPECT_EQ_I64(sink_pool_start(pool, &err), 0);
    EXPECT_EQ_I64(sink_start(s[0], &err), 0);
    EXPECT_EQ_I64(sink_start(s[1], &err), 0);
    EXPECT_EQ_I64(count_threads_named("queen-s3"), 2);
    EXPECT_EQ_I64(count_threads_named("queen-s3-main"), 1);
    bool both = false;
    for (int64_t end = now_ms() + HARNESS_WAIT_MS; !both && now_ms() < end;
         pause_ms(20)) {
        both = sink_has(s[0], "\"windowsCommitted\":2") &&
               sink_has(s[1], "\"windowsCommitted\":2");
    }
    EXPECT(both);
    buf_init(&b, BUF_UNLIMITED);
    pool_metrics_text(pool, s, 2, &b);
    EXPECT(strstr(b.data,
                  "\nqueen_s3_windows_committed_total{queue=\"orders\"} "
                  "2\n") != NULL);
    EXPECT(strstr(b.data,
                  "\nqueen_s3_windows_committed_total{tenant=\"" POOL_TENANT
                  "\",queue=\"orders\"} 2\n") != NULL);
    EXPECT_EQ_U64(count_of(b.data, "# TYPE queen_s3_windows_committed_total "),
                  1);
    EXPECT_EQ_U64(count_of(b.data, "# TYPE queen_s3_s3_requests_total "), 1);
    /* the labelled sink drains and goes: none of its series stay */
    sink_stop(s[1]);
    for (int64_t end = now_ms() + HARNESS_WAIT_MS;
         !sink_stopped(s[1]) && now_ms() < end;) {
        pause_ms(20);
    }
    EXPECT(sink_stopped(s[1]));
    sink_free(s[1]);
    pool_metrics_text(pool, s, 1, &b);
    EXPECT(strstr(b.data, POOL_TENANT) == NULL);
    EXPECT(strstr(b.data,
                  "\nqueen_s3_windows_committed_total{queue=\"orders\"} "
                  "2\n") != NULL);
    sink_stop(s[0]);
    for (int64_t end = now_ms() + HARNESS_WAIT_MS;
         !sink_stopped(s[0]) && now_ms() < end;) {
        pause_ms(20);
    }
    EXPECT(sink_stopped(s[0]));
    sink_free(s[0]);
    sink_pool_free(pool);
    /* joined threads leave /proc a moment after pthread_join returns: the
     * kernel wakes the joiner before it reaps the task */
    int left = count_threads_named("queen-s3");
    for (int64_t end = now_ms() + HARNESS_WAIT_MS; left != 0 && now_ms() < end;
         left = count_threads_named("queen-s3")) {
        pause_ms(5);
    }
    EXPECT_EQ_I64(left, 0);
    buf_free(&b);
    rig_close(r);
}

/* A gauge line of the metrics, its value or -1 when it is not there. */
static double metric_value(struct rig *r, const char *series)
{
    struct buf b;
    struct err err;
    double v = -1;

    buf_init(&b, BUF_UNLIMITED);
    ASSERT(sink_metrics(r->s, &b, &err) == 0);
    const char *p = strstr(b.data, series);
    if (p != NULL) {
        v = strtod(p + strlen(series), NULL);
    }
    buf_free(&b);
    return v;
}

/* A started sink with a 1 s lease TTL and the test's safeTime, two windows
 * committed. */
static struct rig *rig_two_windows(void)
{
    struct rig *r = rig_new(false);
    struct err err;

    r->node.lease_ttl_ms = 1000;
    r->b.safe_time = rig_safe_time;
    rig_sink(r);
    rig_push_three(r);
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT(wait_for(r, "\"windowsCommitted\":2", HARNESS_WAIT_MS));
    return r;
}

/* The data dir fills: the lease cannot be renewed (it ages out here, the
 * queue stops fenced) nor claimed again, and no other node holds it. The
 * queue stays in the health verdict with its lag and the claim's error,
 * red once it lags past the limit, and green again once it is claimed and
 * commits (docs/design/window.md §13). */
TEST(a_queue_that_cannot_get_its_lease_back_stays_in_the_verdict)
{
    struct rig *r = rig_two_windows();
    const char *lag = "\nqueen_s3_lag_seconds{queue=\"orders\"} ";
    EXPECT(
        wait_for(r, "\"health\":{\"ok\":true,\"queues\":1}", HARNESS_WAIT_MS));
    pthread_mutex_lock(&r->mu);
    r->lease_kv_full = true;
    pthread_mutex_unlock(&r->mu);
    /* fenced, and the row says why while the release still retries */
    EXPECT(wait_for(r, "\"state\":\"fenced\"", HARNESS_WAIT_MS));
    EXPECT(status_has(r, "the lease was not renewed in time here"));
    EXPECT(wait_for(r, "\"lastError\":{\"at\":", HARNESS_WAIT_MS));
    EXPECT(wait_for(r, "lease claim: insufficient storage", 3 * 15000));
    EXPECT(
        wait_for(r, "\"health\":{\"ok\":true,\"queues\":1}", HARNESS_WAIT_MS));
    EXPECT(metrics_has(r, lag));
    /* two hours of records acknowledged meanwhile: past the 900 s limit */
    pthread_mutex_lock(&r->mu);
    r->f.safe_time += 7200LL * 1000000;
    pthread_mutex_unlock(&r->mu);
    EXPECT(wait_for(r, "\"health\":{\"ok\":false,\"queue\":\"orders\"",
                    HARNESS_WAIT_MS));
    EXPECT(status_has(r, "\"ok\":false,\"sink\":\"default\""));
    EXPECT(metric_value(r, lag) >= 7200);
    EXPECT(status_has(r, "\"state\":\"claiming\""));
    /* space again: claimed, a commit, green */
    pthread_mutex_lock(&r->mu);
    r->lease_kv_full = false;
    fake_push(&r->f, "a", r->f.safe_time - 60LL * 1000000);
    pthread_mutex_unlock(&r->mu);
    EXPECT(wait_for(r, "\"records\":4", HARNESS_WAIT_MS));
    EXPECT(
        wait_for(r, "\"health\":{\"ok\":true,\"queues\":1}", HARNESS_WAIT_MS));
    EXPECT(metric_value(r, lag) < 900);
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}

/* The lease ages out here (its renewals fail) and another node takes the
 * queue over meanwhile: a failover, not a stranded queue. From the fence on
 * this node neither judges nor exports the queue's lag, however far the
 * records run ahead, and its claim then finds the new holder. */
TEST(a_queue_fenced_here_and_taken_over_never_turns_this_node_red)
{
    struct rig *r = rig_two_windows();
    pthread_mutex_lock(&r->mu);
    r->lease_kv_full = true;
    pthread_mutex_unlock(&r->mu);
    EXPECT(wait_for(r, "\"state\":\"fenced\"", HARNESS_WAIT_MS));
    pthread_mutex_lock(&r->mu);
    r->lease_kv_full = false; /* the release goes through */
    pthread_mutex_unlock(&r->mu);
    rig_other_row(r, "s3:default:orders:lease", "node-2@test");
    EXPECT(wait_for(r, "\"ownedHere\":false", HARNESS_WAIT_MS));
    pthread_mutex_lock(&r->mu);
    r->f.safe_time += 7200LL * 1000000;
    pthread_mutex_unlock(&r->mu);
    /* until the claim (a TTL after the fence) and after it */
    EXPECT(status_has(r, "\"health\":{\"ok\":true,\"queues\":0}"));
    EXPECT(!metrics_has(r, "\nqueen_s3_lag_seconds{"));
    EXPECT(wait_for(r, "\"heldBy\":\"node-2@test\"", HARNESS_WAIT_MS));
    EXPECT(status_has(r, "\"health\":{\"ok\":true,\"queues\":0}"));
    EXPECT(!metrics_has(r, "\nqueen_s3_lag_seconds{"));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}

/* Another node takes the lease: the queue leaves this node's verdict and
 * gauges at once, as before (it is that node's to report). */
TEST(a_queue_another_node_took_leaves_the_verdict)
{
    struct rig *r = rig_two_windows();
    rig_other_row(r, "s3:default:orders:lease", "node-2@test");
    EXPECT(wait_for(r, "\"heldBy\":\"node-2@test\"", HARNESS_WAIT_MS));
    pthread_mutex_lock(&r->mu);
    r->f.safe_time += 7200LL * 1000000;
    pthread_mutex_unlock(&r->mu);
    EXPECT(status_has(r, "\"health\":{\"ok\":true,\"queues\":0}"));
    EXPECT(!metrics_has(r, "\nqueen_s3_lag_seconds{"));
    EXPECT(rig_stop(r, HARNESS_WAIT_MS));
    rig_close(r);
}
