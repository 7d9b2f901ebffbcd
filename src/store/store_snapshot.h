/* Store snapshots without stopping the writer: a read transaction begun on
 * the loop thread pins the state as of one applied index; any one thread then
 * serialises every database of that transaction into a flat, versioned,
 * checksummed buffer; a restore loads such a buffer into a fresh environment
 * and swaps it in.
 *
 * Byte layout of a snapshot (integers big-endian):
 * OFFSET SIZE DESCRIPTION
 *      0    8 magic "QSNAP002"
 *      8    8 applied index, read in the snapshot's transaction (u64)
 *     16    4 number of databases n (u32, 1..STORE_SNAP_MAX_DBS)
 *     20    . n databases, each:
 *               1 name length L (1..63)
 *               L name
 *               4 LMDB database flags (u32, only MDB_DUPSORT may be set)
 *               8 number of pairs c (u64)
 *               c pairs, in LMDB order: 4 key length (1..511), key,
 *                                       4 value length, value
 *    end    4 CRC-32 (zlib) of every byte before it (u32)
 *
 * Invariants:
 *   (1) A snapshot holds exactly the store as of its read transaction: the
 *       writer may commit while it is dumped; none of that is in it.
 *   (2) A buffer that fails any check (magic, lengths, count, checksum,
 *       order) is refused with ERR_CORRUPT and the store is left as it was:
 *       the load builds a separate environment and swaps it in last. */
#ifndef QUEEN_STORE_STORE_SNAPSHOT_H
#define QUEEN_STORE_STORE_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "store/store.h"

#define STORE_SNAP_MAGIC   "QSNAP002"
#define STORE_SNAP_MAX_DBS 16

struct store_snap;

/* A growth function for the dump buffer (realloc's contract); lets the
 * caller pick the heap the buffer is freed from (raft_realloc for raft). */
typedef void *(*store_snap_realloc_fn)(void *p, size_t size);

/* Loop thread: begin the snapshot's read transaction and read its applied
 * index. Holds the store's swap_lock shared until store_snap_end(), which
 * must run on the same thread. Returns owned; free with store_snap_end. */
int store_snap_begin(struct store *s, struct store_snap **out, struct err *err);
/* The applied index the snapshot's transaction sees. */
uint64_t store_snap_index(const struct store_snap *sn);
/* A writer of the dump's bytes, in order: 0, or non-zero to stop it. */
typedef int (*store_snap_write_fn)(void *ctx, const void *p, size_t n);
/* Any one thread at a time: the exact length store_snap_stream will write,
 * from a walk of the transaction that copies nothing. 0 or ERR_IO. */
int store_snap_size(struct store_snap *sn, size_t *len, struct err *err);
/* Any one thread at a time: serialise the transaction through write, in
 * pieces of up to 1 MiB (a larger value in one piece), checksum last.
 * 0 or ERR_IO (also when write said no). */
int store_snap_stream(struct store_snap *sn, store_snap_write_fn write,
                      void *ctx, struct err *err);
/* Any one thread at a time: serialise the transaction into *out (allocated
 * with grow(NULL, size), owned by the caller: free with the matching free).
 * 0 or ERR_IO. */
int store_snap_dump(struct store_snap *sn, store_snap_realloc_fn grow,
                    uint8_t **out, size_t *len, struct err *err);
/* Begin's thread: abort the transaction, release the lock, free sn. */
void store_snap_end(struct store_snap *sn);

/* True when p starts with STORE_SNAP_MAGIC. */
bool store_snap_is_ours(const void *p, size_t len);
/* Check every length, count and the checksum of a snapshot, without
 * touching any store; fills *index. 0 or ERR_CORRUPT. */
int store_snap_check(const void *p, size_t len, uint64_t *index,
                     struct err *err);
/* The checksum field's value for a buffer of len bytes (len >= 4): the CRC
 * of all but the last 4 bytes (the fuzz target uses it to reach the
 * parser). */
uint32_t store_snap_crc(const void *p, size_t len);
/* Replace the store with a snapshot: check it, build a fresh environment in
 * <dir>/snapshot.load/ with MDB_APPEND, sync it, and swap it in under
 * swap_lock. Borrows p. 0, ERR_CORRUPT (nothing changed) or ERR_IO. */
int store_snap_load(struct store *s, const void *p, size_t len,
                    struct err *err);

/* Defined in store.c (it reopens the environment): rename the synced LMDB
 * data file at path over <dir>/data.mdb under swap_lock and reopen. */
int store_swap_file(struct store *s, const char *path, struct err *err);

#endif
