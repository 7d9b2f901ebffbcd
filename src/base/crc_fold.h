/* CRC-32 folding by carry-less multiplication (PCLMULQDQ), for the two
 * checksums the broker runs over every byte it logs or snapshots: libraft's
 * (MSB first over 0x04C11DB7, src/raft/raft_crc.h) and zlib's (the same
 * polynomial reflected, the store snapshot's trailer).
 *
 * A table-driven CRC costs a look-up per byte or eight; folding costs two
 * multiplications per 16 bytes, so over a large buffer it runs several
 * times faster. It only shortens a buffer: crc_fold() reduces the longest
 * prefix it can to 16 bytes that leave the same register, and the caller
 * finishes those 16 bytes and the tail with its own table code. So the
 * values stay those of the caller's definition, and the table code stays
 * the only place that says what the CRC is.
 *   (1) After crc_fold(order, reg, p, n, v) returns m: running the caller's
 *       CRC from a zero register over v[0..16) then p[m..n) leaves the
 *       register that running it from reg over p[0..n) leaves (register
 *       level: no pre- or post-inversion).
 *   (2) It returns 0, and leaves v alone, when the CPU lacks PCLMULQDQ or
 *       SSE4.1 or n < CRC_FOLD_MIN: the caller then runs its table code over
 *       the whole buffer, as before.
 *   (3) Thread-safe; the constants are derived from the polynomial once. */
#ifndef QUEEN_BASE_CRC_FOLD_H
#define QUEEN_BASE_CRC_FOLD_H

#include <stddef.h>
#include <stdint.h>

#define CRC_FOLD_MIN 256

enum crc_order {
    CRC_MSB_FIRST, /* libraft: first byte's top bit is the highest degree */
    CRC_LSB_FIRST  /* zlib: reflected, first byte's bit 0 is the highest */
};

/* Bytes of p folded (a multiple of 16, or 0); see (1) and (2). */
size_t crc_fold(enum crc_order order, uint32_t reg, const void *p, size_t n,
                uint8_t v[16]);

/* zlib's crc32(crc, p, n) for any n (size_t, not uInt), folded when it can. */
uint32_t crc_zlib(uint32_t crc, const void *p, size_t n);

#endif
