/* The state machine: applies raft commands (raft/cmd.h) to the store, takes
 * and restores snapshots. Deterministic: no clock, no randomness; offsets,
 * dedup verdicts and ids are decided from the command and the state only.
 *
 * Invariants:
 *   (1) An entry at or below meta.applied is skipped (persistent FSM: raft
 *       replays entries after a restart that the store already holds).
 *   (2) One LMDB write transaction per entry holds its effects and the new
 *       applied index, safe_time = max(safe_time, stamp).
 *   (3) A command that does not decode is applied as a no-op that moves
 *       applied (every node decides the same), its result is ERR_CORRUPT.
 *
 * Push apply, per item in input order:
 *   - queue and partition are created on first contact (implicit options);
 *   - an item whose (queue, partition, txn) appeared earlier in the same
 *     command is a follower: `duplicate` with the leader's offset and id
 *     (`error` if the leader errored);
 *   - an item whose txn is stored in the same queue with a stamp within
 *     dedupWindowSeconds of the command's stamp is `duplicate` with the
 *     ORIGINAL offset and message id;
 *   - survivors get the next offset of their partition (gapless) and the
 *     command's stamp as ts.
 *
 * Threading: every function runs on the node loop thread (libraft's). */
#ifndef QUEEN_RAFT_FSM_H
#define QUEEN_RAFT_FSM_H

#include <lmdb.h>
#include <raft.h>
#include <stdint.h>

#include "base/err.h"
#include "raft/cmd.h"
#include "store/store.h"

enum fsm_item_status {
    FSM_ITEM_QUEUED = 0,
    FSM_ITEM_DUPLICATE,
    FSM_ITEM_ERROR
};

struct fsm_item_result {
    int status;     /* enum fsm_item_status */
    int64_t offset; /* meaningless when status is FSM_ITEM_ERROR */
    uint8_t message_id[16];
};

/* The outcome of one applied command. Owned by the fsm and overwritten by
 * the next apply: valid only inside the callback that receives it (copy what
 * you need). */
struct fsm_result {
    uint64_t index; /* raft index of the entry */
    int type;       /* enum cmd_type */
    int64_t stamp;
    int code; /* 0, or ERR_CORRUPT / ERR_INVALID for a refused command */
    char msg[160];
    size_t n_items; /* CMD_PUSH: one per input item, in input order */
    struct fsm_item_result *items;
};

struct fsm;

/* Make an fsm over store (borrowed; outlives the fsm) and fill the libraft
 * struct raft_fsm it is reached through. Returns owned; free with
 * fsm_free() after raft_close() completed. */
struct fsm *fsm_new(struct store *store, struct raft_fsm *out);
void fsm_free(struct fsm *f);

/* Apply one encoded command as raft entry `index` outside raft (tests,
 * tools). Returns 0 (the result is in *res, borrowed as above; *res is NULL
 * when the entry was skipped by (1)), or ERR_IO / ERR_FULL when the store
 * write failed (nothing changed). */
int fsm_apply_entry(struct fsm *f, uint64_t index, const void *p, size_t len,
                    const struct fsm_result **res, struct err *err);

/* Apply hook for the reserved command types (CMD_KV, CMD_CONFIGURE,
 * CMD_RETENTION): their owners register a handler that applies h (stamp and
 * body borrowed) inside txn, the entry's one write transaction, and fills
 * res (res->items is NULL; use res->code/msg, or keep answers of their own
 * keyed by res->index). Return 0, or an ERR_* to abort the transaction and
 * fail the entry (ERR_IO / ERR_FULL only: a deterministic refusal must be a
 * result, not an error, so every node applies the same). The handler must be
 * deterministic. Register before the first entry applies (node_config's
 * handlers do it inside node_start()). */
typedef int (*fsm_apply_fn)(void *arg, struct store *s, MDB_txn *txn,
                            const struct cmd_header *h, struct fsm_result *res,
                            struct err *err);
void fsm_set_handler(struct fsm *f, int type, fsm_apply_fn fn, void *arg);

/* Change hook (the long poll's wake-ups): called on the loop thread after an
 * entry's write transaction committed, once per partition a CMD_PUSH
 * appended records to (tenant, queue and partition borrowed for the call;
 * weight: the records' sum of max(1, payload length), the weight a fetch
 * counts for minBytes), and once with queue and partition NULL and weight
 * 0 for a change the hook cannot name by partition: a CMD_RETENTION entry
 * (tenant set) or a snapshot restore (tenant NULL too). fn must not apply
 * entries. One hook per fsm; fn NULL removes it. */
typedef void (*fsm_change_fn)(void *arg, const uint8_t *tenant,
                              const struct slice *queue,
                              const struct slice *partition, uint64_t weight);
void fsm_on_change(struct fsm *f, fsm_change_fn fn, void *arg);

/* Node only: the raft instance whose last_applied names the entry being
 * applied (libraft's apply does not pass the index). */
void fsm_attach_raft(struct fsm *f, struct raft *r);

/* Snapshot primitives (also used by tests): take fills b, on the calling
 * thread, with a full dump: malloc'd bytes in the format of
 * store/store_snapshot.h (free with free or raft_free); raft's own
 * snapshots are markers taken off the loop thread (raft/snapshot.h).
 * Restore takes any format and replaces the store unless it already
 * applied the snapshot's index (then it does nothing); a marker past the
 * store fails with ERR_PRECONDITION (snapshot_restore). Borrows p. */
int fsm_snapshot_take(struct fsm *f, struct raft_buffer *b, struct err *err);
int fsm_snapshot_restore(struct fsm *f, const void *p, size_t len,
                         struct err *err);

/* The last restore libraft asked for that failed (borrowed, valid until the
 * fsm is freed), or NULL: node_start reports it when raft_start fails. */
const struct err *fsm_restore_error(const struct fsm *f);

/* The stamp of the latest applied entry (== store safe time), loop thread. */
int64_t fsm_greatest_stamp(const struct fsm *f);

#endif
