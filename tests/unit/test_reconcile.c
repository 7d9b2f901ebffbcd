/* sink/reconcile: the control-plane sink manager's decision
 * (docs/design/protocol.md §1, "Tenant sinks"). */
#include "sink/reconcile.h"

#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "store/store.h"

static size_t run(const struct reconcile_row *rows, size_t n_rows,
                  const struct cp_cluster *clusters, size_t n_clusters,
                  const struct reconcile_unit *units, size_t n_units,
                  struct reconcile_action *out)
{
    struct reconcile_in in = {rows,       n_rows, clusters,
                              n_clusters, units,  n_units};

    return reconcile(&in, out);
}

static void tenant(uint8_t out[16], uint8_t last)
{
    memset(out, 0, 16);
    out[0] = 0x42;
    out[15] = last;
}

static struct cp_cluster cluster(const char *id, uint8_t t, enum cp_status st,
                                 enum cp_status tst)
{
    struct cp_cluster c;

    memset(&c, 0, sizeof(c));
    snprintf(c.id, sizeof(c.id), "%s", id);
    tenant(c.broker_tenant, t);
    c.status = st;
    c.tenant_status = tst;
    return c;
}

static struct reconcile_row row(const char *id, uint8_t t, bool on, int64_t fp)
{
    struct reconcile_row r;

    memset(&r, 0, sizeof(r));
    snprintf(r.cluster_id, sizeof(r.cluster_id), "%s", id);
    tenant(r.broker_tenant, t);
    r.enabled = on;
    r.updated_at_us = fp;
    return r;
}

static struct reconcile_unit unit(uint8_t t, int64_t fp,
                                  enum reconcile_unit_state st)
{
    struct reconcile_unit u;

    tenant(u.tenant, t);
    u.fingerprint = fp;
    u.state = st;
    return u;
}

TEST(a_new_row_starts_and_an_unchanged_one_keeps)
{
    struct cp_cluster c[2] = {cluster("c1", 1, CP_ACTIVE, CP_ACTIVE),
                              cluster("c2", 2, CP_ACTIVE, CP_ACTIVE)};
    struct reconcile_row r[2] = {row("c1", 1, true, 10),
                                 row("c2", 2, true, 20)};
    struct reconcile_unit u[1] = {unit(1, 10, UNIT_RUNNING)};
    struct reconcile_action a[3];

    EXPECT_EQ_U64(run(r, 2, c, 2, u, 1, a), 1);
    EXPECT_EQ_I64(a[0].kind, RECONCILE_START);
    EXPECT_EQ_U64(a[0].row, 1);
    EXPECT_EQ_U64(a[0].unit, SIZE_MAX);
}

/* One round over cluster c1 of tenant 1, its s3 row and the tenant's unit
 * (fingerprint 10), and what it must give: no action (n_actions 0) or one. */
struct round {
    const char *what;
    enum cp_status status;
    enum cp_status tenant_status;
    bool is_deleting;
    bool is_enabled;
    int64_t row_fp;
    enum reconcile_unit_state unit_state;
    bool has_row, has_cluster, has_unit; /* false: that part is gone */
    size_t n_actions;
    enum reconcile_kind kind;
    size_t row; /* the action's indexes: 0 or SIZE_MAX */
    size_t unit;
};

#define ALL true, true, true

static void check_rounds(const struct round *rounds, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct round *t = &rounds[i];
        struct cp_cluster c = cluster("c1", 1, t->status, t->tenant_status);
        struct reconcile_row r = row("c1", 1, t->is_enabled, t->row_fp);
        struct reconcile_unit u = unit(1, 10, t->unit_state);
        struct reconcile_action a[2];
        int before = harness_failed_now;
        size_t got;

        c.deleting = t->is_deleting;
        got = run(&r, t->has_row, &c, t->has_cluster, &u, t->has_unit, a);
        EXPECT_EQ_U64(got, t->n_actions);
        if (got == 1 && t->n_actions == 1) {
            EXPECT_EQ_I64(a[0].kind, t->kind);
            EXPECT_EQ_U64(a[0].row, t->row);
            EXPECT_EQ_U64(a[0].unit, t->unit);
        }
        if (harness_failed_now != before) {
            fprintf(stderr, "  in round %zu: %s\n", i, t->what);
        }
    }
}

TEST(a_changed_fingerprint_rebuilds_and_a_draining_unit_waits)
{
    static const struct round rounds[] = {
        {"fingerprint 11 over a unit at 10", CP_ACTIVE, CP_ACTIVE, false, true,
         11, UNIT_RUNNING, ALL, 1, RECONCILE_REBUILD, 0, 0},
        /* the old unit drains: nothing until it is gone, then a start */
        {"the unit drains", CP_ACTIVE, CP_ACTIVE, false, true, 11,
         UNIT_DRAINING, ALL, 0, 0, 0, 0},
        {"the drained unit is gone", CP_ACTIVE, CP_ACTIVE, false, true, 11,
         UNIT_DRAINING, true, true, false, 1, RECONCILE_START, 0, SIZE_MAX},
    };

    check_rounds(rounds, ARRAY_LEN(rounds));
}

TEST(push_blocked_runs_and_does_not_rebuild_suspended_stops)
{
    static const struct round rounds[] = {
        {"cluster push_blocked", CP_PUSH_BLOCKED, CP_ACTIVE, false, true, 10,
         UNIT_RUNNING, ALL, 0, 0, 0, 0},
        /* the tenant's status counts too */
        {"tenant suspended", CP_PUSH_BLOCKED, CP_SUSPENDED, false, true, 10,
         UNIT_RUNNING, ALL, 1, RECONCILE_STOP, SIZE_MAX, 0},
        {"cluster suspended", CP_SUSPENDED, CP_ACTIVE, false, true, 10,
         UNIT_RUNNING, ALL, 1, RECONCILE_STOP, SIZE_MAX, 0},
        {"cluster suspended, no unit: nothing starts", CP_SUSPENDED, CP_ACTIVE,
         false, true, 10, UNIT_RUNNING, true, true, false, 0, 0, 0, 0},
    };

    check_rounds(rounds, ARRAY_LEN(rounds));
}

TEST(gone_disabled_deleting_or_unknown_cluster_stops)
{
    static const struct round rounds[] = {
        {"row disabled", CP_ACTIVE, CP_ACTIVE, false, false, 10, UNIT_RUNNING,
         ALL, 1, RECONCILE_STOP, SIZE_MAX, 0},
        {"row gone", CP_ACTIVE, CP_ACTIVE, false, false, 10, UNIT_RUNNING,
         false, true, true, 1, RECONCILE_STOP, SIZE_MAX, 0},
        {"cluster deleting", CP_ACTIVE, CP_ACTIVE, true, true, 10, UNIT_RUNNING,
         ALL, 1, RECONCILE_STOP, SIZE_MAX, 0},
        {"no such cluster", CP_ACTIVE, CP_ACTIVE, true, true, 10, UNIT_RUNNING,
         true, false, true, 1, RECONCILE_STOP, SIZE_MAX, 0},
    };

    check_rounds(rounds, ARRAY_LEN(rounds));
}

TEST(an_error_unit_retries_every_round_and_is_dropped_when_gone)
{
    static const struct round rounds[] = {
        {"unit in error, row wanted", CP_ACTIVE, CP_ACTIVE, false, true, 10,
         UNIT_ERROR, ALL, 1, RECONCILE_START, 0, 0},
        {"unit in error, row gone", CP_ACTIVE, CP_ACTIVE, false, true, 10,
         UNIT_ERROR, false, true, true, 1, RECONCILE_DROP, SIZE_MAX, 0},
    };

    check_rounds(rounds, ARRAY_LEN(rounds));
}

TEST(system_tenants_never_run_and_a_tenant_runs_once)
{
    struct cp_cluster c[3] = {cluster("c1", 1, CP_ACTIVE, CP_ACTIVE),
                              cluster("c2", 1, CP_ACTIVE, CP_ACTIVE),
                              cluster("c3", 3, CP_ACTIVE, CP_ACTIVE)};
    struct reconcile_row r[4] = {row("c1", 1, true, 10), row("c2", 1, true, 20),
                                 row("c3", 3, true, 30),
                                 row("c3", 3, true, 30)};
    struct reconcile_action a[5];

    memcpy(c[2].broker_tenant, STORE_DEFAULT_TENANT, 16);
    memcpy(r[2].broker_tenant, STORE_DEFAULT_TENANT, 16);
    memcpy(r[3].broker_tenant, CP_PROXY_TENANT, 16);
    EXPECT_EQ_U64(run(r, 4, c, 3, NULL, 0, a), 1);
    EXPECT_EQ_I64(a[0].kind, RECONCILE_START);
    EXPECT_EQ_U64(a[0].row, 0); /* the first row of tenant 1 wins */
}
