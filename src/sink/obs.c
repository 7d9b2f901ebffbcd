/* Sink observability (docs/design/observability.md §2): the queen_s3_*
 * registry, its text exposition, and the log Sampler.
 *
 * A series is (family, label text) with a value, or bucket counts for the
 * two histograms. The label text is built once when the series is created
 * (tenant first, then queue, then the family's extra label), so lookups and
 * the render's sort compare one string. The registry is a flat array under
 * one mutex: a node has a few series per running queue, and a scrape is
 * rare next to the updates, which are a linear find and an add. */
#include "sink/obs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

enum kind { GAUGE, COUNTER, HISTOGRAM };

struct fam {
    const char *name;
    enum kind kind;
    bool tenant; /* may carry tenant= */
    bool queue;
    const char *extra; /* extra label name or NULL */
    const double *buckets;
    const char *help;
};

static const double rec_b[OBS_BUCKETS] = {1,     10,     100,     1000,
                                          10000, 100000, 1000000, 10000000};
static const double byte_b[OBS_BUCKETS] = {1048576,   4194304,   16777216,
                                           67108864,  134217728, 268435456,
                                           536870912, 1073741824};

static const struct fam fams[OBS_FAMILY_COUNT] = {
    {"queen_s3_lag_seconds", GAUGE, true, true, NULL, NULL,
     "Seconds this node's safeTime is ahead of the stamp the queue's lake is "
     "complete through \u2014 the SLO"},
    {"queen_s3_safe_lag_seconds", GAUGE, false, false, NULL, NULL,
     "Seconds between this node's wall clock and its safeTime"},
    {"queen_s3_windows_committed_total", COUNTER, true, true, NULL, NULL,
     "Windows committed to the lake"},
    {"queen_s3_records_written_total", COUNTER, true, true, NULL, NULL,
     "Records written into objects"},
    {"queen_s3_bytes_written_total", COUNTER, true, true, "format", NULL,
     "Object bytes written, after compression"},
    {"queen_s3_records_lost_total", COUNTER, true, true, NULL, NULL,
     "Records that went away before the sink read them (plan \u00a74.6)"},
    {"queen_s3_window_records", HISTOGRAM, true, false, NULL, rec_b,
     "Records per window"},
    {"queen_s3_window_bytes", HISTOGRAM, true, false, NULL, byte_b,
     "Object bytes per window"},
    {"queen_s3_buffer_bytes", GAUGE, false, false, NULL, NULL,
     "Buffered record bytes across every queue"},
    {"queen_s3_fetch_calls_total", COUNTER, true, true, "result", NULL,
     "Fetch calls into the broker"},
    {"queen_s3_discovery_partitions", GAUGE, true, true, NULL, NULL,
     "Partitions of the queue the last full discovery sweep enumerated, over "
     "all its pages"},
    {"queen_s3_s3_requests_total", COUNTER, true, false, NULL, NULL,
     "S3 API requests"},
    {"queen_s3_commit_precondition_lost_total", COUNTER, true, false, NULL,
     NULL, "KV commit batches a lost precondition rolled back"},
    {"queen_s3_checkpoint_age_windows", GAUGE, true, true, NULL, NULL,
     "Windows committed since the last position checkpoint"},
    {"queen_s3_queues_given_back_total", COUNTER, true, false, NULL, NULL,
     "Queues this node gave back so a node below its fair share could take "
     "them"},
    {"queen_s3_stage_cpu_seconds_total", COUNTER, false, false, "stage", NULL,
     "Thread CPU seconds the sink spent per stage of a record's way to the "
     "lake"},
};

struct series {
    enum obs_family f;
    char *tenant; /* NULL: default tenant or no tenant label */
    char *queue;  /* NULL: no queue label */
    char *labels; /* rendered, without braces */
    double value;
    uint64_t counts[OBS_BUCKETS];
    double sum;
    uint64_t count;
};

struct s3src {
    char *tenant; /* NULL: default */
    struct s3_metrics *m;
};

struct obs {
    pthread_mutex_t mu;
    struct series *s;
    size_t n, cap;
    struct s3src *s3;
    size_t n_s3;
    struct stages stages; /* atomic: read without mu */
};

struct stages *obs_stages(struct obs *o)
{
    return &o->stages;
}

const char *obs_family_name(enum obs_family f)
{
    return (size_t)f < OBS_FAMILY_COUNT ? fams[f].name : "";
}

struct obs *obs_new(void)
{
    struct obs *o = xcalloc(1, sizeof(*o));

    pthread_mutex_init(&o->mu, NULL);
    return o;
}

static void series_free(struct series *s)
{
    free(s->tenant);
    free(s->queue);
    free(s->labels);
}

void obs_free(struct obs *o)
{
    if (o == NULL) {
        return;
    }
    for (size_t i = 0; i < o->n; i++) {
        series_free(&o->s[i]);
    }
    for (size_t i = 0; i < o->n_s3; i++) {
        free(o->s3[i].tenant);
    }
    free(o->s);
    free(o->s3);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

int obs_escape_label(struct buf *out, const char *s, struct err *err)
{
    for (; *s != '\0'; s++) {
        const char *e = *s == '\\'   ? "\\\\"
                        : *s == '"'  ? "\\\""
                        : *s == '\n' ? "\\n"
                                     : NULL;
        int rc = e != NULL ? buf_append_str(out, e, err)
                           : buf_append_byte(out, *s, err);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static bool is_default(const char *tenant)
{
    return tenant == NULL || tenant[0] == '\0';
}

static void add_label(struct buf *b, const char *name, const char *v)
{
    struct err err;

    if (b->len > 0) {
        buf_append_byte(b, ',', &err);
    }
    buf_printf(b, &err, "%s=\"", name);
    obs_escape_label(b, v, &err);
    buf_append_byte(b, '"', &err);
}

static char *make_labels(enum obs_family f, const char *tenant,
                         const char *queue, const char *extra)
{
    const struct fam *m = &fams[f];
    struct buf b;
    size_t n;

    buf_init(&b, BUF_UNLIMITED);
    if (m->tenant && !is_default(tenant)) {
        add_label(&b, "tenant", tenant);
    }
    if (m->queue) {
        add_label(&b, "queue", queue != NULL ? queue : "");
    }
    if (m->extra != NULL) {
        add_label(&b, m->extra, extra != NULL ? extra : "");
    }
    if (b.data == NULL) {
        return xstrdup("");
    }
    return buf_steal(&b, &n);
}

/* The series for (f, labels), created when create is set. Locked. */
static struct series *lookup(struct obs *o, enum obs_family f,
                             const char *tenant, const char *queue,
                             const char *extra, bool create)
{
    char *labels = make_labels(f, tenant, queue, extra);
    struct series *s = NULL;

    for (size_t i = 0; i < o->n && s == NULL; i++) {
        if (o->s[i].f == f && strcmp(o->s[i].labels, labels) == 0) {
            s = &o->s[i];
        }
    }
    if (s != NULL || !create) {
        free(labels);
        return s;
    }
    if (o->n == o->cap) {
        o->cap = o->cap == 0 ? 32 : o->cap * 2;
        o->s = xrealloc(o->s, o->cap * sizeof(*o->s));
    }
    s = &o->s[o->n++];
    *s = (struct series){.f = f, .labels = labels};
    s->tenant = fams[f].tenant && !is_default(tenant) ? xstrdup(tenant) : NULL;
    s->queue = fams[f].queue && queue != NULL ? xstrdup(queue) : NULL;
    return s;
}

void obs_gauge_set(struct obs *o, enum obs_family f, const char *tenant,
                   const char *queue, double v)
{
    ASSERT((size_t)f < OBS_FAMILY_COUNT && fams[f].kind == GAUGE);
    pthread_mutex_lock(&o->mu);
    lookup(o, f, tenant, queue, NULL, true)->value = v;
    pthread_mutex_unlock(&o->mu);
}

void obs_counter_add(struct obs *o, enum obs_family f, const char *tenant,
                     const char *queue, const char *extra, double v)
{
    ASSERT((size_t)f < OBS_FAMILY_COUNT && fams[f].kind == COUNTER &&
           f != OBS_S3_REQUESTS && f != OBS_STAGE_CPU_SECONDS);
    pthread_mutex_lock(&o->mu);
    lookup(o, f, tenant, queue, extra, true)->value += v;
    pthread_mutex_unlock(&o->mu);
}

void obs_observe(struct obs *o, enum obs_family f, const char *tenant, double v)
{
    ASSERT((size_t)f < OBS_FAMILY_COUNT && fams[f].kind == HISTOGRAM);
    pthread_mutex_lock(&o->mu);
    struct series *s = lookup(o, f, tenant, NULL, NULL, true);
    for (size_t i = 0; i < OBS_BUCKETS; i++) {
        if (v <= fams[f].buckets[i]) {
            s->counts[i]++;
            break;
        }
    }
    s->sum += v;
    s->count++;
    pthread_mutex_unlock(&o->mu);
}

static void remove_at(struct obs *o, size_t i)
{
    series_free(&o->s[i]);
    o->s[i] = o->s[--o->n];
}

void obs_gauge_remove(struct obs *o, enum obs_family f, const char *tenant,
                      const char *queue)
{
    pthread_mutex_lock(&o->mu);
    struct series *s = lookup(o, f, tenant, queue, NULL, false);
    if (s != NULL) {
        remove_at(o, (size_t)(s - o->s));
    }
    pthread_mutex_unlock(&o->mu);
}

void obs_queue_stopped(struct obs *o, const char *tenant, const char *queue)
{
    obs_gauge_remove(o, OBS_LAG_SECONDS, tenant, queue);
    obs_gauge_remove(o, OBS_DISCOVERY_PARTITIONS, tenant, queue);
    obs_gauge_remove(o, OBS_CHECKPOINT_AGE_WINDOWS, tenant, queue);
}

static bool same_tenant(const char *a, const char *b)
{
    return is_default(a) ? is_default(b) : !is_default(b) && strcmp(a, b) == 0;
}

void obs_tenant_removed(struct obs *o, const char *tenant)
{
    pthread_mutex_lock(&o->mu);
    for (size_t i = o->n; i-- > 0;) {
        if (fams[o->s[i].f].tenant && same_tenant(o->s[i].tenant, tenant)) {
            remove_at(o, i);
        }
    }
    for (size_t i = o->n_s3; i-- > 0;) {
        if (same_tenant(o->s3[i].tenant, tenant)) {
            free(o->s3[i].tenant);
            o->s3[i] = o->s3[--o->n_s3];
        }
    }
    pthread_mutex_unlock(&o->mu);
}

void obs_set_s3(struct obs *o, const char *tenant, struct s3_metrics *m)
{
    pthread_mutex_lock(&o->mu);
    size_t i = 0;
    while (i < o->n_s3 && !same_tenant(o->s3[i].tenant, tenant)) {
        i++;
    }
    if (i == o->n_s3 && m != NULL) {
        o->s3 = xrealloc(o->s3, (o->n_s3 + 1) * sizeof(*o->s3));
        o->s3[o->n_s3++] = (struct s3src){
            .tenant = is_default(tenant) ? NULL : xstrdup(tenant), .m = m};
    } else if (i < o->n_s3 && m != NULL) {
        o->s3[i].m = m;
    } else if (i < o->n_s3) {
        free(o->s3[i].tenant);
        o->s3[i] = o->s3[--o->n_s3];
    }
    pthread_mutex_unlock(&o->mu);
}

void obs_format_number(double v, char out[40])
{
    if (isnan(v)) {
        snprintf(out, 40, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, 40, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(out, 40, "%lld", (long long)v);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(out, 40, "%.*g", p, v);
        if (strtod(out, NULL) == v) {
            return;
        }
    }
}

/* A sort handle: a struct, so the array is not one of bare pointers. */
struct sref {
    const struct series *s;
};

static int by_labels(const void *a, const void *b)
{
    const struct sref *x = a;
    const struct sref *y = b;

    return strcmp(x->s->labels, y->s->labels);
}

static int by_s3_tenant(const void *a, const void *b)
{
    const struct s3src *x = a;
    const struct s3src *y = b;

    return strcmp(x->tenant != NULL ? x->tenant : "",
                  y->tenant != NULL ? y->tenant : "");
}

static void sample(struct buf *out, const char *name, const char *suffix,
                   const char *labels, const char *le, double v)
{
    char num[40];
    struct err err;
    bool braces = labels[0] != '\0' || le != NULL;

    obs_format_number(v, num);
    buf_printf(out, &err, "%s%s%s%s%s%s%s%s%s %s\n", name, suffix,
               braces ? "{" : "", labels,
               le != NULL && labels[0] != '\0' ? "," : "",
               le != NULL ? "le=\"" : "", le != NULL ? le : "",
               le != NULL ? "\"" : "", braces ? "}" : "", num);
}

static void render_histogram(struct buf *out, const struct fam *m,
                             const struct series *s)
{
    uint64_t cum = 0;
    char le[40];

    for (size_t i = 0; i < OBS_BUCKETS; i++) {
        cum += s->counts[i];
        obs_format_number(m->buckets[i], le);
        sample(out, m->name, "_bucket", s->labels, le, (double)cum);
    }
    sample(out, m->name, "_bucket", s->labels, "+Inf", (double)s->count);
    sample(out, m->name, "_sum", s->labels, NULL, s->sum);
    sample(out, m->name, "_count", s->labels, NULL, (double)s->count);
}

static int render_s3(struct obs *o, struct buf *out, struct err *err)
{
    if (o->n_s3 > 1) {
        qsort(o->s3, o->n_s3, sizeof(*o->s3), by_s3_tenant);
    }
    for (size_t i = 0; i < o->n_s3; i++) {
        struct buf prefix;
        int rc;

        buf_init(&prefix, BUF_UNLIMITED);
        if (o->s3[i].tenant != NULL) {
            buf_append_str(&prefix, "tenant=\"", err);
            obs_escape_label(&prefix, o->s3[i].tenant, err);
            buf_append_str(&prefix, "\",", err);
        }
        rc = s3_metrics_render(o->s3[i].m, prefix.data, out, err);
        buf_free(&prefix);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static void render_stages(const struct obs *o, struct buf *out)
{
    const struct fam *m = &fams[OBS_STAGE_CPU_SECONDS];

    for (int i = 0; i < STAGES_COUNT; i++) {
        char labels[64];
        snprintf(labels, sizeof(labels), "stage=\"%s\"",
                 stages_name((enum stages_stage)i));
        sample(out, m->name, "", labels, NULL,
               (double)stages_ns(&o->stages, (enum stages_stage)i) / 1e9);
    }
}

static void render_family(struct obs *o, enum obs_family f, struct sref *tmp,
                          struct buf *out)
{
    const struct fam *m = &fams[f];
    size_t k = 0;

    for (size_t i = 0; i < o->n; i++) {
        if (o->s[i].f == f) {
            tmp[k++].s = &o->s[i];
        }
    }
    if (k > 1) {
        qsort(tmp, k, sizeof(struct sref), by_labels);
    }
    for (size_t i = 0; i < k; i++) {
        if (m->kind == HISTOGRAM) {
            render_histogram(out, m, tmp[i].s);
        } else {
            sample(out, m->name, "", tmp[i].s->labels, NULL, tmp[i].s->value);
        }
    }
}

int obs_render(struct obs *o, struct buf *out, struct err *err)
{
    static const char *const kinds[] = {"gauge", "counter", "histogram"};
    int rc = 0;

    pthread_mutex_lock(&o->mu);
    struct sref *tmp = xcalloc(o->n + 1, sizeof(struct sref));
    for (int f = 0; f < OBS_FAMILY_COUNT && rc == 0; f++) {
        const struct fam *m = &fams[f];

        rc = buf_printf(out, err, "# HELP %s %s\n# TYPE %s %s\n", m->name,
                        m->help, m->name, kinds[m->kind]);
        if (rc == 0 && f == OBS_S3_REQUESTS) {
            rc = render_s3(o, out, err);
        } else if (rc == 0 && f == OBS_STAGE_CPU_SECONDS) {
            render_stages(o, out);
        } else if (rc == 0) {
            render_family(o, (enum obs_family)f, tmp, out);
        }
    }
    free(tmp);
    pthread_mutex_unlock(&o->mu);
    if (rc == 0 && out->max != BUF_UNLIMITED && out->len + 1 >= out->max) {
        return err_set(err, ERR_TOO_BIG, "metrics exposition: buffer cap");
    }
    return rc;
}

void obs_sampler_init(struct obs_sampler *s, int64_t interval_ms)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    s->interval_ms = interval_ms;
}

void obs_sampler_destroy(struct obs_sampler *s)
{
    pthread_mutex_destroy(&s->mu);
}

bool obs_sampler_tick(struct obs_sampler *s, int64_t now_ms,
                      uint64_t *suppressed)
{
    bool emit;

    pthread_mutex_lock(&s->mu);
    emit = !s->has_last || now_ms - s->last_ms >= s->interval_ms;
    if (emit) {
        *suppressed = s->suppressed;
        s->suppressed = 0;
        s->has_last = true;
        s->last_ms = now_ms;
    } else {
        *suppressed = 0;
        s->suppressed++;
    }
    pthread_mutex_unlock(&s->mu);
    return emit;
}
