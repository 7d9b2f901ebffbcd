/* Unit tests for src/raft/transport.c: real sockets on 127.0.0.1, a real
 * libuv loop, and a real libraft cluster of three voters in one process. */
#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "harness.h"
#include "node_helpers.h"
#include "raft/transport.h"

#define TOKEN "s3cret-token-for-tests"

/* ---- a loop driven until a condition holds ------------------------------ */

typedef bool (*cond_fn)(void *arg);

/* Run loop until cond(arg) holds or HARNESS_WAIT_MS passed; returns cond. */
static bool run_until(uv_loop_t *loop, cond_fn cond, void *arg)
{
    int64_t deadline = harness_now_ms() + HARNESS_WAIT_MS;

    while (!cond(arg) && harness_now_ms() < deadline) {
        uv_run(loop, UV_RUN_NOWAIT);
        poll(NULL, 0, 1);
    }
    return cond(arg);
}

static bool loop_idle(void *arg)
{
    return !uv_loop_alive(arg);
}

static bool flag_set(void *arg)
{
    return *(bool *)arg;
}

/* ---- one transport that only serves channels ---------------------------- */

#define PAYLOAD_LEN 100000

struct side {
    uv_loop_t *loop;
    struct raft_uv_transport t;
    uint64_t id;
    char address[64];
    /* what a channel or dial delivered */
    uv_stream_t *stream;
    int n_streams;
    int status;
    bool has_dialed;
    uint64_t peer_id;
    uint8_t *got;
    size_t n_got;
    bool is_closed;
};

static void closed_cb(struct raft_uv_transport *t)
{
    struct side *s = container_of(t, struct side, t);

    s->is_closed = true;
}

static void side_open(struct side *s, uv_loop_t *loop, const char *token,
                      uint64_t id, bool is_listening, unsigned timeout_ms)
{
    struct rtransport_config cfg = {NULL, token, timeout_ms};
    struct err err = {0};

    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->id = id;
    snprintf(s->address, sizeof(s->address), "127.0.0.1:%d", nh_free_port());
    if (rtransport_init(&s->t, loop, &cfg, &err) != 0) {
        fprintf(stderr, "rtransport_init: %s\n", err.msg);
        exit(1);
    }
    if (s->t.init(&s->t, id, s->address) != 0 ||
        (is_listening && s->t.listen(&s->t, NULL) != 0)) {
        fprintf(stderr, "transport: %s\n", s->t.errmsg);
        exit(1);
    }
}

static void stream_closed(uv_handle_t *h)
{
    free(h);
}

static void side_close(struct side *s)
{
    if (s->stream != NULL) {
        uv_close((uv_handle_t *)s->stream, stream_closed);
        s->stream = NULL;
    }
    s->t.close(&s->t, closed_cb);
    EXPECT(run_until(s->loop, flag_set, &s->is_closed));
    rtransport_free(&s->t);
    free(s->got);
}

static uint8_t pattern(size_t i, unsigned salt)
{
    return (uint8_t)((i * 31 + salt) ^ (i >> 8));
}

static void on_alloc(uv_handle_t *h, size_t n, uv_buf_t *b)
{
    (void)h;
    b->base = malloc(n);
    b->len = n;
}

static void on_data(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct side *s = st->data;

    if (nread > 0) {
        s->got = realloc(s->got, s->n_got + (size_t)nread);
        memcpy(s->got + s->n_got, b->base, (size_t)nread);
        s->n_got += (size_t)nread;
    }
    free(b->base);
}

static void on_written(uv_write_t *w, int status)
{
    (void)status;
    free(w->data);
    free(w);
}

/* Take stream, write PAYLOAD_LEN bytes salted with salt right away, and
 * read whatever the other side sends. */
static void side_take(struct side *s, uv_stream_t *stream, unsigned salt)
{
    uv_write_t *w = malloc(sizeof(*w));
    uint8_t *p = malloc(PAYLOAD_LEN);
    uv_buf_t b = uv_buf_init((char *)p, PAYLOAD_LEN);

    for (size_t i = 0; i < PAYLOAD_LEN; i++) {
        p[i] = pattern(i, salt);
    }
    s->stream = stream;
    s->n_streams++;
    stream->data = s;
    w->data = p;
    if (uv_write(w, stream, &b, 1, on_written) != 0 ||
        uv_read_start(stream, on_alloc, on_data) != 0) {
        HARNESS_FAIL("write or read_start on a handed-over stream");
    }
}

static void on_channel(void *arg, uint64_t peer_id, uv_stream_t *stream)
{
    struct side *s = arg;

    s->peer_id = peer_id;
    if (s->stream != NULL) { /* a second one: just close it */
        s->n_streams++;
        uv_close((uv_handle_t *)stream, stream_closed);
        return;
    }
    side_take(s, stream, 1);
}

static void on_dial(void *arg, uv_stream_t *stream, int status)
{
    struct side *s = arg;

    s->has_dialed = true;
    s->status = status;
    if (status == 0) {
        side_take(s, stream, 2);
    }
}

static bool both_have_payload(void *arg)
{
    struct side *two = arg;

    return two[0].n_got >= PAYLOAD_LEN && two[1].n_got >= PAYLOAD_LEN;
}

static bool payload_intact(const struct side *s, unsigned salt)
{
    if (s->n_got != PAYLOAD_LEN) {
        return false;
    }
    for (size_t i = 0; i < PAYLOAD_LEN; i++) {
        if (s->got[i] != pattern(i, salt)) {
            return false;
        }
    }
    return true;
}

static void dial(struct side *from, const struct side *to, uint8_t kind)
{
    struct err err = {0};

    from->has_dialed = false;
    struct rtransport_peer peer = {to->id, to->address};

    if (rtransport_dial(&from->t, &peer, kind, on_dial, from, &err) != 0) {
        HARNESS_FAIL("rtransport_dial: %s", err.msg);
    }
}

TEST(a_forward_dial_is_accepted_and_data_written_at_once_arrives_intact)
{
    uv_loop_t loop;
    struct side two[2]; /* [0] listens, [1] dials */
    uint64_t accepted = 0, refused = 0;

    uv_loop_init(&loop);
    side_open(&two[0], &loop, TOKEN, 1, true, 0);
    side_open(&two[1], &loop, TOKEN, 2, false, 0);
    rtransport_set_channel(&two[0].t, RTRANSPORT_KIND_FORWARD, on_channel,
                           &two[0]);
    dial(&two[1], &two[0], RTRANSPORT_KIND_FORWARD);
    EXPECT(run_until(&loop, both_have_payload, two));
    EXPECT_EQ_I64(two[1].status, 0);
    EXPECT_EQ_U64(two[0].peer_id, 2);
    /* Each side wrote at once after the hand-over: nothing may be lost. */
    EXPECT(payload_intact(&two[0], 2));
    EXPECT(payload_intact(&two[1], 1));
    rtransport_stats(&two[0].t, &accepted, &refused);
    EXPECT_EQ_U64(accepted, 1);
    EXPECT_EQ_U64(refused, 0);
    side_close(&two[0]);
    side_close(&two[1]);
    EXPECT(run_until(&loop, loop_idle, &loop));
    EXPECT_EQ_I64(uv_loop_close(&loop), 0);
}

static bool has_dialed(void *arg)
{
    return ((struct side *)arg)->has_dialed;
}

TEST(a_wrong_token_is_refused_in_both_directions)
{
    uv_loop_t loop;
    struct side srv, bad, good, other;
    uint64_t accepted = 0, refused = 0;

    uv_loop_init(&loop);
    side_open(&srv, &loop, TOKEN, 1, true, 0);
    side_open(&bad, &loop, "not-the-token", 2, true, 0);
    side_open(&good, &loop, TOKEN, 3, false, 0);
    side_open(&other, &loop, "not-the-token", 4, false, 0);
    rtransport_set_channel(&srv.t, RTRANSPORT_KIND_FORWARD, on_channel, &srv);
    rtransport_set_channel(&bad.t, RTRANSPORT_KIND_FORWARD, on_channel, &bad);

    /* A dialer without the token is refused by a listener with it... */
    dial(&other, &srv, RTRANSPORT_KIND_FORWARD);
    EXPECT(run_until(&loop, has_dialed, &other));
    EXPECT_EQ_I64(other.status, RTRANSPORT_EREFUSED);
    EXPECT(other.stream == NULL);
    rtransport_stats(&srv.t, &accepted, &refused);
    EXPECT_EQ_U64(accepted, 0);
    EXPECT_EQ_U64(refused, 1);
    EXPECT_EQ_I64(srv.n_streams, 0);

    /* ...and a dialer with it is refused by a listener without it. */
    dial(&good, &bad, RTRANSPORT_KIND_FORWARD);
    EXPECT(run_until(&loop, has_dialed, &good));
    EXPECT_EQ_I64(good.status, RTRANSPORT_EREFUSED);
    rtransport_stats(&bad.t, &accepted, &refused);
    EXPECT_EQ_U64(accepted, 0);
    EXPECT_EQ_U64(refused, 1);
    EXPECT_EQ_I64(bad.n_streams, 0);

    /* A kind the listener does not serve gets its own status. */
    dial(&good, &srv, 9);
    EXPECT(run_until(&loop, has_dialed, &good));
    EXPECT_EQ_I64(good.status, RTRANSPORT_EKIND);
    EXPECT_EQ_I64(srv.n_streams, 0);

    side_close(&srv);
    side_close(&bad);
    side_close(&good);
    side_close(&other);
    EXPECT(run_until(&loop, loop_idle, &loop));
    EXPECT_EQ_I64(uv_loop_close(&loop), 0);
}

/* ---- raw sockets: rogue peers ------------------------------------------- */

static int raw_connect(const struct side *s)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    const char *colon = strrchr(s->address, ':');

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("connect");
        exit(1);
    }
    return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
    if (write(fd, p, n) != (ssize_t)n) {
        HARNESS_FAIL("raw write of %zu bytes failed", n);
    }
}

/* Read exactly n bytes from fd while running loop; false on EOF/timeout. */
static bool raw_read(uv_loop_t *loop, int fd, uint8_t *p, size_t n)
{
    int64_t deadline = harness_now_ms() + HARNESS_WAIT_MS;
    size_t have = 0;

    while (have < n && harness_now_ms() < deadline) {
        struct pollfd pfd = {fd, POLLIN, 0};
        uv_run(loop, UV_RUN_NOWAIT);
        if (poll(&pfd, 1, 1) == 1) {
            ssize_t r = read(fd, p + have, n - have);
            if (r <= 0) {
                return false;
            }
            have += (size_t)r;
        }
    }
    return have == n;
}

/* Wait while running loop until the peer closed fd. */
static bool raw_wait_closed(uv_loop_t *loop, int fd)
{
    int64_t deadline = harness_now_ms() + HARNESS_WAIT_MS;
    uint8_t junk[512];

    while (harness_now_ms() < deadline) {
        struct pollfd pfd = {fd, POLLIN, 0};
        uv_run(loop, UV_RUN_NOWAIT);
        if (poll(&pfd, 1, 1) == 1) {
            ssize_t r = read(fd, junk, sizeof(junk));
            if (r == 0 || (r < 0 && errno == ECONNRESET)) {
                return true;
            }
        }
    }
    return false;
}

/* A hello as a dialer with token would send it. */
static size_t make_hello(const char *token, const uint8_t *ns, uint8_t kind,
                         uint64_t id, uint64_t to_id, const char *address,
                         const uint8_t *nc, uint8_t *out)
{
    struct rtransport_hello h;

    memset(&h, 0, sizeof(h));
    h.kind = kind;
    h.id = id;
    h.to_id = to_id;
    memcpy(h.nonce, nc, RTRANSPORT_NONCE_LEN);
    h.address_len = strlen(address);
    memcpy(h.address, address, h.address_len);
    return rtransport_hello_encode(token, ns, &h, out);
}

struct refused_wait {
    struct side *s;
    uint64_t want;
};

static bool refused_reached(void *arg)
{
    struct refused_wait *w = arg;
    uint64_t refused = 0;

    rtransport_stats(&w->s->t, NULL, &refused);
    return refused >= w->want;
}

/* The good dial that must still work after each rogue. */
static void good_dial_works(uv_loop_t *loop, struct side *srv, struct side *cli)
{
    dial(cli, srv, RTRANSPORT_KIND_FORWARD);
    EXPECT(run_until(loop, has_dialed, cli));
    EXPECT_EQ_I64(cli->status, 0);
    if (cli->stream != NULL) {
        uv_close((uv_handle_t *)cli->stream, stream_closed);
        cli->stream = NULL;
    }
}

TEST(rogue_clients_are_refused_and_the_listener_keeps_serving)
{
    uv_loop_t loop;
    struct side srv, cli;
    uint8_t chal[RTRANSPORT_CHALLENGE_LEN];
    uint8_t hello[RTRANSPORT_HELLO_MAX + 200];
    uint8_t nonce[RTRANSPORT_NONCE_LEN] = {0};
    char long_address[RTRANSPORT_ADDRESS_MAX + 2];
    struct refused_wait w = {&srv, 0};
    uint64_t accepted = 0;
    size_t n;
    int fd;

    uv_loop_init(&loop);
    side_open(&srv, &loop, TOKEN, 1, true, 300);
    side_open(&cli, &loop, TOKEN, 2, false, 0);
    rtransport_set_channel(&srv.t, RTRANSPORT_KIND_FORWARD, on_channel, &srv);

    /* Garbage instead of a hello. */
    fd = raw_connect(&srv);
    memset(hello, 'x', RTRANSPORT_HELLO_FIXED);
    raw_send(fd, hello, RTRANSPORT_HELLO_FIXED);
    EXPECT(raw_wait_closed(&loop, fd));
    close(fd);
    w.want = 1;
    EXPECT(run_until(&loop, refused_reached, &w));
    good_dial_works(&loop, &srv, &cli);

    /* A truncated hello: half of it, then the socket closes. */
    fd = raw_connect(&srv);
    EXPECT(raw_read(&loop, fd, chal, sizeof(chal)));
    EXPECT(rtransport_challenge_parse(chal, nonce) == RTRANSPORT_R_OK);
    n = make_hello(TOKEN, nonce, RTRANSPORT_KIND_FORWARD, 5, srv.id,
                   "127.0.0.1:9", nonce, hello);
    raw_send(fd, hello, n / 2);
    close(fd);
    w.want = 2;
    EXPECT(run_until(&loop, refused_reached, &w));
    good_dial_works(&loop, &srv, &cli);

    /* An over-long address: the length byte says 255 and 400 bytes follow;
     * the proof cannot match and nothing past 80 + 255 bytes is read. */
    fd = raw_connect(&srv);
    EXPECT(raw_read(&loop, fd, chal, sizeof(chal)));
    EXPECT(rtransport_challenge_parse(chal, nonce) == RTRANSPORT_R_OK);
    memset(long_address, 'a', RTRANSPORT_ADDRESS_MAX);
    long_address[RTRANSPORT_ADDRESS_MAX] = '\0';
    n = make_hello(TOKEN, nonce, 2, 5, srv.id, long_address, nonce, hello);
    EXPECT_EQ_U64(n, RTRANSPORT_HELLO_MAX);
    memset(hello + RTRANSPORT_HELLO_FIXED, 'b', 200);
    memset(hello + RTRANSPORT_HELLO_MAX, 'b', 200);
    raw_send(fd, hello, RTRANSPORT_HELLO_MAX + 200);
    EXPECT(raw_wait_closed(&loop, fd));
    close(fd);
    w.want = 3;
    EXPECT(run_until(&loop, refused_reached, &w));
    long_address[RTRANSPORT_ADDRESS_MAX] = 'a';
    long_address[RTRANSPORT_ADDRESS_MAX + 1] = '\0';
    EXPECT_EQ_I64(cli.t.init(&cli.t, 2, long_address), RAFT_INVALID);
    good_dial_works(&loop, &srv, &cli);

    /* One that connects and stalls: closed after the 300 ms timeout. */
    fd = raw_connect(&srv);
    EXPECT(raw_read(&loop, fd, chal, sizeof(chal)));
    EXPECT(raw_wait_closed(&loop, fd));
    close(fd);
    w.want = 4;
    EXPECT(run_until(&loop, refused_reached, &w));
    good_dial_works(&loop, &srv, &cli);

    rtransport_stats(&srv.t, &accepted, NULL);
    EXPECT_EQ_U64(accepted, 4);
    EXPECT_EQ_I64(srv.n_streams, 4);
    side_close(&srv);
    side_close(&cli);
    EXPECT(run_until(&loop, loop_idle, &loop));
    EXPECT_EQ_I64(uv_loop_close(&loop), 0);
}

TEST(a_replayed_hello_is_refused)
{
    uv_loop_t loop;
    struct side srv;
    uint8_t chal[RTRANSPORT_CHALLENGE_LEN];
    uint8_t verdict[RTRANSPORT_VERDICT_LEN];
    uint8_t hello[RTRANSPORT_HELLO_MAX];
    uint8_t ns[RTRANSPORT_NONCE_LEN], nc[RTRANSPORT_NONCE_LEN];
    uint64_t accepted = 0, refused = 0;
    size_t n;
    int fd;

    memset(nc, 7, sizeof(nc));
    uv_loop_init(&loop);
    side_open(&srv, &loop, TOKEN, 1, true, 0);
    rtransport_set_channel(&srv.t, RTRANSPORT_KIND_FORWARD, on_channel, &srv);

    /* A good handshake, recorded. */
    fd = raw_connect(&srv);
    EXPECT(raw_read(&loop, fd, chal, sizeof(chal)));
    EXPECT(rtransport_challenge_parse(chal, ns) == RTRANSPORT_R_OK);
    n = make_hello(TOKEN, ns, RTRANSPORT_KIND_FORWARD, 7, srv.id, "127.0.0.1:1",
                   nc, hello);
    raw_send(fd, hello, n);
    EXPECT(raw_read(&loop, fd, verdict, sizeof(verdict)));
    EXPECT_EQ_I64(rtransport_verdict_check(TOKEN, nc, hello + 48, verdict), 0);
    close(fd);

    /* The same bytes on a new connection (a new challenge). */
    fd = raw_connect(&srv);
    EXPECT(raw_read(&loop, fd, chal, sizeof(chal)));
    raw_send(fd, hello, n);
    EXPECT(raw_read(&loop, fd, verdict, sizeof(verdict)));
    EXPECT_EQ_I64(rtransport_verdict_check(TOKEN, nc, hello + 48, verdict),
                  RTRANSPORT_EREFUSED);
    EXPECT(raw_wait_closed(&loop, fd));
    close(fd);
    rtransport_stats(&srv.t, &accepted, &refused);
    EXPECT_EQ_U64(accepted, 1);
    EXPECT_EQ_U64(refused, 1);
    EXPECT_EQ_I64(srv.n_streams, 1);
    side_close(&srv);
    EXPECT(run_until(&loop, loop_idle, &loop));
    EXPECT_EQ_I64(uv_loop_close(&loop), 0);
}

/* A rogue listener that answers "accepted" without knowing the token. */
static bool stream_arrived(void *arg)
{
    const struct side *s = arg;

    return s->n_streams > 0;
}

/* One forward handshake with srv by hand, claiming raft id `id` and proved
 * for listener `to_id`: the verdict's rtransport_verdict_check status.
 * is_refused: the listener must then close the connection. */
static int raw_handshake(uv_loop_t *loop, const struct side *srv, uint64_t id,
                         uint64_t to_id, bool is_refused)
{
    uint8_t chal[RTRANSPORT_CHALLENGE_LEN];
    uint8_t verdict[RTRANSPORT_VERDICT_LEN];
    uint8_t hello[RTRANSPORT_HELLO_MAX];
    uint8_t ns[RTRANSPORT_NONCE_LEN];
    uint8_t nc[RTRANSPORT_NONCE_LEN];
    int fd = raw_connect(srv);
    int rc;
    size_t n;

    memset(nc, 9, sizeof(nc));
    EXPECT(raw_read(loop, fd, chal, sizeof(chal)));
    EXPECT(rtransport_challenge_parse(chal, ns) == RTRANSPORT_R_OK);
    n = make_hello(TOKEN, ns, RTRANSPORT_KIND_FORWARD, id, to_id, "127.0.0.1:1",
                   nc, hello);
    raw_send(fd, hello, n);
    EXPECT(raw_read(loop, fd, verdict, sizeof(verdict)));
    rc = rtransport_verdict_check(TOKEN, nc, hello + 48, verdict);
    if (is_refused) {
        EXPECT(raw_wait_closed(loop, fd));
    }
    close(fd);
    return rc;
}

/* transport.h (2): a rogue listener that took the address of a member (or
 * of a spare) gets hellos made for that member's id. Relayed to another
 * node, or back to the dialer, they must not verify there; and a hello that
 * claims the listener's own id is refused even with a good proof. */
TEST(a_hello_meant_for_another_node_or_from_itself_is_refused)
{
    uv_loop_t loop;
    struct side srv;
    uint8_t hello[RTRANSPORT_HELLO_MAX];
    uint8_t ns[RTRANSPORT_NONCE_LEN], nc[RTRANSPORT_NONCE_LEN];
    struct rtransport_hello h;
    uint64_t accepted = 0, refused = 0;
    size_t n;

    memset(nc, 9, sizeof(nc));
    uv_loop_init(&loop);
    side_open(&srv, &loop, TOKEN, 3, true, 0);
    rtransport_set_channel(&srv.t, RTRANSPORT_KIND_FORWARD, on_channel, &srv);

    /* pure: the proof binds the listener's id */
    memset(ns, 4, sizeof(ns));
    n = make_hello(TOKEN, ns, RTRANSPORT_KIND_FORWARD, 1, 2, "127.0.0.1:1", nc,
                   hello);
    EXPECT_EQ_I64(rtransport_hello_verify(TOKEN, ns, 2, hello, n, &h),
                  RTRANSPORT_R_OK);
    EXPECT_EQ_I64(rtransport_hello_verify(TOKEN, ns, 3, hello, n, &h),
                  RTRANSPORT_R_PROOF);

    /* node 1's hello for node 2 (whose address the relay holds), handed to
     * node 3 on node 3's own challenge: refused, no stream */
    EXPECT_EQ_I64(raw_handshake(&loop, &srv, 1, 2, true), RTRANSPORT_EREFUSED);
    /* a hello proved for node 3 that claims to come from node 3 itself */
    EXPECT_EQ_I64(raw_handshake(&loop, &srv, 3, 3, true), RTRANSPORT_EKIND);
    /* the same from node 1, meant for node 3: accepted */
    EXPECT_EQ_I64(raw_handshake(&loop, &srv, 1, 3, false), 0);

    EXPECT(run_until(&loop, stream_arrived, &srv));
    rtransport_stats(&srv.t, &accepted, &refused);
    EXPECT_EQ_U64(accepted, 1);
    EXPECT_EQ_U64(refused, 2);
    EXPECT_EQ_I64(srv.n_streams, 1);
    side_close(&srv);
    EXPECT(run_until(&loop, loop_idle, &loop));
    EXPECT_EQ_I64(uv_loop_close(&loop), 0);
}

TEST(a_listener_that_cannot_prove_the_token_gets_no_stream)
{
    uv_loop_t loop;
    struct side cli;
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    struct rtransport_hello h;
    uint8_t chal[RTRANSPORT_CHALLENGE_LEN];
    uint8_t hello[RTRANSPORT_HELLO_MAX];
    uint8_t verdict[RTRANSPORT_VERDICT_LEN];
    uint8_t ns[RTRANSPORT_NONCE_LEN];
    struct side rogue_addr;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int fd;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    EXPECT(listen(lfd, 4) == 0);
    EXPECT(getsockname(lfd, (struct sockaddr *)&a, &alen) == 0);
    snprintf(rogue_addr.address, sizeof(rogue_addr.address), "127.0.0.1:%d",
             ntohs(a.sin_port));

    uv_loop_init(&loop);
    side_open(&cli, &loop, TOKEN, 2, false, 0);
    dial(&cli, &rogue_addr, RTRANSPORT_KIND_FORWARD);
    fd = accept(lfd, NULL, NULL); /* the kernel completed the connect */
    memset(ns, 3, sizeof(ns));
    rtransport_challenge_encode(ns, chal);
    raw_send(fd, chal, sizeof(chal));
    EXPECT(raw_read(&loop, fd, hello, RTRANSPORT_HELLO_FIXED));
    EXPECT(raw_read(&loop, fd, hello + RTRANSPORT_HELLO_FIXED,
                    hello[7])); /* the address */
    memset(&h, 0, sizeof(h));
    memcpy(h.nonce, hello + 16, RTRANSPORT_NONCE_LEN);
    memcpy(h.proof, hello + 48, RTRANSPORT_PROOF_LEN);
    rtransport_verdict_encode("a-guess", RTRANSPORT_VERDICT_OK, &h, verdict);
    raw_send(fd, verdict, sizeof(verdict));
    raw_send(fd, "raft data the dialer must not take", 34);
    EXPECT(run_until(&loop, has_dialed, &cli));
    EXPECT_EQ_I64(cli.status, RTRANSPORT_EPEER);
    EXPECT(cli.stream == NULL);
    close(fd);
    close(lfd);
    side_close(&cli);
    EXPECT(run_until(&loop, loop_idle, &loop));
    EXPECT_EQ_I64(uv_loop_close(&loop), 0);
}

TEST(closing_cancels_a_pending_dial_and_an_empty_token_dials_nothing)
{
    uv_loop_t loop;
    struct side cli, none, srv;
    struct err err = {0};
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    struct side silent;
    uint64_t refused = 0;
    int fd;

    /* A listener that accepts (the kernel does) and never speaks. */
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    EXPECT(listen(lfd, 4) == 0);
    EXPECT(getsockname(lfd, (struct sockaddr *)&a, &alen) == 0);
    snprintf(silent.address, sizeof(silent.address), "127.0.0.1:%d",
             ntohs(a.sin_port));

    uv_loop_init(&loop);
    side_open(&cli, &loop, TOKEN, 2, false, 0);
    dial(&cli, &silent, RTRANSPORT_KIND_FORWARD);
    uv_run(&loop, UV_RUN_NOWAIT);
    EXPECT(!cli.has_dialed);
    cli.t.close(&cli.t, closed_cb);
    EXPECT(run_until(&loop, flag_set, &cli.is_closed));
    EXPECT(cli.has_dialed);
    EXPECT_EQ_I64(cli.status, UV_ECANCELED);
    rtransport_free(&cli.t);

    /* token "": dials nothing, refuses everything. */
    side_open(&none, &loop, "", 3, true, 0);
    side_open(&srv, &loop, TOKEN, 1, true, 0);
    struct rtransport_peer to_srv = {srv.id, srv.address};

    EXPECT_EQ_I64(rtransport_dial(&none.t, &to_srv, 2, on_dial, &none, &err),
                  ERR_FORBIDDEN);
    fd = raw_connect(&none);
    EXPECT(raw_wait_closed(&loop, fd));
    close(fd);
    rtransport_stats(&none.t, NULL, &refused);
    EXPECT_EQ_U64(refused, 1);
    side_close(&none);
    side_close(&srv);
    close(lfd);
    EXPECT(run_until(&loop, loop_idle, &loop));
    EXPECT_EQ_I64(uv_loop_close(&loop), 0);
}

/* ---- a libraft cluster over the transport ------------------------------- */

struct rnode {
    uv_loop_t *loop;
    struct raft_uv_transport t;
    struct raft_io io;
    struct raft_fsm fsm;
    struct raft raft;
    char dir[64];
    char address[64];
    int applied;
    bool is_closed;
    bool is_io_closed;
    void (*uv_io_close)(struct raft_io *io, void (*cb)(struct raft_io *io));
    void (*io_close_cb)(struct raft_io *io);
};

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf,
                     void **result)
{
    struct rnode *n = fsm->data;

    (void)buf;
    n->applied++;
    *result = NULL;
    return 0;
}

static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[],
                        unsigned *n_bufs)
{
    (void)fsm;
    *bufs = raft_malloc(sizeof(**bufs));
    (*bufs)[0].len = 8;
    (*bufs)[0].base = raft_calloc(1, 8);
    *n_bufs = 1;
    return 0;
}

static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    (void)fsm;
    raft_free(buf->base);
    return 0;
}

/* libraft 0.15 may fire its io close callback twice
 * (docs/internals/store-raft.md, "libraft 0.15 traps"): pass the first. */
static void io_closed_once(struct raft_io *io)
{
    struct rnode *n = container_of(io, struct rnode, io);

    if (!n->is_io_closed) {
        n->is_io_closed = true;
        n->io_close_cb(io);
    }
}

static void io_close_once(struct raft_io *io, void (*cb)(struct raft_io *))
{
    struct rnode *n = container_of(io, struct rnode, io);

    n->io_close_cb = cb;
    n->uv_io_close(io, io_closed_once);
}

static void rnode_open(struct rnode *n, uv_loop_t *loop, uint64_t id,
                       const char *token, unsigned election_ms)
{
    struct rtransport_config cfg = {NULL, token, 0};
    struct err err = {0};
    int rv;

    n->loop = loop;
    snprintf(n->dir, sizeof(n->dir), "/tmp/test_transport_XXXXXX");
    if (mkdtemp(n->dir) == NULL ||
        rtransport_init(&n->t, loop, &cfg, &err) != 0 ||
        raft_uv_init(&n->io, loop, n->dir, &n->t) != 0) {
        fprintf(stderr, "rnode_open: %s\n", err.msg);
        exit(1);
    }
    raft_uv_set_connect_retry_delay(&n->io, 50);
    n->uv_io_close = n->io.close;
    n->io.close = io_close_once;
    n->fsm.version = 1;
    n->fsm.data = n;
    n->fsm.apply = fsm_apply;
    n->fsm.snapshot = fsm_snapshot;
    n->fsm.restore = fsm_restore;
    rv = raft_init(&n->raft, &n->io, &n->fsm, id, n->address);
    if (rv != 0) {
        fprintf(stderr, "raft_init: %s\n", raft_strerror(rv));
        exit(1);
    }
    raft_set_election_timeout(&n->raft, election_ms);
    raft_set_heartbeat_timeout(&n->raft, election_ms / 10);
    raft_set_snapshot_threshold(&n->raft, 1u << 20);
}

static void rnode_start(struct rnode *n, const struct raft_configuration *c)
{
    int rv = 0;

    if (c != NULL) {
        rv = raft_bootstrap(&n->raft, c);
    }
    if (rv == 0) {
        rv = raft_start(&n->raft);
    }
    if (rv != 0) {
        fprintf(stderr, "raft start: %s\n", raft_strerror(rv));
        exit(1);
    }
}

static void raft_closed(struct raft *r)
{
    struct rnode *n = container_of(r, struct rnode, raft);

    n->is_closed = true;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

#define N_NODES 5 /* three voters, then two rogues with another token */

struct cluster {
    uv_loop_t loop;
    struct rnode n[N_NODES];
    int leader;
    int want_applied;
    bool has_voted_for_rogue; /* a voter ever voted for 5 */
    bool was_rogue_leader;    /* 5 ever became leader */
};

/* Sampled on every turn of the loop while the test waits. */
static void watch(struct cluster *c)
{
    for (int i = 0; i < 3; i++) {
        if (c->n[i].raft.voted_for == 5) {
            c->has_voted_for_rogue = true;
        }
    }
    if (raft_state(&c->n[4].raft) == RAFT_LEADER) {
        c->was_rogue_leader = true;
    }
}

static int find_leader(struct cluster *c)
{
    for (int i = 0; i < 3; i++) {
        if (raft_state(&c->n[i].raft) == RAFT_LEADER) {
            return i;
        }
    }
    return -1;
}

static bool has_leader(void *arg)
{
    struct cluster *c = arg;

    watch(c);
    c->leader = find_leader(c);
    return c->leader >= 0;
}

static bool all_applied(void *arg)
{
    struct cluster *c = arg;

    watch(c);
    for (int i = 0; i < 3; i++) {
        if (c->n[i].applied < c->want_applied) {
            return false;
        }
    }
    return true;
}

static void apply_done(struct raft_apply *req, int status, void *result)
{
    (void)result;
    if (status != 0) {
        fprintf(stderr, "apply: %s\n", raft_strerror(status));
    }
    free(req);
}

static void propose(struct cluster *c)
{
    struct raft_apply *req;
    struct raft_buffer b;
    int rv;

    c->want_applied++;
    if (c->leader < 0) {
        HARNESS_FAIL("no leader to propose to");
        return;
    }
    req = malloc(sizeof(*req));
    b.base = raft_calloc(1, 8);
    b.len = 8;
    rv = raft_apply(&c->n[c->leader].raft, req, &b, 1, apply_done);
    if (rv != 0) {
        HARNESS_FAIL("raft_apply: %s", raft_strerror(rv));
        raft_free(b.base);
        free(req);
    }
}

static bool rogues_were_refused(void *arg)
{
    struct cluster *c = arg;
    uint64_t refused = 0, total = 0;

    watch(c);
    for (int i = 0; i < 3; i++) {
        rtransport_stats(&c->n[i].t, NULL, &refused);
        total += refused;
    }
    rtransport_stats(&c->n[3].t, NULL, &refused);
    /* The candidate asked every voter several times, the leader tried to
     * replicate to the standby several times, and the candidate campaigned
     * through several terms. */
    return total >= 9 && refused >= 3 && c->n[4].raft.current_term >= 5;
}

static bool all_closed(void *arg)
{
    struct cluster *c = arg;

    for (int i = 0; i < N_NODES; i++) {
        if (!c->n[i].is_closed) {
            return false;
        }
    }
    return true;
}

TEST(a_raft_cluster_elects_and_replicates_and_peers_without_the_token_cannot)
{
    struct cluster *c = calloc(1, sizeof(*c));
    struct raft_configuration conf, rogue_conf;
    raft_term term;
    int leader;

    uv_loop_init(&c->loop);
    for (int i = 0; i < N_NODES; i++) {
        snprintf(c->n[i].address, sizeof(c->n[i].address), "127.0.0.1:%d",
                 nh_free_port());
    }
    /* The cluster: voters 1..3 and the rogue 4 as a standby, which the
     * leader tries to replicate to. */
    raft_configuration_init(&conf);
    for (int i = 0; i < 3; i++) {
        raft_configuration_add(&conf, (raft_id)(i + 1), c->n[i].address,
                               RAFT_VOTER);
    }
    raft_configuration_add(&conf, 4, c->n[3].address, RAFT_STANDBY);
    /* Rogue 5 believes it is a voter beside 1..3 and campaigns. */
    raft_configuration_init(&rogue_conf);
    for (int i = 0; i < 3; i++) {
        raft_configuration_add(&rogue_conf, (raft_id)(i + 1), c->n[i].address,
                               RAFT_VOTER);
    }
    raft_configuration_add(&rogue_conf, 5, c->n[4].address, RAFT_VOTER);

    /* The rogues start first: 5 campaigns while the voters have no leader
     * yet, when a vote request that reached raft would be granted. */
    rnode_open(&c->n[3], &c->loop, 4, "not-the-token", 1000);
    rnode_start(&c->n[3], NULL);
    rnode_open(&c->n[4], &c->loop, 5, "not-the-token", 100);
    rnode_start(&c->n[4], &rogue_conf);
    for (int i = 0; i < 3; i++) {
        rnode_open(&c->n[i], &c->loop, (uint64_t)(i + 1), TOKEN, 1000);
        rnode_start(&c->n[i], &conf);
    }
    EXPECT(run_until(&c->loop, has_leader, c));
    propose(c);
    EXPECT(run_until(&c->loop, all_applied, c));
    leader = c->leader;
    term = leader >= 0 ? c->n[leader].raft.current_term : 0;
    EXPECT(run_until(&c->loop, rogues_were_refused, c));
    propose(c);
    EXPECT(run_until(&c->loop, all_applied, c));

    /* Nothing the rogues sent reached raft: no vote was granted to 5, no
     * term moved after the election, and the standby got no entry. */
    EXPECT_EQ_I64(find_leader(c), leader);
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ_U64(c->n[i].raft.current_term, term);
    }
    EXPECT(!c->has_voted_for_rogue);
    EXPECT(!c->was_rogue_leader);
    EXPECT_EQ_U64(raft_last_index(&c->n[3].raft), 0);
    EXPECT_EQ_U64(raft_last_index(&c->n[4].raft), 1);
    EXPECT_EQ_I64(c->n[3].applied, 0);

    for (int i = 0; i < N_NODES; i++) {
        raft_close(&c->n[i].raft, raft_closed);
    }
    EXPECT(run_until(&c->loop, all_closed, c));
    EXPECT(run_until(&c->loop, loop_idle, &c->loop));
    for (int i = 0; i < N_NODES; i++) {
        raft_uv_close(&c->n[i].io);
        rtransport_free(&c->n[i].t);
        nftw(c->n[i].dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    }
    raft_configuration_close(&conf);
    raft_configuration_close(&rogue_conf);
    EXPECT_EQ_I64(uv_loop_close(&c->loop), 0);
    free(c);
}
