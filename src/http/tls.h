/* TLS for the HTTP server (docs/design/http-api.md §1.1): OpenSSL over a
 * pair of memory BIOs, so the socket stays libuv's and the handshake never
 * blocks the loop.
 *
 * The server's socket layer (http/server.c) reads ciphertext with libuv
 * and hands it to tls_conn_feed(), which returns the plaintext for the
 * HTTP parser and whatever TLS must send back (handshake records, session
 * tickets, alerts); answers go through tls_conn_encrypt() on their way to
 * uv_write. This module owns no socket and no loop.
 *
 *   (1) Every byte OpenSSL writes to the outgoing BIO is moved into the
 *       caller's wire buffer before the call returns, so the caller sends
 *       records in exactly the order they were made.
 *   (2) After an error from tls_conn_feed() or tls_conn_encrypt() the
 *       connection is unusable: the caller sends the wire bytes (an alert,
 *       maybe) and closes.
 *   (3) Nothing here prompts: a key file with a passphrase is refused.
 *
 * Loop thread only for a tls_conn; a tls_ctx is read-only once made. */
#ifndef QUEEN_HTTP_TLS_H
#define QUEEN_HTTP_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "base/buf.h"
#include "base/err.h"

struct tls_ctx;
struct tls_conn;

/* Which of the two files a tls_ctx_new() failure is about. */
enum tls_file { TLS_FILE_CERT, TLS_FILE_KEY };

/* A server context from a PEM certificate chain file and a PEM private key
 * file (TLS 1.2 and up). Returns 0 and *out (free with tls_ctx_free), or
 * ERR_IO "cannot read: <strerror>" / ERR_INVALID "<why>" with *bad naming
 * the file at fault; the key not matching the certificate is TLS_FILE_KEY.
 * The message names no path: the caller adds the setting and the path. */
int tls_ctx_new(struct tls_ctx **out, const char *cert_path,
                const char *key_path, enum tls_file *bad, struct err *err);
void tls_ctx_free(struct tls_ctx *ctx);

/* A server-side session on ctx (borrowed; it must outlive the session). */
struct tls_conn *tls_conn_new(struct tls_ctx *ctx);
void tls_conn_free(struct tls_conn *t);

/* Ciphertext from the peer (n bytes, borrowed). Appends the plaintext it
 * completes to plain and what TLS must send to wire (1). Returns 0, or
 * ERR_INVALID (handshake failure, bad record) with the library's reason
 * (2). */
int tls_conn_feed(struct tls_conn *t, const char *in, size_t n,
                  struct buf *plain, struct buf *wire, struct err *err);

/* Encrypt nbufs buffers of plaintext, in order, into wire (1). Returns 0,
 * or ERR_INVALID before the handshake finished or on a library failure
 * (2). */
int tls_conn_encrypt(struct tls_conn *t, const uv_buf_t *bufs, unsigned nbufs,
                     struct buf *wire, struct err *err);

/* Append a close_notify alert to wire, once the handshake is done (else
 * nothing). */
void tls_conn_close_notify(struct tls_conn *t, struct buf *wire);

#endif
