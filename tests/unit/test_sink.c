/* Tests of the sink's pool and task loop (reference 3.2, 3.11) over the
 * fake broker and the in-memory bucket of driver_fake.h, each wrapped in a
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
    char *queues[1];
    struct sink *s;
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

static int locked_kv(void *arg, const uint8_t t[16], const struct kv_op *ops,
                     size_t n, int timeout_ms, struct kv_answer *out,
                     struct err *err)
{
    struct rig *r = arg;

    pthread_mutex_lock(&r->mu);
    int rc = r->inner.kv(r->inner.arg, t, ops, n, timeout_ms, out, err);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int locked_safe_time(void *arg, int64_t *out, struct err *err)
{
    struct rig *r = arg;

    pthread_mutex_lock(&r->mu);
    int rc = r->inner.safe_time(r->inner.arg, out, err);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int locked_perform(void *arg, const struct s3_http_request *req,
                          struct s3_http_answer *ans, struct err *err)
{
    struct rig *r = arg;
    int rc;

    pthread_mutex_lock(&r->mu);
    if (r->bucket_down) {
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

static struct rig *rig_open(bool bucket_down)
{
    struct rig *r = xcalloc(1, sizeof(*r));
    struct sink_params p;

    pthread_mutex_init(&r->mu, NULL);
    r->bucket_down = bucket_down;
    fake_init(&r->f, "orders");
    fake_broker_seam(&r->f, &r->inner);
    r->b = (struct sink_broker){locked_changed, locked_fetch,     locked_kv,
                                NULL,           locked_safe_time, r};
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
    memset(&p, 0, sizeof(p));
    p.cfg = &r->cfg;
    p.node = &r->node;
    memcpy(p.tenant, STORE_DEFAULT_TENANT, 16);
    p.tenant_text = "00000000-0000-0000-0000-000000000001";
    p.broker = &r->b;
    p.s3 = r->s3.c;
    r->s = sink_new(&p);
    return r;
}

static void rig_close(struct rig *r)
{
    sink_free(r->s);
    free(r->queues[0]);
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
    struct timespec ts = {0, ms * 1000000L};

    nanosleep(&ts, NULL);
}

/* The status block as text. */
static void status_text(struct rig *r, struct buf *out)
{
    struct status_node node;
    struct status_sink ss;
    struct err err;

    buf_reset(out);
    memset(&node, 0, sizeof(node));
    memset(&ss, 0, sizeof(ss));
    node.phase = "running";
    ss.tenant = "00000000-0000-0000-0000-000000000001";
    ss.source = "env";
    ss.phase = "running";
    ASSERT(sink_status_render(r->s, &node, &ss, out, &err) == 0);
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
            strncmp(comm, name, strlen(name)) == 0) {
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

    pthread_mutex_lock(&r->mu);
    fake_push(&r->f, "a", at("2026-09-04T10:05:00.000000Z"));
    fake_push(&r->f, "b", at("2026-09-04T10:06:00.000000Z"));
    fake_push(&r->f, "a", at("2026-09-04T11:05:00.000000Z"));
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    pthread_mutex_unlock(&r->mu);
    EXPECT(status_has(r, "\"running\":false"));
    EXPECT(status_has(r, "\"reachable\":null"));
    EXPECT_EQ_I64(sink_start(r->s, &err), 0);
    EXPECT_EQ_I64(count_threads_named("queen-s3"), 2);
    EXPECT(wait_for(r, "\"windowsCommitted\":2", 10000));
    EXPECT(status_has(r, "\"reachable\":true"));
    EXPECT(status_has(r, "\"ownedHere\":true"));
    EXPECT(status_has(r, "\"health\":{\"ok\":true,\"queues\":1}"));
    EXPECT(status_has(r, "\"ok\":true,\"sink\":\"default\""));
    EXPECT(status_has(r, "\"records\":3"));
    pthread_mutex_lock(&r->mu);
    EXPECT(fake_row_get(&r->f, "s3:default:orders:lease") != NULL);
    EXPECT(fake_row_get(&r->f, "s3:default:node=node-1%40test") != NULL);
    pthread_mutex_unlock(&r->mu);

    sink_stop(r->s);
    EXPECT(wait_stopped(r, 10000));
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
    EXPECT(wait_for(r, "\"reachable\":false", 5000));
    EXPECT(status_has(r, "cannot reach the bucket lake at "
                         "http://127.0.0.1:9000"));
    EXPECT(status_has(r, "\"queues\":[]"));
    EXPECT(!status_has(r, "queen-secret-key"));
    pthread_mutex_lock(&r->mu);
    EXPECT(fake_row_get(&r->f, "s3:default:orders:lease") == NULL);
    EXPECT_EQ_I64(r->f.kv_calls, 0);
    pthread_mutex_unlock(&r->mu);
    sink_stop(r->s);
    EXPECT(wait_stopped(r, 5000));
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
    EXPECT(wait_for(r, "\"state\":\"missing\"", 10000));
    /* The lease is given back right after the driver stopped Missing. */
    bool released = false;
    for (int64_t end = now_ms() + 5000; !released && now_ms() < end;) {
        pthread_mutex_lock(&r->mu);
        released = fake_row_get(&r->f, "s3:default:orders:lease") == NULL;
        pthread_mutex_unlock(&r->mu);
        pause_ms(10);
    }
    EXPECT(released);
    sink_stop(r->s);
    EXPECT(wait_stopped(r, 5000));
    rig_close(r);
}

TEST(stopping_before_start_is_stopped)
{
    struct rig *r = rig_open(false);

    sink_stop(r->s);
    EXPECT(sink_stopped(r->s));
    rig_close(r);
}
