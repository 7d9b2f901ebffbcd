/* The KV rows in LMDB (docs/design/http-api.md §7 and docs/design/formats.md
 * §5; docs/architecture.md §1 and §5): the types of a KV batch and its answer,
 * validation, the CMD_KV body codec, the apply of a batch inside the fsm's
 * write transaction, reads in a read transaction, and the bounded expiry sweep.
 * Pure of clocks: "now" is always an argument (the command's stamp when
 * applying).
 *
 * Invariants:
 *   (1) Versions come from one store-wide counter in meta ("kv_version"),
 *       written in the same transaction as the rows, so a version is never
 *       issued twice, also across restarts and on every node alike.
 *   (2) A row is live iff expiresAt == 0 (forever) or expiresAt > now.
 *   (3) Every row with expiresAt != 0 has exactly one kv_expiry row
 *       (expiresAt, kv key), and no other kv_expiry rows exist.
 *   (4) A batch whose required write loses changes nothing (a nested
 *       transaction is aborted); the entry still moves applied.
 *
 * Apply order: ops run in the order given (phase 0: every op but getMany
 * and getPrefix), then getMany and getPrefix in the order given (phase 1),
 * which therefore see every write of their call. The first required write
 * that loses, in that order, is the answer's failed_index, and nothing
 * after it runs. The order given travels in the CMD_KV body, so every node
 * applies the same ops in the same order. (The original design sorted phase
 * 0 by namespace and key, docs/design/http-api.md §7; we do not: the sink's
 * fence is op 0 of its pointer batches and must decide them, sink/lease.h
 * (2), although its ":lease" key sorts after ":committed" and ":intent".)
 *
 * Threading: store_kv_apply and store_kv_sweep run on the loop thread inside
 * the fsm's write txn; store_kv_read from any thread. */
#ifndef QUEEN_STORE_KV_H
#define QUEEN_STORE_KV_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"
#include "store/store.h"

enum kv_opcode {
    KV_GET = 0,
    KV_GET_MANY,
    KV_GET_PREFIX,
    KV_PUT,
    KV_PUT_IF_ABSENT,
    KV_DELETE,
    KV_INCR,
    KV_OPCODE_COUNT
};

#define KV_NS_MAX  64
#define KV_KEY_MAX 512
/* The store key is tenant (16) + namespace + NUL + key, within LMDB's 511
 * bytes: a key of namespace ns fits when it is at most this long (always
 * below KV_KEY_MAX, which the message of a refusal names). */
#define KV_KEY_FITS(ns_len) (511 - 17 - (ns_len))
#define KV_VALUE_MAX        65536 /* bytes of compact JSON */
#define KV_HTTP_MAX_OPS     256
#define KV_HTTP_MAX_KEYS    4096
#define KV_PREFIX_DEF       100
#define KV_PREFIX_MAX       1000
#define KV_READ_BUDGET      ((size_t)4 << 20) /* bytes of values per call */
#define KV_CALL_TIMEOUT_MS  10000

struct kv_op {
    int op; /* enum kv_opcode */
    struct slice ns;
    struct slice key;         /* get, put, putIfAbsent, delete, incr */
    const struct slice *keys; /* getMany */
    size_t n_keys;
    struct slice prefix; /* getPrefix: non-empty */
    struct slice after;  /* getPrefix: exclusive cursor, len 0 = none */
    int limit;           /* getPrefix: 0 = 100; clamped to 1..1000 */
    bool keys_only;      /* getPrefix */
    struct slice value;  /* put, putIfAbsent: compact JSON text ("null" ok) */
    int64_t ttl_seconds; /* writes: > 0, or 0 = none */
    bool forever;        /* writes: exactly one of ttl_seconds, forever */
    bool has_expect;     /* put, delete (putIfAbsent: only expect 0) */
    uint64_t expect;
    bool required; /* a lost required write aborts the whole batch */
    int64_t by;    /* incr: the increment (0 = 1) */
};

/* One call's operations and the tenant they run for: what store_kv_apply,
 * store_kv_read, kv_submit and kv_call_batch take. Every pointer is
 * borrowed for the duration of the call. */
struct kv_batch {
    const uint8_t *tenant; /* 16 bytes */
    const struct kv_op *ops;
    size_t n;
};

enum kv_reason {
    KV_REASON_NONE = 0,
    KV_REASON_VERSION, /* "version" */
    KV_REASON_ABSENT,  /* "absent" */
    KV_REASON_EXISTS   /* "exists" */
};

/* "version", "absent", "exists", or NULL for KV_REASON_NONE. */
const char *kv_reason_name(int reason);
/* "get", "getMany", "getPrefix", "put", "putIfAbsent", "delete", "incr". */
const char *kv_op_name(int op);

struct kv_row {
    struct slice key;
    struct slice value; /* compact JSON; len 0 when keysOnly */
    uint64_t version;   /* > 0 */
    int64_t expires_at; /* µs; 0 = forever */
    int64_t updated_at; /* µs */
};

/* One result per op, index-aligned with the input.
 *   write:     applied, reason (when !applied), key, value (the op's value
 *              when an applied put/putIfAbsent/incr; the deleted row's value
 *              for an applied delete; the live row's value, or has_value
 *              false = null, when not applied), version (0 = none)
 *   get:       found; when found: value, version, expires_at, updated_at
 *   getMany:   rows (sorted by key bytes), missing, truncated
 *   getPrefix: rows, truncated, next_after (has_next_after false = null) */
struct kv_result {
    int op; /* enum kv_opcode */
    bool applied;
    int reason; /* enum kv_reason */
    bool found;
    struct slice key;
    bool has_value;
    struct slice value;
    uint64_t version;
    int64_t expires_at; /* 0 = forever */
    int64_t updated_at;
    size_t n_rows;
    struct kv_row *rows;
    size_t n_missing;
    struct slice *missing;
    bool truncated;
    bool has_next_after;
    struct slice next_after;
};

/* The answer of one batch.
 *   status 0: results[0..n_results) hold one result per op.
 *   status ERR_PRECONDITION: a required write lost; nothing was written.
 *     failed_index, kv_reason, version and value (has_value false = null)
 *     name the op and the winner.
 *   any other status: a call error (ERR_NOT_LEADER, ERR_BUSY, ERR_TIMEOUT
 *     retriable; ERR_INVALID / ERR_TOO_BIG with reason_id, e.g.
 *     "kv_bad_namespace", not retriable); msg says why. */
struct kv_answer {
    int status;
    char reason_id[40];
    char msg[256];
    size_t failed_index;
    int kv_reason;
    uint64_t version;
    bool has_value;
    struct slice value;
    int64_t stamp; /* the command's stamp (0 for a read-only batch) */
    size_t n_results;
    struct kv_result *results;
    struct buf arena; /* the bytes of every slice above; the arrays are
                         separately allocated (kv_answer_free frees all) */
};

void kv_answer_free(struct kv_answer *a);
/* Move a's memory into out; a is left empty. */
void kv_answer_move(struct kv_answer *a, struct kv_answer *out);

/* Check ops like POST /api/v1/kv does (http_edge adds the 256-op and
 * 4096-key ceilings). Returns 0; or ERR_INVALID / ERR_TOO_BIG with
 * reason_id (cap 40) set to the reason and err->msg to the detail. */
int kv_validate(const struct kv_op *ops, size_t n, bool http_edge,
                char *reason_id, struct err *err);
/* Whether any op is a write (put, putIfAbsent, delete, incr). */
bool kv_has_write(const struct kv_op *ops, size_t n);

/* ---- the CMD_KV body ----------------------------------------------------
 * OFFSET SIZE DESCRIPTION
 *      0    1 kind: 0 = batch, 1 = sweep
 * sweep:
 *      1    4 max rows to remove (u32, 1..KV_SWEEP_MAX)
 * batch:
 *      1    4 op count n (u32)
 *      5    . n ops, each:
 *             1 opcode (enum kv_opcode)
 *             1 flags: 1 forever, 2 has_expect, 4 required, 8 keys_only
 *             1 namespace length s, then s bytes
 *             2 key length, then the key bytes
 *             2 prefix length, then the prefix bytes
 *             2 after length, then the after bytes
 *             4 limit (u32)
 *             8 ttlSeconds (i64)
 *             8 expect (u64)
 *             8 by (i64)
 *             4 value length, then the value bytes
 *             4 key count k (getMany), then k x (2 length + bytes)
 * The body ends exactly after the last op. */
#define KV_SWEEP_MAX 512

/* Append a batch body to out (after cmd_begin). Borrows ops. */
int kv_cmd_encode(struct buf *out, const struct kv_op *ops, size_t n,
                  struct err *err);
/* Append a sweep body. */
int kv_cmd_encode_sweep(struct buf *out, uint32_t max, struct err *err);

/* A decoded body: ops point into the body and into keys (owned). */
struct kv_cmd {
    bool is_sweep;
    uint32_t sweep_max;
    size_t n;
    struct kv_op *ops;
    struct slice *keys;
};
/* Decode body (borrowed). ERR_CORRUPT when malformed. Free with
 * kv_cmd_free() in every case. */
int kv_cmd_decode(struct slice body, struct kv_cmd *c, struct err *err);
void kv_cmd_free(struct kv_cmd *c);

/* ---- apply and read ---------------------------------------------------- */

/* Apply a validated batch b at instant now (the command's stamp) inside txn
 * (the fsm's write txn). Fills ans (free with kv_answer_free()). Returns 0
 * with ans->status 0 or ERR_PRECONDITION (nothing written, (4)), or
 * ERR_INVALID for a deterministic refusal found while applying (incr of a
 * non-integer; nothing written); ERR_IO / ERR_FULL when LMDB failed. */
int store_kv_apply(struct store *s, MDB_txn *txn, const struct kv_batch *b,
                   int64_t now, struct kv_answer *ans, struct err *err);

/* Answer a batch of reads only (get, getMany, getPrefix) at instant now in
 * one read transaction. Any thread. */
int store_kv_read(struct store *s, const struct kv_batch *b, int64_t now,
                  struct kv_answer *ans, struct err *err);

/* Remove up to max rows whose expiresAt <= now, oldest expiry first, inside
 * txn. *removed gets the count. */
int store_kv_sweep(struct store *s, MDB_txn *txn, int64_t now, uint32_t max,
                   uint32_t *removed, struct err *err);

/* The expiry of the oldest row with one (0 when none). Any thread. */
int store_kv_oldest_expiry(struct store *s, int64_t *out, struct err *err);
/* The name of one row. Every pointer is borrowed for the call. */
struct kv_name {
    const uint8_t *tenant; /* 16 bytes */
    struct slice ns;
    struct slice key;
};

/* The integer value of the live row named by row into *out (0 when the
 * row is absent, expired at now, or not an integer), read in txn (the
 * fsm's write txn, loop thread) or, when txn is NULL, in a read txn of its
 * own (any thread). 0 or ERR_IO. */
int store_kv_get_int(struct store *s, MDB_txn *txn, const struct kv_name *row,
                     int64_t now, int64_t *out, struct err *err);
/* The last version issued (meta kv_version). Any thread. */
int store_kv_last_version(struct store *s, uint64_t *out, struct err *err);

#endif
