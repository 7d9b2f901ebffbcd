/* UUIDv7-like message ids (docs/design/http-api.md §13).
 *
 * OFFSET SIZE DESCRIPTION
 *      0    6 Unix time in milliseconds, big-endian (48 bits)
 *      6    1 0x70 | top 4 bits of the 12-bit sequence
 *      7    1 low 8 bits of the sequence
 *      8    1 0x80 | 6 random bits (rnd[0] & 0x3f)
 *      9    7 random bytes (rnd[1..7])
 *
 * Sequence rule: when now_ms is greater than the last used ms, the sequence
 * resets to 0 and the last ms becomes now_ms; otherwise (same ms, or the
 * clock went backwards) the sequence increments (masked to 12 bits) and the
 * LAST ms is reused, so ids from one generator never go backwards in time. */
#ifndef QUEEN_BASE_UUID7_H
#define QUEEN_BASE_UUID7_H

#include <stdint.h>

struct uuid7_gen {
    uint64_t last_ms; /* 0 before the first id */
    uint16_t seq;     /* sequence of the last id */
    int has_last;     /* an id was made */
};

#define UUID7_GEN_INIT \
    {                  \
        0, 0, 0        \
    }

/* Pure: make one id from the clock value and 8 random bytes. */
void uuid7_make(struct uuid7_gen *g, uint64_t now_ms, const uint8_t rnd[8],
                uint8_t out[16]);
/* Lowercase 8-4-4-4-12 hex plus NUL. */
void uuid7_format(const uint8_t id[16], char out[37]);
/* Thread-safe: one process-wide generator under a mutex, CLOCK_REALTIME and
 * getrandom(2). Writes the formatted id. */
void uuid7_next(char out[37]);

#endif
