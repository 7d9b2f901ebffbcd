/* The control-plane sink manager's decision (docs/design/protocol.md §1,
 * "Tenant sinks"), pure: from the px.s3sinks rows and the clusters read
 * this round, and the tenant units the host holds, the actions that make
 * the units match the rows.
 *   (1) A row is wanted iff it is enabled, its cluster is known and not
 *       being deleted, its broker tenant is neither the default tenant nor
 *       the proxy's own, and the cluster's merged status (the worse of the
 *       cluster's and its tenant's) is active or push_blocked. The first
 *       wanted row of a tenant wins; a later one for the same tenant is
 *       ignored.
 *   (2) A wanted row with no unit: START. A unit in error: START again
 *       (every round retries, so a restored key or a fixed row heals it).
 *       A running unit with another fingerprint (updated_at_us): REBUILD
 *       (the host drains the old one first; its START comes on a later
 *       round, once the unit is gone). Same fingerprint: nothing, whatever
 *       the status did between active and push_blocked.
 *   (3) A unit whose tenant has no wanted row: STOP when it runs (the host
 *       drains it, then drops its entry and series), DROP when it is in
 *       error (the entry goes at once).
 *   (4) A draining unit gets no action: its tenant waits until it is gone.
 * Actions come in the order of the units, then of the rows. */
#ifndef QUEEN_SINK_RECONCILE_H
#define QUEEN_SINK_RECONCILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cp/registry.h"

/* One px.s3sinks row as the decision needs it. */
struct reconcile_row {
    char cluster_id[CP_ID_LEN + 1];
    uint8_t broker_tenant[16];
    bool enabled;
    int64_t updated_at_us; /* the fingerprint */
};

enum reconcile_unit_state {
    UNIT_RUNNING = 0, /* a sink runs (whatever its own phase) */
    UNIT_ERROR,       /* could not be built: an entry, no sink */
    UNIT_DRAINING     /* stopped, its drain not over yet */
};

struct reconcile_unit {
    uint8_t tenant[16];
    int64_t fingerprint;
    enum reconcile_unit_state state;
};

enum reconcile_kind {
    RECONCILE_START = 0, /* row: build and start the tenant's sink */
    RECONCILE_REBUILD,   /* unit and row: drain it, start it anew later */
    RECONCILE_STOP,      /* unit: drain it, then drop entry and series */
    RECONCILE_DROP       /* unit in error: drop its entry */
};

struct reconcile_action {
    enum reconcile_kind kind;
    size_t row;  /* index into rows, or SIZE_MAX */
    size_t unit; /* index into units, or SIZE_MAX */
};

/* Whether row r runs a sink given the clusters c[0..n_c). */
bool reconcile_wanted(const struct reconcile_row *r, const struct cp_cluster *c,
                      size_t n_c);

/* What one round read, and the units the host holds. */
struct reconcile_in {
    const struct reconcile_row *rows;
    size_t n_rows;
    const struct cp_cluster *clusters;
    size_t n_clusters;
    const struct reconcile_unit *units;
    size_t n_units;
};

/* Fill out (capacity n_rows + n_units) with the actions; returns their
 * count. */
size_t reconcile(const struct reconcile_in *in, struct reconcile_action *out);

#endif
