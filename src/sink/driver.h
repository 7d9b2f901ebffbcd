/* The queue driver: one queue's life inside the sink as a step machine
 * (docs/design/protocol.md §5, §6, §7, §8 and docs/design/window.md §11). The
 * host calls driver_tick() on one of its threads; a tick restores once, then
 * executes the window engine's actions through two seams: struct sink_broker
 * (reads and KV of the broker this sink lives in) and the S3 client. The driver
 * never sleeps: a tick says when it wants to run again, or that the queue
 * stopped and why.
 *
 *   NEW --driver_tick: start()--> RUNNING --engine actions--> RUNNING
 *   RUNNING --lease lost / precondition at the fence--> STOPPED Fenced
 *   RUNNING --a PUT refused by the lease age check---> STOPPED Fenced
 *   RUNNING --engine failed (queue gone)-------------> STOPPED Missing
 *   RUNNING --non-retriable S3 or KV error-----------> STOPPED Failed
 *   RUNNING --a document past a real size limit------> STOPPED Failed
 *   RUNNING --crash point in return mode-------------> STOPPED Crashed
 *   RUNNING --driver_request_drain()-----------------> DRAINING
 *   DRAINING --the (at most one) window committed----> STOPPED Drained
 *
 * Threading: one driver is ticked by one thread at a time;
 * driver_request_drain() and driver_status() may be called from any thread.
 * The broker seam must be callable from the ticking thread. With
 * overlap_upload the driver starts one uploader thread per window (S3 PUTs
 * only; never the broker seam), joined before the commit and in
 * driver_free(). */
#ifndef QUEEN_SINK_DRIVER_H
#define QUEEN_SINK_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "base/err.h"
#include "base/slab.h"
#include "sink/stages.h"
#include "store/kv.h"
#include "store/store.h"

struct s3_client;
struct lease;

/* ---- the broker seam ------------------------------------------------------
 * The host implements it in-process over store reads and kv_call_batch(); unit
 * tests fake it. Every function borrows its request and fills an answer the
 * caller frees with the store/kv *_free() function; the return value is a
 * call error (0, or ERR_* with err set, and the answer empty). */
struct sink_broker {
    int (*changed)(void *arg, const uint8_t tenant[16],
                   const struct store_changed_req *reqs, size_t n,
                   struct store_changed_answer *ans, struct err *err);
    /* The answer may hold the store's read open (store_fetch_pinned): the
     * driver frees it before it calls the seam again. */
    int (*fetch)(void *arg, const uint8_t tenant[16],
                 const struct store_fetch_req *reqs, size_t n,
                 struct store_fetch_answer *ans, struct err *err);
    /* Blocking KV batch with kv_call_batch()'s semantics (timeout_ms 0 =
     * default): 0 with out->status 0 or ERR_PRECONDITION, or a call error
     * (ERR_NOT_LEADER, ERR_BUSY, ERR_TIMEOUT retriable). */
    int (*kv)(void *arg, const uint8_t tenant[16], const struct kv_op *ops,
              size_t n, int timeout_ms, struct kv_answer *out, struct err *err);
    int (*list_queues)(void *arg, const uint8_t tenant[16],
                       struct store_queue_list *out, struct err *err);
    void *arg;
    /* This node's safeTime now (µs), for the lag at scrape time; NULL: the
     * lag is the one the queue's last step saw. */
    int (*safe_time)(void *arg, int64_t *out_us);
};

/* Whether a KV call error is worth retrying (not leader, busy, timeout,
 * i/o, storage full, too many requests, remote). */
bool sink_broker_kv_retriable(int code);

/* ---- crash points (docs/design/protocol.md §6.5) ------------------------ */

enum driver_crash {
    DRIVER_CRASH_NEVER = 0,
    DRIVER_CRASH_AFTER_INTENT,
    DRIVER_CRASH_MID_UPLOAD,
    DRIVER_CRASH_AFTER_UPLOAD,
    DRIVER_CRASH_BEFORE_COMMIT,
    DRIVER_CRASH_AFTER_COMMIT,
};

/* Case-insensitive; "never", "off", "none" and "" are DRIVER_CRASH_NEVER.
 * False for anything else. */
bool driver_crash_parse(const char *s, enum driver_crash *out);
/* "never", "after_intent", "mid_upload", ... */
const char *driver_crash_name(enum driver_crash c);

/* ---- configuration ---------------------------------------------------- */

enum driver_format { DRIVER_FORMAT_JSONL, DRIVER_FORMAT_PARQUET };

struct driver_config {
    const char *sink;   /* sink name, e.g. "default" (borrowed, outlives) */
    const char *prefix; /* bucket key prefix, e.g. "queen" */
    uint8_t tenant[16];
    const char *tenant_text; /* tenant as written in keys and manifests */
    /* The tenant field of the uploader thread's log lines: NULL for the
     * default tenant's sink (docs/design/observability.md §3; borrowed). */
    const char *log_tenant;
    const char *queue;
    enum driver_format format;
    const char *compression; /* jsonl: "zstd", "gzip", "none"; parquet:
                                "zstd", "snappy", "none" */
    bool per_partition;      /* layout per-partition, else merged */
    int align;               /* enum layout_align */
    int start;               /* enum engine_start */
    uint64_t target_bytes;
    int64_t max_window_ms;
    int64_t guard_ms;
    uint32_t checkpoint_every;
    uint32_t fetch_concurrency;
    uint32_t discovery_interval_ms;
    uint64_t object_max_bytes; /* cap of one object body */
    /* The longest manifest the sink writes: 0 = what the sink can read
     * back (JSON_TEXT_MAX); tests set less. Past it the queue fails. */
    uint64_t manifest_max_bytes;
    /* The engine's budget (engine.h): fetches ask for no more than what the
     * buffered weight, the partitions' bytes and the asks out leave of it,
     * and past it one record at a time; 0 = the engine's default. The host
     * passes the node's memory budget. */
    uint64_t max_buffer_bytes;
    enum driver_crash crash_at;
    bool crash_returns; /* unit tests: stop Crashed instead of abort() */
    int kv_timeout_ms;  /* 0 = KV_CALL_TIMEOUT_MS */
    /* The largest intent that keeps its per-partition offsets in KV; past
     * it they go to the bucket (docs/design/formats.md §5). 0 =
     * KV_VALUE_MAX; unit tests lower it. */
    size_t intent_max_bytes;
    /* Put a window's objects and manifest up on an uploader thread while
     * the engine reads the next window; the commit pointer still moves only
     * after they landed, and nothing else is written before it (the order
     * of KV and bucket writes is the same as without). false: every PUT
     * inside the tick (unit tests' default). */
    bool overlap_upload;
    /* The queue was missing at the last look: "queue restored" logs at
     * debug, so a queue that never appears is not logged every retry. */
    bool is_quiet_restore;
    /* Called after every committed window (metrics histograms); NULL =
     * none. Runs on the ticking thread. */
    void (*on_commit)(void *arg, int64_t k, uint64_t records, uint64_t bytes,
                      uint64_t records_lost);
    void *on_commit_arg;
    /* Uniform in [0, 1) for the backoff jitter; NULL = 0.5. */
    double (*random)(void *arg);
    void *random_arg;
    /* The node's per-stage CPU counters (stages.h), which the driver's
     * reads, merges, builds and PUTs add to, borrowed; NULL = none. */
    struct stages *stages;
    /* The node's count of spare slabs (engine.h), borrowed; NULL = none. */
    struct slab_spares *spares;
};

/* Defaults: sink "default", prefix "queen", jsonl zstd merged, align hour,
 * earliest, 64 MiB, 5 min, guard 5 s, checkpoint every 20, concurrency 4,
 * discovery 1000 ms. queue and tenant left empty. */
void driver_config_defaults(struct driver_config *c);

/* ---- the driver ------------------------------------------------------- */

enum driver_stop {
    DRIVER_RUNNING = 0,
    DRIVER_DRAINED,
    DRIVER_FENCED,
    DRIVER_MISSING,
    DRIVER_FAILED,
    DRIVER_CRASHED,
};

/* "running", "drained", "fenced", "missing", "failed", "crashed". */
const char *driver_stop_name(enum driver_stop s);

struct driver_next {
    enum driver_stop stop; /* DRIVER_RUNNING: tick again at/after at_ms */
    int64_t at_ms;         /* on the now_ms clock of driver_tick */
    char why[512];         /* the stop's reason (Fenced, Missing, Failed,
                              Crashed: the crash point's name) */
};

struct driver;

/* Borrows cfg's strings, b, s3 and lease (all outlive the driver; the lease
 * must be held: the host acquired it). Returns owned, or NULL with
 * ERR_INVALID for a bad config. Free with driver_free(). */
struct driver *driver_new(const struct driver_config *cfg,
                          const struct sink_broker *b, struct s3_client *s3,
                          struct lease *lease, struct err *err);
void driver_free(struct driver *d);

/* Run one step: restore on the first call, then the engine's actions of
 * one round. now_ms is a monotonic clock, wall_ms the wall clock (ms).
 * Returns 0 with *next filled. Once stopped every further tick returns the
 * same stop. The driver releases nothing: the host releases the lease. */
int driver_tick(struct driver *d, int64_t now_ms, int64_t wall_ms,
                struct driver_next *next);

/* Ask for a drain (SIGTERM or give-back; docs/design/protocol.md §8). Any
 * thread. giving_back selects the log wording "giving the queue back" over
 * "shutting down". */
void driver_request_drain(struct driver *d, bool giving_back);

/* The memory budget said this queue is over and the largest: close early. */
void driver_force_close(struct driver *d);

/* Counters of this run (the host turns them into metrics). */
struct driver_counters {
    uint64_t windows_committed;
    uint64_t records;
    uint64_t bytes_jsonl;
    uint64_t bytes_parquet;
    uint64_t records_lost;
    uint64_t fetch_ok;
    uint64_t fetch_error;
    uint64_t commit_precondition_lost;
    uint64_t checkpoints_written;
    uint64_t windows_prebuilt; /* built while the window before went up */
};

/* The sizes of the last DRIVER_RECENT_WINDOWS windows committed: window
 * number i of this driver (counters.windows_committed before it, from 0) is
 * at [i % DRIVER_RECENT_WINDOWS], so a report that last saw n windows
 * observes [n, windows_committed) each with its own size. A tick commits at
 * most a few dozen windows, far fewer. */
#define DRIVER_RECENT_WINDOWS 128

struct driver_window_size {
    uint64_t records;
    uint64_t bytes;
};

struct driver_status {
    int64_t k; /* the window being closed, else committed_k + 1 */
    int64_t committed_k;
    int64_t t_end;            /* last committed tEnd, us (has_t_end) */
    int64_t complete_through; /* us (has_complete_through) */
    int64_t safe_time;        /* us (has_safe_time) */
    int64_t lag_us;           /* (has_lag) */
    uint64_t buffered_bytes;
    /* What the partitions cost besides their records (engine_tracked_bytes):
     * counted against the node's budget with buffered_bytes. */
    uint64_t partition_bytes;
    uint64_t partitions;           /* tracked */
    uint64_t discovery_partitions; /* last full sweep */
    int64_t checkpoint_age;        /* committed_k - last checkpoint k */
    uint64_t last_window_records;
    uint64_t last_window_bytes;
    struct driver_window_size recent[DRIVER_RECENT_WINDOWS];
    struct driver_counters counters;
    bool has_t_end;
    bool has_complete_through;
    bool has_safe_time;
    bool has_lag;
    bool redo;
    char state[16];       /* restoring, filling, intent, upload, commit, failed,
                             draining, drained, fenced, missing, crashed */
    char last_error[512]; /* "" when none */
};

/* Copy a consistent snapshot. Any thread. */
void driver_status(struct driver *d, struct driver_status *out);

#endif
