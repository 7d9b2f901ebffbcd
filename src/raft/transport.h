/* The raft transport: libraft's `struct raft_uv_transport` over TCP, where
 * every connection first proves knowledge of a shared token (QUEEN_RAFT_TOKEN)
 * in both directions, and then carries either raft traffic or another
 * "channel" (write forwarding) on the same port.
 *
 * Invariants:
 * (1) The token never crosses the wire and a recorded handshake cannot be
 *     replayed: each side proves the token with HMAC-SHA256 over a nonce the
 *     OTHER side drew fresh (OpenSSL RAND_bytes) for this connection.
 * (2) Mutual, and meant for one node: a dialer hands a stream over only
 *     after the listener proved the token too, so a rogue listener learns
 *     nothing and gets no data. The dial proof names the raft id of the
 *     node the dialer means to reach, and a listener checks it against its
 *     own: a rogue listener (on the address of a member that is down, or of
 *     a spare) cannot relay a member's hello to another member, or back to
 *     the dialer itself, and sit in the middle of the connection. A hello
 *     claiming the listener's own id is refused too.
 * (3) No byte of stream data is ever taken by the handshake reader: each read
 *     asks libuv for exactly the bytes the current message still lacks (the
 *     alloc callback returns a buffer of that size, so read(2) can take no
 *     more) and reading stops in the callback that completes the message.
 *     Moreover neither side sends anything the other has not asked for yet:
 *     the listener sends nothing after its challenge until the whole hello is
 *     in, the dialer nothing after its hello until it read the verdict, and a
 *     stream is handed over only once our own last write completed. So the
 *     first byte after the handshake is still in the kernel's socket buffer
 *     when libraft (or a channel) calls uv_read_start.
 * (4) Everything is bounded: an address is at most RTRANSPORT_ADDRESS_MAX
 *     bytes, at most RTRANSPORT_PENDING_MAX incoming handshakes run at once
 *     and at most RTRANSPORT_PENDING_PER_IP from one IP address (more are
 *     closed at accept), and a handshake that is not done within
 *     handshake_timeout_ms is closed. A stranger holding silent
 *     connections from one address thus leaves room for the members (a
 *     member has a handshake or two running at a time): with the global
 *     bound alone, 64 of them kept a cluster without a leader for as long
 *     as they were held.
 * (5) Every refused incoming connection (bad magic, version, type, length,
 *     proof, kind, truncated, timed out, too many, no token) is closed and
 *     counted once in `refused`; it is logged at warn with the peer's
 *     IP:port and the reason, at most once a second per reason (the lines
 *     suppressed meanwhile are counted in the next one). A token or a proof
 *     is never logged.
 * (6) A connect or dial callback fires exactly once: with an owned stream
 *     and 0, or with NULL and a status < 0. Closing the transport cancels the
 *     pending ones (RAFT_CANCELED for libraft's connect, UV_ECANCELED for
 *     rtransport_dial) and only then fires the close callback.
 *
 * Streams handed out (to libraft's accept and connect callbacks, to a
 * channel function, to a dial callback) are a `uv_tcp_t` allocated alone with
 * malloc: the new owner uv_close()s it and then free()s it (libraft's
 * raft_free does exactly that; src/raft/arena.c passes blocks it did not cut
 * to libc).
 *
 * It authenticates the start of a connection; it neither encrypts nor
 * protects the integrity of the bytes that follow (an attacker on the path
 * can still read or rewrite them): peers talk over a private network.
 *
 * Wire format (all integers big-endian). Every message opens with the same
 * 8-byte header:
 *
 *   offset size description
 *   0      4    magic "QNRT"
 *   4      1    version, 2 (1 bound no listener id: refused as "bad version")
 *   5      1    type: 1 challenge, 2 hello, 3 verdict
 *   6      1    hello: channel kind; verdict: status; challenge: 0
 *   7      1    hello: address length (0..255); otherwise 0
 *
 * challenge, listener -> dialer, right after accept (40 bytes):
 *   8      32   server nonce Ns
 *
 * hello, dialer -> listener, after the challenge (80 + address length):
 *   8      8    the dialer's raft id
 *   16     32   client nonce Nc
 *   48     32   dial proof = HMAC-SHA256(token, "queen raft dial v2" ||
 *               Ns || hello[0..48) || address || to_id), to_id the 8-byte
 *               raft id of the listener the dialer means to reach (not
 *               sent: the listener puts its own)
 *   80     n    the dialer's raft address, no NUL (n = byte 7)
 *
 * verdict, listener -> dialer, after the hello (40 bytes):
 *   6      1    status: 0 accepted, 1 bad proof, 2 kind not served
 *   8      32   accepted: accept proof = HMAC-SHA256(token,
 *               "queen raft accept v2" || Nc || dial proof); zeros otherwise
 *
 * A refusal for a bad proof or an unserved kind is answered with its verdict
 * (so a misconfigured peer gets a clear status); anything else that is wrong
 * is answered by closing. The two labels differ, so one side's proof is never
 * valid as the other's. */
#ifndef QUEEN_RAFT_TRANSPORT_H
#define QUEEN_RAFT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <raft.h>
#include <raft/uv.h>
#include <uv.h>

#include "base/err.h"

#define RTRANSPORT_KIND_RAFT    1
#define RTRANSPORT_KIND_FORWARD 2

#define RTRANSPORT_NONCE_LEN      32
#define RTRANSPORT_PROOF_LEN      32
#define RTRANSPORT_ADDRESS_MAX    255
#define RTRANSPORT_HEADER_LEN     8
#define RTRANSPORT_CHALLENGE_LEN  40
#define RTRANSPORT_HELLO_FIXED    80
#define RTRANSPORT_HELLO_MAX      (RTRANSPORT_HELLO_FIXED + RTRANSPORT_ADDRESS_MAX)
#define RTRANSPORT_VERDICT_LEN    40
#define RTRANSPORT_PENDING_MAX    64
#define RTRANSPORT_PENDING_PER_IP 8
#define RTRANSPORT_TIMEOUT_MS     5000

/* Verdict statuses (byte 6 of a verdict). */
#define RTRANSPORT_VERDICT_OK        0
#define RTRANSPORT_VERDICT_BAD_PROOF 1
#define RTRANSPORT_VERDICT_BAD_KIND  2

/* Dial statuses of our own, beside libuv's UV_E* (all below any UV_E*). */
#define RTRANSPORT_EREFUSED (-30001) /* the listener refused our token */
#define RTRANSPORT_EKIND    (-30002) /* the listener serves no such kind */
#define RTRANSPORT_EPROTO   (-30003) /* the listener spoke something else */
#define RTRANSPORT_EPEER    (-30004) /* the listener failed to prove the token */
#define RTRANSPORT_ENOTOKEN (-30005) /* our token is "" */

struct rtransport_config {
    /* "ip:port" to bind (an IPv4 literal, or an IPv6 one in brackets); NULL
     * means the address libraft's init gives. Borrowed for the init call. */
    const char *listen_address;
    /* Shared secret, NUL-terminated, copied. "" refuses every incoming
     * connection and dials nothing. */
    const char *token;
    unsigned handshake_timeout_ms; /* 0 = RTRANSPORT_TIMEOUT_MS */
};

/* Fill t (init/listen/connect/close + impl) so that
 * raft_uv_init(&io, loop, dir, t) can use it; t->data stays libraft's.
 * Errors: ERR_INVALID (listen_address does not parse, token NULL). */
int rtransport_init(struct raft_uv_transport *t, uv_loop_t *loop,
                    const struct rtransport_config *cfg, struct err *err);

/* Free what rtransport_init allocated, once t->close's callback has fired
 * (libraft calls t->close from raft_uv's close; for a transport libraft never
 * saw, call t->close(t, cb) yourself). */
void rtransport_free(struct raft_uv_transport *t);

/* An incoming authenticated connection of a kind other than RAFT: the stream
 * is taken by fn (uv_close() then free()); peer_id is the id the dialer
 * claimed, authenticated by the token. */
typedef void (*rtransport_channel_fn)(void *arg, uint64_t peer_id,
                                      uv_stream_t *stream);

/* Serve kind (not RTRANSPORT_KIND_RAFT, which is libraft's) with fn; fn NULL
 * stops serving it (dialers then get RTRANSPORT_EKIND). */
void rtransport_set_channel(struct raft_uv_transport *t, uint8_t kind,
                            rtransport_channel_fn fn, void *arg);

/* Dial callback: an authenticated stream owned by the callee (uv_close()
 * then free()) and 0, or NULL and a status < 0: a UV_E* code (UV_ETIMEDOUT
 * for a stalled handshake, UV_ECANCELED when the transport closed) or an
 * RTRANSPORT_E* code. */
typedef void (*rtransport_dial_fn)(void *arg, uv_stream_t *stream, int status);

/* The node a dial means to reach: its raft id (bound into the proof, so
 * that only that node accepts the hello: (2)) and "ip:port". */
struct rtransport_peer {
    uint64_t id;
    const char *address;
};

/* Dial node to for a channel of kind, claiming the raft id and address
 * libraft's init gave (0 and "" before it). cb fires exactly once, never
 * inside this call. Errors (cb then never fires): ERR_INVALID (bad address
 * or kind), ERR_FORBIDDEN (token ""), ERR_BUSY (transport closing), ERR_IO
 * (the socket call failed). */
int rtransport_dial(struct raft_uv_transport *t,
                    const struct rtransport_peer *to, uint8_t kind,
                    rtransport_dial_fn cb, void *arg, struct err *err);

/* Incoming connections accepted (handed to libraft or a channel) and refused
 * (5), since init. Either pointer may be NULL. */
void rtransport_stats(const struct raft_uv_transport *t, uint64_t *accepted,
                      uint64_t *refused);

/* A sentence for a dial status: ours, or libuv's. */
const char *rtransport_strerror(int status);

/* ---- the wire format, pure (no I/O, no clock, no randomness) ---------- */

/* Why an incoming handshake was refused: the `reason` of the log line. */
enum rtransport_reason {
    RTRANSPORT_R_OK = 0,
    RTRANSPORT_R_MAGIC,     /* not "QNRT" */
    RTRANSPORT_R_VERSION,   /* another version */
    RTRANSPORT_R_TYPE,      /* not the message expected now */
    RTRANSPORT_R_MALFORMED, /* reserved byte set, NUL in the address, ... */
    RTRANSPORT_R_PROOF,     /* the proof does not match the token */
    RTRANSPORT_R_KIND,      /* kind not served, or a raft hello without id */
    RTRANSPORT_R_TRUNCATED, /* the peer closed mid-handshake */
    RTRANSPORT_R_TIMEOUT,   /* handshake_timeout_ms passed */
    RTRANSPORT_R_BUSY,      /* too many handshakes running (4) */
    RTRANSPORT_R_NO_TOKEN,  /* our token is "" */
    RTRANSPORT_R_COUNT
};
const char *rtransport_reason_name(int reason);

/* A parsed hello; address is NUL-terminated. */
struct rtransport_hello {
    uint8_t kind;
    uint64_t id;    /* the dialer's raft id */
    uint64_t to_id; /* the listener's it is meant for: in the proof only */
    uint8_t nonce[RTRANSPORT_NONCE_LEN];
    uint8_t proof[RTRANSPORT_PROOF_LEN];
    size_t address_len;
    char address[RTRANSPORT_ADDRESS_MAX + 1];
};

/* Write a challenge carrying nonce into out. */
void rtransport_challenge_encode(const uint8_t nonce[RTRANSPORT_NONCE_LEN],
                                 uint8_t out[RTRANSPORT_CHALLENGE_LEN]);
/* Read a challenge's nonce; returns RTRANSPORT_R_OK or the reason. */
int rtransport_challenge_parse(const uint8_t in[RTRANSPORT_CHALLENGE_LEN],
                               uint8_t nonce[RTRANSPORT_NONCE_LEN]);

/* Write the hello answering server_nonce for h's kind, id, nonce and
 * address (its first address_len bytes, at most RTRANSPORT_ADDRESS_MAX;
 * h->proof is not read), proved for the listener h->to_id, into out
 * (RTRANSPORT_HELLO_MAX bytes); returns its length. The dial proof it computed
 * is at out + 48. token is NUL-terminated. */
size_t rtransport_hello_encode(const char *token,
                               const uint8_t server_nonce[RTRANSPORT_NONCE_LEN],
                               const struct rtransport_hello *h, uint8_t *out);
/* Check a hello's fixed part; on RTRANSPORT_R_OK *address_len is how many
 * address bytes follow it. */
int rtransport_hello_head(const uint8_t in[RTRANSPORT_HELLO_FIXED],
                          size_t *address_len);
/* Parse a whole hello of n bytes (its head already checked or not) into h
 * and verify its proof against token, server_nonce and this listener's raft
 * id self_id (constant time). Returns RTRANSPORT_R_OK, or the reason (h
 * then undefined). */
int rtransport_hello_verify(const char *token,
                            const uint8_t server_nonce[RTRANSPORT_NONCE_LEN],
                            uint64_t self_id, const uint8_t *in, size_t n,
                            struct rtransport_hello *h);

/* Write the verdict for a verified hello h (status OK: with the accept
 * proof) or a refusal (status BAD_PROOF or BAD_KIND; h may be NULL). */
void rtransport_verdict_encode(const char *token, int status,
                               const struct rtransport_hello *h,
                               uint8_t out[RTRANSPORT_VERDICT_LEN]);
/* Read a verdict answering our hello (client_nonce, dial_proof): returns 0
 * when the listener accepted AND proved the token, else an RTRANSPORT_E*
 * code (EREFUSED, EKIND, EPROTO, EPEER). */
int rtransport_verdict_check(const char *token,
                             const uint8_t client_nonce[RTRANSPORT_NONCE_LEN],
                             const uint8_t dial_proof[RTRANSPORT_PROOF_LEN],
                             const uint8_t in[RTRANSPORT_VERDICT_LEN]);

#endif
