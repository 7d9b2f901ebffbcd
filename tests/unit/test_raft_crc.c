/* libraft's checksum as the broker links it: src/raft/raft_crc.c must give
 * the values libraft's own byteCrc32 gives, or every log segment written by
 * one build is refused by the other. */
#include "raft/raft_crc.h"

#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The definition, one bit at a time: MSB first over 0x04C11DB7, the
 * caller's init as the register, no final xor. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n, uint32_t crc)
{
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint32_t)p[i] << 24;
        for (int b = 0; b < 8; b++) {
            crc =
                (crc & 0x80000000u) != 0 ? (crc << 1) ^ 0x04C11DB7u : crc << 1;
        }
    }
    return crc;
}

/* Values printed by libraft 0.15's own byteCrc32 (libraft.a, unmodified);
 * with init 0xFFFFFFFF "123456789" gives CRC-32/MPEG-2's check value. */
TEST(raft_crc_matches_libraft_vectors)
{
    EXPECT_EQ_U64(raft_crc32("123456789", 9, 0), 0x89a1897fu);
    EXPECT_EQ_U64(raft_crc32("123456789", 9, 0xffffffffu), 0x0376e6e7u);
    EXPECT_EQ_U64(raft_crc32("", 0, 0x12345678u), 0x12345678u);
    EXPECT_EQ_U64(raft_crc32("The quick brown fox jumps over the lazy dog", 43,
                             0xdeadbeefu),
                  0x57d5ba9fu);
}

TEST(raft_crc_matches_the_bitwise_definition)
{
    enum { LEN = 4096 };
    uint8_t *b = malloc(LEN + 16);
    uint32_t seed = 7;

    for (size_t i = 0; i < LEN + 16; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (uint8_t)(seed >> 16);
    }
    /* every length 0..64 at every alignment 0..7, then long ones */
    for (size_t off = 0; off < 8; off++) {
        for (size_t n = 0; n <= 64; n++) {
            uint32_t init = (uint32_t)(off * 0x9e3779b9u + n);
            EXPECT_EQ_U64(raft_crc32(b + off, n, init),
                          crc_bitwise(b + off, n, init));
        }
    }
    EXPECT_EQ_U64(raft_crc32(b + 3, LEN, 0), crc_bitwise(b + 3, LEN, 0));
    free(b);
}

TEST(raft_crc_chains_like_one_pass)
{
    static const char text[] = "a batch header, then its data, in two calls";
    size_t n = strlen(text);
    uint32_t whole = raft_crc32(text, n, 0);

    for (size_t cut = 0; cut <= n; cut++) {
        uint32_t part = raft_crc32(text, cut, 0);
        EXPECT_EQ_U64(raft_crc32(text + cut, n - cut, part), whole);
    }
}

TEST(raft_crc_is_the_symbol_libraft_calls)
{
    const char *s = "libraft resolves byteCrc32 to this definition";
    EXPECT_EQ_U64(byteCrc32(s, strlen(s), 5), raft_crc32(s, strlen(s), 5));
}
