/* Raft snapshots of a persistent store (libraft fsm version 3): the fsm's
 * snapshot is a "marker" that names the applied index the store holds on
 * disk; the full state, an LZ4 frame of store/store_snapshot.h, is dumped
 * only when a leader must send it to a follower (InstallSnapshot).
 * snapshot_begin() reads the index on the loop thread in microseconds,
 * snapshot_raft_async() makes the store durable past it on a libraft worker
 * and writes the marker, and snapshot_raft_finalize() releases it back on
 * the loop thread.
 *
 * Byte layout of a marker (integers big-endian):
 * OFFSET SIZE DESCRIPTION
 *      0    8 magic "QMARK001"
 *      8    8 applied index, read in the snapshot's read transaction (u64)
 *     16    4 CRC-32 (zlib) of bytes 0..15 (u32)
 *
 *   (1) A marker at index N is handed to libraft (which then drops its log
 *       up to N) only after the store was synced with N applied: the store
 *       on disk is at or past every marker libraft holds.
 *   (2) A full dump holds the store exactly as of snapshot_dump_begin()
 *       (store_snapshot.h (1)), and its header carries the index of that
 *       state.
 *   (3) Between a begin and its end the loop thread holds the store's
 *       swap_lock shared; libraft installs no snapshot while one is taken
 *       (recvInstallSnapshot answers busy), and a leader installs none, so
 *       no restore waits on it.
 *   (4) A marker restores into a store at or past its index (nothing to
 *       do); into a store behind it, it fails: the state between is gone. */
#ifndef QUEEN_RAFT_SNAPSHOT_H
#define QUEEN_RAFT_SNAPSHOT_H

#include <raft.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "store/store.h"

/* Process-wide counters, for tests and metrics. */
struct snapshot_stats {
    uint64_t begun;           /* snapshot_begin() succeeded */
    uint64_t taken;           /* finalized after a successful marker */
    uint64_t failed;          /* begin, sync or a dump failed */
    uint64_t overlapped;      /* the store applied entries while it synced */
    uint64_t last_index;      /* of the last snapshot taken */
    uint64_t last_bytes;      /* what was handed to libraft: the marker */
    uint64_t last_raw_bytes;  /* the last full dump, before LZ4 */
    uint64_t busy_us;         /* wall time from begin to finalize, summed */
    uint64_t dumps_begun;     /* snapshot_dump_begin() succeeded */
    uint64_t dumps;           /* full dumps made for InstallSnapshot */
    uint64_t dump_last_bytes; /* the last one's LZ4 frame */
    uint64_t dump_busy_us;    /* wall time of full dumps, summed */
};
void snapshot_stats_get(struct snapshot_stats *out);
/* How many snapshots are begun and not finalized yet, process-wide: a node
 * that closes waits for them, since their worker still reads the store. */
unsigned snapshot_open_count(void);

/* The fsm's `snapshot` (loop thread): one buffer whose bytes the async part
 * fills. 0 or RAFT_IOERR. */
int snapshot_begin(struct store *s, struct raft_buffer *bufs[],
                   unsigned *n_bufs);
/* The fsm's `snapshot_async` (a worker) and `snapshot_finalize` (loop). */
int snapshot_raft_async(struct raft_fsm *rf, struct raft_buffer *bufs[],
                        unsigned *n_bufs);
int snapshot_raft_finalize(struct raft_fsm *rf, struct raft_buffer *bufs[],
                           unsigned *n_bufs);

/* A marker of the store as it is, on the calling thread (sync included):
 * b gets malloc'd bytes (free with free or raft_free). 0 or ERR_IO. */
int snapshot_marker_take(struct store *s, struct raft_buffer *b,
                         struct err *err);
/* A full dump of the store as it is ("QSNAP002", not LZ4), on the calling
 * thread: b gets malloc'd bytes (free with free or raft_free). 0 or ERR_*. */
int snapshot_take(struct store *s, struct raft_buffer *b, struct err *err);
/* True when p starts with the marker's magic (it may still be damaged). */
bool snapshot_is_marker(const void *p, size_t len);
/* A marker's index, length and checksum checked. 0 or ERR_CORRUPT. */
int snapshot_marker_index(const void *p, size_t len, uint64_t *index,
                          struct err *err);

/* A full dump for a follower (node.c, InstallSnapshot), in three steps:
 * begin on the loop thread (store_snap_begin: swap_lock shared, counted in
 * snapshot_open_count()), run on any one thread (blocks while the dump's
 * own low-priority thread streams the store into an LZ4 frame), end on the
 * loop thread. Returns owned; free with snapshot_dump_end. */
struct snap;
int snapshot_dump_begin(struct store *s, struct snap **out, struct err *err);
/* The applied index the dump holds (read in its transaction). */
uint64_t snapshot_dump_index(const struct snap *sp);
void snapshot_dump_run(struct snap *sp);
/* Tests only: while held, a dump's run waits before it streams, so a test
 * can act while a dump is open without racing its end. */
void snapshot_dump_hold(bool hold);
/* Loop thread: release the store and free sp. On success *p gets the LZ4
 * frame (malloc'd: free with free, or hand it to libraft, whose raft_free
 * passes a block it did not cut to libc, raft/arena.h) and *len its size.
 * 0 or the run's ERR_*. */
int snapshot_dump_end(struct snap *sp, uint8_t **p, size_t *len,
                      struct err *err);

/* True when p starts with the LZ4 frame magic (how snapshots are stored). */
bool snapshot_is_lz4(const void *p, size_t len);
/* An LZ4 frame inflated into *out (malloc'd, the caller frees it); its
 * header must give a content size that LZ4 could expand len bytes to.
 * 0, ERR_CORRUPT (a bad or cut frame, or no size) or ERR_IO (memory). */
int snapshot_inflate(const void *p, size_t len, uint8_t **out, size_t *out_len,
                     struct err *err);
/* Restore any format: a marker (4), "QSNAP002" of store_snapshot.h, or
 * the legacy "QSNAP001" + compact LMDB copy, each plain or in an LZ4 frame;
 * a full one does nothing when the store applied the snapshot's index
 * already. Borrows p. 0, ERR_CORRUPT (a damaged buffer: store unchanged),
 * ERR_PRECONDITION (a marker past the store: store unchanged, err names the
 * store dir, both indexes and what to do) or ERR_IO. */
int snapshot_restore(struct store *s, const void *p, size_t len,
                     struct err *err);

#endif
