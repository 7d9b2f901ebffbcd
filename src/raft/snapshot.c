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
 * Durability (docs/internals/store-raft.md): the store runs MDB_NOSYNC, so
 * at the snapshot's index N it may not be on disk. That is safe: libraft
 * fsyncs the snapshot before it drops log entries, and on restart restores
 * it into any store that applied less than N. The dump does not sync the
 * store itself (the node's 100 ms sync does): while a snapshot is pending
 * libraft ignores an InstallSnapshot from the leader, which then waits for
 * its install_snapshot_timeout, so the dump stays as short as it can. */
#include "raft/snapshot.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
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
    struct err dump_err;
};

/* The dump's nice value (the loop thread's is 0): weight ~1/3 of the
 * loop's when both run on one core. */
#define SNAP_DUMP_NICE 5

static _Atomic uint64_t stat_begun;
static _Atomic uint64_t stat_taken;
static _Atomic uint64_t stat_failed;
static _Atomic uint64_t stat_overlapped;
static _Atomic uint64_t stat_last_index;
static _Atomic uint64_t stat_last_bytes;
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

static void *dump_main(void *arg)
{
    struct snap *sp = arg;

    /* Raising a thread's own nice value needs no privilege. */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), SNAP_DUMP_NICE);
    sp->dump_rc = store_snap_dump(sp->sn, realloc, &sp->dump_p, &sp->dump_len,
                                  &sp->dump_err);
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
        sp->dump_rc = store_snap_dump(sp->sn, realloc, &sp->dump_p,
                                      &sp->dump_len, &sp->dump_err);
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
        log_info("snapshot",
                 "snapshot at %" PRIu64 ": %zu B, %" PRIu64
                 " entries applied meanwhile",
                 index, sp->buf.len, applied - index);
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

int snapshot_restore(struct store *s, const void *p, size_t len,
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
