/* The tenant of an HTTP call (docs/design/http-api.md §1): with
 * QUEEN_TENANCY_HEADER=true it is the x-queen-tenant header, a UUID in
 * canonical text form; a missing header, or the setting off, means the default
 * tenant 00000000-0000-0000-0000-000000000001 (STORE_DEFAULT_TENANT).
 *
 *   (1) Every route that reads or writes a tenant's data asks api_tenant()
 *       once, before it reads or proposes anything, so a malformed header
 *       changes nothing (api.h (1)).
 *   (2) With the setting off the header is never looked at: a client cannot
 *       pick a tenant unless the operator put a trusted proxy in front and
 *       said so.
 *
 * Pure except api_tenant(), which only reads the request's header. */
#ifndef QUEEN_API_TENANT_H
#define QUEEN_API_TENANT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

struct api;
struct http_req;

#define API_TENANT_HEADER "x-queen-tenant"

/* Parse the canonical 8-4-4-4-12 hex form (either case, nothing around it)
 * into 16 bytes. Returns false on anything else; out is then unchanged. */
bool api_tenant_parse(const char *s, uint8_t out[16]);

/* The tenant for a header value (NULL when the request has none) under the
 * setting is_header_on. Returns 0, or ERR_INVALID with err->msg naming the
 * header and the value (cut at 64 bytes), out unchanged. */
int api_tenant_of(bool is_header_on, const char *value, uint8_t out[16],
                  struct err *err);

/* api_tenant_of() for req under a's setting. Borrows both. */
int api_tenant(const struct http_req *req, const struct api *a, uint8_t out[16],
               struct err *err);

#endif
