/* The long-poll registry (api/longpoll.h): two chained hash tables that
 * double as they fill, one from (tenant, queue, partition) to the links of
 * the waiters naming it, one from a connection to its parked count, and the
 * pending list that fetch.c drains. */
#include "api/longpoll.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

#define LONGPOLL_MIN_BUCKETS 64

struct longpoll_part {
    struct longpoll_part *next; /* bucket chain */
    uint64_t hash;
    struct longpoll_link *links; /* the waiters naming it (1) */
    size_t queue_len;
    size_t part_len;
    uint8_t tenant[16];
    char key[]; /* queue bytes, then partition bytes */
};

struct longpoll_conn {
    struct longpoll_conn *next; /* bucket chain */
    const void *id;
    size_t n_parked;
};

static uint64_t lp_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 0x100000001b3ULL;
    }
    return (h ^ n) * 0x9e3779b97f4a7c15ULL;
}

static uint64_t lp_part_hash(const uint8_t tenant[16], struct slice queue,
                             struct slice partition)
{
    uint64_t h = lp_hash_bytes(0xcbf29ce484222325ULL, tenant, 16);

    h = lp_hash_bytes(h, queue.ptr, queue.len);
    return lp_hash_bytes(h, partition.ptr, partition.len);
}

static uint64_t lp_conn_hash(const void *id)
{
    return ((uint64_t)(uintptr_t)id >> 4) * 0x9e3779b97f4a7c15ULL;
}

void longpoll_init(struct longpoll *lp, const struct longpoll_limits *lim)
{
    memset(lp, 0, sizeof(*lp));
    lp->lim = *lim;
    if (lp->lim.per_conn == 0) {
        lp->lim.per_conn = LONGPOLL_DEF_PER_CONN;
    }
    if (lp->lim.per_node == 0) {
        lp->lim.per_node = LONGPOLL_DEF_PER_NODE;
    }
    lp->n_part_buckets = LONGPOLL_MIN_BUCKETS;
    lp->parts = xcalloc(lp->n_part_buckets, sizeof(struct longpoll_part *));
    lp->n_conn_buckets = LONGPOLL_MIN_BUCKETS;
    lp->conns = xcalloc(lp->n_conn_buckets, sizeof(struct longpoll_conn *));
}

void longpoll_free(struct longpoll *lp)
{
    ASSERT(lp->n_parked == 0 && lp->n_parts == 0 && lp->n_conns == 0);
    free(lp->parts);
    free(lp->conns);
    memset(lp, 0, sizeof(*lp));
}

/* ---- the partition index ---- */

static bool lp_part_is(const struct longpoll_part *p, uint64_t hash,
                       const uint8_t tenant[16], struct slice queue,
                       struct slice partition)
{
    return p->hash == hash && p->queue_len == queue.len &&
           p->part_len == partition.len && memcmp(p->tenant, tenant, 16) == 0 &&
           (queue.len == 0 || memcmp(p->key, queue.ptr, queue.len) == 0) &&
           (partition.len == 0 ||
            memcmp(p->key + queue.len, partition.ptr, partition.len) == 0);
}

static struct longpoll_part *
lp_part_find(const struct longpoll *lp, uint64_t hash, const uint8_t tenant[16],
             struct slice queue, struct slice partition)
{
    struct longpoll_part *p = lp->parts[hash & (lp->n_part_buckets - 1)];

    while (p != NULL && !lp_part_is(p, hash, tenant, queue, partition)) {
        p = p->next;
    }
    return p;
}

static void lp_parts_grow(struct longpoll *lp)
{
    size_t n = lp->n_part_buckets * 2;
    struct longpoll_part **b = xcalloc(n, sizeof(struct longpoll_part *));

    for (size_t i = 0; i < lp->n_part_buckets; i++) {
        struct longpoll_part *p = lp->parts[i];
        while (p != NULL) {
            struct longpoll_part *next = p->next;
            p->next = b[p->hash & (n - 1)];
            b[p->hash & (n - 1)] = p;
            p = next;
        }
    }
    free(lp->parts);
    lp->parts = b;
    lp->n_part_buckets = n;
}

static struct longpoll_part *lp_part_get(struct longpoll *lp,
                                         const uint8_t tenant[16],
                                         struct slice queue,
                                         struct slice partition)
{
    uint64_t hash = lp_part_hash(tenant, queue, partition);
    struct longpoll_part *p = lp_part_find(lp, hash, tenant, queue, partition);
    struct longpoll_part **head;

    if (p != NULL) {
        return p;
    }
    if (lp->n_parts >= lp->n_part_buckets) {
        lp_parts_grow(lp);
    }
    p = xmalloc(sizeof(*p) + queue.len + partition.len);
    p->hash = hash;
    p->links = NULL;
    p->queue_len = queue.len;
    p->part_len = partition.len;
    memcpy(p->tenant, tenant, 16);
    if (queue.len > 0) {
        memcpy(p->key, queue.ptr, queue.len);
    }
    if (partition.len > 0) {
        memcpy(p->key + queue.len, partition.ptr, partition.len);
    }
    head = &lp->parts[hash & (lp->n_part_buckets - 1)];
    p->next = *head;
    *head = p;
    lp->n_parts++;
    return p;
}

static void lp_part_drop(struct longpoll *lp, struct longpoll_part *p)
{
    struct longpoll_part **pp = &lp->parts[p->hash & (lp->n_part_buckets - 1)];

    while (*pp != p) {
        pp = &(*pp)->next;
    }
    *pp = p->next;
    lp->n_parts--;
    free(p);
}

/* ---- per-connection counts ---- */

static struct longpoll_conn **lp_conn_slot(const struct longpoll *lp,
                                           const void *id)
{
    struct longpoll_conn **pp =
        &lp->conns[lp_conn_hash(id) & (lp->n_conn_buckets - 1)];

    while (*pp != NULL && (*pp)->id != id) {
        pp = &(*pp)->next;
    }
    return pp;
}

static void lp_conns_grow(struct longpoll *lp)
{
    size_t n = lp->n_conn_buckets * 2;
    struct longpoll_conn **b = xcalloc(n, sizeof(struct longpoll_conn *));

    for (size_t i = 0; i < lp->n_conn_buckets; i++) {
        struct longpoll_conn *c = lp->conns[i];
        while (c != NULL) {
            struct longpoll_conn *next = c->next;
            size_t k = lp_conn_hash(c->id) & (n - 1);
            c->next = b[k];
            b[k] = c;
            c = next;
        }
    }
    free(lp->conns);
    lp->conns = b;
    lp->n_conn_buckets = n;
}

size_t longpoll_conn_parked(const struct longpoll *lp, const void *conn)
{
    struct longpoll_conn **pp = lp_conn_slot(lp, conn);

    return *pp != NULL ? (*pp)->n_parked : 0;
}

/* ---- pending ---- */

static size_t lp_make_pending(struct longpoll *lp, struct longpoll_waiter *w)
{
    if (w->is_pending) {
        return 0; /* (2) */
    }
    w->is_pending = true;
    w->pend_next = NULL;
    w->pend_prev = lp->pend_tail;
    if (lp->pend_tail != NULL) {
        lp->pend_tail->pend_next = w;
    } else {
        lp->pend_head = w;
    }
    lp->pend_tail = w;
    lp->n_touched_waiters++;
    return 1;
}

static void lp_unpend(struct longpoll *lp, struct longpoll_waiter *w)
{
    if (!w->is_pending) {
        return;
    }
    if (w->pend_prev != NULL) {
        w->pend_prev->pend_next = w->pend_next;
    } else {
        lp->pend_head = w->pend_next;
    }
    if (w->pend_next != NULL) {
        w->pend_next->pend_prev = w->pend_prev;
    } else {
        lp->pend_tail = w->pend_prev;
    }
    w->pend_prev = w->pend_next = NULL;
    w->is_pending = false;
}

struct longpoll_waiter *longpoll_next_pending(struct longpoll *lp)
{
    struct longpoll_waiter *w = lp->pend_head;

    if (w != NULL) {
        lp_unpend(lp, w);
    }
    return w;
}

/* ---- park, unpark, touch ---- */

/* Count one more waiter for conn, within the bounds (3). Returns its
 * connection's count, or NULL with err set and nothing changed. */
static struct longpoll_conn *lp_conn_take(struct longpoll *lp, const void *conn,
                                          struct err *err)
{
    struct longpoll_conn **slot = lp_conn_slot(lp, conn);
    struct longpoll_conn *c = *slot;

    if (c != NULL && c->n_parked >= lp->lim.per_conn) {
        lp->n_refused_conn++;
        err_set(err, ERR_LIMIT,
                "too many long polls on this connection: %zu are "
                "waiting (QUEEN_MAX_LONG_POLLS_PER_CONN=%zu)",
                c->n_parked, lp->lim.per_conn);
        return NULL;
    }
    if (lp->n_parked >= lp->lim.per_node) {
        lp->n_refused_node++;
        err_set(err, ERR_BUSY,
                "too many long polls on this node: %zu are waiting "
                "(QUEEN_MAX_LONG_POLLS=%zu)",
                lp->n_parked, lp->lim.per_node);
        return NULL;
    }
    if (c == NULL) {
        if (lp->n_conns >= lp->n_conn_buckets) {
            lp_conns_grow(lp);
            slot = lp_conn_slot(lp, conn);
        }
        c = xcalloc(1, sizeof(*c));
        c->id = conn;
        *slot = c;
        lp->n_conns++;
    }
    c->n_parked++;
    lp->n_parked++;
    return c;
}

int longpoll_park(struct longpoll *lp, struct longpoll_waiter *w,
                  const void *conn, const struct longpoll_want *want,
                  struct err *err)
{
    struct longpoll_conn *c;

    ASSERT(!w->is_parked);
    if ((c = lp_conn_take(lp, conn, err)) == NULL) {
        return err->code;
    }
    memset(w, 0, sizeof(*w));
    w->conn = c;
    w->is_parked = true;
    w->min_bytes = want->min_bytes;
    w->n_links = want->n;
    w->links = want->n > 0 ? xcalloc(want->n, sizeof(*w->links)) : NULL;
    for (size_t i = 0; i < want->n; i++) {
        struct longpoll_link *l = &w->links[i];
        struct longpoll_part *p = lp_part_get(
            lp, want->tenant, want->reqs[i].queue, want->reqs[i].partition);

        l->w = w;
        l->part = p;
        l->next = p->links;
        if (p->links != NULL) {
            p->links->prev = l;
        }
        p->links = l;
    }
    return 0;
}

void longpoll_unpark(struct longpoll *lp, struct longpoll_waiter *w)
{
    struct longpoll_conn **slot;

    if (!w->is_parked) {
        return;
    }
    lp_unpend(lp, w);
    for (size_t i = 0; i < w->n_links; i++) {
        struct longpoll_link *l = &w->links[i];
        struct longpoll_part *p = l->part;

        if (l->prev != NULL) {
            l->prev->next = l->next;
        } else {
            p->links = l->next;
        }
        if (l->next != NULL) {
            l->next->prev = l->prev;
        }
        if (p->links == NULL) {
            lp_part_drop(lp, p);
        }
    }
    free(w->links);
    w->links = NULL;
    w->n_links = 0;
    slot = lp_conn_slot(lp, w->conn->id);
    ASSERT(*slot == w->conn);
    if (--w->conn->n_parked == 0) {
        *slot = w->conn->next;
        free(w->conn);
        lp->n_conns--;
    }
    w->conn = NULL;
    w->is_parked = false;
    lp->n_parked--;
}

void longpoll_seen(struct longpoll_waiter *w,
                   const struct store_fetch_answer *ans)
{
    w->weight = 0;
    for (size_t i = 0; i < ans->n_entries && i < w->n_links; i++) {
        const struct store_fetch_entry *e = &ans->entries[i];

        for (size_t k = 0; k < e->n_records; k++) {
            size_t len = e->records[k].payload.len;
            w->weight += len > 1 ? len : 1;
        }
        w->links[i].is_capped =
            e->n_records > 0 &&
            e->records[e->n_records - 1].offset + 1 < e->high_watermark;
    }
}

size_t longpoll_touch(struct longpoll *lp, const uint8_t tenant[16],
                      struct slice queue, struct slice partition,
                      uint64_t weight)
{
    uint64_t hash = lp_part_hash(tenant, queue, partition);
    struct longpoll_part *p = lp_part_find(lp, hash, tenant, queue, partition);
    size_t n = 0;

    for (struct longpoll_link *l = p != NULL ? p->links : NULL; l != NULL;
         l = l->next) {
        struct longpoll_waiter *w = l->w;

        if (!l->is_capped) {
            w->weight = w->weight > UINT64_MAX - weight ? UINT64_MAX
                                                        : w->weight + weight;
        }
        if (w->weight >= w->min_bytes) {
            n += lp_make_pending(lp, w);
        }
    }
    return n;
}

size_t longpoll_touch_all(struct longpoll *lp, const uint8_t *tenant)
{
    size_t n = 0;

    for (size_t i = 0; i < lp->n_part_buckets; i++) {
        for (struct longpoll_part *p = lp->parts[i]; p != NULL; p = p->next) {
            if (tenant != NULL && memcmp(p->tenant, tenant, 16) != 0) {
                continue;
            }
            for (struct longpoll_link *l = p->links; l != NULL; l = l->next) {
                n += lp_make_pending(lp, l->w);
            }
        }
    }
    return n;
}
