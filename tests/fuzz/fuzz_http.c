/* Fuzz target: bytes from a peer into one HTTP connection (no socket).
 *
 * The first input byte picks how the rest is cut into feeds (1..63 bytes,
 * or all at once), whether writes complete at once or later (0x80) and
 * whether a graceful shutdown starts once the input is in (0x40); requests go
 * through the router, whose handlers answer at once or defer the answer
 * until the input is exhausted. Every deferred request is then answered in
 * reverse order and the connection aborted, so leaks and ordering bugs show
 * up under ASan. Checks: every write begins with a status line, and the
 * connection is released exactly once. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "http/resp.h"
#include "http/router.h"
#include "http/server.h"

struct fz {
    struct http_req *deferred[64];
    int ndeferred;
    void *held[64];
    int nheld;
    bool defer_writes;
    int released;
    struct http_conn *c;
};

static void fz_write(struct http_conn *c, void *token, const uv_buf_t *bufs,
                     unsigned nbufs, void *arg)
{
    struct fz *f = arg;

    ASSERT(nbufs >= 1 && bufs[0].len >= 12);
    ASSERT(memcmp(bufs[0].base, "HTTP/1.", 7) == 0);
    if (f->defer_writes && f->nheld < 64) {
        f->held[f->nheld++] = token;
        return;
    }
    http_conn_write_done(c, token, 0);
}

static void fz_close(struct http_conn *c, void *arg)
{
    UNUSED(arg);
    http_conn_closed(c);
}

static void fz_release(struct http_conn *c, void *arg)
{
    struct fz *f = arg;

    UNUSED(c);
    f->released++;
}

static void h_now(struct http_req *req, void *arg)
{
    const char *v = http_req_param(req, "key");
    struct buf q;
    struct err err;

    UNUSED(arg);
    buf_init(&q, 64);
    http_req_query(req, "a", &q, &err);
    buf_free(&q);
    http_respond(req, 200, "text/plain", v != NULL ? v : "", v ? strlen(v) : 0);
}

static void h_later(struct http_req *req, void *arg)
{
    struct fz *f = arg;

    if (f->ndeferred == 64) {
        http_respond_error(req, 503, "busy", "too many deferred");
        return;
    }
    f->deferred[f->ndeferred++] = req;
}

static struct router *fz_router(struct fz *f)
{
    struct router *r = router_new();
    struct err err;

    router_add(r, HTTP_METHOD_GET, "/now/:ns/*key", h_now, f, &err);
    router_add(r, HTTP_METHOD_POST, "/now", h_now, f, &err);
    router_add(r, HTTP_METHOD_GET, "/later", h_later, f, &err);
    router_add(r, HTTP_METHOD_POST, "/later/:x", h_later, f, &err);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct http_config cfg = {
        .max_body_bytes = 4096, .max_header_bytes = 1024, .max_pipelined = 8};
    struct fz f;
    struct http_conn_io io = {fz_write, fz_close, fz_release, NULL, &f};
    struct router *r;
    size_t step;
    bool is_shutdown;

    if (size < 1) {
        return 0;
    }
    memset(&f, 0, sizeof(f));
    f.defer_writes = (data[0] & 0x80) != 0;
    is_shutdown = (data[0] & 0x40) != 0;
    step = (data[0] & 0x3f) == 0 ? size : (size_t)(data[0] & 0x3f);
    data++;
    size--;
    r = fz_router(&f);
    f.c = http_conn_new(&cfg, &io, router_dispatch, r);
    for (size_t off = 0; off < size && f.released == 0; off += step) {
        size_t n = size - off < step ? size - off : step;

        http_conn_feed(f.c, (const char *)data + off, n);
    }
    if (is_shutdown && f.released == 0) {
        http_conn_shutdown(f.c); /* graceful stop with answers pending */
    }
    for (int i = f.ndeferred - 1; i >= 0; i--) {
        http_respond(f.deferred[i], 202, NULL, NULL, 0);
    }
    for (int i = 0; i < f.nheld; i++) {
        http_conn_write_done(f.c, f.held[i], 0);
    }
    if (f.released == 0) {
        http_conn_abort(f.c);
    }
    ASSERT(f.released == 1);
    router_free(r);
    return 0;
}
