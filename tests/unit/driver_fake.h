/* A fake broker for the sink's unit tests, behind struct sink_broker: KV rows
 * with the broker's batch semantics (versions from one counter, expect,
 * required writes that roll the whole batch back, putIfAbsent, delete,
 * get, getMany, getPrefix), partitions of records for fetch and
 * partitions/changed, and a safeTime the test moves. Failures are scripted:
 * the next N KV calls answer a call error. Single-threaded. */
#ifndef QUEEN_TESTS_DRIVER_FAKE_H
#define QUEEN_TESTS_DRIVER_FAKE_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/pct.h"
#include "base/xalloc.h"
#include "s3/client.h"
#include "sink/driver.h"

#define FAKE_MAX_ROWS  64
#define FAKE_MAX_PARTS 16
#define FAKE_MAX_RECS  4096

struct fake_row {
    bool used;
    char key[512];
    char value[4096];
    uint64_t version;
    int64_t ttl;
};

struct fake_rec {
    int64_t ts;
    char txn[48];
    char payload[64];
};

struct fake_part {
    char name[64];
    int id;
    int incarnation;
    int64_t log_start;
    int64_t n; /* records [0, n) exist; [log_start, n) retained */
    struct fake_rec recs[FAKE_MAX_RECS];
};

struct fake_broker {
    struct fake_row rows[FAKE_MAX_ROWS];
    uint64_t next_version;
    int fail_next;      /* KV calls that answer fail_code */
    int fail_code;      /* default ERR_BUSY */
    int kv_calls;       /* every KV call, failed ones included */
    int kv_writes;      /* write batches applied (status 0) */
    bool kv_never;      /* every KV call fails forever */
    int land_then_fail; /* the next N write batches apply, then time out */
    int64_t safe_time;  /* us */
    bool queue_exists;
    char queue[64];
    struct fake_part parts[FAKE_MAX_PARTS];
    size_t n_parts;
    int fetch_calls;
    int changed_calls;
    int fail_reads;        /* the next N fetch/changed calls fail */
    const char *trim_part; /* at the next fetch, raise its logStart */
    int64_t trim_to;
};

static inline void fake_init(struct fake_broker *f, const char *queue)
{
    memset(f, 0, sizeof(*f));
    f->next_version = 1;
    f->fail_code = ERR_BUSY;
    f->queue_exists = true;
    snprintf(f->queue, sizeof(f->queue), "%s", queue);
}

static inline struct fake_row *fake_find(struct fake_broker *f,
                                         struct slice key)
{
    for (size_t i = 0; i < FAKE_MAX_ROWS; i++) {
        if (f->rows[i].used && strlen(f->rows[i].key) == key.len &&
            memcmp(f->rows[i].key, key.ptr, key.len) == 0) {
            return &f->rows[i];
        }
    }
    return NULL;
}

static inline struct fake_row *fake_row_get(struct fake_broker *f,
                                            const char *key)
{
    return fake_find(f, (struct slice){key, strlen(key)});
}

static inline struct fake_row *fake_row_must(struct fake_broker *f,
                                             const char *key)
{
    struct fake_row *r = fake_row_get(f, key);

    if (r == NULL) {
        abort();
    }
    return r;
}

static inline struct fake_row *fake_row_set(struct fake_broker *f,
                                            const char *key, const char *value)
{
    struct fake_row *r = fake_row_get(f, key);

    for (size_t i = 0; r == NULL && i < FAKE_MAX_ROWS; i++) {
        if (!f->rows[i].used) {
            r = &f->rows[i];
        }
    }
    if (r == NULL) {
        abort();
    }
    r->used = true;
    snprintf(r->key, sizeof(r->key), "%s", key);
    snprintf(r->value, sizeof(r->value), "%s", value);
    r->version = f->next_version++;
    return r;
}

/* Copy bytes into the answer's arena; slices are fixed up after. */
static inline size_t fake_keep(struct kv_answer *a, struct slice s)
{
    size_t at = a->arena.len;
    struct err e;

    buf_append(&a->arena, s.ptr, s.len, &e);
    buf_append_byte(&a->arena, '\0', &e);
    return at;
}

struct fake_undo {
    struct fake_row saved[FAKE_MAX_ROWS];
    uint64_t next_version;
};

/* The verdict of one write op; fills r. */
static inline bool fake_write(struct fake_broker *f, const struct kv_op *op,
                              struct kv_result *r, size_t *val_at,
                              struct kv_answer *a)
{
    struct fake_row *row = fake_find(f, op->key);
    bool ok;

    r->op = op->op;
    if (op->op == KV_PUT_IF_ABSENT) {
        ok = row == NULL;
        r->reason = ok ? KV_REASON_NONE : KV_REASON_EXISTS;
    } else if (op->has_expect) {
        uint64_t have = row != NULL ? row->version : 0;
        ok = have == op->expect;
        r->reason = ok ? KV_REASON_NONE
                       : (row == NULL ? KV_REASON_ABSENT : KV_REASON_VERSION);
    } else {
        ok = op->op != KV_DELETE || row != NULL;
        r->reason = ok ? KV_REASON_NONE : KV_REASON_ABSENT;
    }
    r->applied = ok;
    *val_at = (size_t)-1;
    if (!ok) {
        if (row != NULL) {
            r->version = row->version;
            r->has_value = true;
            *val_at =
                fake_keep(a, (struct slice){row->value, strlen(row->value)});
        }
        return false;
    }
    if (op->op == KV_DELETE) {
        row->used = false;
        r->version = 0;
        return true;
    }
    char key[512];
    char val[4096];
    snprintf(key, sizeof(key), "%.*s", (int)op->key.len, op->key.ptr);
    snprintf(val, sizeof(val), "%.*s", (int)op->value.len, op->value.ptr);
    row = fake_row_set(f, key, val);
    row->ttl = op->ttl_seconds;
    r->version = row->version;
    r->has_value = true;
    *val_at = fake_keep(a, op->value);
    return true;
}

static inline int fake_key_cmp(const void *x, const void *y)
{
    return strcmp((*(const struct fake_row *const *)x)->key,
                  (*(const struct fake_row *const *)y)->key);
}

/* getPrefix: keys under the prefix after the cursor, sorted, up to limit;
 * slices hold arena offsets until fake_kv fixes them up. */
static inline void fake_prefix(struct fake_broker *f, const struct kv_op *op,
                               struct kv_result *r, struct kv_answer *a)
{
    const struct fake_row *v[FAKE_MAX_ROWS] = {0};
    size_t n = 0;
    int limit = op->limit <= 0 ? 100 : op->limit;
    char after[512];

    snprintf(after, sizeof(after), "%.*s", (int)op->after.len, op->after.ptr);
    for (size_t i = 0; i < FAKE_MAX_ROWS; i++) {
        const struct fake_row *row = &f->rows[i];
        if (row->used &&
            strncmp(row->key, op->prefix.ptr, op->prefix.len) == 0 &&
            strlen(row->key) >= op->prefix.len && strcmp(row->key, after) > 0) {
            v[n++] = row;
        }
    }
    qsort(v, n, sizeof(*v), fake_key_cmp);
    r->rows = xcalloc(n + 1, sizeof(*r->rows));
    for (size_t i = 0; i < n && (int)i < limit; i++) {
        struct kv_row *kr = &r->rows[r->n_rows++];
        kr->version = v[i]->version;
        kr->key.len = strlen(v[i]->key);
        kr->key.ptr = (const char *)(uintptr_t)fake_keep(
            a, (struct slice){v[i]->key, kr->key.len});
        kr->value.ptr = (const char *)(uintptr_t)fake_keep(a, SLICE_LIT(""));
    }
    r->truncated = (int)n > limit;
    if (r->truncated) {
        r->has_next_after = true;
        r->next_after = r->rows[r->n_rows - 1].key; /* offset, fixed later */
    }
}

static inline void fake_read(struct fake_broker *f, const struct kv_op *op,
                             struct kv_result *r, size_t *val_at,
                             struct kv_answer *a)
{
    r->op = op->op;
    *val_at = (size_t)-1;
    if (op->op == KV_GET) {
        const struct fake_row *row = fake_find(f, op->key);
        if (row == NULL) {
            r->found = false;
            return;
        }
        r->found = true;
        r->version = row->version;
        r->has_value = true;
        *val_at = fake_keep(a, (struct slice){row->value, strlen(row->value)});
        return;
    }
    if (op->op == KV_GET_PREFIX) {
        fake_prefix(f, op, r, a);
        return;
    }
    /* getMany: rows in key order (callers here look them up by key) */
    r->rows = xcalloc(op->n_keys + 1, sizeof(*r->rows));
    for (size_t i = 0; i < op->n_keys; i++) {
        struct fake_row *row = fake_find(f, op->keys[i]);
        if (row == NULL) {
            continue;
        }
        struct kv_row *kr = &r->rows[r->n_rows++];
        kr->version = row->version;
        /* offsets now; fixed into pointers by fake_fixup */
        kr->key.len = strlen(row->key);
        kr->key.ptr = (const char *)(uintptr_t)fake_keep(
            a, (struct slice){row->key, kr->key.len});
        kr->value.len = strlen(row->value);
        kr->value.ptr = (const char *)(uintptr_t)fake_keep(
            a, (struct slice){row->value, kr->value.len});
    }
}

static inline int fake_kv(void *arg, const uint8_t tenant[16],
                          const struct kv_op *ops, size_t n, int timeout_ms,
                          struct kv_answer *a, struct err *err)
{
    struct fake_broker *f = arg;
    struct fake_undo *undo = xmalloc(sizeof(*undo));
    size_t *val_at = xcalloc(n + 1, sizeof(*val_at));

    UNUSED(tenant);
    UNUSED(timeout_ms);
    memset(a, 0, sizeof(*a));
    f->kv_calls++;
    if (f->kv_never || f->fail_next > 0) {
        f->fail_next -= f->fail_next > 0;
        free(undo);
        free(val_at);
        return err_set(err, f->kv_never ? ERR_TIMEOUT : f->fail_code,
                       "fake kv: scripted failure");
    }
    memcpy(undo->saved, f->rows, sizeof(f->rows));
    undo->next_version = f->next_version;
    buf_init(&a->arena, BUF_UNLIMITED);
    a->results = xcalloc(n + 1, sizeof(*a->results));
    a->n_results = n;
    bool any_write = false;
    for (size_t i = 0; i < n; i++) {
        struct kv_result *r = &a->results[i];
        if (ops[i].op == KV_GET || ops[i].op == KV_GET_MANY ||
            ops[i].op == KV_GET_PREFIX) {
            fake_read(f, &ops[i], r, &val_at[i], a);
            continue;
        }
        any_write = true;
        bool ok = fake_write(f, &ops[i], r, &val_at[i], a);
        if (!ok && ops[i].required) {
            memcpy(f->rows, undo->saved, sizeof(f->rows));
            f->next_version = undo->next_version;
            a->status = ERR_PRECONDITION;
            a->failed_index = i;
            a->kv_reason = r->reason;
            a->version = r->version;
            a->has_value = r->has_value;
            if (r->has_value) {
                a->value.len = strlen(a->arena.data + val_at[i]);
                a->value.ptr = a->arena.data + val_at[i];
            }
            snprintf(a->msg, sizeof(a->msg), "precondition failed");
            break;
        }
    }
    /* fix up slices now that the arena no longer moves */
    for (size_t i = 0; i < n; i++) {
        struct kv_result *r = &a->results[i];
        if (val_at[i] != (size_t)-1) {
            r->value.ptr = a->arena.data + val_at[i];
            r->value.len = strlen(r->value.ptr);
        }
        if (r->has_next_after) {
            r->next_after.ptr = a->arena.data + (uintptr_t)r->next_after.ptr;
        }
        for (size_t j = 0; j < r->n_rows; j++) {
            r->rows[j].key.ptr = a->arena.data + (uintptr_t)r->rows[j].key.ptr;
            r->rows[j].value.ptr =
                a->arena.data + (uintptr_t)r->rows[j].value.ptr;
        }
    }
    if (a->status == 0 && any_write) {
        f->kv_writes++;
    }
    free(undo);
    free(val_at);
    if (any_write && f->land_then_fail > 0) {
        f->land_then_fail--;
        kv_answer_free(a);
        return err_set(err, ERR_TIMEOUT, "fake kv: applied, then timed out");
    }
    return 0;
}

/* ---- records ------------------------------------------------------------ */

static inline struct fake_part *fake_part(struct fake_broker *f,
                                          const char *name)
{
    for (size_t i = 0; i < f->n_parts; i++) {
        if (strcmp(f->parts[i].name, name) == 0) {
            return &f->parts[i];
        }
    }
    ASSERT(f->n_parts < FAKE_MAX_PARTS);
    struct fake_part *p = &f->parts[f->n_parts];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->id = (int)f->n_parts + 1;
    f->n_parts++;
    return p;
}

/* Append a record stamped ts to partition name; safeTime follows. */
static inline void fake_push(struct fake_broker *f, const char *name,
                             int64_t ts)
{
    struct fake_part *p = fake_part(f, name);

    ASSERT(p->n < FAKE_MAX_RECS);
    struct fake_rec *r = &p->recs[p->n];
    r->ts = ts;
    snprintf(r->txn, sizeof(r->txn), "txn-%s-%" PRId64, name, p->n);
    snprintf(r->payload, sizeof(r->payload), "{\"p\":\"%s\",\"i\":%" PRId64 "}",
             name, p->n);
    p->n++;
    if (ts >= f->safe_time) {
        f->safe_time = ts + 1;
    }
}

static inline void *fake_arena_alloc(struct buf *arena, size_t n)
{
    size_t at = (arena->len + 15) & ~(size_t)15;
    struct err e;

    ASSERT(at + n <= arena->cap);
    (void)e;
    arena->len = at + n;
    return arena->data + at;
}

static inline void fake_part_info(const struct fake_part *p,
                                  struct store_partition_info *o)
{
    memset(o, 0, sizeof(*o));
    o->name = (struct slice){p->name, strlen(p->name)};
    o->id = (uint64_t)p->id;
    o->uuid[0] = (uint8_t)p->id;
    o->uuid[15] = (uint8_t)p->incarnation;
    o->last_offset = p->n - 1;
    o->log_start = p->log_start;
    o->last_write_at = p->n > 0 ? p->recs[p->n - 1].ts : 0;
}

static inline int fake_changed(void *arg, const uint8_t tenant[16],
                               const struct store_changed_req *reqs, size_t n,
                               struct store_changed_answer *ans,
                               struct err *err)
{
    struct fake_broker *f = arg;
    size_t from = 0;

    UNUSED(tenant);
    memset(ans, 0, sizeof(*ans));
    f->changed_calls++;
    if (f->fail_reads > 0) {
        f->fail_reads--;
        return err_set(err, ERR_IO, "fake changed: scripted failure");
    }
    ASSERT(n == 1);
    ans->safe_time = f->safe_time;
    ans->n_entries = 1;
    ans->entries = xcalloc(1, sizeof(*ans->entries));
    buf_init(&ans->arena, BUF_UNLIMITED);
    buf_reserve(&ans->arena,
                (FAKE_MAX_PARTS + 1) * sizeof(struct store_partition_info),
                err);
    struct store_changed_entry *en = &ans->entries[0];
    if (!f->queue_exists) {
        en->error = STORE_UNKNOWN_TOPIC_OR_PARTITION;
        return 0;
    }
    if (reqs[0].after.len > 2) {
        from = (size_t)strtoull(reqs[0].after.ptr + 2, NULL, 10);
    }
    int limit = reqs[0].limit <= 0 ? 1000 : reqs[0].limit;
    en->partitions = fake_arena_alloc(&ans->arena, (FAKE_MAX_PARTS + 1) *
                                                       sizeof(*en->partitions));
    for (size_t i = from; i < f->n_parts; i++) {
        const struct fake_part *p = &f->parts[i];
        int64_t lw = p->n > 0 ? p->recs[p->n - 1].ts : 0;
        if (reqs[0].since != INT64_MIN && lw < reqs[0].since) {
            continue;
        }
        if ((int)en->n_partitions == limit) {
            en->has_next = true;
            en->next_pid = i;
            break;
        }
        fake_part_info(p, &en->partitions[en->n_partitions++]);
    }
    return 0;
}

static inline int fake_fetch(void *arg, const uint8_t tenant[16],
                             const struct store_fetch_req *reqs, size_t n,
                             struct store_fetch_answer *ans, struct err *err)
{
    struct fake_broker *f = arg;

    UNUSED(tenant);
    memset(ans, 0, sizeof(*ans));
    f->fetch_calls++;
    if (f->fail_reads > 0) {
        f->fail_reads--;
        return err_set(err, ERR_IO, "fake fetch: scripted failure");
    }
    if (f->trim_part != NULL) {
        fake_part(f, f->trim_part)->log_start = f->trim_to;
        f->trim_part = NULL;
    }
    ans->n_entries = n;
    ans->entries = xcalloc(n + 1, sizeof(*ans->entries));
    buf_init(&ans->arena, BUF_UNLIMITED);
    buf_reserve(&ans->arena,
                (n + 1) * (FAKE_MAX_RECS + 1) * sizeof(struct store_record),
                err);
    for (size_t i = 0; i < n; i++) {
        struct store_fetch_entry *en = &ans->entries[i];
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)reqs[i].partition.len,
                 reqs[i].partition.ptr);
        struct fake_part *p = NULL;
        for (size_t j = 0; j < f->n_parts; j++) {
            if (strcmp(f->parts[j].name, name) == 0) {
                p = &f->parts[j];
            }
        }
        if (p == NULL || !f->queue_exists) {
            en->error = STORE_UNKNOWN_TOPIC_OR_PARTITION;
            continue;
        }
        en->high_watermark = p->n;
        en->log_start = p->log_start;
        if (reqs[i].offset < p->log_start || reqs[i].offset > p->n) {
            en->error = STORE_OFFSET_OUT_OF_RANGE;
            continue;
        }
        en->records = fake_arena_alloc(&ans->arena, (FAKE_MAX_RECS + 1) *
                                                        sizeof(*en->records));
        uint64_t bytes = 0;
        for (int64_t o = reqs[i].offset; o < p->n; o++) {
            const struct fake_rec *r = &p->recs[o];
            if (en->n_records > 0 && bytes >= reqs[i].max_bytes) {
                break;
            }
            struct store_record *x = &en->records[en->n_records++];
            memset(x, 0, sizeof(*x));
            x->offset = o;
            x->ts = r->ts;
            x->txn = (struct slice){r->txn, strlen(r->txn)};
            x->payload = (struct slice){r->payload, strlen(r->payload)};
            bytes += 64 + strlen(r->payload);
        }
    }
    return 0;
}

static inline void fake_broker_seam(struct fake_broker *f,
                                    struct sink_broker *b)
{
    memset(b, 0, sizeof(*b));
    b->changed = fake_changed;
    b->fetch = fake_fetch;
    b->kv = fake_kv;
    b->arg = f;
}

/* ---- an in-memory bucket behind the S3 client's transport seam ---------- */

#define FAKE_MAX_OBJECTS 256

struct fake_object {
    char key[1024];
    struct buf body;
    int gets; /* GET requests answered with this object */
};

struct fake_bucket {
    struct fake_object objs[FAKE_MAX_OBJECTS];
    size_t n;
    int writes; /* PUT and POST requests, answered or failed */
    /* Called at every PUT and POST before it is answered (NULL = none):
     * a test's clock and KV outage. From whichever thread sends. */
    void (*on_write)(void *arg);
    void *on_write_arg;
    int puts;        /* PUT requests answered 200 */
    int heads;       /* HEAD requests answered */
    int fail_puts;   /* the next N PUTs answer fail_status */
    int fail_status; /* 503 by default */
    int fail_gets;   /* the next N object GETs (not LISTs) answer
                        fail_get_status */
    int fail_get_status;
    /* Without s3:ListBucket: a GET or HEAD of a missing key answers 403
     * AccessDenied, as AWS does, not 404. */
    bool is_unlisted;
    char put_keys[64][1024]; /* the keys PUT, in order (first 64) */
};

static inline struct fake_object *bucket_find(struct fake_bucket *k,
                                              const char *key)
{
    for (size_t i = 0; i < k->n; i++) {
        if (strcmp(k->objs[i].key, key) == 0) {
            return &k->objs[i];
        }
    }
    return NULL;
}

/* The key (decoded) and the query of a path-style url. */
static inline void bucket_parse_url(const char *url, char *key, size_t cap,
                                    const char **query)
{
    const char *p = strstr(url, "/lake");
    struct buf b;
    struct err e;

    p = p != NULL ? p + 5 : url;
    p += *p == '/';
    const char *q = strchr(p, '?');
    size_t n = q != NULL ? (size_t)(q - p) : strlen(p);
    buf_init(&b, BUF_UNLIMITED);
    pct_unescape(&b, p, n, &e);
    snprintf(key, cap, "%s", b.data != NULL ? b.data : "");
    buf_free(&b);
    *query = q != NULL ? q + 1 : "";
}

/* A query parameter, decoded, into out ("" when absent). */
static inline void bucket_param(const char *query, const char *name, char *out,
                                size_t cap)
{
    size_t nl = strlen(name);
    struct buf b;
    struct err e;

    out[0] = '\0';
    for (const char *p = query; p != NULL && *p != '\0';) {
        const char *amp = strchr(p, '&');
        size_t n = amp != NULL ? (size_t)(amp - p) : strlen(p);
        if (n > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            buf_init(&b, BUF_UNLIMITED);
            pct_unescape(&b, p + nl + 1, n - nl - 1, &e);
            snprintf(out, cap, "%s", b.data != NULL ? b.data : "");
            buf_free(&b);
            return;
        }
        p = amp != NULL ? amp + 1 : NULL;
    }
}

static inline int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static inline void bucket_list(struct fake_bucket *k, const char *query,
                               struct s3_http_answer *ans)
{
    char prefix[1024];
    char after[1024];
    const char *v[FAKE_MAX_OBJECTS] = {0};
    size_t n = 0;
    int shown = 0;
    struct err e;

    bucket_param(query, "prefix", prefix, sizeof(prefix));
    bucket_param(query, "start-after", after, sizeof(after));
    for (size_t i = 0; i < k->n; i++) {
        if (strncmp(k->objs[i].key, prefix, strlen(prefix)) == 0 &&
            strcmp(k->objs[i].key, after) > 0) {
            v[n++] = k->objs[i].key;
        }
    }
    qsort(v, n, sizeof(*v), key_cmp);
    buf_printf(ans->body, &e,
               "<ListBucketResult><IsTruncated>%s"
               "</IsTruncated>",
               n > 1000 ? "true" : "false");
    for (size_t i = 0; i < n && shown < 1000; i++, shown++) {
        buf_printf(ans->body, &e, "<Contents><Key>%s</Key></Contents>", v[i]);
    }
    buf_append_str(ans->body, "</ListBucketResult>", &e);
    ans->status = 200;
}

static inline int bucket_perform(void *arg, const struct s3_http_request *req,
                                 struct s3_http_answer *ans, struct err *err)
{
    struct fake_bucket *k = arg;
    char key[1024];
    const char *query;
    struct err e;

    buf_reset(ans->body);
    ans->etag[0] = '\0';
    ans->content_length = -1;
    ans->retry_after_ms = -1;
    bucket_parse_url(req->url, key, sizeof(key), &query);
    if (strcmp(req->method, "GET") == 0 && strstr(query, "list-type") != NULL) {
        bucket_list(k, query, ans);
        return 0;
    }
    struct fake_object *o = bucket_find(k, key);
    if (strcmp(req->method, "GET") == 0 && k->fail_gets > 0) {
        k->fail_gets--;
        ans->status = k->fail_get_status;
        buf_append_str(ans->body, "<Error><Code>AccessDenied</Code></Error>",
                       &e);
        return 0;
    }
    if (strcmp(req->method, "PUT") == 0 || strcmp(req->method, "POST") == 0) {
        k->writes++;
        if (k->on_write != NULL) {
            k->on_write(k->on_write_arg);
        }
    }
    if (strcmp(req->method, "PUT") == 0) {
        if (k->fail_puts > 0) {
            k->fail_puts--;
            ans->status = k->fail_status != 0 ? k->fail_status : 503;
            buf_append_str(ans->body, "<Error><Code>SlowDown</Code></Error>",
                           &e);
            return 0;
        }
        if (o == NULL) {
            ASSERT(k->n < FAKE_MAX_OBJECTS);
            o = &k->objs[k->n++];
            snprintf(o->key, sizeof(o->key), "%s", key);
            buf_init(&o->body, BUF_UNLIMITED);
        }
        buf_reset(&o->body);
        buf_append(&o->body, req->body, req->body_len, &e);
        if (k->puts < 64) {
            snprintf(k->put_keys[k->puts], sizeof(k->put_keys[0]), "%s", key);
        }
        k->puts++;
        snprintf(ans->etag, sizeof(ans->etag), "\"e%d\"", k->puts);
        ans->status = 200;
        return 0;
    }
    if (req->is_head) {
        k->heads++;
    }
    if (o == NULL) {
        ans->status = k->is_unlisted ? 403 : 404;
        if (!req->is_head) {
            buf_append_str(ans->body,
                           k->is_unlisted
                               ? "<Error><Code>AccessDenied</Code></Error>"
                               : "<Error><Code>NoSuchKey</Code></Error>",
                           &e);
        }
        return 0;
    }
    ans->status = 200;
    ans->content_length = (int64_t)o->body.len;
    snprintf(ans->etag, sizeof(ans->etag), "\"x\"");
    if (!req->is_head) {
        o->gets++;
        if (buf_append(ans->body, o->body.data, o->body.len, &e) != 0) {
            /* as the curl transport: an answer over the caller's cap */
            return err_set(err, ERR_TOO_BIG,
                           "GET answer body is over its cap of %zu bytes",
                           ans->body->max);
        }
    }
    return 0;
}

static inline void bucket_free(struct fake_bucket *k)
{
    for (size_t i = 0; i < k->n; i++) {
        buf_free(&k->objs[i].body);
    }
    k->n = 0;
}

static inline int64_t bucket_now_s(void *arg)
{
    UNUSED(arg);
    return 1788000000;
}

static inline void bucket_sleep(void *arg, uint64_t ms)
{
    UNUSED(arg);
    UNUSED(ms);
}

static inline double bucket_random(void *arg)
{
    UNUSED(arg);
    return 0.0;
}

struct fake_s3 {
    struct fake_bucket *bucket;
    struct s3_transport t;
    struct s3_clock clock;
    struct s3_client *c;
};

static inline void fake_s3_open(struct fake_s3 *s, struct fake_bucket *k)
{
    struct s3_config cfg;
    struct err err = {0};

    memset(s, 0, sizeof(*s));
    s->bucket = k;
    s->t = (struct s3_transport){bucket_perform, k};
    s->clock = (struct s3_clock){bucket_now_s, bucket_sleep, bucket_random,
                                 NULL, NULL};
    s3_config_defaults(&cfg);
    s3_endpoint_parse(&cfg.ep, "QUEEN_S3_ENDPOINT", "http://127.0.0.1:9000",
                      "QUEEN_S3_PREFIX", &err);
    s3_endpoint_set_bucket(&cfg.ep, "QUEEN_S3_BUCKET", "lake",
                           "QUEEN_S3_PREFIX", &err);
    cfg.ep.path_style = true;
    strcpy(cfg.region, "us-east-1");
    strcpy(cfg.access_key, "queen");
    strcpy(cfg.secret_key, "queen-secret-key");
    s->c = s3_client_new(&cfg, &s->t, &s->clock);
}

static inline void fake_s3_close(struct fake_s3 *s)
{
    s3_client_free(s->c);
}

#endif
