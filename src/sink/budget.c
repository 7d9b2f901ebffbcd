/* The node-wide memory budget (docs/design/window.md §12): one per node, shared
 * by every queue of every sink.
 *
 * The table is small (one row per running queue) and every report scans it
 * under the mutex to find the largest holder, which keeps the "over" rule
 * exact without a second index. */
#include "sink/budget.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/pct.h"
#include "base/xalloc.h"

struct row {
    char *key;
    uint64_t bytes;
};

struct budget {
    pthread_mutex_t mu;
    uint64_t limit;
    uint64_t total;
    struct row *rows;
    size_t n, cap;
};

struct budget *budget_new(uint64_t limit_bytes)
{
    struct budget *b = xcalloc(1, sizeof(*b));

    pthread_mutex_init(&b->mu, NULL);
    b->limit = limit_bytes > 0 ? limit_bytes : 1;
    return b;
}

void budget_free(struct budget *b)
{
    if (b == NULL) {
        return;
    }
    for (size_t i = 0; i < b->n; i++) {
        free(b->rows[i].key);
    }
    free(b->rows);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static struct row *find(struct budget *b, const char *key)
{
    for (size_t i = 0; i < b->n; i++) {
        if (strcmp(b->rows[i].key, key) == 0) {
            return &b->rows[i];
        }
    }
    return NULL;
}

bool budget_report(struct budget *b, const char *key, uint64_t bytes)
{
    bool over = false;

    pthread_mutex_lock(&b->mu);
    struct row *r = find(b, key);
    if (r == NULL) {
        if (b->n == b->cap) {
            b->cap = b->cap == 0 ? 16 : b->cap * 2;
            b->rows = xrealloc(b->rows, b->cap * sizeof(*b->rows));
        }
        r = &b->rows[b->n++];
        *r = (struct row){.key = xstrdup(key), .bytes = 0};
    }
    b->total = b->total - r->bytes + bytes;
    r->bytes = bytes;
    if (b->total > b->limit && bytes > 0) {
        over = true;
        for (size_t i = 0; i < b->n && over; i++) {
            over = b->rows[i].bytes <= bytes;
        }
    }
    pthread_mutex_unlock(&b->mu);
    return over;
}

void budget_forget(struct budget *b, const char *key)
{
    pthread_mutex_lock(&b->mu);
    struct row *r = find(b, key);
    if (r != NULL) {
        b->total -= r->bytes;
        free(r->key);
        *r = b->rows[--b->n];
    }
    pthread_mutex_unlock(&b->mu);
}

uint64_t budget_total(struct budget *b)
{
    pthread_mutex_lock(&b->mu);
    uint64_t t = b->total;
    pthread_mutex_unlock(&b->mu);
    return t;
}

uint64_t budget_limit(const struct budget *b)
{
    return b->limit;
}

int budget_key(struct buf *out, const char *tenant, const char *queue,
               struct err *err)
{
    if (pct_escape(out, tenant, strlen(tenant), err) != 0 ||
        buf_append_byte(out, '/', err) != 0 ||
        pct_escape(out, queue, strlen(queue), err) != 0) {
        return err->code;
    }
    return 0;
}
