/* http/tls: the server session over memory BIOs, driven by an OpenSSL
 * client in the same process (issue 19 item 9). The certificates are made
 * here (P-256, self-signed) and written to temporary PEM files. */
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "http/tls.h"

struct pems {
    char cert[64];
    char key[64];
    char other_key[64];
    char enc_key[64];
};

static EVP_PKEY *make_key(void)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");

    ASSERT(k != NULL);
    return k;
}

static void write_cert(const char *path, EVP_PKEY *k)
{
    X509 *x = X509_new();
    FILE *f;

    ASSERT(x != NULL);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, k);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                               (const unsigned char *)"queen-test", -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(x));
    ASSERT(X509_sign(x, k, EVP_sha256()) > 0);
    f = fopen(path, "w");
    ASSERT(f != NULL);
    PEM_write_X509(f, x);
    fclose(f);
    X509_free(x);
}

static void write_key(const char *path, EVP_PKEY *k, bool is_encrypted)
{
    FILE *f = fopen(path, "w");

    ASSERT(f != NULL);
    if (is_encrypted) {
        PEM_write_PrivateKey(f, k, EVP_aes_128_cbc(),
                             (const unsigned char *)"secret", 6, NULL, NULL);
    } else {
        PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
    }
    fclose(f);
}

static void tmpname(char *out, size_t cap, const char *what)
{
    snprintf(out, cap, "/tmp/queen-test-tls-%d-%s.pem", (int)getpid(), what);
}

static void pems_make(struct pems *p)
{
    EVP_PKEY *k = make_key();
    EVP_PKEY *other = make_key();

    tmpname(p->cert, sizeof(p->cert), "cert");
    tmpname(p->key, sizeof(p->key), "key");
    tmpname(p->other_key, sizeof(p->other_key), "other");
    tmpname(p->enc_key, sizeof(p->enc_key), "enc");
    write_cert(p->cert, k);
    write_key(p->key, k, false);
    write_key(p->other_key, other, false);
    write_key(p->enc_key, k, true);
    EVP_PKEY_free(k);
    EVP_PKEY_free(other);
}

static void pems_remove(const struct pems *p)
{
    unlink(p->cert);
    unlink(p->key);
    unlink(p->other_key);
    unlink(p->enc_key);
}

/* An OpenSSL client on its own pair of memory BIOs. */
struct client {
    SSL_CTX *ctx;
    SSL *ssl;
    BIO *in;
    BIO *out;
};

static void client_new(struct client *c)
{
    c->ctx = SSL_CTX_new(TLS_client_method());
    c->ssl = SSL_new(c->ctx);
    c->in = BIO_new(BIO_s_mem());
    c->out = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(c->in, -1);
    SSL_set_bio(c->ssl, c->in, c->out);
    SSL_set_connect_state(c->ssl);
}

static void client_free(struct client *c)
{
    SSL_free(c->ssl);
    SSL_CTX_free(c->ctx);
}

/* Everything the client wants to send, appended to b. */
static void client_take(struct client *c, struct buf *b)
{
    char tmp[4096];
    int n;
    struct err err;

    while ((n = BIO_read(c->out, tmp, sizeof(tmp))) > 0) {
        ASSERT(buf_append(b, tmp, (size_t)n, &err) == 0);
    }
}

/* Run the handshake, handing the server its bytes step bytes at a time.
 * Returns whether both ends finished it. */
static bool handshake(struct client *c, struct tls_conn *t, size_t step)
{
    struct buf to_srv;
    struct buf plain;
    struct buf wire;
    struct err err;
    bool ok = true;

    buf_init(&to_srv, BUF_UNLIMITED);
    buf_init(&plain, BUF_UNLIMITED);
    buf_init(&wire, BUF_UNLIMITED);
    for (int round = 0; round < 20 && !SSL_is_init_finished(c->ssl); round++) {
        SSL_do_handshake(c->ssl);
        buf_reset(&to_srv);
        client_take(c, &to_srv);
        for (size_t i = 0; i < to_srv.len && ok; i += step) {
            size_t n = to_srv.len - i < step ? to_srv.len - i : step;

            buf_reset(&wire);
            ok = tls_conn_feed(t, to_srv.data + i, n, &plain, &wire, &err) == 0;
            BIO_write(c->in, wire.data, (int)wire.len);
        }
    }
    ok = ok && SSL_is_init_finished(c->ssl) && plain.len == 0;
    buf_free(&to_srv);
    buf_free(&plain);
    buf_free(&wire);
    return ok;
}

static struct tls_ctx *ctx_of(const struct pems *p)
{
    struct tls_ctx *ctx = NULL;
    enum tls_file bad;
    struct err err;

    EXPECT_EQ_I64(tls_ctx_new(&ctx, p->cert, p->key, &bad, &err), 0);
    return ctx;
}

TEST(a_client_and_the_server_exchange_large_bodies_both_ways)
{
    struct pems p;
    struct tls_ctx *ctx;
    struct tls_conn *t;
    struct client c;
    struct buf to_srv;
    struct buf plain;
    struct buf wire;
    struct err err;
    static char big[200000];
    static char back[200000];
    size_t got = 0;
    size_t n;
    uv_buf_t bufs[2];

    pems_make(&p);
    ctx = ctx_of(&p);
    t = tls_conn_new(ctx);
    client_new(&c);
    EXPECT(handshake(&c, t, 1)); /* one byte a feed: never blocks */
    for (size_t i = 0; i < sizeof(big); i++) {
        big[i] = (char)('a' + i % 26);
    }
    buf_init(&to_srv, BUF_UNLIMITED);
    buf_init(&plain, BUF_UNLIMITED);
    buf_init(&wire, BUF_UNLIMITED);
    EXPECT(SSL_write_ex(c.ssl, big, sizeof(big), &n) == 1);
    client_take(&c, &to_srv);
    for (size_t i = 0; i < to_srv.len; i += 65536) {
        size_t k = to_srv.len - i < 65536 ? to_srv.len - i : 65536;

        EXPECT_EQ_I64(tls_conn_feed(t, to_srv.data + i, k, &plain, &wire, &err),
                      0);
    }
    EXPECT_MEM_EQ(plain.data, plain.len, big, sizeof(big));
    buf_reset(&wire);
    bufs[0] = uv_buf_init(big, 100);
    bufs[1] = uv_buf_init(big + 100, sizeof(big) - 100);
    EXPECT_EQ_I64(tls_conn_encrypt(t, bufs, 2, &wire, &err), 0);
    BIO_write(c.in, wire.data, (int)wire.len);
    while (SSL_read_ex(c.ssl, back + got, sizeof(back) - got, &n) == 1) {
        got += n;
    }
    EXPECT_MEM_EQ(back, got, big, sizeof(big));
    /* close_notify reaches the client as a clean end */
    buf_reset(&wire);
    tls_conn_close_notify(t, &wire);
    EXPECT(wire.len > 0);
    BIO_write(c.in, wire.data, (int)wire.len);
    EXPECT(SSL_read_ex(c.ssl, back, 1, &n) == 0);
    EXPECT_EQ_I64(SSL_get_error(c.ssl, 0), SSL_ERROR_ZERO_RETURN);
    buf_free(&to_srv);
    buf_free(&plain);
    buf_free(&wire);
    client_free(&c);
    tls_conn_free(t);
    tls_ctx_free(ctx);
    pems_remove(&p);
}

TEST(plain_http_on_the_tls_port_is_a_tls_error_and_nothing_is_decrypted)
{
    struct pems p;
    struct tls_ctx *ctx;
    struct tls_conn *t;
    struct buf plain;
    struct buf wire;
    struct err err;
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    char x[] = "x";
    uv_buf_t b = uv_buf_init(x, 1);

    pems_make(&p);
    ctx = ctx_of(&p);
    t = tls_conn_new(ctx);
    buf_init(&plain, BUF_UNLIMITED);
    buf_init(&wire, BUF_UNLIMITED);
    EXPECT_EQ_I64(tls_conn_encrypt(t, &b, 1, &wire, &err), ERR_INVALID);
    EXPECT_EQ_I64(tls_conn_feed(t, req, strlen(req), &plain, &wire, &err),
                  ERR_INVALID);
    EXPECT(strncmp(err.msg, "tls: ", 5) == 0);
    EXPECT_EQ_U64(plain.len, 0);
    buf_reset(&wire);
    tls_conn_close_notify(t, &wire); /* after a failure: nothing */
    EXPECT_EQ_U64(wire.len, 0);
    buf_free(&plain);
    buf_free(&wire);
    tls_conn_free(t);
    tls_ctx_free(ctx);
    pems_remove(&p);
}

TEST(bad_files_name_which_file_and_why)
{
    struct pems p;
    struct tls_ctx *ctx = NULL;
    enum tls_file bad;
    struct err err;

    pems_make(&p);
    EXPECT_EQ_I64(tls_ctx_new(&ctx, "/nonexistent/c.pem", p.key, &bad, &err),
                  ERR_IO);
    EXPECT_EQ_I64(bad, TLS_FILE_CERT);
    EXPECT_STR_EQ(err.msg, "cannot read: No such file or directory");
    EXPECT_EQ_I64(tls_ctx_new(&ctx, p.cert, "/nonexistent/k.pem", &bad, &err),
                  ERR_IO);
    EXPECT_EQ_I64(bad, TLS_FILE_KEY);
    EXPECT_EQ_I64(tls_ctx_new(&ctx, p.cert, p.other_key, &bad, &err),
                  ERR_INVALID);
    EXPECT_EQ_I64(bad, TLS_FILE_KEY);
    EXPECT_STR_EQ(err.msg, "the private key does not match the certificate "
                           "in QUEEN_TLS_CERT");
    EXPECT_EQ_I64(tls_ctx_new(&ctx, p.key, p.key, &bad, &err), ERR_INVALID);
    EXPECT_EQ_I64(bad, TLS_FILE_CERT);
    EXPECT(strncmp(err.msg, "not a PEM certificate chain", 27) == 0);
    /* an encrypted key is refused, without asking for a passphrase */
    EXPECT_EQ_I64(tls_ctx_new(&ctx, p.cert, p.enc_key, &bad, &err),
                  ERR_INVALID);
    EXPECT_EQ_I64(bad, TLS_FILE_KEY);
    EXPECT(strncmp(err.msg, "not an unencrypted PEM private key", 34) == 0);
    EXPECT(ctx == NULL);
    pems_remove(&p);
}
