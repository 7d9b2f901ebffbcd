/* UUIDv7-like message ids (docs/design/http-api.md §13). The pure maker takes
 * the clock and the random bytes as arguments; uuid7_next is the thin shell
 * around it. */
#include "base/uuid7.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/common.h"

void uuid7_make(struct uuid7_gen *g, uint64_t now_ms, const uint8_t rnd[8],
                uint8_t out[16])
{
    uint64_t ms;

    if (!g->has_last || now_ms > g->last_ms) {
        g->last_ms = now_ms;
        g->seq = 0;
        g->has_last = 1;
    } else {
        g->seq = (uint16_t)((g->seq + 1) & 0x0fff);
    }
    ms = g->last_ms;
    for (int i = 0; i < 6; i++) {
        out[i] = (uint8_t)(ms >> (8 * (5 - i)));
    }
    out[6] = (uint8_t)(0x70 | (g->seq >> 8));
    out[7] = (uint8_t)(g->seq & 0xff);
    out[8] = (uint8_t)(0x80 | (rnd[0] & 0x3f));
    for (int i = 1; i < 8; i++) {
        out[8 + i] = rnd[i];
    }
}

/* Two hex digits per byte from one table: formatting is on the push path
 * for every record, and a digit at a time with the dash test in the loop
 * was 2.5% of push's CPU. */
static const char uuid7_hex2[513] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

void uuid7_format(const uint8_t id[16], char out[37])
{
    /* Where byte i's two digits go: 8-4-4-4-12 with dashes between. */
    static const uint8_t at[16] = {0,  2,  4,  6,  9,  11, 14, 16,
                                   19, 21, 24, 26, 28, 30, 32, 34};

    for (int i = 0; i < 16; i++) {
        memcpy(out + at[i], uuid7_hex2 + 2 * (size_t)id[i], 2);
    }
    out[8] = out[13] = out[18] = out[23] = '-';
    out[36] = '\0';
}

static pthread_mutex_t uuid7_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uuid7_gen uuid7_global = UUID7_GEN_INIT;

static void uuid7_random(uint8_t rnd[8])
{
    size_t got = 0;

    while (got < 8) {
        ssize_t n = getrandom(rnd + got, 8 - got, 0);
        ASSERT(n >= 0 || errno == EINTR); /* getrandom(2) only fails so */
        got += n > 0 ? (size_t)n : 0;
    }
}

void uuid7_next(char out[37])
{
    struct timespec ts;
    uint8_t rnd[8];
    uint8_t id[16];
    uint64_t ms;

    uuid7_random(rnd);
    ASSERT(clock_gettime(CLOCK_REALTIME, &ts) == 0);
    ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    pthread_mutex_lock(&uuid7_lock);
    uuid7_make(&uuid7_global, ms, rnd, id);
    pthread_mutex_unlock(&uuid7_lock);
    uuid7_format(id, out);
}
