/* The control plane's rows (docs/design/control-plane.md): tenants and
 * clusters of an embedded-proxy cell, kept in the replicated KV under the
 * proxy's own tenant (CP_PROXY_TENANT), so every node reads the same rows
 * from its own applied state.
 *
 *   namespace "px.tenants",  key "#<tenant id>":
 *     {"id","slug","status","deleting":bool,"created_at_us"}
 *   namespace "px.clusters", key "#<cluster id>":
 *     {"id","slug","tenant_id","broker_tenant":"<uuid>","status",
 *      "deleting":bool,"created_at_us"}
 *   slug indexes: "px.tenants" key "slug:<slug>" and "px.clusters" key
 *     "slug:<slug>", each {"id":"<id>"}.
 *   namespace "px.s3sinks",  key "#<cluster id>" (docs/design/control-plane.md
 * §5, written by api/cp_s3.c):
 * {"cluster_id","broker_tenant","enabled","config":{..},
 *     "secret_key_sealed","updated_at_us"}.
 * status is "active", "push_blocked" or "suspended". Ids are UUID text.
 *
 * Reads go to this node's store (store_kv_read), never through raft.
 * Threading: any thread. */
#ifndef QUEEN_CP_REGISTRY_H
#define QUEEN_CP_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

struct store;

/* 00000000-0000-0000-0000-00000000fffe */
extern const uint8_t CP_PROXY_TENANT[16];

#define CP_NS_TENANTS  "px.tenants"
#define CP_NS_CLUSTERS "px.clusters"
#define CP_NS_S3SINKS  "px.s3sinks"
#define CP_SLUG_MAX    64
#define CP_ID_LEN      36
/* How often the loop re-reads the gate table when it is stale. */
#define CP_GATE_REFRESH_MS 200

enum cp_status { CP_ACTIVE = 0, CP_PUSH_BLOCKED = 1, CP_SUSPENDED = 2 };

struct cp_cluster {
    char id[CP_ID_LEN + 1];
    char slug[CP_SLUG_MAX + 1];
    char tenant_id[CP_ID_LEN + 1];
    char tenant_slug[CP_SLUG_MAX + 1];
    uint8_t broker_tenant[16];
    enum cp_status status;        /* the cluster's own */
    enum cp_status tenant_status; /* its tenant's */
    bool deleting;                /* the cluster's or its tenant's flag */
};

/* The worse of the cluster's and its tenant's status. */
enum cp_status cp_cluster_merged(const struct cp_cluster *c);
const char *cp_status_name(enum cp_status s);

/* Find a cluster by its id or its slug. 0 with *out filled; ERR_NOT_FOUND
 * when neither names one; other ERR_* on a store error. */
int cp_cluster_find(struct store *s, const char *id_or_slug,
                    struct cp_cluster *out, struct err *err);

/* Every cluster, for the sink manager's 5-s read. *out is malloc'ed (free
 * it), *n its count. 0 or ERR_*. */
int cp_cluster_list(struct store *s, struct cp_cluster **out, size_t *n,
                    struct err *err);

/* The merged status of the cluster whose broker tenant is tenant, for the
 * data plane's gate on every push and read: CP_ACTIVE when no cluster maps
 * to it (a tenant the control plane does not know is not gated). Cheap: an
 * in-memory table, not a store read per call. */
enum cp_status cp_tenant_gate(const uint8_t tenant[16]);

/* "active", "push_blocked" or "suspended" (exactly, lower case) into *out.
 * False on anything else, *out unchanged. */
bool cp_status_parse(const char *s, enum cp_status *out);

/* Whether s is a slug: 1 to CP_SLUG_MAX of [a-z0-9-]. */
bool cp_slug_valid(const char *s);
/* Whether s is an id: a UUID's 8-4-4-4-12 hex text (either case), what
 * cp_cluster_find takes besides a slug. */
bool cp_id_valid(const char *s);

/* ---- raw rows (for the cp routes, api/cp.c) ---- */

/* Read row ns/key of the proxy tenant. 0 with *version its version (> 0)
 * and val (reset first) its value, or *version 0 when there is no such
 * row; or ERR_* from the store. */
int cp_row_get(struct store *s, const char *ns, const char *key,
               struct buf *val, uint64_t *version, struct err *err);

/* Call fn(arg, value) for every row of ns whose key starts with '#', in key
 * order, reading pages of 1000. Stops at fn's first non-zero return. */
typedef int (*cp_row_fn)(void *arg, struct slice value, struct err *err);
int cp_row_scan(struct store *s, const char *ns, cp_row_fn fn, void *arg,
                struct err *err);

/* ---- the gate table behind cp_tenant_gate() ----
 *   (1) The table holds only the broker tenants whose merged status is not
 *       CP_ACTIVE; it is replaced whole under a lock, so a reader sees the
 *       old table or the new one, never a mix.
 *   (2) Any write of the proxy tenant's KV rows applied on this node (the
 *       KV apply handler calls cp_gate_touch()) marks the table stale; the
 *       next cp_gate_refresh() on the loop reads the rows again. A refresh
 *       with nothing stale reads nothing. */

/* Mark the table stale when tenant is CP_PROXY_TENANT. Any thread; cheap
 * (one compare and an atomic store). */
void cp_gate_touch(const uint8_t tenant[16]);

/* Rebuild the table from this node's store when it is stale or force is
 * set. 0, or ERR_* from the store (the old table is kept and stays stale,
 * so the next call tries again). Loop thread. */
int cp_gate_refresh(struct store *s, bool force, struct err *err);

/* Empty the table and free it (tests, shutdown). */
void cp_gate_clear(void);

#endif
