/* The broker glue of the embedded S3 sink (docs/design/protocol.md §1): reads
 * the sink config at boot when QUEEN_S3_EMBEDDED=true, builds the S3 client and
 * the in-process struct sink_broker (store reads and the broker's blocking KV
 * call, struct sink_host_kv, on this node),
 * starts the default tenant's sink, serves the "s3" member of /status and
 * the sink's families of /metrics/prometheus, and drains the sink at
 * SIGTERM before the HTTP listener drains.
 *
 *   (none) --sink_host_boot: embedded--> STARTING (no thread yet)
 *   STARTING --first loop turn, the broker listens--> RUNNING
 *   STARTING --the boot failed (api->server NULL)---> never started;
 *        sink_host_free() frees it at once
 *   RUNNING --sink_host_stop (SIGTERM)--> STOPPING --sink stopped--> STOPPED
 *   STOPPING --grace left reaches 0-----> the broker names the queues not
 *        drained, warns and goes on (the sink cut them a margin before,
 *        sending nothing to S3 from then on: sink.h);
 *        from 200 ms before that the KV seam refuses calls (ERR_BUSY), so
 *        no sink thread submits to the raft node the broker then frees
 *
 * Threading: boot, stop and free on the loop thread; the hooks run on the
 * loop thread; the sink's threads call the seam. */
#ifndef QUEEN_SINK_HOST_H
#define QUEEN_SINK_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct api;
struct kv_answer;
struct kv_batch;
struct store;
struct sink_host;

/* The in-process KV call the sink needs, which the broker implements
 * (kv_call_batch() in broker/kv.h) and passes in at boot, so the sink
 * includes nothing of the broker. call_batch: from any thread but the
 * loop's; borrows b; blocks until the batch is applied or timeout_ms (0 =
 * KV_CALL_TIMEOUT_MS) passed. Returns 0 with *out filled (out->status may be
 * ERR_PRECONDITION; free with kv_answer_free()), or an ERR_* with err set
 * and *out empty (ERR_BUSY, ERR_NOT_LEADER, ERR_TIMEOUT retriable). */
struct sink_host_kv {
    int (*call_batch)(void *arg, const struct kv_batch *b, int timeout_ms,
                      struct kv_answer *out, struct err *err);
    void *arg; /* borrowed; outlives the host */
};

/* When QUEEN_S3_EMBEDDED is true: load the config (a bad setting logs
 * "FATAL: QUEEN_S3_EMBEDDED=true: ..." and exits 2, as every boot setting
 * does), log the boot line, build the sink, set api's status and metrics
 * hooks, and arm a zero timer on api->loop that starts the sink's threads
 * on the loop's first turn, only if the broker listens by then (the broker
 * sets api->server): a boot that fails after this starts no thread. *out is
 * NULL when the sink is off. Borrows store and api (they outlive the host);
 * copies kv (its arg outlives the host). Returns 0 or ERR_IO (threads). */
int sink_host_boot(struct sink_host **out, struct store *store,
                   const struct sink_host_kv *kv, struct api *api,
                   struct err *err);
/* Begin the drain (first call only) and remember when, for the grace. */
void sink_host_stop(struct sink_host *h);
bool sink_host_stopped(struct sink_host *h);
/* Milliseconds left of QUEEN_S3_SHUTDOWN_GRACE_MS since the first stop;
 * 0 when used up. */
int64_t sink_host_grace_left_ms(struct sink_host *h);
/* After the stop: how many queues did not drain (sink_undrained(): those
 * still running are logged "queue not drained" now). 0 for NULL. */
size_t sink_host_undrained(struct sink_host *h);
/* Free when the sink stopped and return true; otherwise leave it (its
 * threads may still run) and return false: the caller must not free what
 * the sink borrows (store, KV service). NULL is true. */
bool sink_host_free(struct sink_host *h);

#endif
