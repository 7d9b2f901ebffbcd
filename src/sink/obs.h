/* Sink observability (docs/design/observability.md §2): a thread-safe registry
 * of the sixteen queen_s3_* families and their Prometheus text exposition, plus
 * the log Sampler that rate-limits repeated log lines.
 *   (1) Every family is declared (# HELP, # TYPE) in the fixed order of
 *       docs/design/observability.md §2 even with no samples; within a family
 *       series are sorted by their label text.
 *   (2) Series of a non-default tenant carry tenant="<id>" as the first
 *       label; safe_lag_seconds and buffer_bytes never carry a tenant.
 *   (3) Per-queue gauges (lag, discovery partitions, checkpoint age) are
 *       removed when the queue stops here; counters stay. Removing a tenant
 *       removes all of its series.
 *   (4) The S3 request family is rendered from each tenant's
 *       struct s3_metrics (s3/metrics.h), which the registry borrows.
 *   (5) The stage CPU family is rendered from the registry's own
 *       struct stages (sink/stages.h), one sample per stage, always all.
 * Tenant NULL or "" means the default tenant. Time is never read here. */
#ifndef QUEEN_SINK_OBS_H
#define QUEEN_SINK_OBS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "s3/metrics.h"
#include "sink/stages.h"

enum obs_family {
    OBS_LAG_SECONDS = 0,          /* gauge: tenant?, queue */
    OBS_SAFE_LAG_SECONDS,         /* gauge: none */
    OBS_WINDOWS_COMMITTED,        /* counter: tenant?, queue */
    OBS_RECORDS_WRITTEN,          /* counter: tenant?, queue */
    OBS_BYTES_WRITTEN,            /* counter: tenant?, queue, format */
    OBS_RECORDS_LOST,             /* counter: tenant?, queue */
    OBS_WINDOW_RECORDS,           /* histogram: tenant? */
    OBS_WINDOW_BYTES,             /* histogram: tenant? */
    OBS_BUFFER_BYTES,             /* gauge: none */
    OBS_FETCH_CALLS,              /* counter: tenant?, queue, result */
    OBS_DISCOVERY_PARTITIONS,     /* gauge: tenant?, queue */
    OBS_S3_REQUESTS,              /* counter: from struct s3_metrics */
    OBS_COMMIT_PRECONDITION_LOST, /* counter: tenant? */
    OBS_CHECKPOINT_AGE_WINDOWS,   /* gauge: tenant?, queue */
    OBS_QUEUES_GIVEN_BACK,        /* counter: tenant? */
    OBS_STAGE_CPU_SECONDS,        /* counter: stage; from struct stages */
    OBS_FAMILY_COUNT
};

#define OBS_BUCKETS 8

struct obs;

/* Returns owned; free with obs_free(). */
struct obs *obs_new(void);
void obs_free(struct obs *o);

/* "queen_s3_lag_seconds", ... */
const char *obs_family_name(enum obs_family f);

/* queue is ignored for families without a queue label; extra is the value
 * of the format (bytes_written) or result (fetch_calls) label, else
 * ignored. Strings are copied. */
void obs_gauge_set(struct obs *o, enum obs_family f, const char *tenant,
                   const char *queue, double v);
void obs_counter_add(struct obs *o, enum obs_family f, const char *tenant,
                     const char *queue, const char *extra, double v);
/* A window_records / window_bytes observation. */
void obs_observe(struct obs *o, enum obs_family f, const char *tenant,
                 double v);

/* Drop one gauge series (e.g. safe_lag_seconds when no queue runs). */
void obs_gauge_remove(struct obs *o, enum obs_family f, const char *tenant,
                      const char *queue);
/* The queue stopped here: drop its lag, discovery and checkpoint gauges. */
void obs_queue_stopped(struct obs *o, const char *tenant, const char *queue);
/* A deleted control-plane tenant: drop every series of it. */
void obs_tenant_removed(struct obs *o, const char *tenant);

/* Borrow tenant's S3 request counters until replaced by NULL or
 * obs_tenant_removed(); they are rendered as family 12. */
void obs_set_s3(struct obs *o, const char *tenant, struct s3_metrics *m);

/* The node's per-stage CPU counters, which the sink threads add to; they
 * live as long as o (5). */
struct stages *obs_stages(struct obs *o);

/* Append the exposition of every family to out. */
int obs_render(struct obs *o, struct buf *out, struct err *err);

/* 6.2's number rendering: integral with |v| < 1e15 as an integer, else the
 * shortest float form; +Inf, -Inf, NaN. */
void obs_format_number(double v, char out[40]);

/* Append s with Prometheus label escaping (\\, \", \n). */
int obs_escape_label(struct buf *out, const char *s, struct err *err);

/* ---- the log Sampler --------------------------------------------------
 * One event passes when now - last >= interval (the first always passes),
 * reporting how many were suppressed since the last one that passed. A
 * clock that goes backwards suppresses. Thread-safe. */
struct obs_sampler {
    pthread_mutex_t mu;
    int64_t interval_ms;
    bool has_last;
    int64_t last_ms;
    uint64_t suppressed;
};

void obs_sampler_init(struct obs_sampler *s, int64_t interval_ms);
void obs_sampler_destroy(struct obs_sampler *s);
/* True when this event should be logged; *suppressed gets the count. */
bool obs_sampler_tick(struct obs_sampler *s, int64_t now_ms,
                      uint64_t *suppressed);

#endif
