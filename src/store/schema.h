/* The LMDB layout: every named database, its key and its value. Integers are
 * big-endian so LMDB's byte order is the order we scan in. Tenants are the 16
 * UUID bytes. Names are stored without a terminator; a name is the rest of
 * its key.
 *
 * meta: name (ASCII) -> value
 *   "applied"      8  u64 raft index of the last applied entry (store (1))
 *   "safe_time"    8  i64 greatest applied stamp, µs (store (3))
 *   "last_clock"   8  i64 stamp of the last applied entry, µs
 *   "schema"       4  u32 SCHEMA_VERSION
 *   "next_queue"   8  u64 next queue id (first 1)
 *   "next_part"    8  u64 next partition id (first 1)
 *   "by_write"     8  u64 1 once parts_by_write holds every partition
 *
 * queues: key
 * OFFSET SIZE DESCRIPTION
 *      0   16 tenant
 *     16    q queue name (1..447 bytes)
 * value
 *      0    8 queue id (u64)
 *      8    8 created-at stamp (i64 µs)
 *     16   16 queue uuid (deterministic, see partitions)
 *     32    8 partition count (u64)
 *     40    . options blob, versioned:
 *             0  1 options version (1)
 *             1 56 14 x i32: priority, leaseTime, retryLimit, retryDelay,
 *                  maxSize, ttl, delayedProcessing, windowBuffer,
 *                  retentionSeconds, completedRetentionSeconds,
 *                  maxWaitTimeSeconds, minPopWaitTime, dedupWindowSeconds,
 *                  retentionSinkHoldMaxSeconds
 *            57  1 flags: 1 deadLetterQueue, 2 dlqAfterMaxRetries,
 *                  4 retentionEnabled, 8 encryptionEnabled
 *            58  . 3 x (u8 length, bytes): namespace, task, retentionSinkHold
 *             A later version appends fields; readers of version v fill the
 *             fields v lacks with defaults.
 *
 * partitions: key
 *      0    8 queue id
 *      8    p partition name
 * value
 *      0    8 partition id (u64, creation order, store (4))
 *      8   16 partition uuid: UUIDv7 layout, ms of the creating stamp, the
 *             rest derived from the partition id (same on every node)
 *     24    8 logStart (i64)
 *     32    8 lastOffset (i64, -1 when nothing was written)
 *     40    8 lastWriteAt (i64 µs, the stamp of the last record; 0 if none)
 *     48    8 createdAt (i64 µs)
 *
 * parts_by_id: key = queue id (8) + partition id (8); value = partition name
 *
 * parts_by_write: key = queue id (8) + lastWriteAt (8, the i64 with its sign
 *   bit flipped, so byte order is numeric order) + partition id (8); value =
 *   partition name. One row per partition, moved in the write transaction
 *   that changes its lastWriteAt, so partitions/changed with a `since` reads
 *   the rows at or above it only. Built from partitions when a store opens
 *   without meta "by_write" (a store or snapshot of an older build).
 *
 * records: key = partition id (8) + offset (8); value
 *      0    8 ts (i64 µs, the stamp of the push)
 *      8   16 message id
 *     24    1 flags: SCHEMA_RECORD_SEALED (1) = the payload is sealed in
 *             base/aead.h's binary form (iv || tag || ciphertext);
 *             SCHEMA_RECORD_PLAIN (2) = the payload is the producer's bytes,
 *             never an envelope (every unsealed row applied once the
 *             cluster's format is 2, store/format.h, but an encrypted
 *             queue's envelope, which a receiver that had not applied the
 *             format row yet sealed: raft/fsm.c is_plain()); other bits 0. Rows
 *             with neither bit were applied before: an encrypted queue's
 *             payload there may be the JSON envelope, and such rows are
 *             still read, opened only while their queue is encrypted
 *             (docs/design/formats.md §11).
 *     25    2 txn length t (u16)
 *     27    t txn bytes
 *   27+t    . payload bytes verbatim (may be empty)
 *
 * appends: key = partition id (8) + base offset (8); value = end offset (8,
 *   inclusive) + stamp (8). One row per push command per partition, so
 *   retention can trim whole appends oldest first.
 *
 * dedup: key
 * OFFSET SIZE DESCRIPTION
 *      0    8 queue id
 *      8    1 kind: 0 = the txn bytes follow (txn <= 400 bytes), 1 = the
 *             first 16 bytes of SHA-256(txn) follow (longer txns)
 *      9    . txn bytes or hash. Short txns are stored as themselves so
 *             time-ordered ids (the UUIDv7 default) insert at the end of the
 *             tree instead of on a random page.
 * value
 *      0    8 offset
 *      8    8 partition id
 *     16    8 stamp (i64 µs)
 *     24   16 message id
 * dedup_exp: key = expiry stamp (8, stamp + window µs) + the dedup key;
 *   value empty. Each push apply deletes up to 64 rows whose expiry is below
 *   its stamp (a deterministic sweep).
 *
 * kv (store/kv.c): key
 * OFFSET SIZE DESCRIPTION
 *      0   16 tenant
 *     16    1 namespace length s (1..64)
 *     17    s namespace bytes
 *   17+s    . key bytes (1..512; the whole key <= 511 bytes)
 * value
 *      0    8 version (u64, store-wide counter, meta "kv_version")
 *      8    8 expiresAt (i64 µs, 0 = forever)
 *     16    8 createdAt (i64 µs)
 *     24    8 updatedAt (i64 µs)
 *     32    . value, compact JSON text
 * kv_expiry: key = expiresAt (8) + the kv key; value empty; or, when that
 *   key would pass 511 bytes, expiresAt (8) + SHA-256 of the kv key, and
 *   the kv key as the value. One row per kv
 *   row with an expiry (store/kv.h (3)).
 * meta "kv_version": 8, u64, the last KV version issued (0 = none). */
#ifndef QUEEN_STORE_SCHEMA_H
#define QUEEN_STORE_SCHEMA_H

#include <stdint.h>

#define SCHEMA_VERSION 1

#define SCHEMA_NAME_MAX 495 /* LMDB keys are <= 511 bytes; 16 of tenant */

#define SCHEMA_QUEUE_FIXED     40 /* queue value before the options blob */
#define SCHEMA_OPTIONS_VERSION 1
#define SCHEMA_PART_VALUE_LEN  56
#define SCHEMA_RECORD_FIXED    27
#define SCHEMA_RECORD_SEALED   1 /* record flags: payload in binary form */
#define SCHEMA_RECORD_PLAIN    2 /* record flags: never an envelope */
#define SCHEMA_APPEND_LEN      16
#define SCHEMA_DEDUP_VALUE_LEN 40
#define SCHEMA_HASH_LEN        16
#define SCHEMA_DEDUP_RAW_MAX   400
#define SCHEMA_DEDUP_KEY_MAX   (9 + SCHEMA_DEDUP_RAW_MAX)
#define SCHEMA_KEY_MAX         511 /* LMDB's default MDB_MAXKEYSIZE */

static inline void be64_put(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static inline uint64_t be64_get(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++) {
        v = v << 8 | p[i];
    }
    return v;
}

static inline void be32_put(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline uint32_t be32_get(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

#endif
