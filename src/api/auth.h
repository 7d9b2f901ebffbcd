/* Bearer tokens for the HTTP API (docs/design/http-api.md §1.1): the
 * QUEEN_AUTH_TOKENS file, parsed into a table of token digests, each bound
 * to one tenant or to none, and the check of a request's Authorization
 * header against that table.
 *
 * The file, one entry a line:
 *
 *   # a comment: '#' starts one wherever a field could start
 *   <token>                 any tenant (as without tokens: the default
 *                           tenant, or x-queen-tenant when
 *                           QUEEN_TENANCY_HEADER=true)
 *   <token> <tenant-uuid>   that tenant only
 *
 * Fields are separated by spaces or tabs; blank lines are skipped; a line
 * may end in CRLF. A token is AUTH_TOKEN_MIN..AUTH_TOKEN_MAX characters of
 * A-Z a-z 0-9 - . _ ~ + / = (RFC 6750's b64token), so it can be sent as
 * it is and never contains '#' or a space.
 *
 * Invariants:
 *   (1) The table holds SHA-256 digests of the tokens, never the tokens.
 *   (2) auth_check() compares the presented token's digest with every
 *       entry in constant time and never stops at a match: how long it takes
 *       depends on the number of entries only.
 *   (3) No message of this module quotes a token: the parser names line
 *       numbers, the check answers a verdict.
 *   (4) A table that loaded has at least one entry and no token twice.
 *
 * Pure except auth_load_file(), which reads the file, and api_auth_guard(),
 * which reads and answers a request. */
#ifndef QUEEN_API_AUTH_H
#define QUEEN_API_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct http_req;

#define AUTH_TOKEN_MIN   16
#define AUTH_TOKEN_MAX   256
#define AUTH_MAX_ENTRIES 100000
#define AUTH_FILE_MAX    ((size_t)16 << 20)

struct auth_entry {
    uint8_t digest[32]; /* SHA-256 of the token (1) */
    uint8_t tenant[16];
    bool is_bound; /* tenant holds the one tenant this token may act for */
};

struct auth {
    struct auth_entry *entries; /* owned */
    size_t n;
};

enum auth_verdict {
    AUTH_OK,      /* *out is the matching entry */
    AUTH_MISSING, /* no Authorization header */
    AUTH_BAD,     /* not "Bearer <token>", or no such token */
};

/* Parse the file's text (len bytes, borrowed; need not be NUL-terminated)
 * into a (overwritten). Returns 0, or ERR_INVALID with err->msg "line <n>:
 * <why>" (or "no token" for a file without one) and a empty. Free a with
 * auth_free() in every case. */
int auth_parse(struct auth *a, const char *text, size_t len, struct err *err);

/* Read path and parse it. Returns 0, ERR_IO "cannot read: <strerror>",
 * ERR_TOO_BIG over AUTH_FILE_MAX, or auth_parse()'s errors. The message
 * names neither the path nor a token: the caller adds the setting. */
int auth_load_file(struct auth *a, const char *path, struct err *err);

void auth_free(struct auth *a);

/* Whether n bytes at p and q are equal, in a time that depends on n only. */
bool auth_equal(const void *p, const void *q, size_t n);

/* The verdict for an Authorization header value (NULL when absent):
 * "Bearer" (any case), one or more spaces, a token, optional trailing
 * spaces. On AUTH_OK *out points into a (borrowed). */
enum auth_verdict auth_check(const struct auth *a, const char *authorization,
                             const struct auth_entry **out);

/* A router guard (http/router.h; arg is the struct auth): every route but
 * GET /health needs a valid token. Answers 401 with WWW-Authenticate:
 * Bearer and the JSON envelope (code "unauthorized") and returns false
 * when it is missing or wrong; else sets req->principal to the entry and
 * returns true. */
bool api_auth_guard(struct http_req *req, void *arg);

/* The same check on a request's head (http_config.head_check; arg is the
 * struct auth), before its body is read: a request with a body and no
 * valid token is refused with the guard's answer and its body is never
 * read. GET /health (any /health) is left to the guard. */
struct http_refusal;
bool api_auth_head_check(struct http_req *req, void *arg,
                         struct http_refusal *out);

#endif
