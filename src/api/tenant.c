/* The tenant of an HTTP call (api/tenant.h): the x-queen-tenant header when
 * QUEEN_TENANCY_HEADER is on, else the default tenant. The header is text
 * from the network: the refusal quotes at most 64 bytes of it, with every
 * byte outside printable ASCII shown as '?', so the error body stays valid
 * JSON and one log line. */
#include "api/tenant.h"

#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "api/auth.h"
#include "base/sha256.h"
#include "base/uuid7.h"
#include "cp/registry.h"
#include "http/server.h"
#include "store/store.h"

#define TENANT_TEXT_LEN 36
#define TENANT_QUOTE    64

bool api_tenant_parse(const char *s, uint8_t out[16])
{
    uint8_t b[16];
    size_t k = 0;

    if (strlen(s) != TENANT_TEXT_LEN) {
        return false;
    }
    for (size_t i = 0; i < TENANT_TEXT_LEN; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') {
                return false;
            }
            continue;
        }
        int hi = hex_digit(s[i]);
        int lo = hex_digit(s[i + 1]);
        if (hi < 0 || lo < 0) {
            return false;
        }
        b[k++] = (uint8_t)(hi << 4 | lo);
        i++;
    }
    memcpy(out, b, sizeof(b));
    return true;
}

int api_tenant_of(bool is_header_on, const char *value, uint8_t out[16],
                  struct err *err)
{
    char quote[TENANT_QUOTE + 4];
    size_t n = 0;

    if (!is_header_on || value == NULL) {
        memcpy(out, STORE_DEFAULT_TENANT, 16);
        return 0;
    }
    if (api_tenant_parse(value, out)) {
        return 0;
    }
    for (; n < TENANT_QUOTE && value[n] != '\0'; n++) {
        bool is_printable =
            (unsigned char)value[n] >= 0x20 && (unsigned char)value[n] < 0x7f;

        quote[n] = value[n];
        if (!is_printable) {
            quote[n] = '?';
        }
    }
    quote[n] = '\0';
    return err_set(err, ERR_INVALID,
                   "bad " API_TENANT_HEADER " header: \"%s%s\" is not a UUID "
                   "(8-4-4-4-12 hex digits)",
                   quote, value[n] != '\0' ? "..." : "");
}

int api_tenant_bound(const uint8_t bound[16], const char *value,
                     uint8_t out[16], struct err *err)
{
    uint8_t t[16];
    char want[37];
    char got[37];

    if (value == NULL) {
        memcpy(out, bound, 16);
        return 0;
    }
    if (api_tenant_of(true, value, t, err) != 0) {
        return err->code;
    }
    if (memcmp(t, bound, 16) != 0) {
        uuid7_format(bound, want);
        uuid7_format(t, got);
        return err_set(err, ERR_FORBIDDEN,
                       "this token acts for tenant %s only; the "
                       "%s header names %s",
                       want, API_TENANT_HEADER, got);
    }
    memcpy(out, t, 16);
    return 0;
}

int api_tenant(const struct http_req *req, const struct api *a, uint8_t out[16],
               struct err *err)
{
    const struct auth_entry *e = req->principal;
    bool is_repeated;
    const char *h = http_req_header_sole(req, API_TENANT_HEADER, &is_repeated);

    /* Read only where it decides the tenant, as before; there, two of them
     * name no one tenant (RFC 9110 joins them with a comma, which is not a
     * UUID either). */
    if (is_repeated && ((e != NULL && e->is_bound) || a->is_tenancy_header)) {
        return err_set(err, ERR_INVALID,
                       "bad " API_TENANT_HEADER " header: it is given more "
                       "than once; send one");
    }
    if (e != NULL && e->is_bound) {
        return api_tenant_bound(e->tenant, h, out, err);
    }
    if (!a->is_tenancy_header) {
        return api_tenant_of(false, NULL, out, err);
    }
    return api_tenant_of(true, h, out, err);
}

int api_tenant_gate_check(const uint8_t t[16], int st, enum api_gate g,
                          const char **code, struct err *err)
{
    char id[37];

    uuid7_format(t, id);
    if (memcmp(t, CP_PROXY_TENANT, 16) == 0) {
        *code = "control_plane_tenant";
        return err_set(err, ERR_FORBIDDEN,
                       "tenant %s holds the control plane's rows; no call "
                       "acts for it",
                       id);
    }
    if (st == CP_SUSPENDED) {
        *code = "tenant_suspended";
        return err_set(err, ERR_FORBIDDEN,
                       "tenant %s is suspended: its pushes and reads are "
                       "refused until the control plane sets it active",
                       id);
    }
    if (st == CP_PUSH_BLOCKED && g == API_GATE_PUSH) {
        *code = "tenant_push_blocked";
        return err_set(err, ERR_FORBIDDEN,
                       "tenant %s is push_blocked: its pushes are refused "
                       "(reads still answer) until the control plane sets "
                       "it active",
                       id);
    }
    return 0;
}

int api_tenant_gated(const struct http_req *req, const struct api *a,
                     enum api_gate g, uint8_t out[16], const char **code,
                     struct err *err)
{
    *code = NULL;
    if (api_tenant(req, a, out, err) != 0) {
        return err->code;
    }
    return api_tenant_gate_check(out, (int)cp_tenant_gate(out), g, code, err);
}

void api_respond_tenant(struct api *a, struct http_req *req, const char *code,
                        const struct err *err)
{
    if (code != NULL) {
        api_respond_error(a, req, 403, code, err->msg);
        return;
    }
    api_respond_err(a, req, err);
}
