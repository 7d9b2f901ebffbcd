/* AWS Signature Version 4 for S3 (docs/design/formats.md §9). Pure: no clock,
 * no I/O; the request time arrives as the x-amz-date header the caller built.
 *   (1) The path is URI-encoded exactly once: unreserved A-Za-z0-9-._~ and
 *       '/' are kept, every other byte becomes %XX (uppercase); no
 *       normalisation; an empty path is "/".
 *   (2) Query names and values are encoded the same way with '/' encoded
 *       too, pairs sorted by encoded name then value, joined k=v with '&';
 *       an empty value gives "k=" (so "?uploads" is "uploads=").
 *   (3) Canonical headers: lowercase names, values trimmed with inner runs
 *       of spaces/tabs collapsed to one space, sorted by name, duplicates
 *       joined by ',' in the order given.
 *   (4) The request is sent to exactly sigv4_out.uri, the canonical path and
 *       query, so what is signed is what goes on the wire. */
#ifndef QUEEN_S3_SIGV4_H
#define QUEEN_S3_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

#define SIGV4_EMPTY_SHA256 \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SIGV4_ALGORITHM "AWS4-HMAC-SHA256"
/* The cap of every buffer below. */
#define SIGV4_MAX_CANONICAL ((size_t)256 * 1024)
#define SIGV4_MAX_HEADERS   32
#define SIGV4_SECRET_MAX    4096 /* bytes of a secret key it signs with */

/* A name and a value, NUL-terminated, borrowed. */
struct sigv4_kv {
    const char *name;
    const char *value;
};

struct sigv4_request {
    const char *method;           /* "GET", "PUT", ... */
    const char *path;             /* raw (not encoded), e.g. "/lake/a b.txt" */
    const struct sigv4_kv *query; /* raw names and values, any order */
    size_t n_query;
    /* Every header to sign, names in any case. Must hold host, x-amz-date
     * (YYYYMMDDTHHMMSSZ) and x-amz-content-sha256 (the payload hash line). */
    const struct sigv4_kv *headers;
    size_t n_headers;
};

struct sigv4_key {
    const char *access_key;
    const char *secret_key;
    const char *region;
    const char *service; /* "s3" */
};

/* What signing produced; every buffer is owned (sigv4_out_free). */
struct sigv4_out {
    struct buf canonical;      /* the canonical request */
    struct buf string_to_sign; /* algorithm, date, scope, hash */
    struct buf authorization;  /* value of the Authorization header */
    struct buf uri;            /* encoded path, then "?" + query if any */
    struct buf signed_headers; /* "host;x-amz-content-sha256;x-amz-date" */
    char signature[65];        /* lowercase hex */
};

void sigv4_out_init(struct sigv4_out *o);
void sigv4_out_free(struct sigv4_out *o);

/* Sign r with k. Borrows r and k; fills o (reset first). Returns 0, or
 * ERR_INVALID when a required header is missing or malformed, or more than
 * SIGV4_MAX_HEADERS are given; ERR_TOO_BIG past SIGV4_MAX_CANONICAL. */
int sigv4_sign(const struct sigv4_request *r, const struct sigv4_key *k,
               struct sigv4_out *o, struct err *err);

/* Append the SigV4 URI encoding of s[0..n) to b, keeping '/' when
 * keep_slash. Returns 0 or ERR_TOO_BIG (b unchanged). */
int sigv4_uri_encode(struct buf *b, const char *s, size_t n, bool keep_slash,
                     struct err *err);

/* "YYYYMMDDTHHMMSSZ" of a Unix time in seconds (UTC). */
void sigv4_amz_date(int64_t unix_s, char out[17]);

#endif
