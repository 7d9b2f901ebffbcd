/* A small metrics registry for the broker's counters and gauges, rendered in
 * the Prometheus text exposition format (version 0.0.4) with HELP and TYPE
 * lines, which `promtool check metrics` accepts.
 *   (1) A family is registered once with its name, type and help; a sample
 *       is (family, label text) and keeps its first-seen order.
 *   (2) Label text is the inside of the braces, already escaped
 *       (`route="/api/v1/push",status="201"`); metrics_label_escape()
 *       escapes a value.
 * Caps: METRICS_MAX_FAMILIES families, METRICS_MAX_SAMPLES samples in all;
 * a sample past the cap is dropped (counted in queen_metrics_dropped_total)
 * rather than growing without bound. HTTP answers by route and status are
 * the router's (queen_http_requests_total, http/router.h).
 * Threading: loop thread only. */
#ifndef QUEEN_API_METRICS_H
#define QUEEN_API_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/procstat.h"

#define METRICS_MAX_FAMILIES 64
#define METRICS_MAX_SAMPLES  512
#define METRICS_LABELS_MAX   160

enum metric_type { METRIC_COUNTER, METRIC_GAUGE };

struct metric_sample {
    int family;
    char labels[METRICS_LABELS_MAX];
    double value;
};

struct metric_family {
    const char *name; /* static */
    const char *help; /* static */
    int type;         /* enum metric_type */
};

/* The raft snapshot families (raft/snapshot.h's counters), in the order of
 * metrics.c's table. */
enum metrics_snap {
    METRICS_SNAP_BEGUN,
    METRICS_SNAP_TAKEN,
    METRICS_SNAP_OPEN,
    METRICS_SNAP_SECONDS,
    METRICS_SNAP_BYTES,
    METRICS_SNAP_DUMPS,
    METRICS_SNAP_DUMP_SECONDS,
    METRICS_SNAP_DUMP_BYTES,
    METRICS_SNAP_N
};

struct metrics {
    struct metric_family families[METRICS_MAX_FAMILIES];
    size_t n_families;
    struct metric_sample samples[METRICS_MAX_SAMPLES];
    size_t n_samples;
    uint64_t dropped;
    /* the broker's families, registered by metrics_new() */
    int push_requests, push_records, push_duplicates, push_bytes;
    int raft_applied, raft_commit, raft_is_leader, safe_time;
    int raft_term, raft_forwarded, raft_forward_served, raft_refused;
    int snap[METRICS_SNAP_N]; /* by enum metrics_snap */
    int store_size, store_records, store_partitions, store_queues;
    int fetch_waiting, fetch_rereads, fetch_refused;
};

/* Returns owned, with the broker's families registered; free with
 * metrics_free(). */
struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);

/* Register a family (name and help are static strings). Returns its index;
 * asserts on a duplicate name or past the family cap. */
int metrics_family(struct metrics *m, const char *name, int type,
                   const char *help);
/* Add v to the sample (family, labels); labels NULL or "" = none. */
void metrics_add(struct metrics *m, int family, const char *labels, double v);
/* Set a gauge sample. */
void metrics_set(struct metrics *m, int family, const char *labels, double v);
/* The current value, 0 when the sample does not exist. */
double metrics_get(const struct metrics *m, int family, const char *labels);

/* Count one push request and its outcome. NULL m is a no-op. */
void metrics_push(struct metrics *m, uint64_t queued, uint64_t duplicates,
                  uint64_t bytes);
/* Escape a label value (\\, \", \n) into out (cap n, always terminated).
 * Returns false when it did not fit. */
bool metrics_label_escape(const char *v, char *out, size_t n);

/* Append the exposition of every family with samples (and counters without
 * samples as 0) to out. */
int metrics_render(const struct metrics *m, struct buf *out, struct err *err);

/* Append queen_build_info{version="<QUEEN_VERSION>"} 1 (base/version.h). */
int metrics_render_build(struct buf *out, struct err *err);

/* Append Prometheus's standard process families from p:
 * process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds,
 * process_start_time_seconds. */
int metrics_render_process(const struct procstat *p, struct buf *out,
                           struct err *err);

#endif
