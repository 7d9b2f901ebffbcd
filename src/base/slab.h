/* Slabs: many small byte strings (records) copied front to back into big
 * blocks, each block freed when the last string in it leaves. One copy
 * into a warm slab costs far less than a malloc per string, and fresh pages
 * are what a fetch-heavy reader pays most for (first touches fault).
 *
 * A pool fills one slab at a time (`cur`). A string over a quarter of
 * SLAB_SIZE gets a slab of its own (malloc'd, never kept). A SLAB_SIZE slab
 * is mapped aligned to its size and asks for a huge page, so filling it
 * faults once per 2 MiB, not per 4 KiB; unmapping gives it back to the
 * system at once (malloc would keep it in an arena). A slab that empties
 * goes to a short free list of spares, kept up to max_spare; slab_trim()
 * sets that bound from what the last round took.
 *
 * The pool does the counting only: the caller copies the bytes to
 * s->data + s->used and adds to used, live and live_bytes (slab_put()), and
 * calls slab_unref() for each string that leaves.
 *
 * (A) Slabs made ahead. Fresh memory costs most at its first touch (on a
 * VM whose host took freed memory back, ~3 ms per 2 MiB: bench/touch), so,
 * once the process allows it (slab_ahead_allow), a process-wide thread
 * ("queen-slabs", started by the first SLAB_SIZE slab any pool asks for)
 * keeps up to SLAB_AHEAD slabs mapped and faulted in, and a pool with no
 * spare takes one of those before mapping its own. It makes the next one at
 * once. While any pool is tight (slab_trim, slab_set_tight), it holds none
 * and makes none: the memory a budget sees is all there is. A failed mmap,
 * or a populate the kernel refused (a memory limit: base/populate.h),
 * pauses it until a pool takes again.
 *
 * (B) Spares counted together. Pools that share a struct slab_spares (the
 * sink's queues on one node) keep a slab as a spare only while all of them
 * together keep fewer than its limit: each pool's own bound (max_spare,
 * min_spare) is per queue, and a node of many queues would otherwise keep
 * that many times the memory warm. A pool with none counts only its own.
 *
 * Ownership: the pool owns every slab it handed out and its spares;
 * slab_pool_free() frees them all (strings still pointing in included). A
 * pool is not thread-safe: one owner; the slabs made ahead are shared
 * under a mutex. */
#ifndef QUEEN_BASE_SLAB_H
#define QUEEN_BASE_SLAB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLAB_SIZE  ((size_t)2 * 1024 * 1024) /* one huge page */
#define SLAB_AHEAD 8 /* slabs made ahead, process-wide (A): 16 MiB */

/* Bytes of many strings; freed when the last of them leaves. */
struct slab {
    struct slab *next; /* in the free list */
    size_t used;
    size_t cap;
    size_t live;       /* strings pointing into data */
    size_t live_bytes; /* their bytes: used - live_bytes are holes */
    char *data;
    bool is_mapped; /* data is mmap'd, else malloc's */
};

/* Spares of several pools counted together (B). Thread-safe. */
struct slab_spares {
    _Atomic size_t n; /* spares the pools keep now */
    size_t limit;     /* at most */
};

struct slab_pool {
    struct slab_spares *shared; /* (B), or NULL; set after slab_pool_init */
    struct slab *cur;           /* being filled; NULL before the first string */
    struct slab *spare;         /* empty slabs, SLAB_SIZE each */
    size_t n_spare;
    size_t min_spare; /* max_spare never goes below this */
    size_t max_spare; /* slabs the last round took, >= min_spare */
    size_t taken;     /* slabs taken since the last slab_trim() */
    bool is_tight;    /* keep no spares until the next slab_trim() */
    uint64_t bytes;   /* of every slab held: filling, full, spare */
};

/* No spares counted yet, at most limit of them (B). */
void slab_spares_init(struct slab_spares *s, size_t limit);

/* An empty pool that keeps at least min_spare spares (unless a shared
 * count (B) is at its limit). */
void slab_pool_init(struct slab_pool *p, size_t min_spare);
/* Free every slab. The pool is then empty and may be reused. */
void slab_pool_free(struct slab_pool *p);

/* A slab with room for n bytes at data + used: the current slab's tail, a
 * spare, a new SLAB_SIZE slab, or (n > SLAB_SIZE / 4) one of its own. The
 * caller then calls slab_put(). */
struct slab *slab_for(struct slab_pool *p, size_t n);
/* Copy n bytes (a, then b) to the end of s (from slab_for(p, na + nb));
 * returns where they start. Either part may be empty. */
char *slab_put(struct slab *s, const void *a, size_t na, const void *b,
               size_t nb);
/* A string of n bytes in s left: s goes (to the spares or freed) when it
 * was the last one, unless it is the slab being filled. */
void slab_unref(struct slab_pool *p, struct slab *s, size_t n);
/* Keep at most keep spares (free the rest). */
void slab_spares_free(struct slab_pool *p, size_t keep);
/* The end of a round: keep as many spares as the round took, at most cap
 * and at least min_spare, or none when is_tight (which stays set until the
 * next trim); start counting the next round. */
void slab_trim(struct slab_pool *p, size_t cap, bool is_tight);
/* Set p->is_tight (keep no spares) now, not at the next trim: a pool's
 * is_tight changes only here, in slab_trim and in slab_pool_free, which
 * count the tight pools for the slabs made ahead (A). */
void slab_set_tight(struct slab_pool *p, bool is_tight);
/* Whether the strings in s should move out (slab_for() elsewhere, copy,
 * slab_unref()): a full SLAB_SIZE slab, not the one being filled, at least
 * an eighth holes. */
bool slab_is_holey(const struct slab_pool *p, const struct slab *s);
/* Allow slabs made ahead (A), or not (the default: the list is freed). */
void slab_ahead_allow(bool on);
/* How many slabs made ahead are ready now (A), and (when taken is not NULL)
 * how many pools took since the process started; for tests. */
size_t slab_ahead_ready(uint64_t *taken);

#endif
