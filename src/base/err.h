/* Errors: a code from one table and a sentence with context. Lower layers fill
 * a caller's struct err; the layer that handles the error logs it or answers
 * with it, once. */
#ifndef QUEEN_BASE_ERR_H
#define QUEEN_BASE_ERR_H

#include "base/common.h"

/* X(name, http status, text) */
#define ERR_TABLE(X)                                \
    X(ERR_OK, 200, "ok")                            \
    X(ERR_INVALID, 400, "invalid argument")         \
    X(ERR_NOT_FOUND, 404, "not found")              \
    X(ERR_CONFLICT, 409, "conflict")                \
    X(ERR_TOO_BIG, 413, "too big")                  \
    X(ERR_NOT_LEADER, 421, "not the leader")        \
    X(ERR_BUSY, 503, "busy")                        \
    X(ERR_TIMEOUT, 504, "timed out")                \
    X(ERR_IO, 500, "i/o error")                     \
    X(ERR_REMOTE, 502, "remote service error")      \
    X(ERR_FULL, 507, "storage full")                \
    X(ERR_CORRUPT, 500, "corrupt data")             \
    X(ERR_PRECONDITION, 409, "precondition failed") \
    X(ERR_FORBIDDEN, 403, "forbidden")              \
    X(ERR_LIMIT, 429, "too many requests")

enum err_code {
#define ERR_ENUM(name, status, text) name,
    ERR_TABLE(ERR_ENUM)
#undef ERR_ENUM
        ERR_COUNT
};

struct err {
    int code;      /* enum err_code */
    char msg[256]; /* "open /x: Permission denied" */
};

/* Set code and message; returns code so a failure is one line. No argument
 * may point into err->msg (vsnprintf would read what it is overwriting): to
 * put context before the old message, set err->code and use err_wrap(). */
int err_set(struct err *err, int code, const char *fmt, ...) PRINTF(3, 4);
/* Prefix the message with context: "window 42: " + old message. Returns the
 * code. */
int err_wrap(struct err *err, const char *fmt, ...) PRINTF(2, 3);
void err_clear(struct err *err);
/* msg for a client's eyes: every absolute path in it ("/var/lib/q/raft",
 * one starting the text or after a space, '(', '=' or a quote, up to a
 * space, ':', ',', ';', ')' or a quote) cut to ".../" and its last name,
 * so an answer does not tell the server's directories (the log keeps
 * them). Writes at most cap bytes to out, NUL included; out may not be
 * msg. */
void err_public(const char *msg, char *out, size_t cap);
const char *err_name(int code);
const char *err_text(int code);
int err_http_status(int code);

#endif
