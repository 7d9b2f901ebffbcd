/* A small metrics registry rendered in the Prometheus text format.
 *
 * Families and samples live in two fixed arrays: the broker has a few dozen
 * series (routes x statuses), so a linear search is cheaper than a hash and
 * the memory is bounded by construction. The exposition groups each
 * family's samples under one HELP and one TYPE line, which is what promtool
 * checks. Also here: the handler of /metrics and /metrics/prometheus (one
 * text on both paths), which refreshes the gauges (raft indexes, store
 * size) before rendering and adds queen_build_info and the process_*
 * families read from /proc/self (base/procstat.h). */
#include "api/metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/auth.h"
#include "base/version.h"
#include "base/xalloc.h"
#include "http/resp.h"
#include "http/router.h"
#include "http/server.h"
#include "raft/node.h"
#include "raft/snapshot.h"

/* By enum metrics_snap. */
static const struct {
    const char *name;
    int type;
    const char *help;
} snap_families[METRICS_SNAP_N] = {
    {"queen_raft_snapshots_begun_total", METRIC_COUNTER,
     "raft snapshots this process began"},
    {"queen_raft_snapshots_total", METRIC_COUNTER,
     "raft snapshots this process took and stored"},
    {"queen_raft_snapshots_open", METRIC_GAUGE,
     "raft snapshots begun and not finished yet"},
    {"queen_raft_snapshot_seconds_total", METRIC_COUNTER,
     "wall time snapshots took, from the state pinned to the file stored"},
    {"queen_raft_snapshot_last_bytes", METRIC_GAUGE,
     "size of the last raft snapshot taken, as stored (a 20-byte marker)"},
    {"queen_raft_snapshot_dumps_total", METRIC_COUNTER,
     "full dumps of the store this leader made for followers' "
     "InstallSnapshot"},
    {"queen_raft_snapshot_dump_seconds_total", METRIC_COUNTER,
     "wall time those dumps took, from the state pinned to the frame made"},
    {"queen_raft_snapshot_dump_last_bytes", METRIC_GAUGE,
     "size of the last full dump, as sent (an LZ4 frame)"},
};

struct metrics *metrics_new(void)
{
    struct metrics *m = xcalloc(1, sizeof(*m));

    m->push_requests =
        metrics_family(m, "queen_push_requests_total", METRIC_COUNTER,
                       "push requests answered 201");
    m->push_records =
        metrics_family(m, "queen_push_records_total", METRIC_COUNTER,
                       "records appended by pushes (duplicates excluded)");
    m->push_duplicates =
        metrics_family(m, "queen_push_duplicates_total", METRIC_COUNTER,
                       "pushed items answered duplicate");
    m->push_bytes =
        metrics_family(m, "queen_push_bytes_total", METRIC_COUNTER,
                       "payload bytes appended by pushes, as stored");
    m->raft_applied = metrics_family(m, "queen_raft_applied_index",
                                     METRIC_GAUGE, "last raft index applied");
    m->raft_commit = metrics_family(m, "queen_raft_commit_index", METRIC_GAUGE,
                                    "raft commit index");
    m->raft_is_leader =
        metrics_family(m, "queen_raft_is_leader", METRIC_GAUGE,
                       "1 when this node is the raft leader, else 0");
    m->raft_term = metrics_family(m, "queen_raft_term", METRIC_GAUGE,
                                  "this node's raft term");
    m->raft_forwarded =
        metrics_family(m, "queen_raft_forwarded_writes_total", METRIC_COUNTER,
                       "writes this node sent to the leader as a follower");
    m->raft_forward_served =
        metrics_family(m, "queen_raft_forward_served_total", METRIC_COUNTER,
                       "followers' writes this node proposed as the leader");
    m->raft_refused = metrics_family(
        m, "queen_raft_connections_refused_total", METRIC_COUNTER,
        "connections the raft port refused (no proof of "
        "QUEEN_RAFT_TOKEN, garbage, a stalled handshake)");
    for (int i = 0; i < METRICS_SNAP_N; i++) {
        m->snap[i] =
            metrics_family(m, snap_families[i].name, snap_families[i].type,
                           snap_families[i].help);
    }
    m->safe_time =
        metrics_family(m, "queen_safe_time_seconds", METRIC_GAUGE,
                       "this node's safeTime (greatest applied stamp)");
    m->store_size = metrics_family(m, "queen_store_size_bytes", METRIC_GAUGE,
                                   "bytes of LMDB pages in use");
    m->store_records = metrics_family(m, "queen_store_records", METRIC_GAUGE,
                                      "records retained");
    m->store_partitions = metrics_family(m, "queen_store_partitions",
                                         METRIC_GAUGE, "partitions stored");
    m->store_queues =
        metrics_family(m, "queen_store_queues", METRIC_GAUGE, "queues stored");
    m->fetch_waiting = metrics_family(m, "queen_fetch_waiting", METRIC_GAUGE,
                                      "long-poll fetches waiting for records");
    m->fetch_rereads = metrics_family(
        m, "queen_fetch_long_poll_rereads_total", METRIC_COUNTER,
        "re-reads of waiting long polls after a partition they name changed");
    m->fetch_refused = metrics_family(
        m, "queen_fetch_long_poll_refused_total", METRIC_COUNTER,
        "long polls refused by a bound (reason: connection 429, node 503)");
    return m;
}

void metrics_free(struct metrics *m)
{
    free(m);
}

int metrics_family(struct metrics *m, const char *name, int type,
                   const char *help)
{
    for (size_t i = 0; i < m->n_families; i++) {
        ASSERT(strcmp(m->families[i].name, name) != 0);
    }
    ASSERT(m->n_families < METRICS_MAX_FAMILIES);
    m->families[m->n_families].name = name;
    m->families[m->n_families].help = help;
    m->families[m->n_families].type = type;
    return (int)m->n_families++;
}

/* Index of the sample (family, labels), or -1. */
static long metrics_find(const struct metrics *m, int family,
                         const char *labels)
{
    if (labels == NULL) {
        labels = "";
    }
    for (size_t i = 0; i < m->n_samples; i++) {
        const struct metric_sample *s = &m->samples[i];
        if (s->family == family && strcmp(s->labels, labels) == 0) {
            return (long)i;
        }
    }
    return -1;
}

static struct metric_sample *metrics_sample(struct metrics *m, int family,
                                            const char *labels)
{
    long i = metrics_find(m, family, labels);
    struct metric_sample *s;

    if (i >= 0) {
        return &m->samples[i];
    }
    if (labels == NULL) {
        labels = "";
    }
    if (m->n_samples == METRICS_MAX_SAMPLES ||
        strlen(labels) >= METRICS_LABELS_MAX) {
        m->dropped++;
        return NULL;
    }
    s = &m->samples[m->n_samples++];
    s->family = family;
    s->value = 0;
    memcpy(s->labels, labels, strlen(labels) + 1);
    return s;
}

void metrics_add(struct metrics *m, int family, const char *labels, double v)
{
    struct metric_sample *s = metrics_sample(m, family, labels);

    if (s != NULL) {
        s->value += v;
    }
}

void metrics_set(struct metrics *m, int family, const char *labels, double v)
{
    struct metric_sample *s = metrics_sample(m, family, labels);

    if (s != NULL) {
        s->value = v;
    }
}

double metrics_get(const struct metrics *m, int family, const char *labels)
{
    long i = metrics_find(m, family, labels);

    return i >= 0 ? m->samples[i].value : 0;
}

void metrics_push(struct metrics *m, uint64_t queued, uint64_t duplicates,
                  uint64_t bytes)
{
    if (m == NULL) {
        return;
    }
    metrics_add(m, m->push_requests, NULL, 1);
    metrics_add(m, m->push_records, NULL, (double)queued);
    metrics_add(m, m->push_duplicates, NULL, (double)duplicates);
    metrics_add(m, m->push_bytes, NULL, (double)bytes);
}

bool metrics_label_escape(const char *v, char *out, size_t n)
{
    size_t j = 0;

    for (; *v != '\0'; v++) {
        const char *rep = *v == '\\'   ? "\\\\"
                          : *v == '"'  ? "\\\""
                          : *v == '\n' ? "\\n"
                                       : NULL;
        size_t k = rep != NULL ? strlen(rep) : 1;

        if (j + k >= n) {
            out[j] = '\0';
            return false;
        }
        memcpy(out + j, rep != NULL ? rep : v, k);
        j += k;
    }
    out[j] = '\0';
    return true;
}

static int metrics_value(struct buf *out, double v, struct err *err)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        return buf_printf(out, err, " %" PRId64 "\n", (int64_t)v);
    }
    /* The shortest of 15 or 17 digits that reads back as v. */
    char t[40];
    snprintf(t, sizeof(t), "%.15g", v);
    if (strtod(t, NULL) != v) {
        snprintf(t, sizeof(t), "%.17g", v);
    }
    return buf_printf(out, err, " %s\n", t);
}

static int metrics_render_family(const struct metrics *m, int f,
                                 struct buf *out, struct err *err)
{
    const struct metric_family *fam = &m->families[f];
    bool is_any = false;

    for (size_t i = 0; i < m->n_samples; i++) {
        is_any = is_any || m->samples[i].family == f;
    }
    if (!is_any && fam->type == METRIC_GAUGE) {
        return 0;
    }
    if (buf_printf(out, err, "# HELP %s %s\n# TYPE %s %s\n", fam->name,
                   fam->help, fam->name,
                   fam->type == METRIC_COUNTER ? "counter" : "gauge") != 0) {
        return err->code;
    }
    if (!is_any) {
        return buf_printf(out, err, "%s 0\n", fam->name);
    }
    for (size_t i = 0; i < m->n_samples; i++) {
        const struct metric_sample *s = &m->samples[i];
        int rc;

        if (s->family != f) {
            continue;
        }
        rc = s->labels[0] != '\0'
                 ? buf_printf(out, err, "%s{%s}", fam->name, s->labels)
                 : buf_append_str(out, fam->name, err);
        if (rc != 0 || metrics_value(out, s->value, err) != 0) {
            return err->code;
        }
    }
    return 0;
}

int metrics_render(const struct metrics *m, struct buf *out, struct err *err)
{
    for (size_t f = 0; f < m->n_families; f++) {
        if (metrics_render_family(m, (int)f, out, err) != 0) {
            return err->code;
        }
    }
    return 0;
}

/* ---- queen_build_info and process_* ---- */

static int metrics_one(struct buf *out, const char *name, const char *type,
                       const char *help, double v, struct err *err)
{
    if (buf_printf(out, err, "# HELP %s %s\n# TYPE %s %s\n%s", name, help, name,
                   type, name) != 0) {
        return err->code;
    }
    return metrics_value(out, v, err);
}

int metrics_render_build(struct buf *out, struct err *err)
{
    char ver[64];

    metrics_label_escape(QUEEN_VERSION, ver, sizeof(ver));
    return buf_printf(out, err,
                      "# HELP queen_build_info always 1; the labels name "
                      "the build\n"
                      "# TYPE queen_build_info gauge\n"
                      "queen_build_info{version=\"%s\"} 1\n",
                      ver);
}

int metrics_render_process(const struct procstat *p, struct buf *out,
                           struct err *err)
{
    if (metrics_one(out, "process_cpu_seconds_total", "counter",
                    "user and system CPU time spent, in seconds",
                    p->cpu_seconds, err) != 0 ||
        metrics_one(out, "process_resident_memory_bytes", "gauge",
                    "resident memory size, in bytes", (double)p->resident_bytes,
                    err) != 0 ||
        metrics_one(out, "process_virtual_memory_bytes", "gauge",
                    "virtual memory size, in bytes", (double)p->virtual_bytes,
                    err) != 0 ||
        metrics_one(out, "process_open_fds", "gauge", "open file descriptors",
                    (double)p->open_fds, err) != 0 ||
        metrics_one(out, "process_max_fds", "gauge",
                    "the limit on open file descriptors (RLIMIT_NOFILE)",
                    (double)p->max_fds, err) != 0 ||
        metrics_one(out, "process_start_time_seconds", "gauge",
                    "start time of the process since the Unix epoch, in "
                    "seconds",
                    p->start_time_seconds, err) != 0) {
        return err->code;
    }
    return 0;
}

/* ---- GET /metrics and GET /metrics/prometheus ---- */

static void metrics_refresh(struct api *a)
{
    struct metrics *m = a->metrics;
    struct store_stats st;
    struct snapshot_stats ss;
    double snap[METRICS_SNAP_N];
    struct err err;
    uint64_t fwd = 0;
    uint64_t served = 0;

    if (a->node != NULL) {
        metrics_set(m, m->raft_applied, NULL,
                    (double)node_applied_index(a->node));
        metrics_set(m, m->raft_commit, NULL,
                    (double)node_commit_index(a->node));
        metrics_set(m, m->raft_is_leader, NULL,
                    node_role(a->node) == NODE_LEADER ? 1 : 0);
        metrics_set(m, m->raft_term, NULL, (double)node_term(a->node));
        node_forward_counts(a->node, &fwd, &served);
        metrics_set(m, m->raft_forwarded, NULL, (double)fwd);
        metrics_set(m, m->raft_forward_served, NULL, (double)served);
        metrics_set(m, m->raft_refused, NULL,
                    (double)node_refused_connections(a->node));
        snapshot_stats_get(&ss);
        snap[METRICS_SNAP_BEGUN] = (double)ss.begun;
        snap[METRICS_SNAP_TAKEN] = (double)ss.taken;
        snap[METRICS_SNAP_OPEN] = (double)snapshot_open_count();
        snap[METRICS_SNAP_SECONDS] = (double)ss.busy_us / 1e6;
        snap[METRICS_SNAP_BYTES] = (double)ss.last_bytes;
        snap[METRICS_SNAP_DUMPS] = (double)ss.dumps;
        snap[METRICS_SNAP_DUMP_SECONDS] = (double)ss.dump_busy_us / 1e6;
        snap[METRICS_SNAP_DUMP_BYTES] = (double)ss.dump_last_bytes;
        for (int i = 0; i < METRICS_SNAP_N; i++) {
            metrics_set(m, m->snap[i], NULL, snap[i]);
        }
    }
    metrics_set(m, m->fetch_waiting, NULL, (double)a->lp.n_parked);
    metrics_set(m, m->fetch_rereads, NULL, (double)a->n_rereads);
    metrics_set(m, m->fetch_refused, "reason=\"connection\"",
                (double)a->lp.n_refused_conn);
    metrics_set(m, m->fetch_refused, "reason=\"node\"",
                (double)a->lp.n_refused_node);
    if (a->store != NULL && store_stats(a->store, &st, &err) == 0) {
        metrics_set(m, m->safe_time, NULL, (double)st.safe_time / 1e6);
        metrics_set(m, m->store_size, NULL, (double)st.used_bytes);
        metrics_set(m, m->store_records, NULL, (double)st.n_records);
        metrics_set(m, m->store_partitions, NULL, (double)st.n_partitions);
        metrics_set(m, m->store_queues, NULL, (double)st.n_queues);
    }
}

void api_handle_metrics(struct http_req *req, void *arg)
{
    struct api *a = arg;
    struct procstat ps;
    struct buf out;
    struct err err;
    struct err perr;
    const struct auth_entry *e = req->principal;
    int rc;

    /* The exposition is the node's, every tenant's series in it: an
     * operator's token reads it, not one bound to a tenant. */
    if (e != NULL && e->is_bound) {
        api_respond_error(a, req, 403, "forbidden",
                          "the metrics are the whole node's: they need a "
                          "token bound to no tenant");
        return;
    }
    metrics_refresh(a);
    buf_init(&out, BUF_UNLIMITED);
    rc = metrics_render(a->metrics, &out, &err);
    if (rc == 0 && a->router != NULL) {
        rc = router_metrics(a->router, &out, &err);
    }
    if (rc == 0 && a->server != NULL) {
        rc = http_server_metrics(a->server, &out, &err);
    }
    if (rc == 0) {
        rc = metrics_render_build(&out, &err);
    }
    /* No /proc (another OS, a sandbox): the scrape goes on without the
     * process families rather than with figures that are not true. */
    if (rc == 0 && procstat_read(&ps, &perr) == 0) {
        rc = metrics_render_process(&ps, &out, &err);
    }
    if (rc == 0 && a->metrics_extra != NULL) {
        rc = a->metrics_extra(a->metrics_extra_arg, &out, &err);
    }
    if (rc != 0) {
        buf_free(&out);
        api_respond_err(a, req, &err);
        return;
    }
    {
        size_t len;
        char *body = buf_steal(&out, &len);
        http_respond_take(req, 200, "text/plain; version=0.0.4", body, len,
                          NULL);
    }
}
