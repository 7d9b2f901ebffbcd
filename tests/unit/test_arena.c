/* Tests of the entry arena (raft/arena.h): blocks handed to libraft are
 * freed through raft_free/raft_realloc like libc blocks, emptied chunks are
 * kept (28, or what arena_set_spares() says) or unmapped, the prefaulter
 * readies the next chunk, and libc blocks pass through untouched. */
#include "raft/arena.h"

#include <raft.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define MIB    ((size_t)1 << 20)
#define CHUNK  (16 * MIB + 2 * MIB) /* mapped per chunk */
#define SPARES 28                   /* emptied chunks kept */
#define BLOCK  (3 * MIB)            /* five a chunk, under a quarter chunk */
#define PER    5

TEST(blocks_are_aligned_writable_and_freed_by_raft_free)
{
    char *a;
    char *b;

    arena_install();
    a = arena_alloc(13);
    b = arena_alloc(200 * 1024);
    EXPECT(a != NULL && b != NULL);
    EXPECT_EQ_U64((uintptr_t)a % 16, 0);
    EXPECT_EQ_U64((uintptr_t)b % 16, 0);
    EXPECT(b >= a + 13); /* cut one after the other, no overlap */
    memset(a, 'a', 13);
    memset(b, 'b', 200 * 1024);
    EXPECT_EQ_U64((unsigned char)a[12], 'a');
    raft_free(a);
    raft_free(b);
    EXPECT(arena_alloc(0) == NULL);
}

TEST(realloc_of_a_block_keeps_its_bytes)
{
    char *a;
    char *b;

    arena_install();
    a = arena_alloc(100);
    for (int i = 0; i < 100; i++) {
        a[i] = (char)i;
    }
    b = raft_realloc(a, 5000); /* now a libc block */
    EXPECT(b != NULL);
    for (int i = 0; i < 100; i++) {
        EXPECT_EQ_U64((unsigned char)b[i], (unsigned)i);
    }
    b = raft_realloc(b, 10); /* libc to libc */
    EXPECT_EQ_U64((unsigned char)b[9], 9);
    raft_free(b);
}

TEST(libc_blocks_and_huge_blocks_pass_through)
{
    void *p;
    void *q;

    arena_install();
    p = raft_malloc(64);
    q = arena_alloc(5 * MIB); /* over a quarter chunk: libc */
    EXPECT(p != NULL && q != NULL);
    memset(q, 1, 5 * MIB);
    raft_free(p);
    raft_free(q);
    p = raft_aligned_alloc(4096, 8192);
    EXPECT_EQ_U64((uintptr_t)p % 4096, 0);
    raft_aligned_free(4096, p);
}

static size_t mapped(void)
{
    struct arena_stats st;

    arena_get_stats(&st);
    return st.mapped;
}

TEST(emptied_chunks_are_kept_28_deep_and_reused)
{
    enum { CHUNKS = SPARES + 3, N = CHUNKS * PER };
    void *b[N];
    size_t peak;
    size_t kept;
    struct arena_stats st;

    arena_install();
    arena_prefault(false);
    for (int i = 0; i < N; i++) { /* five blocks a chunk: 31 chunks */
        b[i] = arena_alloc(BLOCK);
        EXPECT(b[i] != NULL);
    }
    peak = mapped();
    EXPECT(peak >= CHUNKS * CHUNK);
    for (int i = 0; i < N; i++) { /* oldest first, as raft frees them */
        raft_free(b[i]);
    }
    /* The chunk being cut and 28 spares stay; the rest is unmapped. */
    arena_get_stats(&st);
    EXPECT_EQ_I64(st.spares, SPARES);
    kept = mapped();
    EXPECT(kept < peak);
    EXPECT(kept <= (SPARES + 1) * CHUNK + (peak - CHUNKS * CHUNK));
    for (int i = 0; i < SPARES * PER; i++) { /* the spares' worth */
        b[i] = arena_alloc(BLOCK);
    }
    EXPECT_EQ_U64(mapped(), kept);
    for (int i = 0; i < SPARES * PER; i++) {
        raft_free(b[i]);
    }
}

TEST(the_prefaulter_readies_a_spare_when_the_last_is_taken)
{
    enum { MAX = (SPARES + 2) * PER };
    struct arena_stats st;
    void *b[MAX];
    int n = 0;
    double end;

    arena_install();
    arena_prefault(false);
    arena_get_stats(&st);
    /* Take every spare, then one more chunk. */
    while (n < MAX && st.spares > 0) {
        b[n++] = arena_alloc(BLOCK);
        arena_get_stats(&st);
    }
    for (int k = 0; k < PER && n < MAX; k++) {
        b[n++] = arena_alloc(BLOCK);
    }
    arena_get_stats(&st);
    EXPECT_EQ_I64(st.spares, 0);
    arena_prefault(true);
    end = (double)time(NULL) + HARNESS_WAIT_S;
    while (st.spares == 0 && (double)time(NULL) < end) {
        usleep(1000);
        arena_get_stats(&st);
    }
    EXPECT_EQ_I64(st.spares, 1);
    arena_prefault(false);
    for (int i = 0; i < n; i++) {
        raft_free(b[i]);
    }
}

/* QUEEN_RAFT_LOG_MEMORY_MB sets how much is kept: a lower bound unmaps the
 * spares above it at once, and emptied chunks past it are unmapped. */
TEST(the_spares_kept_follow_the_log_memory_setting)
{
    enum { KEEP = 3, N = (KEEP + 4) * PER };
    void *b[N];
    struct arena_stats st;

    arena_install();
    arena_prefault(false);
    for (int i = 0; i < N; i++) {
        b[i] = arena_alloc(BLOCK);
        EXPECT(b[i] != NULL);
    }
    for (int i = 0; i < N; i++) {
        raft_free(b[i]);
    }
    arena_get_stats(&st);
    EXPECT(st.spares > KEEP);
    arena_set_spares(KEEP * 16 * MIB);
    arena_get_stats(&st);
    EXPECT_EQ_I64(st.spares, KEEP);
    for (int i = 0; i < N; i++) {
        b[i] = arena_alloc(BLOCK);
    }
    for (int i = 0; i < N; i++) {
        raft_free(b[i]);
    }
    arena_get_stats(&st);
    EXPECT_EQ_I64(st.spares, KEEP);
    EXPECT(st.mapped <= (KEEP + 1) * CHUNK);
    arena_set_spares(0); /* at least one chunk */
    arena_get_stats(&st);
    EXPECT_EQ_I64(st.spares, 1);
    arena_set_spares((size_t)SPARES * 16 * MIB); /* the default back */
}
