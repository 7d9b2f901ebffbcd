/* Bearer tokens for the HTTP API (api/auth.h).
 *
 * Tokens are kept as SHA-256 digests (1): the check hashes the presented
 * token once and compares 32 bytes with each entry, so neither the length
 * nor the bytes of a stored token shape the time a check takes, and a
 * memory dump of the table gives no token away. Finding duplicates sorts
 * the digests, so a large file loads in n log n. */
#include "api/auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/tenant.h"
#include "base/common.h"
#include "base/sha256.h"
#include "base/xalloc.h"
#include "http/resp.h"
#include "http/server.h"

#define AUTH_MAX_FIELDS 3 /* two allowed; a third is an error */

struct auth_field {
    const char *p;
    size_t n;
};

/* A loaded entry and the line it came from (duplicate messages). */
struct auth_slot {
    struct auth_entry e;
    size_t line;
};

bool auth_equal(const void *p, const void *q, size_t n)
{
    const volatile unsigned char *a = p;
    const volatile unsigned char *b = q;
    unsigned char acc = 0;

    for (size_t i = 0; i < n; i++) {
        acc |= (unsigned char)(a[i] ^ b[i]);
    }
    return acc == 0;
}

static bool auth_is_token_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || strchr("-._~+/=", c) != NULL;
}

static bool auth_is_token(const char *p, size_t n)
{
    if (n < AUTH_TOKEN_MIN || n > AUTH_TOKEN_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\0' || !auth_is_token_char(p[i])) {
            return false;
        }
    }
    return true;
}

/* Split one line (no '\n') into at most AUTH_MAX_FIELDS fields; a field
 * starting with '#' ends the line. Returns the number found. */
static size_t auth_split(const char *p, size_t n, struct auth_field *f)
{
    size_t nf = 0;
    size_t i = 0;

    while (i < n && nf < AUTH_MAX_FIELDS) {
        size_t start;

        while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r')) {
            i++;
        }
        if (i == n || p[i] == '#') {
            break;
        }
        start = i;
        while (i < n && p[i] != ' ' && p[i] != '\t' && p[i] != '\r') {
            i++;
        }
        f[nf].p = p + start;
        f[nf].n = i - start;
        nf++;
    }
    return nf;
}

/* One line into slot s; *has_entry says whether it held one (not blank,
 * not a comment). Returns 0, or ERR_INVALID naming the line. */
static int auth_parse_line(const char *p, size_t n, size_t line,
                           struct auth_slot *s, bool *has_entry,
                           struct err *err)
{
    struct auth_field f[AUTH_MAX_FIELDS];
    size_t nf = auth_split(p, n, f);
    char tenant[40];

    *has_entry = false;
    if (nf == 0) {
        return 0;
    }
    if (nf > 2) {
        return err_set(err, ERR_INVALID,
                       "line %zu: more than two fields; a line is a token, "
                       "optionally followed by a tenant UUID",
                       line);
    }
    if (!auth_is_token(f[0].p, f[0].n)) {
        return err_set(err, ERR_INVALID,
                       "line %zu: a token is %d to %d characters of A-Z a-z "
                       "0-9 - . _ ~ + / =",
                       line, AUTH_TOKEN_MIN, AUTH_TOKEN_MAX);
    }
    memset(s, 0, sizeof(*s));
    s->line = line;
    sha256(f[0].p, f[0].n, s->e.digest);
    *has_entry = true;
    if (nf == 1) {
        return 0;
    }
    if (f[1].n >= sizeof(tenant)) {
        return err_set(err, ERR_INVALID,
                       "line %zu: the tenant is not a UUID (8-4-4-4-12 hex "
                       "digits)",
                       line);
    }
    memcpy(tenant, f[1].p, f[1].n);
    tenant[f[1].n] = '\0';
    if (!api_tenant_parse(tenant, s->e.tenant)) {
        return err_set(err, ERR_INVALID,
                       "line %zu: the tenant is not a UUID (8-4-4-4-12 hex "
                       "digits)",
                       line);
    }
    s->e.is_bound = true;
    return 0;
}

static int auth_slot_cmp(const void *x, const void *y)
{
    const struct auth_slot *a = x;
    const struct auth_slot *b = y;
    int c = memcmp(a->e.digest, b->e.digest, sizeof(a->e.digest));

    if (c != 0) {
        return c;
    }
    return a->line < b->line ? -1 : a->line > b->line;
}

/* (4) Sort by digest, refuse a token given twice, and keep the entries. */
static int auth_finish(struct auth *a, struct auth_slot *s, size_t n,
                       struct err *err)
{
    if (n == 0) {
        return err_set(err, ERR_INVALID,
                       "no token: every line is blank or a comment");
    }
    qsort(s, n, sizeof(*s), auth_slot_cmp);
    for (size_t i = 1; i < n; i++) {
        if (memcmp(s[i - 1].e.digest, s[i].e.digest, 32) == 0) {
            return err_set(err, ERR_INVALID,
                           "line %zu: the same token as line %zu", s[i].line,
                           s[i - 1].line);
        }
    }
    a->entries = xcalloc(n, sizeof(*a->entries));
    for (size_t i = 0; i < n; i++) {
        a->entries[i] = s[i].e;
    }
    a->n = n;
    return 0;
}

int auth_parse(struct auth *a, const char *text, size_t len, struct err *err)
{
    struct auth_slot *s = NULL;
    size_t n = 0;
    size_t cap = 0;
    size_t line = 0;
    size_t i = 0;
    bool has_entry;
    int rc = 0;

    memset(a, 0, sizeof(*a));
    while (i < len && rc == 0) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;

        line++;
        if (n == cap) {
            cap = cap == 0 ? 16 : cap * 2;
            s = xrealloc(s, cap * sizeof(*s));
        }
        rc = auth_parse_line(text + i, end - i, line, &s[n], &has_entry, err);
        if (rc == 0 && has_entry) {
            if (++n > AUTH_MAX_ENTRIES) {
                rc = err_set(err, ERR_INVALID, "line %zu: more than %d tokens",
                             line, AUTH_MAX_ENTRIES);
            }
        }
        i = end + 1;
    }
    if (rc == 0) {
        rc = auth_finish(a, s, n, err);
    }
    free(s);
    return rc;
}

int auth_load_file(struct auth *a, const char *path, struct err *err)
{
    FILE *f = fopen(path, "rb");
    char *text;
    size_t n;
    int rc;

    memset(a, 0, sizeof(*a));
    if (f == NULL) {
        return err_set(err, ERR_IO, "cannot read: %s", strerror(errno));
    }
    text = xmalloc(AUTH_FILE_MAX + 1);
    n = fread(text, 1, AUTH_FILE_MAX + 1, f);
    if (ferror(f)) {
        rc = err_set(err, ERR_IO, "cannot read: %s", strerror(errno));
    } else if (n > AUTH_FILE_MAX) {
        rc = err_set(err, ERR_TOO_BIG, "the file is over %zu bytes",
                     AUTH_FILE_MAX);
    } else {
        rc = auth_parse(a, text, n, err);
    }
    /* (1) the file's text held every token: wipe it before it is freed */
    explicit_bzero(text, n < AUTH_FILE_MAX ? n : AUTH_FILE_MAX);
    free(text);
    fclose(f);
    return rc;
}

void auth_free(struct auth *a)
{
    free(a->entries);
    memset(a, 0, sizeof(*a));
}

/* The token of "Bearer <token>": scheme any case, then spaces, then the
 * token up to optional trailing spaces. */
static bool auth_bearer(const char *h, const char **tok, size_t *n)
{
    size_t end;

    if (strncasecmp(h, "Bearer", 6) != 0 || h[6] != ' ') {
        return false;
    }
    h += 6;
    while (*h == ' ') {
        h++;
    }
    end = strlen(h);
    while (end > 0 && h[end - 1] == ' ') {
        end--;
    }
    *tok = h;
    *n = end;
    return end > 0;
}

enum auth_verdict auth_check(const struct auth *a, const char *authorization,
                             const struct auth_entry **out)
{
    uint8_t digest[32];
    const char *tok;
    size_t n;
    size_t match = 0;
    size_t found = 0;

    if (authorization == NULL) {
        return AUTH_MISSING;
    }
    if (!auth_bearer(authorization, &tok, &n)) {
        return AUTH_BAD;
    }
    sha256(tok, n, digest);
    /* (2) every entry, no early exit, no branch on the result */
    for (size_t i = 0; i < a->n; i++) {
        size_t eq = (size_t)auth_equal(digest, a->entries[i].digest, 32);
        size_t mask = (size_t)0 - eq;

        match = (match & ~mask) | (i & mask);
        found |= eq;
    }
    explicit_bzero(digest, sizeof(digest));
    if (found == 0) {
        return AUTH_BAD;
    }
    *out = &a->entries[match];
    return AUTH_OK;
}

/* The verdict on req's token; *e the entry on AUTH_OK. */
static enum auth_verdict auth_of(const struct auth *a,
                                 const struct http_req *req,
                                 const struct auth_entry **e)
{
    bool is_repeated;
    const char *h = http_req_header_sole(req, "authorization", &is_repeated);

    /* Two Authorization headers name no one token: not valid. */
    return is_repeated ? AUTH_BAD : auth_check(a, h, e);
}

/* The 401 of verdict v (not AUTH_OK). */
static void auth_refusal(enum auth_verdict v, struct http_refusal *out)
{
    out->status = 401;
    out->code = "unauthorized";
    if (v == AUTH_MISSING) {
        out->msg = "this route needs Authorization: Bearer <token>";
        out->extra_headers = "WWW-Authenticate: Bearer realm=\"queen\"\r\n";
    } else {
        out->msg = "the bearer token is not valid";
        out->extra_headers = "WWW-Authenticate: Bearer realm=\"queen\", "
                             "error=\"invalid_token\"\r\n";
    }
}

bool api_auth_guard(struct http_req *req, void *arg)
{
    const struct auth_entry *e = NULL;
    struct http_refusal no;
    enum auth_verdict v;

    if (req->route != NULL && strcmp(req->route, "/health") == 0) {
        return true;
    }
    v = auth_of(arg, req, &e);
    if (v == AUTH_OK) {
        req->principal = e;
        req->is_let_in = true;
        return true;
    }
    auth_refusal(v, &no);
    http_respond_error_ex(req, no.status, no.code, no.msg, no.extra_headers);
    return false;
}

bool api_auth_head_check(struct http_req *req, void *arg,
                         struct http_refusal *out)
{
    const struct auth_entry *e = NULL;
    enum auth_verdict v;

    if (req->path.len == 7 && memcmp(req->path.ptr, "/health", 7) == 0 &&
        (req->method == HTTP_METHOD_GET || req->method == HTTP_METHOD_HEAD)) {
        /* the one route without a token reads no body: none is held */
        *out = (struct http_refusal){400, "bad_request",
                                     "GET /health takes no body", NULL};
        return false;
    }
    v = auth_of(arg, req, &e);
    if (v == AUTH_OK) {
        return true;
    }
    auth_refusal(v, out);
    return false;
}
