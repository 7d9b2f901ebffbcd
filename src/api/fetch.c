/* POST /api/v1/fetch (docs/design/http-api.md §3): reads by offset, with the
 * long poll.
 *
 * The reads are store_fetch() (the same call the sink makes in-process); this
 * file parses the body into store requests, renders the answer, and runs the
 * long poll.
 *
 * Long poll: with maxWaitMs > 0 and minBytes > 0, a fetch whose first read
 * is not ready (no entry error, weight < minBytes) becomes a waiter, parked
 * in the registry (api/longpoll.h) under every partition it names, within
 * the bounds per connection (429) and per node (503). A parked waiter keeps
 * its entries (api_fetch_compact) but not the request body. It is re-read
 * only when an apply changed a partition it names (api_changed, from the
 * fsm's change hook: appends proposed by any node); its slice timer (every
 * API_LONG_POLL_SLICE_MS) reads nothing: it answers at the deadline, with
 * whatever the partitions hold, or, with a 503 and no read, when the peer
 * went away (EOF or reset), which frees the bounds within a slice. api_stop()
 * answers every waiter at once (api.h (3)).
 *
 *   READ --not ready, time left, within bounds--> PARKED   api_handle_fetch
 *   READ --not ready, past a bound--> 429 / 503             api_handle_fetch
 *   PARKED --a partition it names changed--> READ           fetch_on_wake
 *   PARKED --deadline, stop--> READ and ANSWERED           fetch_on_timer
 *   PARKED --peer gone (EOF, closing)--> 503, no read        fetch_on_timer
 *   READ --ready--> ANSWERED                                fetch_try */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/metrics.h"
#include "api/tenant.h"
#include "base/isotime.h"
#include "base/xalloc.h"
#include "http/server.h"
#include "raft/fsm.h"
#include "raft/node.h"

#define FETCH_DEFAULT_PARTITION "Default"

/* ---- parsing ---- */

static const struct api_range max_bytes_range = {
    (int64_t)API_FETCH_DEF_BYTES, 1, (int64_t)API_FETCH_MAX_BYTES};
static const struct api_range wait_range = {0, 0, API_FETCH_MAX_WAIT_MS};
static const struct api_range min_bytes_range = {1, 0, INT64_MAX};

/* A string token's unescaped text: a slice of the body, or a copy in the
 * arena (reserved up front, never moves). */
static int fetch_str(const struct json_doc *d, int i, struct buf *arena,
                     struct slice *out, struct err *err)
{
    const struct json_tok *t = &d->toks[i];
    size_t start = arena->len;

    if (!t->has_escapes) {
        out->ptr = d->text + t->start + 1;
        out->len = t->len - 2;
        return 0;
    }
    if (json_get_str(d, i, arena, err) != 0) {
        return err->code;
    }
    out->ptr = arena->data + start;
    out->len = arena->len - start;
    return 0;
}

/* An integer below INT64_MIN (no fraction, no exponent) is a negative
 * offset like -1: it refuses the call with the reference's sentence, not as
 * a type error. Sets *out to -1. */
static bool fetch_below_i64(const struct json_doc *d, int i, int64_t *out)
{
    struct slice s;

    if (json_type(d, i) != JSON_NUMBER) {
        return false;
    }
    s = json_span(d, i);
    if (s.ptr[0] != '-' || memchr(s.ptr, '.', s.len) != NULL ||
        memchr(s.ptr, 'e', s.len) != NULL ||
        memchr(s.ptr, 'E', s.len) != NULL) {
        return false;
    }
    *out = -1;
    return true;
}

/* The names' bounds, as push checks them (api_check_name): a name push
 * would refuse is refused here too, not read as an unknown queue. */
static int fetch_names(size_t idx, const struct store_fetch_req *r,
                       struct err *err)
{
    int rc = api_check_name(r->queue, err, "entries[%zu].queue", idx);

    if (rc == 0) {
        rc = api_check_name(r->partition, err, "entries[%zu].partition", idx);
    }
    return rc == ERR_INVALID ? err_wrap(err, "bad fetch body") : rc;
}

/* The fields of an entry this parser reads; each may appear once (a
 * repeated one is refused rather than read first-wins, as push does:
 * json.h (5)). */
static const char *const fetch_keys[] = {"queue", "partition", "offset",
                                         "maxBytes"};

static int fetch_entry(struct api_fetch *f, size_t idx, int obj,
                       bool *is_negative, struct err *err)
{
    const struct json_doc *d = &f->doc;
    struct store_fetch_req *r = &f->reqs[idx];
    int k[ARRAY_LEN(fetch_keys)];
    int dup = json_obj_pick(d, obj, fetch_keys, (int)ARRAY_LEN(fetch_keys), k);
    int q = k[0];
    int part = k[1];
    int64_t v;

    if (dup >= 0) {
        return err_set(err, ERR_INVALID,
                       "bad fetch body: entries[%zu]: duplicate key \"%s\"",
                       idx, fetch_keys[dup]);
    }
    if (json_type(d, obj) != JSON_OBJECT || json_type(d, q) != JSON_STRING) {
        return err_set(err, ERR_INVALID,
                       "bad fetch body: "
                       "entries[%zu]: queue (a string) is "
                       "required",
                       idx);
    }
    if (fetch_str(d, q, &f->arena, &r->queue, err) != 0) {
        return err->code;
    }
    if (r->queue.len == 0) {
        return err_set(err, ERR_INVALID,
                       "bad fetch body: entries[%zu].queue is empty", idx);
    }
    r->partition = SLICE_LIT(FETCH_DEFAULT_PARTITION);
    if (json_type(d, part) == JSON_STRING) {
        if (fetch_str(d, part, &f->arena, &r->partition, err) != 0) {
            return err->code;
        }
        if (r->partition.len == 0) { /* as push reads it (http-api.md §3) */
            r->partition = SLICE_LIT(FETCH_DEFAULT_PARTITION);
        }
    } else if (json_get_i64(d, part, &v)) {
        r->partition = json_span(d, part); /* its decimal text */
    } else if (part >= 0 && !json_is_null(d, part)) {
        return err_set(err, ERR_INVALID,
                       "bad fetch body: "
                       "entries[%zu].partition: a string or an "
                       "integer is required",
                       idx);
    }
    if (fetch_names(idx, r, err) != 0) {
        return err->code;
    }
    if (!json_get_i64(d, k[2], &r->offset) &&
        !fetch_below_i64(d, k[2], &r->offset)) {
        return err_set(err, ERR_INVALID,
                       "bad fetch body: "
                       "entries[%zu].offset: an integer is "
                       "required",
                       idx);
    }
    *is_negative = *is_negative || r->offset < 0;
    if (!api_json_int(d, obj, "maxBytes", &max_bytes_range, &v)) {
        return err_set(err, ERR_INVALID,
                       "bad fetch body: "
                       "entries[%zu].maxBytes: an integer is "
                       "required",
                       idx);
    }
    r->max_bytes = (uint64_t)v;
    return 0;
}

static int fetch_options(struct api_fetch *f, struct err *err)
{
    int64_t v;

    if (!api_json_int(&f->doc, 0, "maxWaitMs", &wait_range, &f->max_wait_ms)) {
        return err_set(err, ERR_INVALID,
                       "bad fetch body: "
                       "maxWaitMs: an integer is required");
    }
    if (!api_json_int(&f->doc, 0, "minBytes", &min_bytes_range, &v)) {
        return err_set(err, ERR_INVALID,
                       "bad fetch body: "
                       "minBytes: an integer is required");
    }
    f->min_bytes = (uint64_t)v;
    return 0;
}

/* The root's fields, each read once (fetch_keys). */
static const char *const fetch_root_keys[] = {"entries", "maxWaitMs",
                                              "minBytes"};

int api_fetch_parse(struct api_fetch *f, const char *body, size_t len,
                    const char **code, struct err *err)
{
    struct json_limits lim = {JSON_MAX_DEPTH_DEFAULT, 3, API_READ_MAX_TOKENS};
    int root[ARRAY_LEN(fetch_root_keys)];
    int dup;
    int entries;
    size_t i = 0;
    bool is_negative = false;

    memset(f, 0, sizeof(*f));
    buf_init(&f->arena, BUF_UNLIMITED);
    *code = "bad_body";
    if (json_parse(&f->doc, body, len, &lim, err) != 0) {
        if (err->code != ERR_TOO_BIG) {
            err->code = ERR_INVALID;
        }
        return err_wrap(err, "bad fetch body");
    }
    dup = json_obj_pick(&f->doc, 0, fetch_root_keys,
                        (int)ARRAY_LEN(fetch_root_keys), root);
    if (dup >= 0) {
        return err_set(err, ERR_INVALID, "bad fetch body: duplicate key \"%s\"",
                       fetch_root_keys[dup]);
    }
    entries = root[0];
    if (json_type(&f->doc, entries) != JSON_ARRAY) {
        return err_set(err, ERR_INVALID,
                       "bad fetch body: "
                       "an object with an entries array is "
                       "required");
    }
    f->n = f->doc.toks[entries].count;
    if (f->n > API_MAX_ENTRIES) {
        *code = NULL;
        return err_set(err, ERR_INVALID, "too many entries");
    }
    if (fetch_options(f, err) != 0 ||
        buf_reserve(&f->arena, len + 16, err) != 0) {
        return err->code;
    }
    f->reqs = xcalloc(f->n + 1, sizeof(*f->reqs));
    for (int t = json_child(&f->doc, entries); t >= 0;
         t = json_next(&f->doc, t), i++) {
        if (fetch_entry(f, i, t, &is_negative, err) != 0) {
            return err->code;
        }
    }
    if (is_negative) {
        *code = NULL;
        return err_set(err, ERR_INVALID, "offset must be non-negative");
    }
    return 0;
}

void api_fetch_compact(struct api_fetch *f)
{
    struct buf arena;
    struct err err;
    size_t need = 1;

    for (size_t i = 0; i < f->n; i++) {
        need += f->reqs[i].queue.len + f->reqs[i].partition.len;
    }
    buf_init(&arena, BUF_UNLIMITED);
    ASSERT(buf_reserve(&arena, need, &err) == 0); /* never moves after */
    for (size_t i = 0; i < f->n; i++) {
        struct store_fetch_req *r = &f->reqs[i];
        size_t at = arena.len;

        ASSERT(buf_append(&arena, r->queue.ptr, r->queue.len, &err) == 0);
        r->queue.ptr = arena.data + at;
        at = arena.len;
        ASSERT(buf_append(&arena, r->partition.ptr, r->partition.len, &err) ==
               0);
        r->partition.ptr = arena.data + at;
    }
    json_doc_free(&f->doc);
    memset(&f->doc, 0, sizeof(f->doc));
    buf_free(&f->arena);
    f->arena = arena;
}

void api_fetch_free(struct api_fetch *f)
{
    json_doc_free(&f->doc);
    free(f->reqs);
    buf_free(&f->arena);
    memset(f, 0, sizeof(*f));
}

/* ---- rendering ---- */

static void fetch_render_record(struct jw *w, const struct store_record *r)
{
    char ts[32];

    isotime_format_us(r->ts, ts);
    jw_obj_begin(w);
    jw_key(w, "offset");
    jw_i64(w, r->offset);
    jw_key(w, "transactionId");
    jw_str(w, r->txn.ptr, r->txn.len);
    jw_key(w, "payload");
    if (r->payload.len == 0) {
        jw_null(w);
    } else {
        jw_raw(w, r->payload.ptr, r->payload.len); /* api.h (2) */
    }
    jw_key(w, "ts");
    jw_cstr(w, ts);
    jw_obj_end(w);
}

int api_fetch_render(const struct api_fetch *f,
                     const struct store_fetch_answer *ans, struct buf *out,
                     struct err *err)
{
    struct jw w;

    ASSERT(ans->n_entries == f->n);
    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "entries");
    jw_arr_begin(&w);
    for (size_t i = 0; i < f->n; i++) {
        const struct store_fetch_entry *e = &ans->entries[i];
        const char *name = store_entry_error_name(e->error);

        jw_obj_begin(&w);
        jw_key(&w, "queue");
        jw_str(&w, f->reqs[i].queue.ptr, f->reqs[i].queue.len);
        jw_key(&w, "partition");
        jw_str(&w, f->reqs[i].partition.ptr, f->reqs[i].partition.len);
        jw_key(&w, "records");
        jw_arr_begin(&w);
        for (size_t k = 0; k < e->n_records; k++) {
            fetch_render_record(&w, &e->records[k]);
        }
        jw_arr_end(&w);
        jw_key(&w, "highWatermark");
        jw_i64(&w, e->high_watermark);
        jw_key(&w, "logStartOffset");
        jw_i64(&w, e->log_start);
        if (name != NULL) {
            jw_key(&w, "error");
            jw_cstr(&w, name);
        }
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

uint64_t api_fetch_weight(const struct store_fetch_answer *ans)
{
    uint64_t n = 0;

    for (size_t i = 0; i < ans->n_entries; i++) {
        const struct store_fetch_entry *e = &ans->entries[i];
        for (size_t k = 0; k < e->n_records; k++) {
            size_t len = e->records[k].payload.len;
            n += len > 0 ? len : 1;
        }
    }
    return n;
}

bool api_fetch_is_ready(const struct api_fetch *f,
                        const struct store_fetch_answer *ans)
{
    for (size_t i = 0; i < ans->n_entries; i++) {
        if (ans->entries[i].error != STORE_ENTRY_OK) {
            return true;
        }
    }
    return api_fetch_weight(ans) >= f->min_bytes;
}

/* ---- the handler and its waiters ---- */

struct api_waiter {
    struct longpoll_waiter lp; /* its place in a->lp */
    struct api *a;
    struct http_req *req;
    struct api_fetch f;
    uint8_t tenant[16];
    uint64_t deadline_ms; /* uv_now() scale */
    uv_timer_t timer;
    struct api_waiter *prev;
    struct api_waiter *next;
    bool is_waiting;
};

static void fetch_waiter_free(uv_handle_t *h)
{
    struct api_waiter *w = container_of(h, struct api_waiter, timer);

    api_fetch_free(&w->f);
    free(w);
}

static void fetch_unlink(struct api_waiter *w)
{
    struct api *a = w->a;

    if (!w->is_waiting) {
        return;
    }
    longpoll_unpark(&a->lp, &w->lp);
    if (w->prev != NULL) {
        w->prev->next = w->next;
    } else {
        a->waiters = w->next;
    }
    if (w->next != NULL) {
        w->next->prev = w->prev;
    }
    w->is_waiting = false;
}

static void fetch_done(struct api_waiter *w)
{
    fetch_unlink(w);
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, fetch_waiter_free);
}

/* Read once; answer when ready, at the deadline, or when forced. Returns
 * true when answered (the waiter is then being freed); false with the read
 * in *keep when given (the caller frees it), else freed here. */
static bool fetch_try(struct api_waiter *w, bool is_forced,
                      struct store_fetch_answer *keep)
{
    struct api *a = w->a;
    struct store_fetch_answer ans;
    struct buf out;
    struct err err;
    bool is_late = uv_now(a->loop) >= w->deadline_ms;

    memset(&ans, 0, sizeof(ans));
    if (store_fetch(a->store, w->tenant, w->f.reqs, w->f.n, &ans, &err) != 0) {
        store_fetch_answer_free(&ans);
        api_respond_err(a, w->req, &err);
        fetch_done(w);
        return true;
    }
    if (!is_forced && !is_late && w->f.max_wait_ms > 0 && w->f.min_bytes > 0 &&
        !a->is_stopping && !api_fetch_is_ready(&w->f, &ans)) {
        if (keep != NULL) {
            *keep = ans;
        } else {
            store_fetch_answer_free(&ans);
        }
        return false;
    }
    buf_init(&out, BUF_UNLIMITED);
    if (api_fetch_render(&w->f, &ans, &out, &err) != 0) {
        buf_free(&out);
        api_respond_err(a, w->req, &err);
    } else {
        api_respond_json(a, w->req, 200, &out);
    }
    store_fetch_answer_free(&ans);
    fetch_done(w);
    return true;
}

static void fetch_arm(struct api_waiter *w);

/* The slice: no read unless the deadline passed. A waiter whose peer went
 * away answers 503 without a read: the answer is dropped (or read by a
 * half-closed peer, which may retry), so reading up to maxBytes per entry
 * for it would only cost memory and time. */
static void fetch_on_timer(uv_timer_t *t)
{
    struct api_waiter *w = container_of(t, struct api_waiter, timer);
    struct err err;

    if (http_req_is_abandoned(w->req)) {
        err_set(&err, ERR_BUSY, "the client went away during the long poll");
        api_respond_err(w->a, w->req, &err); /* 503 retry */
        fetch_done(w);
        return;
    }
    if (uv_now(w->a->loop) >= w->deadline_ms) {
        fetch_try(w, true, NULL);
        return;
    }
    fetch_arm(w);
}

/* Wake at the deadline or after one slice, whichever is first. */
static void fetch_arm(struct api_waiter *w)
{
    uint64_t now = uv_now(w->a->loop);
    uint64_t left = w->deadline_ms > now ? w->deadline_ms - now : 0;

    uv_timer_start(
        &w->timer, fetch_on_timer,
        left < API_LONG_POLL_SLICE_MS ? left : API_LONG_POLL_SLICE_MS, 0);
}

/* Park w (its first read, ans, was not ready): within the bounds, keep
 * only its entries and wait; past one, answer 429 / 503. */
static void fetch_park(struct api_waiter *w,
                       const struct store_fetch_answer *ans)
{
    struct api *a = w->a;
    struct longpoll_want want = {w->tenant, w->f.reqs, w->f.n, w->f.min_bytes};
    struct buf body;
    struct err err;

    if (longpoll_park(&a->lp, &w->lp, http_req_conn_id(w->req), &want, &err) !=
        0) {
        api_respond_err(a, w->req, &err);
        fetch_done(w);
        return;
    }
    longpoll_seen(&w->lp, ans);
    api_fetch_compact(&w->f);
    http_req_take_body(w->req, &body);
    buf_free(&body);
    w->next = a->waiters;
    if (a->waiters != NULL) {
        a->waiters->prev = w;
    }
    a->waiters = w;
    w->is_waiting = true;
    fetch_arm(w);
}

void api_handle_fetch(struct http_req *req, void *arg)
{
    struct api *a = arg;
    struct api_waiter *w = xcalloc(1, sizeof(*w));
    struct store_fetch_answer ans;
    const char *code;
    struct err err;

    w->a = a;
    w->req = req;
    if (api_tenant_gated(req, a, API_GATE_READ, w->tenant, &code, &err) != 0) {
        api_respond_tenant(a, req, code, &err);
        free(w);
        return;
    }
    if (api_fetch_parse(&w->f, req->body.ptr, req->body.len, &code, &err) !=
        0) {
        api_respond_error(a, req, err.code == ERR_TOO_BIG ? 413 : 400,
                          err.code == ERR_TOO_BIG ? "too_large" : code,
                          err.msg);
        api_fetch_free(&w->f);
        free(w);
        return;
    }
    uv_timer_init(a->loop, &w->timer);
    w->deadline_ms = uv_now(a->loop) + (uint64_t)w->f.max_wait_ms;
    if (!fetch_try(w, false, &ans)) {
        fetch_park(w, &ans);
        store_fetch_answer_free(&ans);
    }
}

/* Re-read up to API_WAKE_BATCH pending waiters; come back next turn for
 * the rest, so a burst of wakes never holds the loop for long. */
static void fetch_on_wake(uv_timer_t *t)
{
    struct api *a = container_of(t, struct api, wake_timer);
    struct longpoll_waiter *lw;
    struct store_fetch_answer ans;

    for (size_t i = 0; i < API_WAKE_BATCH; i++) {
        if ((lw = longpoll_next_pending(&a->lp)) == NULL) {
            return;
        }
        a->n_rereads++;
        if (!fetch_try(container_of(lw, struct api_waiter, lp), false, &ans)) {
            longpoll_seen(lw, &ans);
            store_fetch_answer_free(&ans);
        }
    }
    if (a->lp.pend_head != NULL) {
        uv_timer_start(&a->wake_timer, fetch_on_wake, 0, 0);
    }
}

void api_changed(void *arg, const uint8_t *tenant, const struct slice *queue,
                 const struct slice *partition, uint64_t weight)
{
    struct api *a = arg;
    size_t n;

    if (a->is_stopping || a->lp.n_parked == 0) {
        return;
    }
    n = queue != NULL
            ? longpoll_touch(&a->lp, tenant, *queue, *partition, weight)
            : longpoll_touch_all(&a->lp, tenant);
    if (n == 0 || a->loop == NULL) {
        return;
    }
    if (!a->has_wake_timer) {
        uv_timer_init(a->loop, &a->wake_timer);
        a->has_wake_timer = true;
    }
    if (!uv_is_active((uv_handle_t *)&a->wake_timer)) {
        uv_timer_start(&a->wake_timer, fetch_on_wake, 0, 0);
    }
}

void api_stop(struct api *a)
{
    a->is_stopping = true;
    if (a->node != NULL) {
        fsm_on_change(node_fsm(a->node), NULL, NULL);
    }
    while (a->waiters != NULL) {
        fetch_try(a->waiters, true, NULL);
    }
    if (a->has_wake_timer) {
        uv_close((uv_handle_t *)&a->wake_timer, NULL);
        a->has_wake_timer = false;
    }
}
