/* The `s3` block of GET /status (docs/design/observability.md §1) rendered from
 * plain structs. Pure: the host fills the structs from its sinks, drivers,
 * health and budget under its own locks, then renders; nothing here reads a
 * clock or holds a secret (there is no field for one).
 *   (1) Keys come in a fixed order: node keys, then each sink's host keys,
 *       then its own keys; rows sorted by queue name, sinks by tenant (byte
 *       order).
 *   (2) STATUS_NONE in a time field, NULL in a string field and
 *       has_* == false render as JSON null. */
#ifndef QUEEN_SINK_STATUS_H
#define QUEEN_SINK_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "sink/health.h"
#include "sink/stages.h"

#define STATUS_NONE      INT64_MIN /* a time that renders as null */
#define STATUS_ERROR_MAX 512       /* a host error is cut to this */

/* One queue row (queues_json). Strings are borrowed. state is one of
 * claiming, held, restoring, filling, intent, upload, commit, failed,
 * drained, fenced, missing, crashed, released. */
struct status_queue {
    const char *name;
    bool owned_here;
    const char *held_by; /* the other owner's instance, or NULL */
    const char *state;
    int64_t k;                   /* last committed k, 0 if none */
    int64_t t_end_us;            /* or STATUS_NONE */
    int64_t complete_through_us; /* or STATUS_NONE */
    int64_t safe_time_us;        /* or STATUS_NONE */
    bool has_lag;
    double lag_seconds;
    bool redo;
    uint64_t buffered_bytes;
    uint64_t partitions;
    uint64_t windows_committed; /* this node, since the sink started */
    uint64_t records;
    uint64_t bytes;
    uint64_t records_lost;
    int64_t error_at_us;       /* STATUS_NONE: lastError is null */
    const char *error_message; /* with error_at_us */
};

struct status_bucket {
    int reachable;         /* -1 = null (not probed yet), 0 false, 1 true */
    const char *error;     /* or NULL */
    int64_t checked_at_ms; /* or STATUS_NONE */
    const char *name;
    const char *endpoint;
    const char *region;
    const char *prefix;
};

struct status_placement {
    uint64_t nodes;
    uint64_t queues;
    uint64_t share;
    uint64_t held;
    const char *giving_back; /* a queue name, or NULL */
};

/* One tenant sink: the host's keys, then the sink's own report. */
struct status_sink {
    /* host keys */
    const char *tenant;
    const char *source;  /* "env" or "cp" */
    const char *cluster; /* NULL for env */
    const char *phase;   /* starting, running, backoff, stopped, error */
    const char *error;   /* or NULL; cut to STATUS_ERROR_MAX chars */
    uint64_t restarts;
    const char *last_exit; /* or NULL */
    bool has_uptime;       /* only while running */
    uint64_t uptime_ms;
    uint64_t backoff_ms;
    /* No sink behind the entry (its unit could not be built): the host
     * keys only. */
    bool host_only;
    /* sink keys; ok = health.ok && bucket.reachable != 0 */
    const char *sink;
    const char *instance;
    bool running;
    struct status_bucket bucket;
    const char *format;
    const char *compression;
    const char *layout;
    const char *align;
    struct health_verdict health;
    struct status_placement placement;
    uint64_t buffered_bytes; /* node-wide budget */
    uint64_t limit_bytes;
    const struct status_queue *queues; /* any order; rendered by name */
    size_t n_queues;
};

struct status_node {
    const char *phase; /* starting, running, stopped */
    uint32_t threads;
    const char *control_plane_error; /* or NULL */
    const struct stages *stages;     /* the node's stage counters, or NULL */
    const struct status_sink *sinks; /* any order; rendered by tenant */
    size_t n_sinks;
};

/* The sink's ok: health verdict healthy and the bucket not unreachable. */
bool status_sink_ok(const struct status_sink *s);

/* Append the block's value (an object starting with "mode") to out. */
int status_render(const struct status_node *n, struct buf *out,
                  struct err *err);

/* Append one sink entry / one queue row (used by status_render). */
void status_render_sink(struct jw *w, const struct status_sink *s);
void status_render_queue(struct jw *w, const struct status_queue *q);

#endif
