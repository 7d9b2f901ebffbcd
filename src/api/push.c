/* POST /api/v1/push (docs/design/http-api.md §2): parse the items, mint message
 * ids, propose one PUSH command, answer 201 with one element per item when it
 * applies.
 *
 * The body is scanned once with tok_depth 3 (body object, items array, item
 * object, item members), so each payload is one token whose span is the
 * producer's exact bytes; the scanner still validates everything below it
 * (UTF-8, numbers, depth), so a bad payload refuses the whole request before
 * anything is proposed (api.h (1)). Offsets, dedup verdicts and stamps are
 * decided by the fsm at apply time; this file only renders its verdicts. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api/api.h"
#include "api/metrics.h"
#include "api/tenant.h"
#include "base/aead.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "http/server.h"
#include "raft/node.h"
#include "store/format.h"

#define PUSH_DEFAULT_PARTITION "Default"

/* The unescaped text of string token i: a slice of the body when it has no
 * escapes, else a copy in the arena (reserved up front, never moves). */
static int push_str(struct api_push *p, int i, struct slice *out,
                    struct err *err)
{
    const struct json_tok *t = &p->doc.toks[i];
    size_t start = p->arena.len;

    if (!t->has_escapes) {
        out->ptr = p->doc.text + t->start + 1;
        out->len = t->len - 2;
        return 0;
    }
    if (json_get_str(&p->doc, i, &p->arena, err) != 0) {
        return err->code;
    }
    out->ptr = p->arena.data + start;
    out->len = p->arena.len - start;
    return 0;
}

static int push_name(struct api_push *p, size_t idx, const char *field, int tok,
                     struct slice *out, struct err *err)
{
    int rc;

    if (json_type(&p->doc, tok) != JSON_STRING) {
        return err_set(err, ERR_INVALID,
                       "bad push body: items[%zu].%s: a string is required",
                       idx, field);
    }
    if (push_str(p, tok, out, err) != 0) {
        return err->code;
    }
    rc = api_check_name(*out, err, "items[%zu].%s", idx, field);
    return rc == ERR_INVALID ? err_wrap(err, "bad push body") : rc;
}

static int push_txn(struct api_push *p, size_t idx, int tok, struct err *err)
{
    struct cmd_push_item *it = &p->items[idx];

    if (tok < 0 || json_is_null(&p->doc, tok)) {
        return 0;
    }
    if (json_type(&p->doc, tok) != JSON_STRING) {
        return err_set(err, ERR_INVALID,
                       "bad push body: items[%zu].transactionId: a string is "
                       "required",
                       idx);
    }
    if (push_str(p, tok, &it->txn, err) != 0) {
        return err->code;
    }
    if (it->txn.len > CMD_TXN_MAX) {
        return err_set(err, ERR_TOO_BIG,
                       "items[%zu].transactionId: %zu bytes is over the "
                       "%d-byte limit",
                       idx, it->txn.len, CMD_TXN_MAX);
    }
    p->has_txn[idx] = it->txn.len > 0;
    return 0;
}

/* The fields of an item this parser reads; each may appear once (a
 * repeated one is refused rather than read first-wins: json.h (5)). The
 * payload's own members are the producer's and never looked at. */
static const char *const push_keys[] = {"queue", "partition", "payload",
                                        "transactionId"};

static int push_item(struct api_push *p, size_t idx, int obj, struct err *err)
{
    struct cmd_push_item *it = &p->items[idx];
    const struct json_doc *d = &p->doc;
    int v[ARRAY_LEN(push_keys)];
    int dup = json_obj_pick(d, obj, push_keys, (int)ARRAY_LEN(push_keys), v);
    int q = v[0];
    int part = v[1];
    int payload = v[2];

    if (json_type(d, obj) != JSON_OBJECT) {
        return err_set(err, ERR_INVALID,
                       "bad push body: items[%zu]: an object is required", idx);
    }
    if (dup >= 0) {
        return err_set(err, ERR_INVALID,
                       "bad push body: items[%zu]: duplicate key \"%s\"", idx,
                       push_keys[dup]);
    }
    if (q < 0) {
        return err_set(err, ERR_INVALID,
                       "bad push body: items[%zu].queue is required", idx);
    }
    if (push_name(p, idx, "queue", q, &it->queue, err) != 0) {
        return err->code;
    }
    if (it->queue.len == 0) {
        return err_set(err, ERR_INVALID,
                       "bad push body: items[%zu].queue is empty", idx);
    }
    it->partition = SLICE_LIT(PUSH_DEFAULT_PARTITION);
    if (part >= 0 && !json_is_null(d, part)) {
        if (push_name(p, idx, "partition", part, &it->partition, err) != 0) {
            return err->code;
        }
        if (it->partition.len == 0) {
            it->partition = SLICE_LIT(PUSH_DEFAULT_PARTITION);
        }
    }
    if (push_txn(p, idx, v[3], err) != 0) {
        return err->code;
    }
    if (payload < 0) {
        return err_set(err, ERR_INVALID,
                       "bad push body: items[%zu].payload is required", idx);
    }
    it->payload = json_span(d, payload); /* (2) verbatim */
    return 0;
}

int api_push_parse(struct api_push *p, const char *body, size_t len,
                   struct err *err)
{
    struct json_limits lim = {JSON_MAX_DEPTH_DEFAULT, 3, API_PUSH_MAX_TOKENS};
    int items;
    size_t i = 0;

    memset(p, 0, sizeof(*p));
    buf_init(&p->arena, BUF_UNLIMITED);
    if (json_parse(&p->doc, body, len, &lim, err) != 0) {
        if (err->code != ERR_TOO_BIG) {
            err->code = ERR_INVALID;
        }
        return err_wrap(err, "bad push body");
    }
    if (json_obj_pick(&p->doc, 0, (const char *const[]){"items"}, 1, &items) >=
        0) {
        return err_set(err, ERR_INVALID,
                       "bad push body: duplicate key \"items\"");
    }
    if (json_type(&p->doc, items) != JSON_ARRAY) {
        return err_set(err, ERR_INVALID,
                       "bad push body: an object with an items array is "
                       "required");
    }
    p->n = p->doc.toks[items].count;
    if (p->n > CMD_PUSH_MAX_ITEMS) {
        /* A cap, like the names and the body: 413 (http-api.md §2). */
        return err_set(err, ERR_TOO_BIG,
                       "items: %zu items is over the limit of %d per push",
                       p->n, CMD_PUSH_MAX_ITEMS);
    }
    p->items = xcalloc(p->n + 1, sizeof(*p->items));
    p->has_txn = xcalloc(p->n + 1, sizeof(*p->has_txn));
    p->id_text = xcalloc(p->n + 1, sizeof(*p->id_text));
    if (buf_reserve(&p->arena, len + 16, err) != 0) {
        return err->code;
    }
    for (int t = json_child(&p->doc, items); t >= 0;
         t = json_next(&p->doc, t)) {
        ASSERT(i < p->n);
        if (push_item(p, i, t, err) != 0) {
            return err->code;
        }
        i++;
    }
    ASSERT(i == p->n);
    return 0;
}

void api_push_mint(struct api_push *p, api_mint_fn mint, void *ctx)
{
    for (size_t i = 0; i < p->n; i++) {
        struct cmd_push_item *it = &p->items[i];

        mint(ctx, it->message_id);
        uuid7_format(it->message_id, p->id_text[i]);
        if (!p->has_txn[i]) {
            it->txn.ptr = p->id_text[i];
            it->txn.len = 36;
            it->txn_is_id = true;
        }
    }
}

static const char *push_status_name(int status)
{
    switch (status) {
    case FSM_ITEM_QUEUED:
        return "queued";
    case FSM_ITEM_DUPLICATE:
        return "duplicate";
    default:
        return "error";
    }
}

/* Append `"` id `"` (ids are hex and dashes: nothing to escape); text is
 * the id already formatted, or NULL. */
static int push_id(struct buf *out, const uint8_t id[16], const char *text,
                   struct err *err)
{
    char q[40];

    q[0] = '"';
    if (text != NULL) {
        memcpy(q + 1, text, 36);
    } else {
        uuid7_format(id, q + 1);
    }
    q[37] = '"';
    return buf_append(out, q, 38, err);
}

/* Append prefix, then v in decimal (the answer is rendered without printf:
 * it is on the push path for every item). */
static int push_int(struct buf *out, const char *prefix, int64_t v,
                    struct err *err)
{
    char d[24];
    size_t n = sizeof(d);
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

    do {
        d[--n] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0) {
        d[--n] = '-';
    }
    if (buf_append_str(out, prefix, err) != 0) {
        return err->code;
    }
    return buf_append(out, d + n, sizeof(d) - n, err);
}

/* One element of the 201 array, keys in the order of docs/design/http-api.md
 * §2. The queue name is escaped once per run of equal names (most pushes name
 * one). */
static int push_render_item(const struct api_push *p, size_t i,
                            const struct fsm_item_result *r, struct buf *out,
                            struct buf *queue_json, struct err *err)
{
    const struct cmd_push_item *it = &p->items[i];
    int status = r != NULL ? r->status : FSM_ITEM_ERROR;
    const uint8_t *id = r != NULL ? r->message_id : it->message_id;
    /* The minted id's text, when api_push_mint() made it. */
    const char *text = p->id_text[i][0] != '\0' ? p->id_text[i] : NULL;
    bool is_same_queue =
        i > 0 && it->queue.len == p->items[i - 1].queue.len &&
        memcmp(it->queue.ptr, p->items[i - 1].queue.ptr, it->queue.len) == 0;

    if (!is_same_queue) {
        buf_reset(queue_json);
        if (json_escape(queue_json, it->queue.ptr, it->queue.len, err) != 0) {
            return err->code;
        }
    }
    if (push_int(out, i > 0 ? ",{\"index\":" : "{\"index\":", (int64_t)i,
                 err) != 0 ||
        buf_append_str(out, ",\"message_id\":", err) != 0 ||
        push_id(out, id, memcmp(id, it->message_id, 16) == 0 ? text : NULL,
                err) != 0 ||
        buf_append_str(out, ",\"transaction_id\":", err) != 0 ||
        (p->has_txn[i] ? json_escape(out, it->txn.ptr, it->txn.len, err)
                       : push_id(out, it->message_id, text, err)) != 0 ||
        buf_append_str(out, ",\"queueName\":", err) != 0 ||
        buf_append(out, queue_json->data, queue_json->len, err) != 0) {
        return err->code;
    }
    if (status == FSM_ITEM_ERROR) {
        return buf_append_str(out, ",\"status\":\"error\"}", err);
    }
    if (buf_append_str(out, ",\"status\":\"", err) != 0 ||
        buf_append_str(out, push_status_name(status), err) != 0 ||
        push_int(out, "\",\"offset\":", r->offset, err) != 0) {
        return err->code;
    }
    return buf_append_byte(out, '}', err);
}

/* An element of the 201 array without its transaction id and queue name:
 * the keys, a message id, and the longest status and numbers. */
#define PUSH_ITEM_FIXED 200

int api_push_render(const struct api_push *p, const struct fsm_result *res,
                    struct buf *out, struct err *err)
{
    struct buf queue_json;
    bool is_whole = res != NULL && res->code == 0 && res->n_items == p->n;
    size_t need = 2;
    int rc;

    /* One allocation for the whole answer (a guess; every append still
     * checks): growing it by doubling copied it ~log2(n) times. */
    for (size_t i = 0; i < p->n; i++) {
        need += PUSH_ITEM_FIXED + p->items[i].txn.len + p->items[i].queue.len;
    }
    if (buf_reserve(out, need, err) != 0) {
        return err->code;
    }
    rc = buf_append_byte(out, '[', err);
    buf_init(&queue_json, BUF_UNLIMITED);
    for (size_t i = 0; rc == 0 && i < p->n; i++) {
        rc = push_render_item(p, i, is_whole ? &res->items[i] : NULL, out,
                              &queue_json, err);
    }
    buf_free(&queue_json);
    return rc == 0 ? buf_append_byte(out, ']', err) : rc;
}

uint64_t api_push_queued_bytes(const struct api_push *p,
                               const struct fsm_result *res)
{
    uint64_t n = 0;

    if (res == NULL || res->n_items != p->n) {
        return 0;
    }
    for (size_t i = 0; i < p->n; i++) {
        if (res->items[i].status == FSM_ITEM_QUEUED) {
            n += p->items[i].payload.len;
        }
    }
    return n;
}

/* The bytes a payload of n takes sealed in the form asked for. */
static size_t push_sealed_len(size_t n, bool binary)
{
    return binary ? n + AEAD_SEALED_OVERHEAD : aead_envelope_len(n);
}

size_t api_push_seal(struct api_push *p, const bool *seal,
                     const uint8_t key[32], bool binary)
{
    size_t need = 0;
    size_t failed = 0;
    struct err err;

    for (size_t i = 0; i < p->n; i++) {
        need += seal[i] ? push_sealed_len(p->items[i].payload.len, binary) : 0;
    }
    buf_free(&p->sealed);
    buf_init(&p->sealed, need); /* the reserve is the cap: it never moves */
    if (need == 0 || buf_reserve(&p->sealed, need, &err) != 0) {
        return 0;
    }
    for (size_t i = 0; i < p->n; i++) {
        struct slice *pl = &p->items[i].payload;
        size_t at = p->sealed.len;
        int rc;

        if (!seal[i]) {
            continue;
        }
        rc = binary ? aead_seal_raw(key, (const uint8_t *)pl->ptr, pl->len,
                                    &p->sealed, &err)
                    : aead_seal(key, (const uint8_t *)pl->ptr, pl->len,
                                &p->sealed, &err);
        if (rc != 0) {
            failed++;
            continue;
        }
        pl->ptr = p->sealed.data + at;
        pl->len = p->sealed.len - at;
        p->items[i].sealed = binary;
    }
    return failed;
}

void api_push_free(struct api_push *p)
{
    json_doc_free(&p->doc);
    free(p->items);
    free(p->has_txn);
    free(p->id_text);
    buf_free(&p->arena);
    buf_free(&p->sealed);
    memset(p, 0, sizeof(*p));
}

/* ---- the handler ----
 *
 * Group commit. A push entry costs a raft disk write and an LMDB write
 * transaction whatever its size, so while the node has push_in_flight()
 * entries not yet committed (being written), the requests that arrive wait
 * in that node's queue; when an entry is committed (node_on_commit, before
 * it applies), the queue becomes ONE entry (one command, one stamp, one
 * transaction) that libraft writes while the committed one applies and is
 * answered. What stays true (docs/design/http-api.md §2, §12):
 *   (1) a request's items are contiguous in one entry, so they share one
 *       stamp; a request proposed later lies in a later entry, so its stamp
 *       is greater (requests coalesced together were concurrent: neither
 *       was answered before the other arrived);
 *   (2) each request gets its own answer from its slice of the entry's
 *       result; dedup verdicts across requests of one entry are the fsm's
 *       intra-entry verdicts, the same a later entry would get;
 *   (3) a 201 still means the entry is committed: answers are written only
 *       from the applied callback.
 * A queue holds at most PUSH_BATCH_ITEMS items and PUSH_BATCH_BYTES of
 * bodies, all of one tenant (a command has one tenant); a request that
 * would overflow it, or is another tenant's, flushes the queue first. */

/* Entries not yet committed before requests wait: one on a single node,
 * where a commit is one local fsync and a deeper pipe only makes entries
 * smaller; more in a cluster, where a commit also waits for a peer's
 * round trip (or, on a follower, the leader's answer) and one entry in
 * flight left the disks idle (bench/cluster: +40% records/s and a lower
 * p99 on 3 nodes at 4). */
#define PUSH_IN_FLIGHT_ONE     1
#define PUSH_IN_FLIGHT_CLUSTER 4
#define PUSH_BATCH_ITEMS       20000
#define PUSH_BATCH_BYTES       ((size_t)1 << 20)

struct push_op {
    struct api *a;
    struct http_req *req;
    struct api_push p;
    uint8_t tenant[16];   /* api_tenant() */
    struct push_op *next; /* in a queue or a proposed batch */
    size_t base;          /* index of its first item in the entry */
};

/* The requests waiting for one node's next push entry. Loop thread only;
 * found by node pointer (struct api has no room for it). Empty and idle
 * once the node closed: every proposal calls back. */
struct push_queue {
    struct push_queue *next;
    struct node *node;
    struct push_op *head;
    struct push_op *tail;
    size_t n_items;
    size_t n_bytes;
    struct buf cmd; /* the encoding buffer, kept warm between entries */
};

static struct push_queue *push_queues;

static unsigned push_in_flight(struct node *node)
{
    return node_voters(node) > 1 ? PUSH_IN_FLIGHT_CLUSTER : PUSH_IN_FLIGHT_ONE;
}

static void push_flush(struct push_queue *q);

/* node_on_commit: an entry left the disk; propose what waited for it. */
static void push_committed(void *arg)
{
    struct push_queue *q = arg;

    if (node_uncommitted(q->node) < push_in_flight(q->node)) {
        push_flush(q);
    }
}

static struct push_queue *push_queue_of(struct node *node)
{
    struct push_queue *q;

    for (q = push_queues; q != NULL; q = q->next) {
        if (q->node == node) {
            return q;
        }
    }
    q = xcalloc(1, sizeof(*q));
    q->node = node;
    buf_init(&q->cmd, CMD_HEADER_LEN + CMD_BODY_MAX);
    q->next = push_queues;
    push_queues = q;
    return q;
}

/* The receiver's UUIDv7 minting (docs/design/http-api.md §13): one generator on
 * the loop thread, the wall clock, and random bytes drawn once per request (one
 * getrandom call for every id of the request). */
struct push_minter {
    struct api *a;
    uint64_t now_ms;
    uint8_t *rnd; /* 8 bytes per item */
    size_t next;
};

static void push_mint(void *ctx, uint8_t id[16])
{
    struct push_minter *m = ctx;

    uuid7_make(&m->a->gen, m->now_ms, m->rnd + 8 * m->next++, id);
}

static void push_mint_all(struct api *a, struct api_push *p)
{
    struct push_minter m = {a, 0, xmalloc(8 * p->n), 0};
    struct timespec ts;
    size_t got = 0;

    while (got < 8 * p->n) {
        ssize_t k = getrandom(m.rnd + got, 8 * p->n - got, 0);
        if (k > 0) {
            got += (size_t)k;
        }
    }
    ASSERT(clock_gettime(CLOCK_REALTIME, &ts) == 0);
    m.now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    api_push_mint(p, push_mint, &m);
    free(m.rnd);
}

static void push_count(struct api *a, const struct api_push *p,
                       const struct fsm_result *res)
{
    uint64_t queued = 0;
    uint64_t dups = 0;

    for (size_t i = 0; res != NULL && i < res->n_items; i++) {
        queued += res->items[i].status == FSM_ITEM_QUEUED;
        dups += res->items[i].status == FSM_ITEM_DUPLICATE;
    }
    metrics_push(a->metrics, queued, dups, api_push_queued_bytes(p, res));
}

static void push_op_free(struct push_op *op)
{
    api_push_free(&op->p);
    free(op);
}

/* Answer one request of an applied (or failed) entry and free it. res is
 * the request's slice of the entry's result. */
static void push_answer(struct push_op *op, int status,
                        const struct fsm_result *res, const struct err *perr)
{
    struct buf out;
    struct err err;

    if (status != 0) {
        api_respond_err(op->a, op->req, perr);
        push_op_free(op);
        return;
    }
    buf_init(&out, BUF_UNLIMITED);
    if (api_push_render(&op->p, res, &out, &err) != 0) {
        buf_free(&out);
        api_respond_err(op->a, op->req, &err);
        push_op_free(op);
        return;
    }
    push_count(op->a, &op->p, res);
    api_respond_json(op->a, op->req, 201, &out);
    push_op_free(op);
}

/* The applied callback of one batch (arg: its first op; ops linked). */
static void push_applied(void *arg, int status, const struct fsm_result *res,
                         const struct err *perr)
{
    struct push_op *op = arg;
    struct api *a = op->a;
    struct push_queue *q = push_queue_of(a->node);
    size_t total = 0;

    for (struct push_op *o = op; o != NULL; o = o->next) {
        total += o->p.n;
    }
    while (op != NULL) {
        struct push_op *next = op->next;
        struct fsm_result view;

        if (status == 0) {
            view = *res;
            view.items = res->items + (res->n_items == total ? op->base : 0);
            view.n_items = res->n_items == total ? op->p.n : 0;
        }
        push_answer(op, status, status == 0 ? &view : NULL, perr);
        op = next;
    }
    /* The waiters of the partitions this entry appended to were woken by
     * the fsm's change hook (api_changed), on every node. */
    push_committed(q);
}

/* Encode the ops (linked, bases set) as one PUSH command and propose it.
 * On a refusal every op is answered with it. */
static void push_propose(struct push_queue *q, struct push_op *ops,
                         size_t n_items)
{
    struct cmd_push_item *items = ops->p.items;
    struct err err;
    int rc;

    if (ops->next != NULL) {
        items = xmalloc(n_items * sizeof(*items));
        for (struct push_op *o = ops; o != NULL; o = o->next) {
            memcpy(items + o->base, o->p.items, o->p.n * sizeof(*items));
        }
    }
    buf_reset(&q->cmd);
    rc = cmd_push_encode(&q->cmd, ops->tenant, items, n_items, &err);
    if (rc == 0) {
        rc = node_propose(q->node, CMD_PUSH, q->cmd.data, q->cmd.len,
                          push_applied, ops, &err);
    }
    if (q->cmd.cap > PUSH_BATCH_BYTES * 2) {
        buf_free(&q->cmd); /* a rare huge request: do not keep its buffer */
        buf_init(&q->cmd, CMD_HEADER_LEN + CMD_BODY_MAX);
    }
    if (items != ops->p.items) {
        free(items);
    }
    if (rc == 0) {
        return;
    }
    while (ops != NULL) {
        struct push_op *next = ops->next;

        push_answer(ops, rc, NULL, &err);
        ops = next;
    }
}

/* Propose the waiting requests as one entry, if any. */
static void push_flush(struct push_queue *q)
{
    struct push_op *ops = q->head;
    size_t n = q->n_items;

    if (ops == NULL) {
        return;
    }
    q->head = q->tail = NULL;
    q->n_items = 0;
    q->n_bytes = 0;
    push_propose(q, ops, n);
}

/* Queue op for the node's next push entry; propose at once when fewer than
 * push_in_flight() entries of the node are not yet committed. */
static void push_submit(struct api *a, struct push_op *op)
{
    struct push_queue *q = push_queue_of(a->node);

    node_on_commit(q->node, push_committed, q); /* (a node may be new) */
    if (q->head != NULL && (memcmp(q->head->tenant, op->tenant, 16) != 0 ||
                            q->n_items + op->p.n > PUSH_BATCH_ITEMS ||
                            q->n_bytes + op->req->body.len + op->p.sealed.len >
                                PUSH_BATCH_BYTES)) {
        push_flush(q);
    }
    op->base = q->n_items;
    op->next = NULL;
    if (q->tail != NULL) {
        q->tail->next = op;
    } else {
        q->head = op;
    }
    q->tail = op;
    q->n_items += op->p.n;
    q->n_bytes += op->req->body.len + op->p.sealed.len;
    if (node_uncommitted(q->node) < push_in_flight(q->node)) {
        push_flush(q);
    }
}

#define PUSH_SEAL_WARN_MS 60000

/* The records of one request stored plaintext although their queue has
 * encryptionEnabled: warn at most once a minute, counting the rest. */
static void push_seal_warn(struct api *a, const char *msg, struct slice queue,
                           size_t n)
{
    struct timespec ts;
    int64_t now;

    ASSERT(clock_gettime(CLOCK_MONOTONIC, &ts) == 0);
    now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    a->seal_plaintext += n;
    if (a->seal_warned_ms != 0 && now - a->seal_warned_ms < PUSH_SEAL_WARN_MS) {
        return;
    }
    log_warn_kv("api", msg,
                {"queue", LOG_FMT("%.*s", (int)queue.len, queue.ptr)},
                {"records", LOG_U64(a->seal_plaintext)});
    a->seal_warned_ms = now;
    a->seal_plaintext = 0;
}

/* docs/design/formats.md §11: seal the payloads of the items whose queue
 * has encryptionEnabled, on the node that received the push and before
 * anything is proposed (a follower forwards the sealed command). The flag
 * is read from this node's applied state, once per run of items naming the
 * same queue. */
static void push_seal(struct api *a, struct push_op *op)
{
    struct api_push *p = &op->p;
    struct slice last = {NULL, 0};
    struct slice named = {NULL, 0}; /* the first encrypted queue */
    bool is_enc = false;
    bool *seal = NULL;
    size_t n = 0;
    size_t failed;

    for (size_t i = 0; i < p->n; i++) {
        struct slice q = p->items[i].queue;
        if (last.ptr == NULL || q.len != last.len ||
            memcmp(q.ptr, last.ptr, q.len) != 0) {
            struct store_queue_info info;
            struct err err;
            last = q;
            is_enc =
                store_get_queue(a->store, op->tenant, q, &info, &err) == 0 &&
                info.options.encryption_enabled;
        }
        if (is_enc) {
            named = named.ptr != NULL ? named : q;
            seal = seal != NULL ? seal : xcalloc(p->n, sizeof(*seal));
            seal[i] = true;
            n++;
        }
    }
    if (n == 0) {
        return;
    }
    if (!a->has_seal_key) {
        push_seal_warn(a,
                       "queue has encryptionEnabled but QUEEN_ENCRYPTION_KEY "
                       "is not set; stored plaintext",
                       named, n);
    } else if ((failed = api_push_seal(p, seal, a->seal_key,
                                       store_format(a->store) >=
                                           STORE_FORMAT_SEALED_BINARY)) > 0) {
        push_seal_warn(a, "encryption failed; stored plaintext", named, failed);
    }
    free(seal);
}

void api_handle_push(struct http_req *req, void *arg)
{
    struct api *a = arg;
    struct push_op *op = xcalloc(1, sizeof(*op));
    const char *code;
    struct err err;
    struct buf out;

    op->a = a;
    op->req = req;
    if (api_tenant_gated(req, a, API_GATE_PUSH, op->tenant, &code, &err) != 0) {
        api_respond_tenant(a, req, code, &err);
        free(op);
        return;
    }
    if (api_push_parse(&op->p, req->body.ptr, req->body.len, &err) != 0) {
        api_respond_error(a, req, err.code == ERR_TOO_BIG ? 413 : 400,
                          err.code == ERR_TOO_BIG ? "too_large" : "bad_body",
                          err.msg);
        goto out_free;
    }
    if (op->p.n == 0) {
        buf_init(&out, BUF_UNLIMITED);
        buf_append_str(&out, "[]", &err);
        metrics_push(a->metrics, 0, 0, 0);
        api_respond_json(a, req, 201, &out);
        goto out_free;
    }
    push_mint_all(a, &op->p);
    push_seal(a, op);
    push_submit(a, op);
    return; /* push_applied (or a refusal) answers and frees */
out_free:
    push_op_free(op);
}
