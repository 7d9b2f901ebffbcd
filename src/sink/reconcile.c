/* The control-plane sink manager's decision (see reconcile.h). */
#include "sink/reconcile.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "store/store.h"

static const struct cp_cluster *
find_cluster(const char *id, const struct cp_cluster *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(c[i].id, id) == 0) {
            return &c[i];
        }
    }
    return NULL;
}

bool reconcile_wanted(const struct reconcile_row *r, const struct cp_cluster *c,
                      size_t n_c)
{
    const struct cp_cluster *cl = find_cluster(r->cluster_id, c, n_c);

    if (!r->enabled || cl == NULL || cl->deleting) {
        return false;
    }
    if (memcmp(r->broker_tenant, STORE_DEFAULT_TENANT, 16) == 0 ||
        memcmp(r->broker_tenant, CP_PROXY_TENANT, 16) == 0) {
        return false;
    }
    /* the merged status is suspended iff either one is */
    return cl->status != CP_SUSPENDED && cl->tenant_status != CP_SUSPENDED;
}

/* The first wanted row of tenant, or SIZE_MAX. */
static size_t wanted_row(const uint8_t tenant[16],
                         const struct reconcile_row *rows, size_t n_rows,
                         const bool *wanted)
{
    for (size_t i = 0; i < n_rows; i++) {
        if (wanted[i] && memcmp(rows[i].broker_tenant, tenant, 16) == 0) {
            return i;
        }
    }
    return SIZE_MAX;
}

size_t reconcile(const struct reconcile_row *rows, size_t n_rows,
                 const struct cp_cluster *clusters, size_t n_clusters,
                 const struct reconcile_unit *units, size_t n_units,
                 struct reconcile_action *out)
{
    bool *wanted = xcalloc(n_rows + 1, sizeof(bool));
    size_t n = 0;

    for (size_t i = 0; i < n_rows; i++) {
        wanted[i] =
            reconcile_wanted(&rows[i], clusters, n_clusters) &&
            wanted_row(rows[i].broker_tenant, rows, i, wanted) == SIZE_MAX;
    }
    for (size_t u = 0; u < n_units; u++) {
        const struct reconcile_unit *un = &units[u];
        size_t r = wanted_row(un->tenant, rows, n_rows, wanted);

        if (un->state == UNIT_DRAINING) {
            continue;
        }
        if (r == SIZE_MAX) {
            out[n++] = (struct reconcile_action){
                un->state == UNIT_ERROR ? RECONCILE_DROP : RECONCILE_STOP,
                SIZE_MAX, u};
        } else if (un->state == UNIT_ERROR) {
            out[n++] = (struct reconcile_action){RECONCILE_START, r, u};
        } else if (un->fingerprint != rows[r].updated_at_us) {
            out[n++] = (struct reconcile_action){RECONCILE_REBUILD, r, u};
        }
    }
    for (size_t r = 0; r < n_rows; r++) {
        bool has_unit = false;

        for (size_t u = 0; u < n_units && wanted[r] && !has_unit; u++) {
            has_unit = memcmp(units[u].tenant, rows[r].broker_tenant, 16) == 0;
        }
        if (wanted[r] && !has_unit) {
            out[n++] = (struct reconcile_action){RECONCILE_START, r, SIZE_MAX};
        }
    }
    free(wanted);
    return n;
}
