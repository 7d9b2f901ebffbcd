/* Placement (docs/design/protocol.md §4): how the nodes of a cluster share the
 * queues of a sink without talking to each other.
 *
 * There is no coordinator. Each node counts the presence rows, computes its
 * fair share and behaves: a node at or above its share waits a TTL longer
 * before claiming a free queue, so the less loaded nodes win it; claims are
 * paced one second apart per queue already run, so a node that boots first
 * does not grab everything; and a node over its share for a whole TTL gives
 * one queue back by draining it exactly as on SIGTERM. Waiting a full TTL
 * before acting means a node that came up and left within seconds moves
 * nothing.
 *
 * Everything here is pure but placement_beat(), which only calls through
 * the broker seam (struct sink_broker). */
#include "sink/placement.h"

#include <string.h>

#include "sink/docs.h"
#include "sink/layout.h"

#include "sink/lease.h"

uint32_t placement_fair_share(uint32_t queues, uint32_t nodes)
{
    uint32_t n = nodes == 0 ? 1 : nodes;

    return queues / n + (queues % n != 0);
}

bool placement_at_or_above(uint32_t held, uint32_t share)
{
    return held >= share;
}

int64_t placement_period_ms(int64_t ttl_ms)
{
    return ttl_ms / 3 < 100 ? 100 : ttl_ms / 3;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

int64_t placement_claim_due(const struct placement_claim *c)
{
    int64_t paced =
        c->task_start_ms + c->jitter_ms +
        min64((int64_t)PLACEMENT_CLAIM_STEP_MS * c->before, c->ttl_ms / 2);

    if (c->gave_back) {
        int64_t cool = c->gave_back_at_ms + 2 * c->ttl_ms;
        return paced > cool ? paced : cool;
    }
    return c->at_or_above ? paced + c->ttl_ms : paced;
}

int64_t placement_claim_sleep_ms(int64_t due, int64_t now, int64_t ttl_ms)
{
    int64_t d = min64(due - now, ttl_ms / 3);

    return d < 0 ? 0 : d;
}

int64_t placement_held_wait_ms(int64_t ttl_ms, bool at_or_above,
                               int64_t jitter_ms)
{
    return (at_or_above ? ttl_ms : ttl_ms / 3) + jitter_ms;
}

int64_t placement_claim_retry_ms(int failures, bool is_retriable,
                                 int64_t retry_after_ms, int64_t jitter_ms,
                                 int64_t ttl_ms)
{
    if (!is_retriable) {
        return ttl_ms;
    }
    if (retry_after_ms >= 0) {
        return min64(retry_after_ms, ttl_ms);
    }
    int shift = failures < 1 ? 0 : failures - 1;
    shift = shift > 16 ? 16 : shift;
    return min64(((int64_t)1000 << shift) + jitter_ms, ttl_ms);
}

void placement_beat_ops(struct kv_op ops[2], struct slice key, struct slice doc,
                        int64_t ttl_seconds, struct slice prefix,
                        struct slice after)
{
    memset(ops, 0, 2 * sizeof(*ops));
    ops[0].op = KV_PUT;
    ops[0].ns = SLICE_LIT(LEASE_NS);
    ops[0].key = key;
    ops[0].value = doc;
    ops[0].ttl_seconds = ttl_seconds;
    ops[1].op = KV_GET_PREFIX;
    ops[1].ns = SLICE_LIT(LEASE_NS);
    ops[1].prefix = prefix;
    ops[1].after = after;
    ops[1].limit = PLACEMENT_PREFIX_LIMIT;
    ops[1].keys_only = true;
}

void placement_beat_count(const struct kv_result *r, struct slice own_key,
                          uint32_t *rows, bool *saw_own, bool *more)
{
    for (size_t i = 0; i < r->n_rows; i++) {
        struct slice k = r->rows[i].key;
        *rows += 1;
        if (k.len == own_key.len && memcmp(k.ptr, own_key.ptr, k.len) == 0) {
            *saw_own = true;
        }
    }
    *more = r->truncated && r->has_next_after;
}

uint32_t placement_nodes(uint32_t rows, bool saw_own)
{
    return rows + (saw_own ? 0 : 1);
}

/* One beat call: the put (first page only) and one getPrefix page. */
static int beat_page(const struct sink_broker *b,
                     const struct placement_presence *p, struct kv_op ops[2],
                     bool with_put, struct kv_answer *a, struct err *err)
{
    const struct kv_op *v = with_put ? ops : ops + 1;
    size_t n = with_put ? 2 : 1;

    memset(a, 0, sizeof(*a));
    if (b->kv(b->arg, p->tenant, v, n, 0, a, err) != 0) {
        return err->code;
    }
    if (a->status != 0 || a->n_results != n) {
        int rc = err_set(err, a->status != 0 ? a->status : ERR_IO,
                         "presence beat: %s", a->msg);
        kv_answer_free(a);
        return rc;
    }
    return 0;
}

int placement_beat(const struct sink_broker *b,
                   const struct placement_presence *p, uint32_t *nodes,
                   struct err *err)
{
    struct buf key;
    struct buf prefix;
    struct buf doc;
    struct buf after;
    struct kv_op ops[2];
    struct kv_answer a;
    uint32_t rows = 0;
    bool saw_own = false;
    bool more = true;
    struct docs_lease d = {{p->instance, strlen(p->instance)},
                           {p->incarnation, strlen(p->incarnation)},
                           p->since_ms};
    int rc;

    buf_init(&key, KV_KEY_MAX);
    buf_init(&prefix, KV_KEY_MAX);
    buf_init(&doc, KV_VALUE_MAX);
    buf_init(&after, KV_KEY_MAX);
    rc = layout_presence_key(&key, p->sink, d.instance, err);
    rc = rc != 0 ? rc : layout_presence_prefix(&prefix, p->sink, err);
    rc = rc != 0 ? rc : docs_lease_encode(&doc, &d, err);
    for (bool first = true; rc == 0 && more; first = false) {
        placement_beat_ops(ops, buf_slice(&key), buf_slice(&doc),
                           lease_ttl_seconds(p->ttl_ms), buf_slice(&prefix),
                           buf_slice(&after));
        rc = beat_page(b, p, ops, first, &a, err);
        if (rc != 0) {
            break;
        }
        const struct kv_result *r = &a.results[a.n_results - 1];
        placement_beat_count(r, buf_slice(&key), &rows, &saw_own, &more);
        buf_reset(&after);
        if (more) {
            rc = buf_append(&after, r->next_after.ptr, r->next_after.len, err);
        }
        kv_answer_free(&a);
    }
    *nodes = placement_nodes(rows, saw_own);
    buf_free(&after);
    buf_free(&doc);
    buf_free(&prefix);
    buf_free(&key);
    return rc;
}

static int slice_cmp(struct slice a, struct slice b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = memcmp(a.ptr, b.ptr, n);

    if (c != 0) {
        return c;
    }
    return a.len < b.len ? -1 : (a.len > b.len);
}

ptrdiff_t placement_pick(const struct placement_held *v, size_t n)
{
    ptrdiff_t best = -1;

    for (size_t i = 0; i < n; i++) {
        if (best < 0 || v[i].buffered < v[best].buffered ||
            (v[i].buffered == v[best].buffered &&
             slice_cmp(v[i].name, v[best].name) < 0)) {
            best = (ptrdiff_t)i;
        }
    }
    return best;
}

/* A give-back in flight: follow it to its end. */
static enum placement_verdict follow(struct placement_state *st,
                                     const struct placement_input *in)
{
    if (!st->is_released) {
        return PLACEMENT_WAIT;
    }
    if (in->giving_held_by_other) {
        st->is_giving = false;
        return PLACEMENT_TAKEN_OVER;
    }
    if (in->now_ms - st->released_at_ms < in->ttl_ms) {
        return PLACEMENT_WAIT;
    }
    st->is_giving = false;
    return PLACEMENT_NOBODY_TOOK;
}

enum placement_verdict placement_decide(struct placement_state *st,
                                        const struct placement_input *in)
{
    if (st->is_giving) {
        return follow(st, in);
    }
    if (in->n_held <= in->share) {
        st->is_over = false;
        return PLACEMENT_NOTHING;
    }
    if (!st->is_over) {
        st->is_over = true;
        st->over_since_ms = in->now_ms;
    }
    if (in->now_ms - st->over_since_ms < in->ttl_ms) {
        return PLACEMENT_NOTHING;
    }
    ptrdiff_t i = placement_pick(in->held, in->n_held);
    ASSERT(i >= 0);
    struct slice name = in->held[i].name;
    size_t len =
        name.len < sizeof(st->giving) - 1 ? name.len : sizeof(st->giving) - 1;
    memcpy(st->giving, name.ptr, len);
    st->giving[len] = '\0';
    st->is_giving = true;
    st->is_released = false;
    st->is_over = false;
    return PLACEMENT_GIVE_BACK;
}

void placement_on_released(struct placement_state *st, int64_t now_ms)
{
    st->is_released = true;
    st->released_at_ms = now_ms;
}
