/* Tests of the queue driver (docs/design/scenarios.md §3-§5) over the fake
 * broker (KV semantics, partitions, safeTime) and the real S3 client over an
 * in-memory bucket. Crash points run in return mode. */
#include "sink/driver.h"

#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "base/isotime.h"
#include "base/sha256.h"
#include "driver_fake.h"
#include "harness.h"
#include "sink/docs.h"
#include "sink/engine.h"
#include "sink/jsonl.h"
#include "sink/layout.h"
#include "sink/lease.h"

struct rig {
    struct fake_broker f;
    struct sink_broker b;
    struct fake_bucket k;
    struct fake_s3 s3;
    struct driver_config cfg;
    struct lease *lease;
    struct driver *d;
    struct driver_next next;
    int64_t now;
    uint8_t seed;
    bool test_clock; /* the lease reads test_mono, not CLOCK_MONOTONIC */
};

/* The lease's clock when a rig asks for it; tests move it. */
static _Atomic int64_t test_mono;

static int64_t test_mono_now(void *arg)
{
    UNUSED(arg);
    return atomic_load(&test_mono);
}

static void test_mono_sleep(void *arg, int64_t ms)
{
    UNUSED(arg);
    atomic_fetch_add(&test_mono, ms);
}

static uint8_t rnd;

static void seeded_random(void *arg, uint8_t *out, size_t n)
{
    UNUSED(arg);
    for (size_t i = 0; i < n; i++) {
        out[i] = (uint8_t)(rnd * 16 + i);
    }
}

static int64_t at(const char *iso)
{
    int64_t us = 0;

    ASSERT(isotime_parse_us(iso, strlen(iso), &us));
    return us;
}

/* Two partitions, three records each in hour 10 and in hour 11; safeTime
 * past 12:00 so both hours close. */
static void seed_two_hours(struct fake_broker *f)
{
    static const char *const ts[] = {
        "2026-09-04T10:05:00.000000Z", "2026-09-04T10:15:00.000000Z",
        "2026-09-04T10:45:00.000000Z", "2026-09-04T11:05:00.000000Z",
        "2026-09-04T11:15:00.000000Z", "2026-09-04T11:45:00.000000Z"};

    for (size_t i = 0; i < ARRAY_LEN(ts); i++) {
        fake_push(f, "a", at(ts[i]));
        fake_push(f, "b", at(ts[i]) + 1);
    }
    f->safe_time = at("2026-09-04T12:00:00.000001Z");
}

static void new_lease(struct rig *r)
{
    struct lease_config lc;
    struct err err;
    bool taken = false;
    char who[64];

    memset(&lc, 0, sizeof(lc));
    lc.sink = "default";
    lc.queue = "orders";
    lc.instance = "node-1";
    lc.ttl_ms = 30000;
    lc.random_bytes = seeded_random;
    if (r->test_clock) {
        lc.clock = (struct lease_clock){test_mono_now, test_mono_sleep, NULL};
    }
    rnd = ++r->seed;
    lease_free(r->lease);
    r->lease = lease_new(&lc, &r->b, &err);
    ASSERT(r->lease != NULL);
    EXPECT_EQ_I64(lease_acquire(r->lease, 1000, &taken, who, sizeof(who), &err),
                  0);
    EXPECT(taken);
}

static void new_driver(struct rig *r)
{
    struct err err;

    driver_free(r->d);
    r->d = driver_new(&r->cfg, &r->b, r->s3.c, r->lease, &err);
    ASSERT(r->d != NULL);
    memset(&r->next, 0, sizeof(r->next));
}

static struct rig *rig_open(void)
{
    struct rig *r = xcalloc(1, sizeof(*r));

    fake_init(&r->f, "orders");
    fake_broker_seam(&r->f, &r->b);
    fake_s3_open(&r->s3, &r->k);
    driver_config_defaults(&r->cfg);
    memcpy(r->cfg.tenant, STORE_DEFAULT_TENANT, 16);
    r->cfg.tenant_text = "00000000-0000-0000-0000-000000000001";
    r->cfg.queue = "orders";
    r->cfg.guard_ms = 0;
    r->cfg.checkpoint_every = 0;
    r->cfg.crash_returns = true;
    r->cfg.overlap_upload = true; /* the mode production runs */
    new_lease(r);
    return r;
}

static void rig_close(struct rig *r)
{
    driver_free(r->d);
    lease_free(r->lease);
    fake_s3_close(&r->s3);
    bucket_free(&r->k);
    free(r);
}

/* Tick until the driver stops or committed_k reaches k and it idles;
 * bounded by max ticks. Returns the number of ticks. */
static int run_until(struct rig *r, int64_t k, int max)
{
    struct driver_status st;
    int i;

    for (i = 0; i < max; i++) {
        r->now = r->next.at_ms > r->now ? r->next.at_ms : r->now + 1;
        driver_tick(r->d, r->now, 1788000000000, &r->next);
        driver_status(r->d, &st);
        if (r->next.stop != DRIVER_RUNNING ||
            (k >= 0 && st.committed_k >= k &&
             strcmp(st.state, "filling") == 0 && r->next.at_ms > r->now)) {
            break;
        }
    }
    return i;
}

static int64_t committed_k(struct rig *r)
{
    struct driver_status st;

    driver_status(r->d, &st);
    return st.committed_k;
}

/* The k of the commit pointer row itself (0 when absent): the truth after
 * a crash point in return mode, which ends the tick before the status
 * catches up with a pointer the overlapped upload just wrote. */
static int64_t pointer_k(struct rig *r)
{
    struct fake_row *c = fake_row_get(&r->f, "s3:default:orders:committed");
    const char *p = c == NULL ? NULL : strstr(c->value, "\"k\":");

    return p == NULL ? 0 : strtoll(p + 4, NULL, 10);
}

/* key -> sha256 of every data object and manifest, sorted by key. */
static void fingerprint(struct fake_bucket *k, struct buf *out)
{
    const char *v[FAKE_MAX_OBJECTS] = {0};
    size_t n = 0;
    struct err e;

    for (size_t i = 0; i < k->n; i++) {
        if (strstr(k->objs[i].key, "/checkpoint/") == NULL) {
            v[n++] = k->objs[i].key;
        }
    }
    qsort(v, n, sizeof(*v), key_cmp);
    buf_reset(out);
    for (size_t i = 0; i < n; i++) {
        struct fake_object *o = bucket_find(k, v[i]);
        if (o == NULL) {
            abort();
        }
        uint8_t h[32];
        char hex[65];
        sha256(o->body.data, o->body.len, h);
        hex_lower(h, 32, hex);
        buf_printf(out, &e, "%s %s\n", v[i], hex);
    }
}

static size_t count_keys(struct fake_bucket *k, const char *part)
{
    size_t n = 0;

    for (size_t i = 0; i < k->n; i++) {
        n += strstr(k->objs[i].key, part) != NULL;
    }
    return n;
}

static void (*tune)(struct driver_config *c); /* per-case config */
static bool is_unlisted; /* the bucket answers 403 for a missing key */

static void control_run(struct buf *fp)
{
    struct rig *r = rig_open();

    if (tune != NULL) {
        tune(&r->cfg);
    }
    r->k.is_unlisted = is_unlisted;
    seed_two_hours(&r->f);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 2);
    fingerprint(&r->k, fp);
    EXPECT_EQ_U64(count_keys(&r->k, "/windows/"), 2);
    EXPECT(count_keys(&r->k, "/w-") >= 2);
    rig_close(r);
}

/* Crash at `point` in return mode, restart with a new lease and driver, and
 * compare the bucket with a control run's. */
static void crash_case(enum driver_crash point, int *puts_after_restart_w1)
{
    struct buf want;
    struct buf got;
    struct rig *r = rig_open();

    buf_init(&want, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    control_run(&want);
    if (tune != NULL) {
        tune(&r->cfg);
    }
    r->k.is_unlisted = is_unlisted;
    seed_two_hours(&r->f);
    r->cfg.crash_at = point;
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    EXPECT_STR_EQ(r->next.why, driver_crash_name(point));
    struct driver_status st;
    driver_status(r->d, &st);
    EXPECT_STR_EQ(st.state, "crashed");
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    int puts_before = r->k.puts;
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 2);
    fingerprint(&r->k, &got);
    EXPECT_STR_EQ(got.data, want.data);
    *puts_after_restart_w1 = 0;
    for (int i = puts_before; i < r->k.puts && i < 64; i++) {
        *puts_after_restart_w1 +=
            strstr(r->k.put_keys[i], "w-0000000001-") != NULL ||
            strstr(r->k.put_keys[i], "windows/0000000001.json") != NULL;
    }
    buf_free(&want);
    buf_free(&got);
    rig_close(r);
}

TEST(crash_after_intent_redoes_the_identical_window)
{
    int w1;

    crash_case(DRIVER_CRASH_AFTER_INTENT, &w1);
    EXPECT_EQ_I64(w1, 2); /* the data object and the manifest */
}

TEST(crash_mid_upload_redoes_the_identical_window)
{
    int w1;

    crash_case(DRIVER_CRASH_MID_UPLOAD, &w1);
    EXPECT_EQ_I64(w1, 2);
}

TEST(a_redo_whose_upload_finished_commits_from_its_manifest_after_upload)
{
    int w1;

    crash_case(DRIVER_CRASH_AFTER_UPLOAD, &w1);
    EXPECT_EQ_I64(w1, 0);
}

TEST(a_redo_whose_upload_finished_commits_from_its_manifest_before_commit)
{
    int w1;

    crash_case(DRIVER_CRASH_BEFORE_COMMIT, &w1);
    EXPECT_EQ_I64(w1, 0);
}

TEST(crash_after_commit_moves_on_without_repeating_a_record)
{
    int w1;

    crash_case(DRIVER_CRASH_AFTER_COMMIT, &w1);
    EXPECT_EQ_I64(w1, 0);
}

/* Without s3:ListBucket a missing manifest answers 403: at every crash
 * point the restart still finishes the window once, as on a bucket that
 * answers 404, and the queue does not fail. */
TEST(every_crash_point_redoes_once_on_a_bucket_without_list_permission)
{
    static const int want_w1[] = {0, 2, 2, 0, 0, 0};

    is_unlisted = true;
    for (int p = DRIVER_CRASH_AFTER_INTENT; p <= DRIVER_CRASH_AFTER_COMMIT;
         p++) {
        int w1 = -1;

        crash_case((enum driver_crash)p, &w1);
        EXPECT_EQ_I64(w1, want_w1[p]);
    }
    is_unlisted = false;
}

static void per_partition(struct driver_config *c)
{
    c->per_partition = true;
}

static void parquet(struct driver_config *c)
{
    c->format = DRIVER_FORMAT_PARQUET;
    c->compression = "zstd";
}

static void snappy_parquet(struct driver_config *c)
{
    c->format = DRIVER_FORMAT_PARQUET;
    c->compression = "snappy";
}

TEST(crash_mid_upload_with_one_object_per_partition)
{
    int w1;

    tune = per_partition;
    crash_case(DRIVER_CRASH_MID_UPLOAD, &w1);
    tune = NULL;
    EXPECT_EQ_I64(w1, 3); /* a's and b's objects and the manifest */
}

TEST(crash_before_commit_with_parquet_objects)
{
    int w1;

    tune = parquet;
    crash_case(DRIVER_CRASH_BEFORE_COMMIT, &w1);
    tune = NULL;
    EXPECT_EQ_I64(w1, 0);
}

TEST(a_snappy_parquet_window_records_its_codec_and_its_redo_still_matches)
{
    int w1;

    tune = snappy_parquet;
    crash_case(DRIVER_CRASH_AFTER_UPLOAD, &w1);
    tune = NULL;
    EXPECT_EQ_I64(w1, 0);
}

TEST(per_partition_keys_name_the_partition_and_offsets)
{
    struct rig *r = rig_open();

    r->cfg.per_partition = true;
    seed_two_hours(&r->f);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "-p-a-000000000000-000000000002.jsonl.zst"),
                  1);
    EXPECT_EQ_U64(count_keys(&r->k, "-p-b-000000000003-000000000005.jsonl.zst"),
                  1);
    rig_close(r);
}

TEST(two_instances_one_queue_and_only_one_of_them_commits)
{
    struct rig *r = rig_open();
    struct lease_config lc;
    struct err err;
    bool taken = true;
    char who[64];

    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    memset(&lc, 0, sizeof(lc));
    lc.sink = "default";
    lc.queue = "orders";
    lc.instance = "node-2";
    lc.ttl_ms = 30000;
    struct lease *other = lease_new(&lc, &r->b, &err);
    if (other == NULL) {
        abort();
    }
    EXPECT_EQ_I64(lease_acquire(other, 1, &taken, who, sizeof(who), &err), 0);
    EXPECT(!taken);
    EXPECT_STR_EQ(who, "node-1");
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    /* node-2 runs anyway with a lease it never held */
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    struct driver *d2 = driver_new(&r->cfg, &r->b, r->s3.c, other, &err);
    if (d2 == NULL) {
        abort();
    }
    struct driver_next nx;
    int puts = r->k.puts;
    for (int i = 0; i < 50; i++) {
        driver_tick(d2, i, 1788000000000, &nx);
        if (nx.stop != DRIVER_RUNNING) {
            break;
        }
    }
    EXPECT_EQ_I64(nx.stop, DRIVER_FENCED);
    EXPECT(strstr(nx.why, "intent") != NULL);
    struct driver_status st2;
    driver_status(d2, &st2);
    EXPECT(st2.counters.commit_precondition_lost >= 1);
    EXPECT_EQ_I64(r->k.puts, puts); /* no new data key from node-2 */
    driver_free(d2);
    lease_free(other);
    /* the owner continues exactly once */
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-"), 2);
    rig_close(r);
}

TEST(a_redo_on_a_node_that_is_behind_waits_and_then_rebuilds_the_window)
{
    struct buf want;
    struct buf got;
    struct rig *r = rig_open();
    struct driver_status st;

    buf_init(&want, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    control_run(&want);
    /* an intent for window 1 = [10:00, 11:00) left by a crashed owner */
    fake_row_set(&r->f, "s3:default:orders:intent",
                 "{\"k\":1,\"tStart\":1788516000000000,\"tEnd\":"
                 "1788519600000000,\"format\":\"jsonl\",\"compression\":"
                 "\"zstd\",\"layout\":\"merged\",\"writer\":"
                 "\"queen-s3/2.0.0 jsonl+zstd\"}");
    r->f.safe_time = at("2026-09-04T10:00:00.000000Z");
    new_driver(r);
    run_until(r, -1, 40);
    EXPECT_EQ_U64(r->k.puts, 0);
    driver_status(r->d, &st);
    EXPECT(st.redo);
    seed_two_hours(&r->f);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    fingerprint(&r->k, &got);
    EXPECT_STR_EQ(got.data, want.data);
    buf_free(&want);
    buf_free(&got);
    rig_close(r);
}

TEST(a_lease_lost_during_a_window_leaves_the_pointer_where_it_was)
{
    struct rig *r = rig_open();

    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    struct fake_row *c = fake_row_must(&r->f, "s3:default:orders:committed");
    uint64_t v = c->version;
    char before[4096];
    snprintf(before, sizeof(before), "%s", c->value);
    fake_row_set(&r->f, "s3:default:orders:lease",
                 "{\"instance\":\"node-2\",\"incarnation\":"
                 "\"0000000000000000\",\"sinceMs\":5}");
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FENCED);
    EXPECT(strstr(r->next.why, "precondition") != NULL ||
           strstr(r->next.why, "intent") != NULL);
    c = fake_row_must(&r->f, "s3:default:orders:committed");
    EXPECT_EQ_U64(c->version, v);
    EXPECT_STR_EQ(c->value, before);
    EXPECT_EQ_U64(count_keys(&r->k, "/windows/"), 1);
    struct driver_status st;
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.commit_precondition_lost, 1);
    rig_close(r);
}

TEST(a_driver_whose_lease_was_lost_stops_and_says_why)
{
    struct rig *r = rig_open();

    seed_two_hours(&r->f);
    new_driver(r);
    lease_mark_lost(r->lease); /* what a renewal refused for good does */
    run_until(r, 2, 10);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FENCED);
    EXPECT_STR_EQ(r->next.why, "queue \"orders\": the broker refused the "
                               "lease renewal for good");
    EXPECT_EQ_U64(r->k.n, 0);
    rig_close(r);
}

TEST(a_manifest_of_another_writer_is_not_taken_for_the_redo)
{
    struct buf want;
    struct buf got;
    struct rig *r = rig_open();

    buf_init(&want, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    control_run(&want);
    seed_two_hours(&r->f);
    r->cfg.crash_at = DRIVER_CRASH_AFTER_UPLOAD;
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    /* rewrite the manifest as if another writer had made it */
    struct fake_object *m = NULL;
    for (size_t i = 0; i < r->k.n; i++) {
        if (strstr(r->k.objs[i].key, "windows/0000000001.json") != NULL) {
            m = &r->k.objs[i];
        }
    }
    if (m == NULL) {
        abort();
    }
    char *w = strstr(m->body.data, "queen-s3/2.0.0 jsonl+zstd");
    if (w == NULL) {
        abort();
    }
    memcpy(w, "queen-s3/0.0.0", 14);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    int puts_before = r->k.puts;
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT(r->k.puts - puts_before >= 4); /* window 1 rebuilt, then 2 */
    fingerprint(&r->k, &got);
    EXPECT_STR_EQ(got.data, want.data);
    buf_free(&want);
    buf_free(&got);
    rig_close(r);
}

TEST(an_unreadable_pointer_is_ignored_but_its_version_is_not)
{
    struct buf want;
    struct buf got;
    struct rig *r = rig_open();

    buf_init(&want, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    control_run(&want);
    seed_two_hours(&r->f);
    fake_row_set(&r->f, "s3:default:orders:intent", "{\"nonsense\":1}");
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 2);
    fingerprint(&r->k, &got);
    EXPECT_STR_EQ(got.data, want.data);
    buf_free(&want);
    buf_free(&got);
    rig_close(r);
}

TEST(a_retention_overrun_is_counted_named_and_survived)
{
    struct rig *r = rig_open();
    struct driver_status st;

    for (int i = 0; i < 3; i++) {
        fake_push(&r->f, "a", at("2026-09-04T10:05:00.000000Z") + i);
        fake_push(&r->f, "b", at("2026-09-04T10:06:00.000000Z") + i);
    }
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    /* offsets 3..5 of a arrive and go away before the driver reads them */
    for (int i = 0; i < 4; i++) {
        fake_push(&r->f, "a", at("2026-09-04T11:05:00.000000Z") + i);
    }
    fake_push(&r->f, "b", at("2026-09-04T11:06:00.000000Z"));
    fake_part(&r->f, "a")->log_start = 6;
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 3);
    EXPECT_EQ_U64(st.last_window_records, 2); /* a:6 and b:3 */
    struct fake_object *m = NULL;
    for (size_t i = 0; i < r->k.n; i++) {
        if (strstr(r->k.objs[i].key, "windows/0000000002.json") != NULL) {
            m = &r->k.objs[i];
        }
    }
    if (m == NULL) {
        abort();
    }
    EXPECT(strstr(m->body.data,
                  "\"lost\":[{\"partition\":\"a\",\"from\":3,\"to\":5}]") !=
           NULL);
    rig_close(r);
}

TEST(checkpoints_land_on_their_windows_and_never_ahead_of_the_commit)
{
    struct rig *r = rig_open();

    r->cfg.checkpoint_every = 1;
    seed_two_hours(&r->f);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/0000000001.json.zst"), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/0000000002.json.zst"), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/0000000003.json.zst"), 0);
    /* a restart loads checkpoint 2 and moves on at k = 3 */
    new_lease(r);
    new_driver(r);
    fake_push(&r->f, "a", at("2026-09-04T12:10:00.000000Z"));
    r->f.safe_time = at("2026-09-04T13:00:00.000001Z");
    run_until(r, 3, 200);
    EXPECT_EQ_I64(committed_k(r), 3);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000003-"), 1);
    rig_close(r);
}

TEST(an_unknown_queue_stops_the_task_with_a_reason)
{
    struct rig *r = rig_open();

    r->f.queue_exists = false;
    new_driver(r);
    run_until(r, 1, 50);
    EXPECT_EQ_I64(r->next.stop, DRIVER_MISSING);
    EXPECT_STR_EQ(r->next.why, "queue \"orders\" does not exist");
    EXPECT_EQ_U64(r->k.n, 0);
    rig_close(r);
}

/* Failed reads, KV calls and PUTs (past the client's attempts) only cost
 * time: the bucket ends byte for byte as in a run without them. */
static void transport_failures_case(bool overlap)
{
    struct buf want;
    struct buf got;
    struct rig *r = rig_open();

    buf_init(&want, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    control_run(&want);
    r->cfg.overlap_upload = overlap;
    seed_two_hours(&r->f);
    r->f.fail_reads = 3;
    r->f.fail_next = 2;
    r->k.fail_puts = 7; /* past the client's 6 attempts: the driver retries */
    new_driver(r);
    run_until(r, 2, 400);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 2);
    fingerprint(&r->k, &got);
    EXPECT_STR_EQ(got.data, want.data);
    buf_free(&want);
    buf_free(&got);
    rig_close(r);
}

TEST(transport_failures_only_cost_time)
{
    transport_failures_case(false);
}

/* A 403 on the first PUT stops the queue Failed, and no pointer is ever
 * written (with the overlap the PUT runs on the uploader thread and the
 * commit waits for it). */
static void non_retriable_put_case(bool overlap)
{
    struct rig *r = rig_open();

    r->cfg.overlap_upload = overlap;
    seed_two_hours(&r->f);
    r->k.fail_puts = 1;
    r->k.fail_status = 403;
    new_driver(r);
    run_until(r, 2, 100);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FAILED);
    EXPECT(strstr(r->next.why, "PUT ") != NULL);
    EXPECT_EQ_I64(committed_k(r), 0);
    EXPECT(fake_row_get(&r->f, "s3:default:orders:committed") == NULL);
    rig_close(r);
}

TEST(a_non_retriable_put_fails_the_queue)
{
    non_retriable_put_case(false);
}

TEST(a_young_window_is_abandoned_and_nothing_is_lost)
{
    struct rig *r = rig_open();
    struct driver_status st;

    fake_push(&r->f, "a", at("2026-09-04T10:05:00.000000Z"));
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    r->cfg.max_window_ms = 3600000;
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    fake_push(&r->f, "a", at("2026-09-04T11:00:03.000000Z"));
    r->f.safe_time = at("2026-09-04T11:00:05.000000Z");
    run_until(r, -1, 5);
    driver_status(r->d, &st);
    EXPECT(st.buffered_bytes > 0);
    driver_request_drain(r->d, false);
    run_until(r, -1, 50);
    EXPECT_EQ_I64(r->next.stop, DRIVER_DRAINED);
    EXPECT_EQ_I64(committed_k(r), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-"), 1);
    driver_status(r->d, &st);
    EXPECT_STR_EQ(st.state, "drained");
    /* the next owner reads the record: nothing lost */
    new_lease(r);
    new_driver(r);
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.last_window_records, 1);
    rig_close(r);
}

/* One record an hour before safeTime is aged, so worth finishing: the
 * drain commits it before the driver reports drained. */
static void worth_finishing_case(bool overlap)
{
    struct rig *r = rig_open();

    r->cfg.overlap_upload = overlap;
    fake_push(&r->f, "a", at("2026-09-04T10:10:00.000000Z"));
    r->f.safe_time = at("2026-09-04T10:50:00.000000Z");
    r->cfg.max_window_ms = 3600000;
    new_driver(r);
    run_until(r, -1, 5);
    EXPECT_EQ_I64(committed_k(r), 0);
    driver_request_drain(r->d, false);
    run_until(r, -1, 50);
    EXPECT_EQ_I64(r->next.stop, DRIVER_DRAINED);
    EXPECT_EQ_I64(committed_k(r), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    EXPECT(fake_row_get(&r->f, "s3:default:orders:committed") != NULL);
    rig_close(r);
}

TEST(a_window_worth_finishing_is_committed_before_the_exit)
{
    worth_finishing_case(false);
}

TEST(the_drain_commits_its_window_through_a_leaderless_moment)
{
    struct rig *r = rig_open();

    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_driver(r);
    /* the PUTs fail past the client's attempts: the window waits in
     * upload */
    r->k.fail_puts = 7;
    struct driver_status st;
    for (int i = 0; i < 50; i++) {
        r->now++;
        driver_tick(r->d, r->now, 1788000000000, &r->next);
        driver_status(r->d, &st);
        if (strcmp(st.state, "upload") == 0) {
            break;
        }
    }
    EXPECT_STR_EQ(st.state, "upload");
    driver_request_drain(r->d, true);
    r->f.fail_next = 6;
    run_until(r, -1, 100);
    EXPECT_EQ_I64(r->next.stop, DRIVER_DRAINED);
    EXPECT_EQ_I64(committed_k(r), 1);
    rig_close(r);
}

TEST(crash_point_names_parse)
{
    enum driver_crash c;

    EXPECT(driver_crash_parse("AFTER_INTENT", &c));
    EXPECT_EQ_I64(c, DRIVER_CRASH_AFTER_INTENT);
    EXPECT(driver_crash_parse("off", &c));
    EXPECT_EQ_I64(c, DRIVER_CRASH_NEVER);
    EXPECT(driver_crash_parse("mid_upload", &c));
    EXPECT_EQ_I64(c, DRIVER_CRASH_MID_UPLOAD);
    EXPECT(!driver_crash_parse("sometimes", &c));
}

struct seen_commits {
    int n;
    int64_t k[8];
    uint64_t records[8];
};

static void on_commit(void *arg, int64_t k, uint64_t records, uint64_t bytes,
                      uint64_t lost)
{
    struct seen_commits *s = arg;

    UNUSED(bytes);
    UNUSED(lost);
    if (s->n < 8) {
        s->k[s->n] = k;
        s->records[s->n++] = records;
    }
}

TEST(every_commit_is_reported_with_its_counts)
{
    struct rig *r = rig_open();
    struct seen_commits seen = {0};
    struct driver_status st;

    r->cfg.on_commit = on_commit;
    r->cfg.on_commit_arg = &seen;
    seed_two_hours(&r->f);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(seen.n, 2);
    EXPECT_EQ_I64(seen.k[0], 1);
    EXPECT_EQ_I64(seen.k[1], 2);
    EXPECT_EQ_U64(seen.records[0], 6);
    EXPECT_EQ_U64(seen.records[1], 6);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.windows_committed, 2);
    EXPECT_EQ_U64(st.counters.records, 12);
    EXPECT(st.counters.bytes_jsonl > 0);
    EXPECT_EQ_U64(st.counters.bytes_parquet, 0);
    EXPECT(st.has_t_end);
    EXPECT_EQ_I64(st.t_end, at("2026-09-04T12:00:00.000000Z"));
    EXPECT_STR_EQ(st.last_error, "");
    rig_close(r);
}

TEST(a_redo_committed_from_its_manifest_counts_the_manifest_records)
{
    struct rig *r = rig_open();
    struct driver_status st;

    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    r->cfg.crash_at = DRIVER_CRASH_AFTER_UPLOAD;
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    new_driver(r);
    int puts = r->k.puts;
    r->now++;
    driver_tick(r->d, r->now, 1788000000000, &r->next);
    driver_status(r->d, &st);
    EXPECT_EQ_I64(st.committed_k, 1);
    EXPECT_EQ_U64(st.counters.records, 6);
    /* Nothing of the window goes up again; only its checkpoint may (a
     * window taken from its manifest is checkpointed once the positions
     * are exact, here within the same tick). */
    EXPECT_EQ_I64(r->k.puts - puts,
                  count_keys(&r->k, "/checkpoint/0000000001.json.zst"));
    struct fake_row *c = fake_row_must(&r->f, "s3:default:orders:committed");
    EXPECT(strstr(c->value,
                  "queen/_queen/tenant=00000000-0000-0000-0000-000000000001/"
                  "queue=orders/windows/0000000001.json") != NULL);
    rig_close(r);
}

TEST(a_manifest_that_lands_while_the_redo_reads_is_taken_before_any_put)
{
    struct rig *r = rig_open();
    struct buf saved;
    struct err e;
    char mkey[1024] = "";

    seed_two_hours(&r->f);
    r->cfg.crash_at = DRIVER_CRASH_AFTER_UPLOAD;
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    /* take the manifest away: the other node's upload has not landed yet */
    buf_init(&saved, BUF_UNLIMITED);
    for (size_t i = 0; i < r->k.n; i++) {
        if (strstr(r->k.objs[i].key, "windows/0000000001.json") != NULL) {
            snprintf(mkey, sizeof(mkey), "%s", r->k.objs[i].key);
            buf_append(&saved, r->k.objs[i].body.data, r->k.objs[i].body.len,
                       &e);
            buf_free(&r->k.objs[i].body);
            r->k.objs[i] = r->k.objs[--r->k.n];
        }
    }
    ASSERT(mkey[0] != '\0');
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    r->f.safe_time = at("2026-09-04T10:30:00.000000Z"); /* behind tEnd */
    new_lease(r);
    new_driver(r);
    run_until(r, -1, 20);
    EXPECT_EQ_I64(committed_k(r), 0);
    int puts = r->k.puts;
    /* the manifest lands, and the node catches up */
    ASSERT(r->k.n < FAKE_MAX_OBJECTS);
    struct fake_object *o = &r->k.objs[r->k.n++];
    snprintf(o->key, sizeof(o->key), "%s", mkey);
    buf_init(&o->body, BUF_UNLIMITED);
    buf_append(&o->body, saved.data, saved.len, &e);
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    int w1 = 0;
    for (int i = puts; i < r->k.puts && i < 64; i++) {
        w1 += strstr(r->k.put_keys[i], "w-0000000001-") != NULL ||
              strstr(r->k.put_keys[i], "windows/0000000001.json") != NULL;
    }
    EXPECT_EQ_I64(w1, 0);
    EXPECT_EQ_U64(count_keys(&r->k, "/windows/"), 2);
    buf_free(&saved);
    rig_close(r);
}

TEST(a_forced_close_ends_the_window_early)
{
    struct rig *r = rig_open();

    fake_push(&r->f, "a", at("2026-09-04T10:05:00.000000Z"));
    r->f.safe_time = at("2026-09-04T10:06:00.000000Z");
    r->cfg.max_window_ms = 3600000;
    new_driver(r);
    run_until(r, -1, 10);
    EXPECT_EQ_I64(committed_k(r), 0);
    driver_force_close(r->d);
    run_until(r, 1, 50);
    EXPECT_EQ_I64(committed_k(r), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    rig_close(r);
}

TEST(a_drain_before_the_start_stops_at_once)
{
    struct rig *r = rig_open();

    seed_two_hours(&r->f);
    r->f.kv_never = true;
    new_driver(r);
    run_until(r, -1, 3);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    driver_request_drain(r->d, false);
    run_until(r, -1, 3);
    EXPECT_EQ_I64(r->next.stop, DRIVER_DRAINED);
    EXPECT_EQ_U64(r->k.n, 0);
    rig_close(r);
}

TEST(in_the_broker_a_crash_point_aborts_the_process)
{
    int fds[2];

    ASSERT(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        struct rig *r = rig_open();
        seed_two_hours(&r->f);
        r->cfg.crash_at = DRIVER_CRASH_AFTER_INTENT;
        r->cfg.crash_returns = false;
        new_driver(r);
        run_until(r, 2, 200);
        _exit(0); /* not reached when the crash point fires */
    }
    close(fds[1]);
    char out[8192];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof(out) - 1 &&
           (got = read(fds[0], out + n, sizeof(out) - 1 - n)) > 0) {
        n += (size_t)got;
    }
    out[n] = '\0';
    close(fds[0]);
    int status = 0;
    ASSERT(waitpid(pid, &status, 0) == pid);
    EXPECT(WIFSIGNALED(status));
    EXPECT_EQ_I64(WIFSIGNALED(status) ? WTERMSIG(status) : 0, SIGABRT);
    EXPECT(strstr(out, "QUEEN_S3_CRASH_AT fired: aborting") != NULL);
}

TEST(two_aligned_hours_become_two_windows_a_reader_can_glob)
{
    struct rig *r = rig_open();
    static const char *const keys[] = {
        "queen/tenant=00000000-0000-0000-0000-000000000001/queue=orders/"
        "dt=2026-09-04/hour=10/"
        "w-0000000001-1788516000000000-1788519600000000.jsonl.zst",
        "queen/tenant=00000000-0000-0000-0000-000000000001/queue=orders/"
        "dt=2026-09-04/hour=11/"
        "w-0000000002-1788519600000000-1788523200000000.jsonl.zst",
        "queen/_queen/tenant=00000000-0000-0000-0000-000000000001/"
        "queue=orders/windows/0000000001.json",
        "queen/_queen/tenant=00000000-0000-0000-0000-000000000001/"
        "queue=orders/checkpoint/0000000002.json.zst",
    };

    r->cfg.checkpoint_every = 2;
    seed_two_hours(&r->f);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        EXPECT(bucket_find(&r->k, keys[i]) != NULL);
    }
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/"), 1);
    struct fake_object *m = bucket_find(&r->k, keys[2]);
    if (m == NULL) {
        abort();
    }
    EXPECT(strstr(m->body.data, "\"records\":6") != NULL);
    EXPECT(strstr(m->body.data, "\"partitions\":2") != NULL);
    EXPECT(strstr(m->body.data, "\"writer\":\"queen-s3/2.0.0 jsonl+zstd\"") !=
           NULL);
    EXPECT(strstr(m->body.data, "\"sink\":\"default\"") != NULL);
    struct fake_row *c = fake_row_must(&r->f, "s3:default:orders:committed");
    EXPECT(strstr(c->value, "\"k\":2") != NULL);
    rig_close(r);
}

TEST(a_pointer_write_that_landed_although_its_call_timed_out_is_kept)
{
    struct buf want;
    struct buf got;
    struct rig *r = rig_open();
    struct driver_status st;

    buf_init(&want, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    control_run(&want);
    seed_two_hours(&r->f);
    new_driver(r);
    /* every write batch lands and then answers a timeout, twice in a row:
     * the intent and the commit of window 1 */
    r->f.land_then_fail = 2;
    run_until(r, 2, 300);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 2);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.commit_precondition_lost, 0);
    fingerprint(&r->k, &got);
    EXPECT_STR_EQ(got.data, want.data);
    buf_free(&want);
    buf_free(&got);
    rig_close(r);
}

TEST(start_latest_skips_the_backlog_and_earliest_takes_it)
{
    struct driver_status st;

    for (int latest = 0; latest < 2; latest++) {
        struct rig *r = rig_open();
        for (int i = 0; i < 3; i++) {
            fake_push(&r->f, "a", at("2026-09-04T10:05:00.000000Z") + i);
        }
        r->f.safe_time = at("2026-09-04T11:00:00.000000Z");
        r->cfg.start = latest ? ENGINE_START_LATEST : ENGINE_START_EARLIEST;
        r->cfg.align = LAYOUT_ALIGN_DAY;
        r->cfg.max_window_ms = 2 * 86400000LL;
        new_driver(r);
        run_until(r, -1, 20);
        for (int i = 0; i < 2; i++) {
            fake_push(&r->f, "a", at("2026-09-04T11:05:00.000000Z") + i);
        }
        r->f.safe_time = at("2026-09-05T00:00:00.000001Z");
        run_until(r, 1, 200);
        EXPECT_EQ_I64(committed_k(r), 1);
        driver_status(r->d, &st);
        EXPECT_EQ_U64(st.counters.records, latest ? 2 : 5);
        rig_close(r);
    }
}

TEST(an_offset_jump_in_a_fetch_answer_is_counted_and_named)
{
    struct rig *r = rig_open();
    struct driver_status st;

    for (int i = 0; i < 3; i++) {
        fake_push(&r->f, "a", at("2026-09-04T10:05:00.000000Z") + i);
    }
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    for (int i = 0; i < 4; i++) {
        fake_push(&r->f, "a", at("2026-09-04T11:05:00.000000Z") + i);
    }
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    r->f.trim_part = "a"; /* retention runs between discovery and fetch */
    r->f.trim_to = 5;
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 2);
    EXPECT_EQ_U64(st.last_window_records, 2); /* a:5 and a:6 */
    struct fake_object *m = NULL;
    for (size_t i = 0; i < r->k.n; i++) {
        if (strstr(r->k.objs[i].key, "windows/0000000002.json") != NULL) {
            m = &r->k.objs[i];
        }
    }
    if (m == NULL) {
        abort();
    }
    EXPECT(strstr(m->body.data,
                  "\"lost\":[{\"partition\":\"a\",\"from\":3,\"to\":4}]") !=
           NULL);
    rig_close(r);
}

TEST(the_refresh_never_fences_its_own_node_and_another_owner_still_does)
{
    struct rig *r = rig_open();
    struct driver_status st;
    struct err err;
    int refreshes = 0;

    new_driver(r);
    /* one hour of records at a time, a refresh between every two ticks */
    for (int h = 0; h < 20 && r->next.stop == DRIVER_RUNNING; h++) {
        int64_t hour =
            at("2026-09-04T00:00:00.000000Z") + (int64_t)h * 3600000000;
        fake_push(&r->f, "a", hour + 1800000000);
        r->f.safe_time = hour + 3600000001;
        run_until(r, h + 1, 50);
        EXPECT_EQ_I64(lease_refresh(r->lease, &err), 0);
        refreshes++;
    }
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 20);
    EXPECT(!lease_lost(r->lease));
    EXPECT(refreshes >= 3);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.commit_precondition_lost, 0);
    fake_row_set(&r->f, "s3:default:orders:lease",
                 "{\"instance\":\"node-2\",\"incarnation\":"
                 "\"0000000000000000\",\"sinceMs\":5}");
    EXPECT_EQ_I64(lease_refresh(r->lease, &err), ERR_PRECONDITION);
    EXPECT(lease_lost(r->lease));
    run_until(r, -1, 5);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FENCED);
    rig_close(r);
}

TEST(a_redo_is_rebuilt_with_the_settings_of_its_intent)
{
    struct rig *r = rig_open();

    seed_two_hours(&r->f);
    r->cfg.crash_at = DRIVER_CRASH_AFTER_INTENT;
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    r->cfg.compression = "gzip"; /* changed while the node was down */
    new_lease(r);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "1788519600000000.jsonl.zst"), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "1788523200000000.jsonl.gz"), 1);
    struct fake_object *m = NULL;
    for (size_t i = 0; i < r->k.n; i++) {
        if (strstr(r->k.objs[i].key, "windows/0000000001.json") != NULL) {
            m = &r->k.objs[i];
        }
    }
    if (m == NULL) {
        abort();
    }
    EXPECT(strstr(m->body.data, "\"compression\":\"zstd\"") != NULL);
    rig_close(r);
}

/* ---- overlap_upload: objects go up while the next window reads -------- */

static void overlap(struct driver_config *c)
{
    c->overlap_upload = true;
}

/* The synchronous upload: every test runs the overlapped one, the mode
 * production runs (rig_open); this one is the reference it is held to. */
static void synchronous(struct driver_config *c)
{
    c->overlap_upload = false;
}

TEST(overlap_writes_the_bytes_of_the_synchronous_upload)
{
    struct buf sync_fp;
    struct buf overlap_fp;

    buf_init(&sync_fp, BUF_UNLIMITED);
    buf_init(&overlap_fp, BUF_UNLIMITED);
    tune = synchronous;
    control_run(&sync_fp);
    tune = overlap;
    control_run(&overlap_fp);
    tune = NULL;
    EXPECT(sync_fp.len > 0);
    EXPECT_STR_EQ(overlap_fp.data, sync_fp.data);
    buf_free(&sync_fp);
    buf_free(&overlap_fp);
}

TEST(overlap_every_crash_point_leaves_the_state_it_names)
{
    static const enum driver_crash points[] = {
        DRIVER_CRASH_AFTER_INTENT, DRIVER_CRASH_MID_UPLOAD,
        DRIVER_CRASH_AFTER_UPLOAD, DRIVER_CRASH_BEFORE_COMMIT,
        DRIVER_CRASH_AFTER_COMMIT};
    static const int64_t puts_w1[] = {2, 2, 0, 0, 0};

    for (size_t i = 0; i < ARRAY_LEN(points); i++) {
        int w1 = -1;
        tune = overlap;
        crash_case(points[i], &w1);
        tune = NULL;
        EXPECT_EQ_I64(w1, puts_w1[i]);
    }
}

/* What the bucket and the intent held when window k's commit landed. */
struct commit_probe {
    struct rig *r;
    int n;
    int bad; /* commits that found an object missing or a write ahead */
};

static void probe_commit(void *arg, int64_t k, uint64_t records, uint64_t bytes,
                         uint64_t lost)
{
    struct commit_probe *p = arg;
    char w[64];
    char m[64];
    char cp[64];
    char next[32];
    char next_w[64];
    struct fake_row *in = fake_row_get(&p->r->f, "s3:default:orders:intent");

    UNUSED(records);
    UNUSED(bytes);
    UNUSED(lost);
    snprintf(w, sizeof(w), "/w-%010" PRId64 "-", k);
    snprintf(next_w, sizeof(next_w), "/w-%010" PRId64 "-", k + 1);
    snprintf(m, sizeof(m), "/windows/%010" PRId64 ".json", k);
    snprintf(cp, sizeof(cp), "/checkpoint/%010" PRId64 ".json.zst", k);
    snprintf(next, sizeof(next), "\"k\":%" PRId64 ",", k + 1);
    p->n++;
    p->bad += count_keys(&p->r->k, w) != 1 || count_keys(&p->r->k, m) != 1 ||
              count_keys(&p->r->k, cp) != 0 ||
              count_keys(&p->r->k, next_w) != 0 || in == NULL ||
              strstr(in->value, next) != NULL;
}

TEST(overlap_keeps_objects_then_commit_then_checkpoint_then_next_intent)
{
    struct rig *r = rig_open();
    struct commit_probe probe = {r, 0, 0};

    r->cfg.overlap_upload = true;
    r->cfg.checkpoint_every = 1;
    r->cfg.on_commit = probe_commit;
    r->cfg.on_commit_arg = &probe;
    seed_two_hours(&r->f);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_I64(probe.n, 2);
    EXPECT_EQ_I64(probe.bad, 0);
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/0000000001.json.zst"), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/0000000002.json.zst"), 1);
    rig_close(r);
}

/* Window 2 closes while window 1 waits in upload: its objects are built
 * then, yet reach the bucket only after its intent (which follows window 1's
 * commit), and the bucket ends byte for byte as in a synchronous run. */
TEST(overlap_builds_the_next_window_while_the_one_before_goes_up)
{
    struct buf want;
    struct buf got;
    struct rig *r = rig_open();
    struct commit_probe probe = {r, 0, 0};
    struct driver_status st;

    buf_init(&want, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    control_run(&want);
    r->cfg.overlap_upload = true;
    r->cfg.on_commit = probe_commit;
    r->cfg.on_commit_arg = &probe;
    seed_two_hours(&r->f);
    r->k.fail_puts = 7; /* past the client's attempts: window 1 waits */
    new_driver(r);
    run_until(r, 2, 400);
    driver_status(r->d, &st);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(st.committed_k, 2);
    EXPECT_EQ_U64(st.counters.windows_prebuilt, 1);
    EXPECT_EQ_I64(probe.n, 2);
    EXPECT_EQ_I64(probe.bad, 0);
    fingerprint(&r->k, &got);
    EXPECT_STR_EQ(got.data, want.data);
    buf_free(&want);
    buf_free(&got);
    rig_close(r);
}

/* A window's commit in overlap makes its checkpoint due while the window's
 * objects still fail to go up: the checkpoint waits for them (a retry
 * later), and the reads the engine asked for in the same round must still
 * be run, or the engine waits for their answers forever and the queue stops
 * reading once the bucket is back. */
TEST(overlap_a_checkpoint_waiting_for_a_failed_upload_loses_no_read)
{
    struct rig *r = rig_open();

    r->cfg.checkpoint_every = 1;
    seed_two_hours(&r->f);
    r->k.fail_puts = 18; /* three passes of the client's 6 attempts */
    new_driver(r);
    run_until(r, 2, 400);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 2);
    fake_push(&r->f, "a", at("2026-09-04T12:05:00.000000Z"));
    r->f.safe_time = at("2026-09-04T13:00:00.000001Z");
    run_until(r, 3, 400);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 3);
    rig_close(r);
}

TEST(overlap_transport_failures_only_cost_time)
{
    transport_failures_case(true);
}

TEST(overlap_a_non_retriable_put_fails_the_queue_before_its_commit)
{
    non_retriable_put_case(true);
}

/* Overlap on, the two hours seeded, window 1 (hour 10) waiting in upload
 * on failing PUTs: the status then. */
static struct driver_status window_one_in_upload(struct rig *r)
{
    struct driver_status st;

    r->cfg.overlap_upload = true;
    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    r->k.fail_puts = 7; /* the window waits in upload */
    memset(&st, 0, sizeof(st));
    for (int i = 0; i < 50; i++) {
        r->now++;
        driver_tick(r->d, r->now, 1788000000000, &r->next);
        driver_status(r->d, &st);
        if (strcmp(st.state, "upload") == 0) {
            break;
        }
    }
    EXPECT_STR_EQ(st.state, "upload");
    return st;
}

TEST(overlap_a_drain_during_the_upload_commits_that_window_only)
{
    struct rig *r = rig_open();
    struct driver_status st = window_one_in_upload(r);

    EXPECT_EQ_I64(st.committed_k, 0);
    EXPECT_EQ_I64(st.k, 1);
    driver_request_drain(r->d, false);
    r->f.safe_time =
        at("2026-09-04T12:00:00.000001Z"); /* hour 11 could close */
    r->f.fail_next = 6;
    run_until(r, -1, 100);
    EXPECT_EQ_I64(r->next.stop, DRIVER_DRAINED);
    EXPECT_EQ_I64(committed_k(r), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000002-"), 0);
    rig_close(r);
}

/* A give-back drain that starts while a window goes up, with the next
 * window's records read already: once the engine can close that next
 * window it hands out its intent, which the drain does not run (one window
 * a drain). The drain must still end, drained, once the window going up is
 * committed; a queue left "draining" kept its lease and went stale for good
 * (a 3-node audit: a held PUT, then the give-back). */
TEST(overlap_a_drain_ends_when_the_engine_offers_a_window_it_will_not_close)
{
    struct rig *r = rig_open();
    struct driver_status st = window_one_in_upload(r);

    EXPECT_EQ_I64(st.k, 1);
    /* hour 11 is read meanwhile and can close now */
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    for (int i = 0; i < 5; i++) {
        r->now++;
        driver_tick(r->d, r->now, 1788000000000, &r->next);
    }
    driver_request_drain(r->d, true);
    run_until(r, -1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_DRAINED);
    EXPECT_EQ_I64(committed_k(r), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000002-"), 0);
    /* nothing of window 2 written: the intent row still names window 1 */
    struct fake_row *in = fake_row_get(&r->f, "s3:default:orders:intent");
    EXPECT(in != NULL && strstr(in->value, "\"k\":1,") != NULL);
    rig_close(r);
}

TEST(overlap_a_window_worth_finishing_is_committed_before_the_exit)
{
    worth_finishing_case(true);
}

/* ---- issue 13: loss bookkeeping ----------------------------------------- */

static struct fake_object *manifest_of(struct rig *r, int64_t k)
{
    char want[64];

    snprintf(want, sizeof(want), "windows/%010" PRId64 ".json", k);
    for (size_t i = 0; i < r->k.n; i++) {
        if (strstr(r->k.objs[i].key, want) != NULL) {
            return &r->k.objs[i];
        }
    }
    return NULL;
}

/* Window 1 commits a's 0..2; then a's 3..5 arrive and are trimmed before
 * the driver reads them, and nothing follows. safeTime 11:02: not a window
 * yet. */
static struct rig *trimmed_after_window_1(void)
{
    struct rig *r = rig_open();

    for (int i = 0; i < 3; i++) {
        fake_push(&r->f, "a", at("2026-09-04T10:05:00.000000Z") + i);
    }
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    for (int i = 0; i < 3; i++) {
        fake_push(&r->f, "a", at("2026-09-04T11:01:00.000000Z") + i);
    }
    fake_part(&r->f, "a")->log_start = 6;
    r->f.safe_time = at("2026-09-04T11:02:00.000000Z");
    return r;
}

/* Item 1: counted when found, and in the bucket within one max window age
 * in a window of its own (a manifest with no objects). */
TEST(loss_with_no_record_after_it_is_counted_at_once_and_gets_a_window)
{
    struct rig *r = trimmed_after_window_1();
    struct driver_status st;
    struct fake_object *m;

    run_until(r, 2, 50);
    driver_status(r->d, &st);
    EXPECT_EQ_I64(st.committed_k, 1);
    EXPECT_EQ_U64(st.counters.records_lost, 3);         /* found: counted */
    r->f.safe_time = at("2026-09-04T11:06:00.000000Z"); /* past 5 min */
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 3); /* not twice */
    EXPECT_EQ_U64(st.last_window_records, 0);
    m = manifest_of(r, 2);
    EXPECT(m != NULL);
    if (m != NULL) {
        EXPECT(strstr(m->body.data, "\"objects\":[]") != NULL);
        EXPECT(strstr(m->body.data, "\"records\":0,") != NULL);
        EXPECT(strstr(m->body.data, "\"lost\":[{\"partition\":\"a\","
                                    "\"from\":3,\"to\":5}]") != NULL);
    }
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000002-"), 0);
    rig_close(r);
}

/* Item 1: a loss found and then a restart before its window: the next run
 * finds it again from the positions kept when it was found, and it lands
 * once. */
TEST(loss_found_before_a_restart_lands_once_after_it)
{
    struct rig *r = trimmed_after_window_1();
    struct driver_status st;
    struct fake_object *m;

    run_until(r, 2, 50);
    EXPECT_EQ_I64(committed_k(r), 1);
    new_lease(r); /* the process restarts: nothing of memory is left */
    new_driver(r);
    r->f.safe_time = at("2026-09-04T11:06:00.000000Z");
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 3);
    m = manifest_of(r, 2);
    EXPECT(m != NULL);
    if (m != NULL) {
        EXPECT(strstr(m->body.data, "\"lost\":[{\"partition\":\"a\","
                                    "\"from\":3,\"to\":5}]") != NULL);
    }
    /* and a restart after that window does not report it again */
    new_lease(r);
    new_driver(r);
    fake_push(&r->f, "a", at("2026-09-04T12:10:00.000000Z"));
    r->f.safe_time = at("2026-09-04T13:00:00.000001Z");
    run_until(r, 3, 200);
    EXPECT_EQ_I64(committed_k(r), 3);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 0);
    m = manifest_of(r, 3);
    EXPECT(m != NULL && strstr(m->body.data, "\"lost\":[]") != NULL);
    rig_close(r);
}

/* Item 1: a crash after the intent of the lost ranges' window: the redo
 * carries them, once. */
TEST(loss_a_window_of_lost_ranges_alone_is_redone_after_a_crash)
{
    struct rig *r = trimmed_after_window_1();
    struct fake_object *m;

    run_until(r, 2, 50); /* found */
    r->cfg.crash_at = DRIVER_CRASH_AFTER_INTENT;
    new_lease(r);
    new_driver(r);
    r->f.safe_time = at("2026-09-04T11:06:00.000000Z");
    run_until(r, 2, 200);
    EXPECT(r->next.stop == DRIVER_CRASHED);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    m = manifest_of(r, 2);
    EXPECT(m != NULL);
    if (m != NULL) {
        EXPECT(strstr(m->body.data, "\"objects\":[]") != NULL);
        EXPECT(strstr(m->body.data, "\"lost\":[{\"partition\":\"a\","
                                    "\"from\":3,\"to\":5}]") != NULL);
    }
    rig_close(r);
}

/* Item 1: the sink stops (SIGTERM) with window 1 committed; while it is
 * down, records arrive and retention trims them; nothing follows. The
 * drain checkpointed the positions at the commit pointer, so the next run
 * finds exactly the trimmed range and carries it to the bucket. */
/* Three records of a at 10:05, window 1 committed, then a graceful stop
 * (drained). */
static void one_window_then_drained(struct rig *r)
{
    for (int i = 0; i < 3; i++) {
        fake_push(&r->f, "a", at("2026-09-04T10:05:00.000000Z") + i);
    }
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    driver_request_drain(r->d, false);
    run_until(r, -1, 200);
    EXPECT(r->next.stop == DRIVER_DRAINED);
}

/* A restart whose manifest GETs the bucket refuses (403: a key that may
 * write but not read, a policy) fails the queue, to be tried again later
 * (docs/design/protocol.md §7), with the GET in its error; it does not stay
 * "restoring" for ever. A 503 there is retried in place. */
TEST(a_start_whose_manifest_gets_are_refused_fails_the_queue)
{
    static const int statuses[] = {403, 503};

    for (size_t i = 0; i < 2; i++) {
        struct rig *r = rig_open();
        struct driver_status st;

        r->cfg.checkpoint_every = 1000; /* the start reads manifest 1 */
        one_window_then_drained(r);
        r->k.fail_gets = 1000;
        r->k.fail_get_status = statuses[i];
        new_lease(r);
        new_driver(r);
        run_until(r, -1, 50);
        driver_status(r->d, &st);
        if (statuses[i] == 403) {
            EXPECT_EQ_I64(r->next.stop, DRIVER_FAILED);
            EXPECT(strstr(st.last_error, "GET ") != NULL);
            EXPECT(strstr(st.last_error, "windows/0000000001.json") != NULL);
            EXPECT(strstr(st.last_error, "403") != NULL);
        } else {
            EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
            EXPECT_STR_EQ(st.state, "restoring");
            r->k.fail_gets = 0; /* the bucket is back: the start goes on */
            fake_push(&r->f, "a", at("2026-09-04T11:05:00.000000Z"));
            r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
            run_until(r, 2, 400);
            EXPECT_EQ_I64(committed_k(r), 2);
        }
        rig_close(r);
    }
}

/* A redo's start whose GETs the bucket refuses for good (a 400 here; a 403
 * is a missing key without s3:ListBucket) fails the queue, naming the GET,
 * at every crash point that leaves a redo; nothing of the window is PUT. */
TEST(a_redo_whose_start_gets_are_refused_fails_the_queue)
{
    static const enum driver_crash points[] = {
        DRIVER_CRASH_AFTER_INTENT, DRIVER_CRASH_MID_UPLOAD,
        DRIVER_CRASH_AFTER_UPLOAD, DRIVER_CRASH_BEFORE_COMMIT};

    for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
        struct rig *r = rig_open();
        struct driver_status st;

        seed_two_hours(&r->f);
        r->cfg.crash_at = points[i];
        new_driver(r);
        run_until(r, 2, 200);
        EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
        r->cfg.crash_at = DRIVER_CRASH_NEVER;
        r->k.fail_gets = 1000;
        r->k.fail_get_status = 400;
        int puts = r->k.puts;
        new_lease(r);
        new_driver(r);
        run_until(r, -1, 50);
        driver_status(r->d, &st);
        EXPECT_EQ_I64(r->next.stop, DRIVER_FAILED);
        EXPECT(strstr(st.last_error, "GET ") != NULL);
        EXPECT(strstr(st.last_error, "400") != NULL);
        EXPECT_EQ_I64(r->k.puts, puts);
        EXPECT_EQ_I64(pointer_k(r), 0);
        rig_close(r);
    }
}

TEST(loss_while_the_sink_is_down_is_found_after_a_graceful_restart)
{
    struct rig *r = rig_open();
    struct driver_status st;
    struct fake_object *m;

    one_window_then_drained(r);
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/0000000001.json.zst"), 1);
    for (int i = 0; i < 3; i++) { /* while it is down */
        fake_push(&r->f, "a", at("2026-09-04T11:01:00.000000Z") + i);
    }
    fake_part(&r->f, "a")->log_start = 6;
    r->f.safe_time = at("2026-09-04T11:06:00.000000Z");
    new_lease(r);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 3);
    m = manifest_of(r, 2);
    EXPECT(m != NULL);
    if (m != NULL) {
        EXPECT(strstr(m->body.data, "\"objects\":[]") != NULL);
        EXPECT(strstr(m->body.data, "\"lost\":[{\"partition\":\"a\","
                                    "\"from\":3,\"to\":5}]") != NULL);
    }
    rig_close(r);
}

/* Item 1: a crash before the commit of a window of lost ranges alone: the
 * restart commits it from its manifest (no object to find), and the run
 * after does not report the loss again. */
TEST(loss_a_window_of_lost_ranges_alone_commits_from_its_manifest)
{
    struct rig *r = trimmed_after_window_1();
    struct driver_status st;
    struct fake_object *m;

    run_until(r, 2, 50); /* found */
    r->cfg.crash_at = DRIVER_CRASH_BEFORE_COMMIT;
    new_lease(r);
    new_driver(r);
    r->f.safe_time = at("2026-09-04T11:06:00.000000Z");
    run_until(r, 2, 200);
    EXPECT(r->next.stop == DRIVER_CRASHED);
    EXPECT_EQ_I64(committed_k(r), 1);
    EXPECT(manifest_of(r, 2) != NULL);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    m = manifest_of(r, 2);
    EXPECT(m != NULL && strstr(m->body.data, "\"objects\":[]") != NULL);
    new_lease(r);
    new_driver(r);
    fake_push(&r->f, "a", at("2026-09-04T12:10:00.000000Z"));
    r->f.safe_time = at("2026-09-04T13:00:00.000001Z");
    run_until(r, 3, 200);
    EXPECT_EQ_I64(committed_k(r), 3);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 0);
    m = manifest_of(r, 3);
    EXPECT(m != NULL && strstr(m->body.data, "\"lost\":[]") != NULL);
    rig_close(r);
}

/* Item 1: a crash right after the commit of a window of lost ranges, before
 * its checkpoint: the restart reads that window's manifest and does not
 * report its lost ranges again. */
TEST(loss_committed_just_before_a_crash_is_not_reported_again)
{
    struct rig *r = trimmed_after_window_1();
    struct driver_status st;
    struct fake_object *m;

    run_until(r, 2, 50); /* found */
    r->cfg.crash_at = DRIVER_CRASH_AFTER_COMMIT;
    new_lease(r);
    new_driver(r);
    r->f.safe_time = at("2026-09-04T11:06:00.000000Z");
    run_until(r, 2, 200);
    EXPECT(r->next.stop == DRIVER_CRASHED);
    EXPECT_EQ_I64(pointer_k(r), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/0000000002.json.zst"), 0);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    new_driver(r);
    fake_push(&r->f, "a", at("2026-09-04T12:10:00.000000Z"));
    r->f.safe_time = at("2026-09-04T13:00:00.000001Z");
    run_until(r, 3, 200);
    EXPECT_EQ_I64(committed_k(r), 3);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 0);
    m = manifest_of(r, 3);
    EXPECT(m != NULL && strstr(m->body.data, "\"lost\":[]") != NULL);
    EXPECT_EQ_U64(st.last_window_records, 1);
    rig_close(r);
}

/* Item 2: windows 1..3 of a, a checkpoint at 2 (every 2) and none at 3;
 * then the process dies, a's 9..11 arrive and retention trims 0..11 before
 * the next run reads. Only 9..11 were never committed: the checkpoint plus
 * manifest 3's positions put a at 9 exactly, so 6..8 (window 3's) are not
 * reported lost. */
static void committed_records_are_never_reported_lost(bool with_checkpoint)
{
    struct rig *r = rig_open();
    struct driver_status st;
    struct fake_object *m;
    const char *hours[3] = {"2026-09-04T10:05:00.000000Z",
                            "2026-09-04T11:05:00.000000Z",
                            "2026-09-04T12:05:00.000000Z"};

    r->cfg.checkpoint_every = with_checkpoint ? 2 : 0;
    new_driver(r);
    for (int w = 0; w < 3; w++) {
        for (int i = 0; i < 3; i++) {
            fake_push(&r->f, "a", at(hours[w]) + i);
        }
        r->f.safe_time = at(hours[w]) + 55 * 60 * (int64_t)1000000;
        run_until(r, w + 1, 200);
        EXPECT_EQ_I64(committed_k(r), w + 1);
    }
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/0000000002.json.zst"),
                  with_checkpoint ? 1 : 0);
    EXPECT_EQ_U64(count_keys(&r->k, "/checkpoint/0000000003.json.zst"), 0);
    m = manifest_of(r, 3);
    EXPECT(m != NULL &&
           strstr(m->body.data, "\"positions\":[[\"a\",9,") != NULL);
    for (int i = 0; i < 3; i++) { /* while it is down */
        fake_push(&r->f, "a", at("2026-09-04T13:01:00.000000Z") + i);
    }
    fake_part(&r->f, "a")->log_start = 12;
    r->f.safe_time = at("2026-09-04T13:06:00.000000Z");
    new_lease(r); /* kill -9: no drain, no checkpoint */
    new_driver(r);
    run_until(r, 4, 200);
    EXPECT_EQ_I64(committed_k(r), 4);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 3);
    m = manifest_of(r, 4);
    EXPECT(m != NULL);
    if (m != NULL) {
        EXPECT(strstr(m->body.data, "\"objects\":[]") != NULL);
        EXPECT(strstr(m->body.data, "\"lost\":[{\"partition\":\"a\","
                                    "\"from\":9,\"to\":11}]") != NULL);
    }
    rig_close(r);
}

TEST(loss_a_checkpoint_older_than_the_pointer_reports_only_the_uncommitted)
{
    committed_records_are_never_reported_lost(true);
}

TEST(loss_no_checkpoint_at_all_still_reports_the_uncommitted_exactly)
{
    committed_records_are_never_reported_lost(false);
}

/* Item 2: a crash after the upload leaves window 4's manifest; a trim
 * while the node is down takes window 4's records. The start commits window
 * 4 from its manifest, so it starts from that manifest's positions: the
 * trimmed records are in the lake, not lost (found by the soak). */
TEST(loss_a_redo_committed_from_its_manifest_reports_nothing_lost)
{
    struct rig *r = rig_open();
    struct driver_status st;
    struct fake_object *m;

    r->cfg.checkpoint_every = 2;
    new_driver(r);
    for (int w = 0; w < 4; w++) {
        for (int i = 0; i < 3; i++) {
            fake_push(&r->f, "a",
                      at("2026-09-04T10:05:00.000000Z") +
                          w * 3600 * (int64_t)1000000 + i);
        }
        r->f.safe_time =
            at("2026-09-04T10:59:00.000000Z") + w * 3600 * (int64_t)1000000;
        if (w == 3) {
            r->cfg.crash_at = DRIVER_CRASH_AFTER_UPLOAD;
            new_driver(r);
        }
        run_until(r, w + 1, 200);
    }
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    EXPECT_EQ_I64(committed_k(r), 3);
    EXPECT(manifest_of(r, 4) != NULL);
    /* while it is down: one record after window 4, and a trim of window
     * 4's records */
    fake_push(&r->f, "a", at("2026-09-04T14:05:00.000000Z"));
    fake_part(&r->f, "a")->log_start = 12;
    r->f.safe_time = at("2026-09-04T14:59:00.000000Z");
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    new_driver(r);
    run_until(r, 5, 200);
    EXPECT_EQ_I64(committed_k(r), 5);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 0);
    m = manifest_of(r, 5);
    EXPECT(m != NULL && strstr(m->body.data, "\"lost\":[]") != NULL);
    rig_close(r);
}

/* Item 2: a manifest of the stretch is missing (deleted by hand): the
 * start says so and goes on from the checkpoint alone, never stuck. */
TEST(loss_a_missing_manifest_falls_back_to_the_checkpoint)
{
    struct rig *r = rig_open();
    struct fake_object *m;

    r->cfg.checkpoint_every = 2;
    new_driver(r);
    for (int w = 0; w < 3; w++) {
        fake_push(&r->f, "a",
                  at("2026-09-04T10:05:00.000000Z") +
                      w * 3600 * (int64_t)1000000);
        r->f.safe_time =
            at("2026-09-04T10:59:00.000000Z") + w * 3600 * (int64_t)1000000;
        run_until(r, w + 1, 200);
    }
    EXPECT_EQ_I64(committed_k(r), 3);
    m = manifest_of(r, 3);
    ASSERT(m != NULL);
    m->key[0] = '#'; /* no longer found under its key */
    fake_push(&r->f, "a", at("2026-09-04T13:05:00.000000Z"));
    r->f.safe_time = at("2026-09-04T13:59:00.000000Z");
    new_lease(r);
    new_driver(r);
    run_until(r, 4, 200);
    EXPECT_EQ_I64(committed_k(r), 4);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000004-"), 1);
    rig_close(r);
}

/* ---- issue 13 item 5: no fixed cap on the sink's own documents ---------- */

/* Window k's manifest again with lost ranges enough to pass 64 MiB (a
 * window of ~300k partitions writes as much), its own lost ranges first:
 * the same window, its intent still matches. */
static void grow_manifest_past_64_mib(struct rig *r, int64_t k)
{
    struct fake_object *o = manifest_of(r, k);
    struct docs_manifest m;
    struct buf arena;
    struct buf out;
    struct err e;
    size_t n = 300000;
    char(*names)[201] = xcalloc(n, sizeof(*names));
    struct docs_lost *lost;

    ASSERT(o != NULL);
    buf_init(&arena, BUF_UNLIMITED);
    buf_init(&out, BUF_UNLIMITED);
    ASSERT(docs_manifest_decode(o->body.data, o->body.len, &m, &arena, &e) ==
           0);
    lost = xcalloc(m.n_lost + n, sizeof(*lost));
    memcpy(lost, m.lost, m.n_lost * sizeof(*lost));
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(names[i], sizeof(names[i]), "lost-%07zu-", i);
        memset(names[i] + w, 'x', sizeof(names[i]) - 1 - (size_t)w);
        lost[m.n_lost + i] =
            (struct docs_lost){{names[i], sizeof(names[i]) - 1}, 0, 0};
    }
    m.lost = lost;
    m.n_lost += n;
    ASSERT(docs_manifest_encode(&out, &m, &e) == 0);
    ASSERT(out.len > ((size_t)64 << 20));
    buf_free(&o->body);
    o->body = out;
    o->gets = 0;
    buf_free(&arena);
    free(lost);
    free(names);
}

static void big_manifest_case(bool overlap)
{
    struct rig *r = rig_open();
    struct driver_status st;

    r->cfg.overlap_upload = overlap;
    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    r->cfg.crash_at = DRIVER_CRASH_AFTER_UPLOAD;
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    grow_manifest_past_64_mib(r, 1);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    new_driver(r);
    int puts = r->k.puts;
    run_until(r, 1, 20);
    driver_status(r->d, &st);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(st.committed_k, 1);
    EXPECT_EQ_U64(st.counters.records, 6);
    EXPECT_STR_EQ(st.last_error, "");
    /* committed from the manifest: read once, nothing of it put again */
    struct fake_object *o = manifest_of(r, 1);
    EXPECT(o != NULL && o->gets == 1);
    EXPECT(r->k.puts < 64);
    for (int i = puts; i < r->k.puts; i++) { /* its checkpoint may go up */
        EXPECT(strstr(r->k.put_keys[i], "/checkpoint/") != NULL);
    }
    rig_close(r);
}

TEST(a_redo_whose_manifest_is_past_64_mib_commits_from_it_reading_it_once)
{
    big_manifest_case(true);
    big_manifest_case(false);
}

/* load_committed_lost: the last committed window's manifest, past 64 MiB,
 * is still read at a restart with no checkpoint after it, so the loss it
 * names is not reported again. */
TEST(a_committed_manifest_past_64_mib_still_keeps_its_loss_from_a_recount)
{
    struct rig *r = trimmed_after_window_1();
    struct driver_status st;

    run_until(r, 2, 50); /* found */
    r->cfg.crash_at = DRIVER_CRASH_AFTER_COMMIT;
    new_lease(r);
    new_driver(r);
    r->f.safe_time = at("2026-09-04T11:06:00.000000Z");
    run_until(r, 2, 200);
    EXPECT(r->next.stop == DRIVER_CRASHED);
    EXPECT_EQ_I64(pointer_k(r), 2);
    grow_manifest_past_64_mib(r, 2);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    new_driver(r);
    fake_push(&r->f, "a", at("2026-09-04T12:10:00.000000Z"));
    r->f.safe_time = at("2026-09-04T13:00:00.000001Z");
    run_until(r, 3, 200);
    EXPECT_EQ_I64(committed_k(r), 3);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 0);
    struct fake_object *m = manifest_of(r, 2);
    EXPECT(m != NULL && m->gets == 1);
    m = manifest_of(r, 3);
    EXPECT(m != NULL && strstr(m->body.data, "\"lost\":[]") != NULL);
    rig_close(r);
}

/* The one real limit of a manifest, what the sink can read back (2 GiB,
 * lowered here): the queue fails at once, naming it and the settings that
 * avoid it, before any PUT of the window; nothing is retried. */
static void manifest_limit_case(bool overlap)
{
    struct rig *r = rig_open();
    struct driver_status st;

    r->cfg.overlap_upload = overlap;
    r->cfg.per_partition = true;
    r->cfg.manifest_max_bytes = 600;
    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FAILED);
    EXPECT(strstr(r->next.why, "window 1: its manifest takes ") != NULL);
    EXPECT(strstr(r->next.why, "what the sink can read back of 600") != NULL);
    EXPECT(strstr(r->next.why, "QUEEN_S3_LAYOUT=merged") != NULL);
    EXPECT(strstr(r->next.why, "QUEEN_S3_MAX_WINDOW_MS") != NULL);
    driver_status(r->d, &st);
    EXPECT_STR_EQ(st.state, "failed");
    EXPECT_STR_EQ(st.last_error, r->next.why);
    EXPECT_EQ_I64(r->k.writes, 0);
    EXPECT_EQ_I64(pointer_k(r), 0);
    /* stopped: further ticks send and read nothing */
    run_until(r, 1, 20);
    EXPECT_EQ_I64(r->k.writes, 0);
    /* the same window under the limit commits */
    r->cfg.manifest_max_bytes = 0;
    new_lease(r);
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    rig_close(r);
}

TEST(a_manifest_past_what_the_sink_can_read_fails_the_queue_naming_it)
{
    manifest_limit_case(true);
    manifest_limit_case(false);
}

/* A window whose manifest cannot fit whatever its keys (one object per
 * partition, here 2 x at least 160 bytes) fails before its intent pins
 * the layout, so the setting the message names takes it. */
TEST(a_manifest_that_cannot_fit_fails_before_the_intent_and_merged_takes_it)
{
    struct rig *r = rig_open();

    r->cfg.per_partition = true;
    r->cfg.manifest_max_bytes = 300;
    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FAILED);
    EXPECT(strstr(r->next.why, "window 1: its manifest takes at least 320 "
                               "bytes, over what the sink can read back of "
                               "300; set QUEEN_S3_LAYOUT=merged") != NULL);
    EXPECT(fake_row_get(&r->f, "s3:default:orders:intent") == NULL);
    EXPECT_EQ_I64(r->k.writes, 0);
    r->cfg.per_partition = false;    /* QUEEN_S3_LAYOUT=merged */
    r->cfg.manifest_max_bytes = 800; /* per-partition takes over 1052 */
    new_lease(r);
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 1);
    struct fake_object *m = manifest_of(r, 1);
    EXPECT(m != NULL && m->body.len <= 800);
    rig_close(r);
}

/* ---- issue 13 item 13c: no PUT from a lease past TTL - margin ----------- */

/* Every PUT or POST takes 5 s of the lease's clock; from the first one the
 * KV store is out of reach (no renewal lands) unless renew is set, where
 * each one renews the lease first, as the host's refresher would. */
struct slow_bucket {
    struct rig *r;
    bool renew;
    int64_t first; /* the clock at the first write, -1 before */
    int64_t last;  /* the clock at the last write */
};

static void slow_write(void *arg)
{
    struct slow_bucket *sb = arg;
    struct err err;

    if (sb->renew) {
        EXPECT_EQ_I64(lease_refresh(sb->r->lease, &err), 0);
    } else {
        sb->r->f.kv_never = true;
    }
    sb->last = atomic_load(&test_mono);
    if (sb->first < 0) {
        sb->first = sb->last;
    }
    atomic_fetch_add(&test_mono, 5000);
}

static struct rig *slow_upload_rig(bool overlap, struct slow_bucket *sb)
{
    struct rig *r = xcalloc(1, sizeof(*r));

    atomic_store(&test_mono, 1000000);
    r->test_clock = true;
    fake_init(&r->f, "orders");
    fake_broker_seam(&r->f, &r->b);
    fake_s3_open(&r->s3, &r->k);
    driver_config_defaults(&r->cfg);
    memcpy(r->cfg.tenant, STORE_DEFAULT_TENANT, 16);
    r->cfg.tenant_text = "00000000-0000-0000-0000-000000000001";
    r->cfg.queue = "orders";
    r->cfg.guard_ms = 0;
    r->cfg.checkpoint_every = 0;
    r->cfg.crash_returns = true;
    r->cfg.overlap_upload = overlap;
    new_lease(r);
    *sb = (struct slow_bucket){r, false, -1, -1};
    r->k.on_write = slow_write;
    r->k.on_write_arg = sb;
    /* a long upload: its PUTs answer 503 (each attempt is a write) */
    r->k.fail_puts = 1000;
    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    return r;
}

static void stale_lease_case(bool overlap)
{
    struct slow_bucket sb;
    struct rig *r = slow_upload_rig(overlap, &sb);
    struct driver_status st;

    /* TTL 30 s, margin 6 s: the intent's fence was the last renewal, sent
     * at the clock of the first write; PUTs at +0, 5, 10, 15, 20 s only */
    EXPECT_EQ_I64(lease_margin_ms(30000), 6000);
    new_driver(r);
    run_until(r, 1, 400);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FENCED);
    EXPECT(strstr(r->next.why, "lease expired here") != NULL);
    EXPECT_EQ_I64(r->k.writes, 5);
    EXPECT(sb.first >= 0 && sb.last - sb.first < 30000 - 6000);
    EXPECT(lease_lost(r->lease));
    driver_status(r->d, &st);
    EXPECT_STR_EQ(st.state, "fenced");
    EXPECT(strstr(st.last_error, "lease expired here") != NULL);
    EXPECT_EQ_I64(pointer_k(r), 0);
    EXPECT_EQ_U64(r->k.n, 0);
    /* stopped: further ticks send nothing */
    run_until(r, 1, 20);
    EXPECT_EQ_I64(r->k.writes, 5);
    /* the queue is taken over (a new claim; here this node's, with a new
     * incarnation): window 1 lands once, whole */
    r->k.on_write = NULL;
    r->k.fail_puts = 0;
    r->f.kv_never = false;
    new_lease(r);
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 1);
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records, 6);
    EXPECT_EQ_U64(count_keys(&r->k, "/windows/"), 1);
    rig_close(r);
}

TEST(a_lease_past_its_ttl_less_the_margin_sends_no_put_and_fences)
{
    stale_lease_case(true); /* the uploader thread's PUTs */
    stale_lease_case(false);
}

static void renewed_lease_case(bool overlap)
{
    struct slow_bucket sb;
    struct rig *r = slow_upload_rig(overlap, &sb);

    sb.renew = true;
    r->k.fail_puts = 12; /* 60 s of failing PUTs, then they land */
    new_driver(r);
    run_until(r, 1, 400);
    EXPECT_EQ_I64(r->next.stop, DRIVER_RUNNING);
    EXPECT_EQ_I64(committed_k(r), 1);
    EXPECT(sb.last - sb.first > 30000);
    EXPECT(!lease_lost(r->lease));
    rig_close(r);
}

TEST(a_lease_renewed_all_along_a_long_upload_never_stops_it)
{
    renewed_lease_case(true);
    renewed_lease_case(false);
}

/* ---- issue 13 item 3: a redo writes the keys its intent pins ------------ */

/* Crash in window 1 at `point` with the rig's settings, change them with
 * `now`, restart, and run until window 2 commits. */
static struct rig *redo_after_change(enum driver_crash point,
                                     void (*before)(struct driver_config *),
                                     void (*now)(struct driver_config *))
{
    struct rig *r = rig_open();

    if (before != NULL) {
        before(&r->cfg);
    }
    seed_two_hours(&r->f);
    r->cfg.crash_at = point;
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    now(&r->cfg);
    new_lease(r);
    new_driver(r);
    return r;
}

static void align_day(struct driver_config *c)
{
    c->align = LAYOUT_ALIGN_DAY;
}

/* Every key of window k in the bucket names `want` and none `other`. */
static void expect_window_keys(struct rig *r, int64_t k, const char *want,
                               const char *other)
{
    char w[32];
    size_t n = 0;

    snprintf(w, sizeof(w), "/w-%010" PRId64 "-", k);
    for (size_t i = 0; i < r->k.n; i++) {
        const char *key = r->k.objs[i].key;
        if (strstr(key, w) != NULL) {
            n++;
            EXPECT(strstr(key, want) != NULL);
            EXPECT(other == NULL || strstr(key, other) == NULL);
        }
    }
    EXPECT(n > 0);
}

TEST(a_redo_keeps_the_align_of_its_intent)
{
    struct rig *r = redo_after_change(DRIVER_CRASH_MID_UPLOAD, NULL, align_day);

    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    /* window 1 only where its first attempt put it: dt=/hour=10/ */
    expect_window_keys(r, 1, "/dt=2026-09-04/hour=10/w-", NULL);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    /* the new align from the next window on */
    expect_window_keys(r, 2, "/dt=2026-09-04/w-", "/hour=");
    struct fake_row *in = fake_row_must(&r->f, "s3:default:orders:intent");
    EXPECT(strstr(in->value, "\"align\":\"day\"") != NULL);
    rig_close(r);
}

static void prefix_lake(struct driver_config *c)
{
    c->prefix = "lake/new";
}

static void prefix_lake_synchronous(struct driver_config *c)
{
    prefix_lake(c);
    c->overlap_upload = false;
}

static void prefix_case(void (*now)(struct driver_config *))
{
    struct rig *r = redo_after_change(DRIVER_CRASH_MID_UPLOAD, NULL, now);
    struct fake_row *c;

    r->f.safe_time = at("2026-09-04T11:00:00.000001Z"); /* window 1 only */
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    /* the pointer names the manifest where the redo put it */
    c = fake_row_must(&r->f, "s3:default:orders:committed");
    EXPECT(strstr(c->value, "\"queen/_queen/") != NULL);
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    expect_window_keys(r, 1, "queen/tenant=", NULL);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    EXPECT(bucket_find(&r->k, "queen/_queen/tenant=00000000-0000-0000-0000-"
                              "000000000001/queue=orders/windows/"
                              "0000000001.json") != NULL);
    expect_window_keys(r, 2, "lake/new/tenant=", NULL);
    EXPECT(bucket_find(&r->k, "lake/new/_queen/tenant=00000000-0000-0000-"
                              "0000-000000000001/queue=orders/windows/"
                              "0000000002.json") != NULL);
    c = fake_row_must(&r->f, "s3:default:orders:committed");
    EXPECT(strstr(c->value, "\"lake/new/_queen/") != NULL);
    rig_close(r);
}

TEST(a_redo_keeps_the_prefix_of_its_intent)
{
    prefix_case(prefix_lake);
}

/* The synchronous upload names the manifest at the commit: still the
 * intent's prefix for the redo. */
TEST(a_redo_keeps_the_prefix_of_its_intent_synchronously)
{
    prefix_case(prefix_lake_synchronous);
}

TEST(a_redo_keeps_the_layout_of_its_intent)
{
    struct rig *r =
        redo_after_change(DRIVER_CRASH_MID_UPLOAD, NULL, per_partition);

    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    expect_window_keys(r, 1, "/w-", "-p-"); /* merged, as its intent said */
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000002-"), 2); /* a's and b's */
    rig_close(r);
}

static void parquet_snappy_now(struct driver_config *c)
{
    snappy_parquet(c);
}

TEST(a_redo_keeps_the_format_and_codec_of_its_intent)
{
    struct rig *r =
        redo_after_change(DRIVER_CRASH_MID_UPLOAD, NULL, parquet_snappy_now);

    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "1788519600000000.jsonl.zst"), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "1788523200000000.parquet"), 1);
    rig_close(r);
}

/* Window 2 of a per-partition queue (a 3..5, b 3..5) crashes mid-upload
 * with a's object up; then a's 3 and all of b's window-2 records are
 * trimmed. The redo writes a's and b's keys exactly as the first attempt
 * named them (b's object holds no record), and the gone records are lost
 * ranges of window 2. */
static void per_partition_trim_case(size_t intent_max_bytes)
{
    struct rig *r = rig_open();
    struct fake_object *m;

    r->cfg.per_partition = true;
    r->cfg.intent_max_bytes = intent_max_bytes;
    r->cfg.checkpoint_every = 1;
    seed_two_hours(&r->f);
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(committed_k(r), 1);
    r->f.safe_time = at("2026-09-04T12:00:00.000001Z");
    r->cfg.crash_at = DRIVER_CRASH_MID_UPLOAD;
    new_lease(r);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    EXPECT_EQ_U64(count_keys(&r->k, "-p-a-000000000003-000000000005."), 1);
    struct fake_row *in = fake_row_must(&r->f, "s3:default:orders:intent");
    if (intent_max_bytes > 0) { /* the offsets went to the bucket */
        EXPECT(strstr(in->value, "\"parts\":") == NULL);
        EXPECT(strstr(in->value, "\"partsKey\":\"queen/_queen/tenant=") !=
               NULL);
        EXPECT_EQ_U64(count_keys(&r->k, "/intents/0000000002-"), 1);
    } else {
        EXPECT(strstr(in->value, "\"parts\":[[\"a\",3,5],[\"b\",3,5]]") !=
               NULL);
        EXPECT_EQ_U64(count_keys(&r->k, "/intents/"), 0);
    }
    fake_part(&r->f, "a")->log_start = 4;
    fake_part(&r->f, "b")->log_start = 6;
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    new_lease(r);
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    /* the same keys, and no other object of window 2 */
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000002-"), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "-p-a-000000000003-000000000005."), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "-p-b-000000000003-000000000005."), 1);
    m = manifest_of(r, 2);
    EXPECT(m != NULL);
    if (m != NULL) {
        EXPECT(strstr(m->body.data, "\"records\":2,") != NULL);
        EXPECT(strstr(m->body.data, "\"partitions\":1,") != NULL);
        EXPECT(strstr(m->body.data,
                      "-p-b-000000000003-000000000005.jsonl.zst\",\"bytes\":"
                      "9,\"records\":0,") != NULL);
        const char *a3 = "{\"partition\":\"a\",\"from\":3,\"to\":3}";
        const char *at3 = strstr(m->body.data, a3);
        EXPECT(at3 != NULL && strstr(at3 + 1, a3) == NULL); /* once */
        EXPECT(strstr(m->body.data,
                      "{\"partition\":\"b\",\"from\":3,\"to\":5}") != NULL);
    }
    rig_close(r);
}

TEST(a_per_partition_redo_after_a_trim_writes_the_keys_of_its_intent)
{
    per_partition_trim_case(0);
}

/* The same when the offsets outgrow the KV value: they are in the bucket,
 * named by the intent, and the redo reads them there. */
TEST(a_per_partition_redo_reads_offsets_kept_in_the_bucket)
{
    per_partition_trim_case(200);
}

TEST(a_per_partition_intent_names_each_partition_s_offsets)
{
    struct rig *r = rig_open();

    r->cfg.per_partition = true;
    seed_two_hours(&r->f);
    r->cfg.crash_at = DRIVER_CRASH_AFTER_INTENT;
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    struct fake_row *in = fake_row_must(&r->f, "s3:default:orders:intent");
    char want[256];
    snprintf(want, sizeof(want),
             "\"align\":\"hour\",\"prefix\":\"queen\",\"libraries\":\"%s\","
             "\"records\":6,\"parts\":[[\"a\",0,2],[\"b\",0,2]]}",
             jsonl_codec_library(JSONL_ZSTD));
    EXPECT(strstr(in->value, want) != NULL);
    rig_close(r);
}

/* Issue 13 item 13b: the intent names the writer string of the product
 * page and, apart, the codec library (and version) that makes the bytes. */
static void intent_names_its_libraries(void (*set)(struct driver_config *),
                                       const char *writer,
                                       const char *libraries)
{
    struct rig *r = rig_open();
    char want[256];

    if (set != NULL) {
        set(&r->cfg);
    }
    seed_two_hours(&r->f);
    r->cfg.crash_at = DRIVER_CRASH_AFTER_INTENT;
    new_driver(r);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    struct fake_row *in = fake_row_must(&r->f, "s3:default:orders:intent");
    snprintf(want, sizeof(want), "\"writer\":\"%s\",", writer);
    EXPECT(strstr(in->value, want) != NULL);
    snprintf(want, sizeof(want), ",\"libraries\":\"%s\"", libraries);
    EXPECT(strstr(in->value, want) != NULL);
    rig_close(r);
}

static void gzip_jsonl(struct driver_config *c)
{
    c->compression = "gzip";
}

static void plain_jsonl(struct driver_config *c)
{
    c->compression = "none";
}

TEST(an_intent_names_the_codec_library_apart_from_the_writer_string)
{
    char want[64];

    snprintf(want, sizeof(want), "libzstd/%s", ZSTD_versionString());
    intent_names_its_libraries(NULL, "queen-s3/2.0.0 jsonl+zstd", want);
    intent_names_its_libraries(parquet, "queen-s3/2.0.0 parquet/q2 zstd", want);
    snprintf(want, sizeof(want), "zlib/%s", zlibVersion());
    intent_names_its_libraries(gzip_jsonl, "queen-s3/2.0.0 jsonl+gzip", want);
    intent_names_its_libraries(plain_jsonl, "queen-s3/2.0.0 jsonl", "");
    intent_names_its_libraries(snappy_parquet,
                               "queen-s3/2.0.0 parquet/q2 snappy",
                               "snappy/" QUEEN_SNAPPY_VERSION);
}

/* After a first-window crash at point: a trim takes a/0 and b/0..2, and
 * the restart commits windows 1 and 2 with manifest 1 naming them lost. */
static struct rig *
first_window_redo_after_a_trim(enum driver_crash point,
                               void (*layout)(struct driver_config *))
{
    struct rig *r = redo_after_change(point, layout, layout);
    struct fake_object *m;
    struct driver_status st;

    fake_part(&r->f, "a")->log_start = 1;
    fake_part(&r->f, "b")->log_start = 3;
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    m = manifest_of(r, 1);
    EXPECT(m != NULL);
    if (m != NULL) {
        EXPECT(strstr(m->body.data,
                      "{\"partition\":\"a\",\"from\":0,\"to\":0}") != NULL);
        EXPECT(strstr(m->body.data,
                      "{\"partition\":\"b\",\"from\":0,\"to\":2}") != NULL);
    }
    driver_status(r->d, &st);
    EXPECT_EQ_U64(st.counters.records_lost, 4);
    return r;
}

/* The same in the first window, before any checkpoint: the engine knows no
 * position below the log start, the intent's offsets do. */
TEST(a_first_window_redo_after_a_trim_records_what_its_intent_held)
{
    struct rig *r =
        first_window_redo_after_a_trim(DRIVER_CRASH_MID_UPLOAD, per_partition);

    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "-p-a-000000000000-000000000002."), 1);
    EXPECT_EQ_U64(count_keys(&r->k, "-p-b-000000000000-000000000002."), 1);
    rig_close(r);
}

/* The merged layout's intent keeps no offsets: a first-window redo finds
 * no position at all, and every offset a trim took since the crash is
 * judged from 0 (the run before read them), never passed in silence. */
static void merged(struct driver_config *c)
{
    c->per_partition = false;
}

TEST(a_merged_first_window_redo_mid_upload_after_a_trim_reports_the_loss)
{
    rig_close(first_window_redo_after_a_trim(DRIVER_CRASH_MID_UPLOAD, merged));
}

TEST(a_merged_first_window_redo_after_its_intent_and_a_trim_reports_the_loss)
{
    rig_close(
        first_window_redo_after_a_trim(DRIVER_CRASH_AFTER_INTENT, merged));
}

/* ---- issue 13 item 13b: a redo of another writer's intent --------------- */

/* Another writer string in the page's form, as a later release might
 * write; and a library version this process does not run. */
#define OTHER_WRITER    "queen-s3/2.1.0 jsonl+zstd"
#define OTHER_LIBRARIES "libzstd/0.0.1"

/* Replace every `from` in s (NUL-terminated, room for cap) with `to`. */
static void replace_all(char *s, size_t cap, const char *from, const char *to)
{
    char *p;
    size_t nf = strlen(from);
    size_t nt = strlen(to);

    while ((p = strstr(s, from)) != NULL) {
        size_t rest = strlen(p + nf);
        ASSERT((size_t)(p - s) + nt + rest + 1 <= cap);
        memmove(p + nt, p + nf, rest + 1);
        memcpy(p, to, nt);
        s = p + nt; /* `to` may hold `from` */
    }
}

/* The intent's "libraries" field as this process writes it for zstd. */
static void libraries_field(char *out, size_t cap, const char *libraries)
{
    snprintf(out, cap, "\"libraries\":\"%s\"", libraries);
}

/* Crash at point; then the intent (and the manifest, if any) say another
 * writer wrote them (writer: its writer string, NULL = this node's), with
 * other libraries (libraries: the intent's value, NULL = this node's, ""
 * = the field removed, as an older node wrote it). */
static struct rig *crash_then_other(enum driver_crash point, const char *writer,
                                    const char *libraries)
{
    struct rig *r = rig_open();
    struct fake_row *in;
    struct fake_object *m;
    struct err err;
    char ours[128];

    seed_two_hours(&r->f);
    r->cfg.crash_at = point;
    new_driver(r);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_CRASHED);
    r->cfg.crash_at = DRIVER_CRASH_NEVER;
    in = fake_row_must(&r->f, "s3:default:orders:intent");
    libraries_field(ours, sizeof(ours), jsonl_codec_library(JSONL_ZSTD));
    ASSERT(strstr(in->value, ours) != NULL);
    if (libraries != NULL && libraries[0] == '\0') {
        char field[160];
        snprintf(field, sizeof(field), ",%s", ours);
        replace_all(in->value, sizeof(in->value), field, "");
    } else if (libraries != NULL) {
        char theirs[128];
        libraries_field(theirs, sizeof(theirs), libraries);
        replace_all(in->value, sizeof(in->value), ours, theirs);
    }
    m = writer != NULL ? manifest_of(r, 1) : NULL;
    if (writer != NULL) {
        replace_all(in->value, sizeof(in->value),
                    jsonl_writer_string(JSONL_ZSTD), writer);
    }
    if (m != NULL) {
        char *t = xmalloc(m->body.len + 64);
        memcpy(t, m->body.data, m->body.len);
        t[m->body.len] = '\0';
        replace_all(t, m->body.len + 64, jsonl_writer_string(JSONL_ZSTD),
                    writer);
        buf_reset(&m->body);
        EXPECT_EQ_I64(buf_append(&m->body, t, strlen(t), &err), 0);
        free(t);
    }
    new_lease(r);
    new_driver(r);
    return r;
}

static struct fake_object *data_object_of_window_1(struct rig *r)
{
    for (size_t i = 0; i < r->k.n; i++) {
        if (strstr(r->k.objs[i].key, "/w-0000000001-") != NULL) {
            return &r->k.objs[i];
        }
    }
    return NULL;
}

/* The manifest of the other writer's upload is there: committed from it,
 * nothing PUT again. */
TEST(a_redo_of_another_writer_commits_from_its_manifest)
{
    struct rig *r =
        crash_then_other(DRIVER_CRASH_AFTER_UPLOAD, OTHER_WRITER, NULL);
    int puts = r->k.puts;

    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    for (int i = puts; i < r->k.puts && i < 64; i++) {
        EXPECT(strstr(r->k.put_keys[i], "w-0000000001-") == NULL);
        EXPECT(strstr(r->k.put_keys[i], "windows/0000000001.json") == NULL);
    }
    struct fake_object *m = manifest_of(r, 1);
    EXPECT(m != NULL && strstr(m->body.data, OTHER_WRITER) != NULL);
    rig_close(r);
}

/* No manifest, and the other writer's object holds other bytes than this
 * node builds: the queue stops rather than overwrite them. */
TEST(a_redo_of_another_writer_never_overwrites_other_bytes)
{
    struct rig *r =
        crash_then_other(DRIVER_CRASH_MID_UPLOAD, OTHER_WRITER, NULL);
    struct fake_object *o = data_object_of_window_1(r);
    uint8_t before[32];
    uint8_t after[32];

    ASSERT(o != NULL && o->body.len > 20);
    o->body.data[o->body.len - 5] ^= 0x5a; /* the other version's bytes */
    sha256(o->body.data, o->body.len, before);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FAILED);
    EXPECT(strstr(r->next.why, ") differ from the object") != NULL);
    EXPECT(strstr(r->next.why, OTHER_WRITER) != NULL);
    EXPECT_EQ_I64(pointer_k(r), 0);
    o = data_object_of_window_1(r);
    ASSERT(o != NULL);
    sha256(o->body.data, o->body.len, after);
    EXPECT(memcmp(before, after, 32) == 0);
    EXPECT(manifest_of(r, 1) == NULL);
    rig_close(r);
}

/* No manifest, and the object there holds this node's very bytes (the
 * versions differ, their output does not), or no object yet: rebuilt. */
TEST(a_redo_of_another_writer_rebuilds_where_the_keys_are_free)
{
    struct rig *r =
        crash_then_other(DRIVER_CRASH_MID_UPLOAD, OTHER_WRITER, NULL);

    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    rig_close(r);
    r = crash_then_other(DRIVER_CRASH_AFTER_INTENT, OTHER_WRITER, NULL);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    rig_close(r);
}

/* Without s3:ListBucket a missing key answers 403, so the redo of another
 * writer's window cannot tell a free key from one holding other bytes: the
 * queue stops, naming the permission, and writes nothing of the window. */
TEST(a_redo_of_another_writer_stops_where_a_key_cannot_be_seen)
{
    struct rig *r =
        crash_then_other(DRIVER_CRASH_AFTER_INTENT, OTHER_WRITER, NULL);
    struct driver_status st;
    int puts = r->k.puts;

    r->k.is_unlisted = true;
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FAILED);
    EXPECT(strstr(r->next.why, "s3:ListBucket") != NULL);
    EXPECT(strstr(r->next.why, "/w-0000000001-") != NULL);
    driver_status(r->d, &st);
    EXPECT(strstr(st.last_error, "403") != NULL);
    EXPECT_EQ_I64(pointer_k(r), 0);
    EXPECT_EQ_I64(r->k.puts, puts);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 0);
    rig_close(r);
}

/* Issue 13 item 8: the status the host reports to the node's budget
 * carries what the partitions cost besides their records (a struct, a name
 * and an id each), next to the buffered weight. */
TEST(the_status_carries_the_partitions_bytes_for_the_budget)
{
    struct rig *r = rig_open();
    struct driver_status st;
    char name[16];

    for (int i = 0; i < FAKE_MAX_PARTS; i++) {
        snprintf(name, sizeof(name), "p%03d", i);
        fake_push(&r->f, name, at("2026-09-04T10:05:00.000000Z") + i);
    }
    r->f.safe_time = at("2026-09-04T11:00:00.000001Z");
    new_driver(r);
    run_until(r, 1, 400);
    driver_status(r->d, &st);
    EXPECT_EQ_I64(st.committed_k, 1);
    EXPECT_EQ_U64(st.partitions, FAKE_MAX_PARTS);
    EXPECT(st.partition_bytes >= (uint64_t)FAKE_MAX_PARTS * 200);
    rig_close(r);
}

/* The redo of an intent with this node's writer string but other libraries
 * (libraries: their value, "" = none, an older node) whose manifest is not
 * there, over an object of other bytes: the queue stops naming both
 * libraries, the object keeps its bytes. */
static void other_libraries_never_overwrite(const char *libraries,
                                            const char *named)
{
    struct rig *r = crash_then_other(DRIVER_CRASH_MID_UPLOAD, NULL, libraries);
    struct fake_object *o = data_object_of_window_1(r);
    int heads = r->k.heads;
    uint8_t before[32];
    uint8_t after[32];

    ASSERT(o != NULL && o->body.len > 20);
    o->body.data[o->body.len - 5] ^= 0x5a; /* the other version's bytes */
    sha256(o->body.data, o->body.len, before);
    run_until(r, 1, 200);
    EXPECT_EQ_I64(r->next.stop, DRIVER_FAILED);
    EXPECT(strstr(r->next.why, ") differ from the object") != NULL);
    EXPECT(strstr(r->next.why, named) != NULL);
    EXPECT(strstr(r->next.why, jsonl_codec_library(JSONL_ZSTD)) != NULL);
    EXPECT(r->k.heads > heads);
    EXPECT_EQ_I64(pointer_k(r), 0);
    o = data_object_of_window_1(r);
    ASSERT(o != NULL);
    sha256(o->body.data, o->body.len, after);
    EXPECT(memcmp(before, after, 32) == 0);
    EXPECT(manifest_of(r, 1) == NULL);
    rig_close(r);
}

TEST(a_redo_of_an_intent_with_other_libraries_never_overwrites_other_bytes)
{
    other_libraries_never_overwrite(OTHER_LIBRARIES, OTHER_LIBRARIES);
}

TEST(a_redo_of_an_intent_without_libraries_never_overwrites_other_bytes)
{
    other_libraries_never_overwrite("", "libraries \"unknown\"");
}

/* Other libraries, but the object there holds this node's very bytes: each
 * key is checked, then the window is rebuilt and committed. */
TEST(a_redo_of_an_intent_with_other_libraries_rebuilds_where_the_keys_are_free)
{
    struct rig *r =
        crash_then_other(DRIVER_CRASH_MID_UPLOAD, NULL, OTHER_LIBRARIES);
    int heads = r->k.heads;

    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT(r->k.heads > heads);
    EXPECT_EQ_U64(count_keys(&r->k, "/w-0000000001-"), 1);
    rig_close(r);
}

/* Writer string and libraries both this node's: a plain redo, no key is
 * checked; the window is rebuilt under its keys and committed. */
TEST(a_redo_of_its_own_intent_checks_no_key)
{
    struct rig *r = crash_then_other(DRIVER_CRASH_MID_UPLOAD, NULL, NULL);
    struct fake_object *o = data_object_of_window_1(r);
    int heads = r->k.heads;
    uint8_t before[32];
    uint8_t after[32];

    ASSERT(o != NULL && o->body.len > 20);
    o->body.data[o->body.len - 5] ^= 0x5a;
    sha256(o->body.data, o->body.len, before);
    run_until(r, 2, 200);
    EXPECT_EQ_I64(committed_k(r), 2);
    EXPECT_EQ_I64(r->k.heads, heads);
    o = data_object_of_window_1(r);
    ASSERT(o != NULL);
    sha256(o->body.data, o->body.len, after);
    EXPECT(memcmp(before, after, 32) != 0);
    rig_close(r);
}
