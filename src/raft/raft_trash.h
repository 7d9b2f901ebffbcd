/* libraft's big file removals, done a piece at a time off its threads.
 *
 * After a snapshot libraft removes every closed log segment the snapshot
 * covers (448 MiB of them at the default threshold), one unlink after
 * another on a pool thread. Freeing a 64 MiB file's blocks takes ~24 ms on
 * this VM's ext4 (mounted with discard) and holds up the journal: under
 * bench/push the raft log's O_DSYNC writes and the store's sync took 50-68
 * ms meanwhile, and the push p99 of every round with a snapshot was that.
 * The Makefile links libraft statically with UvOsUnlink weakened (as it
 * does byteCrc32), so this definition is the one libraft calls:
 *   (1) A closed segment ("<first>-<last>", a regular file) of
 *       RAFT_TRASH_MIN bytes or more, on a file system with RAFT_TRASH_FREE
 *       bytes free, is renamed in its directory to
 *       "queen-trash-<n>-<name>" (a rename frees nothing and takes ~0.1 ms)
 *       and UvOsUnlink returns 0: the name is gone when it returns, as
 *       after unlink. A thread of this module then cuts the file
 *       RAFT_TRASH_STEP bytes at a time, with a pause between cuts
 *       (raft_trash_period_ns), and unlinks it.
 *   (2) Anything else is unlinked in place, with unlink's result: 0 or a
 *       negative errno, as libraft's own returns. That is: an open segment
 *       (libraft removes the empty ones at boot and preallocates new ones
 *       at once: their blocks must be free by then), a snapshot or any
 *       small file, a nearly full disk (the space comes back at once), a
 *       failed stat or rename, a full queue, no thread.
 *   (3) libraft ignores names it does not know when it lists its directory
 *       (a trash name is neither a segment's nor a snapshot's), and
 *       raft_trash_sweep removes what a crash left, before libraft starts. */
#ifndef QUEEN_RAFT_TRASH_H
#define QUEEN_RAFT_TRASH_H

#include <stdint.h>

#define RAFT_TRASH_MIN (4u << 20)
/* The pace of the cuts. Cut 8 MiB every 2 ms, a snapshot's 448 MiB were
 * freed in ~0.4 s (each cut ~4 ms), and the disk's flushes (the journal
 * commits that discard what a cut freed) held every raft write and store
 * sync up meanwhile: with pushes at 200k records/s from a client at that
 * rate, the requests queued behind them and every snapshot made a p99 of
 * 60-140 ms. Cut 2 MiB at a time at RAFT_TRASH_RATE_MIB per second (the
 * cuts' own time included), faster than this disk takes the log, the
 * freeing is spread over the seconds between two snapshots: p99 8-18 ms
 * (bench/push's open loop). A trash more than RAFT_TRASH_BEHIND files
 * behind (a faster log, a slower disk) is cut faster in proportion, and a
 * full queue or a nearly full disk unlinks in place (2). */
#define RAFT_TRASH_STEP     (2u << 20)
#define RAFT_TRASH_RATE_MIB 256
#define RAFT_TRASH_BEHIND   8
#define RAFT_TRASH_FREE     ((uint64_t)1 << 30) /* free space to use the trash */
#define RAFT_TRASH_PREFIX   "queen-trash-"

/* The name libraft calls (its prototype is internal to libraft). */
int UvOsUnlink(const char *path);

/* The time from one cut's start to the next's while `waiting` more files
 * wait their turn. */
long raft_trash_period_ns(int waiting);

/* Unlinks every trash file left in dir (by a crash); returns how many. */
int raft_trash_sweep(const char *dir);

struct raft_trash_stats {
    uint64_t queued;   /* files renamed and handed to the thread */
    uint64_t removed;  /* of them, unlinked by the thread */
    uint64_t in_place; /* removals done in place */
    uint64_t pending;  /* files waiting or being cut: queued - removed */
};

void raft_trash_get_stats(struct raft_trash_stats *out);

#endif
