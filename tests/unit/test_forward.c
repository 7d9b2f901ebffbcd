/* Unit tests of the forward channel (raft/forward.h): the frame codec's
 * round trips, partial input and refusals, and a connection pair over a
 * real socketpair that keeps frames whole and in order. */
#include "harness.h"

#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "base/buf.h"
#include "base/common.h"
#include "raft/forward.h"
#include "store/schema.h"

static void encode(struct buf *b, const struct fwd_frame *f)
{
    struct err err = {0};

    EXPECT_EQ_I64(fwd_encode(b, f, &err), 0);
}

TEST(a_proposal_round_trips_and_needs_every_byte)
{
    struct fwd_frame f = {.op = FWD_OP_PROPOSE,
                          .id = 0x0102030405060708,
                          .type = 3,
                          .cmd = "command-bytes",
                          .cmd_len = 13};
    struct fwd_frame g;
    struct buf b;
    struct err err = {0};
    size_t used = 0;

    buf_init(&b, BUF_UNLIMITED);
    encode(&b, &f);
    EXPECT_EQ_U64(b.len, FWD_HEAD_LEN + 1 + 13);
    for (size_t n = 0; n < b.len; n++) {
        EXPECT_EQ_I64(fwd_decode(b.data, n, &g, &used, &err), 0);
    }
    EXPECT_EQ_I64(fwd_decode(b.data, b.len, &g, &used, &err), 1);
    EXPECT_EQ_U64(used, b.len);
    EXPECT_EQ_I64(g.op, FWD_OP_PROPOSE);
    EXPECT_EQ_U64(g.id, 0x0102030405060708);
    EXPECT_EQ_I64(g.type, 3);
    EXPECT_EQ_U64(g.cmd_len, 13);
    EXPECT(memcmp(g.cmd, "command-bytes", 13) == 0);
    buf_free(&b);
}

TEST(a_reply_round_trips_its_code_index_and_capped_message)
{
    char long_msg[FWD_MSG_MAX + 100];
    struct fwd_frame f = {.op = FWD_OP_REPLY,
                          .id = 9,
                          .code = -7,
                          .index = 123456789012345,
                          .msg = "not the leader",
                          .msg_len = 14};
    struct fwd_frame g;
    struct buf b;
    struct err err = {0};
    size_t used = 0;

    buf_init(&b, BUF_UNLIMITED);
    encode(&b, &f);
    EXPECT_EQ_I64(fwd_decode(b.data, b.len, &g, &used, &err), 1);
    EXPECT_EQ_I64(g.code, -7);
    EXPECT_EQ_U64(g.index, 123456789012345);
    EXPECT_EQ_U64(g.msg_len, 14);
    EXPECT(memcmp(g.msg, "not the leader", 14) == 0);
    buf_reset(&b);
    memset(long_msg, 'x', sizeof(long_msg));
    f.msg = long_msg;
    f.msg_len = sizeof(long_msg);
    encode(&b, &f);
    EXPECT_EQ_I64(fwd_decode(b.data, b.len, &g, &used, &err), 1);
    EXPECT_EQ_U64(g.msg_len, FWD_MSG_MAX);
    buf_free(&b);
}

TEST(two_frames_in_one_read_decode_one_after_the_other)
{
    struct fwd_frame a = {
        .op = FWD_OP_PROPOSE, .id = 1, .type = 1, .cmd = "a", .cmd_len = 1};
    struct fwd_frame r = {.op = FWD_OP_REPLY, .id = 2, .index = 5};
    struct fwd_frame g;
    struct buf b;
    struct err err = {0};
    size_t used = 0;
    size_t off;

    buf_init(&b, BUF_UNLIMITED);
    encode(&b, &a);
    encode(&b, &r);
    EXPECT_EQ_I64(fwd_decode(b.data, b.len, &g, &used, &err), 1);
    EXPECT_EQ_U64(g.id, 1);
    off = used;
    EXPECT_EQ_I64(fwd_decode(b.data + off, b.len - off, &g, &used, &err), 1);
    EXPECT_EQ_U64(g.id, 2);
    EXPECT_EQ_U64(g.index, 5);
    EXPECT_EQ_U64(off + used, b.len);
    buf_free(&b);
}

TEST(malformed_frames_are_refused)
{
    uint8_t p[64];
    struct fwd_frame g;
    struct err err = {0};
    size_t used = 0;

    memset(p, 0, sizeof(p));
    be32_put(p, 8); /* under the 9-byte minimum */
    EXPECT_EQ_I64(fwd_decode(p, sizeof(p), &g, &used, &err), -1);
    be32_put(p, FWD_FRAME_MAX + 1);
    EXPECT_EQ_I64(fwd_decode(p, 4, &g, &used, &err), -1);
    be32_put(p, 20);
    p[4] = 7; /* no such op */
    EXPECT_EQ_I64(fwd_decode(p, sizeof(p), &g, &used, &err), -1);
    EXPECT(strstr(err.msg, "unknown op 7") != NULL);
    p[4] = FWD_OP_PROPOSE;
    be32_put(p, 9); /* a proposal without its type byte */
    EXPECT_EQ_I64(fwd_decode(p, sizeof(p), &g, &used, &err), -1);
    p[4] = FWD_OP_REPLY;
    be32_put(p, 20); /* a reply shorter than code + index */
    EXPECT_EQ_I64(fwd_decode(p, sizeof(p), &g, &used, &err), -1);
    be32_put(p, 21 + FWD_MSG_MAX + 1);
    EXPECT_EQ_I64(fwd_decode(p, sizeof(p), &g, &used, &err), -1);
}

/* ---- a connection pair over a socketpair -------------------------------- */

#define PAIR_FRAMES 200

struct pair {
    uv_loop_t loop;
    struct fwd_conn *a;
    struct fwd_conn *b;
    int got;
    bool is_in_order;
    size_t big_len;
    int closed;
    int close_status;
};

static void on_frame_b(void *arg, struct fwd_conn *c, const struct fwd_frame *f)
{
    struct pair *p = arg;
    size_t want = f->id == PAIR_FRAMES / 2 ? p->big_len : 8;

    UNUSED(c);
    if (f->id != (uint64_t)p->got || f->op != FWD_OP_PROPOSE ||
        f->cmd_len != want ||
        ((const uint8_t *)f->cmd)[want - 1] != (uint8_t)f->id) {
        p->is_in_order = false;
    }
    p->got++;
    if (p->got == PAIR_FRAMES) {
        fwd_conn_close(p->a);
    }
}

static void on_frame_a(void *arg, struct fwd_conn *c, const struct fwd_frame *f)
{
    UNUSED(arg);
    UNUSED(c);
    UNUSED(f);
}

static void on_closed(void *arg, struct fwd_conn *c, int status)
{
    struct pair *p = arg;

    UNUSED(c);
    p->closed++;
    if (status != 0) {
        p->close_status = status;
    }
}

static uv_stream_t *pipe_of(uv_loop_t *loop, int fd)
{
    uv_pipe_t *h = malloc(sizeof(*h));

    uv_pipe_init(loop, h, 0);
    uv_pipe_open(h, fd);
    return (uv_stream_t *)h;
}

TEST(a_connection_delivers_frames_whole_and_in_order_then_closes_once)
{
    struct pair p = {.is_in_order = true, .big_len = 5 << 20};
    uint8_t small[8] = {0};
    uint8_t *big = calloc(1, p.big_len);
    struct err err = {0};
    int fds[2];
    int64_t deadline = harness_now_ms() + HARNESS_WAIT_MS;

    EXPECT_EQ_I64(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    uv_loop_init(&p.loop);
    p.a = fwd_conn_new(pipe_of(&p.loop, fds[0]), on_frame_a, on_closed, &p);
    p.b = fwd_conn_new(pipe_of(&p.loop, fds[1]), on_frame_b, on_closed, &p);
    for (int i = 0; i < PAIR_FRAMES; i++) {
        struct fwd_frame f = {
            .op = FWD_OP_PROPOSE, .id = (uint64_t)i, .type = 1};
        bool is_big = i == PAIR_FRAMES / 2;
        uint8_t *bytes = is_big ? big : small;

        f.cmd_len = is_big ? p.big_len : sizeof(small);
        memset(bytes, i, f.cmd_len); /* filled before it is sent */
        f.cmd = bytes;
        EXPECT_EQ_I64(fwd_conn_send(p.a, &f, &err), 0);
    }
    while (p.closed < 2 && harness_now_ms() < deadline) {
        uv_run(&p.loop, UV_RUN_ONCE);
    }
    EXPECT_EQ_I64(p.got, PAIR_FRAMES);
    EXPECT(p.is_in_order);
    EXPECT_EQ_I64(p.closed, 2); /* a closed by us, b by the peer's EOF */
    EXPECT_EQ_I64(p.close_status, 0);
    uv_run(&p.loop, UV_RUN_DEFAULT);
    EXPECT_EQ_I64(uv_loop_close(&p.loop), 0);
    free(big);
}

TEST(garbage_on_the_stream_closes_the_connection_with_an_error)
{
    struct pair p = {.is_in_order = true};
    int fds[2];
    uint8_t junk[16];
    int64_t deadline = harness_now_ms() + HARNESS_WAIT_MS;

    EXPECT_EQ_I64(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    uv_loop_init(&p.loop);
    p.b = fwd_conn_new(pipe_of(&p.loop, fds[1]), on_frame_b, on_closed, &p);
    memset(junk, 0xff, sizeof(junk));
    EXPECT_EQ_I64(write(fds[0], junk, sizeof(junk)), (int64_t)sizeof(junk));
    while (p.closed < 1 && harness_now_ms() < deadline) {
        uv_run(&p.loop, UV_RUN_ONCE);
    }
    EXPECT_EQ_I64(p.closed, 1);
    EXPECT_EQ_I64(p.close_status, UV_EPROTO);
    EXPECT_EQ_I64(p.got, 0);
    close(fds[0]);
    uv_run(&p.loop, UV_RUN_DEFAULT);
    EXPECT_EQ_I64(uv_loop_close(&p.loop), 0);
}
