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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#define ZLIB_CONST /* next_in is const */
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
#include "broker/config.h"
#include "lake/footer.h"
#include "lake/line.h"
#include "parquet/read.h"
#include "s3/client.h"
#include "s3/transport_curl.h"
#include "sink/docs.h"
#include "sink/jsonl.h"
#include "sink/layout.h"

#define LAKE_DEFAULT_TENANT "00000000-0000-0000-0000-000000000001"
#define LAKE_TENANT_MAX     256  /* with its NUL */
#define LAKE_URL_MAX        1900 /* --broker, --to: url[2048] less a route */
#define LAKE_MAX_OBJECT     ((size_t)4 << 30)
/* A manifest longer than this is not read: it is its window's violation
 * (the sink's manifests are a few kB; a million per-partition objects
 * would be about 300 MB, which no window the sink closes reaches). */
#define LAKE_MANIFEST_MAX ((size_t)64 << 20)
#define LAKE_CHUNK        ((size_t)1 << 20)
/* A zstd object decoding to at most this is decoded in one call (a
 * thread holds one such buffer); larger ones stream LAKE_CHUNK at a time. */
#define LAKE_WHOLE_MAX      ((size_t)32 << 20)
#define LAKE_HUGE           ((size_t)2 << 20)
#define LAKE_WHOLE_MAP      (LAKE_WHOLE_MAX + LAKE_HUGE)
#define LAKE_MAX_VIOLATIONS 1000 /* kept for the report; all are counted */
#define LAKE_FETCH_BYTES    (4 << 20)
/* The broker takes a payload as deep as a push body at JSON_MAX_DEPTH_DEFAULT
 * allows, at depth 3 there ({"items":[{"payload"); its fetch answer holds it
 * at depth 5 ({"entries":[{"records":[{"payload"), two levels deeper. */
#define LAKE_FETCH_DEPTH (JSON_MAX_DEPTH_DEFAULT - 3 + 5)
/* An object decoding to more than this many times its stored size (past a
 * floor) is refused (lake_parquet_max). */
#define LAKE_PARQUET_RATIO ((size_t)1024)
/* A line is one record: its payload came in a push body, so a line longer
 * than twice the largest body the broker takes (QUEEN_MAX_BODY_BYTES, read
 * from the environment as the broker reads it) plus an envelope is no
 * record. Twice: a sealed payload the sink's node cannot open is written
 * as a JSON string of its envelope, base64 inside (4/3 of it, and its
 * quotes). The bound keeps a line without LF (a few kB of zstd can decode
 * to GBs) from growing a reader's memory without end. */
#define LAKE_LINE_ENVELOPE ((size_t)64 << 10)
static size_t lake_body_max = (size_t)64 << 20;

static size_t lake_line_max(void)
{
    return 2 * lake_body_max + LAKE_LINE_ENVELOPE;
}

/* What a Parquet object of n stored bytes may decode to (its rows,
 * dictionaries and pages, held at once): LAKE_PARQUET_RATIO times its size,
 * and at least two of the longest records. Event data decodes to about 7
 * (snappy) to 23 (zstd) times its size; a hostile object can declare 1 GiB
 * pages at ~30,000:1. */
static size_t lake_parquet_max(size_t n)
{
    size_t least = 2 * lake_line_max();

    return n > least / LAKE_PARQUET_RATIO ? n * LAKE_PARQUET_RATIO : least;
}

/* --batch's default: 2000 records measured faster than 1000 (fewer requests
 * for the broker to parse, answer and commit; bench/restore, docs/lake.md
 * section 4); 4000 was no faster. */
#define LAKE_PUSH_ITEMS 2000
#define LAKE_PUSH_BYTES ((size_t)4 << 20)
/* "lake-" and 32 hex digits: lake_derive_txn */
#define LAKE_TXN_DERIVED_LEN 37
/* A peer (the bucket or the broker) that accepts the connection and then
 * sends nothing for this long is given up on for that attempt, rather than
 * after the 120 s a request may take in all: a port that is no HTTP
 * server, or a hung one, must not hold the tool for minutes. A transfer
 * that is moving, however slowly, is not cut. */
#define LAKE_STALL_MS 10000L
/* The broker: a connection not made within this (as for the bucket,
 * S3_CONNECT_TIMEOUT_MS) is no answer, and no answer (nor 5xx or 429) is
 * retried until LAKE_BROKER_TRY_MS after a call's first attempt began. */
#define LAKE_CONNECT_MS    5000L
#define LAKE_BROKER_TRY_MS 30000L

/* ---- options ------------------------------------------------------------ */

/* The bucket settings as written, before they are checked. */
struct lake_raw {
    const char *endpoint;
    const char *bucket;
    const char *region;
    const char *prefix;
    const char *ak;
    const char *sk;
    const char *tenant;
    bool path_style;
    const char *ca_file; /* NULL = the system's authorities */
};

struct lake_opts {
    struct s3_config s3;
    struct lake_raw raw; /* flags and environment, checked into s3 */
    char prefix[512];
    char tenant[LAKE_TENANT_MAX];
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
    uint32_t given; /* a bit per row of lake_flag_defs given on the line */
};

/* The commands a flag belongs to (a bit each). */
#define LAKE_VERIFY  1u
#define LAKE_RESTORE 2u
#define LAKE_BOTH    (LAKE_VERIFY | LAKE_RESTORE)
#define LAKE_HELP    3 /* lake_parse: the usage was asked for and printed */

enum lake_flag_type {
    LAKE_SWITCH, /* no value: sets a bool */
    LAKE_TEXT,   /* const char *: the last value given, borrowed from argv */
    LAKE_QUEUE,  /* appended to queues */
    LAKE_I64,    /* int64_t in lo..hi */
    LAKE_INT,    /* int in lo..hi */
};

/* Every flag of both commands: one row each, so that a flag of the other
 * command is refused in one place (a flag that would do nothing is a
 * mistake, not to be ignored). */
struct lake_flag_def {
    const char *name;
    unsigned cmds; /* LAKE_VERIFY, LAKE_RESTORE or both */
    enum lake_flag_type type;
    size_t off; /* of the target in struct lake_opts */
    int64_t lo;
    int64_t hi;
};

#define LAKE_OFF(f) offsetof(struct lake_opts, f)

static const struct lake_flag_def lake_flag_defs[] = {
    {"--endpoint", LAKE_BOTH, LAKE_TEXT, LAKE_OFF(raw.endpoint), 0, 0},
    {"--bucket", LAKE_BOTH, LAKE_TEXT, LAKE_OFF(raw.bucket), 0, 0},
    {"--region", LAKE_BOTH, LAKE_TEXT, LAKE_OFF(raw.region), 0, 0},
    {"--prefix", LAKE_BOTH, LAKE_TEXT, LAKE_OFF(raw.prefix), 0, 0},
    {"--path-style", LAKE_BOTH, LAKE_SWITCH, LAKE_OFF(raw.path_style), 0, 0},
    {"--access-key", LAKE_BOTH, LAKE_TEXT, LAKE_OFF(raw.ak), 0, 0},
    {"--secret-key", LAKE_BOTH, LAKE_TEXT, LAKE_OFF(raw.sk), 0, 0},
    {"--tenant", LAKE_BOTH, LAKE_TEXT, LAKE_OFF(raw.tenant), 0, 0},
    {"--ca-file", LAKE_BOTH, LAKE_TEXT, LAKE_OFF(raw.ca_file), 0, 0},
    {"--queue", LAKE_BOTH, LAKE_QUEUE, LAKE_OFF(queues), 0, 0},
    {"--from-k", LAKE_BOTH, LAKE_I64, LAKE_OFF(from_k), 1, INT64_MAX},
    {"--to-k", LAKE_BOTH, LAKE_I64, LAKE_OFF(to_k), 1, INT64_MAX},
    {"--threads", LAKE_BOTH, LAKE_INT, LAKE_OFF(threads), 1, 256},
    {"--json", LAKE_BOTH, LAKE_SWITCH, LAKE_OFF(is_json), 0, 0},
    {"--token", LAKE_BOTH, LAKE_TEXT, LAKE_OFF(token), 0, 0},
    {"--broker", LAKE_VERIFY, LAKE_TEXT, LAKE_OFF(broker), 0, 0},
    {"--to", LAKE_RESTORE, LAKE_TEXT, LAKE_OFF(to), 0, 0},
    {"--as", LAKE_RESTORE, LAKE_TEXT, LAKE_OFF(as), 0, 0},
    {"--state", LAKE_RESTORE, LAKE_TEXT, LAKE_OFF(state), 0, 0},
    {"--batch", LAKE_RESTORE, LAKE_INT, LAKE_OFF(batch), 1, 10000},
};
_Static_assert(ARRAY_LEN(lake_flag_defs) <= 32, "lake_opts.given holds a bit "
                                                "per flag");

static void lake_usage(FILE *f)
{
    fprintf(f,
            "usage: queen lake verify  [bucket flags] [--queue Q]... "
            "[--from-k K] [--to-k K]\n"
            "                          [--broker URL [--token T]] [--json] "
            "[--threads N]\n"
            "       queen lake restore [bucket flags] --queue Q --to URL "
            "[--as QUEUE]\n"
            "                          [--token T] [--state FILE] [--batch N] "
            "[--from-k K] [--to-k K]\n"
            "                          [--json] [--threads N]\n"
            "restore: --batch records per push (default 2000, at most "
            "4 MiB), --threads\n"
            "         connections (default twice the cores)\n"
            "verify:  --threads readers (default twice the cores, 8 to "
            "16)\n"
            "bucket flags: --endpoint URL --bucket B [--region R] "
            "[--prefix P] [--path-style]\n"
            "              [--tenant T] [--access-key K] [--secret-key S]\n"
            "              [--ca-file PEM]\n"
            "Unset flags fall back to QUEEN_S3_ENDPOINT, QUEEN_S3_BUCKET,\n"
            "QUEEN_S3_REGION, QUEEN_S3_PREFIX, QUEEN_S3_PATH_STYLE,\n"
            "QUEEN_S3_ACCESS_KEY, QUEEN_S3_SECRET_KEY and QUEEN_S3_CA_FILE.\n"
            "See docs/lake.md.\n"
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

/* The row of flag name, or NULL. */
static const struct lake_flag_def *lake_flag_def(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(lake_flag_defs); i++) {
        if (strcmp(name, lake_flag_defs[i].name) == 0) {
            return &lake_flag_defs[i];
        }
    }
    return NULL;
}

/* Whether argument a is one of the flags (its name before any '='). */
static bool lake_is_flag(const char *a, char *name, size_t cap)
{
    size_t nl = strcspn(a, "=");

    if (nl >= cap) {
        return false;
    }
    memcpy(name, a, nl);
    name[nl] = '\0';
    return lake_flag_def(name) != NULL || strcmp(name, "--help") == 0 ||
           strcmp(name, "-h") == 0;
}

/* d's target in o set from v (NULL: a switch given bare, which is on;
 * --switch=false turns it off, QUEEN_S3_PATH_STYLE's included). Returns 0,
 * or 2 after printing why. */
static int lake_flag_set(struct lake_opts *o, const struct lake_flag_def *d,
                         const char *v)
{
    void *at = (char *)o + d->off;
    uint32_t bit = 1u << (unsigned)(d - lake_flag_defs);
    int64_t n = 0;
    struct err err;

    /* A flag given twice is a mistake the last one would hide (which
     * bucket was meant?); only --queue takes several. The value is not
     * printed: it may be a secret. */
    if (d->type != LAKE_QUEUE && (o->given & bit) != 0) {
        fprintf(stderr, "queen lake: %s is given twice; it takes one value\n",
                d->name);
        return 2;
    }
    o->given |= bit;
    if (d->type == LAKE_SWITCH && v == NULL) {
        *(bool *)at = true;
    } else if (d->type == LAKE_SWITCH) {
        if (s3_parse_bool(d->name, v, (bool *)at, &err) != 0) {
            fprintf(stderr, "queen lake: %s\n", err.msg);
            return 2;
        }
    } else if (d->type == LAKE_TEXT) {
        *(const char **)at = v;
    } else if (d->type == LAKE_QUEUE) {
        o->queues = xrealloc(o->queues, (o->n_queues + 1) * sizeof(char *));
        o->queues[o->n_queues++] = xstrdup(v);
    } else if (!lake_int(v, &n) || n < d->lo || n > d->hi) {
        fprintf(stderr, "queen lake: %s %s is not %" PRId64 "..%" PRId64 "\n",
                d->name, v, d->lo, d->hi);
        return 2;
    } else if (d->type == LAKE_INT) {
        *(int *)at = (int)n;
    } else {
        *(int64_t *)at = n;
    }
    return 0;
}

/* Copies value (the setting `name`, a flag or its variable) into dst of
 * cap bytes. 0, or 2 (said why) when it does not fit: a value cut short
 * would sign, name or address something else. */
static int lake_copy(char *dst, size_t cap, const char *value, const char *name)
{
    size_t n = strlen(value);

    if (n >= cap) {
        fprintf(stderr, "queen lake: %s is %zu bytes long; at most %zu\n", name,
                n, cap - 1);
        return 2;
    }
    memcpy(dst, value, n + 1);
    return 0;
}

/* True when url names a user (and maybe a password) before its host. */
static bool lake_url_has_userinfo(const char *url)
{
    const char *host;

    if (url == NULL) {
        return false;
    }
    host = strstr(url, "://");
    host = host != NULL ? host + 3 : url;
    return memchr(host, '@', strcspn(host, "/?#")) != NULL;
}

/* True when url is http:// or https:// with a host, and no space or
 * control byte (which no broker's URL has: curl would refuse it on every
 * retry). */
static bool lake_url_is_http(const char *url)
{
    size_t at = strncasecmp(url, "http://", 7) == 0    ? 7
                : strncasecmp(url, "https://", 8) == 0 ? 8
                                                       : 0;

    for (const char *c = url; *c != '\0'; c++) {
        if ((unsigned char)*c <= 0x20 || *c == 0x7f) {
            return false;
        }
    }
    if (at == 0 || url[at] == '\0' || strchr("/?#:", url[at]) != NULL) {
        return false;
    }
    /* what curl would refuse on every retry: a port past 65535, an
     * unclosed IPv6 bracket, a bad host name */
    CURLU *u = curl_url();
    bool is_ok =
        u != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK;

    curl_url_cleanup(u);
    return is_ok;
}

/* --broker and --to, when given: an http(s) URL with a host, no user or
 * password, short enough for lake_http. 0, or 2 (said why). */
static int lake_finish_urls(const struct lake_opts *o)
{
    /* A broker's URL, with the longest route after it, fits lake_http's
     * url[2048]. */
    if ((o->broker != NULL && strlen(o->broker) > LAKE_URL_MAX) ||
        (o->to != NULL && strlen(o->to) > LAKE_URL_MAX)) {
        fprintf(stderr, "queen lake: a broker URL is %d bytes at most\n",
                LAKE_URL_MAX);
        return 2;
    }
    if ((o->broker != NULL && !lake_url_is_http(o->broker)) ||
        (o->to != NULL && !lake_url_is_http(o->to))) {
        fprintf(stderr,
                "queen lake: %s must be a broker's http:// or https:// URL "
                "with a host (http://host:port)\n",
                o->broker != NULL && !lake_url_is_http(o->broker) ? "--broker"
                                                                  : "--to");
        return 2;
    }
    if (lake_url_has_userinfo(o->broker) || lake_url_has_userinfo(o->to)) {
        /* It would be printed with any error about the broker. */
        fprintf(stderr,
                "queen lake: %s: a user or password in the URL is not "
                "taken; give the broker's token with --token\n",
                lake_url_has_userinfo(o->broker) ? "--broker" : "--to");
        return 2;
    }
    return 0;
}

/* The settings checked into o, for cmd. 0, or 2 (said why). */
static int lake_finish(struct lake_opts *o, unsigned cmd)
{
    const struct lake_raw *raw = &o->raw;
    const char *prefix = raw->prefix != NULL ? raw->prefix : "queen";
    struct err err;

    if (raw->endpoint == NULL || raw->bucket == NULL) {
        fprintf(stderr, "queen lake: --endpoint and --bucket are required "
                        "(or QUEEN_S3_ENDPOINT, QUEEN_S3_BUCKET)\n");
        return 2;
    }
    if (s3_endpoint_parse(&o->s3.ep, "--endpoint", raw->endpoint, "--prefix",
                          &err) != 0 ||
        s3_endpoint_set_bucket(&o->s3.ep, "--bucket", raw->bucket, "--prefix",
                               &err) != 0) {
        fprintf(stderr, "queen lake: %s\n", err.msg);
        return 2;
    }
    o->s3.ep.path_style = raw->path_style;
    if (raw->ca_file != NULL && access(raw->ca_file, R_OK) != 0) {
        fprintf(stderr,
                "queen lake: --ca-file %s: cannot read it (%s); it names a "
                "PEM file of the certificate authorities an https "
                "endpoint's certificate is checked against\n",
                raw->ca_file, strerror(errno));
        return 2;
    }
    /* The prefix without outer slashes, as the sink keeps it. */
    while (*prefix == '/') {
        prefix++;
    }
    if (lake_copy(o->s3.region, sizeof(o->s3.region),
                  raw->region != NULL ? raw->region : "us-east-1",
                  "--region") != 0 ||
        lake_copy(o->s3.access_key, sizeof(o->s3.access_key),
                  raw->ak != NULL ? raw->ak : "", "--access-key") != 0 ||
        lake_copy(o->s3.secret_key, sizeof(o->s3.secret_key),
                  raw->sk != NULL ? raw->sk : "", "--secret-key") != 0 ||
        lake_copy(o->tenant, sizeof(o->tenant),
                  raw->tenant != NULL ? raw->tenant : LAKE_DEFAULT_TENANT,
                  "--tenant") != 0 ||
        lake_copy(o->prefix, sizeof(o->prefix), prefix, "--prefix") != 0) {
        return 2;
    }
    for (size_t n = strlen(o->prefix); n > 0 && o->prefix[n - 1] == '/';) {
        o->prefix[--n] = '\0';
    }
    if (lake_finish_urls(o) != 0) {
        return 2;
    }
    if (cmd == LAKE_VERIFY && o->token != NULL && o->broker == NULL) {
        fprintf(stderr, "queen lake verify: --token is sent to --broker "
                        "only: give both or neither\n");
        return 2;
    }
    if (o->to_k != 0 && o->to_k < o->from_k) {
        fprintf(stderr, "queen lake: --to-k is below --from-k\n");
        return 2;
    }
    if (cmd == LAKE_RESTORE && (o->n_queues != 1 || o->to == NULL)) {
        fprintf(stderr, "queen lake restore: --queue Q (one) and --to URL "
                        "are required\n");
        return 2;
    }
    return 0;
}

/* --threads when not given. restore: twice the cores (connections, each
 * waiting on the broker half the time). verify: twice the cores, at least
 * 8 and at most 16: a reader waits on each GET (on RGW here 4 readers on
 * 2 cores left a core idle, 8 ran a 1 GB lake about 1.5 x faster), and
 * each holds its object (a few MB; the decoded text is in lake_wholes,
 * about one buffer per core), so 16 stay far under 256 MB. */
static int lake_default_threads(bool is_verify)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    long t = 2 * (n < 1 ? 1 : n > 32 ? 32 : n);

    if (is_verify) {
        t = t < 8 ? 8 : t > 16 ? 16 : t;
    }
    return (int)t;
}

/* argv[1] is "verify" or "restore". Returns 0, 2 after printing why on
 * stderr, or LAKE_HELP after printing the usage on stdout (--help). */
static int lake_parse(int argc, char **argv, struct lake_opts *o)
{
    unsigned cmd = strcmp(argv[1], "verify") == 0 ? LAKE_VERIFY : LAKE_RESTORE;
    const char *ps = lake_env("QUEEN_S3_PATH_STYLE");
    struct err err;

    memset(o, 0, sizeof(*o));
    o->raw = (struct lake_raw){lake_env("QUEEN_S3_ENDPOINT"),
                               lake_env("QUEEN_S3_BUCKET"),
                               lake_env("QUEEN_S3_REGION"),
                               lake_env("QUEEN_S3_PREFIX"),
                               lake_env("QUEEN_S3_ACCESS_KEY"),
                               lake_env("QUEEN_S3_SECRET_KEY"),
                               NULL,
                               false,
                               lake_env("QUEEN_S3_CA_FILE")};
    s3_config_defaults(&o->s3);
    o->from_k = 1;
    o->batch = LAKE_PUSH_ITEMS;
    if (ps != NULL && s3_parse_bool("QUEEN_S3_PATH_STYLE", ps,
                                    &o->raw.path_style, &err) != 0) {
        fprintf(stderr, "queen lake: %s\n", err.msg);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        const struct lake_flag_def *d;
        char name[64];
        char next[64];
        size_t nl = eq != NULL ? (size_t)(eq - a) : strlen(a);

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            lake_usage(stdout);
            return LAKE_HELP;
        }
        if (strncmp(a, "--", 2) != 0 || nl >= sizeof(name)) {
            fprintf(stderr, "queen lake: unexpected argument %s\n", a);
            return 2;
        }
        memcpy(name, a, nl);
        name[nl] = '\0';
        d = lake_flag_def(name);
        if (d == NULL) {
            fprintf(stderr, "queen lake: unknown flag %s\n", name);
            return 2;
        }
        if ((d->cmds & cmd) == 0) {
            fprintf(stderr, "queen lake: %s is not a flag of %s\n", name,
                    argv[1]);
            return 2;
        }
        if (d->type != LAKE_SWITCH && eq == NULL && i + 1 >= argc) {
            fprintf(stderr, "queen lake: %s needs a value\n", name);
            return 2;
        }
        if (d->type != LAKE_SWITCH && eq == NULL &&
            lake_is_flag(argv[i + 1], next, sizeof(next))) {
            /* "--queue --json": a forgotten value, not a queue so named
             * (only the flag's name is printed: its value may be a
             * secret) */
            fprintf(stderr,
                    "queen lake: %s needs a value, not the flag %s (write "
                    "%s=VALUE for a value that starts with --)\n",
                    name, next, name);
            return 2;
        }
        if (lake_flag_set(o, d,
                          eq != NULL               ? eq + 1
                          : d->type == LAKE_SWITCH ? NULL
                                                   : argv[++i]) != 0) {
            return 2;
        }
    }
    return lake_finish(o, cmd);
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

/* An endpoint that refuses the tool's first requests (or whose name does
 * not resolve, or that accepts the connection and stays silent for
 * LAKE_STALL_MS) is a wrong one: exit 2 with the reason at once, not after
 * about 12 s of retry warnings. Once the bucket answered, everything
 * transient (no connection, a stall, 5xx, 429) is retried as the sink
 * does. */
static void lake_bucket_open(struct lake_bucket *b, const struct lake_opts *o)
{
    struct s3_config cfg = o->s3;

    cfg.is_unreached_final = true;
    cfg.stall_timeout_ms = LAKE_STALL_MS;
    b->curl = s3_curl_new(o->raw.ca_file);
    b->t = s3_curl_transport(b->curl);
    b->c = s3_client_new(&cfg, &b->t, NULL);
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

/* A LIST run on its own thread while the caller does other work, its keys
 * kept until lake_bg_list_join: on RGW a LIST of a few dozen keys takes
 * tens of ms, and verify has three of them (manifests, checkpoints, data
 * objects), which would otherwise each stall every worker. The keys are
 * kept up to LAKE_BG_LIST_MAX bytes; past that they are dropped (is_over)
 * and the caller lists again in line, so memory stays bounded on a lake of
 * millions of objects. */
#define LAKE_BG_LIST_MAX ((size_t)32 << 20)

struct lake_bg_list {
    struct lake_bucket *b;
    char *prefix; /* owned */
    pthread_t th;
    char **keys;
    size_t n;
    size_t cap;
    size_t bytes;
    bool is_over;
    int rc;
    struct err err;
};

static int lake_bg_keep(void *arg, const char *key)
{
    struct lake_bg_list *l = arg;
    size_t len = strlen(key);

    if (l->is_over) {
        return 0;
    }
    if (l->bytes + len + sizeof(char *) > LAKE_BG_LIST_MAX) {
        l->is_over = true;
        return 0;
    }
    if (l->n == l->cap) {
        l->cap = l->cap == 0 ? 64 : 2 * l->cap;
        l->keys = xrealloc(l->keys, l->cap * sizeof(*l->keys));
    }
    l->keys[l->n++] = xstrdup(key);
    l->bytes += len + 1 + sizeof(char *);
    return 0;
}

static void *lake_bg_run(void *arg)
{
    struct lake_bg_list *l = arg;

    l->rc = lake_list(l->b, l->prefix, lake_bg_keep, l, &l->err);
    return NULL;
}

static void lake_bg_list_start(struct lake_bg_list *l, struct lake_bucket *b,
                               const char *prefix)
{
    memset(l, 0, sizeof(*l));
    l->b = b;
    l->prefix = xstrdup(prefix);
    if (pthread_create(&l->th, NULL, lake_bg_run, l) != 0) {
        abort(); /* out of threads: as out of memory */
    }
}

/* Wait for the list, then fn(arg, key) per key in order (listing again in
 * line when the keys did not fit). Returns 0 or the list's error. With fn
 * NULL the keys are dropped and err is left alone (the caller failed). */
static int lake_bg_list_join(struct lake_bg_list *l,
                             int (*fn)(void *arg, const char *key), void *arg,
                             struct err *err)
{
    int rc = 0;

    pthread_join(l->th, NULL);
    if (fn != NULL && l->rc != 0) {
        rc = l->rc;
        *err = l->err;
    } else if (fn != NULL && l->is_over) {
        rc = lake_list(l->b, l->prefix, fn, arg, err);
    }
    for (size_t i = 0; i < l->n; i++) {
        if (fn != NULL && rc == 0 && !l->is_over) {
            rc = fn(arg, l->keys[i]);
        }
        free(l->keys[i]);
    }
    free(l->keys);
    free(l->prefix);
    memset(l, 0, sizeof(*l));
    return rc;
}

/* ---- the broker over HTTP ----------------------------------------------- */

struct lake_http {
    CURL *h;
    struct buf ans;
    const char *base;
    int base_len; /* without trailing slashes: base + "/api/..." */
    const char *token;
    const char *tenant; /* sent as x-queen-tenant; NULL: the default */
};

static size_t lake_http_write(char *p, size_t size, size_t n, void *arg)
{
    struct lake_http *c = arg;
    struct err err;

    return buf_append(&c->ans, p, size * n, &err) == 0 ? size * n : 0;
}

/* The broker at base, for o's tenant: a tenant other than the default is
 * named in x-queen-tenant, so that verify reads that tenant's log and
 * restore pushes into that tenant's queue (with QUEEN_TENANCY_HEADER, or
 * a token bound to it; http-api.md section 1). */
/* url's length without its trailing slashes. */
static int lake_url_len(const char *url)
{
    size_t n = strlen(url);

    while (n > 0 && url[n - 1] == '/') {
        n--;
    }
    return (int)n;
}

static void lake_http_open(struct lake_http *c, const char *base,
                           const struct lake_opts *o)
{
    int n = lake_url_len(base); /* LAKE_URL_MAX at most (lake_finish) */

    c->h = curl_easy_init();
    buf_init(&c->ans, (size_t)1 << 30);
    c->base = base;
    c->base_len = n > 2048 ? 2048 : n; /* url[] holds no more */
    c->token = o->token;
    c->tenant = strcmp(o->tenant, LAKE_DEFAULT_TENANT) != 0 ? o->tenant : NULL;
}

static void lake_http_close(struct lake_http *c)
{
    if (c->h != NULL) {
        curl_easy_cleanup(c->h);
    }
    buf_free(&c->ans);
}

/* Why no answer came from url: curl's reason and its detail (which names
 * the host and port of a refused connection), and for a timeout whether a
 * connection was made at all. */
static void lake_http_failed(struct lake_http *c, const char *url, CURLcode rc,
                             const char *errbuf, struct err *err)
{
    curl_off_t connected = 0;
    long code = 0;

    if (rc != CURLE_OPERATION_TIMEDOUT) {
        err_set(err, ERR_IO, "%s: %s%s%s", url, curl_easy_strerror(rc),
                errbuf[0] != '\0' ? ": " : "", errbuf);
        return;
    }
    (void)curl_easy_getinfo(c->h, CURLINFO_CONNECT_TIME_T, &connected);
    (void)curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &code);
    if (connected == 0) {
        err_set(err, ERR_TIMEOUT, "%s: no connection within %ld ms", url,
                LAKE_CONNECT_MS);
    } else if (code == 0) {
        err_set(err, ERR_TIMEOUT, "%s: connected, but no answer came (%s)", url,
                errbuf[0] != '\0' ? errbuf : "timed out");
    } else {
        err_set(err, ERR_TIMEOUT, "%s: the answer stopped halfway (%s)", url,
                errbuf[0] != '\0' ? errbuf : "timed out");
    }
}

/* POST body to base+path; the answer in c->ans. Returns the HTTP status, or
 * 0 (err set) when no answer came. */
static long lake_http_post(struct lake_http *c, const char *path,
                           const char *body, size_t n, struct err *err)
{
    char url[2048];
    char *auth;
    char tenant_hdr[sizeof("x-queen-tenant: ") + LAKE_TENANT_MAX];
    struct curl_slist *hs = NULL;
    char errbuf[CURL_ERROR_SIZE] = "";
    long status = 0;
    CURLcode rc;

    buf_reset(&c->ans);
    snprintf(url, sizeof(url), "%.*s%s", c->base_len, c->base, path);
    hs = curl_slist_append(hs, "Content-Type: application/json");
    if (c->token != NULL) {
        size_t cap = sizeof("Authorization: Bearer ") + strlen(c->token);
        auth = xmalloc(cap);
        snprintf(auth, cap, "Authorization: Bearer %s", c->token);
        hs = curl_slist_append(hs, auth); /* copies it */
        free(auth);
    }
    if (c->tenant != NULL) {
        snprintf(tenant_hdr, sizeof(tenant_hdr), "x-queen-tenant: %s",
                 c->tenant);
        hs = curl_slist_append(hs, tenant_hdr);
    }
    curl_easy_reset(c->h);
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, lake_http_write);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, LAKE_CONNECT_MS);
    curl_easy_setopt(c->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c->h, CURLOPT_LOW_SPEED_TIME, LAKE_STALL_MS / 1000);
    curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->h, CURLOPT_PROTOCOLS_STR, "http,https");
    rc = curl_easy_perform(c->h);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
        if (status == 0) {
            err_set(err, ERR_IO, "%s: no HTTP answer", url);
        }
    } else {
        lake_http_failed(c, url, rc, errbuf, err);
    }
    curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(hs);
    return status;
}

static int64_t lake_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* lake_http_post until the answer is ok, another that is final (any
 * status but 429 and 5xx), or LAKE_BROKER_TRY_MS after the first try began (no
 * answer, 5xx, 429): a broker restarting or electing a leader is waited for. A
 * try that began in time may run on for up to LAKE_STALL_MS of silence, so a
 * silent broker is given up on after about 30 s, 40 at most. Returns the
 * last status, or 0 (err set) when no answer came. The calls are
 * idempotent (a push sent again is deduplicated by its transactionIds). */
static long lake_http_call(struct lake_http *c, const char *path,
                           const char *body, size_t n, long ok, struct err *err)
{
    int64_t start = lake_mono_ms();
    long st;

    for (int attempt = 1;; attempt++) {
        /* 200 ms more a try up to 1 s: tv_nsec must stay below 1e9
         * (nanosleep refuses 1 s there, at once, without sleeping) */
        long ms = 200L * (attempt < 5 ? attempt : 5);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

        st = lake_http_post(c, path, body, n, err);
        /* only no answer, 429 and 5xx are retried: any other status than
         * ok (a 200 where a push answers 201, a redirect) is not a queen
         * broker's answer, and asking again cannot change it */
        if (st == ok || (st != 0 && st != 429 && st < 500) ||
            lake_mono_ms() - start + ms >= LAKE_BROKER_TRY_MS) {
            return st;
        }
        nanosleep(&ts, NULL);
    }
}

/* An answer body for a reason: one line of at most LAKE_QUOTE_MAX bytes.
 * A JSON body (a queen broker's error) as compact JSON; any other (the
 * HTML error page of a server that is not queen) as a JSON string; either
 * cut to its first bytes with "..." after it, control bytes escaped and
 * bytes that are not UTF-8 as '?'. A body must never put its lines, nor
 * any length, into the one-line reason. */
#define LAKE_QUOTE_MAX      120
#define LAKE_QUOTE_JSON_MAX ((size_t)64 << 10) /* compacted to be shown */
struct lake_quoted {
    char s[LAKE_QUOTE_MAX + 8];
};

/* The bytes escaped by name (the last two inside a JSON string only). */
#define LAKE_ESC_FROM "\n\r\t\"\\"
#define LAKE_ESC_TO   "nrt\"\\"

/* p[0..n) (UTF-8) into q from q->s[at] on, escaped; the bytes of p taken. */
static size_t lake_quote_bytes(struct lake_quoted *q, size_t *at, const char *p,
                               size_t n, bool is_string)
{
    size_t i = 0;

    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        char esc[8];
        const char *named;
        int el;

        len = len < n - i ? len : n - i; /* p is UTF-8: c leads a sequence */
        named = c != 0 ? strchr(LAKE_ESC_FROM, c) : NULL;
        el = (int)len;
        memcpy(esc, p + i, len);
        if (named != NULL && (is_string || named - LAKE_ESC_FROM < 3)) {
            esc[0] = '\\';
            esc[1] = LAKE_ESC_TO[named - LAKE_ESC_FROM];
            el = 2;
        } else if (c < 0x20 || c == 0x7f) {
            el = snprintf(esc, sizeof(esc), "\\u%04x", c);
        }
        if (*at + (size_t)el > LAKE_QUOTE_MAX - 1) {
            break;
        }
        memcpy(q->s + *at, esc, (size_t)el);
        *at += (size_t)el;
        i += len;
    }
    return i;
}

static const char *lake_quote(struct lake_quoted *q, const char *p, size_t n)
{
    char clean[LAKE_QUOTE_MAX];
    struct buf json;
    struct err err;
    bool is_json;
    bool is_cut;
    size_t cn;
    size_t at = 0;

    buf_init(&json, LAKE_QUOTE_JSON_MAX);
    is_json = n > 0 && n <= LAKE_QUOTE_JSON_MAX &&
              json_validate(p, n, JSON_MAX_DEPTH_DEFAULT, &err) == 0 &&
              json_compact(&json, p, n, &err) == 0;
    if (is_json) {
        p = json.data;
        n = json.len;
    }
    cn = n > 0 ? json_utf8_quote(clean, p, n, sizeof(clean)) : 0;
    if (!is_json) {
        q->s[at++] = '"';
    }
    is_cut = lake_quote_bytes(q, &at, clean, cn, !is_json) < cn || cn < n;
    if (!is_json) {
        q->s[at++] = '"';
    }
    if (is_cut) {
        memcpy(q->s + at, "...", 3);
        at += 3;
    }
    q->s[at] = '\0';
    buf_free(&json);
    return q->s;
}

/* ---- reading one object's records --------------------------------------- */

enum lake_codec { LAKE_NONE, LAKE_ZSTD, LAKE_GZIP, LAKE_PARQUET };

/* What the objects of a window must be, from its manifest: their codec,
 * and for Parquet what their footers hold (lake/footer.h). */
struct lake_kind {
    enum lake_codec codec;
    struct lake_footer_want pq; /* LAKE_PARQUET only */
};

/* Called per record in stored order; nonzero stops the object. A Parquet
 * NULL payload has len 0. */
typedef int (*lake_rec_fn)(void *arg, const struct sink_record *r);

/* The decode buffers (lake_whole) of a pool's readers, shared: a reader
 * holds one only while it decodes and reads one object. Readers mostly
 * wait on their GETs, so about as many decode at once as there are cores,
 * and at most max buffers are ever made and first touched (a first touch
 * zeroes the pages: one buffer per reader, 16 of them, was 6% of verify's
 * CPU on a 1 GB lake). */
struct lake_wholes {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char **maps; /* the free mappings: n_free of them */
    int n_free;
    int n_made;
    int max;
};

static void lake_wholes_init(struct lake_wholes *s, int max)
{
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->maps = xcalloc((size_t)max, sizeof(*s->maps));
    s->n_free = 0;
    s->n_made = 0;
    s->max = max;
}

/* Every buffer must have been given back. */
static void lake_wholes_free(struct lake_wholes *s)
{
    ASSERT(s->n_free == s->n_made);
    for (int i = 0; i < s->n_free; i++) {
        munmap(s->maps[i], LAKE_WHOLE_MAP);
    }
    free(s->maps);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

/* What a reading thread keeps between objects, so that reading one does
 * not allocate (and fault in) its buffers afresh. */
struct lake_mem {
    struct buf body;    /* the object's stored bytes */
    struct buf carry;   /* a line cut by the end of a chunk */
    struct buf scratch; /* lake_line_parse's */
    char *whole;        /* a zstd object decoded in one call (lake_whole) */
    char *whole_map;    /* its mapping (NULL until first used) */
    /* whole's pool (NULL: whole is the reader's own, kept till the end) */
    struct lake_wholes *shared;
    char *chunk;     /* LAKE_CHUNK bytes of decoded text */
    ZSTD_DCtx *zstd; /* one per thread: its window is allocated once */
    struct lake_line_memo memo;
    uint64_t raw; /* decoded bytes so far */
};

static void lake_mem_init(struct lake_mem *m)
{
    buf_init(&m->body, LAKE_MAX_OBJECT);
    buf_init(&m->carry, BUF_UNLIMITED);
    buf_init(&m->scratch, BUF_UNLIMITED);
    m->whole = NULL;
    m->whole_map = NULL;
    m->shared = NULL;
    m->chunk = xmalloc(LAKE_CHUNK);
    m->zstd = ZSTD_createDCtx();
    if (m->zstd == NULL) {
        abort(); /* out of memory, as xmalloc */
    }
    memset(&m->memo, 0, sizeof(m->memo));
    m->raw = 0;
}

static void lake_mem_free(struct lake_mem *m)
{
    buf_free(&m->body);
    buf_free(&m->carry);
    buf_free(&m->scratch);
    if (m->whole_map != NULL && m->shared == NULL) {
        munmap(m->whole_map, LAKE_WHOLE_MAP);
    }
    free(m->chunk);
    ZSTD_freeDCtx(m->zstd);
}

/* Where in a mapping the 2 MiB-aligned buffer starts. */
static char *lake_whole_aligned(char *map)
{
    return map + (LAKE_HUGE - (uintptr_t)map % LAKE_HUGE) % LAKE_HUGE;
}

/* A mapping for lake_whole: LAKE_WHOLE_MAP bytes of address space, none
 * backed until written. NULL when it cannot be mapped. */
static char *lake_whole_map(void)
{
    void *p = mmap(NULL, LAKE_WHOLE_MAP, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

    if (p == MAP_FAILED) {
        return NULL;
    }
    (void)madvise(lake_whole_aligned(p), LAKE_WHOLE_MAX, MADV_HUGEPAGE);
    return p; /* madvise is a hint */
}

/* Take a buffer from m->shared into m, waiting while max are held. */
static void lake_whole_take(struct lake_mem *m)
{
    struct lake_wholes *s = m->shared;
    char *map = NULL;

    pthread_mutex_lock(&s->mu);
    while (s->n_free == 0 && s->n_made == s->max) {
        pthread_cond_wait(&s->cv, &s->mu);
    }
    if (s->n_free > 0) {
        map = s->maps[--s->n_free];
    } else {
        map = lake_whole_map();
        s->n_made += map != NULL;
    }
    pthread_mutex_unlock(&s->mu);
    m->whole_map = map;
}

/* Give m's shared buffer back (no-op for a reader's own). */
static void lake_whole_give(struct lake_mem *m)
{
    struct lake_wholes *s = m->shared;

    if (s == NULL || m->whole_map == NULL) {
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->maps[s->n_free++] = m->whole_map;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    m->whole_map = NULL;
    m->whole = NULL;
}

/* The buffer a zstd object is decoded into in one call: LAKE_WHOLE_MAX
 * bytes of address space, aligned to 2 MiB and asked for huge pages, so
 * that first touching it costs a fault per 2 MiB rather than per 4 KiB
 * (measured: faults were about 8% of verify's CPU). Only what is written
 * is backed. NULL when it cannot be mapped (the object is streamed). A
 * shared one is held until lake_whole_give. */
static char *lake_whole(struct lake_mem *m)
{
    if (m->shared != NULL && m->whole_map == NULL) {
        lake_whole_take(m);
    } else if (m->whole_map != NULL || m->whole != NULL) {
        return m->whole;
    } else {
        m->whole_map = lake_whole_map();
    }
    m->whole = m->whole_map == NULL ? NULL : lake_whole_aligned(m->whole_map);
    return m->whole;
}

/* Splits decoded text into lines and hands each record to fn. */
struct lake_reader {
    lake_rec_fn fn;
    void *arg;
    struct buf *carry;   /* a line cut by the end of a chunk */
    struct buf *scratch; /* lake_line_parse's */
    struct lake_mem *mem;
    char *chunk;
    uint64_t line_no;
    uint64_t raw; /* decoded bytes */
};

static int lake_lines(struct lake_reader *rd, const char *p, size_t n,
                      struct err *err)
{
    size_t at = 0;

    rd->raw += n;
    while (at < n) {
        const char *lf = memchr(p + at, '\n', n - at);
        struct slice line = {p + at, 0};
        struct sink_record r;
        int rc;

        size_t upto = lf != NULL ? (size_t)(lf - p) : n;

        if (rd->carry->len + (upto - at) > lake_line_max()) {
            return err_set(err, ERR_CORRUPT,
                           "line %" PRIu64 " runs past %zu bytes: longer than "
                           "any record a broker with QUEEN_MAX_BODY_BYTES=%zu "
                           "takes (set it as the broker's)",
                           rd->line_no + 1, lake_line_max(), lake_body_max);
        }
        if (lf == NULL) {
            return buf_append(rd->carry, p + at, n - at, err);
        }
        line.len = (size_t)(lf - line.ptr);
        if (rd->carry->len > 0) {
            if (buf_append(rd->carry, line.ptr, line.len, err) != 0) {
                return err->code;
            }
            line = buf_slice(rd->carry);
        }
        ++rd->line_no;
        if (lake_line_read(line.ptr, line.len, &r, rd->scratch, &rd->mem->memo,
                           err) != 0) {
            return err_wrap(err, "line %" PRIu64, rd->line_no);
        }
        rc = rd->fn(rd->arg, &r);
        buf_reset(rd->carry);
        if (rc != 0) {
            return rc;
        }
        at = (size_t)(lf - p) + 1;
    }
    return 0;
}

/* Decode body (the stored bytes) record by record, its footer checked
 * against its rows (lake/footer.h) before the first is handed on. Returns
 * 0, or ERR_CORRUPT with the reason, or what fn returned. *raw counts the
 * decoded bytes. */
static int lake_decode_parquet(struct lake_reader *rd, const char *body,
                               size_t n, const struct lake_footer_want *pq,
                               struct err *err)
{
    struct parquet_file f;
    int rc;

    memset(&f, 0, sizeof(f));
    rc = parquet_file_read_max(body, n, lake_parquet_max(n), &f, err);
    if (rc == 0) {
        rc = lake_footer_check(body, n, &f, pq, err);
    }
    for (size_t i = 0; rc == 0 && i < f.nrecs; i++) {
        struct sink_record r = {f.recs[i].partition, f.recs[i].offset,
                                f.recs[i].txn, f.recs[i].ts, f.recs[i].payload};

        rd->raw += r.partition.len + r.txn.len + r.payload.len + 16;
        rc = rd->fn(rd->arg, &r);
    }
    parquet_file_free(&f);
    return rc;
}

/* A body whose frames all tell their decoded size, small enough: decoded
 * in one call straight into mem->whole (no copy out of zstd's window).
 * *is_done false when it did not apply or did not decode (the caller
 * streams it, which names the damage as it always did); else what the
 * lines gave, which may be fn's own nonzero (a violation: the records
 * must not be read a second time). */
static int lake_zstd_whole(struct lake_reader *rd, const char *body, size_t n,
                           bool *is_done, struct err *err)
{
    unsigned long long size = 0;
    char *w;
    size_t got;
    int rc;

    *is_done = false;
    for (size_t at = 0; at < n;) {
        unsigned long long one = ZSTD_getFrameContentSize(body + at, n - at);
        size_t len = ZSTD_findFrameCompressedSize(body + at, n - at);

        if (one == ZSTD_CONTENTSIZE_ERROR || one == ZSTD_CONTENTSIZE_UNKNOWN ||
            ZSTD_isError(len) || one > LAKE_WHOLE_MAX - size) {
            return 1;
        }
        size += one;
        at += len;
    }
    if (size == 0 || (w = lake_whole(rd->mem)) == NULL) {
        return 1;
    }
    got = ZSTD_decompressDCtx(rd->mem->zstd, w, (size_t)size, body, n);
    if (ZSTD_isError(got) || got != size) {
        lake_whole_give(rd->mem);
        return 1;
    }
    *is_done = true;
    rc = lake_lines(rd, w, got, err);
    lake_whole_give(rd->mem);
    return rc;
}

static int lake_decode_zstd(struct lake_reader *rd, const char *body, size_t n,
                            struct err *err)
{
    ZSTD_DCtx *z = rd->mem->zstd;
    char *out = rd->chunk;
    ZSTD_inBuffer in = {body, n, 0};
    size_t left = n > 0; /* ZSTD_decompressStream: 0 once a frame ends */
    bool is_done = false;
    int rc = lake_zstd_whole(rd, body, n, &is_done, err);

    if (is_done) {
        return rc;
    }
    rc = 0;
    ZSTD_DCtx_reset(z, ZSTD_reset_session_only);
    while (rc == 0 && (in.pos < in.size || left != 0)) {
        ZSTD_outBuffer o = {out, LAKE_CHUNK, 0};

        left = ZSTD_decompressStream(z, &o, &in);
        if (ZSTD_isError(left)) {
            rc = err_set(err, ERR_CORRUPT, "does not decode as zstd: %s",
                         ZSTD_getErrorName(left));
            break;
        }
        rc = lake_lines(rd, out, o.pos, err);
        if (rc == 0 && in.pos == in.size && o.pos < o.size && left != 0) {
            rc =
                err_set(err, ERR_CORRUPT, "does not decode as zstd: truncated");
        }
    }
    return rc;
}

static int lake_decode_gzip(struct lake_reader *rd, const char *body, size_t n,
                            struct err *err)
{
    z_stream z;
    char *out = rd->chunk;
    int zr = Z_OK;
    int rc = 0;

    memset(&z, 0, sizeof(z));
    inflateInit2(&z, 16 + MAX_WBITS);
    z.next_in = (const Bytef *)body;
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
        rc = lake_lines(rd, out, LAKE_CHUNK - z.avail_out, err);
    }
    if (rc == 0 && z.avail_in != 0) {
        rc = err_set(err, ERR_CORRUPT, "bytes after the gzip member");
    }
    inflateEnd(&z);
    return rc;
}

/* Decode body (the stored bytes) record by record into fn(arg, record).
 * Returns 0, or ERR_CORRUPT with the reason, or what fn returned. *raw
 * grows by the decoded bytes. */
static int lake_decode(const struct lake_kind *kind, struct slice body,
                       lake_rec_fn fn, void *arg, struct lake_mem *mem,
                       struct err *err)
{
    enum lake_codec codec = kind->codec;
    struct lake_reader rd = {fn,  arg,        &mem->carry, &mem->scratch,
                             mem, mem->chunk, 0,           0};
    const char *p = body.ptr;
    size_t n = body.len;
    int rc;

    buf_reset(&mem->carry);
    if (codec == LAKE_PARQUET) {
        rc = lake_decode_parquet(&rd, p, n, &kind->pq, err);
    } else if (codec == LAKE_ZSTD) {
        rc = lake_decode_zstd(&rd, p, n, err);
    } else if (codec == LAKE_GZIP) {
        rc = lake_decode_gzip(&rd, p, n, err);
    } else {
        rc = lake_lines(&rd, p, n, err);
    }
    if (rc == 0 && mem->carry.len > 0) {
        rc = err_set(err, ERR_CORRUPT, "does not end with LF");
    }
    mem->raw += rd.raw;
    return rc;
}

/* desc: what the sink writes now; older: what an earlier version of it
 * wrote for the same format (its objects stay valid), or NULL. Parquet's
 * q1 had 1 MiB zstd pages and 20,000-row pages; q2 is the current writer. */
static bool lake_codec_of(struct slice format, struct slice compression,
                          enum lake_codec *c, const char **ext,
                          const char **desc, const char **older)
{
    static const struct {
        const char *f;
        const char *c;
        enum lake_codec codec;
        const char *ext;
        const char *desc;
        const char *older;
    } t[] = {
        {"jsonl", "zstd", LAKE_ZSTD, "jsonl.zst", "jsonl+zstd", NULL},
        {"jsonl", "gzip", LAKE_GZIP, "jsonl.gz", "jsonl+gzip", NULL},
        {"jsonl", "none", LAKE_NONE, "jsonl", "jsonl", NULL},
        {"parquet", "zstd", LAKE_PARQUET, "parquet", "parquet/q2 zstd",
         "parquet/q1 zstd"},
        {"parquet", "snappy", LAKE_PARQUET, "parquet", "parquet/q2 snappy",
         "parquet/q1 snappy"},
    };

    for (size_t i = 0; i < ARRAY_LEN(t); i++) {
        if (format.len == strlen(t[i].f) &&
            memcmp(format.ptr, t[i].f, format.len) == 0 &&
            compression.len == strlen(t[i].c) &&
            memcmp(compression.ptr, t[i].c, compression.len) == 0) {
            *c = t[i].codec;
            *ext = t[i].ext;
            *desc = t[i].desc;
            *older = t[i].older;
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
    bool is_fatal;  /* could not run: err */
    bool is_unread; /* its manifest is in the bucket but cannot be read */
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

/* A violation's text as it is printed: each control byte (C0, DEL, and
 * the C1 range U+0080..U+009F, which terminals obey as well) and each byte
 * that starts no valid UTF-8 sequence becomes '?', so that no text of a
 * damaged lake (a listed key, a manifest's field) cuts or forges a line
 * of the summary. Names are quoted by lake_show() before this. */
static void lake_plain(char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = json_utf8_len((const unsigned char *)s + i, n - i);

        if (len == 0 || c < 0x20 || c == 0x7f) {
            s[i++] = '?';
            continue;
        }
        if (len == 2 && c == 0xc2 && (unsigned char)s[i + 1] < 0xa0) {
            s[i] = '?';
            s[i + 1] = '?';
        }
        i += len;
    }
}

static void lake_violation(struct lake_window *w, const char *fmt, ...)
{
    va_list ap;
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    va_start(ap, fmt);
    (void)buf_vprintf(&b, &err, fmt, ap);
    va_end(ap);
    lake_plain(b.data, b.len);
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

/* A queue or partition name as a message or the human summary prints it:
 * as is, unless it is empty, holds a control byte (NUL included) or bytes
 * that are not UTF-8, starts with a quote or starts or ends with a space;
 * then as a JSON string ("p\u0000x", a byte that starts no UTF-8 sequence
 * as '?'), so that no name hides, cuts or forges part of a line, and a
 * message stays UTF-8 (it goes into the JSON document). A name longer than
 * any the broker takes (a damaged lake) is cut, with "...". */
#define LAKE_SHOWN_NAME 512
struct lake_shown {
    char s[6 * LAKE_SHOWN_NAME + 8];
};

static const char *lake_show(struct lake_shown *out, const char *p, size_t n)
{
    size_t take = n < LAKE_SHOWN_NAME ? n : LAKE_SHOWN_NAME;
    char clean[LAKE_SHOWN_NAME];
    size_t cn = take > 0 ? json_utf8_quote(clean, p, take, take) : 0;
    bool is_plain = cn > 0 && cn == take && memcmp(clean, p, take) == 0 &&
                    p[0] != '"' && p[0] != ' ' && p[take - 1] != ' ';
    size_t at = 0;

    for (size_t i = 0; i < cn && is_plain; i++) {
        unsigned char c = (unsigned char)clean[i];

        is_plain = c >= 0x20 && c != 0x7f;
    }
    if (is_plain) {
        // cppcheck-suppress uninitvar ; json_utf8_quote wrote clean[0..cn)
        memcpy(out->s, clean, cn);
        at = cn;
    } else {
        struct buf b;
        struct err err;

        buf_init(&b, sizeof(out->s));
        if (json_escape(&b, clean, cn, &err) == 0) {
            memcpy(out->s, b.data, b.len);
            at = b.len;
        }
        buf_free(&b);
    }
    if (take < n) {
        memcpy(out->s + at, "...", 3);
        at += 3;
    }
    out->s[at] = '\0';
    return out->s;
}

/* Frees the owned pointer at byte offset off inside each of the n items
 * (size bytes each) of the array v, then v: the arrays of windows and of
 * the fold whose items own one string (off 0 and size sizeof(char *) for
 * an array of strings). */
static void lake_free_items(void *v, size_t n, size_t size, size_t off)
{
    const char *p = v;

    for (size_t i = 0; i < n; i++) {
        void *owned;

        memcpy(&owned, p + i * size + off, sizeof(owned));
        free(owned);
    }
    free(v);
}

static void lake_window_clear(struct lake_window *w)
{
    lake_free_items(w->keys, w->n_keys, sizeof(*w->keys), 0);
    lake_free_items(w->runs, w->n_runs, sizeof(*w->runs),
                    offsetof(struct lake_run, partition));
    lake_free_items(w->pos, w->n_pos, sizeof(*w->pos),
                    offsetof(struct lake_pos, partition));
    lake_free_items(w->lost, w->n_lost, sizeof(*w->lost),
                    offsetof(struct lake_lost, partition));
    lake_free_items(w->violations, w->n_violations, sizeof(*w->violations), 0);
    memset(w, 0, sizeof(*w));
}

/* ---- the broker's log, as a worker reads it ----------------------------- */

struct lake_log {
    struct lake_http http;
    struct slice queue;
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
    const struct json_limits lim = {LAKE_FETCH_DEPTH, LAKE_FETCH_DEPTH, 0};
    struct buf body;
    struct jw w;
    long st;
    int e;
    int recs;
    struct lake_quoted q;

    lake_log_drop(l);
    buf_init(&body, BUF_UNLIMITED);
    jw_init(&w, &body);
    jw_obj_begin(&w);
    jw_key(&w, "entries");
    jw_arr_begin(&w);
    jw_obj_begin(&w);
    jw_key(&w, "queue");
    jw_str(&w, l->queue.ptr, l->queue.len);
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
    st = lake_http_call(&l->http, "/api/v1/fetch", body.data, body.len, 200,
                        err);
    buf_free(&body);
    if (st != 200) {
        return st == 0
                   ? err->code
                   : err_set(err, ERR_REMOTE,
                             "the broker's fetch answered %ld: %s", st,
                             lake_quote(&q, l->http.ans.data, l->http.ans.len));
    }
    if (json_parse(&l->doc, l->http.ans.data, l->http.ans.len, &lim, err) !=
        0) {
        return err_wrap(err, "the broker's fetch answer");
    }
    e = json_child(&l->doc, json_obj_get(&l->doc, 0, "entries"));
    if (e < 0) {
        return err_set(err, ERR_REMOTE,
                       "the broker's fetch answer is not queen's: %s",
                       lake_quote(&q, l->http.ans.data, l->http.ans.len));
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

/* The record before in an object: each must sort after it by (partition
 * bytes, offset), as the sink writes them (docs/lake.md §1). Verify and
 * restore both read objects through it. */
struct lake_order {
    struct buf prev_p;
    int64_t prev_o;
    bool has_prev;
};

/* NULL when r sorts after the record before, else what r is. */
static const char *lake_order_fault(const struct lake_order *o,
                                    const struct sink_record *r)
{
    if (!o->has_prev) {
        return NULL;
    }
    int cmp = slice_cmp(r->partition, buf_slice(&o->prev_p));

    if (cmp > 0 || (cmp == 0 && r->offset > o->prev_o)) {
        return NULL;
    }
    return cmp == 0 && r->offset == o->prev_o
               ? "in the lake twice"
               : "not sorted after the one before";
}

/* r is now the record before. 0, or err's code. */
static int lake_order_note(struct lake_order *o, const struct sink_record *r,
                           struct err *err)
{
    buf_reset(&o->prev_p);
    if (buf_append(&o->prev_p, r->partition.ptr, r->partition.len, err) != 0) {
        return err->code;
    }
    o->prev_o = r->offset;
    o->has_prev = true;
    return 0;
}

struct lake_obj_ctx {
    struct lake_window *w;
    const struct docs_manifest *m;
    const struct docs_object *obj;
    const char *key;
    size_t obj_index;
    bool is_parquet;
    struct lake_log *log; /* NULL without --broker */
    struct lake_order ord;
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

/* The log's payload (its JSON text) as the lake holds it: Parquet verbatim,
 * NULL for an empty one; JSONL with raw LF and CR as spaces. */
static bool lake_same_payload(bool is_parquet, struct slice log,
                              struct slice lake)
{
    if (is_parquet) {
        return lake.len == 0 ? log.len == 4 && memcmp(log.ptr, "null", 4) == 0
                             : slice_eq(log, lake);
    }
    if (log.len != lake.len) {
        return false;
    }
    for (size_t i = 0; i < log.len; i++) {
        char ch = log.ptr[i];

        if (ch == '\n' || ch == '\r') {
            ch = ' ';
        }
        if (ch != lake.ptr[i]) {
            return false;
        }
    }
    return true;
}

static int lake_check_log(struct lake_obj_ctx *c, const struct sink_record *r)
{
    struct lake_log *l = c->log;
    struct err err;
    int tok = -1;
    bool trimmed = false;
    struct lake_shown pn; /* the partition, as printed */
    struct lake_shown tn; /* the lake's transactionId */
    struct lake_shown ln; /* the log's */
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
                       "window %" PRId64 ": %s: record %s/%" PRId64
                       " is in the lake, not in the log",
                       c->w->k, c->key,
                       lake_show(&pn, r->partition.ptr, r->partition.len),
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
                       "window %" PRId64 ": %s: record %s/%" PRId64
                       " has ts %s, the broker's log says %s",
                       c->w->k, c->key,
                       lake_show(&pn, r->partition.ptr, r->partition.len),
                       r->offset, a, b);
        return 1;
    }
    buf_reset(&c->tmp);
    if (json_get_str(&l->doc, json_obj_get(&l->doc, tok, "transactionId"),
                     &c->tmp, &err) != 0 ||
        !slice_eq(buf_slice(&c->tmp), r->txn)) {
        lake_violation(c->w,
                       "window %" PRId64 ": %s: record %s/%" PRId64
                       " has transactionId %s, the broker's log says %s",
                       c->w->k, c->key,
                       lake_show(&pn, r->partition.ptr, r->partition.len),
                       r->offset, lake_show(&tn, r->txn.ptr, r->txn.len),
                       lake_show(&ln, c->tmp.data, c->tmp.len));
        return 1;
    }
    span = json_span(&l->doc, json_obj_get(&l->doc, tok, "payload"));
    if (!lake_same_payload(c->is_parquet, span, r->payload)) {
        lake_violation(c->w,
                       "window %" PRId64 ": %s: record %s/%" PRId64
                       " payload differs from the broker's log",
                       c->w->k, c->key,
                       lake_show(&pn, r->partition.ptr, r->partition.len),
                       r->offset);
        return 1;
    }
    return 0;
}

/* Order, window and (per-partition) entry of one record in its object. */
static int lake_rec_checks(struct lake_obj_ctx *c, const struct sink_record *r)
{
    struct lake_window *w = c->w;
    struct lake_shown pn;

    const char *fault = lake_order_fault(&c->ord, r);

    if (fault != NULL) {
        lake_violation(w,
                       "window %" PRId64 ": %s record %" PRIu64
                       ": record %s/%" PRId64 " is %s",
                       w->k, c->key, c->n,
                       lake_show(&pn, r->partition.ptr, r->partition.len),
                       r->offset, fault);
        return 1;
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
    return 0;
}

static int lake_on_record(void *arg, const struct sink_record *r)
{
    struct lake_obj_ctx *c = arg;
    struct lake_window *w = c->w;
    struct lake_run *run = w->n_runs > 0 ? &w->runs[w->n_runs - 1] : NULL;
    struct err err;
    struct lake_shown pn;

    c->n++;
    if (lake_rec_checks(c, r) != 0) {
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
                           "window %" PRId64 ": %s: partition %s: ts goes "
                           "backwards from offset %" PRId64 " to %" PRId64,
                           w->k, c->key,
                           lake_show(&pn, r->partition.ptr, r->partition.len),
                           run->last, r->offset);
            return 1;
        }
        run->last = r->offset;
        run->last_ts = r->ts;
    } else {
        if (!c->ord.has_prev ||
            !slice_eq(r->partition, buf_slice(&c->ord.prev_p))) {
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
    if (lake_order_note(&c->ord, r, &err) != 0) {
        return 1;
    }
    w->records++;
    return 0;
}

/* What a run reads: job.lq.queue is the queue (any bytes, NUL
 * included: a queue found by listing may hold one). */
struct lake_job {
    const struct lake_opts *o;
    struct lake_bucket *b;
    struct layout_queue lq;
};

/* The manifest's own shape (docs/design/formats.md §3). */
/* "queen-s3/<version> <desc>" (docs/design/formats.md §8). */
static bool lake_writer_is(struct slice w, const char *desc)
{
    const char *sp = memchr(w.ptr, ' ', w.len);

    return w.len >= 9 && memcmp(w.ptr, "queen-s3/", 9) == 0 && sp != NULL &&
           slice_eq((struct slice){sp + 1, w.len - (size_t)(sp + 1 - w.ptr)},
                    (struct slice){desc, strlen(desc)});
}

/* Whether positions v[0..n) are sorted by name bytes, one per partition,
 * as a checkpoint's and a manifest's are (docs/design/formats.md §3, §4):
 * the sink's engine keeps one position per partition, and its encoders
 * write them sorted. */
static bool lake_positions_sorted(const struct docs_position *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (slice_cmp(v[i - 1].name, v[i].name) >= 0) {
            return false;
        }
    }
    return true;
}

/* Compact JSON with the keys in order: what the sink's encoder makes of
 * what was read from raw. */
static bool lake_is_compact(const struct docs_manifest *m,
                            const struct buf *raw)
{
    struct buf again;
    struct err err;
    bool is_same;

    buf_init(&again, BUF_UNLIMITED);
    is_same = docs_manifest_encode(&again, m, &err) == 0 &&
              again.len == raw->len &&
              memcmp(again.data, raw->data, raw->len) == 0;
    buf_free(&again);
    return is_same;
}

/* lake_codec_of m's format and compression into kind, with what a Parquet
 * object's footer holds: the codec, m's queue and tenant. */
static bool lake_kind_of(const struct docs_manifest *m, struct lake_kind *kind,
                         const char **ext, const char **desc,
                         const char **older)
{
    kind->pq = (struct lake_footer_want){
        slice_eq(m->compression, (struct slice){"snappy", 6}) ? PARQUET_SNAPPY
                                                              : PARQUET_ZSTD,
        m->queue, m->tenant};
    return lake_codec_of(m->format, m->compression, &kind->codec, ext, desc,
                         older);
}

static bool lake_check_manifest(struct lake_window *w, const struct lake_job *j,
                                const struct docs_manifest *m,
                                const struct buf *raw, struct lake_kind *kind,
                                const char **ext)
{
    const char *desc = NULL;
    const char *older = NULL;
    struct lake_shown tn;
    struct lake_shown qn;
    bool is_ok = true;

    if (m->k != w->k || !slice_eq(m->queue, j->lq.queue) ||
        !slice_eq(m->tenant, j->lq.tenant)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: names tenant %s, queue %s, "
                       "k %" PRId64 ", not its own",
                       w->k, w->manifest_key,
                       lake_show(&tn, m->tenant.ptr, m->tenant.len),
                       lake_show(&qn, m->queue.ptr, m->queue.len), m->k);
        return false;
    }
    if (!lake_kind_of(m, kind, ext, &desc, &older)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: format %.*s with compression "
                       "%.*s is not one the sink writes",
                       w->k, w->manifest_key, (int)m->format.len, m->format.ptr,
                       (int)m->compression.len, m->compression.ptr);
        return false;
    }
    if (!lake_writer_is(m->writer, desc) &&
        (older == NULL || !lake_writer_is(m->writer, older))) {
        lake_violation(w,
                       "window %" PRId64 ": %s: writer %.*s is not "
                       "'queen-s3/<version> %s'",
                       w->k, w->manifest_key, (int)m->writer.len, m->writer.ptr,
                       desc);
        is_ok = false;
    }
    if (!slice_eq(m->layout, (struct slice){"merged", 6}) &&
        !slice_eq(m->layout, (struct slice){"per-partition", 13})) {
        lake_violation(w,
                       "window %" PRId64 ": %s: layout %.*s is not merged or "
                       "per-partition",
                       w->k, w->manifest_key, (int)m->layout.len,
                       m->layout.ptr);
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
    if (!lake_is_compact(m, raw)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: not compact JSON with the "
                       "keys in the order of the format",
                       w->k, w->manifest_key);
        is_ok = false;
    }
    if (!lake_positions_sorted(m->positions, m->n_positions)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: positions are not sorted by "
                       "partition, once each",
                       w->k, w->manifest_key);
        is_ok = false;
    }
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
/* One window being read by a worker. */
struct lake_wread {
    const struct lake_job *j;
    struct lake_window *w;
    struct lake_log *log;
    struct lake_mem *mem;
    struct docs_manifest m;
    bool is_decoded; /* m holds the manifest */
    struct lake_kind kind;
    const char *ext;
    bool is_pp;
    uint64_t sum_records;
    uint64_t sum_bytes;
    uint64_t partitions;
    int64_t min_ts;
    int64_t max_ts;
};

/* GET and decode the manifest into r->m (its slices in arena); keep its
 * lost ranges and positions. False when the window stops here. */
static bool lake_read_manifest(struct lake_wread *r, struct buf *raw,
                               struct buf *arena)
{
    struct lake_window *w = r->w;
    struct buf mkey;
    struct s3_object_info info;
    struct s3_status st;
    int rc;

    buf_init(&mkey, 4096);
    rc = layout_manifest_key(&mkey, &r->j->lq, w->k, &w->err);
    if (rc == 0) {
        snprintf(w->manifest_key, sizeof(w->manifest_key), "%s", mkey.data);
        rc = s3_client_get(r->j->b->c, mkey.data, raw, &info, &st, &w->err);
    }
    buf_free(&mkey);
    if (rc == ERR_TOO_BIG) {
        w->is_unread = true;
        lake_violation(w,
                       "window %" PRId64 ": %s: manifest is over the %zu MiB "
                       "a manifest may hold",
                       w->k, w->manifest_key, LAKE_MANIFEST_MAX >> 20);
        return false;
    }
    if (rc != 0) {
        w->is_fatal = true;
        return false;
    }
    if (!info.found) {
        lake_violation(w,
                       "window %" PRId64 ": %s: manifest is not in the "
                       "bucket",
                       w->k, w->manifest_key);
        return false;
    }
    if (docs_manifest_decode(raw->data, raw->len, &r->m, arena, &w->err) != 0) {
        w->is_unread = true;
        lake_violation(w, "window %" PRId64 ": %s: %s", w->k, w->manifest_key,
                       w->err.msg);
        return false;
    }
    r->is_decoded = true;
    w->t_start = r->m.t_start;
    w->t_end = r->m.t_end;
    for (size_t i = 0; i < r->m.n_lost; i++) {
        const struct docs_lost *l = &r->m.lost[i];

        if (l->from < 0 || l->to < l->from) {
            struct lake_shown pn;

            lake_violation(w,
                           "window %" PRId64 ": %s: lost range %s %" PRId64
                           "..%" PRId64 " is not a range of offsets",
                           w->k, w->manifest_key,
                           lake_show(&pn, l->partition.ptr, l->partition.len),
                           l->from, l->to);
            return false;
        }
        w->lost = xrealloc(w->lost, (w->n_lost + 1) * sizeof(*w->lost));
        w->lost[w->n_lost++] =
            (struct lake_lost){lake_dup(l->partition.ptr, l->partition.len),
                               l->partition.len, l->from, l->to, w->k};
    }
    for (size_t i = 0; r->m.has_positions && i < r->m.n_positions; i++) {
        const struct docs_position *p = &r->m.positions[i];

        w->pos = xrealloc(w->pos, (w->n_pos + 1) * sizeof(*w->pos));
        w->pos[w->n_pos++] = (struct lake_pos){
            lake_dup(p->name.ptr, p->name.len), p->name.len, p->offset};
    }
    return true;
}

/* The object entry itself: fields for its layout, one per partition, its
 * key derived. False (a violation) when not. */
static bool lake_check_entry(struct lake_wread *r, size_t i)
{
    struct lake_window *w = r->w;
    const struct docs_object *obj = &r->m.objects[i];
    struct lake_shown pn;

    if (obj->has_partition != r->is_pp) {
        lake_violation(w,
                       "window %" PRId64 ": %s: partition/firstOffset/"
                       "lastOffset must %sappear in %.*s objects",
                       w->k, w->manifest_key, r->is_pp ? "" : "not ",
                       (int)r->m.layout.len, r->m.layout.ptr);
        return false;
    }
    for (size_t q = 0; r->is_pp && q < i; q++) {
        if (slice_eq(r->m.objects[q].partition, obj->partition)) {
            lake_violation(
                w,
                "window %" PRId64 ": %s: more than one object "
                "for partition %s in one window",
                w->k, w->manifest_key,
                lake_show(&pn, obj->partition.ptr, obj->partition.len));
            return false;
        }
    }
    if (!lake_key_is(r->j, &r->m, obj, r->ext, r->m.has_ts ? r->m.min_ts : 0)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: object key %s is not the "
                       "key derived from (tenant, queue, k, bounds)",
                       w->k, w->manifest_key, w->keys[i]);
        return false;
    }
    return true;
}

/* GET object i and check its bytes and sha256. */
static bool lake_get_object(struct lake_wread *r, size_t i)
{
    struct lake_window *w = r->w;
    const struct docs_object *obj = &r->m.objects[i];
    struct s3_object_info info;
    struct s3_status st;
    uint8_t sum[32];
    char hex[65];

    if (s3_client_get(r->j->b->c, w->keys[i], &r->mem->body, &info, &st,
                      &w->err) != 0) {
        w->is_fatal = true;
        return false;
    }
    if (!info.found) {
        lake_violation(w,
                       "window %" PRId64 ": %s: named by the manifest, "
                       "not in the bucket",
                       w->k, w->keys[i]);
        return false;
    }
    if (r->mem->body.len != obj->bytes) {
        lake_violation(w,
                       "window %" PRId64 ": %s: %zu bytes, the manifest "
                       "says %" PRIu64,
                       w->k, w->keys[i], r->mem->body.len, obj->bytes);
        return false;
    }
    sha256(r->mem->body.data, r->mem->body.len, sum);
    hex_lower(sum, 32, hex);
    if (memcmp(hex, obj->sha256, 64) != 0) {
        lake_violation(w,
                       "window %" PRId64 ": %s: sha256 differs from the "
                       "manifest's",
                       w->k, w->keys[i]);
        return false;
    }
    w->bytes += r->mem->body.len;
    return true;
}

/* Whether offsets a..b of partition p are lost in this window. */
static bool lake_window_lost(const struct docs_manifest *m, struct slice p,
                             int64_t a, int64_t b)
{
    for (size_t q = 0; a <= b && q < m->n_lost; q++) {
        if (slice_eq(m->lost[q].partition, p) && m->lost[q].from <= a &&
            b <= m->lost[q].to) {
            return true;
        }
    }
    return a > b;
}

/* A per-partition object's head or tail it lacks must be lost here. */
static bool lake_check_edges(struct lake_wread *r, size_t i, size_t run0)
{
    const struct docs_object *obj = &r->m.objects[i];
    int64_t lo = r->w->runs[run0].first;
    int64_t hi = r->w->runs[r->w->n_runs - 1].last;

    if (lake_window_lost(&r->m, obj->partition, obj->first_offset, lo - 1) &&
        lake_window_lost(&r->m, obj->partition, hi + 1, obj->last_offset)) {
        return true;
    }
    lake_violation(r->w,
                   "window %" PRId64 ": %s: holds other partitions or "
                   "offsets than its manifest entry",
                   r->w->k, r->w->keys[i]);
    return false;
}

/* Read object i of the window; false when the window stops here. */
static bool lake_read_object(struct lake_wread *r, size_t i)
{
    struct lake_window *w = r->w;
    const struct docs_object *obj = &r->m.objects[i];
    struct lake_obj_ctx c;
    struct err err;
    size_t before = w->n_violations;
    size_t run0 = w->n_runs;

    w->keys = xrealloc(w->keys, (w->n_keys + 1) * sizeof(char *));
    w->keys[w->n_keys++] = lake_dup(obj->key.ptr, obj->key.len);
    if (!lake_check_entry(r, i) || !lake_get_object(r, i)) {
        return false;
    }
    memset(&c, 0, sizeof(c));
    c.w = w;
    c.m = &r->m;
    c.obj = obj;
    c.key = w->keys[i];
    c.obj_index = i;
    c.is_parquet = r->kind.codec == LAKE_PARQUET;
    c.log = r->log;
    buf_init(&c.ord.prev_p, BUF_UNLIMITED);
    buf_init(&c.tmp, BUF_UNLIMITED);
    r->mem->raw = 0;
    if (lake_decode(&r->kind, buf_slice(&r->mem->body), lake_on_record, &c,
                    r->mem, &err) != 0 &&
        w->n_violations == before && !w->is_fatal) {
        lake_violation(w, "window %" PRId64 ": %s: %s", w->k, w->keys[i],
                       err.msg);
    }
    w->raw += r->mem->raw;
    buf_free(&c.ord.prev_p);
    buf_free(&c.tmp);
    if (w->n_violations > before || w->is_fatal) {
        return false;
    }
    if (c.n != obj->records) {
        lake_violation(w,
                       "window %" PRId64 ": %s: %" PRIu64 " records, the "
                       "manifest says %" PRIu64,
                       w->k, w->keys[i], c.n, obj->records);
        return false;
    }
    if (r->is_pp && c.n > 0 && !lake_check_edges(r, i, run0)) {
        return false;
    }
    r->sum_records += obj->records;
    r->sum_bytes += obj->bytes;
    r->partitions += c.partitions;
    if (c.n > 0) {
        r->min_ts = c.min_ts < r->min_ts ? c.min_ts : r->min_ts;
        r->max_ts = c.max_ts > r->max_ts ? c.max_ts : r->max_ts;
    }
    return true;
}

/* The manifest's sums and positions against what its objects hold. */
static void lake_check_sums(struct lake_wread *r)
{
    struct lake_window *w = r->w;
    const struct docs_manifest *m = &r->m;

    if (r->sum_records != m->records || r->sum_bytes != m->bytes) {
        lake_violation(
            w,
            "window %" PRId64 ": %s: records/bytes %" PRIu64 "/%" PRIu64
            " are not the sums over its objects (%" PRIu64 "/%" PRIu64 ")",
            w->k, w->manifest_key, m->records, m->bytes, r->sum_records,
            r->sum_bytes);
    } else if (r->partitions != m->partitions) {
        lake_violation(w,
                       "window %" PRId64 ": %s: partitions %" PRIu64
                       ", the objects hold %" PRIu64,
                       w->k, w->manifest_key, m->partitions, r->partitions);
    } else if (m->records > 0 &&
               (m->min_ts != r->min_ts || m->max_ts != r->max_ts)) {
        lake_violation(w,
                       "window %" PRId64 ": %s: minTs/maxTs %" PRId64
                       "/%" PRId64 ", the objects hold %" PRId64 "/%" PRId64,
                       w->k, w->manifest_key, m->min_ts, m->max_ts, r->min_ts,
                       r->max_ts);
    }
    for (size_t i = 0; m->has_positions && i < w->n_runs; i++) {
        const struct lake_run *run = &w->runs[i];
        bool above = false;

        for (size_t q = 0; q < w->n_pos; q++) {
            if (w->pos[q].plen == run->plen &&
                memcmp(w->pos[q].partition, run->partition, run->plen) == 0) {
                above = w->pos[q].offset > run->last;
            }
        }
        if (!above) {
            struct lake_shown pn;

            lake_violation(
                w,
                "window %" PRId64 ": %s: partition %s goes on "
                "at a position not above its records (up to %" PRId64 ")",
                w->k, w->manifest_key,
                lake_show(&pn, run->partition, run->plen), run->last);
            break;
        }
    }
}

/* Read and check window w->k. Sets w->is_fatal when it could not. */
static void lake_read_window(const struct lake_job *j, struct lake_window *w,
                             struct lake_log *log, struct lake_mem *mem)
{
    struct lake_wread r;
    struct buf raw;
    struct buf arena;
    bool is_read;
    bool is_ok;

    memset(&r, 0, sizeof(r));
    r.j = j;
    r.w = w;
    r.log = log;
    r.min_ts = INT64_MAX;
    r.max_ts = INT64_MIN;
    buf_init(&raw, LAKE_MANIFEST_MAX);
    buf_init(&arena, BUF_UNLIMITED);
    r.mem = mem;
    is_read = lake_read_manifest(&r, &raw, &arena);
    is_ok = is_read && lake_check_manifest(w, j, &r.m, &raw, &r.kind, &r.ext);
    r.is_pp = is_ok && !(r.m.layout.len == 6 &&
                         memcmp(r.m.layout.ptr, "merged", 6) == 0);
    if (is_ok && !r.is_pp && r.m.n_objects > 1) {
        lake_violation(w,
                       "window %" PRId64 ": %s: a merged window names "
                       "exactly one object, not %zu",
                       w->k, w->manifest_key, r.m.n_objects);
        is_ok = false;
    }
    for (size_t i = 0; is_ok && i < r.m.n_objects; i++) {
        is_ok = lake_read_object(&r, i);
    }
    if (is_ok) {
        lake_check_sums(&r);
    }
    /* The objects a violation left unread are still named by the manifest:
     * not orphans (w->keys[i] is object i's key). */
    for (size_t i = w->n_keys; r.is_decoded && i < r.m.n_objects; i++) {
        w->keys = xrealloc(w->keys, (w->n_keys + 1) * sizeof(char *));
        w->keys[w->n_keys++] =
            lake_dup(r.m.objects[i].key.ptr, r.m.objects[i].key.len);
    }
    buf_free(&raw);
    buf_free(&arena);
}

/* ---- the pool ----------------------------------------------------------- */

#define LAKE_AHEAD_PER_THREAD 2

struct lake_pool {
    const struct lake_job *job;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const int64_t *ks; /* the windows to read: those listed, ascending */
    size_t next_i;     /* ks[next_i] is the next window to hand out */
    size_t n;          /* of ks */
    size_t folded;     /* ks[i] below this are folded */
    size_t ahead;      /* slots */
    struct lake_window *slots;
    struct lake_wholes wholes;
    bool is_stopping;
};

static void *lake_worker(void *arg)
{
    struct lake_pool *p = arg;
    struct lake_log log;
    struct lake_mem mem;
    bool has_log = p->job->o->broker != NULL;

    memset(&log, 0, sizeof(log));
    lake_mem_init(&mem);
    mem.shared = &p->wholes;
    if (has_log) {
        lake_http_open(&log.http, p->job->o->broker, p->job->o);
        buf_init(&log.part, BUF_UNLIMITED);
        log.queue = p->job->lq.queue;
    }
    for (;;) {
        size_t i;
        int64_t k;
        struct lake_window w;

        pthread_mutex_lock(&p->mu);
        while (!p->is_stopping && p->next_i < p->n &&
               p->next_i >= p->folded + p->ahead) {
            pthread_cond_wait(&p->cv, &p->mu);
        }
        if (p->is_stopping || p->next_i >= p->n) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        i = p->next_i++;
        k = p->ks[i];
        pthread_mutex_unlock(&p->mu);
        memset(&w, 0, sizeof(w));
        w.k = k;
        lake_read_window(p->job, &w, has_log ? &log : NULL, &mem);
        w.is_done = true;
        pthread_mutex_lock(&p->mu);
        p->slots[i % p->ahead] = w;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    if (has_log) {
        lake_log_drop(&log);
        lake_http_close(&log.http);
        buf_free(&log.part);
    }
    lake_mem_free(&mem);
    return NULL;
}

/* ---- the fold: one state per partition ---------------------------------- */

struct lake_part {
    char *name; /* owned */
    size_t len;
    char *shown; /* owned: the name as messages print it (lake_show) */
    bool has_records;
    int64_t first;
    int64_t top;
    int64_t top_ts;
    int64_t top_k;
    bool has_pos;
    int64_t pos;
    int64_t pos_k;
    uint64_t records;
    bool has_cp;   /* the last checkpoint folded names it */
    int64_t cp_at; /* its position there (-1: none) */
    int64_t cp_k;
    bool is_log_only; /* named by the broker's log, not by the lake */
};

struct lake_gap {
    struct lake_part *part;
    int64_t from;
    int64_t to;
    int64_t k;    /* the window after the gap (or whose position names it) */
    char *where;  /* owned: the key or manifest */
    bool is_sure; /* a gap from the bucket alone (not only with the log) */
};

struct lake_fold {
    struct lake_part **parts; /* owned, each */
    size_t n_parts;
    size_t n_log_only;    /* of them, is_log_only */
    struct hashtab index; /* -> struct lake_part, rebuilt on growth */
    struct lake_gap *gaps;
    size_t n_gaps;
    struct lake_lost *lost;
    size_t n_lost;
    char cp_root[1024]; /* ".../checkpoint/" */
    int64_t *cps;       /* k of every checkpoint, ascending */
    size_t n_cps;
    uint64_t *named; /* FNV of every named key, sorted at the end */
    size_t n_named;
    int64_t *bad_ks; /* the windows with a violation (not folded), ascending */
    size_t n_bad_ks;
    int64_t *unread_ks; /* of them, those whose manifest could not be read:
                           their objects and checkpoint are not looked at */
    size_t n_unread_ks;
    int64_t *t_ends;   /* tEnd of the i-th window read (an unread manifest's:
                          the one before's) */
    int64_t *t_end_ks; /* k of the i-th window read */
    int64_t *missing;  /* lo, hi pairs: the listing has no manifest k in
                          lo..hi, ascending (lake_count) */
    size_t n_missing;
    int64_t last_k; /* of the last window read */
    char **violations;
    size_t n_violations;
    uint64_t violation_count;
    int64_t windows;
    int64_t first_k;
    int64_t t_start; /* of the first window read */
    int64_t t_end;   /* of the last */
    bool has_prev;
    bool is_prev_unread; /* the window before had no readable manifest */
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

static struct lake_part *lake_part_of(struct lake_fold *f, const char *p,
                                      size_t n)
{
    struct lake_part_key key = {p, n};
    uint64_t h = hashtab_hash(p, n);
    struct lake_part *hit = hashtab_find(&f->index, h, lake_part_is, &key);

    if (hit != NULL) {
        return hit;
    }
    hit = xcalloc(1, sizeof(*hit));
    hit->name = lake_dup(p, n);
    hit->len = n;
    {
        struct lake_shown shown;

        hit->shown = xstrdup(lake_show(&shown, p, n));
    }
    f->parts =
        xrealloc(f->parts, (f->n_parts + 1) * sizeof(struct lake_part *));
    f->parts[f->n_parts++] = hit;
    if (f->index.cap < 2 * f->n_parts + 2) {
        hashtab_reset(&f->index, f->index.cap == 0 ? 64 : f->index.cap * 2);
        for (size_t i = 0; i < f->n_parts; i++) {
            hashtab_insert(&f->index,
                           hashtab_hash(f->parts[i]->name, f->parts[i]->len),
                           f->parts[i]);
        }
    } else {
        hashtab_insert(&f->index, h, hit);
    }
    return hit;
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
    lake_plain(b.data, b.len);
    f->violations =
        xrealloc(f->violations, (f->n_violations + 1) * sizeof(char *));
    f->violations[f->n_violations++] = buf_steal(&b, NULL);
}

/* Whether a window lo < k < hi had a violation: its records were not
 * folded, so the offsets a partition misses across it are that window's
 * own violation, not a gap of their own. */
static bool lake_bad_between(const struct lake_fold *f, int64_t lo, int64_t hi)
{
    size_t a = 0;
    size_t b = f->n_bad_ks;

    while (a < b) { /* the first bad k above lo */
        size_t mid = a + (b - a) / 2;

        if (f->bad_ks[mid] <= lo) {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    if (a < f->n_bad_ks && f->bad_ks[a] < hi) {
        return true;
    }
    /* a window with no manifest is a violation of its own too */
    for (size_t i = 0; i < f->n_missing; i++) {
        if (f->missing[2 * i] < hi && f->missing[2 * i + 1] > lo) {
            return true;
        }
    }
    return false;
}

/* Where a partition's state was last told of: the window of its top
 * record, else the one before the first read. */
static int64_t lake_part_k(const struct lake_fold *f, const struct lake_part *p)
{
    return p->has_records ? p->top_k : f->first_k - 1;
}

/* Keeps gap g (its where copied) unless a bad window lies between. */
static void lake_add_gap(struct lake_fold *f, struct lake_gap g)
{
    if (lake_bad_between(f, lake_part_k(f, g.part), g.k)) {
        return;
    }
    g.where = xstrdup(g.where);
    f->gaps = xrealloc(f->gaps, (f->n_gaps + 1) * sizeof(*f->gaps));
    f->gaps[f->n_gaps++] = g;
}

/* One run of a window into its partition's state, in k order. */
static void lake_fold_run(struct lake_fold *f, const struct lake_window *w,
                          const struct lake_run *r, const struct lake_opts *o)
{
    struct lake_part *p = lake_part_of(f, r->partition, r->plen);

    if (p->has_cp && w->k > p->cp_k && r->first < p->cp_at) {
        lake_fold_violation(f,
                            "window %" PRId64 ": %s%010" PRId64
                            ".json.zst: positions do not match the "
                            "manifests: %s is at offset %" PRId64
                            ", but offset %" PRId64 " is in window %" PRId64
                            " (%s)",
                            p->cp_k, f->cp_root, p->cp_k, p->shown, p->cp_at,
                            r->first, w->k, w->keys[r->obj]);
        p->has_cp = false;
    }
    if (p->has_records && r->first <= p->top) {
        lake_fold_violation(f,
                            "window %" PRId64 ": %s: record %s/%" PRId64
                            " is in the lake twice (already in window "
                            "%" PRId64 " or before)",
                            w->k, w->keys[r->obj], p->shown, r->first,
                            p->top_k);
        /* the run's records above the ones seen are in the lake: the
         * offsets after the repeated one are not missing as well */
        if (r->last > p->top) {
            p->records += (uint64_t)(r->last - p->top);
            p->top = r->last;
            p->top_ts = r->last_ts;
            p->top_k = w->k;
        }
        return;
    }
    if (p->has_records && r->first_ts < p->top_ts) {
        lake_fold_violation(f,
                            "window %" PRId64 ": %s: partition %s: ts goes "
                            "backwards from offset %" PRId64 " to %" PRId64,
                            w->k, w->keys[r->obj], p->shown, p->top, r->first);
    }
    /* Below a partition's first record: the bucket does not say where the
     * sink started it (`latest`, or `earliest` above a log start that
     * retention had already raised), so only the log can tell which of
     * those offsets were stamped inside the windows read (--broker). */
    if (!p->has_records && r->first > 0 && o->broker != NULL) {
        lake_add_gap(f, (struct lake_gap){p, 0, r->first - 1, w->k,
                                          w->keys[r->obj], false});
    } else if (p->has_records && r->first > p->top + 1) {
        lake_add_gap(f, (struct lake_gap){p, p->top + 1, r->first - 1, w->k,
                                          w->keys[r->obj], true});
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

/* Window k starts where k - 1 ended, or on a later boundary of the hour
 * (or the day, one of them): the engine steps over an empty stretch of an
 * aligned queue without a window (docs/design/window.md, "step over the
 * empty stretch"), so a queue idle across hh:00 starts its next window
 * there.
 * No lake record can lie in such a gap (each record is inside its own
 * window); --broker names a record of the log that does. */
static bool lake_windows_meet(int64_t prev_end, int64_t t_start)
{
    int64_t hour = layout_align_unit(LAYOUT_ALIGN_HOUR);

    return t_start == prev_end || (t_start > prev_end && t_start % hour == 0);
}

/* A window with a violation: noted, its records not folded. */
static void lake_fold_bad(struct lake_fold *f, const struct lake_window *w)
{
    if (w->is_unread) {
        f->unread_ks =
            xrealloc(f->unread_ks, (f->n_unread_ks + 1) * sizeof(int64_t));
        f->unread_ks[f->n_unread_ks++] = w->k;
    }
    /* its runs are not to be trusted, but the partitions they name are the
     * lake's (not "only in the log") */
    f->bad_ks = xrealloc(f->bad_ks, (f->n_bad_ks + 1) * sizeof(int64_t));
    f->bad_ks[f->n_bad_ks++] = w->k;
    for (size_t i = 0; i < w->n_runs; i++) {
        (void)lake_part_of(f, w->runs[i].partition, w->runs[i].plen);
    }
}

static void lake_fold_window(struct lake_fold *f, struct lake_window *w,
                             const struct lake_opts *o)
{
    f->t_ends = xrealloc(f->t_ends, (size_t)(f->windows + 1) * sizeof(int64_t));
    f->t_end_ks =
        xrealloc(f->t_end_ks, (size_t)(f->windows + 1) * sizeof(int64_t));
    f->t_ends[f->windows] = w->t_end != 0    ? w->t_end
                            : f->windows > 0 ? f->t_ends[f->windows - 1]
                                             : INT64_MIN;
    f->t_end_ks[f->windows] = w->k;
    f->windows++;
    /* after manifests the listing lacks (their own violation), the next
     * window is not said to miss a tEnd none gave */
    if (w->k != f->last_k + 1) {
        f->is_prev_unread = true;
    }
    f->last_k = w->k;
    if (f->has_prev && !f->is_prev_unread &&
        !lake_windows_meet(f->prev_end, w->t_start) && w->t_end != 0) {
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
    /* After an unreadable manifest (its own violation) the next window is
     * not said to miss the tEnd that one never gave. */
    f->is_prev_unread = w->t_end == 0;
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
        lake_fold_bad(f, w);
        return;
    }
    for (size_t i = 0; i < w->n_runs; i++) {
        lake_fold_run(f, w, &w->runs[i], o);
    }
    for (size_t i = 0; i < w->n_pos; i++) {
        struct lake_part *p =
            lake_part_of(f, w->pos[i].partition, w->pos[i].plen);

        p->has_pos = true;
        p->pos = w->pos[i].offset;
        p->pos_k = w->k;
    }
}

static bool lake_lost_is(const struct lake_lost *l, const struct lake_part *p)
{
    return l->plen == p->len && memcmp(l->partition, p->name, p->len) == 0;
}

/* The first run *at..*end of offsets of p in *at..to that no lost range
 * covers: true, or false when the lost ranges cover the rest. */
static bool lake_unlost_next(const struct lake_fold *f,
                             const struct lake_part *p, int64_t *at, int64_t to,
                             int64_t *end)
{
    bool moved = true;

    while (*at <= to && moved) {
        moved = false;
        for (size_t i = 0; i < f->n_lost; i++) {
            const struct lake_lost *l = &f->lost[i];

            if (lake_lost_is(l, p) && l->from <= *at && *at <= l->to) {
                *at = l->to + 1;
                moved = true;
            }
        }
    }
    if (*at > to) {
        return false;
    }
    *end = to;
    for (size_t i = 0; i < f->n_lost; i++) {
        const struct lake_lost *l = &f->lost[i];

        if (lake_lost_is(l, p) && l->from > *at && l->from - 1 < *end) {
            *end = l->from - 1;
        }
    }
    return true;
}

/* Covered by the union of the partition's lost ranges. */
static bool lake_is_lost(const struct lake_fold *f, const struct lake_part *p,
                         int64_t from, int64_t to)
{
    int64_t end;

    return !lake_unlost_next(f, p, &from, to, &end);
}

/* ---- the broker's view at the end --------------------------------------- */

/* The first record of p at or above from with ts in [t0, t1) and offset
 * <= to (to < 0: any), skipping lost offsets: its offset, or -1. */
/* A look into the log for records the lake lacks: the first record of p
 * in from..to (to < 0: no end) stamped inside [f->t_start, f->t_end) and
 * not lost, into found (-1: none). */
struct lake_seek {
    const struct lake_part *p;
    int64_t from;
    int64_t to;
    int64_t found;
    int64_t found_ts;
};

/* One answer of the log against s: true when the look is over. */
static bool lake_seek_answer(const struct lake_log *l,
                             const struct lake_fold *f, struct lake_seek *s)
{
    for (size_t i = 0; i < l->n; i++) {
        int64_t o = l->offs[i];
        int64_t ts = 0;
        struct slice t =
            json_span(&l->doc, json_obj_get(&l->doc, l->recs[i], "ts"));

        if ((s->to >= 0 && o > s->to) || t.len < 2 ||
            !isotime_parse_us(t.ptr + 1, t.len - 2, &ts) || ts >= f->t_end) {
            return true;
        }
        if (ts >= f->t_start && !lake_is_lost(f, s->p, o, o)) {
            s->found = o;
            s->found_ts = ts;
            return true;
        }
        s->from = o + 1;
    }
    return l->n == 0;
}

static int lake_log_first(struct lake_log *l, const struct lake_fold *f,
                          struct lake_seek *s, struct err *err)
{
    struct slice name = {s->p->name, s->p->len};

    s->found = -1;
    for (;;) {
        if (lake_log_fetch(l, name, s->from, err) != 0) {
            return err->code;
        }
        if (l->n == 0 && s->from < l->log_start) {
            s->from = l->log_start;
            continue;
        }
        if (lake_seek_answer(l, f, s)) {
            return 0;
        }
    }
}

/* Every partition of the queue in the broker's log: name, logStart. */
/* POST /api/v1/partitions/changed for queue from cursor after (NULL: the
 * start); the answer in h->ans. */
static int lake_changed_page(struct lake_http *h, struct slice queue,
                             const char *after, struct err *err)
{
    struct buf body;
    struct jw w;
    long st;

    buf_init(&body, BUF_UNLIMITED);
    jw_init(&w, &body);
    jw_obj_begin(&w);
    jw_key(&w, "entries");
    jw_arr_begin(&w);
    jw_obj_begin(&w);
    jw_key(&w, "queue");
    jw_str(&w, queue.ptr, queue.len);
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
        return err->code;
    }
    st = lake_http_call(h, "/api/v1/partitions/changed", body.data, body.len,
                        200, err);
    buf_free(&body);
    if (st != 200) {
        struct lake_quoted q;

        return st == 0 ? err->code
                       : err_set(err, ERR_REMOTE,
                                 "the broker's partitions/changed answered "
                                 "%ld: %s",
                                 st, lake_quote(&q, h->ans.data, h->ans.len));
    }
    return 0;
}

/* A partition of the broker's log joins f's states; one the lake does not
 * name is counted apart (is_log_only), not among the lake's. */
static void lake_log_partition(struct lake_fold *f, const char *p, size_t n)
{
    size_t known = f->n_parts;
    struct lake_part *part = lake_part_of(f, p, n);

    if (f->n_parts > known) {
        part->is_log_only = true;
        f->n_log_only++;
    }
}

/* Every partition of the queue in the broker's log joins f's states, so
 * that one the lake lacks is looked at. */
static int lake_log_partitions(struct lake_http *h, struct slice queue,
                               struct lake_fold *f, struct err *err)
{
    char *after = NULL;

    for (;;) {
        struct json_doc d = {0};
        struct buf name;
        int e;
        int next;
        int rc = lake_changed_page(h, queue, after, err);

        free(after);
        after = NULL;
        if (rc != 0) {
            return err->code;
        }
        e = json_parse(&d, h->ans.data, h->ans.len, NULL, err) == 0
                ? json_child(&d, json_obj_get(&d, 0, "entries"))
                : -1;
        if (e < 0) { /* a queen broker answers one entry per one asked */
            struct lake_quoted q;

            json_doc_free(&d);
            return err_set(err, ERR_REMOTE,
                           "the broker's partitions/changed answer is not "
                           "queen's: %s",
                           lake_quote(&q, h->ans.data, h->ans.len));
        }
        if (json_obj_get(&d, e, "error") >= 0) {
            json_doc_free(&d); /* an unknown queue: no log to compare */
            return 0;
        }
        buf_init(&name, BUF_UNLIMITED);
        for (int p = json_child(&d, json_obj_get(&d, e, "partitions")); p >= 0;
             p = json_next(&d, p)) {
            buf_reset(&name);
            if (json_get_str(&d, json_obj_get(&d, p, "name"), &name, err) ==
                0) {
                lake_log_partition(f, name.data != NULL ? name.data : "",
                                   name.len);
            }
        }
        next = json_obj_get(&d, e, "next");
        if (next >= 0 && json_type(&d, next) == JSON_STRING) {
            buf_reset(&name);
            (void)json_get_str(&d, next, &name, err);
            after = buf_steal(&name, NULL);
        }
        buf_free(&name);
        json_doc_free(&d);
        if (after == NULL) {
            return 0;
        }
    }
}

/* ---- verify ------------------------------------------------------------- */

/* The ks of the manifests listed, ascending. */
struct lake_ks {
    int64_t *k; /* owned */
    size_t n;
};

struct lake_counter {
    int64_t n;   /* highest k seen */
    int64_t *ks; /* every k listed, ascending */
    size_t n_ks;
    struct lake_fold *f; /* verify: every break is a violation in f */
    bool is_bad;         /* restore: the first break, in bad */
    char bad[1024];
    size_t root_len;
};

/* A break in the manifests' numbering or names: a violation in c->f, and
 * counting goes on so every window present is still read (verify); the
 * first one only, in c->bad (restore, which refuses such a lake). */
static void lake_count_break(struct lake_counter *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void lake_count_break(struct lake_counter *c, const char *fmt, ...)
{
    va_list ap;

    if (c->is_bad && c->f == NULL) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(c->bad, sizeof(c->bad), fmt, ap);
    va_end(ap);
    c->is_bad = true;
    if (c->f != NULL) {
        lake_fold_violation(c->f, "%s", c->bad);
    }
}

static int lake_count_manifest(void *arg, const char *key)
{
    struct lake_counter *c = arg;
    int64_t k = 0;
    const char *rest = key + c->root_len;
    size_t n = strlen(rest);

    if (n != 15 || strcmp(rest + 10, ".json") != 0 ||
        !layout_parse_manifest_k(key, strlen(key), &k)) {
        lake_count_break(c,
                         "window 0: %s: not a manifest name "
                         "(windows/<k:010>.json)",
                         key);
        return 0;
    }
    /* Listed in key order, so in k order: k past n + 1 skips some, each
     * gap one violation (its windows are not read one GET each). */
    if (k > c->n + 1) {
        char gap[64];

        if (k - 1 > c->n + 1) {
            snprintf(gap, sizeof(gap), "windows %" PRId64 "..%" PRId64,
                     c->n + 1, k - 1);
        } else {
            snprintf(gap, sizeof(gap), "window %" PRId64, c->n + 1);
        }
        lake_count_break(c,
                         "window %" PRId64 ": %s: manifests are not numbered "
                         "1..n without a gap: it follows k=%" PRId64
                         " (no manifest for %s)",
                         k, key, c->n, gap);
        if (c->f != NULL) {
            c->f->missing = xrealloc(c->f->missing, (c->f->n_missing + 1) * 2 *
                                                        sizeof(int64_t));
            c->f->missing[2 * c->f->n_missing] = c->n + 1;
            c->f->missing[2 * c->f->n_missing + 1] = k - 1;
            c->f->n_missing++;
        }
    } else if (k != c->n + 1) {
        lake_count_break(c,
                         "window %" PRId64 ": %s: manifests are not numbered "
                         "1..n without a gap: it follows k=%" PRId64,
                         k, key, c->n);
        return 0;
    }
    c->ks = xrealloc(c->ks, (c->n_ks + 1) * sizeof(int64_t));
    c->ks[c->n_ks++] = k;
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

static int lake_i64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a;
    int64_t y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

static int lake_check_orphan(void *arg, const char *key)
{
    struct lake_orphans *c = arg;
    uint64_t h = hashtab_hash(key, strlen(key));
    const char *w = strrchr(key, '/');
    int64_t k = -1;

    /* k of a window's name "w-<k:010>-..."; any other name is checked */
    if (w != NULL && strncmp(w, "/w-", 3) == 0 && strnlen(w + 3, 11) == 11 &&
        w[13] == '-') {
        char digits[11];

        memcpy(digits, w + 3, 10);
        digits[10] = '\0';
        (void)lake_int(digits, &k);
    }
    /* outside the range verified; past the last manifest only when --to-k
     * cut the range (otherwise no committed window owns it) */
    if (k >= 0 && (k < c->o->from_k || (k > c->last_k && c->o->to_k != 0))) {
        return 0;
    }
    /* a window whose manifest could not be read is that one violation: what
     * it names is unknown, so objects under its k are not called orphans */
    if (k >= 0 && c->f->n_unread_ks > 0 &&
        bsearch(&k, c->f->unread_ks, c->f->n_unread_ks, sizeof(int64_t),
                lake_i64_cmp) != NULL) {
        return 0;
    }
    if (k > c->last_k) {
        /* on a live lake, the window being committed as we read */
        lake_fold_violation(c->f,
                            "window %" PRId64 ": %s: data object, but no "
                            "manifest names it (past the last manifest, "
                            "k=%" PRId64 ": an upload whose commit never "
                            "came, or the window a running sink commits now; "
                            "--to-k %" PRId64 " leaves it out)",
                            k, key, c->last_k, c->last_k);
    } else if (c->f->n_named > 0 &&
               bsearch(&h, c->f->named, c->f->n_named, sizeof(uint64_t),
                       lake_u64_cmp) != NULL) {
        return 0;
    } else if (k < 0) { /* a name that is no window's: no window to name */
        lake_fold_violation(c->f,
                            "stray object %s: data object, but no manifest "
                            "names it (its name is no window's)",
                            key);
    } else {
        lake_fold_violation(c->f,
                            "window %" PRId64 ": %s: data object, but no "
                            "manifest names it",
                            k, key);
    }
    return 0;
}

struct lake_progress {
    bool is_tty;
    const char *what; /* "verify" | "restore" */
    int64_t total;    /* windows */
    struct timespec start;
    struct timespec last;
    bool is_open; /* a bar is on stderr's last line, not ended */
};

static void lake_progress_init(struct lake_progress *p, const char *what,
                               int64_t total)
{
    memset(p, 0, sizeof(*p));
    p->is_tty = isatty(2) != 0;
    p->what = what;
    p->total = total;
    clock_gettime(CLOCK_MONOTONIC, &p->start);
    p->last = p->start;
    p->last.tv_sec -= 1;
}

static double lake_since(const struct timespec *a)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - a->tv_sec) +
           (double)(now.tv_nsec - a->tv_nsec) / 1e9;
}

static void lake_progress_show(struct lake_progress *p, int64_t done,
                               uint64_t records, uint64_t bytes, bool is_final)
{
    double t;

    if (!p->is_tty) {
        return;
    }
    if (!is_final && lake_since(&p->last) < 0.2) {
        return;
    }
    clock_gettime(CLOCK_MONOTONIC, &p->last);
    p->is_open = !is_final;
    t = lake_since(&p->start);
    fprintf(stderr,
            "\r%s %" PRId64 "/%" PRId64 " windows  %" PRIu64
            " records  %.1f MB  %.1f windows/s   ",
            p->what, done, p->total, records, (double)bytes / 1e6,
            t > 0 ? (double)done / t : 0.0);
    if (is_final) {
        fputc('\n', stderr);
    }
}

/* After a failure: the bar's line ended, so that the reason gets its own. */
static void lake_progress_end(struct lake_progress *p)
{
    if (p->is_open) {
        fputc('\n', stderr);
        p->is_open = false;
    }
}

/* s[0..n) as a JSON string, made UTF-8 first (json_utf8_quote: a byte
 * that starts no sequence becomes '?'), so the document stays JSON
 * whatever a damaged lake's key or the command line held. */
static void lake_json_bytes(FILE *out, const char *s, size_t n)
{
    struct buf b;
    struct err err;
    char *clean = xmalloc(n + 1);
    size_t cn = n > 0 ? json_utf8_quote(clean, s, n, n) : 0;

    buf_init(&b, BUF_UNLIMITED);
    (void)json_escape(&b, clean, cn, &err); /* with its quotes */
    free(clean);
    fwrite(b.data != NULL ? b.data : "", 1, b.len, out);
    buf_free(&b);
}

static void lake_json_str(FILE *out, const char *s)
{
    lake_json_bytes(out, s, strlen(s));
}

/* The end of a run of cmd, shared by verify and restore: why it could not
 * finish (failed non-NULL) goes on stderr; with --json, the document on
 * stdout is closed with its verdict ("exact" or "ok"), false whenever
 * failed, and the same sentence as "error". A document is printed on every
 * exit after the flags are read, so a script reads one whatever happened.
 * Returns 0, or 2 when stdout could not be written. */
static int lake_outcome(const struct lake_opts *o, const char *cmd,
                        const char *verdict, bool is_true,
                        const struct err *failed)
{
    if (failed != NULL) {
        fprintf(stderr, "queen lake %s: %s\n", cmd, failed->msg);
        /* A virtual-host name that does not resolve is most often a local
         * or private endpoint that only serves path-style requests. */
        if (!o->s3.ep.path_style &&
            strstr(failed->msg, "resolve host") != NULL) {
            fprintf(stderr,
                    "queen lake %s: the bucket was addressed as the host "
                    "%s.%s; --path-style addresses it as %s/%s\n",
                    cmd, o->s3.ep.bucket, o->s3.ep.host, o->s3.ep.authority,
                    o->s3.ep.bucket);
        }
    }
    if (o->is_json) {
        printf(",\"%s\":%s", verdict,
               is_true && failed == NULL ? "true" : "false");
        if (failed != NULL) {
            printf(",\"error\":");
            lake_json_str(stdout, failed->msg);
        }
        printf("}\n");
    }
    return fflush(stdout) != 0 ? 2 : 0;
}

struct lake_qname {
    char *ptr; /* owned, NUL-terminated after its len */
    size_t len;
};

struct lake_qlist {
    struct lake_qname *names;
    size_t n;
    size_t root_len;
};

/* Whether esc[0..en) is the sink's escape of name[0..n) (pct_escape):
 * the one spelling a queue's keys have. */
static bool lake_pct_canonical(const char *name, size_t n, const char *esc,
                               size_t en)
{
    struct buf again;
    struct err err;
    bool is_same;

    buf_init(&again, BUF_UNLIMITED);
    is_same = pct_escape(&again, name, n, &err) == 0 && again.len == en &&
              (en == 0 || memcmp(again.data, esc, en) == 0);
    buf_free(&again);
    return is_same;
}

static int lake_collect_queue(void *arg, const char *key)
{
    struct lake_qlist *q = arg;
    const char *rest = key + q->root_len;
    const char *slash;
    struct buf raw;
    struct err err;

    /* A queue is one with a manifest (docs/lake.md §2): its checkpoints
     * alone do not make one. */
    if (strncmp(rest, "queue=", 6) != 0 ||
        (slash = strchr(rest + 6, '/')) == NULL ||
        strncmp(slash, "/windows/", 9) != 0) {
        return 0;
    }
    buf_init(&raw, BUF_UNLIMITED);
    if (pct_unescape(&raw, rest + 6, (size_t)(slash - rest - 6), &err) != 0 ||
        !lake_pct_canonical(raw.data != NULL ? raw.data : "", raw.len, rest + 6,
                            (size_t)(slash - rest - 6))) {
        buf_free(&raw); /* a key the sink never writes ("%61", "%ZZ"): no
                           queue's, so it is not taken for one */
        return 0;
    }
    if (q->n == 0 || q->names[q->n - 1].len != raw.len ||
        memcmp(q->names[q->n - 1].ptr, raw.data != NULL ? raw.data : "",
               raw.len) != 0) {
        size_t len = raw.len;

        q->names = xrealloc(q->names, (q->n + 1) * sizeof(*q->names));
        q->names[q->n++] = (struct lake_qname){buf_steal(&raw, NULL), len};
    }
    buf_free(&raw);
    return 0;
}

static void lake_fold_free(struct lake_fold *f)
{
    for (size_t i = 0; i < f->n_parts; i++) {
        free(f->parts[i]->name);
        free(f->parts[i]->shown);
        free(f->parts[i]);
    }
    free(f->parts);
    lake_free_items(f->gaps, f->n_gaps, sizeof(*f->gaps),
                    offsetof(struct lake_gap, where));
    lake_free_items(f->lost, f->n_lost, sizeof(*f->lost),
                    offsetof(struct lake_lost, partition));
    lake_free_items(f->violations, f->n_violations, sizeof(*f->violations), 0);
    free(f->named);
    free(f->bad_ks);
    free(f->unread_ks);
    free(f->t_ends);
    free(f->t_end_ks);
    free(f->missing);
    free(f->cps);
    hashtab_free(&f->index);
}

/* Verify one queue into f. Returns 0, or 2 (err) when it could not run. */
/* The highest k of the queue's manifests, their numbering checked (a
 * violation in f when broken, and each gap in f->missing); with ks, every
 * k listed, ascending (owned: free it). Returns 0, or 2 (err). */
static int lake_count(struct lake_bucket *b, const struct layout_queue *lq,
                      struct lake_fold *f, int64_t *n, struct lake_ks *ks,
                      struct err *err)
{
    struct lake_counter cnt;
    struct buf root;
    int rc;

    memset(&cnt, 0, sizeof(cnt));
    cnt.f = f;
    buf_init(&root, 4096);
    rc = layout_sidecar_root(&root, lq, err);
    if (rc == 0) {
        rc = buf_append_str(&root, "/windows/", err);
    }
    cnt.root_len = root.len;
    if (rc == 0) {
        rc = lake_list(b, root.data, lake_count_manifest, &cnt, err);
    }
    buf_free(&root);
    if (ks != NULL) {
        ks->k = cnt.ks;
        ks->n = cnt.n_ks;
    } else {
        free(cnt.ks);
    }
    if (rc != 0) {
        return 2;
    }
    if (cnt.is_bad && f == NULL) {
        err_set(err, ERR_CORRUPT, "%s", cnt.bad);
        return 2;
    }
    if (cnt.n == 0) {
        struct lake_shown qn;

        err_set(err, ERR_NOT_FOUND,
                "no manifest for queue %s of tenant %.*s under prefix %s",
                lake_show(&qn, lq->queue.ptr, lq->queue.len),
                (int)lq->tenant.len, lq->tenant.ptr, lq->prefix);
        return 2;
    }
    *n = cnt.n;
    return 0;
}

/* ---- checkpoints -------------------------------------------------------- */

static int lake_collect_cp(void *arg, const char *key)
{
    struct lake_fold *f = arg;
    int64_t k = 0;

    if (!layout_parse_checkpoint_k(key, strlen(key), &k)) {
        lake_fold_violation(f,
                            "window 0: %s: neither a manifest nor a "
                            "checkpoint",
                            key);
        return 0;
    }
    f->cps = xrealloc(f->cps, (f->n_cps + 1) * sizeof(int64_t));
    f->cps[f->n_cps++] = k;
    return 0;
}

static bool lake_has_cp(const struct lake_fold *f, int64_t k)
{
    for (size_t i = 0; i < f->n_cps; i++) {
        if (f->cps[i] == k) {
            return true;
        }
    }
    return false;
}

/* The checkpoint's positions against the partitions' states after window
 * k: each partition with a record in windows <= k is named, above it; the
 * first record of a later window must be at or above it (lake_fold_run). */
static void lake_cp_positions(struct lake_fold *f, const char *key, int64_t k,
                              const struct docs_checkpoint *cp)
{
    for (size_t i = 0; i < cp->n; i++) {
        struct lake_part *p = lake_part_of(f, cp->positions[i].name.ptr,
                                           cp->positions[i].name.len);

        p->has_cp = true;
        p->cp_at = cp->positions[i].offset;
        p->cp_k = k;
    }
    for (size_t i = 0; i < f->n_parts; i++) {
        struct lake_part *p = f->parts[i];

        if (p->has_records &&
            (!p->has_cp || p->cp_k != k || p->cp_at <= p->top)) {
            lake_fold_violation(f,
                                "window %" PRId64 ": %s: positions do not "
                                "match the manifests: %s has records up to "
                                "%" PRId64 " in windows <= %" PRId64
                                " but its position is %" PRId64,
                                k, key, p->shown, p->top, k,
                                p->has_cp && p->cp_k == k ? p->cp_at : -1);
        }
    }
}

/* Checkpoint k (its window just folded, t_end its tEnd). Returns 0, or 2
 * (err) when it could not be read. */
static int lake_fold_checkpoint(const struct lake_job *job, struct lake_fold *f,
                                int64_t k, int64_t t_end, struct err *err)
{
    struct buf key;
    struct buf body;
    struct buf arena;
    struct docs_checkpoint cp;
    struct s3_object_info info;
    struct s3_status st;
    int rc;

    buf_init(&key, 4096);
    buf_init(&body, (size_t)1 << 30);
    buf_init(&arena, BUF_UNLIMITED);
    rc = layout_checkpoint_key(&key, &job->lq, k, err);
    if (rc == 0) {
        rc = s3_client_get(job->b->c, key.data, &body, &info, &st, err);
    }
    if (rc == 0 && info.found &&
        docs_checkpoint_decode(body.data, body.len, &cp, &arena, err) != 0) {
        lake_fold_violation(f, "window %" PRId64 ": %s: %s", k, key.data,
                            err->msg);
    } else if (rc == 0 && info.found && (cp.k != k || cp.t_end != t_end)) {
        lake_fold_violation(f,
                            "window %" PRId64 ": %s: checkpoint does not "
                            "match window %" PRId64 "'s manifest (k, tEnd)",
                            k, key.data, k);
    } else if (rc == 0 && info.found &&
               !lake_positions_sorted(cp.positions, cp.n)) {
        lake_fold_violation(f,
                            "window %" PRId64 ": %s: positions are not sorted "
                            "by partition, once each",
                            k, key.data);
    } else if (rc == 0 && info.found) {
        lake_cp_positions(f, key.data, k, &cp);
    }
    buf_free(&key);
    buf_free(&body);
    buf_free(&arena);
    return rc != 0 ? 2 : 0;
}

/* Start listing the queue's checkpoints (f->cp_root is their prefix).
 * Returns 0, or 2 (err). */
static int lake_cps_start(const struct lake_job *job, struct lake_fold *f,
                          struct lake_bg_list *l, struct err *err)
{
    struct buf root;
    int rc;

    buf_init(&root, 4096);
    rc = layout_checkpoint_prefix(&root, &job->lq, err);
    if (rc == 0) {
        snprintf(f->cp_root, sizeof(f->cp_root), "%s", root.data);
        lake_bg_list_start(l, job->b, root.data);
    }
    buf_free(&root);
    return rc != 0 ? 2 : 0;
}

/* The listed checkpoints into f->cps, each checked against the n
 * manifests. Returns 0, or 2 (err). */
static int lake_cps_finish(struct lake_fold *f, struct lake_bg_list *l,
                           int64_t n, struct err *err)
{
    int rc = lake_bg_list_join(l, lake_collect_cp, f, err);

    for (size_t i = 0; rc == 0 && i < f->n_cps; i++) {
        if (f->cps[i] > n) {
            lake_fold_violation(f,
                                "window %" PRId64 ": %s%010" PRId64
                                ".json.zst: checkpoint of window %" PRId64
                                ", which has no manifest",
                                f->cps[i], f->cp_root, f->cps[i], f->cps[i]);
        }
    }
    return rc != 0 ? 2 : 0;
}

/* Window ks[i] from the pool, in k order (blocks). */
static void lake_pool_take(struct lake_pool *pool, size_t i,
                           struct lake_window *w)
{
    struct lake_window *slot = &pool->slots[i % pool->ahead];

    pthread_mutex_lock(&pool->mu);
    while (!(slot->is_done && slot->k == pool->ks[i])) {
        pthread_cond_wait(&pool->cv, &pool->mu);
    }
    *w = *slot;
    memset(slot, 0, sizeof(*slot));
    pthread_mutex_unlock(&pool->mu);
}

static void lake_pool_set(struct lake_pool *pool, size_t folded,
                          bool is_stopping)
{
    pthread_mutex_lock(&pool->mu);
    pool->folded = folded;
    pool->is_stopping = is_stopping;
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
}

/* How many of the pool's readers may decode at once (lake_wholes): one
 * more than the cores, as decoding is CPU work; every reader with
 * --broker, whose reads wait on the broker while holding their buffer. */
static int lake_decoders(const struct lake_opts *o)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int d = (int)(n < 1 ? 1 : n > 255 ? 255 : n) + 1;

    return o->broker != NULL || d > o->threads ? o->threads : d;
}

/* Read the listed windows from..last_k with the pool and fold them into
 * f (a window the listing lacks is its gap's violation, not a GET). */
static int lake_run_pool(const struct lake_job *job, const struct lake_ks *ks,
                         int64_t last_k, struct lake_fold *f,
                         struct lake_progress *prog, struct err *err)
{
    const struct lake_opts *o = job->o;
    struct lake_pool pool;
    pthread_t *th = xcalloc((size_t)o->threads, sizeof(*th));
    size_t i0 = 0;
    int rc = 0;

    memset(&pool, 0, sizeof(pool));
    pool.job = job;
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    while (i0 < ks->n && ks->k[i0] < o->from_k) {
        i0++;
    }
    pool.ks = ks->k;
    pool.n = i0;
    while (pool.n < ks->n && ks->k[pool.n] <= last_k) {
        pool.n++;
    }
    pool.next_i = i0;
    pool.folded = i0;
    prog->what = "verify";
    prog->total = (int64_t)(pool.n - i0);
    pool.ahead = (size_t)o->threads * LAKE_AHEAD_PER_THREAD;
    pool.slots = xcalloc(pool.ahead, sizeof(*pool.slots));
    lake_wholes_init(&pool.wholes, lake_decoders(o));
    for (int i = 0; i < o->threads; i++) {
        pthread_create(&th[i], NULL, lake_worker, &pool);
    }
    for (size_t i = i0; i < pool.n && rc == 0; i++) {
        int64_t k = ks->k[i];
        struct lake_window w;

        lake_pool_take(&pool, i, &w);
        if (w.is_fatal) {
            *err = w.err;
            err_wrap(err, "window %" PRId64, k);
            rc = 2;
        } else {
            lake_fold_window(f, &w, o);
            if (o->from_k == 1 && !w.is_unread && lake_has_cp(f, k)) {
                rc = lake_fold_checkpoint(job, f, k, w.t_end, err);
            }
        }
        lake_window_clear(&w);
        lake_pool_set(&pool, i + 1, false);
        lake_progress_show(prog, (int64_t)(i - i0 + 1), f->records, f->raw,
                           false);
    }
    lake_pool_set(&pool, pool.folded, true);
    for (int i = 0; i < o->threads; i++) {
        pthread_join(th[i], NULL);
    }
    for (size_t i = 0; i < pool.ahead; i++) {
        lake_window_clear(&pool.slots[i]);
    }
    free(th);
    free(pool.slots);
    lake_wholes_free(&pool.wholes);
    pthread_mutex_destroy(&pool.mu);
    pthread_cond_destroy(&pool.cv);
    if (rc == 0) {
        lake_progress_show(prog, prog->total, f->records, f->raw, true);
    } else {
        lake_progress_end(prog);
    }
    return rc;
}

/* Orphans: every data object of the range must be named. */
/* Start listing the queue's data objects. Returns 0, or 2 (err). */
static int lake_orphans_start(const struct lake_job *job,
                              struct lake_bg_list *l, struct err *err)
{
    const struct lake_opts *o = job->o;
    struct buf data;
    int rc;

    buf_init(&data, 4096);
    rc = buf_printf(&data, err, "%s%stenant=", o->prefix,
                    o->prefix[0] != '\0' ? "/" : "");
    if (rc == 0) {
        rc = pct_escape(&data, o->tenant, strlen(o->tenant), err);
    }
    if (rc == 0) {
        rc = buf_append_str(&data, "/queue=", err);
    }
    if (rc == 0) {
        rc = pct_escape(&data, job->lq.queue.ptr, job->lq.queue.len, err);
    }
    if (rc == 0) {
        rc = buf_append_str(&data, "/", err);
    }
    if (rc == 0) {
        lake_bg_list_start(l, job->b, data.data);
    }
    buf_free(&data);
    return rc != 0 ? 2 : 0;
}

/* Orphans: every listed data object of the range must be named by a
 * manifest read. Returns 0, or 2 (err). */
static int lake_orphans_check(const struct lake_job *job, int64_t last_k,
                              struct lake_fold *f, struct lake_bg_list *l,
                              struct err *err)
{
    struct lake_orphans oc = {f, job->o, last_k};

    if (f->n_named > 0) {
        qsort(f->named, f->n_named, sizeof(uint64_t), lake_u64_cmp);
    }
    return lake_bg_list_join(l, lake_check_orphan, &oc, err) != 0 ? 2 : 0;
}

/* The gaps: lost, else a violation (with the log: only where the log has
 * a record in the verified span). */
static int lake_gaps_check(const struct lake_opts *o, struct lake_log *log,
                           struct lake_fold *f, struct err *err)
{
    for (size_t i = 0; i < f->n_parts; i++) {
        struct lake_part *p = f->parts[i];
        int64_t top = p->has_records ? p->top : -1;

        /* a partition with no record in the lake: where the sink started
         * it is the log's to say, as below a first record */
        if (p->has_pos && p->pos > top + 1 &&
            (p->has_records || o->broker != NULL)) {
            char where[64];

            snprintf(where, sizeof(where), "positions of window %" PRId64,
                     p->pos_k);
            lake_add_gap(f, (struct lake_gap){p, top + 1, p->pos - 1, p->pos_k,
                                              where, p->has_records});
        }
    }
    for (size_t i = 0; i < f->n_gaps; i++) {
        const struct lake_gap *g = &f->gaps[i];
        struct lake_seek s = {g->part, g->from, g->to, -1, 0};

        if (lake_is_lost(f, g->part, g->from, g->to)) {
            continue;
        }
        if (o->broker != NULL && lake_log_first(log, f, &s, err) != 0) {
            return 2;
        }
        if (s.found >= 0) {
            lake_fold_violation(f,
                                "window %" PRId64 ": %s: record %s/%" PRId64
                                " is in the log, not in the lake",
                                g->k, g->where, g->part->shown, s.found);
        } else if (g->is_sure) {
            /* the bucket's own rule, whatever the log says: a record the
             * log trimmed (below logStartOffset) was still the lake's to
             * hold or to list lost */
            int64_t at = g->from;
            int64_t end;

            /* each run the lost ranges leave, not the whole gap */
            for (; lake_unlost_next(f, g->part, &at, g->to, &end);
                 at = end + 1) {
                lake_fold_violation(f,
                                    "window %" PRId64 ": %s: partition %s: "
                                    "offsets %" PRId64 "..%" PRId64 " are "
                                    "neither in the lake nor lost (offsets "
                                    "not contiguous)",
                                    g->k, g->where, g->part->shown, at, end);
            }
        }
    }
    return 0;
}

/* Window k's manifest key into key (initialised here; empty when it
 * cannot be made), for a violation to name. */
static void lake_manifest_key_of(const struct lake_job *job, int64_t k,
                                 struct buf *key)
{
    struct err err;

    buf_init(key, 4096);
    if (layout_manifest_key(key, &job->lq, k, &err) != 0) {
        buf_reset(key);
    }
}

static int lake_gap_order(const void *a, const void *b)
{
    const struct lake_gap *x = a;
    const struct lake_gap *y = b;

    if (x->part != y->part) {
        return (uintptr_t)x->part < (uintptr_t)y->part ? -1 : 1;
    }
    return x->from < y->from ? -1 : x->from > y->from;
}

/* The first offset of a..b the lake holds for p (its records span
 * first..top less its gaps, which gaps[0..n) hold sorted), or -1. */
static int64_t lake_held_in(const struct lake_gap *gaps, size_t n,
                            const struct lake_part *p, int64_t a, int64_t b)
{
    size_t lo = 0;
    size_t hi = n;
    int64_t at = a > p->first ? a : p->first;
    int64_t end = b < p->top ? b : p->top;

    while (lo < hi) { /* the first gap of p that ends at or after at */
        size_t mid = lo + (hi - lo) / 2;
        const struct lake_gap *g = &gaps[mid];

        if ((uintptr_t)g->part < (uintptr_t)p || (g->part == p && g->to < at)) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    for (size_t i = lo; at <= end && i < n && gaps[i].part == p; i++) {
        if (gaps[i].from > at) {
            break; /* at is not in a gap: a record is there */
        }
        at = gaps[i].to + 1 > at ? gaps[i].to + 1 : at;
    }
    return at <= end ? at : -1;
}

/* A lost range must hold no record the lake has: the sink lists lost only
 * what it could not read. Not judged after a window with a violation
 * (whose records were not folded). */
static void lake_lost_check(const struct lake_job *job, struct lake_fold *f)
{
    struct lake_gap *gaps;

    if (f->n_bad_ks > 0 || f->n_lost == 0) {
        return;
    }
    gaps = xmalloc((f->n_gaps + 1) * sizeof(*gaps));
    if (f->n_gaps > 0) {
        memcpy(gaps, f->gaps, f->n_gaps * sizeof(*gaps));
    }
    qsort(gaps, f->n_gaps, sizeof(*gaps), lake_gap_order);
    for (size_t i = 0; i < f->n_lost; i++) {
        const struct lake_lost *l = &f->lost[i];
        struct lake_part *p = lake_part_of(f, l->partition, l->plen);
        int64_t o = p->has_records
                        ? lake_held_in(gaps, f->n_gaps, p, l->from, l->to)
                        : -1;
        struct buf key;

        if (o < 0) {
            continue;
        }
        lake_manifest_key_of(job, l->k, &key);
        lake_fold_violation(f,
                            "window %" PRId64 ": %s: partition %s: lost "
                            "range %" PRId64 "..%" PRId64 " holds offset "
                            "%" PRId64 ", which is in the lake",
                            l->k, key.data != NULL ? key.data : "", p->shown,
                            l->from, l->to, o);
        buf_free(&key);
    }
    free(gaps);
}

/* The log's records past each partition's last one in the lake, stamped
 * inside the verified span. */
/* The window read whose span holds ts: the first whose tEnd is above it
 * (tEnds ascend as the windows tile), else the last. */
static int64_t lake_window_of(const struct lake_fold *f, int64_t ts)
{
    int64_t lo = 0;
    int64_t hi = f->windows;

    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;

        if (f->t_ends[mid] <= ts) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return f->t_end_ks[lo < f->windows ? lo : f->windows - 1];
}

static int lake_tail_check(const struct lake_job *job, struct lake_log *log,
                           struct lake_fold *f, struct err *err)
{
    for (size_t i = 0; i < f->n_parts; i++) {
        struct lake_part *p = f->parts[i];
        struct lake_seek s = {p, p->has_records ? p->top + 1 : 0, -1, -1, 0};

        if (lake_bad_between(f, lake_part_k(f, p), INT64_MAX)) {
            continue; /* a window after its top was not read whole */
        }
        if (p->has_pos && p->pos > s.from) {
            s.from = p->pos; /* the gap below it was looked at */
        }
        if (lake_log_first(log, f, &s, err) != 0) {
            return 2;
        }
        if (s.found >= 0) {
            int64_t k = lake_window_of(f, s.found_ts);
            struct buf key;

            lake_manifest_key_of(job, k, &key);
            lake_fold_violation(f,
                                "window %" PRId64 ": %s: record %s/%" PRId64
                                " is in the log, not in the lake (after "
                                "its last record in the lake)",
                                k, key.data != NULL ? key.data : "", p->shown,
                                s.found);
            buf_free(&key);
        }
    }
    return 0;
}

/* The flag of o's window range that is past the last manifest n, named in
 * err: --from-k, else --to-k when is_to_k_checked. Returns 0 when neither
 * is, else ERR_NOT_FOUND. */
static int lake_range_past(const struct lake_opts *o, int64_t n,
                           bool is_to_k_checked, struct err *err)
{
    bool is_from = o->from_k > n;

    if (!is_from && !(is_to_k_checked && o->to_k > n)) {
        return 0;
    }
    return err_set(err, ERR_NOT_FOUND,
                   "%s %" PRId64 " is past the last manifest (k=%" PRId64 ")",
                   is_from ? "--from-k" : "--to-k",
                   is_from ? o->from_k : o->to_k, n);
}

/* Verify one queue into f. Returns 0, or 2 (err) when it could not run. */
static int lake_verify_queue(const struct lake_opts *o, struct lake_bucket *b,
                             struct slice queue, struct lake_fold *f,
                             struct lake_progress *prog, struct err *err)
{
    struct lake_job job = {o, b, {o->prefix, {0}, queue}};
    struct lake_log log;
    struct lake_bg_list cps;
    struct lake_bg_list data;
    struct err past;
    struct lake_ks ks = {NULL, 0};
    int64_t n = 0;
    int64_t last_k = 0;
    int rc;

    job.lq.tenant = (struct slice){o->tenant, strlen(o->tenant)};
    /* The checkpoints and the data objects are listed while the manifests
     * are counted and the windows read; their keys are checked after. */
    if (lake_orphans_start(&job, &data, err) != 0) {
        return 2;
    }
    if (lake_cps_start(&job, f, &cps, err) != 0) {
        lake_bg_list_join(&data, NULL, NULL, err);
        return 2;
    }
    rc = lake_count(b, &job.lq, f, &n, &ks, err);
    if (rc == 0) {
        last_k = o->to_k != 0 && o->to_k < n ? o->to_k : n;
        if (lake_range_past(o, n, true, &past) != 0) {
            lake_fold_violation(f, "%s", past.msg);
        }
        f->first_k = o->from_k;
        f->last_k = o->from_k - 1;
        rc = lake_cps_finish(f, &cps, n, err);
    } else {
        lake_bg_list_join(&cps, NULL, NULL, err);
    }
    if (rc == 0) {
        rc = lake_run_pool(&job, &ks, last_k, f, prog, err);
        f->last_k = rc == 0 ? last_k : f->last_k;
    }
    free(ks.k);
    if (rc == 0) {
        rc = lake_orphans_check(&job, last_k, f, &data, err);
    } else {
        lake_bg_list_join(&data, NULL, NULL, err);
    }
    memset(&log, 0, sizeof(log));
    if (o->broker != NULL) {
        lake_http_open(&log.http, o->broker, o);
        buf_init(&log.part, BUF_UNLIMITED);
        log.queue = queue;
        if (rc == 0 && lake_log_partitions(&log.http, queue, f, err) != 0) {
            rc = 2;
        }
    }
    if (rc == 0) {
        rc = lake_gaps_check(o, &log, f, err);
    }
    if (rc == 0) {
        lake_lost_check(&job, f);
    }
    if (rc == 0 && o->broker != NULL) {
        rc = lake_tail_check(&job, &log, f, err);
    }
    if (o->broker != NULL) {
        lake_log_drop(&log);
        lake_http_close(&log.http);
        buf_free(&log.part);
    }
    return rc;
}

static void lake_report(const struct lake_opts *o, struct slice queue,
                        const struct lake_fold *f, FILE *out, bool is_first)
{
    char a[32];
    char b[32];
    struct lake_shown shown;

    if (o->is_json) {
        fprintf(out, "%s{\"queue\":", is_first ? "" : ",");
        lake_json_bytes(out, queue.ptr, queue.len);
        fprintf(out,
                ",\"exact\":%s,\"windows\":%" PRId64 ",\"fromK\":%" PRId64
                ",\"objects\":%" PRIu64 ",\"records\":%" PRIu64
                ",\"bytes\":%" PRIu64 ",\"decodedBytes\":%" PRIu64
                ",\"partitions\":%zu,\"brokerOnlyPartitions\":%zu"
                ",\"tStart\":%" PRId64 ",\"tEnd\":%" PRId64
                ",\"stampsChecked\":%" PRIu64 ",\"lost\":[",
                f->violation_count == 0 ? "true" : "false",
                f->last_k - f->first_k + 1, f->first_k, f->objects, f->records,
                f->bytes, f->raw, f->n_parts - f->n_log_only, f->n_log_only,
                f->t_start, f->t_end, f->stamps_checked);
        for (size_t i = 0; i < f->n_lost; i++) {
            fprintf(out, "%s{\"k\":%" PRId64 ",\"partition\":", i ? "," : "",
                    f->lost[i].k);
            lake_json_bytes(out, f->lost[i].partition, f->lost[i].plen);
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
            lake_show(&shown, queue.ptr, queue.len),
            f->violation_count == 0 ? "exact" : "VIOLATIONS", f->first_k,
            f->last_k, a, b, f->objects, f->records, (double)f->bytes / 1e6,
            (double)f->raw / 1e6, f->n_parts - f->n_log_only);
    if (o->broker != NULL) {
        fprintf(out,
                "  %" PRIu64 " records compared with the broker's log, "
                "%zu partitions only there\n",
                f->stamps_checked, f->n_log_only);
    }
    for (size_t i = 0; i < f->n_lost; i++) {
        fprintf(out,
                "  lost (window %" PRId64 "): partition %s offsets %" PRId64
                "..%" PRId64 "\n",
                f->lost[i].k,
                lake_show(&shown, f->lost[i].partition, f->lost[i].plen),
                f->lost[i].from, f->lost[i].to);
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
            bool is_seen = false;

            for (size_t j = 0; j < q->n && !is_seen; j++) {
                is_seen = strcmp(q->names[j].ptr, o->queues[i]) == 0;
            }
            if (is_seen) {
                continue; /* named twice: verified and reported once */
            }
            q->names = xrealloc(q->names, (q->n + 1) * sizeof(*q->names));
            q->names[q->n++] = (struct lake_qname){xstrdup(o->queues[i]),
                                                   strlen(o->queues[i])};
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
        free(q->names[i].ptr);
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

    lake_progress_init(&prog, "verify", 0);
    lake_bucket_open(&b, o);
    /* with --json, stdout holds one document whatever the exit */
    if (o->is_json) {
        printf("{\"tenant\":");
        lake_json_str(stdout, o->tenant);
        printf(",\"queues\":[");
    }
    if (lake_queues(o, &b, &q, &err) != 0) {
        err_wrap(&err, "listing the queues");
        rc = 2;
    } else if (q.n == 0) {
        err_set(&err, ERR_NOT_FOUND, "no queue of tenant %s under prefix %s",
                o->tenant, o->prefix);
        rc = 2;
    }
    for (size_t i = 0; rc == 0 && i < q.n; i++) {
        struct lake_fold f;
        struct slice name = {q.names[i].ptr, q.names[i].len};

        memset(&f, 0, sizeof(f));
        if (lake_verify_queue(o, &b, name, &f, &prog, &err) != 0) {
            struct lake_shown shown;

            err_wrap(&err, "queue %s", lake_show(&shown, name.ptr, name.len));
            rc = 2;
            lake_fold_free(&f);
            break;
        }
        lake_report(o, name, &f, stdout, i == 0);
        is_bad = is_bad || f.violation_count > 0;
        lake_fold_free(&f);
    }
    if (o->is_json) {
        printf("]");
    }
    lake_qlist_free(&q);
    lake_bucket_close(&b);
    if (lake_outcome(o, "verify", "exact", !is_bad, rc != 0 ? &err : NULL) !=
        0) {
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
    uint64_t derived; /* the restore's sum only: lake_pusher's */
    bool is_failed;
    struct err err;
};

static int lake_push_flush(struct lake_push *p)
{
    struct json_doc d = {0};
    long st = 0;

    if (p->items == 0) {
        return 0;
    }
    if (buf_append_str(&p->body, "]}", &p->err) != 0) {
        return 2;
    }
    st = lake_http_call(&p->http, "/api/v1/push", p->body.data, p->body.len,
                        201, &p->err);
    if (st != 201) {
        if (st != 0) {
            struct lake_quoted q;

            err_set(&p->err, ERR_REMOTE, "the broker's push answered %ld: %s",
                    st, lake_quote(&q, p->http.ans.data, p->http.ans.len));
        }
        return 2;
    }
    if (json_parse(&d, p->http.ans.data, p->http.ans.len, NULL, &p->err) != 0) {
        struct lake_quoted q;

        err_set(&p->err, ERR_REMOTE,
                "the broker's push answer is not queen's: %s",
                lake_quote(&q, p->http.ans.data, p->http.ans.len));
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
            struct lake_quoted q;

            err_set(&p->err, ERR_REMOTE, "the broker refused an item: %s",
                    lake_quote(&q, sp.ptr, sp.len));
            json_doc_free(&d);
            return 2;
        }
    }
    json_doc_free(&d);
    buf_reset(&p->body);
    p->items = 0;
    return 0;
}

/* One push item for r at the end of body (opening the batch when it has
 * none yet). */
static int lake_push_item(struct buf *body, size_t items, const char *as,
                          const struct sink_record *r, struct err *err)
{
    if (items == 0 && buf_append_str(body, "{\"items\":[", err) != 0) {
        return 2;
    }
    if ((items > 0 && buf_append_byte(body, ',', err) != 0) ||
        buf_append_str(body, "{\"queue\":", err) != 0 ||
        json_escape(body, as, strlen(as), err) != 0 ||
        buf_append_str(body, ",\"partition\":", err) != 0 ||
        json_escape(body, r->partition.ptr, r->partition.len, err) != 0 ||
        buf_append_str(body, ",\"transactionId\":", err) != 0 ||
        json_escape(body, r->txn.ptr, r->txn.len, err) != 0 ||
        buf_append_str(body, ",\"payload\":", err) != 0 ||
        (r->payload.len == 0
             ? buf_append_str(body, "null", err)
             : buf_append(body, r->payload.ptr, r->payload.len, err)) != 0 ||
        buf_append_byte(body, '}', err) != 0) {
        return 2;
    }
    return 0;
}

/* Restore pushes on several connections at once, each owned by a thread
 * (a shard). A partition always goes to the same shard, whose batches
 * leave one at a time in the order they were filled, so each partition
 * reaches the broker in offset order; a batch sent again after a crash is
 * answered "duplicate" item by item (the transactionId). Each shard has one
 * batch in flight and one filling: the reader waits when both are busy.
 *
 * Batches run across window edges: the reader goes on into window k+1
 * while window k's last batches are in flight, and only then settles
 * window k (hands the fills still holding its records, waits until every
 * shard's acknowledged count reaches its mark) before the state file may
 * name k. Draining every shard at each edge instead left the broker idle
 * while the next window was fetched and decoded, and cut each shard's
 * share of a window into a short last batch (bench/restore, docs/lake.md
 * section 4). Counts are records since the restore started:
 *   (1) handed <= filled and acked <= handed;
 *   (2) window k is in the broker once, for every shard, acked >= the
 *       shard's filled count when the reader finished window k. */
struct lake_shard {
    struct lake_push push; /* the thread's: its connection, the batch in
                              flight (push.body), its counts */
    struct buf fill;       /* the batch being filled by the reader */
    size_t fill_items;
    uint64_t filled; /* records put in fills (reader only) */
    uint64_t handed; /* records handed to the thread (reader only) */
    uint64_t acked;  /* records the broker acknowledged (under mu) */
    bool is_full;    /* push.body holds a batch to send */
    bool is_stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
};

struct lake_pusher {
    struct lake_shard *s;
    int n;
    const char *as;
    size_t max_items;
    uint64_t records;
    uint64_t bytes;
    uint64_t derived;     /* records given a derived transactionId */
    struct buf txn_lake;  /* the lake's part of a derived id's input */
    struct buf txn_input; /* one record's input (lake_derive_txn) */
    bool is_failed;
    struct err err;
};

static void *lake_shard_main(void *arg)
{
    struct lake_shard *s = arg;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->is_full && !s->is_stop) {
            pthread_cond_wait(&s->cv, &s->mu);
        }
        if (!s->is_full) {
            break;
        }
        size_t items = s->push.items;

        pthread_mutex_unlock(&s->mu);
        int rc = lake_push_flush(&s->push);
        pthread_mutex_lock(&s->mu);
        s->push.is_failed = s->push.is_failed || rc != 0;
        s->acked += rc == 0 ? items : 0;
        s->is_full = false;
        pthread_cond_broadcast(&s->cv);
        if (s->push.is_failed) {
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A shard's failure, as the restore's (nonzero when it failed). */
static int lake_shard_failed(struct lake_pusher *P, struct lake_shard *s)
{
    if (!s->push.is_failed) {
        return 0;
    }
    P->is_failed = true;
    P->err = s->push.err;
    return 2;
}

/* The filled batch goes to the shard's thread once its last one is sent. */
static int lake_shard_hand(struct lake_pusher *P, struct lake_shard *s)
{
    struct buf t;
    int rc;

    if (s->fill_items == 0) {
        return 0;
    }
    pthread_mutex_lock(&s->mu);
    while (s->is_full && !s->push.is_failed) {
        pthread_cond_wait(&s->cv, &s->mu);
    }
    rc = lake_shard_failed(P, s);
    if (rc == 0) {
        t = s->push.body;
        s->push.body = s->fill;
        s->fill = t;
        buf_reset(&s->fill);
        s->push.items = s->fill_items;
        s->handed += s->fill_items;
        s->fill_items = 0;
        s->is_full = true;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Every shard's first mark[i] records are acknowledged (or one failed:
 * nonzero); a fill holding some of them is handed first. mark NULL: every
 * record filled so far. */
static int lake_pusher_settle(struct lake_pusher *P, const uint64_t *mark)
{
    int rc = 0;

    for (int i = 0; i < P->n && rc == 0; i++) {
        struct lake_shard *s = &P->s[i];

        if (s->handed < (mark != NULL ? mark[i] : s->filled)) {
            rc = lake_shard_hand(P, s);
        }
    }
    for (int i = 0; i < P->n && rc == 0; i++) {
        struct lake_shard *s = &P->s[i];
        uint64_t want = mark != NULL ? mark[i] : s->filled;

        pthread_mutex_lock(&s->mu);
        while (s->acked < want && !s->push.is_failed) {
            pthread_cond_wait(&s->cv, &s->mu);
        }
        rc = lake_shard_failed(P, s);
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

/* Each shard's filled count now, into mark[0..P->n). */
static void lake_pusher_mark(const struct lake_pusher *P, uint64_t *mark)
{
    for (int i = 0; i < P->n; i++) {
        mark[i] = P->s[i].filled;
    }
}

/* One field of a derived id's input, length first so that no two lists
 * of fields run together into the same bytes. */
static void lake_txn_field(struct buf *b, const char *p, size_t n)
{
    struct err err;

    (void)buf_printf(b, &err, "%zu:", n); /* b has no cap */
    (void)buf_append(b, p, n, &err);
}

/* A record whose transactionId is "" (the broker takes an empty id as
 * none and mints a new one, so every restore would queue it again) gets
 * one derived from its place: "lake-" and the first 32 hex digits of the
 * SHA-256 of the lake (bucket, prefix, tenant, queue: P->txn_lake) and the
 * record (partition, offset), which a lake holds once (verify's "in the
 * lake twice"). Every run derives the same id for it, so the broker's
 * dedup drops it on a second restore as it drops the others. */
static void lake_derive_txn(struct lake_pusher *P, const struct sink_record *r,
                            char out[LAKE_TXN_DERIVED_LEN + 1])
{
    char off[24];
    uint8_t sum[32];
    struct err err;

    snprintf(off, sizeof(off), "%" PRId64, r->offset);
    buf_reset(&P->txn_input);
    (void)buf_append(&P->txn_input, P->txn_lake.data, P->txn_lake.len, &err);
    lake_txn_field(&P->txn_input, r->partition.ptr, r->partition.len);
    lake_txn_field(&P->txn_input, off, strlen(off));
    sha256(P->txn_input.data, P->txn_input.len, sum);
    snprintf(out, LAKE_TXN_DERIVED_LEN + 1, "lake-");
    hex_lower(sum, (LAKE_TXN_DERIVED_LEN - 5) / 2, out + 5);
}

static int lake_push_record(void *arg, const struct sink_record *r)
{
    struct lake_pusher *P = arg;
    uint32_t h = 2166136261u; /* FNV-1a of the partition */
    struct lake_shard *s;
    struct sink_record rec = *r;
    char txn[LAKE_TXN_DERIVED_LEN + 1];

    for (size_t i = 0; i < r->partition.len; i++) {
        h = (h ^ (uint8_t)r->partition.ptr[i]) * 16777619u;
    }
    s = &P->s[h % (uint32_t)P->n];
    if (r->txn.len == 0) {
        lake_derive_txn(P, r, txn);
        rec.txn = (struct slice){txn, LAKE_TXN_DERIVED_LEN};
        P->derived++;
    }
    if (lake_push_item(&s->fill, s->fill_items, P->as, &rec, &P->err) != 0) {
        P->is_failed = true;
        return 2;
    }
    s->fill_items++;
    s->filled++;
    P->records++;
    P->bytes += r->payload.len;
    if (s->fill_items >= P->max_items || s->fill.len >= LAKE_PUSH_BYTES) {
        return lake_shard_hand(P, s);
    }
    return 0;
}

static void lake_pusher_open(struct lake_pusher *P, const struct lake_opts *o,
                             const char *as, int n)
{
    memset(P, 0, sizeof(*P));
    P->n = n;
    P->as = as;
    P->max_items = (size_t)o->batch;
    buf_init(&P->txn_lake, BUF_UNLIMITED);
    buf_init(&P->txn_input, BUF_UNLIMITED);
    lake_txn_field(&P->txn_lake, o->s3.ep.bucket, strlen(o->s3.ep.bucket));
    lake_txn_field(&P->txn_lake, o->prefix, strlen(o->prefix));
    lake_txn_field(&P->txn_lake, o->tenant, strlen(o->tenant));
    lake_txn_field(&P->txn_lake, o->queues[0], strlen(o->queues[0]));
    P->s = xcalloc((size_t)n, sizeof(*P->s));
    for (int i = 0; i < n; i++) {
        struct lake_shard *s = &P->s[i];

        lake_http_open(&s->push.http, o->to, o);
        buf_init(&s->push.body, BUF_UNLIMITED);
        buf_init(&s->fill, BUF_UNLIMITED);
        s->push.as = as;
        s->push.max_items = P->max_items;
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        if (pthread_create(&s->th, NULL, lake_shard_main, s) != 0) {
            abort();
        }
    }
}

/* Stops the threads; *sum gets the counts of every shard. */
static void lake_pusher_close(struct lake_pusher *P, struct lake_push *sum)
{
    memset(sum, 0, sizeof(*sum));
    sum->as = P->as;
    sum->records = P->records;
    sum->bytes = P->bytes;
    sum->derived = P->derived;
    for (int i = 0; i < P->n; i++) {
        struct lake_shard *s = &P->s[i];

        pthread_mutex_lock(&s->mu);
        s->is_stop = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
        sum->queued += s->push.queued;
        sum->duplicates += s->push.duplicates;
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        buf_free(&s->push.body);
        buf_free(&s->fill);
        lake_http_close(&s->push.http);
    }
    free(P->s);
    P->s = NULL;
    buf_free(&P->txn_lake);
    buf_free(&P->txn_input);
}

/* The state file: one line "k <K> <id>": K, the last window every record
 * of which the broker acknowledged; id, which restore it belongs to (the
 * first 16 bytes, in hex, of the sha256 of the endpoint, bucket, prefix,
 * tenant, queue, target URL and target queue, each followed by a newline),
 * so that a file of another lake or broker is refused, not resumed. */
#define LAKE_STATE_ID_HEX 32

static void lake_state_id(const struct lake_opts *o, const char *queue,
                          char id[LAKE_STATE_ID_HEX + 1])
{
    struct buf b;
    struct err err;
    uint8_t sum[32];
    int rc;

    buf_init(&b, BUF_UNLIMITED);
    /* the URLs without trailing slashes, as they are used: "http://b:1/"
     * is the same broker as "http://b:1" */
    rc = buf_printf(&b, &err, "%.*s\n%s\n%s\n%s\n%s\n%.*s\n%s\n",
                    lake_url_len(o->raw.endpoint), o->raw.endpoint,
                    o->raw.bucket, o->prefix, o->tenant, queue,
                    lake_url_len(o->to), o->to, o->as != NULL ? o->as : queue);
    ASSERT(rc == 0); /* BUF_UNLIMITED */
    sha256(b.data, b.len, sum);
    hex_lower(sum, LAKE_STATE_ID_HEX / 2, id);
    id[LAKE_STATE_ID_HEX] = '\0';
    buf_free(&b);
}

/* K of the state file at path for the restore id, and whether there is
 * one (*k 0 when not). 0, or 2 (err) when it is not one of this
 * restore's. */
static int lake_state_read(const char *path, const char *id, int64_t *k,
                           bool *is_found, struct err *err)
{
    FILE *f = fopen(path, "r");
    char line[128] = {0};
    char *sp;

    *k = 0;
    *is_found = f != NULL;
    if (f == NULL && errno == ENOENT) {
        return 0;
    }
    if (f == NULL) {
        return err_set(err, ERR_IO, "--state %s: %s", path, strerror(errno));
    }
    if (fgets(line, sizeof(line), f) == NULL) {
        line[0] = '\0';
    }
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    sp = strncmp(line, "k ", 2) == 0 ? strchr(line + 2, ' ') : NULL;
    if (sp != NULL) {
        *sp = '\0';
    }
    if (sp == NULL || !lake_int(line + 2, k) || strcmp(sp + 1, id) != 0) {
        *k = 0;
        return err_set(err, ERR_PRECONDITION,
                       "--state %s is not this restore's (another lake, "
                       "queue or broker, or not a state file): remove it or "
                       "name another file",
                       path);
    }
    return 0;
}

static int lake_state_write(const char *path, int64_t k, const char *id,
                            struct err *err)
{
    char tmp[4096];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (f == NULL) {
        return err_set(err, ERR_IO, "%s: %s", tmp, strerror(errno));
    }
    fprintf(f, "k %" PRId64 " %s\n", k, id);
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

/* One object's records on their way to the pusher, in the sink's order
 * (lake_order), so that every partition reaches the broker in offset
 * order. */
struct lake_restore_obj {
    struct lake_pusher *push;
    struct lake_order ord;
    bool is_unsorted;
    char why[sizeof(((struct err *)0)->msg)];
};

static int lake_restore_record(void *arg, const struct sink_record *r)
{
    struct lake_restore_obj *c = arg;
    struct lake_shown pn;
    struct err err;

    const char *fault = lake_order_fault(&c->ord, r);

    if (fault != NULL) {
        snprintf(c->why, sizeof(c->why),
                 "record %s/%" PRId64 " is %s (run verify)",
                 lake_show(&pn, r->partition.ptr, r->partition.len), r->offset,
                 fault);
        c->is_unsorted = true;
        return 1;
    }
    if (lake_order_note(&c->ord, r, &err) != 0) {
        snprintf(c->why, sizeof(c->why), "%s", err.msg);
        c->is_unsorted = true;
        return 1;
    }
    return lake_push_record(c->push, r);
}

/* What restoring window k works with. */
struct lake_rwin {
    const struct lake_job *job;
    struct lake_pusher *push;
    int64_t k;
    struct lake_mem *mem;
    int64_t prev_end; /* tEnd of the window read before (0: none) */
};

/* One object of window k: checked against its manifest entry, its records
 * pushed. Returns 0, or 2 (err: "window K: <key>: <reason>", or the
 * pusher's failure). */
static int lake_restore_object(const struct lake_rwin *rw,
                               const struct docs_object *obj,
                               const struct lake_kind *kind, struct err *err)
{
    const struct lake_job *job = rw->job;
    struct lake_pusher *push = rw->push;
    struct lake_mem *mem = rw->mem;
    int64_t k = rw->k;
    char key[4096];
    uint8_t sum[32];
    char hex[65];
    struct s3_object_info info;
    struct s3_status st;
    struct lake_restore_obj c;
    int rc;

    snprintf(key, sizeof(key), "%.*s", (int)obj->key.len, obj->key.ptr);
    if (s3_client_get(job->b->c, key, &mem->body, &info, &st, err) != 0) {
        err_wrap(err, "window %" PRId64, k);
        return 2;
    }
    sha256(mem->body.data, mem->body.len, sum);
    hex_lower(sum, 32, hex);
    if (!info.found || memcmp(hex, obj->sha256, 64) != 0) {
        err_set(err, ERR_CORRUPT,
                "window %" PRId64 ": %s: missing or not the manifest's bytes "
                "(run verify)",
                k, key);
        return 2;
    }
    memset(&c, 0, sizeof(c));
    c.push = push;
    buf_init(&c.ord.prev_p, BUF_UNLIMITED);
    rc = lake_decode(kind, buf_slice(&mem->body), lake_restore_record, &c, mem,
                     err);
    buf_free(&c.ord.prev_p);
    if (rc == 0) {
        return 0;
    }
    if (push->is_failed) {
        *err = push->err;
    } else if (c.is_unsorted) {
        err_set(err, ERR_CORRUPT, "window %" PRId64 ": %s: %s", k, key, c.why);
    } else {
        err_wrap(err, "window %" PRId64 ": %s", k, key);
    }
    return 2;
}

/* The summary, or why the restore stopped (failed non-NULL; with --json
 * the document still holds the counts so far). Returns 0, or 2 when stdout
 * could not be written. */
static int lake_restore_report(const struct lake_opts *o,
                               const struct lake_push *push, int64_t from,
                               int64_t last_k, const struct err *failed)
{
    if (o->is_json) {
        printf("{\"queue\":");
        lake_json_str(stdout, push->as);
        printf(",\"fromK\":%" PRId64 ",\"toK\":", from);
        if (last_k < 0) {
            printf("null");
        } else {
            printf("%" PRId64, last_k);
        }
        printf(",\"records\":%" PRIu64 ",\"queued\":%" PRIu64
               ",\"duplicates\":%" PRIu64 ",\"derivedIds\":%" PRIu64,
               push->records, push->queued, push->duplicates, push->derived);
    } else if (failed == NULL && from > last_k && o->state != NULL) {
        printf("nothing to restore: --state %s says windows up to %" PRId64
               " of %s are in %s\n",
               o->state, from - 1, o->queues[0], push->as);
    } else if (failed == NULL) {
        printf("restored windows %" PRId64 "..%" PRId64 " of %s into %s: "
               "%" PRIu64 " records, %" PRIu64 " new, %" PRIu64
               " already there\n",
               from, last_k, o->queues[0], push->as, push->records,
               push->queued, push->duplicates);
        if (push->derived > 0) {
            printf("  %" PRIu64 " records had no transactionId: each was "
                   "given one derived from its place in the lake\n",
                   push->derived);
        }
    }
    return lake_outcome(o, "restore", "ok", true, failed);
}

/* Window k's manifest checked as verify checks its shape (its own k,
 * format, writer, layout, tStart < tEnd, compact JSON with each key once,
 * in order) and against the window before (*rw->prev_end, 0 for none: the
 * windows tile). Returns 0, or ERR_CORRUPT with the first violation. */
static int lake_restore_manifest(struct lake_rwin *rw, const char *key,
                                 const struct docs_manifest *m,
                                 const struct buf *raw, struct lake_kind *kind,
                                 struct err *err)
{
    const struct lake_job *job = rw->job;
    int64_t *prev_end = &rw->prev_end;
    int64_t k = rw->k;
    struct lake_window w;
    const char *ext;
    int rc = 0;

    memset(&w, 0, sizeof(w));
    w.k = k;
    snprintf(w.manifest_key, sizeof(w.manifest_key), "%s", key);
    if (lake_check_manifest(&w, job, m, raw, kind, &ext) && *prev_end != 0 &&
        !lake_windows_meet(*prev_end, m->t_start)) {
        lake_violation(&w,
                       "window %" PRId64 ": %s: windows %" PRId64
                       " and %" PRId64 " do not tile: tEnd(%" PRId64
                       ")=%" PRId64 " but tStart(%" PRId64 ")=%" PRId64,
                       k, key, k - 1, k, k - 1, *prev_end, k, m->t_start);
    }
    if (w.n_violations > 0) {
        rc = err_set(err, ERR_CORRUPT, "%s (run verify)", w.violations[0]);
    }
    *prev_end = m->t_end;
    lake_window_clear(&w);
    return rc;
}

/* Fill batches with every record of window k; its last batches may still
 * be filling or in flight on return (lake_pusher_settle). *prev_end is the
 * tEnd of the window read before (0: none), then k's. Returns 0, or 2
 * (err). */
static int lake_restore_window(const struct lake_job *job,
                               struct lake_pusher *push, int64_t k,
                               int64_t *prev_end, struct lake_mem *mem,
                               struct err *err)
{
    struct buf mkey;
    struct buf raw;
    struct buf arena;
    struct docs_manifest m;
    struct s3_object_info info;
    struct s3_status st;
    struct lake_kind kind = {LAKE_NONE, {PARQUET_ZSTD, {NULL, 0}, {NULL, 0}}};
    int rc = 0;
    struct lake_rwin rw = {job, push, k, mem, *prev_end};

    memset(&m, 0, sizeof(m));
    buf_init(&mkey, 4096);
    buf_init(&raw, LAKE_MANIFEST_MAX);
    buf_init(&arena, BUF_UNLIMITED);
    if (layout_manifest_key(&mkey, &job->lq, k, err) != 0) {
        err_wrap(err, "window %" PRId64, k);
        rc = 2;
    } else if (s3_client_get(job->b->c, mkey.data, &raw, &info, &st, err) !=
               0) {
        if (err->code == ERR_TOO_BIG) { /* raw's cap */
            err_set(err, ERR_CORRUPT,
                    "window %" PRId64 ": %s: manifest is over the %zu MiB a "
                    "manifest may hold (run verify)",
                    k, mkey.data, LAKE_MANIFEST_MAX >> 20);
        } else {
            err_wrap(err, "window %" PRId64, k);
        }
        rc = 2;
    } else if (!info.found ||
               docs_manifest_decode(raw.data, raw.len, &m, &arena, err) != 0) {
        err_set(err, ERR_CORRUPT,
                "window %" PRId64 ": %s: not a manifest (run verify)", k,
                mkey.data);
        rc = 2;
    } else if (lake_restore_manifest(&rw, mkey.data, &m, &raw, &kind, err) !=
               0) {
        rc = 2;
    }
    for (size_t i = 0; rc == 0 && i < m.n_objects; i++) {
        rc = lake_restore_object(&rw, &m.objects[i], &kind, err);
    }
    *prev_end = rw.prev_end;
    buf_free(&mkey);
    buf_free(&raw);
    buf_free(&arena);
    return rc;
}

/* --state, when given: the window the file says this restore got to
 * (*done; the one before from for a new file), checked against from and
 * the last manifest, and the file written once before anything is pushed,
 * so that one that cannot be written stops the run here, not after window
 * 1 was pushed. 0, or 2 (err says why). */
static int lake_restore_state(const struct lake_opts *o, const char *state_id,
                              int64_t from, int64_t n_manifests, int64_t *done,
                              struct err *err)
{
    bool has_state = false;

    if (o->state == NULL) {
        return 0;
    }
    if (lake_state_read(o->state, state_id, done, &has_state, err) != 0) {
        return 2;
    }
    if (!has_state) {
        /* a new file starts where this run does: the windows below
         * --from-k are left out on purpose, and a rerun of the same
         * command resumes it */
        *done = from - 1;
    } else if (from > *done + 1) {
        /* K claims every window up to K: pushing past a window the file
         * does not hold would leave that window out of it for good */
        char skip[64];

        if (from - 1 > *done + 1) {
            snprintf(skip, sizeof(skip), "windows %" PRId64 "..%" PRId64,
                     *done + 1, from - 1);
        } else {
            snprintf(skip, sizeof(skip), "window %" PRId64, *done + 1);
        }
        err_set(err, ERR_PRECONDITION,
                "--state %s says windows up to %" PRId64 " are restored: "
                "--from-k %" PRId64 " would skip %s, which the file would "
                "then claim; start at --from-k %" PRId64 " or below, or "
                "name another file",
                o->state, *done, from, skip, *done + 1);
        return 2;
    }
    if (*done > n_manifests) {
        err_set(err, ERR_PRECONDITION,
                "--state %s says window %" PRId64 " was restored, past the "
                "last manifest (k=%" PRId64 ")",
                o->state, *done, n_manifests);
        return 2;
    }
    return lake_state_write(o->state, *done, state_id, err) != 0 ? 2 : 0;
}

static int lake_restore(const struct lake_opts *o)
{
    struct lake_bucket b;
    struct lake_job job;
    struct lake_push push;
    struct lake_pusher pusher;
    struct lake_progress prog;
    struct lake_mem mem;
    struct err err;
    uint64_t *mark; /* each shard's filled count at the end of window k-1 */
    char state_id[LAKE_STATE_ID_HEX + 1];
    int64_t from = o->from_k;
    int64_t last_k = 0;
    int64_t n_manifests = 0;
    int64_t done = 0;     /* the state file's K */
    int64_t prev_end = 0; /* tEnd of the window read before */
    int rc;

    lake_bucket_open(&b, o);
    job = (struct lake_job){
        o, &b, {o->prefix, {0}, {o->queues[0], strlen(o->queues[0])}}};
    job.lq.tenant = (struct slice){o->tenant, strlen(o->tenant)};
    rc = lake_count(&b, &job.lq, NULL, &last_k, NULL, &err);
    if (rc != 0) {
        last_k = -1; /* unknown: "toK" is null in the document */
    }
    /* only --from-k: a --to-k past the last manifest restores what there
     * is */
    if (rc == 0 && lake_range_past(o, last_k, false, &err) != 0) {
        rc = 2;
    }
    n_manifests = last_k;
    last_k = o->to_k != 0 && o->to_k < last_k ? o->to_k : last_k;
    lake_state_id(o, o->queues[0], state_id);
    if (rc == 0 &&
        lake_restore_state(o, state_id, from, n_manifests, &done, &err) != 0) {
        rc = 2;
    }
    from = done + 1 > from ? done + 1 : from;
    lake_pusher_open(&pusher, o, o->as != NULL ? o->as : o->queues[0],
                     o->threads);
    mark = xcalloc((size_t)o->threads, sizeof(*mark));
    lake_progress_init(&prog, "restore", last_k - from + 1);
    lake_mem_init(&mem);
    /* window k is read while window k-1's last batches are pushed; k-1
     * goes in the state file once they are acknowledged (mark) */
    for (int64_t k = from; k <= last_k + 1 && rc == 0; k++) {
        if (k <= last_k) {
            rc = lake_restore_window(&job, &pusher, k, &prev_end, &mem, &err);
        }
        if (rc == 0 && k > from) {
            if (lake_pusher_settle(&pusher, k <= last_k ? mark : NULL) != 0) {
                err = pusher.err;
                rc = 2;
            } else if (o->state != NULL &&
                       lake_state_write(o->state, k - 1, state_id, &err) != 0) {
                rc = 2;
            }
        }
        lake_pusher_mark(&pusher, mark);
        lake_progress_show(&prog, (k <= last_k ? k : last_k) - from + 1,
                           pusher.records, pusher.bytes, false);
    }
    /* after a failure the batches still filling are dropped (their window
     * is not in the state file: a rerun sends them); the ones in flight
     * finish */
    lake_pusher_close(&pusher, &push);
    free(mark);
    if (rc == 0) {
        lake_progress_show(&prog, prog.total, push.records, push.bytes, true);
    } else {
        lake_progress_end(&prog);
    }
    if (lake_restore_report(o, &push, from, last_k, rc != 0 ? &err : NULL) !=
        0) {
        rc = 2;
    }
    lake_mem_free(&mem);
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
        return rc == LAKE_HELP ? 0 : rc;
    }
    if (o.threads == 0) {
        o.threads = lake_default_threads(strcmp(argv[1], "verify") == 0);
    }
    const char *body_max = lake_env("QUEEN_MAX_BODY_BYTES");
    uint64_t bm = 0;
    if (body_max != NULL) {
        if (!config_parse_size(body_max, &bm) || bm < 1024 ||
            bm > ((uint64_t)1 << 30)) {
            fprintf(stderr,
                    "queen lake %s: QUEEN_MAX_BODY_BYTES=%s: not a byte size "
                    "from 1KiB to 1GiB\n",
                    argv[1], body_max);
            lake_opts_free(&o);
            return 2;
        }
        lake_body_max = (size_t)bm;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = strcmp(argv[1], "verify") == 0 ? lake_verify(&o) : lake_restore(&o);
    curl_global_cleanup();
    lake_opts_free(&o);
    return rc;
}
