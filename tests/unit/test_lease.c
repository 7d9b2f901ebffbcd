/* Tests of the lease (docs/design/protocol.md §3) over the fake broker's KV
 * semantics. */
#include "sink/lease.h"

#include <pthread.h>
#include <time.h>

#include "driver_fake.h"
#include "harness.h"
#include "push_helpers.h"
#include "store/kv.h"
#include "store/store_impl.h"

struct fake_clock {
    int64_t now;
    struct fake_broker *f;
    int64_t call_cost; /* ms each KV call takes when the broker never answers */
};

static int64_t fc_now(void *arg)
{
    struct fake_clock *c = arg;

    return c->now;
}

static void fc_sleep(void *arg, int64_t ms)
{
    struct fake_clock *c = arg;

    c->now += ms;
}

static uint8_t rnd_seed;

static void fixed_random(void *arg, uint8_t *out, size_t n)
{
    UNUSED(arg);
    for (size_t i = 0; i < n; i++) {
        out[i] = (uint8_t)(rnd_seed + i);
    }
}

static struct lease *make(struct sink_broker *b, const char *instance,
                          uint8_t seed, struct fake_clock *c)
{
    struct lease_config cfg;
    struct err err;

    memset(&cfg, 0, sizeof(cfg));
    cfg.sink = "default";
    cfg.queue = "orders";
    cfg.instance = instance;
    cfg.ttl_ms = 30000;
    cfg.random_bytes = fixed_random;
    rnd_seed = seed;
    if (c != NULL) {
        cfg.clock.now_ms = fc_now;
        cfg.clock.sleep_ms = fc_sleep;
        cfg.clock.arg = c;
    }
    struct lease *l = lease_new(&cfg, b, &err);
    ASSERT(l != NULL);
    return l;
}

/* The orders queue on a fake broker: the seam a lease talks to. */
struct rig {
    struct fake_broker f;
    struct sink_broker b;
};

static void rig_open(struct rig *r)
{
    fake_init(&r->f, "orders");
    fake_broker_seam(&r->f, &r->b);
}

/* node-1's lease (seed 1) on a fresh rig; clock c, or the real one when
 * NULL. Free with lease_free. */
static struct lease *rig_lease(struct rig *r, struct fake_clock *c)
{
    rig_open(r);
    return make(&r->b, "node-1", 1, c);
}

/* Acquire l at 1 ms; lease_acquire's result. */
static int rig_acquire(struct lease *l)
{
    struct err err;
    bool taken;
    char who[64];

    return lease_acquire(l, 1, &taken, who, sizeof(who), &err);
}

/* rig_lease(), acquired at 1 ms. */
static struct lease *rig_held(struct rig *r, struct fake_clock *c)
{
    struct lease *l = rig_lease(r, c);

    EXPECT_EQ_I64(rig_acquire(l), 0);
    return l;
}

/* Acquire l at now, which must not fail; returns whether l took the lease,
 * with the holder's name in who[size]. */
static bool acquired(struct lease *l, int64_t now, char *who, size_t size)
{
    struct err err = {0};
    bool taken = false;
    int rc = lease_acquire(l, now, &taken, who, size, &err);

    if (rc != 0) {
        HARNESS_FAIL("acquire at %" PRId64 ": rc %d: %s", now, rc, err.msg);
    }
    return taken;
}

/* The orders lease row now names instance and incarnation (since 5 ms). */
static void set_holder(struct fake_broker *f, const char *instance,
                       const char *incarnation)
{
    char doc[256];

    snprintf(doc, sizeof(doc),
             "{\"instance\":\"%s\",\"incarnation\":\"%s\",\"sinceMs\":5}",
             instance, incarnation);
    fake_row_set(f, "s3:default:orders:lease", doc);
}

TEST(ttl_and_refresh_interval)
{
    EXPECT_EQ_I64(lease_ttl_seconds(30000), 30);
    EXPECT_EQ_I64(lease_ttl_seconds(999), 1);
    EXPECT_EQ_I64(lease_ttl_seconds(1999), 1);
    EXPECT_EQ_I64(lease_refresh_interval_ms(30000), 10000);
    EXPECT_EQ_I64(lease_refresh_interval_ms(100), 333);
}

TEST(key_and_incarnation)
{
    struct rig r;

    rig_open(&r);
    struct lease *l = make(&r.b, "node-1", 0xa0, NULL);
    EXPECT_STR_EQ(lease_key(l), "s3:default:orders:lease");
    EXPECT_STR_EQ(lease_incarnation(l), "a0a1a2a3a4a5a6a7");
    EXPECT_EQ_U64(lease_version(l), 0);
    lease_free(l);
}

TEST(acquire_takes_a_free_lease_and_others_see_the_holder)
{
    struct rig r;
    struct err err;
    char who[64];
    enum lease_holder_kind kind;

    rig_open(&r);
    struct lease *a = make(&r.b, "node-1", 1, NULL);
    struct lease *o = make(&r.b, "node-2", 2, NULL);
    EXPECT_EQ_I64(lease_holder(a, &kind, who, sizeof(who), &err), 0);
    EXPECT_EQ_I64(kind, LEASE_FREE);
    EXPECT(acquired(a, 1000, who, sizeof(who)));
    EXPECT(lease_version(a) != 0);
    struct fake_row *row = fake_row_must(&r.f, "s3:default:orders:lease");
    EXPECT_EQ_I64(row->ttl, 30);
    EXPECT(!acquired(o, 2000, who, sizeof(who)));
    EXPECT_STR_EQ(who, "node-1");
    EXPECT_EQ_I64(lease_holder(o, &kind, who, sizeof(who), &err), 0);
    EXPECT_EQ_I64(kind, LEASE_OTHER);
    EXPECT_EQ_I64(lease_holder(a, &kind, who, sizeof(who), &err), 0);
    EXPECT_EQ_I64(kind, LEASE_MINE);
    lease_free(a);
    lease_free(o);
}

TEST(same_instance_other_incarnation_is_taken_over)
{
    struct rig r;
    struct err err;
    char who[64];

    rig_open(&r);
    struct lease *old = make(&r.b, "node-1", 1, NULL);
    EXPECT(acquired(old, 1, who, sizeof(who)));
    struct lease *l = make(&r.b, "node-1", 9, NULL);
    EXPECT(acquired(l, 2, who, sizeof(who)));
    EXPECT(lease_version(l) > lease_version(old));
    /* the old life's fence now loses, and the loss is sticky */
    EXPECT_EQ_I64(lease_refresh(old, &err), ERR_PRECONDITION);
    EXPECT(lease_lost(old));
    EXPECT_STR_EQ(lease_lost_reason(old),
                  "the lease is held by another instance");
    EXPECT_EQ_I64(lease_refresh(old, &err), ERR_PRECONDITION);
    EXPECT_EQ_I64(lease_refresh(l, &err), 0);
    lease_free(old);
    lease_free(l);
}

TEST(unparsable_row_is_held_by_unknown)
{
    struct rig r;
    char who[64];

    rig_open(&r);
    fake_row_set(&r.f, "s3:default:orders:lease", "[1,2]");
    struct lease *l = make(&r.b, "node-1", 1, NULL);
    EXPECT(!acquired(l, 1, who, sizeof(who)));
    EXPECT_STR_EQ(who, "unknown");
    lease_free(l);
}

TEST(fenced_batch_puts_the_fence_first_and_rolls_back_when_lost)
{
    struct rig r;
    struct err err;
    struct kv_op op;
    struct kv_answer a;

    struct lease *l = rig_held(&r, NULL);
    uint64_t none = 0;
    lease_put_op(&op, "s3:default:orders:committed", SLICE_LIT("{\"k\":1}"), 0,
                 &none, true);
    EXPECT_EQ_I64(lease_fenced(l, &op, 1, &a, &err), 0);
    EXPECT_EQ_U64(a.n_results, 2);
    EXPECT_EQ_U64(lease_version(l), a.results[0].version);
    kv_answer_free(&a);
    /* another node takes the row over (expired and re-claimed) */
    set_holder(&r.f, "node-2", "0000000000000000");
    uint64_t v_before =
        fake_row_must(&r.f, "s3:default:orders:committed")->version;
    lease_put_op(&op, "s3:default:orders:committed", SLICE_LIT("{\"k\":2}"), 0,
                 &v_before, true);
    EXPECT_EQ_I64(lease_fenced(l, &op, 1, &a, &err), ERR_PRECONDITION);
    EXPECT_EQ_U64(a.failed_index, 0);
    kv_answer_free(&a);
    EXPECT(lease_lost(l));
    struct fake_row *c = fake_row_must(&r.f, "s3:default:orders:committed");
    EXPECT_EQ_U64(c->version, v_before);
    EXPECT_STR_EQ(c->value, "{\"k\":1}");
    lease_free(l);
}

TEST(release_deletes_only_our_row)
{
    struct rig r;
    struct fake_clock c = {0};

    struct lease *l = rig_held(&r, &c);
    EXPECT_EQ_I64(lease_release(l), 0);
    EXPECT(fake_row_get(&r.f, "s3:default:orders:lease") == NULL);
    EXPECT_EQ_U64(lease_version(l), 0);
    /* a row of another incarnation stays */
    EXPECT_EQ_I64(rig_acquire(l), 0);
    set_holder(&r.f, "node-1", "ffffffffffffffff");
    EXPECT_EQ_I64(lease_release(l), 0);
    EXPECT(fake_row_get(&r.f, "s3:default:orders:lease") != NULL);
    lease_free(l);
}

TEST(release_retries_four_failures_then_succeeds_in_six_calls)
{
    struct rig r;
    struct fake_clock c = {0};

    struct lease *l = rig_held(&r, &c);
    r.f.kv_calls = 0;
    r.f.fail_next = 4;
    EXPECT_EQ_I64(lease_release(l), 0);
    EXPECT_EQ_I64(r.f.kv_calls, 6);
    EXPECT(c.now < 2000); /* 100 + 200 + 400 + 800 */
    EXPECT(fake_row_get(&r.f, "s3:default:orders:lease") == NULL);
    lease_free(l);
}

TEST(release_gives_up_after_ten_seconds_when_the_broker_never_answers)
{
    struct rig r;
    struct fake_clock c = {0};

    struct lease *l = rig_held(&r, &c);
    r.f.kv_never = true;
    EXPECT_EQ_I64(lease_release(l), ERR_TIMEOUT);
    EXPECT(c.now >= 9000 && c.now <= 10000);
    EXPECT(fake_row_get(&r.f, "s3:default:orders:lease") != NULL);
    lease_free(l);
}

TEST(refresh_keeps_the_lease_through_a_busy_broker_and_loses_it_to_another)
{
    struct rig r;
    struct err err;

    struct lease *l = rig_held(&r, NULL);
    for (int i = 0; i < 5; i++) {
        EXPECT_EQ_I64(lease_refresh(l, &err), 0);
    }
    r.f.fail_next = 1;
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_BUSY);
    EXPECT(!lease_lost(l));
    EXPECT_EQ_I64(lease_refresh(l, &err), 0);
    set_holder(&r.f, "node-2", "0000000000000000");
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_PRECONDITION);
    EXPECT(lease_lost(l));
    EXPECT_EQ_I64(lease_lost_cause(l), LEASE_LOST_TAKEN);
    lease_free(l);
}

/* A renewal that finds the row gone (it expired after a stall) was not
 * taken by anyone: the lease is lost as expired, and neither the error nor
 * the reason says another instance owns the queue. */
TEST(a_refresh_that_finds_the_row_gone_says_the_lease_expired)
{
    struct rig r;
    struct err err;

    struct lease *l = rig_held(&r, NULL);
    fake_row_must(&r.f, "s3:default:orders:lease")->used = false;
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_PRECONDITION);
    EXPECT(lease_lost(l));
    EXPECT_EQ_I64(lease_lost_cause(l), LEASE_LOST_EXPIRED);
    EXPECT(strstr(err.msg, "lease expired: its row is gone") != NULL);
    EXPECT(strstr(err.msg, "winner version") == NULL);
    EXPECT(strstr(lease_lost_reason(l), "the lease expired") != NULL);
    EXPECT(strstr(lease_lost_reason(l), "no other instance") != NULL);
    lease_free(l);
}

/* A full disk (507) and the other answers the reference retries (429,
 * 5xx) keep the lease: the disk frees up, and nobody else took the row.
 * Only a refusal that cannot change marks it lost. */
TEST(refresh_keeps_the_lease_through_a_full_disk)
{
    static const int retried[] = {ERR_FULL, ERR_LIMIT, ERR_REMOTE, ERR_IO};
    struct rig r;
    struct err err;

    struct lease *l = rig_held(&r, NULL);
    for (size_t i = 0; i < ARRAY_LEN(retried); i++) {
        r.f.fail_next = 1;
        r.f.fail_code = retried[i];
        EXPECT_EQ_I64(lease_refresh(l, &err), retried[i]);
        EXPECT(!lease_lost(l));
        EXPECT_EQ_I64(lease_refresh(l, &err), 0);
    }
    r.f.fail_next = 1;
    r.f.fail_code = ERR_INVALID;
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_INVALID);
    EXPECT(lease_lost(l));
    EXPECT_STR_EQ(lease_lost_reason(l),
                  "the broker refused the lease renewal for good");
    lease_free(l);
}

/* A heartbeat that timed out after it was applied (a leader change) left
 * the row one version ahead of the handle. The row still carries this
 * handle's incarnation, so nobody else wrote it: the next fence adopts its
 * version instead of losing the lease. */
TEST(a_refresh_that_landed_although_its_call_failed_keeps_the_lease)
{
    struct rig r;
    struct err err;
    struct kv_op op;
    struct kv_answer a;

    struct lease *l = rig_held(&r, NULL);
    r.f.land_then_fail = 1;
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_TIMEOUT);
    EXPECT(!lease_lost(l));
    uint64_t row_v = fake_row_must(&r.f, "s3:default:orders:lease")->version;
    EXPECT(lease_version(l) != row_v);
    EXPECT_EQ_I64(lease_refresh(l, &err), 0);
    EXPECT(!lease_lost(l));
    EXPECT_EQ_U64(lease_version(l),
                  fake_row_must(&r.f, "s3:default:orders:lease")->version);
    /* The same through a commit batch: it lands, then goes through. */
    r.f.land_then_fail = 1;
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_TIMEOUT);
    uint64_t none = 0;
    lease_put_op(&op, "s3:default:orders:committed", SLICE_LIT("{\"k\":1}"), 0,
                 &none, true);
    EXPECT_EQ_I64(lease_fenced(l, &op, 1, &a, &err), 0);
    EXPECT_EQ_U64(a.n_results, 2);
    kv_answer_free(&a);
    EXPECT(!lease_lost(l));
    EXPECT_STR_EQ(fake_row_must(&r.f, "s3:default:orders:committed")->value,
                  "{\"k\":1}");
    /* The driver's read-back adopted a version the refresher had already
     * moved past (both ours): the next fence still goes through. */
    uint64_t old_v = lease_version(l);
    EXPECT_EQ_I64(lease_refresh(l, &err), 0);
    lease_adopt_version(l, old_v);
    EXPECT_EQ_I64(lease_refresh(l, &err), 0);
    EXPECT(!lease_lost(l));
    lease_free(l);
}

/* Another instance's row, or an earlier life of ours (same instance name,
 * another incarnation), is never adopted: the fence fails and stays lost. */
TEST(a_row_of_another_incarnation_is_never_adopted_by_the_fence)
{
    struct rig r;
    struct err err;

    struct lease *l = rig_held(&r, NULL);
    set_holder(&r.f, "node-1", "ffffffffffffffff");
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_PRECONDITION);
    EXPECT(lease_lost(l));
    EXPECT_STR_EQ(fake_row_must(&r.f, "s3:default:orders:lease")->value,
                  "{\"instance\":\"node-1\",\"incarnation\":"
                  "\"ffffffffffffffff\",\"sinceMs\":5}");
    lease_free(l);
}

/* An instance name of 300 bytes (QUEEN_S3_INSTANCE allows 405 escaped
 * bytes, SINK_INSTANCE_ESC_MAX) is still recognised as ours when read back
 * from the row. */
TEST(a_long_instance_name_still_reads_its_own_row_as_mine)
{
    struct rig r;
    struct err err;
    char who[600];
    char inst[301];
    enum lease_holder_kind kind;

    memset(inst, 'n', 300);
    inst[300] = '\0';
    rig_open(&r);
    struct lease *l = make(&r.b, inst, 1, NULL);
    EXPECT(acquired(l, 1, who, sizeof(who)));
    EXPECT_EQ_I64(lease_holder(l, &kind, who, sizeof(who), &err), 0);
    EXPECT_EQ_I64(kind, LEASE_MINE);
    /* A later life of the same instance takes the row over at once. */
    struct lease *again = make(&r.b, inst, 9, NULL);
    EXPECT(acquired(again, 2, who, sizeof(who)));
    lease_free(again);
    lease_free(l);
}

/* A queue whose keys would not fit the store's key with the tenant and
 * the namespace (486 bytes for "queen-s3") is refused when its lease is
 * made, naming why, not at every claim: 465 name bytes are the most. */
TEST(a_queue_name_whose_keys_do_not_fit_the_store_is_refused_at_once)
{
    struct rig r;
    struct lease_config cfg;
    struct err err;
    char name[467];

    rig_open(&r);
    memset(&cfg, 0, sizeof(cfg));
    cfg.sink = "default";
    cfg.instance = "node-1@h";
    cfg.ttl_ms = 30000;
    cfg.queue = name;
    memset(name, 'q', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0'; /* 466 */
    EXPECT(lease_new(&cfg, &r.b, &err) == NULL);
    EXPECT_EQ_I64(err.code, ERR_TOO_BIG);
    EXPECT(strstr(err.msg, "longer than the KV's 486 bytes in namespace "
                           "queen-s3: this queue cannot be mirrored") != NULL);
    name[465] = '\0';
    struct lease *l = lease_new(&cfg, &r.b, &err);
    EXPECT(l != NULL);
    lease_free(l);
}

/* ---- the lost flag does not wait behind a KV call ------------------------ */

struct slow_kv {
    struct sink_broker inner;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool is_blocking; /* the next call waits for is_released (a cap of
                         HARNESS_WAIT_S: a loaded machine can take seconds
                         to run the test thread again) */
    bool in_call;
    bool is_released;
    bool has_returned;
    struct lease *l;
};

static int slow_kv_call(void *arg, const uint8_t t[16], const struct kv_op *ops,
                        size_t n, int timeout_ms, struct kv_answer *out,
                        struct err *err)
{
    struct slow_kv *k = arg;
    struct timespec dl;

    pthread_mutex_lock(&k->mu);
    if (k->is_blocking) {
        k->in_call = true;
        pthread_cond_broadcast(&k->cv);
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += HARNESS_WAIT_S;
        while (!k->is_released &&
               pthread_cond_timedwait(&k->cv, &k->mu, &dl) == 0) {
        }
    }
    pthread_mutex_unlock(&k->mu);
    int rc = k->inner.kv(k->inner.arg, t, ops, n, timeout_ms, out, err);
    pthread_mutex_lock(&k->mu);
    k->has_returned = k->is_blocking;
    pthread_mutex_unlock(&k->mu);
    return rc;
}

static void *slow_refresh(void *arg)
{
    struct slow_kv *k = arg;
    struct err err;

    lease_refresh(k->l, &err);
    return NULL;
}

/* The driver asks lease_lost() at the top of every tick: it must answer
 * while the refresher's heartbeat is stuck in a slow KV call, not wait for
 * the call (up to the KV timeout) and hold a pool thread meanwhile. */
TEST(the_lost_flag_answers_while_a_heartbeat_is_in_flight)
{
    struct fake_broker f;
    struct slow_kv k;
    struct sink_broker b;
    struct err err;
    bool taken;
    char who[64];
    pthread_t th;

    memset(&k, 0, sizeof(k));
    fake_init(&f, "orders");
    fake_broker_seam(&f, &k.inner);
    pthread_mutex_init(&k.mu, NULL);
    pthread_cond_init(&k.cv, NULL);
    b = k.inner;
    b.kv = slow_kv_call;
    b.arg = &k;
    k.l = make(&b, "node-1", 1, NULL);
    EXPECT_EQ_I64(lease_acquire(k.l, 1, &taken, who, sizeof(who), &err), 0);
    k.is_blocking = true;
    ASSERT(pthread_create(&th, NULL, slow_refresh, &k) == 0);
    pthread_mutex_lock(&k.mu);
    while (!k.in_call) {
        pthread_cond_wait(&k.cv, &k.mu);
    }
    pthread_mutex_unlock(&k.mu);
    EXPECT(!lease_lost(k.l));
    pthread_mutex_lock(&k.mu);
    bool returned_first = k.has_returned;
    k.is_released = true;
    pthread_cond_broadcast(&k.cv);
    pthread_mutex_unlock(&k.mu);
    EXPECT(!returned_first);
    pthread_join(th, NULL);
    EXPECT(!lease_lost(k.l));
    lease_free(k.l);
    pthread_cond_destroy(&k.cv);
    pthread_mutex_destroy(&k.mu);
}

/* ---- the fence over the real store's apply (issue 13, item 6) ------------ */

/* The seam's kv over a real LMDB store: reads from a read txn, writes
 * applied as the fsm applies a CMD_KV entry (store_kv_apply at the wall
 * clock as the stamp, in one write txn). */
static int store_seam_kv(void *arg, const uint8_t tenant[16],
                         const struct kv_op *ops, size_t n, int timeout_ms,
                         struct kv_answer *out, struct err *err)
{
    struct env *e = arg;
    struct kv_batch b = {tenant, ops, n};
    struct timespec ts;
    char reason[40];
    MDB_txn *txn;
    int rc;

    UNUSED(timeout_ms);
    memset(out, 0, sizeof(*out));
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    if (kv_validate(ops, n, false, reason, err) != 0) {
        return err->code;
    }
    if (!kv_has_write(ops, n)) {
        return store_kv_read(e->store, &b, now, out, err);
    }
    if (store_wbegin(e->store, &txn, err) != 0) {
        return err->code;
    }
    rc = store_kv_apply(e->store, txn, &b, now, out, err);
    if (rc != 0) {
        store_wabort(e->store, txn);
        kv_answer_free(out);
        return rc;
    }
    if (store_wcommit(e->store, txn, ++e->index, now, err) != 0) {
        kv_answer_free(out);
        return err->code;
    }
    return 0;
}

/* The tenant of the leases make() builds (cfg.tenant all zero). */
static const uint8_t seam_tenant[16];

/* One unconditional forever put of key=value through the seam, in the
 * leases' tenant. */
static void store_seam_put(struct sink_broker *b, const char *key,
                           const char *value)
{
    struct kv_op op;
    struct kv_answer a;
    struct err err = {0};

    lease_put_op(&op, key, (struct slice){value, strlen(value)}, 0, NULL,
                 false);
    EXPECT_EQ_I64(b->kv(b->arg, seam_tenant, &op, 1, 0, &a, &err), 0);
    EXPECT(a.status == 0 && a.results[0].applied);
    kv_answer_free(&a);
}

/* node-1 committed window 1, then node-2 took the queue over (the row
 * expired while node-1 was paused) and committed window 2. node-1's next
 * pointer batch [fence, committed CAS] loses both ops; on the real store
 * the fence at index 0 must be the one that answers, so node-1 learns its
 * lease is lost (it stops Fenced and never writes the queue again) and the
 * pointer stays node-2's. */
TEST(a_stale_pointer_batch_on_the_real_store_marks_the_lease_lost)
{
    struct env e = {0};
    struct sink_broker b;
    struct kv_op op;
    struct kv_answer a;
    struct err err = {0};
    char who[64];
    const char *ck = "s3:default:orders:committed";

    env_open(&e);
    memset(&b, 0, sizeof(b));
    b.kv = store_seam_kv;
    b.arg = &e;
    struct lease *l = make(&b, "node-1", 1, NULL);
    EXPECT(acquired(l, 1, who, sizeof(who)));
    uint64_t none = 0;
    lease_put_op(&op, ck, SLICE_LIT("{\"k\":1}"), 0, &none, true);
    EXPECT_EQ_I64(lease_fenced(l, &op, 1, &a, &err), 0);
    uint64_t v1 = a.results[1].version;
    kv_answer_free(&a);
    store_seam_put(&b, "s3:default:orders:lease",
                   "{\"instance\":\"node-2\",\"incarnation\":"
                   "\"00000000000000aa\",\"sinceMs\":5}");
    store_seam_put(&b, ck, "{\"k\":2}");

    lease_put_op(&op, ck, SLICE_LIT("{\"k\":2,\"by\":\"node-1\"}"), 0, &v1,
                 true);
    EXPECT_EQ_I64(lease_fenced(l, &op, 1, &a, &err), ERR_PRECONDITION);
    EXPECT_EQ_U64(a.failed_index, 0);
    kv_answer_free(&a);
    EXPECT(lease_lost(l));
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_PRECONDITION);

    struct kv_op get = {.op = KV_GET, .ns = SLICE_LIT(LEASE_NS)};
    get.key = (struct slice){ck, strlen(ck)};
    EXPECT_EQ_I64(b.kv(b.arg, seam_tenant, &get, 1, 0, &a, &err), 0);
    EXPECT_MEM_EQ(a.results[0].value.ptr, a.results[0].value.len, "{\"k\":2}",
                  7);
    kv_answer_free(&a);
    lease_free(l);
    env_close(&e);
}

/* The value and version of key in the leases' tenant, through the seam. */
static uint64_t store_seam_get(struct sink_broker *b, const char *key,
                               char *value, size_t cap)
{
    struct kv_op get = {.op = KV_GET, .ns = SLICE_LIT(LEASE_NS)};
    struct kv_answer a;
    struct err err = {0};

    get.key = (struct slice){key, strlen(key)};
    EXPECT_EQ_I64(b->kv(b->arg, seam_tenant, &get, 1, 0, &a, &err), 0);
    uint64_t v = a.results[0].version;
    snprintf(value, cap, "%.*s", (int)a.results[0].value.len,
             a.results[0].value.ptr);
    kv_answer_free(&a);
    return v;
}

/* node-1's pointer batch landed although its call failed (a leader change):
 * the lease row and the pointer both moved one version past what the handle
 * knows. The retried batch loses its fence first, to a row carrying this
 * handle's own incarnation, so fence_adopt takes the row's version (and the
 * resend then loses at the pointer, index 1, without marking the lease
 * lost). With the pointer CAS deciding first, the fence was never looked
 * at and the handle kept its stale version. */
TEST(a_pointer_batch_that_landed_is_adopted_by_the_fence_on_the_real_store)
{
    struct env e = {0};
    struct sink_broker b;
    struct kv_op op;
    struct kv_op batch[2];
    struct kv_answer a;
    struct err err = {0};
    char who[64];
    char doc[256];
    const char *lk = "s3:default:orders:lease";
    const char *ck = "s3:default:orders:committed";

    env_open(&e);
    memset(&b, 0, sizeof(b));
    b.kv = store_seam_kv;
    b.arg = &e;
    struct lease *l = make(&b, "node-1", 1, NULL);
    EXPECT(acquired(l, 1, who, sizeof(who)));
    uint64_t none = 0;
    lease_put_op(&op, ck, SLICE_LIT("{\"k\":1}"), 0, &none, true);
    EXPECT_EQ_I64(lease_fenced(l, &op, 1, &a, &err), 0);
    uint64_t v1 = a.results[1].version;
    kv_answer_free(&a);

    /* the batch for window 2 lands, but its caller never hears of it */
    uint64_t held = lease_version(l);
    EXPECT_EQ_U64(store_seam_get(&b, lk, doc, sizeof(doc)), held);
    lease_put_op(&batch[0], lk, (struct slice){doc, strlen(doc)},
                 lease_ttl_seconds(30000), &held, true);
    lease_put_op(&batch[1], ck, SLICE_LIT("{\"k\":2}"), 0, &v1, true);
    EXPECT_EQ_I64(b.kv(b.arg, seam_tenant, batch, 2, 0, &a, &err), 0);
    EXPECT_EQ_I64(a.status, 0);
    kv_answer_free(&a);
    uint64_t landed = store_seam_get(&b, lk, doc, sizeof(doc));

    /* the retry, as sent without reading back first */
    lease_put_op(&op, ck, SLICE_LIT("{\"k\":2}"), 0, &v1, true);
    EXPECT_EQ_I64(lease_fenced(l, &op, 1, &a, &err), ERR_PRECONDITION);
    EXPECT_EQ_U64(a.failed_index, 1);
    kv_answer_free(&a);
    EXPECT(!lease_lost(l));
    EXPECT_EQ_U64(lease_version(l), landed);
    EXPECT_EQ_I64(lease_refresh(l, &err), 0);
    EXPECT(!lease_lost(l));
    lease_free(l);
    env_close(&e);
}

/* lease.h (4): a PUT needs a renewal that landed less than TTL - margin
 * ago; a failed renewal does not count; past the mark the lease is lost. */
TEST(the_age_check_counts_from_the_last_renewal_that_landed)
{
    struct rig r;
    struct fake_clock c = {0};
    struct err err;

    EXPECT_EQ_I64(lease_margin_ms(30000), 6000);
    EXPECT_EQ_I64(lease_margin_ms(3000), 1000);
    EXPECT_EQ_I64(lease_margin_ms(1000), 500);
    EXPECT_EQ_I64(lease_margin_ms(600000), 120000);
    c.now = 5000;
    struct lease *l = rig_held(&r, &c);
    c.now += 23999;
    EXPECT_EQ_I64(lease_check_age(l, &err), 0);
    EXPECT_EQ_I64(lease_refresh(l, &err), 0); /* sent at 28999 */
    c.now += 10000;
    r.f.fail_next = 1;
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_BUSY); /* does not count */
    c.now = 28999 + 23999;
    EXPECT_EQ_I64(lease_check_age(l, &err), 0);
    EXPECT(!lease_lost(l));
    c.now++;
    EXPECT_EQ_I64(lease_check_age(l, &err), ERR_PRECONDITION);
    EXPECT(strstr(err.msg, "last renewed 24000 ms ago") != NULL);
    EXPECT(lease_lost(l));
    /* The fence message says this node gave it up, not that another holds
     * it (nobody may hold it yet). */
    EXPECT(strstr(lease_lost_reason(l), "not renewed in time here") != NULL);
    /* sticky: a renewal cannot bring it back */
    EXPECT_EQ_I64(lease_refresh(l, &err), ERR_PRECONDITION);
    EXPECT(strstr(lease_lost_reason(l), "not renewed in time here") != NULL);
    EXPECT_EQ_I64(lease_check_age(l, &err), ERR_PRECONDITION);
    lease_free(l);
}
