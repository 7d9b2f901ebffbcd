/* Request counters of one S3 client by (operation, HTTP status), status 0
 * for transport failures: the samples of queen_s3_s3_requests_total
 * (docs/design/observability.md §2). Every attempt counts, retries included.
 * Thread-safe: the sink's threads share one client. */
#ifndef QUEEN_S3_METRICS_H
#define QUEEN_S3_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

#define S3_METRICS_FAMILY "queen_s3_s3_requests_total"

enum s3_op {
    S3_OP_PUT = 0,
    S3_OP_GET,
    S3_OP_HEAD,
    S3_OP_LIST,
    S3_OP_DELETE,
    S3_OP_MULTIPART_CREATE,
    S3_OP_MULTIPART_PART,
    S3_OP_MULTIPART_COMPLETE,
    S3_OP_MULTIPART_ABORT,
    S3_OP_COUNT
};

/* "put", "get", ..., "multipart_abort". */
const char *s3_op_name(enum s3_op op);

struct s3_metric_row {
    enum s3_op op;
    int code;
    uint64_t count;
};

struct s3_metrics {
    pthread_mutex_t mu;
    struct s3_metric_row *rows; /* owned; unsorted */
    size_t n_rows;
    size_t cap;
    /* Writes (PUT and the multipart steps) that failed in a row since the
     * last one that succeeded, and the last one's code (0: no answer). */
    uint32_t write_streak;
    int write_streak_code;
    /* The last of them was refused: a 403, or a 404 on a PUT or a
     * multipart start (no such bucket; a 404 on a later multipart step is
     * the upload's, not the bucket's). */
    bool is_write_refused;
    /* Wall-clock ms of the last write's answer or failure (0: none yet):
     * when the verdict above was last checked (the status's checkedAt). */
    int64_t write_at_ms;
};

void s3_metrics_init(struct s3_metrics *m);
void s3_metrics_free(struct s3_metrics *m);
void s3_metrics_add(struct s3_metrics *m, enum s3_op op, int code);
uint64_t s3_metrics_get(struct s3_metrics *m, enum s3_op op, int code);
/* How many writes failed in a row since the last that succeeded (a
 * transport failure or an answer of 400 or above); *last_code gets the
 * last one's status (0: no answer). The status's bucket.reachable turns
 * false on a streak (docs/s3-sink.md). */
uint32_t s3_metrics_write_streak(struct s3_metrics *m, int *last_code);
/* The streak's last write was refused (is_write_refused). */
bool s3_metrics_write_refused(struct s3_metrics *m);
/* write_at_ms: when the last write was answered or failed, 0 when none
 * was. */
int64_t s3_metrics_write_at_ms(struct s3_metrics *m);
/* Sum over every row of op (every op when op == S3_OP_COUNT). */
uint64_t s3_metrics_total(struct s3_metrics *m, enum s3_op op);

/* Copy up to cap rows into out, sorted by (op name, code text); returns the
 * number of rows there are (may exceed cap). */
size_t s3_metrics_rows(struct s3_metrics *m, struct s3_metric_row *out,
                       size_t cap);

/* Append one sample line per row, sorted as s3_metrics_rows:
 *   queen_s3_s3_requests_total{<label_prefix>op="put",code="200"} 1
 * label_prefix is NULL or empty for the default tenant, else e.g.
 * `tenant="acme",` (already escaped, ending with a comma). */
int s3_metrics_render(struct s3_metrics *m, const char *label_prefix,
                      struct buf *out, struct err *err);

#endif
