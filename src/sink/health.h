/* The health verdict (docs/design/window.md §13): is any watched queue's lake
 * staler than the limit? Pure and thread-safe: time is an argument (a monotonic
 * millisecond clock), a mutex guards the table.
 *   (1) limit_ms = max(3 x maxWindowMs, 30000).
 *   (2) lag_ms(now) = last reported lag + (now - at); with no report yet,
 *       now - registered-at. Reports are monotone: an older one is ignored.
 *   (3) Stale iff some queue's lag_ms > limit_ms (equal is healthy); the
 *       first stale queue by name (byte order) is the one reported. */
#ifndef QUEEN_SINK_HEALTH_H
#define QUEEN_SINK_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

#define HEALTH_STALE_WINDOWS 3
#define HEALTH_MIN_STALE_MS  30000
#define HEALTH_NAME_MAX      512

struct health;

/* Returns owned; free with health_free(). */
struct health *health_new(uint64_t max_window_ms);
void health_free(struct health *h);

uint64_t health_limit_ms(uint64_t max_window_ms);

/* Start watching queue (copied) at now_ms; a watched queue stays as it is. */
void health_watch(struct health *h, const char *queue, int64_t now_ms);
/* Stop watching queue (drained, held elsewhere, missing, fenced by another
 * instance); a queue stuck here for a local reason stays watched. */
void health_forget(struct health *h, const char *queue);
/* A lag report taken at at_ms; lag_us < 0 counts as 0. has_lag false (no
 * lag known) changes nothing; so does a report older than the last. */
void health_report(struct health *h, const char *queue, bool has_lag,
                   int64_t lag_us, int64_t at_ms);
/* queue's lag at now_ms by (2), in ms, into *lag_ms: what the verdict
 * judges it by. false (and *lag_ms untouched) when queue is not watched. */
bool health_lag(struct health *h, const char *queue, int64_t now_ms,
                uint64_t *lag_ms);

struct health_verdict {
    bool ok;
    size_t queues;               /* watched queues */
    char queue[HEALTH_NAME_MAX]; /* the first stale one, when !ok */
    uint64_t stale_ms;
    uint64_t limit_ms;
};

void health_check(struct health *h, int64_t now_ms, struct health_verdict *v);

/* {"ok":true,"queues":N} or {"ok":false,"queue":…,"staleMs":n,"limitMs":n}
 * appended to out. */
int health_json(const struct health_verdict *v, struct buf *out,
                struct err *err);

#endif
