/* UUIDv7-like message ids (docs/design/http-api.md §13). The pure maker takes
 * the clock and the random bytes as arguments; uuid7_next is the thin shell
 * around it. */
#include "base/uuid7.h"

#include <errno.h>
#include <pthread.h>
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

void uuid7_format(const uint8_t id[16], char out[37])
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            out[o++] = '-';
        }
        out[o++] = hex[id[i] >> 4];
        out[o++] = hex[id[i] & 15];
    }
    out[o] = '\0';
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
