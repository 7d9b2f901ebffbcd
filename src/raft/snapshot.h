/* Raft snapshots of the store off the loop thread (libraft fsm version 3):
 * snapshot_begin() pins the state on the loop thread in microseconds,
 * snapshot_raft_async() serialises it on a libraft worker, and
 * snapshot_raft_finalize() releases it back on the loop thread.
 *   (1) A snapshot holds the store exactly as of snapshot_begin(): entries
 *       applied while the worker runs are not in it (store_snapshot.h (1)),
 *       and its header carries the index of that state.
 *   (2) Between begin and finalize the loop thread holds the store's
 *       swap_lock shared; libraft installs no snapshot while one is taken
 *       (recvInstallSnapshot answers busy), so no restore waits on it. */
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
    uint64_t begun;          /* snapshot_begin() succeeded */
    uint64_t taken;          /* finalized after a successful dump */
    uint64_t failed;         /* begin or dump failed */
    uint64_t overlapped;     /* the store applied entries during the dump */
    uint64_t last_index;     /* of the last snapshot taken */
    uint64_t last_bytes;     /* the LZ4 frame handed to libraft */
    uint64_t last_raw_bytes; /* the dump in it */
    uint64_t busy_us;        /* wall time from begin to finalize, summed */
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

/* All three at once on the calling thread: b gets malloc'd bytes (free with
 * free or raft_free). 0 or ERR_*. */
int snapshot_take(struct store *s, struct raft_buffer *b, struct err *err);
/* True when p starts with the LZ4 frame magic (how snapshots are stored). */
bool snapshot_is_lz4(const void *p, size_t len);
/* An LZ4 frame inflated into *out (malloc'd, the caller frees it); its
 * header must give a content size that LZ4 could expand len bytes to.
 * 0, ERR_CORRUPT (a bad or cut frame, or no size) or ERR_IO (memory). */
int snapshot_inflate(const void *p, size_t len, uint8_t **out, size_t *out_len,
                     struct err *err);
/* Restore either format ("QSNAP002" of store_snapshot.h, or the legacy
 * "QSNAP001" + compact LMDB copy); does nothing when the store applied the
 * snapshot's index already. Borrows p. 0, ERR_CORRUPT (store unchanged) or
 * ERR_IO. */
int snapshot_restore(struct store *s, const void *p, size_t len,
                     struct err *err);

#endif
