/* Retention (docs/design/http-api.md §6): the leader plans trims periodically
 * and proposes them as CMD_RETENTION commands; every node applies them the same
 * way, moving a partition's logStart forward by whole appends.
 *
 *   leader timer (retention_start) --each pass--> retention_plan: for every
 *   tenant with queues (store_list_tenants), for every queue of it with a
 *   cutoff: sink floor (the tenant's own KV row) -> cutoffs -> per partition
 *   the stale boundary (store_stale_boundary) -> CMD_RETENTION of <= 1024
 *   trims, stamped with that tenant --raft--> retention_apply (every node,
 *   inside the fsm's write txn): store_wtrim() to min(planned logStart,
 *   lastOffset + 1) of the command's tenant's partition
 *
 * Invariants:
 *   (1) An append is stale iff its stamp < cutoff (strict); logStart moves to
 *       one past the end of the last stale append, walking oldest first and
 *       stopping at the first fresh one, so whole appends go, never a part.
 *   (2) retentionSeconds' cutoff is floored by the sink hold;
 *       maxWaitTimeSeconds' cutoff is not ("ignores the hold").
 *   (3) completedRetentionSeconds removes nothing until consumer groups
 *       exist (no group = the rule removes nothing); it is planned and
 *       floored as docs/design/http-api.md §6 says so the cutoff is there when
 *       they do.
 *   (4) Apply is deterministic: it reads only the command and the store, and
 *       skips an item whose partition is gone or has another id.
 *   (5) At most one pass's commands are in flight; a pass visits at most
 *       RETENTION_MAX_PARTS partitions (RETENTION_MAX_PARTS_QUEUE of one
 *       queue) and RETENTION_MAX_ROWS append rows per partition.
 *   (6) Tenants are separate: a queue's options, its hold row (namespace
 *       queen-s3 of the queue's tenant) and its trims are its tenant's, and
 *       one command carries one tenant's trims. A pass that runs out of
 *       budget remembers the tenant it stopped in; the next pass starts
 *       after it and wraps around, so a large tenant cannot starve the rest.
 *
 * Pure parts (time is an argument): retention_sink_floor,
 * retention_queue_cutoffs, retention_cutoff. retention_plan reads the store
 * and hands commands to a function pointer (the node, or a test). Threading:
 * the timer and apply run on the node loop thread. */
#ifndef QUEEN_BROKER_RETENTION_H
#define QUEEN_BROKER_RETENTION_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/common.h"
#include "base/err.h"
#include "raft/cmd.h"
#include "raft/fsm.h"
#include "store/store.h"

#define RETENTION_NONE            INT64_MIN        /* no cutoff */
#define RETENTION_NO_HOLD         INT64_MAX        /* no sink floor */
#define RETENTION_HOLD_GUARD_US   (60LL * 1000000) /* tEnd - 60 s */
#define RETENTION_HOLD_MIN_S      60
#define RETENTION_MAX_PARTS       4096
#define RETENTION_MAX_PARTS_QUEUE 8192
#define RETENTION_MAX_ROWS        1000
#define RETENTION_INTERVAL_MS     1000
#define RETENTION_SINK_NS         "queen-s3"

struct retention_cutoffs {
    int64_t all;       /* retentionSeconds, floored by the hold */
    int64_t completed; /* completedRetentionSeconds, floored by the hold */
    int64_t max_wait;  /* maxWaitTimeSeconds, not floored */
};

/* The sink floor of a queue at now_us (µs): RETENTION_NO_HOLD when
 * retentionSinkHold is empty; else max(tEnd_ms * 1000 - 60 s, cap) with
 * cap = now - max(retentionSinkHoldMaxSeconds, 60) s, where tEnd is the
 * STRING field of committed (the live KV row's JSON value; len 0 = no row)
 * parsed by the broker's lenient ms parser. No row, no string tEnd or an
 * unparsable one: the cap. Borrows committed. */
int64_t retention_sink_floor(const struct store_queue_options *o,
                             int64_t now_us, struct slice committed);

/* Fill c for a queue at now_us with sink floor floor_us
 * (docs/design/http-api.md §6). */
void retention_queue_cutoffs(const struct store_queue_options *o,
                             int64_t now_us, int64_t floor_us,
                             struct retention_cutoffs *c);

/* The one cutoff trims use today: the greater of all and max_wait (an
 * append stale for either rule goes); `completed` removes nothing until
 * consumer groups exist (3). RETENTION_NONE when neither applies. */
int64_t retention_cutoff(const struct retention_cutoffs *c);

/* The KV key "s3:<hold>:<esc queue>:committed" into out (appended). */
int retention_hold_key(struct buf *out, const char *hold, struct slice queue,
                       struct err *err);

/* The CMD_RETENTION apply handler (fsm_apply_fn; arg unused). */
int retention_apply(void *arg, struct store *s, MDB_txn *txn,
                    const struct cmd_header *h, struct fsm_result *res,
                    struct err *err);

/* Where the next pass starts: after tenant `after` when is_set, else at the
 * first tenant (6). Zero-initialise. */
struct retention_cursor {
    uint8_t after[16];
    bool is_set;
};

/* Takes one encoded CMD_RETENTION command (borrowed for the call); returns
 * 0 when it was proposed, else an error code with err filled. */
typedef int (*retention_propose_fn)(void *arg, const char *cmd, size_t len,
                                    struct err *err);

/* Plan one pass at now_us over every tenant with queues, visiting at most
 * budget partitions (RETENTION_MAX_PARTS_QUEUE of one queue), starting
 * after *cur and wrapping around (6); each command goes to propose(arg, ..).
 * Sets *cur to the tenant the budget ran out in, or unsets it when every
 * tenant was visited. Borrows s. Returns how many commands propose took. */
size_t retention_plan(struct store *s, int64_t now_us, size_t budget,
                      struct retention_cursor *cur,
                      retention_propose_fn propose, void *arg);

struct node;
struct retention;

/* Start the leader's timer on loop every interval_ms (0 =
 * RETENTION_INTERVAL_MS). Borrows store and node (they outlive the timer).
 * Returns owned; release with retention_close(). */
struct retention *retention_start(uv_loop_t *loop, struct store *store,
                                  struct node *node, unsigned interval_ms);
/* One pass now, at now_us (the timer calls it with the wall clock): plans
 * and proposes when this node is the leader and no pass is in flight. */
void retention_pass(struct retention *r, int64_t now_us);
/* Stop the timer and free r once the handle is closed (after the node has
 * closed, so no proposal callback is pending). NULL is fine. */
void retention_close(struct retention *r);

#endif
