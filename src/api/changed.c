/* POST /api/v1/partitions/changed (docs/design/http-api.md §4): one page of a
 * queue's partitions in creation order, with this node's safeTime.
 *
 * store_changed() reads safeTime and the listing in one read transaction (the
 * sink calls it in-process too); the cursor ("p|<pid>") and BAD_CURSOR are
 * the store's. This file parses the entries (since, after, limit) and
 * renders the answer. A non-string `after` is passed on as its JSON text,
 * so it fails as BAD_CURSOR, as docs/design/http-api.md §4 says the broker
 * does. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/tenant.h"
#include "base/isotime.h"
#include "base/xalloc.h"
#include "http/server.h"

/* The text of token i: a string's unescaped bytes, anything else its JSON
 * text. Copies into the arena (reserved, never moves) only when escaped. */
static int changed_text(struct api_changed *c, int i, struct slice *out,
                        struct err *err)
{
    const struct json_tok *t = &c->doc.toks[i];
    size_t start = c->arena.len;

    if (t->type != JSON_STRING) {
        *out = json_span(&c->doc, i);
        return 0;
    }
    if (!t->has_escapes) {
        out->ptr = c->doc.text + t->start + 1;
        out->len = t->len - 2;
        return 0;
    }
    if (json_get_str(&c->doc, i, &c->arena, err) != 0) {
        return err->code;
    }
    out->ptr = c->arena.data + start;
    out->len = c->arena.len - start;
    return 0;
}

static const struct api_range limit_range = {STORE_CHANGED_LIMIT_MAX, 1,
                                             STORE_CHANGED_LIMIT_MAX};

static int changed_since(struct api_changed *c, size_t idx, int tok,
                         const char **code, struct err *err)
{
    struct store_changed_req *r = &c->reqs[idx];
    struct slice v = {"", 0};
    char quote[100];

    r->since = INT64_MIN;
    if (tok < 0 || json_is_null(&c->doc, tok)) {
        return 0;
    }
    if (changed_text(c, tok, &v, err) != 0) {
        return err->code;
    }
    if (json_type(&c->doc, tok) != JSON_STRING ||
        !isotime_parse_us(v.ptr, v.len, &r->since)) {
        *code = NULL;
        /* Cut at a whole UTF-8 sequence: the answer stays JSON. */
        return err_set(
            err, ERR_INVALID,
            "bad body: entry %zu: since is not a timestamp: %.*s", idx,
            (int)json_msg_quote(quote, v.ptr, v.len, sizeof(quote)), quote);
    }
    return 0;
}

/* The queue name's bounds, as push checks them (api_check_name). */
static int changed_name(size_t idx, struct slice queue, struct err *err)
{
    int rc = api_check_name(queue, err, "entries[%zu].queue", idx);

    return rc == ERR_INVALID ? err_wrap(err, "bad changed body") : rc;
}

/* The fields of an entry this parser reads; each may appear once (a
 * repeated one is refused rather than read first-wins, as push does:
 * json.h (5)). */
static const char *const changed_keys[] = {"queue", "since", "after", "limit"};

static int changed_entry(struct api_changed *c, size_t idx, int obj,
                         const char **code, struct err *err)
{
    const struct json_doc *d = &c->doc;
    struct store_changed_req *r = &c->reqs[idx];
    int k[ARRAY_LEN(changed_keys)];
    int dup =
        json_obj_pick(d, obj, changed_keys, (int)ARRAY_LEN(changed_keys), k);
    int q = k[0];
    int after = k[2];
    int64_t v;

    if (dup >= 0) {
        return err_set(err, ERR_INVALID,
                       "bad changed body: entries[%zu]: duplicate key \"%s\"",
                       idx, changed_keys[dup]);
    }
    if (json_type(d, obj) != JSON_OBJECT || json_type(d, q) != JSON_STRING) {
        return err_set(err, ERR_INVALID,
                       "bad changed body: "
                       "entries[%zu]: queue (a string) is required",
                       idx);
    }
    if (changed_text(c, q, &r->queue, err) != 0) {
        return err->code;
    }
    if (r->queue.len == 0) {
        return err_set(err, ERR_INVALID,
                       "bad changed body: entries[%zu].queue is empty", idx);
    }
    if (changed_name(idx, r->queue, err) != 0 ||
        changed_since(c, idx, k[1], code, err) != 0) {
        return err->code;
    }
    if (after >= 0 && !json_is_null(d, after) &&
        changed_text(c, after, &r->after, err) != 0) {
        return err->code;
    }
    if (!api_json_int(d, obj, "limit", &limit_range, &v)) {
        return err_set(err, ERR_INVALID,
                       "bad changed body: entries[%zu].limit: an integer is "
                       "required",
                       idx);
    }
    r->limit = (int)v;
    return 0;
}

int api_changed_parse(struct api_changed *c, const char *body, size_t len,
                      const char **code, struct err *err)
{
    struct json_limits lim = {JSON_MAX_DEPTH_DEFAULT, 3, API_READ_MAX_TOKENS};
    int entries;
    size_t i = 0;

    memset(c, 0, sizeof(*c));
    buf_init(&c->arena, BUF_UNLIMITED);
    *code = "bad_body";
    if (json_parse(&c->doc, body, len, &lim, err) != 0) {
        if (err->code != ERR_TOO_BIG) {
            err->code = ERR_INVALID;
        }
        return err_wrap(err, "bad changed body");
    }
    if (json_obj_pick(&c->doc, 0, (const char *const[]){"entries"}, 1,
                      &entries) >= 0) {
        return err_set(err, ERR_INVALID,
                       "bad changed body: duplicate key \"entries\"");
    }
    if (json_type(&c->doc, entries) != JSON_ARRAY) {
        return err_set(err, ERR_INVALID,
                       "bad changed body: "
                       "an object with an entries array is required");
    }
    c->n = c->doc.toks[entries].count;
    if (c->n > API_MAX_ENTRIES) {
        *code = NULL;
        return err_set(err, ERR_INVALID, "too many entries");
    }
    if (buf_reserve(&c->arena, len + 16, err) != 0) {
        return err->code;
    }
    c->reqs = xcalloc(c->n + 1, sizeof(*c->reqs));
    for (int t = json_child(&c->doc, entries); t >= 0;
         t = json_next(&c->doc, t), i++) {
        if (changed_entry(c, i, t, code, err) != 0) {
            return err->code;
        }
    }
    return 0;
}

void api_changed_free(struct api_changed *c)
{
    json_doc_free(&c->doc);
    free(c->reqs);
    buf_free(&c->arena);
    memset(c, 0, sizeof(*c));
}

static void changed_render_partition(struct jw *w,
                                     const struct store_partition_info *p)
{
    char id[37];
    char at[32];

    uuid7_format(p->uuid, id);
    isotime_format_us(p->last_write_at, at);
    jw_obj_begin(w);
    jw_key(w, "name");
    jw_str(w, p->name.ptr, p->name.len);
    jw_key(w, "id");
    jw_cstr(w, id);
    jw_key(w, "lastOffset");
    jw_i64(w, p->last_offset);
    jw_key(w, "logStart");
    jw_i64(w, p->log_start);
    jw_key(w, "lastWriteAt");
    jw_cstr(w, at);
    jw_obj_end(w);
}

static void changed_render_entry(struct jw *w, struct slice queue,
                                 const struct store_changed_entry *e)
{
    const char *name = store_entry_error_name(e->error);
    char next[32];

    jw_obj_begin(w);
    jw_key(w, "queue");
    jw_str(w, queue.ptr, queue.len);
    if (name != NULL) {
        jw_key(w, "error");
        jw_cstr(w, name);
        jw_obj_end(w);
        return;
    }
    jw_key(w, "partitions");
    jw_arr_begin(w);
    for (size_t k = 0; k < e->n_partitions; k++) {
        changed_render_partition(w, &e->partitions[k]);
    }
    jw_arr_end(w);
    jw_key(w, "next");
    if (e->has_next) {
        snprintf(next, sizeof(next), "p|%" PRIu64, e->next_pid);
        jw_cstr(w, next);
    } else {
        jw_null(w);
    }
    jw_obj_end(w);
}

int api_changed_render(const struct api_changed *c,
                       const struct store_changed_answer *ans, struct buf *out,
                       struct err *err)
{
    struct jw w;
    char safe[32];

    ASSERT(ans->n_entries == c->n);
    isotime_format_us(ans->safe_time, safe);
    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "safeTime");
    jw_cstr(&w, safe);
    jw_key(&w, "safeTimeDegraded");
    jw_bool(&w, false);
    jw_key(&w, "entries");
    jw_arr_begin(&w);
    for (size_t i = 0; i < c->n; i++) {
        changed_render_entry(&w, c->reqs[i].queue, &ans->entries[i]);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

void api_handle_changed(struct http_req *req, void *arg)
{
    struct api *a = arg;
    struct api_changed c;
    struct store_changed_answer ans;
    const char *code;
    struct err err;
    struct buf out;
    uint8_t tenant[16];

    if (api_tenant_gated(req, a, API_GATE_READ, tenant, &code, &err) != 0) {
        api_respond_tenant(a, req, code, &err);
        return;
    }
    if (api_changed_parse(&c, req->body.ptr, req->body.len, &code, &err) != 0) {
        api_respond_error(a, req, err.code == ERR_TOO_BIG ? 413 : 400,
                          err.code == ERR_TOO_BIG ? "too_large" : code,
                          err.msg);
        api_changed_free(&c);
        return;
    }
    memset(&ans, 0, sizeof(ans));
    buf_init(&out, BUF_UNLIMITED);
    if (store_changed(a->store, tenant, c.reqs, c.n, &ans, &err) != 0 ||
        api_changed_render(&c, &ans, &out, &err) != 0) {
        buf_free(&out);
        api_respond_err(a, req, &err);
    } else {
        api_respond_json(a, req, 200, &out);
    }
    store_changed_answer_free(&ans);
    api_changed_free(&c);
}
