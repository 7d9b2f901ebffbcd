/* Raft snapshots of the store off the loop thread (libraft fsm version 3):
 * snapshot_begin() pins the state on the loop thread in microseconds,
 * snapshot_raft_async() serialises it on a libraft worker, and
 * snapshot_raft_finalize() releases it back on the loop thread.
 *
 * Why: fsm version 1 copied the whole LMDB environment (mdb_env_copyfd2 +
 * fsync + read back) on the loop thread, and nothing was applied for the
 * 6-28 s that took on a store of a few hundred MB. libraft 0.15 keeps
 * applying entries while `snapshot_async` runs (replicationApply does not
 * wait for the pending snapshot), so the snapshot must be the state as of
 * the `snapshot` call: an LMDB read transaction gives that for free.
 *
 * Memory: with version >= 2 libraft owns none of the buffers. `snapshot`
 * returns one raft_buffer embedded in a struct snap (found again with
 * container_of in the later two calls), its bytes malloc'd by the dump;
 * finalize frees both, whatever happened in between.
 *
 * Compression: the dump streams the store (store_snap_stream) into an LZ4
 * frame here, on the dump's low-priority thread, and libraft's own
 * compression is off (node.c). The frame is the one libraft would have
 * written (content size in its header, which libraft's loader needs), so
 * every build loads it, and libraft hands the fsm the bytes inflated. So
 * the uncompressed dump is never held whole: memory is the frame alone,
 * where libraft's compression held both, and the CPU it costs is spent at
 * the dump's priority, not the worker's. snapshot_restore() also inflates
 * a frame itself, for a caller that hands it one directly.
 *
 * Durability (docs/internals/store-raft.md): the store runs MDB_NOSYNC, so
 * at the snapshot's index N it may not be on disk. That is safe: libraft
 * fsyncs the snapshot before it drops log entries, and on restart restores
 * it into any store that applied less than N. The dump does not sync the
 * store itself (the node's 100 ms sync does): while a snapshot is pending
 * libraft ignores an InstallSnapshot from the leader, which then waits for
 * its install_snapshot_timeout, so the dump stays as short as it can. */
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

struct snap {
    struct raft_buffer buf; /* handed to libraft */
    struct store *store;
    struct store_snap *sn;
    uint64_t begun_us; /* CLOCK_MONOTONIC at begin */
    int dump_rc;
    uint8_t *dump_p; /* what the dump wrote, before libraft gets it */
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
}

static uint64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int snapshot_begin(struct store *s, struct raft_buffer *bufs[],
                   unsigned *n_bufs)
{
    struct snap *sp = xcalloc(1, sizeof(*sp));
    struct err err = {0};

    sp->store = s;
    if (store_snap_begin(s, &sp->sn, &err) != 0) {
        log_error("snapshot", "%s", err.msg);
        atomic_fetch_add(&stat_failed, 1);
        free(sp);
        return RAFT_IOERR;
    }
    sp->dump_rc = -1; /* not run yet */
    sp->begun_us = mono_us();
    atomic_fetch_add(&stat_begun, 1);
    atomic_fetch_add(&open_count, 1);
    *bufs = &sp->buf;
    *n_bufs = 1;
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

/* The dump runs on a thread of its own at a lower priority, which the
 * libraft worker waits for: the worker keeps its own priority for the work
 * that follows, and when the dump and the loop both want a core the loop
 * (which applies and answers) gets most of it. */
int snapshot_raft_async(struct raft_fsm *rf, struct raft_buffer *bufs[],
                        unsigned *n_bufs)
{
    struct snap *sp = container_of(*bufs, struct snap, buf);
    pthread_t t;

    (void)rf;
    ASSERT(*n_bufs == 1);
    if (pthread_create(&t, NULL, dump_main, sp) == 0) {
        pthread_join(t, NULL);
    } else {
        sp->dump_rc = dump_lz4(sp);
    }
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
    store_snap_end(sp->sn);
    atomic_fetch_add(&stat_busy_us, mono_us() - sp->begun_us);
    if (sp->dump_rc == 0) {
        atomic_fetch_add(&stat_taken, 1);
        atomic_fetch_add(&stat_overlapped, applied > index ? 1 : 0);
        atomic_store(&stat_last_index, index);
        atomic_store(&stat_last_bytes, sp->buf.len);
        atomic_store(&stat_last_raw_bytes, sp->raw_len);
        log_info("snapshot",
                 "snapshot at %" PRIu64 ": %zu B (LZ4 of %zu B), %" PRIu64
                 " entries applied meanwhile",
                 index, sp->buf.len, sp->raw_len, applied - index);
    } else {
        atomic_fetch_add(&stat_failed, 1);
    }
    free(sp->buf.base);
    free(sp);
    *bufs = NULL;
    *n_bufs = 0;
    atomic_fetch_sub(&open_count, 1);
    return 0;
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
