/* The in-process KV interface (docs/design/http-api.md §7, "in-process use"):
 * the sink submits a batch of KV operations with the same semantics as POST
 * /api/v1/kv, without JSON, from any thread, and is called back with the
 * results once the batch is applied.
 *
 *   sink thread --kv_submit()--> copy of the batch --node_propose_async()-->
 *   loop thread: raft entry (CMD_KV) applied by store/kv.c inside the fsm's
 *   write txn --> answer --> cb(arg, answer) on the loop thread
 *
 * kv_call_batch() answers a batch made only of reads (get, getMany, getPrefix)
 * from one read transaction without a raft entry, at the wall clock;
 * kv_submit() always goes through the log (its callback runs on the loop). A
 * batch with a write becomes one CMD_KV command: versions, verdicts and expiry
 * are decided at apply time from the command's stamp (docs/architecture.md §1),
 * and the write moves safeTime.
 *
 * Validation is the HTTP route's (namespace, key, expiry declaration,
 * expect, duplicate keys, sizes) minus the HTTP edge's op and key ceilings
 * (256 ops, 4096 keys per call), which the in-process path skips.
 *
 * Ownership: a struct kv_batch and every slice in its ops are borrowed for
 * the duration of kv_submit()/kv_call_batch() only (the batch is copied). Every
 * slice in a struct kv_answer belongs to the answer; free with
 * kv_answer_free(). */
#ifndef QUEEN_BROKER_KV_H
#define QUEEN_BROKER_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"
#include "raft/fsm.h"
#include "store/kv.h"

struct node;
struct store;

/* The types of a batch and its answer (struct kv_op, struct kv_result,
 * struct kv_answer, enum kv_opcode, enum kv_reason), kv_validate() and
 * kv_answer_free() are in store/kv.h. */

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
/* Begin closing, before node_close(): from then on kv_submit() and
 * kv_call_batch() refuse every call with ERR_BUSY "kv: the node is closing"
 * (reads too), and this returns once no call admitted earlier can still
 * reach the node or the store (it waits for them; they never wait on the
 * loop, so the loop thread may call it). Idempotent. Answers of entries
 * already proposed still arrive through node_close(). */
void kv_service_close(struct kv_service *s);
/* Free the service. No call may be in progress or still to come: skip it
 * while a caller that outlived its grace may still call in. */
void kv_service_free(struct kv_service *s);

/* Submit batch b from any thread. Borrows b (copied before returning).
 * Returns 0 and later calls cb exactly once on the loop thread (with the
 * answer, or a call error as ans->status); or returns ERR_INVALID /
 * ERR_TOO_BIG (validation; reason in err->msg as "<reason_id>: <detail>") or
 * ERR_BUSY (after kv_service_close(): "kv: the node is closing"; the node's
 * queue full), and cb is never called. b->n == 0 answers
 * an empty result list. */
int kv_submit(struct kv_service *s, const struct kv_batch *b, kv_done_fn cb,
              void *arg, struct err *err);

/* Submit and wait (any thread but the loop's). timeout_ms 0 means
 * KV_CALL_TIMEOUT_MS. Returns 0 with *out filled (out->status may be
 * ERR_PRECONDITION; free with kv_answer_free()), or an ERR_* (validation,
 * ERR_BUSY, ERR_NOT_LEADER, ERR_TIMEOUT when no answer came in time) with
 * err set and *out empty. */
int kv_call_batch(struct kv_service *s, const struct kv_batch *b,
                  int timeout_ms, struct kv_answer *out, struct err *err);

#endif
