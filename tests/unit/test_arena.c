/* Tests of the entry arena (raft/arena.h): blocks handed to libraft are
 * freed through raft_free/raft_realloc like libc blocks, emptied chunks are
 * kept (two) or unmapped, and libc blocks pass through untouched. */
#include "raft/arena.h"

#include <raft.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"

#define MIB   ((size_t)1 << 20)
#define CHUNK (64 * MIB + 2 * MIB) /* mapped per chunk */

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
    q = arena_alloc(20 * MIB); /* over a quarter chunk: libc */
    EXPECT(p != NULL && q != NULL);
    memset(q, 1, 20 * MIB);
    raft_free(p);
    raft_free(q);
    p = raft_aligned_alloc(4096, 8192);
    EXPECT_EQ_U64((uintptr_t)p % 4096, 0);
    raft_aligned_free(4096, p);
}

TEST(emptied_chunks_are_kept_two_deep_and_reused)
{
    enum { N = 60 };
    void *b[N];
    size_t base;
    size_t peak;

    arena_install();
    base = arena_mapped_bytes();
    for (int i = 0; i < N; i++) { /* 60 x 4 MiB: about four chunks */
        b[i] = arena_alloc(4 * MIB);
        EXPECT(b[i] != NULL);
    }
    peak = arena_mapped_bytes();
    EXPECT(peak >= base + 3 * CHUNK);
    for (int i = 0; i < N; i++) { /* oldest first, as raft frees them */
        raft_free(b[i]);
    }
    /* The chunk being cut, and two spares; the rest unmapped. */
    EXPECT(arena_mapped_bytes() < peak);
    EXPECT(arena_mapped_bytes() <= base + 3 * CHUNK);
    for (int i = 0; i < 30; i++) { /* two chunks' worth: reuses spares */
        b[i] = arena_alloc(4 * MIB);
    }
    EXPECT(arena_mapped_bytes() <= base + 3 * CHUNK);
    for (int i = 0; i < 30; i++) {
        raft_free(b[i]);
    }
}
