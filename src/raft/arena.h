/* The entry arena: memory for the raft entries this process proposes.
 *
 * libraft keeps every entry since its last snapshot in memory, so the buffer
 * of each proposal is memory the process has never touched, and on this VM
 * the first touch of a 4 KiB page costs ~3 µs: ~640 µs for a 200 KB entry
 * of 800 pushed records, more CPU than everything else the entry costs but
 * the LMDB apply. The arena cuts pages from 16 MiB chunks that ask the kernel
 * for transparent huge pages (one fault per 2 MiB instead of 512), keeps
 * emptied chunks (already faulted in) for reuse once a snapshot frees the
 * entries, and can fault the next chunk in ahead, on a thread of its own
 * (the kernel's zeroing of fresh pages then leaves the loop thread).
 *
 * It is installed as libraft's heap (raft_heap_set): every other libraft
 * allocation still goes to libc; raft_free and raft_realloc recognise arena
 * blocks by address, so a block is freed with raft_free like any other.
 *   (1) A chunk is unmapped or reused only when every block cut from it was
 *       freed and it is not the chunk being cut.
 *   (2) Thread-safe (one mutex): libraft may free from its thread pool.
 *   (3) At most 28 emptied chunks (448 MiB) are kept, or what
 *       arena_set_spares() says; the prefaulter adds one only when none is
 *       left (so a process that proposes holds one 16 MiB chunk ahead). */
#ifndef QUEEN_RAFT_ARENA_H
#define QUEEN_RAFT_ARENA_H

#include <stdbool.h>
#include <stddef.h>

/* Install the arena as libraft's heap, once per process (later calls do
 * nothing). Safe before or after libraft allocated: a block the arena did
 * not cut is passed to libc. */
void arena_install(void);

/* Keep at most bytes of emptied chunks (at least one chunk) for reuse,
 * unmapping what is above it now: the log kept between snapshots
 * (QUEEN_RAFT_LOG_MEMORY_MB). */
void arena_set_spares(size_t bytes);

/* A block of n bytes (16-byte aligned) to hand to raft_apply; free with
 * raft_free. Blocks over 4 MiB (a quarter chunk) come from libc. Returns NULL
 * when memory is exhausted. */
void *arena_alloc(size_t n);

/* Start (the first time) or resume the prefaulter thread when on; pause it
 * when off (tests that count chunks). */
void arena_prefault(bool on);

struct arena_stats {
    size_t mapped; /* bytes of chunks mapped: cut, spare or being cut */
    int spares;    /* emptied or prefaulted chunks waiting */
};

void arena_get_stats(struct arena_stats *out);

#endif
