/* TLS for the HTTP server (http/tls.h): OpenSSL over a pair of memory BIOs.
 *
 * Each session has an incoming BIO that tls_conn_feed() fills with what
 * libuv read, and an outgoing BIO that every call empties into the
 * caller's wire buffer (1). The incoming BIO answers "retry" when empty
 * (BIO_set_mem_eof_return), so SSL_read and the handshake stop with
 * SSL_ERROR_WANT_READ instead of reading an end of file: the handshake
 * advances one feed at a time and never waits on the socket.
 *
 * Both BIOs grow without bound inside a call only: the incoming one holds
 * at most one libuv read, and the outgoing one is emptied before return. */
#include "http/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "base/xalloc.h"

#define TLS_READ_CHUNK 16384 /* one TLS record's plaintext at most */

struct tls_ctx {
    SSL_CTX *ssl_ctx;
};

struct tls_conn {
    SSL *ssl;
    BIO *in;        /* owned by ssl */
    BIO *out;       /* owned by ssl */
    bool is_failed; /* (2) */
};

/* The library's reason for the last failure, or fallback. */
static const char *tls_reason(char *b, size_t cap, const char *fallback)
{
    unsigned long e = ERR_peek_last_error();

    if (e == 0) {
        snprintf(b, cap, "%s", fallback);
    } else {
        ERR_error_string_n(e, b, cap);
    }
    ERR_clear_error();
    return b;
}

/* (3) An encrypted key fails to load instead of asking a terminal. The
 * signature is OpenSSL's pem_password_cb. */
/* NOLINTNEXTLINE(readability-non-const-parameter) */
static int tls_no_passphrase(char *buf, int size, int rwflag, void *arg)
{
    UNUSED(buf);
    UNUSED(size);
    UNUSED(rwflag);
    UNUSED(arg);
    return 0;
}

static int tls_readable(const char *path, struct err *err)
{
    FILE *f = fopen(path, "rb");

    if (f == NULL) {
        return err_set(err, ERR_IO, "cannot read: %s", strerror(errno));
    }
    fclose(f);
    return 0;
}

static int tls_ctx_load(SSL_CTX *c, const char *cert_path, const char *key_path,
                        enum tls_file *bad, struct err *err)
{
    char why[256];

    *bad = TLS_FILE_CERT;
    if (tls_readable(cert_path, err) != 0) {
        return err->code;
    }
    if (SSL_CTX_use_certificate_chain_file(c, cert_path) != 1) {
        return err_set(err, ERR_INVALID, "not a PEM certificate chain: %s",
                       tls_reason(why, sizeof(why), "no certificate"));
    }
    *bad = TLS_FILE_KEY;
    if (tls_readable(key_path, err) != 0) {
        return err->code;
    }
    if (SSL_CTX_use_PrivateKey_file(c, key_path, SSL_FILETYPE_PEM) != 1) {
        /* loading the key checks it against the certificate already */
        if (ERR_GET_REASON(ERR_peek_last_error()) ==
            X509_R_KEY_VALUES_MISMATCH) {
            ERR_clear_error();
            return err_set(err, ERR_INVALID,
                           "the private key does not match the certificate "
                           "in QUEEN_TLS_CERT");
        }
        return err_set(err, ERR_INVALID,
                       "not an unencrypted PEM private key: %s",
                       tls_reason(why, sizeof(why), "no key"));
    }
    if (SSL_CTX_check_private_key(c) != 1) {
        ERR_clear_error();
        return err_set(err, ERR_INVALID,
                       "the private key does not match the certificate "
                       "in QUEEN_TLS_CERT");
    }
    return 0;
}

int tls_ctx_new(struct tls_ctx **out, const char *cert_path,
                const char *key_path, enum tls_file *bad, struct err *err)
{
    SSL_CTX *c;
    char why[256];

    ERR_clear_error();
    *bad = TLS_FILE_CERT;
    c = SSL_CTX_new(TLS_server_method());
    if (c == NULL) {
        return err_set(err, ERR_INVALID, "SSL_CTX_new: %s",
                       tls_reason(why, sizeof(why), "failed"));
    }
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    /* A client may not renegotiate: it would make the server do a
     * handshake's work on demand inside an open connection. */
    SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION);
    /* Idle keep-alive connections give their record buffers back. */
    SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_default_passwd_cb(c, tls_no_passphrase);
    if (tls_ctx_load(c, cert_path, key_path, bad, err) != 0) {
        SSL_CTX_free(c);
        return err->code;
    }
    *out = xcalloc(1, sizeof(**out));
    (*out)->ssl_ctx = c;
    return 0;
}

void tls_ctx_free(struct tls_ctx *ctx)
{
    if (ctx == NULL) {
        return;
    }
    SSL_CTX_free(ctx->ssl_ctx);
    free(ctx);
}

struct tls_conn *tls_conn_new(struct tls_ctx *ctx)
{
    struct tls_conn *t = xcalloc(1, sizeof(*t));

    t->ssl = SSL_new(ctx->ssl_ctx);
    t->in = BIO_new(BIO_s_mem());
    t->out = BIO_new(BIO_s_mem());
    ASSERT(t->ssl != NULL && t->in != NULL && t->out != NULL);
    BIO_set_mem_eof_return(t->in, -1); /* empty means "retry" */
    SSL_set_bio(t->ssl, t->in, t->out);
    SSL_set_accept_state(t->ssl);
    return t;
}

void tls_conn_free(struct tls_conn *t)
{
    if (t == NULL) {
        return;
    }
    SSL_free(t->ssl); /* frees both BIOs */
    free(t);
}

/* (1) Move everything OpenSSL wrote into wire. */
static int tls_drain(struct tls_conn *t, struct buf *wire, struct err *err)
{
    size_t n = BIO_ctrl_pending(t->out);
    int got;

    if (n == 0) {
        return 0;
    }
    if (buf_reserve(wire, n, err) != 0) {
        return err->code;
    }
    got = BIO_read(t->out, wire->data + wire->len, (int)n);
    ASSERT(got == (int)n); /* a memory BIO gives what it holds */
    wire->len += n;
    wire->data[wire->len] = '\0';
    return 0;
}

int tls_conn_feed(struct tls_conn *t, const char *in, size_t n,
                  struct buf *plain, struct buf *wire, struct err *err)
{
    char why[256];
    int rc = 0;

    ERR_clear_error();
    if (n > 0 && BIO_write(t->in, in, (int)n) != (int)n) {
        return err_set(err, ERR_INVALID, "tls: buffering input failed");
    }
    for (;;) {
        size_t got = 0;
        int e;

        if (buf_reserve(plain, TLS_READ_CHUNK, err) != 0) {
            rc = err->code;
            break;
        }
        if (SSL_read_ex(t->ssl, plain->data + plain->len, TLS_READ_CHUNK,
                        &got) == 1) {
            plain->len += got;
            plain->data[plain->len] = '\0';
            continue;
        }
        e = SSL_get_error(t->ssl, 0);
        /* ZERO_RETURN: close_notify, the peer's FIN follows */
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_ZERO_RETURN) {
            t->is_failed = true;
            rc = err_set(err, ERR_INVALID, "tls: %s",
                         tls_reason(why, sizeof(why), "connection failed"));
        }
        break;
    }
    if (tls_drain(t, wire, err) != 0 && rc == 0) {
        rc = err->code;
    }
    return rc;
}

int tls_conn_encrypt(struct tls_conn *t, const uv_buf_t *bufs, unsigned nbufs,
                     struct buf *wire, struct err *err)
{
    char why[256];

    ERR_clear_error();
    if (!SSL_is_init_finished(t->ssl)) {
        return err_set(err, ERR_INVALID, "tls: answer before the handshake");
    }
    for (unsigned i = 0; i < nbufs; i++) {
        size_t done = 0;

        if (bufs[i].len == 0) {
            continue;
        }
        /* A memory BIO never refuses: the whole buffer goes at once. */
        if (SSL_write_ex(t->ssl, bufs[i].base, bufs[i].len, &done) != 1 ||
            done != bufs[i].len) {
            t->is_failed = true;
            tls_drain(t, wire, err);
            return err_set(err, ERR_INVALID, "tls: %s",
                           tls_reason(why, sizeof(why), "write failed"));
        }
        if (tls_drain(t, wire, err) != 0) {
            return err->code;
        }
    }
    return 0;
}

void tls_conn_close_notify(struct tls_conn *t, struct buf *wire)
{
    struct err err;

    if (t->is_failed || !SSL_is_init_finished(t->ssl)) {
        return;
    }
    ERR_clear_error();
    SSL_shutdown(t->ssl);
    ERR_clear_error();
    tls_drain(t, wire, &err);
}
