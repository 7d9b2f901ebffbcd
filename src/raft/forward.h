/* The forward channel: how a follower hands a write to the leader. A
 * follower's node_propose() sends the encoded command over an authenticated
 * stream (raft/transport.h, kind RTRANSPORT_KIND_FORWARD) to the leader,
 * which proposes it as its own (stamping it) and answers once the entry
 * applied on the leader: with its raft index, or with the refusal. The
 * follower then answers its caller from its OWN apply of that index
 * (node.c, "Forwarded proposals"), so the caller reads its write on the
 * node it asked.
 *
 * Frames (both directions, integers big-endian):
 *
 *   offset size  field
 *   0      4     len: bytes after this field (9 .. FWD_FRAME_MAX)
 *   4      1     op: FWD_OP_PROPOSE or FWD_OP_REPLY
 *   5      8     id: chosen by the follower, echoed in the reply
 *   propose:
 *   13     1     command type (enum cmd_type)
 *   14     ...   the command's bytes (raft/cmd.h), len - 10 of them
 *   reply:
 *   13     4     code: 0, or an ERR_* (base/err.h) of the refusal
 *   17     8     index: the entry's raft index when code is 0
 *   25     ...   message: UTF-8, len - 21 bytes, at most FWD_MSG_MAX
 *
 * Invariants:
 *   (1) The codec is pure (no I/O): fwd_decode() takes any bytes and either
 *       asks for more, returns one frame, or refuses them; it never reads
 *       past len. A refused stream is closed.
 *   (2) A connection delivers frames in the order they were sent, and every
 *       frame handed to fwd_conn_send() is written whole or the connection
 *       closes (the closed callback runs exactly once).
 *
 * Threading: loop thread only. */
#ifndef QUEEN_RAFT_FORWARD_H
#define QUEEN_RAFT_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/err.h"

#define FWD_OP_PROPOSE 1
#define FWD_OP_REPLY   2
#define FWD_HEAD_LEN   13
/* A push body is at most QUEEN_MAX_BODY_BYTES (1 GiB) and its command a
 * little more. */
#define FWD_FRAME_MAX (((uint32_t)1 << 30) + 4096)
#define FWD_MSG_MAX   512

struct fwd_frame {
    int op;
    uint64_t id;
    /* propose */
    int type;
    const void *cmd; /* borrowed from the decoded bytes */
    size_t cmd_len;
    /* reply */
    int code;
    uint64_t index;
    const char *msg; /* borrowed, not NUL-terminated */
    size_t msg_len;
};

/* Append f's encoding to out. Returns 0, or ERR_TOO_BIG when the frame
 * would exceed FWD_FRAME_MAX (nothing appended); a reply's message is cut
 * to FWD_MSG_MAX. */
int fwd_encode(struct buf *out, const struct fwd_frame *f, struct err *err);

/* Decode one frame from p[0..n). Returns 1 with *f (pointing into p) and
 * *used, 0 when more bytes are needed, or -1 with err (malformed: unknown
 * op, a length out of range). */
int fwd_decode(const void *p, size_t n, struct fwd_frame *f, size_t *used,
               struct err *err);

/* ---- a connection --------------------------------------------------------
 */

struct fwd_conn;

/* One decoded frame (borrowed for the call). The callback may send on c,
 * and may close it. */
typedef void (*fwd_frame_fn)(void *arg, struct fwd_conn *c,
                             const struct fwd_frame *f);
/* The connection is gone (peer closed, read or write error, a malformed
 * frame, or fwd_conn_close()); status is 0 or a libuv error. c is freed
 * right after this returns. */
typedef void (*fwd_closed_fn)(void *arg, struct fwd_conn *c, int status);

/* Take stream (allocated with malloc, as raft/transport.h hands it; closed
 * and freed here) and start reading frames. Returns owned; it frees itself
 * after the closed callback. */
struct fwd_conn *fwd_conn_new(uv_stream_t *stream, fwd_frame_fn on_frame,
                              fwd_closed_fn on_closed, void *arg);

/* Queue f for writing. Returns 0, or ERR_BUSY when the connection is
 * closing, ERR_TOO_BIG (fwd_encode). */
int fwd_conn_send(struct fwd_conn *c, const struct fwd_frame *f,
                  struct err *err);

/* Close: the closed callback runs later, once, with status 0. */
void fwd_conn_close(struct fwd_conn *c);

/* User data slot (not touched by the connection). */
void fwd_conn_set_data(struct fwd_conn *c, void *data);
void *fwd_conn_data(const struct fwd_conn *c);

#endif
