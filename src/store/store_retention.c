/* The store's read for the retention planner (broker/retention.c): where a
 * partition's stale appends end. One short read transaction, like every
 * read in store_read.c; the trim itself is store_wtrim() (store_impl.h). */
#include <lmdb.h>
#include <pthread.h>

#include "store/store_impl.h"

int store_stale_boundary(struct store *s, uint64_t pid, int64_t cutoff,
                         int max_rows, int64_t *out, struct err *err)
{
    uint8_t kb[16];
    MDB_val k = {sizeof(kb), kb};
    MDB_val d;
    MDB_txn *txn;
    MDB_cursor *c;
    int rc;

    *out = -1;
    be64_put(kb, pid);
    be64_put(kb + 8, 0);
    pthread_rwlock_rdlock(&s->swap_lock);
    rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc == 0) {
        rc = mdb_cursor_open(txn, s->appends, &c);
        if (rc != 0) {
            mdb_txn_abort(txn);
        }
    }
    if (rc != 0) {
        pthread_rwlock_unlock(&s->swap_lock);
        return err_set(err, ERR_IO, "stale boundary: %s", mdb_strerror(rc));
    }
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    for (int n = 0; rc == 0 && n < max_rows; n++) {
        const uint8_t *v = d.mv_data;

        if (k.mv_size != 16 || be64_get(k.mv_data) != pid ||
            d.mv_size != SCHEMA_APPEND_LEN ||
            (int64_t)be64_get(v + 8) >= cutoff) {
            break;
        }
        *out = (int64_t)be64_get(v) + 1;
        rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap_lock);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "stale boundary: %s", mdb_strerror(rc));
    }
    return 0;
}
