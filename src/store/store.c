/* The store: one LMDB environment per node holding queues, partitions,
 * records, dedup rows, KV rows and the raft apply position.
 *
 * This file opens the environment and holds the writer primitives the fsm
 * composes (store_impl.h); the reads live in store_read.c. The layout of every
 * key and value is in schema.h.
 *
 * Durability: the environment is opened with MDB_NOSYNC, so a commit costs
 * no fsync; the node syncs it about every 10 ms off the loop (store_sync
 * from a worker) and at close. The raft log is the durable record: it keeps
 * every entry after the last snapshot, so whatever a crash takes from the
 * store (the last moments) is replayed from the log (store (1)); a store
 * left behind the last snapshot's index is replaced by that snapshot on
 * restart (store_snapshot.h). The price, measured here: an fsync per entry
 * capped applies at ~100/s on this disk; without it the apply runs at
 * 60-110 k records/s. LMDB's caveat stands: without MDB_WRITEMAP and on a
 * file system that keeps write order, a power loss loses transactions but
 * not integrity.
 *
 * Swapping the environment (snapshot restore) takes swap_lock exclusively;
 * every reader holds it shared for the length of its read transaction. */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/sha256.h"
#include "base/xalloc.h"
#include "store/format.h"
#include "store/schema.h"
#include "store/store_impl.h"
#include "store/store_snapshot.h"
#include "store/store_warm.h"

const uint8_t STORE_DEFAULT_TENANT[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                          0, 0, 0, 0, 0, 0, 0, 1};

static int mdb_code(int rc)
{
    return rc == MDB_MAP_FULL ? ERR_FULL : ERR_IO;
}

const char *store_dir(const struct store *s)
{
    return s->dir;
}

uint64_t store_applied_index(const struct store *s)
{
    return atomic_load(&s->applied);
}

void store_queue_options_implicit(struct store_queue_options *o)
{
    memset(o, 0, sizeof(*o));
    o->lease_time = 60;
    o->retry_limit = 3;
    o->retry_delay = 1000;
    o->ttl = 3600;
    o->dead_letter_queue = true;
    o->dlq_after_max_retries = true;
    o->dedup_window_seconds = 3600;
    o->retention_sink_hold_max_seconds = 0;
}

void store_queue_options_configured(struct store_queue_options *o)
{
    store_queue_options_implicit(o);
    o->lease_time = 300;
    o->retention_sink_hold_max_seconds = 604800;
}

/* Meta keys are short ASCII names; LMDB wants a mutable pointer. */
static void meta_key(const char *name, char buf[32], MDB_val *k)
{
    size_t n = strlen(name);

    ASSERT(n < 32);
    memcpy(buf, name, n + 1);
    k->mv_size = n;
    k->mv_data = buf;
}

static int meta_get_u64(MDB_txn *txn, MDB_dbi dbi, const char *name,
                        uint64_t *v)
{
    char kb[32];
    MDB_val k;
    MDB_val d;
    int rc;

    meta_key(name, kb, &k);
    rc = mdb_get(txn, dbi, &k, &d);

    if (rc == 0 && d.mv_size == 8) {
        *v = be64_get(d.mv_data);
    }
    return rc;
}

static int meta_put_u64(MDB_txn *txn, MDB_dbi dbi, const char *name, uint64_t v)
{
    uint8_t b[8];
    char kb[32];
    MDB_val k;
    MDB_val d = {8, b};

    meta_key(name, kb, &k);
    be64_put(b, v);
    return mdb_put(txn, dbi, &k, &d, 0);
}

/* The parts_by_write key of a partition (schema.h). */
static void by_write_key(uint8_t kb[24], uint64_t queue_id, int64_t lwa,
                         uint64_t pid)
{
    be64_put(kb, queue_id);
    be64_put(kb + 8, (uint64_t)lwa ^ (1ULL << 63));
    be64_put(kb + 16, pid);
}

static int by_write_put(struct store *s, MDB_txn *txn, uint64_t queue_id,
                        int64_t lwa, uint64_t pid, struct slice name)
{
    uint8_t kb[24];
    MDB_val k = {24, kb};
    MDB_val d = {name.len, NULL};
    int rc;

    by_write_key(kb, queue_id, lwa, pid);
    rc = mdb_put(txn, s->parts_by_write, &k, &d, MDB_RESERVE);
    if (rc == 0) {
        memcpy(d.mv_data, name.ptr, name.len);
    }
    return rc;
}

/* Fill parts_by_write from every partition row (a store of an older build). */
static int by_write_build(struct store *s, MDB_txn *txn)
{
    MDB_cursor *c;
    MDB_val k;
    MDB_val d;
    int rc = mdb_cursor_open(txn, s->partitions, &c);

    if (rc != 0) {
        return rc;
    }
    rc = mdb_cursor_get(c, &k, &d, MDB_FIRST);
    while (rc == 0) {
        const uint8_t *v = d.mv_data;

        if (k.mv_size > 8 && d.mv_size == SCHEMA_PART_VALUE_LEN) {
            struct slice name = {(const char *)k.mv_data + 8, k.mv_size - 8};

            rc = by_write_put(s, txn, be64_get(k.mv_data),
                              (int64_t)be64_get(v + 40), be64_get(v), name);
        }
        rc = rc != 0 ? rc : mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* A data file shorter than the pages its meta page counts (a partial copy
 * of a backup, a truncation) would end the process on SIGBUS, with no line,
 * at the first read past its end: refused here, naming the file and both
 * lengths. Every page up to the last one was written by some commit, so a
 * whole file is never shorter. */
static int check_length(struct store *s, struct err *err)
{
    MDB_envinfo info;
    MDB_stat st;
    struct stat fs;
    mdb_filehandle_t fd;
    uint64_t need;

    if (mdb_env_info(s->env, &info) != 0 || mdb_env_stat(s->env, &st) != 0 ||
        mdb_env_get_fd(s->env, &fd) != 0 || fstat(fd, &fs) != 0) {
        return 0; /* nothing to judge by: LMDB's own checks stand */
    }
    need = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    if ((uint64_t)fs.st_size < need) {
        return err_set(err, ERR_CORRUPT,
                       "%s/data.mdb is %lld bytes, shorter than the %" PRIu64
                       " its pages take: the store was cut (a partial copy "
                       "or a truncation); restore the data directory whole "
                       "from one backup",
                       s->dir, (long long)fs.st_size, need);
    }
    return 0;
}

/* Open every named database and load meta into the cache. */
static int open_dbs(struct store *s, struct err *err)
{
    static const char *const names[] = {
        "meta",    "queues",    "partitions",    "parts_by_id",
        "records", "appends",   "dedup",         "dedup_exp",
        "kv",      "kv_expiry", "parts_by_write"};
    MDB_dbi *dbis[] = {&s->meta,        &s->queues,        &s->partitions,
                       &s->parts_by_id, &s->records,       &s->appends,
                       &s->dedup,       &s->dedup_exp,     &s->kv,
                       &s->kv_expiry,   &s->parts_by_write};
    MDB_txn *txn;
    uint64_t v = 0;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);

    if (rc != 0) {
        return err_set(err, ERR_IO, "mdb_txn_begin: %s", mdb_strerror(rc));
    }
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        rc = mdb_dbi_open(txn, names[i], MDB_CREATE, dbis[i]);
        if (rc != 0) {
            mdb_txn_abort(txn);
            return err_set(err, mdb_code(rc), "mdb_dbi_open %s: %s", names[i],
                           mdb_strerror(rc));
        }
    }
    if (meta_get_u64(txn, s->meta, "schema", &v) == MDB_NOTFOUND) {
        rc = meta_put_u64(txn, s->meta, "schema", SCHEMA_VERSION);
    } else if (v != SCHEMA_VERSION) {
        mdb_txn_abort(txn);
        return err_set(err, ERR_CORRUPT, "store schema %" PRIu64 " is not %d",
                       v, SCHEMA_VERSION);
    }
    if (rc == 0 && meta_get_u64(txn, s->meta, "by_write", &v) != 0) {
        rc = by_write_build(s, txn);
        rc = rc != 0 ? rc : meta_put_u64(txn, s->meta, "by_write", 1);
    }
    v = 0;
    meta_get_u64(txn, s->meta, "applied", &v);
    atomic_store(&s->applied, v);
    v = 0;
    meta_get_u64(txn, s->meta, "safe_time", &v);
    atomic_store(&s->safe_time, (int64_t)v);
    v = 0;
    meta_get_u64(txn, s->meta, "last_clock", &v);
    s->last_clock = (int64_t)v;
    s->next_queue = 1;
    meta_get_u64(txn, s->meta, "next_queue", &s->next_queue);
    s->next_part = 1;
    meta_get_u64(txn, s->meta, "next_part", &s->next_part);
    rc = rc != 0 ? rc : mdb_txn_commit(txn);
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "open store meta: %s",
                       mdb_strerror(rc));
    }
    return 0;
}

static int env_open(struct store *s, struct err *err)
{
    int rc = mdb_env_create(&s->env);

    if (rc != 0) {
        return err_set(err, ERR_IO, "mdb_env_create: %s", mdb_strerror(rc));
    }
    rc = mdb_env_set_mapsize(s->env, (size_t)s->map_size);
    if (rc == 0) {
        rc = mdb_env_set_maxdbs(s->env, 16);
    }
    if (rc == 0) {
        rc = mdb_env_set_maxreaders(s->env, 256);
    }
    if (rc == 0) {
        rc = mdb_env_open(s->env, s->dir, MDB_NOSYNC | MDB_NOTLS, 0644);
    }
    atomic_store(&s->synced_txn, UINT64_MAX); /* a new environment: unknown */
    if (rc != 0) {
        mdb_env_close(s->env);
        s->env = NULL;
        return err_set(err, ERR_IO, "mdb_env_open %s: %s", s->dir,
                       mdb_strerror(rc));
    }
    if (check_length(s, err) != 0 || open_dbs(s, err) != 0) {
        mdb_env_close(s->env);
        s->env = NULL;
        return err->code;
    }
    return 0;
}

int store_open(struct store **out, const char *dir, uint64_t map_size,
               struct err *err)
{
    struct store *s = xcalloc(1, sizeof(*s));
    int level;

    s->dir = xstrdup(dir);
    s->map_size = map_size != 0 ? map_size : STORE_MAP_SIZE_DEFAULT;
    pthread_rwlock_init(&s->swap_lock, NULL);
    if (env_open(s, err) != 0) {
        pthread_rwlock_destroy(&s->swap_lock);
        free(s->dir);
        free(s);
        return err->code;
    }
    if (store_format_read(s, NULL, &level, err) != 0) {
        store_close(s);
        return err->code;
    }
    *out = s;
    return 0;
}

void store_close(struct store *s)
{
    if (s == NULL) {
        return;
    }
    store_warm_stop(s);
    mdb_env_close(s->env);
    pthread_rwlock_destroy(&s->swap_lock);
    explicit_bzero(s->seal_key, sizeof(s->seal_key));
    free(s->dir);
    free(s);
}

void store_set_seal_key(struct store *s, const uint8_t key[32])
{
    memcpy(s->seal_key, key, sizeof(s->seal_key));
    s->has_seal_key = true;
}

bool store_is_full(struct store *s, uint64_t reserve)
{
    MDB_envinfo info;
    MDB_stat st;

    mdb_env_info(s->env, &info);
    mdb_env_stat(s->env, &st);
    return (uint64_t)(info.me_last_pgno + 1) * st.ms_psize + reserve >
           info.me_mapsize;
}

int store_sync(struct store *s, struct err *err)
{
    MDB_envinfo info;
    int rc;

    pthread_rwlock_rdlock(&s->swap_lock);
    /* The last transaction is read before the sync, so one committed while
     * it runs is synced by the next call. */
    rc = mdb_env_info(s->env, &info);
    if (rc == 0 && info.me_last_txnid != atomic_load(&s->synced_txn)) {
        rc = mdb_env_sync(s->env, 1);
        if (rc == 0) {
            atomic_store(&s->synced_txn, info.me_last_txnid);
        }
    }
    pthread_rwlock_unlock(&s->swap_lock);

    if (rc != 0) {
        return err_set(err, ERR_IO, "sync %s/data.mdb: %s", s->dir,
                       mdb_strerror(rc));
    }
    return 0;
}

/* ---- writer --------------------------------------------------------------
 */

int store_wbegin(struct store *s, MDB_txn **txn, struct err *err)
{
    int rc = mdb_txn_begin(s->env, NULL, 0, txn);

    if (rc != 0) {
        return err_set(err, mdb_code(rc), "mdb_txn_begin: %s",
                       mdb_strerror(rc));
    }
    return 0;
}

void store_wabort(struct store *s, MDB_txn *txn)
{
    UNUSED(s);
    mdb_txn_abort(txn);
}

/* A failed commit as the operator needs it: the file and the errno's text.
 * LMDB reports a short write (what a full file system gives) as EIO, so an
 * EIO on a file system with less than a MiB left for us is told as
 * ENOSPC. */
static int commit_error(struct store *s, int rc, uint64_t applied,
                        struct err *err)
{
    struct statvfs vfs;
    int code = mdb_code(rc);

    if (rc == EIO && statvfs(s->dir, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < ((uint64_t)1 << 20)) {
        rc = ENOSPC;
    }
    if (rc == ENOSPC || rc == EDQUOT) {
        code = ERR_FULL;
    }
    return err_set(err, code, "commit entry %" PRIu64 " to %s/data.mdb: %s",
                   applied, s->dir, mdb_strerror(rc));
}

int store_wcommit(struct store *s, MDB_txn *txn, uint64_t applied,
                  int64_t stamp, struct err *err)
{
    int64_t safe = atomic_load(&s->safe_time);
    int rc;

    if (stamp > safe) {
        safe = stamp;
    }
    rc = meta_put_u64(txn, s->meta, "applied", applied);
    if (rc == 0) {
        rc = meta_put_u64(txn, s->meta, "safe_time", (uint64_t)safe);
    }
    if (rc == 0 && stamp != 0) {
        rc = meta_put_u64(txn, s->meta, "last_clock", (uint64_t)stamp);
    }
    if (rc == 0) {
        rc = meta_put_u64(txn, s->meta, "next_queue", s->next_queue);
    }
    if (rc == 0) {
        rc = meta_put_u64(txn, s->meta, "next_part", s->next_part);
    }
    if (rc == 0 && s->fail_commits > 0) {
        s->fail_commits--;
        rc = MDB_MAP_FULL;
    }
    if (rc != 0) {
        mdb_txn_abort(txn);
    } else {
        rc = mdb_txn_commit(txn);
    }
    if (rc != 0) {
        return commit_error(s, rc, applied, err);
    }
    atomic_store(&s->applied, applied);
    atomic_store(&s->safe_time, safe);
    if (stamp != 0) {
        s->last_clock = stamp;
    }
    return 0;
}

/* The integers' one order (store.h), as offsets into the options. */
static const size_t options_int_at[STORE_OPTIONS_INTS] = {
    offsetof(struct store_queue_options, priority),
    offsetof(struct store_queue_options, lease_time),
    offsetof(struct store_queue_options, retry_limit),
    offsetof(struct store_queue_options, retry_delay),
    offsetof(struct store_queue_options, max_size),
    offsetof(struct store_queue_options, ttl),
    offsetof(struct store_queue_options, delayed_processing),
    offsetof(struct store_queue_options, window_buffer),
    offsetof(struct store_queue_options, retention_seconds),
    offsetof(struct store_queue_options, completed_retention_seconds),
    offsetof(struct store_queue_options, max_wait_time_seconds),
    offsetof(struct store_queue_options, min_pop_wait_time),
    offsetof(struct store_queue_options, dedup_window_seconds),
    offsetof(struct store_queue_options, retention_sink_hold_max_seconds),
};

void store_options_ints(const struct store_queue_options *o,
                        int32_t v[STORE_OPTIONS_INTS])
{
    for (size_t i = 0; i < STORE_OPTIONS_INTS; i++) {
        memcpy(&v[i], (const char *)o + options_int_at[i], sizeof(v[i]));
    }
}

void store_options_set_ints(struct store_queue_options *o,
                            const int32_t v[STORE_OPTIONS_INTS])
{
    for (size_t i = 0; i < STORE_OPTIONS_INTS; i++) {
        memcpy((char *)o + options_int_at[i], &v[i], sizeof(v[i]));
    }
}

uint8_t store_options_flags(const struct store_queue_options *o)
{
    return (uint8_t)((o->dead_letter_queue ? 1 : 0) |
                     (o->dlq_after_max_retries ? 2 : 0) |
                     (o->retention_enabled ? 4 : 0) |
                     (o->encryption_enabled ? 8 : 0));
}

void store_options_set_flags(struct store_queue_options *o, uint8_t f)
{
    o->dead_letter_queue = (f & 1) != 0;
    o->dlq_after_max_retries = (f & 2) != 0;
    o->retention_enabled = (f & 4) != 0;
    o->encryption_enabled = (f & 8) != 0;
}

static void options_encode(const struct store_queue_options *o, uint8_t *p,
                           size_t *len)
{
    int32_t v[STORE_OPTIONS_INTS];
    const char *str[3] = {o->namespace_, o->task, o->retention_sink_hold};
    size_t n = 0;

    store_options_ints(o, v);
    p[n++] = SCHEMA_OPTIONS_VERSION;
    for (size_t i = 0; i < STORE_OPTIONS_INTS; i++) {
        be32_put(p + n, (uint32_t)v[i]);
        n += 4;
    }
    p[n++] = store_options_flags(o);
    for (size_t i = 0; i < 3; i++) {
        size_t l = strnlen(str[i], 64);

        p[n++] = (uint8_t)l;
        memcpy(p + n, str[i], l);
        n += l;
    }
    *len = n;
}

bool store_options_decode(const uint8_t *p, size_t len,
                          struct store_queue_options *o)
{
    int32_t v[STORE_OPTIONS_INTS];
    char *str[3] = {o->namespace_, o->task, o->retention_sink_hold};
    size_t n = 1;

    store_queue_options_implicit(o);
    if (len < 58 || p[0] < 1) {
        return false;
    }
    for (size_t i = 0; i < STORE_OPTIONS_INTS; i++) {
        v[i] = (int32_t)be32_get(p + n);
        n += 4;
    }
    store_options_set_ints(o, v);
    store_options_set_flags(o, p[n++]);
    for (size_t i = 0; i < 3; i++) {
        size_t l;

        if (n >= len || (l = p[n]) > 64 || len - n - 1 < l) {
            return false;
        }
        memcpy(str[i], p + n + 1, l);
        str[i][l] = '\0';
        n += 1 + l;
    }
    return true;
}

/* A deterministic UUIDv7-shaped id: ms of the stamp, then the id bits and a
 * tag byte, so queues and partitions never share a uuid. */
static void derive_uuid(int64_t stamp, uint64_t id, uint8_t tag,
                        uint8_t out[16])
{
    uint64_t ms = (uint64_t)(stamp / 1000);

    for (int i = 5; i >= 0; i--) {
        out[i] = (uint8_t)ms;
        ms >>= 8;
    }
    out[6] = (uint8_t)(0x70 | ((id >> 60) & 0x0f));
    out[7] = tag;
    out[8] = (uint8_t)(0x80 | ((id >> 54) & 0x3f));
    for (int i = 0; i < 7; i++) {
        out[15 - i] = (uint8_t)(id >> (8 * i));
    }
}

/* Write a queue row: fixed part v (SCHEMA_QUEUE_FIXED bytes) + options. */
static int queue_write(struct store_w *w, MDB_val *k, const uint8_t *fixed,
                       const struct store_queue_options *o, struct err *err)
{
    uint8_t v[SCHEMA_QUEUE_FIXED + 256];
    size_t olen;
    MDB_val d;
    int rc;

    memcpy(v, fixed, SCHEMA_QUEUE_FIXED);
    options_encode(o, v + SCHEMA_QUEUE_FIXED, &olen);
    d.mv_size = SCHEMA_QUEUE_FIXED + olen;
    d.mv_data = v;
    rc = mdb_put(w->txn, w->s->queues, k, &d, 0);
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "put queue: %s", mdb_strerror(rc));
    }
    return 0;
}

static int queue_create(struct store_w *w, MDB_val *k,
                        const struct store_queue_options *o,
                        struct store_wqueue *q, struct err *err)
{
    uint8_t fixed[SCHEMA_QUEUE_FIXED];

    q->id = w->s->next_queue++;
    q->dedup_window_seconds = o->dedup_window_seconds;
    q->is_encrypted = o->encryption_enabled;
    q->created = true;
    be64_put(fixed, q->id);
    be64_put(fixed + 8, (uint64_t)w->stamp);
    derive_uuid(w->stamp, q->id, 0x51, fixed + 16);
    be64_put(fixed + 32, 0);
    return queue_write(w, k, fixed, o, err);
}

static void queue_key(uint8_t *kb, const uint8_t tenant[16], struct slice name,
                      MDB_val *k)
{
    ASSERT(name.len > 0 && name.len <= SCHEMA_NAME_MAX);
    memcpy(kb, tenant, 16);
    memcpy(kb + 16, name.ptr, name.len);
    k->mv_size = 16 + name.len;
    k->mv_data = kb;
}

int store_wqueue_get(struct store_w *w, struct slice name,
                     struct store_wqueue *q, struct err *err)
{
    uint8_t kb[16 + SCHEMA_NAME_MAX];
    MDB_val k;
    MDB_val d;
    struct store_queue_options o;
    int rc;

    queue_key(kb, w->tenant, name, &k);
    rc = mdb_get(w->txn, w->s->queues, &k, &d);
    if (rc == MDB_NOTFOUND) {
        store_queue_options_implicit(&o);
        return queue_create(w, &k, &o, q, err);
    }
    if (rc != 0) {
        return err_set(err, ERR_IO, "get queue: %s", mdb_strerror(rc));
    }
    if (d.mv_size < SCHEMA_QUEUE_FIXED ||
        !store_options_decode((const uint8_t *)d.mv_data + SCHEMA_QUEUE_FIXED,
                              d.mv_size - SCHEMA_QUEUE_FIXED, &o)) {
        return err_set(err, ERR_CORRUPT, "queue row of %zu B is malformed",
                       d.mv_size);
    }
    q->id = be64_get(d.mv_data);
    q->dedup_window_seconds = o.dedup_window_seconds;
    q->is_encrypted = o.encryption_enabled;
    q->created = false;
    return 0;
}

int store_wqueue_put_options(struct store_w *w, struct slice name,
                             const struct store_queue_options *o,
                             struct store_wqueue *q, struct err *err)
{
    uint8_t kb[16 + SCHEMA_NAME_MAX];
    uint8_t fixed[SCHEMA_QUEUE_FIXED];
    MDB_val k;
    MDB_val d;
    int rc;

    queue_key(kb, w->tenant, name, &k);
    rc = mdb_get(w->txn, w->s->queues, &k, &d);
    if (rc == MDB_NOTFOUND) {
        return queue_create(w, &k, o, q, err);
    }
    if (rc != 0 || d.mv_size < SCHEMA_QUEUE_FIXED) {
        err_set(err, ERR_IO, "get queue: %s",
                rc != 0 ? mdb_strerror(rc) : "short row");
        return ERR_IO;
    }
    memcpy(fixed, d.mv_data, SCHEMA_QUEUE_FIXED);
    q->id = be64_get(fixed);
    q->dedup_window_seconds = o->dedup_window_seconds;
    q->is_encrypted = o->encryption_enabled;
    q->created = false;
    return queue_write(w, &k, fixed, o, err);
}

/* Add one to the queue's partition count. */
static int queue_count_part(struct store_w *w, struct slice name,
                            struct err *err)
{
    uint8_t kb[16 + SCHEMA_NAME_MAX];
    uint8_t *copy;
    MDB_val k;
    MDB_val d;
    int rc;

    queue_key(kb, w->tenant, name, &k);
    rc = mdb_get(w->txn, w->s->queues, &k, &d);
    if (rc != 0 || d.mv_size < SCHEMA_QUEUE_FIXED) {
        return err_set(err, ERR_IO, "get queue: %s",
                       rc != 0 ? mdb_strerror(rc) : "short row");
    }
    copy = xmemdup(d.mv_data, d.mv_size);
    be64_put(copy + 32, be64_get(copy + 32) + 1);
    d.mv_data = copy;
    rc = mdb_put(w->txn, w->s->queues, &k, &d, 0);
    free(copy);
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "put queue: %s", mdb_strerror(rc));
    }
    return 0;
}

static void part_decode(const uint8_t *v, struct store_wpart *p)
{
    p->id = be64_get(v);
    memcpy(p->uuid, v + 8, 16);
    p->log_start = (int64_t)be64_get(v + 24);
    p->last_offset = (int64_t)be64_get(v + 32);
    p->last_write_at = (int64_t)be64_get(v + 40);
    p->created_at = (int64_t)be64_get(v + 48);
}

static void part_key(uint8_t *kb, uint64_t queue_id, struct slice name,
                     MDB_val *k)
{
    ASSERT(name.len > 0 && name.len <= SCHEMA_NAME_MAX);
    be64_put(kb, queue_id);
    memcpy(kb + 8, name.ptr, name.len);
    k->mv_size = 8 + name.len;
    k->mv_data = kb;
}

/* parts_by_write follows the row's lastWriteAt, in the transaction that
 * writes the row (k: the row's key; p: what it becomes). */
static int by_write_move(struct store_w *w, MDB_val *k,
                         const struct store_wpart *p, struct slice name,
                         struct err *err)
{
    MDB_val d;
    int rc = mdb_get(w->txn, w->s->partitions, k, &d);

    if (rc == 0 && d.mv_size == SCHEMA_PART_VALUE_LEN) {
        int64_t old = (int64_t)be64_get((const uint8_t *)d.mv_data + 40);
        uint8_t ob[24];
        MDB_val ok = {24, ob};

        if (old == p->last_write_at) {
            return 0; /* the index row stands */
        }
        by_write_key(ob, p->queue_id, old, p->id);
        rc = mdb_del(w->txn, w->s->parts_by_write, &ok, NULL);
    } else if (rc == MDB_NOTFOUND) {
        rc = 0; /* a new row */
    }
    if (rc == 0) {
        rc = by_write_put(w->s, w->txn, p->queue_id, p->last_write_at, p->id,
                          name);
    }
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "put parts_by_write: %s",
                       mdb_strerror(rc));
    }
    return 0;
}

int store_wpart_put(struct store_w *w, struct slice name,
                    const struct store_wpart *p, struct err *err)
{
    uint8_t kb[8 + SCHEMA_NAME_MAX];
    uint8_t v[SCHEMA_PART_VALUE_LEN];
    MDB_val k;
    MDB_val d = {sizeof(v), v};
    int rc;

    part_key(kb, p->queue_id, name, &k);
    if (by_write_move(w, &k, p, name, err) != 0) {
        return err->code;
    }
    be64_put(v, p->id);
    memcpy(v + 8, p->uuid, 16);
    be64_put(v + 24, (uint64_t)p->log_start);
    be64_put(v + 32, (uint64_t)p->last_offset);
    be64_put(v + 40, (uint64_t)p->last_write_at);
    be64_put(v + 48, (uint64_t)p->created_at);
    rc = mdb_put(w->txn, w->s->partitions, &k, &d, 0);
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "put partition: %s",
                       mdb_strerror(rc));
    }
    return 0;
}

static int part_create(struct store_w *w, struct slice name,
                       struct store_wpart *p, struct err *err)
{
    uint8_t kb[16];
    MDB_val k = {16, kb};
    MDB_val d = {name.len, NULL};
    int rc;

    p->id = w->s->next_part++;
    derive_uuid(w->stamp, p->id, 0x50, p->uuid);
    p->log_start = 0;
    p->last_offset = -1;
    p->last_write_at = 0;
    p->created_at = w->stamp;
    p->created = true;
    be64_put(kb, p->queue_id);
    be64_put(kb + 8, p->id);
    rc = mdb_put(w->txn, w->s->parts_by_id, &k, &d, MDB_RESERVE);
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "put parts_by_id: %s",
                       mdb_strerror(rc));
    }
    memcpy(d.mv_data, name.ptr, name.len);
    return store_wpart_put(w, name, p, err);
}

int store_wpart_find(struct store_w *w, uint64_t queue_id, struct slice name,
                     struct store_wpart *p, struct err *err)
{
    uint8_t kb[8 + SCHEMA_NAME_MAX];
    MDB_val k;
    MDB_val d;
    int rc;

    part_key(kb, queue_id, name, &k);
    memset(p, 0, sizeof(*p));
    p->queue_id = queue_id;
    rc = mdb_get(w->txn, w->s->partitions, &k, &d);
    if (rc == MDB_NOTFOUND) {
        return ERR_NOT_FOUND;
    }
    if (rc != 0 || d.mv_size != SCHEMA_PART_VALUE_LEN) {
        err_set(err, ERR_IO, "get partition: %s",
                rc != 0 ? mdb_strerror(rc) : "bad row size");
        return ERR_IO;
    }
    part_decode(d.mv_data, p);
    return 0;
}

int store_wpart_create(struct store_w *w, struct slice queue_name,
                       struct slice name, struct store_wpart *p,
                       struct err *err)
{
    if (part_create(w, name, p, err) != 0) {
        return err->code;
    }
    return queue_count_part(w, queue_name, err);
}

int store_wpart_get(struct store_w *w, struct slice queue_name,
                    uint64_t queue_id, struct slice name, struct store_wpart *p,
                    struct err *err)
{
    int rc = store_wpart_find(w, queue_id, name, p, err);

    if (rc == ERR_NOT_FOUND) {
        return store_wpart_create(w, queue_name, name, p, err);
    }
    return rc;
}

/* ---- Per-entry cursors ----------------------------------------------------
 *
 * The writers of the per-record rows (records, dedup, dedup_exp) run once or
 * twice for every pushed record, so they go through one cursor per database
 * held for the whole entry (struct store_w) instead of mdb_get/mdb_put, which
 * open a cursor and descend from the root on every call. A positioned
 * cursor's search first tries the leaf page it stands on (LMDB's
 * mdb_cursor_set), and the rows of one entry mostly land near the row before:
 * a partition's next offset, a batch's next transactionId, a dedup row just
 * looked up. Each descent costs cache misses on every level (bench/restore:
 * the dedup lookup and store were 30% of the broker's CPU per record).
 *
 * Keys above every key of a database (a new partition's offsets, minted
 * UUIDv7 ids, expiry keys of a later stamp) go in with MDB_APPEND, so their
 * pages split full instead of in halves. store_wcursor.max says when: the
 * greatest key as of the cursor's opening (MDB_LAST), raised by each insert
 * through it; a delete can leave it above the greatest key, never below it
 * while every insert into these databases goes through wcursor_put(). It only
 * picks the flag: LMDB refuses an MDB_APPEND that is not past the last key
 * (MDB_KEYEXIST), and the put is then made the ordinary way. Lookups always
 * ask LMDB. */

/* The cursor of dbi in w, opened (and its max read) on first use. */
static int wcursor(struct store_w *w, MDB_dbi dbi, struct store_wcursor *wc,
                   struct err *err)
{
    MDB_val k;
    MDB_val d;
    int rc;

    if (wc->c != NULL) {
        return 0;
    }
    rc = mdb_cursor_open(w->txn, dbi, &wc->c);
    if (rc != 0) {
        wc->c = NULL;
        return err_set(err, ERR_IO, "mdb_cursor_open: %s", mdb_strerror(rc));
    }
    rc = mdb_cursor_get(wc->c, &k, &d, MDB_LAST);
    wc->has_max = rc == 0 && k.mv_size <= sizeof(wc->max);
    if (wc->has_max) {
        memcpy(wc->max, k.mv_data, k.mv_size);
        wc->max_len = k.mv_size;
    } else if (rc == 0) {
        /* A key longer than any this store writes: no MDB_APPEND guesses
         * are worth making, so pretend the maximum is unreachable. */
        memset(wc->max, 0xff, sizeof(wc->max));
        wc->max_len = sizeof(wc->max);
        wc->has_max = true;
    } else if (rc != MDB_NOTFOUND) {
        return err_set(err, mdb_code(rc), "cursor last: %s", mdb_strerror(rc));
    }
    return 0;
}

/* Put k/d through wc (flags 0 or MDB_RESERVE); an MDB_* code. */
static int wcursor_put(struct store_w *w, struct store_wcursor *wc, MDB_val *k,
                       MDB_val *d, unsigned flags)
{
    MDB_val max = {wc->max_len, wc->max};
    bool is_above =
        !wc->has_max || mdb_cmp(w->txn, mdb_cursor_dbi(wc->c), k, &max) > 0;
    int rc = mdb_cursor_put(wc->c, k, d, flags | (is_above ? MDB_APPEND : 0));

    if (rc == MDB_KEYEXIST && is_above) {
        rc = mdb_cursor_put(wc->c, k, d, flags);
    }
    if (rc == 0 && is_above && k->mv_size <= sizeof(wc->max)) {
        memcpy(wc->max, k->mv_data, k->mv_size);
        wc->max_len = k->mv_size;
        wc->has_max = true;
    }
    return rc;
}

int store_wrecord_put(struct store_w *w, uint64_t pid,
                      const struct store_wrecord *r, struct err *err)
{
    uint8_t kb[16];
    MDB_val k = {16, kb};
    MDB_val d = {SCHEMA_RECORD_FIXED + r->txn.len + r->payload.len, NULL};
    uint8_t *v;
    int rc;

    if (wcursor(w, w->s->records, &w->records, err) != 0) {
        return err->code;
    }
    be64_put(kb, pid);
    be64_put(kb + 8, (uint64_t)r->offset);
    /* MDB_RESERVE: LMDB hands us the space, so the payload is copied once. */
    rc = wcursor_put(w, &w->records, &k, &d, MDB_RESERVE);
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "put record: %s", mdb_strerror(rc));
    }
    v = d.mv_data;
    be64_put(v, (uint64_t)w->stamp);
    memcpy(v + 8, r->message_id, 16);
    v[24] = r->sealed  ? SCHEMA_RECORD_SEALED
            : r->plain ? SCHEMA_RECORD_PLAIN
                       : 0;
    v[25] = (uint8_t)(r->txn.len >> 8);
    v[26] = (uint8_t)r->txn.len;
    if (r->txn.len > 0) {
        memcpy(v + SCHEMA_RECORD_FIXED, r->txn.ptr, r->txn.len);
    }
    if (r->payload.len > 0) {
        memcpy(v + SCHEMA_RECORD_FIXED + r->txn.len, r->payload.ptr,
               r->payload.len);
    }
    return 0;
}

int store_wappend_put(struct store_w *w, uint64_t pid, int64_t base,
                      int64_t end, struct err *err)
{
    uint8_t kb[16];
    uint8_t v[SCHEMA_APPEND_LEN];
    MDB_val k = {16, kb};
    MDB_val d = {sizeof(v), v};
    int rc;

    be64_put(kb, pid);
    be64_put(kb + 8, (uint64_t)base);
    be64_put(v, (uint64_t)end);
    be64_put(v + 8, (uint64_t)w->stamp);
    rc = mdb_put(w->txn, w->s->appends, &k, &d, 0);
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "put append: %s", mdb_strerror(rc));
    }
    return 0;
}

/* Delete the rows of dbi keyed pid + offset (16 bytes) with offset in
 * [from, to); for appends, a row is deleted when its end is below `to`. */
static int trim_range(struct store_w *w, MDB_dbi dbi, uint64_t pid,
                      int64_t from, int64_t to, struct err *err)
{
    uint8_t kb[16];
    MDB_val k = {16, kb};
    MDB_val d;
    MDB_cursor *c;
    int rc = mdb_cursor_open(w->txn, dbi, &c);

    if (rc != 0) {
        return err_set(err, ERR_IO, "cursor trim: %s", mdb_strerror(rc));
    }
    be64_put(kb, pid);
    be64_put(kb + 8, (uint64_t)from);
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    while (rc == 0 && k.mv_size == 16 && be64_get(k.mv_data) == pid &&
           (int64_t)be64_get((const uint8_t *)k.mv_data + 8) < to) {
        if (dbi == w->s->appends && d.mv_size == SCHEMA_APPEND_LEN &&
            (int64_t)be64_get(d.mv_data) >= to) {
            break; /* an append that straddles the new start stays */
        }
        rc = mdb_cursor_del(c, 0);
        if (rc == 0) {
            /* Re-seek: after deleting the last row of the tree the cursor
             * is unpositioned and MDB_GET_CURRENT answers EINVAL. */
            k.mv_size = 16;
            k.mv_data = kb;
            rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
        }
    }
    mdb_cursor_close(c);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, mdb_code(rc), "trim: %s", mdb_strerror(rc));
    }
    return 0;
}

int store_wtrim(struct store_w *w, struct slice name, struct store_wpart *p,
                int64_t new_log_start, struct err *err)
{
    if (new_log_start > p->last_offset + 1) {
        return err_set(err, ERR_INVALID,
                       "trim to %" PRId64 " is past the end %" PRId64,
                       new_log_start, p->last_offset + 1);
    }
    if (new_log_start <= p->log_start) {
        return 0;
    }
    if (trim_range(w, w->s->records, p->id, p->log_start, new_log_start, err) !=
            0 ||
        trim_range(w, w->s->appends, p->id, 0, new_log_start, err) != 0) {
        return err->code;
    }
    p->log_start = new_log_start;
    return store_wpart_put(w, name, p, err);
}

void store_dedup_key(uint64_t queue_id, struct slice txn,
                     struct store_dedup_key *k)
{
    be64_put(k->bytes, queue_id);
    if (txn.len <= SCHEMA_DEDUP_RAW_MAX) {
        k->bytes[8] = 0;
        if (txn.len > 0) {
            memcpy(k->bytes + 9, txn.ptr, txn.len);
        }
        k->len = 9 + txn.len;
    } else {
        uint8_t h[SHA256_LEN];

        sha256(txn.ptr, txn.len, h);
        k->bytes[8] = 1;
        memcpy(k->bytes + 9, h, SCHEMA_HASH_LEN);
        k->len = 9 + SCHEMA_HASH_LEN;
    }
}

int store_wdedup_get(struct store_w *w, struct store_dedup_key *key,
                     struct store_dedup_row *row, struct err *err)
{
    MDB_val k = {key->len, key->bytes};
    MDB_val d;
    const uint8_t *v;
    int rc = wcursor(w, w->s->dedup, &w->dedup, err);

    if (rc != 0) {
        return rc;
    }
    rc = mdb_cursor_get(w->dedup.c, &k, &d, MDB_SET);
    if (rc == MDB_NOTFOUND) {
        return ERR_NOT_FOUND;
    }
    if (rc != 0 || d.mv_size != SCHEMA_DEDUP_VALUE_LEN) {
        err_set(err, ERR_IO, "get dedup: %s",
                rc != 0 ? mdb_strerror(rc) : "bad row size");
        return ERR_IO;
    }
    v = d.mv_data;
    row->offset = (int64_t)be64_get(v);
    row->partition_id = be64_get(v + 8);
    row->stamp = (int64_t)be64_get(v + 16);
    memcpy(row->message_id, v + 24, 16);
    return 0;
}

int store_wdedup_put(struct store_w *w, struct store_dedup_key *key,
                     const struct store_dedup_row *row, int32_t window_seconds,
                     struct err *err)
{
    uint8_t xb[8 + SCHEMA_DEDUP_KEY_MAX];
    uint8_t v[SCHEMA_DEDUP_VALUE_LEN];
    MDB_val k = {key->len, key->bytes};
    MDB_val d = {sizeof(v), v};
    MDB_val xk = {8 + key->len, xb};
    MDB_val xd = {0, v};
    int rc;

    if (wcursor(w, w->s->dedup, &w->dedup, err) != 0 ||
        wcursor(w, w->s->dedup_exp, &w->dedup_exp, err) != 0) {
        return err->code;
    }
    be64_put(v, (uint64_t)row->offset);
    be64_put(v + 8, row->partition_id);
    be64_put(v + 16, (uint64_t)row->stamp);
    memcpy(v + 24, row->message_id, 16);
    /* Minted ids (the default txn) and expiry keys (stamp first) mostly
     * grow, and then go in with MDB_APPEND (wcursor_put). */
    rc = wcursor_put(w, &w->dedup, &k, &d, 0);
    if (rc == 0) {
        be64_put(xb,
                 (uint64_t)(row->stamp + (int64_t)window_seconds * 1000000));
        memcpy(xb + 8, key->bytes, key->len);
        rc = wcursor_put(w, &w->dedup_exp, &xk, &xd, 0);
    }
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "put dedup: %s", mdb_strerror(rc));
    }
    return 0;
}

/* Delete the row an expiry key names, unless a later write of the same txn
 * replaced it (that write has its own, later expiry key). */
static int sweep_one(struct store_w *w, const MDB_val *xk, struct err *err)
{
    struct store_dedup_key key;
    struct store_dedup_row row;
    int rc;

    key.len = xk->mv_size - 8;
    memcpy(key.bytes, (const uint8_t *)xk->mv_data + 8, key.len);
    rc = store_wdedup_get(w, &key, &row, err);
    if (rc == ERR_NOT_FOUND) {
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    if (row.stamp > (int64_t)be64_get(xk->mv_data)) {
        return 0;
    }
    rc = mdb_cursor_del(w->dedup.c, 0); /* the row the get stands on */
    if (rc != 0) {
        return err_set(err, mdb_code(rc), "del dedup: %s", mdb_strerror(rc));
    }
    return 0;
}

int store_wdedup_sweep(struct store_w *w, int max, struct err *err)
{
    MDB_cursor *c;
    MDB_val k;
    MDB_val d;
    int n = 0;
    int rc = 0;

    if (wcursor(w, w->s->dedup_exp, &w->dedup_exp, err) != 0) {
        return err->code;
    }
    c = w->dedup_exp.c;
    while (n++ < max && (rc = mdb_cursor_get(c, &k, &d, MDB_FIRST)) == 0) {
        if (k.mv_size <= 17 || k.mv_size > 8 + SCHEMA_DEDUP_KEY_MAX ||
            (int64_t)be64_get(k.mv_data) >= w->stamp) {
            break;
        }
        if (sweep_one(w, &k, err) != 0) {
            return err->code;
        }
        rc = mdb_cursor_del(c, 0);
        if (rc != 0) {
            break;
        }
    }
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, mdb_code(rc), "sweep dedup: %s", mdb_strerror(rc));
    }
    return 0;
}

/* ---- snapshots ------------------------------------------------------------
 */

int store_copy_compact(struct store *s, const char *path, struct err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc;

    if (fd < 0) {
        return err_set(err, ERR_IO, "open %s: %s", path, strerror(errno));
    }
    rc = mdb_env_sync(s->env, 1);
    if (rc == 0) {
        rc = mdb_env_copyfd2(s->env, fd, MDB_CP_COMPACT);
    }
    if (rc == 0 && fsync(fd) != 0) {
        rc = errno;
    }
    close(fd);
    if (rc != 0) {
        return err_set(err, ERR_IO, "copy store to %s: %s", path,
                       mdb_strerror(rc));
    }
    return 0;
}

static int write_file(const char *path, const void *data, size_t len,
                      struct err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t off = 0;

    if (fd < 0) {
        return err_set(err, ERR_IO, "open %s: %s", path, strerror(errno));
    }
    while (off < len) {
        ssize_t w = write(fd, (const char *)data + off, len - off);

        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            close(fd);
            return err_set(err, ERR_IO, "write %s: %s", path, strerror(errno));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0) {
        close(fd);
        return err_set(err, ERR_IO, "fsync %s: %s", path, strerror(errno));
    }
    close(fd);
    return 0;
}

/* Make a rename in dir durable. */
static int sync_dir(const char *dir, struct err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0 || fsync(fd) != 0) {
        err_set(err, ERR_IO, "fsync %s: %s", dir, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return ERR_IO;
    }
    close(fd);
    return 0;
}

int store_swap_file(struct store *s, const char *path, struct err *err)
{
    char dst[4096];
    char lock[4096];
    int rc = 0;

    snprintf(dst, sizeof(dst), "%s/data.mdb", s->dir);
    snprintf(lock, sizeof(lock), "%s/lock.mdb", s->dir);
    pthread_rwlock_wrlock(&s->swap_lock);
    s->env_gen++;
    mdb_env_close(s->env);
    s->env = NULL;
    if (rename(path, dst) != 0) {
        rc = err_set(err, ERR_IO, "rename %s: %s", path, strerror(errno));
    } else {
        rc = sync_dir(s->dir, err);
    }
    unlink(lock);
    if (env_open(s, err) != 0) {
        rc = err->code;
    }
    pthread_rwlock_unlock(&s->swap_lock);
    return rc;
}

int store_replace(struct store *s, const void *data, size_t len,
                  struct err *err)
{
    char tmp[4096];

    snprintf(tmp, sizeof(tmp), "%s/data.mdb.restore", s->dir);
    if (write_file(tmp, data, len, err) != 0) {
        return err->code;
    }
    return store_swap_file(s, tmp, err);
}
