/* Sink configuration: the environment sink's settings and the node-wide
 * knobs (docs/design/protocol.md §1 and docs/design/config.md §1-§6).
 *
 * Every value goes through envv(): blank counts as unset and values are
 * trimmed. The first error wins; fail() formats the template of
 * docs/design/config.md §5 into a local buffer, copies it whole into n->fatal
 * behind "QUEEN_S3_EMBEDDED=true: " and as much as fits into err->msg.
 * Enumerated values are matched against alias tables after lowercasing, and
 * their refusals print the lowercased value, as docs/design/config.md §1 says.
 * */
#include "sink/config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "base/json.h"
#include "base/log.h"
#include "base/pct.h"
#include "base/version.h"
#include "base/xalloc.h"
#include "s3/endpoint.h"

#define VAL_MAX 4096
#define PFX     "QUEEN_S3_PREFIX"

/* The names one sink's settings go by in messages: environment variables,
 * or a tenant document's fields (docs/design/config.md §5: {X} is either). */
struct names {
    const char *queues, *partitions, *endpoint, *region, *bucket, *prefix;
    const char *access_key, *secret, *secret_what, *path_style, *sse, *kms;
    const char *format, *compression, *parquet_codec, *layout, *align;
    const char *start, *target_mb, *max_window_ms, *sink;
};

static const struct names env_names = {
    "QUEEN_S3_QUEUES",     "QUEEN_S3_PARTITIONS",    "QUEEN_S3_ENDPOINT",
    "QUEEN_S3_REGION",     "QUEEN_S3_BUCKET",        "QUEEN_S3_PREFIX",
    "QUEEN_S3_ACCESS_KEY", "QUEEN_S3_SECRET_KEY",    "the S3 secret access key",
    "QUEEN_S3_PATH_STYLE", "QUEEN_S3_SSE",           "QUEEN_S3_SSE_KMS_KEY_ID",
    "QUEEN_S3_FORMAT",     "QUEEN_S3_COMPRESSION",   "QUEEN_S3_PARQUET_CODEC",
    "QUEEN_S3_LAYOUT",     "QUEEN_S3_ALIGN",         "QUEEN_S3_START",
    "QUEEN_S3_TARGET_MB",  "QUEEN_S3_MAX_WINDOW_MS", "QUEEN_S3_SINK",
};

struct ld {
    const struct names *nm;
    const struct sink_env *env;
    struct sink_node_config *n;
    struct err *err;
};

struct alias {
    const char *name;
    int value;
};

static const char *const crash_names[] = {
    "never",        "after_intent",  "mid_upload",
    "after_upload", "before_commit", "after_commit",
};

static const char *const tenant_vars[] = {
    "QUEEN_S3_QUEUES",        "QUEEN_S3_PARTITIONS",     "QUEEN_S3_ENDPOINT",
    "QUEEN_S3_REGION",        "QUEEN_S3_BUCKET",         PFX,
    "QUEEN_S3_ACCESS_KEY",    "QUEEN_S3_SECRET_KEY",     "QUEEN_S3_PATH_STYLE",
    "QUEEN_S3_SSE",           "QUEEN_S3_SSE_KMS_KEY_ID", "QUEEN_S3_FORMAT",
    "QUEEN_S3_COMPRESSION",   "QUEEN_S3_PARQUET_CODEC",  "QUEEN_S3_LAYOUT",
    "QUEEN_S3_ALIGN",         "QUEEN_S3_START",          "QUEEN_S3_TARGET_MB",
    "QUEEN_S3_MAX_WINDOW_MS", "QUEEN_S3_SINK",
};

PRINTF(2, 3)
static int fail(struct ld *l, const char *fmt, ...)
{
    char msg[SINK_FATAL_MAX - 32];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(l->n->fatal, sizeof(l->n->fatal), "QUEEN_S3_EMBEDDED=true: %s",
             msg);
    return err_set(l->err, ERR_INVALID, "%s", msg);
}

/* The trimmed value of name into out, or false when unset or blank. */
static bool envv(const struct ld *l, const char *name, char *out, size_t cap)
{
    return env_trim(l->env->get(l->env->ctx, name), out, cap);
}

static void lower(char *s)
{
    for (; *s != '\0'; s++) {
        *s = (char)tolower((unsigned char)*s);
    }
}

/* Digits with an optional leading '+', no overflow. */
static bool parse_whole(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    if (*s == '+') {
        s++;
    }
    if (*s == '\0') {
        return false;
    }
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10) {
            return false;
        }
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

struct bound {
    const char *name;
    uint64_t def, lo, hi;
    const char *what;
};

static int bounded(struct ld *l, const struct bound *b, uint64_t *out)
{
    const char *name = b->name;
    const char *what = b->what;
    uint64_t lo = b->lo;
    uint64_t hi = b->hi;
    char raw[VAL_MAX];
    uint64_t v;

    if (!envv(l, name, raw, sizeof(raw))) {
        *out = b->def;
        return 0;
    }
    if (!parse_whole(raw, &v)) {
        return fail(l,
                    "%s=%s is not a whole number. It is %s, in %" PRIu64
                    "..=%" PRIu64,
                    name, raw, what, lo, hi);
    }
    if (v < lo || v > hi) {
        return fail(
            l, "%s=%" PRIu64 " is outside %" PRIu64 "..=%" PRIu64 ". It is %s",
            name, v, lo, hi, what);
    }
    *out = v;
    return 0;
}

/* The broker-level preflight of 3.1. */
static int preflight(struct ld *l, const char *name, uint64_t def, uint64_t lo,
                     uint64_t hi, uint64_t *out)
{
    char raw[VAL_MAX];
    uint64_t v;

    if (!envv(l, name, raw, sizeof(raw))) {
        *out = def;
        return 0;
    }
    if (!parse_whole(raw, &v) || v < lo || v > hi) {
        return fail(l, "%s=%s is not an integer in %" PRIu64 "..=%" PRIu64,
                    name, raw, lo, hi);
    }
    *out = v;
    return 0;
}

/* An enumerated value: def when unset; tail completes "{name}={other} ". */
struct choice {
    const char *name;
    const struct alias *t;
    size_t n;
    int def;
    const char *tail; /* completes "{name}={other} " */
};

static int enumv(struct ld *l, const struct choice *ch, int *out)
{
    const char *name = ch->name;
    const struct alias *t = ch->t;
    size_t n = ch->n;
    char raw[VAL_MAX];

    if (!envv(l, name, raw, sizeof(raw))) {
        *out = ch->def;
        return 0;
    }
    lower(raw);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(raw, t[i].name) == 0) {
            *out = t[i].value;
            return 0;
        }
    }
    return fail(l, "%s=%s %s", name, raw, ch->tail);
}

bool sink_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};

    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

int sink_env_bool(const char *v, bool *out, char *shown, size_t cap)
{
    static const char ws[] = " \t\r\n";
    size_t n;

    *out = false;
    if (cap > 0) {
        shown[0] = '\0';
    }
    if (v == NULL) {
        return 0;
    }
    v += strspn(v, ws);
    n = strlen(v);
    while (n > 0 && strchr(ws, v[n - 1]) != NULL) {
        n--;
    }
    for (size_t i = 0; cap > 0 && i < n && i < cap - 1; i++) {
        shown[i] = (char)tolower((unsigned char)v[i]);
        shown[i + 1] = '\0';
    }
    if (n == 0) {
        return 0;
    }
    if (n >= cap) {
        return -1; /* longer than any boolean */
    }
    return sink_parse_bool(shown, out) ? 0 : -1;
}

static int boolv(struct ld *l, const char *name, bool def, bool *out)
{
    char raw[VAL_MAX];

    if (!envv(l, name, raw, sizeof(raw))) {
        *out = def;
        return 0;
    }
    if (sink_parse_bool(raw, out)) {
        return 0;
    }
    lower(raw);
    return fail(l, "%s=%s is not a boolean. It is `true` or `false`", name,
                raw);
}

/* The value of name with the blanks around it left out, in place (not
 * copied, so never cut): *n is its length, 0 when unset or blank. */
static const char *trimmed(const struct ld *l, const char *name, size_t *n)
{
    const char *raw = l->env->get(l->env->ctx, name);
    size_t len = raw != NULL ? strlen(raw) : 0;

    while (len > 0 && isspace((unsigned char)*raw)) {
        raw++, len--;
    }
    while (len > 0 && isspace((unsigned char)raw[len - 1])) {
        len--;
    }
    *n = len;
    return raw;
}

/* The one length rule: a value of n bytes over max is refused, not cut
 * short, since a shorter region, key or prefix would sign or name
 * something else. The message gives the length, never the value (it may
 * be a key). */
static int too_long(struct ld *l, const char *name, size_t n, size_t max)
{
    return n > max ? fail(l, "%s is %zu bytes long: it is at most %zu", name, n,
                          max)
                   : 0;
}

/* too_long() of name's whole trimmed value. */
static int fits(struct ld *l, const char *name, size_t max)
{
    size_t n;

    trimmed(l, name, &n);
    return too_long(l, name, n, max);
}

static int required(struct ld *l, const char *name, const char *what, char *out,
                    size_t cap)
{
    if (!envv(l, name, out, cap)) {
        return fail(l, "%s is not set: it is %s", name, what);
    }
    return fits(l, name, cap - 1);
}

static void queues_add(struct sink_config *c, const char *p, size_t n)
{
    c->queues = xrealloc(c->queues, (c->n_queues + 1) * sizeof(char *));
    c->queues[c->n_queues++] = xstrndup(p, n);
}

/* "*" alone, or a comma list: split, trim, drop empties, keep order. */
static int parse_queues(struct ld *l, struct sink_config *c, const char *spec)
{
    const char *name = l->nm->queues;
    const char *p = spec;

    if (strcmp(spec, "*") == 0) {
        c->all_queues = true;
        return 0;
    }
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        const char *e = end != NULL ? end : p + strlen(p);
        const char *s = p;

        while (s < e && isspace((unsigned char)*s)) {
            s++;
        }
        while (e > s && isspace((unsigned char)e[-1])) {
            e--;
        }
        if (e - s == 1 && *s == '*') {
            return fail(l,
                        "%s lists `*` among queue names: every queue of the "
                        "tenant is the string \"*\" on its own",
                        name);
        }
        if (e > s) {
            queues_add(c, s, (size_t)(e - s));
        }
        p = end != NULL ? end + 1 : p + strlen(p);
    }
    if (c->n_queues == 0) {
        return fail(l,
                    "%s=%s names no queue. It is a comma separated list of "
                    "queue names, or `*` for every queue of the tenant",
                    name, spec);
    }
    return 0;
}

static int parse_sink_name(struct ld *l, struct sink_config *c)
{
    char raw[VAL_MAX];
    size_t n;

    if (!envv(l, l->nm->sink, raw, sizeof(raw))) {
        snprintf(c->sink, sizeof(c->sink), "default");
        return 0;
    }
    n = strlen(raw);
    bool ok = n >= 1 && n <= SINK_NAME_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char ch = (unsigned char)raw[i];
        ok = isalnum(ch) || ch == '.' || ch == '_' || ch == '-';
    }
    if (!ok) {
        return fail(l,
                    "%s=%s is not a sink name. It is 1..=64 "
                    "characters of [A-Za-z0-9._-]: the name scopes the "
                    "sink's KV documents (lease, intent, commit pointer) and "
                    "anything else could run into another sink's keys. It "
                    "is in no object key: two sinks writing the same queue "
                    "use different %s values",
                    l->nm->sink, raw, l->nm->prefix);
    }
    memcpy(c->sink, raw, n + 1);
    return 0;
}

static int refuse_partitions(struct ld *l)
{
    char raw[VAL_MAX];

    if (l->nm->partitions == NULL ||
        !envv(l, l->nm->partitions, raw, sizeof(raw))) {
        return 0;
    }
    return fail(
        l, "QUEEN_S3_PARTITIONS is set: the static partition list is not "
           "supported in this release. A window may only close at or below "
           "the broker's safeTime, and safeTime is answered by POST "
           "/api/v1/partitions/changed — the endpoint discovery already "
           "uses — so a sink with a static list has no boundary it is "
           "allowed to close at. Unset QUEEN_S3_PARTITIONS; the sink "
           "discovers the partitions of QUEEN_S3_QUEUES itself, at any "
           "cardinality");
}

static int parse_endpoint(struct ld *l, struct sink_config *c)
{
    const char *name = l->nm->endpoint;
    char raw[VAL_MAX];
    struct s3_endpoint ep;
    struct err e;
    size_t n;

    if (required(l, name,
                 "the S3 API base URL, e.g. "
                 "https://s3.eu-central-1.amazonaws.com or http://gw:7070",
                 raw, sizeof(raw)) != 0) {
        return l->err->code;
    }
    /* The S3 client's own reading (scheme, host, port, no path), so what
     * it would refuse when the sink starts stops the boot instead, before
     * the node has opened anything. */
    if (s3_endpoint_parse(&ep, name, raw, l->nm->prefix, &e) != 0) {
        return fail(l, "%s", e.msg);
    }
    n = strlen(raw);
    if (raw[n - 1] == '/') {
        n--; /* the one trailing slash s3_endpoint_parse tolerates */
    }
    /* it took the authority under S3_ENDPOINT_MAX bytes */
    ASSERT(n < sizeof(c->endpoint));
    snprintf(c->endpoint, sizeof(c->endpoint), "%.*s", (int)n, raw);
    return 0;
}

static int parse_bucket(struct ld *l, struct sink_config *c)
{
    const char *name = l->nm->bucket;
    struct s3_endpoint ep;
    struct err e;

    if (required(l, name, "the destination bucket", c->bucket,
                 sizeof(c->bucket)) != 0) {
        return l->err->code;
    }
    if (s3_endpoint_set_bucket(&ep, name, c->bucket, l->nm->prefix, &e) != 0) {
        return fail(l, "%s", e.msg);
    }
    return 0;
}

/* The prefix is measured once, after blanks and outer slashes are trimmed
 * (docs/design/config.md §3: at most 511 bytes); messages quote the value
 * with its slashes, as given (blanks aside). */
static int parse_prefix(struct ld *l, struct sink_config *c)
{
    size_t raw_len;
    const char *raw = trimmed(l, l->nm->prefix, &raw_len);
    const char *s = raw;
    size_t n = raw_len;
    int shown = (int)(raw_len < VAL_MAX ? raw_len : VAL_MAX - 1);

    if (raw_len == 0) {
        snprintf(c->prefix, sizeof(c->prefix), "queen");
        return 0;
    }
    while (n > 0 && *s == '/') {
        s++, n--;
    }
    while (n > 0 && s[n - 1] == '/') {
        n--;
    }
    if (too_long(l, l->nm->prefix, n, sizeof(c->prefix) - 1) != 0) {
        return l->err->code;
    }
    if (n == 0) {
        return fail(l,
                    "%s=%.*s is empty. It is the root every object is "
                    "written under, e.g. `queen` or `lake/queen`",
                    l->nm->prefix, shown, raw);
    }
    for (size_t i = 0; i <= n;) {
        const char *seg = s + i;
        const char *slash = memchr(seg, '/', n - i);
        size_t len = slash != NULL ? (size_t)(slash - seg) : n - i;

        if (len == 0 || (len == 1 && seg[0] == '.') ||
            (len == 2 && seg[0] == '.' && seg[1] == '.')) {
            return fail(l,
                        "%s=%.*s has an empty or relative segment "
                        "(\"%.*s\"). It is a plain path, e.g. `queen` or "
                        "`lake/queen`",
                        l->nm->prefix, shown, raw, (int)len, seg);
        }
        i += len + 1;
    }
    snprintf(c->prefix, sizeof(c->prefix), "%.*s", (int)n, s);
    return 0;
}

static const struct alias sse_t[] = {{"aes256", SINK_SSE_AES256},
                                     {"aws:kms", SINK_SSE_KMS},
                                     {"kms", SINK_SSE_KMS}};
static const struct alias format_t[] = {{"jsonl", SINK_FORMAT_JSONL},
                                        {"json", SINK_FORMAT_JSONL},
                                        {"ndjson", SINK_FORMAT_JSONL},
                                        {"parquet", SINK_FORMAT_PARQUET}};
static const struct alias comp_t[] = {
    {"zstd", JSONL_ZSTD}, {"zst", JSONL_ZSTD},  {"gzip", JSONL_GZIP},
    {"gz", JSONL_GZIP},   {"none", JSONL_NONE}, {"off", JSONL_NONE}};
static const struct alias pq_t[] = {{"zstd", PARQUET_ZSTD},
                                    {"zst", PARQUET_ZSTD},
                                    {"snappy", PARQUET_SNAPPY},
                                    {"snap", PARQUET_SNAPPY}};
static const struct alias layout_t[] = {{"merged", LAYOUT_MERGED},
                                        {"per-partition", LAYOUT_PER_PARTITION},
                                        {"per_partition", LAYOUT_PER_PARTITION},
                                        {"perpartition", LAYOUT_PER_PARTITION}};
static const struct alias align_t[] = {
    {"hour", LAYOUT_ALIGN_HOUR}, {"hourly", LAYOUT_ALIGN_HOUR},
    {"day", LAYOUT_ALIGN_DAY},   {"daily", LAYOUT_ALIGN_DAY},
    {"none", LAYOUT_ALIGN_NONE}, {"off", LAYOUT_ALIGN_NONE}};
static const struct alias start_t[] = {{"latest", ENGINE_START_LATEST},
                                       {"now", ENGINE_START_LATEST},
                                       {"end", ENGINE_START_LATEST},
                                       {"earliest", ENGINE_START_EARLIEST},
                                       {"beginning", ENGINE_START_EARLIEST}};

static int parse_sse(struct ld *l, struct sink_config *c)
{
    const struct names *nm = l->nm;
    char tail[256];
    int v = 0;

    snprintf(tail, sizeof(tail),
             "is not a mode. It is `AES256` (bucket-managed keys) or "
             "`aws:kms` (+ %s). Unset it to send no "
             "x-amz-server-side-encryption header at all",
             nm->kms);
    if (enumv(l,
              &(struct choice){nm->sse, sse_t, ARRAY_LEN(sse_t), SINK_SSE_OFF,
                               tail},
              &v) != 0) {
        return l->err->code;
    }
    c->sse = (enum sink_sse)v;
    if (envv(l, nm->kms, c->sse_kms_key_id, sizeof(c->sse_kms_key_id)) &&
        c->sse != SINK_SSE_KMS) {
        return fail(l,
                    "%s is set but %s=%s — the key id would be ignored and "
                    "every object encrypted with the bucket's own key. Set "
                    "%s=aws:kms, or unset the key id",
                    nm->kms, nm->sse, sink_sse_name(c->sse), nm->sse);
    }
    return 0;
}

static int parse_codecs(struct ld *l, struct sink_config *c)
{
    char tail[256];
    int v = 0;

    if (enumv(l,
              &(struct choice){
                  l->nm->format, format_t, ARRAY_LEN(format_t),
                  SINK_FORMAT_JSONL,
                  "is not a format. It is `jsonl` (one JSON object per line, "
                  "every reader takes it) or `parquet`"},
              &v) != 0) {
        return l->err->code;
    }
    c->format = (enum sink_format)v;
    snprintf(tail, sizeof(tail),
             "is not a codec. It is `zstd`, `gzip` or `none`, and it applies "
             "to `jsonl` objects — a Parquet file's codec is %s",
             l->nm->parquet_codec);
    if (enumv(l,
              &(struct choice){l->nm->compression, comp_t, ARRAY_LEN(comp_t),
                               JSONL_ZSTD, tail},
              &v) != 0) {
        return l->err->code;
    }
    c->compression = (enum jsonl_codec)v;
    if (enumv(l,
              &(struct choice){l->nm->parquet_codec, pq_t, ARRAY_LEN(pq_t),
                               PARQUET_ZSTD,
                               "is not a codec. It is `zstd` or `snappy`"},
              &v) != 0) {
        return l->err->code;
    }
    c->parquet_codec = (enum parquet_codec)v;
    return 0;
}

static int parse_shape(struct ld *l, struct sink_config *c)
{
    int v = 0;

    if (enumv(
            l,
            &(struct choice){
                l->nm->layout, layout_t, ARRAY_LEN(layout_t), LAYOUT_MERGED,
                "is not a layout. It is `merged` (one object per window, "
                "partitions as a column — the only shape that survives a "
                "million lanes) or `per-partition` (one object per window per "
                "partition)"},
            &v) != 0) {
        return l->err->code;
    }
    c->layout = (enum layout_kind)v;
    if (enumv(
            l,
            &(struct choice){
                l->nm->align, align_t, ARRAY_LEN(align_t), LAYOUT_ALIGN_HOUR,
                "is not an alignment. It is `hour`, `day` or `none`; it is the "
                "Hive bucket a window may not straddle, so dt=/hour= are "
                "exact"},
            &v) != 0) {
        return l->err->code;
    }
    c->align = (enum layout_align)v;
    if (enumv(l,
              &(struct choice){
                  l->nm->start, start_t, ARRAY_LEN(start_t),
                  ENGINE_START_LATEST,
                  "is not a start. It is `latest` (a queue with no committed "
                  "pointer starts at the current safeTime) or `earliest` (it "
                  "backfills everything retention still holds)"},
              &v) != 0) {
        return l->err->code;
    }
    c->start = (enum engine_start)v;
    return 0;
}

static int parse_sizes(struct ld *l, struct sink_config *c)
{
    if (bounded(l,
                &(struct bound){
                    l->nm->target_mb, 128, 1, 5120,
                    "the uncompressed buffered bytes a window closes at"},
                &c->target_mb) != 0 ||
        bounded(
            l,
            &(struct bound){
                l->nm->max_window_ms, 300000, 100, 86400000,
                "how long a window may stay open; the lag SLO is about this "
                "plus the safe lag"},
            &c->max_window_ms) != 0) {
        return l->err->code;
    }
    c->target_bytes = c->target_mb * SINK_MIB;
    return 0;
}

/* Is the host of endpoint (scheme://host[:port], already checked) an IPv4
 * or a bracketed IPv6 literal? */
static bool endpoint_is_ip(const char *endpoint)
{
    const char *h = strstr(endpoint, "://");
    char host[SINK_STR_MAX];
    unsigned char addr[16];
    size_t n;

    if (h == NULL) {
        return false;
    }
    h += 3;
    if (*h == '[') {
        return true; /* only an IPv6 literal is written in brackets */
    }
    n = strcspn(h, ":/");
    if (n >= sizeof(host)) {
        return false;
    }
    memcpy(host, h, n);
    host[n] = '\0';
    return inet_pton(AF_INET, host, addr) == 1;
}

/* Virtual-host addressing puts the bucket in front of the endpoint's host
 * ("lake.127.0.0.1"), a name no resolver knows when that host is an IP
 * address: certain to fail, so refused at boot rather than retried. */
static int check_addressing(struct ld *l, const struct sink_config *c)
{
    if (c->path_style || !endpoint_is_ip(c->endpoint)) {
        return 0;
    }
    return fail(l,
                "%s=%s is an IP address, and with %s=false (the default) "
                "the bucket goes in the host name (%s.<address>), which "
                "cannot resolve. Set %s=true to put the bucket in the path",
                l->nm->endpoint, c->endpoint, l->nm->path_style, c->bucket,
                l->nm->path_style);
}

/* The secret key, whole: one longer than SINK_SECRET_MAX bytes is refused
 * by required()'s length check rather than cut short, which would sign
 * every request with another key. The part envv() copied before the
 * refusal is wiped. */
static int parse_secret(struct ld *l, struct sink_config *c)
{
    if (required(l, l->nm->secret, l->nm->secret_what, c->secret_key,
                 sizeof(c->secret_key)) != 0) {
        explicit_bzero(c->secret_key, sizeof(c->secret_key));
        return l->err->code;
    }
    return 0;
}

static int parse_s3(struct ld *l, struct sink_config *c)
{
    if (parse_endpoint(l, c) != 0 ||
        required(l, l->nm->region,
                 "the region label the SigV4 credential scope is signed "
                 "with, e.g. eu-central-1 (any label an S3-compatible "
                 "gateway accepts, commonly us-east-1)",
                 c->region, SINK_REGION_MAX + 1) != 0 ||
        parse_bucket(l, c) != 0 || parse_prefix(l, c) != 0 ||
        required(l, l->nm->access_key, "the S3 access key id", c->access_key,
                 SINK_ACCESS_KEY_MAX + 1) != 0 ||
        parse_secret(l, c) != 0 ||
        boolv(l, l->nm->path_style, false, &c->path_style) != 0 ||
        check_addressing(l, c) != 0) {
        return l->err->code;
    }
    return 0;
}

/* One sink's settings in 5.3's order; spec is the queue list text, or NULL
 * when the caller already filled the queues (a document's JSON list). */
static int parse_settings(struct ld *l, struct sink_config *c, const char *spec)
{
    if ((spec != NULL && parse_queues(l, c, spec) != 0) ||
        parse_sink_name(l, c) != 0 || refuse_partitions(l) != 0 ||
        parse_s3(l, c) != 0 || parse_sse(l, c) != 0 ||
        parse_codecs(l, c) != 0 || parse_shape(l, c) != 0 ||
        parse_sizes(l, c) != 0) {
        return l->err->code;
    }
    return 0;
}

/* The environment sink of the default tenant. */
static int parse_tenant(struct ld *l, struct sink_config *c)
{
    const char *raw = l->env->get(l->env->ctx, "QUEEN_S3_QUEUES");
    size_t cap = raw != NULL ? strlen(raw) + 1 : 1;
    char tmp[8];
    const char *set = NULL;
    int rc;

    for (size_t i = 0; i < ARRAY_LEN(tenant_vars) && set == NULL; i++) {
        if (envv(l, tenant_vars[i], tmp, sizeof(tmp))) {
            set = tenant_vars[i];
        }
    }
    if (set == NULL) {
        return 0; /* no environment sink */
    }
    c->is_set = true;
    /* The whole list, however long: a list cut at a buffer's end would
     * drop the queues past it and mirror a name cut in two. */
    char *spec = xmalloc(cap);
    if (!env_trim(raw, spec, cap)) {
        free(spec);
        return fail(l,
                    "%s is set but QUEEN_S3_QUEUES is not: QUEEN_S3_QUEUES is "
                    "what turns the environment's sink on — the queues it "
                    "writes, or `*` for every queue of the tenant. Set it, or "
                    "unset the sink's QUEEN_S3_* variables to run only the "
                    "sinks a control plane configures",
                    set);
    }
    rc = parse_settings(l, c, spec);
    free(spec);
    return rc;
}

/* QUEEN_S3_CA_FILE: unset, or a regular file this process can read (its
 * PEM is checked by the TLS library at the first https request, whose
 * error then names it). */
static int parse_ca_file(struct ld *l, struct sink_node_config *n)
{
    char raw[VAL_MAX];
    struct stat st;

    n->ca_file[0] = '\0';
    if (!envv(l, "QUEEN_S3_CA_FILE", raw, sizeof(raw)) || raw[0] == '\0') {
        return 0;
    }
    if (strlen(raw) >= sizeof(n->ca_file)) {
        return fail(l, "QUEEN_S3_CA_FILE=%.120s...: longer than %zu bytes", raw,
                    sizeof(n->ca_file) - 1);
    }
    if (stat(raw, &st) != 0 || access(raw, R_OK) != 0) {
        return fail(l,
                    "QUEEN_S3_CA_FILE=%s: cannot read it (%s); it names a "
                    "PEM file of the certificate authorities an https "
                    "endpoint's certificate is checked against",
                    raw, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        return fail(l,
                    "QUEEN_S3_CA_FILE=%s: not a regular file; it names a PEM "
                    "file of certificate authorities",
                    raw);
    }
    memcpy(n->ca_file, raw, strlen(raw) + 1);
    return 0;
}

static int parse_knobs(struct ld *l, struct sink_node_config *n)
{
    if (bounded(l,
                &(struct bound){
                    "QUEEN_S3_CHECKPOINT_EVERY", 20, 1, 100000,
                    "windows between position checkpoints; it bounds the "
                    "re-read after a restart"},
                &n->checkpoint_every) != 0 ||
        bounded(l,
                &(struct bound){
                    "QUEEN_S3_MEMORY_MB", 512, 1, 1048576,
                    "the buffer budget across every queue of every sink this "
                    "node runs, inside the broker's process"},
                &n->memory_mb) != 0 ||
        bounded(
            l,
            &(struct bound){
                "QUEEN_S3_FETCH_CONCURRENCY", 4, 1, 256,
                "in-flight fetch calls per queue; each one is a read of this "
                "node's log on the broker's blocking pool, so it is the "
                "throttle a backfill is held back with"},
            &n->fetch_concurrency) != 0 ||
        bounded(l,
                &(struct bound){
                    "QUEEN_S3_DISCOVERY_INTERVAL_MS", 2000, 10, 3600000,
                    "how often an idle queue asks which partitions moved"},
                &n->discovery_interval_ms) != 0 ||
        bounded(l,
                &(struct bound){
                    "QUEEN_S3_SAFE_GUARD_MS", 5000, 0, 3600000,
                    "subtracted from the node's safeTime before a window may "
                    "close: a margin on the broker's clock, paid in latency"},
                &n->safe_guard_ms) != 0 ||
        bounded(l,
                &(struct bound){
                    "QUEEN_S3_LEASE_TTL_MS", 30000, 1000, 3600000,
                    "how long a queue lease survives without a refresh"},
                &n->lease_ttl_ms) != 0 ||
        bounded(l,
                &(struct bound){
                    "QUEEN_S3_MULTIPART_THRESHOLD_MB", 64, 5, 5120,
                    "objects at or below this go up as a single PUT with a "
                    "Content-MD5; above it they go up as a multipart upload"},
                &n->multipart_threshold_mb) != 0) {
        return l->err->code;
    }
    n->memory_bytes = n->memory_mb * SINK_MIB;
    n->multipart_threshold_bytes = n->multipart_threshold_mb * SINK_MIB;
    return parse_ca_file(l, n);
}

/* QUEEN_TEST_MODE=true: the node runs under a test, which may arm a crash
 * point. A crash point left set in production would crash-loop the node. */
static bool test_mode(const struct ld *l)
{
    char raw[VAL_MAX];
    bool on = false;

    /* Read as every boolean setting is (true/yes/on/1), as the broker reads
     * it for QUEEN_CP_CRASH_AFTER_MARK. */
    return envv(l, "QUEEN_TEST_MODE", raw, sizeof(raw)) &&
           sink_parse_bool(raw, &on) && on;
}

static int parse_crash(struct ld *l, struct sink_node_config *n)
{
    char raw[VAL_MAX];

    n->crash_at = 0;
    if (!envv(l, "QUEEN_S3_CRASH_AT", raw, sizeof(raw))) {
        return 0;
    }
    lower(raw);
    /* `never` (crash_names[0], the default) and its aliases arm nothing, so
     * they need no QUEEN_TEST_MODE. */
    if (strcmp(raw, crash_names[0]) == 0 || strcmp(raw, "off") == 0 ||
        strcmp(raw, "none") == 0) {
        return 0;
    }
    for (size_t i = 1; i < ARRAY_LEN(crash_names); i++) {
        if (strcmp(raw, crash_names[i]) == 0) {
            n->crash_at = (int)i;
            return test_mode(l) ? 0
                                : fail(l,
                                       "QUEEN_S3_CRASH_AT=%s aborts this "
                                       "node at every commit; it is for the "
                                       "crash tests only and needs "
                                       "QUEEN_TEST_MODE=true beside it. "
                                       "Unset it anywhere that is not a test",
                                       raw);
        }
    }
    return fail(l,
                "QUEEN_S3_CRASH_AT=%s is not a fault point. It is "
                "`after_intent`, `mid_upload`, `after_upload`, "
                "`before_commit` or `after_commit` — the crash matrix of the "
                "test plan. Unset it anywhere that is not a test",
                raw);
}

/* Bytes of esc(p) (base/pct.h). */
static size_t esc_len(const char *p)
{
    size_t n = 0;

    for (; *p != '\0'; p++) {
        n += pct_is_plain((unsigned char)*p) ? 1 : 3;
    }
    return n;
}

/* A name whose presence key would not fit the KV store (SINK_INSTANCE_ESC_MAX)
 * stops the boot: the control task could never write its row. */
static int instance_too_long(struct ld *l, const char *inst, const char *suffix,
                             size_t esc)
{
    size_t n = strlen(inst);
    int shown = n > 600 ? 600 : (int)n;

    return fail(l,
                "QUEEN_S3_INSTANCE=%.*s%s is too long: with %s appended it "
                "is %zu bytes once escaped in its presence key "
                "s3:{sink}:node={instance}, and at most %d fit beside a "
                "%d-character sink name in a KV key. Use at most %zu "
                "characters of [A-Za-z0-9._-] (any other byte counts three)",
                shown, inst, (size_t)shown < n ? "…" : "", suffix, esc,
                SINK_INSTANCE_ESC_MAX, SINK_NAME_MAX,
                (size_t)SINK_INSTANCE_ESC_MAX - esc_len(suffix));
}

/* docs/design/protocol.md §1: QUEEN_S3_INSTANCE + "/node-<id>", else
 * "node-<id>@<host>". */
static int build_instance(struct ld *l, struct sink_node_config *n)
{
    char suffix[48];
    char inst[VAL_MAX];
    char host[256];
    const char *sys = l->env->system_hostname;

    if (!envv(l, "QUEEN_RAFT_NODE_ID", n->node_id, sizeof(n->node_id))) {
        snprintf(n->node_id, sizeof(n->node_id), "1");
    }
    snprintf(suffix, sizeof(suffix), "/node-%s", n->node_id);
    if (envv(l, "QUEEN_S3_INSTANCE", inst, sizeof(inst))) {
        size_t a = strlen(inst);
        size_t b = strlen(suffix);
        bool has = a >= b && strcmp(inst + a - b, suffix) == 0;
        size_t esc = esc_len(inst) + (has ? 0 : esc_len(suffix));

        if (esc > SINK_INSTANCE_ESC_MAX) {
            return instance_too_long(l, inst, suffix, esc);
        }
        b = has ? 0 : b;
        ASSERT(a + b < sizeof(n->instance)); /* esc >= a + b */
        memcpy(n->instance, inst, a);
        memcpy(n->instance + a, suffix, b);
        n->instance[a + b] = '\0';
        return 0;
    }
    if (!envv(l, "HOSTNAME", host, sizeof(host))) {
        snprintf(host, sizeof(host), "%s",
                 sys != NULL && sys[0] != '\0' ? sys : "localhost");
    }
    snprintf(n->instance, sizeof(n->instance), "node-%s@%s", n->node_id, host);
    return 0;
}

static void note_ignored(struct ld *l, struct sink_node_config *n)
{
    static const char *const names[] = {"QUEEN_S3_LISTEN",
                                        "QUEEN_S3_LOG_FORMAT"};
    char tmp[8];

    n->ignored[0] = '\0';
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        if (envv(l, names[i], tmp, sizeof(tmp))) {
            size_t k = strlen(n->ignored);
            snprintf(n->ignored + k, sizeof(n->ignored) - k, "%s%s",
                     k > 0 ? ", " : "", names[i]);
        }
    }
}

/* Every value the sink names in keys, /status, metrics and logs is UTF-8:
 * one that is not would make /status invalid JSON and keys no reader
 * expects. The value is not shown (it may be a key). The secret is only
 * signed with, never shown, so it is left to the bucket. */
static int env_utf8_one(struct ld *l, const char *name)
{
    const char *v = l->env->get(l->env->ctx, name);
    size_t n = v != NULL ? strlen(v) : 0;
    size_t ok = json_utf8_prefix(v, n);

    return ok == n ? 0
                   : fail(l,
                          "%s holds bytes that are not UTF-8 (at byte %zu): "
                          "the names it gives go into keys, /status and "
                          "logs, which are UTF-8",
                          name, ok + 1);
}

static int env_utf8(struct ld *l)
{
    for (size_t i = 0; i < ARRAY_LEN(tenant_vars); i++) {
        if (strcmp(tenant_vars[i], "QUEEN_S3_SECRET_KEY") != 0 &&
            env_utf8_one(l, tenant_vars[i]) != 0) {
            return l->err->code;
        }
    }
    return env_utf8_one(l, "QUEEN_S3_INSTANCE");
}

static int load_node(struct ld *l, struct sink_node_config *n)
{
    long cores = l->env->cores;
    uint64_t def = cores / 4 < 1 ? 1 : cores / 4 > 2 ? 2 : (uint64_t)cores / 4;
    uint64_t threads = 0;

    if (preflight(l, "QUEEN_S3_THREADS", def, 1, 64, &threads) != 0 ||
        preflight(l, "QUEEN_S3_SHUTDOWN_GRACE_MS", 30000, 100, 3600000,
                  &n->shutdown_grace_ms) != 0) {
        return l->err->code;
    }
    n->threads = (uint32_t)threads;
    if (parse_knobs(l, n) != 0 || parse_crash(l, n) != 0) {
        return l->err->code;
    }
    if (build_instance(l, n) != 0) {
        return l->err->code;
    }
    note_ignored(l, n);
    return 0;
}

int sink_config_load(struct sink_config *c, struct sink_node_config *n,
                     const struct sink_env *env, struct err *err)
{
    struct ld l = {.nm = &env_names, .env = env, .n = n, .err = err};

    memset(c, 0, sizeof(*c));
    memset(n, 0, sizeof(*n));
    if (env_utf8(&l) != 0 || load_node(&l, n) != 0 ||
        parse_tenant(&l, c) != 0) {
        char fatal[SINK_FATAL_MAX];

        memcpy(fatal, n->fatal, sizeof(fatal));
        sink_config_free(c);
        memset(n, 0, sizeof(*n));
        memcpy(n->fatal, fatal, sizeof(fatal));
        return err->code;
    }
    return 0;
}

static const char *real_getenv(void *ctx, const char *name)
{
    UNUSED(ctx);
    return getenv(name);
}

int sink_config_from_env(struct sink_config *c, struct sink_node_config *n,
                         struct err *err)
{
    char host[256] = "";
    struct sink_env env = {.get = real_getenv, .ctx = NULL};

    env.cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (gethostname(host, sizeof(host) - 1) != 0) {
        host[0] = '\0';
    }
    env.system_hostname = host;
    return sink_config_load(c, n, &env, err);
}

/* --help-config's rows. The defaults are those of the parsers above
 * (tests/unit/test_sink_config.c loads each and compares). */
static const struct sink_config_var vars[] = {
    {"QUEEN_S3_EMBEDDED", "false",
     "run the S3 sink inside this broker (true checks every QUEEN_S3_* "
     "setting at boot)"},
    {"QUEEN_S3_QUEUES", "(unset)",
     "queues the environment's sink writes: a,b or * for every queue; "
     "turns that sink on"},
    {"QUEEN_S3_PARTITIONS", "(unset)",
     "refused: the sink discovers the partitions of its queues itself"},
    {"QUEEN_S3_ENDPOINT", "(required)",
     "S3 API base URL, scheme://host[:port], no path"},
    {"QUEEN_S3_REGION", "(required)",
     "region the SigV4 signature is scoped to (e.g. us-east-1)"},
    {"QUEEN_S3_BUCKET", "(required)", "destination bucket"},
    {PFX, "queen", "root of every object key inside the bucket"},
    {"QUEEN_S3_ACCESS_KEY", "(required)", "S3 access key id"},
    {"QUEEN_S3_SECRET_KEY", "(required)",
     "S3 secret access key (never logged or shown)"},
    {"QUEEN_S3_PATH_STYLE", "false",
     "path-style addressing (endpoint/bucket/key): most gateways and IP "
     "endpoints need true"},
    {"QUEEN_S3_SSE", "(unset)",
     "server-side encryption: AES256 or aws:kms; unset sends no header"},
    {"QUEEN_S3_SSE_KMS_KEY_ID", "(unset)",
     "KMS key id, with QUEEN_S3_SSE=aws:kms only"},
    {"QUEEN_S3_FORMAT", "jsonl", "object format: jsonl or parquet"},
    {"QUEEN_S3_COMPRESSION", "zstd", "JSONL codec: zstd, gzip or none"},
    {"QUEEN_S3_PARQUET_CODEC", "zstd", "Parquet codec: zstd or snappy"},
    {"QUEEN_S3_LAYOUT", "merged",
     "merged (one object per window) or per-partition"},
    {"QUEEN_S3_ALIGN", "hour",
     "Hive bucket a window may not straddle: hour, day or none"},
    {"QUEEN_S3_START", "latest",
     "where a queue with no commit starts: latest or earliest"},
    {"QUEEN_S3_TARGET_MB", "128",
     "uncompressed MiB a window closes at (1..5120)"},
    {"QUEEN_S3_MAX_WINDOW_MS", "300000",
     "longest a window stays open, ms (100..86400000)"},
    {"QUEEN_S3_SINK", "default",
     "sink name scoping its KV documents ([A-Za-z0-9._-], 1..64)"},
    {"QUEEN_S3_THREADS", "(derived)",
     "sink threads (1..64; default cores/4 clamped to 1..2)"},
    {"QUEEN_S3_SHUTDOWN_GRACE_MS", "30000",
     "how long SIGTERM waits for the sink to drain, ms (100..3600000)"},
    {"QUEEN_S3_CHECKPOINT_EVERY", "20",
     "windows between position checkpoints (1..100000)"},
    {"QUEEN_S3_MEMORY_MB", "512",
     "buffer budget of every sink on this node, MiB (1..1048576)"},
    {"QUEEN_S3_FETCH_CONCURRENCY", "4",
     "fetch calls in flight per queue (1..256)"},
    {"QUEEN_S3_DISCOVERY_INTERVAL_MS", "2000",
     "how often an idle queue looks for moved partitions, ms (10..3600000)"},
    {"QUEEN_S3_SAFE_GUARD_MS", "5000",
     "margin below safeTime a window may close at, ms (0..3600000)"},
    {"QUEEN_S3_LEASE_TTL_MS", "30000",
     "queue lease lifetime without a refresh, ms (1000..3600000)"},
    {"QUEEN_S3_MULTIPART_THRESHOLD_MB", "64",
     "objects above this go up as multipart uploads, MiB (5..5120)"},
    {"QUEEN_S3_CA_FILE", "(unset)",
     "PEM file of the certificate authorities an https endpoint's "
     "certificate is checked against (default: the system's)"},
    {"QUEEN_S3_INSTANCE", "(derived)",
     "this node's name in leases (default node-<id>@<hostname>)"},
    {"QUEEN_S3_CRASH_AT", "never",
     "crash point for the crash tests; needs QUEEN_TEST_MODE=true"},
    {"QUEEN_TEST_MODE", "false",
     "allow test-only settings such as QUEEN_S3_CRASH_AT; never in "
     "production"},
    {"QUEEN_S3_LISTEN", "(ignored)",
     "left over from the standalone sink: warned about and ignored"},
    {"QUEEN_S3_LOG_FORMAT", "(ignored)",
     "left over from the standalone sink: warned about and ignored"},
};

const struct sink_config_var *sink_config_var(size_t i)
{
    return i < ARRAY_LEN(vars) ? &vars[i] : NULL;
}

void sink_config_free(struct sink_config *c)
{
    for (size_t i = 0; i < c->n_queues; i++) {
        free(c->queues[i]);
    }
    free(c->queues);
    c->queues = NULL;
    c->n_queues = 0;
}

void sink_config_ignored_warning(const struct sink_node_config *n,
                                 struct buf *out)
{
    struct err e;
    struct err *err = &e;

    if (n->ignored[0] == '\0') {
        return;
    }
    buf_printf(out, err,
               "%s set but ignored: the sink runs inside the broker, which "
               "serves its status and metrics and owns the log format "
               "(left over from the standalone 1.5.0 sink)",
               n->ignored);
}

const char *sink_format_name(enum sink_format f)
{
    return f == SINK_FORMAT_PARQUET ? "parquet" : "jsonl";
}

const char *sink_sse_name(enum sink_sse s)
{
    return s == SINK_SSE_AES256 ? "AES256"
           : s == SINK_SSE_KMS  ? "aws:kms"
                                : "off";
}

const char *sink_config_compression_name(const struct sink_config *c)
{
    return c->format == SINK_FORMAT_PARQUET
               ? parquet_codec_name(c->parquet_codec)
               : jsonl_codec_name(c->compression);
}

/* One field of the boot: its value's bytes go to b->vals, NUL-ended; the
 * pointers are set once every value is in (sink_config_boot). */
static void boot_add(struct sink_boot *b, const char *key, const char *v,
                     struct err *err)
{
    ASSERT(b->n < SINK_BOOT_FIELDS);
    b->f[b->n].key = key;
    b->off[b->n++] = b->vals.len;
    buf_append(&b->vals, v, strlen(v) + 1, err);
}

static void boot_addf(struct sink_boot *b, const char *key, struct err *err,
                      const char *fmt, ...) PRINTF(4, 5);
static void boot_addf(struct sink_boot *b, const char *key, struct err *err,
                      const char *fmt, ...)
{
    char v[128];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(v, sizeof(v), fmt, ap);
    va_end(ap);
    boot_add(b, key, v, err);
}

static void boot_queues(const struct sink_config *c, struct sink_boot *b,
                        struct err *err)
{
    struct buf list;

    if (c->all_queues) {
        boot_add(b, "queues", "*", err);
        return;
    }
    buf_init(&list, BUF_UNLIMITED);
    for (size_t i = 0; i < c->n_queues; i++) {
        buf_printf(&list, err, "%s%s", i > 0 ? "," : "", c->queues[i]);
    }
    boot_add(b, "queues", list.data != NULL ? list.data : "", err);
    buf_free(&list);
}

static void boot_sse(const struct sink_config *c, struct sink_boot *b,
                     struct err *err)
{
    size_t k = strlen(c->sse_kms_key_id);

    if (c->sse == SINK_SSE_KMS && k > 0) {
        boot_addf(b, "sse", err, "aws:kms(\u2026%s)",
                  c->sse_kms_key_id + (k > 4 ? k - 4 : 0));
        return;
    }
    boot_add(b, "sse", sink_sse_name(c->sse), err);
}

int sink_config_boot(const struct sink_config *c,
                     const struct sink_node_config *n, const char *tenant,
                     struct sink_boot *b, struct err *err)
{
    struct err e = {0}; /* the buffer's: err may hold anything */

    memset(b, 0, sizeof(*b));
    buf_init(&b->vals, BUF_UNLIMITED);
    /* The product's version (base/version.h), not SINK_VERSION: a log line
     * shows one version for the whole binary. */
    (void)snprintf(b->head, sizeof(b->head), "queen-s3 %s", QUEEN_VERSION);
    boot_add(b, "tenant", tenant, &e);
    boot_add(b, "sink", c->sink, &e);
    boot_add(b, "instance", n->instance, &e);
    boot_queues(c, b, &e);
    boot_add(b, "partitions", "discovery", &e);
    boot_add(b, "s3", c->endpoint, &e);
    boot_add(b, "bucket", c->bucket, &e);
    boot_add(b, "prefix", c->prefix, &e);
    boot_add(b, "region", c->region, &e);
    boot_add(b, "addressing", c->path_style ? "path-style" : "virtual-host",
             &e);
    boot_sse(c, b, &e);
    boot_add(b, "format", sink_format_name(c->format), &e);
    boot_add(b, "compression", sink_config_compression_name(c), &e);
    boot_add(b, "layout", layout_kind_name(c->layout), &e);
    boot_add(b, "align", layout_align_name(c->align), &e);
    boot_addf(b, "target_mb", &e, "%" PRIu64, c->target_mb);
    boot_addf(b, "max_window_ms", &e, "%" PRIu64, c->max_window_ms);
    boot_add(b, "start",
             c->start == ENGINE_START_EARLIEST ? "earliest" : "latest", &e);
    boot_addf(b, "checkpoint_every", &e, "%" PRIu64, n->checkpoint_every);
    boot_addf(b, "memory_mb", &e, "%" PRIu64, n->memory_mb);
    boot_addf(b, "fetch_concurrency", &e, "%" PRIu64, n->fetch_concurrency);
    boot_addf(b, "discovery_interval_ms", &e, "%" PRIu64,
              n->discovery_interval_ms);
    boot_addf(b, "safe_guard_ms", &e, "%" PRIu64, n->safe_guard_ms);
    boot_addf(b, "lease_ttl_ms", &e, "%" PRIu64, n->lease_ttl_ms);
    boot_addf(b, "multipart_threshold_mb", &e, "%" PRIu64,
              n->multipart_threshold_mb);
    size_t crash =
        (size_t)n->crash_at < ARRAY_LEN(crash_names) ? (size_t)n->crash_at : 0;
    boot_add(b, "crash_at", crash_names[crash], &e);
    if (e.code != 0) {
        sink_boot_free(b);
        return err_set(err, ERR_TOO_BIG, "sink boot line: buffer cap");
    }
    for (size_t i = 0; i < b->n; i++) {
        b->f[i].value = b->vals.data + b->off[i];
    }
    b->f[b->n].key = NULL;
    b->f[b->n].value = NULL;
    return 0;
}

void sink_boot_free(struct sink_boot *b)
{
    buf_free(&b->vals);
    b->n = 0;
}

/* " key=value" for each field, the value quoted and escaped as logfmt's
 * are when it holds a space, '"', '=', '\\' or a control byte: a region,
 * an instance or a queue name with a space would otherwise read as two
 * fields (docs/design/observability.md §3). An empty one (a prefix)
 * stays empty, as docs/design/config.md §6 prints it. */
int sink_config_boot_line(const struct sink_config *c,
                          const struct sink_node_config *n, const char *tenant,
                          struct buf *out, struct err *err)
{
    struct sink_boot b;
    struct err e = {0};
    int rc = sink_config_boot(c, n, tenant, &b, err);

    if (rc != 0) {
        return rc;
    }
    buf_append_str(out, b.head, &e);
    for (size_t i = 0; i < b.n; i++) {
        const char *v = b.f[i].value;
        buf_printf(out, &e, " %s=", b.f[i].key);
        if (v[0] == '\0' || !log_value_needs_quotes(v)) {
            buf_append_str(out, v, &e);
        } else {
            json_escape(out, v, strlen(v), &e);
        }
    }
    sink_boot_free(&b);
    if (e.code != 0) {
        return err_set(err, ERR_TOO_BIG, "sink boot line: buffer cap");
    }
    return 0;
}

/* ---- a control-plane tenant's document (docs/design/config.md §5) -------- */

static const struct names doc_names = {
    "queues",
    NULL,
    "endpoint",
    "region",
    "bucket",
    "prefix",
    "accessKey",
    "the secret key",
    "the S3 secret access key that goes with accessKey",
    "pathStyle",
    "sse",
    "sseKmsKeyId",
    "format",
    "compression",
    "parquetCodec",
    "layout",
    "align",
    "start",
    "targetMb",
    "maxWindowMs",
    "sink",
};

static const char *const doc_fields[] = {
    "queues",      "endpoint",     "region", "bucket",      "prefix",
    "accessKey",   "pathStyle",    "sse",    "sseKmsKeyId", "format",
    "compression", "parquetCodec", "layout", "align",       "start",
    "targetMb",    "maxWindowMs",  "sink",
};

const char *const *sink_config_doc_fields(size_t *n)
{
    *n = ARRAY_LEN(doc_fields);
    return doc_fields;
}

static const char *const node_fields[][2] = {
    {"checkpointEvery", "QUEEN_S3_CHECKPOINT_EVERY"},
    {"memoryMb", "QUEEN_S3_MEMORY_MB"},
    {"fetchConcurrency", "QUEEN_S3_FETCH_CONCURRENCY"},
    {"discoveryIntervalMs", "QUEEN_S3_DISCOVERY_INTERVAL_MS"},
    {"safeGuardMs", "QUEEN_S3_SAFE_GUARD_MS"},
    {"leaseTtlMs", "QUEEN_S3_LEASE_TTL_MS"},
    {"multipartThresholdMb", "QUEEN_S3_MULTIPART_THRESHOLD_MB"},
    {"caFile", "QUEEN_S3_CA_FILE"},
    {"instance", "QUEEN_S3_INSTANCE"},
    {"crashAt", "QUEEN_S3_CRASH_AT"},
};

struct doctab {
    char *value[ARRAY_LEN(doc_fields)]; /* owned; NULL = unset */
    const char *secret;
    int queues_list; /* token of a JSON list of queues, or -1 */
};

static const char *doc_get(void *ctx, const char *name)
{
    const struct doctab *t = ctx;

    if (strcmp(name, doc_names.secret) == 0) {
        return t->secret;
    }
    for (size_t i = 0; i < ARRAY_LEN(doc_fields); i++) {
        if (strcmp(doc_fields[i], name) == 0) {
            return t->value[i];
        }
    }
    return NULL;
}

static const char *kind_name(int type)
{
    switch (type) {
    case JSON_NULL:
        return "null";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NUMBER:
        return "a number";
    case JSON_STRING:
        return "a string";
    default:
        return "a list";
    }
}

void sink_config_not_object(int type, char *out, size_t cap)
{
    snprintf(out, cap,
             "a tenant's sink is a JSON object of its settings, not %s",
             kind_name(type));
}

/* The text a typing refusal shows for value i: a string's contents, else
 * the JSON span. */
static void other_text(const struct json_doc *d, int i, char *out, size_t cap)
{
    struct slice sp = json_span(d, i);

    if (json_type(d, i) == JSON_STRING && sp.len >= 2) {
        sp.ptr++;
        sp.len -= 2;
    }
    snprintf(out, cap, "%.*s", (int)(sp.len < cap ? sp.len : cap - 1), sp.ptr);
}

/* Check one field's JSON type and keep its text for the getter. */
static int doc_field(struct ld *l, const struct json_doc *d, size_t f, int v,
                     struct doctab *t)
{
    const char *key = doc_fields[f];
    int type = json_type(d, v);
    bool is_bool = strcmp(key, "pathStyle") == 0;
    bool is_num =
        strcmp(key, "targetMb") == 0 || strcmp(key, "maxWindowMs") == 0;
    char other[256];
    struct buf b;

    if (type == JSON_NULL || t->value[f] != NULL ||
        (f == 0 && t->queues_list >= 0)) {
        return 0; /* unset, or a duplicate key: the first one counts */
    }
    if (f == 0 && type == JSON_ARRAY) {
        t->queues_list = v;
        return 0;
    }
    if (type == JSON_STRING ||
        (is_bool && type != JSON_NUMBER && type != JSON_ARRAY &&
         type != JSON_OBJECT) ||
        (is_num && type == JSON_NUMBER)) {
        if (type == JSON_STRING) {
            /* As long as the document allows (it is bounded as a whole):
             * each setting's own rule judges the length with its own
             * sentence, and the queue list has none but the document's. */
            buf_init(&b, BUF_UNLIMITED);
            if (json_get_str(d, v, &b, l->err) != 0) {
                buf_free(&b);
                return fail(l, "%s is not a valid string", key);
            }
            if (b.len > 0 && memchr(b.data, '\0', b.len) != NULL) {
                /* every rule would judge only the text before it */
                buf_free(&b);
                return fail(l,
                            "%s holds a NUL (\\u0000), which no setting "
                            "takes",
                            key);
            }
            t->value[f] =
                b.data != NULL ? buf_steal(&b, &(size_t){0}) : xstrdup("");
            return 0;
        }
        other_text(d, v, other, sizeof(other));
        t->value[f] = xstrdup(other);
        return 0;
    }
    other_text(d, v, other, sizeof(other));
    return fail(l, "%s=%s is not %s", key, other,
                is_bool  ? "a boolean: it is true or false"
                : is_num ? "a whole number"
                : f == 0 ? "a list of queues: it is \"*\", \"a,b\" or "
                           "[\"a\",\"b\"]"
                         : "a string");
}

static int doc_keys(struct ld *l, const struct json_doc *d, struct doctab *t)
{
    char key[128];

    for (int k = json_child(d, 0); k >= 0; k = json_next(d, k)) {
        size_t f = 0;

        other_text(d, k, key, sizeof(key));
        if (strcmp(key, "secretKey") == 0) {
            return fail(l, "secretKey is not a field of the document: the "
                           "secret key is passed beside it, so the document "
                           "can be stored and shown without it");
        }
        for (size_t i = 0; i < ARRAY_LEN(node_fields); i++) {
            if (strcmp(key, node_fields[i][0]) == 0) {
                return fail(l,
                            "%s is node-wide, not a setting of one tenant's "
                            "sink: it is %s in the environment of every node",
                            key, node_fields[i][1]);
            }
        }
        while (f < ARRAY_LEN(doc_fields) && strcmp(key, doc_fields[f]) != 0) {
            f++;
        }
        if (f == ARRAY_LEN(doc_fields)) {
            return fail(l,
                        "%s is not a field of a tenant's sink. The fields "
                        "are: queues, endpoint, region, bucket, prefix, "
                        "accessKey, pathStyle, sse, sseKmsKeyId, format, "
                        "compression, parquetCodec, layout, align, start, "
                        "targetMb, maxWindowMs, sink",
                        key);
        }
        if (doc_field(l, d, f, k + 1, t) != 0) {
            return l->err->code;
        }
    }
    return 0;
}

/* A JSON list of queue names: strings, trimmed, no empty list, "*" alone. */
static int doc_queue_list(struct ld *l, const struct json_doc *d, int list,
                          struct sink_config *c)
{
    char name[VAL_MAX] = "";

    for (int e = json_child(d, list); e >= 0; e = json_next(d, e)) {
        if (json_type(d, e) != JSON_STRING) {
            other_text(d, e, name, sizeof(name));
            return fail(l,
                        "queues holds %s, which is not a queue name: the "
                        "list is of strings",
                        name);
        }
        struct buf b;
        buf_init(&b, sizeof(name) - 1);
        if (json_get_str(d, e, &b, l->err) != 0) {
            buf_free(&b);
            return fail(l, "queues holds a name longer than %zu bytes",
                        sizeof(name) - 1);
        }
        if (b.len > 0 && memchr(b.data, '\0', b.len) != NULL) {
            buf_free(&b);
            return fail(l, "queues holds a name with a NUL (\\u0000), "
                           "which the list does not take");
        }
        if (b.data != NULL) {
            memcpy(name, b.data, b.len + 1);
        } else {
            name[0] = '\0';
        }
        buf_free(&b);
        char *s = name;
        size_t n;
        while (isspace((unsigned char)*s)) {
            s++;
        }
        n = strlen(s);
        while (n > 0 && isspace((unsigned char)s[n - 1])) {
            n--;
        }
        if (n == 1 && s[0] == '*') {
            c->all_queues = true;
        } else if (n > 0) {
            queues_add(c, s, n);
        }
    }
    if (c->all_queues && c->n_queues > 0) {
        return fail(l, "queues lists `*` among queue names: every queue of "
                       "the tenant is the string \"*\" on its own");
    }
    if (!c->all_queues && c->n_queues == 0) {
        return fail(l, "queues names no queue. It is a list of queue names, "
                       "or `*` for every queue of the tenant");
    }
    return 0;
}

static void doc_free(struct doctab *t)
{
    for (size_t i = 0; i < ARRAY_LEN(doc_fields); i++) {
        free(t->value[i]);
    }
}

static int doc_load(struct ld *l, const struct json_doc *d, struct doctab *t,
                    struct sink_config *c)
{
    int type = json_type(d, 0);

    if (type != JSON_OBJECT) {
        char why[128];

        sink_config_not_object(type, why, sizeof(why));
        return fail(l, "%s", why);
    }
    if (doc_keys(l, d, t) != 0) {
        return l->err->code;
    }
    if (t->queues_list < 0 && !envv(l, "queues", (char[8]){0}, 8)) {
        return fail(l, "queues is not set: it is the queues the sink writes "
                       "\u2014 a list of queue names (\"a,b\" or "
                       "[\"a\",\"b\"]), or \"*\" for every queue of the "
                       "tenant");
    }
    if (t->queues_list >= 0 && doc_queue_list(l, d, t->queues_list, c) != 0) {
        return l->err->code;
    }
    c->is_set = true;
    return parse_settings(l, c, t->queues_list >= 0 ? NULL : t->value[0]);
}

int sink_config_from_doc(struct sink_config *c, const char *tenant,
                         struct slice doc, const char *secret, struct buf *msg,
                         struct err *err)
{
    struct sink_node_config *n = xcalloc(1, sizeof(*n));
    struct doctab t = {.secret = secret, .queues_list = -1};
    struct sink_env env = {.get = doc_get, .ctx = &t};
    struct ld l = {.nm = &doc_names, .env = &env, .n = n, .err = err};
    struct json_doc d = {0};
    int rc;

    memset(c, 0, sizeof(*c));
    if (tenant == NULL || tenant[0] == '\0') {
        rc = fail(&l, "the tenant is empty: every object key names the "
                      "broker tenant its sink runs for");
    } else if (json_parse(&d, doc.ptr, doc.len, NULL, err) != 0) {
        rc = fail(&l, "a tenant's sink document is not JSON: %s", err->msg);
    } else {
        rc = doc_load(&l, &d, &t, c);
    }
    if (rc != 0) {
        sink_config_free(c);
        if (msg != NULL) {
            struct err e2;
            buf_append_str(msg, n->fatal + strlen("QUEEN_S3_EMBEDDED=true: "),
                           &e2);
        }
    }
    json_doc_free(&d);
    doc_free(&t);
    free(n);
    return rc;
}
