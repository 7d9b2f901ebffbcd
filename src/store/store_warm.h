/* The store's next pages, put in the page cache ahead of its writer.
 *
 * Every commit writes its new pages past the end of data.mdb (LMDB writes
 * them from its own buffers with pwritev), so the page cache takes a page
 * the file never had for each one. On this project's VMs (a Firecracker
 * guest with free page reporting, page_reporting_order=11) memory the
 * kernel had freed was handed back to the host, and the first write into
 * such a page makes the host back it again. Under bench/push on events the
 * loop thread's copy into the page cache took 3% of its time for the first
 * ~13 s of a round and 40% after, and the push rate fell from ~210k to
 * ~140k records/s; a plain program writing a file at 250 MB/s paid 300
 * us of CPU per MB for 5 s and 1,900 after (docs/internals/store-raft.md).
 *
 * A thread of this module keeps at least STORE_WARM_AHEAD past the
 * last committed page allocated (fallocate: it only ever extends, so it
 * cannot race the writer's own growth) and read once (pread of the
 * unwritten range: zeros, no disk read), so the page cache holds those
 * pages, backed, before LMDB writes them. The same program then paid
 * 220-300 us/MB for the whole run, the warmer the rest on its own thread.
 *   (1) LMDB reads only up to its last page (its meta page says where),
 *       so a longer file changes nothing it reads; a store opens with any
 *       length at or above that (store.c check_length).
 *   (2) It allocates only while the file system has keep_free bytes free
 *       (the broker keeps STORE_WARM_FREE and four raft segments), so the
 *       warmer never takes the space the raft log and the commits need
 *       next: it is off on a nearly full disk, and may leave free space
 *       one step (4 MiB) below keep_free at most. A failed fallocate (a
 *       full disk, a quota) pauses it for about a second; a file system
 *       without fallocate stops it for good.
 *   (3) It holds swap_lock shared for each step (the fallocate, each 1 MiB
 *       read), so a snapshot restore waits one step at most, and starts
 *       over when the environment was swapped (store->env_gen moved).
 *   (4) It warms 4 MiB a round while less than STORE_WARM_AHEAD is ready
 *       (a round every 10 ms: up to 400 MiB/s, above any commit rate
 *       measured here), at nice 10 above the broker's. Warmed
 *       64 MiB at a time, its bursts of a core took the broker's other
 *       threads' and wrk's share on a 2-core machine, and the closed
 *       loop's p99 rose from ~16 to ~22 ms; in steps at nice 10 it was
 *       ~18 ms and the open loop kept its gain (store-raft.md). A round
 *       that found nothing to allocate or map makes the next wait twice
 *       as long, up to 80 ms (about 12 wake-ups a second on an idle
 *       node, not 100); the first round with work goes back to 10 ms, so
 *       a burst after a quiet spell meets at most 80 ms of the 32 MiB
 *       ahead used before the warmer runs again. A pause (2) keeps 10 ms
 *       rounds, so it lasts about a second. The map is looked for again
 *       every 100 rounds (5): about a second while busy, up to 8 idle.
 *   (5) It also maps the store's pages into the process before its readers
 *       meet them: one byte read through LMDB's map per page, first of
 *       the pages up to the store's end at its first round in this
 *       environment (16 MiB a round, ~5 ms of a core at ~1.3 us a page),
 *       then of each range it warms past the end. On a VM whose
 *       hypervisor shadows page tables a thread's first touch of a page
 *       of a file mapping costs ~1.3 us, and ~25 ns once another thread of
 *       the process touched it; the sink's catch-up read (bench/sink,
 *       events) went from ~0.9 to ~0.3 us a record. Only pages the page
 *       cache holds are touched (mincore), so it does not read a cold
 *       store from disk (but for a page evicted between the two); LMDB's
 *       own reads and writes are unchanged. It runs with the rounds: a
 *       pause after a failure delays it, and a file system without
 *       fallocate stops it with the rest. The map is found once per
 *       environment (store_map_addr), and looked for again every 100
 *       rounds while it is not (4). The process's RSS counts the cached
 *       store it mapped. */
#ifndef QUEEN_STORE_STORE_WARM_H
#define QUEEN_STORE_STORE_WARM_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

#define STORE_WARM_AHEAD ((uint64_t)32 << 20)
#define STORE_WARM_FREE  ((uint64_t)1 << 30)

/* Where s's environment maps data.mdb, and *len its length (LMDB does
 * not say unless the map is fixed): the shared mapping from offset 0 in
 * /proc/self/maps that holds a key LMDB returned; NULL (*len 0) when none
 * is found. Under swap_lock or on the loop thread. */
void *store_map_addr(struct store *s, uint64_t *len);

/* Starts the warmer of s (at most one), warming while keep_free bytes are
 * free (2); false when the thread could not be started. The owner stops it
 * before store_close (which also does). */
bool store_warm_start(struct store *s, uint64_t keep_free);

/* Stops and joins the warmer of s, if one runs. */
void store_warm_stop(struct store *s);

/* Bytes past the last committed page the warmer has made ready, for
 * tests: 0 before its first round. */
uint64_t store_warm_ready(struct store *s);

/* Rounds the warmer has gone through (done or skipped), for tests. */
uint64_t store_warm_rounds(struct store *s);

#endif
