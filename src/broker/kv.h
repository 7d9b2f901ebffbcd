/* The in-process KV interface (reference 1.7, "in-process use"): the sink
 * submits a batch of KV operations with the same semantics as
 * POST /api/v1/kv, without JSON, from any thread, and is called back with the
 * results once the batch is applied.
 *
 *   sink thread --kv_submit()--> copy of the batch --node_propose_async()-->
 *   loop thread: raft entry (CMD_KV) applied by store/kv.c inside the fsm's
 *   write txn --> answer --> cb(arg, answer) on the loop thread
 *
 * A batch made only of reads (get, getMany, getPrefix) is answered from one
 * read transaction without a raft entry. A batch with a write becomes one
 * CMD_KV command: versions, verdicts and expiry are decided at apply time
 * from the command's stamp (DESIGN §2), and the write moves safeTime.
 *
 * Validation is the HTTP route's (namespace, key, expiry declaration,
 * expect, duplicate keys, sizes) minus the HTTP edge's op and key ceilings
 * (256 ops, 4096 keys per call), which the in-process path skips.
 *
 * Ownership: every slice in a struct kv_op is borrowed for the duration of
 * kv_submit()/kv_call() only (the batch is copied). Every slice in a
 * struct kv_answer points into its arena; free with kv_answer_free(). */
#ifndef QUEEN_BROKER_KV_H
#define QUEEN_BROKER_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"
#include "raft/fsm.h"

struct node;
struct store;

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

#define KV_NS_MAX          64
#define KV_KEY_MAX         512
#define KV_VALUE_MAX       65536 /* bytes of compact JSON */
#define KV_HTTP_MAX_OPS    256
#define KV_HTTP_MAX_KEYS   4096
#define KV_PREFIX_DEF      100
#define KV_PREFIX_MAX      1000
#define KV_READ_BUDGET     ((size_t)4 << 20) /* bytes of values per call */
#define KV_CALL_TIMEOUT_MS 10000

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
    struct buf arena; /* owns every slice and array above */
};

void kv_answer_free(struct kv_answer *a);

/* Called once per kv_submit() on the node loop thread. Borrows ans: valid
 * only during the call (copy what you need, or move it out with
 * kv_answer_take()). */
typedef void (*kv_done_fn)(void *arg, const struct kv_answer *ans);

/* Move the answer's memory into *out (the caller frees it with
 * kv_answer_free()); ans is left empty. Only inside a kv_done_fn. */
void kv_answer_take(const struct kv_answer *ans, struct kv_answer *out);

struct kv_service;

/* Make the service over store (borrowed, outlives it). Returns owned; free
 * with kv_service_free() after the node is closed. */
struct kv_service *kv_service_new(struct store *store);
/* The CMD_KV apply handler and its arg, for node_config.handlers. */
int kv_service_apply(void *arg, struct store *s, MDB_txn *txn,
                     const struct cmd_header *h, struct fsm_result *res,
                     struct err *err);
/* Attach the started node (loop thread, before any kv_submit). */
void kv_service_attach(struct kv_service *s, struct node *node);
void kv_service_free(struct kv_service *s);

/* Check ops like POST /api/v1/kv does (http_edge true adds the 256-op and
 * 4096-key ceilings). Returns 0; or ERR_INVALID / ERR_TOO_BIG with
 * reason_id (cap 40) set to the reason and err->msg to the detail. */
int kv_validate(const struct kv_op *ops, size_t n, bool http_edge,
                char *reason_id, struct err *err);

/* Submit a batch from any thread. Borrows tenant and ops (copied before
 * returning). Returns 0 and later calls cb exactly once on the loop thread
 * (with the answer, or a call error as ans->status); or returns ERR_INVALID /
 * ERR_TOO_BIG (validation; reason in err->msg as "<reason_id>: <detail>") or
 * ERR_BUSY (closing, queue full), and cb is never called. n == 0 answers an
 * empty result list. */
int kv_submit(struct kv_service *s, const uint8_t tenant[16],
              const struct kv_op *ops, size_t n, kv_done_fn cb, void *arg,
              struct err *err);

/* Submit and wait (any thread but the loop's). timeout_ms 0 means
 * KV_CALL_TIMEOUT_MS. Returns 0 with *out filled (out->status may be
 * ERR_PRECONDITION; free with kv_answer_free()), or an ERR_* (validation,
 * ERR_BUSY, ERR_NOT_LEADER, ERR_TIMEOUT when no answer came in time) with
 * err set and *out empty. */
int kv_call(struct kv_service *s, const uint8_t tenant[16],
            const struct kv_op *ops, size_t n, int timeout_ms,
            struct kv_answer *out, struct err *err);

#endif
