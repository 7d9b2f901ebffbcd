/* `queen lake verify` and `queen lake restore` (docs/lake.md).
 *
 * Both walk a queue's manifests 1..n in the bucket and read the objects
 * they name. verify checks every rule the lake must keep (docs/lake.md §3)
 * from the bucket alone, and with --broker compares the records with the
 * broker's log; restore pushes them back into a broker.
 *
 * verify reads windows in parallel: workers each take the next k, read its
 * manifest and objects (streamed: a JSONL object is decompressed 1 MiB at
 * a time, never whole) and hand back a small summary: per partition the
 * runs of offsets the window holds. The main thread folds the summaries in
 * k order into one state per partition (its first and last offset and
 * stamp), so memory grows with partitions and workers, not with the lake.
 * Workers stay at most LAKE_AHEAD windows ahead of the fold. */
#include "lake/lake.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/hashtab.h"
#include "base/isotime.h"
#include "base/json.h"
#include "base/pct.h"
#include "base/sha256.h"
#include "base/xalloc.h"
#include "lake/line.h"
#include "parquet/read.h"
#include "s3/client.h"
#include "s3/transport_curl.h"
#include "sink/docs.h"
#include "sink/jsonl.h"
#include "sink/layout.h"

#define LAKE_DEFAULT_TENANT "00000000-0000-0000-0000-000000000001"
#define LAKE_MAX_OBJECT     ((size_t)4 << 30)
#define LAKE_CHUNK          ((size_t)1 << 20)
#define LAKE_MAX_VIOLATIONS 1000 /* kept for the report; all are counted */
#define LAKE_FETCH_BYTES    (4 << 20)
#define LAKE_PUSH_ITEMS     1000
#define LAKE_PUSH_BYTES     ((size_t)4 << 20)

/* ---- options ------------------------------------------------------------ */

struct lake_opts {
    struct s3_config s3;
    char prefix[512];
    char tenant[256];
    char **queues;
    size_t n_queues;
    int64_t from_k;
    int64_t to_k; /* 0 = the last */
    const char *broker;
    const char *token;
    bool is_json;
    int threads;
    /* restore */
    const char *to;
    const char *as;
    const char *state;
    int batch;
};

static void lake_usage(FILE *f)
{
    fprintf(f,
            "usage: queen lake verify  [bucket flags] [--queue Q]... "
            "[--from-k K] [--to-k K]\n"
            "                          [--broker URL] [--json] "
            "[--threads N]\n"
            "       queen lake restore [bucket flags] --queue Q --to URL "
            "[--as QUEUE]\n"
            "                          [--state FILE] [--batch N] "
            "[--from-k K] [--to-k K]\n"
            "bucket flags: --endpoint URL --bucket B [--region R] "
            "[--prefix P] [--path-style]\n"
            "              [--tenant T] [--access-key K] [--secret-key S]\n"
            "Unset flags fall back to QUEEN_S3_ENDPOINT, QUEEN_S3_BUCKET,\n"
            "QUEEN_S3_REGION, QUEEN_S3_PREFIX, QUEEN_S3_PATH_STYLE,\n"
            "QUEEN_S3_ACCESS_KEY and QUEEN_S3_SECRET_KEY. See docs/lake.md.\n"
            "Exit: 0 exact / done, 1 a violation (verify), 2 could not "
            "run.\n");
}

static const char *lake_env(const char *name)
{
    const char *v = getenv(name);

    return v != NULL && v[0] != '\0' ? v : NULL;
}

static bool lake_int(const char *s, int64_t *out)
{
    char *end = NULL;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0) {
        return false;
    }
    *out = v;
    return true;
}

/* Returns 0, or 2 after printing why on stderr. */
static int lake_parse(int argc, char **argv, struct lake_opts *o)
{
    const char *endpoint = lake_env("QUEEN_S3_ENDPOINT");
    const char *bucket = lake_env("QUEEN_S3_BUCKET");
    const char *region = lake_env("QUEEN_S3_REGION");
    const char *prefix = lake_env("QUEEN_S3_PREFIX");
    const char *ak = lake_env("QUEEN_S3_ACCESS_KEY");
    const char *sk = lake_env("QUEEN_S3_SECRET_KEY");
    const char *ps = lake_env("QUEEN_S3_PATH_STYLE");
    bool path_style = false;
    struct err err;

    memset(o, 0, sizeof(*o));
    s3_config_defaults(&o->s3);
    snprintf(o->tenant, sizeof(o->tenant), "%s", LAKE_DEFAULT_TENANT);
    o->from_k = 1;
    o->threads = 0;
    o->batch = LAKE_PUSH_ITEMS;
    if (ps != NULL &&
        s3_parse_bool("QUEEN_S3_PATH_STYLE", ps, &path_style, &err) != 0) {
        fprintf(stderr, "queen lake: %s\n", err.msg);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        const char *eq = strchr(a, '=');
        char name[64];
        size_t nl = eq != NULL ? (size_t)(eq - a) : strlen(a);

        if (strncmp(a, "--", 2) != 0 || nl >= sizeof(name)) {
            fprintf(stderr, "queen lake: unexpected argument %s\n", a);
            return 2;
        }
        memcpy(name, a, nl);
        name[nl] = '\0';
        if (strcmp(name, "--path-style") == 0) {
            path_style = true;
            continue;
        }
        if (strcmp(name, "--json") == 0) {
            o->is_json = true;
            continue;
        }
        if (strcmp(name, "--help") == 0) {
            lake_usage(stdout);
            exit(0);
        }
        if (eq != NULL) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "queen lake: %s needs a value\n", name);
            return 2;
        }
        if (strcmp(name, "--endpoint") == 0) {
            endpoint = v;
        } else if (strcmp(name, "--bucket") == 0) {
            bucket = v;
        } else if (strcmp(name, "--region") == 0) {
            region = v;
        } else if (strcmp(name, "--prefix") == 0) {
            prefix = v;
        } else if (strcmp(name, "--access-key") == 0) {
            ak = v;
        } else if (strcmp(name, "--secret-key") == 0) {
            sk = v;
        } else if (strcmp(name, "--tenant") == 0) {
            snprintf(o->tenant, sizeof(o->tenant), "%s", v);
        } else if (strcmp(name, "--queue") == 0) {
            o->queues = xrealloc(o->queues, (o->n_queues + 1) * sizeof(char *));
            o->queues[o->n_queues++] = xstrdup(v);
        } else if (strcmp(name, "--from-k") == 0) {
            if (!lake_int(v, &o->from_k) || o->from_k < 1) {
                fprintf(stderr, "queen lake: --from-k %s is not a k >= 1\n", v);
                return 2;
            }
        } else if (strcmp(name, "--to-k") == 0) {
            if (!lake_int(v, &o->to_k) || o->to_k < 1) {
                fprintf(stderr, "queen lake: --to-k %s is not a k >= 1\n", v);
                return 2;
            }
        } else if (strcmp(name, "--broker") == 0) {
            o->broker = v;
        } else if (strcmp(name, "--token") == 0) {
            o->token = v;
        } else if (strcmp(name, "--threads") == 0) {
            int64_t n = 0;

            if (!lake_int(v, &n) || n < 1 || n > 256) {
                fprintf(stderr, "queen lake: --threads %s is not 1..256\n", v);
                return 2;
            }
            o->threads = (int)n;
        } else if (strcmp(name, "--to") == 0) {
            o->to = v;
        } else if (strcmp(name, "--as") == 0) {
            o->as = v;
        } else if (strcmp(name, "--state") == 0) {
            o->state = v;
        } else if (strcmp(name, "--batch") == 0) {
            int64_t n = 0;

            if (!lake_int(v, &n) || n < 1 || n > 10000) {
                fprintf(stderr, "queen lake: --batch %s is not 1..10000\n", v);
                return 2;
            }
            o->batch = (int)n;
        } else {
            fprintf(stderr, "queen lake: unknown flag %s\n", name);
            return 2;
        }
    }
    if (endpoint == NULL || bucket == NULL) {
        fprintf(stderr, "queen lake: --endpoint and --bucket are required "
                        "(or QUEEN_S3_ENDPOINT, QUEEN_S3_BUCKET)\n");
        return 2;
    }
    if (s3_endpoint_parse(&o->s3.ep, "--endpoint", endpoint, "--prefix",
                          &err) != 0 ||
        s3_endpoint_set_bucket(&o->s3.ep, "--bucket", bucket, "--prefix",
                               &err) != 0) {
        fprintf(stderr, "queen lake: %s\n", err.msg);
        return 2;
    }
    o->s3.ep.path_style = path_style;
    snprintf(o->s3.region, sizeof(o->s3.region), "%s",
             region != NULL ? region : "us-east-1");
    snprintf(o->s3.access_key, sizeof(o->s3.access_key), "%s",
             ak != NULL ? ak : "");
    snprintf(o->s3.secret_key, sizeof(o->s3.secret_key), "%s",
             sk != NULL ? sk : "");
    /* The prefix without outer slashes, as the sink keeps it. */
    prefix = prefix != NULL ? prefix : "queen";
    while (*prefix == '/') {
        prefix++;
    }
    snprintf(o->prefix, sizeof(o->prefix), "%s", prefix);
    for (size_t n = strlen(o->prefix); n > 0 && o->prefix[n - 1] == '/';) {
        o->prefix[--n] = '\0';
    }
    if (o->to_k != 0 && o->to_k < o->from_k) {
        fprintf(stderr, "queen lake: --to-k is below --from-k\n");
        return 2;
    }
    if (o->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);

        o->threads = (int)(n < 1 ? 2 : n > 32 ? 64 : 2 * n);
    }
    return 0;
}

static void lake_opts_free(struct lake_opts *o)
{
    for (size_t i = 0; i < o->n_queues; i++) {
        free(o->queues[i]);
    }
    free(o->queues);
}

/* ---- the bucket --------------------------------------------------------- */

struct lake_bucket {
    struct s3_curl *curl;
    struct s3_transport t;
    struct s3_client *c;
};

static void lake_bucket_open(struct lake_bucket *b, const struct lake_opts *o)
{
    b->curl = s3_curl_new();
    b->t = s3_curl_transport(b->curl);
    b->c = s3_client_new(&o->s3, &b->t, NULL);
}

static void lake_bucket_close(struct lake_bucket *b)
{
    s3_client_free(b->c);
    s3_curl_free(b->curl);
}

/* Every key under prefix, one page at a time: fn(arg, key) per key, in
 * order. Returns 0 or the list's error. */
static int lake_list(struct lake_bucket *b, const char *prefix,
                     int (*fn)(void *arg, const char *key), void *arg,
                     struct err *err)
{
    char *after = NULL;
    int rc = 0;

    for (;;) {
        struct s3xml_list page = {0};
        struct s3_status st;
        struct s3_list_req q = {prefix, after, 1000};

        rc = s3_client_list_page(b->c, &q, &page, &st, err);
        if (rc != 0) {
            break;
        }
        for (size_t i = 0; i < page.n_keys && rc == 0; i++) {
            rc = fn(arg, page.keys[i]);
        }
        free(after);
        after = page.n_keys > 0 ? xstrdup(page.keys[page.n_keys - 1]) : NULL;
        if (rc != 0 || !page.is_truncated || page.n_keys == 0) {
            s3xml_list_free(&page);
            break;
        }
        s3xml_list_free(&page);
    }
    free(after);
    return rc;
}

/* ---- the broker over HTTP ----------------------------------------------- */

struct lake_http {
    CURL *h;
    struct buf ans;
    const char *base;
    const char *token;
};

static size_t lake_http_write(char *p, size_t size, size_t n, void *arg)
{
    struct lake_http *c = arg;
    struct err err;

    return buf_append(&c->ans, p, size * n, &err) == 0 ? size * n : 0;
}

static void lake_http_open(struct lake_http *c, const char *base,
                           const char *token)
{
    c->h = curl_easy_init();
    buf_init(&c->ans, (size_t)1 << 30);
    c->base = base;
    c->token = token;
}

static void lake_http_close(struct lake_http *c)
{
    if (c->h != NULL) {
        curl_easy_cleanup(c->h);
    }
    buf_free(&c->ans);
}

/* POST body to base+path; the answer in c->ans. Returns the HTTP status, or
 * 0 (err set) when no answer came. */
static long lake_http_post(struct lake_http *c, const char *path,
                           const char *body, size_t n, struct err *err)
{
    char url[2048];
    char auth[1024];
    struct curl_slist *hs = NULL;
    long status = 0;
    CURLcode rc;

    buf_reset(&c->ans);
    snprintf(url, sizeof(url), "%s%s", c->base, path);
    hs = curl_slist_append(hs, "Content-Type: application/json");
    if (c->token != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->token);
        hs = curl_slist_append(hs, auth);
    }
    curl_easy_reset(c->h);
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, lake_http_write);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
    rc = curl_easy_perform(c->h);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
    } else {
        err_set(err, ERR_IO, "%s: %s", url, curl_easy_strerror(rc));
    }
    curl_slist_free_all(hs);
    return status;
}

/* ---- reading one object's records --------------------------------------- */

enum lake_codec { LAKE_NONE, LAKE_ZSTD, LAKE_GZIP, LAKE_PARQUET };

/* Called per record in stored order; nonzero stops the object. A Parquet
 * NULL payload has len 0. */
typedef int (*lake_rec_fn)(void *arg, const struct sink_record *r);

static int lake_lines(const char *p, size_t n, struct buf *carry,
                      struct buf *scratch, lake_rec_fn fn, void *arg,
                      uint64_t *line_no, struct err *err)
{
    size_t at = 0;

    while (at < n) {
        const char *lf = memchr(p + at, '\n', n - at);
        const char *line;
        size_t len;
        struct sink_record r;
        int rc;

        if (lf == NULL) {
            return buf_append(carry, p + at, n - at, err);
        }
        if (carry->len > 0) {
            if (buf_append(carry, p + at, (size_t)(lf - (p + at)), err) != 0) {
                return err->code;
            }
            line = carry->data;
            len = carry->len;
        } else {
            line = p + at;
            len = (size_t)(lf - line);
        }
        ++*line_no;
        if (lake_line_parse(line, len, &r, scratch, err) != 0) {
            return err_wrap(err, "line %" PRIu64, *line_no);
        }
        rc = fn(arg, &r);
        buf_reset(carry);
        if (rc != 0) {
            return rc;
        }
        at = (size_t)(lf - p) + 1;
    }
    return 0;
}

/* Decode body (the stored bytes) record by record. Returns 0, or
 * ERR_CORRUPT with the reason, or what fn returned. *raw counts the
 * decoded bytes. */
static int lake_decode(enum lake_codec codec, const char *body, size_t n,
                       lake_rec_fn fn, void *arg, uint64_t *raw,
                       struct err *err)
{
    struct buf carry;
    struct buf scratch;
    uint64_t line_no = 0;
    int rc = 0;

    if (codec == LAKE_PARQUET) {
        struct parquet_file f;

        memset(&f, 0, sizeof(f));
        rc = parquet_file_read(body, n, &f, err);
        for (size_t i = 0; rc == 0 && i < f.nrecs; i++) {
            struct sink_record r = {f.recs[i].partition, f.recs[i].offset,
                                    f.recs[i].txn, f.recs[i].ts,
                                    f.recs[i].payload};

            *raw += r.partition.len + r.txn.len + r.payload.len + 16;
            rc = fn(arg, &r);
        }
        parquet_file_free(&f);
        return rc;
    }
    buf_init(&carry, BUF_UNLIMITED);
    buf_init(&scratch, BUF_UNLIMITED);
    if (codec == LAKE_NONE) {
        *raw += n;
        rc = lake_lines(body, n, &carry, &scratch, fn, arg, &line_no, err);
    } else if (codec == LAKE_ZSTD) {
        ZSTD_DCtx *z = ZSTD_createDCtx();
        char *out = xmalloc(LAKE_CHUNK);
        ZSTD_inBuffer in = {body, n, 0};
        size_t last = 0;

        while (rc == 0 && (in.pos < in.size || last != 0)) {
            ZSTD_outBuffer o = {out, LAKE_CHUNK, 0};

            last = ZSTD_decompressStream(z, &o, &in);
            if (ZSTD_isError(last)) {
                rc = err_set(err, ERR_CORRUPT, "does not decode as zstd: %s",
                             ZSTD_getErrorName(last));
                break;
            }
            *raw += o.pos;
            rc = lake_lines(out, o.pos, &carry, &scratch, fn, arg, &line_no,
                            err);
            if (in.pos == in.size && o.pos < o.size && last != 0) {
                rc = rc != 0 ? rc
                             : err_set(err, ERR_CORRUPT,
                                       "does not decode as zstd: truncated");
                break;
            }
        }
        free(out);
        ZSTD_freeDCtx(z);
    } else {
        z_stream z;
        char *out = xmalloc(LAKE_CHUNK);
        int zr = Z_OK;

        memset(&z, 0, sizeof(z));
        inflateInit2(&z, 16 + MAX_WBITS);
        z.next_in = (Bytef *)(uintptr_t)body;
        z.avail_in = (uInt)n;
        while (rc == 0 && zr != Z_STREAM_END) {
            z.next_out = (Bytef *)out;
            z.avail_out = (uInt)LAKE_CHUNK;
            zr = inflate(&z, Z_NO_FLUSH);
            if (zr != Z_OK && zr != Z_STREAM_END) {
                rc = err_set(err, ERR_CORRUPT, "does not decode as gzip: %s",
                             z.msg != NULL ? z.msg : "truncated");
                break;
            }
            *raw += LAKE_CHUNK - z.avail_out;
            rc = lake_lines(out, LAKE_CHUNK - z.avail_out, &carry, &scratch, fn,
                            arg, &line_no, err);
        }
        if (rc == 0 && z.avail_in != 0) {
            rc = err_set(err, ERR_CORRUPT, "bytes after the gzip member");
        }
        inflateEnd(&z);
        free(out);
    }
    if (rc == 0 && carry.len > 0) {
        rc = err_set(err, ERR_CORRUPT, "does not end with LF");
    }
    buf_free(&carry);
    buf_free(&scratch);
    return rc;
}

static bool lake_codec_of(struct slice format, struct slice compression,
                          enum lake_codec *c, const char **ext,
                          const char **desc)
{
    static const struct {
        const char *f;
        const char *c;
        enum lake_codec codec;
        const char *ext;
        const char *desc;
    } t[] = {
        {"jsonl", "zstd", LAKE_ZSTD, "jsonl.zst", "jsonl+zstd"},
        {"jsonl", "gzip", LAKE_GZIP, "jsonl.gz", "jsonl+gzip"},
        {"jsonl", "none", LAKE_NONE, "jsonl", "jsonl"},
        {"parquet", "zstd", LAKE_PARQUET, "parquet", "parquet/q1 zstd"},
        {"parquet", "snappy", LAKE_PARQUET, "parquet", "parquet/q1 snappy"},
    };

    for (size_t i = 0; i < ARRAY_LEN(t); i++) {
        if (format.len == strlen(t[i].f) &&
            memcmp(format.ptr, t[i].f, format.len) == 0 &&
            compression.len == strlen(t[i].c) &&
            memcmp(compression.ptr, t[i].c, compression.len) == 0) {
            *c = t[i].codec;
            *ext = t[i].ext;
            *desc = t[i].desc;
            return true;
        }
    }
    return false;
}

static bool slice_eq(struct slice a, struct slice b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static int slice_cmp(struct slice a, struct slice b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n > 0 ? memcmp(a.ptr, b.ptr, n) : 0;

    return c != 0 ? c : a.len < b.len ? -1 : a.len > b.len ? 1 : 0;
}

/* ---- one window: what a worker hands back ------------------------------- */

/* A run of consecutive offsets of one partition inside one object. */
struct lake_run {
    char *partition; /* owned */
    size_t plen;
    int64_t first;
    int64_t last;
    int64_t first_ts;
    int64_t last_ts;
    size_t obj; /* index into the window's keys */
};

struct lake_pos {
    char *partition; /* owned */
    size_t plen;
    int64_t offset;
};

struct lake_lost {
    char *partition; /* owned */
    size_t plen;
    int64_t from;
    int64_t to;
    int64_t k;
};

struct lake_window {
    int64_t k;
    bool is_done;
    bool is_fatal; /* could not run: err */
    struct err err;
    int64_t t_start;
    int64_t t_end;
    char manifest_key[1024];
    char **keys; /* owned: the objects' keys */
    size_t n_keys;
    struct lake_run *runs;
    size_t n_runs;
    struct lake_pos *pos;
    size_t n_pos;
    struct lake_lost *lost;
    size_t n_lost;
    char **violations; /* owned sentences */
    size_t n_violations;
    uint64_t records;
    uint64_t bytes;
    uint64_t raw;
    uint64_t stamps_checked;
};

static void lake_violation(struct lake_window *w, const char *fmt, ...)
    PRINTF(2, 3);

static void lake_violation(struct lake_window *w, const char *fmt, ...)
{
    va_list ap;
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    va_start(ap, fmt);
    (void)buf_vprintf(&b, &err, fmt, ap);
    va_end(ap);
    w->violations =
        xrealloc(w->violations, (w->n_violations + 1) * sizeof(char *));
    w->violations[w->n_violations++] = buf_steal(&b, NULL);
}

static char *lake_dup(const char *p, size_t n)
{
    char *s = xmalloc(n + 1);

    if (n > 0) {
        memcpy(s, p, n);
    }
    s[n] = '\0';
    return s;
}

static void lake_window_clear(struct lake_window *w)
{
    for (size_t i = 0; i < w->n_keys; i++) {
        free(w->keys[i]);
    }
    for (size_t i = 0; i < w->n_runs; i++) {
        free(w->runs[i].partition);
    }
    for (size_t i = 0; i < w->n_pos; i++) {
        free(w->pos[i].partition);
    }
    for (size_t i = 0; i < w->n_lost; i++) {
        free(w->lost[i].partition);
    }
    for (size_t i = 0; i < w->n_violations; i++) {
        free(w->violations[i]);
    }
    free(w->keys);
    free(w->runs);
    free(w->pos);
    free(w->lost);
    free(w->violations);
    memset(w, 0, sizeof(*w));
}

/* ---- the broker's log, as a worker reads it ----------------------------- */

struct lake_log {
    struct lake_http http;
    const char *queue;
    struct buf part;     /* partition of the answer held */
    struct json_doc doc; /* the answer, over http.ans */
    int *recs;           /* token of each record, by position */
    int64_t *offs;
    size_t n;
    int64_t log_start;
    bool is_open;
};

static void lake_log_drop(struct lake_log *l)
{
    json_doc_free(&l->doc);
    free(l->recs);
    free(l->offs);
    l->recs = NULL;
    l->offs = NULL;
    l->n = 0;
}

/* Fetch partition p from offset o. Returns 0 or 2-worthy err. */
static int lake_log_fetch(struct lake_log *l, struct slice p, int64_t o,
                          struct err *err)
{
    struct buf body;
    struct jw w;
    long st;
    int e;
    int recs;

    lake_log_drop(l);
    buf_init(&body, BUF_UNLIMITED);
    jw_init(&w, &body);
    jw_obj_begin(&w);
    jw_key(&w, "entries");
    jw_arr_begin(&w);
    jw_obj_begin(&w);
    jw_key(&w, "queue");
    jw_cstr(&w, l->queue);
    jw_key(&w, "partition");
    jw_str(&w, p.ptr, p.len);
    jw_key(&w, "offset");
    jw_i64(&w, o);
    jw_key(&w, "maxBytes");
    jw_i64(&w, LAKE_FETCH_BYTES);
    jw_obj_end(&w);
    jw_arr_end(&w);
    jw_obj_end(&w);
    if (jw_finish(&w, err) != 0) {
        buf_free(&body);
        return err->code;
    }
    st = lake_http_post(&l->http, "/api/v1/fetch", body.data, body.len, err);
    buf_free(&body);
    if (st != 200) {
        return st == 0
                   ? err->code
                   : err_set(err, ERR_REMOTE,
                             "the broker's fetch answered %ld: %.200s", st,
                             l->http.ans.data != NULL ? l->http.ans.data : "");
    }
    if (json_parse(&l->doc, l->http.ans.data, l->http.ans.len, NULL, err) !=
        0) {
        return err_wrap(err, "the broker's fetch answer");
    }
    e = json_child(&l->doc, json_obj_get(&l->doc, 0, "entries"));
    if (e < 0) {
        return err_set(err, ERR_REMOTE, "the broker's fetch: no entry");
    }
    l->log_start = 0;
    (void)json_get_i64(&l->doc, json_obj_get(&l->doc, e, "logStartOffset"),
                       &l->log_start);
    recs = json_obj_get(&l->doc, e, "records");
    buf_reset(&l->part);
    if (buf_append(&l->part, p.ptr, p.len, err) != 0) {
        return err->code;
    }
    l->is_open = true;
    for (int r = json_child(&l->doc, recs); r >= 0; r = json_next(&l->doc, r)) {
        int64_t off = -1;

        (void)json_get_i64(&l->doc, json_obj_get(&l->doc, r, "offset"), &off);
        l->recs = xrealloc(l->recs, (l->n + 1) * sizeof(int));
        l->offs = xrealloc(l->offs, (l->n + 1) * sizeof(int64_t));
        l->recs[l->n] = r;
        l->offs[l->n] = off;
        l->n++;
    }
    return 0;
}

/* The log's record at (p, o): its token, or -1 (not in the log; *trimmed
 * when it lies below the log's start). Returns 0 or err. */
static int lake_log_find(struct lake_log *l, struct slice p, int64_t o,
                         int *tok, bool *trimmed, struct err *err)
{
    *tok = -1;
    *trimmed = false;
    if (!l->is_open || !slice_eq(buf_slice(&l->part), p) || l->n == 0 ||
        o < l->offs[0] || o > l->offs[l->n - 1]) {
        if (lake_log_fetch(l, p, o, err) != 0) {
            return err->code;
        }
    }
    if (o < l->log_start) {
        *trimmed = true;
        return 0;
    }
    for (size_t lo = 0, hi = l->n; lo < hi;) {
        size_t mid = (lo + hi) / 2;

        if (l->offs[mid] == o) {
            *tok = l->recs[mid];
            return 0;
        }
        if (l->offs[mid] < o) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return 0;
}

/* ---- the worker's reading of one object --------------------------------- */

struct lake_obj_ctx {
    struct lake_window *w;
    const struct docs_manifest *m;
    const struct docs_object *obj;
    const char *key;
    size_t obj_index;
    bool is_parquet;
    struct lake_log *log; /* NULL without --broker */
    struct buf prev_p;
    bool has_prev;
    int64_t prev_o;
    uint64_t n;
    uint64_t partitions;
    int64_t min_ts;
    int64_t max_ts;
    bool is_bad;
    struct buf tmp;
};

static void lake_iso(int64_t us, char out[32])
{
    isotime_format_us(us, out);
}

static int lake_check_log(struct lake_obj_ctx *c, const struct sink_record *r)
{
    struct lake_log *l = c->log;
    struct err err;
    int tok = -1;
    bool trimmed = false;
    int64_t ts = 0;
    struct slice span;
    int t;

    if (lake_log_find(l, r->partition, r->offset, &tok, &trimmed, &err) != 0) {
        c->w->is_fatal = true;
        c->w->err = err;
        return 1;
    }
    if (trimmed) {
        return 0;
    }
    if (tok < 0) {
        lake_violation(c->w,
                       "window %" PRId64 ": %s: record %.*s/%" PRId64
                       " is in the lake, not in the log",
                       c->w->k, c->key, (int)r->partition.len, r->partition.ptr,
                       r->offset);
        return 1;
    }
    c->w->stamps_checked++;
    t = json_obj_get(&l->doc, tok, "ts");
    span = json_span(&l->doc, t);
    if (span.len < 2 || !isotime_parse_us(span.ptr + 1, span.len - 2, &ts) ||
        ts != r->ts) {
        char a[32];
        char b[32];

        lake_iso(r->ts, a);
        lake_iso(ts, b);
        lake_violation(c->w,
                       "window %" PRId64 ": %s: record %.*s/%" PRId64
                       " has ts %s, the broker's log says %s",
                       c->w->k, c->key, (int)r->partition.len, r->partition.ptr,
                       r->offset, a, b);
        return 1;
    }
    buf_reset(&c->tmp);
    if (json_get_str(&l->doc, json_obj_get(&l->doc, tok, "transactionId"),
                     &c->tmp, &err) != 0 ||
        !slice_eq(buf_slice(&c->tmp), r->txn)) {
        lake_violation(c->w,
                       "window %" PRId64 ": %s: record %.*s/%" PRId64
                       " has transactionId %.*s, the broker's log says %.*s",
                       c->w->k, c->key, (int)r->partition.len, r->partition.ptr,
                       r->offset, (int)r->txn.len, r->txn.ptr, (int)c->tmp.len,
                       c->tmp.data != NULL ? c->tmp.data : "");
        return 1;
    }
    span = json_span(&l->doc, json_obj_get(&l->doc, tok, "payload"));
    {
        bool same;

        if (c->is_parquet) {
            same = r->payload.len == 0
                       ? span.len == 4 && memcmp(span.ptr, "null", 4) == 0
                       : slice_eq(span, r->payload);
        } else {
            same = span.len == r->payload.len;
            for (size_t i = 0; same && i < span.len; i++) {
                char ch = span.ptr[i] == '\n' || span.ptr[i] == '\r'
                              ? ' '
                              : span.ptr[i];

                same = ch == r->payload.ptr[i];
            }
        }
        if (!same) {
            lake_violation(c->w,
                           "window %" PRId64 ": %s: record %.*s/%" PRId64
                           " payload differs from the broker's log",
                           c->w->k, c->key, (int)r->partition.len,
                           r->partition.ptr, r->offset);
            return 1;
        }
    }
    return 0;
}

static int lake_on_record(void *arg, const struct sink_record *r)
{
    struct lake_obj_ctx *c = arg;
    struct lake_window *w = c->w;
    struct lake_run *run = w->n_runs > 0 ? &w->runs[w->n_runs - 1] : NULL;
    struct err err;

    c->n++;
    if (c->has_prev) {
        int cmp = slice_cmp(r->partition, buf_slice(&c->prev_p));

        if (cmp < 0 || (cmp == 0 && r->offset <= c->prev_o)) {
            lake_violation(w,
                           "window %" PRId64 ": %s record %" PRIu64
                           ": record %.*s/%" PRId64 " is %s",
                           w->k, c->key, c->n, (int)r->partition.len,
                           r->partition.ptr, r->offset,
                           cmp == 0 && r->offset == c->prev_o
                               ? "in the lake twice"
                               : "not sorted after the one before");
            return 1;
        }
    }
    if (r->ts < c->m->t_start || r->ts >= c->m->t_end) {
        char a[32];
        char b[32];
        char t[32];

        lake_iso(r->ts, t);
        lake_iso(c->m->t_start, a);
        lake_iso(c->m->t_end, b);
        lake_violation(w,
                       "window %" PRId64 ": %s record %" PRIu64
                       ": ts %s is outside the window [%s, %s)",
                       w->k, c->key, c->n, t, a, b);
        return 1;
    }
    if (c->obj->has_partition &&
        (!slice_eq(r->partition, c->obj->partition) ||
         r->offset < c->obj->first_offset || r->offset > c->obj->last_offset)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: holds other partitions or "
                       "offsets than its manifest entry",
                       w->k, c->key);
        return 1;
    }
    if (c->n == 1 || r->ts < c->min_ts) {
        c->min_ts = r->ts;
    }
    if (c->n == 1 || r->ts > c->max_ts) {
        c->max_ts = r->ts;
    }
    if (c->log != NULL && lake_check_log(c, r) != 0) {
        return 1;
    }
    if (run != NULL && run->obj == c->obj_index &&
        slice_eq(r->partition, (struct slice){run->partition, run->plen}) &&
        r->offset == run->last + 1) {
        if (r->ts < run->last_ts) {
            lake_violation(w,
                           "window %" PRId64 ": %s: partition %.*s: ts goes "
                           "backwards from offset %" PRId64 " to %" PRId64,
                           w->k, c->key, (int)r->partition.len,
                           r->partition.ptr, run->last, r->offset);
            return 1;
        }
        run->last = r->offset;
        run->last_ts = r->ts;
    } else {
        if (!c->has_prev || !slice_eq(r->partition, buf_slice(&c->prev_p))) {
            c->partitions++;
        }
        w->runs = xrealloc(w->runs, (w->n_runs + 1) * sizeof(*w->runs));
        w->runs[w->n_runs++] =
            (struct lake_run){lake_dup(r->partition.ptr, r->partition.len),
                              r->partition.len,
                              r->offset,
                              r->offset,
                              r->ts,
                              r->ts,
                              c->obj_index};
    }
    buf_reset(&c->prev_p);
    if (buf_append(&c->prev_p, r->partition.ptr, r->partition.len, &err) != 0) {
        return 1;
    }
    c->prev_o = r->offset;
    c->has_prev = true;
    w->records++;
    return 0;
}

struct lake_job {
    const struct lake_opts *o;
    struct lake_bucket *b;
    const char *queue;
    struct layout_queue lq;
};

/* The manifest's own shape (docs/design/formats.md §3). */
static bool lake_check_manifest(struct lake_window *w, const struct lake_job *j,
                                const struct docs_manifest *m,
                                const struct buf *raw, enum lake_codec *codec,
                                const char **ext)
{
    const char *desc = NULL;
    struct buf again;
    struct err err;
    const char *sp;
    bool is_ok = true;

    if (m->k != w->k || !slice_eq(m->queue, j->lq.queue) ||
        !slice_eq(m->tenant, j->lq.tenant)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: names tenant %.*s, queue %.*s, "
                       "k %" PRId64 ", not its own",
                       w->k, w->manifest_key, (int)m->tenant.len, m->tenant.ptr,
                       (int)m->queue.len, m->queue.ptr, m->k);
        return false;
    }
    if (!lake_codec_of(m->format, m->compression, codec, ext, &desc)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: format %.*s with compression "
                       "%.*s is not one the sink writes",
                       w->k, w->manifest_key, (int)m->format.len, m->format.ptr,
                       (int)m->compression.len, m->compression.ptr);
        return false;
    }
    sp = memchr(m->writer.ptr, ' ', m->writer.len);
    if (m->writer.len < 9 || memcmp(m->writer.ptr, "queen-s3/", 9) != 0 ||
        sp == NULL ||
        !slice_eq((struct slice){sp + 1, m->writer.len -
                                             (size_t)(sp + 1 - m->writer.ptr)},
                  (struct slice){desc, strlen(desc)})) {
        lake_violation(w,
                       "window %" PRId64 ": %s: writer %.*s is not "
                       "'queen-s3/<version> %s'",
                       w->k, w->manifest_key, (int)m->writer.len, m->writer.ptr,
                       desc);
        is_ok = false;
    }
    if (m->t_start >= m->t_end) {
        lake_violation(w,
                       "window %" PRId64 ": %s: tStart %" PRId64
                       " is not below tEnd %" PRId64,
                       w->k, w->manifest_key, m->t_start, m->t_end);
        is_ok = false;
    }
    if (m->n_objects == 0 &&
        (m->records != 0 || m->bytes != 0 || m->partitions != 0)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: names no object but holds "
                       "records",
                       w->k, w->manifest_key);
        is_ok = false;
    }
    if (m->has_ts != (m->records > 0)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: minTs/maxTs present iff "
                       "records > 0",
                       w->k, w->manifest_key);
        is_ok = false;
    }
    /* Compact JSON with the keys in order: what the sink's encoder makes
     * of what was read. */
    buf_init(&again, BUF_UNLIMITED);
    if (docs_manifest_encode(&again, m, &err) != 0 || again.len != raw->len ||
        memcmp(again.data, raw->data, raw->len) != 0) {
        lake_violation(w,
                       "window %" PRId64 ": %s: not compact JSON with the "
                       "keys in the order of the format",
                       w->k, w->manifest_key);
        is_ok = false;
    }
    buf_free(&again);
    return is_ok;
}

static bool lake_key_is(const struct lake_job *j, const struct docs_manifest *m,
                        const struct docs_object *obj, const char *ext,
                        int64_t min_ts)
{
    static const enum layout_align aligns[] = {LAYOUT_ALIGN_HOUR,
                                               LAYOUT_ALIGN_DAY};

    for (size_t i = 0; i < ARRAY_LEN(aligns); i++) {
        struct layout_window lw = {
            aligns[i],
            m->k,
            m->t_start,
            m->t_end,
            layout_bucket_ts(m->t_start, m->records > 0, min_ts, m->t_end),
            ext};
        struct buf key;
        struct err err;
        int rc;
        bool same;

        buf_init(&key, 4096);
        if (obj->has_partition) {
            int64_t fl[2] = {obj->first_offset, obj->last_offset};

            rc = layout_part_key(&key, &j->lq, &lw, obj->partition, fl, &err);
        } else {
            rc = layout_data_key(&key, &j->lq, &lw, &err);
        }
        same = rc == 0 && slice_eq(buf_slice(&key), obj->key);
        buf_free(&key);
        if (same) {
            return true;
        }
    }
    return false;
}

/* Read and check window w->k. Sets w->is_fatal when it could not. */
static void lake_read_window(const struct lake_job *j, struct lake_window *w,
                             struct lake_log *log)
{
    struct buf mkey;
    struct buf raw;
    struct buf arena;
    struct buf body;
    struct docs_manifest m;
    struct s3_object_info info;
    struct s3_status st;
    enum lake_codec codec = LAKE_NONE;
    const char *ext = NULL;
    uint64_t sum_records = 0;
    uint64_t sum_bytes = 0;
    uint64_t partitions = 0;
    int64_t min_ts = INT64_MAX;
    int64_t max_ts = INT64_MIN;

    buf_init(&mkey, 4096);
    buf_init(&raw, (size_t)64 << 20);
    buf_init(&arena, BUF_UNLIMITED);
    buf_init(&body, LAKE_MAX_OBJECT);
    if (layout_manifest_key(&mkey, &j->lq, w->k, &w->err) != 0) {
        w->is_fatal = true;
        goto out;
    }
    snprintf(w->manifest_key, sizeof(w->manifest_key), "%s", mkey.data);
    if (s3_client_get(j->b->c, mkey.data, &raw, &info, &st, &w->err) != 0) {
        w->is_fatal = true;
        goto out;
    }
    if (!info.found) {
        lake_violation(w,
                       "window %" PRId64 ": %s: manifest is not in the "
                       "bucket (it was listed)",
                       w->k, w->manifest_key);
        goto out;
    }
    if (docs_manifest_decode(raw.data, raw.len, &m, &arena, &w->err) != 0) {
        lake_violation(w, "window %" PRId64 ": %s: %s", w->k, w->manifest_key,
                       w->err.msg);
        goto out;
    }
    w->t_start = m.t_start;
    w->t_end = m.t_end;
    for (size_t i = 0; i < m.n_lost; i++) {
        w->lost = xrealloc(w->lost, (w->n_lost + 1) * sizeof(*w->lost));
        w->lost[w->n_lost++] = (struct lake_lost){
            lake_dup(m.lost[i].partition.ptr, m.lost[i].partition.len),
            m.lost[i].partition.len, m.lost[i].from, m.lost[i].to, w->k};
    }
    for (size_t i = 0; m.has_positions && i < m.n_positions; i++) {
        w->pos = xrealloc(w->pos, (w->n_pos + 1) * sizeof(*w->pos));
        w->pos[w->n_pos++] = (struct lake_pos){
            lake_dup(m.positions[i].name.ptr, m.positions[i].name.len),
            m.positions[i].name.len, m.positions[i].offset};
    }
    if (!lake_check_manifest(w, j, &m, &raw, &codec, &ext)) {
        goto out;
    }
    if (m.n_objects > 0 &&
        (m.layout.len == 6 && memcmp(m.layout.ptr, "merged", 6) == 0) &&
        m.n_objects != 1) {
        lake_violation(w,
                       "window %" PRId64 ": %s: a merged window names exactly "
                       "one object, not %zu",
                       w->k, w->manifest_key, m.n_objects);
        goto out;
    }
    for (size_t i = 0; i < m.n_objects; i++) {
        const struct docs_object *obj = &m.objects[i];
        struct lake_obj_ctx c;
        uint8_t sum[32];
        char hex[65];
        struct err err;
        size_t before = w->n_violations;
        size_t run0 = w->n_runs;
        bool is_pp = m.layout.len != 6;

        w->keys = xrealloc(w->keys, (w->n_keys + 1) * sizeof(char *));
        w->keys[w->n_keys++] = lake_dup(obj->key.ptr, obj->key.len);
        if (obj->has_partition != is_pp) {
            lake_violation(w,
                           "window %" PRId64 ": %s: partition/firstOffset/"
                           "lastOffset must %sappear in %.*s objects",
                           w->k, w->manifest_key, is_pp ? "" : "not ",
                           (int)m.layout.len, m.layout.ptr);
            goto out;
        }
        for (size_t q = 0; is_pp && q < i; q++) {
            if (slice_eq(m.objects[q].partition, obj->partition)) {
                lake_violation(w,
                               "window %" PRId64 ": %s: more than one object "
                               "for partition %.*s in one window",
                               w->k, w->manifest_key, (int)obj->partition.len,
                               obj->partition.ptr);
                goto out;
            }
        }
        if (!lake_key_is(j, &m, obj, ext, m.has_ts ? m.min_ts : 0)) {
            lake_violation(w,
                           "window %" PRId64 ": %s: object key %s is not the "
                           "key derived from (tenant, queue, k, bounds)",
                           w->k, w->manifest_key, w->keys[i]);
            goto out;
        }
        if (s3_client_get(j->b->c, w->keys[i], &body, &info, &st, &w->err) !=
            0) {
            w->is_fatal = true;
            goto out;
        }
        if (!info.found) {
            lake_violation(w,
                           "window %" PRId64 ": %s: named by the manifest, "
                           "not in the bucket",
                           w->k, w->keys[i]);
            goto out;
        }
        if (body.len != obj->bytes) {
            lake_violation(w,
                           "window %" PRId64 ": %s: %zu bytes, the manifest "
                           "says %" PRIu64,
                           w->k, w->keys[i], body.len, obj->bytes);
            goto out;
        }
        sha256(body.data, body.len, sum);
        hex_lower(sum, 32, hex);
        if (memcmp(hex, obj->sha256, 64) != 0) {
            lake_violation(w,
                           "window %" PRId64 ": %s: sha256 differs from the "
                           "manifest's",
                           w->k, w->keys[i]);
            goto out;
        }
        w->bytes += body.len;
        memset(&c, 0, sizeof(c));
        c.w = w;
        c.m = &m;
        c.obj = obj;
        c.key = w->keys[i];
        c.obj_index = i;
        c.is_parquet = codec == LAKE_PARQUET;
        c.log = log;
        buf_init(&c.prev_p, BUF_UNLIMITED);
        buf_init(&c.tmp, BUF_UNLIMITED);
        if (lake_decode(codec, body.data, body.len, lake_on_record, &c, &w->raw,
                        &err) != 0 &&
            w->n_violations == before && !w->is_fatal) {
            lake_violation(w, "window %" PRId64 ": %s: %s", w->k, w->keys[i],
                           err.msg);
        }
        buf_free(&c.prev_p);
        buf_free(&c.tmp);
        if (w->n_violations > before || w->is_fatal) {
            goto out;
        }
        if (c.n != obj->records) {
            lake_violation(w,
                           "window %" PRId64 ": %s: %" PRIu64
                           " records, the manifest says %" PRIu64,
                           w->k, w->keys[i], c.n, obj->records);
            goto out;
        }
        if (is_pp && c.n > 0) {
            /* A head or tail the object lacks must be lost in the window. */
            int64_t lo = w->runs[run0].first;
            int64_t hi = w->runs[w->n_runs - 1].last;
            if (lo != obj->first_offset || hi != obj->last_offset) {
                bool covered = true;

                for (int side = 0; side < 2; side++) {
                    int64_t a = side == 0 ? obj->first_offset : hi + 1;
                    int64_t b2 = side == 0 ? lo - 1 : obj->last_offset;
                    bool in = a > b2;

                    for (size_t q = 0; !in && q < m.n_lost; q++) {
                        in = slice_eq(m.lost[q].partition, obj->partition) &&
                             m.lost[q].from <= a && b2 <= m.lost[q].to;
                    }
                    covered = covered && in;
                }
                if (!covered) {
                    lake_violation(w,
                                   "window %" PRId64 ": %s: holds other "
                                   "partitions or offsets than its manifest "
                                   "entry",
                                   w->k, w->keys[i]);
                    goto out;
                }
            }
        }
        sum_records += obj->records;
        sum_bytes += obj->bytes;
        partitions += c.partitions;
        if (c.n > 0) {
            min_ts = c.min_ts < min_ts ? c.min_ts : min_ts;
            max_ts = c.max_ts > max_ts ? c.max_ts : max_ts;
        }
    }
    if (sum_records != m.records || sum_bytes != m.bytes) {
        lake_violation(w,
                       "window %" PRId64 ": %s: records/bytes %" PRIu64
                       "/%" PRIu64 " are not the sums over its objects "
                       "(%" PRIu64 "/%" PRIu64 ")",
                       w->k, w->manifest_key, m.records, m.bytes, sum_records,
                       sum_bytes);
    } else if (partitions != m.partitions) {
        lake_violation(w,
                       "window %" PRId64 ": %s: partitions %" PRIu64
                       ", the objects hold %" PRIu64,
                       w->k, w->manifest_key, m.partitions, partitions);
    } else if (m.records > 0 && (m.min_ts != min_ts || m.max_ts != max_ts)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: minTs/maxTs %" PRId64
                       "/%" PRId64 ", the objects hold %" PRId64 "/%" PRId64,
                       w->k, w->manifest_key, m.min_ts, m.max_ts, min_ts,
                       max_ts);
    }
    for (size_t i = 0; m.has_positions && i < w->n_runs; i++) {
        const struct lake_run *run = &w->runs[i];
        bool above = false;

        for (size_t q = 0; q < w->n_pos; q++) {
            if (w->pos[q].plen == run->plen &&
                memcmp(w->pos[q].partition, run->partition, run->plen) == 0) {
                above = w->pos[q].offset > run->last;
            }
        }
        if (!above) {
            lake_violation(w,
                           "window %" PRId64 ": %s: partition %s goes on at "
                           "a position not above its records (up to %" PRId64
                           ")",
                           w->k, w->manifest_key, run->partition, run->last);
            break;
        }
    }
out:
    buf_free(&mkey);
    buf_free(&raw);
    buf_free(&arena);
    buf_free(&body);
}

/* ---- the pool ----------------------------------------------------------- */

#define LAKE_AHEAD_PER_THREAD 2

struct lake_pool {
    const struct lake_job *job;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t next_k; /* next window to hand out */
    int64_t last_k; /* the last window to read */
    int64_t folded; /* windows below this are folded */
    size_t ahead;   /* slots */
    struct lake_window *slots;
    bool is_stopping;
};

static void *lake_worker(void *arg)
{
    struct lake_pool *p = arg;
    struct lake_log log;
    bool has_log = p->job->o->broker != NULL;

    memset(&log, 0, sizeof(log));
    if (has_log) {
        lake_http_open(&log.http, p->job->o->broker, p->job->o->token);
        buf_init(&log.part, BUF_UNLIMITED);
        log.queue = p->job->queue;
    }
    for (;;) {
        int64_t k;
        struct lake_window w;

        pthread_mutex_lock(&p->mu);
        while (!p->is_stopping && p->next_k <= p->last_k &&
               p->next_k >= p->folded + (int64_t)p->ahead) {
            pthread_cond_wait(&p->cv, &p->mu);
        }
        if (p->is_stopping || p->next_k > p->last_k) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        k = p->next_k++;
        pthread_mutex_unlock(&p->mu);
        memset(&w, 0, sizeof(w));
        w.k = k;
        lake_read_window(p->job, &w, has_log ? &log : NULL);
        w.is_done = true;
        pthread_mutex_lock(&p->mu);
        p->slots[(size_t)k % p->ahead] = w;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    if (has_log) {
        lake_log_drop(&log);
        lake_http_close(&log.http);
        buf_free(&log.part);
    }
    return NULL;
}

/* ---- the fold: one state per partition ---------------------------------- */

struct lake_part {
    char *name; /* owned */
    size_t len;
    bool has_records;
    int64_t first;
    int64_t top;
    int64_t top_ts;
    int64_t top_k;
    bool has_pos;
    int64_t pos;
    int64_t pos_k;
    uint64_t records;
};

struct lake_gap {
    size_t part; /* index into parts */
    int64_t from;
    int64_t to;
    int64_t k;   /* the window after the gap (or whose position names it) */
    char *where; /* owned: the key or manifest */
};

struct lake_fold {
    struct lake_part *parts;
    size_t n_parts;
    struct hashtab index; /* -> struct lake_part, rebuilt on growth */
    struct lake_gap *gaps;
    size_t n_gaps;
    struct lake_lost *lost;
    size_t n_lost;
    uint64_t *named; /* FNV of every named key, sorted at the end */
    size_t n_named;
    char **violations;
    size_t n_violations;
    uint64_t violation_count;
    int64_t windows;
    int64_t first_k;
    int64_t t_start; /* of the first window read */
    int64_t t_end;   /* of the last */
    bool has_prev;
    int64_t prev_end;
    uint64_t records;
    uint64_t objects;
    uint64_t bytes;
    uint64_t raw;
    uint64_t stamps_checked;
};

struct lake_part_key {
    const char *p;
    size_t n;
};

static bool lake_part_is(const void *item, const void *key)
{
    const struct lake_part *a = item;
    const struct lake_part_key *b = key;

    return a->len == b->n && memcmp(a->name, b->p, b->n) == 0;
}

/* parts[] moves when it grows: the table holds indices + 1. Only the main
 * thread folds. */
static const struct lake_fold *lake_find_fold;

static bool lake_idx_is(const void *item, const void *key)
{
    size_t i = (size_t)(uintptr_t)item - 1;

    return lake_part_is(&lake_find_fold->parts[i], key);
}

static size_t lake_part_of(struct lake_fold *f, const char *p, size_t n)
{
    struct lake_part_key key = {p, n};
    uint64_t h = hashtab_hash(p, n);
    void *hit;

    lake_find_fold = f;
    hit = hashtab_find(&f->index, h, lake_idx_is, &key);
    if (hit != NULL) {
        return (size_t)(uintptr_t)hit - 1;
    }
    f->parts = xrealloc(f->parts, (f->n_parts + 1) * sizeof(*f->parts));
    memset(&f->parts[f->n_parts], 0, sizeof(*f->parts));
    f->parts[f->n_parts].name = lake_dup(p, n);
    f->parts[f->n_parts].len = n;
    f->n_parts++;
    if (f->index.cap < 2 * f->n_parts + 2) {
        size_t cap = f->index.cap == 0 ? 64 : f->index.cap * 2;

        hashtab_reset(&f->index, cap);
        for (size_t i = 0; i < f->n_parts; i++) {
            hashtab_insert(&f->index,
                           hashtab_hash(f->parts[i].name, f->parts[i].len),
                           (void *)(uintptr_t)(i + 1));
        }
    } else {
        hashtab_insert(&f->index, h, (void *)(uintptr_t)f->n_parts);
    }
    return f->n_parts - 1;
}

static void lake_fold_violation(struct lake_fold *f, const char *fmt, ...)
    PRINTF(2, 3);

static void lake_fold_violation(struct lake_fold *f, const char *fmt, ...)
{
    va_list ap;
    struct buf b;
    struct err err;

    f->violation_count++;
    if (f->n_violations >= LAKE_MAX_VIOLATIONS) {
        return;
    }
    buf_init(&b, BUF_UNLIMITED);
    va_start(ap, fmt);
    (void)buf_vprintf(&b, &err, fmt, ap);
    va_end(ap);
    f->violations =
        xrealloc(f->violations, (f->n_violations + 1) * sizeof(char *));
    f->violations[f->n_violations++] = buf_steal(&b, NULL);
}

static void lake_add_gap(struct lake_fold *f, size_t part, int64_t from,
                         int64_t to, int64_t k, const char *where)
{
    f->gaps = xrealloc(f->gaps, (f->n_gaps + 1) * sizeof(*f->gaps));
    f->gaps[f->n_gaps++] = (struct lake_gap){part, from, to, k, xstrdup(where)};
}

static void lake_fold_window(struct lake_fold *f, struct lake_window *w,
                             const struct lake_opts *o)
{
    f->windows++;
    if (f->has_prev && w->t_start != f->prev_end && w->t_end != 0) {
        lake_fold_violation(f,
                            "window %" PRId64 ": %s: windows %" PRId64
                            " and %" PRId64 " do not tile: tEnd(%" PRId64
                            ")=%" PRId64 " but tStart(%" PRId64 ")=%" PRId64,
                            w->k, w->manifest_key, w->k - 1, w->k, w->k - 1,
                            f->prev_end, w->k, w->t_start);
    }
    for (size_t i = 0; i < w->n_violations; i++) {
        lake_fold_violation(f, "%s", w->violations[i]);
    }
    if (w->t_end != 0) {
        if (!f->has_prev) {
            f->t_start = w->t_start;
        }
        f->has_prev = true;
        f->prev_end = w->t_end;
        f->t_end = w->t_end;
    }
    f->records += w->records;
    f->bytes += w->bytes;
    f->raw += w->raw;
    f->objects += w->n_keys;
    f->stamps_checked += w->stamps_checked;
    for (size_t i = 0; i < w->n_keys; i++) {
        f->named = xrealloc(f->named, (f->n_named + 1) * sizeof(uint64_t));
        f->named[f->n_named++] = hashtab_hash(w->keys[i], strlen(w->keys[i]));
    }
    for (size_t i = 0; i < w->n_lost; i++) {
        f->lost = xrealloc(f->lost, (f->n_lost + 1) * sizeof(*f->lost));
        f->lost[f->n_lost] = w->lost[i];
        w->lost[i].partition = NULL;
        f->n_lost++;
        (void)lake_part_of(f, f->lost[f->n_lost - 1].partition,
                           f->lost[f->n_lost - 1].plen);
    }
    if (w->n_violations > 0) {
        return; /* its runs are not to be trusted */
    }
    for (size_t i = 0; i < w->n_runs; i++) {
        const struct lake_run *r = &w->runs[i];
        size_t pi = lake_part_of(f, r->partition, r->plen);
        struct lake_part *p = &f->parts[pi];

        if (p->has_records && r->first <= p->top) {
            lake_fold_violation(f,
                                "window %" PRId64 ": %s: record %s/%" PRId64
                                " is in the lake twice (already in window "
                                "%" PRId64 " or before)",
                                w->k, w->keys[r->obj], p->name, r->first,
                                p->top_k);
            continue;
        }
        if (p->has_records && r->first_ts < p->top_ts) {
            lake_fold_violation(f,
                                "window %" PRId64 ": %s: partition %s: ts goes "
                                "backwards from offset %" PRId64 " to %" PRId64,
                                w->k, w->keys[r->obj], p->name, p->top,
                                r->first);
        }
        if (!p->has_records && r->first > 0 && o->from_k == 1) {
            lake_add_gap(f, pi, 0, r->first - 1, w->k, w->keys[r->obj]);
        } else if (p->has_records && r->first > p->top + 1) {
            lake_add_gap(f, pi, p->top + 1, r->first - 1, w->k,
                         w->keys[r->obj]);
        }
        if (!p->has_records) {
            p->first = r->first;
        }
        p->has_records = true;
        p->top = r->last;
        p->top_ts = r->last_ts;
        p->top_k = w->k;
        p->records += (uint64_t)(r->last - r->first + 1);
    }
    for (size_t i = 0; i < w->n_pos; i++) {
        size_t pi = lake_part_of(f, w->pos[i].partition, w->pos[i].plen);
        struct lake_part *p = &f->parts[pi];

        p->has_pos = true;
        p->pos = w->pos[i].offset;
        p->pos_k = w->k;
    }
}

static bool lake_is_lost(const struct lake_fold *f, const struct lake_part *p,
                         int64_t from, int64_t to)
{
    /* Covered by the union of the partition's lost ranges. */
    int64_t at = from;
    bool moved = true;

    while (at <= to && moved) {
        moved = false;
        for (size_t i = 0; i < f->n_lost; i++) {
            const struct lake_lost *l = &f->lost[i];

            if (l->plen == p->len &&
                memcmp(l->partition, p->name, p->len) == 0 && l->from <= at &&
                at <= l->to) {
                at = l->to + 1;
                moved = true;
            }
        }
    }
    return at > to;
}

/* ---- the broker's view at the end --------------------------------------- */

/* The first record of p at or above from with ts in [t0, t1) and offset
 * <= to (to < 0: any), skipping lost offsets: its offset, or -1. */
static int lake_log_first(struct lake_log *l, const struct lake_fold *f,
                          const struct lake_part *p, int64_t from, int64_t to,
                          int64_t t0, int64_t t1, int64_t *found,
                          struct err *err)
{
    struct slice name = {p->name, p->len};

    *found = -1;
    for (;;) {
        int64_t last = -1;

        if (lake_log_fetch(l, name, from, err) != 0) {
            return err->code;
        }
        if (l->n == 0 && from < l->log_start) {
            from = l->log_start;
            continue;
        }
        for (size_t i = 0; i < l->n; i++) {
            int64_t o = l->offs[i];
            int64_t ts = 0;
            struct slice s =
                json_span(&l->doc, json_obj_get(&l->doc, l->recs[i], "ts"));

            last = o;
            if (to >= 0 && o > to) {
                return 0;
            }
            if (s.len >= 2) {
                (void)isotime_parse_us(s.ptr + 1, s.len - 2, &ts);
            }
            if (ts >= t1) {
                return 0;
            }
            if (ts >= t0 && !lake_is_lost(f, p, o, o)) {
                *found = o;
                return 0;
            }
        }
        if (last < 0) {
            return 0;
        }
        from = last + 1;
    }
}

/* Every partition of the queue in the broker's log: name, logStart. */
static int lake_log_partitions(struct lake_http *h, const char *queue,
                               struct lake_fold *f, struct err *err)
{
    char *after = NULL;

    for (;;) {
        struct buf body;
        struct jw w;
        struct json_doc d = {0};
        long st;
        int e;
        int next;

        buf_init(&body, BUF_UNLIMITED);
        jw_init(&w, &body);
        jw_obj_begin(&w);
        jw_key(&w, "entries");
        jw_arr_begin(&w);
        jw_obj_begin(&w);
        jw_key(&w, "queue");
        jw_cstr(&w, queue);
        jw_key(&w, "since");
        jw_null(&w);
        jw_key(&w, "after");
        if (after != NULL) {
            jw_cstr(&w, after);
        } else {
            jw_null(&w);
        }
        jw_key(&w, "limit");
        jw_i64(&w, 1000);
        jw_obj_end(&w);
        jw_arr_end(&w);
        jw_obj_end(&w);
        if (jw_finish(&w, err) != 0) {
            buf_free(&body);
            free(after);
            return err->code;
        }
        st = lake_http_post(h, "/api/v1/partitions/changed", body.data,
                            body.len, err);
        buf_free(&body);
        free(after);
        after = NULL;
        if (st != 200) {
            return st == 0 ? err->code
                           : err_set(err, ERR_REMOTE,
                                     "the broker's partitions/changed "
                                     "answered %ld",
                                     st);
        }
        if (json_parse(&d, h->ans.data, h->ans.len, NULL, err) != 0) {
            return err->code;
        }
        e = json_child(&d, json_obj_get(&d, 0, "entries"));
        if (e < 0 || json_obj_get(&d, e, "error") >= 0) {
            /* An unknown queue has no log: nothing to compare. */
            json_doc_free(&d);
            return 0;
        }
        for (int p = json_child(&d, json_obj_get(&d, e, "partitions")); p >= 0;
             p = json_next(&d, p)) {
            struct buf name;

            buf_init(&name, BUF_UNLIMITED);
            if (json_get_str(&d, json_obj_get(&d, p, "name"), &name, err) ==
                0) {
                (void)lake_part_of(f, name.data != NULL ? name.data : "",
                                   name.len);
            }
            buf_free(&name);
        }
        next = json_obj_get(&d, e, "next");
        if (next >= 0 && json_type(&d, next) == JSON_STRING) {
            struct buf nb;

            buf_init(&nb, BUF_UNLIMITED);
            (void)json_get_str(&d, next, &nb, err);
            after = buf_steal(&nb, NULL);
        }
        json_doc_free(&d);
        if (after == NULL) {
            return 0;
        }
    }
}

/* ---- verify ------------------------------------------------------------- */

struct lake_counter {
    int64_t n; /* highest k, numbering checked */
    bool is_bad;
    char bad[1024];
    size_t root_len;
};

static int lake_count_manifest(void *arg, const char *key)
{
    struct lake_counter *c = arg;
    int64_t k = 0;
    const char *rest = key + c->root_len;
    size_t n = strlen(rest);

    if (c->is_bad) {
        return 0;
    }
    if (n != 15 || strcmp(rest + 10, ".json") != 0 ||
        !layout_parse_manifest_k(key, strlen(key), &k)) {
        c->is_bad = true;
        snprintf(c->bad, sizeof(c->bad),
                 "%s: not a manifest name (windows/<k:010>.json)", key);
        return 0;
    }
    if (k != c->n + 1) {
        c->is_bad = true;
        snprintf(c->bad, sizeof(c->bad),
                 "window %" PRId64 ": %s: manifests are not numbered 1..n "
                 "without a gap: it follows k=%" PRId64,
                 k, key, c->n);
        return 0;
    }
    c->n = k;
    return 0;
}

struct lake_orphans {
    struct lake_fold *f;
    const struct lake_opts *o;
    int64_t last_k;
};

static int lake_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static int lake_check_orphan(void *arg, const char *key)
{
    struct lake_orphans *c = arg;
    uint64_t h = hashtab_hash(key, strlen(key));
    const char *w = strrchr(key, '/');
    int64_t k = -1;

    if (w != NULL && strncmp(w, "/w-", 3) == 0) {
        char digits[11];

        memcpy(digits, w + 3, 10);
        digits[10] = '\0';
        (void)lake_int(digits, &k);
    }
    if (k >= 0 && (k < c->o->from_k || k > c->last_k)) {
        return 0; /* outside the range verified */
    }
    if (bsearch(&h, c->f->named, c->f->n_named, sizeof(uint64_t),
                lake_u64_cmp) == NULL) {
        lake_fold_violation(c->f,
                            "window %" PRId64 ": %s: data object, but no "
                            "manifest names it",
                            k, key);
    }
    return 0;
}

struct lake_progress {
    bool is_tty;
    struct timespec start;
    struct timespec last;
};

static double lake_since(const struct timespec *a)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - a->tv_sec) +
           (double)(now.tv_nsec - a->tv_nsec) / 1e9;
}

static void lake_progress_show(struct lake_progress *p, const char *what,
                               int64_t done, int64_t total, uint64_t records,
                               uint64_t bytes, bool is_final)
{
    double t;

    if (!p->is_tty) {
        return;
    }
    if (!is_final && lake_since(&p->last) < 0.2) {
        return;
    }
    clock_gettime(CLOCK_MONOTONIC, &p->last);
    t = lake_since(&p->start);
    fprintf(stderr,
            "\r%s %" PRId64 "/%" PRId64 " windows  %" PRIu64
            " records  %.1f MB  %.1f windows/s   ",
            what, done, total, records, (double)bytes / 1e6,
            t > 0 ? (double)done / t : 0.0);
    if (is_final) {
        fputc('\n', stderr);
    }
}

static void lake_json_str(FILE *out, const char *s)
{
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    (void)json_escape(&b, s, strlen(s), &err); /* with its quotes */
    fwrite(b.data != NULL ? b.data : "", 1, b.len, out);
    buf_free(&b);
}

struct lake_qlist {
    char **names;
    size_t n;
    size_t root_len;
};

static int lake_collect_queue(void *arg, const char *key)
{
    struct lake_qlist *q = arg;
    const char *rest = key + q->root_len;
    const char *slash;
    struct buf raw;
    struct err err;

    if (strncmp(rest, "queue=", 6) != 0 ||
        (slash = strchr(rest + 6, '/')) == NULL) {
        return 0;
    }
    buf_init(&raw, BUF_UNLIMITED);
    if (pct_unescape(&raw, rest + 6, (size_t)(slash - rest - 6), &err) != 0) {
        buf_free(&raw);
        return 0;
    }
    if (q->n == 0 || strcmp(q->names[q->n - 1], raw.data) != 0) {
        q->names = xrealloc(q->names, (q->n + 1) * sizeof(char *));
        q->names[q->n++] = buf_steal(&raw, NULL);
    }
    buf_free(&raw);
    return 0;
}

static void lake_fold_free(struct lake_fold *f)
{
    for (size_t i = 0; i < f->n_parts; i++) {
        free(f->parts[i].name);
    }
    for (size_t i = 0; i < f->n_gaps; i++) {
        free(f->gaps[i].where);
    }
    for (size_t i = 0; i < f->n_lost; i++) {
        free(f->lost[i].partition);
    }
    for (size_t i = 0; i < f->n_violations; i++) {
        free(f->violations[i]);
    }
    free(f->parts);
    free(f->gaps);
    free(f->lost);
    free(f->named);
    free(f->violations);
    hashtab_free(&f->index);
}

/* Verify one queue into f. Returns 0, or 2 (err) when it could not run. */
static int lake_verify_queue(const struct lake_opts *o, struct lake_bucket *b,
                             const char *queue, struct lake_fold *f,
                             struct lake_progress *prog, struct err *err)
{
    struct lake_job job = {o, b, queue, {o->prefix, {0}, {0}}};
    struct lake_counter cnt;
    struct buf root;
    struct lake_pool pool;
    pthread_t *th;
    int rc = 0;
    int64_t last_k;

    job.lq.tenant = (struct slice){o->tenant, strlen(o->tenant)};
    job.lq.queue = (struct slice){queue, strlen(queue)};
    memset(&cnt, 0, sizeof(cnt));
    buf_init(&root, 4096);
    if (layout_sidecar_root(&root, &job.lq, err) != 0 ||
        buf_append_str(&root, "/windows/", err) != 0) {
        buf_free(&root);
        return 2;
    }
    cnt.root_len = root.len;
    if (lake_list(b, root.data, lake_count_manifest, &cnt, err) != 0) {
        buf_free(&root);
        return 2;
    }
    buf_free(&root);
    if (cnt.is_bad) {
        lake_fold_violation(f, "%s", cnt.bad);
    } else if (cnt.n == 0) {
        return err_set(err, ERR_NOT_FOUND,
                       "no manifest for queue %s of tenant %s under prefix "
                       "%s",
                       queue, o->tenant, o->prefix) != 0
                   ? 2
                   : 2;
    }
    last_k = o->to_k != 0 && o->to_k < cnt.n ? o->to_k : cnt.n;
    if (o->to_k > cnt.n) {
        lake_fold_violation(f,
                            "--to-k %" PRId64 " is past the last manifest "
                            "(k=%" PRId64 ")",
                            o->to_k, cnt.n);
    }
    f->first_k = o->from_k;
    memset(&pool, 0, sizeof(pool));
    pool.job = &job;
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    pool.next_k = o->from_k;
    pool.folded = o->from_k;
    pool.last_k = last_k;
    pool.ahead = (size_t)o->threads * LAKE_AHEAD_PER_THREAD;
    pool.slots = xcalloc(pool.ahead, sizeof(*pool.slots));
    th = xcalloc((size_t)o->threads, sizeof(*th));
    for (int i = 0; i < o->threads; i++) {
        pthread_create(&th[i], NULL, lake_worker, &pool);
    }
    for (int64_t k = o->from_k; k <= last_k; k++) {
        struct lake_window w;

        pthread_mutex_lock(&pool.mu);
        while (!(pool.slots[(size_t)k % pool.ahead].is_done &&
                 pool.slots[(size_t)k % pool.ahead].k == k)) {
            pthread_cond_wait(&pool.cv, &pool.mu);
        }
        w = pool.slots[(size_t)k % pool.ahead];
        memset(&pool.slots[(size_t)k % pool.ahead], 0, sizeof(w));
        pthread_mutex_unlock(&pool.mu);
        if (w.is_fatal) {
            *err = w.err;
            err_wrap(err, "window %" PRId64, k);
            lake_window_clear(&w);
            rc = 2;
            break;
        }
        lake_fold_window(f, &w, o);
        lake_window_clear(&w);
        pthread_mutex_lock(&pool.mu);
        pool.folded = k + 1;
        pthread_cond_broadcast(&pool.cv);
        pthread_mutex_unlock(&pool.mu);
        lake_progress_show(prog, "verify", k - o->from_k + 1,
                           last_k - o->from_k + 1, f->records, f->raw, false);
    }
    pthread_mutex_lock(&pool.mu);
    pool.is_stopping = true;
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < o->threads; i++) {
        pthread_join(th[i], NULL);
    }
    for (size_t i = 0; i < pool.ahead; i++) {
        lake_window_clear(&pool.slots[i]);
    }
    free(th);
    free(pool.slots);
    pthread_mutex_destroy(&pool.mu);
    pthread_cond_destroy(&pool.cv);
    lake_progress_show(prog, "verify", last_k - o->from_k + 1,
                       last_k - o->from_k + 1, f->records, f->raw, true);
    if (rc != 0) {
        return rc;
    }
    /* Orphans: every data object of the range must be named. */
    {
        struct lake_orphans oc = {f, o, last_k};
        struct buf data;

        qsort(f->named, f->n_named, sizeof(uint64_t), lake_u64_cmp);
        buf_init(&data, 4096);
        if (buf_printf(&data, err, "%s%s", o->prefix,
                       o->prefix[0] != '\0' ? "/" : "") != 0 ||
            buf_append_str(&data, "tenant=", err) != 0 ||
            pct_escape(&data, o->tenant, strlen(o->tenant), err) != 0 ||
            buf_append_str(&data, "/queue=", err) != 0 ||
            pct_escape(&data, queue, strlen(queue), err) != 0 ||
            buf_append_str(&data, "/", err) != 0 ||
            lake_list(b, data.data, lake_check_orphan, &oc, err) != 0) {
            buf_free(&data);
            return 2;
        }
        buf_free(&data);
    }
    /* The log's partitions, so that one the lake lacks is looked at. */
    {
        struct lake_log log;

        memset(&log, 0, sizeof(log));
        if (o->broker != NULL) {
            lake_http_open(&log.http, o->broker, o->token);
            buf_init(&log.part, BUF_UNLIMITED);
            log.queue = queue;
            if (lake_log_partitions(&log.http, queue, f, err) != 0) {
                rc = 2;
            }
        }
        /* Offsets below a manifest's position that the lake lacks. */
        for (size_t i = 0; rc == 0 && i < f->n_parts; i++) {
            struct lake_part *p = &f->parts[i];
            int64_t top = p->has_records ? p->top : -1;

            if (p->has_pos && p->pos > top + 1 &&
                (p->has_records || o->from_k == 1)) {
                char where[64];

                snprintf(where, sizeof(where), "positions of window %" PRId64,
                         p->pos_k);
                lake_add_gap(f, i, top + 1, p->pos - 1, p->pos_k, where);
            }
        }
        for (size_t i = 0; rc == 0 && i < f->n_gaps; i++) {
            struct lake_gap *g = &f->gaps[i];
            struct lake_part *p = &f->parts[g->part];
            int64_t at = -1;

            if (lake_is_lost(f, p, g->from, g->to)) {
                continue;
            }
            if (o->broker != NULL) {
                if (lake_log_first(&log, f, p, g->from, g->to, f->t_start,
                                   f->t_end, &at, err) != 0) {
                    rc = 2;
                    break;
                }
                if (at >= 0) {
                    lake_fold_violation(f,
                                        "window %" PRId64 ": %s: record %s/"
                                        "%" PRId64 " is in the log, not in "
                                        "the lake",
                                        g->k, g->where, p->name, at);
                }
                continue;
            }
            lake_fold_violation(f,
                                "window %" PRId64 ": %s: partition %s: "
                                "offsets %" PRId64 "..%" PRId64
                                " are neither in the lake nor lost "
                                "(offsets not contiguous)",
                                g->k, g->where, p->name, g->from, g->to);
        }
        /* The log's records past the lake's last one, below tEnd. */
        for (size_t i = 0; rc == 0 && o->broker != NULL && i < f->n_parts;
             i++) {
            struct lake_part *p = &f->parts[i];
            int64_t at = -1;
            int64_t from = p->has_records ? p->top + 1 : 0;

            if (p->has_pos && p->pos > from) {
                from = p->pos; /* the gap below was looked at */
            }
            if (lake_log_first(&log, f, p, from, -1, f->t_start, f->t_end, &at,
                               err) != 0) {
                rc = 2;
                break;
            }
            if (at >= 0) {
                lake_fold_violation(f,
                                    "window %" PRId64 ": %s: record %s/%" PRId64
                                    " is in the log, not in the lake",
                                    f->windows > 0 ? f->first_k + f->windows - 1
                                                   : 0,
                                    "(after the last window)", p->name, at);
            }
        }
        if (o->broker != NULL) {
            lake_log_drop(&log);
            lake_http_close(&log.http);
            buf_free(&log.part);
        }
    }
    return rc;
}

static void lake_report(const struct lake_opts *o, const char *queue,
                        const struct lake_fold *f, FILE *out, bool is_first)
{
    char a[32];
    char b[32];

    if (o->is_json) {
        fprintf(out, "%s{\"queue\":", is_first ? "" : ",");
        lake_json_str(out, queue);
        fprintf(out,
                ",\"exact\":%s,\"windows\":%" PRId64 ",\"fromK\":%" PRId64
                ",\"objects\":%" PRIu64 ",\"records\":%" PRIu64
                ",\"bytes\":%" PRIu64 ",\"decodedBytes\":%" PRIu64
                ",\"partitions\":%zu,\"tStart\":%" PRId64 ",\"tEnd\":%" PRId64
                ",\"stampsChecked\":%" PRIu64 ",\"lost\":[",
                f->violation_count == 0 ? "true" : "false", f->windows,
                f->first_k, f->objects, f->records, f->bytes, f->raw,
                f->n_parts, f->t_start, f->t_end, f->stamps_checked);
        for (size_t i = 0; i < f->n_lost; i++) {
            fprintf(out, "%s{\"k\":%" PRId64 ",\"partition\":", i ? "," : "",
                    f->lost[i].k);
            lake_json_str(out, f->lost[i].partition);
            fprintf(out, ",\"from\":%" PRId64 ",\"to\":%" PRId64 "}",
                    f->lost[i].from, f->lost[i].to);
        }
        fprintf(out, "],\"violationCount\":%" PRIu64 ",\"violations\":[",
                f->violation_count);
        for (size_t i = 0; i < f->n_violations; i++) {
            if (i > 0) {
                fputc(',', out);
            }
            lake_json_str(out, f->violations[i]);
        }
        fprintf(out, "]}");
        return;
    }
    lake_iso(f->t_start, a);
    lake_iso(f->t_end, b);
    fprintf(out,
            "queue %s: %s\n  windows %" PRId64 "..%" PRId64 " [%s, %s)\n"
            "  %" PRIu64 " objects, %" PRIu64 " records, %.1f MB stored, "
            "%.1f MB decoded, %zu partitions\n",
            queue, f->violation_count == 0 ? "exact" : "VIOLATIONS", f->first_k,
            f->first_k + f->windows - 1, a, b, f->objects, f->records,
            (double)f->bytes / 1e6, (double)f->raw / 1e6, f->n_parts);
    if (o->broker != NULL) {
        fprintf(out, "  %" PRIu64 " records compared with the broker's log\n",
                f->stamps_checked);
    }
    for (size_t i = 0; i < f->n_lost; i++) {
        fprintf(out,
                "  lost (window %" PRId64 "): partition %s offsets %" PRId64
                "..%" PRId64 "\n",
                f->lost[i].k, f->lost[i].partition, f->lost[i].from,
                f->lost[i].to);
    }
    for (size_t i = 0; i < f->n_violations; i++) {
        fprintf(out, "  VIOLATION %s\n", f->violations[i]);
    }
    if (f->violation_count > f->n_violations) {
        fprintf(out, "  ... %" PRIu64 " violations in all\n",
                f->violation_count);
    }
}

static int lake_queues(const struct lake_opts *o, struct lake_bucket *b,
                       struct lake_qlist *q, struct err *err)
{
    struct buf root;
    int rc;

    memset(q, 0, sizeof(*q));
    if (o->n_queues > 0) {
        for (size_t i = 0; i < o->n_queues; i++) {
            q->names = xrealloc(q->names, (q->n + 1) * sizeof(char *));
            q->names[q->n++] = xstrdup(o->queues[i]);
        }
        return 0;
    }
    buf_init(&root, 4096);
    rc = buf_printf(&root, err, "%s%s_queen/tenant=", o->prefix,
                    o->prefix[0] != '\0' ? "/" : "");
    if (rc == 0) {
        rc = pct_escape(&root, o->tenant, strlen(o->tenant), err);
    }
    if (rc == 0) {
        rc = buf_append_str(&root, "/", err);
    }
    q->root_len = root.len;
    if (rc == 0) {
        rc = lake_list(b, root.data, lake_collect_queue, q, err);
    }
    buf_free(&root);
    return rc;
}

static void lake_qlist_free(struct lake_qlist *q)
{
    for (size_t i = 0; i < q->n; i++) {
        free(q->names[i]);
    }
    free(q->names);
}

static int lake_verify(const struct lake_opts *o)
{
    struct lake_bucket b;
    struct lake_qlist q;
    struct lake_progress prog;
    struct err err;
    int rc = 0;
    bool is_bad = false;

    memset(&prog, 0, sizeof(prog));
    prog.is_tty = isatty(2) != 0;
    clock_gettime(CLOCK_MONOTONIC, &prog.start);
    prog.last = prog.start;
    prog.last.tv_sec -= 1;
    lake_bucket_open(&b, o);
    if (lake_queues(o, &b, &q, &err) != 0) {
        fprintf(stderr, "queen lake verify: listing the queues: %s\n", err.msg);
        lake_bucket_close(&b);
        return 2;
    }
    if (q.n == 0) {
        fprintf(stderr,
                "queen lake verify: no queue of tenant %s under prefix %s\n",
                o->tenant, o->prefix);
        lake_bucket_close(&b);
        return 2;
    }
    if (o->is_json) {
        printf("{\"tenant\":");
        lake_json_str(stdout, o->tenant);
        printf(",\"queues\":[");
    }
    for (size_t i = 0; i < q.n; i++) {
        struct lake_fold f;

        memset(&f, 0, sizeof(f));
        if (lake_verify_queue(o, &b, q.names[i], &f, &prog, &err) != 0) {
            fprintf(stderr, "queen lake verify: queue %s: %s\n", q.names[i],
                    err.msg);
            rc = 2;
            lake_fold_free(&f);
            break;
        }
        lake_report(o, q.names[i], &f, stdout, i == 0);
        is_bad = is_bad || f.violation_count > 0;
        lake_fold_free(&f);
    }
    if (o->is_json) {
        printf("],\"exact\":%s}\n", !is_bad && rc == 0 ? "true" : "false");
    }
    lake_qlist_free(&q);
    lake_bucket_close(&b);
    if (fflush(stdout) != 0) {
        return 2;
    }
    return rc != 0 ? rc : is_bad ? 1 : 0;
}

/* ---- restore ------------------------------------------------------------ */

struct lake_push {
    struct lake_http http;
    const char *as;
    struct buf body;
    size_t items;
    size_t max_items;
    uint64_t queued;
    uint64_t duplicates;
    uint64_t records;
    uint64_t bytes;
    bool is_failed;
    struct err err;
};

static int lake_push_flush(struct lake_push *p)
{
    struct json_doc d = {0};
    int attempt = 0;
    long st = 0;

    if (p->items == 0) {
        return 0;
    }
    if (buf_append_str(&p->body, "]}", &p->err) != 0) {
        return 2;
    }
    for (;;) {
        st = lake_http_post(&p->http, "/api/v1/push", p->body.data, p->body.len,
                            &p->err);
        if (st == 201 || (st >= 400 && st < 500 && st != 429) ||
            ++attempt >= 30) {
            break;
        }
        {
            struct timespec ts = {0, 200000000L * (attempt < 5 ? attempt : 5)};

            nanosleep(&ts, NULL);
        }
    }
    if (st != 201) {
        if (st != 0) {
            err_set(&p->err, ERR_REMOTE,
                    "the broker's push answered %ld: %.300s", st,
                    p->http.ans.data != NULL ? p->http.ans.data : "");
        }
        return 2;
    }
    if (json_parse(&d, p->http.ans.data, p->http.ans.len, NULL, &p->err) != 0) {
        return 2;
    }
    for (int i = json_child(&d, 0); i >= 0; i = json_next(&d, i)) {
        int s = json_obj_get(&d, i, "status");

        if (json_str_eq(&d, s, "queued")) {
            p->queued++;
        } else if (json_str_eq(&d, s, "duplicate")) {
            p->duplicates++;
        } else {
            struct slice sp = json_span(&d, i);

            err_set(&p->err, ERR_REMOTE, "the broker refused an item: %.*s",
                    (int)(sp.len > 300 ? 300 : sp.len), sp.ptr);
            json_doc_free(&d);
            return 2;
        }
    }
    json_doc_free(&d);
    buf_reset(&p->body);
    p->items = 0;
    return 0;
}

static int lake_push_record(void *arg, const struct sink_record *r)
{
    struct lake_push *p = arg;
    struct err *err = &p->err;

    if (p->items == 0 && buf_append_str(&p->body, "{\"items\":[", err) != 0) {
        p->is_failed = true;
        return 2;
    }
    if ((p->items > 0 && buf_append_byte(&p->body, ',', err) != 0) ||
        buf_append_str(&p->body, "{\"queue\":", err) != 0 ||
        json_escape(&p->body, p->as, strlen(p->as), err) != 0 ||
        buf_append_str(&p->body, ",\"partition\":", err) != 0 ||
        json_escape(&p->body, r->partition.ptr, r->partition.len, err) != 0 ||
        buf_append_str(&p->body, ",\"transactionId\":", err) != 0 ||
        json_escape(&p->body, r->txn.ptr, r->txn.len, err) != 0 ||
        buf_append_str(&p->body, ",\"payload\":", err) != 0 ||
        (r->payload.len == 0 ? buf_append_str(&p->body, "null", err)
                             : buf_append(&p->body, r->payload.ptr,
                                          r->payload.len, err)) != 0 ||
        buf_append_byte(&p->body, '}', err) != 0) {
        p->is_failed = true;
        return 2;
    }
    p->items++;
    p->records++;
    p->bytes += r->payload.len;
    if (p->items >= p->max_items || p->body.len >= LAKE_PUSH_BYTES) {
        if (lake_push_flush(p) != 0) {
            p->is_failed = true;
            return 2;
        }
    }
    return 0;
}

/* The state file: one line "k <K>" naming the last window every record of
 * which the broker acknowledged. */
static int64_t lake_state_read(const char *path)
{
    FILE *f = fopen(path, "r");
    long long k = 0;

    if (f == NULL) {
        return 0;
    }
    if (fscanf(f, "k %lld", &k) != 1 || k < 0) {
        k = 0;
    }
    fclose(f);
    return (int64_t)k;
}

static int lake_state_write(const char *path, int64_t k, struct err *err)
{
    char tmp[4096];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (f == NULL) {
        return err_set(err, ERR_IO, "%s: %s", tmp, strerror(errno));
    }
    fprintf(f, "k %" PRId64 "\n", k);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        fclose(f);
        return err_set(err, ERR_IO, "%s: %s", tmp, strerror(errno));
    }
    fclose(f);
    if (rename(tmp, path) != 0) {
        return err_set(err, ERR_IO, "%s: %s", path, strerror(errno));
    }
    return 0;
}

static int lake_restore(const struct lake_opts *o)
{
    struct lake_bucket b;
    struct lake_job job;
    struct lake_counter cnt;
    struct lake_push push;
    struct lake_progress prog;
    struct buf root;
    struct err err;
    const char *queue;
    int64_t from;
    int64_t last_k;
    int rc = 0;

    if (o->n_queues != 1 || o->to == NULL) {
        fprintf(stderr, "queen lake restore: --queue Q (one) and --to URL "
                        "are required\n");
        return 2;
    }
    queue = o->queues[0];
    memset(&prog, 0, sizeof(prog));
    prog.is_tty = isatty(2) != 0;
    clock_gettime(CLOCK_MONOTONIC, &prog.start);
    prog.last = prog.start;
    lake_bucket_open(&b, o);
    job = (struct lake_job){o, &b, queue, {o->prefix, {0}, {0}}};
    job.lq.tenant = (struct slice){o->tenant, strlen(o->tenant)};
    job.lq.queue = (struct slice){queue, strlen(queue)};
    memset(&cnt, 0, sizeof(cnt));
    buf_init(&root, 4096);
    if (layout_sidecar_root(&root, &job.lq, &err) != 0 ||
        buf_append_str(&root, "/windows/", &err) != 0 ||
        (cnt.root_len = root.len,
         lake_list(&b, root.data, lake_count_manifest, &cnt, &err)) != 0) {
        fprintf(stderr, "queen lake restore: %s\n", err.msg);
        buf_free(&root);
        lake_bucket_close(&b);
        return 2;
    }
    buf_free(&root);
    if (cnt.is_bad) {
        fprintf(stderr, "queen lake restore: %s\n", cnt.bad);
        lake_bucket_close(&b);
        return 2;
    }
    last_k = o->to_k != 0 && o->to_k < cnt.n ? o->to_k : cnt.n;
    from = o->from_k;
    if (o->state != NULL && lake_state_read(o->state) + 1 > from) {
        from = lake_state_read(o->state) + 1;
    }
    memset(&push, 0, sizeof(push));
    lake_http_open(&push.http, o->to, o->token);
    buf_init(&push.body, BUF_UNLIMITED);
    push.as = o->as != NULL ? o->as : queue;
    push.max_items = (size_t)o->batch;
    for (int64_t k = from; k <= last_k && rc == 0; k++) {
        struct buf mkey;
        struct buf raw;
        struct buf arena;
        struct buf body;
        struct docs_manifest m;
        struct s3_object_info info;
        struct s3_status st;
        enum lake_codec codec = LAKE_NONE;
        const char *ext;
        const char *desc;

        memset(&m, 0, sizeof(m));
        buf_init(&mkey, 4096);
        buf_init(&raw, (size_t)64 << 20);
        buf_init(&arena, BUF_UNLIMITED);
        buf_init(&body, LAKE_MAX_OBJECT);
        if (layout_manifest_key(&mkey, &job.lq, k, &err) != 0 ||
            s3_client_get(b.c, mkey.data, &raw, &info, &st, &err) != 0) {
            rc = 2;
        } else if (!info.found ||
                   docs_manifest_decode(raw.data, raw.len, &m, &arena, &err) !=
                       0 ||
                   !lake_codec_of(m.format, m.compression, &codec, &ext,
                                  &desc)) {
            err_set(&err, ERR_CORRUPT, "%s: not a manifest (run verify)",
                    mkey.data);
            rc = 2;
        }
        for (size_t i = 0; rc == 0 && i < m.n_objects; i++) {
            char key[4096];
            uint64_t decoded = 0;
            uint8_t sum[32];
            char hex[65];

            snprintf(key, sizeof(key), "%.*s", (int)m.objects[i].key.len,
                     m.objects[i].key.ptr);
            if (s3_client_get(b.c, key, &body, &info, &st, &err) != 0) {
                rc = 2;
                break;
            }
            sha256(body.data, body.len, sum);
            hex_lower(sum, 32, hex);
            if (!info.found || memcmp(hex, m.objects[i].sha256, 64) != 0) {
                err_set(&err, ERR_CORRUPT,
                        "%s: missing or not the manifest's bytes (run "
                        "verify)",
                        key);
                rc = 2;
                break;
            }
            if (lake_decode(codec, body.data, body.len, lake_push_record, &push,
                            &decoded, &err) != 0) {
                if (push.is_failed) {
                    err = push.err;
                }
                rc = 2;
            }
        }
        if (rc == 0 && lake_push_flush(&push) != 0) {
            err = push.err;
            rc = 2;
        }
        if (rc == 0 && o->state != NULL &&
            lake_state_write(o->state, k, &err) != 0) {
            rc = 2;
        }
        buf_free(&mkey);
        buf_free(&raw);
        buf_free(&arena);
        buf_free(&body);
        lake_progress_show(&prog, "restore", k - from + 1, last_k - from + 1,
                           push.records, push.bytes, false);
    }
    lake_progress_show(&prog, "restore", last_k - from + 1, last_k - from + 1,
                       push.records, push.bytes, true);
    if (rc != 0) {
        fprintf(stderr, "queen lake restore: %s\n", err.msg);
    } else if (o->is_json) {
        printf("{\"queue\":");
        lake_json_str(stdout, push.as);
        printf(",\"fromK\":%" PRId64 ",\"toK\":%" PRId64 ",\"records\":%" PRIu64
               ",\"queued\":%" PRIu64 ",\"duplicates\":%" PRIu64 "}\n",
               from, last_k, push.records, push.queued, push.duplicates);
    } else {
        printf("restored windows %" PRId64 "..%" PRId64 " of %s into %s: "
               "%" PRIu64 " records, %" PRIu64 " new, %" PRIu64
               " already there\n",
               from, last_k, queue, push.as, push.records, push.queued,
               push.duplicates);
    }
    buf_free(&push.body);
    lake_http_close(&push.http);
    lake_bucket_close(&b);
    return rc;
}

int lake_main(int argc, char **argv)
{
    struct lake_opts o;
    int rc;

    if (argc < 2 ||
        (strcmp(argv[1], "verify") != 0 && strcmp(argv[1], "restore") != 0)) {
        lake_usage(argc >= 2 && strcmp(argv[1], "--help") == 0 ? stdout
                                                               : stderr);
        return argc >= 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    rc = lake_parse(argc, argv, &o);
    if (rc != 0) {
        lake_opts_free(&o);
        return rc;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = strcmp(argv[1], "verify") == 0 ? lake_verify(&o) : lake_restore(&o);
    curl_global_cleanup();
    lake_opts_free(&o);
    return rc;
}
