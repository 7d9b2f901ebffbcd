/* Unit tests of raft snapshots off the loop thread (raft/snapshot.h,
 * store/store_snapshot.h) against real LMDB stores in mkdtemp directories,
 * data in through the real fsm: the fsm's snapshot is a marker of the index
 * as of the `snapshot` call, a full dump (for followers) the state as of its
 * begin even when entries are applied meanwhile; a marker restores into a
 * store at or past it and refuses one behind it;
 * every database round-trips (empty and dupsort ones too); damaged buffers
 * are refused and change nothing; the legacy format still restores; a real
 * node (libraft, temp dir, free 127.0.0.1 port) applies entries while its
 * snapshots are taken and, its store lost, refuses to start. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lz4frame.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#include "node_helpers.h"
#include "push_helpers.h"
#include "raft/node.h"
#include "raft/snapshot.h"
#include "store/schema.h"
#include "store/store_impl.h"
#include "store/store_snapshot.h"

#define T0 1760000000000000LL

static void fill(struct env *e, int from, int n)
{
    char payload[80];
    char txn[32];
    char part[16];

    for (int i = from; i < from + n; i++) {
        snprintf(payload, sizeof(payload), "payload-%d-%0*d", i, i % 40, 7);
        snprintf(txn, sizeof(txn), "txn-%d", i);
        snprintf(part, sizeof(part), "p%d", i % 3);
        env_push1(e, T0 + i, i % 2 ? "q1" : "q2", part, txn, payload);
    }
}

/* Every named database of a (in its main database), in order. */
static int list_dbs(MDB_txn *txn, char names[][64])
{
    MDB_dbi main_dbi;
    MDB_cursor *c;
    MDB_val k;
    MDB_val d;
    int n = 0;

    EXPECT_EQ_I64(mdb_dbi_open(txn, NULL, 0, &main_dbi), 0);
    EXPECT_EQ_I64(mdb_cursor_open(txn, main_dbi, &c), 0);
    while (mdb_cursor_get(c, &k, &d, MDB_NEXT) == 0 && n < 16) {
        memcpy(names[n], k.mv_data, k.mv_size);
        names[n][k.mv_size] = '\0';
        n++;
    }
    mdb_cursor_close(c);
    return n;
}

/* Compare one database pair by pair; returns the number of pairs. */
static uint64_t same_db(MDB_txn *ta, MDB_txn *tb, const char *name)
{
    MDB_dbi da;
    MDB_dbi db;
    MDB_cursor *ca;
    MDB_cursor *cb;
    MDB_val ka, va, kb, vb;
    unsigned fa = 0;
    unsigned fb = 0;
    uint64_t n = 0;
    int ra;
    int rb;

    EXPECT_EQ_I64(mdb_dbi_open(ta, name, 0, &da), 0);
    EXPECT_EQ_I64(mdb_dbi_open(tb, name, 0, &db), 0);
    mdb_dbi_flags(ta, da, &fa);
    mdb_dbi_flags(tb, db, &fb);
    EXPECT_EQ_U64(fa, fb);
    mdb_cursor_open(ta, da, &ca);
    mdb_cursor_open(tb, db, &cb);
    for (;;) {
        ra = mdb_cursor_get(ca, &ka, &va, MDB_NEXT);
        rb = mdb_cursor_get(cb, &kb, &vb, MDB_NEXT);
        EXPECT_EQ_I64(ra, rb);
        if (ra != 0 || rb != 0) {
            break;
        }
        EXPECT_MEM_EQ(ka.mv_data, ka.mv_size, kb.mv_data, kb.mv_size);
        EXPECT_MEM_EQ(va.mv_data, va.mv_size, vb.mv_data, vb.mv_size);
        n++;
    }
    mdb_cursor_close(ca);
    mdb_cursor_close(cb);
    return n;
}

/* Every database of env a equals env b byte for byte; the pair count. */
static uint64_t same_env(MDB_env *a, MDB_env *b)
{
    char na[16][64];
    char nb[16][64];
    MDB_txn *ta;
    MDB_txn *tb;
    uint64_t pairs = 0;
    int n;

    EXPECT_EQ_I64(mdb_txn_begin(a, NULL, MDB_RDONLY, &ta), 0);
    EXPECT_EQ_I64(mdb_txn_begin(b, NULL, MDB_RDONLY, &tb), 0);
    n = list_dbs(ta, na);
    EXPECT_EQ_I64(list_dbs(tb, nb), n);
    for (int i = 0; i < n; i++) {
        EXPECT_STR_EQ(na[i], nb[i]);
        pairs += same_db(ta, tb, na[i]);
    }
    mdb_txn_abort(ta);
    mdb_txn_abort(tb);
    return pairs;
}

/* A store opened on a compact copy of e's store as it is now. */
static void copy_now(struct env *e, struct env *copy)
{
    char path[128];
    struct err err = {0};

    snprintf(copy->dir, sizeof(copy->dir), "/tmp/queen-test-XXXXXX");
    EXPECT(mkdtemp(copy->dir) != NULL);
    snprintf(path, sizeof(path), "%s/data.mdb", copy->dir);
    EXPECT_EQ_I64(store_copy_compact(e->store, path, &err), 0);
    env_open(copy);
}

struct async_call {
    struct raft_fsm *rf;
    struct raft_buffer *bufs;
    unsigned n;
    int rc;
};

static void *async_main(void *arg)
{
    struct async_call *c = arg;

    c->rc = c->rf->snapshot_async(c->rf, &c->bufs, &c->n);
    return NULL;
}

/* A whole LZ4 frame inflated, as libraft's loader does: its header must
 * carry the content size. NULL when it does not or the frame is bad. */
static uint8_t *lz4_inflate_whole(const void *p, size_t len, size_t *out_len)
{
    LZ4F_dctx *d = NULL;
    LZ4F_frameInfo_t fi;
    size_t in = len;
    size_t dst;
    size_t src;
    uint8_t *o = NULL;

    memset(&fi, 0, sizeof(fi));
    if (LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION))) {
        return NULL;
    }
    if (!LZ4F_isError(LZ4F_getFrameInfo(d, &fi, p, &in)) &&
        fi.contentSize != 0) {
        o = malloc((size_t)fi.contentSize);
        dst = (size_t)fi.contentSize;
        src = len - in;
        if (LZ4F_decompress(d, o, &dst, (const uint8_t *)p + in, &src, NULL) !=
                0 ||
            dst != fi.contentSize) {
            free(o);
            o = NULL;
        }
        *out_len = dst;
    }
    LZ4F_freeDecompressionContext(d);
    return o;
}

TEST(async_snapshot_is_a_marker_of_the_snapshot_call)
{
    struct env a = {0};
    struct async_call c = {0};
    struct snapshot_stats before;
    struct snapshot_stats after;
    struct err err = {0};
    pthread_t th;
    uint64_t index;
    uint64_t got = 0;
    const uint8_t *m;

    env_open(&a);
    fill(&a, 0, 300);
    index = store_applied_index(a.store);
    snapshot_stats_get(&before);
    c.rf = &a.rfsm;
    EXPECT_EQ_U64(a.rfsm.version, 3);
    EXPECT_EQ_I64(a.rfsm.snapshot(&a.rfsm, &c.bufs, &c.n), 0);
    EXPECT_EQ_U64(c.n, 1);
    /* Begun and open from here (bench/push marks its slices by these). */
    snapshot_stats_get(&after);
    EXPECT_EQ_U64(after.begun, before.begun + 1);
    EXPECT(snapshot_open_count() >= 1);
    /* The writer goes on before the async part runs. */
    fill(&a, 300, 200);
    EXPECT(store_applied_index(a.store) > index);
    EXPECT_EQ_I64(pthread_create(&th, NULL, async_main, &c), 0);
    fill(&a, 500, 50); /* and while it runs */
    pthread_join(th, NULL);
    EXPECT_EQ_I64(c.rc, 0);
    /* 20 bytes: magic, the index as of the snapshot call, CRC-32. */
    m = c.bufs[0].base;
    EXPECT_EQ_U64(c.bufs[0].len, 20);
    EXPECT(snapshot_is_marker(m, c.bufs[0].len));
    EXPECT_MEM_EQ(m, 8, "QMARK001", 8);
    EXPECT_EQ_U64(be64_get(m + 8), index);
    EXPECT_EQ_U64(be32_get(m + 16), store_snap_crc(m, 20));
    EXPECT_EQ_I64(snapshot_marker_index(m, 20, &got, &err), 0);
    EXPECT_EQ_U64(got, index);
    /* The store is past it: restoring it changes nothing. */
    EXPECT_EQ_I64(fsm_snapshot_restore(a.fsm, m, 20, &err), 0);
    EXPECT_EQ_U64(store_applied_index(a.store), index + 250);
    EXPECT_EQ_I64(a.rfsm.snapshot_finalize(&a.rfsm, &c.bufs, &c.n), 0);
    snapshot_stats_get(&after);
    EXPECT_EQ_U64(after.taken, before.taken + 1);
    EXPECT_EQ_U64(after.begun, before.begun + 1);
    /* Its wall time, begin to finalize, counted (two fills ran in it). */
    EXPECT(after.busy_us > before.busy_us);
    EXPECT_EQ_U64(after.overlapped, before.overlapped + 1);
    EXPECT_EQ_U64(after.last_index, index);
    EXPECT_EQ_U64(after.last_bytes, 20);
    EXPECT_EQ_U64(after.dumps, before.dumps); /* no full dump */
    env_close(&a);
}

struct dump_call {
    struct snap *sp;
};

static void *dump_call_main(void *arg)
{
    snapshot_dump_run(((struct dump_call *)arg)->sp);
    return NULL;
}

TEST(full_dump_holds_the_state_of_its_begin)
{
    struct env a = {0};
    struct env at = {0}; /* a copy of a at the dump's index */
    struct env b = {0};
    struct dump_call c = {0};
    struct snapshot_stats before;
    struct snapshot_stats after;
    struct err err = {0};
    pthread_t th;
    uint64_t index;
    uint64_t raw_index = 0;
    uint8_t *p = NULL;
    size_t len = 0;
    uint8_t *raw;
    size_t raw_len = 0;

    env_open(&a);
    fill(&a, 0, 300);
    index = store_applied_index(a.store);
    copy_now(&a, &at);
    snapshot_stats_get(&before);
    EXPECT_EQ_I64(snapshot_dump_begin(a.store, &c.sp, &err), 0);
    EXPECT_EQ_U64(snapshot_dump_index(c.sp), index);
    EXPECT(snapshot_open_count() >= 1);
    /* The swap lock is held shared while the dump is open. */
    EXPECT_EQ_I64(pthread_rwlock_trywrlock(&a.store->swap_lock), EBUSY);
    fill(&a, 300, 200);
    EXPECT_EQ_I64(pthread_create(&th, NULL, dump_call_main, &c), 0);
    fill(&a, 500, 50); /* while it runs */
    pthread_join(th, NULL);
    EXPECT_EQ_I64(snapshot_dump_end(c.sp, &p, &len, &err), 0);
    EXPECT_EQ_I64(pthread_rwlock_trywrlock(&a.store->swap_lock), 0);
    pthread_rwlock_unlock(&a.store->swap_lock);
    /* An LZ4 frame with its content size, holding our format. */
    raw = lz4_inflate_whole(p, len, &raw_len);
    EXPECT(raw != NULL);
    EXPECT(store_snap_is_ours(raw, raw_len));
    EXPECT_EQ_I64(store_snap_check(raw, raw_len, &raw_index, &err), 0);
    EXPECT_EQ_U64(raw_index, index);
    free(raw);
    snapshot_stats_get(&after);
    EXPECT_EQ_U64(after.dumps, before.dumps + 1);
    EXPECT_EQ_U64(after.dump_last_bytes, len);
    EXPECT_EQ_U64(after.last_raw_bytes, raw_len);
    /* A follower given the frame (InstallSnapshot) restores it. */
    env_open(&b);
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, p, len, &err), 0);
    EXPECT_EQ_U64(store_applied_index(b.store), index);
    EXPECT(same_env(at.store->env, b.store->env) > 300);
    free(p);
    /* The restored store takes new entries where the dump left off. */
    b.index = index;
    fill(&b, 300, 10);
    EXPECT_EQ_U64(store_applied_index(b.store), index + 10);
    env_close(&a);
    env_close(&at);
    env_close(&b);
}

/* A marker of index n, made by a store at n (a's state is not used). */
static void marker_at(struct env *a, uint64_t n, struct raft_buffer *m)
{
    struct err err = {0};

    EXPECT_EQ_I64(snapshot_marker_take(a->store, m, &err), 0);
    EXPECT_EQ_U64(m->len, 20);
    /* Re-stamp it at n (the CRC follows), as a node at n would write it. */
    be64_put((uint8_t *)m->base + 8, n);
    be32_put((uint8_t *)m->base + 16, store_snap_crc(m->base, 20));
}

TEST(a_marker_restores_at_or_past_its_index_and_refuses_a_store_behind)
{
    struct env a = {0};
    struct raft_buffer m;
    struct err err = {0};
    char want[64];
    uint64_t applied;

    env_open(&a);
    fill(&a, 0, 20);
    applied = store_applied_index(a.store);
    EXPECT_EQ_U64(applied, 20);
    marker_at(&a, applied, &m);
    /* At: nothing to do. */
    EXPECT_EQ_I64(fsm_snapshot_restore(a.fsm, m.base, m.len, &err), 0);
    EXPECT_EQ_U64(store_applied_index(a.store), applied);
    /* Past: nothing to do. */
    be64_put((uint8_t *)m.base + 8, applied - 5);
    be32_put((uint8_t *)m.base + 16, store_snap_crc(m.base, 20));
    EXPECT_EQ_I64(fsm_snapshot_restore(a.fsm, m.base, m.len, &err), 0);
    EXPECT_EQ_U64(store_applied_index(a.store), applied);
    /* Behind: the clear error, and the store as it was. */
    be64_put((uint8_t *)m.base + 8, applied + 7);
    be32_put((uint8_t *)m.base + 16, store_snap_crc(m.base, 20));
    EXPECT_EQ_I64(fsm_snapshot_restore(a.fsm, m.base, m.len, &err),
                  ERR_PRECONDITION);
    EXPECT(strstr(err.msg, a.dir) != NULL);
    snprintf(want, sizeof(want), "(applied %" PRIu64 " < %" PRIu64 ";", applied,
             applied + 7);
    EXPECT(strstr(err.msg, want) != NULL);
    EXPECT(strstr(err.msg, "wipe this node's data directory") != NULL);
    EXPECT(strstr(err.msg, "restore a backup") != NULL);
    EXPECT_EQ_U64(store_applied_index(a.store), applied);
    /* The store goes on as before. */
    a.index = applied;
    fill(&a, 20, 3);
    EXPECT_EQ_U64(store_applied_index(a.store), applied + 3);
    free(m.base);
    env_close(&a);
}

TEST(a_damaged_marker_is_refused_and_changes_nothing)
{
    struct env a = {0};
    struct env b = {0};
    struct raft_buffer m;
    struct err err = {0};
    uint8_t bad[24];

    env_open(&a);
    env_open(&b);
    fill(&a, 0, 5);
    EXPECT_EQ_I64(snapshot_marker_take(a.store, &m, &err), 0);
    /* Intact, it would refuse b (behind): damaged, it is ERR_CORRUPT. */
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, m.base, m.len, &err),
                  ERR_PRECONDITION);
    for (size_t i = 0; i < 20; i++) {
        memcpy(bad, m.base, 20);
        bad[i] ^= i < 8 ? 0x01 : 0x40; /* the magic stays a marker's */
        if (i < 8) {
            continue; /* not a marker any more: another format's error */
        }
        EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, bad, 20, &err), ERR_CORRUPT);
        EXPECT_EQ_I64(fsm_snapshot_restore(a.fsm, bad, 20, &err), ERR_CORRUPT);
    }
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, m.base, 19, &err), ERR_CORRUPT);
    memcpy(bad, m.base, 20);
    memset(bad + 20, 0, 4);
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, bad, 24, &err), ERR_CORRUPT);
    /* A cut magic is no format at all. */
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, m.base, 6, &err), ERR_CORRUPT);
    EXPECT_EQ_U64(store_applied_index(a.store), 5);
    EXPECT_EQ_U64(store_applied_index(b.store), 0);
    free(m.base);
    env_close(&a);
    env_close(&b);
}

TEST(finalize_without_the_async_part_releases_everything)
{
    struct env a = {0};
    struct raft_buffer *bufs = NULL;
    struct snapshot_stats before;
    struct snapshot_stats after;
    unsigned n = 0;

    env_open(&a);
    fill(&a, 0, 3);
    snapshot_stats_get(&before);
    EXPECT_EQ_I64(a.rfsm.snapshot(&a.rfsm, &bufs, &n), 0);
    /* The swap lock is held shared while the snapshot is pending. */
    EXPECT_EQ_I64(pthread_rwlock_trywrlock(&a.store->swap_lock), EBUSY);
    /* libraft finalizes even when it could not queue the async work. */
    EXPECT_EQ_I64(a.rfsm.snapshot_finalize(&a.rfsm, &bufs, &n), 0);
    snapshot_stats_get(&after);
    EXPECT_EQ_U64(after.failed, before.failed + 1);
    EXPECT_EQ_U64(after.taken, before.taken);
    EXPECT_EQ_U64(after.begun, before.begun + 1);
    EXPECT_EQ_I64(pthread_rwlock_trywrlock(&a.store->swap_lock), 0);
    pthread_rwlock_unlock(&a.store->swap_lock);
    env_close(&a);
}

/* A dupsort database and an empty one beside the store's own. */
static void add_extra_dbs(struct store *s)
{
    MDB_txn *txn;
    MDB_dbi dup;
    MDB_dbi empty;
    char k[8];
    char v[8];

    EXPECT_EQ_I64(mdb_txn_begin(s->env, NULL, 0, &txn), 0);
    EXPECT_EQ_I64(mdb_dbi_open(txn, "x_dup", MDB_CREATE | MDB_DUPSORT, &dup),
                  0);
    EXPECT_EQ_I64(mdb_dbi_open(txn, "x_empty", MDB_CREATE, &empty), 0);
    for (int i = 0; i < 50; i++) {
        MDB_val mk = {(size_t)snprintf(k, sizeof(k), "k%d", i % 7), k};
        MDB_val mv = {(size_t)snprintf(v, sizeof(v), "v%d", i), v};

        EXPECT_EQ_I64(mdb_put(txn, dup, &mk, &mv, 0), 0);
    }
    EXPECT_EQ_I64(mdb_txn_commit(txn), 0);
}

TEST(every_database_round_trips_and_a_restart_keeps_it)
{
    struct env a = {0};
    struct env b = {0};
    struct raft_buffer snap;
    struct err err = {0};

    env_open(&a);
    fill(&a, 0, 40);
    add_extra_dbs(a.store);
    EXPECT_EQ_I64(fsm_snapshot_take(a.fsm, &snap, &err), 0);
    env_open(&b);
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, snap.base, snap.len, &err), 0);
    EXPECT(same_env(a.store->env, b.store->env) > 40 + 50);
    env_reopen(&b);
    EXPECT_EQ_U64(store_applied_index(b.store), 40);
    EXPECT(same_env(a.store->env, b.store->env) > 40 + 50);
    /* Nothing of the load is left behind. */
    char path[128];
    struct stat st;

    snprintf(path, sizeof(path), "%s/snapshot.load", b.dir);
    EXPECT(stat(path, &st) != 0);
    raft_free(snap.base);
    env_close(&a);
    env_close(&b);
}

/* b still holds exactly what a copy of it made now holds. */
static void expect_unchanged(struct env *b, struct env *ref, uint64_t index)
{
    EXPECT_EQ_U64(store_applied_index(b->store), index);
    EXPECT(same_env(ref->store->env, b->store->env) > 0);
}

TEST(damaged_snapshots_are_refused_and_change_nothing)
{
    struct env a = {0};
    struct env b = {0};
    struct env ref = {0};
    struct raft_buffer snap;
    struct err err = {0};
    uint8_t *bad;
    size_t cuts[] = {0, 7, 19, 23, 100};

    env_open(&a);
    fill(&a, 0, 60);
    EXPECT_EQ_I64(fsm_snapshot_take(a.fsm, &snap, &err), 0);
    env_open(&b);
    fill(&b, 0, 5);
    copy_now(&b, &ref);
    bad = malloc(snap.len);
    for (size_t i = 0; i < ARRAY_LEN(cuts); i++) {
        EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, snap.base, cuts[i], &err),
                      ERR_CORRUPT);
    }
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, snap.base, snap.len - 1, &err),
                  ERR_CORRUPT);
    memcpy(bad, snap.base, snap.len);
    bad[snap.len / 2] ^= 0x40;
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, bad, snap.len, &err),
                  ERR_CORRUPT);
    EXPECT(strstr(err.msg, "checksum") != NULL);
    /* A count that runs past the end, with a valid checksum. */
    memcpy(bad, snap.base, snap.len);
    be64_put(bad + 20 + 1 + 7 + 4, (uint64_t)1 << 40); /* "appends" count */
    be32_put(bad + snap.len - 4, store_snap_crc(bad, snap.len));
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, bad, snap.len, &err),
                  ERR_CORRUPT);
    expect_unchanged(&b, &ref, 5);
    free(bad);
    raft_free(snap.base);
    env_close(&a);
    env_close(&b);
    env_close(&ref);
}

/* The snapshot as an LZ4 frame, with its content size or without. */
static uint8_t *lz4_frame(const struct raft_buffer *snap, bool with_size,
                          size_t *len)
{
    LZ4F_preferences_t prefs;
    size_t cap;
    uint8_t *f;

    memset(&prefs, 0, sizeof(prefs));
    prefs.frameInfo.contentSize = with_size ? snap->len : 0;
    cap = LZ4F_compressFrameBound(snap->len, &prefs);
    f = malloc(cap);
    *len = LZ4F_compressFrame(f, cap, snap->base, snap->len, &prefs);
    EXPECT(!LZ4F_isError(*len));
    return f;
}

TEST(lz4_framed_snapshots_restore_and_damaged_frames_change_nothing)
{
    struct env a = {0};
    struct env b = {0};
    struct env ref = {0};
    struct env c = {0};
    struct raft_buffer snap;
    struct err err = {0};
    size_t len = 0;
    size_t bare_len = 0;
    uint8_t *frame;
    uint8_t *bare;

    env_open(&a);
    fill(&a, 0, 60);
    EXPECT_EQ_I64(fsm_snapshot_take(a.fsm, &snap, &err), 0);
    frame = lz4_frame(&snap, true, &len);
    bare = lz4_frame(&snap, false, &bare_len);
    env_open(&b);
    fill(&b, 0, 5);
    copy_now(&b, &ref);
    /* Cut short, a flipped byte, no content size: refused, nothing moves. */
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, frame, len - 9, &err),
                  ERR_CORRUPT);
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, frame, 11, &err), ERR_CORRUPT);
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, bare, bare_len, &err),
                  ERR_CORRUPT);
    frame[len / 2] ^= 0x20;
    EXPECT(fsm_snapshot_restore(b.fsm, frame, len, &err) != 0);
    frame[len / 2] ^= 0x20;
    expect_unchanged(&b, &ref, 5);
    /* Whole, it restores what the bare dump restores. */
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, frame, len, &err), 0);
    EXPECT_EQ_U64(store_applied_index(b.store), 60);
    env_open(&c);
    EXPECT_EQ_I64(fsm_snapshot_restore(c.fsm, snap.base, snap.len, &err), 0);
    EXPECT(same_env(c.store->env, b.store->env) > 60);
    free(frame);
    free(bare);
    raft_free(snap.base);
    env_close(&a);
    env_close(&b);
    env_close(&c);
    env_close(&ref);
}

/* A hand-made snapshot: one database "x" whose two keys come in kv order. */
static size_t make_one_db(uint8_t *p, uint64_t index, const char *k1,
                          const char *k2)
{
    size_t n = 0;
    const char *keys[] = {k1, k2};

    memcpy(p, STORE_SNAP_MAGIC, 8);
    be64_put(p + 8, index);
    be32_put(p + 16, 1);
    n = 20;
    p[n++] = 1;
    p[n++] = 'x';
    be32_put(p + n, 0);
    be64_put(p + n + 4, 2);
    n += 12;
    for (int i = 0; i < 2; i++) {
        be32_put(p + n, (uint32_t)strlen(keys[i]));
        memcpy(p + n + 4, keys[i], strlen(keys[i]));
        n += 4 + strlen(keys[i]);
        be32_put(p + n, 1);
        p[n + 4] = 'v';
        n += 5;
    }
    n += 4;
    be32_put(p + n - 4, store_snap_crc(p, n));
    return n;
}

TEST(keys_out_of_order_are_refused_and_change_nothing)
{
    struct env b = {0};
    struct env ref = {0};
    struct err err = {0};
    uint8_t p[128];
    uint64_t index;
    size_t n;

    env_open(&b);
    fill(&b, 0, 5);
    copy_now(&b, &ref);
    n = make_one_db(p, 100, "b", "a");
    EXPECT_EQ_I64(store_snap_check(p, n, &index, &err), 0);
    EXPECT_EQ_U64(index, 100);
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, p, n, &err), ERR_CORRUPT);
    EXPECT(strstr(err.msg, "out of order") != NULL);
    expect_unchanged(&b, &ref, 5);
    n = make_one_db(p, 100, "a", "a");
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, p, n, &err), ERR_CORRUPT);
    expect_unchanged(&b, &ref, 5);
    env_close(&b);
    env_close(&ref);
}

/* The legacy format: "QSNAP001", the index, a compact LMDB copy. */
static void legacy_snapshot(struct env *e, struct raft_buffer *b)
{
    char path[128];
    struct stat st;
    struct err err = {0};
    int fd;

    snprintf(path, sizeof(path), "%s/legacy.mdb", e->dir);
    EXPECT_EQ_I64(store_copy_compact(e->store, path, &err), 0);
    EXPECT_EQ_I64(stat(path, &st), 0);
    b->len = 16 + (size_t)st.st_size;
    b->base = malloc(b->len);
    memcpy(b->base, "QSNAP001", 8);
    be64_put((uint8_t *)b->base + 8, store_applied_index(e->store));
    fd = open(path, O_RDONLY);
    EXPECT_EQ_I64(read(fd, (uint8_t *)b->base + 16, (size_t)st.st_size),
                  st.st_size);
    close(fd);
    unlink(path);
}

TEST(the_legacy_format_still_restores)
{
    struct env a = {0};
    struct env b = {0};
    struct raft_buffer snap;
    struct err err = {0};

    env_open(&a);
    fill(&a, 0, 30);
    legacy_snapshot(&a, &snap);
    env_open(&b);
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, snap.base, snap.len, &err), 0);
    EXPECT_EQ_U64(store_applied_index(b.store), 30);
    EXPECT(same_env(a.store->env, b.store->env) > 30);
    /* b is at the snapshot's index now: restoring it again is skipped. */
    EXPECT_EQ_I64(fsm_snapshot_restore(b.fsm, snap.base, snap.len, &err), 0);
    free(snap.base);
    env_close(&a);
    env_close(&b);
}

/* ---- a real node: libraft, libuv loop, temp dir, free port -------------- */

struct nctx {
    struct node_rig n; /* first: the node helpers' callbacks take c */
    int done;
    int failed;
};

static int n_want;

static bool n_got_all(void *arg)
{
    return ((struct nctx *)arg)->done >= n_want;
}

static bool n_is_leader(void *arg)
{
    return node_role(((struct nctx *)arg)->n.node) == NODE_LEADER;
}

static bool n_run_until(struct nctx *c, bool (*pred)(void *), double secs)
{
    return nh_run_until(&c->n.loop, pred, c, secs, 500);
}

static void n_on_applied(void *arg, int status, const struct fsm_result *res,
                         const struct err *err)
{
    struct nctx *c = arg;

    (void)res;
    if (status != 0) {
        fprintf(stderr, "applied: %s\n", err->msg);
        c->failed++;
    }
    c->done++;
}

static void n_start(struct nctx *c, unsigned threshold)
{
    struct node_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.snapshot_threshold = threshold;
    cfg.snapshot_trailing = 2;
    nh_start(&c->n, &cfg, (uint64_t)4 << 30);
}

static void n_stop(struct nctx *c)
{
    EXPECT(nh_stop(&c->n, HARNESS_WAIT_S));
}

#define N_ITEMS   100
#define N_PAYLOAD 4000

/* Propose one push of N_ITEMS records of N_PAYLOAD bytes each. */
static void n_propose(struct nctx *c, int k)
{
    static char payload[N_PAYLOAD];
    struct cmd_push_item it[N_ITEMS];
    char txns[N_ITEMS][32];
    struct err err = {0};
    struct buf b;

    memset(payload, 'a' + k % 26, sizeof(payload));
    for (int i = 0; i < N_ITEMS; i++) {
        memset(&it[i], 0, sizeof(it[i]));
        snprintf(txns[i], sizeof(txns[i]), "s%d-%d", k, i);
        it[i].queue = SLICE_LIT("big");
        it[i].partition = SLICE_LIT("Default");
        it[i].txn = (struct slice){txns[i], strlen(txns[i])};
        it[i].payload = (struct slice){payload, sizeof(payload)};
    }
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_push_encode(&b, STORE_DEFAULT_TENANT, it, N_ITEMS, &err),
                  0);
    EXPECT_EQ_I64(
        node_propose(c->n.node, CMD_PUSH, b.data, b.len, n_on_applied, c, &err),
        0);
    buf_free(&b);
}

static void expect_records(struct nctx *c, int64_t n)
{
    struct store_fetch_answer a;
    struct store_fetch_req r = {SLICE_LIT("big"), SLICE_LIT("Default"), n - 1,
                                1 << 20, false};
    struct err err = {0};

    EXPECT_EQ_I64(
        store_fetch(c->n.store, STORE_DEFAULT_TENANT, &r, 1, &a, &err), 0);
    EXPECT_EQ_I64(a.entries[0].high_watermark, n);
    EXPECT_EQ_I64(a.entries[0].log_start, 0);
    EXPECT_EQ_U64(a.entries[0].n_records, 1);
    store_fetch_answer_free(&a);
}

TEST(a_node_applies_during_snapshots_and_refuses_a_lost_store)
{
    struct nctx c;
    struct snapshot_stats s0;
    struct snapshot_stats s1;
    struct node_config cfg;
    struct err err = {0};
    char path[256];
    int k = 0;
    double end;

    memset(&c, 0, sizeof(c));
    nh_setup(&c.n, "/tmp/queen-snap-XXXXXX");
    n_start(&c, 64);
    EXPECT(n_run_until(&c, n_is_leader, HARNESS_WAIT_S));
    snapshot_stats_get(&s0);
    /* Keep 8 pushes in flight until a snapshot finalizes after entries were
     * applied during its dump (each ~64 entries x 400 KB of store). */
    end = nh_now_s() + 120;
    s1 = s0;
    while (s1.overlapped == s0.overlapped && nh_now_s() < end && k < 2000) {
        for (int i = 0; i < 8; i++) {
            n_propose(&c, k++);
        }
        n_want = k;
        EXPECT(n_run_until(&c, n_got_all, HARNESS_WAIT_S));
        snapshot_stats_get(&s1);
    }
    EXPECT_EQ_I64(c.failed, 0);
    EXPECT(s1.taken > s0.taken);
    EXPECT(s1.overlapped > s0.overlapped);
    /* Handed to libraft: a marker, not the ~25 MB store. */
    EXPECT_EQ_U64(s1.last_bytes, 20);
    EXPECT_EQ_U64(s1.dumps, s0.dumps);
    expect_records(&c, (int64_t)k * N_ITEMS);
    n_stop(&c);
    /* A restart: the store is past the marker, the log replays after it. */
    n_start(&c, 64);
    EXPECT(n_run_until(&c, n_is_leader, HARNESS_WAIT_S));
    expect_records(&c, (int64_t)k * N_ITEMS);
    n_stop(&c);
    /* Lose the store: the node cannot rebuild it and refuses to start. */
    snprintf(path, sizeof(path), "%s/data.mdb", c.n.store_dir);
    EXPECT_EQ_I64(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/lock.mdb", c.n.store_dir);
    unlink(path);
    EXPECT_EQ_I64(
        store_open(&c.n.store, c.n.store_dir, (uint64_t)1 << 30, &err), 0);
    memset(&cfg, 0, sizeof(cfg));
    cfg.dir = c.n.dir;
    cfg.id = 1;
    cfg.raft_address = c.n.address;
    EXPECT_EQ_I64(node_start(&c.n.node, &c.n.loop, &cfg, c.n.store, &err),
                  ERR_PRECONDITION);
    EXPECT(strstr(err.msg, c.n.store_dir) != NULL);
    EXPECT(strstr(err.msg, "is behind the raft snapshot marker (applied 0 <") !=
           NULL);
    EXPECT(strstr(err.msg, "restore a backup") != NULL);
    /* The failed node frees itself on the loop. */
    for (end = nh_now_s() + HARNESS_WAIT_S;
         uv_loop_alive(&c.n.loop) && nh_now_s() < end;) {
        uv_run(&c.n.loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    EXPECT_EQ_U64(store_applied_index(c.n.store), 0);
    store_close(c.n.store);
    EXPECT_EQ_I64(uv_loop_close(&c.n.loop), 0);
    nftw(c.n.dir, env_rm, 16, FTW_DEPTH | FTW_PHYS);
}
