/* The cluster's storage format: the "format" KV row and its cached level
 * (store/format.h). */
#include "store/format.h"

#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include "store/kv.h"
#include "store/store_impl.h"

int store_format(const struct store *s)
{
    return atomic_load(&s->format);
}

int store_format_row(struct store *s, MDB_txn *txn, const char *key, int *level,
                     struct err *err)
{
    struct kv_name row = {
        STORE_DEFAULT_TENANT, SLICE_LIT(STORE_FORMAT_NS), {key, strlen(key)}};
    int64_t v = 0;

    *level = 0;
    if (store_kv_get_int(s, txn, &row, 0, &v, err) != 0) {
        return err->code;
    }
    *level = v > 0 && v <= INT_MAX ? (int)v : 0;
    return 0;
}

int store_format_read(struct store *s, MDB_txn *txn, int *level,
                      struct err *err)
{
    int seen;

    if (store_format_row(s, txn, STORE_FORMAT_KEY, level, err) != 0) {
        return err->code;
    }
    seen = atomic_load(&s->format);
    while (*level > seen &&
           !atomic_compare_exchange_weak(&s->format, &seen, *level)) {
    }
    return 0;
}
