/* The HTTP/1.1 server: libuv for sockets, llhttp for parsing, one loop thread.
 *
 * A connection parses requests with llhttp, buffers each whole request (head
 * and body, both capped), and hands it to the handler on the loop thread. The
 * handler answers at once or later (after a raft command applies, many loop
 * iterations on) with http_respond*(). Answers on one connection are written
 * in request order even when they are computed out of order (pipelining).
 *
 * Ownership of a request (struct http_req):
 *   (1) The connection creates the req when its first byte arrives and owns
 *       it while it is parsed. Once complete it is queued on the connection
 *       and given to the handler, which *borrows* it until it answers.
 *   (2) Exactly one http_respond*() call per req. After that call the req
 *       belongs to the connection again and the handler must not touch it:
 *       it is freed once its answer has been written (or dropped).
 *   (3) If the peer goes away before the answer, the req stays valid until
 *       the handler answers; the answer is then dropped and the req freed.
 *       The connection struct itself lives until every req it queued has
 *       been answered and every write has completed.
 *   (4) Errors found while parsing (malformed request 400, head over the cap
 *       431, body over the cap 413, a transfer coding other than chunked
 *       501) are answered by the server itself, in
 *       order after the requests before them, and the connection is closed
 *       after that answer. Nothing reaches the handler for them.
 *
 * Everything runs on the loop thread; nothing here is thread-safe.
 *
 * Graceful stop (SIGTERM): http_server_stop_accepting() closes the listener;
 * http_server_close() then closes idle connections at once, lets busy ones
 * finish their queued requests (no further requests parsed; the last
 * answer says Connection: close), and calls its callback when the last
 * connection is gone. A request whose head or body is still arriving is not in
 * flight: its connection is closed. */
#ifndef QUEEN_HTTP_SERVER_H
#define QUEEN_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"

enum http_method {
    HTTP_METHOD_OTHER = 0,
    HTTP_METHOD_GET,
    HTTP_METHOD_HEAD,
    HTTP_METHOD_POST,
    HTTP_METHOD_PUT,
    HTTP_METHOD_DELETE,
    HTTP_METHOD_PATCH,
    HTTP_METHOD_OPTIONS
};

#define HTTP_DEFAULT_PORT             6632
#define HTTP_DEFAULT_MAX_BODY_BYTES   ((size_t)64 << 20)
#define HTTP_DEFAULT_MAX_HELD_BYTES   ((size_t)64 << 20)
#define HTTP_DEFAULT_MAX_HEADER_BYTES ((size_t)64 << 10)
#define HTTP_DEFAULT_MAX_CONNECTIONS  4096
#define HTTP_DEFAULT_MAX_PIPELINED    256
#define HTTP_DEFAULT_IDLE_TIMEOUT_MS  120000
#define HTTP_DEFAULT_FIRST_HEAD_MS    10000
#define HTTP_MAX_HEADERS              64
#define HTTP_MAX_PARAMS               8

struct tls_ctx;

struct http_req;

/* A refusal of a request by its head alone (http_config.head_check). */
struct http_refusal {
    int status;
    const char *code;          /* the JSON envelope's "code" */
    const char *msg;           /* its "error"; static text */
    const char *extra_headers; /* "Name: value\r\n" lines, static, or NULL */
};

/* Called on the loop thread once the head of a request that carries a
 * body is in, before a byte of that body is read: false with *out filled
 * refuses it, and the connection answers *out and closes without reading
 * the body (a client without a token must not make the server hold up to
 * max_body_bytes for it). */
typedef bool (*http_head_check_fn)(struct http_req *req, void *arg,
                                   struct http_refusal *out);

struct http_config {
    const char *bind_addr; /* NULL = "0.0.0.0" */
    struct tls_ctx *tls;   /* borrowed (http/tls.h), outlives the server;
                              NULL = plain HTTP */
    int port;              /* 0 = any free port (see http_server_port) */
    size_t max_body_bytes; /* 0 = HTTP_DEFAULT_MAX_BODY_BYTES */
    /* The bytes of request bodies the server holds at once, over all its
     * connections: from a request's head (its Content-Length; a chunked
     * body as it grows) until it is answered or its body taken. A
     * body that would pass it while others are held waits, unread (its
     * connection stops reading), until they make room, oldest first; one
     * body alone always fits (up to max_body_bytes). 0 = default. */
    size_t max_held_bytes;
    size_t max_header_bytes;  /* request line + headers; 0 = default */
    size_t max_connections;   /* 0 = default; past it a new connection
                                 closes the one idle the longest, or is
                                 closed itself when none is idle */
    size_t max_pipelined;     /* queued requests per connection before reading
                                 pauses; 0 = default */
    uint64_t idle_timeout_ms; /* socket: close a connection with nothing in
                                 flight after this long without a byte read
                                 or written (between requests or inside
                                 one); 0 = default */
    /* socket: a connection whose first request head is not in this long
     * after it was accepted is closed, however its bytes trickle in (one
     * that sends nothing would otherwise hold one of max_connections for
     * idle_timeout_ms); 0 = default */
    uint64_t first_head_ms;
    /* With it, a connection keeps first_head_ms as its idle timeout until
     * a guard let one of its requests in (req->is_let_in): one that
     * only asks what needs no token, or is refused, cannot hold a
     * connection for idle_timeout_ms (set it when the router has a token
     * guard). */
    bool idle_needs_let_in;
    http_head_check_fn head_check; /* NULL: none */
    void *head_check_arg;          /* borrowed */
};

struct http_conn;
struct http_req;

/* Called on the loop thread once a whole request is in. Borrows req until
 * it calls http_respond*() (now or later). */
typedef void (*http_handler_fn)(struct http_req *req, void *arg);
/* Counting hook: called once per answer with its status (router metrics). */
typedef void (*http_status_fn)(void *arg, int status);

struct http_header {
    uint32_t name_off; /* into the req's head buffer, NUL-terminated */
    uint32_t value_off;
    uint32_t value_len;
};

struct http_param {
    const char *name;   /* borrowed from the route table */
    uint32_t value_off; /* into params_buf, NUL-terminated, decoded */
    uint32_t value_len;
};

struct http_req {
    enum http_method method;
    const char *method_name; /* "GET", "MKCOL"... static */
    struct slice url;        /* raw request target, NUL-terminated */
    struct slice path;       /* raw path: url up to '?', not decoded */
    struct slice query;      /* after '?' (empty when none), not decoded */
    struct slice body;       /* whole body (Content-Length or chunked) */
    int http_minor;          /* 1 for HTTP/1.1, 0 for HTTP/1.0 */
    void *user;              /* free for the handler */
    const char *route;       /* pattern the router matched, or NULL */
    const void *principal;   /* who the router's guard let in (the
                                api/auth.h entry), or NULL */
    bool is_let_in;          /* a guard checked a token and let it in (its
                                connection earned idle_timeout_ms) */

    /* Internal to server.c and router.c. */
    struct http_conn *conn;
    struct http_req *next;
    struct buf head; /* url, then header names and values, NUL-separated */
    struct buf body_buf;
    size_t held;          /* of its body, in the server's max_held_bytes */
    size_t wait_bytes;    /* while its connection waits: the bytes it needs */
    bool has_length;      /* its body has a Content-Length (else chunked) */
    bool is_continue_due; /* 100 Continue when the answers ahead of it
                             are written */
    struct http_header headers[HTTP_MAX_HEADERS];
    unsigned nheaders;
    struct http_param params[HTTP_MAX_PARAMS];
    unsigned nparams;
    struct buf params_buf;
    http_status_fn on_status;
    void *on_status_arg;
    struct buf resp; /* head without its end, then a copied body */
    size_t resp_head_len;
    char *resp_body; /* a taken body (http_respond_json); owned */
    size_t resp_body_len;
    int status; /* 0 until answered */
    bool is_answered;
    bool wants_close; /* close the connection after this answer */
    bool keep_alive;
};

/* Case-insensitive header lookup: the first value of that name,
 * NUL-terminated, or NULL. Borrowed from req. */
const char *http_req_header(const struct http_req *req, const char *name);
/* The same, for a header that decides who the caller is (a token, a
 * tenant): *is_repeated tells that the name came more than once, which the
 * caller refuses instead of taking the first (a proxy that appends its own
 * header after the client's would otherwise let the client's win). */
const char *http_req_header_sole(const struct http_req *req, const char *name,
                                 bool *is_repeated);
/* A router parameter (":ns", "*key"), percent-decoded, NUL-terminated, or
 * NULL when the route has no such parameter. Borrowed from req. */
const char *http_req_param(const struct http_req *req, const char *name);
/* Same, as a slice (decoded bytes may contain NUL). */
bool http_req_param_slice(const struct http_req *req, const char *name,
                          struct slice *out);
/* Look name up in the query string (application/x-www-form-urlencoded:
 * '&'-separated name=value pairs, names compared raw). The first value is
 * appended to out decoded ('+' is a space, then base/pct.h rule 2); a bare
 * "name" or "name=" gives "". Returns 0, ERR_NOT_FOUND when absent, or
 * ERR_TOO_BIG from out's cap. */
int http_req_query(const struct http_req *req, const char *name,
                   struct buf *out, struct err *err);
/* The identity of req's connection (for counting per connection; never
 * dereference it). Stable while req is unanswered (rule 3). */
const void *http_req_conn_id(const struct http_req *req);
/* Whether req's answer can no longer matter: the peer sent EOF or the
 * connection is closing (a half-closed peer still reads the answer). */
bool http_req_is_abandoned(const struct http_req *req);
/* Take the body without a copy: out receives the buffer (free with
 * buf_free), req->body becomes empty. */
void http_req_take_body(struct http_req *req, struct buf *out);

/* Answer req (rule 2). Copies body. status is 100..599 (not 1xx in
 * practice); content_type NULL means no Content-Type header. */
void http_respond(struct http_req *req, int status, const char *content_type,
                  const void *body, size_t len);
/* Same, plus extra header lines, each ending in "\r\n"
 * ("Retry-After: 1\r\nETag: \"3\"\r\n"), or NULL. */
void http_respond_ex(struct http_req *req, int status, const char *content_type,
                     const void *body, size_t len, const char *extra_headers);
/* Same, taking body (malloc'd, freed by the server) instead of copying. */
void http_respond_take(struct http_req *req, int status,
                       const char *content_type, char *body, size_t len,
                       const char *extra_headers);

/* ---- the socket server ---- */

struct http_server;
typedef void (*http_close_fn)(void *arg);

/* Bind and listen on cfg's address. Borrows loop; cfg is copied. Sets
 * SIGPIPE to ignored (a peer that goes away must cost an EPIPE only) and
 * tunes glibc malloc's trim and mmap thresholds (see server.c). On
 * failure the listener handle is released by the loop's next iteration. On
 * success *out is the server (freed by http_server_close). Returns 0, or
 * ERR_IO / ERR_INVALID with the address in the message. */
int http_server_start(struct http_server **out, uv_loop_t *loop,
                      const struct http_config *cfg, http_handler_fn handler,
                      void *arg, struct err *err);
/* The bound port (useful after port 0). */
int http_server_port(const struct http_server *srv);
/* Stop accepting new connections; idempotent. */
void http_server_stop_accepting(struct http_server *srv);
/* Graceful close (see the top of this file). cb(arg) runs once every
 * connection is closed (possibly before this returns, when nothing is
 * open); srv is freed right after cb returns. Call once. */
void http_server_close(struct http_server *srv, http_close_fn cb, void *arg);
/* Append the server's Prometheus families: queen_http_connections (gauge),
 * queen_http_connections_total, queen_http_connections_rejected_total and
 * queen_http_refused_total{status="400"|"413"|"431"|"501"} (answers the server
 * gave itself; the router counts everything else). */
int http_server_metrics(const struct http_server *srv, struct buf *out,
                        struct err *err);

/* ---- the connection without a socket (tests, fuzzing) ----
 *
 * io.write must write bufs in order and then call
 * http_conn_write_done(c, token) (it may do so before returning). io.close
 * means: stop reading, close, then call http_conn_closed(c) (it may do so
 * before returning). The connection frees itself once closed with nothing
 * queued and no write outstanding; io.release(c, io.arg) is called then. */
struct http_conn_io {
    void (*write)(struct http_conn *c, void *token, const uv_buf_t *bufs,
                  unsigned nbufs, void *arg);
    void (*close)(struct http_conn *c, void *arg);
    void (*release)(struct http_conn *c, void *arg);
    void (*pause)(struct http_conn *c, bool paused, void *arg); /* reads */
    void *arg;
};

/* cfg is copied; io is copied. Returns the connection. */
struct http_conn *http_conn_new(const struct http_config *cfg,
                                const struct http_conn_io *io,
                                http_handler_fn handler, void *arg);
/* Parse bytes received from the peer. */
void http_conn_feed(struct http_conn *c, const char *data, size_t len);
/* The peer sent EOF: no further request is parsed; queued requests are
 * still answered (a half-closed peer may be waiting), then it closes. */
void http_conn_peer_gone(struct http_conn *c);
/* Reading failed or the peer reset: close now, dropping answers (rule 3). */
void http_conn_abort(struct http_conn *c);
/* Whether the connection is closing (answers are being dropped). */
bool http_conn_is_closing(const struct http_conn *c);
/* Ask the connection to close once its queued requests are answered and
 * written; no further requests are parsed. Closes at once when idle. */
void http_conn_shutdown(struct http_conn *c);
void http_conn_write_done(struct http_conn *c, void *token, int status);
void http_conn_closed(struct http_conn *c);

#endif
