/* The store's reads: fetch by offset (reference 1.3), partitions changed
 * (reference 1.4), queue listing, safeTime and stats. Plain C answers, no
 * JSON: the HTTP handlers and the sink threads call the same functions, so
 * what a client sees and what the sink sees cannot drift apart.
 *
 * Each call runs in one read transaction under swap_lock (shared) and copies
 * what it returns into the answer's arena before the transaction ends. While
 * an answer is built, its slices hold arena OFFSETS (the arena may move as
 * it grows); fix_slices() turns them into pointers once the arena is final. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "store/schema.h"
#include "store/store.h"
#include "store/store_impl.h"

const char *store_entry_error_name(int e)
{
    switch (e) {
    case STORE_UNKNOWN_TOPIC_OR_PARTITION:
        return "UNKNOWN_TOPIC_OR_PARTITION";
    case STORE_OFFSET_OUT_OF_RANGE:
        return "OFFSET_OUT_OF_RANGE";
    case STORE_BAD_CURSOR:
        return "BAD_CURSOR";
    default:
        return NULL;
    }
}

static int read_begin(struct store *s, MDB_txn **txn, struct err *err)
{
    int rc;

    pthread_rwlock_rdlock(&s->swap_lock);
    rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
    if (rc != 0) {
        pthread_rwlock_unlock(&s->swap_lock);
        return err_set(err, ERR_IO, "mdb_txn_begin read: %s", mdb_strerror(rc));
    }
    return 0;
}

static void read_end(struct store *s, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap_lock);
}

/* Append bytes to the arena; the returned slice holds the arena offset. */
static int arena_put(struct buf *a, const void *p, size_t n, struct slice *s,
                     struct err *err)
{
    s->ptr = (const char *)(uintptr_t)a->len;
    s->len = n;
    if (n == 0) {
        return 0;
    }
    return buf_append(a, p, n, err);
}

static void fix_slice(const struct buf *a, struct slice *s)
{
    s->ptr = a->data + (uintptr_t)s->ptr;
}

/* Find a queue row of tenant/name: 0, ERR_NOT_FOUND or ERR_IO. */
static int find_queue(struct store *s, MDB_txn *txn, const uint8_t tenant[16],
                      struct slice name, MDB_val *d, struct err *err)
{
    uint8_t kb[16 + 512];
    MDB_val k = {16 + name.len, kb};
    int rc;

    if (name.len == 0 || name.len > 495) {
        return ERR_NOT_FOUND;
    }
    memcpy(kb, tenant, 16);
    memcpy(kb + 16, name.ptr, name.len);
    rc = mdb_get(txn, s->queues, &k, d);
    if (rc == MDB_NOTFOUND) {
        return ERR_NOT_FOUND;
    }
    if (rc != 0 || d->mv_size < SCHEMA_QUEUE_FIXED) {
        return err_set(err, ERR_IO, "get queue: %s",
                       rc != 0 ? mdb_strerror(rc) : "short row");
    }
    return 0;
}

static int find_part(struct store *s, MDB_txn *txn, uint64_t qid,
                     struct slice name, struct store_wpart *p, struct err *err)
{
    uint8_t kb[8 + 512];
    MDB_val k = {8 + name.len, kb};
    MDB_val d;
    const uint8_t *v;
    int rc;

    if (name.len == 0 || name.len > 503) {
        return ERR_NOT_FOUND;
    }
    be64_put(kb, qid);
    memcpy(kb + 8, name.ptr, name.len);
    rc = mdb_get(txn, s->partitions, &k, &d);
    if (rc == MDB_NOTFOUND) {
        return ERR_NOT_FOUND;
    }
    if (rc != 0 || d.mv_size != SCHEMA_PART_VALUE_LEN) {
        return err_set(err, ERR_IO, "get partition: %s",
                       rc != 0 ? mdb_strerror(rc) : "bad row size");
    }
    v = d.mv_data;
    p->queue_id = qid;
    p->id = be64_get(v);
    memcpy(p->uuid, v + 8, 16);
    p->log_start = (int64_t)be64_get(v + 24);
    p->last_offset = (int64_t)be64_get(v + 32);
    p->last_write_at = (int64_t)be64_get(v + 40);
    p->created_at = (int64_t)be64_get(v + 48);
    return 0;
}

/* ---- fetch ---------------------------------------------------------------
 */

struct fetch_build {
    struct buf *arena;
    struct store_record *recs; /* all entries' records, slices as offsets */
    size_t n_recs;
    size_t cap_recs;
};

static int add_record(struct fetch_build *b, const MDB_val *k, const MDB_val *d,
                      struct err *err)
{
    const uint8_t *v = d->mv_data;
    struct store_record *r;
    size_t tl;

    if (d->mv_size < SCHEMA_RECORD_FIXED ||
        (tl = (size_t)v[25] << 8 | v[26]) > d->mv_size - SCHEMA_RECORD_FIXED) {
        return err_set(err, ERR_CORRUPT, "record row of %zu B is malformed",
                       d->mv_size);
    }
    if (b->n_recs == b->cap_recs) {
        b->cap_recs = b->cap_recs ? b->cap_recs * 2 : 64;
        b->recs = xrealloc(b->recs, b->cap_recs * sizeof(*b->recs));
    }
    r = &b->recs[b->n_recs];
    r->offset = (int64_t)be64_get((const uint8_t *)k->mv_data + 8);
    r->ts = (int64_t)be64_get(v);
    memcpy(r->message_id, v + 8, 16);
    if (arena_put(b->arena, v + SCHEMA_RECORD_FIXED, tl, &r->txn, err) != 0 ||
        arena_put(b->arena, v + SCHEMA_RECORD_FIXED + tl,
                  d->mv_size - SCHEMA_RECORD_FIXED - tl, &r->payload,
                  err) != 0) {
        return err->code;
    }
    b->n_recs++;
    return 0;
}

/* Walk records of pid from offset: the first always, then while the running
 * weight stays <= max_bytes, at most STORE_FETCH_MAX_RECORDS. Offsets missing
 * inside the walk (retention racing us) are stepped over silently. */
static int walk_records(struct store *s, MDB_txn *txn, uint64_t pid,
                        int64_t offset, uint64_t max_bytes,
                        struct fetch_build *b, size_t *count, struct err *err)
{
    uint8_t kb[16];
    MDB_val k = {16, kb};
    MDB_val d;
    MDB_cursor *c;
    uint64_t weight = 0;
    int rc = mdb_cursor_open(txn, s->records, &c);

    *count = 0;
    if (rc != 0) {
        return err_set(err, ERR_IO, "cursor records: %s", mdb_strerror(rc));
    }
    be64_put(kb, pid);
    be64_put(kb + 8, (uint64_t)offset);
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    while (rc == 0 && *count < STORE_FETCH_MAX_RECORDS) {
        uint64_t w;

        if (k.mv_size != 16 || be64_get(k.mv_data) != pid) {
            break;
        }
        w = d.mv_size > SCHEMA_RECORD_FIXED ? d.mv_size - SCHEMA_RECORD_FIXED
                                            : 0;
        if (d.mv_size >= SCHEMA_RECORD_FIXED) {
            const uint8_t *v = d.mv_data;

            w -= (size_t)v[25] << 8 | v[26];
        }
        w = w > 1 ? w : 1;
        if (*count > 0 && weight + w > max_bytes) {
            break;
        }
        weight += w;
        if (add_record(b, &k, &d, err) != 0) {
            mdb_cursor_close(c);
            return err->code;
        }
        (*count)++;
        rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "walk records: %s", mdb_strerror(rc));
    }
    return 0;
}

static int fetch_entry(struct store *s, MDB_txn *txn, const uint8_t tenant[16],
                       const struct store_fetch_req *r,
                       struct store_fetch_entry *e, struct fetch_build *b,
                       struct err *err)
{
    struct store_wpart p;
    MDB_val qd;
    size_t first = b->n_recs;
    int rc = find_queue(s, txn, tenant, r->queue, &qd, err);

    memset(e, 0, sizeof(*e));
    if (rc == ERR_NOT_FOUND) {
        e->error = STORE_UNKNOWN_TOPIC_OR_PARTITION;
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    rc = find_part(s, txn, be64_get(qd.mv_data), r->partition, &p, err);
    if (rc == ERR_NOT_FOUND) {
        e->error = r->offset == 0 ? STORE_ENTRY_OK : STORE_OFFSET_OUT_OF_RANGE;
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    e->high_watermark = p.last_offset + 1;
    e->log_start = p.log_start;
    if (r->offset < p.log_start || r->offset > e->high_watermark) {
        e->error = STORE_OFFSET_OUT_OF_RANGE;
        return 0;
    }
    if (r->offset == e->high_watermark) {
        return 0;
    }
    rc = walk_records(s, txn, p.id, r->offset, r->max_bytes, b, &e->n_records,
                      err);
    /* Remember where this entry's records start; pointers come at the end. */
    e->records = (struct store_record *)(uintptr_t)first;
    return rc;
}

/* Move the record array into the arena and turn offsets into pointers. */
static int fetch_finish(struct store_fetch_answer *ans, struct fetch_build *b,
                        struct err *err)
{
    size_t pad = (8 - ans->arena.len % 8) % 8;
    size_t base;
    static const uint8_t zeros[8];

    if (buf_append(&ans->arena, zeros, pad, err) != 0) {
        return err->code;
    }
    base = ans->arena.len;
    if (b->n_recs > 0 && buf_append(&ans->arena, b->recs,
                                    b->n_recs * sizeof(*b->recs), err) != 0) {
        return err->code;
    }
    for (size_t i = 0; i < ans->n_entries; i++) {
        struct store_fetch_entry *e = &ans->entries[i];
        size_t first = (uintptr_t)e->records;

        e->records =
            e->n_records == 0
                ? NULL
                : (struct store_record *)(void *)(ans->arena.data + base) +
                      first;
        for (size_t j = 0; j < e->n_records; j++) {
            fix_slice(&ans->arena, &e->records[j].txn);
            fix_slice(&ans->arena, &e->records[j].payload);
        }
    }
    return 0;
}

int store_fetch(struct store *s, const uint8_t tenant[16],
                const struct store_fetch_req *reqs, size_t n,
                struct store_fetch_answer *ans, struct err *err)
{
    struct fetch_build b = {&ans->arena, NULL, 0, 0};
    MDB_txn *txn;
    int rc = 0;

    memset(ans, 0, sizeof(*ans));
    buf_init(&ans->arena, STORE_ANSWER_MAX);
    ans->entries = xcalloc(n > 0 ? n : 1, sizeof(*ans->entries));
    ans->n_entries = n;
    if (read_begin(s, &txn, err) != 0) {
        return err->code;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = fetch_entry(s, txn, tenant, &reqs[i], &ans->entries[i], &b, err);
    }
    read_end(s, txn);
    if (rc == 0) {
        rc = fetch_finish(ans, &b, err);
    }
    free(b.recs);
    if (rc != 0) {
        for (size_t i = 0; i < n; i++) {
            ans->entries[i].n_records = 0;
            ans->entries[i].records = NULL;
        }
    }
    return rc;
}

void store_fetch_answer_free(struct store_fetch_answer *ans)
{
    free(ans->entries);
    buf_free(&ans->arena);
    memset(ans, 0, sizeof(*ans));
}

/* ---- partitions changed ---------------------------------------------------
 */

/* "" -> 0 (start); "p|<decimal>" -> that pid; anything else false. */
static bool parse_cursor(struct slice c, uint64_t *pid)
{
    uint64_t v = 0;

    *pid = 0;
    if (c.len == 0) {
        return true;
    }
    if (c.len < 3 || c.ptr[0] != 'p' || c.ptr[1] != '|' || c.len > 22) {
        return false;
    }
    for (size_t i = 2; i < c.len; i++) {
        unsigned dgt = (unsigned char)c.ptr[i] - '0';

        if (dgt > 9 || v > (UINT64_MAX - dgt) / 10) {
            return false;
        }
        v = v * 10 + dgt;
    }
    *pid = v;
    return true;
}

struct changed_build {
    struct buf *arena;
    struct store_partition_info *parts;
    size_t n_parts;
    size_t cap_parts;
};

static int add_part(struct changed_build *b, const struct store_wpart *p,
                    const MDB_val *name, struct err *err)
{
    struct store_partition_info *i;

    if (b->n_parts == b->cap_parts) {
        b->cap_parts = b->cap_parts ? b->cap_parts * 2 : 64;
        b->parts = xrealloc(b->parts, b->cap_parts * sizeof(*b->parts));
    }
    i = &b->parts[b->n_parts];
    i->id = p->id;
    memcpy(i->uuid, p->uuid, 16);
    i->last_offset = p->last_offset;
    i->log_start = p->log_start;
    i->last_write_at = p->last_write_at;
    i->created_at = p->created_at;
    if (arena_put(b->arena, name->mv_data, name->mv_size, &i->name, err) != 0) {
        return err->code;
    }
    b->n_parts++;
    return 0;
}

static int changed_walk(struct store *s, MDB_txn *txn, uint64_t qid,
                        uint64_t after, const struct store_changed_req *r,
                        struct store_changed_entry *e, struct changed_build *b,
                        struct err *err)
{
    int limit = r->limit <= 0 || r->limit > STORE_CHANGED_LIMIT_MAX
                    ? STORE_CHANGED_LIMIT_MAX
                    : r->limit;
    uint8_t kb[16];
    MDB_val k = {16, kb};
    MDB_val d;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->parts_by_id, &c);

    if (rc != 0) {
        return err_set(err, ERR_IO, "cursor parts_by_id: %s", mdb_strerror(rc));
    }
    if (after == UINT64_MAX) {
        mdb_cursor_close(c);
        return 0;
    }
    be64_put(kb, qid);
    be64_put(kb + 8, after + 1);
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    while (rc == 0 && (int)e->n_partitions < limit) {
        struct store_wpart p;
        struct slice name = {d.mv_data, d.mv_size};

        if (k.mv_size != 16 || be64_get(k.mv_data) != qid) {
            break;
        }
        rc = find_part(s, txn, qid, name, &p, err);
        if (rc == ERR_NOT_FOUND) {
            rc = 0; /* being deleted: skipped */
        } else if (rc != 0) {
            break;
        } else if (r->since == INT64_MIN || p.last_write_at >= r->since) {
            if ((rc = add_part(b, &p, &d, err)) != 0) {
                break;
            }
            e->n_partitions++;
            e->next_pid = p.id;
        }
        rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err->code != 0 ? err->code
                              : err_set(err, ERR_IO, "walk partitions: %s",
                                        mdb_strerror(rc));
    }
    e->has_next = (int)e->n_partitions >= limit;
    return 0;
}

static int changed_entry(struct store *s, MDB_txn *txn,
                         const uint8_t tenant[16],
                         const struct store_changed_req *r,
                         struct store_changed_entry *e, struct changed_build *b,
                         struct err *err)
{
    MDB_val qd;
    uint64_t after;
    int rc = find_queue(s, txn, tenant, r->queue, &qd, err);

    memset(e, 0, sizeof(*e));
    if (rc == ERR_NOT_FOUND) {
        e->error = STORE_UNKNOWN_TOPIC_OR_PARTITION;
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    if (!parse_cursor(r->after, &after)) {
        e->error = STORE_BAD_CURSOR;
        return 0;
    }
    e->partitions = (struct store_partition_info *)(uintptr_t)b->n_parts;
    return changed_walk(s, txn, be64_get(qd.mv_data), after, r, e, b, err);
}

static int meta_i64(struct store *s, MDB_txn *txn, const char *name,
                    int64_t *out)
{
    MDB_val k = {strlen(name), (void *)(uintptr_t)name};
    MDB_val d;
    int rc = mdb_get(txn, s->meta, &k, &d);

    *out = 0;
    if (rc == 0 && d.mv_size == 8) {
        *out = (int64_t)be64_get(d.mv_data);
    }
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int changed_finish(struct store_changed_answer *ans,
                          struct changed_build *b, struct err *err)
{
    size_t pad = (8 - ans->arena.len % 8) % 8;
    size_t base;
    static const uint8_t zeros[8];

    if (buf_append(&ans->arena, zeros, pad, err) != 0) {
        return err->code;
    }
    base = ans->arena.len;
    if (b->n_parts > 0 &&
        buf_append(&ans->arena, b->parts, b->n_parts * sizeof(*b->parts),
                   err) != 0) {
        return err->code;
    }
    for (size_t i = 0; i < ans->n_entries; i++) {
        struct store_changed_entry *e = &ans->entries[i];
        size_t first = (uintptr_t)e->partitions;

        e->partitions =
            e->n_partitions == 0
                ? NULL
                : (struct store_partition_info *)(void *)(ans->arena.data +
                                                          base) +
                      first;
        for (size_t j = 0; j < e->n_partitions; j++) {
            fix_slice(&ans->arena, &e->partitions[j].name);
        }
    }
    return 0;
}

int store_changed(struct store *s, const uint8_t tenant[16],
                  const struct store_changed_req *reqs, size_t n,
                  struct store_changed_answer *ans, struct err *err)
{
    struct changed_build b = {&ans->arena, NULL, 0, 0};
    MDB_txn *txn;
    int rc;

    memset(ans, 0, sizeof(*ans));
    buf_init(&ans->arena, STORE_ANSWER_MAX);
    ans->entries = xcalloc(n > 0 ? n : 1, sizeof(*ans->entries));
    ans->n_entries = n;
    if (read_begin(s, &txn, err) != 0) {
        return err->code;
    }
    rc = meta_i64(s, txn, "safe_time", &ans->safe_time);
    if (rc != 0) {
        rc = err_set(err, ERR_IO, "get safe_time: %s", mdb_strerror(rc));
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = changed_entry(s, txn, tenant, &reqs[i], &ans->entries[i], &b, err);
    }
    read_end(s, txn);
    if (rc == 0) {
        rc = changed_finish(ans, &b, err);
    }
    free(b.parts);
    if (rc != 0) {
        for (size_t i = 0; i < n; i++) {
            ans->entries[i].n_partitions = 0;
            ans->entries[i].partitions = NULL;
        }
    }
    return rc;
}

void store_changed_answer_free(struct store_changed_answer *ans)
{
    free(ans->entries);
    buf_free(&ans->arena);
    memset(ans, 0, sizeof(*ans));
}

/* ---- queues, safe time, stats --------------------------------------------
 */

static int queue_info(const MDB_val *d, struct store_queue_info *q,
                      struct err *err)
{
    const uint8_t *v = d->mv_data;

    if (d->mv_size < SCHEMA_QUEUE_FIXED ||
        !store_options_decode(v + SCHEMA_QUEUE_FIXED,
                              d->mv_size - SCHEMA_QUEUE_FIXED, &q->options)) {
        return err_set(err, ERR_CORRUPT, "queue row of %zu B is malformed",
                       d->mv_size);
    }
    q->id = be64_get(v);
    q->created_at = (int64_t)be64_get(v + 8);
    memcpy(q->uuid, v + 16, 16);
    q->n_partitions = be64_get(v + 32);
    return 0;
}

static int list_walk(struct store *s, MDB_txn *txn, const uint8_t tenant[16],
                     struct store_queue_list *out, size_t *cap, struct err *err)
{
    MDB_val k = {16, (void *)(uintptr_t)tenant};
    MDB_val d;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->queues, &c);

    if (rc != 0) {
        return err_set(err, ERR_IO, "cursor queues: %s", mdb_strerror(rc));
    }
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    while (rc == 0 && k.mv_size > 16 && memcmp(k.mv_data, tenant, 16) == 0) {
        struct store_queue_info *q;

        if (out->n == *cap) {
            *cap = *cap ? *cap * 2 : 16;
            out->queues = xrealloc(out->queues, *cap * sizeof(*out->queues));
        }
        q = &out->queues[out->n];
        memset(q, 0, sizeof(*q));
        if (queue_info(&d, q, err) != 0 ||
            arena_put(&out->arena, (const uint8_t *)k.mv_data + 16,
                      k.mv_size - 16, &q->name, err) != 0) {
            mdb_cursor_close(c);
            return err->code;
        }
        out->n++;
        rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "walk queues: %s", mdb_strerror(rc));
    }
    return 0;
}

int store_list_queues(struct store *s, const uint8_t tenant[16],
                      struct store_queue_list *out, struct err *err)
{
    MDB_txn *txn;
    size_t cap = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    buf_init(&out->arena, STORE_ANSWER_MAX);
    if (read_begin(s, &txn, err) != 0) {
        return err->code;
    }
    rc = list_walk(s, txn, tenant, out, &cap, err);
    read_end(s, txn);
    for (size_t i = 0; i < out->n; i++) {
        fix_slice(&out->arena, &out->queues[i].name);
    }
    return rc;
}

void store_queue_list_free(struct store_queue_list *l)
{
    free(l->queues);
    buf_free(&l->arena);
    memset(l, 0, sizeof(*l));
}

int store_get_queue(struct store *s, const uint8_t tenant[16],
                    struct slice name, struct store_queue_info *info,
                    struct err *err)
{
    MDB_txn *txn;
    MDB_val d;
    int rc;

    memset(info, 0, sizeof(*info));
    if (read_begin(s, &txn, err) != 0) {
        return err->code;
    }
    rc = find_queue(s, txn, tenant, name, &d, err);
    if (rc == ERR_NOT_FOUND) {
        rc = err_set(err, ERR_NOT_FOUND, "queue %.*s not found",
                     (int)(name.len > 100 ? 100 : name.len), name.ptr);
    } else if (rc == 0) {
        rc = queue_info(&d, info, err);
    }
    read_end(s, txn);
    return rc;
}

int store_safe_time(struct store *s, int64_t *out, struct err *err)
{
    MDB_txn *txn;
    int rc;

    if (read_begin(s, &txn, err) != 0) {
        return err->code;
    }
    rc = meta_i64(s, txn, "safe_time", out);
    read_end(s, txn);
    if (rc != 0) {
        return err_set(err, ERR_IO, "get safe_time: %s", mdb_strerror(rc));
    }
    return 0;
}

int store_stats(struct store *s, struct store_stats *out, struct err *err)
{
    MDB_txn *txn;
    MDB_stat st;
    MDB_envinfo info;
    int rc;

    memset(out, 0, sizeof(*out));
    if (read_begin(s, &txn, err) != 0) {
        return err->code;
    }
    rc = meta_i64(s, txn, "safe_time", &out->safe_time);
    out->applied_index = store_applied_index(s);
    mdb_env_info(s->env, &info);
    mdb_env_stat(s->env, &st);
    out->map_size = info.me_mapsize;
    out->used_bytes = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
    if (rc == 0 && (rc = mdb_stat(txn, s->queues, &st)) == 0) {
        out->n_queues = st.ms_entries;
    }
    if (rc == 0 && (rc = mdb_stat(txn, s->partitions, &st)) == 0) {
        out->n_partitions = st.ms_entries;
    }
    if (rc == 0 && (rc = mdb_stat(txn, s->records, &st)) == 0) {
        out->n_records = st.ms_entries;
    }
    if (rc == 0 && (rc = mdb_stat(txn, s->dedup, &st)) == 0) {
        out->n_dedup_rows = st.ms_entries;
    }
    read_end(s, txn);
    if (rc != 0) {
        return err_set(err, ERR_IO, "store stats: %s", mdb_strerror(rc));
    }
    return 0;
}
