/* The tenants of the store: which tenants own at least one queue, read from
 * the queues table, in tenant byte order, a bounded page at a time.
 *
 * The walk is a skip scan: seek to the smallest key of the next possible
 * tenant (the last tenant's bytes plus one, as a 128-bit big-endian number),
 * take the tenant of the key found, repeat. A tenant with a million queues
 * costs one seek, like a tenant with one (store_tenants.h (2)). */
#include "store/store_tenants.h"

#include <lmdb.h>
#include <pthread.h>
#include <string.h>

#include "store/store_impl.h"

/* t + 1 as a 128-bit big-endian number; false when t is all 0xff. */
static bool tenant_next(uint8_t t[16])
{
    for (int i = 15; i >= 0; i--) {
        if (++t[i] != 0) {
            return true;
        }
    }
    return false;
}

/* Seek to the first queue key at or after tenant `from`; 1 with the key's
 * tenant in *t, 0 at the end, or an error code. */
static int seek_tenant(MDB_cursor *c, const uint8_t from[16], uint8_t t[16],
                       struct err *err)
{
    uint8_t kb[16];
    MDB_val k = {sizeof(kb), kb};
    MDB_val d;
    int rc;

    memcpy(kb, from, sizeof(kb));
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    if (rc == MDB_NOTFOUND) {
        return 0;
    }
    if (rc != 0) {
        return err_set(err, ERR_IO, "list tenants: %s", mdb_strerror(rc));
    }
    if (k.mv_size <= 16) {
        return err_set(err, ERR_CORRUPT, "list tenants: queue key of %zu bytes",
                       k.mv_size);
    }
    memcpy(t, k.mv_data, 16);
    return 1;
}

/* Fill out from cursor c, starting at the first tenant at or after from. */
static int walk_tenants(MDB_cursor *c, uint8_t from[16],
                        struct store_tenant_page *out, struct err *err)
{
    uint8_t t[16] = {0};
    int rc;

    while ((rc = seek_tenant(c, from, t, err)) == 1) {
        if (out->n == STORE_TENANT_PAGE) {
            out->has_more = true;
            return 0;
        }
        memcpy(out->ids[out->n++], t, 16);
        memcpy(from, t, 16);
        if (!tenant_next(from)) {
            return 0;
        }
    }
    return rc;
}

int store_list_tenants(struct store *s, const uint8_t *after,
                       struct store_tenant_page *out, struct err *err)
{
    uint8_t from[16] = {0};
    MDB_txn *txn;
    MDB_cursor *c;
    int rc;

    out->n = 0;
    out->has_more = false;
    if (after != NULL) {
        memcpy(from, after, sizeof(from));
        if (!tenant_next(from)) {
            return 0;
        }
    }
    pthread_rwlock_rdlock(&s->swap_lock);
    rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc == 0) {
        rc = mdb_cursor_open(txn, s->queues, &c);
        if (rc != 0) {
            mdb_txn_abort(txn);
        }
    }
    if (rc != 0) {
        pthread_rwlock_unlock(&s->swap_lock);
        return err_set(err, ERR_IO, "list tenants: %s", mdb_strerror(rc));
    }
    rc = walk_tenants(c, from, out, err);
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap_lock);
    if (rc != 0) {
        out->n = 0;
        out->has_more = false;
    }
    return rc;
}
