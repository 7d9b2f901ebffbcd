/* The forward channel: how a follower hands a write to the leader.
 *
 * The codec is a length-prefixed frame (the table in forward.h); the
 * connection reads frames off a libuv stream into one growing buffer and
 * hands each whole frame to its owner, and writes each frame as one
 * uv_write of its own copy. Nothing here knows what a command means: the
 * node decides what to propose and what to answer. */
#include "raft/forward.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "base/xalloc.h"
#include "store/schema.h"

#define FWD_READ_CHUNK 65536

int fwd_encode(struct buf *out, const struct fwd_frame *f, struct err *err)
{
    uint8_t head[FWD_HEAD_LEN + 12];
    size_t body;
    size_t hlen;
    size_t msg_len = f->msg_len > FWD_MSG_MAX ? FWD_MSG_MAX : f->msg_len;

    if (f->op == FWD_OP_PROPOSE) {
        body = 1 + f->cmd_len;
        head[FWD_HEAD_LEN] = (uint8_t)f->type;
        hlen = FWD_HEAD_LEN + 1;
    } else {
        body = 12 + msg_len;
        be32_put(head + FWD_HEAD_LEN, (uint32_t)f->code);
        be64_put(head + FWD_HEAD_LEN + 4, f->index);
        hlen = FWD_HEAD_LEN + 12;
    }
    if (body > FWD_FRAME_MAX - 9) {
        return err_set(err, ERR_TOO_BIG,
                       "forward: a frame of %zu B is over the %" PRIu32
                       " B cap",
                       body, FWD_FRAME_MAX);
    }
    be32_put(head, (uint32_t)(9 + body));
    head[4] = (uint8_t)f->op;
    be64_put(head + 5, f->id);
    if (buf_reserve(out, FWD_HEAD_LEN + body, err) != 0 ||
        buf_append(out, head, hlen, err) != 0) {
        return err->code;
    }
    if (f->op == FWD_OP_PROPOSE) {
        return buf_append(out, f->cmd, f->cmd_len, err);
    }
    return buf_append(out, f->msg, msg_len, err);
}

int fwd_decode(const void *p, size_t n, struct fwd_frame *f, size_t *used,
               struct err *err)
{
    const uint8_t *b = p;
    uint32_t len;

    if (n < 4) {
        return 0;
    }
    len = be32_get(b);
    if (len < 9 || len > FWD_FRAME_MAX) {
        err_set(err, ERR_INVALID, "forward: frame length %" PRIu32, len);
        return -1;
    }
    if (n < 5) {
        return 0;
    }
    if (b[4] != FWD_OP_PROPOSE && b[4] != FWD_OP_REPLY) {
        err_set(err, ERR_INVALID, "forward: unknown op %u", b[4]);
        return -1;
    }
    if ((b[4] == FWD_OP_PROPOSE && len < 10) ||
        (b[4] == FWD_OP_REPLY && (len < 21 || len > 21 + FWD_MSG_MAX))) {
        err_set(err, ERR_INVALID, "forward: op %u with length %" PRIu32, b[4],
                len);
        return -1;
    }
    if (n - 4 < len) {
        return 0;
    }
    memset(f, 0, sizeof(*f));
    f->op = b[4];
    f->id = be64_get(b + 5);
    if (f->op == FWD_OP_PROPOSE) {
        f->type = b[FWD_HEAD_LEN];
        f->cmd = b + FWD_HEAD_LEN + 1;
        f->cmd_len = len - 10;
    } else {
        f->code = (int)(int32_t)be32_get(b + FWD_HEAD_LEN);
        f->index = be64_get(b + FWD_HEAD_LEN + 4);
        f->msg = (const char *)b + FWD_HEAD_LEN + 12;
        f->msg_len = len - 21;
    }
    *used = 4 + (size_t)len;
    return 1;
}

/* ---- a connection --------------------------------------------------------
 */

struct fwd_conn {
    uv_stream_t *stream;
    fwd_frame_fn on_frame;
    fwd_closed_fn on_closed;
    void *arg;
    void *data;
    struct buf in;    /* bytes read, not yet a whole frame */
    size_t in_off;    /* consumed prefix of in */
    int writes;       /* uv_writes in flight */
    int close_status; /* the first failure, reported to on_closed */
    bool is_closing;
};

struct fwd_write {
    uv_write_t req;
    struct fwd_conn *conn;
    char *bytes;
};

static void conn_handle_closed(uv_handle_t *h)
{
    struct fwd_conn *c = h->data;

    c->on_closed(c->arg, c, c->close_status);
    buf_free(&c->in);
    free(c->stream);
    free(c);
}

static void conn_close(struct fwd_conn *c, int status)
{
    if (c->is_closing) {
        return;
    }
    c->is_closing = true;
    c->close_status = status;
    uv_read_stop(c->stream);
    uv_close((uv_handle_t *)c->stream, conn_handle_closed);
}

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *out)
{
    struct fwd_conn *c = h->data;
    struct err err;

    UNUSED(hint);
    if (c->in_off > 0 && c->in_off == c->in.len) {
        buf_reset(&c->in);
        c->in_off = 0;
    }
    if (buf_reserve(&c->in, FWD_READ_CHUNK, &err) != 0) {
        out->base = NULL;
        out->len = 0;
        return;
    }
    out->base = c->in.data + c->in.len;
    out->len = c->in.cap - c->in.len - 1; /* the buffer's NUL stays */
}

/* Hand every whole frame in c->in to the owner. */
static void conn_dispatch(struct fwd_conn *c)
{
    struct fwd_frame f;
    struct err err;
    size_t used;
    int rc;

    while (!c->is_closing &&
           (rc = fwd_decode(c->in.data + c->in_off, c->in.len - c->in_off, &f,
                            &used, &err)) != 0) {
        if (rc < 0) {
            conn_close(c, UV_EPROTO);
            return;
        }
        c->in_off += used;
        c->on_frame(c->arg, c, &f);
    }
    if (c->in_off > 0 && !c->is_closing) {
        /* Keep the unread tail at the front so a frame grows in place. */
        memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
}

static void conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct fwd_conn *c = s->data;

    UNUSED(b);
    if (nread < 0) {
        conn_close(c, nread == UV_EOF ? 0 : (int)nread);
        return;
    }
    if (nread == 0) {
        return;
    }
    c->in.len += (size_t)nread;
    conn_dispatch(c);
}

struct fwd_conn *fwd_conn_new(uv_stream_t *stream, fwd_frame_fn on_frame,
                              fwd_closed_fn on_closed, void *arg)
{
    struct fwd_conn *c = xcalloc(1, sizeof(*c));

    c->stream = stream;
    c->on_frame = on_frame;
    c->on_closed = on_closed;
    c->arg = arg;
    buf_init(&c->in, (size_t)FWD_FRAME_MAX + FWD_READ_CHUNK + 4);
    stream->data = c;
    if (stream->type == UV_TCP) {
        uv_tcp_nodelay((uv_tcp_t *)stream, 1);
    }
    if (uv_read_start(stream, conn_alloc, conn_read) != 0) {
        conn_close(c, UV_EIO);
    }
    return c;
}

static void conn_written(uv_write_t *req, int status)
{
    struct fwd_write *w = req->data;
    struct fwd_conn *c = w->conn;

    free(w->bytes);
    free(w);
    c->writes--;
    if (status != 0) {
        conn_close(c, status);
    }
}

int fwd_conn_send(struct fwd_conn *c, const struct fwd_frame *f,
                  struct err *err)
{
    struct buf b;
    struct fwd_write *w;
    uv_buf_t ub;
    size_t len;

    if (c->is_closing) {
        return err_set(err, ERR_BUSY, "forward: the connection is closing");
    }
    buf_init(&b, BUF_UNLIMITED);
    if (fwd_encode(&b, f, err) != 0) {
        buf_free(&b);
        return err->code;
    }
    w = xcalloc(1, sizeof(*w));
    w->conn = c;
    w->bytes = buf_steal(&b, &len);
    w->req.data = w;
    ub = uv_buf_init(w->bytes, (unsigned)len);
    if (uv_write(&w->req, c->stream, &ub, 1, conn_written) != 0) {
        free(w->bytes);
        free(w);
        conn_close(c, UV_EIO);
        return err_set(err, ERR_BUSY, "forward: write failed");
    }
    c->writes++;
    return 0;
}

void fwd_conn_close(struct fwd_conn *c)
{
    conn_close(c, 0);
}

void fwd_conn_set_data(struct fwd_conn *c, void *data)
{
    c->data = data;
}

void *fwd_conn_data(const struct fwd_conn *c)
{
    return c->data;
}
