/* The `s3` block of GET /status (docs/design/observability.md §1) rendered from
 * plain structs.
 *
 * The renderer sorts pointers to the caller's rows (queues by name, sinks
 * by tenant) and writes each key in the order of docs/design/observability.md
 * §1 with the JSON writer, so the jq projections of docs/s3-sink.md find every
 * field where they look. Secrets cannot appear: no struct here has a field for
 * one. */
#include "sink/status.h"

#include <stdlib.h>
#include <string.h>

#include "base/isotime.h"
#include "base/xalloc.h"

bool status_sink_ok(const struct status_sink *s)
{
    return s->health.ok && s->bucket.reachable != 0;
}

static void str_or_null(struct jw *w, const char *key, const char *s)
{
    jw_key(w, key);
    if (s != NULL) {
        jw_cstr(w, s);
    } else {
        jw_null(w);
    }
}

static void time_or_null(struct jw *w, const char *key, int64_t us)
{
    char t[32];

    jw_key(w, key);
    if (us == STATUS_NONE) {
        jw_null(w);
        return;
    }
    isotime_format_us(us, t);
    jw_cstr(w, t);
}

static void u64_key(struct jw *w, const char *key, uint64_t v)
{
    jw_key(w, key);
    jw_u64(w, v);
}

void status_render_queue(struct jw *w, const struct status_queue *q)
{
    jw_obj_begin(w);
    str_or_null(w, "name", q->name);
    jw_key(w, "ownedHere");
    jw_bool(w, q->owned_here);
    str_or_null(w, "heldBy", q->held_by);
    str_or_null(w, "state", q->state);
    jw_key(w, "k");
    jw_i64(w, q->k);
    time_or_null(w, "tEnd", q->t_end_us);
    time_or_null(w, "completeThrough", q->complete_through_us);
    time_or_null(w, "safeTime", q->safe_time_us);
    jw_key(w, "lagSeconds");
    if (q->has_lag) {
        jw_double(w, q->lag_seconds);
    } else {
        jw_null(w);
    }
    jw_key(w, "redo");
    jw_bool(w, q->redo);
    u64_key(w, "bufferedBytes", q->buffered_bytes);
    u64_key(w, "partitions", q->partitions);
    u64_key(w, "windowsCommitted", q->windows_committed);
    u64_key(w, "records", q->records);
    u64_key(w, "bytes", q->bytes);
    u64_key(w, "recordsLost", q->records_lost);
    jw_key(w, "lastError");
    if (q->error_at_us == STATUS_NONE) {
        jw_null(w);
    } else {
        jw_obj_begin(w);
        time_or_null(w, "at", q->error_at_us);
        str_or_null(w, "message",
                    q->error_message != NULL ? q->error_message : "");
        jw_obj_end(w);
    }
    jw_obj_end(w);
}

static void render_bucket(struct jw *w, const struct status_bucket *b)
{
    jw_key(w, "bucket");
    jw_obj_begin(w);
    jw_key(w, "reachable");
    if (b->reachable < 0) {
        jw_null(w);
    } else {
        jw_bool(w, b->reachable != 0);
    }
    str_or_null(w, "error", b->error);
    time_or_null(w, "checkedAt",
                 b->checked_at_ms == STATUS_NONE ? STATUS_NONE
                                                 : b->checked_at_ms * 1000);
    str_or_null(w, "name", b->name);
    str_or_null(w, "endpoint", b->endpoint);
    str_or_null(w, "region", b->region);
    str_or_null(w, "prefix", b->prefix);
    jw_obj_end(w);
}

static void render_health(struct jw *w, const struct health_verdict *v)
{
    jw_key(w, "health");
    jw_obj_begin(w);
    jw_key(w, "ok");
    jw_bool(w, v->ok);
    if (v->ok) {
        u64_key(w, "queues", v->queues);
    } else {
        jw_key(w, "queue");
        jw_cstr(w, v->queue);
        u64_key(w, "staleMs", v->stale_ms);
        u64_key(w, "limitMs", v->limit_ms);
    }
    jw_obj_end(w);
}

static void render_placement(struct jw *w, const struct status_placement *p)
{
    jw_key(w, "placement");
    jw_obj_begin(w);
    /* Key order as the product page prints it. */
    str_or_null(w, "givingBack", p->giving_back);
    u64_key(w, "held", p->held);
    u64_key(w, "nodes", p->nodes);
    u64_key(w, "queues", p->queues);
    u64_key(w, "share", p->share);
    jw_obj_end(w);
}

static void render_host_keys(struct jw *w, const struct status_sink *s)
{
    str_or_null(w, "tenant", s->tenant);
    str_or_null(w, "source", s->source);
    str_or_null(w, "cluster", s->cluster);
    str_or_null(w, "phase", s->phase);
    jw_key(w, "error");
    if (s->error != NULL) {
        size_t n = strlen(s->error);
        jw_str(w, s->error, n > STATUS_ERROR_MAX ? STATUS_ERROR_MAX : n);
    } else {
        jw_null(w);
    }
    u64_key(w, "restarts", s->restarts);
    str_or_null(w, "lastExit", s->last_exit);
    if (s->has_uptime) {
        u64_key(w, "uptimeMs", s->uptime_ms);
    }
    u64_key(w, "backoffMs", s->backoff_ms);
}

/* Sort handles: a struct, so the arrays are not arrays of bare pointers. */
struct qref {
    const struct status_queue *q;
};

struct sref {
    const struct status_sink *s;
};

static int by_queue_name(const void *a, const void *b)
{
    const struct qref *x = a;
    const struct qref *y = b;

    return strcmp(x->q->name != NULL ? x->q->name : "",
                  y->q->name != NULL ? y->q->name : "");
}

static void render_queues(struct jw *w, const struct status_sink *s)
{
    struct qref *order = xcalloc(s->n_queues + 1, sizeof(struct qref));

    for (size_t i = 0; i < s->n_queues; i++) {
        order[i].q = &s->queues[i];
    }
    qsort(order, s->n_queues, sizeof(struct qref), by_queue_name);
    jw_key(w, "queues");
    jw_arr_begin(w);
    for (size_t i = 0; i < s->n_queues; i++) {
        status_render_queue(w, order[i].q);
    }
    jw_arr_end(w);
    free(order);
}

void status_render_sink(struct jw *w, const struct status_sink *s)
{
    jw_obj_begin(w);
    render_host_keys(w, s);
    if (s->host_only) {
        jw_obj_end(w);
        return;
    }
    jw_key(w, "ok");
    jw_bool(w, status_sink_ok(s));
    str_or_null(w, "sink", s->sink);
    str_or_null(w, "instance", s->instance);
    str_or_null(w, "version", "2.0.0");
    jw_key(w, "running");
    jw_bool(w, s->running);
    render_bucket(w, &s->bucket);
    str_or_null(w, "format", s->format);
    str_or_null(w, "compression", s->compression);
    str_or_null(w, "layout", s->layout);
    str_or_null(w, "align", s->align);
    render_health(w, &s->health);
    render_placement(w, &s->placement);
    jw_key(w, "memory");
    jw_obj_begin(w);
    u64_key(w, "bufferedBytes", s->buffered_bytes);
    u64_key(w, "limitBytes", s->limit_bytes);
    jw_obj_end(w);
    render_queues(w, s);
    jw_obj_end(w);
}

static int by_tenant(const void *a, const void *b)
{
    const struct sref *x = a;
    const struct sref *y = b;

    return strcmp(x->s->tenant != NULL ? x->s->tenant : "",
                  y->s->tenant != NULL ? y->s->tenant : "");
}

/* "stages": {"cpuNs": {"read": n, ...}, "recordsRead": n}. */
static void render_stages(struct jw *w, const struct stages *s)
{
    jw_key(w, "stages");
    jw_obj_begin(w);
    jw_key(w, "cpuNs");
    jw_obj_begin(w);
    for (int i = 0; i < STAGES_COUNT; i++) {
        u64_key(w, stages_name((enum stages_stage)i),
                stages_ns(s, (enum stages_stage)i));
    }
    jw_obj_end(w);
    u64_key(w, "recordsRead", stages_records_read(s));
    jw_obj_end(w);
}

int status_render(const struct status_node *n, struct buf *out, struct err *err)
{
    struct sref *order = xcalloc(n->n_sinks + 1, sizeof(struct sref));
    struct jw w;

    for (size_t i = 0; i < n->n_sinks; i++) {
        order[i].s = &n->sinks[i];
    }
    qsort(order, n->n_sinks, sizeof(struct sref), by_tenant);
    jw_init(&w, out);
    jw_obj_begin(&w);
    str_or_null(&w, "mode", "in-process");
    str_or_null(&w, "phase", n->phase);
    u64_key(&w, "threads", n->threads);
    jw_key(&w, "controlPlane");
    jw_obj_begin(&w);
    str_or_null(&w, "error", n->control_plane_error);
    jw_obj_end(&w);
    if (n->stages != NULL) {
        render_stages(&w, n->stages);
    }
    jw_key(&w, "sinks");
    jw_arr_begin(&w);
    for (size_t i = 0; i < n->n_sinks; i++) {
        status_render_sink(&w, order[i].s);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    free(order);
    return jw_finish(&w, err);
}
