/* The KV routes (api/kv.h, docs/design/http-api.md §7): parse, validate, run,
 * render.
 *
 * The status describes the call, not the predicate: a missing key, a lost
 * putIfAbsent, a delete that found nothing all answer 200 with explicit
 * fields; a lost required write answers 200 with the kv_precondition body;
 * only a refused call (400/413), a write into the sink's namespace (403),
 * an unavailable node (503) or a failure (500) answers otherwise.
 *
 * The sink's namespace (api/kv.h (2)): the sink's rows are the truth the
 * sink restores from and the retention hold trims by. A forged
 * s3:<sink>:<queue>:committed would fence the sink, which would restore
 * from the forged pointer and treat everything below it as committed. The
 * sink writes them in-process (kv_call_batch), never through these routes,
 * so the routes refuse every write there, whatever the tenant; the check
 * runs after validation and before anything is proposed. */
#include "api/kv.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/tenant.h"
#include "base/isotime.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "broker/kv.h"
#include "http/resp.h"
#include "http/router.h"
#include "http/server.h"
#include "store/format.h"

#define API_KV_MAX_TOKENS ((size_t)4 << 20)

static int kv_bad(struct api_kv *k, const char *reason, int code,
                  struct err *err, const char *fmt, ...) PRINTF(5, 6);

static int kv_bad(struct api_kv *k, const char *reason, int code,
                  struct err *err, const char *fmt, ...)
{
    va_list ap;

    snprintf(k->reason, sizeof(k->reason), "%s", reason);
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return code;
}

/* The unescaped text of string token i (a span of the body when it has no
 * escapes, else a copy in the arena, reserved up front). */
static int kv_str(struct api_kv *k, int i, struct slice *out, struct err *err)
{
    const struct json_tok *t = &k->doc.toks[i];
    size_t start = k->arena.len;

    if (!t->has_escapes) {
        out->ptr = k->doc.text + t->start + 1;
        out->len = t->len - 2;
        return 0;
    }
    if (json_get_str(&k->doc, i, &k->arena, err) != 0) {
        return err->code;
    }
    out->ptr = k->arena.data + start;
    out->len = k->arena.len - start;
    return 0;
}

/* The compact JSON text of value token i (http-api.md §7: a value is kept
 * and limited as compact JSON): its span of the body when it has no
 * whitespace between tokens, else a compact copy in the arena (it fits in
 * what was reserved: no more bytes than the span it replaces). */
static int kv_value(struct api_kv *k, int i, struct slice *out, struct err *err)
{
    struct slice span = json_span(&k->doc, i);
    size_t start = k->arena.len;

    if (json_compact(&k->arena, span.ptr, span.len, err) != 0) {
        return err->code;
    }
    if (k->arena.len - start == span.len) {
        k->arena.len = start; /* nothing to drop: the span as it is */
        *out = span;
        return 0;
    }
    out->ptr = k->arena.data + start;
    out->len = k->arena.len - start;
    return 0;
}

static int kv_opcode(const struct json_doc *d, int t)
{
    for (int op = 0; op < KV_OPCODE_COUNT; op++) {
        if (json_str_eq(d, t, kv_op_name(op))) {
            return op;
        }
    }
    return -1;
}

/* A member that must be a string when present. */
static int kv_opt_str(struct api_kv *k, int obj, const char *name,
                      const char *reason, struct slice *out, struct err *err)
{
    int t = json_obj_get(&k->doc, obj, name);

    if (t < 0 || json_is_null(&k->doc, t)) {
        return 0;
    }
    if (json_type(&k->doc, t) != JSON_STRING) {
        return kv_bad(k, reason, ERR_INVALID, err, "%s must be a string", name);
    }
    return kv_str(k, t, out, err);
}

static int kv_opt_bool(struct api_kv *k, int obj, const char *name,
                       const char *reason, bool *out, struct err *err)
{
    int t = json_obj_get(&k->doc, obj, name);

    if (t < 0 || json_is_null(&k->doc, t)) {
        return 0;
    }
    if (!json_get_bool(&k->doc, t, out)) {
        return kv_bad(k, reason, ERR_INVALID, err, "%s must be a boolean",
                      name);
    }
    return 0;
}

static int kv_parse_expiry(struct api_kv *k, int obj, struct kv_op *o,
                           struct err *err)
{
    int t = json_obj_get(&k->doc, obj, "ttlSeconds");
    int64_t v;

    if (t >= 0 && !json_is_null(&k->doc, t)) {
        if (!json_get_i64(&k->doc, t, &v) || v <= 0) {
            return kv_bad(k, "kv_bad_ttl", ERR_INVALID, err, "%s",
                          "ttlSeconds must be an integer > 0");
        }
        o->ttl_seconds = v;
    }
    return kv_opt_bool(k, obj, "forever", "kv_bad_request", &o->forever, err);
}

static int kv_parse_expect(struct api_kv *k, int obj, struct kv_op *o,
                           struct err *err)
{
    int t = json_obj_get(&k->doc, obj, "expect");

    if (t < 0 || json_is_null(&k->doc, t)) {
        return 0;
    }
    if (!json_get_u64(&k->doc, t, &o->expect)) {
        return kv_bad(k, "kv_bad_expect", ERR_INVALID, err, "%s",
                      "expect must be a non-negative integer");
    }
    o->has_expect = true;
    return 0;
}

static int kv_parse_keys(struct api_kv *k, int obj, struct kv_op *o,
                         size_t *next_key, struct err *err)
{
    int t = json_obj_get(&k->doc, obj, "keys");

    if (t < 0) {
        return 0;
    }
    if (json_type(&k->doc, t) != JSON_ARRAY) {
        return kv_bad(k, "kv_bad_key", ERR_INVALID, err, "%s",
                      "keys must be an array of strings");
    }
    o->keys = k->keys + *next_key;
    for (int e = json_child(&k->doc, t); e >= 0; e = json_next(&k->doc, e)) {
        if (json_type(&k->doc, e) != JSON_STRING) {
            return kv_bad(k, "kv_bad_key", ERR_INVALID, err, "%s",
                          "keys must be an array of strings");
        }
        if (kv_str(k, e, &k->keys[*next_key], err) != 0) {
            return err->code;
        }
        (*next_key)++;
        o->n_keys++;
    }
    return 0;
}

static int kv_parse_prefix(struct api_kv *k, int obj, struct kv_op *o,
                           struct err *err)
{
    struct api_range r = {KV_PREFIX_DEF, 1, KV_PREFIX_MAX};
    int64_t lim;

    if (kv_opt_str(k, obj, "prefix", "kv_prefix_required", &o->prefix, err) !=
            0 ||
        kv_opt_str(k, obj, "after", "kv_bad_request", &o->after, err) != 0 ||
        kv_opt_bool(k, obj, "keysOnly", "kv_bad_request", &o->keys_only, err) !=
            0) {
        return err->code;
    }
    if (!api_json_int(&k->doc, obj, "limit", &r, &lim)) {
        return kv_bad(k, "kv_bad_request", ERR_INVALID, err, "%s",
                      "limit must be an integer");
    }
    o->limit = (int)lim;
    return 0;
}

/* Fields of one op besides op, ns and key. */
static int kv_parse_fields(struct api_kv *k, int obj, struct kv_op *o,
                           size_t *next_key, struct err *err)
{
    int v = json_obj_get(&k->doc, obj, "value");
    int by = json_obj_get(&k->doc, obj, "by");

    if (v >= 0 && kv_value(k, v, &o->value, err) != 0) {
        return err->code;
    }
    if (by >= 0 && !json_is_null(&k->doc, by) &&
        (!json_get_i64(&k->doc, by, &o->by) || o->by == 0)) {
        return kv_bad(k, "kv_bad_request", ERR_INVALID, err, "%s",
                      "by must be a non-zero integer");
    }
    if (kv_parse_expiry(k, obj, o, err) != 0 ||
        kv_parse_expect(k, obj, o, err) != 0 ||
        kv_opt_bool(k, obj, "required", "kv_bad_request", &o->required, err) !=
            0 ||
        kv_parse_keys(k, obj, o, next_key, err) != 0) {
        return err->code;
    }
    return o->op == KV_GET_PREFIX ? kv_parse_prefix(k, obj, o, err) : 0;
}

/* The members of an operation this parser reads; each may appear once. A
 * repeated one is refused (kv_bad_body) rather than read first-wins, as
 * push does (json.h (5)): which of two "key"s or two "expect"s a write
 * meant cannot be guessed. A value is the client's and never looked into.
 * Other members (ignored) may repeat. */
static const char *const kv_op_keys[] = {
    "op",   "ns",         "namespace", "key",      "value",
    "by",   "ttlSeconds", "forever",   "expect",   "required",
    "keys", "prefix",     "after",     "keysOnly", "limit"};

/* The members a single-key PUT or DELETE body forwards (http-api.md §7). */
static const char *const kv_single_keys[] = {"value", "ttlSeconds", "forever",
                                             "expect", "required"};

/* 0, or kv_bad_body naming the first of keys[0..n) repeated in obj; what
 * ("operation 2: ", or "") leads the detail. */
static int kv_no_dups(struct api_kv *k, int obj, const char *const *keys, int n,
                      const char *what, struct err *err)
{
    int v[ARRAY_LEN(kv_op_keys)];
    int dup;

    ASSERT(n <= (int)ARRAY_LEN(v));
    dup = json_obj_pick(&k->doc, obj, keys, n, v);
    if (dup < 0) {
        return 0;
    }
    return kv_bad(k, "kv_bad_body", ERR_INVALID, err, "%sduplicate key \"%s\"",
                  what, keys[dup]);
}

static int kv_parse_op(struct api_kv *k, int obj, struct kv_op *o,
                       size_t *next_key, struct err *err)
{
    static const char *const tenant_fields[] = {"tenant", "tenantId",
                                                "_tenant"};
    char what[40];
    int t;

    if (json_type(&k->doc, obj) != JSON_OBJECT) {
        return kv_bad(k, "kv_bad_request", ERR_INVALID, err, "%s",
                      "an operation must be an object");
    }
    for (size_t i = 0; i < ARRAY_LEN(tenant_fields); i++) {
        if (json_obj_get(&k->doc, obj, tenant_fields[i]) >= 0) {
            return kv_bad(k, "kv_tenant_not_an_input", ERR_INVALID, err,
                          "%s is not an input: the tenant comes from the call",
                          tenant_fields[i]);
        }
    }
    snprintf(what, sizeof(what), "operation %zu: ", (size_t)(o - k->ops));
    if (kv_no_dups(k, obj, kv_op_keys, (int)ARRAY_LEN(kv_op_keys), what, err) !=
        0) {
        return err->code;
    }
    t = json_obj_get(&k->doc, obj, "op");
    o->op = t >= 0 ? kv_opcode(&k->doc, t) : -1;
    if (o->op < 0) {
        return kv_bad(k, "kv_unknown_op", ERR_INVALID, err, "%s",
                      "op must be one of get, getMany, getPrefix, put, "
                      "putIfAbsent, delete, incr");
    }
    if (kv_opt_str(k, obj, "ns", "kv_bad_namespace", &o->ns, err) != 0 ||
        (o->ns.len == 0 && kv_opt_str(k, obj, "namespace", "kv_bad_namespace",
                                      &o->ns, err) != 0) ||
        kv_opt_str(k, obj, "key", "kv_bad_key", &o->key, err) != 0) {
        return err->code;
    }
    return kv_parse_fields(k, obj, o, next_key, err);
}

static int kv_parse_batch(struct api_kv *k, struct err *err)
{
    int arr = 0;
    size_t i = 0;
    size_t next_key = 0;

    if (json_obj_pick(&k->doc, 0, (const char *const[]){"operations"}, 1,
                      &arr) >= 0) {
        return kv_bad(k, "kv_bad_body", ERR_INVALID, err, "%s",
                      "duplicate key \"operations\"");
    }
    if (json_type(&k->doc, 0) != JSON_OBJECT) {
        arr = 0;
    }
    if (json_type(&k->doc, arr) != JSON_ARRAY) {
        return kv_bad(k, "kv_bad_body", ERR_INVALID, err, "%s",
                      "the body must be an array of operations or "
                      "{\"operations\": [...]}");
    }
    k->n = k->doc.toks[arr].count;
    k->ops = xcalloc(k->n + 1, sizeof(*k->ops));
    k->keys = xcalloc(k->doc.ntoks + 1, sizeof(*k->keys));
    for (int t = json_child(&k->doc, arr); t >= 0; t = json_next(&k->doc, t)) {
        if (kv_parse_op(k, t, &k->ops[i++], &next_key, err) != 0) {
            return err->code;
        }
    }
    return 0;
}

/* PUT and DELETE on a key path: only the forwarded fields count. */
static int kv_parse_single(struct api_kv *k, int mode, struct err *err)
{
    static const char *const path_fields[] = {"op", "ns", "namespace", "key"};
    struct kv_op *o = &k->ops[0];
    size_t next_key = 0;

    if (k->doc.text == NULL) {
        return 0; /* DELETE without a body */
    }
    if (json_type(&k->doc, 0) != JSON_OBJECT) {
        return kv_bad(k, "kv_bad_body", ERR_INVALID, err, "%s",
                      "the body must be an object");
    }
    for (size_t i = 0; i < ARRAY_LEN(path_fields); i++) {
        if (json_obj_get(&k->doc, 0, path_fields[i]) >= 0) {
            return kv_bad(k, "kv_field_in_path", ERR_INVALID, err,
                          "%s comes from the path, not the body",
                          path_fields[i]);
        }
    }
    if (kv_no_dups(k, 0, kv_single_keys, (int)ARRAY_LEN(kv_single_keys), "",
                   err) != 0 ||
        kv_parse_expect(k, 0, o, err) != 0 ||
        kv_opt_bool(k, 0, "required", "kv_bad_request", &o->required, err) !=
            0) {
        return err->code;
    }
    if (mode == API_KV_PUT) {
        int v = json_obj_get(&k->doc, 0, "value");

        if (v >= 0 && kv_value(k, v, &o->value, err) != 0) {
            return err->code;
        }
        return kv_parse_expiry(k, 0, o, err);
    }
    UNUSED(next_key);
    return 0;
}

int api_kv_parse(struct api_kv *k, int mode, struct slice body, struct slice ns,
                 struct slice key, struct err *err)
{
    struct json_limits lim = {JSON_MAX_DEPTH_DEFAULT, JSON_MAX_DEPTH_DEFAULT,
                              API_KV_MAX_TOKENS};

    memset(k, 0, sizeof(*k));
    buf_init(&k->arena, BUF_UNLIMITED);
    if (buf_reserve(&k->arena, body.len + 16, err) != 0) {
        return err->code;
    }
    if (mode != API_KV_BATCH) {
        k->n = 1;
        k->ops = xcalloc(2, sizeof(*k->ops));
        k->ops[0].op = mode == API_KV_PUT ? KV_PUT : KV_DELETE;
        k->ops[0].ns = ns;
        k->ops[0].key = key;
    }
    if (mode == API_KV_DELETE && body.len == 0) {
        return 0;
    }
    if (json_parse(&k->doc, body.ptr, body.len, &lim, err) != 0) {
        snprintf(k->reason, sizeof(k->reason), "kv_bad_body");
        err->code = ERR_INVALID;
        return err->code;
    }
    return mode == API_KV_BATCH ? kv_parse_batch(k, err)
                                : kv_parse_single(k, mode, err);
}

/* The namespaces HTTP may read but not write, api/kv.h (2) and (3). */
static const struct {
    const char *ns;
    const char *why; /* completes "namespace '<ns>' " */
    bool opens;      /* QUEEN_KV_UNSAFE_SINK_WRITES lifts it */
} kv_reserved[] = {
    {API_KV_RESERVED_NS,
     "is the S3 sink's and read-only over HTTP; only the sink inside the "
     "broker writes it",
     true},
    {STORE_FORMAT_NS,
     "holds the cluster's storage format and is read-only over HTTP; only "
     "the broker writes it",
     false},
};

int api_kv_check_reserved(const struct kv_op *ops, size_t n, bool sink_open,
                          char *reason, struct err *err)
{
    reason[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const struct kv_op *o = &ops[i];

        for (size_t r = 0; o->op >= KV_PUT && r < ARRAY_LEN(kv_reserved); r++) {
            const char *ns = kv_reserved[r].ns;

            if ((sink_open && kv_reserved[r].opens) ||
                o->ns.len != strlen(ns) ||
                memcmp(o->ns.ptr, ns, o->ns.len) != 0) {
                continue;
            }
            snprintf(reason, 40, "kv_reserved_namespace");
            return err_set(err, ERR_FORBIDDEN,
                           "operation %zu (%s): namespace '%s' %s", i,
                           kv_op_name(o->op), ns, kv_reserved[r].why);
        }
    }
    return 0;
}

void api_kv_free(struct api_kv *k)
{
    json_doc_free(&k->doc);
    free(k->ops);
    free(k->keys);
    buf_free(&k->arena);
    memset(k, 0, sizeof(*k));
}

/* ---- rendering ---- */

static void kv_w_time(struct jw *w, const char *name, int64_t us, bool is_null)
{
    char t[40];

    jw_key(w, name);
    if (is_null) {
        jw_null(w);
        return;
    }
    isotime_format_kv(us, t);
    jw_cstr(w, t);
}

static void kv_w_value(struct jw *w, bool has, struct slice v)
{
    jw_key(w, "value");
    if (has) {
        jw_raw(w, v.ptr, v.len);
    } else {
        jw_null(w);
    }
}

static void kv_w_rows(struct jw *w, const struct kv_result *r, bool keys_only)
{
    jw_key(w, "rows");
    jw_arr_begin(w);
    for (size_t i = 0; i < r->n_rows; i++) {
        const struct kv_row *row = &r->rows[i];

        jw_obj_begin(w);
        jw_key(w, "key");
        jw_str(w, row->key.ptr, row->key.len);
        if (!keys_only) {
            kv_w_value(w, true, row->value);
        }
        jw_key(w, "version");
        jw_u64(w, row->version);
        kv_w_time(w, "expiresAt", row->expires_at, row->expires_at == 0);
        kv_w_time(w, "updatedAt", row->updated_at, false);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

static void kv_w_write(struct jw *w, const struct kv_result *r)
{
    jw_key(w, "applied");
    jw_bool(w, r->applied);
    if (!r->applied) {
        jw_key(w, "reason");
        jw_cstr(w, kv_reason_name(r->reason));
    }
    jw_key(w, "key");
    jw_str(w, r->key.ptr, r->key.len);
    kv_w_value(w, r->has_value, r->value);
    jw_key(w, "version");
    jw_u64(w, r->version);
}

static void kv_w_result(struct jw *w, const struct kv_result *r, size_t i)
{
    jw_obj_begin(w);
    jw_key(w, "index");
    jw_u64(w, i);
    jw_key(w, "op");
    jw_cstr(w, kv_op_name(r->op));
    if (r->op == KV_GET) {
        jw_key(w, "found");
        jw_bool(w, r->found);
        jw_key(w, "key");
        jw_str(w, r->key.ptr, r->key.len);
        if (r->found) {
            kv_w_value(w, true, r->value);
            jw_key(w, "version");
            jw_u64(w, r->version);
            kv_w_time(w, "expiresAt", r->expires_at, r->expires_at == 0);
            kv_w_time(w, "updatedAt", r->updated_at, false);
        }
    } else if (r->op == KV_GET_MANY) {
        kv_w_rows(w, r, false);
        jw_key(w, "missing");
        jw_arr_begin(w);
        for (size_t k = 0; k < r->n_missing; k++) {
            jw_str(w, r->missing[k].ptr, r->missing[k].len);
        }
        jw_arr_end(w);
        jw_key(w, "truncated");
        jw_bool(w, r->truncated);
    } else if (r->op == KV_GET_PREFIX) {
        bool keys_only = r->n_rows > 0 && r->rows[0].value.len == 0;

        kv_w_rows(w, r, keys_only);
        jw_key(w, "truncated");
        jw_bool(w, r->truncated);
        jw_key(w, "nextAfter");
        if (r->has_next_after) {
            jw_str(w, r->next_after.ptr, r->next_after.len);
        } else {
            jw_null(w);
        }
    } else {
        kv_w_write(w, r);
    }
    jw_obj_end(w);
}

static int kv_render_precondition(const struct kv_answer *a, struct buf *out,
                                  struct err *err)
{
    size_t start = out->len;
    struct jw w;

    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "ok");
    jw_bool(&w, false);
    jw_key(&w, "reason");
    jw_cstr(&w, "kv_precondition");
    jw_key(&w, "failedIndex");
    jw_u64(&w, a->failed_index);
    jw_key(&w, "kvReason");
    jw_cstr(&w, kv_reason_name(a->kv_reason));
    jw_key(&w, "version");
    jw_u64(&w, a->version);
    kv_w_value(&w, a->has_value, a->value);
    jw_obj_end(&w);
    if (jw_finish(&w, err) != 0) {
        return err->code;
    }
    if (out->len - start <= API_KV_PRECONDITION_MAX) {
        return 0;
    }
    /* Cut at 4096 characters it would no longer parse: ok and reason. */
    out->len = start;
    out->data[start] = '\0';
    return buf_append_str(out, "{\"ok\":false,\"reason\":\"kv_precondition\"}",
                          err);
}

int api_kv_render(const struct kv_answer *a, bool single, struct buf *out,
                  struct err *err)
{
    struct jw w;

    if (a->status == ERR_PRECONDITION) {
        return kv_render_precondition(a, out, err);
    }
    jw_init(&w, out);
    if (single) {
        ASSERT(a->n_results == 1);
        kv_w_result(&w, &a->results[0], 0);
        return jw_finish(&w, err);
    }
    jw_obj_begin(&w);
    jw_key(&w, "results");
    jw_arr_begin(&w);
    for (size_t i = 0; i < a->n_results; i++) {
        kv_w_result(&w, &a->results[i], i);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

int api_kv_render_error(int status, const char *reason, const char *detail,
                        struct buf *out, struct err *err)
{
    struct jw w;
    const char *code = status == 413   ? "payload_too_large"
                       : status == 503 ? "kv_unavailable"
                       : status == 400 ? "kv_bad_request"
                       : status == 403 ? "kv_forbidden"
                       : status == 507 ? "kv_storage_full"
                                       : "kv_internal";

    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "error");
    jw_cstr(&w, code);
    if (reason != NULL && reason[0] != '\0') {
        jw_key(&w, "reason");
        jw_cstr(&w, reason);
    }
    if (detail != NULL && detail[0] != '\0') {
        jw_key(&w, "detail");
        jw_text(&w, detail); /* may quote the request, cut at any byte */
    }
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

/* ---- the handlers ---- */

struct kv_routes {
    struct api *a;
    struct kv_service *kv;
};

static struct kv_routes *kv_routes_ctx;

struct kv_call {
    struct http_req *req;
    bool is_single;
    bool is_get;
};

static void kv_respond_error(struct http_req *req, int status,
                             const char *reason, const char *detail)
{
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    ASSERT(api_kv_render_error(status, reason, detail, &b, &err) == 0);
    if (status == 503) {
        size_t len;
        char *p = buf_steal(&b, &len);

        http_respond_take(req, status, "application/json", p, len,
                          "Retry-After: 1\r\n");
        return;
    }
    http_respond_json(req, status, &b);
}

/* A call error from the service or the store. */
static void kv_respond_status(struct http_req *req, int code,
                              const char *reason, const char *msg)
{
    char shown[sizeof(((struct err *)NULL)->msg)];

    switch (code) {
    case ERR_INVALID:
        kv_respond_error(req, 400, reason, msg);
        return;
    case ERR_TOO_BIG:
        kv_respond_error(req, 413, reason, msg);
        return;
    case ERR_FORBIDDEN:
        kv_respond_error(req, 403, reason, msg);
        return;
    case ERR_NOT_LEADER:
        kv_respond_error(req, 503, "kv_not_leader", msg);
        return;
    case ERR_BUSY:
    case ERR_TIMEOUT:
        kv_respond_error(req, 503, "kv_busy", msg);
        return;
    case ERR_FULL: /* the node logged it once (raft/node.h) */
        kv_respond_error(req, 507, NULL, msg);
        return;
    default:
        log_error("kv", "%s %s: %s", req->method_name,
                  req->route != NULL ? req->route : "?", msg);
        err_public(msg, shown, sizeof(shown));
        kv_respond_error(req, 500, "kv_internal", shown);
        return;
    }
}

static void kv_answer_http(struct kv_call *c, const struct kv_answer *ans)
{
    struct buf b;
    struct err err;
    char etag[48] = "";

    if (ans->status != 0 && ans->status != ERR_PRECONDITION) {
        kv_respond_status(c->req, ans->status, ans->reason_id, ans->msg);
        return;
    }
    buf_init(&b, BUF_UNLIMITED);
    if (api_kv_render(ans, c->is_single, &b, &err) != 0) {
        buf_free(&b);
        kv_respond_status(c->req, ERR_IO, "kv_internal", err.msg);
        return;
    }
    if (c->is_get && ans->status == 0 && ans->results[0].found) {
        snprintf(etag, sizeof(etag), "ETag: \"%" PRIu64 "\"\r\n",
                 ans->results[0].version);
    }
    {
        size_t len;
        char *p = buf_steal(&b, &len);

        http_respond_take(c->req, 200, "application/json", p, len,
                          etag[0] != '\0' ? etag : NULL);
    }
}

static void kv_on_done(void *arg, const struct kv_answer *ans)
{
    struct kv_call *c = arg;

    kv_answer_http(c, ans);
    free(c);
}

static int64_t kv_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void kv_run(struct http_req *req, const uint8_t tenant[16],
                   struct api_kv *k, bool is_single, bool is_get)
{
    struct kv_call *c = xcalloc(1, sizeof(*c));
    struct kv_batch b = {tenant, k->ops, k->n};
    struct kv_answer ans;
    struct err err = {0};
    char reason[40];

    c->req = req;
    c->is_single = is_single;
    c->is_get = is_get;
    if (kv_validate(k->ops, k->n, true, reason, &err) != 0 ||
        api_kv_check_reserved(k->ops, k->n,
                              kv_routes_ctx->a->is_sink_kv_writable, reason,
                              &err) != 0) {
        kv_respond_status(req, err.code, reason, err.msg);
        free(c);
        return;
    }
    if (!kv_has_write(k->ops, k->n)) {
        if (store_kv_read(kv_routes_ctx->a->store, &b, kv_now_us(), &ans,
                          &err) != 0) {
            kv_respond_status(req, err.code, "kv_internal", err.msg);
        } else {
            kv_answer_http(c, &ans);
        }
        kv_answer_free(&ans);
        free(c);
        return;
    }
    if (kv_submit(kv_routes_ctx->kv, &b, kv_on_done, c, &err) != 0) {
        kv_respond_status(req, err.code, "kv_unavailable", err.msg);
        free(c);
    }
}

static void kv_handle_batch(struct http_req *req, void *arg)
{
    struct api_kv k;
    struct err err = {0};
    struct slice none = {"", 0};
    const char *code;
    uint8_t tenant[16];

    UNUSED(arg);
    if (api_tenant_gated(req, kv_routes_ctx->a, API_GATE_READ, tenant, &code,
                         &err) != 0) {
        kv_respond_status(req, err.code, code != NULL ? code : "kv_bad_tenant",
                          err.msg);
        return;
    }
    if (api_kv_parse(&k, API_KV_BATCH, req->body, none, none, &err) != 0) {
        kv_respond_status(req, err.code, k.reason, err.msg);
    } else {
        kv_run(req, tenant, &k, false, false);
    }
    api_kv_free(&k);
}

/* A key in a JSON body is UTF-8 (the scanner checks it); one decoded from
 * the path can be any bytes, and a stored key that is not UTF-8 would make
 * every later answer naming it invalid JSON. */
static bool kv_is_utf8(struct slice s)
{
    return json_utf8_prefix(s.ptr, s.len) == s.len;
}

static void kv_handle_key(struct http_req *req, void *arg)
{
    struct api_kv k;
    struct err err = {0};
    struct slice ns = {"", 0};
    struct slice key = {"", 0};
    bool is_get =
        req->method == HTTP_METHOD_GET || req->method == HTTP_METHOD_HEAD;
    int mode = req->method == HTTP_METHOD_PUT ? API_KV_PUT : API_KV_DELETE;
    const char *code;
    uint8_t tenant[16];

    UNUSED(arg);
    if (api_tenant_gated(req, kv_routes_ctx->a, API_GATE_READ, tenant, &code,
                         &err) != 0) {
        kv_respond_status(req, err.code, code != NULL ? code : "kv_bad_tenant",
                          err.msg);
        return;
    }
    if (req->query.len > 0 || req->url.ptr[req->path.len] == '?') {
        kv_respond_error(req, 400, "kv_no_query_string",
                         "the single-key routes take no query string");
        return;
    }
    http_req_param_slice(req, "ns", &ns);
    http_req_param_slice(req, "key", &key);
    if (!kv_is_utf8(key)) {
        kv_respond_error(req, 400, "kv_bad_key",
                         "the key must be valid UTF-8 once its %XX escapes "
                         "are decoded");
        return;
    }
    if (is_get) {
        memset(&k, 0, sizeof(k));
        k.n = 1;
        k.ops = xcalloc(2, sizeof(*k.ops));
        k.ops[0].op = KV_GET;
        k.ops[0].ns = ns;
        k.ops[0].key = key;
        kv_run(req, tenant, &k, true, true);
    } else if (api_kv_parse(&k, mode, req->body, ns, key, &err) != 0) {
        kv_respond_status(req, err.code, k.reason, err.msg);
    } else {
        kv_run(req, tenant, &k, true, false);
    }
    api_kv_free(&k);
}

int api_kv_routes(struct api *a, struct kv_service *kv, struct router *r,
                  struct err *err)
{
    static const struct router_route routes[] = {
        {HTTP_METHOD_POST, "/api/v1/kv", kv_handle_batch},
        {HTTP_METHOD_GET, "/api/v1/kv/:ns/*key", kv_handle_key},
        {HTTP_METHOD_PUT, "/api/v1/kv/:ns/*key", kv_handle_key},
        {HTTP_METHOD_DELETE, "/api/v1/kv/:ns/*key", kv_handle_key},
    };

    api_kv_routes_free();
    kv_routes_ctx = xcalloc(1, sizeof(*kv_routes_ctx));
    kv_routes_ctx->a = a;
    kv_routes_ctx->kv = kv;
    return router_add_table(r, routes, ARRAY_LEN(routes), kv_routes_ctx, err);
}

void api_kv_routes_free(void)
{
    free(kv_routes_ctx);
    kv_routes_ctx = NULL;
}
