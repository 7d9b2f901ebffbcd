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

TEST(a_changed_fingerprint_rebuilds_and_a_draining_unit_waits)
{
    struct cp_cluster c[1] = {cluster("c1", 1, CP_ACTIVE, CP_ACTIVE)};
    struct reconcile_row r[1] = {row("c1", 1, true, 11)};
    struct reconcile_unit u[1] = {unit(1, 10, UNIT_RUNNING)};
    struct reconcile_action a[2];

    EXPECT_EQ_U64(run(r, 1, c, 1, u, 1, a), 1);
    EXPECT_EQ_I64(a[0].kind, RECONCILE_REBUILD);
    EXPECT_EQ_U64(a[0].row, 0);
    EXPECT_EQ_U64(a[0].unit, 0);
    /* the old unit drains: nothing until it is gone, then a start */
    u[0].state = UNIT_DRAINING;
    EXPECT_EQ_U64(run(r, 1, c, 1, u, 1, a), 0);
    EXPECT_EQ_U64(run(r, 1, c, 1, u, 0, a), 1);
    EXPECT_EQ_I64(a[0].kind, RECONCILE_START);
}

TEST(push_blocked_runs_and_does_not_rebuild_suspended_stops)
{
    struct cp_cluster c[1] = {cluster("c1", 1, CP_PUSH_BLOCKED, CP_ACTIVE)};
    struct reconcile_row r[1] = {row("c1", 1, true, 10)};
    struct reconcile_unit u[1] = {unit(1, 10, UNIT_RUNNING)};
    struct reconcile_action a[2];

    EXPECT_EQ_U64(run(r, 1, c, 1, u, 1, a), 0);
    c[0].tenant_status = CP_SUSPENDED; /* the tenant's status counts too */
    EXPECT_EQ_U64(run(r, 1, c, 1, u, 1, a), 1);
    EXPECT_EQ_I64(a[0].kind, RECONCILE_STOP);
    EXPECT_EQ_U64(a[0].unit, 0);
    c[0].tenant_status = CP_ACTIVE;
    c[0].status = CP_SUSPENDED;
    EXPECT_EQ_U64(run(r, 1, c, 1, u, 1, a), 1);
    EXPECT_EQ_I64(a[0].kind, RECONCILE_STOP);
    EXPECT_EQ_U64(run(r, 1, c, 1, u, 0, a), 0); /* nothing starts */
}

TEST(gone_disabled_deleting_or_unknown_cluster_stops)
{
    struct cp_cluster c[1] = {cluster("c1", 1, CP_ACTIVE, CP_ACTIVE)};
    struct reconcile_row r[1] = {row("c1", 1, false, 10)};
    struct reconcile_unit u[1] = {unit(1, 10, UNIT_RUNNING)};
    struct reconcile_action a[2];

    EXPECT_EQ_U64(run(r, 1, c, 1, u, 1, a), 1); /* disabled */
    EXPECT_EQ_I64(a[0].kind, RECONCILE_STOP);
    EXPECT_EQ_U64(run(r, 0, c, 1, u, 1, a), 1); /* row gone */
    EXPECT_EQ_I64(a[0].kind, RECONCILE_STOP);
    r[0].enabled = true;
    c[0].deleting = true;
    EXPECT_EQ_U64(run(r, 1, c, 1, u, 1, a), 1);
    EXPECT_EQ_I64(a[0].kind, RECONCILE_STOP);
    EXPECT_EQ_U64(run(r, 1, c, 0, u, 1, a), 1); /* no such cluster */
    EXPECT_EQ_I64(a[0].kind, RECONCILE_STOP);
}

TEST(an_error_unit_retries_every_round_and_is_dropped_when_gone)
{
    struct cp_cluster c[1] = {cluster("c1", 1, CP_ACTIVE, CP_ACTIVE)};
    struct reconcile_row r[1] = {row("c1", 1, true, 10)};
    struct reconcile_unit u[1] = {unit(1, 10, UNIT_ERROR)};
    struct reconcile_action a[2];

    EXPECT_EQ_U64(run(r, 1, c, 1, u, 1, a), 1);
    EXPECT_EQ_I64(a[0].kind, RECONCILE_START);
    EXPECT_EQ_U64(a[0].row, 0);
    EXPECT_EQ_U64(a[0].unit, 0);
    EXPECT_EQ_U64(run(r, 0, c, 1, u, 1, a), 1);
    EXPECT_EQ_I64(a[0].kind, RECONCILE_DROP);
    EXPECT_EQ_U64(a[0].unit, 0);
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
