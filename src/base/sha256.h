/* Digests and encodings over OpenSSL's EVP: SHA-256 (object checksums,
 * SigV4 payload hashes), HMAC-SHA256 (SigV4 signing keys), MD5
 * (Content-MD5), lowercase hex, and standard base64 with padding.
 * OpenSSL failures here mean a broken library: they abort via ASSERT. */
#ifndef QUEEN_BASE_SHA256_H
#define QUEEN_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

#define SHA256_LEN 32
#define MD5_LEN    16

void sha256(const void *p, size_t n, uint8_t out[32]);

/* Incremental SHA-256. init allocates (final frees): every init must be
 * followed by final, or by sha256_abandon. */
struct sha256_ctx {
    void *md; /* EVP_MD_CTX * */
};
void sha256_init(struct sha256_ctx *c);
void sha256_update(struct sha256_ctx *c, const void *p, size_t n);
void sha256_final(struct sha256_ctx *c, uint8_t out[32]);
void sha256_abandon(struct sha256_ctx *c);

void hmac_sha256(const void *key, size_t keylen, const void *msg, size_t n,
                 uint8_t out[32]);
void md5(const void *p, size_t n, uint8_t out[16]);

/* Write 2n lowercase hex digits and a NUL: out has room for 2n + 1. */
void hex_lower(const uint8_t *p, size_t n, char *out);
/* The value of one hex digit (either case), or -1. */
int hex_digit(char c);

/* Append the standard base64 (A-Z a-z 0-9 + /, '=' padding) of p to b. */
int base64_encode(const uint8_t *p, size_t n, struct buf *b, struct err *err);
/* Append the decoded bytes of standard padded base64 text to b. Strict: the
 * length must be a multiple of 4, padding only at the end, no whitespace,
 * unused bits zero. ERR_INVALID "base64: ..." otherwise (b unchanged). */
int base64_decode(const char *s, size_t n, struct buf *b, struct err *err);

#endif
