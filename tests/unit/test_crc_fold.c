/* CRC folding (src/base/crc_fold.c): both bit orders must give, at every
 * length and alignment, what the table code gives over the whole buffer,
 * and the fold must really run on a CPU that has PCLMULQDQ. */
#include "base/crc_fold.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "harness.h"
#include "raft/raft_crc.h"

/* libraft's CRC by the table code alone: pieces shorter than CRC_FOLD_MIN
 * are never folded (test_raft_crc checks the table code against the
 * bitwise definition and libraft's own vectors). */
static uint32_t msb_table(const uint8_t *p, size_t n, uint32_t crc)
{
    while (n > 0) {
        size_t k = n < CRC_FOLD_MIN - 1 ? n : CRC_FOLD_MIN - 1;

        crc = raft_crc32(p, k, crc);
        p += k;
        n -= k;
    }
    return crc;
}

static uint8_t *random_bytes(size_t n, uint32_t seed)
{
    uint8_t *b = malloc(n);

    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (uint8_t)(seed >> 16);
    }
    return b;
}

static bool cpu_folds(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#else
    return false;
#endif
}

TEST(crc_fold_runs_where_the_cpu_has_clmul)
{
    uint8_t v[16];
    uint8_t *b = random_bytes(1000, 3);
    size_t m = crc_fold(CRC_MSB_FIRST, 0, b, 1000, v);

    if (cpu_folds()) {
        EXPECT_EQ_U64(m, 992); /* every whole 16 bytes */
        EXPECT_EQ_U64(crc_fold(CRC_LSB_FIRST, 0, b, 1000, v), 992);
    } else {
        EXPECT_EQ_U64(m, 0);
    }
    EXPECT_EQ_U64(crc_fold(CRC_MSB_FIRST, 0, b, CRC_FOLD_MIN - 1, v), 0);
    free(b);
}

TEST(crc_fold_msb_matches_the_table_code)
{
    enum { LEN = 1400 };
    uint8_t *b = random_bytes(LEN + 16, 11);

    for (size_t off = 0; off < 16; off++) {
        for (size_t n = CRC_FOLD_MIN - 20; n <= LEN; n += 13) {
            uint32_t init = (uint32_t)(off * 0x9e3779b9u + n * 0x85ebca6bu);
            EXPECT_EQ_U64(raft_crc32(b + off, n, init),
                          msb_table(b + off, n, init));
        }
    }
    free(b);
}

TEST(crc_fold_lsb_matches_zlib)
{
    enum { LEN = 1400 };
    uint8_t *b = random_bytes(LEN + 16, 17);

    for (size_t off = 0; off < 16; off++) {
        for (size_t n = 0; n <= LEN; n += 7) {
            uint32_t init = (uint32_t)(off * 0x27d4eb2fu + n);
            EXPECT_EQ_U64(crc_zlib(init, b + off, n),
                          crc32(init, b + off, (uInt)n));
        }
    }
    EXPECT_EQ_U64(crc_zlib(0, "123456789", 9), 0xcbf43926u);
    free(b);
}

TEST(crc_fold_agrees_on_large_buffers_and_chains)
{
    size_t n = (size_t)3 << 20;
    uint8_t *b = random_bytes(n + 1, 23);
    uint32_t whole = crc_zlib(0, b + 1, n);

    EXPECT_EQ_U64(whole, crc32(0, b + 1, (uInt)n));
    EXPECT_EQ_U64(crc_zlib(crc_zlib(0, b + 1, 4097), b + 4098, n - 4097),
                  whole);
    EXPECT_EQ_U64(raft_crc32(b + 1, n, 0xffffffffu),
                  raft_crc32(b + 1 + 100000, n - 100000,
                             msb_table(b + 1, 100000, 0xffffffffu)));
    free(b);
}
