/* AWS Signature Version 4 for S3 (docs/design/formats.md §9). Pure: no clock,
 * no I/O.
 *
 * The signer builds the canonical request from a request described by raw
 * (unencoded) parts, so the one place that encodes a key is here, and the
 * caller sends the exact bytes that were signed (sigv4_out.uri). libcurl's
 * own CURLOPT_AWS_SIGV4 is never used: curl 7.88 signs the query as
 * written and omits x-amz-content-sha256 (docs/design/dependencies.md §4).
 *
 *   canonical request = method LF uri LF query LF
 *                       (name ':' value LF)* LF signed-list LF payload-hash
 *   string to sign    = "AWS4-HMAC-SHA256" LF amz-date LF scope LF
 *                       hex(sha256(canonical request))
 *   scope             = yyyymmdd '/' region '/' service '/aws4_request'
 *   signing key       = HMAC chain over "AWS4"+secret, date, region,
 *                       service, "aws4_request" */
#include "s3/sigv4.h"

#include <stdio.h>
#include <string.h>

#include "base/isotime.h"
#include "base/sha256.h"

static const char hex_upper[] = "0123456789ABCDEF";

static bool is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
}

int sigv4_uri_encode(struct buf *b, const char *s, size_t n, bool keep_slash,
                     struct err *err)
{
    size_t start = b->len;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[3];
        int rc;

        if (is_unreserved(c) || (keep_slash && c == '/')) {
            rc = buf_append_byte(b, (char)c, err);
        } else {
            esc[0] = '%';
            esc[1] = hex_upper[c >> 4];
            esc[2] = hex_upper[c & 15];
            rc = buf_append(b, esc, 3, err);
        }
        if (rc != 0) {
            b->len = start;
            if (b->data != NULL) {
                b->data[start] = '\0';
            }
            return rc;
        }
    }
    return 0;
}

void sigv4_amz_date(int64_t unix_s, char out[17])
{
    char iso[32];
    size_t j = 0;

    /* "YYYY-MM-DDTHH:MM:SS.ffffffZ" without '-', ':' and the fraction. */
    isotime_format_us(unix_s * ISOTIME_US_S, iso);
    for (size_t i = 0; iso[i] != '\0' && iso[i] != '.' && j < 15; i++) {
        if (iso[i] != '-' && iso[i] != ':') {
            out[j++] = iso[i];
        }
    }
    out[j++] = 'Z';
    out[j] = '\0';
}

void sigv4_out_init(struct sigv4_out *o)
{
    buf_init(&o->canonical, SIGV4_MAX_CANONICAL);
    buf_init(&o->string_to_sign, SIGV4_MAX_CANONICAL);
    buf_init(&o->authorization, SIGV4_MAX_CANONICAL);
    buf_init(&o->uri, SIGV4_MAX_CANONICAL);
    buf_init(&o->signed_headers, SIGV4_MAX_CANONICAL);
    o->signature[0] = '\0';
}

void sigv4_out_free(struct sigv4_out *o)
{
    buf_free(&o->canonical);
    buf_free(&o->string_to_sign);
    buf_free(&o->authorization);
    buf_free(&o->uri);
    buf_free(&o->signed_headers);
}

/* One encoded query pair, as offsets into a shared buffer. */
struct qpair {
    size_t name_off, name_len, value_off, value_len;
};

static int qpair_cmp(const struct buf *b, const struct qpair *x,
                     const struct qpair *y)
{
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(b->data + x->name_off, b->data + y->name_off, n);

    if (c != 0 || x->name_len != y->name_len) {
        return c != 0 ? c : (x->name_len < y->name_len ? -1 : 1);
    }
    n = x->value_len < y->value_len ? x->value_len : y->value_len;
    c = memcmp(b->data + x->value_off, b->data + y->value_off, n);
    if (c != 0 || x->value_len == y->value_len) {
        return c;
    }
    return x->value_len < y->value_len ? -1 : 1;
}

/* Append the canonical query string of r to out (invariant (2)). */
static int append_query(const struct sigv4_request *r, struct buf *out,
                        struct err *err)
{
    struct qpair q[SIGV4_MAX_HEADERS];
    struct buf enc;
    int rc = 0;

    if (r->n_query > SIGV4_MAX_HEADERS) {
        return err_set(err, ERR_INVALID, "sigv4: %zu query parameters",
                       r->n_query);
    }
    buf_init(&enc, SIGV4_MAX_CANONICAL);
    rc = buf_reserve(&enc, 64, err); /* data is never NULL below */
    for (size_t i = 0; i < r->n_query && rc == 0; i++) {
        const struct sigv4_kv *kv = &r->query[i];

        q[i].name_off = enc.len;
        rc = sigv4_uri_encode(&enc, kv->name, strlen(kv->name), false, err);
        q[i].name_len = enc.len - q[i].name_off;
        q[i].value_off = enc.len;
        if (rc == 0) {
            rc = sigv4_uri_encode(&enc, kv->value, strlen(kv->value), false,
                                  err);
        }
        q[i].value_len = enc.len - q[i].value_off;
    }
    /* Insertion sort: a request has a handful of parameters. */
    for (size_t i = 1; i < r->n_query && rc == 0; i++) {
        struct qpair t = q[i];
        size_t j = i;

        while (j > 0 && qpair_cmp(&enc, &q[j - 1], &t) > 0) {
            q[j] = q[j - 1];
            j--;
        }
        q[j] = t;
    }
    for (size_t i = 0; i < r->n_query && rc == 0; i++) {
        if ((i > 0 && buf_append_byte(out, '&', err) != 0) ||
            buf_append(out, enc.data + q[i].name_off, q[i].name_len, err) ||
            buf_append_byte(out, '=', err) != 0 ||
            buf_append(out, enc.data + q[i].value_off, q[i].value_len, err)) {
            rc = err->code;
        }
    }
    buf_free(&enc);
    return rc;
}

/* A header prepared for the canonical block. */
struct chdr {
    char name[64];
    const char *value;
};

static int header_cmp(const struct chdr *x, const struct chdr *y)
{
    return strcmp(x->name, y->name);
}

/* Append value trimmed, inner runs of spaces/tabs collapsed (invariant (3)). */
static int append_trimmed(struct buf *out, const char *v, struct err *err)
{
    bool pending_space = false;
    bool any = false;

    for (; v != NULL && *v != '\0'; v++) {
        if (*v == ' ' || *v == '\t') {
            pending_space = any;
            continue;
        }
        if (pending_space && buf_append_byte(out, ' ', err) != 0) {
            return err->code;
        }
        pending_space = false;
        any = true;
        if (buf_append_byte(out, *v, err) != 0) {
            return err->code;
        }
    }
    return 0;
}

static int prepare_headers(const struct sigv4_request *r, struct chdr *h,
                           struct err *err)
{
    if (r->n_headers > SIGV4_MAX_HEADERS) {
        return err_set(err, ERR_INVALID, "sigv4: %zu headers", r->n_headers);
    }
    for (size_t i = 0; i < r->n_headers; i++) {
        const char *n = r->headers[i].name;
        size_t len = strlen(n);

        if (len == 0 || len >= sizeof(h[i].name)) {
            return err_set(err, ERR_INVALID, "sigv4: bad header name \"%s\"",
                           n);
        }
        for (size_t j = 0; j <= len; j++) {
            char c = n[j];

            if (c >= 'A' && c <= 'Z') {
                c = (char)(c + ('a' - 'A'));
            }
            h[i].name[j] = c;
        }
        h[i].value = r->headers[i].value;
    }
    for (size_t i = 1; i < r->n_headers; i++) { /* stable insertion sort */
        struct chdr t = h[i];
        size_t j = i;

        while (j > 0 && header_cmp(&h[j - 1], &t) > 0) {
            h[j] = h[j - 1];
            j--;
        }
        h[j] = t;
    }
    return 0;
}

/* Append the header block and fill o->signed_headers. */
static int append_headers(const struct chdr *h, size_t n, struct buf *out,
                          struct buf *signed_list, struct err *err)
{
    for (size_t i = 0; i < n; i++) {
        bool dup = i > 0 && strcmp(h[i].name, h[i - 1].name) == 0;

        if (dup) {
            if (buf_append_byte(out, ',', err) != 0) {
                return err->code;
            }
        } else {
            if ((i > 0 && buf_append_byte(out, '\n', err) != 0) ||
                buf_append_str(out, h[i].name, err) != 0 ||
                buf_append_byte(out, ':', err) != 0) {
                return err->code;
            }
            if ((i > 0 && buf_append_byte(signed_list, ';', err) != 0) ||
                buf_append_str(signed_list, h[i].name, err) != 0) {
                return err->code;
            }
        }
        if (append_trimmed(out, h[i].value, err) != 0) {
            return err->code;
        }
    }
    if (n > 0 && buf_append_byte(out, '\n', err) != 0) {
        return err->code;
    }
    return 0;
}

static const char *find_header(const struct chdr *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(h[i].name, name) == 0) {
            return h[i].value;
        }
    }
    return NULL;
}

static bool is_amz_date(const char *d)
{
    if (strlen(d) != 16 || d[8] != 'T' || d[15] != 'Z') {
        return false;
    }
    for (int i = 0; i < 15; i++) {
        if (i != 8 && (d[i] < '0' || d[i] > '9')) {
            return false;
        }
    }
    return true;
}

static int build_canonical(const struct sigv4_request *r, const struct chdr *h,
                           const char *payload_hash, struct sigv4_out *o,
                           struct err *err)
{
    struct buf *c = &o->canonical;
    const char *path = r->path != NULL && r->path[0] != '\0' ? r->path : "/";

    if (buf_append_str(c, r->method, err) != 0 ||
        buf_append_byte(c, '\n', err) != 0 ||
        sigv4_uri_encode(&o->uri, path, strlen(path), true, err) != 0 ||
        buf_append(c, o->uri.data, o->uri.len, err) != 0 ||
        buf_append_byte(c, '\n', err) != 0) {
        return err->code;
    }
    size_t q_start = c->len;
    if (append_query(r, c, err) != 0 || buf_append_byte(c, '\n', err) != 0) {
        return err->code;
    }
    if (c->len - 1 > q_start &&
        (buf_append_byte(&o->uri, '?', err) != 0 ||
         buf_append(&o->uri, c->data + q_start, c->len - 1 - q_start, err))) {
        return err->code;
    }
    if (append_headers(h, r->n_headers, c, &o->signed_headers, err) != 0 ||
        buf_append_byte(c, '\n', err) != 0 ||
        buf_append(c, o->signed_headers.data, o->signed_headers.len, err) ||
        buf_append_byte(c, '\n', err) != 0 ||
        buf_append_str(c, payload_hash, err) != 0) {
        return err->code;
    }
    return 0;
}

static void signing_key(const struct sigv4_key *k, const char *date8,
                        uint8_t out[32])
{
    char secret[4 + SIGV4_SECRET_MAX + 1];
    uint8_t a[32];
    uint8_t b[32];

    snprintf(secret, sizeof(secret), "AWS4%s", k->secret_key);
    hmac_sha256(secret, strlen(secret), date8, 8, a);
    hmac_sha256(a, 32, k->region, strlen(k->region), b);
    hmac_sha256(b, 32, k->service, strlen(k->service), a);
    hmac_sha256(a, 32, "aws4_request", 12, out);
    memset(secret, 0, sizeof(secret));
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
}

static int finish(const struct sigv4_key *k, const char *date,
                  struct sigv4_out *o, struct err *err)
{
    uint8_t h[32];
    uint8_t key[32];
    char hex[65];
    char scope[256];

    snprintf(scope, sizeof(scope), "%.8s/%s/%s/aws4_request", date, k->region,
             k->service);
    sha256(o->canonical.data, o->canonical.len, h);
    hex_lower(h, 32, hex);
    if (buf_printf(&o->string_to_sign, err, "%s\n%s\n%s\n%s", SIGV4_ALGORITHM,
                   date, scope, hex) != 0) {
        return err->code;
    }
    signing_key(k, date, key);
    hmac_sha256(key, 32, o->string_to_sign.data, o->string_to_sign.len, h);
    memset(key, 0, sizeof(key));
    hex_lower(h, 32, o->signature);
    return buf_printf(&o->authorization, err,
                      "%s Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                      SIGV4_ALGORITHM, k->access_key, scope,
                      o->signed_headers.data, o->signature);
}

int sigv4_sign(const struct sigv4_request *r, const struct sigv4_key *k,
               struct sigv4_out *o, struct err *err)
{
    struct chdr h[SIGV4_MAX_HEADERS] = {0};
    const char *date;
    const char *payload;

    sigv4_out_free(o);
    sigv4_out_init(o);
    if (strlen(k->secret_key) > SIGV4_SECRET_MAX || strlen(k->region) > 64 ||
        strlen(k->service) > 32) {
        return err_set(err, ERR_INVALID,
                       "sigv4: key, region or service too "
                       "long");
    }
    if (prepare_headers(r, h, err) != 0) {
        return err->code;
    }
    date = find_header(h, r->n_headers, "x-amz-date");
    payload = find_header(h, r->n_headers, "x-amz-content-sha256");
    if (date == NULL || !is_amz_date(date)) {
        return err_set(err, ERR_INVALID, "sigv4: no valid x-amz-date header");
    }
    if (payload == NULL || payload[0] == '\0' ||
        find_header(h, r->n_headers, "host") == NULL) {
        return err_set(err, ERR_INVALID,
                       "sigv4: host and x-amz-content-sha256 are required");
    }
    if (build_canonical(r, h, payload, o, err) != 0) {
        return err->code;
    }
    return finish(k, date, o, err);
}
