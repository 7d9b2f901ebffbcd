/* One tenant's S3 sink (docs/design/protocol.md §2, §4, §8): a pool of threads
 * named queen-s3 that runs, from one run queue ordered by next-run time, the
 * control task (bucket probe, queue set, presence beats, the stop) and one
 * task per queue (claim the lease, run the queue driver, retry by stop
 * reason). A task never runs on two threads at once; a step may block (S3
 * uploads, KV calls).
 *
 * Queue task:
 *   CLAIMING --lease free or ours: acquired---------> OWNED (driver ticks)
 *   CLAIMING --held by another instance------------> HELD, claim again later
 *   OWNED --driver stops Fenced / Missing / Failed--> WAIT (TTL / 5 s / 60 s)
 *   OWNED --driver stops Drained / Crashed---------> ENDED
 *   OWNED --the stop's deadline passed: task_cut---> ENDED ("queue not
 *        drained", lease left to its TTL)
 *   any but OWNED --sink_stop()--------------------> ENDED
 * Control task:
 *   PROBE --HEAD <prefix>/ answered (404 too)------> RUN (presence beat,
 *        queue set, beats, give-backs)
 *   RUN --the control task fails-------------------> ENDING (queues drain)
 *   ENDING --every queue task ended----------------> BACKOFF 1 s .. 30 s
 *   BACKOFF --elapsed------------------------------> PROBE (a new run)
 *   RUN --sink_stop() and every queue task ended---> STOPPED (presence row
 *        deleted, "every queue drained; the sink has stopped"; past the
 *        deadline the row is left to its TTL and the line counts the
 *        queues not drained)
 * A free queue is claimed when placement says it is due
 * (docs/design/protocol.md §4); a queue the control task gives back drains,
 * then claims again after 2 TTLs (even when its release did not land and the
 * row is still this instance's). Leases are refreshed by a thread of their own
 * (queen-s3-main); a lease it finds lost makes its queue run at once, so the
 * driver stops Fenced without waiting out a backoff.
 *
 * Threading: sink_stop(), sink_stopped(), sink_undrained(),
 * sink_status_render() and sink_metrics() may be called from any thread. */
#ifndef QUEEN_SINK_SINK_H
#define QUEEN_SINK_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "sink/config.h"
#include "sink/driver.h"
#include "sink/status.h"

struct s3_client;
struct sink;
struct sink_pool;
struct obs;

struct sink_params {
    const struct sink_config *cfg;       /* borrowed, outlives the sink */
    const struct sink_node_config *node; /* borrowed */
    uint8_t tenant[16];
    const char *tenant_text; /* "00000000-0000-0000-0000-000000000001" */
    const struct sink_broker *broker; /* borrowed */
    struct s3_client *s3;             /* borrowed */
    /* The node's pool (sink_pool_new), borrowed; NULL: the sink makes its
     * own, started by sink_start() and freed with it. */
    struct sink_pool *pool;
    /* The tenant label of its metrics (borrowed): NULL for the default
     * tenant's sink, the tenant's id text for a control-plane one. */
    const char *metrics_tenant;
    /* A seam for unit tests, NULL in the broker: called at every step of
     * the control task; non-zero (with err filled) ends the run as a
     * failing control task does, and the restart ladder takes over. */
    int (*run_check)(void *arg, struct err *err);
    void *run_check_arg;
};

#define SINK_LADDER_MIN_MS  1000    /* the first restart's backoff */
#define SINK_LADDER_MAX_MS  30000   /* the ladder's top */
#define SINK_HEALTHY_RUN_MS 3600000 /* a run this long resets the ladder */

/* The restart ladder (docs/design/protocol.md §1), pure: the backoff before the
 * next run after a run of run_ms ended unasked. *ladder_ms holds the next
 * backoff (start at 0 or SINK_LADDER_MIN_MS): 1 s, 2 s, 4 s ... up to 30 s; a
 * run of at least an hour starts it again at 1 s. */
int64_t sink_restart_backoff(int64_t *ladder_ms, int64_t run_ms);

/* The driver configuration a queue of the sink with parameters p runs
 * with (borrows p and queue, which d points into): the settings, the upload
 * overlapped with the next window's reads, and a real random source for the
 * backoff's jitter. Pure but for that source. */
void sink_driver_config(const struct sink_params *p, const char *queue,
                        struct driver_config *d);

/* The node's pool (docs/design/protocol.md §1): QUEEN_S3_THREADS threads
 * named queen-s3 and one queen-s3-main lease refresher that run the tasks
 * of every sink added to it (sink_start), due first first, under one lock;
 * with them the node-wide parts every tenant sink shares: the memory budget
 * (keys esc(tenant)/esc(queue)), the metrics registry and the claim load
 * that paces claims (placement). node is borrowed and outlives the pool.
 * Free only once every sink of it is freed. */
struct sink_pool *sink_pool_new(const struct sink_node_config *node);
/* Start the threads (once; later calls do nothing). 0 or ERR_IO. */
int sink_pool_start(struct sink_pool *pool, struct err *err);
void sink_pool_free(struct sink_pool *pool);
/* The S3 client's on_retrying hook (s3/client.h) for a sink's client: while
 * a call of a pool thread retries (the bucket failed it once; the ladder
 * can hold the thread for half a minute), the pool runs one more thread,
 * so the other queues and tenants keep their ticks. The extra thread ends
 * between steps once the call returned. Calls of other threads are left
 * alone. arg is unused. */
void sink_s3_retrying(void *arg, bool is_retrying);
struct obs *sink_pool_obs(struct sink_pool *pool);
uint64_t sink_pool_buffered(struct sink_pool *pool);

/* Returns owned (free with sink_free() once stopped, or never when
 * sink_wait() timed out: threads may still use it). */
struct sink *sink_new(const struct sink_params *p);
/* Start the pool's threads. 0 or ERR_IO (pthread_create). */
int sink_start(struct sink *s, struct err *err);
/* Begin the drain (docs/design/protocol.md §8): no new claims, every owned
 * queue finishes the window in flight, leases and the presence row are
 * released. The drain is bounded: from QUEEN_S3_SHUTDOWN_GRACE_MS minus a
 * margin (1.5 s, or a third of a shorter grace) on, the S3 client sends
 * nothing (s3_client_stop) and a queue still draining is cut, logged "queue
 * not drained", its lease left to expire. Any thread; does not block. */
void sink_stop(struct sink *s);
/* True once every task ended after sink_stop(). */
bool sink_stopped(struct sink *s);
/* After sink_stop(): how many queues did not drain, those cut at the
 * deadline and those still owned and running; each still running is
 * logged "queue not drained" here, once. Any thread. */
size_t sink_undrained(struct sink *s);
/* Free: with a pool of its own, join its threads first; in a shared pool,
 * leave it once no thread runs one of its steps, and drop every metric
 * series of its tenant label (or its S3 counters, unlabelled). Only when
 * sink_stopped() or never started. */
void sink_free(struct sink *s);

/* Render the s3 block (docs/design/observability.md §1) with this sink as its
 * one entry: the caller fills node's threads and ss's tenant, source and
 * cluster; the sink fills the run's host keys (phase, error, restarts,
 * lastExit, uptimeMs, backoffMs), node->phase when the caller left it NULL
 * (starting until the control task first ran, then running, stopped once
 * stopped), its own keys and rows under its lock, and renders into out. */
int sink_status_render(struct sink *s, struct status_node *node,
                       struct status_sink *ss, struct buf *out,
                       struct err *err);
/* The block over e->n entries at once under the pool's one lock: ss[i] has
 * the host's keys (tenant, source, cluster) filled by the caller; when
 * sinks[i] is not NULL (a sink of pool) its run's keys and report are
 * filled as sink_status_render() does, else ss[i] is rendered as the
 * caller left it (a tenant whose sink could not be built). */
struct sink_entries {
    struct sink *const *sinks; /* n; NULL: an entry without a sink */
    struct status_sink *ss;    /* n */
    size_t n;
};
int sink_pool_status_render(struct sink_pool *pool,
                            const struct sink_entries *e,
                            struct status_node *node, struct buf *out,
                            struct err *err);

/* The sink's Prometheus families (docs/design/observability.md §2), appended to
 * out: those of its pool's registry, so every sink sharing it. */
int sink_metrics(struct sink *s, struct buf *out, struct err *err);
/* The pool's families, with the lag gauges of sinks[0..n) (NULL skipped)
 * read at scrape time. */
int sink_pool_metrics(struct sink_pool *pool, struct sink *const *sinks,
                      size_t n, struct buf *out, struct err *err);

#endif
