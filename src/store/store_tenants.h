/* The tenants of the store: which tenants own at least one queue, read from
 * the queues table (schema.h: a queue key starts with its 16 tenant bytes),
 * in tenant byte order, a bounded page at a time. Node-wide readers use it
 * to walk every tenant's data (broker/retention.c); per-tenant reads stay in
 * store.h.
 *   (1) A tenant is listed iff it has a queue row; KV rows alone do not make
 *       a tenant (nothing but a queue needs node-wide care).
 *   (2) Each call is one read transaction and skips from tenant to tenant
 *       with one seek each, so its cost grows with the tenants listed, not
 *       with their queues.
 * Any thread. */
#ifndef QUEEN_STORE_STORE_TENANTS_H
#define QUEEN_STORE_STORE_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "store/store.h"

#define STORE_TENANT_PAGE 256 /* tenants per page */

struct store_tenant_page {
    uint8_t ids[STORE_TENANT_PAGE][16]; /* in byte order */
    size_t n;
    bool has_more; /* a tenant after ids[n - 1] has a queue */
};

/* The first STORE_TENANT_PAGE tenants with a queue strictly after `after`
 * (16 bytes; NULL = from the first) into *out. Returns 0, ERR_IO, or
 * ERR_CORRUPT when a queue key is shorter than a tenant plus one byte; out
 * is empty on error. */
int store_list_tenants(struct store *s, const uint8_t *after,
                       struct store_tenant_page *out, struct err *err);

#endif
