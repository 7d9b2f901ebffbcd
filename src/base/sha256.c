/* Digests and encodings over OpenSSL's EVP. */
#include "base/sha256.h"

#include <stdbool.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

void sha256(const void *p, size_t n, uint8_t out[32])
{
    unsigned int len = 0;

    ASSERT(EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) == 1);
    ASSERT(len == SHA256_LEN);
}

void sha256_init(struct sha256_ctx *c)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();

    ASSERT(md != NULL);
    ASSERT(EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1);
    c->md = md;
}

void sha256_update(struct sha256_ctx *c, const void *p, size_t n)
{
    ASSERT(EVP_DigestUpdate((EVP_MD_CTX *)c->md, p, n) == 1);
}

void sha256_final(struct sha256_ctx *c, uint8_t out[32])
{
    unsigned int len = 0;

    ASSERT(EVP_DigestFinal_ex((EVP_MD_CTX *)c->md, out, &len) == 1);
    ASSERT(len == SHA256_LEN);
    sha256_abandon(c);
}

void sha256_abandon(struct sha256_ctx *c)
{
    EVP_MD_CTX_free((EVP_MD_CTX *)c->md);
    c->md = NULL;
}

void hmac_sha256(const void *key, size_t keylen, const void *msg, size_t n,
                 uint8_t out[32])
{
    unsigned int len = 0;

    ASSERT(keylen <= (size_t)INT32_MAX);
    ASSERT(HMAC(EVP_sha256(), key, (int)keylen, msg, n, out, &len) != NULL);
    ASSERT(len == SHA256_LEN);
}

void md5(const void *p, size_t n, uint8_t out[16])
{
    unsigned int len = 0;

    ASSERT(EVP_Digest(p, n, out, &len, EVP_md5(), NULL) == 1);
    ASSERT(len == MD5_LEN);
}

void hex_lower(const uint8_t *p, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[p[i] >> 4];
        out[2 * i + 1] = hex[p[i] & 15];
    }
    out[2 * n] = '\0';
}

int hex_digit(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

static const char b64_pad = '=';
static const char b64_alpha[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_encode(const uint8_t *p, size_t n, struct buf *b, struct err *err)
{
    size_t out_len = (n + 2) / 3 * 4;
    char *o;

    if (buf_reserve(b, out_len, err) != 0) {
        return err->code;
    }
    o = b->data + b->len;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        size_t left = n - i;
        if (left > 1) {
            v |= (uint32_t)p[i + 1] << 8;
        }
        if (left > 2) {
            v |= p[i + 2];
        }
        *o++ = b64_alpha[(v >> 18) & 63];
        *o++ = b64_alpha[(v >> 12) & 63];
        o[0] = b64_pad;
        o[1] = b64_pad;
        if (left > 1) {
            o[0] = b64_alpha[(v >> 6) & 63];
        }
        if (left > 2) {
            o[1] = b64_alpha[v & 63];
        }
        o += 2;
    }
    b->len += out_len;
    b->data[b->len] = '\0';
    return 0;
}

/* The value of one base64 character, or -1 (ranges, not a search: sealed
 * payloads decode their whole ciphertext through here). */
static int b64_val(char c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decode one 4-character group; pad = number of '=' (0..2, only allowed in
 * the last group). Returns the byte count or -1. */
static int b64_group(const char *s, bool last, uint8_t out[3])
{
    int v[4];
    int pad = 0;
    uint32_t w = 0;

    for (int j = 0; j < 4; j++) {
        v[j] = b64_val(s[j]);
        if (s[j] == '=' && last && j >= 2) {
            v[j] = 0;
            pad++;
        } else if (v[j] < 0 || pad > 0) {
            return -1;
        }
        w = w << 6 | (uint32_t)v[j];
    }
    if ((pad == 1 && (w & 0xff) != 0) || (pad == 2 && (w & 0xffff) != 0)) {
        return -1; /* unused bits must be zero */
    }
    out[0] = (uint8_t)(w >> 16);
    out[1] = (uint8_t)(w >> 8);
    out[2] = (uint8_t)w;
    return 3 - pad;
}

int base64_decode(const char *s, size_t n, struct buf *b, struct err *err)
{
    size_t len = 0;
    uint8_t *o;

    if (n % 4 != 0) {
        return err_set(err, ERR_INVALID,
                       "base64: length %zu is not a multiple of 4", n);
    }
    if (buf_reserve(b, n / 4 * 3, err) != 0) {
        return err->code;
    }
    o = (uint8_t *)b->data + b->len;
    for (size_t i = 0; i < n; i += 4) {
        int k = b64_group(s + i, i + 4 == n, o + len);
        if (k < 0) {
            b->data[b->len] = '\0';
            return err_set(err, ERR_INVALID,
                           "base64: bad character or padding at byte %zu", i);
        }
        len += (size_t)k;
    }
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}
