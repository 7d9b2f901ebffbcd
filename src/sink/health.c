/* The health verdict (docs/design/window.md §13): is any watched queue's lake
 * staler than the limit?
 *
 * A small array of watched queues under one mutex; the sink watches a few
 * hundred queues at most, so a verdict is a linear pass. Clock values are the
 * caller's monotonic milliseconds; a clock that seems to go backwards adds
 * no age (never negative). */
#include "sink/health.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/xalloc.h"

struct watch {
    char *queue;
    int64_t registered_ms;
    bool has_report;
    uint64_t lag_ms;
    int64_t at_ms;
};

struct health {
    pthread_mutex_t mu;
    uint64_t limit_ms;
    struct watch *w;
    size_t n, cap;
};

uint64_t health_limit_ms(uint64_t max_window_ms)
{
    uint64_t l = max_window_ms * HEALTH_STALE_WINDOWS;

    return l > HEALTH_MIN_STALE_MS ? l : HEALTH_MIN_STALE_MS;
}

struct health *health_new(uint64_t max_window_ms)
{
    struct health *h = xcalloc(1, sizeof(*h));

    pthread_mutex_init(&h->mu, NULL);
    h->limit_ms = health_limit_ms(max_window_ms);
    return h;
}

void health_free(struct health *h)
{
    if (h == NULL) {
        return;
    }
    for (size_t i = 0; i < h->n; i++) {
        free(h->w[i].queue);
    }
    free(h->w);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

static struct watch *find(struct health *h, const char *queue)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->w[i].queue, queue) == 0) {
            return &h->w[i];
        }
    }
    return NULL;
}

void health_watch(struct health *h, const char *queue, int64_t now_ms)
{
    pthread_mutex_lock(&h->mu);
    if (find(h, queue) == NULL) {
        if (h->n == h->cap) {
            h->cap = h->cap == 0 ? 8 : h->cap * 2;
            h->w = xrealloc(h->w, h->cap * sizeof(*h->w));
        }
        h->w[h->n++] =
            (struct watch){.queue = xstrdup(queue), .registered_ms = now_ms};
    }
    pthread_mutex_unlock(&h->mu);
}

void health_forget(struct health *h, const char *queue)
{
    pthread_mutex_lock(&h->mu);
    struct watch *w = find(h, queue);
    if (w != NULL) {
        free(w->queue);
        *w = h->w[--h->n];
    }
    pthread_mutex_unlock(&h->mu);
}

void health_report(struct health *h, const char *queue, bool has_lag,
                   int64_t lag_us, int64_t at_ms)
{
    if (!has_lag) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    struct watch *w = find(h, queue);
    if (w != NULL && (!w->has_report || at_ms >= w->at_ms)) {
        w->has_report = true;
        w->lag_ms = lag_us > 0 ? (uint64_t)lag_us / 1000 : 0;
        w->at_ms = at_ms;
    }
    pthread_mutex_unlock(&h->mu);
}

static uint64_t age(int64_t now_ms, int64_t since_ms)
{
    return now_ms > since_ms ? (uint64_t)(now_ms - since_ms) : 0;
}

/* (2): the lag of w at now_ms. */
static uint64_t watch_lag(const struct watch *w, int64_t now_ms)
{
    return w->has_report ? w->lag_ms + age(now_ms, w->at_ms)
                         : age(now_ms, w->registered_ms);
}

bool health_lag(struct health *h, const char *queue, int64_t now_ms,
                uint64_t *lag_ms)
{
    pthread_mutex_lock(&h->mu);
    const struct watch *w = find(h, queue);
    if (w != NULL) {
        *lag_ms = watch_lag(w, now_ms);
    }
    pthread_mutex_unlock(&h->mu);
    return w != NULL;
}

void health_check(struct health *h, int64_t now_ms, struct health_verdict *v)
{
    const struct watch *worst = NULL;
    uint64_t worst_ms = 0;

    memset(v, 0, sizeof(*v));
    pthread_mutex_lock(&h->mu);
    v->queues = h->n;
    v->limit_ms = h->limit_ms;
    for (size_t i = 0; i < h->n; i++) {
        const struct watch *w = &h->w[i];
        uint64_t lag = watch_lag(w, now_ms);

        if (lag > h->limit_ms &&
            (worst == NULL || strcmp(w->queue, worst->queue) < 0)) {
            worst = w;
            worst_ms = lag;
        }
    }
    v->ok = worst == NULL;
    if (worst != NULL) {
        snprintf(v->queue, sizeof(v->queue), "%s", worst->queue);
        v->stale_ms = worst_ms;
    }
    pthread_mutex_unlock(&h->mu);
}

int health_json(const struct health_verdict *v, struct buf *out,
                struct err *err)
{
    struct jw w;

    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "ok");
    jw_bool(&w, v->ok);
    if (v->ok) {
        jw_key(&w, "queues");
        jw_u64(&w, v->queues);
    } else {
        jw_key(&w, "queue");
        jw_cstr(&w, v->queue);
        jw_key(&w, "staleMs");
        jw_u64(&w, v->stale_ms);
        jw_key(&w, "limitMs");
        jw_u64(&w, v->limit_ms);
    }
    jw_obj_end(&w);
    return jw_finish(&w, err);
}
