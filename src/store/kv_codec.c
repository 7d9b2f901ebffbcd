/* The KV rows in LMDB: validation of a batch, the CMD_KV body codec and the
 * answer's memory (store/kv.h). Pure: no LMDB, no clock. The apply and the
 * reads are in kv.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/xalloc.h"
#include "store/kv.h"
#include "store/schema.h"

const char *kv_reason_name(int reason)
{
    switch (reason) {
    case KV_REASON_VERSION:
        return "version";
    case KV_REASON_ABSENT:
        return "absent";
    case KV_REASON_EXISTS:
        return "exists";
    default:
        return NULL;
    }
}

const char *kv_op_name(int op)
{
    static const char *const names[KV_OPCODE_COUNT] = {
        "get", "getMany", "getPrefix", "put", "putIfAbsent", "delete", "incr"};

    return op >= 0 && op < KV_OPCODE_COUNT ? names[op] : "?";
}

void kv_answer_free(struct kv_answer *a)
{
    for (size_t i = 0; a->results != NULL && i < a->n_results; i++) {
        free(a->results[i].rows);
        free(a->results[i].missing);
    }
    free(a->results);
    buf_free(&a->arena);
    memset(a, 0, sizeof(*a));
}

void kv_answer_move(struct kv_answer *a, struct kv_answer *out)
{
    *out = *a;
    memset(a, 0, sizeof(*a));
}

bool kv_has_write(const struct kv_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ops[i].op >= KV_PUT) {
            return true;
        }
    }
    return false;
}

/* ---- validation ---- */

static int kv_refuse(char *reason_id, const char *reason, int code,
                     struct err *err)
{
    snprintf(reason_id, 40, "%s", reason);
    err->code = code;
    return code;
}

static bool kv_ns_ok(struct slice ns)
{
    if (ns.len < 1 || ns.len > KV_NS_MAX) {
        return false;
    }
    for (size_t i = 0; i < ns.len; i++) {
        unsigned char c = (unsigned char)ns.ptr[i];
        bool is_alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');

        if (!is_alnum && (i == 0 || (c != '.' && c != '_' && c != '-'))) {
            return false;
        }
    }
    return true;
}

/* A key (or prefix/cursor when may_be_empty) of namespace ns. */
static int kv_key_check(struct slice ns, struct slice key, const char *what,
                        bool may_be_empty, char *reason_id, struct err *err)
{
    if (key.len == 0 && !may_be_empty) {
        snprintf(err->msg, sizeof(err->msg), "the %s must be non-empty", what);
        return kv_refuse(reason_id, "kv_bad_key", ERR_INVALID, err);
    }
    /* An empty slice may carry a NULL pointer: memchr must not see it. */
    if (key.len > 0 && memchr(key.ptr, '\0', key.len) != NULL) {
        snprintf(err->msg, sizeof(err->msg), "the %s must not contain NUL",
                 what);
        return kv_refuse(reason_id, "kv_bad_key", ERR_INVALID, err);
    }
    if (key.len > KV_KEY_FITS(ns.len)) {
        snprintf(err->msg, sizeof(err->msg),
                 "the %s of %zu bytes does not fit the store's 511-byte key "
                 "(at most %d bytes, and tenant + namespace + key <= 511)",
                 what, key.len, KV_KEY_MAX);
        return kv_refuse(reason_id, "kv_key_too_large", ERR_TOO_BIG, err);
    }
    return 0;
}

static int kv_check_write(const struct kv_op *o, char *reason_id,
                          struct err *err)
{
    int declared = (o->ttl_seconds != 0) + (o->forever ? 1 : 0);

    if (o->op == KV_DELETE) {
        return 0;
    }
    if (o->ttl_seconds < 0) {
        snprintf(err->msg, sizeof(err->msg),
                 "ttlSeconds must be an integer > 0");
        return kv_refuse(reason_id, "kv_bad_ttl", ERR_INVALID, err);
    }
    if (declared != 1) {
        snprintf(err->msg, sizeof(err->msg),
                 "exactly one of ttlSeconds (integer > 0) and forever:true is "
                 "required, got %d",
                 declared);
        return kv_refuse(reason_id, "kv_expiry_not_specified", ERR_INVALID,
                         err);
    }
    if (o->op == KV_INCR && o->has_expect) {
        snprintf(err->msg, sizeof(err->msg), "incr takes no expect");
        return kv_refuse(reason_id, "kv_bad_expect", ERR_INVALID, err);
    }
    if (o->op == KV_PUT_IF_ABSENT && o->has_expect && o->expect != 0) {
        snprintf(err->msg, sizeof(err->msg),
                 "putIfAbsent takes only expect 0, got %" PRIu64, o->expect);
        return kv_refuse(reason_id, "kv_bad_expect", ERR_INVALID, err);
    }
    if (o->op != KV_INCR && o->value.len == 0) {
        snprintf(err->msg, sizeof(err->msg), "%s needs a value",
                 kv_op_name(o->op));
        return kv_refuse(reason_id, "kv_value_required", ERR_INVALID, err);
    }
    if (o->value.len > KV_VALUE_MAX) {
        snprintf(err->msg, sizeof(err->msg),
                 "the value of %zu bytes is over the %d-byte limit",
                 o->value.len, KV_VALUE_MAX);
        return kv_refuse(reason_id, "kv_value_too_large", ERR_TOO_BIG, err);
    }
    return 0;
}

static int kv_check_op(const struct kv_op *o, size_t *n_keys, char *reason_id,
                       struct err *err)
{
    if (o->op < 0 || o->op >= KV_OPCODE_COUNT) {
        snprintf(err->msg, sizeof(err->msg), "unknown op");
        return kv_refuse(reason_id, "kv_unknown_op", ERR_INVALID, err);
    }
    if (!kv_ns_ok(o->ns)) {
        char quote[100];

        snprintf(
            err->msg, sizeof(err->msg),
            "namespace '%.*s' does not match ^[a-z0-9][a-z0-9._-]{0,63}$",
            (int)json_msg_quote(quote, o->ns.ptr, o->ns.len, sizeof(quote)),
            quote);
        return kv_refuse(reason_id, "kv_bad_namespace", ERR_INVALID, err);
    }
    if (o->op == KV_GET_MANY) {
        for (size_t k = 0; k < o->n_keys; k++) {
            if (kv_key_check(o->ns, o->keys[k], "key", false, reason_id, err) !=
                0) {
                return err->code;
            }
        }
        *n_keys += o->n_keys;
        return 0;
    }
    if (o->op == KV_GET_PREFIX) {
        int lim = o->limit <= 0 ? KV_PREFIX_DEF : o->limit;

        if (o->prefix.len == 0) {
            snprintf(err->msg, sizeof(err->msg), "getPrefix needs a prefix");
            return kv_refuse(reason_id, "kv_prefix_required", ERR_INVALID, err);
        }
        *n_keys += (size_t)(lim > KV_PREFIX_MAX ? KV_PREFIX_MAX : lim);
        if (kv_key_check(o->ns, o->prefix, "prefix", false, reason_id, err) !=
            0) {
            return err->code;
        }
        return kv_key_check(o->ns, o->after, "after cursor", true, reason_id,
                            err);
    }
    *n_keys += 1;
    if (kv_key_check(o->ns, o->key, "key", false, reason_id, err) != 0) {
        return err->code;
    }
    return o->op >= KV_PUT ? kv_check_write(o, reason_id, err) : 0;
}

static int kv_cmp_nskey(const struct kv_op *x, const struct kv_op *y)
{
    size_t n;
    int c;

    if (x->ns.len != y->ns.len) {
        return x->ns.len < y->ns.len ? -1 : 1;
    }
    c = memcmp(x->ns.ptr, y->ns.ptr, x->ns.len);
    if (c != 0) {
        return c;
    }
    n = x->key.len < y->key.len ? x->key.len : y->key.len;
    c = memcmp(x->key.ptr, y->key.ptr, n);
    if (c != 0) {
        return c;
    }
    return x->key.len < y->key.len ? -1 : x->key.len > y->key.len;
}

static int kv_cmp_index(const void *a, const void *b, void *arg)
{
    const struct kv_op *ops = *(const struct kv_op *const *)arg;

    return kv_cmp_nskey(&ops[*(const size_t *)a], &ops[*(const size_t *)b]);
}

static int kv_check_duplicates(const struct kv_op *ops, size_t n,
                               char *reason_id, struct err *err)
{
    size_t *w = xcalloc(n + 1, sizeof(size_t));
    size_t m = 0;
    int rc = 0;

    for (size_t i = 0; i < n; i++) {
        if (ops[i].op >= KV_PUT) {
            w[m++] = i;
        }
    }
    qsort_r(w, m, sizeof(size_t), kv_cmp_index, &ops);
    for (size_t i = 1; i < m && rc == 0; i++) {
        const struct kv_op *o = &ops[w[i]];

        if (kv_cmp_nskey(&ops[w[i - 1]], o) == 0) {
            snprintf(err->msg, sizeof(err->msg),
                     "more than one write of key '%.*s' in namespace '%.*s'",
                     (int)(o->key.len > 200 ? 200 : o->key.len), o->key.ptr,
                     (int)o->ns.len, o->ns.ptr);
            rc = kv_refuse(reason_id, "kv_duplicate_key_in_call", ERR_INVALID,
                           err);
        }
    }
    free(w);
    return rc;
}

int kv_validate(const struct kv_op *ops, size_t n, bool http_edge,
                char *reason_id, struct err *err)
{
    size_t n_keys = 0;

    reason_id[0] = '\0';
    if (http_edge && n > KV_HTTP_MAX_OPS) {
        snprintf(err->msg, sizeof(err->msg),
                 "%zu operations is over the limit of %d per call", n,
                 KV_HTTP_MAX_OPS);
        return kv_refuse(reason_id, "kv_too_many_ops", ERR_INVALID, err);
    }
    for (size_t i = 0; i < n; i++) {
        if (kv_check_op(&ops[i], &n_keys, reason_id, err) != 0) {
            return err->code;
        }
    }
    if (http_edge && n_keys > KV_HTTP_MAX_KEYS) {
        snprintf(err->msg, sizeof(err->msg),
                 "%zu keys is over the limit of %d per call", n_keys,
                 KV_HTTP_MAX_KEYS);
        return kv_refuse(reason_id, "kv_too_many_keys", ERR_INVALID, err);
    }
    return kv_check_duplicates(ops, n, reason_id, err);
}

/* ---- the CMD_KV body ---- */

static void put_u16(struct buf *b, size_t v, struct err *err)
{
    uint8_t p[2] = {(uint8_t)(v >> 8), (uint8_t)v};

    buf_append(b, p, 2, err);
}

static void put_u32(struct buf *b, uint64_t v, struct err *err)
{
    uint8_t p[4];

    be32_put(p, (uint32_t)v);
    buf_append(b, p, 4, err);
}

static void put_u64(struct buf *b, uint64_t v, struct err *err)
{
    uint8_t p[8];

    be64_put(p, v);
    buf_append(b, p, 8, err);
}

static void put_bytes16(struct buf *b, struct slice s, struct err *err)
{
    put_u16(b, s.len, err);
    buf_append(b, s.ptr, s.len, err);
}

static void kv_encode_op(struct buf *b, const struct kv_op *o, struct err *err)
{
    uint8_t head[3] = {
        (uint8_t)o->op,
        (uint8_t)((o->forever ? 1 : 0) | (o->has_expect ? 2 : 0) |
                  (o->required ? 4 : 0) | (o->keys_only ? 8 : 0)),
        (uint8_t)o->ns.len};

    buf_append(b, head, 3, err);
    buf_append(b, o->ns.ptr, o->ns.len, err);
    put_bytes16(b, o->key, err);
    put_bytes16(b, o->prefix, err);
    put_bytes16(b, o->after, err);
    put_u32(b, o->limit < 0 ? 0 : (uint64_t)o->limit, err);
    put_u64(b, (uint64_t)o->ttl_seconds, err);
    put_u64(b, o->expect, err);
    put_u64(b, (uint64_t)o->by, err);
    put_u32(b, o->value.len, err);
    buf_append(b, o->value.ptr, o->value.len, err);
    put_u32(b, o->op == KV_GET_MANY ? o->n_keys : 0, err);
    for (size_t k = 0; o->op == KV_GET_MANY && k < o->n_keys; k++) {
        put_bytes16(b, o->keys[k], err);
    }
}

int kv_cmd_encode(struct buf *out, const struct kv_op *ops, size_t n,
                  struct err *err)
{
    size_t start = out->len;
    struct err e = {0};

    buf_append_byte(out, 0, &e);
    put_u32(out, n, &e);
    for (size_t i = 0; i < n; i++) {
        kv_encode_op(out, &ops[i], &e);
    }
    if (e.code != 0) {
        out->len = start;
        out->data[start] = '\0';
        *err = e;
        return e.code;
    }
    return 0;
}

int kv_cmd_encode_sweep(struct buf *out, uint32_t max, struct err *err)
{
    struct err e = {0};

    buf_append_byte(out, 1, &e);
    put_u32(out, max, &e);
    if (e.code != 0) {
        *err = e;
    }
    return e.code;
}

struct kv_rd {
    const uint8_t *p;
    size_t len;
    size_t pos;
    bool is_bad;
};

static uint64_t rd_int(struct kv_rd *r, size_t size)
{
    uint64_t v = 0;

    if (r->is_bad || r->len - r->pos < size) {
        r->is_bad = true;
        return 0;
    }
    for (size_t i = 0; i < size; i++) {
        v = v << 8 | r->p[r->pos + i];
    }
    r->pos += size;
    return v;
}

static struct slice rd_bytes(struct kv_rd *r, size_t n)
{
    struct slice s = {"", 0};

    if (r->is_bad || r->len - r->pos < n) {
        r->is_bad = true;
        return s;
    }
    s.ptr = (const char *)r->p + r->pos;
    s.len = n;
    r->pos += n;
    return s;
}

static void kv_decode_op(struct kv_rd *r, struct kv_op *o, struct kv_cmd *c,
                         size_t *next_key)
{
    unsigned flags;
    uint64_t nk;

    o->op = (int)rd_int(r, 1);
    flags = (unsigned)rd_int(r, 1);
    o->forever = (flags & 1) != 0;
    o->has_expect = (flags & 2) != 0;
    o->required = (flags & 4) != 0;
    o->keys_only = (flags & 8) != 0;
    o->ns = rd_bytes(r, rd_int(r, 1));
    o->key = rd_bytes(r, rd_int(r, 2));
    o->prefix = rd_bytes(r, rd_int(r, 2));
    o->after = rd_bytes(r, rd_int(r, 2));
    o->limit = (int)(rd_int(r, 4) & 0x7fffffff);
    o->ttl_seconds = (int64_t)rd_int(r, 8);
    o->expect = rd_int(r, 8);
    o->by = (int64_t)rd_int(r, 8);
    o->value = rd_bytes(r, rd_int(r, 4));
    nk = rd_int(r, 4);
    if (nk > (r->len - r->pos) / 2) {
        r->is_bad = true;
        return;
    }
    o->n_keys = nk;
    c->keys = xrealloc(c->keys, (*next_key + nk + 1) * sizeof(*c->keys));
    for (uint64_t k = 0; k < nk; k++) {
        c->keys[*next_key + k] = rd_bytes(r, rd_int(r, 2));
    }
    o->keys = NULL; /* fixed up once keys stops moving */
    *next_key += nk;
}

int kv_cmd_decode(struct slice body, struct kv_cmd *c, struct err *err)
{
    struct kv_rd r = {(const uint8_t *)body.ptr, body.len, 0, false};
    uint64_t n;
    size_t next_key = 0;
    size_t k = 0;

    memset(c, 0, sizeof(*c));
    n = rd_int(&r, 1);
    c->is_sweep = n == 1;
    r.is_bad = r.is_bad || n > 1;
    if (c->is_sweep) {
        c->sweep_max = (uint32_t)rd_int(&r, 4);
    } else {
        n = rd_int(&r, 4);
        if (n > body.len / 8) {
            r.is_bad = true;
            n = 0;
        }
        c->ops = xcalloc(n + 1, sizeof(*c->ops));
        for (uint64_t i = 0; i < n && !r.is_bad; i++) {
            kv_decode_op(&r, &c->ops[i], c, &next_key);
            c->n = i + 1;
        }
        for (size_t i = 0; i < c->n && c->keys != NULL; i++) {
            c->ops[i].keys = c->keys + k;
            k += c->ops[i].n_keys;
        }
    }
    if (r.is_bad || r.pos != r.len) {
        return err_set(err, ERR_CORRUPT, "kv command body is malformed");
    }
    return 0;
}

void kv_cmd_free(struct kv_cmd *c)
{
    free(c->ops);
    free(c->keys);
    memset(c, 0, sizeof(*c));
}
