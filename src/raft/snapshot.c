/* Raft snapshots of a persistent store (libraft fsm version 3): the fsm's
 * snapshot is a marker, the full state is dumped only for a follower.
 *
 * Why: the store is a persistent FSM. meta.applied commits in the same LMDB
 * transaction as each entry's effects, and the fsm skips entries at or
 * below it (fsm.h (1)), so the store on disk already is the state as of
 * its applied index. Dumping all of it into an LZ4 frame every ~448 MiB of
 * log cost ~20-25% of the broker's CPU under push, and the fsync of a file
 * of hundreds of MB stalled the log's DSYNC writes (issue 17). What libraft
 * needs from a snapshot is a point up to which it may drop its log; a
 * marker names that point, once the store is durable past it (1).
 *
 * Taking one: snapshot_begin() (loop) opens a read transaction and reads
 * meta.applied N in it; snapshot_raft_async() (a libraft worker) syncs the
 * store (mdb_env_sync: every transaction committed before begin, N's
 * included, is on disk after it) and writes the 20-byte marker; libraft
 * writes that as the snapshot file, truncates its log, and
 * snapshot_raft_finalize() (loop) releases it all. The sync is the node's
 * 100 ms one done early: it writes the pages dirtied since the last one.
 *
 * A follower that needs the state (its log is behind the leader's first
 * entry): node.c wraps libraft's io->snapshot_get, and when the snapshot
 * loaded is a marker it dumps the store as it is now with the
 * snapshot_dump_* calls here (the dump below, on a nice-5 thread) and
 * hands libraft that frame under the marker's metadata. The frame's state
 * Y is at or past the marker's X; the follower restores Y, libraft sets
 * its last applied to X, and entries X+1..Y are skipped by fsm.h (1).
 *
 * Memory: with version >= 2 libraft owns none of the buffers. `snapshot`
 * returns one raft_buffer embedded in a struct snap (found again with
 * container_of in the later two calls), its bytes malloc'd by the async
 * part; finalize frees both, whatever happened in between.
 *
 * Compression (full dumps): the dump streams the store (store_snap_stream)
 * into an LZ4 frame on the dump's low-priority thread, and libraft's own
 * compression is off (node.c). The frame is the one libraft would have
 * written (content size in its header, which libraft's loader needs), so
 * every build loads it. The uncompressed dump is never held whole.
 * snapshot_restore() inflates a frame handed to it directly (what a
 * follower's InstallSnapshot restore gets), and libraft's loader inflates
 * one it reads from a file.
 *
 * Restore: a marker at or below the store's applied index is nothing to
 * do (a restart: raft replays the log after it, the fsm skips what the
 * store holds). A marker above it means the store lost state that the
 * raft log no longer has (its file was deleted, replaced by an older copy,
 * or restored from a backup): the node cannot rebuild it and must not
 * serve a store that lacks acknowledged records, so the restore fails with
 * ERR_PRECONDITION and a sentence saying what to do, and the node does not
 * start (docs/internals/store-raft.md, "Snapshots"). Full snapshots
 * ("QSNAP002", "QSNAP001", plain or LZ4: older nodes' files, and what a
 * follower received through InstallSnapshot) restore as they always did. */
#include "raft/snapshot.h"

#include <inttypes.h>
#include <lz4frame.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "store/schema.h"
#include "store/store_impl.h"
#include "store/store_snapshot.h"

#define SNAP_LEGACY_MAGIC "QSNAP001"
#define SNAP_LEGACY_LEN   16
#define SNAP_MARKER_MAGIC "QMARK001"
#define SNAP_MARKER_LEN   20

struct snap {
    struct raft_buffer buf; /* handed to libraft */
    struct store *store;
    struct store_snap *sn;
    uint64_t begun_us; /* CLOCK_MONOTONIC at begin */
    int dump_rc;
    uint8_t *dump_p; /* the marker or the frame, before its owner gets it */
    size_t dump_len;
    size_t raw_len; /* the dump before LZ4 */
    struct err dump_err;
};

/* The dump's nice value (the loop thread's is 0): weight ~1/3 of the
 * loop's when both run on one core. */
#define SNAP_DUMP_NICE 5

/* LZ4's acceleration 2: on event JSON 14% faster than libraft's default
 * for 1% more bytes. */
#define SNAP_LZ4_LEVEL (-2)

static _Atomic uint64_t stat_begun;
static _Atomic uint64_t stat_taken;
static _Atomic uint64_t stat_failed;
static _Atomic uint64_t stat_overlapped;
static _Atomic uint64_t stat_last_index;
static _Atomic uint64_t stat_last_bytes;
static _Atomic uint64_t stat_last_raw_bytes;
static _Atomic uint64_t stat_busy_us;
static _Atomic uint64_t stat_dumps_begun;
static _Atomic uint64_t stat_dumps;
static _Atomic uint64_t stat_dump_last_bytes;
static _Atomic uint64_t stat_dump_busy_us;
static _Atomic unsigned open_count;

unsigned snapshot_open_count(void)
{
    return atomic_load(&open_count);
}

void snapshot_stats_get(struct snapshot_stats *out)
{
    out->begun = atomic_load(&stat_begun);
    out->taken = atomic_load(&stat_taken);
    out->failed = atomic_load(&stat_failed);
    out->overlapped = atomic_load(&stat_overlapped);
    out->last_index = atomic_load(&stat_last_index);
    out->last_bytes = atomic_load(&stat_last_bytes);
    out->last_raw_bytes = atomic_load(&stat_last_raw_bytes);
    out->busy_us = atomic_load(&stat_busy_us);
    out->dumps_begun = atomic_load(&stat_dumps_begun);
    out->dumps = atomic_load(&stat_dumps);
    out->dump_last_bytes = atomic_load(&stat_dump_last_bytes);
    out->dump_busy_us = atomic_load(&stat_dump_busy_us);
}

static uint64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Loop thread: a struct snap with the store pinned, counted open. */
static int snap_open(struct store *s, struct snap **out, struct err *err)
{
    struct snap *sp = xcalloc(1, sizeof(*sp));
    int rc;

    sp->store = s;
    rc = store_snap_begin(s, &sp->sn, err);
    if (rc != 0) {
        atomic_fetch_add(&stat_failed, 1);
        free(sp);
        return rc;
    }
    sp->dump_rc = -1; /* not run yet */
    sp->begun_us = mono_us();
    atomic_fetch_add(&open_count, 1);
    *out = sp;
    return 0;
}

/* Loop thread: release the store, free sp (not the bytes). */
static void snap_close(struct snap *sp)
{
    store_snap_end(sp->sn);
    free(sp);
    atomic_fetch_sub(&open_count, 1);
}

int snapshot_begin(struct store *s, struct raft_buffer *bufs[],
                   unsigned *n_bufs)
{
    struct snap *sp;
    struct err err = {0};

    if (snap_open(s, &sp, &err) != 0) {
        log_error("snapshot", "%s", err.msg);
        return RAFT_IOERR;
    }
    atomic_fetch_add(&stat_begun, 1);
    *bufs = &sp->buf;
    *n_bufs = 1;
    return 0;
}

/* The marker of index into p (SNAP_MARKER_LEN bytes). */
static void marker_put(uint8_t *p, uint64_t index)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)SNAP_MARKER_MAGIC[i];
    }
    be64_put(p + 8, index);
    be32_put(p + 16, store_snap_crc(p, SNAP_MARKER_LEN));
}

/* Any thread: sync the store (1), then the marker of sp's index into
 * sp->dump_p. 0 or ERR_IO. */
static int marker_make(struct snap *sp)
{
    if (store_sync(sp->store, &sp->dump_err) != 0) {
        return err_wrap(&sp->dump_err, "snapshot marker at %" PRIu64,
                        store_snap_index(sp->sn));
    }
    sp->dump_p = malloc(SNAP_MARKER_LEN);
    if (sp->dump_p == NULL) {
        return err_set(&sp->dump_err, ERR_IO, "snapshot: out of memory");
    }
    marker_put(sp->dump_p, store_snap_index(sp->sn));
    sp->dump_len = SNAP_MARKER_LEN;
    return 0;
}

/* The frame being written: a buffer of the frame's bound, never grown. */
struct snap_lz4 {
    LZ4F_cctx *cctx;
    uint8_t *p;
    size_t len;
    size_t cap;
};

static int lz4_write(void *ctx, const void *p, size_t n)
{
    struct snap_lz4 *z = ctx;
    size_t w = LZ4F_compressUpdate(z->cctx, z->p + z->len, z->cap - z->len, p,
                                   n, NULL);

    if (LZ4F_isError(w)) {
        return -1;
    }
    z->len += w;
    return 0;
}

/* The store as one LZ4 frame into sp->dump_p / dump_len. */
static int dump_lz4(struct snap *sp)
{
    LZ4F_preferences_t prefs;
    struct snap_lz4 z = {0};
    size_t raw = 0;
    size_t w;

    if (store_snap_size(sp->sn, &raw, &sp->dump_err) != 0) {
        return sp->dump_err.code;
    }
    memset(&prefs, 0, sizeof(prefs));
    prefs.frameInfo.blockSizeID = LZ4F_max4MB;
    prefs.frameInfo.contentSize = raw;
    prefs.compressionLevel = SNAP_LZ4_LEVEL;
    /* The frame's bound, and a block's worth more: one update's bound
     * counts a whole buffered block on top of what it is given. */
    z.cap =
        LZ4F_compressFrameBound(raw, &prefs) + LZ4F_compressBound(0, &prefs);
    z.p = malloc(z.cap);
    if (z.p == NULL ||
        LZ4F_isError(LZ4F_createCompressionContext(&z.cctx, LZ4F_VERSION))) {
        free(z.p);
        return err_set(&sp->dump_err, ERR_IO, "snapshot: out of memory");
    }
    w = LZ4F_compressBegin(z.cctx, z.p, z.cap, &prefs);
    if (!LZ4F_isError(w)) {
        z.len = w;
        if (store_snap_stream(sp->sn, lz4_write, &z, &sp->dump_err) == 0) {
            w = LZ4F_compressEnd(z.cctx, z.p + z.len, z.cap - z.len, NULL);
        } else {
            w = (size_t)-1; /* dump_err is set */
        }
    }
    LZ4F_freeCompressionContext(z.cctx);
    if (LZ4F_isError(w)) {
        free(z.p);
        return sp->dump_err.code != 0
                   ? sp->dump_err.code
                   : err_set(&sp->dump_err, ERR_IO, "snapshot: lz4: %s",
                             LZ4F_getErrorName(w));
    }
    z.len += w;
    sp->dump_p = realloc(z.p, z.len);
    sp->dump_p = sp->dump_p != NULL ? sp->dump_p : z.p;
    sp->dump_len = z.len;
    sp->raw_len = raw;
    return 0;
}

static void *dump_main(void *arg)
{
    struct snap *sp = arg;

    /* Raising a thread's own nice value needs no privilege. */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), SNAP_DUMP_NICE);
    sp->dump_rc = dump_lz4(sp);
    return NULL;
}

static _Atomic bool dump_held;

void snapshot_dump_hold(bool hold)
{
    atomic_store(&dump_held, hold);
}

/* The dump runs on a thread of its own at a lower priority, which the
 * calling thread waits for: the caller (a libuv worker) keeps its own
 * priority for the work that follows, and when the dump and the loop both
 * want a core the loop (which applies and answers) gets most of it. */
void snapshot_dump_run(struct snap *sp)
{
    pthread_t t;

    while (atomic_load(&dump_held)) { /* tests only: snapshot_dump_hold */
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    if (pthread_create(&t, NULL, dump_main, sp) == 0) {
        pthread_join(t, NULL);
    } else {
        sp->dump_rc = dump_lz4(sp);
    }
}

int snapshot_dump_begin(struct store *s, struct snap **out, struct err *err)
{
    if (snap_open(s, out, err) != 0) {
        return err->code;
    }
    atomic_fetch_add(&stat_dumps_begun, 1);
    return 0;
}

uint64_t snapshot_dump_index(const struct snap *sp)
{
    return store_snap_index(sp->sn);
}

int snapshot_dump_end(struct snap *sp, uint8_t **p, size_t *len,
                      struct err *err)
{
    int rc = sp->dump_rc < 0 ? err_set(err, ERR_IO, "snapshot: dump not run")
                             : sp->dump_rc;
    uint64_t us = mono_us() - sp->begun_us;

    *p = NULL;
    *len = 0;
    if (rc == 0) {
        *p = sp->dump_p;
        *len = sp->dump_len;
        atomic_fetch_add(&stat_dumps, 1);
        atomic_store(&stat_dump_last_bytes, sp->dump_len);
        atomic_store(&stat_last_raw_bytes, sp->raw_len);
        atomic_fetch_add(&stat_dump_busy_us, us);
        log_info(
            "snapshot",
            "full dump at %" PRIu64 ": %zu B (LZ4 of %zu B) in %" PRIu64 " ms",
            store_snap_index(sp->sn), sp->dump_len, sp->raw_len, us / 1000);
    } else if (sp->dump_rc > 0) {
        atomic_fetch_add(&stat_failed, 1);
        *err = sp->dump_err;
    }
    snap_close(sp);
    return rc;
}

/* The fsm's snapshot_async: the marker (1). */
int snapshot_raft_async(struct raft_fsm *rf, struct raft_buffer *bufs[],
                        unsigned *n_bufs)
{
    struct snap *sp = container_of(*bufs, struct snap, buf);

    (void)rf;
    ASSERT(*n_bufs == 1);
    sp->dump_rc = marker_make(sp);
    if (sp->dump_rc != 0) {
        log_error("snapshot", "%s", sp->dump_err.msg);
        return RAFT_IOERR;
    }
    sp->buf.base = sp->dump_p;
    sp->buf.len = sp->dump_len;
    *n_bufs = 1; /* as begin said */
    return 0;
}

int snapshot_raft_finalize(struct raft_fsm *rf, struct raft_buffer *bufs[],
                           unsigned *n_bufs)
{
    struct snap *sp = container_of(*bufs, struct snap, buf);
    uint64_t index = store_snap_index(sp->sn);
    uint64_t applied = store_applied_index(sp->store);

    (void)rf;
    ASSERT(*n_bufs == 1);
    atomic_fetch_add(&stat_busy_us, mono_us() - sp->begun_us);
    if (sp->dump_rc == 0) {
        atomic_fetch_add(&stat_taken, 1);
        atomic_fetch_add(&stat_overlapped, applied > index ? 1 : 0);
        atomic_store(&stat_last_index, index);
        atomic_store(&stat_last_bytes, sp->buf.len);
        log_info("snapshot",
                 "snapshot at %" PRIu64
                 ": a %zu B marker, store synced, %" PRIu64
                 " entries applied meanwhile",
                 index, sp->buf.len, applied - index);
    } else {
        atomic_fetch_add(&stat_failed, 1);
    }
    free(sp->buf.base);
    *bufs = NULL;
    *n_bufs = 0;
    snap_close(sp);
    return 0;
}

int snapshot_marker_take(struct store *s, struct raft_buffer *b,
                         struct err *err)
{
    struct snap *sp;
    int rc;

    if (snap_open(s, &sp, err) != 0) {
        return err->code;
    }
    rc = marker_make(sp);
    if (rc != 0) {
        *err = sp->dump_err;
    }
    b->base = sp->dump_p;
    b->len = sp->dump_len;
    snap_close(sp);
    return rc;
}

bool snapshot_is_marker(const void *p, size_t len)
{
    return len >= 8 && memcmp(p, SNAP_MARKER_MAGIC, 8) == 0;
}

int snapshot_marker_index(const void *p, size_t len, uint64_t *index,
                          struct err *err)
{
    const uint8_t *b = p;

    if (len != SNAP_MARKER_LEN) {
        return err_set(err, ERR_CORRUPT,
                       "snapshot marker of %zu B (%d expected)", len,
                       SNAP_MARKER_LEN);
    }
    if (be32_get(b + 16) != store_snap_crc(p, len)) {
        return err_set(err, ERR_CORRUPT, "snapshot marker: bad checksum");
    }
    *index = be64_get(b + 8);
    return 0;
}

/* (4): the store holds the marker's state, or the node cannot start. */
static int restore_marker(struct store *s, const void *p, size_t len,
                          struct err *err)
{
    uint64_t index = 0;
    uint64_t applied = store_applied_index(s);

    if (snapshot_marker_index(p, len, &index, err) != 0) {
        return err->code;
    }
    if (index <= applied) {
        log_info("snapshot",
                 "snapshot marker at %" PRIu64 ": store applied %" PRIu64
                 ", nothing to restore",
                 index, applied);
        return 0;
    }
    /* Under 256 bytes with a path of ~80 (struct err). */
    return err_set(err, ERR_PRECONDITION,
                   "store %s is behind the raft snapshot marker (applied "
                   "%" PRIu64 " < %" PRIu64 "; data.mdb lost or older): wipe "
                   "this node's data directory to rejoin the cluster (full "
                   "snapshot) or restore a backup",
                   store_dir(s), applied, index);
}

int snapshot_take(struct store *s, struct raft_buffer *b, struct err *err)
{
    struct store_snap *sn;
    uint8_t *p = NULL;
    size_t len = 0;
    int rc;

    if (store_snap_begin(s, &sn, err) != 0) {
        return err->code;
    }
    rc = store_snap_dump(sn, realloc, &p, &len, err);
    store_snap_end(sn);
    b->base = p;
    b->len = len;
    return rc;
}

/* The index a buffer of either format restores to. */
static int restore_index(const void *p, size_t len, uint64_t *index,
                         struct err *err)
{
    if (store_snap_is_ours(p, len)) {
        return store_snap_check(p, len, index, err);
    }
    if (len < SNAP_LEGACY_LEN || memcmp(p, SNAP_LEGACY_MAGIC, 8) != 0) {
        return err_set(err, ERR_CORRUPT, "snapshot of %zu B has no header",
                       len);
    }
    *index = be64_get((const uint8_t *)p + 8);
    return 0;
}

int snapshot_inflate(const void *p, size_t len, uint8_t **out, size_t *out_len,
                     struct err *err)
{
    LZ4F_dctx *d = NULL;
    LZ4F_frameInfo_t fi;
    size_t in = len;
    size_t done = 0;
    size_t rc;
    uint8_t *o;

    memset(&fi, 0, sizeof(fi));
    if (LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION))) {
        return err_set(err, ERR_IO, "snapshot: out of memory");
    }
    rc = LZ4F_getFrameInfo(d, &fi, p, &in);
    /* LZ4 expands a byte to at most ~255: a larger claim is a lie that
     * would only make the allocation below fail or swap. */
    if (LZ4F_isError(rc) || fi.contentSize == 0 ||
        fi.contentSize > (uint64_t)len * 256 + 65536) {
        LZ4F_freeDecompressionContext(d);
        return err_set(err, ERR_CORRUPT,
                       "snapshot: LZ4 frame of %zu B without a content size",
                       len);
    }
    o = malloc((size_t)fi.contentSize);
    if (o == NULL) {
        LZ4F_freeDecompressionContext(d);
        return err_set(err, ERR_IO, "snapshot: out of memory");
    }
    for (size_t off = in; rc != 0;) {
        size_t src = len - off;
        size_t dst = (size_t)fi.contentSize - done;

        rc = LZ4F_decompress(d, o + done, &dst, (const uint8_t *)p + off, &src,
                             NULL);
        done += dst;
        off += src;
        if (LZ4F_isError(rc) || (rc != 0 && src == 0 && dst == 0)) {
            break;
        }
    }
    LZ4F_freeDecompressionContext(d);
    if (LZ4F_isError(rc) || rc != 0 || done != fi.contentSize) {
        free(o);
        return err_set(err, ERR_CORRUPT, "snapshot: LZ4 frame of %zu B: %s",
                       len,
                       LZ4F_isError(rc) ? LZ4F_getErrorName(rc) : "truncated");
    }
    *out = o;
    *out_len = done;
    return 0;
}

bool snapshot_is_lz4(const void *p, size_t len)
{
    const uint8_t *b = p;

    return len >= 4 &&
           ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
            (uint32_t)b[3] << 24) == LZ4F_MAGICNUMBER;
}

/* A snapshot in one of our two formats, as bytes. */
static int restore_plain(struct store *s, const void *p, size_t len,
                         struct err *err)
{
    uint64_t index = 0;
    int rc;

    if (snapshot_is_marker(p, len)) {
        return restore_marker(s, p, len, err);
    }
    if (restore_index(p, len, &index, err) != 0) {
        return err->code;
    }
    if (index <= store_applied_index(s)) {
        log_info("snapshot",
                 "snapshot at %" PRIu64 " skipped: store applied %" PRIu64,
                 index, store_applied_index(s));
        return 0;
    }
    if (store_snap_is_ours(p, len)) {
        rc = store_snap_load(s, p, len, err);
    } else {
        rc = store_replace(s, (const uint8_t *)p + SNAP_LEGACY_LEN,
                           len - SNAP_LEGACY_LEN, err);
    }
    if (rc != 0) {
        return rc;
    }
    log_info("snapshot", "restored snapshot at %" PRIu64, index);
    return 0;
}

int snapshot_restore(struct store *s, const void *p, size_t len,
                     struct err *err)
{
    uint8_t *raw = NULL;
    size_t raw_len = 0;
    int rc;

    if (!snapshot_is_lz4(p, len)) {
        return restore_plain(s, p, len, err);
    }
    if (snapshot_inflate(p, len, &raw, &raw_len, err) != 0) {
        return err->code;
    }
    rc = restore_plain(s, raw, raw_len, err);
    free(raw);
    return rc;
}
