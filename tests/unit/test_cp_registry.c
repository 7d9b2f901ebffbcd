/* Unit tests of the control plane's rows (cp/registry.h) over a real LMDB
 * store: rows are written as the KV apply handler writes them (one write
 * transaction, the proxy tenant), then read back through the registry. */
#include "harness.h"

#include "cp/registry.h"
#include "push_helpers.h"
#include "store/kv.h"
#include "store/store_impl.h"

#define T0 1760000000000000LL

#define TEN_A   "0190aaaa-0000-7000-8000-00000000000a"
#define TEN_B   "0190bbbb-0000-7000-8000-00000000000b"
#define CL_1    "0190cccc-0000-7000-8000-000000000001"
#define CL_2    "0190cccc-0000-7000-8000-000000000002"
#define BT_1    "0190dddd-0000-7000-8000-000000000001"
#define BT_2    "0190dddd-0000-7000-8000-000000000002"
#define BT_1_16 0x01, 0x90, 0xdd, 0xdd, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 1
#define BT_2_16 0x01, 0x90, 0xdd, 0xdd, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 2

static struct slice sl(const char *s)
{
    struct slice r = {s, strlen(s)};
    return r;
}

/* Put (value != NULL) or delete ns/key as the proxy tenant, as one entry. */
static void cp_write(struct env *e, const char *ns, const char *key,
                     const char *value)
{
    struct kv_op o = {0};
    struct kv_batch b = {CP_PROXY_TENANT, &o, 1};
    struct kv_answer a;
    struct err err = {0};
    MDB_txn *txn;

    o.op = value != NULL ? KV_PUT : KV_DELETE;
    o.ns = sl(ns);
    o.key = sl(key);
    if (value != NULL) {
        o.value = sl(value);
        o.forever = true;
    }
    e->index++;
    EXPECT_EQ_I64(store_wbegin(e->store, &txn, &err), 0);
    EXPECT_EQ_I64(
        store_kv_apply(e->store, txn, &b, T0 + (int64_t)e->index, &a, &err), 0);
    EXPECT_EQ_I64(store_wcommit(e->store, txn, e->index, T0, &err), 0);
    EXPECT_EQ_I64(a.status, 0);
    kv_answer_free(&a);
}

static void put_tenant(struct env *e, const char *id, const char *slug,
                       const char *status, bool deleting)
{
    char key[64];
    char v[512];

    snprintf(key, sizeof(key), "#%s", id);
    snprintf(v, sizeof(v),
             "{\"id\":\"%s\",\"slug\":\"%s\",\"status\":\"%s\","
             "\"deleting\":%s,\"created_at_us\":1}",
             id, slug, status, deleting ? "true" : "false");
    cp_write(e, CP_NS_TENANTS, key, v);
    snprintf(key, sizeof(key), "slug:%s", slug);
    snprintf(v, sizeof(v), "{\"id\":\"%s\"}", id);
    cp_write(e, CP_NS_TENANTS, key, v);
}

static void put_cluster(struct env *e, const char *id, const char *slug,
                        const char *tenant, const char *bt, const char *status)
{
    char key[64];
    char v[512];

    snprintf(key, sizeof(key), "#%s", id);
    snprintf(v, sizeof(v),
             "{\"id\":\"%s\",\"slug\":\"%s\",\"tenant_id\":\"%s\","
             "\"broker_tenant\":\"%s\",\"status\":\"%s\",\"deleting\":false,"
             "\"created_at_us\":1}",
             id, slug, tenant, bt, status);
    cp_write(e, CP_NS_CLUSTERS, key, v);
    snprintf(key, sizeof(key), "slug:%s", slug);
    snprintf(v, sizeof(v), "{\"id\":\"%s\"}", id);
    cp_write(e, CP_NS_CLUSTERS, key, v);
}

TEST(status_names_and_slugs)
{
    enum cp_status st = CP_ACTIVE;

    EXPECT(cp_status_parse("push_blocked", &st));
    EXPECT_EQ_I64(st, CP_PUSH_BLOCKED);
    EXPECT(cp_status_parse("suspended", &st));
    EXPECT_EQ_I64(st, CP_SUSPENDED);
    EXPECT(!cp_status_parse("Suspended", &st));
    EXPECT(!cp_status_parse("", &st));
    EXPECT_EQ_I64(st, CP_SUSPENDED);
    EXPECT_STR_EQ(cp_status_name(CP_ACTIVE), "active");
    EXPECT(cp_slug_valid("acme-main"));
    EXPECT(cp_slug_valid("a"));
    EXPECT(!cp_slug_valid(""));
    EXPECT(!cp_slug_valid("Acme"));
    EXPECT(!cp_slug_valid("a_b"));
    EXPECT(!cp_slug_valid("a/b"));
    EXPECT(cp_slug_valid("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                         "aaaaaaaaaaa")); /* 64 */
    EXPECT(!cp_slug_valid("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                          "aaaaaaaaaaaaa")); /* 65 */
    EXPECT(cp_id_valid(CL_1));
    EXPECT(cp_id_valid("0190CCCC-0000-7000-8000-00000000000A"));
    EXPECT(!cp_id_valid(CL_1 "0"));
    EXPECT(!cp_id_valid("0190cccc-0000-7000-8000-00000000000"));
    EXPECT(!cp_id_valid("0190cccc00000-7000-8000-000000000001"));
    EXPECT(!cp_id_valid("0190cccg-0000-7000-8000-000000000001"));
    EXPECT(!cp_id_valid(""));
}

TEST(merged_status_is_the_worse_of_the_two)
{
    struct cp_cluster c = {0};

    c.status = CP_ACTIVE;
    c.tenant_status = CP_PUSH_BLOCKED;
    EXPECT_EQ_I64(cp_cluster_merged(&c), CP_PUSH_BLOCKED);
    c.status = CP_SUSPENDED;
    EXPECT_EQ_I64(cp_cluster_merged(&c), CP_SUSPENDED);
    c.tenant_status = CP_ACTIVE;
    c.status = CP_PUSH_BLOCKED;
    EXPECT_EQ_I64(cp_cluster_merged(&c), CP_PUSH_BLOCKED);
}

TEST(find_by_id_and_by_slug_joins_the_tenant)
{
    struct env e = {0};
    struct cp_cluster c;
    struct err err = {0};
    const uint8_t bt[16] = {BT_1_16};

    env_open(&e);
    put_tenant(&e, TEN_A, "acme", "push_blocked", false);
    put_cluster(&e, CL_1, "acme-main", TEN_A, BT_1, "active");
    EXPECT_EQ_I64(cp_cluster_find(e.store, "acme-main", &c, &err), 0);
    EXPECT_STR_EQ(c.id, CL_1);
    EXPECT_STR_EQ(c.slug, "acme-main");
    EXPECT_STR_EQ(c.tenant_id, TEN_A);
    EXPECT_STR_EQ(c.tenant_slug, "acme");
    EXPECT_MEM_EQ(c.broker_tenant, 16, bt, 16);
    EXPECT_EQ_I64(c.status, CP_ACTIVE);
    EXPECT_EQ_I64(c.tenant_status, CP_PUSH_BLOCKED);
    EXPECT(!c.deleting);
    memset(&c, 0, sizeof(c));
    EXPECT_EQ_I64(cp_cluster_find(e.store, CL_1, &c, &err), 0);
    EXPECT_STR_EQ(c.slug, "acme-main");
    /* Upper-case id text names the same cluster. */
    EXPECT_EQ_I64(cp_cluster_find(e.store,
                                  "0190CCCC-0000-7000-8000-000000000001", &c,
                                  &err),
                  0);
    EXPECT_STR_EQ(c.id, CL_1);
    EXPECT_EQ_I64(cp_cluster_find(e.store, "globex-main", &c, &err),
                  ERR_NOT_FOUND);
    EXPECT_EQ_I64(cp_cluster_find(e.store, CL_2, &c, &err), ERR_NOT_FOUND);
    EXPECT_EQ_I64(cp_cluster_find(e.store, "Not A Slug", &c, &err),
                  ERR_NOT_FOUND);
    env_close(&e);
}

TEST(a_deleting_tenant_or_a_missing_tenant_row_marks_the_cluster_deleting)
{
    struct env e = {0};
    struct cp_cluster c;
    struct err err = {0};

    env_open(&e);
    put_tenant(&e, TEN_A, "acme", "active", true);
    put_cluster(&e, CL_1, "acme-main", TEN_A, BT_1, "active");
    put_cluster(&e, CL_2, "orphan", TEN_B, BT_2, "active");
    EXPECT_EQ_I64(cp_cluster_find(e.store, "acme-main", &c, &err), 0);
    EXPECT(c.deleting);
    EXPECT_EQ_I64(cp_cluster_find(e.store, "orphan", &c, &err), 0);
    EXPECT(c.deleting);
    env_close(&e);
}

TEST(list_returns_every_cluster_across_pages_with_its_tenant)
{
    struct env e = {0};
    struct cp_cluster *c = NULL;
    struct err err = {0};
    size_t n = 0;
    size_t blocked = 0;
    const size_t want = 1203; /* more than one page of 1000 */

    env_open(&e);
    put_tenant(&e, TEN_A, "acme", "active", false);
    put_tenant(&e, TEN_B, "globex", "suspended", false);
    for (size_t i = 0; i < want; i++) {
        char id[40];
        char bt[40];
        char slug[32];

        snprintf(id, sizeof(id), "0190cccc-0000-7000-8000-%012zx", i);
        snprintf(bt, sizeof(bt), "0190dddd-0000-7000-8000-%012zx", i);
        snprintf(slug, sizeof(slug), "c-%zu", i);
        put_cluster(&e, id, slug, i % 2 == 0 ? TEN_A : TEN_B, bt,
                    i % 3 == 0 ? "push_blocked" : "active");
    }
    EXPECT_EQ_I64(cp_cluster_list(e.store, &c, &n, &err), 0);
    EXPECT_EQ_U64(n, want);
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;

        EXPECT_EQ_I64(sscanf(c[i].slug, "c-%zu", &k), 1);
        EXPECT_STR_EQ(c[i].tenant_slug, k % 2 == 0 ? "acme" : "globex");
        EXPECT_EQ_I64(cp_cluster_merged(&c[i]), k % 2 == 1   ? CP_SUSPENDED
                                                : k % 3 == 0 ? CP_PUSH_BLOCKED
                                                             : CP_ACTIVE);
        blocked += c[i].status == CP_PUSH_BLOCKED;
    }
    EXPECT_EQ_U64(blocked, (want + 2) / 3);
    free(c);
    env_close(&e);
}

TEST(the_gate_follows_the_rows_once_touched)
{
    struct env e = {0};
    struct err err = {0};
    const uint8_t bt1[16] = {BT_1_16};
    const uint8_t bt2[16] = {BT_2_16};
    const uint8_t other[16] = {9};

    env_open(&e);
    cp_gate_clear();
    put_tenant(&e, TEN_A, "acme", "active", false);
    put_cluster(&e, CL_1, "acme-main", TEN_A, BT_1, "push_blocked");
    put_cluster(&e, CL_2, "acme-two", TEN_A, BT_2, "active");
    EXPECT_EQ_I64(cp_gate_refresh(e.store, false, &err), 0);
    EXPECT_EQ_I64(cp_tenant_gate(bt1), CP_PUSH_BLOCKED);
    EXPECT_EQ_I64(cp_tenant_gate(bt2), CP_ACTIVE);
    EXPECT_EQ_I64(cp_tenant_gate(other), CP_ACTIVE);
    EXPECT_EQ_I64(cp_tenant_gate(STORE_DEFAULT_TENANT), CP_ACTIVE);

    /* Suspend the tenant: without a touch the table is not re-read (2). */
    put_tenant(&e, TEN_A, "acme", "suspended", false);
    EXPECT_EQ_I64(cp_gate_refresh(e.store, false, &err), 0);
    EXPECT_EQ_I64(cp_tenant_gate(bt2), CP_ACTIVE);
    /* A touch for another tenant does not mark it stale either. */
    cp_gate_touch(STORE_DEFAULT_TENANT);
    EXPECT_EQ_I64(cp_gate_refresh(e.store, false, &err), 0);
    EXPECT_EQ_I64(cp_tenant_gate(bt2), CP_ACTIVE);
    cp_gate_touch(CP_PROXY_TENANT);
    EXPECT_EQ_I64(cp_gate_refresh(e.store, false, &err), 0);
    EXPECT_EQ_I64(cp_tenant_gate(bt1), CP_SUSPENDED);
    EXPECT_EQ_I64(cp_tenant_gate(bt2), CP_SUSPENDED);

    /* Back to active, and a deleted cluster row is no longer gated. */
    put_tenant(&e, TEN_A, "acme", "active", false);
    cp_write(&e, CP_NS_CLUSTERS, "#" CL_1, NULL);
    EXPECT_EQ_I64(cp_gate_refresh(e.store, true, &err), 0);
    EXPECT_EQ_I64(cp_tenant_gate(bt1), CP_ACTIVE);
    EXPECT_EQ_I64(cp_tenant_gate(bt2), CP_ACTIVE);
    cp_gate_clear();
    env_close(&e);
}

TEST(a_corrupt_row_is_an_error_not_a_crash)
{
    struct env e = {0};
    struct cp_cluster c;
    struct cp_cluster *all = NULL;
    struct err err = {0};
    size_t n = 0;

    env_open(&e);
    cp_write(&e, CP_NS_CLUSTERS, "#" CL_1, "{\"id\":\"" CL_1 "\"}");
    cp_write(&e, CP_NS_CLUSTERS, "slug:bad", "{\"id\":\"" CL_1 "\"}");
    EXPECT_EQ_I64(cp_cluster_find(e.store, "bad", &c, &err), ERR_CORRUPT);
    EXPECT_EQ_I64(cp_cluster_list(e.store, &all, &n, &err), ERR_CORRUPT);
    EXPECT(all == NULL);
    env_close(&e);
}
