/* The KV rows in LMDB: apply of a batch inside the fsm's write txn, reads in
 * a read txn, the version counter in meta and the bounded expiry sweep
 * (store/kv.h). Rows and keys are laid out in store/schema.h.
 *
 * An answer is built with every byte slice recorded as an offset into the
 * arena (which may move while it grows); kv_finish() turns the offsets into
 * pointers once the arena stops growing. Bytes read from LMDB are copied
 * into the arena at once, because a later write in the same transaction may
 * reuse the page they live on. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "base/xalloc.h"
#include "store/kv.h"
#include "store/schema.h"
#include "store/store_impl.h"

#define KV_ROW_FIXED 32
#define KV_STORE_KEY 511

struct kv_row_state {
    bool exists;
    bool is_live; /* (2) */
    uint64_t version;
    int64_t expires_at;
    int64_t created_at;
    int64_t updated_at;
    struct slice value; /* into LMDB: copy before the next write */
};

struct kv_ctx {
    struct store *s;
    MDB_txn *txn;
    const uint8_t *tenant;
    int64_t now;
    uint64_t version; /* last issued, (1) */
    bool has_new_version;
    size_t budget; /* value bytes left to read */
    struct kv_answer *ans;
    const struct kv_op *ops;
    bool is_lost; /* a required write lost, or a refusal */
};

static int kv_mdb(int rc)
{
    return rc == MDB_MAP_FULL ? ERR_FULL : ERR_IO;
}

/* ---- answer building ---- */

static struct slice kv_keep(struct kv_ctx *c, const void *p, size_t n)
{
    struct err e;
    /* NOLINTNEXTLINE(performance-no-int-to-ptr): an offset until kv_finish */
    struct slice s = {(const char *)(uintptr_t)c->ans->arena.len, n};

    if (buf_append(&c->ans->arena, p, n, &e) != 0) {
        ASSERT(false); /* the arena is unlimited */
    }
    return s;
}

static void kv_fix(struct kv_answer *a, struct slice *s)
{
    s->ptr = a->arena.data + (uintptr_t)s->ptr;
}

static void kv_finish(struct kv_answer *a)
{
    kv_fix(a, &a->value);
    for (size_t i = 0; i < a->n_results; i++) {
        struct kv_result *r = &a->results[i];

        kv_fix(a, &r->key);
        kv_fix(a, &r->value);
        kv_fix(a, &r->next_after);
        for (size_t k = 0; k < r->n_rows; k++) {
            kv_fix(a, &r->rows[k].key);
            kv_fix(a, &r->rows[k].value);
        }
        for (size_t k = 0; k < r->n_missing; k++) {
            kv_fix(a, &r->missing[k]);
        }
    }
}

static void kv_answer_start(struct kv_answer *a, size_t n)
{
    struct err e;

    memset(a, 0, sizeof(*a));
    buf_init(&a->arena, BUF_UNLIMITED);
    ASSERT(buf_reserve(&a->arena, 256, &e) == 0);
    a->n_results = n;
    a->results = xcalloc(n + 1, sizeof(*a->results));
}

/* ---- rows ---- */

/* LMDB takes keys through a non-const pointer and never writes them. */
static MDB_val kv_val(const uint8_t *p, size_t n)
{
    MDB_val v = {n, NULL};

    memcpy(&v.mv_data, &p, sizeof(p));
    return v;
}

static size_t kv_key(uint8_t out[KV_STORE_KEY], const uint8_t *tenant,
                     struct slice ns, struct slice key)
{
    ASSERT(17 + ns.len + key.len <= KV_STORE_KEY); /* kv_validate */
    memcpy(out, tenant, 16);
    out[16] = (uint8_t)ns.len;
    memcpy(out + 17, ns.ptr, ns.len);
    memcpy(out + 17 + ns.len, key.ptr, key.len);
    return 17 + ns.len + key.len;
}

static void kv_decode_row(struct kv_ctx *c, const MDB_val *d,
                          struct kv_row_state *r)
{
    const uint8_t *p = d->mv_data;

    memset(r, 0, sizeof(*r));
    if (d->mv_size < KV_ROW_FIXED) {
        return; /* not ours: treated as absent */
    }
    r->exists = true;
    r->version = be64_get(p);
    r->expires_at = (int64_t)be64_get(p + 8);
    r->created_at = (int64_t)be64_get(p + 16);
    r->updated_at = (int64_t)be64_get(p + 24);
    r->value.ptr = (const char *)p + KV_ROW_FIXED;
    r->value.len = d->mv_size - KV_ROW_FIXED;
    r->is_live = r->expires_at == 0 || r->expires_at > c->now;
}

static int kv_row_get(struct kv_ctx *c, const uint8_t *kb, size_t kn,
                      struct kv_row_state *r, struct err *err)
{
    MDB_val k = kv_val(kb, kn);
    MDB_val d;
    int rc = mdb_get(c->txn, c->s->kv, &k, &d);

    memset(r, 0, sizeof(*r));
    if (rc == MDB_NOTFOUND) {
        return 0;
    }
    if (rc != 0) {
        return err_set(err, ERR_IO, "kv get: %s", mdb_strerror(rc));
    }
    kv_decode_row(c, &d, r);
    return 0;
}

/* The expiry index key of a kv row: expiresAt (8) + the row's store key,
 * or, when that would pass LMDB's 511-byte key limit (a row key within 8
 * bytes of it), expiresAt + SHA-256 of the store key with the store key as
 * the value (schema.h, kv_expiry). Fills xb; returns the key's length. */
static size_t kv_expiry_key(uint8_t xb[8 + KV_STORE_KEY],
                            uint8_t vb[KV_STORE_KEY], const uint8_t *kb,
                            size_t kn, int64_t exp, MDB_val *d)
{
    be64_put(xb, (uint64_t)exp);
    if (8 + kn <= KV_STORE_KEY) {
        memcpy(xb + 8, kb, kn);
        *d = (MDB_val){0, xb};
        return 8 + kn;
    }
    sha256(kb, kn, xb + 8);
    memcpy(vb, kb, kn);
    *d = (MDB_val){kn, vb};
    return 8 + 32;
}

static int kv_expiry_op(struct kv_ctx *c, const uint8_t *kb, size_t kn,
                        int64_t exp, bool is_put, struct err *err)
{
    uint8_t xb[8 + KV_STORE_KEY];
    uint8_t vb[KV_STORE_KEY];
    MDB_val d;
    MDB_val k;
    int rc;

    k.mv_size = kv_expiry_key(xb, vb, kb, kn, exp, &d);
    k.mv_data = xb;
    rc = is_put ? mdb_put(c->txn, c->s->kv_expiry, &k, &d, 0)
                : mdb_del(c->txn, c->s->kv_expiry, &k, NULL);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, kv_mdb(rc), "kv expiry index: %s",
                       mdb_strerror(rc));
    }
    return 0;
}

static int kv_row_del(struct kv_ctx *c, const uint8_t *kb, size_t kn,
                      const struct kv_row_state *old, struct err *err)
{
    MDB_val k = kv_val(kb, kn);
    int rc = mdb_del(c->txn, c->s->kv, &k, NULL);

    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, kv_mdb(rc), "kv delete: %s", mdb_strerror(rc));
    }
    if (old->expires_at != 0) {
        return kv_expiry_op(c, kb, kn, old->expires_at, false, err); /* (3) */
    }
    return 0;
}

/* Write the row with a fresh version; old is the row it replaces. */
static int kv_row_put(struct kv_ctx *c, const uint8_t *kb, size_t kn,
                      const struct kv_row_state *old, struct kv_row_state *row,
                      struct err *err)
{
    MDB_val k = kv_val(kb, kn);
    MDB_val d = {KV_ROW_FIXED + row->value.len, NULL};
    uint8_t *p;
    int rc;

    if (old->exists && old->expires_at != 0 &&
        kv_expiry_op(c, kb, kn, old->expires_at, false, err) != 0) {
        return err->code;
    }
    row->version = ++c->version; /* (1) */
    c->has_new_version = true;
    rc = mdb_put(c->txn, c->s->kv, &k, &d, MDB_RESERVE);
    if (rc != 0) {
        return err_set(err, kv_mdb(rc), "kv put: %s", mdb_strerror(rc));
    }
    p = d.mv_data;
    be64_put(p, row->version);
    be64_put(p + 8, (uint64_t)row->expires_at);
    be64_put(p + 16, (uint64_t)row->created_at);
    be64_put(p + 24, (uint64_t)row->updated_at);
    memcpy(p + KV_ROW_FIXED, row->value.ptr, row->value.len);
    if (row->expires_at != 0) {
        return kv_expiry_op(c, kb, kn, row->expires_at, true, err); /* (3) */
    }
    return 0;
}

/* ---- write verdicts ---- */

static void kv_set_row(struct kv_ctx *c, struct kv_result *r,
                       const struct kv_row_state *row)
{
    r->has_value = row->is_live;
    r->value = kv_keep(c, row->value.ptr, row->is_live ? row->value.len : 0);
    r->version = row->is_live ? row->version : 0;
}

/* A losing write: the live row's value and version (docs/design/http-api.md
 * §7). */
static void kv_lose(struct kv_ctx *c, size_t i, int reason,
                    const struct kv_row_state *row)
{
    struct kv_result *r = &c->ans->results[i];

    r->applied = false;
    r->reason = reason;
    kv_set_row(c, r, row);
    if (c->ops[i].required && !c->is_lost) {
        c->is_lost = true;
        c->ans->status = ERR_PRECONDITION;
        snprintf(c->ans->reason_id, sizeof(c->ans->reason_id),
                 "kv_precondition");
        snprintf(c->ans->msg, sizeof(c->ans->msg),
                 "operation %zu lost its required precondition (%s)", i,
                 kv_reason_name(reason));
        c->ans->failed_index = i;
        c->ans->kv_reason = reason;
        c->ans->version = r->version;
        c->ans->has_value = r->has_value;
        c->ans->value = r->value;
    }
}

/* The latest expiry a row can have: 9999-12-31T23:59:59.999999Z, the last
 * instant an RFC 3339 stamp (four-digit year) can show. A longer ttlSeconds
 * is taken, and ends there. */
#define KV_EXPIRY_MAX INT64_C(253402300799999999)

static int64_t kv_expiry_of(const struct kv_ctx *c, const struct kv_op *o)
{
    if (o->forever || o->ttl_seconds <= 0) {
        return 0;
    }
    if (c->now >= KV_EXPIRY_MAX ||
        o->ttl_seconds > (KV_EXPIRY_MAX - c->now) / 1000000) {
        return KV_EXPIRY_MAX;
    }
    return c->now + o->ttl_seconds * 1000000;
}

/* put, putIfAbsent: the verdict on row, then the write. */
static int kv_apply_put(struct kv_ctx *c, size_t i, const uint8_t *kb,
                        size_t kn, const struct kv_row_state *row,
                        struct err *err)
{
    const struct kv_op *o = &c->ops[i];
    struct kv_result *r = &c->ans->results[i];
    bool is_absent_only =
        o->op == KV_PUT_IF_ABSENT || (o->has_expect && o->expect == 0);
    struct kv_row_state nr = {0};

    if (is_absent_only && row->is_live) {
        kv_lose(c, i, KV_REASON_EXISTS, row);
        return 0;
    }
    if (!is_absent_only && o->has_expect) {
        if (!row->is_live) {
            kv_lose(c, i, KV_REASON_ABSENT, row); /* never creates */
            return 0;
        }
        if (row->version != o->expect) {
            kv_lose(c, i, KV_REASON_VERSION, row);
            return 0;
        }
    }
    nr.expires_at = kv_expiry_of(c, o);
    nr.created_at = row->is_live ? row->created_at : c->now;
    nr.updated_at = c->now;
    nr.value = o->value;
    if (kv_row_put(c, kb, kn, row, &nr, err) != 0) {
        return err->code;
    }
    r->applied = true;
    r->has_value = true;
    r->value = kv_keep(c, o->value.ptr, o->value.len);
    r->version = nr.version;
    return 0;
}

static int kv_apply_delete(struct kv_ctx *c, size_t i, const uint8_t *kb,
                           size_t kn, const struct kv_row_state *row,
                           struct err *err)
{
    const struct kv_op *o = &c->ops[i];
    struct kv_result *r = &c->ans->results[i];

    if (o->has_expect && o->expect == 0) {
        if (row->is_live) {
            kv_lose(c, i, KV_REASON_EXISTS, row);
        } else {
            r->applied = true; /* version 0, nothing written */
        }
        return 0;
    }
    if (!row->is_live) {
        if (row->exists && !o->has_expect &&
            kv_row_del(c, kb, kn, row, err) != 0) {
            return err->code;
        }
        kv_lose(c, i, KV_REASON_ABSENT, row);
        return 0;
    }
    if (o->has_expect && row->version != o->expect) {
        kv_lose(c, i, KV_REASON_VERSION, row);
        return 0;
    }
    kv_set_row(c, r, row);
    r->applied = true;
    return kv_row_del(c, kb, kn, row, err);
}

/* An integer value (JSON integer grammar) that fits int64. */
static bool kv_int_value(struct slice v, int64_t *out)
{
    char tmp[32];
    char *end;

    if (v.len == 0 || v.len >= sizeof(tmp)) {
        return false;
    }
    memcpy(tmp, v.ptr, v.len);
    tmp[v.len] = '\0';
    if (!((tmp[0] >= '0' && tmp[0] <= '9') || tmp[0] == '-')) {
        return false;
    }
    *out = strtoll(tmp, &end, 10);
    return *end == '\0' && (tmp[0] != '0' || v.len == 1);
}

static int kv_apply_incr(struct kv_ctx *c, size_t i, const uint8_t *kb,
                         size_t kn, const struct kv_row_state *row,
                         struct err *err)
{
    const struct kv_op *o = &c->ops[i];
    struct kv_result *r = &c->ans->results[i];
    int64_t by = o->by == 0 ? 1 : o->by;
    int64_t v = 0;
    char text[32];
    struct kv_row_state nr = {0};

    if (row->is_live && !kv_int_value(row->value, &v)) {
        c->is_lost = true;
        c->ans->status = ERR_INVALID;
        snprintf(c->ans->reason_id, sizeof(c->ans->reason_id),
                 "kv_not_a_number");
        snprintf(c->ans->msg, sizeof(c->ans->msg),
                 "operation %zu: incr of a value that is not an integer", i);
        return 0;
    }
    if ((by > 0 && v > INT64_MAX - by) || (by < 0 && v < INT64_MIN - by)) {
        c->is_lost = true;
        c->ans->status = ERR_INVALID;
        snprintf(c->ans->reason_id, sizeof(c->ans->reason_id),
                 "kv_not_a_number");
        snprintf(c->ans->msg, sizeof(c->ans->msg),
                 "operation %zu: incr overflows a 64-bit integer", i);
        return 0;
    }
    snprintf(text, sizeof(text), "%" PRId64, v + by);
    nr.expires_at = kv_expiry_of(c, o);
    nr.created_at = row->is_live ? row->created_at : c->now;
    nr.updated_at = c->now;
    nr.value.ptr = text;
    nr.value.len = strlen(text);
    if (kv_row_put(c, kb, kn, row, &nr, err) != 0) {
        return err->code;
    }
    r->applied = true;
    r->has_value = true;
    r->value = kv_keep(c, text, nr.value.len);
    r->version = nr.version;
    return 0;
}

/* ---- reads ---- */

static int kv_apply_get(struct kv_ctx *c, size_t i,
                        const struct kv_row_state *row)
{
    struct kv_result *r = &c->ans->results[i];

    r->found = row->is_live;
    if (row->is_live) {
        r->has_value = true;
        r->value = kv_keep(c, row->value.ptr, row->value.len);
        r->version = row->version;
        r->expires_at = row->expires_at;
        r->updated_at = row->updated_at;
    }
    return 0;
}

/* Add a live row to r unless the read budget is spent; false when it is. */
static bool kv_add_row(struct kv_ctx *c, struct kv_result *r, struct slice key,
                       const struct kv_row_state *row, bool keys_only)
{
    struct kv_row *out;
    size_t vlen = keys_only ? 0 : row->value.len;

    if (vlen > c->budget) {
        r->truncated = true;
        return false;
    }
    c->budget -= vlen;
    r->rows = xrealloc(r->rows, (r->n_rows + 1) * sizeof(*r->rows));
    out = &r->rows[r->n_rows++];
    out->key = kv_keep(c, key.ptr, key.len);
    out->value = kv_keep(c, row->value.ptr, vlen);
    out->version = row->version;
    out->expires_at = row->expires_at;
    out->updated_at = row->updated_at;
    return true;
}

static int kv_cmp_slice(const void *a, const void *b)
{
    const struct slice *x = a;
    const struct slice *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->ptr, y->ptr, n);

    if (c != 0) {
        return c;
    }
    return x->len < y->len ? -1 : x->len > y->len;
}

static int kv_apply_get_many(struct kv_ctx *c, size_t i, struct err *err)
{
    const struct kv_op *o = &c->ops[i];
    struct kv_result *r = &c->ans->results[i];
    struct slice *keys = xcalloc(o->n_keys + 1, sizeof(*keys));
    uint8_t kb[KV_STORE_KEY];
    int rc = 0;

    if (o->n_keys > 0) {
        memcpy(keys, o->keys, o->n_keys * sizeof(*keys));
    }
    qsort(keys, o->n_keys, sizeof(*keys), kv_cmp_slice);
    for (size_t k = 0; k < o->n_keys && rc == 0; k++) {
        struct kv_row_state row;

        if (k > 0 && kv_cmp_slice(&keys[k - 1], &keys[k]) == 0) {
            continue;
        }
        rc =
            kv_row_get(c, kb, kv_key(kb, c->tenant, o->ns, keys[k]), &row, err);
        if (rc != 0) {
            break;
        }
        if (!row.is_live) {
            r->missing =
                xrealloc(r->missing, (r->n_missing + 1) * sizeof(*r->missing));
            r->missing[r->n_missing++] = kv_keep(c, keys[k].ptr, keys[k].len);
        } else if (!kv_add_row(c, r, keys[k], &row, false)) {
            break; /* keys cut by the budget are in neither list */
        }
    }
    free(keys);
    return rc;
}

static bool kv_has_prefix(const MDB_val *k, const uint8_t *pb, size_t pn)
{
    return k->mv_size >= pn && memcmp(k->mv_data, pb, pn) == 0;
}

/* Walk the live rows of the prefix after the cursor; stop at limit + 1 to
 * learn whether the page is truncated. */
static int kv_prefix_walk(struct kv_ctx *c, size_t i, MDB_cursor *cur,
                          uint8_t *pb, size_t pn, struct err *err)
{
    const struct kv_op *o = &c->ops[i];
    struct kv_result *r = &c->ans->results[i];
    size_t base = 17 + o->ns.len;
    int limit = o->limit <= 0              ? KV_PREFIX_DEF
                : o->limit > KV_PREFIX_MAX ? KV_PREFIX_MAX
                                           : o->limit;
    uint8_t kb[KV_STORE_KEY];
    size_t kn = kv_key(kb, c->tenant, o->ns, o->after);
    struct slice sa = {(const char *)kb, kn};
    struct slice sp = {(const char *)pb, pn};
    bool is_after = o->after.len > 0 && kv_cmp_slice(&sa, &sp) >= 0;
    MDB_val k = {is_after ? kn : pn, is_after ? kb : pb};
    MDB_val d;
    int rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);

    if (rc == 0 && is_after && k.mv_size == kn &&
        memcmp(k.mv_data, kb, kn) == 0) {
        rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT); /* after is exclusive */
    }
    for (; rc == 0 && kv_has_prefix(&k, pb, pn);
         rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
        struct kv_row_state row;
        struct slice key = {(const char *)k.mv_data + base, k.mv_size - base};

        kv_decode_row(c, &d, &row);
        if (!row.is_live) {
            continue;
        }
        if (r->n_rows == (size_t)limit) {
            r->truncated = true;
            break;
        }
        if (!kv_add_row(c, r, key, &row, o->keys_only)) {
            break;
        }
    }
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "kv getPrefix: %s", mdb_strerror(rc));
    }
    return 0;
}

static int kv_apply_get_prefix(struct kv_ctx *c, size_t i, struct err *err)
{
    const struct kv_op *o = &c->ops[i];
    struct kv_result *r = &c->ans->results[i];
    uint8_t pb[KV_STORE_KEY];
    size_t pn = kv_key(pb, c->tenant, o->ns, o->prefix);
    MDB_cursor *cur;
    int rc = mdb_cursor_open(c->txn, c->s->kv, &cur);

    if (rc != 0) {
        return err_set(err, ERR_IO, "kv cursor: %s", mdb_strerror(rc));
    }
    rc = kv_prefix_walk(c, i, cur, pb, pn, err);
    mdb_cursor_close(cur);
    if (rc == 0 && r->truncated && r->n_rows > 0) {
        r->has_next_after = true;
        r->next_after = r->rows[r->n_rows - 1].key; /* an arena offset */
    }
    return rc;
}

/* ---- the batch ---- */

/* Phase 1 (getMany, getPrefix) answers after every write of the call. */
static int kv_phase(int op)
{
    return op == KV_GET_MANY || op == KV_GET_PREFIX;
}

static int kv_run_op(struct kv_ctx *c, size_t i, struct err *err)
{
    const struct kv_op *o = &c->ops[i];
    struct kv_result *r = &c->ans->results[i];
    uint8_t kb[KV_STORE_KEY];
    size_t kn;
    struct kv_row_state row;

    r->op = o->op;
    if (o->op == KV_GET_MANY) {
        return kv_apply_get_many(c, i, err);
    }
    if (o->op == KV_GET_PREFIX) {
        return kv_apply_get_prefix(c, i, err);
    }
    r->key = kv_keep(c, o->key.ptr, o->key.len);
    kn = kv_key(kb, c->tenant, o->ns, o->key);
    if (kv_row_get(c, kb, kn, &row, err) != 0) {
        return err->code;
    }
    switch (o->op) {
    case KV_GET:
        return kv_apply_get(c, i, &row);
    case KV_PUT:
    case KV_PUT_IF_ABSENT:
        return kv_apply_put(c, i, kb, kn, &row, err);
    case KV_DELETE:
        return kv_apply_delete(c, i, kb, kn, &row, err);
    default:
        return kv_apply_incr(c, i, kb, kn, &row, err);
    }
}

/* Run the ops in the order given, phase 0 then phase 1 (store/kv.h), up to
 * the first loss or refusal: that op is the batch's failedIndex. */
static int kv_run(struct kv_ctx *c, size_t n, struct err *err)
{
    int rc = 0;

    for (int phase = 0; phase <= 1; phase++) {
        for (size_t i = 0; i < n && rc == 0 && !c->is_lost; i++) {
            if (kv_phase(c->ops[i].op) == phase) {
                rc = kv_run_op(c, i, err);
            }
        }
    }
    return rc;
}

static int kv_meta_version(MDB_txn *txn, MDB_dbi meta, uint64_t *v,
                           struct err *err)
{
    char name[] = "kv_version";
    MDB_val k = {sizeof(name) - 1, name};
    MDB_val d;
    int rc = mdb_get(txn, meta, &k, &d);

    *v = 0;
    if (rc == 0 && d.mv_size == 8) {
        *v = be64_get(d.mv_data);
    } else if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "kv_version: %s", mdb_strerror(rc));
    }
    return 0;
}

static int kv_meta_put_version(MDB_txn *txn, MDB_dbi meta, uint64_t v,
                               struct err *err)
{
    char name[] = "kv_version";
    uint8_t b[8];
    MDB_val k = {sizeof(name) - 1, name};
    MDB_val d = {8, b};
    int rc;

    be64_put(b, v);
    rc = mdb_put(txn, meta, &k, &d, 0);
    if (rc != 0) {
        return err_set(err, kv_mdb(rc), "kv_version: %s", mdb_strerror(rc));
    }
    return 0;
}

int store_kv_apply(struct store *s, MDB_txn *txn, const struct kv_batch *b,
                   int64_t now, struct kv_answer *ans, struct err *err)
{
    struct kv_ctx c = {s,     NULL,           b->tenant, now,    0,
                       false, KV_READ_BUDGET, NULL,      b->ops, false};
    size_t n = b->n;
    int rc = mdb_txn_begin(s->env, txn, 0, &c.txn); /* (4) */

    kv_answer_start(ans, n);
    c.ans = ans;
    ans->stamp = now;
    if (rc != 0) {
        return err_set(err, kv_mdb(rc), "kv nested txn: %s", mdb_strerror(rc));
    }
    rc = kv_meta_version(c.txn, s->meta, &c.version, err);
    if (rc == 0) {
        rc = kv_run(&c, n, err);
    }
    if (rc == 0 && !c.is_lost && c.has_new_version) {
        rc = kv_meta_put_version(c.txn, s->meta, c.version, err);
    }
    if (rc != 0 || c.is_lost) {
        mdb_txn_abort(c.txn);
    } else {
        rc = mdb_txn_commit(c.txn);
        if (rc != 0) {
            rc = err_set(err, kv_mdb(rc), "kv nested commit: %s",
                         mdb_strerror(rc));
        }
    }
    kv_finish(ans);
    return rc;
}

int store_kv_read(struct store *s, const struct kv_batch *b, int64_t now,
                  struct kv_answer *ans, struct err *err)
{
    struct kv_ctx c = {s,     NULL,           b->tenant, now,    0,
                       false, KV_READ_BUDGET, NULL,      b->ops, false};
    size_t n = b->n;
    int rc;

    ASSERT(!kv_has_write(b->ops, n));
    kv_answer_start(ans, n);
    c.ans = ans;
    pthread_rwlock_rdlock(&s->swap_lock);
    rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &c.txn);
    if (rc != 0) {
        pthread_rwlock_unlock(&s->swap_lock);
        kv_finish(ans);
        return err_set(err, ERR_IO, "mdb_txn_begin read: %s", mdb_strerror(rc));
    }
    rc = kv_run(&c, n, err);
    mdb_txn_abort(c.txn);
    pthread_rwlock_unlock(&s->swap_lock);
    kv_finish(ans);
    return rc;
}

int store_kv_sweep(struct store *s, MDB_txn *txn, int64_t now, uint32_t max,
                   uint32_t *removed, struct err *err)
{
    MDB_cursor *cur;
    MDB_val k;
    MDB_val d;
    int rc = mdb_cursor_open(txn, s->kv_expiry, &cur);

    *removed = 0;
    if (rc != 0) {
        return err_set(err, ERR_IO, "kv sweep cursor: %s", mdb_strerror(rc));
    }
    for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST);
         rc == 0 && *removed < max && k.mv_size > 8 &&
         (int64_t)be64_get(k.mv_data) <= now;
         rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST)) {
        /* A long row key is the value (kv_expiry_key). */
        MDB_val rk = d.mv_size > 0
                         ? d
                         : (MDB_val){k.mv_size - 8, (uint8_t *)k.mv_data + 8};

        rc = mdb_del(txn, s->kv, &rk, NULL);
        if (rc == 0 || rc == MDB_NOTFOUND) {
            rc = mdb_cursor_del(cur, 0);
        }
        if (rc != 0) {
            break;
        }
        (*removed)++;
    }
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, kv_mdb(rc), "kv sweep: %s", mdb_strerror(rc));
    }
    return 0;
}

int store_kv_oldest_expiry(struct store *s, int64_t *out, struct err *err)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val k;
    MDB_val d;
    int rc;

    *out = 0;
    pthread_rwlock_rdlock(&s->swap_lock);
    rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc == 0) {
        rc = mdb_cursor_open(txn, s->kv_expiry, &cur);
        if (rc == 0) {
            rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST);
            if (rc == 0 && k.mv_size >= 8) {
                *out = (int64_t)be64_get(k.mv_data);
            }
            mdb_cursor_close(cur);
        }
        mdb_txn_abort(txn);
    }
    pthread_rwlock_unlock(&s->swap_lock);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "kv expiry read: %s", mdb_strerror(rc));
    }
    return 0;
}

int store_kv_last_version(struct store *s, uint64_t *out, struct err *err)
{
    MDB_txn *txn;
    int rc;

    pthread_rwlock_rdlock(&s->swap_lock);
    rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        pthread_rwlock_unlock(&s->swap_lock);
        return err_set(err, ERR_IO, "mdb_txn_begin read: %s", mdb_strerror(rc));
    }
    rc = kv_meta_version(txn, s->meta, out, err);
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap_lock);
    return rc;
}

int store_kv_get_int(struct store *s, MDB_txn *txn, const struct kv_name *row,
                     int64_t now, int64_t *out, struct err *err)
{
    const uint8_t *tenant = row->tenant;
    uint8_t kb[KV_STORE_KEY];
    struct kv_ctx c = {s,    txn,  tenant, now, 0, false, KV_READ_BUDGET,
                       NULL, NULL, false};
    struct kv_row_state r;
    bool own = txn == NULL;
    int rc = 0;

    *out = 0;
    if (own) {
        pthread_rwlock_rdlock(&s->swap_lock);
        rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &c.txn);
        if (rc != 0) {
            pthread_rwlock_unlock(&s->swap_lock);
            return err_set(err, ERR_IO, "mdb_txn_begin read: %s",
                           mdb_strerror(rc));
        }
    }
    rc = kv_row_get(&c, kb, kv_key(kb, tenant, row->ns, row->key), &r, err);
    if (rc == 0 && r.exists && r.is_live && !kv_int_value(r.value, out)) {
        *out = 0;
    }
    if (own) {
        mdb_txn_abort(c.txn);
        pthread_rwlock_unlock(&s->swap_lock);
    }
    return rc;
}
