/* The raft transport: libraft's `struct raft_uv_transport` over TCP, where
 * every connection first proves knowledge of a shared token in both
 * directions, and then carries either raft traffic or another channel.
 *
 * libraft's own TCP transport sends the dialer's id and address in the clear
 * and believes them, so anything that reaches the raft port can vote and
 * append. This one replaces it whole: libraft's uv I/O only needs a connected
 * stream and, on the accepting side, the peer's id and address, which here
 * come out of an authenticated hello. The wire format and its guarantees are
 * in transport.h; the byte work is the pure functions at the top of this
 * file (fuzzed by tests/fuzz/fuzz_transport_handshake.c), the rest is a thin
 * libuv shell: one `struct hs` per connection in handshake, drawn below.
 *
 *   listener:  accept -> write challenge, read hello       (on_connection)
 *              hello read -> verify, write verdict         (listener_hello)
 *              verdict written -> hand over or close       (on_write)
 *   dialer:    connect -> read challenge                   (on_connect)
 *              challenge read -> write hello, read verdict (dialer_challenge)
 *              verdict read and hello written -> hand over (dialer_verdict)
 *   any:       timer, read error, close -> hs_close -> hs_closed (frees)
 *
 * It must never hand a stream over while one of its writes is in flight or
 * with a byte of the peer's stream data in its buffer (transport.h (3)). */
#include "raft/transport.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "base/common.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/xalloc.h"
#include "store/schema.h"

/* ---- the wire format --------------------------------------------------- */

#define WIRE_VERSION   2
#define TYPE_CHALLENGE 1
#define TYPE_HELLO     2
#define TYPE_VERDICT   3

static const uint8_t wire_magic[4] = {'Q', 'N', 'R', 'T'};
static const char label_dial[] = "queen raft dial v2";
static const char label_accept[] = "queen raft accept v2";

const char *rtransport_reason_name(int reason)
{
    static const char *const names[RTRANSPORT_R_COUNT] = {
        "ok",        "bad magic", "bad version", "unexpected message",
        "malformed", "bad proof", "bad kind",    "truncated",
        "timeout",   "busy",      "no token",
    };

    if (reason < 0 || reason >= RTRANSPORT_R_COUNT) {
        return "unknown";
    }
    return names[reason];
}

static void put_header(uint8_t *out, uint8_t type, uint8_t b6, uint8_t b7)
{
    memcpy(out, wire_magic, sizeof(wire_magic));
    out[4] = WIRE_VERSION;
    out[5] = type;
    out[6] = b6;
    out[7] = b7;
}

static int check_header(const uint8_t *in, uint8_t type)
{
    if (memcmp(in, wire_magic, sizeof(wire_magic)) != 0) {
        return RTRANSPORT_R_MAGIC;
    }
    if (in[4] != WIRE_VERSION) {
        return RTRANSPORT_R_VERSION;
    }
    if (in[5] != type) {
        return RTRANSPORT_R_TYPE;
    }
    return RTRANSPORT_R_OK;
}

/* HMAC(token, label_dial || Ns || hello[0..48) || address || to_id) of a
 * hello whose address (hello[7] bytes) follows its fixed part; to_id
 * big-endian: the listener the dialer means to reach (transport.h (2)). */
static void dial_proof(const char *token, const uint8_t *server_nonce,
                       const uint8_t *hello, uint64_t to_id,
                       uint8_t out[RTRANSPORT_PROOF_LEN])
{
    const uint8_t *address = hello + RTRANSPORT_HELLO_FIXED;
    size_t address_len = hello[7];
    uint8_t msg[sizeof(label_dial) - 1 + RTRANSPORT_NONCE_LEN + 48 +
                RTRANSPORT_ADDRESS_MAX + 8];
    size_t n = 0;

    memcpy(msg + n, label_dial, sizeof(label_dial) - 1);
    n += sizeof(label_dial) - 1;
    memcpy(msg + n, server_nonce, RTRANSPORT_NONCE_LEN);
    n += RTRANSPORT_NONCE_LEN;
    memcpy(msg + n, hello, 48);
    n += 48;
    memcpy(msg + n, address, address_len);
    n += address_len;
    be64_put(msg + n, to_id);
    n += 8;
    hmac_sha256(token, strlen(token), msg, n, out);
}

/* HMAC(token, label_accept || Nc || dial proof). */
static void accept_proof(const char *token, const uint8_t *client_nonce,
                         const uint8_t *dial, uint8_t out[RTRANSPORT_PROOF_LEN])
{
    uint8_t msg[sizeof(label_accept) - 1 + RTRANSPORT_NONCE_LEN +
                RTRANSPORT_PROOF_LEN];
    size_t n = 0;

    memcpy(msg + n, label_accept, sizeof(label_accept) - 1);
    n += sizeof(label_accept) - 1;
    memcpy(msg + n, client_nonce, RTRANSPORT_NONCE_LEN);
    n += RTRANSPORT_NONCE_LEN;
    memcpy(msg + n, dial, RTRANSPORT_PROOF_LEN);
    n += RTRANSPORT_PROOF_LEN;
    hmac_sha256(token, strlen(token), msg, n, out);
}

void rtransport_challenge_encode(const uint8_t nonce[RTRANSPORT_NONCE_LEN],
                                 uint8_t out[RTRANSPORT_CHALLENGE_LEN])
{
    put_header(out, TYPE_CHALLENGE, 0, 0);
    memcpy(out + RTRANSPORT_HEADER_LEN, nonce, RTRANSPORT_NONCE_LEN);
}

int rtransport_challenge_parse(const uint8_t in[RTRANSPORT_CHALLENGE_LEN],
                               uint8_t nonce[RTRANSPORT_NONCE_LEN])
{
    int rc = check_header(in, TYPE_CHALLENGE);

    if (rc != RTRANSPORT_R_OK) {
        return rc;
    }
    if (in[6] != 0 || in[7] != 0) {
        return RTRANSPORT_R_MALFORMED;
    }
    memcpy(nonce, in + RTRANSPORT_HEADER_LEN, RTRANSPORT_NONCE_LEN);
    return RTRANSPORT_R_OK;
}

size_t rtransport_hello_encode(const char *token,
                               const uint8_t server_nonce[RTRANSPORT_NONCE_LEN],
                               const struct rtransport_hello *h, uint8_t *out)
{
    size_t alen = h->address_len;

    ASSERT(alen <= RTRANSPORT_ADDRESS_MAX);
    put_header(out, TYPE_HELLO, h->kind, (uint8_t)alen);
    be64_put(out + 8, h->id);
    memcpy(out + 16, h->nonce, RTRANSPORT_NONCE_LEN);
    memcpy(out + RTRANSPORT_HELLO_FIXED, (const uint8_t *)h->address, alen);
    dial_proof(token, server_nonce, out, h->to_id, out + 48);
    return RTRANSPORT_HELLO_FIXED + alen;
}

int rtransport_hello_head(const uint8_t in[RTRANSPORT_HELLO_FIXED],
                          size_t *address_len)
{
    int rc = check_header(in, TYPE_HELLO);

    if (rc != RTRANSPORT_R_OK) {
        return rc;
    }
    *address_len = in[7];
    return RTRANSPORT_R_OK;
}

int rtransport_hello_verify(const char *token,
                            const uint8_t server_nonce[RTRANSPORT_NONCE_LEN],
                            uint64_t self_id, const uint8_t *in, size_t n,
                            struct rtransport_hello *h)
{
    uint8_t want[RTRANSPORT_PROOF_LEN];
    size_t alen = 0;
    int rc;

    if (n < RTRANSPORT_HELLO_FIXED) {
        return RTRANSPORT_R_TRUNCATED;
    }
    rc = rtransport_hello_head(in, &alen);
    if (rc != RTRANSPORT_R_OK) {
        return rc;
    }
    if (n != RTRANSPORT_HELLO_FIXED + alen ||
        memchr(in + RTRANSPORT_HELLO_FIXED, 0, alen) != NULL) {
        return RTRANSPORT_R_MALFORMED;
    }
    dial_proof(token, server_nonce, in, self_id, want);
    if (CRYPTO_memcmp(want, in + 48, RTRANSPORT_PROOF_LEN) != 0) {
        return RTRANSPORT_R_PROOF;
    }
    h->kind = in[6];
    h->id = be64_get(in + 8);
    h->to_id = self_id;
    memcpy(h->nonce, in + 16, RTRANSPORT_NONCE_LEN);
    memcpy(h->proof, in + 48, RTRANSPORT_PROOF_LEN);
    h->address_len = alen;
    memcpy(h->address, in + RTRANSPORT_HELLO_FIXED, alen);
    h->address[alen] = '\0';
    return RTRANSPORT_R_OK;
}

void rtransport_verdict_encode(const char *token, int status,
                               const struct rtransport_hello *h,
                               uint8_t out[RTRANSPORT_VERDICT_LEN])
{
    put_header(out, TYPE_VERDICT, (uint8_t)status, 0);
    memset(out + RTRANSPORT_HEADER_LEN, 0, RTRANSPORT_PROOF_LEN);
    if (status == RTRANSPORT_VERDICT_OK) {
        ASSERT(h != NULL);
        accept_proof(token, h->nonce, h->proof, out + RTRANSPORT_HEADER_LEN);
    }
}

int rtransport_verdict_check(const char *token,
                             const uint8_t client_nonce[RTRANSPORT_NONCE_LEN],
                             const uint8_t dial_proof_[RTRANSPORT_PROOF_LEN],
                             const uint8_t in[RTRANSPORT_VERDICT_LEN])
{
    uint8_t want[RTRANSPORT_PROOF_LEN];

    if (check_header(in, TYPE_VERDICT) != RTRANSPORT_R_OK || in[7] != 0) {
        return RTRANSPORT_EPROTO;
    }
    switch (in[6]) {
    case RTRANSPORT_VERDICT_OK:
        break;
    case RTRANSPORT_VERDICT_BAD_PROOF:
        return RTRANSPORT_EREFUSED;
    case RTRANSPORT_VERDICT_BAD_KIND:
        return RTRANSPORT_EKIND;
    default:
        return RTRANSPORT_EPROTO;
    }
    accept_proof(token, client_nonce, dial_proof_, want);
    if (CRYPTO_memcmp(want, in + RTRANSPORT_HEADER_LEN, RTRANSPORT_PROOF_LEN) !=
        0) {
        return RTRANSPORT_EPEER;
    }
    return 0;
}

const char *rtransport_strerror(int status)
{
    switch (status) {
    case RTRANSPORT_EREFUSED:
        return "the peer refused our raft token";
    case RTRANSPORT_EKIND:
        return "the peer serves no such channel";
    case RTRANSPORT_EPROTO:
        return "the peer does not speak the raft handshake";
    case RTRANSPORT_EPEER:
        return "the peer failed to prove the raft token";
    case RTRANSPORT_ENOTOKEN:
        return "no raft token configured";
    default:
        return uv_strerror(status);
    }
}

/* ---- the libuv shell --------------------------------------------------- */

/* Log slots: one per refusal reason, then the dialer's two. */
enum { SLOT_THEY_REFUSED = RTRANSPORT_R_COUNT, SLOT_NO_PROOF, SLOT_COUNT };

struct channel {
    rtransport_channel_fn fn;
    void *arg;
};

struct rt {
    struct raft_uv_transport *t;
    uv_loop_t *loop;
    char *token;
    unsigned timeout_ms;
    struct sockaddr_storage bind_addr;
    bool has_bind_addr;
    uint64_t id;
    char address[RTRANSPORT_ADDRESS_MAX + 1];
    raft_uv_accept_cb accept_cb;
    struct channel channels[256];
    uv_tcp_t listener;
    bool is_listener_open; /* initialized and its close cb not yet fired */
    bool is_closing;
    bool is_close_fired;
    raft_uv_transport_close_cb close_cb;
    struct hs *hs_head;
    unsigned n_hs;
    unsigned n_incoming;
    uint64_t accepted;
    uint64_t refused;
    uint64_t last_log_ms[SLOT_COUNT];
    uint64_t suppressed[SLOT_COUNT];
    bool has_logged[SLOT_COUNT];
};

enum phase {
    PH_CONNECT = 0, /* dialer: TCP connect in flight */
    PH_CHALLENGE,   /* dialer: reading the challenge */
    PH_VERDICT,     /* dialer: hello sent, reading the verdict */
    PH_HELLO,       /* listener: challenge sent, reading the hello */
    PH_ANSWER,      /* listener: verdict being written */
};

struct hs {
    struct rt *rt;
    struct hs *prev, *next;
    bool is_dialer;
    bool is_over; /* closing, or handed over: no more steps */
    bool is_read_done;
    bool has_cb; /* a dialer whose callback must still fire */
    enum phase phase;
    int status;    /* dialer: the status its callback gets */
    int reason;    /* listener: refused after the verdict is written */
    int n_writes;  /* writes in flight */
    int n_closes;  /* handle close callbacks still to come */
    uv_tcp_t *tcp; /* ours until handed over (then NULL) */
    uv_timer_t timer;
    uv_connect_t connect;
    uv_write_t write_first; /* challenge or hello */
    uv_write_t write_verdict;
    uint8_t challenge[RTRANSPORT_CHALLENGE_LEN];
    uint8_t out[RTRANSPORT_HELLO_MAX]; /* hello or verdict */
    uint8_t in[RTRANSPORT_HELLO_MAX];
    size_t have, want;
    uint8_t server_nonce[RTRANSPORT_NONCE_LEN];
    uint8_t client_nonce[RTRANSPORT_NONCE_LEN];
    uint8_t dial_proof[RTRANSPORT_PROOF_LEN];
    struct rtransport_hello hello;
    uint8_t kind;
    uint64_t to_id; /* dialer: the raft id of the node it means to reach */
    struct raft_uv_connect *req; /* libraft's connect, or NULL */
    raft_uv_connect_cb connect_cb;
    rtransport_dial_fn dial_cb;
    void *dial_arg;
    char peer[RTRANSPORT_ADDRESS_MAX + 1]; /* for log lines */
};

static void random_bytes(uint8_t *p, size_t n)
{
    /* RAND_bytes fails only when the CSPRNG cannot be seeded: no nonce we
     * could send would then be safe. */
    int rc = RAND_bytes(p, (int)n);

    ASSERT(rc == 1);
}

/* "a.b.c.d:port" or "[v6]:port"; no port means 8080 (raft_uv_tcp's rule). */
static bool parse_address(const char *s, struct sockaddr_storage *out)
{
    char host[64];
    const char *colon;
    const char *h = s;
    size_t hlen;
    long port = 8080;
    bool is_v6 = s[0] == '[';

    if (is_v6) {
        const char *end = strchr(s, ']');
        if (end == NULL) {
            return false;
        }
        h = s + 1;
        hlen = (size_t)(end - h);
        colon = end[1] == ':' ? end + 1 : NULL;
        if (end[1] != '\0' && colon == NULL) {
            return false;
        }
    } else {
        colon = strrchr(s, ':');
        hlen = colon != NULL ? (size_t)(colon - s) : strlen(s);
    }
    if (hlen == 0 || hlen >= sizeof(host)) {
        return false;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    if (colon != NULL) {
        char *endp = NULL;
        port = strtol(colon + 1, &endp, 10);
        if (colon[1] == '\0' || *endp != '\0' || port < 0 || port > 65535) {
            return false;
        }
    }
    memset(out, 0, sizeof(*out));
    if (is_v6) {
        return uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)out) == 0;
    }
    return uv_ip4_addr(host, (int)port, (struct sockaddr_in *)out) == 0;
}

static void peer_name(uv_tcp_t *tcp, char *out, size_t n)
{
    struct sockaddr_storage a;
    int len = sizeof(a);
    char ip[64] = "?";
    int port = 0;

    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&a, &len) == 0) {
        if (a.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&a;
            uv_ip6_name(a6, ip, sizeof(ip));
            port = ntohs(a6->sin6_port);
        } else {
            const struct sockaddr_in *a4 = (const struct sockaddr_in *)&a;
            uv_ip4_name(a4, ip, sizeof(ip));
            port = ntohs(a4->sin_port);
        }
    }
    snprintf(out, n, "%s:%d", ip, port);
}

/* (5): at most one line a second per slot; the lines held back are counted
 * in the next one. */
static bool log_allowed(struct rt *rt, int slot, uint64_t *suppressed)
{
    uint64_t now = uv_now(rt->loop);

    if (rt->has_logged[slot] && now - rt->last_log_ms[slot] < 1000) {
        rt->suppressed[slot]++;
        return false;
    }
    rt->has_logged[slot] = true;
    rt->last_log_ms[slot] = now;
    *suppressed = rt->suppressed[slot];
    rt->suppressed[slot] = 0;
    return true;
}

static void hs_closed(uv_handle_t *h)
{
    struct hs *hs = h->data;
    struct rt *rt = hs->rt;

    if (--hs->n_closes > 0) {
        return;
    }
    if (hs->has_cb) {
        int st = hs->status < 0 ? hs->status : UV_ECONNABORTED;
        if (hs->req != NULL) {
            st = st == UV_ECANCELED ? RAFT_CANCELED : RAFT_NOCONNECTION;
            hs->connect_cb(hs->req, NULL, st);
        } else {
            hs->dial_cb(hs->dial_arg, NULL, st);
        }
    }
    free(hs->tcp);
    if (hs->prev != NULL) {
        hs->prev->next = hs->next;
    } else {
        rt->hs_head = hs->next;
    }
    if (hs->next != NULL) {
        hs->next->prev = hs->prev;
    }
    rt->n_hs--;
    free(hs);
    if (rt->is_closing && !rt->is_close_fired && !rt->is_listener_open &&
        rt->n_hs == 0) {
        rt->is_close_fired = true;
        rt->close_cb(rt->t);
    }
}

/* hs's handshake is done (closed or handed over): an incoming one leaves
 * the count of (4), which holds running handshakes only. */
static void hs_over(struct hs *hs)
{
    hs->is_over = true;
    if (!hs->is_dialer) {
        hs->rt->n_incoming--;
    }
}

/* End hs for good: close its socket and timer; a dialer's callback fires
 * from hs_closed with hs->status. */
static void hs_close(struct hs *hs, int status)
{
    if (hs->is_over) {
        return;
    }
    hs_over(hs);
    hs->status = status;
    hs->n_closes = 2;
    uv_close((uv_handle_t *)hs->tcp, hs_closed);
    uv_close((uv_handle_t *)&hs->timer, hs_closed);
}

/* (5): a listener's refusal, counted and logged once. */
static void hs_refuse(struct hs *hs, int reason)
{
    struct rt *rt = hs->rt;
    uint64_t suppressed = 0;

    if (hs->is_over) {
        return;
    }
    rt->refused++;
    if (LOG_WARN <= log_threshold && log_allowed(rt, reason, &suppressed)) {
        log_warn_kv("transport", "raft port connection refused",
                    {"peer", hs->peer},
                    {"reason", rtransport_reason_name(reason)},
                    {"suppressed", LOG_U64(suppressed)});
    }
    hs_close(hs, UV_ECONNABORTED);
}

static struct hs *hs_new(struct rt *rt, bool is_dialer)
{
    struct hs *hs = xcalloc(1, sizeof(*hs));
    int rc;

    hs->rt = rt;
    hs->is_dialer = is_dialer;
    hs->tcp = xmalloc(sizeof(*hs->tcp));
    rc = uv_tcp_init(rt->loop, hs->tcp);
    ASSERT(rc == 0);
    hs->tcp->data = hs;
    rc = uv_timer_init(rt->loop, &hs->timer);
    ASSERT(rc == 0);
    hs->timer.data = hs;
    hs->next = rt->hs_head;
    if (rt->hs_head != NULL) {
        rt->hs_head->prev = hs;
    }
    rt->hs_head = hs;
    rt->n_hs++;
    if (!is_dialer) {
        rt->n_incoming++;
    }
    return hs;
}

/* The stream leaves us: (3) holds, no write in flight, nothing buffered. */
static void hs_hand_over(struct hs *hs)
{
    struct rt *rt = hs->rt;
    uv_stream_t *s = (uv_stream_t *)hs->tcp;

    ASSERT(hs->n_writes == 0 && hs->have == hs->want); /* (3) */
    hs_over(hs);
    hs->tcp = NULL;
    s->data = NULL;
    hs->n_closes = 1;
    uv_close((uv_handle_t *)&hs->timer, hs_closed);
    if (hs->is_dialer) {
        hs->has_cb = false;
        if (hs->req != NULL) {
            hs->connect_cb(hs->req, s, 0);
        } else {
            hs->dial_cb(hs->dial_arg, s, 0);
        }
        return;
    }
    rt->accepted++;
    if (hs->hello.kind == RTRANSPORT_KIND_RAFT) {
        rt->accept_cb(rt->t, hs->hello.id, hs->hello.address, s);
    } else {
        struct channel *c = &rt->channels[hs->hello.kind];
        c->fn(c->arg, hs->hello.id, s);
    }
}

static void on_timeout(uv_timer_t *t)
{
    struct hs *hs = t->data;

    if (hs->is_dialer) {
        hs_close(hs, UV_ETIMEDOUT);
    } else {
        hs_refuse(hs, RTRANSPORT_R_TIMEOUT);
    }
}

static void on_write(uv_write_t *w, int status)
{
    struct hs *hs = w->data;

    hs->n_writes--;
    if (hs->is_over) {
        return;
    }
    if (status < 0) {
        if (hs->is_dialer) {
            hs_close(hs, status);
        } else {
            hs_refuse(hs, RTRANSPORT_R_TRUNCATED);
        }
        return;
    }
    if (hs->n_writes > 0) {
        return;
    }
    if (hs->is_dialer && hs->is_read_done) {
        hs_hand_over(hs);
    } else if (!hs->is_dialer && hs->phase == PH_ANSWER) {
        if (hs->reason != RTRANSPORT_R_OK) {
            hs_refuse(hs, hs->reason);
        } else {
            hs_hand_over(hs);
        }
    }
}

static int hs_write(struct hs *hs, uv_write_t *w, uint8_t *p, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int rc;

    w->data = hs;
    rc = uv_write(w, (uv_stream_t *)hs->tcp, &b, 1, on_write);
    if (rc == 0) {
        hs->n_writes++;
    }
    return rc;
}

/* (3): never more than the current message still lacks. */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct hs *hs = h->data;

    (void)suggested;
    *buf =
        uv_buf_init((char *)hs->in + hs->have, (unsigned)(hs->want - hs->have));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static int hs_read(struct hs *hs, enum phase phase, size_t want)
{
    hs->phase = phase;
    hs->have = 0;
    hs->want = want;
    return uv_read_start((uv_stream_t *)hs->tcp, on_alloc, on_read);
}

static void dialer_challenge(struct hs *hs)
{
    struct rt *rt = hs->rt;
    struct rtransport_hello h;
    size_t n;

    if (rtransport_challenge_parse(hs->in, hs->server_nonce) !=
        RTRANSPORT_R_OK) {
        hs_close(hs, RTRANSPORT_EPROTO);
        return;
    }
    random_bytes(hs->client_nonce, sizeof(hs->client_nonce));
    memset(&h, 0, sizeof(h));
    h.kind = hs->kind;
    h.id = rt->id;
    h.to_id = hs->to_id;
    memcpy(h.nonce, hs->client_nonce, RTRANSPORT_NONCE_LEN);
    h.address_len = strlen(rt->address); /* init bounded it */
    memcpy(h.address, rt->address, h.address_len + 1);
    n = rtransport_hello_encode(rt->token, hs->server_nonce, &h, hs->out);
    memcpy(hs->dial_proof, hs->out + 48, RTRANSPORT_PROOF_LEN);
    if (hs_write(hs, &hs->write_first, hs->out, n) != 0 ||
        hs_read(hs, PH_VERDICT, RTRANSPORT_VERDICT_LEN) != 0) {
        hs_close(hs, UV_EPIPE);
    }
}

/* (5) for the dialer: the peer refused our token, or failed to prove its. */
static void log_dialer(struct rt *rt, int rc, const char *peer)
{
    uint64_t suppressed = 0;
    int slot = rc == RTRANSPORT_EREFUSED ? SLOT_THEY_REFUSED : SLOT_NO_PROOF;

    if (LOG_WARN > log_threshold || !log_allowed(rt, slot, &suppressed)) {
        return;
    }
    log_warn_kv("transport",
                rc == RTRANSPORT_EREFUSED
                    ? "raft peer refused our token"
                    : "raft peer failed to prove the token",
                {"peer", peer}, {"suppressed", LOG_U64(suppressed)});
}

static void dialer_verdict(struct hs *hs)
{
    struct rt *rt = hs->rt;
    int rc = rtransport_verdict_check(rt->token, hs->client_nonce,
                                      hs->dial_proof, hs->in);

    if (rc == RTRANSPORT_EREFUSED || rc == RTRANSPORT_EPEER) {
        log_dialer(rt, rc, hs->peer);
    }
    if (rc != 0) {
        hs_close(hs, rc);
        return;
    }
    hs->is_read_done = true;
    if (hs->n_writes == 0) {
        hs_hand_over(hs);
    }
}

static bool kind_served(const struct rt *rt, const struct rtransport_hello *h)
{
    if (h->id == rt->id) {
        return false; /* this node itself: a relayed or misconfigured dial */
    }
    if (h->kind == RTRANSPORT_KIND_RAFT) {
        return rt->accept_cb != NULL && h->id != 0 && h->address_len > 0;
    }
    return rt->channels[h->kind].fn != NULL;
}

static void listener_hello(struct hs *hs)
{
    struct rt *rt = hs->rt;
    int rc = rtransport_hello_verify(rt->token, hs->server_nonce, rt->id,
                                     hs->in, hs->have, &hs->hello);
    int status = RTRANSPORT_VERDICT_OK;

    if (rc == RTRANSPORT_R_PROOF) {
        status = RTRANSPORT_VERDICT_BAD_PROOF;
    } else if (rc != RTRANSPORT_R_OK) {
        hs_refuse(hs, rc);
        return;
    } else if (!kind_served(rt, &hs->hello)) {
        rc = RTRANSPORT_R_KIND;
        status = RTRANSPORT_VERDICT_BAD_KIND;
    }
    hs->reason = rc;
    hs->phase = PH_ANSWER;
    rtransport_verdict_encode(rt->token, status, &hs->hello, hs->out);
    if (hs_write(hs, &hs->write_verdict, hs->out, RTRANSPORT_VERDICT_LEN) !=
        0) {
        hs_refuse(hs, RTRANSPORT_R_TRUNCATED);
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct hs *hs = s->data;
    size_t alen = 0;
    int rc;

    (void)buf;
    if (hs->is_over || nread == 0) {
        return;
    }
    if (nread < 0) {
        if (hs->is_dialer) {
            hs_close(hs, (int)nread);
        } else {
            hs_refuse(hs, RTRANSPORT_R_TRUNCATED);
        }
        return;
    }
    hs->have += (size_t)nread;
    if (hs->phase == PH_HELLO && hs->want == RTRANSPORT_HELLO_FIXED &&
        hs->have == RTRANSPORT_HELLO_FIXED) {
        rc = rtransport_hello_head(hs->in, &alen);
        if (rc != RTRANSPORT_R_OK) {
            hs_refuse(hs, rc);
            return;
        }
        hs->want += alen;
    }
    if (hs->have < hs->want) {
        return;
    }
    uv_read_stop(s); /* (3): in the callback that completed the message */
    if (hs->phase == PH_CHALLENGE) {
        dialer_challenge(hs);
    } else if (hs->phase == PH_VERDICT) {
        dialer_verdict(hs);
    } else {
        listener_hello(hs);
    }
}

/* The length of peer's IP ("ip:port": up to its last ':'). */
static size_t peer_ip_len(const char *peer)
{
    const char *colon = strrchr(peer, ':');

    return colon != NULL ? (size_t)(colon - peer) : strlen(peer);
}

/* The other incoming handshakes running from hs's IP (4). */
static unsigned incoming_from_ip(const struct rt *rt, const struct hs *hs)
{
    size_t len = peer_ip_len(hs->peer);
    unsigned n = 0;

    for (const struct hs *h = rt->hs_head; h != NULL; h = h->next) {
        n += h != hs && !h->is_dialer && !h->is_over &&
             peer_ip_len(h->peer) == len && memcmp(h->peer, hs->peer, len) == 0;
    }
    return n;
}

static void on_connection(uv_stream_t *server, int status)
{
    struct rt *rt = server->data;
    struct hs *hs;
    bool is_busy = rt->n_incoming >= RTRANSPORT_PENDING_MAX;

    if (status < 0 || rt->is_closing) {
        return;
    }
    hs = hs_new(rt, false);
    if (uv_accept(server, (uv_stream_t *)hs->tcp) != 0) {
        hs_close(hs, UV_ECONNABORTED);
        return;
    }
    peer_name(hs->tcp, hs->peer, sizeof(hs->peer));
    if (rt->token[0] == '\0') {
        hs_refuse(hs, RTRANSPORT_R_NO_TOKEN);
        return;
    }
    if (is_busy || incoming_from_ip(rt, hs) >= RTRANSPORT_PENDING_PER_IP) {
        hs_refuse(hs, RTRANSPORT_R_BUSY);
        return;
    }
    random_bytes(hs->server_nonce, sizeof(hs->server_nonce));
    rtransport_challenge_encode(hs->server_nonce, hs->challenge);
    uv_timer_start(&hs->timer, on_timeout, rt->timeout_ms, 0);
    if (hs_write(hs, &hs->write_first, hs->challenge, sizeof(hs->challenge)) !=
            0 ||
        hs_read(hs, PH_HELLO, RTRANSPORT_HELLO_FIXED) != 0) {
        hs_refuse(hs, RTRANSPORT_R_TRUNCATED);
    }
}

static void on_connect(uv_connect_t *c, int status)
{
    struct hs *hs = c->data;

    if (hs->is_over) {
        return;
    }
    if (status < 0) {
        hs_close(hs, status);
        return;
    }
    if (hs_read(hs, PH_CHALLENGE, RTRANSPORT_CHALLENGE_LEN) != 0) {
        hs_close(hs, UV_EPIPE);
    }
}

/* Start a dial: returns the handshake, or NULL with err set (then no
 * callback ever fires). */
static struct hs *dial_start(struct rt *rt, uint64_t to_id, const char *address,
                             uint8_t kind, struct err *err)
{
    struct sockaddr_storage a;
    struct hs *hs;
    int rc;

    if (rt->is_closing) {
        err_set(err, ERR_BUSY, "raft transport: closing");
        return NULL;
    }
    if (rt->token[0] == '\0') {
        err_set(err, ERR_FORBIDDEN, "raft transport: %s",
                rtransport_strerror(RTRANSPORT_ENOTOKEN));
        return NULL;
    }
    if (!parse_address(address, &a)) {
        err_set(err, ERR_INVALID,
                "raft transport: address \"%s\" is not ip:port", address);
        return NULL;
    }
    hs = hs_new(rt, true);
    hs->kind = kind;
    hs->to_id = to_id;
    hs->phase = PH_CONNECT;
    snprintf(hs->peer, sizeof(hs->peer), "%s", address);
    hs->connect.data = hs;
    rc = uv_tcp_connect(&hs->connect, hs->tcp, (struct sockaddr *)&a,
                        on_connect);
    if (rc != 0) {
        hs_close(hs, rc);
        err_set(err, ERR_IO, "raft transport: connect %s: %s", address,
                uv_strerror(rc));
        return NULL;
    }
    uv_timer_start(&hs->timer, on_timeout, rt->timeout_ms, 0);
    hs->has_cb = true;
    return hs;
}

/* ---- struct raft_uv_transport's methods -------------------------------- */

static int rt_init(struct raft_uv_transport *t, raft_id id, const char *address)
{
    struct rt *rt = t->impl;

    if (strlen(address) > RTRANSPORT_ADDRESS_MAX) {
        snprintf(t->errmsg, sizeof(t->errmsg), "address longer than %d bytes",
                 RTRANSPORT_ADDRESS_MAX);
        return RAFT_INVALID;
    }
    if (!rt->has_bind_addr) {
        if (!parse_address(address, &rt->bind_addr)) {
            snprintf(t->errmsg, sizeof(t->errmsg),
                     "address \"%s\" is not ip:port", address);
            return RAFT_INVALID;
        }
        rt->has_bind_addr = true;
    }
    rt->id = id;
    snprintf(rt->address, sizeof(rt->address), "%s", address);
    return 0;
}

static void on_listener_closed(uv_handle_t *h)
{
    struct rt *rt = h->data;

    rt->is_listener_open = false;
    if (rt->is_closing && !rt->is_close_fired && rt->n_hs == 0) {
        rt->is_close_fired = true;
        rt->close_cb(rt->t);
    }
}

static int rt_listen(struct raft_uv_transport *t, raft_uv_accept_cb cb)
{
    struct rt *rt = t->impl;
    int rc;

    if (!rt->has_bind_addr || rt->is_listener_open || rt->is_closing) {
        snprintf(t->errmsg, sizeof(t->errmsg), "listen: %s",
                 rt->has_bind_addr ? "already listening" : "no address");
        return RAFT_INVALID;
    }
    rt->accept_cb = cb;
    rc = uv_tcp_init(rt->loop, &rt->listener);
    ASSERT(rc == 0);
    rt->listener.data = rt;
    rt->is_listener_open = true;
    rc = uv_tcp_bind(&rt->listener, (struct sockaddr *)&rt->bind_addr, 0);
    if (rc == 0) {
        rc = uv_listen((uv_stream_t *)&rt->listener, 128, on_connection);
    }
    if (rc != 0) {
        snprintf(t->errmsg, sizeof(t->errmsg), "listen: %s", uv_strerror(rc));
        uv_close((uv_handle_t *)&rt->listener, on_listener_closed);
        return RAFT_IOERR;
    }
    return 0;
}

static int rt_connect(struct raft_uv_transport *t, struct raft_uv_connect *req,
                      raft_id id, const char *address, raft_uv_connect_cb cb)
{
    struct rt *rt = t->impl;
    struct err err = {0};
    struct hs *hs;

    req->cb = cb;
    hs = dial_start(rt, id, address, RTRANSPORT_KIND_RAFT, &err);
    if (hs == NULL) {
        snprintf(t->errmsg, sizeof(t->errmsg), "%s", err.msg);
        return RAFT_NOCONNECTION;
    }
    hs->req = req;
    hs->connect_cb = cb;
    return 0;
}

/* (6): cancel everything in flight, then fire cb once all is closed. */
static void rt_close(struct raft_uv_transport *t, raft_uv_transport_close_cb cb)
{
    struct rt *rt = t->impl;

    ASSERT(!rt->is_closing);
    rt->is_closing = true;
    rt->close_cb = cb;
    if (rt->is_listener_open && !uv_is_closing((uv_handle_t *)&rt->listener)) {
        uv_close((uv_handle_t *)&rt->listener, on_listener_closed);
    }
    for (struct hs *hs = rt->hs_head; hs != NULL; hs = hs->next) {
        hs_close(hs, UV_ECANCELED);
    }
    if (!rt->is_listener_open && rt->n_hs == 0) {
        rt->is_close_fired = true;
        cb(t);
    }
}

/* ---- the rest of the interface ------------------------------------------
 */

int rtransport_init(struct raft_uv_transport *t, uv_loop_t *loop,
                    const struct rtransport_config *cfg, struct err *err)
{
    struct rt *rt;

    if (cfg->token == NULL) {
        return err_set(err, ERR_INVALID, "raft transport: no token given");
    }
    rt = xcalloc(1, sizeof(*rt));
    if (cfg->listen_address != NULL) {
        if (!parse_address(cfg->listen_address, &rt->bind_addr)) {
            free(rt);
            return err_set(err, ERR_INVALID,
                           "raft transport: listen address \"%s\" is not "
                           "ip:port",
                           cfg->listen_address);
        }
        rt->has_bind_addr = true;
    }
    rt->t = t;
    rt->loop = loop;
    rt->token = xstrdup(cfg->token);
    rt->timeout_ms = cfg->handshake_timeout_ms != 0 ? cfg->handshake_timeout_ms
                                                    : RTRANSPORT_TIMEOUT_MS;
    t->impl = rt;
    t->errmsg[0] = '\0';
    t->init = rt_init;
    t->listen = rt_listen;
    t->connect = rt_connect;
    t->close = rt_close;
    return 0;
}

void rtransport_free(struct raft_uv_transport *t)
{
    struct rt *rt = t->impl;

    if (rt == NULL) {
        return;
    }
    ASSERT(rt->n_hs == 0 && !rt->is_listener_open); /* (6) */
    OPENSSL_cleanse(rt->token, strlen(rt->token));
    free(rt->token);
    free(rt);
    t->impl = NULL;
}

void rtransport_set_channel(struct raft_uv_transport *t, uint8_t kind,
                            rtransport_channel_fn fn, void *arg)
{
    struct rt *rt = t->impl;

    ASSERT(kind != RTRANSPORT_KIND_RAFT);
    rt->channels[kind].fn = fn;
    rt->channels[kind].arg = arg;
}

int rtransport_dial(struct raft_uv_transport *t,
                    const struct rtransport_peer *to, uint8_t kind,
                    rtransport_dial_fn cb, void *arg, struct err *err)
{
    struct rt *rt = t->impl;
    struct hs *hs;

    if (kind == RTRANSPORT_KIND_RAFT || kind == 0) {
        return err_set(err, ERR_INVALID, "raft transport: cannot dial kind %u",
                       kind);
    }
    hs = dial_start(rt, to->id, to->address, kind, err);
    if (hs == NULL) {
        return err->code;
    }
    hs->dial_cb = cb;
    hs->dial_arg = arg;
    return 0;
}

void rtransport_stats(const struct raft_uv_transport *t, uint64_t *accepted,
                      uint64_t *refused)
{
    const struct rt *rt = t->impl;

    if (accepted != NULL) {
        *accepted = rt->accepted;
    }
    if (refused != NULL) {
        *refused = rt->refused;
    }
}
