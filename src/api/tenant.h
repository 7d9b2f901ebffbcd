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
 *       said so. The exception is (3).
 *   (3) A call let in by a token bound to a tenant (api/auth.h) acts for
 *       that tenant only, whatever the setting: without the header it is
 *       the token's tenant; a header naming another tenant answers 403
 *       (ERR_FORBIDDEN) and changes nothing.
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

/* (3) The tenant for a header value (NULL when absent) under a token bound
 * to bound. Returns 0; ERR_INVALID as api_tenant_of() for a malformed
 * header; ERR_FORBIDDEN when the header names another tenant. */
int api_tenant_bound(const uint8_t bound[16], const char *value,
                     uint8_t out[16], struct err *err);

/* The tenant of req: api_tenant_bound() when its token is bound to one,
 * else api_tenant_of() under a's setting. Borrows both. */
int api_tenant(const struct http_req *req, const struct api *a, uint8_t out[16],
               struct err *err);

/* ---- the control plane's gate (docs/design/control-plane.md §4) ----
 *   (4) No call acts for CP_PROXY_TENANT, the control plane's own rows
 *       (cp/registry.h): 403 control_plane_tenant, whatever the route.
 *   (5) A tenant whose cluster's merged status is suspended gets 403
 *       tenant_suspended on every data route; push_blocked gets 403
 *       tenant_push_blocked on pushes only and keeps its reads, configure
 *       and KV. The gate is asked once per call, before anything is read
 *       or proposed (1); a long poll already parked is not re-gated. */

enum api_gate { API_GATE_READ = 0, API_GATE_PUSH = 1 };

/* Pure: whether a call of kind g for tenant t, whose merged status is st,
 * may go on. 0, or ERR_FORBIDDEN with *code set and err->msg naming the
 * tenant and the status. */
int api_tenant_gate_check(const uint8_t t[16], int st, enum api_gate g,
                          const char **code, struct err *err);

/* api_tenant(), then the gate for g (cp_tenant_gate()). 0; the errors of
 * api_tenant() with *code NULL; or api_tenant_gate_check()'s refusal. */
int api_tenant_gated(const struct http_req *req, const struct api *a,
                     enum api_gate g, uint8_t out[16], const char **code,
                     struct err *err);

/* Answer an api_tenant_gated() failure: 403 with code when code is set,
 * else as api_respond_err(). */
void api_respond_tenant(struct api *a, struct http_req *req, const char *code,
                        const struct err *err);

#endif
