/* Unit tests of retention (broker/retention.h): the pure cutoffs and sink
 * floor with time as an argument, the CMD_RETENTION and CMD_CONFIGURE
 * codecs, the stale boundary over real appends, the trim apply through the
 * real fsm over a real LMDB store, the tenant listing, and the planner over
 * several tenants (its proposals captured through the propose seam). */
#include "harness.h"

#include "api/api.h"
#include "broker/retention.h"
#include "push_helpers.h"
#include "store/kv.h"
#include "store/store_impl.h"
#include "store/store_tenants.h"

#define T0 1760000000000000LL /* a stamp in 2025, µs */
#define S  1000000LL

static struct store_queue_options hold_opts(const char *hold, int32_t max_s)
{
    struct store_queue_options o;

    store_queue_options_configured(&o);
    snprintf(o.retention_sink_hold, sizeof(o.retention_sink_hold), "%s", hold);
    o.retention_sink_hold_max_seconds = max_s;
    return o;
}

static struct slice sl(const char *s)
{
    return (struct slice){s, strlen(s)};
}

TEST(sink_floor_without_hold_is_infinite)
{
    struct store_queue_options o = hold_opts("", 3600);

    EXPECT_EQ_I64(retention_sink_floor(&o, T0, sl("")), RETENTION_NO_HOLD);
    EXPECT_EQ_I64(retention_sink_floor(
                      &o, T0, sl("{\"tEnd\":\"2025-10-09T08:53:20.000000Z\"}")),
                  RETENTION_NO_HOLD);
}

TEST(sink_floor_without_pointer_is_the_cap)
{
    struct store_queue_options o = hold_opts("default", 3600);

    EXPECT_EQ_I64(retention_sink_floor(&o, T0, sl("")), T0 - 3600 * S);
    /* the cap is at least 60 s back, also for a stored 0 */
    o.retention_sink_hold_max_seconds = 0;
    EXPECT_EQ_I64(retention_sink_floor(&o, T0, sl("")), T0 - 60 * S);
    o.retention_sink_hold_max_seconds = 10;
    EXPECT_EQ_I64(retention_sink_floor(&o, T0, sl("")), T0 - 60 * S);
}

TEST(sink_floor_from_tend_string_minus_60s)
{
    struct store_queue_options o = hold_opts("default", 3600);
    /* T0 = 1760000000 s = 2025-10-09T08:53:20Z */
    const char *row = "{\"k\":3,\"tEnd\":\"2025-10-09T08:53:20.123456Z\","
                      "\"manifest\":\"m\",\"records\":1}";

    /* fraction truncated to ms, then - 60 s */
    EXPECT_EQ_I64(retention_sink_floor(&o, T0, sl(row)), T0 + 123000 - 60 * S);
    /* a pointer older than the cap: the cap wins */
    EXPECT_EQ_I64(
        retention_sink_floor(&o, T0 + 7200 * S,
                             sl("{\"tEnd\":\"2025-10-09T08:53:20.000000Z\"}")),
        T0 + 7200 * S - 3600 * S);
    /* the broker's lenient parser: trailing text ignored, 9 digits */
    EXPECT_EQ_I64(
        retention_sink_floor(
            &o, T0, sl("{\"tEnd\":\"2025-10-09T08:53:20.999999999+00:00\"}")),
        T0 + 999000 - 60 * S);
}

TEST(sink_floor_unusable_pointer_is_the_cap)
{
    struct store_queue_options o = hold_opts("default", 600);
    const char *bad[] = {
        "{\"tEnd\":1760000000000000}", /* integer: the broker wants a string */
        "{\"tEnd\":\"yesterday\"}",    "{\"k\":1}", "not json",
        "[\"2025-10-09T08:53:20Z\"]",
    };

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        EXPECT_EQ_I64(retention_sink_floor(&o, T0, sl(bad[i])), T0 - 600 * S);
    }
}

TEST(cutoffs_follow_each_rule)
{
    struct store_queue_options o;
    struct retention_cutoffs c;

    store_queue_options_configured(&o);
    retention_queue_cutoffs(&o, T0, RETENTION_NO_HOLD, &c);
    EXPECT_EQ_I64(c.all, RETENTION_NONE);
    EXPECT_EQ_I64(c.completed, RETENTION_NONE);
    EXPECT_EQ_I64(c.max_wait, RETENTION_NONE);
    EXPECT_EQ_I64(retention_cutoff(&c), RETENTION_NONE);

    /* retentionSeconds without retentionEnabled: nothing */
    o.retention_seconds = 10;
    o.completed_retention_seconds = 20;
    retention_queue_cutoffs(&o, T0, RETENTION_NO_HOLD, &c);
    EXPECT_EQ_I64(c.all, RETENTION_NONE);
    EXPECT_EQ_I64(c.completed, RETENTION_NONE);

    o.retention_enabled = true;
    retention_queue_cutoffs(&o, T0, RETENTION_NO_HOLD, &c);
    EXPECT_EQ_I64(c.all, T0 - 10 * S);
    EXPECT_EQ_I64(c.completed, T0 - 20 * S);
    EXPECT_EQ_I64(retention_cutoff(&c), T0 - 10 * S);

    /* the hold floors all and completed, not max_wait */
    o.max_wait_time_seconds = 30;
    retention_queue_cutoffs(&o, T0, T0 - 100 * S, &c);
    EXPECT_EQ_I64(c.all, T0 - 100 * S);
    EXPECT_EQ_I64(c.completed, T0 - 100 * S);
    EXPECT_EQ_I64(c.max_wait, T0 - 30 * S);
    EXPECT_EQ_I64(retention_cutoff(&c), T0 - 30 * S);

    /* a floor above the retention cutoff changes nothing */
    retention_queue_cutoffs(&o, T0, T0, &c);
    EXPECT_EQ_I64(c.all, T0 - 10 * S);

    /* negative and zero seconds are no rule */
    o.retention_seconds = -5;
    o.max_wait_time_seconds = 0;
    o.completed_retention_seconds = 0;
    retention_queue_cutoffs(&o, T0, RETENTION_NO_HOLD, &c);
    EXPECT_EQ_I64(retention_cutoff(&c), RETENTION_NONE);
}

TEST(hold_key_escapes_the_queue)
{
    struct buf b;
    struct err err = {0};

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(retention_hold_key(&b, "default",
                                     sl("e.ord/eu \xc3\xa9t\xc3\xa9:1%"), &err),
                  0);
    EXPECT_STR_EQ(b.data,
                  "s3:default:e.ord%2Feu%20%C3%A9t%C3%A9%3A1%25:committed");
    buf_free(&b);
}

TEST(trim_codec_round_trip_and_refusals)
{
    struct cmd_trim_item in[2] = {{7, 9, 42, {"p1", 2}},
                                  {8, 10, 0, {"Default", 7}}};
    struct cmd_header h;
    struct cmd_trim_iter it;
    struct cmd_trim_item out;
    struct err err = {0};
    struct buf b;
    uint32_t n = 0;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_trim_encode(&b, STORE_DEFAULT_TENANT, in, 0, &err),
                  ERR_INVALID);
    in[0].log_start = -1;
    EXPECT_EQ_I64(cmd_trim_encode(&b, STORE_DEFAULT_TENANT, in, 2, &err),
                  ERR_INVALID);
    EXPECT_EQ_U64(b.len, 0);
    in[0].log_start = 42;
    EXPECT_EQ_I64(cmd_trim_encode(&b, STORE_DEFAULT_TENANT, in, 2, &err), 0);
    EXPECT_EQ_I64(cmd_decode_header(b.data, b.len, &h, &err), 0);
    EXPECT_EQ_I64(h.type, CMD_RETENTION);
    EXPECT_EQ_I64(cmd_trim_validate(h.body, &n, &err), 0);
    EXPECT_EQ_U64(n, 2);
    EXPECT_EQ_I64(cmd_trim_iter_init(&it, h.body, &err), 0);
    EXPECT_EQ_I64(cmd_trim_next(&it, &out, &err), 1);
    EXPECT_EQ_U64(out.queue_id, 7);
    EXPECT_EQ_U64(out.partition_id, 9);
    EXPECT_EQ_I64(out.log_start, 42);
    EXPECT_MEM_EQ(out.partition.ptr, out.partition.len, "p1", 2);
    EXPECT_EQ_I64(cmd_trim_next(&it, &out, &err), 1);
    EXPECT_MEM_EQ(out.partition.ptr, out.partition.len, "Default", 7);
    EXPECT_EQ_I64(cmd_trim_next(&it, &out, &err), 0);
    /* every truncation is refused */
    for (size_t cut = 0; cut < h.body.len; cut++) {
        struct slice s = {h.body.ptr, cut};

        EXPECT_EQ_I64(cmd_trim_validate(s, &n, &err), ERR_CORRUPT);
    }
    buf_free(&b);
}

TEST(configure_codec_round_trip)
{
    struct store_queue_options o;
    struct store_queue_options back;
    struct cmd_header h;
    struct slice q;
    struct err err = {0};
    struct buf b;

    store_queue_options_configured(&o);
    o.priority = -7;
    o.retention_seconds = 2;
    o.retention_enabled = true;
    o.dead_letter_queue = false;
    o.retention_sink_hold_max_seconds = 31536000;
    snprintf(o.namespace_, sizeof(o.namespace_), "ns");
    snprintf(o.retention_sink_hold, sizeof(o.retention_sink_hold), "%s",
             "a-very-long-hold-name-of-exactly-sixty-four-bytes-0123456789abc");
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(
        cmd_configure_encode(&b, STORE_DEFAULT_TENANT, sl("queue/1"), &o, &err),
        0);
    EXPECT_EQ_I64(cmd_decode_header(b.data, b.len, &h, &err), 0);
    EXPECT_EQ_I64(h.type, CMD_CONFIGURE);
    EXPECT_EQ_I64(cmd_configure_decode(h.body, &q, &back, &err), 0);
    EXPECT_MEM_EQ(q.ptr, q.len, "queue/1", 7);
    EXPECT_EQ_I64(back.priority, -7);
    EXPECT_EQ_I64(back.retention_seconds, 2);
    EXPECT(back.retention_enabled);
    EXPECT(!back.dead_letter_queue);
    EXPECT(back.dlq_after_max_retries);
    EXPECT_EQ_I64(back.retention_sink_hold_max_seconds, 31536000);
    EXPECT_STR_EQ(back.namespace_, "ns");
    EXPECT_STR_EQ(back.task, "");
    EXPECT_STR_EQ(back.retention_sink_hold, o.retention_sink_hold);
    for (size_t cut = 0; cut < h.body.len; cut++) {
        struct slice s = {h.body.ptr, cut};

        EXPECT_EQ_I64(cmd_configure_decode(s, &q, &back, &err), ERR_CORRUPT);
    }
    buf_free(&b);
}

/* ---- over a real store -------------------------------------------------- */

/* Partition p of tenant t's queue q, as the changed listing shows it
 * (zeroes when it is not listed); its name points at p. */
static struct store_partition_info tenant_part(struct env *e, const uint8_t *t,
                                               const char *q, const char *p)
{
    struct store_changed_req r = {sl(q), INT64_MIN, {"", 0}, 1000};
    struct store_changed_answer a;
    struct store_partition_info out;
    struct err err = {0};

    memset(&out, 0, sizeof(out));
    EXPECT_EQ_I64(store_changed(e->store, t, &r, 1, &a, &err), 0);
    for (size_t i = 0; i < a.entries[0].n_partitions; i++) {
        const struct store_partition_info *pi = &a.entries[0].partitions[i];

        if (pi->name.len == strlen(p) &&
            memcmp(pi->name.ptr, p, pi->name.len) == 0) {
            out = *pi;
            out.name = (struct slice){p, strlen(p)};
        }
    }
    store_changed_answer_free(&a);
    return out;
}

static struct store_partition_info part_of(struct env *e, const char *q,
                                           const char *p)
{
    return tenant_part(e, STORE_DEFAULT_TENANT, q, p);
}

static uint64_t queue_id(struct env *e, const char *q)
{
    struct store_queue_info qi;
    struct err err = {0};

    EXPECT_EQ_I64(
        store_get_queue(e->store, STORE_DEFAULT_TENANT, sl(q), &qi, &err), 0);
    return qi.id;
}

static const struct fsm_result *apply_trim(struct env *e,
                                           const struct cmd_trim_item *items,
                                           size_t n, int64_t stamp)
{
    const struct fsm_result *res = NULL;
    struct err err = {0};
    struct buf b;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_trim_encode(&b, STORE_DEFAULT_TENANT, items, n, &err), 0);
    cmd_set_stamp(b.data, stamp);
    e->index++;
    EXPECT_EQ_I64(fsm_apply_entry(e->fsm, e->index, b.data, b.len, &res, &err),
                  0);
    buf_free(&b);
    return res;
}

/* Three appends: [0,1] at T0, [2,4] at T0+10 s, [5] at T0+20 s. */
static void three_appends(struct env *e)
{
    struct pitem a[3] = {
        {"q", "p", "a", "1"}, {"q", "p", "b", "2"}, {"q", "p", "c", "3"}};

    env_push(e, T0, a, 2);
    env_push(e, T0 + 10 * S, a + 2, 1);
    env_push1(e, T0 + 10 * S + 1, "q", "p", "d", "4"); /* own append */
    env_push1(e, T0 + 20 * S, "q", "p", "e", "5");
}

TEST(stale_boundary_walks_whole_appends_oldest_first)
{
    struct env e = {0};
    struct store_partition_info p;
    struct err err = {0};
    int64_t to = 0;

    env_open(&e);
    three_appends(&e);
    p = part_of(&e, "q", "p");
    EXPECT_EQ_I64(p.last_offset, 4);
    EXPECT_EQ_I64(store_stale_boundary(e.store, p.id, T0, 1000, &to, &err), 0);
    EXPECT_EQ_I64(to, -1); /* strict: stamp == cutoff is fresh */
    EXPECT_EQ_I64(store_stale_boundary(e.store, p.id, T0 + 1, 1000, &to, &err),
                  0);
    EXPECT_EQ_I64(to, 2);
    EXPECT_EQ_I64(
        store_stale_boundary(e.store, p.id, T0 + 10 * S + 1, 1000, &to, &err),
        0);
    EXPECT_EQ_I64(to, 3);
    EXPECT_EQ_I64(
        store_stale_boundary(e.store, p.id, T0 + 30 * S, 1000, &to, &err), 0);
    EXPECT_EQ_I64(to, 5);
    /* the row budget bounds the walk */
    EXPECT_EQ_I64(
        store_stale_boundary(e.store, p.id, T0 + 30 * S, 2, &to, &err), 0);
    EXPECT_EQ_I64(to, 3);
    /* another partition id has no appends */
    EXPECT_EQ_I64(
        store_stale_boundary(e.store, p.id + 1, T0 + 30 * S, 1000, &to, &err),
        0);
    EXPECT_EQ_I64(to, -1);
    env_close(&e);
}

TEST(trim_apply_moves_log_start_and_reads_follow)
{
    struct env e = {0};
    struct store_partition_info p;
    struct store_fetch_req fr = {sl("q"), sl("p"), 0, 1 << 20, false};
    struct store_fetch_answer fa;
    struct err err = {0};
    const struct fsm_result *res;
    struct cmd_trim_item it;
    int64_t to = 0;

    env_open(&e);
    fsm_set_handler(e.fsm, CMD_RETENTION, retention_apply, NULL);
    three_appends(&e);
    p = part_of(&e, "q", "p");
    it = (struct cmd_trim_item){queue_id(&e, "q"), p.id, 2, sl("p")};
    res = apply_trim(&e, &it, 1, T0 + 40 * S);
    EXPECT(res != NULL && res->code == 0);
    EXPECT_EQ_I64(part_of(&e, "q", "p").log_start, 2);
    EXPECT_EQ_I64(store_fetch(e.store, STORE_DEFAULT_TENANT, &fr, 1, &fa, &err),
                  0);
    EXPECT_EQ_I64(fa.entries[0].error, STORE_OFFSET_OUT_OF_RANGE);
    EXPECT_EQ_I64(fa.entries[0].log_start, 2);
    EXPECT_EQ_I64(fa.entries[0].high_watermark, 5);
    store_fetch_answer_free(&fa);
    /* the trimmed appends are gone: the boundary starts at the next one */
    EXPECT_EQ_I64(
        store_stale_boundary(e.store, p.id, T0 + 10 * S + 1, 1000, &to, &err),
        0);
    EXPECT_EQ_I64(to, 3);

    /* a planned start past the end is clamped to lastOffset + 1 */
    it.log_start = 99;
    res = apply_trim(&e, &it, 1, T0 + 41 * S);
    EXPECT(res != NULL && res->code == 0);
    EXPECT_EQ_I64(part_of(&e, "q", "p").log_start, 5);
    /* offsets continue after a full trim */
    res = env_push1(&e, T0 + 50 * S, "q", "p", "f", "6");
    EXPECT_EQ_I64(res->items[0].offset, 5);
    fr.offset = 5;
    EXPECT_EQ_I64(store_fetch(e.store, STORE_DEFAULT_TENANT, &fr, 1, &fa, &err),
                  0);
    EXPECT_EQ_U64(fa.entries[0].n_records, 1);
    EXPECT_EQ_I64(fa.entries[0].log_start, 5);
    store_fetch_answer_free(&fa);
    env_close(&e);
}

TEST(trim_apply_skips_unknown_partitions_and_stale_ids)
{
    struct env e = {0};
    struct store_partition_info p;
    const struct fsm_result *res;
    struct cmd_trim_item it[3];

    env_open(&e);
    fsm_set_handler(e.fsm, CMD_RETENTION, retention_apply, NULL);
    three_appends(&e);
    p = part_of(&e, "q", "p");
    it[0] = (struct cmd_trim_item){queue_id(&e, "q"), p.id + 5, 2, sl("p")};
    it[1] = (struct cmd_trim_item){queue_id(&e, "q"), p.id, 2, sl("nope")};
    it[2] = (struct cmd_trim_item){queue_id(&e, "q") + 9, p.id, 2, sl("p")};
    res = apply_trim(&e, it, 3, T0 + 40 * S);
    EXPECT(res != NULL && res->code == 0);
    EXPECT_EQ_I64(part_of(&e, "q", "p").log_start, 0);
    /* a lower logStart than the current one changes nothing */
    it[0] = (struct cmd_trim_item){queue_id(&e, "q"), p.id, 3, sl("p")};
    apply_trim(&e, it, 1, T0 + 41 * S);
    it[0].log_start = 2;
    apply_trim(&e, it, 1, T0 + 42 * S);
    EXPECT_EQ_I64(part_of(&e, "q", "p").log_start, 3);
    env_close(&e);
}

TEST(configure_apply_stores_the_options)
{
    struct env e = {0};
    struct store_queue_options o;
    struct store_queue_info qi;
    const struct fsm_result *res = NULL;
    struct err err = {0};
    struct buf b;

    env_open(&e);
    fsm_set_handler(e.fsm, CMD_CONFIGURE, api_configure_apply, NULL);
    store_queue_options_configured(&o);
    o.retention_seconds = 5;
    o.retention_enabled = true;
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(
        cmd_configure_encode(&b, STORE_DEFAULT_TENANT, sl("cq"), &o, &err), 0);
    cmd_set_stamp(b.data, T0);
    EXPECT_EQ_I64(fsm_apply_entry(e.fsm, ++e.index, b.data, b.len, &res, &err),
                  0);
    EXPECT(res != NULL && res->code == 0);
    EXPECT_EQ_I64(
        store_get_queue(e.store, STORE_DEFAULT_TENANT, sl("cq"), &qi, &err), 0);
    EXPECT_EQ_I64(qi.options.retention_seconds, 5);
    EXPECT(qi.options.retention_enabled);
    EXPECT_EQ_I64(qi.options.lease_time, 300);
    EXPECT_EQ_I64(qi.created_at, T0);
    buf_free(&b);
    env_close(&e);
}

/* ---- tenants: store_list_tenants and the planner ------------------------ */

static const uint8_t TA[16] = {0x0a, 0x0a, 0x0a, 0x0a, 0, 0, 0x40, 0,
                               0x80, 0,    0,    0,    0, 0, 0,    0x0a};
static const uint8_t TB[16] = {0x0b, 0x0b, 0x0b, 0x0b, 0, 0, 0x40, 0,
                               0x80, 0,    0,    0,    0, 0, 0,    0x0b};
static const uint8_t TC[16] = {0x0c, 0x0c, 0x0c, 0x0c, 0, 0, 0x40, 0,
                               0x80, 0,    0,    0,    0, 0, 0,    0x0c};

/* Apply one raw command (copied, stamped) through the fsm. */
static const struct fsm_result *apply_raw(struct env *e, const char *cmd,
                                          size_t len, int64_t stamp)
{
    const struct fsm_result *res = NULL;
    struct err err = {0};
    char *b = malloc(len);

    memcpy(b, cmd, len);
    cmd_set_stamp(b, stamp);
    e->index++;
    EXPECT_EQ_I64(fsm_apply_entry(e->fsm, e->index, b, len, &res, &err), 0);
    free(b);
    return res;
}

/* One push of one record to tenant t's queue q, partition "p". */
static void tpush(struct env *e, const uint8_t *t, int64_t stamp, const char *q)
{
    struct cmd_push_item it = {.queue = sl(q),
                               .partition = sl("p"),
                               .txn = {"", 0},
                               .payload = sl("1")};
    struct err err = {0};
    struct buf b;

    memcpy(it.message_id, &stamp, sizeof(stamp));
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_push_encode(&b, t, &it, 1, &err), 0);
    apply_raw(e, b.data, b.len, stamp);
    buf_free(&b);
}

static void tconfigure(struct env *e, const uint8_t *t, const char *q,
                       const struct store_queue_options *o)
{
    const struct fsm_result *res;
    struct err err = {0};
    struct buf b;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_configure_encode(&b, t, sl(q), o, &err), 0);
    res = apply_raw(e, b.data, b.len, T0 - S);
    EXPECT(res != NULL && res->code == 0);
    buf_free(&b);
}

/* Put a forever row in tenant t's queen-s3 namespace. */
static void tkv_put(struct env *e, const uint8_t *t, const char *key,
                    const char *value)
{
    struct kv_op op = {0};
    struct kv_batch kb = {t, &op, 1};
    struct kv_answer a;
    struct err err = {0};
    MDB_txn *txn;

    op.op = KV_PUT;
    op.ns = sl(RETENTION_SINK_NS);
    op.key = sl(key);
    op.value = sl(value);
    op.forever = true;
    EXPECT_EQ_I64(store_wbegin(e->store, &txn, &err), 0);
    EXPECT_EQ_I64(store_kv_apply(e->store, txn, &kb, T0, &a, &err), 0);
    EXPECT_EQ_I64(a.status, 0);
    EXPECT_EQ_I64(store_wcommit(e->store, txn, ++e->index, T0, &err), 0);
    kv_answer_free(&a);
}

/* Partition "p" (the one tpush() writes) of tenant t's queue q. */
static struct store_partition_info tpart(struct env *e, const uint8_t *t,
                                         const char *q)
{
    return tenant_part(e, t, q, "p");
}

/* The commands a plan hands over, kept for inspection and apply. */
struct proposed {
    size_t n;
    struct buf cmds[16];
    int fail; /* refuse every proposal with this code (0 = accept) */
};

static int collect(void *arg, const char *cmd, size_t len, struct err *err)
{
    struct proposed *pr = arg;

    if (pr->fail != 0) {
        return err_set(err, pr->fail, "refused by the test");
    }
    EXPECT(pr->n < ARRAY_LEN(pr->cmds));
    if (pr->n < ARRAY_LEN(pr->cmds)) {
        buf_init(&pr->cmds[pr->n], BUF_UNLIMITED);
        EXPECT_EQ_I64(buf_append(&pr->cmds[pr->n], cmd, len, err), 0);
        pr->n++;
    }
    return 0;
}

static void proposed_free(struct proposed *pr)
{
    for (size_t i = 0; i < pr->n; i++) {
        buf_free(&pr->cmds[i]);
    }
    pr->n = 0;
}

/* The tenant of proposed command i. */
static const uint8_t *proposed_tenant(const struct proposed *pr, size_t i,
                                      struct cmd_header *h)
{
    struct err err = {0};

    EXPECT_EQ_I64(cmd_decode_header(pr->cmds[i].data, pr->cmds[i].len, h, &err),
                  0);
    EXPECT_EQ_I64(h->type, CMD_RETENTION);
    return h->tenant;
}

static void apply_proposed(struct env *e, const struct proposed *pr,
                           int64_t stamp)
{
    for (size_t i = 0; i < pr->n; i++) {
        const struct fsm_result *res =
            apply_raw(e, pr->cmds[i].data, pr->cmds[i].len, stamp);

        EXPECT(res != NULL && res->code == 0);
    }
}

/* A store whose fsm applies CMD_CONFIGURE and, when with_trims, the
 * CMD_RETENTION a plan proposes. */
static void planner_env_open(struct env *e, bool with_trims)
{
    env_open(e);
    fsm_set_handler(e->fsm, CMD_CONFIGURE, api_configure_apply, NULL);
    if (with_trims) {
        fsm_set_handler(e->fsm, CMD_RETENTION, retention_apply, NULL);
    }
}

TEST(list_tenants_skips_from_tenant_to_tenant_in_byte_order)
{
    static const uint8_t lo[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                   0, 0, 0, 0, 0, 0, 0, 0xff};
    static const uint8_t hi[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff};
    struct store_tenant_page *pg = malloc(sizeof(*pg));
    struct env e = {0};
    struct err err = {0};

    env_open(&e);
    EXPECT_EQ_I64(store_list_tenants(e.store, NULL, pg, &err), 0);
    EXPECT_EQ_U64(pg->n, 0);
    EXPECT(!pg->has_more);
    tpush(&e, TB, T0, "q1");
    tpush(&e, TB, T0, "q2");
    tpush(&e, hi, T0, "q");
    tpush(&e, lo, T0, "z");
    env_push1(&e, T0, "q", "p", "a", "1"); /* the default tenant */
    tkv_put(&e, TC, "k", "1");             /* KV rows alone: no tenant (1) */
    EXPECT_EQ_I64(store_list_tenants(e.store, NULL, pg, &err), 0);
    EXPECT_EQ_U64(pg->n, 4);
    EXPECT(!pg->has_more);
    EXPECT_MEM_EQ(pg->ids[0], 16, STORE_DEFAULT_TENANT, 16);
    EXPECT_MEM_EQ(pg->ids[1], 16, lo, 16);
    EXPECT_MEM_EQ(pg->ids[2], 16, TB, 16);
    EXPECT_MEM_EQ(pg->ids[3], 16, hi, 16);
    /* strictly after: the carry of 00..00ff + 1 and the last tenant */
    EXPECT_EQ_I64(store_list_tenants(e.store, lo, pg, &err), 0);
    EXPECT_EQ_U64(pg->n, 2);
    EXPECT_MEM_EQ(pg->ids[0], 16, TB, 16);
    EXPECT_EQ_I64(store_list_tenants(e.store, TA, pg, &err), 0);
    EXPECT_EQ_U64(pg->n, 2);
    EXPECT_EQ_I64(store_list_tenants(e.store, hi, pg, &err), 0);
    EXPECT_EQ_U64(pg->n, 0);
    EXPECT(!pg->has_more);
    free(pg);
    env_close(&e);
}

TEST(list_tenants_pages_without_losing_one)
{
    struct store_tenant_page *pg = malloc(sizeof(*pg));
    struct env e = {0};
    struct err err = {0};
    uint8_t t[16] = {0x20};
    size_t total = 0;
    uint8_t last[16];

    env_open(&e);
    for (int i = 0; i < STORE_TENANT_PAGE + 3; i++) {
        t[14] = (uint8_t)(i >> 8);
        t[15] = (uint8_t)i;
        tpush(&e, t, T0, "q");
    }
    EXPECT_EQ_I64(store_list_tenants(e.store, NULL, pg, &err), 0);
    EXPECT_EQ_U64(pg->n, STORE_TENANT_PAGE);
    EXPECT(pg->has_more);
    total += pg->n;
    memcpy(last, pg->ids[pg->n - 1], 16);
    EXPECT_EQ_I64(last[15], (STORE_TENANT_PAGE - 1) & 0xff);
    EXPECT_EQ_I64(store_list_tenants(e.store, last, pg, &err), 0);
    EXPECT_EQ_U64(pg->n, 3);
    EXPECT(!pg->has_more);
    EXPECT_EQ_I64(pg->ids[0][14], STORE_TENANT_PAGE >> 8);
    EXPECT_EQ_I64(pg->ids[0][15], STORE_TENANT_PAGE & 0xff);
    total += pg->n;
    EXPECT_EQ_U64(total, STORE_TENANT_PAGE + 3);
    free(pg);
    env_close(&e);
}

TEST(plan_trims_each_tenant_by_its_own_options)
{
    struct env e = {0};
    struct store_queue_options o;
    struct retention_cursor cur = {{0}, false};
    struct proposed pr = {0};
    struct cmd_header h;

    planner_env_open(&e, true);
    store_queue_options_configured(&o);
    o.retention_enabled = true;
    o.retention_seconds = 3600;
    tconfigure(&e, TA, "q", &o); /* same name, retention not due */
    o.retention_seconds = 10;
    tconfigure(&e, TB, "q", &o);
    tpush(&e, TA, T0, "q");
    tpush(&e, TB, T0, "q");
    tpush(&e, STORE_DEFAULT_TENANT, T0, "q"); /* implicit: no retention */

    EXPECT_EQ_U64(retention_plan(e.store, T0 + 20 * S, RETENTION_MAX_PARTS,
                                 &cur, collect, &pr),
                  1);
    EXPECT(!cur.is_set);
    EXPECT_EQ_U64(pr.n, 1);
    EXPECT_MEM_EQ(proposed_tenant(&pr, 0, &h), 16, TB, 16);
    apply_proposed(&e, &pr, T0 + 21 * S);
    EXPECT_EQ_I64(tpart(&e, TB, "q").log_start, 1);
    EXPECT_EQ_I64(tpart(&e, TA, "q").log_start, 0);
    EXPECT_EQ_I64(tpart(&e, STORE_DEFAULT_TENANT, "q").log_start, 0);
    proposed_free(&pr);
    /* nothing left to trim: the next pass proposes nothing */
    EXPECT_EQ_U64(retention_plan(e.store, T0 + 22 * S, RETENTION_MAX_PARTS,
                                 &cur, collect, &pr),
                  0);
    env_close(&e);
}

TEST(plan_reads_each_tenants_own_hold_row)
{
    struct env e = {0};
    struct store_queue_options o = hold_opts("default", 3600);
    struct retention_cursor cur = {{0}, false};
    struct proposed pr = {0};
    /* T0 = 2025-10-09T08:53:20Z: B's floor is T0 + 1 ms, inside [T0, T0+10s) */
    const char *b_row = "{\"tEnd\":\"2025-10-09T08:54:20.001Z\"}";
    const char *far = "{\"tEnd\":\"2030-01-01T00:00:00.000Z\"}";

    planner_env_open(&e, true);
    o.retention_enabled = true;
    o.retention_seconds = 5;
    tconfigure(&e, STORE_DEFAULT_TENANT, "h", &o);
    tconfigure(&e, TA, "h", &o);
    tconfigure(&e, TB, "h", &o);
    for (int i = 0; i < 2; i++) {
        tpush(&e, STORE_DEFAULT_TENANT, T0 + i * 10 * S, "h");
        tpush(&e, TA, T0 + i * 10 * S, "h");
        tpush(&e, TB, T0 + i * 10 * S, "h");
    }
    /* the default tenant's row says "all committed"; A has none */
    tkv_put(&e, STORE_DEFAULT_TENANT, "s3:default:h:committed", far);
    tkv_put(&e, TB, "s3:default:h:committed", b_row);

    EXPECT_EQ_U64(retention_plan(e.store, T0 + 30 * S, 64, &cur, collect, &pr),
                  2);
    apply_proposed(&e, &pr, T0 + 31 * S);
    EXPECT_EQ_I64(tpart(&e, STORE_DEFAULT_TENANT, "h").log_start, 2);
    EXPECT_EQ_I64(tpart(&e, TA, "h").log_start, 0); /* the cap holds all */
    EXPECT_EQ_I64(tpart(&e, TB, "h").log_start, 1); /* its own floor */
    proposed_free(&pr);
    env_close(&e);
}

TEST(plan_budget_resumes_after_the_tenant_it_ran_out_in)
{
    struct env e = {0};
    struct store_queue_options o;
    struct retention_cursor cur = {{0}, false};
    struct proposed pr = {0};
    struct cmd_header h;
    const uint8_t *order[] = {TA, TB, TC, TA};

    planner_env_open(&e, false);
    store_queue_options_configured(&o);
    o.max_wait_time_seconds = 10;
    tconfigure(&e, TA, "q", &o);
    tconfigure(&e, TB, "q", &o);
    tconfigure(&e, TC, "q", &o);
    tpush(&e, TA, T0, "q");
    tpush(&e, TB, T0, "q");
    tpush(&e, TC, T0, "q");
    /* one partition per pass: A, B, C, then around to A (6) */
    for (size_t i = 0; i < ARRAY_LEN(order); i++) {
        EXPECT_EQ_U64(
            retention_plan(e.store, T0 + 20 * S, 1, &cur, collect, &pr), 1);
        EXPECT_EQ_U64(pr.n, 1);
        EXPECT_MEM_EQ(proposed_tenant(&pr, 0, &h), 16, order[i], 16);
        EXPECT(cur.is_set);
        EXPECT_MEM_EQ(cur.after, 16, order[i], 16);
        proposed_free(&pr);
    }
    /* budget enough for all: one command per tenant, cursor cleared */
    EXPECT_EQ_U64(retention_plan(e.store, T0 + 20 * S, RETENTION_MAX_PARTS,
                                 &cur, collect, &pr),
                  3);
    EXPECT(!cur.is_set);
    EXPECT_MEM_EQ(proposed_tenant(&pr, 0, &h), 16, TB, 16); /* after A */
    EXPECT_MEM_EQ(proposed_tenant(&pr, 2, &h), 16, TA, 16); /* wrapped */
    proposed_free(&pr);
    /* a refused proposal is not counted */
    pr.fail = ERR_NOT_LEADER;
    EXPECT_EQ_U64(retention_plan(e.store, T0 + 20 * S, RETENTION_MAX_PARTS,
                                 &cur, collect, &pr),
                  0);
    EXPECT_EQ_U64(pr.n, 0);
    env_close(&e);
}
