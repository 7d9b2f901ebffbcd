/* libraft's log checksum, eight bytes per step (slicing by 8). */
#include "raft/raft_crc.h"

#include <pthread.h>

#include "base/crc_fold.h"

#define CRC_POLY 0x04C11DB7u

/* crc_tab[k][b]: the register after byte b followed by k zero bytes, from
 * a zero register. */
static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_build(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b << 24;
        for (int i = 0; i < 8; i++) {
            r = (r & 0x80000000u) != 0 ? (r << 1) ^ CRC_POLY : r << 1;
        }
        crc_tab[0][b] = r;
    }
    for (int k = 1; k < 8; k++) {
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t r = crc_tab[k - 1][b];
            crc_tab[k][b] = (r << 8) ^ crc_tab[0][r >> 24];
        }
    }
}

static uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

/* The table code: the register after p[0..n) from crc. */
static uint32_t crc_sliced(const uint8_t *p, size_t n, uint32_t crc)
{
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t hi = crc ^ load_be32(p);
        crc = crc_tab[7][hi >> 24] ^ crc_tab[6][(hi >> 16) & 0xff] ^
              crc_tab[5][(hi >> 8) & 0xff] ^ crc_tab[4][hi & 0xff] ^
              crc_tab[3][p[4]] ^ crc_tab[2][p[5]] ^ crc_tab[1][p[6]] ^
              crc_tab[0][p[7]];
    }
    for (; n > 0; n--, p++) {
        crc = (crc << 8) ^ crc_tab[0][(crc >> 24) ^ *p];
    }
    return crc;
}

uint32_t raft_crc32(const void *buf, size_t n, uint32_t init)
{
    const uint8_t *p = buf;
    uint8_t v[16];
    size_t m;

    (void)pthread_once(&crc_once, crc_build);
    m = crc_fold(CRC_MSB_FIRST, init, p, n, v);
    if (m == 0) {
        return crc_sliced(p, n, init);
    }
    return crc_sliced(p + m, n - m, crc_sliced(v, 16, 0));
}

uint32_t byteCrc32(const void *buf, size_t size, uint32_t init)
{
    return raft_crc32(buf, size, init);
}
