/* CRC-32 folding by carry-less multiplication; see crc_fold.h.
 *
 * The buffer is read as one polynomial M over GF(2), and a CRC register is
 * M * x^32 mod P: only M mod P matters. A 16-byte block X followed by D
 * bits of message can therefore be replaced by any Y of degree < 128 with
 * Y = X * x^D (mod P), XORed into the block D bits on. Splitting X in two
 * 64-bit halves, X = A * x^64 + B, gives Y = A * (x^(D+64) mod P) +
 * B * (x^D mod P): two carry-less products of 64 by 32 bits, each under
 * 96 bits. Four blocks in flight fold 64 bytes a step (D = 512); they are
 * then folded into one (D = 128), which also takes the rest of the whole
 * blocks. The last block is handed back as 16 bytes: the caller's table
 * code finishes it and the tail, so no Barrett reduction is needed here.
 *
 * Bit order: MSB first, a block is byte-swapped so bit k is x^k. Reflected
 * (LSB first), a block is loaded as it is, bit k is x^(127-k), and a
 * carry-less product of two reflected operands is the reflected product
 * times x; the constants are taken one power lower to make up for it.
 *
 * The starting register is XORed into the first four bytes: running a CRC
 * from register r over M gives what running it from zero over M with r
 * added to its first 32 bits gives (for M of four bytes or more). */
#include "base/crc_fold.h"

#include <pthread.h>
#include <stdbool.h>
#include <zlib.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define CRC_FOLD_X86 1
#else
#define CRC_FOLD_X86 0
#endif

#define CRC_POLY_MSB 0x04C11DB7u

/* x^n mod P, bit j the coefficient of x^j. */
static uint32_t xpow_mod(unsigned n)
{
    uint64_t r = 1;

    for (unsigned i = 0; i < n; i++) {
        r <<= 1;
        if ((r & 0x100000000u) != 0) {
            r ^= 0x100000000u | CRC_POLY_MSB;
        }
    }
    return (uint32_t)r;
}

/* A polynomial of degree < 32 as the 64-bit reflected operand: x^j at bit
 * 63 - j. */
static uint64_t reflect64(uint32_t k)
{
    uint64_t r = 0;

    for (int j = 0; j < 32; j++) {
        if ((k >> j & 1u) != 0) {
            r |= (uint64_t)1 << (63 - j);
        }
    }
    return r;
}

/* Per order: the constants for the low and the high half of a block, for
 * D = 512 and D = 128. */
struct fold_k {
    uint64_t lo512, hi512, lo128, hi128;
};

static struct fold_k k_msb;
static struct fold_k k_lsb;
static bool has_clmul;
static pthread_once_t k_once = PTHREAD_ONCE_INIT;

static void k_build(void)
{
    /* MSB first: the high half is A (the earlier bytes). */
    k_msb.hi512 = xpow_mod(512 + 64);
    k_msb.lo512 = xpow_mod(512);
    k_msb.hi128 = xpow_mod(128 + 64);
    k_msb.lo128 = xpow_mod(128);
    /* Reflected: the low half is A, and each product carries an extra x. */
    k_lsb.lo512 = reflect64(xpow_mod(512 + 63));
    k_lsb.hi512 = reflect64(xpow_mod(512 - 1));
    k_lsb.lo128 = reflect64(xpow_mod(128 + 63));
    k_lsb.hi128 = reflect64(xpow_mod(128 - 1));
#if CRC_FOLD_X86
    __builtin_cpu_init();
    has_clmul =
        __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

#if CRC_FOLD_X86
#define CRC_TARGET __attribute__((target("pclmul,sse4.1,ssse3")))

CRC_TARGET static __m128i fold(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                         _mm_clmulepi64_si128(x, k, 0x11));
}

CRC_TARGET static __m128i load(const uint8_t *p, __m128i swap, bool msb)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);

    return msb ? _mm_shuffle_epi8(x, swap) : x;
}

CRC_TARGET static size_t fold_x86(bool msb, uint32_t reg, const uint8_t *p,
                                  size_t n, uint8_t v[16])
{
    const struct fold_k *k = msb ? &k_msb : &k_lsb;
    const __m128i k512 =
        _mm_set_epi64x((long long)k->hi512, (long long)k->lo512);
    const __m128i k128 =
        _mm_set_epi64x((long long)k->hi128, (long long)k->lo128);
    const __m128i swap =
        _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const uint64_t reg_hi = (uint64_t)reg << 32;
    const __m128i init = msb ? _mm_set_epi64x((long long)reg_hi, 0)
                             : _mm_set_epi64x(0, (long long)reg);
    const uint8_t *start = p;
    __m128i x0 = _mm_xor_si128(load(p, swap, msb), init);
    __m128i x1 = load(p + 16, swap, msb);
    __m128i x2 = load(p + 32, swap, msb);
    __m128i x3 = load(p + 48, swap, msb);
    __m128i x;

    for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
        x0 = _mm_xor_si128(fold(x0, k512), load(p, swap, msb));
        x1 = _mm_xor_si128(fold(x1, k512), load(p + 16, swap, msb));
        x2 = _mm_xor_si128(fold(x2, k512), load(p + 32, swap, msb));
        x3 = _mm_xor_si128(fold(x3, k512), load(p + 48, swap, msb));
    }
    x = _mm_xor_si128(fold(x0, k128), x1);
    x = _mm_xor_si128(fold(x, k128), x2);
    x = _mm_xor_si128(fold(x, k128), x3);
    for (; n >= 16; p += 16, n -= 16) {
        x = _mm_xor_si128(fold(x, k128), load(p, swap, msb));
    }
    if (msb) {
        x = _mm_shuffle_epi8(x, swap);
    }
    _mm_storeu_si128((__m128i *)(void *)v, x);
    return (size_t)(p - start);
}
#endif

size_t crc_fold(enum crc_order order, uint32_t reg, const void *p, size_t n,
                uint8_t v[16])
{
    (void)pthread_once(&k_once, k_build);
    if (!has_clmul || n < CRC_FOLD_MIN) {
        return 0;
    }
#if CRC_FOLD_X86
    return fold_x86(order == CRC_MSB_FIRST, reg, p, n, v);
#else
    (void)order;
    (void)reg;
    (void)v;
    return 0;
#endif
}

/* zlib's crc32 over a size_t length (its own takes uInt). */
static uint32_t zlib_long(uint32_t crc, const uint8_t *p, size_t n)
{
    uLong c = crc;

    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;

        c = crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)c;
}

uint32_t crc_zlib(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    uint8_t v[16];
    size_t m = crc_fold(CRC_LSB_FIRST, ~crc, b, n, v);

    if (m == 0) {
        return zlib_long(crc, b, n);
    }
    /* zlib's crc32(c, .) runs the register ~c and returns it inverted, so
     * from a zero register over v it is crc32(0xFFFFFFFF, v). */
    return zlib_long(zlib_long(0xFFFFFFFFu, v, 16), b + m, n - m);
}
