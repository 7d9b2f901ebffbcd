/* Store snapshots without stopping the writer: a read transaction begun on
 * the loop thread pins the state as of one applied index; any one thread then
 * serialises every database of that transaction into a flat, versioned,
 * checksummed buffer; a restore loads such a buffer into a fresh environment
 * and swaps it in.
 *
 * Why a read transaction is enough: LMDB is MVCC, so the transaction sees
 * the last commit before it began for as long as it lives, whatever the
 * writer commits meanwhile (invariant (1) of the header). The environment is
 * opened with MDB_NOTLS, so the transaction begun on the loop thread may be
 * used by a worker and aborted back on the loop thread, one thread at a
 * time. The price: pages freed while it lives are not reused until it ends,
 * so the map grows by what the writer rewrites during the dump.
 *
 * The databases are found by walking LMDB's main database (its keys are the
 * names of the named databases), so a database added to the schema is in
 * the snapshot without a change here. Their handles are opened in begin, on
 * the loop thread, because mdb_dbi_open must not race another transaction
 * that opens databases.
 *
 * The load never writes to the live environment: it builds a new one in
 * <dir>/snapshot.load/ (keys arrive sorted, so MDB_APPEND makes it one
 * sequential write), syncs it and only then hands its data file to
 * store_swap_file(). A buffer that fails a check fails before anything is
 * swapped (invariant (2)). */
#include "store/store_snapshot.h"

#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc_fold.h"
#include "base/xalloc.h"
#include "store/store_impl.h"

#define SNAP_HEAD_LEN    20
#define SNAP_NAME_MAX    63
#define SNAP_KEY_MAX     511
#define SNAP_TXN_BYTES   ((size_t)64 << 20) /* per load write txn */
#define SNAP_STAGE_BYTES ((size_t)1 << 20)  /* per write of a dump */

struct snap_db {
    char name[SNAP_NAME_MAX + 1];
    MDB_dbi dbi;
    unsigned flags;
};

struct store_snap {
    struct store *s;
    MDB_txn *txn;
    uint64_t index;
    struct snap_db dbs[STORE_SNAP_MAX_DBS];
    unsigned n_dbs;
};

/* Where the dump's bytes go: a staging buffer handed to `write` whenever it
 * fills (a value larger than it goes straight through), with the running
 * checksum of every byte written. */
struct snap_out {
    store_snap_write_fn write;
    void *ctx;
    uint8_t stage[SNAP_STAGE_BYTES];
    size_t len;     /* bytes in stage */
    uint64_t total; /* bytes handed to write */
    uint32_t crc;
    bool failed;
};

uint32_t store_snap_crc(const void *p, size_t len)
{
    ASSERT(len >= 4);
    return crc_zlib(0, p, len - 4);
}

/* ---- take ---------------------------------------------------------------
 */

/* Open a handle on every named database (the keys of the main one). */
static int snap_list_dbs(struct store_snap *sn, struct err *err)
{
    MDB_cursor *c;
    MDB_val k;
    MDB_val d;
    MDB_dbi main_dbi;
    int rc = mdb_dbi_open(sn->txn, NULL, 0, &main_dbi);

    rc = rc != 0 ? rc : mdb_cursor_open(sn->txn, main_dbi, &c);
    if (rc != 0) {
        return err_set(err, ERR_IO, "snapshot: open main db: %s",
                       mdb_strerror(rc));
    }
    while ((rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) == 0) {
        struct snap_db *db = &sn->dbs[sn->n_dbs];

        if (sn->n_dbs == STORE_SNAP_MAX_DBS || k.mv_size == 0 ||
            k.mv_size > SNAP_NAME_MAX) {
            rc = MDB_INCOMPATIBLE;
            break;
        }
        memcpy(db->name, k.mv_data, k.mv_size);
        db->name[k.mv_size] = '\0';
        rc = mdb_dbi_open(sn->txn, db->name, 0, &db->dbi);
        rc = rc != 0 ? rc : mdb_dbi_flags(sn->txn, db->dbi, &db->flags);
        if (rc != 0) {
            break;
        }
        db->flags &= MDB_DUPSORT;
        sn->n_dbs++;
    }
    mdb_cursor_close(c);
    if (rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "snapshot: list databases: %s",
                       mdb_strerror(rc));
    }
    return 0;
}

/* The applied index as the transaction sees it (meta "applied"). */
static uint64_t snap_applied(struct store_snap *sn)
{
    char name[] = "applied";
    MDB_val k = {sizeof(name) - 1, name};
    MDB_val d;

    if (mdb_get(sn->txn, sn->s->meta, &k, &d) != 0 || d.mv_size != 8) {
        return 0;
    }
    return be64_get(d.mv_data);
}

int store_snap_begin(struct store *s, struct store_snap **out, struct err *err)
{
    struct store_snap *sn = xcalloc(1, sizeof(*sn));
    int rc;

    sn->s = s;
    pthread_rwlock_rdlock(&s->swap_lock);
    rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &sn->txn);
    if (rc != 0) {
        pthread_rwlock_unlock(&s->swap_lock);
        free(sn);
        return err_set(err, ERR_IO, "snapshot: mdb_txn_begin: %s",
                       mdb_strerror(rc));
    }
    if (snap_list_dbs(sn, err) != 0) {
        store_snap_end(sn);
        return err->code;
    }
    sn->index = snap_applied(sn);
    *out = sn;
    return 0;
}

uint64_t store_snap_index(const struct store_snap *sn)
{
    return sn->index;
}

void store_snap_end(struct store_snap *sn)
{
    if (sn == NULL) {
        return;
    }
    mdb_txn_abort(sn->txn);
    pthread_rwlock_unlock(&sn->s->swap_lock);
    free(sn);
}

/* Hand the stage to write; false once write has said no. */
static bool out_flush(struct snap_out *o)
{
    if (o->failed || o->len == 0) {
        return !o->failed;
    }
    o->crc = crc_zlib(o->crc, o->stage, o->len);
    o->failed = o->write(o->ctx, o->stage, o->len) != 0;
    o->total += o->len;
    o->len = 0;
    return !o->failed;
}

static void out_bytes(struct snap_out *o, const void *p, size_t n)
{
    if (o->len + n > sizeof(o->stage) && !out_flush(o)) {
        return;
    }
    if (n > sizeof(o->stage)) {
        o->crc = crc_zlib(o->crc, p, n);
        o->failed = o->write(o->ctx, p, n) != 0;
        o->total += n;
        return;
    }
    memcpy(o->stage + o->len, p, n);
    o->len += n;
}

static void out_u32(struct snap_out *o, uint32_t v)
{
    uint8_t b[4];

    be32_put(b, v);
    out_bytes(o, b, 4);
}

static void out_u64(struct snap_out *o, uint64_t v)
{
    uint8_t b[8];

    be64_put(b, v);
    out_bytes(o, b, 8);
}

/* The number of pairs of a database and, when bytes is not NULL, what
 * their lengths add up to (a walk of the cursor that copies nothing). */
static int db_measure(struct store_snap *sn, const struct snap_db *db,
                      uint64_t *pairs, uint64_t *bytes, struct err *err)
{
    MDB_stat st;
    MDB_cursor *c;
    MDB_val k;
    MDB_val d;
    int rc = mdb_stat(sn->txn, db->dbi, &st);

    if (rc != 0) {
        return err_set(err, ERR_IO, "snapshot: stat %s: %s", db->name,
                       mdb_strerror(rc));
    }
    *pairs = st.ms_entries;
    if (bytes == NULL) {
        return 0;
    }
    *bytes = 0;
    rc = mdb_cursor_open(sn->txn, db->dbi, &c);
    while (rc == 0 && (rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) == 0) {
        *bytes += 8 + k.mv_size + d.mv_size;
    }
    if (rc == MDB_NOTFOUND) {
        mdb_cursor_close(c);
        return 0;
    }
    return err_set(err, ERR_IO, "snapshot: measure %s: %s", db->name,
                   mdb_strerror(rc));
}

/* One database: its header (with the pair count LMDB keeps), then every
 * pair in cursor order; a walk that finds another count fails. */
static int dump_db(struct store_snap *sn, const struct snap_db *db,
                   struct snap_out *o, struct err *err)
{
    size_t nl = strlen(db->name);
    uint64_t pairs = 0;
    uint64_t count = 0;
    MDB_cursor *c;
    MDB_val k;
    MDB_val d;
    int rc;

    if (db_measure(sn, db, &pairs, NULL, err) != 0) {
        return err->code;
    }
    rc = mdb_cursor_open(sn->txn, db->dbi, &c);
    if (rc != 0) {
        return err_set(err, ERR_IO, "snapshot: cursor on %s: %s", db->name,
                       mdb_strerror(rc));
    }
    out_bytes(o, (uint8_t[]){(uint8_t)nl}, 1);
    out_bytes(o, db->name, nl);
    out_u32(o, db->flags);
    out_u64(o, pairs);
    while (!o->failed && (rc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) == 0) {
        out_u32(o, (uint32_t)k.mv_size);
        out_bytes(o, k.mv_data, k.mv_size);
        out_u32(o, (uint32_t)d.mv_size);
        out_bytes(o, d.mv_data, d.mv_size);
        count++;
    }
    mdb_cursor_close(c);
    if (o->failed) {
        return err_set(err, ERR_IO, "snapshot: the dump's writer failed");
    }
    if (rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "snapshot: read %s: %s", db->name,
                       mdb_strerror(rc));
    }
    if (count != pairs) {
        return err_set(err, ERR_IO,
                       "snapshot: %s holds %" PRIu64 " pairs, not %" PRIu64,
                       db->name, count, pairs);
    }
    return 0;
}

int store_snap_size(struct store_snap *sn, size_t *len, struct err *err)
{
    uint64_t total = SNAP_HEAD_LEN + 4;

    for (unsigned i = 0; i < sn->n_dbs; i++) {
        uint64_t pairs = 0;
        uint64_t bytes = 0;

        if (db_measure(sn, &sn->dbs[i], &pairs, &bytes, err) != 0) {
            return err->code;
        }
        total += 1 + strlen(sn->dbs[i].name) + 4 + 8 + bytes;
    }
    *len = (size_t)total;
    return 0;
}

int store_snap_stream(struct store_snap *sn, store_snap_write_fn write,
                      void *ctx, struct err *err)
{
    struct snap_out *o = xcalloc(1, sizeof(*o));
    int rc = 0;

    o->write = write;
    o->ctx = ctx;
    out_bytes(o, STORE_SNAP_MAGIC, 8);
    out_u64(o, sn->index);
    out_u32(o, sn->n_dbs);
    for (unsigned i = 0; i < sn->n_dbs && rc == 0; i++) {
        rc = dump_db(sn, &sn->dbs[i], o, err);
    }
    if (rc == 0 && !out_flush(o)) {
        rc = err_set(err, ERR_IO, "snapshot: the dump's writer failed");
    }
    if (rc == 0) {
        uint8_t b[4];

        be32_put(b, o->crc);
        if (write(ctx, b, 4) != 0) {
            rc = err_set(err, ERR_IO, "snapshot: the dump's writer failed");
        }
    }
    free(o);
    return rc;
}

/* store_snap_dump's writer: into a buffer of the measured size. */
struct snap_flat {
    uint8_t *p;
    size_t len;
    size_t cap;
};

static int flat_write(void *ctx, const void *p, size_t n)
{
    struct snap_flat *f = ctx;

    if (f->cap - f->len < n) {
        return -1;
    }
    memcpy(f->p + f->len, p, n);
    f->len += n;
    return 0;
}

int store_snap_dump(struct store_snap *sn, store_snap_realloc_fn grow,
                    uint8_t **out, size_t *len, struct err *err)
{
    struct snap_flat f = {NULL, 0, 0};

    if (store_snap_size(sn, &f.cap, err) != 0) {
        return err->code;
    }
    f.p = grow(NULL, f.cap);
    if (f.p == NULL) {
        return err_set(err, ERR_IO, "snapshot: out of memory");
    }
    if (store_snap_stream(sn, flat_write, &f, err) != 0) {
        grow(f.p, 0);
        return err->code;
    }
    ASSERT(f.len == f.cap);
    *out = f.p;
    *len = f.len;
    return 0;
}

/* ---- check and load ------------------------------------------------------
 */

/* A reader over the buffer; every take is bounds-checked. */
struct snap_in {
    const uint8_t *p;
    size_t len; /* without the checksum */
    size_t off;
};

static bool in_take(struct snap_in *in, size_t n, const uint8_t **p)
{
    if (in->len - in->off < n) {
        return false;
    }
    *p = in->p + in->off;
    in->off += n;
    return true;
}

static bool in_u32(struct snap_in *in, uint32_t *v)
{
    const uint8_t *p;

    if (!in_take(in, 4, &p)) {
        return false;
    }
    *v = be32_get(p);
    return true;
}

/* An MDB_val over bytes of the (borrowed, const) buffer; LMDB only reads
 * them. */
static void *unconst(const void *p)
{
    void *q;

    memcpy(&q, &p, sizeof(q));
    return q;
}

/* A database as parsed: name, flags, and where its pairs are. */
struct snap_dbin {
    char name[SNAP_NAME_MAX + 1];
    uint32_t flags;
    uint64_t count;
    size_t pairs_at;
};

static bool in_pair(struct snap_in *in, MDB_val *k, MDB_val *d)
{
    const uint8_t *p;
    uint32_t n;

    if (!in_u32(in, &n) || n == 0 || n > SNAP_KEY_MAX || !in_take(in, n, &p)) {
        return false;
    }
    *k = (MDB_val){n, unconst(p)};
    if (!in_u32(in, &n) || !in_take(in, n, &p)) {
        return false;
    }
    *d = (MDB_val){n, unconst(p)};
    return true;
}

/* Parse one database's header and skip its pairs. */
static bool in_db(struct snap_in *in, struct snap_dbin *db)
{
    const uint8_t *p;
    size_t nl;
    MDB_val k;
    MDB_val d;

    if (!in_take(in, 1, &p) || p[0] == 0 || p[0] > SNAP_NAME_MAX) {
        return false;
    }
    nl = p[0];
    if (!in_take(in, nl, &p) || memchr(p, '\0', nl) != NULL) {
        return false;
    }
    memcpy(db->name, p, nl);
    db->name[nl] = '\0';
    if (!in_u32(in, &db->flags) || (db->flags & ~(uint32_t)MDB_DUPSORT) != 0 ||
        !in_take(in, 8, &p)) {
        return false;
    }
    db->count = be64_get(p);
    db->pairs_at = in->off;
    for (uint64_t i = 0; i < db->count; i++) {
        if (!in_pair(in, &k, &d)) {
            return false;
        }
    }
    return true;
}

/* A snapshot as parsed: the buffer, its index and its databases. */
struct snap_parsed {
    const uint8_t *p;
    size_t len;
    uint64_t index;
    uint32_t n_dbs;
    struct snap_dbin dbs[STORE_SNAP_MAX_DBS];
};

/* Check everything but the order of keys (the load's MDB_APPEND does). */
static int snap_parse(struct snap_parsed *sp, struct err *err)
{
    struct snap_in in = {sp->p, sp->len - 4, SNAP_HEAD_LEN};

    if (sp->len < SNAP_HEAD_LEN + 4 || !store_snap_is_ours(sp->p, sp->len)) {
        return err_set(err, ERR_CORRUPT, "snapshot of %zu B has no header",
                       sp->len);
    }
    if (store_snap_crc(sp->p, sp->len) != be32_get(sp->p + sp->len - 4)) {
        return err_set(err, ERR_CORRUPT, "snapshot of %zu B: bad checksum",
                       sp->len);
    }
    sp->index = be64_get(sp->p + 8);
    sp->n_dbs = be32_get(sp->p + 16);
    if (sp->n_dbs == 0 || sp->n_dbs > STORE_SNAP_MAX_DBS) {
        return err_set(err, ERR_CORRUPT, "snapshot: %" PRIu32 " databases",
                       sp->n_dbs);
    }
    for (uint32_t i = 0; i < sp->n_dbs; i++) {
        if (!in_db(&in, &sp->dbs[i])) {
            return err_set(err, ERR_CORRUPT,
                           "snapshot: database %" PRIu32 " malformed at %zu", i,
                           in.off);
        }
    }
    if (in.off != in.len) {
        return err_set(err, ERR_CORRUPT, "snapshot: %zu B after the last db",
                       in.len - in.off);
    }
    return 0;
}

bool store_snap_is_ours(const void *p, size_t len)
{
    return len >= 8 && memcmp(p, STORE_SNAP_MAGIC, 8) == 0;
}

int store_snap_check(const void *p, size_t len, uint64_t *index,
                     struct err *err)
{
    struct snap_parsed *sp = xcalloc(1, sizeof(*sp));
    int rc;

    sp->p = p;
    sp->len = len;
    rc = snap_parse(sp, err);
    *index = sp->index;
    free(sp);
    return rc;
}

/* Put one database's pairs, committing every SNAP_TXN_BYTES. */
static int load_db(MDB_env *env, MDB_txn **txn, const struct snap_dbin *db,
                   struct snap_in *in, size_t *since_commit)
{
    unsigned oflags = MDB_CREATE | db->flags;
    unsigned pflags = db->flags != 0 ? MDB_APPENDDUP : MDB_APPEND;
    MDB_dbi dbi;
    MDB_val k;
    MDB_val d;
    int rc = mdb_dbi_open(*txn, db->name, oflags, &dbi);

    in->off = db->pairs_at;
    for (uint64_t i = 0; rc == 0 && i < db->count; i++) {
        bool is_pair = in_pair(in, &k, &d); /* parsed once already */

        ASSERT(is_pair);
        rc = mdb_put(*txn, dbi, &k, &d, pflags);
        *since_commit += k.mv_size + d.mv_size;
        if (rc == 0 && *since_commit >= SNAP_TXN_BYTES) {
            rc = mdb_txn_commit(*txn);
            *txn = NULL;
            rc = rc != 0 ? rc : mdb_txn_begin(env, NULL, 0, txn);
            *since_commit = 0;
        }
    }
    return rc;
}

/* Every database of sp into env, in a few big transactions. An MDB_*. */
static int load_all(MDB_env *env, const struct snap_parsed *sp,
                    uint32_t *failed_db)
{
    struct snap_in in = {sp->p, sp->len - 4, 0};
    MDB_txn *txn = NULL;
    size_t since_commit = 0;
    int rc = mdb_txn_begin(env, NULL, 0, &txn);

    for (uint32_t i = 0; rc == 0 && i < sp->n_dbs; i++) {
        *failed_db = i;
        rc = load_db(env, &txn, &sp->dbs[i], &in, &since_commit);
    }
    if (rc == 0) {
        rc = mdb_txn_commit(txn);
        txn = NULL;
    }
    if (txn != NULL) {
        mdb_txn_abort(txn);
    }
    return rc;
}

static int load_env(MDB_env *env, const char *dir, uint64_t map_size,
                    const struct snap_parsed *sp, struct err *err)
{
    uint32_t failed_db = 0;
    int rc = mdb_env_set_mapsize(env, (size_t)map_size);

    rc = rc != 0 ? rc : mdb_env_set_maxdbs(env, STORE_SNAP_MAX_DBS);
    rc = rc != 0 ? rc : mdb_env_open(env, dir, MDB_NOSYNC, 0644);
    rc = rc != 0 ? rc : load_all(env, sp, &failed_db);
    if (rc == MDB_KEYEXIST || rc == MDB_BAD_VALSIZE) {
        return err_set(err, ERR_CORRUPT,
                       "snapshot: pairs of %s out of order or too long",
                       sp->dbs[failed_db].name);
    }
    rc = rc != 0 ? rc : mdb_env_sync(env, 1);
    if (rc != 0) {
        return err_set(err, rc == MDB_MAP_FULL ? ERR_FULL : ERR_IO,
                       "snapshot: load into %s: %s", dir, mdb_strerror(rc));
    }
    return 0;
}

static void load_cleanup(const char *dir)
{
    char path[4096 + 16];

    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

int store_snap_load(struct store *s, const void *p, size_t len, struct err *err)
{
    struct snap_parsed *sp = xcalloc(1, sizeof(*sp));
    char dir[4096];
    char data[4096 + 16];
    MDB_env *env;
    int rc;

    sp->p = p;
    sp->len = len;
    snprintf(dir, sizeof(dir), "%s/snapshot.load", s->dir);
    snprintf(data, sizeof(data), "%s/data.mdb", dir);
    if (snap_parse(sp, err) != 0) {
        free(sp);
        return err->code;
    }
    load_cleanup(dir);
    rc = mkdir(dir, 0755);
    if (rc != 0) {
        rc = err_set(err, ERR_IO, "mkdir %s: %s", dir, strerror(errno));
    } else if (mdb_env_create(&env) != 0) {
        rc = err_set(err, ERR_IO, "mdb_env_create: out of memory");
    } else {
        rc = load_env(env, dir, s->map_size, sp, err);
        mdb_env_close(env);
    }
    if (rc == 0) {
        rc = store_swap_file(s, data, err);
    }
    load_cleanup(dir);
    if (rc != 0) {
        err_wrap(err, "snapshot at %" PRIu64, sp->index);
    }
    free(sp);
    return rc;
}
