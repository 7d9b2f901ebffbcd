/* libraft's log checksum, sliced.
 *
 * libraft 0.15 checks every batch it writes or loads with byteCrc32: CRC-32
 * over polynomial 0x04C11DB7, most significant bit first, no reflection, the
 * caller's init as the register and no final xor (CRC-32/MPEG-2 when init is
 * 0xFFFFFFFF). Its loop takes one table look-up per byte, ~13% of the
 * broker's CPU under push load. The Makefile links libraft statically with
 * that symbol weakened, so this definition, eight bytes per step, is the one
 * libraft calls; the values are the same, so logs written by either read
 * back with the other (tests/unit/test_raft_crc.c checks both against a
 * bitwise oracle and vectors taken from libraft's own function).
 *   (1) raft_crc32(buf, n, init) == libraft's byteCrc32(buf, n, init) for
 *       every buffer, length and init.
 *   (2) Thread-safe; the tables are built once, on first use. */
#ifndef QUEEN_RAFT_CRC_H
#define QUEEN_RAFT_CRC_H

#include <stddef.h>
#include <stdint.h>

uint32_t raft_crc32(const void *buf, size_t n, uint32_t init);

/* The name libraft calls (its prototype is internal to libraft). */
uint32_t byteCrc32(const void *buf, size_t size, uint32_t init);

#endif
