/* Response helpers: reason phrases, the response head, and the JSON error
 * envelope `{"error":"<message>","code":"<code>"}` (docs/design/http-api.md §1)
 * that every handler answers failures with. */
#ifndef QUEEN_HTTP_RESP_H
#define QUEEN_HTTP_RESP_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "http/server.h"

/* The reason phrase of a status ("Not Found"), "Unknown" when we have none. */
const char *resp_reason(int status);

/* What a response head says. */
struct resp_meta {
    int status;
    int http_minor;            /* 0: answer as HTTP/1.0 */
    const char *content_type;  /* NULL: no Content-Type header */
    size_t body_len;           /* the Content-Length */
    const char *extra_headers; /* lines each ending "\r\n", or NULL */
};

/* Append a response head to b (unlimited buffers only: cannot fail) up to
 * but without its end: status line, Content-Type, Content-Length and the
 * extra header lines. The connection appends the end (a Connection header
 * if needed, then the empty line) when the answer is written, since only
 * then is it known whether this answer is the connection's last. */
void resp_head(struct buf *b, const struct resp_meta *m);

/* Append {"error":<message>,"code":<code>} with proper JSON escaping.
 * Returns 0 or ERR_TOO_BIG from b's cap. */
int resp_error_body(struct buf *b, const char *code, const char *message,
                    struct err *err);

/* Answer with a JSON body; takes body (it is reset, its memory handed to
 * the server). Content-Type: application/json. */
void http_respond_json(struct http_req *req, int status, struct buf *body);
/* Answer with the error envelope. */
void http_respond_error(struct http_req *req, int status, const char *code,
                        const char *message);
/* Same, plus extra header lines ("Retry-After: 1\r\n"), or NULL. */
void http_respond_error_ex(struct http_req *req, int status, const char *code,
                           const char *message, const char *extra_headers);

#endif
