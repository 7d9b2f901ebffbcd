/* Request counters of one S3 client by (operation, HTTP status).
 *
 * A client sees a handful of distinct (op, code) pairs, so the table is a
 * small array scanned under a mutex; rendering sorts a copy. */
#include "s3/metrics.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/xalloc.h"

static const char *const op_names[S3_OP_COUNT] = {
    "put",
    "get",
    "head",
    "list",
    "delete",
    "multipart_create",
    "multipart_part",
    "multipart_complete",
    "multipart_abort",
};

const char *s3_op_name(enum s3_op op)
{
    return (unsigned)op < S3_OP_COUNT ? op_names[op] : "unknown";
}

void s3_metrics_init(struct s3_metrics *m)
{
    pthread_mutex_init(&m->mu, NULL);
    m->rows = NULL;
    m->n_rows = 0;
    m->cap = 0;
    m->write_streak = 0;
    m->write_streak_code = 0;
    m->is_write_refused = false;
    m->write_at_ms = 0;
}

void s3_metrics_free(struct s3_metrics *m)
{
    pthread_mutex_destroy(&m->mu);
    free(m->rows);
    m->rows = NULL;
    m->n_rows = 0;
    m->cap = 0;
}

/* The requests that carry the sink's data: what a streak counts. */
static bool is_write(enum s3_op op)
{
    return op == S3_OP_PUT || op == S3_OP_MULTIPART_CREATE ||
           op == S3_OP_MULTIPART_PART || op == S3_OP_MULTIPART_COMPLETE;
}

void s3_metrics_add(struct s3_metrics *m, enum s3_op op, int code)
{
    size_t i;

    ASSERT(op >= 0 && op < S3_OP_COUNT);
    pthread_mutex_lock(&m->mu);
    for (i = 0; i < m->n_rows; i++) {
        if (m->rows[i].op == op && m->rows[i].code == code) {
            break;
        }
    }
    if (i == m->n_rows) {
        if (m->n_rows == m->cap) {
            m->cap = m->cap == 0 ? 16 : m->cap * 2;
            m->rows = xrealloc(m->rows, m->cap * sizeof(*m->rows));
        }
        m->rows[i].op = op;
        m->rows[i].code = code;
        m->rows[i].count = 0;
        m->n_rows++;
    }
    m->rows[i].count++;
    if (is_write(op)) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        m->write_at_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        if (code >= 200 && code < 300) {
            m->write_streak = 0;
            m->is_write_refused = false;
        } else if (code == 0 || code >= 400) {
            m->write_streak += m->write_streak < UINT32_MAX;
            m->write_streak_code = code;
            m->is_write_refused =
                code == 403 || (code == 404 && (op == S3_OP_PUT ||
                                                op == S3_OP_MULTIPART_CREATE));
        }
    }
    pthread_mutex_unlock(&m->mu);
}

bool s3_metrics_write_refused(struct s3_metrics *m)
{
    bool refused;

    pthread_mutex_lock(&m->mu);
    refused = m->write_streak > 0 && m->is_write_refused;
    pthread_mutex_unlock(&m->mu);
    return refused;
}

int64_t s3_metrics_write_at_ms(struct s3_metrics *m)
{
    int64_t at;

    pthread_mutex_lock(&m->mu);
    at = m->write_at_ms;
    pthread_mutex_unlock(&m->mu);
    return at;
}

uint32_t s3_metrics_write_streak(struct s3_metrics *m, int *last_code)
{
    uint32_t n;

    pthread_mutex_lock(&m->mu);
    n = m->write_streak;
    *last_code = m->write_streak_code;
    pthread_mutex_unlock(&m->mu);
    return n;
}

uint64_t s3_metrics_get(struct s3_metrics *m, enum s3_op op, int code)
{
    uint64_t v = 0;

    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n_rows; i++) {
        if (m->rows[i].op == op && m->rows[i].code == code) {
            v = m->rows[i].count;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return v;
}

uint64_t s3_metrics_total(struct s3_metrics *m, enum s3_op op)
{
    uint64_t v = 0;

    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n_rows; i++) {
        if (op == S3_OP_COUNT || m->rows[i].op == op) {
            v += m->rows[i].count;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return v;
}

static int row_cmp(const void *a, const void *b)
{
    const struct s3_metric_row *x = a;
    const struct s3_metric_row *y = b;
    char cx[16];
    char cy[16];
    int c = strcmp(op_names[x->op], op_names[y->op]);

    if (c != 0) {
        return c;
    }
    snprintf(cx, sizeof(cx), "%d", x->code);
    snprintf(cy, sizeof(cy), "%d", y->code);
    return strcmp(cx, cy); /* labels sort as text */
}

size_t s3_metrics_rows(struct s3_metrics *m, struct s3_metric_row *out,
                       size_t cap)
{
    size_t n;

    pthread_mutex_lock(&m->mu);
    n = m->n_rows;
    if (cap >= n && n > 0) {
        memcpy(out, m->rows, n * sizeof(*out));
    }
    pthread_mutex_unlock(&m->mu);
    if (cap >= n && n > 1) {
        qsort(out, n, sizeof(*out), row_cmp);
    }
    return n;
}

int s3_metrics_render(struct s3_metrics *m, const char *label_prefix,
                      struct buf *out, struct err *err)
{
    struct s3_metric_row *rows = NULL;
    size_t n = s3_metrics_rows(m, NULL, 0);
    int rc = 0;

    /* Rows only grow, so retry until the copy holds them all. */
    for (;;) {
        rows = xrealloc(rows, (n + 1) * sizeof(*rows));
        size_t got = s3_metrics_rows(m, rows, n + 1);
        if (got <= n + 1) {
            n = got;
            break;
        }
        n = got;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = buf_printf(
            out, err, "%s{%sop=\"%s\",code=\"%d\"} %llu\n", S3_METRICS_FAMILY,
            label_prefix == NULL ? "" : label_prefix, op_names[rows[i].op],
            rows[i].code, (unsigned long long)rows[i].count);
    }
    free(rows);
    return rc;
}
