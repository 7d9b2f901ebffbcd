/* Response helpers: reason phrases, the response head, and the JSON error
 * envelope.
 *
 * A head is formatted by hand rather than with printf: it is on the path of
 * every request, and three appends of known lengths are cheaper than a
 * format string parse. */
#include "http/resp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

struct resp_reason_row {
    int status;
    const char *text;
};

static const struct resp_reason_row resp_reasons[] = {
    {100, "Continue"},
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {204, "No Content"},
    {206, "Partial Content"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {304, "Not Modified"},
    {307, "Temporary Redirect"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {411, "Length Required"},
    {412, "Precondition Failed"},
    {413, "Payload Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {416, "Range Not Satisfiable"},
    {417, "Expectation Failed"},
    {421, "Misdirected Request"},
    {422, "Unprocessable Entity"},
    {428, "Precondition Required"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
    {507, "Insufficient Storage"},
};

const char *resp_reason(int status)
{
    for (size_t i = 0; i < ARRAY_LEN(resp_reasons); i++) {
        if (resp_reasons[i].status == status) {
            return resp_reasons[i].text;
        }
    }
    return "Unknown";
}

static void resp_put(struct buf *b, const char *s, size_t n)
{
    struct err err;
    int rc = buf_append(b, s, n, &err);

    ASSERT(rc == 0); /* heads go to unlimited buffers */
}

static void resp_put_str(struct buf *b, const char *s)
{
    resp_put(b, s, strlen(s));
}

/* Decimal text of v into the end of tmp; returns its start. */
static const char *resp_utoa(char *tmp, size_t size, size_t v)
{
    char *p = tmp + size - 1;

    *p = '\0';
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    return p;
}

void resp_head(struct buf *b, const struct resp_meta *m)
{
    char num[32];

    ASSERT(m->status >= 100 && m->status <= 999);
    resp_put_str(b, m->http_minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ");
    resp_put_str(b, resp_utoa(num, sizeof(num), (size_t)m->status));
    resp_put(b, " ", 1);
    resp_put_str(b, resp_reason(m->status));
    if (m->content_type != NULL) {
        resp_put_str(b, "\r\nContent-Type: ");
        resp_put_str(b, m->content_type);
    }
    resp_put_str(b, "\r\nContent-Length: ");
    resp_put_str(b, resp_utoa(num, sizeof(num), m->body_len));
    resp_put(b, "\r\n", 2);
    if (m->extra_headers != NULL) {
        resp_put_str(b, m->extra_headers);
    }
}

int resp_error_body(struct buf *b, const char *code, const char *message,
                    struct err *err)
{
    struct jw w;

    jw_init(&w, b);
    jw_obj_begin(&w);
    jw_key(&w, "error");
    jw_text(&w, message); /* may quote the request, cut at any byte */
    jw_key(&w, "code");
    jw_cstr(&w, code);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

void http_respond_json(struct http_req *req, int status, struct buf *body)
{
    size_t len;
    char *p = buf_steal(body, &len);

    http_respond_take(req, status, "application/json", p, len, NULL);
}

void http_respond_error_ex(struct http_req *req, int status, const char *code,
                           const char *message, const char *extra_headers)
{
    struct buf b;
    struct err err;
    size_t len;
    char *p;
    int rc;

    buf_init(&b, BUF_UNLIMITED);
    rc = resp_error_body(&b, code, message, &err);
    ASSERT(rc == 0); /* unlimited */
    p = buf_steal(&b, &len);
    http_respond_take(req, status, "application/json", p, len, extra_headers);
}

void http_respond_error(struct http_req *req, int status, const char *code,
                        const char *message)
{
    http_respond_error_ex(req, status, code, message, NULL);
}
