/* Unit tests of the store's reads (store/store.h) against a real LMDB in a
 * mkdtemp directory: every rule of docs/design/http-api.md §3 (fetch) and 1.4
 * (partitions changed), queue listing and stats. Data goes in through the
 * real fsm. */
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>

#include "base/aead.h"
#include "base/json.h"
#include "push_helpers.h"
#include "store/format.h"
#include "store/kv.h"
#include "store/schema.h"
#include "store/store_impl.h"

#define T0 1760000000000000LL

static struct store_fetch_req req(const char *q, const char *p, int64_t off,
                                  uint64_t max)
{
    struct store_fetch_req r = {
        {q, strlen(q)}, {p, strlen(p)}, off, max, false};

    return r;
}

/* Records 0..n-1 in q/p, payload i of i+1 'x' bytes (weights 1..n). */
static void fill(struct env *e, const char *q, const char *p, int n)
{
    char payload[64];
    char txn[32];

    for (int i = 0; i < n; i++) {
        memset(payload, 'x', sizeof(payload));
        payload[i + 1 < 63 ? i + 1 : 63] = '\0';
        snprintf(txn, sizeof(txn), "%s-%d", p, i);
        env_push1(e, T0 + e->index, q, p, txn, payload);
    }
}

/* nbatch pushes to q/p at T0, T0 + 1, ... of per records each: transaction
 * id "<batch>-<i>", payload "1". */
static void push_batch(struct env *e, const char *q, const char *p, int k,
                       int per)
{
    struct pitem *items = calloc((size_t)per, sizeof(*items));
    char(*txns)[32] = calloc((size_t)per, sizeof(*txns));

    for (int i = 0; i < per; i++) {
        snprintf(txns[i], sizeof(txns[i]), "%d-%d", k, i);
        items[i] = (struct pitem){q, p, txns[i], "1"};
    }
    env_push(e, T0 + k, items, (size_t)per);
    free(txns);
    free(items);
}

static void push_batches(struct env *e, const char *q, const char *p,
                         int nbatch, int per)
{
    for (int k = 0; k < nbatch; k++) {
        push_batch(e, q, p, k, per);
    }
}

/* One push of one record to each partition parts[i] of q, at T0 + i with
 * transaction id "<i + 1>" and payload "1". */
static void push_each(struct env *e, const char *q, const char *const *parts,
                      int n)
{
    char txn[16];

    for (int i = 0; i < n; i++) {
        snprintf(txn, sizeof(txn), "%d", i + 1);
        env_push1(e, T0 + i, q, parts[i], txn, "1");
    }
}

/* Fetch r[0..n-1] as the default tenant; the call must succeed. */
static void fetch(struct env *e, const struct store_fetch_req *r, size_t n,
                  struct store_fetch_answer *a)
{
    struct err err = {0};

    EXPECT_EQ_I64(store_fetch(e->store, STORE_DEFAULT_TENANT, r, n, a, &err),
                  0);
}

/* Open e with records 0..n-1 in q/p (fill()) and fetch r[0..nr-1]. */
static void open_fill_fetch(struct env *e, int n,
                            const struct store_fetch_req *r, size_t nr,
                            struct store_fetch_answer *a)
{
    env_open(e);
    fill(e, "q", "p", n);
    fetch(e, r, nr, a);
}

/* Free a, then close and remove e. */
static void fetch_done(struct env *e, struct store_fetch_answer *a)
{
    store_fetch_answer_free(a);
    env_close(e);
}

/* What one fetch entry must say; a field of ANY is not checked. */
#define ANY (-1)
struct want {
    int error;
    int64_t n_records;
    int64_t high_watermark;
    int64_t log_start;
};

static void expect_entry(const struct store_fetch_answer *a, size_t i,
                         struct want w)
{
    const struct store_fetch_entry *en = &a->entries[i];

    if (w.error != ANY && en->error != w.error) {
        HARNESS_FAIL("entry %zu: error %d, want %d", i, en->error, w.error);
    }
    if (w.n_records != ANY && (int64_t)en->n_records != w.n_records) {
        HARNESS_FAIL("entry %zu: %zu records, want %" PRId64, i, en->n_records,
                     w.n_records);
    }
    if (w.high_watermark != ANY && en->high_watermark != w.high_watermark) {
        HARNESS_FAIL("entry %zu: high watermark %" PRId64 ", want %" PRId64, i,
                     en->high_watermark, w.high_watermark);
    }
    if (w.log_start != ANY && en->log_start != w.log_start) {
        HARNESS_FAIL("entry %zu: log start %" PRId64 ", want %" PRId64, i,
                     en->log_start, w.log_start);
    }
}

TEST(fetch_unknown_queue_and_unwritten_partition)
{
    struct env e = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r[4] = {
        req("nope", "Default", 0, 100), req("q", "never", 0, 100),
        req("q", "never", 3, 100), req("q", "p", 0, 100)};

    open_fill_fetch(&e, 2, r, 4, &a);
    expect_entry(&a, 0,
                 (struct want){STORE_UNKNOWN_TOPIC_OR_PARTITION, ANY, 0, 0});
    EXPECT_STR_EQ(store_entry_error_name(a.entries[0].error),
                  "UNKNOWN_TOPIC_OR_PARTITION");
    expect_entry(&a, 1, (struct want){STORE_ENTRY_OK, 0, 0, ANY});
    expect_entry(&a, 2,
                 (struct want){STORE_OFFSET_OUT_OF_RANGE, ANY, ANY, ANY});
    expect_entry(&a, 3, (struct want){ANY, 2, ANY, ANY});
    fetch_done(&e, &a);
}

TEST(fetch_another_tenant_sees_nothing)
{
    struct env e = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r = req("q", "p", 0, 100);
    uint8_t other[16] = {1};
    struct err err = {0};

    env_open(&e);
    fill(&e, "q", "p", 1);
    EXPECT_EQ_I64(store_fetch(e.store, other, &r, 1, &a, &err), 0);
    EXPECT_EQ_I64(a.entries[0].error, STORE_UNKNOWN_TOPIC_OR_PARTITION);
    fetch_done(&e, &a);
}

TEST(fetch_bounds_and_end_of_log)
{
    struct env e = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r[3] = {req("q", "p", 5, 100), req("q", "p", 6, 100),
                                   req("q", "p", 4, 100)};

    open_fill_fetch(&e, 5, r, 3, &a);
    /* at the high watermark, then past it */
    expect_entry(&a, 0, (struct want){STORE_ENTRY_OK, 0, 5, ANY});
    expect_entry(&a, 1, (struct want){STORE_OFFSET_OUT_OF_RANGE, ANY, 5, 0});
    expect_entry(&a, 2, (struct want){ANY, 1, ANY, ANY});
    EXPECT_EQ_I64(a.entries[2].records[0].offset, 4);
    fetch_done(&e, &a);
}

TEST(fetch_below_log_start_is_out_of_range)
{
    struct env e = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r = req("q", "p", 1, 100);
    struct store_wpart p;
    struct store_w w;
    struct err err = {0};
    MDB_txn *txn;

    env_open(&e);
    fill(&e, "q", "p", 4);
    /* Move logStart to 2 the way retention will: rewrite the row. */
    store_wbegin(e.store, &txn, &err);
    w = (struct store_w){
        .s = e.store, .txn = txn, .tenant = STORE_DEFAULT_TENANT, .stamp = T0};
    store_wpart_get(&w, SLICE_LIT("q"), 1, SLICE_LIT("p"), &p, &err);
    p.log_start = 2;
    store_wpart_put(&w, SLICE_LIT("p"), &p, &err);
    EXPECT_EQ_I64(store_wcommit(e.store, txn, 100, 0, &err), 0);
    fetch(&e, &r, 1, &a);
    expect_entry(&a, 0, (struct want){STORE_OFFSET_OUT_OF_RANGE, ANY, 4, 2});
    fetch_done(&e, &a);
}

TEST(fetch_first_record_always_then_weight_up_to_max_bytes)
{
    struct env e = {0};
    struct store_fetch_answer a;
    /* weights are 1, 2, 3, 4, 5 */
    struct store_fetch_req r[4] = {req("q", "p", 3, 1), req("q", "p", 0, 6),
                                   req("q", "p", 0, 5), req("q", "p", 0, 100)};

    open_fill_fetch(&e, 5, r, 4, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, 1); /* 4 bytes over a max of 1 */
    EXPECT_EQ_U64(a.entries[0].records[0].payload.len, 4);
    EXPECT_EQ_U64(a.entries[1].n_records, 3); /* 1+2+3 == 6 */
    EXPECT_EQ_U64(a.entries[2].n_records, 2); /* 1+2 <= 5 < 1+2+3 */
    EXPECT_EQ_U64(a.entries[3].n_records, 5);
    fetch_done(&e, &a);
}

/* Configure queue name with encryptionEnabled, as api/configure.c's apply
 * does. */
static void configure_encrypted(struct env *e, const char *name)
{
    struct store_queue_options o;
    struct store_wqueue q;
    struct store_w w;
    struct err err = {0};
    MDB_txn *txn;

    store_queue_options_configured(&o);
    o.encryption_enabled = true;
    EXPECT_EQ_I64(store_wbegin(e->store, &txn, &err), 0);
    w = (struct store_w){
        .s = e->store, .txn = txn, .tenant = STORE_DEFAULT_TENANT, .stamp = T0};
    EXPECT_EQ_I64(store_wqueue_put_options(
                      &w, (struct slice){name, strlen(name)}, &o, &q, &err),
                  0);
    EXPECT(q.is_encrypted);
    EXPECT_EQ_I64(store_wcommit(e->store, txn, ++e->index, T0, &err), 0);
}

/* docs/design/formats.md §11: the three ways a payload can be stored read
 * back the same way. Record 0 is sealed in the binary form (flags bit 1),
 * record 1 is an envelope written as plain bytes (what builds before the
 * binary form stored; their log entries apply the same way), record 2 is
 * plaintext that is no envelope. With the key both sealed ones open to
 * the bytes pushed; with another key each comes back as its envelope: the
 * binary one as the envelope of its bytes, which opens under the right
 * key, the old one as stored; as JSON strings for the sink. */
TEST(fetch_opens_binary_and_envelope_sealed_payloads)
{
    static const char pt0[] = "{\"order\":1,\"note\":\"binary\"}";
    static const char pt1[] = "{\"order\":2,\"note\":\"envelope\"}";
    uint8_t key[32] = {9};
    uint8_t other[32] = {10};
    struct env e = {0};
    struct cmd_push_item ci[3];
    struct store_fetch_answer a;
    struct store_fetch_req r = req("q", "p", 0, 1 << 20);
    struct buf raw;
    struct buf env;
    struct buf want;
    struct buf back;
    struct err err;
    const struct store_record *rec;

    buf_init(&raw, BUF_UNLIMITED);
    buf_init(&env, BUF_UNLIMITED);
    buf_init(&want, BUF_UNLIMITED);
    buf_init(&back, BUF_UNLIMITED);
    EXPECT_EQ_I64(
        aead_seal_raw(key, (const uint8_t *)pt0, strlen(pt0), &raw, &err), 0);
    EXPECT_EQ_I64(aead_seal(key, (const uint8_t *)pt1, strlen(pt1), &env, &err),
                  0);
    memset(ci, 0, sizeof(ci));
    for (int i = 0; i < 3; i++) {
        ci[i].queue = (struct slice){"q", 1};
        ci[i].partition = (struct slice){"p", 1};
        ci[i].txn = (struct slice){i == 0 ? "t0" : i == 1 ? "t1" : "t2", 2};
        ci[i].message_id[0] = (uint8_t)(i + 1);
    }
    ci[0].payload = (struct slice){raw.data, raw.len};
    ci[0].sealed = true;
    ci[1].payload = (struct slice){env.data, env.len};
    ci[2].payload = (struct slice){"[1,2]", 5};
    env_open(&e);
    configure_encrypted(&e, "q"); /* only its rows were ever envelopes */
    EXPECT(env_push_cmd(&e, T0, ci, 3) != NULL);

    store_set_seal_key(e.store, key);
    fetch(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, 3);
    rec = a.entries[0].records;
    EXPECT_MEM_EQ(rec[0].payload.ptr, rec[0].payload.len, pt0, strlen(pt0));
    EXPECT_MEM_EQ(rec[1].payload.ptr, rec[1].payload.len, pt1, strlen(pt1));
    EXPECT_MEM_EQ(rec[2].payload.ptr, rec[2].payload.len, "[1,2]", 5);
    store_fetch_answer_free(&a);

    store_set_seal_key(e.store, other);
    fetch(&e, &r, 1, &a);
    rec = a.entries[0].records;
    EXPECT_EQ_I64(
        aead_envelope((const uint8_t *)raw.data, raw.len, &want, &err), 0);
    EXPECT_MEM_EQ(rec[0].payload.ptr, rec[0].payload.len, want.data, want.len);
    EXPECT_EQ_I64(aead_open(key, (const uint8_t *)rec[0].payload.ptr,
                            rec[0].payload.len, &back, &err),
                  0);
    EXPECT_MEM_EQ(back.data, back.len, pt0, strlen(pt0));
    EXPECT_MEM_EQ(rec[1].payload.ptr, rec[1].payload.len, env.data, env.len);
    EXPECT_MEM_EQ(rec[2].payload.ptr, rec[2].payload.len, "[1,2]", 5);
    store_fetch_answer_free(&a);

    r.unopened_as_string = true;
    fetch(&e, &r, 1, &a);
    rec = a.entries[0].records;
    buf_reset(&back);
    EXPECT_EQ_I64(json_escape(&back, want.data, want.len, &err), 0);
    EXPECT_MEM_EQ(rec[0].payload.ptr, rec[0].payload.len, back.data, back.len);
    buf_reset(&back);
    EXPECT_EQ_I64(json_escape(&back, env.data, env.len, &err), 0);
    EXPECT_MEM_EQ(rec[1].payload.ptr, rec[1].payload.len, back.data, back.len);
    EXPECT_MEM_EQ(rec[2].payload.ptr, rec[2].payload.len, "[1,2]", 5);
    fetch_done(&e, &a);
    buf_free(&raw);
    buf_free(&env);
    buf_free(&want);
    buf_free(&back);
}

/* Whether p lies in a's arena. */
static bool in_arena(const struct store_fetch_answer *a, const char *p)
{
    return p >= a->arena.data && p < a->arena.data + a->arena.cap;
}

/* store_fetch_pinned answers what store_fetch does, byte for byte, over
 * plain records (several entries, an empty payload) and a sealed one that
 * opens: the plain bytes point into the store's pages, not the arena, the
 * opened plaintext into the arena. The read stays open until the answer is
 * freed (a snapshot restore, which takes swap_lock exclusively, waits). */
TEST(a_pinned_fetch_answers_the_bytes_of_a_copying_one)
{
    static const char pt[] = "{\"order\":1,\"note\":\"sealed\"}";
    uint8_t key[32] = {9};
    struct env e = {0};
    struct cmd_push_item ci[3];
    struct store_fetch_answer a;
    struct store_fetch_answer b;
    struct store_fetch_req r[3] = {req("q", "p", 0, 1 << 20),
                                   req("q", "s", 0, 1 << 20),
                                   req("q", "p", 3, 10)};
    struct buf raw;
    struct err err = {0};

    buf_init(&raw, BUF_UNLIMITED);
    EXPECT_EQ_I64(
        aead_seal_raw(key, (const uint8_t *)pt, strlen(pt), &raw, &err), 0);
    memset(ci, 0, sizeof(ci));
    for (int i = 0; i < 3; i++) {
        ci[i].queue = (struct slice){"q", 1};
        ci[i].partition = (struct slice){"s", 1};
        ci[i].message_id[0] = (uint8_t)(i + 1);
    }
    ci[0].payload = (struct slice){raw.data, raw.len};
    ci[0].sealed = true;
    ci[0].txn = (struct slice){"t0", 2};
    ci[1].payload = (struct slice){"[1,2]", 5};
    ci[2].txn = (struct slice){"t2", 2}; /* and an empty payload */
    env_open(&e);
    fill(&e, "q", "p", 8);
    EXPECT(env_push_cmd(&e, T0 + 100, ci, 3) != NULL);
    store_set_seal_key(e.store, key);

    fetch(&e, r, 3, &a);
    EXPECT_EQ_I64(
        store_fetch_pinned(e.store, STORE_DEFAULT_TENANT, r, 3, &b, &err), 0);
    EXPECT(b.pinned_txn != NULL);
    EXPECT_EQ_I64(pthread_rwlock_trywrlock(&e.store->swap_lock), EBUSY);
    EXPECT_EQ_U64(b.n_entries, 3);
    for (size_t i = 0; i < 3; i++) {
        const struct store_fetch_entry *x = &a.entries[i];
        const struct store_fetch_entry *y = &b.entries[i];
        EXPECT_EQ_I64(y->error, x->error);
        EXPECT_EQ_I64(y->high_watermark, x->high_watermark);
        EXPECT_EQ_I64(y->log_start, x->log_start);
        EXPECT_EQ_U64(y->n_records, x->n_records);
        EXPECT(x->n_records > 0);
        for (size_t j = 0; j < x->n_records && j < y->n_records; j++) {
            const struct store_record *u = &x->records[j];
            const struct store_record *v = &y->records[j];
            EXPECT_EQ_I64(v->offset, u->offset);
            EXPECT_EQ_I64(v->ts, u->ts);
            EXPECT_MEM_EQ(v->message_id, 16, u->message_id, 16);
            EXPECT_MEM_EQ(v->txn.ptr, v->txn.len, u->txn.ptr, u->txn.len);
            EXPECT_MEM_EQ(v->payload.ptr, v->payload.len, u->payload.ptr,
                          u->payload.len);
        }
    }
    /* the sealed record opened into the arena; the plain ones stayed put */
    EXPECT_MEM_EQ(b.entries[1].records[0].payload.ptr,
                  b.entries[1].records[0].payload.len, pt, strlen(pt));
    EXPECT(in_arena(&b, b.entries[1].records[0].payload.ptr));
    EXPECT(!in_arena(&b, b.entries[1].records[1].payload.ptr));
    EXPECT(!in_arena(&b, b.entries[0].records[0].payload.ptr));
    EXPECT(!in_arena(&b, b.entries[0].records[0].txn.ptr));
    store_fetch_answer_free(&b);
    EXPECT_EQ_I64(pthread_rwlock_trywrlock(&e.store->swap_lock), 0);
    pthread_rwlock_unlock(&e.store->swap_lock);
    fetch_done(&e, &a);
    buf_free(&raw);
}

/* Write the cluster's storage format row (store/format.h) as the upgrade
 * gate's CMD_KV entry would. */
static void put_format(struct env *e, const char *level)
{
    struct kv_op o = {0};
    struct kv_batch b = {STORE_DEFAULT_TENANT, &o, 1};
    struct kv_answer a;
    MDB_txn *txn;
    struct err err = {0};

    o.op = KV_PUT;
    o.ns = (struct slice){STORE_FORMAT_NS, strlen(STORE_FORMAT_NS)};
    o.key = (struct slice){STORE_FORMAT_KEY, strlen(STORE_FORMAT_KEY)};
    o.value = (struct slice){level, strlen(level)};
    o.forever = true;
    EXPECT_EQ_I64(store_wbegin(e->store, &txn, &err), 0);
    EXPECT_EQ_I64(store_kv_apply(e->store, txn, &b, T0, &a, &err), 0);
    EXPECT_EQ_I64(store_wcommit(e->store, txn, ++e->index, T0, &err), 0);
    EXPECT_EQ_I64(a.status, 0);
    kv_answer_free(&a);
}

/* store/format.h (2) and schema.h's SCHEMA_RECORD_PLAIN: a producer's
 * payload that is shaped like an envelope (say, another tenant's, copied)
 * in a queue without encryption is returned as pushed, never its
 * plaintext: before the cluster's format rose (a new cluster's first
 * seconds: only an encrypted queue's rows of older builds hold real
 * envelopes) and after it, when the fsm stores it flagged plain. The level
 * is read from the store, also by a reopened store. */
TEST(a_payload_pushed_after_the_format_rises_is_never_opened)
{
    static const char pt[] = "{\"secret\":\"of another tenant\"}";
    uint8_t key[32] = {11};
    struct env e = {0};
    struct cmd_push_item ci = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r = req("q", "p", 0, 1 << 20);
    struct buf env;
    struct err err;
    const struct store_record *rec;
    int level = -1;

    buf_init(&env, BUF_UNLIMITED);
    EXPECT_EQ_I64(aead_seal(key, (const uint8_t *)pt, strlen(pt), &env, &err),
                  0);
    ci.queue = (struct slice){"q", 1};
    ci.partition = (struct slice){"p", 1};
    ci.payload = (struct slice){env.data, env.len};
    env_open(&e);
    store_set_seal_key(e.store, key);
    EXPECT_EQ_I64(store_format(e.store), 0);
    ci.txn = (struct slice){"t0", 2};
    ci.message_id[0] = 1;
    EXPECT(env_push_cmd(&e, T0, &ci, 1) != NULL);
    put_format(&e, "2");
    EXPECT_EQ_I64(store_format(e.store), 0); /* not read yet */
    ci.txn = (struct slice){"t1", 2};
    ci.message_id[0] = 2;
    EXPECT(env_push_cmd(&e, T0 + 1, &ci, 1) != NULL);
    EXPECT_EQ_I64(store_format(e.store), STORE_FORMAT_SEALED_BINARY);
    EXPECT_EQ_I64(store_format_read(e.store, NULL, &level, &err), 0);
    EXPECT_EQ_I64(level, STORE_FORMAT_SEALED_BINARY);

    fetch(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, 2);
    rec = a.entries[0].records;
    EXPECT_MEM_EQ(rec[0].payload.ptr, rec[0].payload.len, env.data, env.len);
    EXPECT_MEM_EQ(rec[1].payload.ptr, rec[1].payload.len, env.data, env.len);
    store_fetch_answer_free(&a);
    r.unopened_as_string = true; /* as the sink reads: still as pushed */
    store_set_seal_key(e.store, (uint8_t[32]){12});
    fetch(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, 2);
    rec = a.entries[0].records;
    EXPECT_MEM_EQ(rec[0].payload.ptr, rec[0].payload.len, env.data, env.len);
    fetch_done(&e, &a);
    buf_free(&env);
}

/* The race of a format that rises: a receiver that had not applied the
 * "format" row yet sealed an encrypted queue's payload as the JSON
 * envelope, and the entry was applied after the row. Its record opens
 * under the key, as a row of level 1 does; a producer's payload in the
 * same queue that is not an envelope is stored flagged plain, and an
 * envelope pushed to a queue without encryption still never opens. */
TEST(an_envelope_sealed_before_the_format_rose_still_opens)
{
    static const char pt[] = "{\"order\":42.00}";
    uint8_t key[32] = {13};
    struct env e = {0};
    struct cmd_push_item ci[2];
    struct store_fetch_answer a;
    struct store_fetch_req r = req("enc", "p", 0, 1 << 20);
    struct store_fetch_req rp = req("plainq", "p", 0, 1 << 20);
    struct buf env;
    struct err err;
    const struct store_record *rec;

    buf_init(&env, BUF_UNLIMITED);
    EXPECT_EQ_I64(aead_seal(key, (const uint8_t *)pt, strlen(pt), &env, &err),
                  0);
    env_open(&e);
    store_set_seal_key(e.store, key);
    configure_encrypted(&e, "enc");
    put_format(&e, "2");
    memset(ci, 0, sizeof(ci));
    for (int i = 0; i < 2; i++) {
        ci[i].queue = (struct slice){"enc", 3};
        ci[i].partition = (struct slice){"p", 1};
        ci[i].txn = (struct slice){i == 0 ? "t0" : "t1", 2};
        ci[i].message_id[0] = (uint8_t)(i + 1);
    }
    ci[0].payload = (struct slice){env.data, env.len};
    ci[1].payload = (struct slice){"{\"encrypted\":1}", 15};
    EXPECT(env_push_cmd(&e, T0 + 1, ci, 2) != NULL);
    EXPECT_EQ_I64(store_format(e.store), STORE_FORMAT_SEALED_BINARY);
    fetch(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, 2);
    rec = a.entries[0].records;
    EXPECT_MEM_EQ(rec[0].payload.ptr, rec[0].payload.len, pt, strlen(pt));
    EXPECT_MEM_EQ(rec[1].payload.ptr, rec[1].payload.len, "{\"encrypted\":1}",
                  15);
    store_fetch_answer_free(&a);

    ci[0].queue = (struct slice){"plainq", 6};
    EXPECT(env_push_cmd(&e, T0 + 2, ci, 1) != NULL);
    fetch(&e, &rp, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, 1);
    rec = a.entries[0].records;
    EXPECT_MEM_EQ(rec[0].payload.ptr, rec[0].payload.len, env.data, env.len);
    fetch_done(&e, &a);
    buf_free(&env);
}

/* A row flagged sealed but too short to be the binary form (a damaged
 * store: nothing writes one) does not fail the read, which would stop a
 * sink for good: it comes back as a JSON string of its bytes' base64, and
 * the record after it reads as usual. */
TEST(a_damaged_sealed_row_reads_as_a_string_and_the_read_goes_on)
{
    uint8_t key[32] = {12};
    struct env e = {0};
    struct cmd_push_item ci[2];
    struct store_fetch_answer a;
    struct store_fetch_req r = req("q", "p", 0, 1 << 20);
    struct buf raw;
    struct err err;
    MDB_txn *txn;
    MDB_cursor *c;
    MDB_val k;
    MDB_val d;
    uint8_t cut[64];
    size_t keep;

    buf_init(&raw, BUF_UNLIMITED);
    EXPECT_EQ_I64(
        aead_seal_raw(key, (const uint8_t *)"{\"a\":1}", 7, &raw, &err), 0);
    memset(ci, 0, sizeof(ci));
    for (int i = 0; i < 2; i++) {
        ci[i].queue = (struct slice){"q", 1};
        ci[i].partition = (struct slice){"p", 1};
        ci[i].txn = (struct slice){i == 0 ? "t0" : "t1", 2};
        ci[i].message_id[0] = (uint8_t)(i + 1);
    }
    ci[0].payload = (struct slice){raw.data, raw.len};
    ci[0].sealed = true;
    ci[1].payload = (struct slice){"[7]", 3};
    env_open(&e);
    store_set_seal_key(e.store, key);
    EXPECT(env_push_cmd(&e, T0, ci, 2) != NULL);
    /* cut record 0 to 5 bytes of payload, its flags kept */
    EXPECT_EQ_I64(store_wbegin(e.store, &txn, &err), 0);
    EXPECT_EQ_I64(mdb_cursor_open(txn, e.store->records, &c), 0);
    EXPECT_EQ_I64(mdb_cursor_get(c, &k, &d, MDB_FIRST), 0);
    keep = SCHEMA_RECORD_FIXED + 2 + 5; /* txn "t0" */
    EXPECT(d.mv_size > keep && keep <= sizeof(cut));
    memcpy(cut, d.mv_data, keep);
    EXPECT_EQ_I64(cut[24], SCHEMA_RECORD_SEALED);
    d = (MDB_val){keep, cut};
    EXPECT_EQ_I64(mdb_cursor_put(c, &k, &d, MDB_CURRENT), 0);
    mdb_cursor_close(c);
    EXPECT_EQ_I64(store_wcommit(e.store, txn, ++e.index, T0 + 1, &err), 0);

    fetch(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, 2);
    /* a JSON string of the base64 of 5 bytes: 8 characters and quotes */
    EXPECT_EQ_U64(a.entries[0].records[0].payload.len, 2 + 8);
    EXPECT(a.entries[0].records[0].payload.ptr[0] == '"');
    EXPECT(a.entries[0].records[0].payload.ptr[9] == '"');
    EXPECT_MEM_EQ(a.entries[0].records[1].payload.ptr,
                  a.entries[0].records[1].payload.len, "[7]", 3);
    fetch_done(&e, &a);
    buf_free(&raw);
}

TEST(fetch_empty_payload_weighs_one)
{
    struct env e = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r = req("q", "p", 0, 3);

    env_open(&e);
    for (int i = 0; i < 5; i++) {
        char t[16];

        snprintf(t, sizeof(t), "t%d", i);
        env_push1(&e, T0 + i, "q", "p", t, "");
    }
    fetch(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, 3);
    fetch_done(&e, &a);
}

TEST(fetch_caps_at_10000_records_per_entry)
{
    struct env e = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r = req("q", "p", 0, 8 << 20);

    env_open(&e);
    push_batches(&e, "q", "p", 11, 1000);
    fetch(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, STORE_FETCH_MAX_RECORDS);
    EXPECT_EQ_I64(a.entries[0].high_watermark, 11000);
    EXPECT_EQ_I64(a.entries[0].records[9999].offset, 9999);
    fetch_done(&e, &a);
}

TEST(fetch_steps_over_a_gap_silently)
{
    struct env e = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r = req("q", "p", 1, 100);
    struct err err = {0};
    MDB_txn *txn;
    uint8_t kb[16];
    MDB_val k = {16, kb};

    env_open(&e);
    fill(&e, "q", "p", 5);
    store_wbegin(e.store, &txn, &err);
    be64_put(kb, 1);
    be64_put(kb + 8, 1);
    EXPECT_EQ_I64(mdb_del(txn, e.store->records, &k, NULL), 0);
    be64_put(kb + 8, 3);
    EXPECT_EQ_I64(mdb_del(txn, e.store->records, &k, NULL), 0);
    EXPECT_EQ_I64(store_wcommit(e.store, txn, 100, 0, &err), 0);
    fetch(&e, &r, 1, &a);
    expect_entry(&a, 0, (struct want){STORE_ENTRY_OK, 2, ANY, ANY});
    EXPECT_EQ_I64(a.entries[0].records[0].offset, 2);
    EXPECT_EQ_I64(a.entries[0].records[1].offset, 4);
    fetch_done(&e, &a);
}

TEST(fetch_entries_do_not_mix_records)
{
    struct env e = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r[2] = {req("q", "a", 0, 100),
                                   req("q", "b", 0, 100)};

    env_open(&e);
    fill(&e, "q", "a", 3);
    fill(&e, "q", "b", 2);
    fetch(&e, r, 2, &a);
    EXPECT_EQ_U64(a.entries[0].n_records, 3);
    EXPECT_EQ_U64(a.entries[1].n_records, 2);
    EXPECT_MEM_EQ(a.entries[1].records[1].txn.ptr,
                  a.entries[1].records[1].txn.len, "b-1", 3);
    EXPECT_MEM_EQ(a.entries[0].records[2].txn.ptr,
                  a.entries[0].records[2].txn.len, "a-2", 3);
    fetch_done(&e, &a);
}

/* ---- partitions changed ------------------------------------------------ */

static struct store_changed_req creq(const char *q, int64_t since,
                                     const char *after, int limit)
{
    struct store_changed_req r = {
        {q, strlen(q)}, since, {after, strlen(after)}, limit};

    return r;
}

/* The partitions changed for r[0..n-1], as the default tenant; the call
 * must succeed. */
static void changed(struct env *e, const struct store_changed_req *r, size_t n,
                    struct store_changed_answer *a)
{
    struct err err = {0};

    EXPECT_EQ_I64(store_changed(e->store, STORE_DEFAULT_TENANT, r, n, a, &err),
                  0);
}

TEST(changed_lists_in_creation_order_with_safe_time)
{
    struct env e = {0};
    struct store_changed_answer a;
    struct store_changed_req r = creq("q", INT64_MIN, "", 0);

    env_open(&e);
    push_each(&e, "q", (const char *[]){"zeta", "alpha", "zeta"}, 3);
    changed(&e, &r, 1, &a);
    EXPECT_EQ_I64(a.safe_time, T0 + 2);
    EXPECT_EQ_U64(a.entries[0].n_partitions, 2);
    EXPECT_MEM_EQ(a.entries[0].partitions[0].name.ptr,
                  a.entries[0].partitions[0].name.len, "zeta", 4);
    EXPECT_EQ_I64(a.entries[0].partitions[0].last_offset, 1);
    EXPECT_EQ_I64(a.entries[0].partitions[0].last_write_at, T0 + 2);
    EXPECT_MEM_EQ(a.entries[0].partitions[1].name.ptr,
                  a.entries[0].partitions[1].name.len, "alpha", 5);
    EXPECT(a.entries[0].partitions[0].id < a.entries[0].partitions[1].id);
    EXPECT(!a.entries[0].has_next);
    store_changed_answer_free(&a);
    env_close(&e);
}

TEST(changed_since_filters_on_last_write_at)
{
    struct env e = {0};
    struct store_changed_answer a;
    struct store_changed_req r = creq("q", T0 + 1, "", 0);

    env_open(&e);
    push_each(&e, "q", (const char *[]){"a", "b", "c"}, 3);
    changed(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_partitions, 2); /* >= since: b and c */
    EXPECT_MEM_EQ(a.entries[0].partitions[0].name.ptr, 1, "b", 1);
    store_changed_answer_free(&a);
    env_close(&e);
}

TEST(changed_errors_unknown_queue_before_bad_cursor)
{
    struct env e = {0};
    struct store_changed_answer a;
    struct store_changed_req r[7] = {
        creq("nope", INT64_MIN, "garbage", 0), creq("q", INT64_MIN, "t|1|a", 0),
        creq("q", INT64_MIN, "n|a", 0),        creq("q", INT64_MIN, "p|", 0),
        creq("q", INT64_MIN, "p|x", 0),        creq("q", INT64_MIN, "p|-1", 0),
        creq("q", INT64_MIN, "p|0", 0)};

    env_open(&e);
    push_each(&e, "q", (const char *[]){"a"}, 1);
    changed(&e, r, 7, &a);
    EXPECT_EQ_I64(a.entries[0].error, STORE_UNKNOWN_TOPIC_OR_PARTITION);
    for (int i = 1; i < 6; i++) {
        EXPECT_EQ_I64(a.entries[i].error, STORE_BAD_CURSOR);
        EXPECT_EQ_U64(a.entries[i].n_partitions, 0);
    }
    EXPECT_EQ_I64(a.entries[6].error, STORE_ENTRY_OK);
    EXPECT_EQ_U64(a.entries[6].n_partitions, 1);
    EXPECT_STR_EQ(store_entry_error_name(STORE_BAD_CURSOR), "BAD_CURSOR");
    store_changed_answer_free(&a);
    env_close(&e);
}

TEST(changed_pages_over_2500_partitions)
{
    struct env e = {0};
    struct store_changed_answer a;
    struct pitem items[500];
    char names[500][24];
    char cursor[32] = "";
    uint64_t last = 0;
    size_t total = 0;
    int pages = 0;

    env_open(&e);
    for (int k = 0; k < 5; k++) {
        for (int i = 0; i < 500; i++) {
            snprintf(names[i], sizeof(names[i]), "p%04d", k * 500 + i);
            items[i] = (struct pitem){"q", names[i], names[i], "1"};
        }
        env_push(&e, T0 + k, items, 500);
    }
    for (;;) {
        struct store_changed_req r = creq("q", INT64_MIN, cursor, 1000);

        changed(&e, &r, 1, &a);
        pages++;
        for (size_t i = 0; i < a.entries[0].n_partitions; i++) {
            EXPECT(a.entries[0].partitions[i].id > last);
            last = a.entries[0].partitions[i].id;
        }
        total += a.entries[0].n_partitions;
        if (!a.entries[0].has_next) {
            store_changed_answer_free(&a);
            break;
        }
        EXPECT_EQ_U64(a.entries[0].n_partitions, 1000);
        EXPECT_EQ_U64(a.entries[0].next_pid, last);
        snprintf(cursor, sizeof(cursor), "p|%" PRIu64, a.entries[0].next_pid);
        store_changed_answer_free(&a);
        if (pages > 10) {
            break;
        }
    }
    EXPECT_EQ_U64(total, 2500);
    EXPECT_EQ_I64(pages, 3);
    env_close(&e);
}

TEST(changed_exactly_full_page_costs_one_more_call)
{
    struct env e = {0};
    struct store_changed_answer a;
    struct store_changed_req r = creq("q", INT64_MIN, "", 2);

    env_open(&e);
    push_each(&e, "q", (const char *[]){"a", "b"}, 2);
    changed(&e, &r, 1, &a);
    EXPECT(a.entries[0].has_next);
    store_changed_answer_free(&a);
    r = creq("q", INT64_MIN, "p|2", 2);
    changed(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_partitions, 0);
    EXPECT(!a.entries[0].has_next);
    store_changed_answer_free(&a);
    env_close(&e);
}

/* ---- queues, stats ------------------------------------------------------ */

TEST(queues_are_listed_in_name_order_with_implicit_options)
{
    struct env e = {0};
    struct store_queue_list l;
    struct store_queue_info qi;
    struct err err = {0};

    env_open(&e);
    env_push1(&e, T0, "orders", "a", "1", "1");
    env_push1(&e, T0 + 1, "billing", "a", "1", "1");
    env_push1(&e, T0 + 2, "billing", "b", "2", "1");
    EXPECT_EQ_I64(store_list_queues(e.store, STORE_DEFAULT_TENANT, &l, &err),
                  0);
    EXPECT_EQ_U64(l.n, 2);
    EXPECT_MEM_EQ(l.queues[0].name.ptr, l.queues[0].name.len, "billing", 7);
    EXPECT_EQ_U64(l.queues[0].n_partitions, 2);
    EXPECT_EQ_I64(l.queues[0].created_at, T0 + 1);
    EXPECT_EQ_I64(l.queues[1].options.dedup_window_seconds, 3600);
    EXPECT_EQ_I64(l.queues[1].options.lease_time, 60);
    EXPECT(!l.queues[1].options.retention_enabled);
    store_queue_list_free(&l);
    EXPECT_EQ_I64(store_get_queue(e.store, STORE_DEFAULT_TENANT,
                                  SLICE_LIT("orders"), &qi, &err),
                  0);
    EXPECT_EQ_U64(qi.n_partitions, 1);
    EXPECT_EQ_I64(store_get_queue(e.store, STORE_DEFAULT_TENANT,
                                  SLICE_LIT("nope"), &qi, &err),
                  ERR_NOT_FOUND);
    env_close(&e);
}

TEST(stats_count_rows)
{
    struct env e = {0};
    struct store_stats st;
    struct err err = {0};

    env_open(&e);
    fill(&e, "q", "p", 3);
    EXPECT_EQ_I64(store_stats(e.store, &st, &err), 0);
    EXPECT_EQ_U64(st.n_queues, 1);
    EXPECT_EQ_U64(st.n_partitions, 1);
    EXPECT_EQ_U64(st.n_records, 3);
    EXPECT_EQ_U64(st.applied_index, 3);
    EXPECT(st.used_bytes > 0 && st.used_bytes < st.map_size);
    env_close(&e);
}

TEST(partition_uuids_are_deterministic)
{
    struct env a = {0};
    struct env b = {0};
    struct store_changed_answer x;
    struct store_changed_answer y;
    struct store_changed_req r = creq("q", INT64_MIN, "", 0);
    struct err err = {0};

    env_open(&a);
    env_open(&b);
    fill(&a, "q", "p", 2);
    fill(&b, "q", "p", 2);
    store_changed(a.store, STORE_DEFAULT_TENANT, &r, 1, &x, &err);
    store_changed(b.store, STORE_DEFAULT_TENANT, &r, 1, &y, &err);
    EXPECT_MEM_EQ(x.entries[0].partitions[0].uuid, 16,
                  y.entries[0].partitions[0].uuid, 16);
    EXPECT_EQ_U64(x.entries[0].partitions[0].uuid[6] & 0xf0, 0x70);
    store_changed_answer_free(&x);
    store_changed_answer_free(&y);
    env_close(&a);
    env_close(&b);
}

/* ---- reads from another thread while the writer applies -------------- */

struct reader {
    struct store *store;
    _Atomic int stop;
    int errors;
    int regressions;
    _Atomic long reads;
};

static void *read_loop(void *p)
{
    struct reader *r = p;
    struct store_fetch_req q = req("q", "p", 0, 1 << 20);
    int64_t last = 0;

    while (!r->stop) {
        struct store_fetch_answer a;
        struct err err = {0};

        if (store_fetch(r->store, STORE_DEFAULT_TENANT, &q, 1, &a, &err) != 0) {
            r->errors++;
        } else {
            /* A reader never sees the log shrink or a torn append. */
            if (a.entries[0].high_watermark < last ||
                a.entries[0].high_watermark % 10 != 0) {
                r->regressions++;
            }
            last = a.entries[0].high_watermark;
        }
        store_fetch_answer_free(&a);
        r->reads++;
    }
    return NULL;
}

TEST(reads_from_another_thread_see_whole_appends_only)
{
    struct env e = {0};
    struct reader r = {0};
    pthread_t th;

    env_open(&e);
    r.store = e.store;
    pthread_create(&th, NULL, read_loop, &r);
    /* At least 200 batches, and on until the reader has done 20 reads
     * while the appends went on (a deadline, and 100000 batches at most):
     * on a loaded machine the reader thread may not be scheduled before
     * 200 batches are in. */
    long before = r.reads;
    int k = 0;
    for (int64_t end = harness_now_ms() + HARNESS_WAIT_MS;
         (k < 200 || r.reads - before < 20) && k < 100000 &&
         harness_now_ms() < end;
         k++) {
        push_batch(&e, "q", "p", k, 10);
    }
    long during = r.reads - before;
    r.stop = 1;
    pthread_join(th, NULL);
    EXPECT_EQ_I64(r.errors, 0);
    EXPECT_EQ_I64(r.regressions, 0);
    EXPECT(during >= 20);
    env_close(&e);
}

TEST(opening_a_missing_directory_fails_with_the_path)
{
    struct store *s = NULL;
    struct err err = {0};

    EXPECT_EQ_I64(store_open(&s, "/nonexistent/queen-store", 1 << 20, &err),
                  ERR_IO);
    EXPECT(strstr(err.msg, "/nonexistent/queen-store") != NULL);
    EXPECT(s == NULL);
}

TEST(a_store_of_another_schema_is_refused)
{
    struct env e = {0};
    struct store *s = NULL;
    struct err err = {0};
    MDB_txn *txn;
    MDB_val k = {6, (char[]){'s', 'c', 'h', 'e', 'm', 'a'}};
    uint8_t v[8];
    MDB_val d = {8, v};

    env_open(&e);
    be64_put(v, 99);
    EXPECT_EQ_I64(store_wbegin(e.store, &txn, &err), 0);
    EXPECT_EQ_I64(mdb_put(txn, e.store->meta, &k, &d, 0), 0);
    EXPECT_EQ_I64(store_wcommit(e.store, txn, 1, 0, &err), 0);
    fsm_free(e.fsm);
    store_close(e.store);
    EXPECT_EQ_I64(store_open(&s, e.dir, 1 << 30, &err), ERR_CORRUPT);
    EXPECT(strstr(err.msg, "schema 99") != NULL);
    e.fsm = NULL;
    e.store = NULL;
    env_close(&e);
}

TEST(trimming_moves_log_start_and_deletes_below_it)
{
    struct env e = {0};
    struct store_fetch_answer a;
    struct store_fetch_req r = req("q", "p", 4, 100);
    struct store_wpart p;
    struct store_stats st;
    struct store_w w;
    struct err err = {0};
    MDB_txn *txn;

    env_open(&e);
    fill(&e, "q", "p", 6); /* six appends of one record: 0..5 */
    EXPECT_EQ_I64(store_wbegin(e.store, &txn, &err), 0);
    w = (struct store_w){.s = e.store,
                         .txn = txn,
                         .tenant = STORE_DEFAULT_TENANT,
                         .stamp = T0 + 100};
    EXPECT_EQ_I64(store_wpart_find(&w, 1, SLICE_LIT("p"), &p, &err), 0);
    EXPECT_EQ_I64(store_wtrim(&w, SLICE_LIT("p"), &p, 7, &err), ERR_INVALID);
    EXPECT_EQ_I64(store_wtrim(&w, SLICE_LIT("p"), &p, 4, &err), 0);
    EXPECT_EQ_I64(store_wtrim(&w, SLICE_LIT("p"), &p, 2, &err), 0);
    EXPECT_EQ_I64(store_wcommit(e.store, txn, 100, 0, &err), 0);
    EXPECT_EQ_I64(store_stats(e.store, &st, &err), 0);
    EXPECT_EQ_U64(st.n_records, 2);
    fetch(&e, &r, 1, &a);
    expect_entry(&a, 0, (struct want){ANY, 2, ANY, 4});
    EXPECT_EQ_I64(a.entries[0].records[0].offset, 4);
    store_fetch_answer_free(&a);
    r.offset = 3;
    fetch(&e, &r, 1, &a);
    EXPECT_EQ_I64(a.entries[0].error, STORE_OFFSET_OUT_OF_RANGE);
    fetch_done(&e, &a);
}

/* ---- partitions changed with `since`: cost in proportion to the change -- */

static uint64_t changed_rows_read(struct env *e)
{
    struct store_stats st;
    struct err err = {0};

    EXPECT_EQ_I64(store_stats(e->store, &st, &err), 0);
    return st.changed_rows_read;
}

/* The names a listing of q gives page by page (limit per page), as one
 * string "name,name,...". */
static void list_all(struct env *e, int64_t since, int limit, char *out,
                     size_t cap)
{
    char cursor[32] = "";
    size_t at = 0;

    out[0] = '\0';
    for (int pages = 0; pages < 5000; pages++) {
        struct store_changed_req r = creq("q", since, cursor, limit);
        struct store_changed_answer a;

        changed(e, &r, 1, &a);
        for (size_t i = 0; i < a.entries[0].n_partitions; i++) {
            const struct store_partition_info *p = &a.entries[0].partitions[i];

            at += (size_t)snprintf(out + at, at < cap ? cap - at : 0,
                                   "%.*s@%" PRIu64 ",", (int)p->name.len,
                                   p->name.ptr, p->id);
        }
        if (!a.entries[0].has_next) {
            store_changed_answer_free(&a);
            return;
        }
        snprintf(cursor, sizeof(cursor), "p|%" PRIu64, a.entries[0].next_pid);
        store_changed_answer_free(&a);
    }
}

/* 3000 partitions written once, then 7 written again: a `since` page reads
 * the index rows of the 7 alone, and lists what a walk of every row with
 * the filter lists, in creation order, page for page. */
TEST(changed_since_reads_only_the_rows_that_changed)
{
    static char want[65536];
    static char got[65536];
    struct env e = {0};
    struct pitem items[500];
    char names[500][24];
    static const int again[] = {2999, 5, 1700, 42, 2500, 0, 1234};
    struct store_changed_answer a;
    struct store_changed_req r = creq("q", T0 + 100, "", 0);
    uint64_t before;

    env_open(&e);
    for (int k = 0; k < 6; k++) {
        for (int i = 0; i < 500; i++) {
            snprintf(names[i], sizeof(names[i]), "p%04d", k * 500 + i);
            items[i] = (struct pitem){"q", names[i], names[i], "1"};
        }
        env_push(&e, T0 + k, items, 500);
    }
    for (int i = 0; i < 7; i++) {
        char name[24];
        char txn[24];

        snprintf(name, sizeof(name), "p%04d", again[i]);
        snprintf(txn, sizeof(txn), "again-%d", i);
        env_push1(&e, T0 + 100 + i, "q", name, txn, "2");
    }
    before = changed_rows_read(&e);
    changed(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_partitions, 7);
    EXPECT_MEM_EQ(a.entries[0].partitions[0].name.ptr, 5, "p0000", 5);
    EXPECT_MEM_EQ(a.entries[0].partitions[6].name.ptr, 5, "p2999", 5);
    EXPECT_EQ_I64(a.entries[0].partitions[6].last_offset, 1);
    EXPECT_EQ_I64(a.entries[0].partitions[6].last_write_at, T0 + 100);
    EXPECT_EQ_I64(a.entries[0].partitions[0].last_write_at, T0 + 105);
    EXPECT(!a.entries[0].has_next);
    store_changed_answer_free(&a);
    EXPECT(changed_rows_read(&e) - before <= 7);
    /* same answer as the filter over every row, also across pages */
    list_all(&e, T0 + 3, 3, got, sizeof(got));
    list_all(&e, INT64_MIN, 1000, want, sizeof(want));
    {
        /* keep the rows of want written at or after T0 + 3 */
        static char filtered[65536];
        size_t at = 0;
        char *save = NULL;

        filtered[0] = '\0';
        for (char *t = strtok_r(want, ",", &save); t != NULL;
             t = strtok_r(NULL, ",", &save)) {
            int idx = atoi(t + 1);
            bool is_again = false;

            for (int i = 0; i < 7; i++) {
                is_again = is_again || again[i] == idx;
            }
            if (idx >= 1500 || is_again) {
                at += (size_t)snprintf(filtered + at, sizeof(filtered) - at,
                                       "%s,", t);
            }
        }
        EXPECT_STR_EQ(got, filtered);
    }
    env_close(&e);
}

/* A store written before parts_by_write existed gets it built on open. */
TEST(changed_since_index_is_built_for_an_older_store)
{
    struct env e = {0};
    struct store_changed_answer a;
    struct store_changed_req r = creq("q", T0 + 1, "", 0);
    struct err err = {0};
    MDB_txn *txn;
    MDB_val k = {8, (char[]){'b', 'y', '_', 'w', 'r', 'i', 't', 'e'}};

    env_open(&e);
    push_each(&e, "q", (const char *[]){"a", "b", "c"}, 3);
    EXPECT_EQ_I64(store_wbegin(e.store, &txn, &err), 0);
    EXPECT_EQ_I64(mdb_drop(txn, e.store->parts_by_write, 0), 0);
    EXPECT_EQ_I64(mdb_del(txn, e.store->meta, &k, NULL), 0);
    EXPECT_EQ_I64(store_wcommit(e.store, txn, e.index, T0 + 2, &err), 0);
    env_reopen(&e);
    changed(&e, &r, 1, &a);
    EXPECT_EQ_U64(a.entries[0].n_partitions, 2); /* b and c */
    store_changed_answer_free(&a);
    env_close(&e);
}
