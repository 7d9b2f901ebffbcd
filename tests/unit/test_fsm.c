/* Unit tests of the state machine (raft/fsm.h) over a real LMDB store in a
 * mkdtemp directory: offsets, stamps, dedup, re-apply, restart, snapshots. */
#include "harness.h"

#include "push_helpers.h"
#include "store/store_impl.h"

#define T0 1760000000000000LL /* a stamp in 2025, µs */
#define S  1000000LL

static struct store_fetch_entry fetch1(struct env *e, const char *q,
                                       const char *p, int64_t off,
                                       struct store_fetch_answer *a)
{
    struct store_fetch_req r = {
        {q, strlen(q)}, {p, strlen(p)}, off, 1 << 20, false};
    struct err err = {0};

    EXPECT_EQ_I64(store_fetch(e->store, STORE_DEFAULT_TENANT, &r, 1, a, &err),
                  0);
    return a->entries[0];
}

TEST(offsets_are_gapless_per_partition)
{
    struct env e = {0};
    struct pitem a[4] = {{"q", "p1", "a", "1"},
                         {"q", "p2", "b", "2"},
                         {"q", "p1", "c", "3"},
                         {"q", "p1", "d", "4"}};
    const struct fsm_result *r;
    struct store_fetch_answer ans;
    struct store_fetch_entry fe;

    env_open(&e);
    r = env_push(&e, T0, a, 4);
    EXPECT(r != NULL);
    EXPECT_EQ_U64(r->n_items, 4);
    EXPECT_EQ_I64(r->items[0].offset, 0);
    EXPECT_EQ_I64(r->items[1].offset, 0);
    EXPECT_EQ_I64(r->items[2].offset, 1);
    EXPECT_EQ_I64(r->items[3].offset, 2);
    r = env_push1(&e, T0 + 1, "q", "p1", "e", "5");
    EXPECT_EQ_I64(r->items[0].status, FSM_ITEM_QUEUED);
    EXPECT_EQ_I64(r->items[0].offset, 3);
    fe = fetch1(&e, "q", "p1", 0, &ans);
    EXPECT_EQ_U64(fe.n_records, 4);
    EXPECT_EQ_I64(fe.high_watermark, 4);
    for (size_t i = 0; i < fe.n_records; i++) {
        EXPECT_EQ_I64(fe.records[i].offset, (int64_t)i);
    }
    /* One stamp per push: the first three share T0, the last is T0 + 1. */
    EXPECT_EQ_I64(fe.records[0].ts, T0);
    EXPECT_EQ_I64(fe.records[2].ts, T0);
    EXPECT_EQ_I64(fe.records[3].ts, T0 + 1);
    EXPECT_MEM_EQ(fe.records[3].payload.ptr, fe.records[3].payload.len, "5", 1);
    store_fetch_answer_free(&ans);
    env_close(&e);
}

TEST(intra_request_duplicates_follow_their_leader)
{
    struct env e = {0};
    struct pitem a[4] = {{"q", "p", "x", "1"},
                         {"q", "p", "y", "2"},
                         {"q", "p", "x", "3"},
                         {"q", "other", "x", "4"}};
    const struct fsm_result *r;

    env_open(&e);
    r = env_push(&e, T0, a, 4);
    EXPECT_EQ_I64(r->items[0].status, FSM_ITEM_QUEUED);
    EXPECT_EQ_I64(r->items[1].status, FSM_ITEM_QUEUED);
    EXPECT_EQ_I64(r->items[1].offset, 1);
    EXPECT_EQ_I64(r->items[2].status, FSM_ITEM_DUPLICATE);
    EXPECT_EQ_I64(r->items[2].offset, 0);
    EXPECT_MEM_EQ(r->items[2].message_id, 16, r->items[0].message_id, 16);
    /* Same txn in another partition of the same queue: the stored dedup row
     * of item 0 makes it a duplicate of item 0. */
    EXPECT_EQ_I64(r->items[3].status, FSM_ITEM_DUPLICATE);
    EXPECT_EQ_I64(r->items[3].offset, 0);
    EXPECT_MEM_EQ(r->items[3].message_id, 16, r->items[0].message_id, 16);
    env_close(&e);
}

TEST(dedup_holds_within_the_window_and_not_after)
{
    struct env e = {0};
    const struct fsm_result *r;
    uint8_t first_id[16];

    env_open(&e);
    r = env_push1(&e, T0, "q", "p", "tx", "1");
    memcpy(first_id, r->items[0].message_id, 16);
    env_push1(&e, T0 + 1, "q", "p", "other", "2");
    r = env_push1(&e, T0 + 3600 * S, "q", "p", "tx", "3");
    EXPECT_EQ_I64(r->items[0].status, FSM_ITEM_DUPLICATE);
    EXPECT_EQ_I64(r->items[0].offset, 0);
    EXPECT_MEM_EQ(r->items[0].message_id, 16, first_id, 16);
    /* Another queue does not share dedup rows. */
    r = env_push1(&e, T0 + 3600 * S + 1, "q2", "p", "tx", "3");
    EXPECT_EQ_I64(r->items[0].status, FSM_ITEM_QUEUED);
    r = env_push1(&e, T0 + 3600 * S + 2, "q", "p", "tx", "4");
    EXPECT_EQ_I64(r->items[0].status, FSM_ITEM_QUEUED);
    EXPECT_EQ_I64(r->items[0].offset, 2);
    env_close(&e);
}

TEST(expired_dedup_rows_are_swept)
{
    struct env e = {0};
    struct store_stats st;
    struct err err = {0};

    env_open(&e);
    env_push1(&e, T0, "q", "p", "a", "1");
    env_push1(&e, T0 + 1, "q", "p", "b", "1");
    EXPECT_EQ_I64(store_stats(e.store, &st, &err), 0);
    EXPECT_EQ_U64(st.n_dedup_rows, 2);
    env_push1(&e, T0 + 3601 * S, "q", "p", "c", "1");
    EXPECT_EQ_I64(store_stats(e.store, &st, &err), 0);
    EXPECT_EQ_U64(st.n_dedup_rows, 1);
    EXPECT_EQ_U64(st.n_records, 3);
    env_close(&e);
}

/* Transaction ids that fall between stored ones (restore's shape: several
 * partitions' ids interleaved), over enough rows for a tree of many pages:
 * the entry's cursors look up and insert far from the last key, and the
 * verdicts stay exact, then the sweep empties the table through them. */
#define OOO_N 4000
TEST(dedup_is_exact_for_txns_out_of_order_over_many_pages)
{
    static char txn[OOO_N][16];
    static char part[16][16];
    static struct pitem it[OOO_N];
    static int64_t off1[OOO_N];
    int64_t next[16] = {0};
    struct env e = {0};
    struct store_stats st;
    struct err err = {0};
    const struct fsm_result *r;
    size_t late = 0;

    env_open(&e);
    for (int i = 0; i < OOO_N; i++) {
        snprintf(txn[i], sizeof(txn[i]), "txn-%06d", i);
    }
    for (int p = 0; p < 16; p++) {
        snprintf(part[p], sizeof(part[p]), "p%02d", p);
    }
    /* Entry 1: the even ids, scrambled. */
    for (int k = 0; k < OOO_N / 2; k++) {
        int i = 2 * ((k * 997) % (OOO_N / 2));
        it[k] = (struct pitem){"q", part[i % 16], txn[i], "{}"};
    }
    r = env_push(&e, T0, it, OOO_N / 2);
    EXPECT(r != NULL);
    for (int k = 0; k < OOO_N / 2; k++) {
        int i = 2 * ((k * 997) % (OOO_N / 2));
        EXPECT_EQ_I64(r->items[k].status, FSM_ITEM_QUEUED);
        EXPECT_EQ_I64(r->items[k].offset, next[i % 16]);
        off1[i] = next[i % 16]++;
    }
    /* Entry 2: every id, descending, so no key is past the one before. */
    for (int k = 0; k < OOO_N; k++) {
        int i = OOO_N - 1 - k;
        it[k] = (struct pitem){"q", part[i % 16], txn[i], "{}"};
    }
    r = env_push(&e, T0 + 1, it, OOO_N);
    EXPECT(r != NULL);
    for (int k = 0; k < OOO_N; k++) {
        int i = OOO_N - 1 - k;
        if (i % 2 == 0) {
            EXPECT_EQ_I64(r->items[k].status, FSM_ITEM_DUPLICATE);
            EXPECT_EQ_I64(r->items[k].offset, off1[i]);
        } else {
            EXPECT_EQ_I64(r->items[k].status, FSM_ITEM_QUEUED);
            EXPECT_EQ_I64(r->items[k].offset, next[i % 16]++);
        }
    }
    EXPECT_EQ_I64(store_stats(e.store, &st, &err), 0);
    EXPECT_EQ_U64(st.n_dedup_rows, OOO_N);
    EXPECT_EQ_U64(st.n_records, OOO_N);
    /* Past the window: each entry sweeps 64 expired rows, oldest first. */
    do {
        r = env_push1(&e, T0 + 3601 * S + (int64_t)late, "q", "p00",
                      late % 2 ? "late-odd" : "late-even", "{}");
        late++;
        EXPECT_EQ_I64(store_stats(e.store, &st, &err), 0);
    } while (st.n_dedup_rows > 2 && late < OOO_N / 64 + 2);
    EXPECT_EQ_U64(st.n_dedup_rows, 2);
    EXPECT_EQ_U64(late, (OOO_N + 63) / 64);
    /* An expired id is new again; a live one is still a duplicate. */
    r = env_push1(&e, T0 + 3602 * S, "q", "p01", txn[7], "{}");
    EXPECT_EQ_I64(r->items[0].status, FSM_ITEM_QUEUED);
    r = env_push1(&e, T0 + 3602 * S + 1, "q", "p00", "late-even", "{}");
    EXPECT_EQ_I64(r->items[0].status, FSM_ITEM_DUPLICATE);
    env_close(&e);
}

TEST(reapplying_an_applied_index_is_a_noop)
{
    struct env e = {0};
    const struct fsm_result *r;
    struct cmd_push_item it;
    struct buf b;
    struct err err = {0};
    struct store_fetch_answer ans;

    env_open(&e);
    env_push1(&e, T0, "q", "p", "a", "1");
    memset(&it, 0, sizeof(it));
    it.queue = SLICE_LIT("q");
    it.partition = SLICE_LIT("p");
    it.txn = SLICE_LIT("new");
    it.payload = SLICE_LIT("2");
    buf_init(&b, BUF_UNLIMITED);
    cmd_push_encode(&b, STORE_DEFAULT_TENANT, &it, 1, &err);
    cmd_set_stamp(b.data, T0 + 5);
    EXPECT_EQ_I64(fsm_apply_entry(e.fsm, 1, b.data, b.len, &r, &err), 0);
    EXPECT(r == NULL);
    EXPECT_EQ_U64(store_applied_index(e.store), 1);
    EXPECT_EQ_I64(fetch1(&e, "q", "p", 0, &ans).high_watermark, 1);
    store_fetch_answer_free(&ans);
    buf_free(&b);
    env_close(&e);
}

TEST(restart_keeps_everything)
{
    struct env e = {0};
    struct store_fetch_answer ans;
    struct store_fetch_entry fe;
    int64_t safe = 0;
    struct err err = {0};
    const struct fsm_result *r;

    env_open(&e);
    env_push1(&e, T0, "q", "p", "a", "{\"k\": 1.50}");
    env_push1(&e, T0 + 7, "q", "p", "b", "");
    env_reopen(&e);
    EXPECT_EQ_U64(store_applied_index(e.store), 2);
    EXPECT_EQ_I64(store_safe_time(e.store, &safe, &err), 0);
    EXPECT_EQ_I64(safe, T0 + 7);
    fe = fetch1(&e, "q", "p", 0, &ans);
    EXPECT_EQ_U64(fe.n_records, 2);
    EXPECT_MEM_EQ(fe.records[0].payload.ptr, fe.records[0].payload.len,
                  "{\"k\": 1.50}", 11);
    EXPECT_EQ_U64(fe.records[1].payload.len, 0);
    EXPECT_MEM_EQ(fe.records[1].txn.ptr, fe.records[1].txn.len, "b", 1);
    store_fetch_answer_free(&ans);
    /* Counters survive: a new partition gets a new id, dedup still holds. */
    r = env_push1(&e, T0 + 8, "q", "p", "a", "x");
    EXPECT_EQ_I64(r->items[0].status, FSM_ITEM_DUPLICATE);
    r = env_push1(&e, T0 + 9, "q", "p2", "z", "x");
    EXPECT_EQ_I64(r->items[0].offset, 0);
    env_close(&e);
}

TEST(a_corrupt_entry_moves_applied_and_changes_nothing_else)
{
    struct env e = {0};
    const struct fsm_result *r;
    struct err err = {0};
    struct store_stats st;
    char junk[40];

    env_open(&e);
    env_push1(&e, T0, "q", "p", "a", "1");
    memset(junk, 0x51, sizeof(junk));
    EXPECT_EQ_I64(fsm_apply_entry(e.fsm, 2, junk, sizeof(junk), &r, &err), 0);
    EXPECT(r != NULL);
    EXPECT_EQ_I64(r->code, ERR_CORRUPT);
    EXPECT_EQ_U64(store_applied_index(e.store), 2);
    EXPECT_EQ_I64(store_stats(e.store, &st, &err), 0);
    EXPECT_EQ_U64(st.n_records, 1);
    EXPECT_EQ_I64(st.safe_time, T0);
    env_close(&e);
}

/* The push body is checked whole before anything is written: items that
 * decode, then a byte after the last one, store nothing. */
TEST(a_push_body_bad_after_its_items_changes_nothing)
{
    struct env e = {0};
    const struct fsm_result *r;
    struct cmd_push_item it[2];
    struct buf b;
    struct err err = {0};
    struct store_fetch_answer ans;

    env_open(&e);
    env_push1(&e, T0, "q", "p", "a", "1");
    memset(it, 0, sizeof(it));
    for (int i = 0; i < 2; i++) {
        it[i].queue = SLICE_LIT("q");
        it[i].partition = i == 0 ? SLICE_LIT("p") : SLICE_LIT("new");
        it[i].txn = i == 0 ? SLICE_LIT("b") : SLICE_LIT("c");
        it[i].payload = SLICE_LIT("2");
    }
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_push_encode(&b, STORE_DEFAULT_TENANT, it, 2, &err), 0);
    EXPECT_EQ_I64(buf_append_byte(&b, 0, &err), 0);
    EXPECT_EQ_I64(cmd_finish(&b, 0, &err), 0); /* the longer body's length */
    cmd_set_stamp(b.data, T0 + 5);
    EXPECT_EQ_I64(fsm_apply_entry(e.fsm, 2, b.data, b.len, &r, &err), 0);
    EXPECT(r != NULL);
    EXPECT_EQ_I64(r->code, ERR_CORRUPT);
    EXPECT(strstr(r->msg, "after its last item") != NULL);
    EXPECT_EQ_U64(store_applied_index(e.store), 2);
    EXPECT_EQ_I64(fetch1(&e, "q", "p", 0, &ans).high_watermark, 1);
    store_fetch_answer_free(&ans);
    EXPECT_EQ_I64(fetch1(&e, "q", "new", 0, &ans).high_watermark, 0);
    store_fetch_answer_free(&ans);
    buf_free(&b);
    env_close(&e);
}

TEST(a_full_store_fails_the_entry_and_changes_nothing)
{
    struct env e = {0};
    const struct fsm_result *r;
    struct store_fetch_answer ans;

    env_open(&e);
    env_push1(&e, T0, "q", "p", "a", "1");
    e.store->fail_commits = 1;
    r = env_push1(&e, T0 + 1, "q", "new-partition", "b", "2");
    EXPECT(r == NULL);
    EXPECT_EQ_U64(store_applied_index(e.store), 1);
    EXPECT_EQ_I64(fetch1(&e, "q", "new-partition", 0, &ans).error,
                  STORE_ENTRY_OK);
    EXPECT_EQ_I64(ans.entries[0].high_watermark, 0);
    store_fetch_answer_free(&ans);
    /* The retry (same index) applies, and the partition gets id 2, not 3. */
    e.index = 1;
    r = env_push1(&e, T0 + 1, "q", "new-partition", "b", "2");
    EXPECT(r != NULL);
    EXPECT_EQ_U64(e.store->next_part, 3);
    env_close(&e);
}

TEST(snapshot_restores_into_an_empty_store_and_is_skipped_when_ahead)
{
    struct env a = {0};
    struct env b = {0};
    struct raft_buffer snap;
    struct err err = {0};
    struct store_fetch_answer ans;

    env_open(&a);
    env_push1(&a, T0, "q", "p", "a", "1");
    env_push1(&a, T0 + 1, "q", "p", "b", "2");
    EXPECT_EQ_I64(fsm_snapshot_take(a.fsm, &snap, &err), 0);
    env_open(&b);
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, snap.base, snap.len, &err), 0);
    EXPECT_EQ_U64(store_applied_index(b.store), 2);
    EXPECT_EQ_U64(fetch1(&b, "q", "p", 0, &ans).n_records, 2);
    store_fetch_answer_free(&ans);
    /* a is ahead of its own snapshot now: restoring it changes nothing. */
    env_push1(&a, T0 + 2, "q", "p", "c", "3");
    EXPECT_EQ_I64(fsm_snapshot_restore(a.fsm, snap.base, snap.len, &err), 0);
    EXPECT_EQ_U64(store_applied_index(a.store), 3);
    EXPECT_EQ_U64(fetch1(&a, "q", "p", 0, &ans).n_records, 3);
    store_fetch_answer_free(&ans);
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, "garbage-garbage!", 16, &err),
                  ERR_CORRUPT);
    raft_free(snap.base);
    env_close(&a);
    env_close(&b);
}

TEST(noop_moves_safe_time)
{
    struct env e = {0};
    struct buf b;
    struct err err = {0};
    const struct fsm_result *r;
    int64_t safe = 0;

    env_open(&e);
    buf_init(&b, BUF_UNLIMITED);
    cmd_begin(&b, CMD_NOOP, STORE_DEFAULT_TENANT, &err);
    cmd_finish(&b, 0, &err);
    cmd_set_stamp(b.data, T0 + 99);
    EXPECT_EQ_I64(fsm_apply_entry(e.fsm, 1, b.data, b.len, &r, &err), 0);
    EXPECT_EQ_I64(r->code, 0);
    EXPECT_EQ_I64(store_safe_time(e.store, &safe, &err), 0);
    EXPECT_EQ_I64(safe, T0 + 99);
    buf_free(&b);
    env_close(&e);
}

TEST(configured_options_persist_and_govern_dedup)
{
    struct env e = {0};
    struct store_queue_options o;
    struct store_queue_info qi;
    struct store_wqueue q;
    struct store_w w;
    struct err err = {0};
    MDB_txn *txn;
    const struct fsm_result *r;

    env_open(&e);
    env_push1(&e, T0, "q", "p", "tx", "1");
    store_queue_options_configured(&o);
    o.dedup_window_seconds = 0;
    o.retention_enabled = true;
    snprintf(o.retention_sink_hold, sizeof(o.retention_sink_hold), "lake");
    EXPECT_EQ_I64(store_wbegin(e.store, &txn, &err), 0);
    w = (struct store_w){.s = e.store,
                         .txn = txn,
                         .tenant = STORE_DEFAULT_TENANT,
                         .stamp = T0 + 1};
    EXPECT_EQ_I64(store_wqueue_put_options(&w, SLICE_LIT("q"), &o, &q, &err),
                  0);
    EXPECT(!q.created);
    EXPECT_EQ_I64(store_wcommit(e.store, txn, ++e.index, T0 + 1, &err), 0);
    EXPECT_EQ_I64(store_get_queue(e.store, STORE_DEFAULT_TENANT, SLICE_LIT("q"),
                                  &qi, &err),
                  0);
    EXPECT_EQ_I64(qi.created_at, T0);
    EXPECT_EQ_U64(qi.n_partitions, 1);
    EXPECT(qi.options.retention_enabled);
    EXPECT_EQ_I64(qi.options.lease_time, 300);
    EXPECT_STR_EQ(qi.options.retention_sink_hold, "lake");
    /* A window of 0 s: the same txn is queued again. */
    r = env_push1(&e, T0 + 2, "q", "p", "tx", "2");
    EXPECT_EQ_I64(r->items[0].status, FSM_ITEM_QUEUED);
    EXPECT_EQ_I64(r->items[0].offset, 1);
    env_close(&e);
}

TEST(a_duplicate_alone_creates_no_partition)
{
    struct env e = {0};
    struct pitem a[2] = {{"q", "p1", "x", "1"}, {"q", "p2", "x", "2"}};
    struct store_stats st;
    struct err err = {0};
    const struct fsm_result *r;

    env_open(&e);
    r = env_push(&e, T0, a, 2);
    EXPECT_EQ_I64(r->items[1].status, FSM_ITEM_DUPLICATE);
    EXPECT_EQ_I64(store_stats(e.store, &st, &err), 0);
    EXPECT_EQ_U64(st.n_partitions, 1);
    r = env_push1(&e, T0 + 1, "q", "p2", "y", "3");
    EXPECT_EQ_I64(r->items[0].offset, 0);
    EXPECT_EQ_I64(store_stats(e.store, &st, &err), 0);
    EXPECT_EQ_U64(st.n_partitions, 2);
    env_close(&e);
}
