/* The HTTP/1.1 server: libuv for sockets, llhttp for parsing, one loop thread.
 *
 * Two layers live here. The connection (struct http_conn) is a byte-in,
 * bytes-out state machine with no socket: it parses with llhttp, queues
 * complete requests in arrival order, and hands every run of answered
 * requests at the head of the queue to io.write as one batch. The socket
 * layer (struct http_server) gives each accepted TCP connection an io that
 * calls uv_write/uv_close, so tests and the fuzzer drive the very same
 * connection code through http_conn_feed().
 *
 * Connection life:
 *
 *   OPEN --(error answered / Connection: close / EOF / shutdown)--> DRAINING
 *   OPEN, DRAINING --(last queued answer written, or abort)--> CLOSING
 *   CLOSING --(io closed: http_conn_closed)--> CLOSED
 *   CLOSED --(no req queued, no write outstanding)--> freed (io.release)
 *
 *   DRAINING is is_reading_done: no further request is parsed.
 *   CLOSING is is_closing: answers are dropped instead of written.
 *
 * Invariants:
 *   (1) q_head..q_tail holds complete requests in arrival order that are not
 *       yet handed to a write; only a run of answered requests at its head
 *       is ever written, so answers leave in request order.
 *   (2) A req is owned by exactly one of: c->cur (being parsed), the queue,
 *       or one struct http_write (being written).
 *   (3) busy > 0 while any entry point (feed, respond, write_done, closed)
 *       runs; the connection is freed only at busy == 0, so a synchronous io
 *       (tests) or a handler answering inside llhttp's callback never frees
 *       the connection under our feet.
 *   (4) Bodies declared with Content-Length are read by libuv straight into
 *       the request's body buffer (see conn_direct_target), so a large push
 *       is never copied between buffers. Not over TLS: there libuv reads
 *       ciphertext, and the plaintext is copied out of OpenSSL.
 *   (5) Over TLS (cfg.tls) the socket layer alone changes: what libuv reads
 *       goes through tls_conn_feed() before http_conn_feed(), and each
 *       io.write is encrypted whole into one uv_write (http/tls.h). Every
 *       record is queued on the socket the moment OpenSSL makes it, so the
 *       handshake, session tickets and answers leave in order. */
#include "http/server.h"

#include <inttypes.h>
#include <llhttp.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "base/pct.h"
#include "base/xalloc.h"
#include "http/resp.h"
#include "http/tls.h"

#define CONN_INLINE_BODY    16384 /* answers up to this size are copied */
#define CONN_DIRECT_MIN     16384 /* body left before reading directly */
#define SERVER_READ_BUFSIZE 65536
#define SERVER_LINGER_MS    2000 /* reading to EOF after an error answer */

struct http_write {
    uv_write_t uvw; /* socket layer only */
    struct http_conn *conn;
    struct http_req *reqs; /* written by this write; freed when done */
    bool close_after;
    unsigned nbufs;
    uv_buf_t bufs[];
};

enum conn_hdr_state { HDR_NONE, HDR_FIELD, HDR_VALUE };

/* The request bodies held at once (http_config.max_held_bytes): their
 * bytes, and the connections whose next body waits for room, oldest
 * first. One per server; a connection without one keeps its own. */
struct http_hold {
    size_t bytes;
    size_t n_waiting;
    struct http_conn *wait_head;
    struct http_conn *wait_tail;
};

struct http_conn {
    uv_tcp_t tcp;               /* socket layer only */
    uv_shutdown_t shutdown_req; /* socket layer only */
    uv_timer_t timer;           /* socket layer: idle timeout, then linger */
    int nhandles;               /* socket layer: open uv handles */
    struct http_server *srv;    /* socket layer only */
    struct tls_conn *tls;       /* socket layer (5): NULL for plain HTTP */
    struct http_conn *prev;
    struct http_conn *next;
    struct http_config cfg;
    struct http_hold *hold;      /* the bodies held: the server's */
    struct http_hold own_hold;   /* a connection without a server: its own */
    struct http_conn *wait_next; /* in hold's queue while is_waiting */
    struct http_conn *wait_prev;
    bool is_waiting; /* cur's body waits for room in hold (reads paused) */
    struct http_conn_io io;
    http_handler_fn handler;
    void *handler_arg;
    llhttp_t parser;
    llhttp_settings_t settings;
    struct http_req *cur;    /* (2) being parsed */
    struct http_req *q_head; /* (1) */
    struct http_req *q_tail;
    size_t nreqs; /* in the queue or in writes: bounds memory */
    unsigned nwrites;
    int busy; /* (3) */
    int fail_status;
    const char *fail_code;
    const char *fail_msg;
    const char *fail_extra; /* extra header lines of that answer, or NULL */
    enum conn_hdr_state hdr_state;
    bool is_head_done; /* later header callbacks are chunked trailers */
    bool in_body;      /* cur's Content-Length body is being read (4) */
    bool is_reading_done;
    bool is_closing;
    bool is_closed;
    bool is_paused;
    bool close_when_idle;
    bool has_peer_eof;
    bool is_lingering;    /* socket layer: FIN sent, discarding input */
    bool has_head;        /* a request head was in (first_head_ms is over) */
    bool has_let_in;      /* a guard let one of its requests in */
    bool is_timer_idle;   /* socket layer: the timer repeats idle_timeout_ms */
    uint64_t accepted_ms; /* socket layer: uv_now() at the accept */
    uint64_t active_seq;  /* socket layer: srv->activity at the last read
                             or completed write (the eviction's order) */
};

/* Not const: uv_buf_t wants a char *; never written. */
static char conn_continue[] = "HTTP/1.1 100 Continue\r\n\r\n";
static char conn_end_close[] = "Connection: close\r\n\r\n";
static char conn_end_keep_1_0[] = "Connection: keep-alive\r\n\r\n";
static char conn_end_keep[] = "\r\n";

static void conn_maybe_free(struct http_conn *c);
static void server_count_refused(void *arg, int status);
static void conn_flush(struct http_conn *c);
static void conn_start_close(struct http_conn *c);

/* ---- requests ---- */

static struct http_req *req_new(struct http_conn *c)
{
    struct http_req *r = xcalloc(1, sizeof(*r));
    struct err err;
    int rc;

    r->conn = c;
    r->http_minor = 1;
    r->keep_alive = true;
    r->method_name = "";
    r->url = r->path = r->query = r->body = (struct slice){"", 0};
    buf_init(&r->head, c->cfg.max_header_bytes);
    buf_init(&r->body_buf, c->cfg.max_body_bytes);
    buf_init(&r->params_buf, BUF_UNLIMITED);
    buf_init(&r->resp, BUF_UNLIMITED);
    /* one allocation for a typical head instead of a few doublings */
    rc = buf_reserve(
        &r->head,
        c->cfg.max_header_bytes < 1024 ? c->cfg.max_header_bytes : 1024, &err);
    ASSERT(rc == 0);
    return r;
}

static void hold_release(struct http_req *r);

static void req_free(struct http_req *r)
{
    hold_release(r);
    buf_free(&r->head);
    buf_free(&r->body_buf);
    buf_free(&r->params_buf);
    buf_free(&r->resp);
    free(r->resp_body);
    free(r);
}

const char *http_req_header(const struct http_req *req, const char *name)
{
    for (unsigned i = 0; i < req->nheaders; i++) {
        const struct http_header *h = &req->headers[i];

        if (strcasecmp(req->head.data + h->name_off, name) == 0) {
            return req->head.data + h->value_off;
        }
    }
    return NULL;
}

const char *http_req_header_sole(const struct http_req *req, const char *name,
                                 bool *is_repeated)
{
    const char *v = NULL;

    *is_repeated = false;
    for (unsigned i = 0; i < req->nheaders; i++) {
        const struct http_header *h = &req->headers[i];

        if (strcasecmp(req->head.data + h->name_off, name) == 0) {
            *is_repeated = v != NULL;
            if (*is_repeated) {
                break;
            }
            v = req->head.data + h->value_off;
        }
    }
    return v;
}

bool http_req_param_slice(const struct http_req *req, const char *name,
                          struct slice *out)
{
    for (unsigned i = 0; i < req->nparams; i++) {
        const struct http_param *p = &req->params[i];

        if (strcmp(p->name, name) == 0) {
            out->ptr = req->params_buf.data + p->value_off;
            out->len = p->value_len;
            return true;
        }
    }
    return false;
}

const char *http_req_param(const struct http_req *req, const char *name)
{
    struct slice s;

    return http_req_param_slice(req, name, &s) ? s.ptr : NULL;
}

/* Append the form-decoded value v[0..n) to out. */
static int query_decode(struct buf *out, const char *v, size_t n,
                        struct err *err)
{
    const char *end = v + n;

    while (v < end) {
        const char *plus = memchr(v, '+', (size_t)(end - v));
        const char *stop = plus != NULL ? plus : end;

        if (pct_unescape(out, v, (size_t)(stop - v), err) != 0 ||
            (plus != NULL && buf_append_byte(out, ' ', err) != 0)) {
            return err->code;
        }
        v = plus != NULL ? plus + 1 : end;
    }
    return 0;
}

int http_req_query(const struct http_req *req, const char *name,
                   struct buf *out, struct err *err)
{
    const char *p = req->query.ptr;
    const char *end = p + req->query.len;
    size_t nlen = strlen(name);

    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp != NULL ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *kend = eq != NULL ? eq : stop;

        if ((size_t)(kend - p) == nlen && memcmp(p, name, nlen) == 0) {
            return eq == NULL ? 0
                              : query_decode(out, eq + 1,
                                             (size_t)(stop - eq - 1), err);
        }
        p = stop + 1;
    }
    return err_set(err, ERR_NOT_FOUND, "no query parameter %s", name);
}

const void *http_req_conn_id(const struct http_req *req)
{
    return req->conn;
}

bool http_req_is_abandoned(const struct http_req *req)
{
    return req->conn->has_peer_eof || req->conn->is_closing;
}

void http_req_take_body(struct http_req *req, struct buf *out)
{
    *out = req->body_buf;
    buf_init(&req->body_buf, out->max);
    req->body = (struct slice){"", 0};
    hold_release(req); /* what the taker keeps is its own to bound */
}

static enum http_method req_method(uint8_t m)
{
    switch (m) {
    case HTTP_GET:
        return HTTP_METHOD_GET;
    case HTTP_HEAD:
        return HTTP_METHOD_HEAD;
    case HTTP_POST:
        return HTTP_METHOD_POST;
    case HTTP_PUT:
        return HTTP_METHOD_PUT;
    case HTTP_DELETE:
        return HTTP_METHOD_DELETE;
    case HTTP_PATCH:
        return HTTP_METHOD_PATCH;
    case HTTP_OPTIONS:
        return HTTP_METHOD_OPTIONS;
    default:
        return HTTP_METHOD_OTHER;
    }
}

/* ---- the queue (1) ---- */

static void queue_push(struct http_conn *c, struct http_req *r)
{
    r->next = NULL;
    if (c->q_tail != NULL) {
        c->q_tail->next = r;
    } else {
        c->q_head = r;
    }
    c->q_tail = r;
    c->nreqs++;
}

/* While closing, answered reqs are dropped instead of written (rule 3 of
 * server.h); unanswered ones wait for their handler. */
static void queue_drop_answered(struct http_conn *c)
{
    struct http_req **pp = &c->q_head;

    c->q_tail = NULL;
    while (*pp != NULL) {
        struct http_req *r = *pp;

        if (r->is_answered) {
            *pp = r->next;
            req_free(r);
            c->nreqs--;
        } else {
            c->q_tail = r;
            pp = &r->next;
        }
    }
}

/* ---- reading pace ---- */

static void conn_set_paused(struct http_conn *c, bool paused)
{
    if (c->is_paused == paused || c->io.pause == NULL) {
        return;
    }
    c->is_paused = paused;
    c->io.pause(c, paused, c->io.arg);
}

static void conn_pace(struct http_conn *c)
{
    if (c->is_closing || c->is_reading_done) {
        return;
    }
    conn_set_paused(c, c->nreqs >= c->cfg.max_pipelined || c->is_waiting);
}

/* ---- bodies held (http_config.max_held_bytes) ----
 *
 * A body is held from its head until it is answered (or its body
 * is taken): its Content-Length at once, a chunked body as it grows. A
 * body that does not fit while others are held waits: its connection stops
 * reading (TCP holds the client back) and queues; as bodies are released
 * the queue's oldest are let in while they fit, and one alone always fits.
 * The loop thread copies, parses and proposes every body it holds: ~720
 * MB of pushes arriving at once held a leader's loop past its election
 * timeout (docs/internals/http.md "Bodies held at once"). Bytes a waiting
 * connection had already read are parsed (one read at most); a body that
 * completes so while waiting is held at once, over the bound by that. */

static void hold_add(struct http_conn *c, struct http_req *r, size_t n)
{
    c->hold->bytes += n;
    r->held += n;
}

/* Whether n more bytes fit: nothing is held, or the total stays within
 * the bound. Only a body not yet held asks (at its head, or waiting). */
static bool hold_fits(const struct http_conn *c, size_t n)
{
    return c->hold->bytes == 0 || c->hold->bytes + n <= c->cfg.max_held_bytes;
}

static void hold_unwait(struct http_conn *c)
{
    struct http_hold *h = c->hold;

    if (!c->is_waiting) {
        return;
    }
    *(c->wait_prev != NULL ? &c->wait_prev->wait_next : &h->wait_head) =
        c->wait_next;
    *(c->wait_next != NULL ? &c->wait_next->wait_prev : &h->wait_tail) =
        c->wait_prev;
    c->wait_next = NULL;
    c->wait_prev = NULL;
    c->is_waiting = false;
    h->n_waiting--;
}

static void conn_maybe_continue(struct http_conn *c);

/* A body whose 100 Continue waited for the answers queued ahead of it
 * (conn_maybe_continue) gets it once they are written. */
static void conn_continue_due(struct http_conn *c)
{
    if (c->cur != NULL && c->cur->is_continue_due && c->q_head == NULL &&
        !c->is_closing && !c->is_reading_done) {
        c->cur->is_continue_due = false;
        conn_maybe_continue(c);
    }
}

/* Let the oldest waiting bodies in while they fit. */
static void hold_admit(struct http_hold *h)
{
    while (h->wait_head != NULL) {
        struct http_conn *c = h->wait_head;
        struct http_req *r = c->cur;

        bool is_gone = r == NULL || c->is_closing || c->is_reading_done;

        if (!is_gone && !hold_fits(c, r->wait_bytes)) {
            return;
        }
        hold_unwait(c);
        if (is_gone) {
            continue; /* it will never read the body */
        }
        hold_add(c, r, r->has_length ? r->wait_bytes : r->body_buf.len);
        r->wait_bytes = 0;
        conn_maybe_continue(c);
        conn_pace(c);
    }
}

/* c's body no longer waits (its connection goes, or it failed): out of
 * the queue, and those behind it may come in. */
static void hold_leave(struct http_conn *c)
{
    if (c->is_waiting) {
        hold_unwait(c);
        hold_admit(c->hold);
    }
}

/* r's body is answered or taken: its bytes go, and waiting bodies may
 * come in. The loop's work on it is done once it is answered, so an
 * answer the client is slow to read holds nothing back. */
static void hold_release(struct http_req *r)
{
    struct http_hold *h = r->conn->hold;

    if (r->held == 0) {
        return;
    }
    ASSERT(h->bytes >= r->held);
    h->bytes -= r->held;
    r->held = 0;
    hold_admit(h);
}

/* At cur's head: hold its body's n bytes (1 for a chunked body: room),
 * or queue the connection until they fit, behind any body already
 * waiting. True when held now. */
static bool hold_take_or_wait(struct http_conn *c, size_t n)
{
    struct http_hold *h = c->hold;
    struct http_req *r = c->cur;

    if (h->wait_head == NULL && hold_fits(c, n)) {
        if (r->has_length) {
            hold_add(c, r, n);
        }
        return true;
    }
    r->wait_bytes = r->has_length ? n : 0;
    c->is_waiting = true;
    c->wait_next = NULL;
    c->wait_prev = h->wait_tail;
    if (h->wait_tail != NULL) {
        h->wait_tail->wait_next = c;
    } else {
        h->wait_head = c;
    }
    h->wait_tail = c;
    h->n_waiting++;
    conn_pace(c);
    return false;
}

/* Close once nothing is left to write after the last request (DRAINING). */
static void conn_check_idle(struct http_conn *c)
{
    if (c->is_reading_done && !c->is_closing && c->q_head == NULL &&
        c->nwrites == 0) {
        conn_start_close(c);
    }
}

/* ---- answers ---- */

/* Bytes to reserve for an answer's head and inline body: one allocation. */
static size_t resp_room(const struct resp_meta *m, bool has_body)
{
    size_t n = 256;

    if (m->extra_headers != NULL) {
        n += strlen(m->extra_headers);
    }
    if (has_body && m->body_len <= CONN_INLINE_BODY) {
        n += m->body_len;
    }
    return n;
}

/* Format and queue an answer. The body is either copied (copy) or taken
 * (owned, malloc'd); m's http_minor is filled in here. */
static void respond_common(struct http_req *r, struct resp_meta *m,
                           const void *copy, char *owned)
{
    struct http_conn *c = r->conn;
    const void *body = owned != NULL ? owned : copy;
    struct err err;
    bool has_body;
    int rc;

    ASSERT(!r->is_answered); /* rule 2: one answer per request */
    r->is_answered = true;
    c->has_let_in |= r->is_let_in;
    r->status = m->status;
    if (r->on_status != NULL) {
        r->on_status(r->on_status_arg, m->status);
    }
    m->http_minor = r->http_minor;
    has_body = r->method != HTTP_METHOD_HEAD && m->body_len > 0;
    rc = buf_reserve(&r->resp, resp_room(m, has_body), &err);
    ASSERT(rc == 0); /* unlimited */
    resp_head(&r->resp, m);
    r->resp_head_len = r->resp.len;
    if (has_body && owned != NULL && m->body_len > CONN_INLINE_BODY) {
        r->resp_body = owned; /* a second buffer of the same write */
        r->resp_body_len = m->body_len;
        owned = NULL;
    } else if (has_body) {
        rc = buf_append(&r->resp, body, m->body_len, &err);
        ASSERT(rc == 0); /* unlimited */
    }
    free(owned);
    c->busy++;
    hold_release(r);
    conn_flush(c);
    conn_continue_due(c);
    c->busy--;
    conn_maybe_free(c);
}

void http_respond_take(struct http_req *req, int status,
                       const char *content_type, char *body, size_t len,
                       const char *extra_headers)
{
    struct resp_meta m = {.status = status,
                          .content_type = content_type,
                          .body_len = len,
                          .extra_headers = extra_headers};

    ASSERT(body != NULL || len == 0);
    respond_common(req, &m, NULL, body);
}

void http_respond_ex(struct http_req *req, int status, const char *content_type,
                     const void *body, size_t len, const char *extra_headers)
{
    struct resp_meta m = {.status = status,
                          .content_type = content_type,
                          .body_len = len,
                          .extra_headers = extra_headers};

    if (len > CONN_INLINE_BODY && req->method != HTTP_METHOD_HEAD) {
        respond_common(req, &m, NULL, xmemdup(body, len));
        return;
    }
    respond_common(req, &m, body, NULL);
}

void http_respond(struct http_req *req, int status, const char *content_type,
                  const void *body, size_t len)
{
    http_respond_ex(req, status, content_type, body, len, NULL);
}

/* The end of r's head, decided as it is written: whether the connection
 * stays open after it. While draining for shutdown the last queued answer
 * says close; the ones before it do not, so a pipelining client keeps
 * reading them. */
static char *conn_head_end(struct http_conn *c, struct http_req *r)
{
    bool is_last = c->close_when_idle && r->next == NULL;

    r->keep_alive = !r->wants_close && !is_last;
    if (!r->keep_alive) {
        return conn_end_close;
    }
    return r->http_minor == 0 ? conn_end_keep_1_0 : conn_end_keep;
}

/* Move one answered req from the head of the queue into w's buffers:
 * head, head end, copied body, taken body. */
static void conn_take_answer(struct http_conn *c, struct http_write *w)
{
    struct http_req *r = c->q_head;
    char *end = conn_head_end(c, r);

    c->q_head = r->next;
    w->bufs[w->nbufs++] = uv_buf_init(r->resp.data, (unsigned)r->resp_head_len);
    w->bufs[w->nbufs++] = uv_buf_init(end, (unsigned)strlen(end));
    if (r->resp.len > r->resp_head_len) {
        w->bufs[w->nbufs++] =
            uv_buf_init(r->resp.data + r->resp_head_len,
                        (unsigned)(r->resp.len - r->resp_head_len));
    }
    if (r->resp_body != NULL) {
        w->bufs[w->nbufs++] =
            uv_buf_init(r->resp_body, (unsigned)r->resp_body_len);
    }
    w->close_after = !r->keep_alive;
}

/* Hand the run of answered requests at the head of the queue to one write
 * (1): one syscall for a whole pipelined batch. */
static void conn_flush(struct http_conn *c)
{
    struct http_req *r = c->q_head;
    struct http_req *last = NULL;
    struct http_write *w;
    unsigned n = 0;

    if (c->is_closing) {
        queue_drop_answered(c);
        return;
    }
    for (; r != NULL && r->is_answered; r = r->next) {
        n++;
        last = r;
        if (r->wants_close) {
            break;
        }
    }
    if (n == 0) {
        return;
    }
    w = xcalloc(1, sizeof(*w) + 4 * (size_t)n * sizeof(uv_buf_t));
    w->conn = c;
    w->reqs = c->q_head;
    for (unsigned i = 0; i < n; i++) {
        conn_take_answer(c, w);
    }
    last->next = NULL;
    if (c->q_head == NULL) {
        c->q_tail = NULL;
    }
    if (w->close_after) {
        c->is_reading_done = true;
    }
    c->nwrites++;
    c->io.write(c, w, w->bufs, w->nbufs, c->io.arg);
}

void http_conn_write_done(struct http_conn *c, void *token, int status)
{
    struct http_write *w = token;

    c->busy++;
    while (w->reqs != NULL) {
        struct http_req *r = w->reqs;

        w->reqs = r->next;
        req_free(r);
        c->nreqs--;
    }
    c->nwrites--;
    if (status < 0 || w->close_after) {
        conn_start_close(c);
    }
    free(w);
    conn_continue_due(c);
    conn_pace(c);
    conn_check_idle(c);
    c->busy--;
    conn_maybe_free(c);
}

/* A write of static bytes carrying no request (100 Continue). */
static void conn_write_static(struct http_conn *c, char *s, size_t n)
{
    struct http_write *w = xcalloc(1, sizeof(*w) + sizeof(uv_buf_t));

    w->conn = c;
    w->bufs[0] = uv_buf_init(s, (unsigned)n);
    w->nbufs = 1;
    c->nwrites++;
    c->io.write(c, w, w->bufs, 1, c->io.arg);
}

/* ---- closing ---- */

static void conn_start_close(struct http_conn *c)
{
    if (c->is_closing) {
        return;
    }
    c->is_closing = true;
    c->is_reading_done = true;
    queue_drop_answered(c);
    c->io.close(c, c->io.arg);
}

void http_conn_closed(struct http_conn *c)
{
    c->busy++;
    c->is_closed = true;
    c->busy--;
    conn_maybe_free(c);
}

static void conn_maybe_free(struct http_conn *c)
{
    if (c->busy > 0 || !c->is_closed || c->q_head != NULL || c->nwrites > 0) {
        return;
    }
    hold_leave(c);
    if (c->cur != NULL) {
        req_free(c->cur);
        c->cur = NULL;
    }
    if (c->io.release != NULL) {
        c->io.release(c, c->io.arg);
    }
    free(c);
}

void http_conn_peer_gone(struct http_conn *c)
{
    c->busy++;
    c->has_peer_eof = true;
    c->is_reading_done = true;
    conn_check_idle(c);
    c->busy--;
    conn_maybe_free(c);
}

void http_conn_shutdown(struct http_conn *c)
{
    c->busy++;
    c->close_when_idle = true;
    c->is_reading_done = true;
    conn_check_idle(c);
    c->busy--;
    conn_maybe_free(c);
}

void http_conn_abort(struct http_conn *c)
{
    c->busy++;
    conn_start_close(c);
    c->busy--;
    conn_maybe_free(c);
}

bool http_conn_is_closing(const struct http_conn *c)
{
    return c->is_closing;
}

/* ---- parsing: llhttp callbacks ---- */

#define VERSION_REFUSED "only HTTP/1.1 and HTTP/1.0 are served"

static int conn_fail(struct http_conn *c, int status, const char *code,
                     const char *msg)
{
    if (c->fail_status == 0) {
        c->fail_status = status;
        c->fail_code = code;
        c->fail_msg = msg;
    }
    llhttp_set_error_reason(&c->parser, msg);
    return HPE_USER;
}

static int conn_head_append(struct http_conn *c, const char *at, size_t n)
{
    struct err err;

    if (buf_append(&c->cur->head, at, n, &err) != 0) {
        return conn_fail(c, 431, "header_too_large",
                         "request head over the size limit");
    }
    return 0;
}

static int on_message_begin(llhttp_t *p)
{
    struct http_conn *c = p->data;

    if (c->is_reading_done) {
        return HPE_PAUSED;
    }
    ASSERT(c->cur == NULL);
    c->cur = req_new(c);
    c->hdr_state = HDR_NONE;
    c->is_head_done = false;
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n)
{
    return conn_head_append(p->data, at, n);
}

static int on_url_complete(llhttp_t *p)
{
    struct http_conn *c = p->data;

    c->cur->url.len = c->cur->head.len;
    return conn_head_append(c, "", 1);
}

static int conn_header_done(struct http_conn *c)
{
    struct http_req *r = c->cur;
    struct http_header *h = &r->headers[r->nheaders];

    /* the whitespace after a value is not the value's (RFC 9110 5.5) */
    while (r->head.len > h->value_off &&
           (r->head.data[r->head.len - 1] == ' ' ||
            r->head.data[r->head.len - 1] == '\t')) {
        r->head.len--;
    }
    h->value_len = (uint32_t)(r->head.len - h->value_off);
    r->nheaders++;
    c->hdr_state = HDR_NONE;
    return conn_head_append(c, "", 1);
}

static int on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct http_conn *c = p->data;
    struct http_req *r = c->cur;

    if (c->is_head_done) {
        return 0; /* trailers are ignored: url and headers must not move */
    }
    if (c->hdr_state == HDR_VALUE && conn_header_done(c) != 0) {
        return HPE_USER;
    }
    if (c->hdr_state == HDR_NONE) {
        if (r->nheaders == HTTP_MAX_HEADERS) {
            return conn_fail(c, 431, "header_too_large", "too many headers");
        }
        r->headers[r->nheaders].name_off = (uint32_t)r->head.len;
        c->hdr_state = HDR_FIELD;
    }
    return conn_head_append(c, at, n);
}

static int on_header_field_complete(llhttp_t *p)
{
    struct http_conn *c = p->data;
    struct http_req *r = c->cur;

    if (c->is_head_done) {
        return 0;
    }
    const char *name = r->head.data + r->headers[r->nheaders].name_off;
    size_t name_len = r->head.len - r->headers[r->nheaders].name_off;
    /* RFC 9112 5.1; llhttp refuses a tab there itself, but passes a space
     * on as part of the name */
    if (name_len > 0 && memchr(name, ' ', name_len) != NULL) {
        return conn_fail(c, 400, "bad_request",
                         "malformed request: whitespace between a header's "
                         "name and its colon");
    }
    if (conn_head_append(c, "", 1) != 0) {
        return HPE_USER;
    }
    r->headers[r->nheaders].value_off = (uint32_t)r->head.len;
    c->hdr_state = HDR_VALUE;
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct http_conn *c = p->data;

    return c->is_head_done ? 0 : conn_head_append(c, at, n);
}

static int on_header_value_complete(llhttp_t *p)
{
    struct http_conn *c = p->data;

    if (c->is_head_done || c->hdr_state != HDR_VALUE) {
        return 0;
    }
    return conn_header_done(c);
}

/* The origin form of an absolute-form target ("http://host:port/p?q",
 * which RFC 9112 3.2.2 has a server accept): from the first '/' after the
 * authority, or "/" when the target names none. */
static struct slice target_origin(struct slice u)
{
    size_t skip = 0;

    if (u.len >= 7 && strncasecmp(u.ptr, "http://", 7) == 0) {
        skip = 7;
    } else if (u.len >= 8 && strncasecmp(u.ptr, "https://", 8) == 0) {
        skip = 8;
    } else {
        return u;
    }
    while (skip < u.len && u.ptr[skip] != '/' && u.ptr[skip] != '?') {
        skip++;
    }
    if (skip == u.len || u.ptr[skip] == '?') {
        return (struct slice){"/", 1}; /* no path: the root (its query is
                                          dropped with it) */
    }
    return (struct slice){u.ptr + skip, u.len - skip};
}

static void req_set_target(struct http_req *r)
{
    const char *q;

    r->url = target_origin((struct slice){r->head.data, r->url.len});
    q = r->url.ptr != NULL ? memchr(r->url.ptr, '?', r->url.len) : NULL;
    if (q == NULL) {
        r->path = r->url;
        r->query = (struct slice){r->url.ptr + r->url.len, 0};
        return;
    }
    r->path = (struct slice){r->url.ptr, (size_t)(q - r->url.ptr)};
    r->query = (struct slice){q + 1, r->url.len - r->path.len - 1};
}

static void conn_maybe_continue(struct http_conn *c)
{
    const char *e = http_req_header(c->cur, "expect");

    if (e == NULL || strcasecmp(e, "100-continue") != 0 ||
        c->cur->http_minor < 1) {
        return;
    }
    /* The interim answer must not pass an earlier request's answer (1):
     * with answers queued ahead, it goes once they are written
     * (conn_continue_due). */
    if (c->q_head != NULL) {
        c->cur->is_continue_due = true;
        return;
    }
    conn_write_static(c, conn_continue, sizeof(conn_continue) - 1);
}

/* Whether every transfer coding r names, over all its Transfer-Encoding
 * headers, is chunked: the only one the server decodes (RFC 9112 6.1 wants
 * a 501 for any other, not a body read as if it were plain). */
static bool req_codings_are_chunked(const struct http_req *r)
{
    for (unsigned i = 0; i < r->nheaders; i++) {
        const struct http_header *h = &r->headers[i];
        const char *v = r->head.data + h->value_off;

        if (strcasecmp(r->head.data + h->name_off, "transfer-encoding") != 0) {
            continue;
        }
        while (*v != '\0') {
            size_t n = strcspn(v, ",");
            size_t at = strspn(v, " \t");
            size_t len = n > at ? n - at : 0;

            while (len > 0 &&
                   (v[at + len - 1] == ' ' || v[at + len - 1] == '\t')) {
                len--;
            }
            if (len > 0 &&
                !(len == 7 && strncasecmp(v + at, "chunked", 7) == 0)) {
                return false;
            }
            v += v[n] == ',' ? n + 1 : n;
        }
    }
    return true;
}

static int on_headers_complete(llhttp_t *p)
{
    struct http_conn *c = p->data;
    struct http_req *r = c->cur;
    bool has_length = (p->flags & F_CONTENT_LENGTH) != 0;
    struct err err;

    if (c->hdr_state == HDR_VALUE && conn_header_done(c) != 0) {
        return -1;
    }
    if (r->head.data == NULL && conn_head_append(c, "", 1) != 0) {
        return -1;
    }
    req_set_target(r);
    c->is_head_done = true;
    c->has_head = true;
    r->method = req_method(p->method);
    r->method_name = llhttp_method_name((llhttp_method_t)p->method);
    r->http_minor = p->http_minor;
    if (p->http_major != 1) {
        /* HTTP/0.9 has no head to answer in, and HTTP/2.0 (h2c's preface
         * or a client that assumes it) is another protocol: neither is
         * served as if it were 1.x (RFC 9110 15.6.6). */
        r->http_minor = 1;
        return conn_fail(c, 505, "http_version_not_supported", VERSION_REFUSED);
    }
    if (!req_codings_are_chunked(r)) {
        conn_fail(c, 501, "not_implemented",
                  "a transfer coding other than chunked: send the body as it "
                  "is, or chunked");
        return -1;
    }
    if (has_length && p->content_length > c->cfg.max_body_bytes) {
        conn_fail(c, 413, "too_large", "request body over the size limit");
        return -1;
    }
    struct http_refusal no = {0};
    if ((has_length ? p->content_length > 0 : (p->flags & F_CHUNKED) != 0) &&
        c->cfg.head_check != NULL &&
        !c->cfg.head_check(r, c->cfg.head_check_arg, &no)) {
        c->fail_extra = no.extra_headers;
        conn_fail(c, no.status, no.code, no.msg);
        return -1;
    }
    r->has_length = has_length;
    /* a body that waits for room gets its 100 Continue when let in */
    bool is_let_in = true;
    if (has_length ? p->content_length > 0 : (p->flags & F_CHUNKED) != 0) {
        is_let_in =
            hold_take_or_wait(c, has_length ? (size_t)p->content_length : 1);
    }
    if (has_length && p->content_length > 0) {
        size_t first = p->content_length < SERVER_READ_BUFSIZE
                           ? (size_t)p->content_length
                           : SERVER_READ_BUFSIZE;

        if (buf_reserve(&r->body_buf, first, &err) != 0) {
            return -1;
        }
        c->in_body = (p->flags & F_CHUNKED) == 0;
        if (is_let_in) {
            conn_maybe_continue(c);
        }
    } else if ((p->flags & F_CHUNKED) != 0 && is_let_in) {
        conn_maybe_continue(c);
    }
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    struct http_conn *c = p->data;
    struct buf *b = &c->cur->body_buf;
    struct err err;

    /* (4) read in place: the bytes are already where they belong */
    if (b->data != NULL && at == b->data + b->len && n < b->cap - b->len) {
        b->len += n;
        b->data[b->len] = '\0';
        return 0;
    }
    if (buf_append(b, at, n, &err) != 0) {
        return conn_fail(c, 413, "too_large",
                         "request body over the size limit");
    }
    if (!c->cur->has_length && !c->is_waiting) {
        hold_add(c, c->cur, n); /* a chunked body, as it grows */
    }
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    struct http_conn *c = p->data;
    struct http_req *r = c->cur;

    c->cur = NULL;
    c->in_body = false;
    if (c->is_waiting) { /* whole in what was read: held at once */
        hold_unwait(c);
        hold_add(c, r, r->has_length ? r->wait_bytes : r->body_buf.len);
        r->wait_bytes = 0;
        hold_admit(c->hold);
        conn_pace(c);
    }
    if (r->body_buf.data != NULL) {
        r->body = buf_slice(&r->body_buf);
    }
    r->keep_alive = llhttp_should_keep_alive(p);
    if (!r->keep_alive || p->upgrade) {
        /* We speak no upgraded protocol: answer, then close. */
        r->keep_alive = false;
        r->wants_close = true;
        c->is_reading_done = true;
    }
    queue_push(c, r);
    c->handler(r, c->handler_arg);
    conn_pace(c);
    return c->is_reading_done ? HPE_PAUSED : 0;
}

/* Answer a parse failure ourselves (server.h rule 4), then close. */
static void conn_parse_error(struct http_conn *c, llhttp_errno_t rc)
{
    struct http_req *r = c->cur != NULL ? c->cur : req_new(c);
    int status = c->fail_status != 0 ? c->fail_status : 400;
    const char *code = c->fail_code != NULL ? c->fail_code : "bad_request";
    char msg[160];

    c->cur = NULL;
    c->in_body = false;
    c->is_reading_done = true;
    hold_leave(c); /* a waiting body that failed in what was read */
    if (c->fail_msg != NULL) {
        snprintf(msg, sizeof(msg), "%s", c->fail_msg);
    } else {
        snprintf(msg, sizeof(msg), "malformed request: %s (%s)",
                 llhttp_get_error_reason(&c->parser), llhttp_errno_name(rc));
    }
    if (c->fail_status == 0) {
        c->fail_status = status;
    }
    r->method = HTTP_METHOD_OTHER; /* a HEAD's error still has a body */
    r->wants_close = true;
    if (r->on_status == NULL) { /* a head check's refusal counts its own */
        r->on_status = c->srv != NULL ? server_count_refused : NULL;
        r->on_status_arg = c->srv;
    }
    queue_push(c, r);
    if (c->fail_extra != NULL) {
        http_respond_error_ex(r, status, code, msg, c->fail_extra);
    } else {
        http_respond_error(r, status, code, msg);
    }
}

void http_conn_feed(struct http_conn *c, const char *data, size_t len)
{
    llhttp_errno_t rc;

    if (c->is_reading_done || len == 0) {
        return;
    }
    c->busy++;
    rc = llhttp_execute(&c->parser, data, len);
    if (rc == HPE_PAUSED_UPGRADE) {
        c->is_reading_done = true;
    } else if (rc == HPE_PAUSED_H2_UPGRADE) {
        /* h2c's prior-knowledge preface (PRI * HTTP/2.0) */
        if (c->cur != NULL) {
            c->cur->http_minor = 1;
        }
        conn_fail(c, 505, "http_version_not_supported", VERSION_REFUSED);
        conn_parse_error(c, rc);
    } else if (rc != HPE_OK && !(rc == HPE_PAUSED && c->is_reading_done)) {
        conn_parse_error(c, rc);
    }
    c->busy--;
    conn_maybe_free(c);
}

static void config_defaults(struct http_config *cfg)
{
    if (cfg->max_body_bytes == 0) {
        cfg->max_body_bytes = HTTP_DEFAULT_MAX_BODY_BYTES;
    }
    if (cfg->max_held_bytes == 0) {
        cfg->max_held_bytes = HTTP_DEFAULT_MAX_HELD_BYTES;
    }
    if (cfg->max_header_bytes == 0) {
        cfg->max_header_bytes = HTTP_DEFAULT_MAX_HEADER_BYTES;
    }
    if (cfg->max_connections == 0) {
        cfg->max_connections = HTTP_DEFAULT_MAX_CONNECTIONS;
    }
    if (cfg->max_pipelined == 0) {
        cfg->max_pipelined = HTTP_DEFAULT_MAX_PIPELINED;
    }
    if (cfg->idle_timeout_ms == 0) {
        cfg->idle_timeout_ms = HTTP_DEFAULT_IDLE_TIMEOUT_MS;
    }
    if (cfg->first_head_ms == 0) {
        cfg->first_head_ms = HTTP_DEFAULT_FIRST_HEAD_MS;
    }
}

struct http_conn *http_conn_new(const struct http_config *cfg,
                                const struct http_conn_io *io,
                                http_handler_fn handler, void *arg)
{
    struct http_conn *c = xcalloc(1, sizeof(*c));

    c->cfg = *cfg;
    config_defaults(&c->cfg);
    c->hold = &c->own_hold;
    c->io = *io;
    c->handler = handler;
    c->handler_arg = arg;
    llhttp_settings_init(&c->settings);
    c->settings.on_message_begin = on_message_begin;
    c->settings.on_url = on_url;
    c->settings.on_url_complete = on_url_complete;
    c->settings.on_header_field = on_header_field;
    c->settings.on_header_field_complete = on_header_field_complete;
    c->settings.on_header_value = on_header_value;
    c->settings.on_header_value_complete = on_header_value_complete;
    c->settings.on_headers_complete = on_headers_complete;
    c->settings.on_body = on_body;
    c->settings.on_message_complete = on_message_complete;
    llhttp_init(&c->parser, HTTP_REQUEST, &c->settings);
    c->parser.data = c;
    return c;
}

/* (4) Where libuv may read next: straight into the body of the request
 * being parsed when enough of its Content-Length is still to come. Never
 * past the body, so the next request's bytes go to the shared buffer. */
static bool conn_direct_target(struct http_conn *c, uv_buf_t *out)
{
    struct buf *b;
    uint64_t left = c->parser.content_length;
    struct err err;
    size_t room;

    if (!c->in_body || c->cur == NULL || c->is_reading_done ||
        left < CONN_DIRECT_MIN) {
        return false;
    }
    b = &c->cur->body_buf;
    if (buf_reserve(b, (size_t)left, &err) != 0) {
        return false;
    }
    room = b->cap - b->len - 1;
    out->base = b->data + b->len;
    out->len = room < left ? room : (size_t)left;
    return true;
}

/* ---- the socket server ---- */

struct http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    struct http_config cfg;
    http_handler_fn handler;
    void *handler_arg;
    struct http_conn *conns;
    size_t nconns;
    uint64_t accepted_total;
    uint64_t rejected_total;
    uint64_t evicted_total;
    uint64_t activity; /* counts reads and completed writes: a total order,
                          where uv_now()'s milliseconds tie */
    uint64_t refused_total[5]; /* by the server: 400, 413, 431, 501, 505 */
    struct http_hold hold; /* the bodies held (http_config.max_held_bytes) */
    int port;
    bool is_listening; /* the listener handle is open */
    bool is_closing;
    http_close_fn close_cb;
    void *close_arg;
    struct buf plain; /* (5) shared like rbuf: decrypted bytes of one read */
    char rbuf[SERVER_READ_BUFSIZE]; /* shared: read_cb consumes it at once */
};

static const int server_refused_status[5] = {400, 413, 431, 501, 505};

static void server_count_refused(void *arg, int status)
{
    struct http_server *srv = arg;

    for (size_t i = 0; i < ARRAY_LEN(server_refused_status); i++) {
        if (server_refused_status[i] == status) {
            srv->refused_total[i]++;
        }
    }
}

static void server_maybe_done(struct http_server *srv)
{
    if (!srv->is_closing || srv->is_listening || srv->nconns > 0) {
        return;
    }
    if (srv->close_cb != NULL) {
        srv->close_cb(srv->close_arg);
    }
    buf_free(&srv->plain);
    free(srv);
}

static void sock_handle_gone(struct http_conn *c)
{
    if (--c->nhandles == 0) {
        http_conn_closed(c);
    }
}

static void sock_on_closed(uv_handle_t *h)
{
    sock_handle_gone(container_of(h, struct http_conn, tcp));
}

static void sock_on_timer_closed(uv_handle_t *h)
{
    sock_handle_gone(container_of(h, struct http_conn, timer));
}

static void sock_close_now(struct http_conn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) {
        uv_close((uv_handle_t *)&c->tcp, sock_on_closed);
    }
    if (!uv_is_closing((uv_handle_t *)&c->timer)) {
        uv_close((uv_handle_t *)&c->timer, sock_on_timer_closed);
    }
}

/* Idle timeout: a connection with nothing queued or being written and no
 * byte received for idle_timeout_ms is closed, whether it sits between
 * requests or in the middle of one (a slow or stalled client). One with a
 * request being handled waits for it. Before its first request head the
 * timer repeats first_head_ms (sock_read keeps the deadline from the
 * accept). While lingering: close. */
static void sock_timer_expired(uv_timer_t *t)
{
    struct http_conn *c = container_of(t, struct http_conn, timer);

    if (c->is_lingering) {
        sock_close_now(c);
    } else if (!c->is_waiting &&
               (!c->has_head || (c->q_head == NULL && c->nwrites == 0))) {
        /* a body waiting for room reads nothing on purpose: kept */
        http_conn_abort(c);
    } else {
        uv_timer_again(t);
    }
}

static void sock_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct http_conn *c = container_of(h, struct http_conn, tcp);

    UNUSED(suggested);
    if (c->tls != NULL || !conn_direct_target(c, buf)) {
        buf->base = c->srv->rbuf;
        buf->len = sizeof(c->srv->rbuf);
    }
}

/* (5) One uv_write of TLS records: an encrypted answer (token is its
 * struct http_write) or what the handshake made (token NULL). */
struct sock_tls_write {
    uv_write_t uvw;
    struct http_conn *conn;
    void *token;
    struct buf wire;
};

static void sock_on_tls_write(uv_write_t *req, int status)
{
    struct sock_tls_write *w = container_of(req, struct sock_tls_write, uvw);
    struct http_conn *c = w->conn;
    void *token = w->token;

    buf_free(&w->wire);
    free(w);
    if (token == NULL) {
        return;
    }
    c->active_seq = ++c->srv->activity;
    if (!c->is_lingering && !uv_is_closing((uv_handle_t *)&c->timer)) {
        uv_timer_again(&c->timer);
    }
    http_conn_write_done(c, token, status);
}

/* Queue wire (taken) on the socket; with a token, report it done. */
static void sock_tls_send(struct http_conn *c, void *token, struct buf *wire)
{
    struct sock_tls_write *w;
    uv_buf_t b;
    int rc;

    if (wire->len == 0) {
        buf_free(wire);
        if (token != NULL) {
            http_conn_write_done(c, token, 0);
        }
        return;
    }
    w = xcalloc(1, sizeof(*w));
    w->conn = c;
    w->token = token;
    w->wire = *wire;
    b = uv_buf_init(w->wire.data, (unsigned)w->wire.len);
    rc = uv_write(&w->uvw, (uv_stream_t *)&c->tcp, &b, 1, sock_on_tls_write);
    if (rc < 0) {
        buf_free(&w->wire);
        free(w);
        if (token != NULL) {
            http_conn_write_done(c, token, rc);
        }
    }
}

static void sock_read_tls(struct http_conn *c, const char *p, size_t n)
{
    struct buf *plain = &c->srv->plain;
    struct buf wire;
    struct err err;
    int rc;

    buf_init(&wire, BUF_UNLIMITED);
    buf_reset(plain);
    rc = tls_conn_feed(c->tls, p, n, plain, &wire, &err);
    sock_tls_send(c, NULL, &wire);
    if (rc != 0) {
        log_debug("http", "%s", err.msg);
        http_conn_abort(c);
        return;
    }
    /* A close_notify needs nothing here: the FIN after it is the EOF. */
    if (plain->len > 0) {
        http_conn_feed(c, plain->data, plain->len);
    }
}

/* The timer repeats first_head_ms until c earned idle_timeout_ms: a head
 * in, and (idle_needs_let_in) a request a guard let in. */
static void sock_timer_settle(struct http_conn *c)
{
    if (c->is_timer_idle || !c->has_head ||
        (c->srv->cfg.idle_needs_let_in && !c->has_let_in) ||
        uv_is_closing((uv_handle_t *)&c->timer)) {
        return;
    }
    c->is_timer_idle = true;
    uv_timer_set_repeat(&c->timer, c->srv->cfg.idle_timeout_ms);
    uv_timer_again(&c->timer);
}

static void sock_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *c = container_of(s, struct http_conn, tcp);

    if (nread > 0) {
        if (c->is_lingering) {
            return;
        }
        if (!c->has_head && uv_now(c->srv->loop) - c->accepted_ms >=
                                c->srv->cfg.first_head_ms) {
            http_conn_abort(c); /* a head trickling in */
            return;
        }
        uv_timer_again(&c->timer);
        c->active_seq = ++c->srv->activity;
        c->busy++; /* (3): c outlives the feed, whatever it closes */
        if (c->tls != NULL) {
            sock_read_tls(c, buf->base, (size_t)nread);
        } else {
            http_conn_feed(c, buf->base, (size_t)nread);
        }
        /* the analyzer does not follow busy across the feed's own +1/-1 */
        /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
        sock_timer_settle(c);
        c->busy--;
        conn_maybe_free(c);
        return;
    }
    if (nread == 0) {
        return;
    }
    if (c->is_lingering) {
        sock_close_now(c);
    } else if (nread == UV_EOF) {
        http_conn_peer_gone(c);
    } else {
        http_conn_abort(c);
    }
}

static void sock_on_write(uv_write_t *req, int status)
{
    struct http_write *w = container_of(req, struct http_write, uvw);
    struct http_conn *c = w->conn;

    c->active_seq = ++c->srv->activity;
    if (!c->is_lingering && !uv_is_closing((uv_handle_t *)&c->timer)) {
        sock_timer_settle(c);
        uv_timer_again(&c->timer);
    }
    http_conn_write_done(c, w, status);
}

/* (5) Encrypt one io.write whole: one buffer, one uv_write. */
static void sock_write_tls(struct http_conn *c, void *token,
                           const uv_buf_t *bufs, unsigned nbufs)
{
    struct buf wire;
    struct err err;
    size_t total = 0;

    for (unsigned i = 0; i < nbufs; i++) {
        total += bufs[i].len;
    }
    buf_init(&wire, BUF_UNLIMITED);
    /* the records' headers, IVs and tags: under 64 bytes a record */
    if (buf_reserve(&wire, total + (total / 16384 + 1) * 64, &err) != 0 ||
        tls_conn_encrypt(c->tls, bufs, nbufs, &wire, &err) != 0) {
        log_debug("http", "%s", err.msg);
        buf_free(&wire);
        http_conn_write_done(c, token, UV_EPROTO);
        return;
    }
    sock_tls_send(c, token, &wire);
}

static void sock_write(struct http_conn *c, void *token, const uv_buf_t *bufs,
                       unsigned nbufs, void *arg)
{
    struct http_write *w = token;
    int rc;

    UNUSED(arg);
    if (c->tls != NULL) {
        sock_write_tls(c, w, bufs, nbufs);
        return;
    }
    rc = uv_write(&w->uvw, (uv_stream_t *)&c->tcp, bufs, nbufs, sock_on_write);
    if (rc < 0) {
        http_conn_write_done(c, w, rc);
    }
}

static void sock_on_shutdown(uv_shutdown_t *req, int status)
{
    struct http_conn *c = container_of(req, struct http_conn, shutdown_req);

    if (status < 0) {
        sock_close_now(c);
    }
}

/* After an error answer the peer may still be sending the body we refused;
 * closing at once would make the kernel send a reset that can destroy our
 * answer before the peer reads it. So send FIN and read to EOF first, for
 * at most SERVER_LINGER_MS. */
static void sock_close(struct http_conn *c, void *arg)
{
    struct http_server *srv = arg;
    uv_stream_t *s = (uv_stream_t *)&c->tcp;

    if (c->tls != NULL && !uv_is_closing((uv_handle_t *)s)) {
        struct buf wire;

        buf_init(&wire, BUF_UNLIMITED);
        tls_conn_close_notify(c->tls, &wire);
        sock_tls_send(c, NULL, &wire);
    }
    if (c->fail_status != 0 && !c->has_peer_eof && !srv->is_closing &&
        uv_shutdown(&c->shutdown_req, s, sock_on_shutdown) == 0) {
        c->is_lingering = true;
        uv_timer_start(&c->timer, sock_timer_expired, SERVER_LINGER_MS, 0);
        if (c->is_paused) {
            uv_read_start(s, sock_alloc, sock_read);
        }
        return;
    }
    uv_read_stop(s);
    sock_close_now(c);
}

static void sock_pause(struct http_conn *c, bool paused, void *arg)
{
    UNUSED(arg);
    if (paused) {
        uv_read_stop((uv_stream_t *)&c->tcp);
    } else {
        uv_read_start((uv_stream_t *)&c->tcp, sock_alloc, sock_read);
    }
}

static void sock_release(struct http_conn *c, void *arg)
{
    struct http_server *srv = arg;

    tls_conn_free(c->tls);
    c->tls = NULL;
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        srv->conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    srv->nconns--;
    server_maybe_done(srv);
}

/* Whether c sits between requests: no request being read, queued,
 * handled or written (a parked long poll is queued), and not closing. */
static bool conn_is_idle(const struct http_conn *c)
{
    return !c->is_closing && !c->is_lingering && c->cur == NULL &&
           c->q_head == NULL && c->nwrites == 0;
}

/* At the connection limit, the connection idle the longest (not fresh)
 * makes room: a client keeping a connection it does not use must not lock
 * out one that has a request to send. Closing an idle keep-alive
 * connection is the server's right (RFC 9112 9.5); its client reconnects.
 * Whether one was closed. */
static bool server_evict_idle(struct http_server *srv,
                              const struct http_conn *fresh)
{
    struct http_conn *victim = NULL;

    for (struct http_conn *c = srv->conns; c != NULL; c = c->next) {
        if (c != fresh && conn_is_idle(c) &&
            (victim == NULL || c->active_seq < victim->active_seq)) {
            victim = c;
        }
    }
    if (victim == NULL) {
        return false;
    }
    srv->evicted_total++;
    http_conn_abort(victim);
    return true;
}

/* The connections the limit counts: those not already closing, and those
 * lingering after an error answer (their socket stays open up to
 * SERVER_LINGER_MS, so a client sending one bad request after another
 * cannot hold more sockets than the limit). */
static size_t server_live_conns(const struct http_server *srv)
{
    size_t n = 0;

    for (const struct http_conn *c = srv->conns; c != NULL; c = c->next) {
        n += !c->is_closing || c->is_lingering;
    }
    return n;
}

static void server_on_connection(uv_stream_t *listener, int status)
{
    struct http_server *srv =
        container_of(listener, struct http_server, listener);
    struct http_conn_io io = {sock_write, sock_close, sock_release, sock_pause,
                              srv};
    struct http_conn *c;

    if (status < 0) {
        log_warn("http", "accept: %s", uv_strerror(status));
        return;
    }
    c = http_conn_new(&srv->cfg, &io, srv->handler, srv->handler_arg);
    c->srv = srv;
    c->hold = &srv->hold;
    c->next = srv->conns;
    if (srv->conns != NULL) {
        srv->conns->prev = c;
    }
    srv->conns = c;
    srv->nconns++;
    uv_tcp_init(srv->loop, &c->tcp);
    uv_timer_init(srv->loop, &c->timer);
    c->nhandles = 2;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0 ||
        (srv->nconns > srv->cfg.max_connections &&
         server_live_conns(srv) > srv->cfg.max_connections &&
         !server_evict_idle(srv, c))) {
        srv->rejected_total++;
        http_conn_abort(c);
        return;
    }
    srv->accepted_total++;
    if (srv->cfg.tls != NULL) {
        c->tls = tls_conn_new(srv->cfg.tls);
    }
    c->accepted_ms = uv_now(srv->loop);
    c->active_seq = ++srv->activity;
    uv_timer_start(&c->timer, sock_timer_expired, srv->cfg.first_head_ms,
                   srv->cfg.first_head_ms);
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, sock_alloc, sock_read);
}

static int server_bind(struct http_server *srv, struct err *err)
{
    const char *addr = srv->cfg.bind_addr ? srv->cfg.bind_addr : "0.0.0.0";
    struct sockaddr_storage ss;
    int namelen = sizeof(ss);
    int rc;

    if (uv_ip4_addr(addr, srv->cfg.port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(addr, srv->cfg.port, (struct sockaddr_in6 *)&ss) != 0) {
        return err_set(err, ERR_INVALID, "http: bad bind address %s", addr);
    }
    rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&ss, 0);
    if (rc == 0) {
        rc = uv_listen((uv_stream_t *)&srv->listener, 1024,
                       server_on_connection);
    }
    if (rc != 0) {
        return err_set(err, ERR_IO, "http: listen on %s:%d: %s", addr,
                       srv->cfg.port, uv_strerror(rc));
    }
    uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&ss, &namelen);
    srv->port =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

static void server_free_cb(uv_handle_t *h)
{
    free(container_of(h, struct http_server, listener));
}

int http_server_start(struct http_server **out, uv_loop_t *loop,
                      const struct http_config *cfg, http_handler_fn handler,
                      void *arg, struct err *err)
{
    struct http_server *srv = xcalloc(1, sizeof(*srv));

    /* A peer that closes early must cost an EPIPE, not the process. */
    signal(SIGPIPE, SIG_IGN);
    /* Request and answer buffers of tens of KiB come and go by the
     * thousand per second; glibc's default trimming hands the heap top back
     * to the kernel and faults it in again each time (bench/http.sh measured
     * 3x fewer 20 KiB echoes/s with 64 connections). Keep up to 64 MiB of
     * free heap; buffers of 4 MiB or more are mapped and returned at once. */
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
    srv->loop = loop;
    srv->cfg = *cfg;
    config_defaults(&srv->cfg);
    srv->handler = handler;
    srv->handler_arg = arg;
    buf_init(&srv->plain, BUF_UNLIMITED);
    uv_tcp_init(loop, &srv->listener);
    if (server_bind(srv, err) != 0) {
        uv_close((uv_handle_t *)&srv->listener, server_free_cb);
        return err->code;
    }
    srv->is_listening = true;
    *out = srv;
    return 0;
}

int http_server_port(const struct http_server *srv)
{
    return srv->port;
}

static void server_on_listener_closed(uv_handle_t *h)
{
    struct http_server *srv = container_of(h, struct http_server, listener);

    srv->is_listening = false;
    server_maybe_done(srv);
}

void http_server_stop_accepting(struct http_server *srv)
{
    if (!uv_is_closing((uv_handle_t *)&srv->listener)) {
        uv_close((uv_handle_t *)&srv->listener, server_on_listener_closed);
    }
}

void http_server_close(struct http_server *srv, http_close_fn cb, void *arg)
{
    struct http_conn *c = srv->conns;

    ASSERT(!srv->is_closing);
    srv->is_closing = true;
    srv->close_cb = cb;
    srv->close_arg = arg;
    http_server_stop_accepting(srv);
    while (c != NULL) {
        struct http_conn *next = c->next;

        if (c->is_lingering) {
            sock_close_now(c);
        } else {
            http_conn_shutdown(c);
        }
        c = next;
    }
    server_maybe_done(srv);
}

int http_server_metrics(const struct http_server *srv, struct buf *out,
                        struct err *err)
{
    return buf_printf(
        out, err,
        "# HELP queen_http_connections Open HTTP connections.\n"
        "# TYPE queen_http_connections gauge\n"
        "queen_http_connections %zu\n"
        "# HELP queen_http_connections_total HTTP connections accepted.\n"
        "# TYPE queen_http_connections_total counter\n"
        "queen_http_connections_total %" PRIu64 "\n"
        "# HELP queen_http_connections_rejected_total HTTP connections "
        "closed at once (over the connection limit, none idle to close).\n"
        "# TYPE queen_http_connections_rejected_total counter\n"
        "queen_http_connections_rejected_total %" PRIu64 "\n"
        "# HELP queen_http_connections_evicted_total Idle HTTP connections "
        "closed to make room for a new one at the connection limit.\n"
        "# TYPE queen_http_connections_evicted_total counter\n"
        "queen_http_connections_evicted_total %" PRIu64 "\n"
        "# HELP queen_http_refused_total Requests the server answered "
        "itself (malformed, body or head over the limit, a transfer "
        "coding it does not decode, an HTTP version it does not speak).\n"
        "# TYPE queen_http_refused_total counter\n"
        "queen_http_refused_total{status=\"400\"} %" PRIu64 "\n"
        "queen_http_refused_total{status=\"413\"} %" PRIu64 "\n"
        "queen_http_refused_total{status=\"431\"} %" PRIu64 "\n"
        "queen_http_refused_total{status=\"501\"} %" PRIu64 "\n"
        "queen_http_refused_total{status=\"505\"} %" PRIu64 "\n"
        "# HELP queen_http_body_bytes_held Bytes of request bodies the "
        "server holds now, from their heads until their answers "
        "(QUEEN_MAX_HELD_BODY_BYTES bounds them).\n"
        "# TYPE queen_http_body_bytes_held gauge\n"
        "queen_http_body_bytes_held %zu\n"
        "# HELP queen_http_bodies_waiting Connections whose request body "
        "waits, unread, for the bodies held to make room.\n"
        "# TYPE queen_http_bodies_waiting gauge\n"
        "queen_http_bodies_waiting %zu\n",
        srv->nconns, srv->accepted_total, srv->rejected_total,
        srv->evicted_total, srv->refused_total[0], srv->refused_total[1],
        srv->refused_total[2], srv->refused_total[3], srv->refused_total[4],
        srv->hold.bytes, srv->hold.n_waiting);
}
