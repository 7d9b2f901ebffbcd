/* Unit tests of the KV rows (store/kv.h) and the CMD_KV apply handler
 * (broker/kv.h) over a real LMDB store in a mkdtemp directory: one test per
 * rule of docs/design/http-api.md §7. Batches are applied as the fsm does,
 * inside one write transaction at the command's stamp. */
#include "harness.h"

#include "broker/kv.h"
#include "push_helpers.h"
#include "store/kv.h"
#include "store/store_impl.h"

#define T0 1760000000000000LL /* a stamp in 2025, µs */
#define S  1000000LL

static struct slice sl(const char *s)
{
    struct slice r = {s, strlen(s)};
    return r;
}

/* Apply batch b at stamp in one write transaction, unvalidated; the
 * answer is the caller's to free. */
static void kv_write(struct env *e, const struct kv_batch *b, int64_t stamp,
                     struct kv_answer *a)
{
    MDB_txn *txn;
    struct err err = {0};

    EXPECT_EQ_I64(store_wbegin(e->store, &txn, &err), 0);
    EXPECT_EQ_I64(store_kv_apply(e->store, txn, b, stamp, a, &err), 0);
    EXPECT_EQ_I64(store_wcommit(e->store, txn, ++e->index, stamp, &err), 0);
}

/* Apply ops at stamp as one entry (as the fsm would); returns the status
 * of the answer, which the caller frees. */
static int kv_apply(struct env *e, int64_t stamp, const struct kv_op *ops,
                    size_t n, struct kv_answer *a)
{
    struct err err = {0};
    char reason[40];
    struct kv_batch b = {STORE_DEFAULT_TENANT, ops, n};

    if (kv_validate(ops, n, true, reason, &err) != 0) {
        memset(a, 0, sizeof(*a));
        a->status = err.code;
        snprintf(a->reason_id, sizeof(a->reason_id), "%s", reason);
        return err.code;
    }
    kv_write(e, &b, stamp, a);
    return a->status;
}

static struct kv_op op_put(const char *key, const char *value)
{
    struct kv_op o = {0};

    o.op = KV_PUT;
    o.ns = sl("queen-s3");
    o.key = sl(key);
    o.value = sl(value);
    o.forever = true;
    return o;
}

static struct kv_op op_get(const char *key)
{
    struct kv_op o = {0};

    o.op = KV_GET;
    o.ns = sl("queen-s3");
    o.key = sl(key);
    return o;
}

static struct kv_result get1(struct env *e, int64_t now, const char *key,
                             struct kv_answer *a)
{
    struct kv_op o = op_get(key);
    struct kv_batch b = {STORE_DEFAULT_TENANT, &o, 1};
    struct err err = {0};

    memset(a, 0, sizeof(*a));

    EXPECT_EQ_I64(store_kv_read(e->store, &b, now, a, &err), 0);
    return a->results[0];
}

static struct kv_result put1(struct env *e, int64_t stamp, struct kv_op o,
                             struct kv_answer *a)
{
    EXPECT_EQ_I64(kv_apply(e, stamp, &o, 1, a), 0);
    return a->results[0];
}

/* A put of key that expires ttl seconds after its stamp. */
static struct kv_op op_ttl(const char *key, const char *value, int64_t ttl)
{
    struct kv_op o = op_put(key, value);

    o.forever = false;
    o.ttl_seconds = ttl;
    return o;
}

/* Apply o at stamp; returns the version of its result. */
static uint64_t put_at(struct env *e, int64_t stamp, struct kv_op o)
{
    struct kv_answer a;
    uint64_t v = put1(e, stamp, o, &a).version;

    kv_answer_free(&a);
    return v;
}

/* Apply o at stamp, which must apply; returns the version it wrote. */
static uint64_t put_won(struct env *e, int64_t stamp, struct kv_op o)
{
    struct kv_answer a;
    struct kv_result r = put1(e, stamp, o, &a);

    if (!r.applied) {
        HARNESS_FAIL("put at %" PRId64 " lost with reason %d", stamp,
                     (int)r.reason);
    }
    kv_answer_free(&a);
    return r.version;
}

/* A put-if-absent of key. */
static struct kv_op op_if_absent(const char *key, const char *value)
{
    struct kv_op o = op_put(key, value);

    o.op = KV_PUT_IF_ABSENT;
    return o;
}

/* Apply o at stamp and expect it not to apply, for reason. */
static void put_lost(struct env *e, int64_t stamp, struct kv_op o, int reason)
{
    struct kv_answer a;
    struct kv_result r = put1(e, stamp, o, &a);

    if (r.applied || r.reason != reason) {
        HARNESS_FAIL("put at %" PRId64 ": applied %d reason %d, want lost "
                     "with %d",
                     stamp, (int)r.applied, (int)r.reason, reason);
    }
    kv_answer_free(&a);
}

/* Apply o at stamp and expect it to lose for reason to the row at version
 * holding value (NULL: to no row, so the answer carries no value). */
static void put_lost_to(struct env *e, int64_t stamp, struct kv_op o,
                        int reason, uint64_t version, const char *value)
{
    struct kv_answer a;
    struct kv_result r = put1(e, stamp, o, &a);

    if (r.applied || r.reason != reason || r.version != version) {
        HARNESS_FAIL("put at %" PRId64 ": applied %d reason %d version %" PRIu64
                     ", want lost with %d to version %" PRIu64,
                     stamp, (int)r.applied, (int)r.reason, r.version, reason,
                     version);
    }
    if (value == NULL ? r.has_value
                      : r.value.len != strlen(value) ||
                            memcmp(r.value.ptr, value, r.value.len) != 0) {
        HARNESS_FAIL("put at %" PRId64 ": value \"%.*s\" (has %d), want %s",
                     stamp, (int)r.value.len,
                     r.value.ptr != NULL ? r.value.ptr : "", (int)r.has_value,
                     value == NULL ? "none" : value);
    }
    kv_answer_free(&a);
}

/* Whether a get of key at now finds a live row. */
static bool found_at(struct env *e, int64_t now, const char *key)
{
    struct kv_answer a;
    bool found = get1(e, now, key, &a).found;

    kv_answer_free(&a);
    return found;
}

/* The time of the oldest expiry row (0: none). */
static int64_t oldest_expiry(struct env *e)
{
    int64_t oldest = 0;
    struct err err = {0};

    EXPECT_EQ_I64(store_kv_oldest_expiry(e->store, &oldest, &err), 0);
    return oldest;
}

TEST(sink_keys_round_trip_through_put_and_get)
{
    const char *keys[] = {"s3:default:orders:lease", "s3:sink-2:a%2Fb:intent",
                          "s3:default:a%20b%2F%C3%BC%3Ac:committed"};
    struct env e = {0};
    struct kv_answer a;
    struct kv_answer g;

    env_open(&e);
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        struct kv_result r = put1(&e, T0 + (int64_t)i,
                                  op_put(keys[i], "{\"k\":1,\"x\":42.00}"), &a);
        struct kv_result f;

        EXPECT(r.applied);
        f = get1(&e, T0 + 10, keys[i], &g);
        EXPECT(f.found);
        EXPECT_MEM_EQ(f.key.ptr, f.key.len, keys[i], strlen(keys[i]));
        EXPECT_MEM_EQ(f.value.ptr, f.value.len, "{\"k\":1,\"x\":42.00}", 17);
        EXPECT_EQ_U64(f.version, r.version);
        EXPECT_EQ_I64(f.updated_at, T0 + (int64_t)i);
        EXPECT_EQ_I64(f.expires_at, 0);
        kv_answer_free(&a);
        kv_answer_free(&g);
    }
    env_close(&e);
}

TEST(rows_of_one_tenant_are_invisible_to_another)
{
    static const uint8_t other[16] = {0x0a, 0, 0, 0, 0, 0, 0x40, 0,
                                      0x80, 0, 0, 0, 0, 0, 0,    0x0a};
    struct env e = {0};
    struct kv_op w = op_put("k", "\"a\"");
    struct kv_op r = op_get("k");
    struct kv_batch ba = {other, &w, 1};
    struct kv_batch bread = {other, &r, 1};
    struct kv_answer a;
    struct kv_answer g;
    struct err err = {0};

    env_open(&e);
    kv_write(&e, &ba, T0, &a);
    EXPECT(a.results[0].applied);
    EXPECT(!get1(&e, T0 + 1, "k", &g).found); /* the default tenant */
    kv_answer_free(&g);
    EXPECT_EQ_I64(store_kv_read(e.store, &bread, T0 + 1, &g, &err), 0);
    EXPECT(g.results[0].found);
    EXPECT_EQ_U64(g.results[0].version, a.results[0].version);
    kv_answer_free(&g);
    kv_answer_free(&a);
    env_close(&e);
}

TEST(put_if_absent_loses_to_a_live_row_with_exists)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_result r;
    uint64_t v1;

    env_open(&e);
    v1 = put_at(&e, T0, op_put("k", "1"));
    put_lost_to(&e, T0 + 1, op_if_absent("k", "2"), KV_REASON_EXISTS, v1, "1");
    r = get1(&e, T0 + 2, "k", &a);
    EXPECT_MEM_EQ(r.value.ptr, r.value.len, "1", 1);
    kv_answer_free(&a);
    env_close(&e);
}

TEST(put_if_absent_wins_over_an_expired_unswept_row)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_result r;

    env_open(&e);
    put_at(&e, T0, op_ttl("k", "1", 5));
    /* expired at exactly its stamp */
    put_won(&e, T0 + 5 * S, op_if_absent("k", "2"));
    r = get1(&e, T0 + 100 * S, "k", &a);
    EXPECT(r.found);
    EXPECT_MEM_EQ(r.value.ptr, r.value.len, "2", 1);
    EXPECT_EQ_I64(r.expires_at, 0);
    kv_answer_free(&a);
    /* (3): the old expiry row went with the old row. */
    EXPECT_EQ_I64(oldest_expiry(&e), 0);
    env_close(&e);
}

static uint32_t sweep(struct env *e, int64_t stamp, uint32_t max)
{
    MDB_txn *txn;
    struct err err = {0};
    uint32_t removed = 0;

    EXPECT_EQ_I64(store_wbegin(e->store, &txn, &err), 0);
    EXPECT_EQ_I64(store_kv_sweep(e->store, txn, stamp, max, &removed, &err), 0);
    EXPECT_EQ_I64(store_wcommit(e->store, txn, ++e->index, stamp, &err), 0);
    return removed;
}

TEST(put_if_absent_wins_over_a_swept_row)
{
    struct env e = {0};

    env_open(&e);
    put_at(&e, T0, op_ttl("k", "1", 1));
    EXPECT_EQ_U64(sweep(&e, T0 + 2 * S, 512), 1);
    EXPECT(put_won(&e, T0 + 3 * S, op_if_absent("k", "2")) > 1);
    env_close(&e);
}

TEST(expect_applies_with_the_right_version_and_loses_with_a_stale_one)
{
    struct env e = {0};
    struct kv_op o = op_put("k", "2");
    uint64_t v1;
    uint64_t v2;

    env_open(&e);
    v1 = put_at(&e, T0, op_put("k", "1"));
    o.has_expect = true;
    o.expect = v1;
    v2 = put_won(&e, T0 + 1, o);
    EXPECT(v2 != v1);
    o.value = sl("3");
    /* v1 is stale now */
    put_lost_to(&e, T0 + 2, o, KV_REASON_VERSION, v2, "2");
    env_close(&e);
}

TEST(expect_n_never_creates)
{
    struct env e = {0};
    struct kv_op o = op_put("nope", "1");

    env_open(&e);
    o.has_expect = true;
    o.expect = 7;
    put_lost_to(&e, T0, o, KV_REASON_ABSENT, 0, NULL);
    EXPECT(!found_at(&e, T0 + 1, "nope"));
    env_close(&e);
}

TEST(a_lost_required_write_rolls_back_the_whole_batch)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_op ops[2] = {op_put("a", "1"), op_put("b", "2")};
    uint64_t vb;
    uint64_t last = 0;
    struct err err = {0};

    env_open(&e);
    vb = put_at(&e, T0, op_put("b", "0"));
    ops[1].op = KV_PUT_IF_ABSENT;
    ops[1].required = true;
    EXPECT_EQ_I64(kv_apply(&e, T0 + 1, ops, 2, &a), ERR_PRECONDITION);
    EXPECT_EQ_U64(a.failed_index, 1);
    EXPECT_EQ_I64(a.kv_reason, KV_REASON_EXISTS);
    EXPECT_EQ_U64(a.version, vb);
    EXPECT_MEM_EQ(a.value.ptr, a.value.len, "0", 1);
    kv_answer_free(&a);
    EXPECT(!found_at(&e, T0 + 2, "a"));
    EXPECT_EQ_I64(store_kv_last_version(e.store, &last, &err), 0);
    EXPECT_EQ_U64(last, vb);
    env_close(&e);
}

TEST(versions_are_unique_across_10000_writes_and_a_restart)
{
    struct env e = {0};
    struct kv_answer a;
    uint64_t *seen = calloc(10001, sizeof(*seen));
    char key[32];
    size_t n = 0;

    env_open(&e);
    for (int i = 0; i < 10000; i++) {
        struct kv_result r;

        if (i == 5000) {
            env_reopen(&e);
        }
        snprintf(key, sizeof(key), "k%d", i % 997); /* rewrites too */
        r = put1(&e, T0 + i, op_put(key, "1"), &a);
        EXPECT(r.applied);
        seen[n++] = r.version;
        kv_answer_free(&a);
    }
    for (size_t i = 1; i < n; i++) {
        if (seen[i] <= seen[i - 1]) {
            HARNESS_FAIL("version %zu (%" PRIu64 ") is not above %" PRIu64, i,
                         seen[i], seen[i - 1]);
            break;
        }
    }
    free(seen);
    env_close(&e);
}

TEST(a_ttl_row_expires_at_its_stamp_not_earlier_and_is_swept)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_result r;
    int64_t exp = T0 + 10 * S;

    env_open(&e);
    put_at(&e, T0, op_ttl("t", "1", 10));
    r = get1(&e, exp - 1, "t", &a);
    EXPECT(r.found);
    EXPECT_EQ_I64(r.expires_at, exp);
    kv_answer_free(&a);
    EXPECT(!found_at(&e, exp, "t"));
    EXPECT_EQ_U64(sweep(&e, exp - 1, 512), 0);
    EXPECT_EQ_U64(sweep(&e, exp, 512), 1);
    EXPECT_EQ_U64(sweep(&e, exp + S, 512), 0);
    env_close(&e);
}

/* A row key within 8 bytes of LMDB's 511 has an expiry index key of its
 * own shape (schema.h kv_expiry): the put applies, a second put moves its
 * expiry, and the sweep removes it. */
TEST(a_ttl_row_with_the_longest_key_applies_and_is_swept)
{
    struct env e = {0};
    char key[512];
    size_t n = 511 - 17 - strlen("queen-s3"); /* the longest store key */
    struct kv_op o;

    memset(key, 'k', n);
    key[n] = '\0';
    env_open(&e);
    o = op_ttl(key, "1", 10);
    put_won(&e, T0, o);
    o.ttl_seconds = 20; /* moves the index row */
    put_won(&e, T0 + S, o);
    EXPECT_EQ_I64(oldest_expiry(&e), T0 + 21 * S);
    EXPECT(found_at(&e, T0 + 15 * S, key));
    EXPECT_EQ_U64(sweep(&e, T0 + 20 * S, 512), 0);
    EXPECT_EQ_U64(sweep(&e, T0 + 21 * S, 512), 1);
    EXPECT(!found_at(&e, T0 + 2 * S, key));
    EXPECT_EQ_I64(oldest_expiry(&e), 0);
    env_close(&e);
}

TEST(the_sweep_is_bounded_and_goes_oldest_first)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_op ops[200];
    char keys[200][16];

    env_open(&e);
    for (int i = 0; i < 200; i++) {
        snprintf(keys[i], sizeof(keys[i]), "x%03d", i);
        ops[i] = op_ttl(keys[i], "1", 200 - i); /* x199 expires first */
    }
    EXPECT_EQ_I64(kv_apply(&e, T0, ops, 200, &a), 0);
    kv_answer_free(&a);
    EXPECT_EQ_U64(sweep(&e, T0 + 1000 * S, 150), 150);
    EXPECT(!found_at(&e, T0, "x050")); /* 150 s: the 150th oldest, swept */
    EXPECT(found_at(&e, T0, "x049"));  /* 151 s: kept for the next step */
    EXPECT(found_at(&e, T0, "x000"));  /* 200 s: the oldest expiry survives */
    EXPECT_EQ_U64(sweep(&e, T0 + 1000 * S, 512), 50);
    env_close(&e);
}

static void write_keys(struct env *e, int n)
{
    static char keys[250][16];
    struct kv_op ops[250];
    struct kv_answer a;

    for (int base = 0; base < n; base += 250) {
        for (int i = 0; i < 250; i++) {
            snprintf(keys[i], sizeof(keys[i]), "p:%05d", base + i);
            ops[i] = op_put(keys[i], "\"v\"");
        }
        EXPECT_EQ_I64(kv_apply(e, T0 + base, ops, 250, &a), 0);
        kv_answer_free(&a);
    }
}

TEST(get_prefix_pages_through_2500_keys_without_a_miss_or_a_repeat)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_op o = {0};
    char after[32] = "";
    int next = 0;
    int pages = 0;
    struct err err = {0};

    env_open(&e);
    write_keys(&e, 2500);
    o.op = KV_GET_PREFIX;
    o.ns = sl("queen-s3");
    o.prefix = sl("p:");
    o.limit = 5000; /* clamped to 1000 */
    o.keys_only = true;
    for (;;) {
        struct kv_result r;
        char want[16];

        struct kv_batch b = {STORE_DEFAULT_TENANT, &o, 1};

        o.after = sl(after);
        EXPECT_EQ_I64(store_kv_read(e.store, &b, T0 + S, &a, &err), 0);
        r = a.results[0];
        pages++;
        for (size_t i = 0; i < r.n_rows; i++) {
            snprintf(want, sizeof(want), "p:%05d", next++);
            EXPECT_MEM_EQ(r.rows[i].key.ptr, r.rows[i].key.len, want,
                          strlen(want));
            EXPECT_EQ_U64(r.rows[i].value.len, 0);
        }
        EXPECT_EQ_I64(r.truncated, r.has_next_after);
        if (!r.truncated) {
            kv_answer_free(&a);
            break;
        }
        snprintf(after, sizeof(after), "%.*s", (int)r.next_after.len,
                 r.next_after.ptr);
        kv_answer_free(&a);
        if (pages > 10) {
            break;
        }
    }
    EXPECT_EQ_I64(next, 2500);
    EXPECT_EQ_I64(pages, 3);
    env_close(&e);
}

/* A key equal to the prefix is a row of its page like any other: passing it
 * back as the cursor moves past it (it was read as "no cursor", so a client
 * paging with limit 1 got the same page for ever). */
TEST(get_prefix_pages_past_a_key_equal_to_the_prefix)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_op ops[3] = {op_put("user", "1"), op_put("user1", "2"),
                           op_put("user2", "3")};
    struct kv_op o = {0};
    const char *want[] = {"user", "user1", "user2"};
    char after[16] = "";
    size_t seen = 0;
    struct err err = {0};

    env_open(&e);
    EXPECT_EQ_I64(kv_apply(&e, T0, ops, 3, &a), 0);
    kv_answer_free(&a);
    o.op = KV_GET_PREFIX;
    o.ns = sl("queen-s3");
    o.prefix = sl("user");
    o.limit = 1;
    for (int page = 0; page < 5; page++) {
        struct kv_batch b = {STORE_DEFAULT_TENANT, &o, 1};
        struct kv_result r;

        o.after = sl(after);
        EXPECT_EQ_I64(store_kv_read(e.store, &b, T0 + S, &a, &err), 0);
        r = a.results[0];
        for (size_t i = 0; i < r.n_rows && seen < 3; i++) {
            EXPECT_MEM_EQ(r.rows[i].key.ptr, r.rows[i].key.len, want[seen],
                          strlen(want[seen]));
            seen++;
        }
        bool is_more = r.truncated;
        snprintf(after, sizeof(after), "%.*s", (int)r.next_after.len,
                 r.next_after.ptr);
        kv_answer_free(&a);
        if (!is_more) {
            break;
        }
    }
    EXPECT_EQ_U64(seen, 3);
    env_close(&e);
}

TEST(get_many_and_get_prefix_see_the_calls_own_writes)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_op ops[4];
    struct slice keys[3] = {{"w:b", 3}, {"w:a", 3}, {"w:zz", 4}};
    struct kv_result r;

    env_open(&e);
    put1(&e, T0, op_put("w:a", "\"old\""), &a);
    kv_answer_free(&a);
    memset(ops, 0, sizeof(ops));
    ops[0].op = KV_GET_MANY; /* listed first, runs after the writes */
    ops[0].ns = sl("queen-s3");
    ops[0].keys = keys;
    ops[0].n_keys = 3;
    ops[1] = op_get("w:a"); /* same key as a later write: pre-write state */
    ops[2] = op_put("w:a", "\"new\"");
    ops[3] = op_put("w:b", "\"b\"");
    EXPECT_EQ_I64(kv_apply(&e, T0 + 1, ops, 4, &a), 0);
    r = a.results[0];
    EXPECT_EQ_U64(r.n_rows, 2);
    EXPECT_MEM_EQ(r.rows[0].key.ptr, r.rows[0].key.len, "w:a", 3);
    EXPECT_MEM_EQ(r.rows[0].value.ptr, r.rows[0].value.len, "\"new\"", 5);
    EXPECT_MEM_EQ(r.rows[1].key.ptr, r.rows[1].key.len, "w:b", 3);
    EXPECT_EQ_U64(r.n_missing, 1);
    EXPECT_MEM_EQ(r.missing[0].ptr, r.missing[0].len, "w:zz", 4);
    EXPECT(!r.truncated);
    r = a.results[1];
    EXPECT(r.found);
    EXPECT_MEM_EQ(r.value.ptr, r.value.len, "\"old\"", 5);
    kv_answer_free(&a);
    env_close(&e);
}

TEST(delete_rules_for_live_expired_and_absent_rows)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_op del = {0};
    struct kv_result r;
    uint64_t v;

    env_open(&e);
    v = put_at(&e, T0, op_put("d", "1"));
    del.op = KV_DELETE;
    del.ns = sl("queen-s3");
    del.key = sl("d");
    del.has_expect = true;
    del.expect = 0;
    /* expect 0 against a live row */
    put_lost(&e, T0 + 1, del, KV_REASON_EXISTS);
    del.expect = v + 100;
    r = put1(&e, T0 + 2, del, &a);
    EXPECT_EQ_I64(r.reason, KV_REASON_VERSION);
    kv_answer_free(&a);
    del.has_expect = false;
    r = put1(&e, T0 + 3, del, &a);
    EXPECT(r.applied);
    EXPECT_EQ_U64(r.version, v);
    EXPECT_MEM_EQ(r.value.ptr, r.value.len, "1", 1);
    kv_answer_free(&a);
    put_lost(&e, T0 + 4, del, KV_REASON_ABSENT);
    /* An expired row: removed, answered absent. */
    put_at(&e, T0 + 5, op_ttl("d", "1", 1));
    put_lost(&e, T0 + 5 + 2 * S, del, KV_REASON_ABSENT);
    EXPECT_EQ_U64(sweep(&e, T0 + 10 * S, 512), 0); /* already gone */
    del.has_expect = true;
    del.expect = 0;
    EXPECT_EQ_U64(put_won(&e, T0 + 11 * S, del), 0);
    env_close(&e);
}

TEST(put_replaces_the_expiry_instead_of_inheriting_it)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_result r;

    env_open(&e);
    put_at(&e, T0, op_ttl("r", "1", 5));
    put_at(&e, T0 + 1, op_put("r", "2")); /* forever now */
    r = get1(&e, T0 + 60 * S, "r", &a);
    EXPECT(r.found);
    EXPECT_EQ_I64(r.expires_at, 0);
    kv_answer_free(&a);
    EXPECT_EQ_U64(sweep(&e, T0 + 60 * S, 512), 0);
    env_close(&e);
}

TEST(incr_counts_from_zero_and_refuses_a_non_integer)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_op o = {0};
    struct kv_result r;

    env_open(&e);
    o.op = KV_INCR;
    o.ns = sl("c");
    o.key = sl("n");
    o.forever = true;
    o.by = 5;
    r = put1(&e, T0, o, &a);
    EXPECT_MEM_EQ(r.value.ptr, r.value.len, "5", 1);
    kv_answer_free(&a);
    o.by = -7;
    r = put1(&e, T0 + 1, o, &a);
    EXPECT_MEM_EQ(r.value.ptr, r.value.len, "-2", 2);
    kv_answer_free(&a);
    o.key = sl("s");
    put1(&e, T0 + 2, op_put("x", "1"), &a);
    kv_answer_free(&a);
    {
        struct kv_op p = op_put("s", "\"str\"");

        p.ns = sl("c");
        put1(&e, T0 + 3, p, &a);
        kv_answer_free(&a);
    }
    EXPECT_EQ_I64(kv_apply(&e, T0 + 4, &o, 1, &a), ERR_INVALID);
    EXPECT_STR_EQ(a.reason_id, "kv_not_a_number");
    kv_answer_free(&a);
    env_close(&e);
}

struct bad_case {
    const char *reason;
    int code;
    struct kv_op op;
};

TEST(every_validation_reason_answers_its_code_and_writes_nothing)
{
    struct slice empty_keys[1] = {{"", 0}};
    static char big[KV_VALUE_MAX + 2];
    static char long_key[600];
    struct bad_case cases[] = {
        {"kv_bad_namespace", ERR_INVALID, {.op = KV_GET, .ns = sl("Bad")}},
        {"kv_bad_namespace", ERR_INVALID, {.op = KV_GET, .ns = sl("_x")}},
        {"kv_unknown_op", ERR_INVALID, {.op = 99, .ns = sl("a")}},
        {"kv_bad_key", ERR_INVALID, {.op = KV_GET, .ns = sl("a")}},
        {"kv_bad_key",
         ERR_INVALID,
         {.op = KV_GET, .ns = sl("a"), .key = {"a\0b", 3}}},
        {"kv_key_too_large",
         ERR_TOO_BIG,
         {.op = KV_GET, .ns = sl("a"), .key = {long_key, 513}}},
        {"kv_key_too_large",
         ERR_TOO_BIG,
         {.op = KV_GET, .ns = sl("a"), .key = {long_key, 494}}},
        {"kv_expiry_not_specified",
         ERR_INVALID,
         {.op = KV_PUT, .ns = sl("a"), .key = sl("k"), .value = sl("1")}},
        {"kv_expiry_not_specified",
         ERR_INVALID,
         {.op = KV_PUT,
          .ns = sl("a"),
          .key = sl("k"),
          .value = sl("1"),
          .forever = true,
          .ttl_seconds = 3}},
        {"kv_bad_ttl",
         ERR_INVALID,
         {.op = KV_PUT,
          .ns = sl("a"),
          .key = sl("k"),
          .value = sl("1"),
          .ttl_seconds = -3}},
        {"kv_value_required",
         ERR_INVALID,
         {.op = KV_PUT, .ns = sl("a"), .key = sl("k"), .forever = true}},
        {"kv_value_too_large",
         ERR_TOO_BIG,
         {.op = KV_PUT,
          .ns = sl("a"),
          .key = sl("k"),
          .forever = true,
          .value = {big, KV_VALUE_MAX + 1}}},
        {"kv_bad_expect",
         ERR_INVALID,
         {.op = KV_PUT_IF_ABSENT,
          .ns = sl("a"),
          .key = sl("k"),
          .value = sl("1"),
          .forever = true,
          .has_expect = true,
          .expect = 3}},
        {"kv_bad_expect",
         ERR_INVALID,
         {.op = KV_INCR,
          .ns = sl("a"),
          .key = sl("k"),
          .forever = true,
          .has_expect = true}},
        {"kv_prefix_required",
         ERR_INVALID,
         {.op = KV_GET_PREFIX, .ns = sl("a")}},
        {"kv_bad_key",
         ERR_INVALID,
         {.op = KV_GET_MANY, .ns = sl("a"), .keys = empty_keys, .n_keys = 1}},
    };
    struct env e = {0};
    struct kv_answer a;
    uint64_t last = 0;
    struct err err = {0};

    memset(big, '1', sizeof(big));
    memset(long_key, 'k', sizeof(long_key));
    env_open(&e);
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct kv_op ops[2] = {op_put("w", "1"), cases[i].op};

        if (kv_apply(&e, T0, ops, 2, &a) != cases[i].code) {
            HARNESS_FAIL("case %zu: code %d, want %d", i, a.status,
                         cases[i].code);
        }
        if (strcmp(a.reason_id, cases[i].reason) != 0) {
            HARNESS_FAIL("case %zu: reason %s, want %s", i, a.reason_id,
                         cases[i].reason);
        }
    }
    EXPECT_EQ_I64(store_kv_last_version(e.store, &last, &err), 0);
    EXPECT_EQ_U64(last, 0);
    env_close(&e);
}

TEST(a_refused_namespace_is_quoted_whole_even_with_a_nul)
{
    struct kv_op op = {
        .op = KV_GET, .ns = {"queen-s3\0x", 10}, .key = {"k", 1}};
    char reason[40];
    struct err err = {0};

    EXPECT_EQ_I64(kv_validate(&op, 1, true, reason, &err), ERR_INVALID);
    EXPECT_STR_EQ(reason, "kv_bad_namespace");
    EXPECT_STR_EQ(err.msg, "namespace 'queen-s3?x' does not match "
                           "^[a-z0-9][a-z0-9._-]{0,63}$");
}

TEST(duplicate_writes_and_ceilings_are_refused)
{
    struct kv_op ops[300];
    char reason[40];
    struct err err = {0};
    struct slice keys[4097];

    for (size_t i = 0; i < ARRAY_LEN(ops); i++) {
        ops[i] = op_get("g");
    }
    ops[0] = op_put("k", "1");
    ops[1] = op_put("k", "2");
    EXPECT_EQ_I64(kv_validate(ops, 2, true, reason, &err), ERR_INVALID);
    EXPECT_STR_EQ(reason, "kv_duplicate_key_in_call");
    ops[1].ns = sl("other"); /* another namespace: fine */
    EXPECT_EQ_I64(kv_validate(ops, 2, true, reason, &err), 0);
    EXPECT_EQ_I64(kv_validate(ops, 257, true, reason, &err), ERR_INVALID);
    EXPECT_STR_EQ(reason, "kv_too_many_ops");
    EXPECT_EQ_I64(kv_validate(ops, 257, false, reason, &err), 0);
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        keys[i] = sl("k");
    }
    ops[2].op = KV_GET_MANY;
    ops[2].keys = keys;
    ops[2].n_keys = 4097;
    EXPECT_EQ_I64(kv_validate(ops + 2, 1, true, reason, &err), ERR_INVALID);
    EXPECT_STR_EQ(reason, "kv_too_many_keys");
    EXPECT_EQ_I64(kv_validate(ops + 2, 1, false, reason, &err), 0);
}

TEST(the_namespace_message_quotes_the_pattern)
{
    struct kv_op o = op_get("k");
    char reason[40];
    struct err err = {0};

    o.ns = sl("Nope");
    EXPECT_EQ_I64(kv_validate(&o, 1, true, reason, &err), ERR_INVALID);
    EXPECT_STR_EQ(
        err.msg, "namespace 'Nope' does not match ^[a-z0-9][a-z0-9._-]{0,63}$");
    o = op_put("k", "1");
    o.forever = false;
    EXPECT_EQ_I64(kv_validate(&o, 1, true, reason, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "exactly one of ttlSeconds (integer > 0) and "
                           "forever:true is required, got 0");
}

TEST(the_command_body_round_trips_and_refuses_garbage)
{
    struct slice keys[2] = {{"a", 1}, {"bb", 2}};
    struct kv_op ops[3] = {op_put("k", "{\"x\":1}"), {0}, op_get("g")};
    struct buf b;
    struct kv_cmd c;
    struct err err = {0};

    ops[0].required = true;
    ops[0].has_expect = true;
    ops[0].expect = 77;
    ops[1].op = KV_GET_MANY;
    ops[1].ns = sl("n");
    ops[1].keys = keys;
    ops[1].n_keys = 2;
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(kv_cmd_encode(&b, ops, 3, &err), 0);
    EXPECT_EQ_I64(kv_cmd_decode((struct slice){b.data, b.len}, &c, &err), 0);
    EXPECT_EQ_U64(c.n, 3);
    EXPECT(c.ops[0].required && c.ops[0].forever && c.ops[0].has_expect);
    EXPECT_EQ_U64(c.ops[0].expect, 77);
    EXPECT_MEM_EQ(c.ops[0].value.ptr, c.ops[0].value.len, "{\"x\":1}", 7);
    EXPECT_EQ_U64(c.ops[1].n_keys, 2);
    EXPECT_MEM_EQ(c.ops[1].keys[1].ptr, c.ops[1].keys[1].len, "bb", 2);
    EXPECT_MEM_EQ(c.ops[2].key.ptr, c.ops[2].key.len, "g", 1);
    kv_cmd_free(&c);
    for (size_t cut = 0; cut < b.len; cut++) {
        EXPECT_EQ_I64(kv_cmd_decode((struct slice){b.data, cut}, &c, &err),
                      ERR_CORRUPT);
        kv_cmd_free(&c);
    }
    buf_free(&b);
}

/* Through the fsm: the CMD_KV handler applies, moves safeTime, sweeps. */
static const struct fsm_result *apply_cmd(struct env *e, int64_t stamp,
                                          const struct kv_op *ops, size_t n,
                                          bool is_sweep)
{
    struct buf b;
    struct err err = {0};
    const struct fsm_result *res = NULL;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_begin(&b, CMD_KV, STORE_DEFAULT_TENANT, &err), 0);
    if (is_sweep) {
        EXPECT_EQ_I64(kv_cmd_encode_sweep(&b, KV_SWEEP_MAX, &err), 0);
    } else {
        EXPECT_EQ_I64(kv_cmd_encode(&b, ops, n, &err), 0);
    }
    EXPECT_EQ_I64(cmd_finish(&b, 0, &err), 0);
    cmd_set_stamp(b.data, stamp);
    EXPECT_EQ_I64(
        fsm_apply_entry(e->fsm, ++e->index, b.data, b.len, &res, &err), 0);
    buf_free(&b);
    return res;
}

TEST(a_kv_command_moves_safe_time_and_a_sweep_command_removes_rows)
{
    struct env e = {0};
    struct kv_service *svc;
    struct kv_op o = op_put("lease", "{}");
    const struct fsm_result *res;
    struct kv_answer a;
    int64_t safe = 0;
    struct err err = {0};

    env_open(&e);
    svc = kv_service_new(e.store);
    fsm_set_handler(e.fsm, CMD_KV, kv_service_apply, svc);
    o.forever = false;
    o.ttl_seconds = 1;
    res = apply_cmd(&e, T0, &o, 1, false);
    EXPECT(res != NULL && res->code == 0);
    EXPECT_EQ_I64(store_safe_time(e.store, &safe, &err), 0);
    EXPECT_EQ_I64(safe, T0);
    res = apply_cmd(&e, T0 + 5 * S, NULL, 0, true);
    EXPECT(res != NULL && res->code == 0);
    EXPECT_EQ_I64(store_safe_time(e.store, &safe, &err), 0);
    EXPECT_EQ_I64(safe, T0 + 5 * S);
    EXPECT_EQ_U64(sweep(&e, T0 + 6 * S, 512), 0); /* the command swept it */
    o.ttl_seconds = 0; /* invalid: refused the same way on every node */
    res = apply_cmd(&e, T0 + 6 * S, &o, 1, false);
    EXPECT(res != NULL && res->code == ERR_INVALID);
    get1(&e, T0 + 6 * S, "lease", &a);
    EXPECT(!a.results[0].found);
    kv_answer_free(&a);
    env_close(&e);
    kv_service_free(svc);
}

/* ---- the in-process interface over a real one-node raft ---- */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "node_helpers.h"
#include "raft/node.h"

struct sinkctx {
    struct kv_service *svc;
    atomic_bool is_done;
    int put_status;
    uint64_t put_version;
    bool got_found;
    uint64_t got_version;
    int lost_status;
    size_t lost_index;
    int bad_rc;
    char bad_msg[256];
};

static void *sink_thread(void *p)
{
    struct sinkctx *c = p;
    struct kv_op ops[2] = {op_put("s3:sink-2:a%2Fb:intent", "{\"k\":1}"),
                           op_get("s3:sink-2:a%2Fb:intent")};
    struct kv_answer a;
    struct err err = {0};
    struct kv_batch b = {STORE_DEFAULT_TENANT, ops, 1};

    c->put_status = kv_call_batch(c->svc, &b, 0, &a, &err);
    if (c->put_status == 0) {
        c->put_version = a.results[0].version;
        kv_answer_free(&a);
    }
    b.ops = ops + 1;
    if (kv_call_batch(c->svc, &b, 0, &a, &err) == 0) {
        c->got_found = a.results[0].found;
        c->got_version = a.results[0].version;
        kv_answer_free(&a);
    }
    b.ops = ops;
    ops[0] = op_put("other", "1");
    ops[1] = op_put("s3:sink-2:a%2Fb:intent", "2");
    ops[1].has_expect = true;
    ops[1].expect = c->put_version + 1000;
    ops[1].required = true;
    b.n = 2;
    if (kv_call_batch(c->svc, &b, 0, &a, &err) == 0) {
        c->lost_status = a.status;
        c->lost_index = a.failed_index;
        kv_answer_free(&a);
    }
    ops[0].forever = false;
    b.n = 1;
    c->bad_rc = kv_call_batch(c->svc, &b, 0, &a, &err);
    snprintf(c->bad_msg, sizeof(c->bad_msg), "%s", err.msg);
    atomic_store(&c->is_done, true);
    return NULL;
}

static bool node_is_leader(void *n)
{
    return node_role(n) == NODE_LEADER;
}

static bool sink_is_done(void *c)
{
    return atomic_load(&((struct sinkctx *)c)->is_done);
}

static bool loop_until(uv_loop_t *loop, bool (*pred)(void *), void *arg,
                       double secs)
{
    return nh_run_until(loop, pred, arg, secs, 1000);
}

/* A one-voter node in a temp dir whose CMD_KV handler is a KV service on
 * its store, leader before it returns; the service is the caller's. */
static struct kv_service *kv_node_up(struct node_rig *r, const char *tmpl)
{
    struct node_config cfg;
    struct kv_service *svc;
    struct err err = {0};

    nh_setup(r, tmpl);
    memset(&cfg, 0, sizeof(cfg));
    node_store_dir(r->dir, r->store_dir, sizeof(r->store_dir));
    mkdir(r->store_dir, 0755);
    ASSERT(store_open(&r->store, r->store_dir, (uint64_t)1 << 30, &err) == 0);
    svc = kv_service_new(r->store);
    cfg.dir = r->dir;
    cfg.id = 1;
    cfg.raft_address = r->address;
    cfg.handlers[CMD_KV] = kv_service_apply;
    cfg.handler_args[CMD_KV] = svc;
    ASSERT(node_start(&r->node, &r->loop, &cfg, r->store, &err) == 0);
    kv_service_attach(svc, r->node);
    EXPECT(loop_until(&r->loop, node_is_leader, r->node, 10));
    return svc;
}

/* After nh_stop() and the service's free: the loop and the dir go. */
static void kv_node_gone(struct node_rig *r)
{
    uv_run(&r->loop, UV_RUN_NOWAIT);
    uv_loop_close(&r->loop);
    nftw(r->dir, env_rm, 16, FTW_DEPTH | FTW_PHYS);
}

TEST(kv_call_from_a_sink_thread_applies_through_raft)
{
    struct node_rig r;
    struct sinkctx c;
    pthread_t th;

    memset(&c, 0, sizeof(c));
    c.svc = kv_node_up(&r, "/tmp/queen-kvnode-XXXXXX");
    pthread_create(&th, NULL, sink_thread, &c);
    EXPECT(loop_until(&r.loop, sink_is_done, &c, 30));
    pthread_join(th, NULL);
    EXPECT_EQ_I64(c.put_status, 0);
    EXPECT(c.put_version > 0);
    EXPECT(c.got_found);
    EXPECT_EQ_U64(c.got_version, c.put_version);
    EXPECT_EQ_I64(c.lost_status, ERR_PRECONDITION);
    EXPECT_EQ_U64(c.lost_index, 1);
    EXPECT_EQ_I64(c.bad_rc, ERR_INVALID);
    EXPECT(strstr(c.bad_msg, "kv_expiry_not_specified") == c.bad_msg);
    EXPECT(nh_stop(&r, 10));
    kv_service_free(c.svc);
    kv_node_gone(&r);
}

/* A sink thread past its grace: calls in a loop (a write, then a read)
 * until told to stop, and counts what the calls that began after the
 * service was closed answered. */
struct latectx {
    struct kv_service *svc;
    atomic_bool is_closed; /* set after kv_service_close() returned */
    atomic_bool is_stopping;
    atomic_uint n_before; /* calls that began before the close */
    atomic_uint n_after;  /* calls that began after it */
    atomic_uint n_after_busy;
    atomic_bool has_wrong_msg;
};

static void late_call(struct latectx *c, const struct kv_batch *b)
{
    bool was_closed = atomic_load(&c->is_closed);
    struct kv_answer a;
    struct err err = {0};
    int rc = kv_call_batch(c->svc, b, 2000, &a, &err);

    if (rc == 0) {
        kv_answer_free(&a);
    }
    if (!was_closed) {
        atomic_fetch_add(&c->n_before, 1);
        return;
    }
    atomic_fetch_add(&c->n_after, 1);
    if (rc == ERR_BUSY) {
        atomic_fetch_add(&c->n_after_busy, 1);
    }
    if (strcmp(err.msg, "kv: the node is closing") != 0) {
        atomic_store(&c->has_wrong_msg, true);
    }
}

static void *late_sink_thread(void *p)
{
    struct latectx *c = p;
    struct kv_op w = op_put("s3:default:orders:lease", "{\"k\":1}");
    struct kv_op r = op_get("s3:default:orders:lease");
    struct kv_batch bw = {STORE_DEFAULT_TENANT, &w, 1};
    struct kv_batch br = {STORE_DEFAULT_TENANT, &r, 1};

    while (!atomic_load(&c->is_stopping)) {
        late_call(c, &bw);
        late_call(c, &br);
    }
    return NULL;
}

static bool late_has_run(void *p)
{
    return atomic_load(&((struct latectx *)p)->n_before) >= 20;
}

static bool late_ran_after_close(void *p)
{
    return atomic_load(&((struct latectx *)p)->n_after) >= 200;
}

/* The node and the store are freed while the thread still calls: under
 * ASan a call that reached either after kv_service_close() is a
 * use-after-free; without it, every such call must answer ERR_BUSY. */
TEST(calls_after_the_service_closed_are_refused_and_never_reach_the_node)
{
    struct node_rig r;
    struct latectx c;
    pthread_t th;

    memset(&c, 0, sizeof(c));
    c.svc = kv_node_up(&r, "/tmp/queen-kvclose-XXXXXX");
    pthread_create(&th, NULL, late_sink_thread, &c);
    EXPECT(loop_until(&r.loop, late_has_run, &c, 30));
    kv_service_close(c.svc); /* the thread is mid-loop, maybe mid-call */
    atomic_store(&c.is_closed, true);
    EXPECT(nh_stop(&r, 10));
    EXPECT(loop_until(&r.loop, late_ran_after_close, &c, 30));
    atomic_store(&c.is_stopping, true);
    pthread_join(th, NULL);
    EXPECT(atomic_load(&c.n_after) >= 200);
    EXPECT_EQ_U64(atomic_load(&c.n_after_busy), atomic_load(&c.n_after));
    EXPECT(!atomic_load(&c.has_wrong_msg));
    kv_service_close(c.svc); /* idempotent */
    kv_service_free(c.svc);
    kv_node_gone(&r);
}

/* ---- the HTTP surface's pure part (api/kv.h) ---- */

#include "api/kv.h"

TEST(rendered_results_use_the_reference_shapes_and_timestamp_form)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_op ops[3] = {op_put("r", "{\"a\":42.00}"), op_get("r"),
                           op_put("gone", "1")};
    struct buf b;
    struct err err = {0};
    char want[512];

    env_open(&e);
    ops[0].forever = false;
    ops[0].ttl_seconds = 10;
    ops[2].op = KV_PUT_IF_ABSENT;
    put1(&e, T0 + 500000, ops[0], &a);
    kv_answer_free(&a);
    EXPECT_EQ_I64(kv_apply(&e, T0 + S, ops + 1, 2, &a), 0);
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(api_kv_render(&a, false, &b, &err), 0);
    snprintf(want, sizeof(want),
             "{\"results\":[{\"index\":0,\"op\":\"get\",\"found\":true,"
             "\"key\":\"r\",\"value\":{\"a\":42.00},\"version\":1,"
             "\"expiresAt\":\"2025-10-09T08:53:30.5+00:00\","
             "\"updatedAt\":\"2025-10-09T08:53:20.5+00:00\"},"
             "{\"index\":1,\"op\":\"putIfAbsent\",\"applied\":true,"
             "\"key\":\"gone\",\"value\":1,\"version\":2}]}");
    EXPECT_STR_EQ(b.data, want);
    buf_free(&b);
    kv_answer_free(&a);
    env_close(&e);
}

/* A ttlSeconds past year 9999 is taken and ends at the last instant a
 * four-digit RFC 3339 stamp shows, never at a six-digit year. */
TEST(a_ttl_past_year_9999_ends_there)
{
    static const int64_t ttls[] = {INT64_MAX, INT64_MAX / 1000000,
                                   253402300799 - 1759999999};
    const int64_t last = INT64_C(253402300799999999);
    struct env e = {0};
    struct kv_answer a;
    struct kv_result r;
    struct buf b;
    struct err err = {0};

    env_open(&e);
    for (size_t i = 0; i < sizeof(ttls) / sizeof(ttls[0]); i++) {
        put_at(&e, T0, op_ttl("t", "1", ttls[i]));
        r = get1(&e, T0 + S, "t", &a);
        EXPECT(r.found);
        EXPECT_EQ_I64(r.expires_at, last);
        buf_init(&b, BUF_UNLIMITED);
        EXPECT_EQ_I64(api_kv_render(&a, false, &b, &err), 0);
        EXPECT(strstr(b.data,
                      "\"expiresAt\":\"9999-12-31T23:59:59.999999+00:00\"") !=
               NULL);
        buf_free(&b);
        kv_answer_free(&a);
    }
    put_at(&e, T0, op_ttl("t", "1", 10));
    r = get1(&e, T0 + S, "t", &a);
    EXPECT_EQ_I64(r.expires_at, T0 + 10 * S);
    kv_answer_free(&a);
    env_close(&e);
}

TEST(the_precondition_body_names_the_winner)
{
    struct kv_answer a;
    struct buf b;
    struct err err = {0};

    memset(&a, 0, sizeof(a));
    a.status = ERR_PRECONDITION;
    a.failed_index = 1;
    a.kv_reason = KV_REASON_EXISTS;
    a.version = 9;
    a.has_value = true;
    a.value = sl("\"x\"");
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(api_kv_render(&a, false, &b, &err), 0);
    EXPECT_STR_EQ(b.data, "{\"ok\":false,\"reason\":\"kv_precondition\","
                          "\"failedIndex\":1,\"kvReason\":\"exists\","
                          "\"version\":9,\"value\":\"x\"}");
    buf_free(&b);
}

TEST(the_parser_reads_both_body_forms_and_counts_forever_false_as_absent)
{
    const char *bodies[] = {
        "[{\"op\":\"put\",\"ns\":\"n\",\"key\":\"k\",\"value\":null,"
        "\"forever\":false,\"ttlSeconds\":3}]",
        "{\"operations\":[{\"op\":\"put\",\"namespace\":\"n\",\"key\":\"k\","
        "\"value\":null,\"ttlSeconds\":3}]}"};
    struct slice none = {"", 0};

    for (size_t i = 0; i < ARRAY_LEN(bodies); i++) {
        struct api_kv k;
        struct err err = {0};
        char reason[40];

        struct slice body = {bodies[i], strlen(bodies[i])};

        EXPECT_EQ_I64(api_kv_parse(&k, API_KV_BATCH, body, none, none, &err),
                      0);
        EXPECT_EQ_U64(k.n, 1);
        EXPECT_MEM_EQ(k.ops[0].ns.ptr, k.ops[0].ns.len, "n", 1);
        EXPECT_MEM_EQ(k.ops[0].value.ptr, k.ops[0].value.len, "null", 4);
        EXPECT_EQ_I64(kv_validate(k.ops, k.n, true, reason, &err), 0);
        api_kv_free(&k);
    }
}

/* A member the parser reads, given twice in an operation or a single-key
 * body, refuses the call (kv_bad_body) instead of being read first-wins;
 * a value keeps its own repeated keys, byte for byte. */
TEST(the_parser_refuses_a_repeated_field_but_not_inside_a_value)
{
    static const struct {
        int mode;
        const char *body;
        const char *msg;
    } cases[] = {
        {API_KV_BATCH, "{\"operations\":[],\"operations\":[]}",
         "duplicate key \"operations\""},
        {API_KV_BATCH,
         "[{\"op\":\"get\",\"ns\":\"n\",\"key\":\"a\"},{\"op\":\"get\","
         "\"ns\":\"n\",\"key\":\"a\",\"k\\u0065y\":\"b\"}]",
         "operation 1: duplicate key \"key\""},
        {API_KV_PUT, "{\"value\":1,\"forever\":true,\"value\":2}",
         "duplicate key \"value\""},
        {API_KV_DELETE, "{\"required\":true,\"required\":false}",
         "duplicate key \"required\""},
    };
    const char *ok = "[{\"op\":\"put\",\"ns\":\"n\",\"key\":\"k\",\"x\":1,"
                     "\"x\":2,\"value\":{\"a\":1,\"a\":2},\"forever\":true}]";
    struct slice none = {"", 0};
    struct slice name = {"k", 1};
    struct api_kv k;
    struct err err = {0};

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct slice body = {cases[i].body, strlen(cases[i].body)};

        EXPECT_EQ_I64(api_kv_parse(&k, cases[i].mode, body, name, name, &err),
                      ERR_INVALID);
        EXPECT_STR_EQ(k.reason, "kv_bad_body");
        EXPECT_STR_EQ(err.msg, cases[i].msg);
        api_kv_free(&k);
    }
    EXPECT_EQ_I64(api_kv_parse(&k, API_KV_BATCH, (struct slice){ok, strlen(ok)},
                               none, none, &err),
                  0);
    EXPECT_MEM_EQ(k.ops[0].value.ptr, k.ops[0].value.len, "{\"a\":1,\"a\":2}",
                  13);
    api_kv_free(&k);
}

/* ---- apply order: the order given (issue 13, item 6) --------------------- */

/* A put of key expecting version v (0: none), required. */
static struct kv_op op_cas(const char *key, const char *value, uint64_t v)
{
    struct kv_op o = op_put(key, value);

    o.has_expect = true;
    o.expect = v;
    o.required = true;
    return o;
}

/* A stale node's pointer batch: its fence (the lease rewrite, index 0)
 * and its pointer CAS both lost to the node that took the queue over. The
 * lease key sorts after the pointer's, but the fence decides: failedIndex
 * is 0 and names the lease row's winner, so the stale node marks its lease
 * lost (sink/lease.h (2)). */
TEST(a_stale_fence_at_index_0_fails_the_batch_at_index_0)
{
    struct env e = {0};
    struct kv_answer a;
    const char *lk = "s3:default:orders:lease";
    const char *ck = "s3:default:orders:committed";
    uint64_t vl;
    uint64_t vc;
    uint64_t vl2;
    uint64_t vc2;

    env_open(&e);
    vl = put_won(&e, T0, op_put(lk, "{\"instance\":\"node-1\"}"));
    vc = put_won(&e, T0 + 1, op_put(ck, "{\"k\":1}"));
    /* node-2 takes the lease over and commits window 2 */
    vl2 = put_won(&e, T0 + 2, op_cas(lk, "{\"instance\":\"node-2\"}", vl));
    vc2 = put_won(&e, T0 + 3, op_cas(ck, "{\"k\":2}", vc));
    struct kv_op stale[2] = {op_cas(lk, "{\"instance\":\"node-1\"}", vl),
                             op_cas(ck, "{\"k\":2,\"forged\":1}", vc)};
    EXPECT_EQ_I64(kv_apply(&e, T0 + 4, stale, 2, &a), ERR_PRECONDITION);
    EXPECT_EQ_U64(a.failed_index, 0);
    EXPECT_EQ_I64(a.kv_reason, KV_REASON_VERSION);
    EXPECT_EQ_U64(a.version, vl2);
    EXPECT_MEM_EQ(a.value.ptr, a.value.len, "{\"instance\":\"node-2\"}", 21);
    kv_answer_free(&a);
    EXPECT_EQ_U64(get1(&e, T0 + 5, ck, &a).version, vc2);
    EXPECT_MEM_EQ(a.results[0].value.ptr, a.results[0].value.len, "{\"k\":2}",
                  7);
    kv_answer_free(&a);
    env_close(&e);
}

/* Writes apply in the order given, whatever their keys: versions are
 * issued in that order, the first refusal in that order is the answer,
 * and (unvalidated, as the fsm may replay any logged batch) a CAS after a
 * put of the same key expects the put's version. getMany and getPrefix
 * still answer after every write of the call. */
TEST(writes_apply_in_the_order_given_not_sorted_by_key)
{
    struct env e = {0};
    struct kv_answer a;
    struct kv_op ops[3] = {op_put("s3:default:orders:lease", "1"),
                           op_put("s3:default:orders:committed", "2"),
                           op_put("s3:default:orders:intent", "3")};
    uint64_t v0;

    env_open(&e);
    v0 = put_won(&e, T0, op_put("w:first", "0"));
    EXPECT_EQ_I64(kv_apply(&e, T0 + 1, ops, 3, &a), 0);
    for (size_t i = 0; i < 3; i++) {
        EXPECT(a.results[i].applied);
        EXPECT_EQ_U64(a.results[i].version, v0 + 1 + i);
    }
    kv_answer_free(&a);

    /* the same key twice: the CAS sees the put before it */
    struct kv_op same[2] = {op_put("w:x", "\"a\""),
                            op_cas("w:x", "\"b\"", v0 + 4)};
    struct kv_batch b = {STORE_DEFAULT_TENANT, same, 2};
    kv_write(&e, &b, T0 + 2, &a);
    EXPECT_EQ_I64(a.status, 0);
    EXPECT_EQ_U64(a.results[0].version, v0 + 4);
    EXPECT_EQ_U64(a.results[1].version, v0 + 5);
    kv_answer_free(&a);
    struct kv_result r = get1(&e, T0 + 3, "w:x", &a);
    EXPECT_MEM_EQ(r.value.ptr, r.value.len, "\"b\"", 3);
    kv_answer_free(&a);

    /* the first refusal in the order given answers: an incr of a
     * non-integer at index 0 before a lost required put of a key that
     * sorts first */
    put_won(&e, T0 + 4, op_put("z:text", "\"x\""));
    struct kv_op inc = op_put("z:text", "0");
    inc.op = KV_INCR;
    inc.value = (struct slice){NULL, 0};
    struct kv_op two[2] = {inc, op_cas("a:missing", "1", 99)};
    EXPECT_EQ_I64(kv_apply(&e, T0 + 5, two, 2, &a), ERR_INVALID);
    EXPECT_STR_EQ(a.reason_id, "kv_not_a_number");
    kv_answer_free(&a);
    env_close(&e);
}

/* ---- the sink's namespace is read-only over HTTP (issue 13, item 9) ------ */

/* Parse body in mode (ns and key from the path for PUT/DELETE) as the
 * routes do, validate it at the HTTP edge, then apply the reserved-namespace
 * rule; returns its code, with the reason in reason[40]. */
static int route_check_open(int mode, const char *body, const char *ns,
                            const char *key, bool sink_open, char *reason)
{
    struct api_kv k;
    struct err err = {0};
    int rc;

    rc = api_kv_parse(&k, mode, sl(body), sl(ns), sl(key), &err);
    if (rc == 0) {
        rc = kv_validate(k.ops, k.n, true, reason, &err);
    }
    if (rc == 0) {
        rc = api_kv_check_reserved(k.ops, k.n, sink_open, reason, &err);
    }
    if (rc == 0) {
        reason[0] = '\0';
    }
    api_kv_free(&k);
    return rc;
}

static int route_check(int mode, const char *body, const char *ns,
                       const char *key, char *reason)
{
    return route_check_open(mode, body, ns, key, false, reason);
}

/* api/kv.h (3): the storage format's namespace is refused to every HTTP
 * write, also with QUEEN_KV_UNSAFE_SINK_WRITES, which opens the sink's. */
TEST(http_writes_to_the_format_namespace_are_refused_even_when_open)
{
    static const char *const bodies[] = {
        "[{\"op\":\"put\",\"ns\":\"queen-cluster\",\"key\":\"format\","
        "\"value\":2,\"forever\":true}]",
        "[{\"op\":\"delete\",\"ns\":\"queen-cluster\",\"key\":\"node:1\"}]",
        "[{\"op\":\"incr\",\"ns\":\"queen\\u002dcluster\",\"key\":\"format\","
        "\"forever\":true}]",
    };
    char reason[40];

    for (int open = 0; open < 2; open++) {
        for (size_t i = 0; i < ARRAY_LEN(bodies); i++) {
            int rc = route_check_open(API_KV_BATCH, bodies[i], "", "",
                                      open == 1, reason);
            if (rc != ERR_FORBIDDEN ||
                strcmp(reason, "kv_reserved_namespace") != 0) {
                HARNESS_FAIL("body %zu open %d: rc %d reason '%s'", i, open, rc,
                             reason);
            }
        }
    }
    EXPECT_EQ_I64(route_check_open(API_KV_PUT, "{\"value\":1,\"forever\":true}",
                                   "queen-s3", "k", true, reason),
                  0);
    EXPECT_EQ_I64(route_check_open(API_KV_BATCH,
                                   "[{\"op\":\"get\",\"ns\":\"queen-"
                                   "cluster\",\"key\":\"format\"}]",
                                   "", "", false, reason),
                  0);
}

TEST(every_http_write_into_the_sinks_namespace_is_refused_403)
{
    static const struct {
        int mode;
        const char *body;
        const char *ns; /* of the path */
    } writes[] = {
        {API_KV_BATCH,
         "[{\"op\":\"put\",\"ns\":\"queen-s3\",\"key\":\"s3:default:orders:"
         "committed\",\"value\":{\"k\":999},\"forever\":true}]",
         ""},
        {API_KV_BATCH,
         "{\"operations\":[{\"op\":\"putIfAbsent\",\"namespace\":\"queen-s3\","
         "\"key\":\"s3:default:orders:lease\",\"value\":1,\"ttlSeconds\":30}]}",
         ""},
        {API_KV_BATCH,
         "[{\"op\":\"delete\",\"ns\":\"queen-s3\",\"key\":\"s3:default:orders:"
         "intent\"}]",
         ""},
        {API_KV_BATCH,
         "[{\"op\":\"incr\",\"ns\":\"queen-s3\",\"key\":\"n\",\"forever\":"
         "true}]",
         ""},
        /* one reserved op in a mixed batch refuses it whole */
        {API_KV_BATCH,
         "[{\"op\":\"put\",\"ns\":\"app\",\"key\":\"a\",\"value\":1,"
         "\"forever\":true},{\"op\":\"get\",\"ns\":\"queen-s3\",\"key\":\"x\"},"
         "{\"op\":\"put\",\"ns\":\"queen-s3\",\"key\":\"s3:default:orders:"
         "committed\",\"value\":{\"k\":999},\"forever\":true,\"expect\":3,"
         "\"required\":true}]",
         ""},
        /* the name spelled with a JSON escape is the same name */
        {API_KV_BATCH,
         "[{\"op\":\"put\",\"ns\":\"queen\\u002ds3\",\"key\":\"k\","
         "\"value\":1,\"forever\":true}]",
         ""},
        {API_KV_PUT, "{\"value\":{\"k\":999},\"forever\":true}", "queen-s3"},
        {API_KV_DELETE, "", "queen-s3"},
        {API_KV_DELETE, "{\"expect\":4}", "queen-s3"},
    };
    char reason[40];

    for (size_t i = 0; i < ARRAY_LEN(writes); i++) {
        int rc = route_check(writes[i].mode, writes[i].body, writes[i].ns,
                             "s3:default:orders:committed", reason);

        if (rc != ERR_FORBIDDEN || strcmp(reason, "kv_reserved_namespace")) {
            HARNESS_FAIL("write %zu: rc %d reason '%s', want ERR_FORBIDDEN "
                         "kv_reserved_namespace",
                         i, rc, reason);
        }
    }
    EXPECT_EQ_I64(err_http_status(ERR_FORBIDDEN), 403);
}

TEST(reads_of_the_sinks_namespace_and_writes_elsewhere_pass)
{
    static const struct {
        int mode;
        const char *body;
        const char *ns;
    } calls[] = {
        {API_KV_BATCH,
         "[{\"op\":\"get\",\"ns\":\"queen-s3\",\"key\":\"s3:default:orders:"
         "committed\"},{\"op\":\"getMany\",\"ns\":\"queen-s3\",\"keys\":"
         "[\"a\",\"b\"]},{\"op\":\"getPrefix\",\"ns\":\"queen-s3\","
         "\"prefix\":\"s3:\"}]",
         ""},
        /* near misses of the name are ordinary namespaces */
        {API_KV_BATCH,
         "[{\"op\":\"put\",\"ns\":\"queen-s3x\",\"key\":\"k\",\"value\":1,"
         "\"forever\":true},{\"op\":\"put\",\"ns\":\"queen-s\",\"key\":\"k\","
         "\"value\":1,\"forever\":true},{\"op\":\"delete\",\"ns\":\"app\","
         "\"key\":\"k\"}]",
         ""},
        {API_KV_PUT, "{\"value\":1,\"forever\":true}", "app"},
        {API_KV_DELETE, "", "queen-s3x"},
    };
    char reason[40];

    for (size_t i = 0; i < ARRAY_LEN(calls); i++) {
        int rc =
            route_check(calls[i].mode, calls[i].body, calls[i].ns, "k", reason);

        if (rc != 0) {
            HARNESS_FAIL("call %zu: rc %d reason '%s', want 0", i, rc, reason);
        }
    }
}

/* The in-process path (the sink's kv_call_batch) validates without the
 * HTTP rule and writes the namespace. */
TEST(the_sink_in_process_still_writes_its_namespace)
{
    struct env e = {0};
    struct kv_op o = op_put("s3:default:orders:committed", "{\"k\":1}");
    char reason[40];
    struct err err = {0};

    env_open(&e);
    EXPECT_EQ_I64(kv_validate(&o, 1, false, reason, &err), 0);
    EXPECT(put_won(&e, T0, o) > 0);
    env_close(&e);
}

TEST(the_403_body_names_the_reason_in_the_kv_envelope)
{
    struct buf b;
    struct err err = {0};

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(
        api_kv_render_error(403, "kv_reserved_namespace", "d", &b, &err), 0);
    EXPECT_STR_EQ(b.data, "{\"error\":\"kv_forbidden\",\"reason\":"
                          "\"kv_reserved_namespace\",\"detail\":\"d\"}");
    buf_free(&b);
}

#include "broker/retention.h"
#include "sink/lease.h"

/* The namespace the HTTP rule guards is the one the sink writes and the
 * retention hold reads. */
TEST(the_guarded_namespace_is_the_sinks_and_the_holds)
{
    EXPECT_STR_EQ(API_KV_RESERVED_NS, LEASE_NS);
    EXPECT_STR_EQ(API_KV_RESERVED_NS, RETENTION_SINK_NS);
}
