/* A fake broker for the sink's unit tests, behind struct sink_broker: KV rows
 * with the broker's batch semantics (versions from one counter, expect,
 * required writes that roll the whole batch back, putIfAbsent, delete,
 * get, getMany, getPrefix), partitions of records for fetch and
 * partitions/changed, and a safeTime the test moves. Failures are scripted:
 * the next N KV calls answer a call error. Single-threaded. */
#ifndef QUEEN_TESTS_DRIVER_FAKE_H
#define QUEEN_TESTS_DRIVER_FAKE_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/xalloc.h"
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
    char payload[64];
};

struct fake_part {
    char name[64];
    char id[37];
    int64_t log_start;
    int64_t n; /* records [0, n) exist; [log_start, n) retained */
    struct fake_rec recs[FAKE_MAX_RECS];
};

struct fake_broker {
    struct fake_row rows[FAKE_MAX_ROWS];
    uint64_t next_version;
    int fail_next;     /* KV calls that answer fail_code */
    int fail_code;     /* default ERR_BUSY */
    int kv_calls;      /* every KV call, failed ones included */
    int kv_writes;     /* write batches applied (status 0) */
    bool kv_never;     /* every KV call fails forever */
    int64_t safe_time; /* us */
    bool queue_exists;
    char queue[64];
    struct fake_part parts[FAKE_MAX_PARTS];
    size_t n_parts;
    int fetch_calls;
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

    ASSERT(r != NULL);
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
    ASSERT(r != NULL);
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

static inline void fake_read(struct fake_broker *f, const struct kv_op *op,
                             struct kv_result *r, size_t *val_at,
                             struct kv_answer *a)
{
    r->op = op->op;
    *val_at = (size_t)-1;
    if (op->op == KV_GET) {
        struct fake_row *row = fake_find(f, op->key);
        r->found = row != NULL;
        if (row != NULL) {
            r->version = row->version;
            r->has_value = true;
            *val_at =
                fake_keep(a, (struct slice){row->value, strlen(row->value)});
        }
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
        if (ops[i].op == KV_GET || ops[i].op == KV_GET_MANY) {
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
    return 0;
}

static inline int fake_safe_time(void *arg, int64_t *out, struct err *err)
{
    struct fake_broker *f = arg;

    UNUSED(err);
    *out = f->safe_time;
    return 0;
}

static inline void fake_broker_seam(struct fake_broker *f,
                                    struct sink_broker *b)
{
    memset(b, 0, sizeof(*b));
    b->kv = fake_kv;
    b->safe_time = fake_safe_time;
    b->arg = f;
}

#endif
