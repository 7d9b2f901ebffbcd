/* Retention (docs/design/http-api.md §6): the leader plans trims periodically
 * and proposes them as CMD_RETENTION commands; every node applies them the same
 * way, moving a partition's logStart forward by whole appends.
 *
 * The planner reads the store from the loop thread with ordinary read
 * transactions (store_list_queues, store_changed, store_stale_boundary,
 * store_kv_read) and never writes: the only writer is retention_apply(),
 * inside the fsm's transaction. A plan may be stale by the time it applies
 * (a push moved lastOffset, another trim ran first): apply clamps to
 * lastOffset + 1 and store_wtrim() ignores a logStart at or below the
 * current one, so a stale plan trims at most what it saw as stale.
 *
 * Every tenant with a queue is planned (store_list_tenants), each with its
 * own queues, options and hold rows, and each command carries one tenant's
 * trims. Apply finds a partition by queue id, partition name and partition
 * id, and queue ids are store-wide, so a trim never reaches another
 * tenant's queue of the same name (6). The pass budget is
 * shared by all tenants; the cursor makes the next pass start after the
 * tenant where it ran out, so every tenant is reached within a bounded
 * number of passes. */
#include "broker/retention.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/isotime.h"
#include "base/json.h"
#include "base/log.h"
#include "base/pct.h"
#include "base/xalloc.h"
#include "raft/node.h"
#include "store/kv.h"
#include "store/store_impl.h"
#include "store/store_tenants.h"

/* ---- pure cutoff logic -------------------------------------------------- */

static int64_t sub_sat(int64_t a, int64_t b)
{
    return b > 0 && a < INT64_MIN + b ? INT64_MIN : a - b;
}

static bool hold_tend_ms(struct slice committed, int64_t *ms)
{
    struct json_limits lim = {8, 1, 4096};
    struct json_doc d;
    struct err err;
    int t;
    bool ok = false;

    if (committed.len == 0 ||
        json_parse(&d, committed.ptr, committed.len, &lim, &err) != 0) {
        return false;
    }
    t = json_obj_get(&d, 0, "tEnd");
    if (json_type(&d, 0) == JSON_OBJECT && json_type(&d, t) == JSON_STRING &&
        !d.toks[t].has_escapes) {
        struct slice v = json_span(&d, t);

        ok = isotime_parse_ms_lenient(v.ptr + 1, v.len - 2, ms);
    }
    json_doc_free(&d);
    return ok;
}

int64_t retention_sink_floor(const struct store_queue_options *o,
                             int64_t now_us, struct slice committed)
{
    int64_t max_s = o->retention_sink_hold_max_seconds;
    int64_t cap;
    int64_t ms;
    int64_t floor;

    if (o->retention_sink_hold[0] == '\0') {
        return RETENTION_NO_HOLD;
    }
    if (max_s < RETENTION_HOLD_MIN_S) {
        max_s = RETENTION_HOLD_MIN_S;
    }
    cap = sub_sat(now_us, max_s * 1000000);
    if (!hold_tend_ms(committed, &ms) || ms > INT64_MAX / 1000 ||
        ms < INT64_MIN / 1000) {
        return cap;
    }
    floor = sub_sat(ms * 1000, RETENTION_HOLD_GUARD_US);
    return floor > cap ? floor : cap;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

void retention_queue_cutoffs(const struct store_queue_options *o,
                             int64_t now_us, int64_t floor_us,
                             struct retention_cutoffs *c)
{
    c->all = RETENTION_NONE;
    c->completed = RETENTION_NONE;
    c->max_wait = RETENTION_NONE;
    if (o->retention_enabled && o->retention_seconds > 0) {
        c->all = min64(sub_sat(now_us, (int64_t)o->retention_seconds * 1000000),
                       floor_us);
    }
    if (o->retention_enabled && o->completed_retention_seconds > 0) {
        c->completed = min64(
            sub_sat(now_us, (int64_t)o->completed_retention_seconds * 1000000),
            floor_us);
    }
    if (o->max_wait_time_seconds > 0) {
        c->max_wait =
            sub_sat(now_us, (int64_t)o->max_wait_time_seconds * 1000000);
    }
}

int64_t retention_cutoff(const struct retention_cutoffs *c)
{
    return c->all > c->max_wait ? c->all : c->max_wait;
}

int retention_hold_key(struct buf *out, const char *hold, struct slice queue,
                       struct err *err)
{
    if (buf_printf(out, err, "s3:%s:", hold) != 0 ||
        pct_escape(out, queue.ptr, queue.len, err) != 0 ||
        buf_append_str(out, ":committed", err) != 0) {
        return err->code;
    }
    return 0;
}

/* ---- apply -------------------------------------------------------------- */

int retention_apply(void *arg, struct store *s, MDB_txn *txn,
                    const struct cmd_header *h, struct fsm_result *res,
                    struct err *err)
{
    struct store_w w = {
        .s = s, .txn = txn, .tenant = h->tenant, .stamp = h->stamp};
    struct cmd_trim_iter it;
    struct cmd_trim_item item;
    struct store_wpart p;
    struct err derr;
    uint32_t n;
    int rc;

    UNUSED(arg);
    if (cmd_trim_validate(h->body, &n, &derr) != 0) { /* (4): refuse whole */
        res->code = derr.code;
        snprintf(res->msg, sizeof(res->msg), "%.150s", derr.msg);
        return 0;
    }
    ASSERT(cmd_trim_iter_init(&it, h->body, &derr) == 0);
    while (cmd_trim_next(&it, &item, &derr) == 1) { /* validated above */
        rc = store_wpart_find(&w, item.queue_id, item.partition, &p, err);
        if (rc == ERR_NOT_FOUND || (rc == 0 && p.id != item.partition_id)) {
            continue;
        }
        if (rc != 0 ||
            store_wtrim(&w, item.partition, &p,
                        min64(item.log_start, p.last_offset + 1), err) != 0) {
            return err->code;
        }
    }
    return 0;
}

/* ---- planning ----------------------------------------------------------- */

/* One pass in progress: the tenant being planned and what is left. */
struct plan {
    struct store *store;
    int64_t now_us;
    uint8_t tenant[16];
    size_t budget; /* partitions left to visit (5) */
    retention_propose_fn propose;
    void *arg;
    size_t n_proposed;
};

/* The live committed row under key in the tenant's namespace, into *ans
 * (caller frees); empty when there is none. */
static struct slice plan_hold_read(const struct plan *p, struct slice key,
                                   struct kv_answer *ans)
{
    struct kv_op op;
    struct kv_batch b = {p->tenant, &op, 1};
    struct err err = {0};

    memset(&op, 0, sizeof(op));
    op.op = KV_GET;
    op.ns = SLICE_LIT(RETENTION_SINK_NS);
    op.key = key;
    if (store_kv_read(p->store, &b, p->now_us, ans, &err) == 0 &&
        ans->status == 0 && ans->n_results == 1 && ans->results[0].found) {
        return ans->results[0].value;
    }
    if (err.code != 0) {
        log_debug("retention", "hold row: %s", err.msg);
    }
    return (struct slice){"", 0};
}

/* The live committed row of the queue's hold, into *ans (caller frees). */
static struct slice plan_hold_row(const struct plan *p,
                                  const struct store_queue_info *q,
                                  struct kv_answer *ans)
{
    struct buf key;
    struct err err = {0};
    struct slice v = {"", 0};

    memset(ans, 0, sizeof(*ans));
    buf_init(&key, BUF_UNLIMITED);
    if (retention_hold_key(&key, q->options.retention_sink_hold, q->name,
                           &err) == 0) {
        v = plan_hold_read(p, buf_slice(&key), ans);
    }
    buf_free(&key);
    return v;
}

/* Hand the trims of one page of partitions to p->propose. */
static void plan_propose(struct plan *p, const struct cmd_trim_item *items,
                         size_t n)
{
    struct buf cmd;
    struct err err = {0};

    if (n == 0) {
        return;
    }
    buf_init(&cmd, BUF_UNLIMITED);
    if (cmd_trim_encode(&cmd, p->tenant, items, n, &err) != 0 ||
        p->propose(p->arg, cmd.data, cmd.len, &err) != 0) {
        log_debug("retention", "propose: %s", err.msg);
    } else {
        p->n_proposed++;
    }
    buf_free(&cmd);
}

/* Plan one page of a queue's partitions; returns the partitions visited. */
static size_t plan_page(struct plan *p, const struct store_queue_info *q,
                        int64_t cutoff, const struct store_changed_entry *e)
{
    struct cmd_trim_item *items = xcalloc(e->n_partitions + 1, sizeof(*items));
    size_t n = 0;
    struct err err;

    for (size_t i = 0; i < e->n_partitions; i++) {
        const struct store_partition_info *pi = &e->partitions[i];
        int64_t to = -1;

        if (pi->log_start > pi->last_offset ||
            store_stale_boundary(p->store, pi->id, cutoff, RETENTION_MAX_ROWS,
                                 &to, &err) != 0 ||
            to <= pi->log_start) {
            continue;
        }
        items[n++] = (struct cmd_trim_item){q->id, pi->id, to, pi->name};
    }
    plan_propose(p, items, n);
    free(items);
    return e->n_partitions;
}

/* Walk a queue's partitions in pages within the budget; takes what it
 * visited from p->budget. */
static void plan_queue(struct plan *p, const struct store_queue_info *q,
                       int64_t cutoff)
{
    char cursor[32] = "";
    size_t seen = 0;
    struct err err;

    while (seen < p->budget && seen < RETENTION_MAX_PARTS_QUEUE) {
        struct store_changed_req req = {q->name,
                                        INT64_MIN,
                                        {cursor, strlen(cursor)},
                                        STORE_CHANGED_LIMIT_MAX};
        struct store_changed_answer ans;
        bool more;

        if (store_changed(p->store, p->tenant, &req, 1, &ans, &err) != 0 ||
            ans.entries[0].error != STORE_ENTRY_OK) {
            store_changed_answer_free(&ans);
            break;
        }
        seen += plan_page(p, q, cutoff, &ans.entries[0]);
        more = ans.entries[0].has_next;
        snprintf(cursor, sizeof(cursor), "p|%" PRIu64, ans.entries[0].next_pid);
        store_changed_answer_free(&ans);
        if (!more) {
            break;
        }
    }
    p->budget = seen >= p->budget ? 0 : p->budget - seen;
}

/* The cutoff of a queue now, floored by its hold row (RETENTION_NONE when
 * no rule applies). */
static int64_t plan_cutoff(const struct plan *p,
                           const struct store_queue_info *q)
{
    struct retention_cutoffs c;
    struct kv_answer ans;

    retention_queue_cutoffs(&q->options, p->now_us, RETENTION_NO_HOLD, &c);
    if (retention_cutoff(&c) == RETENTION_NONE) {
        return RETENTION_NONE;
    }
    if (q->options.retention_sink_hold[0] != '\0') {
        struct slice row = plan_hold_row(p, q, &ans);
        int64_t floor = retention_sink_floor(&q->options, p->now_us, row);

        kv_answer_free(&ans);
        retention_queue_cutoffs(&q->options, p->now_us, floor, &c);
    }
    return retention_cutoff(&c);
}

/* Plan every queue of one tenant while budget is left. */
static void plan_tenant(struct plan *p, const uint8_t tenant[16])
{
    struct store_queue_list l;
    struct err err;

    memcpy(p->tenant, tenant, sizeof(p->tenant));
    if (store_list_queues(p->store, p->tenant, &l, &err) != 0) {
        log_debug("retention", "list queues: %s", err.msg);
        return;
    }
    for (size_t i = 0; i < l.n && p->budget > 0; i++) {
        int64_t cutoff = plan_cutoff(p, &l.queues[i]);

        if (cutoff != RETENTION_NONE) {
            plan_queue(p, &l.queues[i], cutoff);
        }
    }
    store_queue_list_free(&l);
}

/* Plan the tenants of one page up to upto (inclusive; NULL = all). Returns
 * 1 when the budget ran out (cur set), -1 past upto, else 0. */
static int plan_tenant_page(struct plan *p, const struct store_tenant_page *pg,
                            const uint8_t *upto, struct retention_cursor *cur)
{
    for (size_t i = 0; i < pg->n; i++) {
        if (upto != NULL && memcmp(pg->ids[i], upto, 16) > 0) {
            return -1;
        }
        plan_tenant(p, pg->ids[i]);
        if (p->budget == 0) {
            memcpy(cur->after, pg->ids[i], sizeof(cur->after));
            cur->is_set = true;
            return 1;
        }
    }
    return 0;
}

/* Plan the tenants strictly after `after` (NULL = from the first) up to
 * upto (inclusive; NULL = the last). True when the budget ran out. */
static bool plan_tenants(struct plan *p, const uint8_t *after,
                         const uint8_t *upto, struct retention_cursor *cur)
{
    struct store_tenant_page *pg = xmalloc(sizeof(*pg));
    uint8_t from[16];
    const uint8_t *next = NULL;
    struct err err = {0};
    int rc = 0;

    if (after != NULL) {
        memcpy(from, after, sizeof(from));
        next = from;
    }
    do {
        if (store_list_tenants(p->store, next, pg, &err) != 0) {
            break;
        }
        rc = plan_tenant_page(p, pg, upto, cur);
        if (pg->n > 0) {
            memcpy(from, pg->ids[pg->n - 1], sizeof(from));
            next = from;
        }
    } while (rc == 0 && pg->has_more);
    if (err.code != 0) {
        log_debug("retention", "%s", err.msg);
    }
    free(pg);
    return rc == 1;
}

size_t retention_plan(struct store *s, int64_t now_us, size_t budget,
                      struct retention_cursor *cur,
                      retention_propose_fn propose, void *arg)
{
    struct plan p = {s, now_us, {0}, budget, propose, arg, 0};
    struct retention_cursor start = *cur;

    cur->is_set = false;
    if (!plan_tenants(&p, start.is_set ? start.after : NULL, NULL, cur) &&
        start.is_set) {
        plan_tenants(&p, NULL, start.after, cur); /* wrap around (6) */
    }
    return p.n_proposed;
}

/* ---- the leader's pass -------------------------------------------------- */

struct retention {
    uv_timer_t timer;
    struct store *store;
    struct node *node;
    size_t n_pending; /* proposals in flight (5) */
    struct retention_cursor cursor;
};

static void retention_applied(void *arg, int status,
                              const struct fsm_result *res,
                              const struct err *err)
{
    struct retention *r = arg;

    r->n_pending--;
    if (status != 0) {
        log_debug("retention", "trim not applied: %s", err->msg);
    } else if (res->code != 0) {
        log_warn("retention", "trim refused: %s", res->msg);
    }
}

static int retention_node_propose(void *arg, const char *cmd, size_t len,
                                  struct err *err)
{
    struct retention *r = arg;

    if (node_propose(r->node, CMD_RETENTION, cmd, len, retention_applied, r,
                     err) != 0) {
        return err->code;
    }
    r->n_pending++; /* cb runs later, on a later loop turn */
    return 0;
}

void retention_pass(struct retention *r, int64_t now_us)
{
    if (r->n_pending > 0 || node_role(r->node) != NODE_LEADER) {
        return;
    }
    retention_plan(r->store, now_us, RETENTION_MAX_PARTS, &r->cursor,
                   retention_node_propose, r);
}

static void retention_on_timer(uv_timer_t *t)
{
    struct retention *r = t->data;
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    retention_pass(r, (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
}

struct retention *retention_start(uv_loop_t *loop, struct store *store,
                                  struct node *node, unsigned interval_ms)
{
    struct retention *r = xcalloc(1, sizeof(*r));

    r->store = store;
    r->node = node;
    uv_timer_init(loop, &r->timer);
    r->timer.data = r;
    if (interval_ms == 0) {
        interval_ms = RETENTION_INTERVAL_MS;
    }
    uv_timer_start(&r->timer, retention_on_timer, interval_ms, interval_ms);
    return r;
}

static void retention_on_closed(uv_handle_t *h)
{
    free(h->data);
}

void retention_close(struct retention *r)
{
    if (r == NULL) {
        return;
    }
    uv_timer_stop(&r->timer);
    uv_close((uv_handle_t *)&r->timer, retention_on_closed);
}
