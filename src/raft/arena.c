/* The entry arena: memory for the raft entries this process proposes.
 *
 * A chunk is cut front to back; each block is preceded by a 16-byte header
 * holding its size (raft_realloc needs it):
 * OFFSET SIZE DESCRIPTION
 *      0    8 block size n (u64, host order)
 *      8    8 unused (keeps the block 16-byte aligned)
 *     16    n the block
 * A chunk counts its live blocks; the last free of a chunk that is no longer
 * being cut makes it a spare (up to ARENA_SPARES, faulted in already) or
 * unmaps it (1). The chunk list is short (the log between two snapshots, in
 * 16 MiB chunks: about 30), so a free finds its chunk by a linear scan. */
#include "raft/arena.h"

#include <pthread.h>
#include <raft.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/populate.h"
#include "base/thread.h"

/* 16 MiB: what a process holds ahead of its log is one chunk (the one the
 * prefaulter readied), and RSS moves in steps of a chunk; 64 MiB made the
 * same traffic differ by 64 MiB between two runs. Eight huge pages a chunk
 * still fault in ~1 ms on the prefaulter. */
#define ARENA_CHUNK ((size_t)16 << 20)
#define ARENA_HUGE  POPULATE_HUGE
#define ARENA_HDR   16
#define ARENA_BIG   (ARENA_CHUNK / 4)
/* Spares kept by default: about the log libraft holds between two
 * snapshots (node.c's SNAP_LOG_BYTES, 448 MiB), so after the first snapshot
 * nothing faults; arena_set_spares() follows QUEEN_RAFT_LOG_MEMORY_MB. */
#define ARENA_SPARES 28

struct chunk {
    struct chunk *next;
    char *map;  /* the mapping (ARENA_CHUNK + ARENA_HUGE bytes) */
    char *base; /* map rounded up to a huge page */
    size_t used;
    size_t live; /* blocks cut and not freed */
};

static pthread_mutex_t arena_mu = PTHREAD_MUTEX_INITIALIZER;
static struct chunk *arena_chunks; /* the first one is being cut */
static struct chunk *arena_spares;
static int arena_n_spares;
static int arena_max_spares = ARENA_SPARES;
static size_t arena_mapped;
static bool arena_is_installed;
static pthread_cond_t arena_cv = PTHREAD_COND_INITIALIZER;
static bool arena_is_prefaulting; /* the prefaulter may run */
static bool arena_has_thread;

static struct chunk *chunk_map(void)
{
    struct chunk *c = malloc(sizeof(*c));
    char *m;

    if (c == NULL) {
        return NULL;
    }
    m = mmap(NULL, ARENA_CHUNK + ARENA_HUGE, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        free(c);
        return NULL;
    }
    c->map = m;
    c->base = m + (ARENA_HUGE - (uintptr_t)m % ARENA_HUGE) % ARENA_HUGE;
    /* Advice only: without THP the arena still reuses spare chunks. */
    (void)madvise(c->base, ARENA_CHUNK, MADV_HUGEPAGE);
    return c;
}

/* A chunk with nothing live that is not being cut: keep or unmap (1). */
static void chunk_retire(struct chunk *c)
{
    if (arena_n_spares < arena_max_spares) {
        c->next = arena_spares;
        arena_spares = c;
        arena_n_spares++;
        return;
    }
    munmap(c->map, ARENA_CHUNK + ARENA_HUGE);
    arena_mapped -= ARENA_CHUNK + ARENA_HUGE;
    free(c);
}

/* Make a fresh chunk (a spare if any) the one being cut. Lock held. */
static bool chunk_next(void)
{
    struct chunk *c = arena_spares;
    struct chunk *old = arena_chunks;

    if (c != NULL) {
        arena_spares = c->next;
        arena_n_spares--;
    } else if ((c = chunk_map()) == NULL) {
        return false;
    } else {
        arena_mapped += ARENA_CHUNK + ARENA_HUGE;
    }
    if (arena_n_spares == 0) {
        pthread_cond_signal(&arena_cv); /* the prefaulter makes the next */
    }
    c->used = 0;
    c->live = 0;
    c->next = old;
    arena_chunks = c;
    if (old != NULL && old->live == 0) {
        c->next = old->next;
        chunk_retire(old);
    }
    return true;
}

void *arena_alloc(size_t n)
{
    size_t need = (n + ARENA_HDR + 15) & ~(size_t)15;
    struct chunk *c;
    char *p = NULL;

    if (n == 0 || n > ARENA_BIG) {
        return n == 0 ? NULL : malloc(n);
    }
    pthread_mutex_lock(&arena_mu);
    c = arena_chunks;
    if ((c == NULL || c->used + need > ARENA_CHUNK) && chunk_next()) {
        c = arena_chunks;
    }
    if (c != NULL && c->used + need <= ARENA_CHUNK) {
        p = c->base + c->used;
        memcpy(p, &(uint64_t){n}, sizeof(uint64_t));
        c->used += need;
        c->live++;
        p += ARENA_HDR;
    }
    pthread_mutex_unlock(&arena_mu);
    return p;
}

/* The chunk p was cut from, or NULL; *prev its predecessor. Lock held. */
static struct chunk *chunk_of(const void *p, struct chunk **prev)
{
    const char *q = p;

    *prev = NULL;
    for (struct chunk *c = arena_chunks; c != NULL; c = c->next) {
        if (q >= c->base && q < c->base + ARENA_CHUNK) {
            return c;
        }
        *prev = c;
    }
    return NULL;
}

/* Free p if the arena cut it: returns false for a libc block. */
static bool arena_free(void *p, size_t *size)
{
    struct chunk *prev;
    struct chunk *c;

    pthread_mutex_lock(&arena_mu);
    c = chunk_of(p, &prev);
    if (c != NULL) {
        uint64_t n;

        memcpy(&n, (char *)p - ARENA_HDR, sizeof(n));
        *size = (size_t)n;
        if (--c->live == 0 && c != arena_chunks) {
            prev->next = c->next; /* prev exists: c is not the first */
            chunk_retire(c);
        } else if (c->live == 0) {
            c->used = 0; /* the chunk being cut: start over */
        }
    }
    pthread_mutex_unlock(&arena_mu);
    return c != NULL;
}

static void *heap_malloc(void *data, size_t n)
{
    (void)data;
    return malloc(n);
}

static void heap_free(void *data, void *p)
{
    size_t n;

    (void)data;
    if (p != NULL && !arena_free(p, &n)) {
        free(p);
    }
}

static void *heap_calloc(void *data, size_t nmemb, size_t n)
{
    (void)data;
    return calloc(nmemb, n);
}

static void *heap_realloc(void *data, void *p, size_t n)
{
    struct chunk *prev;
    struct chunk *c;
    void *q;
    uint64_t old;

    (void)data;
    pthread_mutex_lock(&arena_mu);
    c = p != NULL ? chunk_of(p, &prev) : NULL;
    pthread_mutex_unlock(&arena_mu);
    if (c == NULL) {
        return realloc(p, n);
    }
    q = malloc(n);
    if (q == NULL) {
        return NULL; /* p stays valid, as realloc promises */
    }
    memcpy(&old, (char *)p - ARENA_HDR, sizeof(old));
    memcpy(q, p, (size_t)old < n ? (size_t)old : n);
    heap_free(NULL, p);
    return q;
}

static void *heap_aligned_alloc(void *data, size_t alignment, size_t n)
{
    (void)data;
    return aligned_alloc(alignment, (n + alignment - 1) & ~(alignment - 1));
}

static void heap_aligned_free(void *data, size_t alignment, void *p)
{
    (void)data;
    (void)alignment;
    free(p);
}

static struct raft_heap arena_heap = {
    NULL,         heap_malloc,        heap_free,        heap_calloc,
    heap_realloc, heap_aligned_alloc, heap_aligned_free};

void arena_set_spares(size_t bytes)
{
    size_t n = bytes / ARENA_CHUNK;

    pthread_mutex_lock(&arena_mu);
    arena_max_spares = n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
    while (arena_n_spares > arena_max_spares) {
        struct chunk *c = arena_spares;

        arena_spares = c->next;
        arena_n_spares--;
        munmap(c->map, ARENA_CHUNK + ARENA_HUGE);
        arena_mapped -= ARENA_CHUNK + ARENA_HUGE;
        free(c);
    }
    pthread_mutex_unlock(&arena_mu);
}

void arena_install(void)
{
    pthread_mutex_lock(&arena_mu);
    if (!arena_is_installed) {
        arena_is_installed = true;
        raft_heap_set(&arena_heap);
    }
    pthread_mutex_unlock(&arena_mu);
}

/* Fault c in, one huge page per call (base/populate.h): one call for the
 * whole chunk held the mmap lock for up to ~100 ms. A refusal leaves the
 * rest to fault at its use. */
static void chunk_populate(struct chunk *c)
{
    for (size_t off = 0; off < ARENA_CHUNK; off += ARENA_HUGE) {
        if (!populate_huge(c->base + off)) {
            return;
        }
    }
}

/* The prefaulter thread: whenever no spare is left (at start, and each time
 * the cutter took the last), map a chunk and fault all of it in (the kernel
 * zeroes its pages here, on this thread), then offer it as a spare. */
static void *prefault_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&arena_mu);
    for (;;) {
        struct chunk *c;

        while (!arena_is_prefaulting || arena_n_spares > 0) {
            pthread_cond_wait(&arena_cv, &arena_mu);
        }
        pthread_mutex_unlock(&arena_mu);
        c = chunk_map();
        if (c != NULL) {
            chunk_populate(c);
        }
        pthread_mutex_lock(&arena_mu);
        if (c == NULL) {
            arena_is_prefaulting = false; /* out of memory: stop trying */
            continue;
        }
        arena_mapped += ARENA_CHUNK + ARENA_HUGE;
        c->next = arena_spares;
        arena_spares = c;
        arena_n_spares++;
    }
    return NULL;
}

void arena_prefault(bool on)
{
    pthread_mutex_lock(&arena_mu);
    arena_is_prefaulting = on;
    if (on && !arena_has_thread) {
        arena_has_thread =
            thread_start_detached(prefault_main, "queen-prefault");
        arena_is_prefaulting = arena_has_thread;
    }
    pthread_cond_signal(&arena_cv);
    pthread_mutex_unlock(&arena_mu);
}

void arena_get_stats(struct arena_stats *out)
{
    pthread_mutex_lock(&arena_mu);
    out->mapped = arena_mapped;
    out->spares = arena_n_spares;
    pthread_mutex_unlock(&arena_mu);
}
