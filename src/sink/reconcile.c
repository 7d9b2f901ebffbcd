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

/* The action for unit un (not draining) given its tenant's wanted row r
 * (SIZE_MAX: none); false when there is nothing to do. */
static bool unit_action(const struct reconcile_unit *un, size_t u, size_t r,
                        const struct reconcile_row *rows,
                        struct reconcile_action *out)
{
    if (r == SIZE_MAX) {
        *out = (struct reconcile_action){
            un->state == UNIT_ERROR ? RECONCILE_DROP : RECONCILE_STOP, SIZE_MAX,
            u};
        return true;
    }
    if (un->state == UNIT_ERROR) {
        *out = (struct reconcile_action){RECONCILE_START, r, u};
        return true;
    }
    if (un->fingerprint != rows[r].updated_at_us) {
        *out = (struct reconcile_action){RECONCILE_REBUILD, r, u};
        return true;
    }
    return false;
}

static bool has_unit(const uint8_t tenant[16],
                     const struct reconcile_unit *units, size_t n_units)
{
    for (size_t u = 0; u < n_units; u++) {
        if (memcmp(units[u].tenant, tenant, 16) == 0) {
            return true;
        }
    }
    return false;
}

size_t reconcile(const struct reconcile_in *in, struct reconcile_action *out)
{
    const struct reconcile_row *rows = in->rows;
    size_t n_rows = in->n_rows;
    const struct reconcile_unit *units = in->units;
    size_t n_units = in->n_units;
    bool *wanted = xcalloc(n_rows + 1, sizeof(bool));
    size_t n = 0;

    for (size_t i = 0; i < n_rows; i++) {
        wanted[i] =
            reconcile_wanted(&rows[i], in->clusters, in->n_clusters) &&
            wanted_row(rows[i].broker_tenant, rows, i, wanted) == SIZE_MAX;
    }
    for (size_t u = 0; u < n_units; u++) {
        size_t r = wanted_row(units[u].tenant, rows, n_rows, wanted);

        if (units[u].state != UNIT_DRAINING &&
            unit_action(&units[u], u, r, rows, &out[n])) {
            n++;
        }
    }
    for (size_t r = 0; r < n_rows; r++) {
        if (wanted[r] && !has_unit(rows[r].broker_tenant, units, n_units)) {
            out[n++] = (struct reconcile_action){RECONCILE_START, r, SIZE_MAX};
        }
    }
    free(wanted);
    return n;
}
