/* The raft command codec: every change of state is one command, one raft
 * entry. Pure: no I/O, no clock, no allocation when decoding.
 *
 * A command is a fixed 32-byte header followed by a type-specific body. All
 * integers are big-endian. The stamp is written by node_propose() (the
 * encoders leave it 0), so the bytes a caller encodes are the bytes that are
 * replicated, except for that one field.
 *
 * Header
 * OFFSET SIZE DESCRIPTION
 *      0    1 magic 0x51 ('Q')
 *      1    1 version, CMD_VERSION (1)
 *      2    1 type, enum cmd_type
 *      3    1 reserved, 0
 *      4    4 body length in bytes (u32); the entry is header + body +
 *             0..7 zero bytes of padding (raft entries are 8-byte aligned)
 *      8    8 stamp, µs since the epoch (i64, > 0 once proposed)
 *     16   16 tenant id (UUID bytes; STORE_DEFAULT_TENANT for now)
 *     32    n body
 *
 * PUSH body (CMD_PUSH): the items of one push request, already resolved by
 * the HTTP layer (partition defaulted to "Default", txn defaulted to the
 * message id string, message id minted by the receiver).
 * OFFSET SIZE DESCRIPTION
 *      0    4 item count n (u32, 0 < n <= CMD_PUSH_MAX_ITEMS)
 *      4    . n items, each:
 *             2  queue name length q (u16, 1..CMD_NAME_MAX)
 *             q  queue name bytes
 *             2  partition name length p (u16, 1..CMD_NAME_MAX)
 *             p  partition name bytes
 *             2  transaction id length t (u16, 0..CMD_TXN_MAX), or
 *                CMD_TXN_IS_ID: the id is the message id's text (the
 *                default, 36 B that the entry need not carry), no bytes
 *             t  transaction id bytes
 *            16  message id (UUIDv7 bytes)
 *             4  payload length (u32, 0 = empty/null), with bit 31
 *                (CMD_PAYLOAD_SEALED) set when the payload is sealed
 *             .  payload bytes: the producer's JSON text verbatim, or
 *                when sealed the binary form of base/aead.h (iv || tag
 *                || ciphertext, at least 32 bytes; docs/design/formats.md
 *                §11). Entries of builds before that form hold an
 *                encrypted queue's payloads as the JSON envelope, bit 31
 *                clear; they are applied as they are.
 * The body must end exactly after the last item.
 *
 * NOOP body (CMD_NOOP): empty. Moves safeTime on an idle node.
 *
 * CONFIGURE body (CMD_CONFIGURE): the whole resulting options of one queue
 * (the HTTP handler merges before proposing, so apply only stores them).
 * OFFSET SIZE DESCRIPTION
 *      0    2 queue name length q (u16, 1..CMD_NAME_MAX)
 *      2    q queue name bytes
 *    2+q   56 14 x i32 in store_queue_options order: priority, leaseTime,
 *             retryLimit, retryDelay, maxSize, ttl, delayedProcessing,
 *             windowBuffer, retentionSeconds, completedRetentionSeconds,
 *             maxWaitTimeSeconds, minPopWaitTime, dedupWindowSeconds,
 *             retentionSinkHoldMaxSeconds
 *   58+q    1 flags: 1 deadLetterQueue, 2 dlqAfterMaxRetries,
 *             4 retentionEnabled, 8 encryptionEnabled
 *   59+q    . 3 x (u8 length 0..64, bytes): namespace, task,
 *             retentionSinkHold
 * The body must end exactly after the last string.
 *
 * RETENTION body (CMD_RETENTION): trims planned by the leader's retention
 * pass (broker/retention.h), one per partition.
 * OFFSET SIZE DESCRIPTION
 *      0    4 item count n (u32, 1..CMD_TRIM_MAX_ITEMS)
 *      4    . n items, each:
 *             8  queue id (u64)
 *             8  partition id (u64)
 *             8  new logStart (i64, >= 0)
 *             2  partition name length p (u16, 1..CMD_NAME_MAX)
 *             p  partition name bytes
 * The body must end exactly after the last item.
 *
 * CMD_KV's body is store/kv.h's. A type without a registered apply handler
 * is answered by the fsm with ERR_INVALID "unsupported command type". */
#ifndef QUEEN_RAFT_CMD_H
#define QUEEN_RAFT_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"
#include "store/store.h"

#define CMD_MAGIC          0x51
#define CMD_VERSION        1
#define CMD_HEADER_LEN     32
#define CMD_PAD_MAX        7
#define CMD_NAME_MAX       447 /* 511 - 64 B: docs/design/http-api.md §1 */
#define CMD_TXN_MAX        4096
#define CMD_TXN_IS_ID      0xFFFFu /* txn length: "the message id's text" */
#define CMD_PUSH_MAX_ITEMS 100000
#define CMD_PAYLOAD_SEALED \
    0x80000000u /* payload length: the bytes are sealed */
#define CMD_BODY_MAX ((size_t)64 * 1024 * 1024) /* one entry */
/* No payload length can reach the mark, so no older entry carries it. */
_Static_assert(CMD_BODY_MAX < CMD_PAYLOAD_SEALED,
               "a payload length must never reach the sealed mark");

enum cmd_type {
    CMD_NOOP = 0,
    CMD_PUSH = 1,
    CMD_KV = 2,        /* reserved: KV batch */
    CMD_CONFIGURE = 3, /* queue options (api/configure.c) */
    CMD_RETENTION = 4, /* retention trims (broker/retention.c) */
    CMD_TYPE_COUNT
};

struct cmd_header {
    int type; /* enum cmd_type */
    int64_t stamp;
    uint8_t tenant[16];
    struct slice body; /* borrowed from the decoded bytes, padding excluded */
};

/* One item of a push. When encoding, every slice is borrowed from the
 * caller; when decoding, every slice points into the decoded command. */
struct cmd_push_item {
    struct slice queue;
    struct slice partition;
    struct slice txn;
    uint8_t message_id[16];
    struct slice payload;
    /* The payload is the binary sealed form (base/aead.h), not plaintext. */
    bool sealed;
    /* Encoding: txn is the message id's text, so the entry says so instead
     * of carrying it. Decoding: set when the entry said so; txn then points
     * at txn_text, inside this item (do not copy a decoded item by value). */
    bool txn_is_id;
    char txn_text[37];
};

/* Append the 32-byte header (stamp 0) and an empty body of `type` to out.
 * Used for NOOP and by owners of the reserved types, who append their body
 * and then call cmd_finish(). */
int cmd_begin(struct buf *out, int type, const uint8_t tenant[16],
              struct err *err);
/* Write the body length of the command that starts at out->data + start.
 * Returns 0, or ERR_TOO_BIG when the body exceeds CMD_BODY_MAX. */
int cmd_finish(struct buf *out, size_t start, struct err *err);

/* Encode a whole push command into out (appended; out keeps ownership).
 * Borrows items. ERR_INVALID when n is 0 or above CMD_PUSH_MAX_ITEMS, a name
 * is empty or longer than CMD_NAME_MAX, a txn longer than CMD_TXN_MAX;
 * ERR_TOO_BIG when the body exceeds CMD_BODY_MAX or out's cap. out is
 * unchanged on failure. */
int cmd_push_encode(struct buf *out, const uint8_t tenant[16],
                    const struct cmd_push_item *items, size_t n,
                    struct err *err);

/* Write the stamp into an encoded command (p points at its header). */
void cmd_set_stamp(void *p, int64_t stamp);

/* Decode a header. Borrows p: h->body points into it. ERR_CORRUPT with a
 * sentence when the bytes are not a command (short, bad magic or version,
 * unknown type, length mismatch). */
int cmd_decode_header(const void *p, size_t len, struct cmd_header *h,
                      struct err *err);

/* Walk the items of a push body without copying.
 *   struct cmd_push_iter it;
 *   cmd_push_iter_init(&it, h.body, &err)       -> 0 or ERR_CORRUPT
 *   while ((rc = cmd_push_next(&it, &item, &err)) == 1) { ... }
 *   rc == 0: done, every byte consumed; rc == ERR_CORRUPT: malformed.
 * cmd_push_validate() runs the walk once, so a caller can refuse a bad
 * command before changing anything. */
struct cmd_push_iter {
    const uint8_t *p;
    size_t len;
    size_t pos;
    uint32_t count; /* items announced */
    uint32_t index; /* items returned so far */
};

int cmd_push_iter_init(struct cmd_push_iter *it, struct slice body,
                       struct err *err);
int cmd_push_next(struct cmd_push_iter *it, struct cmd_push_item *item,
                  struct err *err);
int cmd_push_validate(struct slice body, uint32_t *count, struct err *err);

const char *cmd_type_name(int type);

/* ---- CONFIGURE and RETENTION (queue options and retention trims) ------ */

#define CMD_OPTION_STR_MAX 64
#define CMD_TRIM_MAX_ITEMS 1024

/* Encode a whole configure command for queue (borrowed) with options o.
 * ERR_INVALID when the name is empty or longer than CMD_NAME_MAX, or a
 * string option is longer than CMD_OPTION_STR_MAX. out is unchanged on
 * failure. */
int cmd_configure_encode(struct buf *out, const uint8_t tenant[16],
                         struct slice queue,
                         const struct store_queue_options *o, struct err *err);
/* Decode a configure body (borrowed: queue points into it). ERR_CORRUPT when
 * malformed. */
int cmd_configure_decode(struct slice body, struct slice *queue,
                         struct store_queue_options *o, struct err *err);

struct cmd_trim_item {
    uint64_t queue_id;
    uint64_t partition_id;
    int64_t log_start;
    struct slice partition; /* borrowed (encode) / into the body (decode) */
};

/* Encode a whole retention command. Borrows items. ERR_INVALID when n is 0
 * or above CMD_TRIM_MAX_ITEMS, a name is empty or too long, or a logStart
 * is negative. out is unchanged on failure. */
int cmd_trim_encode(struct buf *out, const uint8_t tenant[16],
                    const struct cmd_trim_item *items, size_t n,
                    struct err *err);

/* Walk a retention body like a push body:
 *   cmd_trim_iter_init(&it, body, &err) -> 0 or ERR_CORRUPT
 *   while ((rc = cmd_trim_next(&it, &item, &err)) == 1) { ... }
 * rc 0: done, every byte consumed; ERR_CORRUPT: malformed.
 * cmd_trim_validate() walks it once without applying anything. */
struct cmd_trim_iter {
    const uint8_t *p;
    size_t len;
    size_t pos;
    uint32_t count;
    uint32_t index;
};

int cmd_trim_iter_init(struct cmd_trim_iter *it, struct slice body,
                       struct err *err);
int cmd_trim_next(struct cmd_trim_iter *it, struct cmd_trim_item *item,
                  struct err *err);
int cmd_trim_validate(struct slice body, uint32_t *count, struct err *err);

#endif
