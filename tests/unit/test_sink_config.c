/* sink/config: every setting parsed from a table of variables, defaults,
 * aliases, each validation message of docs/design/config.md §5 word for word,
 * the instance rule of docs/design/protocol.md §1 and the boot line of
 * docs/design/config.md §6. */
#include "sink/config.h"

#include <ftw.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/env.h"
#include "base/version.h"
#include "base/xalloc.h"
#include "harness.h"
#include "sink/lease.h"
#include "store/kv.h"
#include "store/store_impl.h"

struct table {
    const char *kv[64]; /* name, value, name, value, ..., NULL */
};

static const char *table_get(void *ctx, const char *name)
{
    const struct table *t = ctx;

    for (size_t i = 0; t->kv[i] != NULL; i += 2) {
        if (strcmp(t->kv[i], name) == 0) {
            return t->kv[i + 1];
        }
    }
    return NULL;
}

#define BASE                                                            \
    "QUEEN_S3_QUEUES", "orders", "QUEEN_S3_ENDPOINT", "http://gw:7070", \
        "QUEEN_S3_REGION", "us-east-1", "QUEEN_S3_BUCKET", "lake",      \
        "QUEEN_S3_ACCESS_KEY", "AKID", "QUEEN_S3_SECRET_KEY", "sekrit-value"

static int load(struct table *t, struct sink_config *c,
                struct sink_node_config *n, struct err *err)
{
    struct sink_env env = {
        .get = table_get, .ctx = t, .cores = 8, .system_hostname = "sys"};

    return sink_config_load(c, n, &env, err);
}

/* Load t, which must succeed; a failure names the table's first variable
 * and the error. */
static void load_ok(struct table *t, struct sink_config *c,
                    struct sink_node_config *n)
{
    struct err err = {0};
    int rc = load(t, c, n, &err);

    if (rc != 0) {
        HARNESS_FAIL("load with %s=%s: rc %d: %s", t->kv[0], t->kv[1], rc,
                     err.msg);
    }
}

/* Load BASE plus name=value: refused with want, as the fatal line and as
 * the error, and with no queues. A failure names the variable. */
static void refuse(const char *name, const char *value, const char *want)
{
    struct table t = {{name, value, BASE, NULL}};
    struct sink_config c;
    struct sink_node_config n;
    struct err err = {0};
    int rc = load(&t, &c, &n, &err);
    char full[SINK_FATAL_MAX];

    if (rc != ERR_INVALID) {
        HARNESS_FAIL("%s=%.60s: rc %d, want ERR_INVALID", name, value, rc);
    }
    snprintf(full, sizeof(full), "QUEEN_S3_EMBEDDED=true: %s", want);
    if (strcmp(n.fatal, full) != 0) {
        HARNESS_FAIL("%s=%.60s: fatal \"%s\" != \"%s\"", name, value, n.fatal,
                     full);
    }
    if (strncmp(err.msg, want, sizeof(err.msg) - 1) != 0) {
        HARNESS_FAIL("%s=%.60s: error \"%s\" does not start \"%s\"", name,
                     value, err.msg, want);
    }
    if (c.queues != NULL) {
        HARNESS_FAIL("%s=%.60s: queues are set", name, value);
    }
}

TEST(defaults)
{
    struct table t = {{BASE, NULL}};
    struct sink_config c;
    struct sink_node_config n;

    load_ok(&t, &c, &n);
    EXPECT(c.is_set);
    EXPECT_STR_EQ(c.sink, "default");
    EXPECT_EQ_U64(c.n_queues, 1);
    EXPECT_STR_EQ(c.queues[0], "orders");
    EXPECT_STR_EQ(c.prefix, "queen");
    EXPECT(c.format == SINK_FORMAT_JSONL && c.compression == JSONL_ZSTD);
    EXPECT(c.parquet_codec == PARQUET_ZSTD && c.layout == LAYOUT_MERGED);
    EXPECT(c.align == LAYOUT_ALIGN_HOUR && c.start == ENGINE_START_LATEST);
    EXPECT(c.sse == SINK_SSE_OFF && !c.path_style);
    EXPECT_EQ_U64(c.target_bytes, 128 * SINK_MIB);
    EXPECT_EQ_U64(c.max_window_ms, 300000);
    EXPECT_EQ_U64(n.threads, 2); /* clamp(8/4, 1, 2) */
    EXPECT_EQ_U64(n.shutdown_grace_ms, 30000);
    EXPECT_EQ_U64(n.checkpoint_every, 20);
    EXPECT_EQ_U64(n.memory_bytes, 512 * SINK_MIB);
    EXPECT_EQ_U64(n.fetch_concurrency, 4);
    EXPECT_EQ_U64(n.discovery_interval_ms, 2000);
    EXPECT_EQ_U64(n.safe_guard_ms, 5000);
    EXPECT_EQ_U64(n.lease_ttl_ms, 30000);
    EXPECT_EQ_U64(n.multipart_threshold_bytes, 64 * SINK_MIB);
    EXPECT_STR_EQ(n.instance, "node-1@sys");
    EXPECT_EQ_I64(n.crash_at, 0);
    EXPECT_STR_EQ(n.ignored, "");
    sink_config_free(&c);
}

/* What a load shows of its settings: the boot line and the node fields it
 * does not print. */
static void fingerprint(struct table *t, struct buf *out)
{
    struct sink_config c;
    struct sink_node_config n;
    struct err err;

    load_ok(t, &c, &n);
    EXPECT_EQ_I64(sink_config_boot_line(&c, &n, "default", out, &err), 0);
    buf_printf(out, &err, " threads=%u grace=%" PRIu64 " ignored=%s set=%d",
               n.threads, n.shutdown_grace_ms, n.ignored, (int)c.is_set);
    sink_config_free(&c);
}

/* --help-config's sink rows (sink_config_var()) show the parsers' own
 * defaults: setting a variable to the default it shows changes nothing. */
TEST(help_defaults_are_the_parsers_defaults)
{
    const struct sink_config_var *v;
    struct table base = {{BASE, NULL}};
    struct buf want;
    size_t n_checked = 0;

    buf_init(&want, BUF_UNLIMITED);
    fingerprint(&base, &want);
    for (size_t i = 0; (v = sink_config_var(i)) != NULL; i++) {
        struct table t = {{v->name, v->def, BASE, NULL}};
        struct buf got;

        EXPECT(strncmp(v->name, "QUEEN_", 6) == 0);
        EXPECT(v->help != NULL && strlen(v->help) >= 10);
        if (v->def[0] == '(') {
            EXPECT(strcmp(v->def, "(required)") == 0 ||
                   strcmp(v->def, "(unset)") == 0 ||
                   strcmp(v->def, "(derived)") == 0 ||
                   strcmp(v->def, "(ignored)") == 0);
            continue;
        }
        buf_init(&got, BUF_UNLIMITED);
        fingerprint(&t, &got);
        if (strcmp(got.data, want.data) != 0) {
            HARNESS_FAIL("%s=%s changes the load:\n  %s\n  %s", v->name, v->def,
                         got.data, want.data);
        }
        buf_free(&got);
        n_checked++;
    }
    EXPECT(n_checked >= 20);
    buf_free(&want);
}

TEST(no_tenant_variable_means_no_env_sink)
{
    struct table t = {
        {"QUEEN_S3_LISTEN", ":1", "QUEEN_S3_THREADS", " 3 ", NULL}};
    struct sink_config c;
    struct sink_node_config n;

    load_ok(&t, &c, &n);
    EXPECT(!c.is_set);
    EXPECT_EQ_U64(n.threads, 3);
    EXPECT_STR_EQ(n.ignored, "QUEEN_S3_LISTEN");
    sink_config_free(&c);
}

TEST(threads_default_clamps)
{
    long cores[] = {1, 4, 7, 64};
    uint32_t want[] = {1, 1, 1, 2};

    for (size_t i = 0; i < ARRAY_LEN(cores); i++) {
        struct table t = {{NULL}};
        struct sink_env env = {table_get, &t, cores[i], NULL};
        struct sink_config c;
        struct sink_node_config n;
        struct err err;

        EXPECT_EQ_I64(sink_config_load(&c, &n, &env, &err), 0);
        EXPECT_EQ_U64(n.threads, want[i]);
        EXPECT_STR_EQ(n.instance, "node-1@localhost");
    }
}

TEST(aliases_and_case)
{
    struct table t = {{"QUEEN_S3_FORMAT",
                       " NDJSON ",
                       "QUEEN_S3_COMPRESSION",
                       "gz",
                       "QUEEN_S3_PARQUET_CODEC",
                       "Snap",
                       "QUEEN_S3_LAYOUT",
                       "per_partition",
                       "QUEEN_S3_ALIGN",
                       "DAILY",
                       "QUEEN_S3_START",
                       "beginning",
                       "QUEEN_S3_SSE",
                       "kms",
                       "QUEEN_S3_SSE_KMS_KEY_ID",
                       "arn:key/abcd1234",
                       "QUEEN_S3_PATH_STYLE",
                       "Yes",
                       "QUEEN_S3_CRASH_AT",
                       "MID_UPLOAD",
                       "QUEEN_TEST_MODE",
                       "True",
                       "QUEEN_S3_PREFIX",
                       "/lake/queen/",
                       "QUEEN_S3_ENDPOINT",
                       "https://gw:7070/",
                       BASE,
                       NULL}};
    struct sink_config c;
    struct sink_node_config n;

    load_ok(&t, &c, &n);
    EXPECT(c.format == SINK_FORMAT_JSONL && c.compression == JSONL_GZIP);
    EXPECT(c.parquet_codec == PARQUET_SNAPPY);
    EXPECT(c.layout == LAYOUT_PER_PARTITION && c.align == LAYOUT_ALIGN_DAY);
    EXPECT(c.start == ENGINE_START_EARLIEST && c.sse == SINK_SSE_KMS);
    EXPECT(c.path_style);
    EXPECT_EQ_I64(n.crash_at, 2);
    EXPECT_STR_EQ(c.prefix, "lake/queen");
    EXPECT_STR_EQ(c.endpoint, "https://gw:7070");
    sink_config_free(&c);
}

/* The page's default, `never`, and its aliases `off` and `none` arm no crash
 * point, so they boot without QUEEN_TEST_MODE, as unset does. */
TEST(crash_at_never_off_and_none_need_no_test_mode)
{
    static const char *const values[] = {"never", "Never", "off", "NONE"};

    for (size_t i = 0; i < ARRAY_LEN(values); i++) {
        struct table t = {{"QUEEN_S3_CRASH_AT", values[i], BASE, NULL}};
        struct sink_config c;
        struct sink_node_config n;

        load_ok(&t, &c, &n);
        EXPECT_EQ_I64(n.crash_at, 0);
        sink_config_free(&c);
    }
}

/* QUEEN_TEST_MODE reads as every boolean does (the broker reads it so for
 * QUEEN_CP_CRASH_AFTER_MARK): 1, yes and on arm a crash point; false and
 * anything that is not a boolean leave it refused. */
TEST(test_mode_is_read_as_a_boolean)
{
    static const char *const on[] = {"true", "1", "yes", "ON"};
    static const char *const off[] = {"false", "0", "no", "maybe"};

    for (size_t i = 0; i < ARRAY_LEN(on); i++) {
        struct table t = {{"QUEEN_S3_CRASH_AT", "after_upload",
                           "QUEEN_TEST_MODE", on[i], BASE, NULL}};
        struct sink_config c;
        struct sink_node_config n;

        load_ok(&t, &c, &n);
        EXPECT_EQ_I64(n.crash_at, 3);
        sink_config_free(&c);
    }
    for (size_t i = 0; i < ARRAY_LEN(off); i++) {
        struct table t = {{"QUEEN_S3_CRASH_AT", "after_upload",
                           "QUEEN_TEST_MODE", off[i], BASE, NULL}};
        struct sink_config c;
        struct sink_node_config n;
        struct err err = {0};

        EXPECT_EQ_I64(load(&t, &c, &n, &err), ERR_INVALID);
        EXPECT(strstr(err.msg, "needs QUEEN_TEST_MODE=true") != NULL);
    }
}

/* A secret key of up to SINK_SECRET_MAX bytes (the control plane's 4 KiB) is
 * kept whole, from the environment and from a tenant's document; a longer
 * one is refused rather than cut short, which would sign with another key. */
TEST(a_secret_of_up_to_4_kib_is_kept_whole)
{
    char *secret = malloc(SINK_SECRET_MAX + 2);
    struct sink_config c;
    struct sink_node_config n;
    struct err err = {0};
    char want[128];
    static const char doc[] =
        "{\"queues\":\"orders\",\"endpoint\":\"http://gw:7070\","
        "\"region\":\"us-east-1\",\"bucket\":\"lake\",\"accessKey\":\"AKID\"}";

    memset(secret, 's', SINK_SECRET_MAX);
    secret[SINK_SECRET_MAX] = '\0';
    struct table t = {{"QUEEN_S3_SECRET_KEY", secret, BASE, NULL}};
    load_ok(&t, &c, &n);
    EXPECT_EQ_U64(strlen(c.secret_key), SINK_SECRET_MAX);
    EXPECT(strcmp(c.secret_key, secret) == 0);
    sink_config_free(&c);
    EXPECT_EQ_I64(sink_config_from_doc(&c, "t1",
                                       (struct slice){doc, strlen(doc)}, secret,
                                       NULL, &err),
                  0);
    EXPECT_EQ_U64(strlen(c.secret_key), SINK_SECRET_MAX);
    sink_config_free(&c);
    strcat(secret, "s");
    snprintf(want, sizeof(want),
             "QUEEN_S3_SECRET_KEY is %d bytes long: it is at most %d",
             SINK_SECRET_MAX + 1, SINK_SECRET_MAX);
    refuse("QUEEN_S3_SECRET_KEY", secret, want);
    free(secret);
}

/* A refused secret leaves none of its bytes in the config: the part that
 * was read before the length check said no is wiped, from the environment
 * and from a tenant's document alike. */
TEST(a_refused_secret_leaves_no_byte_behind)
{
    char *secret = malloc(SINK_SECRET_MAX + 2);
    struct sink_config c;
    struct sink_node_config n;
    struct err err = {0};
    static const char doc[] =
        "{\"queues\":\"orders\",\"endpoint\":\"http://gw:7070\","
        "\"region\":\"us-east-1\",\"bucket\":\"lake\",\"accessKey\":\"AKID\"}";
    static const char zero[SINK_SECRET_MAX + 1];

    memset(secret, 's', SINK_SECRET_MAX + 1);
    secret[SINK_SECRET_MAX + 1] = '\0';
    struct table t = {{"QUEEN_S3_SECRET_KEY", secret, BASE, NULL}};
    EXPECT_EQ_I64(load(&t, &c, &n, &err), ERR_INVALID);
    EXPECT(memcmp(c.secret_key, zero, sizeof(zero)) == 0);
    EXPECT_EQ_I64(sink_config_from_doc(&c, "t1",
                                       (struct slice){doc, strlen(doc)}, secret,
                                       NULL, &err),
                  ERR_INVALID);
    EXPECT(memcmp(c.secret_key, zero, sizeof(zero)) == 0);
    EXPECT(strstr(err.msg, "sss") == NULL);
    free(secret);
}

/* A region, access key or prefix longer than what the S3 client signs
 * with (or than a value holds) is refused with its length, not cut short:
 * a cut region or key signs every request with another one, a cut prefix
 * writes elsewhere. The longest value that fits is kept whole. */
static void long_value(const char *name, size_t max)
{
    char *v = malloc(max + 2);
    char want[160];
    struct sink_config c;
    struct sink_node_config n;

    memset(v, 'a', max);
    v[max] = '\0';
    struct table t = {{name, v, BASE, NULL}};
    load_ok(&t, &c, &n);
    sink_config_free(&c);
    strcat(v, "a");
    snprintf(want, sizeof(want), "%s is %zu bytes long: it is at most %zu",
             name, max + 1, max);
    refuse(name, v, want);
    free(v);
}

TEST(a_value_too_long_to_sign_or_name_with_is_refused)
{
    long_value("QUEEN_S3_REGION", SINK_REGION_MAX);
    long_value("QUEEN_S3_ACCESS_KEY", SINK_ACCESS_KEY_MAX);
    long_value("QUEEN_S3_PREFIX", 511);
}

/* The prefix has one length rule, docs/design/config.md §3's: at most 511
 * bytes once its outer slashes are trimmed, however long the value is, and
 * the message says so. */
TEST(a_prefix_is_measured_once_after_its_slashes_are_trimmed)
{
    char *v = malloc(6002);
    struct sink_config c;
    struct sink_node_config n;

    memset(v, 'a', 5000);
    v[5000] = '\0';
    refuse("QUEEN_S3_PREFIX", v,
           "QUEEN_S3_PREFIX is 5000 bytes long: it is at most 511");
    memset(v, '/', 6000); /* 2000 slashes, lake/q, 3994 slashes */
    memcpy(v + 2000, "lake/q", 6);
    v[6000] = '\0';
    struct table t = {{"QUEEN_S3_PREFIX", v, BASE, NULL}};
    load_ok(&t, &c, &n);
    EXPECT_STR_EQ(c.prefix, "lake/q");
    sink_config_free(&c);
    free(v);
}

TEST(queue_lists)
{
    struct table t = {{"QUEEN_S3_QUEUES", " a , ,b,, c ", BASE, NULL}};
    struct table all = {{"QUEEN_S3_QUEUES", "*", BASE, NULL}};
    struct sink_config c;
    struct sink_node_config n;

    load_ok(&t, &c, &n);
    EXPECT_EQ_U64(c.n_queues, 3);
    EXPECT_STR_EQ(c.queues[0], "a");
    EXPECT_STR_EQ(c.queues[1], "b");
    EXPECT_STR_EQ(c.queues[2], "c");
    sink_config_free(&c);
    load_ok(&all, &c, &n);
    EXPECT(c.all_queues && c.n_queues == 0);
    sink_config_free(&c);
    refuse("QUEEN_S3_QUEUES", "a,*",
           "QUEEN_S3_QUEUES lists `*` among queue names: every queue of the "
           "tenant is the string \"*\" on its own");
    refuse("QUEEN_S3_QUEUES", ", ,",
           "QUEEN_S3_QUEUES=, , names no queue. It is a comma separated list "
           "of queue names, or `*` for every queue of the tenant");
}

TEST(bounded_templates)
{
    refuse("QUEEN_S3_MAX_WINDOW_MS", "50",
           "QUEEN_S3_MAX_WINDOW_MS=50 is outside 100..=86400000. It is how "
           "long a window may stay open; the lag SLO is about this plus the "
           "safe lag");
    refuse("QUEEN_S3_MAX_WINDOW_MS", "86400001",
           "QUEEN_S3_MAX_WINDOW_MS=86400001 is outside 100..=86400000. It is "
           "how long a window may stay open; the lag SLO is about this plus "
           "the safe lag");
    refuse("QUEEN_S3_TARGET_MB", "1.5",
           "QUEEN_S3_TARGET_MB=1.5 is not a whole number. It is the "
           "uncompressed buffered bytes a window closes at, in 1..=5120");
    refuse("QUEEN_S3_TARGET_MB", "-1",
           "QUEEN_S3_TARGET_MB=-1 is not a whole number. It is the "
           "uncompressed buffered bytes a window closes at, in 1..=5120");
    refuse("QUEEN_S3_TARGET_MB", "0",
           "QUEEN_S3_TARGET_MB=0 is outside 1..=5120. It is the uncompressed "
           "buffered bytes a window closes at");
    refuse("QUEEN_S3_SAFE_GUARD_MS", "3600001",
           "QUEEN_S3_SAFE_GUARD_MS=3600001 is outside 0..=3600000. It is "
           "subtracted from the node's safeTime before a window may close: a "
           "margin on the broker's clock, paid in latency");
    refuse("QUEEN_S3_LEASE_TTL_MS", "999",
           "QUEEN_S3_LEASE_TTL_MS=999 is outside 1000..=3600000. It is how "
           "long a queue lease survives without a refresh");
    refuse("QUEEN_S3_MULTIPART_THRESHOLD_MB", "4",
           "QUEEN_S3_MULTIPART_THRESHOLD_MB=4 is outside 5..=5120. It is "
           "objects at or below this go up as a single PUT with a "
           "Content-MD5; above it they go up as a multipart upload");
}

/* QUEEN_S3_CA_FILE: a readable regular file is kept for the transport;
 * a missing file or a directory stops the boot naming the setting. */
TEST(ca_file_must_be_a_readable_file)
{
    char dir[] = "/tmp/queen-ca-XXXXXX";
    char pem[64];
    struct table t = {{"QUEEN_S3_CA_FILE", pem, BASE, NULL}};
    struct sink_config c;
    struct sink_node_config n;
    FILE *f;

    ASSERT(mkdtemp(dir) != NULL);
    snprintf(pem, sizeof(pem), "%s/ca.pem", dir);
    f = fopen(pem, "w");
    ASSERT(f != NULL);
    fputs("-----BEGIN CERTIFICATE-----\n", f);
    fclose(f);
    load_ok(&t, &c, &n);
    EXPECT_STR_EQ(n.ca_file, pem);
    sink_config_free(&c);
    {
        struct table u = {{BASE, NULL}};
        load_ok(&u, &c, &n);
        EXPECT_STR_EQ(n.ca_file, "");
        sink_config_free(&c);
    }
    char want[512];
    snprintf(want, sizeof(want),
             "QUEEN_S3_CA_FILE=%s: not a regular file; it names a PEM file "
             "of certificate authorities",
             dir);
    refuse("QUEEN_S3_CA_FILE", dir, want);
    unlink(pem);
    snprintf(want, sizeof(want),
             "QUEEN_S3_CA_FILE=%s: cannot read it (No such file or "
             "directory); it names a PEM file of the certificate authorities "
             "an https endpoint's certificate is checked against",
             pem);
    refuse("QUEEN_S3_CA_FILE", pem, want);
    rmdir(dir);
}

TEST(preflight_template)
{
    refuse("QUEEN_S3_THREADS", "0",
           "QUEEN_S3_THREADS=0 is not an integer in 1..=64");
    refuse("QUEEN_S3_THREADS", "65",
           "QUEEN_S3_THREADS=65 is not an integer in 1..=64");
    refuse("QUEEN_S3_THREADS", "two",
           "QUEEN_S3_THREADS=two is not an integer in 1..=64");
    refuse("QUEEN_S3_SHUTDOWN_GRACE_MS", "99",
           "QUEEN_S3_SHUTDOWN_GRACE_MS=99 is not an integer in 100..=3600000");
}

TEST(enum_refusals_print_lowercased)
{
    refuse("QUEEN_S3_FORMAT", "CSV",
           "QUEEN_S3_FORMAT=csv is not a format. It is `jsonl` (one JSON "
           "object per line, every reader takes it) or `parquet`");
    refuse("QUEEN_S3_PARQUET_CODEC", "lz4",
           "QUEEN_S3_PARQUET_CODEC=lz4 is not a codec. It is `zstd` or "
           "`snappy`");
    refuse("QUEEN_S3_ALIGN", "week",
           "QUEEN_S3_ALIGN=week is not an alignment. It is `hour`, `day` or "
           "`none`; it is the Hive bucket a window may not straddle, so "
           "dt=/hour= are exact");
    refuse("QUEEN_S3_PATH_STYLE", "Maybe",
           "QUEEN_S3_PATH_STYLE=maybe is not a boolean. It is `true` or "
           "`false`");
    refuse("QUEEN_S3_CRASH_AT", "Sometimes",
           "QUEEN_S3_CRASH_AT=sometimes is not a fault point. It is "
           "`after_intent`, `mid_upload`, `after_upload`, `before_commit` or "
           "`after_commit` — the crash matrix of the test plan. Unset it "
           "anywhere that is not a test");
    refuse("QUEEN_S3_CRASH_AT", "after_commit",
           "QUEEN_S3_CRASH_AT=after_commit aborts this node at every commit; "
           "it is for the crash tests only and needs QUEEN_TEST_MODE=true "
           "beside it. Unset it anywhere that is not a test");
    refuse("QUEEN_S3_SSE_KMS_KEY_ID", "k1",
           "QUEEN_S3_SSE_KMS_KEY_ID is set but QUEEN_S3_SSE=off — the key id "
           "would be ignored and every object encrypted with the bucket's "
           "own key. Set QUEEN_S3_SSE=aws:kms, or unset the key id");
}

static void refuse_ip(const char *endpoint)
{
    char want[SINK_FATAL_MAX];

    snprintf(want, sizeof(want),
             "QUEEN_S3_ENDPOINT=%s is an IP address, and with "
             "QUEEN_S3_PATH_STYLE=false (the default) the bucket goes in the "
             "host name (lake.<address>), which cannot resolve. Set "
             "QUEEN_S3_PATH_STYLE=true to put the bucket in the path",
             endpoint);
    refuse("QUEEN_S3_ENDPOINT", endpoint, want);
}

TEST(an_ip_endpoint_without_path_style_is_refused_with_the_hint)
{
    struct table t4 = {{"QUEEN_S3_ENDPOINT", "http://10.0.0.7:9000",
                        "QUEEN_S3_PATH_STYLE", "true", BASE, NULL}};
    struct table t6 = {{"QUEEN_S3_ENDPOINT", "http://[fd00::7]:9000",
                        "QUEEN_S3_PATH_STYLE", "yes", BASE, NULL}};
    struct table named = {
        {"QUEEN_S3_ENDPOINT", "http://10-0-0-7.example:9000", BASE, NULL}};
    struct sink_config c;
    struct sink_node_config n;

    refuse_ip("http://127.0.0.1:9000");
    refuse_ip("http://10.0.0.7");
    refuse_ip("https://[::1]:9000");
    refuse_ip("http://[fd00::7]");
    load_ok(&t4, &c, &n);
    EXPECT(c.path_style);
    sink_config_free(&c);
    load_ok(&t6, &c, &n);
    EXPECT(c.path_style);
    sink_config_free(&c);
    load_ok(&named, &c, &n); /* a name may resolve with the bucket in front */
    EXPECT(!c.path_style);
    sink_config_free(&c);
}

TEST(names_and_paths)
{
    refuse("QUEEN_S3_BUCKET", "lake/x",
           "QUEEN_S3_BUCKET=lake/x is not a bucket name: it is one name, "
           "with no slash and no space. A prefix inside the bucket is "
           "QUEEN_S3_PREFIX");
    {
        char big[301];
        memset(big, 'b', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        refuse(
            "QUEEN_S3_BUCKET", big,
            "QUEEN_S3_BUCKET=bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
            "bbbbbbbbbbbbbbb... is not a bucket name: it is 300 bytes, "
            "and a bucket name is at most 255");
    }
    refuse("QUEEN_S3_ENDPOINT", "gw:7070",
           "QUEEN_S3_ENDPOINT=gw:7070 has no scheme: it starts with http:// "
           "or https://");
    refuse("QUEEN_S3_ENDPOINT", "http://",
           "QUEEN_S3_ENDPOINT=http:// has no host");
    /* the S3 client's port rule, at boot rather than when the sink starts */
    refuse("QUEEN_S3_ENDPOINT", "http://gw:abc",
           "QUEEN_S3_ENDPOINT=http://gw:abc has a port that is not one");
    refuse("QUEEN_S3_ENDPOINT", "http://gw:70000",
           "QUEEN_S3_ENDPOINT=http://gw:70000 has a port that is not one");
    refuse("QUEEN_S3_ENDPOINT", "http://:7070",
           "QUEEN_S3_ENDPOINT=http://:7070 has no host");
    refuse("QUEEN_S3_ENDPOINT", "http:///lake",
           "QUEEN_S3_ENDPOINT=http:///lake has no host");
    refuse("QUEEN_S3_ENDPOINT", "http://gw/lake",
           "QUEEN_S3_ENDPOINT=http://gw/lake carries a path. The endpoint is "
           "scheme://host[:port] only; a prefix inside the bucket is "
           "QUEEN_S3_PREFIX");
    refuse("QUEEN_S3_PREFIX", "//",
           "QUEEN_S3_PREFIX=// is empty. It is the root every object is "
           "written under, e.g. `queen` or `lake/queen`");
    refuse("QUEEN_S3_PREFIX", "a/../b",
           "QUEEN_S3_PREFIX=a/../b has an empty or relative segment (\"..\")."
           " It is a plain path, e.g. `queen` or `lake/queen`");
    refuse("QUEEN_S3_SINK", "a b",
           "QUEEN_S3_SINK=a b is not a sink name. It is 1..=64 characters of "
           "[A-Za-z0-9._-]: the name scopes the sink's KV documents (lease, "
           "intent, commit pointer) and anything else could run into another "
           "sink's keys. It is in no object key: two sinks writing the same "
           "queue use different QUEEN_S3_PREFIX values");
}

TEST(partitions_refused_whole)
{
    refuse("QUEEN_S3_PARTITIONS", "q:0..3",
           "QUEEN_S3_PARTITIONS is set: the static partition list is not "
           "supported in this release. A window may only close at or below "
           "the broker's safeTime, and safeTime is answered by POST "
           "/api/v1/partitions/changed — the endpoint discovery already "
           "uses — so a sink with a static list has no boundary it is "
           "allowed to close at. Unset QUEEN_S3_PARTITIONS; the sink "
           "discovers the partitions of QUEEN_S3_QUEUES itself, at any "
           "cardinality");
}

TEST(required_and_order)
{
    struct table t = {
        {"QUEEN_S3_BUCKET", "lake", "QUEEN_S3_FORMAT", "csv", NULL}};
    struct table t2 = {
        {"QUEEN_S3_QUEUES", "a", "QUEEN_S3_FORMAT", "csv", NULL}};
    struct sink_config c;
    struct sink_node_config n;
    struct err err;

    EXPECT_EQ_I64(load(&t, &c, &n, &err), ERR_INVALID);
    EXPECT(strstr(n.fatal, "QUEEN_S3_EMBEDDED=true: QUEEN_S3_BUCKET is set "
                           "but QUEEN_S3_QUEUES is not: QUEEN_S3_QUEUES is "
                           "what turns the environment's sink on") != NULL);
    /* The endpoint is checked before the format. */
    EXPECT_EQ_I64(load(&t2, &c, &n, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg,
                  "QUEEN_S3_ENDPOINT is not set: it is the S3 API base URL, "
                  "e.g. https://s3.eu-central-1.amazonaws.com or "
                  "http://gw:7070");
}

TEST(instance_rule)
{
    struct table a = {
        {"QUEEN_S3_INSTANCE", "eu1", "QUEEN_RAFT_NODE_ID", "3", NULL}};
    struct table b = {
        {"QUEEN_S3_INSTANCE", "eu1/node-3", "QUEEN_RAFT_NODE_ID", "3", NULL}};
    struct table h = {{"HOSTNAME", " box7 ", "QUEEN_RAFT_NODE_ID", "2", NULL}};
    struct sink_config c;
    struct sink_node_config n;

    load_ok(&a, &c, &n);
    EXPECT_STR_EQ(n.instance, "eu1/node-3");
    load_ok(&b, &c, &n);
    EXPECT_STR_EQ(n.instance, "eu1/node-3");
    load_ok(&h, &c, &n);
    EXPECT_STR_EQ(n.instance, "node-2@box7");
}

static int unlink_one(const char *p, const struct stat *st, int flag,
                      struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void unlink_tree(const char *dir)
{
    nftw(dir, unlink_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A name of k bytes of ch, plus tail. */
static const char *name_of(char *out, size_t k, char ch, const char *tail)
{
    memset(out, ch, k);
    strcpy(out + k, tail);
    return out;
}

/* Write docs/design/protocol.md §4's presence row (a TTL put) for the longest
 * sink name and an escaped instance of SINK_INSTANCE_ESC_MAX + extra bytes into
 * a real store, as the fsm would; 0 when both the validation and the apply took
 * it. */
static int presence_row_put(size_t extra)
{
    char dir[] = "/tmp/queen-instkey-XXXXXX";
    char sink[SINK_NAME_MAX + 1];
    char inst[SINK_INSTANCE_ESC_MAX + 8];
    char reason[40];
    struct store *st = NULL;
    struct kv_answer a = {0};
    struct buf key;
    struct err err = {0};
    struct kv_op o = {0};
    MDB_txn *txn;
    int rc;

    ASSERT(mkdtemp(dir) != NULL);
    ASSERT(store_open(&st, dir, (uint64_t)1 << 26, &err) == 0);
    name_of(sink, SINK_NAME_MAX, 's', "");
    name_of(inst, SINK_INSTANCE_ESC_MAX + extra - 9, 'a', "/node-1");
    buf_init(&key, BUF_UNLIMITED);
    ASSERT(layout_presence_key(&key, sink, (struct slice){inst, strlen(inst)},
                               &err) == 0);
    o.op = KV_PUT;
    o.ns = (struct slice){LEASE_NS, strlen(LEASE_NS)};
    o.key = (struct slice){key.data, key.len};
    o.value = (struct slice){"{}", 2};
    o.ttl_seconds = 10;
    struct kv_batch b = {STORE_DEFAULT_TENANT, &o, 1};

    rc = kv_validate(&o, 1, false, reason, &err);
    ASSERT(store_wbegin(st, &txn, &err) == 0);
    rc = rc != 0 ? rc : store_kv_apply(st, txn, &b, 1000000, &a, &err);
    if (rc == 0) {
        rc = a.status != 0 ? a.status : store_wcommit(st, txn, 1, 1, &err);
    } else {
        store_wabort(st, txn);
    }
    kv_answer_free(&a);
    buf_free(&key);
    store_close(st);
    unlink_tree(dir);
    return rc;
}

TEST(the_instance_limit_is_what_a_presence_row_holds)
{
    EXPECT_EQ_I64(SINK_INSTANCE_ESC_MAX, 413);
    EXPECT_EQ_I64(presence_row_put(0), 0);
    EXPECT(presence_row_put(1) != 0);
}

/* QUEEN_S3_INSTANCE=inst, 414 bytes once escaped with its suffix, is
 * refused with the message of docs/design/config.md §5. */
static void refuse_instance_of_414(const char *inst)
{
    char want[SINK_FATAL_MAX];

    snprintf(want, sizeof(want),
             "QUEEN_S3_INSTANCE=%s is too long: with /node-1 appended it is "
             "414 bytes once escaped in its presence key "
             "s3:{sink}:node={instance}, and at most 413 fit beside a "
             "64-character sink name in a KV key. Use at most 404 characters "
             "of [A-Za-z0-9._-] (any other byte counts three)",
             inst);
    refuse("QUEEN_S3_INSTANCE", inst, want);
}

/* "/node-1" escapes to "%2Fnode-1" (9 bytes): 404 plain bytes fit. */
TEST(an_instance_too_long_for_its_presence_key_stops_the_boot)
{
    char fit[600];
    char over[600];
    char own[600];
    char wide[600];
    struct table a = {
        {"QUEEN_S3_INSTANCE", name_of(fit, 404, 'a', ""), BASE, NULL}};
    struct table b = {
        {"QUEEN_S3_INSTANCE", name_of(own, 404, 'a', "/node-1"), BASE, NULL}};
    struct table w = {
        {"QUEEN_S3_INSTANCE", name_of(wide, 133, '@', "aaaaa"), BASE, NULL}};
    struct sink_config c;
    struct sink_node_config n;

    load_ok(&a, &c, &n);
    EXPECT_EQ_U64(strlen(n.instance), 411);
    EXPECT(strcmp(n.instance + 404, "/node-1") == 0);
    sink_config_free(&c);
    load_ok(&b, &c, &n); /* the suffix is not doubled */
    EXPECT_STR_EQ(n.instance, own);
    sink_config_free(&c);
    load_ok(&w, &c, &n); /* 3 x 133 + 5 + 9 = 413 */
    sink_config_free(&c);
    refuse_instance_of_414(name_of(over, 405, 'a', ""));
    refuse_instance_of_414(name_of(wide, 133, '@', "aaaaaa"));
}

TEST(a_very_long_instance_is_shown_cut_and_the_secret_never)
{
    static char huge[3001];
    struct table t = {
        {"QUEEN_S3_INSTANCE", name_of(huge, 3000, 'x', ""), BASE, NULL}};
    struct sink_config c;
    struct sink_node_config n;
    struct err err;

    EXPECT_EQ_I64(load(&t, &c, &n, &err), ERR_INVALID);
    EXPECT(strncmp(n.fatal, "QUEEN_S3_EMBEDDED=true: QUEEN_S3_INSTANCE=xxx",
                   45) == 0);
    EXPECT(strstr(n.fatal, "x… is too long: with /node-1 appended it is "
                           "3009 bytes") != NULL);
    EXPECT(strstr(n.fatal, "(any other byte counts three)") != NULL);
    EXPECT(strstr(n.fatal, "sekrit-value") == NULL);
    EXPECT_STR_EQ(n.instance, "");
}

/* The boot line of the settings in t, into b (initialised here). */
static void boot_line_of(struct table *t, struct buf *b)
{
    struct sink_config c;
    struct sink_node_config n;
    struct err err;

    load_ok(t, &c, &n);
    buf_init(b, BUF_UNLIMITED);
    EXPECT_EQ_I64(sink_config_boot_line(&c, &n, "default", b, &err), 0);
    sink_config_free(&c);
}

TEST(boot_line_hides_the_secret)
{
    struct table t = {{"QUEEN_S3_SSE", "aws:kms", "QUEEN_S3_SSE_KMS_KEY_ID",
                       "arn:aws:kms:key/5678wxyz", "QUEEN_S3_QUEUES", "a,b",
                       "QUEEN_S3_PATH_STYLE", "true", BASE, NULL}};
    struct buf b;

    boot_line_of(&t, &b);
    EXPECT_STR_EQ(
        b.data,
        "queen-s3 " QUEEN_VERSION
        " tenant=default sink=default instance=node-1@sys "
        "queues=a,b partitions=discovery s3=http://gw:7070 "
        "bucket=lake prefix=queen region=us-east-1 addressing=path-style "
        "sse=aws:kms(\u2026wxyz) format=jsonl compression=zstd layout=merged "
        "align=hour target_mb=128 max_window_ms=300000 start=latest "
        "checkpoint_every=20 memory_mb=512 fetch_concurrency=4 "
        "discovery_interval_ms=2000 safe_guard_ms=5000 lease_ttl_ms=30000 "
        "multipart_threshold_mb=64 crash_at=never");
    EXPECT(strstr(b.data, "sekrit") == NULL);
    buf_free(&b);
}

/* A value with a space or a quote is quoted, as logfmt quotes it: `region=us
 * east` read as two fields. */
TEST(boot_line_quotes_a_value_a_space_would_split)
{
    struct table t = {{"QUEEN_S3_REGION", "us east", "QUEEN_S3_QUEUES",
                       "a b,we\"ird\\q", "QUEEN_S3_INSTANCE", "n 1",
                       "QUEEN_S3_PATH_STYLE", "true", BASE, NULL}};
    struct buf b;

    boot_line_of(&t, &b);
    EXPECT(strstr(b.data, " instance=\"n 1/node-1\" ") != NULL);
    EXPECT(strstr(b.data, " queues=\"a b,we\\\"ird\\\\q\" ") != NULL);
    EXPECT(strstr(b.data, " region=\"us east\" addressing=") != NULL);
    EXPECT(strstr(b.data, " bucket=lake prefix=queen ") != NULL);
    buf_free(&b);
}

TEST(ignored_warning)
{
    struct table t = {
        {"QUEEN_S3_LISTEN", "0.0.0.0:1", "QUEEN_S3_LOG_FORMAT", "json", NULL}};
    struct sink_config c;
    struct sink_node_config n;
    struct buf b;

    load_ok(&t, &c, &n);
    buf_init(&b, BUF_UNLIMITED);
    sink_config_ignored_warning(&n, &b);
    EXPECT(b.len > 0);
    EXPECT(strstr(b.data, "QUEEN_S3_LISTEN, QUEEN_S3_LOG_FORMAT") != NULL);
    buf_free(&b);
}

/* ---- tenant documents (docs/design/config.md §5) ---- */

#define DOC_BASE                                                \
    "\"endpoint\":\"http://gw:7070\",\"region\":\"us-east-1\"," \
    "\"bucket\":\"lake\",\"accessKey\":\"AK\""

static void doc_refuse(const char *doc, const char *secret, const char *want)
{
    struct sink_config c;
    struct buf msg;
    struct err err = {0};
    const char *got;
    int rc;

    buf_init(&msg, BUF_UNLIMITED);
    rc = sink_config_from_doc(&c, "acme", (struct slice){doc, strlen(doc)},
                              secret, &msg, &err);
    got = msg.data != NULL ? msg.data : "";

    if (rc != ERR_INVALID) {
        HARNESS_FAIL("%s: rc %d, want ERR_INVALID", doc, rc);
    }
    if (rc == 0) {
        sink_config_free(&c);
    }
    if (strcmp(got, want) != 0) {
        HARNESS_FAIL("%s: message \"%s\" != \"%s\"", doc, got, want);
    }
    if (strncmp(err.msg, want, sizeof(err.msg) - 1) != 0) {
        HARNESS_FAIL("%s: error \"%s\" does not start \"%s\"", doc, err.msg,
                     want);
    }
    if (strstr(got, "QUEEN_S3_QUEUES") != NULL) {
        HARNESS_FAIL("%s: the message names QUEEN_S3_QUEUES", doc);
    }
    buf_free(&msg);
}

/* The document {"queues":"a",DOC_BASE<extra>} with secret "s" is refused
 * with want. */
static void doc_refuse_with(const char *extra, const char *want)
{
    char doc[512];

    snprintf(doc, sizeof(doc), "{\"queues\":\"a\"," DOC_BASE "%s}", extra);
    doc_refuse(doc, "s", want);
}

TEST(doc_loads_with_types_and_lists)
{
    const char *doc = "{\"queues\":[\" a \",\"b\"]," DOC_BASE
                      ",\"pathStyle\":true,\"targetMb\":\"60\","
                      "\"maxWindowMs\":60000,\"format\":\"PARQUET\","
                      "\"sink\":null}";
    struct sink_config c;
    struct err err;

    EXPECT_EQ_I64(sink_config_from_doc(&c, "acme",
                                       (struct slice){doc, strlen(doc)}, "s",
                                       NULL, &err),
                  0);
    EXPECT(c.is_set && c.path_style && c.format == SINK_FORMAT_PARQUET);
    EXPECT_EQ_U64(c.n_queues, 2);
    EXPECT_STR_EQ(c.queues[0], "a");
    EXPECT_EQ_U64(c.target_mb, 60);
    EXPECT_EQ_U64(c.max_window_ms, 60000);
    EXPECT_STR_EQ(c.sink, "default");
    EXPECT_STR_EQ(c.secret_key, "s");
    sink_config_free(&c);
}

TEST(doc_refusals)
{
    doc_refuse("[1]", "s",
               "a tenant's sink is a JSON object of its settings, not a list");
    doc_refuse("null", "s",
               "a tenant's sink is a JSON object of its settings, not null");
    doc_refuse("{\"secretKey\":\"x\"}", "s",
               "secretKey is not a field of the document: the secret key is "
               "passed beside it, so the document can be stored and shown "
               "without it");
    doc_refuse("{\"memoryMb\":5}", "s",
               "memoryMb is node-wide, not a setting of one tenant's sink: it "
               "is QUEEN_S3_MEMORY_MB in the environment of every node");
    doc_refuse("{\"partitions\":\"q:1\"}", "s",
               "partitions is not a field of a tenant's sink. The fields are: "
               "queues, endpoint, region, bucket, prefix, accessKey, "
               "pathStyle, sse, sseKmsKeyId, format, compression, "
               "parquetCodec, layout, align, start, targetMb, maxWindowMs, "
               "sink");
    doc_refuse("{" DOC_BASE "}", "s",
               "queues is not set: it is the queues the sink writes \u2014 a "
               "list of queue names (\"a,b\" or [\"a\",\"b\"]), or \"*\" for "
               "every queue of the tenant");
    doc_refuse("{\"queues\":[]," DOC_BASE "}", "s",
               "queues names no queue. It is a list of queue names, or `*` "
               "for every queue of the tenant");
    doc_refuse("{\"queues\":[\"a\",3]," DOC_BASE "}", "s",
               "queues holds 3, which is not a queue name: the list is of "
               "strings");
    doc_refuse("{\"queues\":[\"a\",\"*\"]," DOC_BASE "}", "s",
               "queues lists `*` among queue names: every queue of the tenant "
               "is the string \"*\" on its own");
    doc_refuse_with(
        ",\"targetMb\":1.5",
        "targetMb=1.5 is not a whole number. It is the uncompressed "
        "buffered bytes a window closes at, in 1..=5120");
    doc_refuse_with(",\"targetMb\":true",
                    "targetMb=true is not a whole number");
    doc_refuse_with(",\"targetMb\":-1",
                    "targetMb=-1 is not a whole number. It is the uncompressed "
                    "buffered bytes a window closes at, in 1..=5120");
    doc_refuse_with(",\"pathStyle\":1",
                    "pathStyle=1 is not a boolean: it is true or false");
    doc_refuse_with(
        ",\"pathStyle\":\"maybe\"",
        "pathStyle=maybe is not a boolean. It is `true` or `false`");
    doc_refuse_with(",\"layout\":5", "layout=5 is not a string");
    doc_refuse("{\"queues\":\"a\"," DOC_BASE "}", "  ",
               "the secret key is not set: it is the S3 secret access key "
               "that goes with accessKey");
    doc_refuse_with(
        ",\"prefix\":\"a/..\"",
        "prefix=a/.. has an empty or relative segment (\"..\"). It is "
        "a plain path, e.g. `queen` or `lake/queen`");
    doc_refuse_with(
        ",\"sseKmsKeyId\":\"k\"",
        "sseKmsKeyId is set but sse=off \u2014 the key id would be "
        "ignored and every object encrypted with the bucket's own key. "
        "Set sse=aws:kms, or unset the key id");
    doc_refuse_with(
        ",\"compression\":\"lz4\"",
        "compression=lz4 is not a codec. It is `zstd`, `gzip` or "
        "`none`, and it applies to `jsonl` objects \u2014 a Parquet "
        "file's codec is parquetCodec");
}

TEST(doc_empty_tenant)
{
    struct sink_config c;
    struct err err;

    EXPECT_EQ_I64(
        sink_config_from_doc(&c, "", SLICE_LIT("{}"), "s", NULL, &err),
        ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "the tenant is empty: every object key names the "
                           "broker tenant its sink runs for");
}

/* ---- base/env: the trimming every setting goes through
 * (docs/design/config.md §1) ---- */

TEST(env_trim_trims_and_treats_blank_as_unset)
{
    char out[8];

    memcpy(out, "keep", 5);
    EXPECT(!env_trim(NULL, out, sizeof(out)));
    EXPECT(!env_trim("", out, sizeof(out)));
    EXPECT(!env_trim(" \t\r\n ", out, sizeof(out)));
    EXPECT_STR_EQ(out, "keep");
    EXPECT(env_trim("  a b\t", out, sizeof(out)));
    EXPECT_STR_EQ(out, "a b");
    EXPECT(env_trim("x", out, sizeof(out)));
    EXPECT_STR_EQ(out, "x");
}

TEST(env_is_blank_is_what_env_trim_treats_as_unset)
{
    EXPECT(env_is_blank(NULL, 0));
    EXPECT(env_is_blank(" \t\r\n ", 5));
    EXPECT(!env_is_blank(" a ", 3));
    EXPECT(!env_is_blank("\0", 1)); /* a NUL is not whitespace */
}

TEST(env_trim_cuts_a_long_value_at_the_cap)
{
    char out[4];

    EXPECT(env_trim(" abcdef ", out, sizeof(out)));
    EXPECT_STR_EQ(out, "abc");
    EXPECT(env_trim("abc", out, sizeof(out)));
    EXPECT_STR_EQ(out, "abc");
}

/* A list of 700 queue names (about 5 KB) is read whole, from the
 * environment and from a document's string, and a document's long string
 * setting gets its own rule's sentence. Before, the environment's list was
 * cut at 4095 bytes (the queues past it dropped, the last name cut in two)
 * and the document's refused as "not a valid string". */
TEST(a_long_queue_list_is_read_whole)
{
    struct buf list;
    struct buf doc;
    struct err err;
    struct sink_config c;
    struct sink_node_config n;
    char region[5001];

    buf_init(&list, BUF_UNLIMITED);
    buf_init(&doc, BUF_UNLIMITED);
    for (int i = 0; i < 700; i++) {
        char q[16];
        snprintf(q, sizeof(q), "%squeue-%03d", i == 0 ? "" : ",", i);
        EXPECT_EQ_I64(buf_append_str(&list, q, &err), 0);
    }
    EXPECT(list.len > 4096);
    struct table t = {{"QUEEN_S3_QUEUES", list.data, "QUEEN_S3_ENDPOINT",
                       "http://gw:7070", "QUEEN_S3_REGION", "us-east-1",
                       "QUEEN_S3_BUCKET", "lake", "QUEEN_S3_ACCESS_KEY", "AKID",
                       "QUEEN_S3_SECRET_KEY", "sekrit-value", NULL}};
    load_ok(&t, &c, &n);
    EXPECT_EQ_U64(c.n_queues, 700);
    if (c.n_queues == 700) {
        EXPECT_STR_EQ(c.queues[699], "queue-699");
    }
    sink_config_free(&c);

    EXPECT_EQ_I64(buf_append_str(&doc, "{\"queues\":\"", &err), 0);
    EXPECT_EQ_I64(buf_append_str(&doc, list.data, &err), 0);
    EXPECT_EQ_I64(buf_append_str(&doc, "\"," DOC_BASE "}", &err), 0);
    EXPECT_EQ_I64(
        sink_config_from_doc(&c, "acme", buf_slice(&doc), "s", NULL, &err), 0);
    EXPECT_EQ_U64(c.n_queues, 700);
    if (c.n_queues == 700) {
        EXPECT_STR_EQ(c.queues[699], "queue-699");
    }
    sink_config_free(&c);

    memset(region, 'r', sizeof(region) - 1);
    region[sizeof(region) - 1] = '\0';
    buf_reset(&doc);
    EXPECT_EQ_I64(buf_append_str(&doc, "{\"queues\":\"a\",\"region\":\"", &err),
                  0);
    EXPECT_EQ_I64(buf_append_str(&doc, region, &err), 0);
    EXPECT_EQ_I64(buf_append_str(&doc, "\"," DOC_BASE "}", &err), 0);
    EXPECT_EQ_I64(
        sink_config_from_doc(&c, "acme", buf_slice(&doc), "s", NULL, &err),
        ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "region is 5000 bytes long: it is at most 63");
    buf_free(&list);
    buf_free(&doc);
}

/* QUEEN_S3_EMBEDDED and the other sink booleans read outside the loader:
 * trimmed, blank as unset, the value named lowercased. */
TEST(an_env_boolean_is_trimmed_and_named_lowercased)
{
    char shown[16];
    bool on = true;

    EXPECT_EQ_I64(sink_env_bool(NULL, &on, shown, sizeof(shown)), 0);
    EXPECT(!on);
    EXPECT_EQ_I64(sink_env_bool(" \t\r\n", &on, shown, sizeof(shown)), 0);
    EXPECT(!on);
    EXPECT_EQ_I64(sink_env_bool(" TRUE \n", &on, shown, sizeof(shown)), 0);
    EXPECT(on);
    EXPECT_STR_EQ(shown, "true");
    EXPECT_EQ_I64(sink_env_bool("\tno\r\n", &on, shown, sizeof(shown)), 0);
    EXPECT(!on);
    EXPECT_EQ_I64(sink_env_bool(" MayBe ", &on, shown, sizeof(shown)), -1);
    EXPECT_STR_EQ(shown, "maybe");
    EXPECT_EQ_I64(sink_env_bool("tr ue", &on, shown, sizeof(shown)), -1);
    EXPECT_EQ_I64(
        sink_env_bool("true-and-then-a-long-tail", &on, shown, sizeof(shown)),
        -1);
}

TEST(a_nul_in_a_document_string_is_refused_not_cut)
{
    /* Every rule would judge only the text before the NUL, and the sink
     * would run a value other than the one stored and shown. */
    doc_refuse_with(",\"prefix\":\"ok\\u0000/../x\"",
                    "prefix holds a NUL (\\u0000), which no setting takes");
    doc_refuse_with(",\"format\":\"jsonl\\u0000zzz\"",
                    "format holds a NUL (\\u0000), which no setting takes");
    doc_refuse("{\"queues\":\"a\",\"endpoint\":\"http://gw:7070\\u0000:pw@"
               "evil\",\"region\":\"us-east-1\",\"bucket\":\"lake\","
               "\"accessKey\":\"AK\"}",
               "s", "endpoint holds a NUL (\\u0000), which no setting takes");
    doc_refuse("{\"queues\":[\"a\",\"cq\\u0000zz\"]," DOC_BASE "}", "s",
               "queues holds a name with a NUL (\\u0000), which the list "
               "does not take");
}

TEST(a_queue_name_too_long_for_the_list_is_refused_not_dropped)
{
    size_t n = 5000;
    char *doc = xmalloc(n + 256);
    int at = snprintf(doc, 256, "{\"queues\":[\"a\",\"");

    memset(doc + at, 'q', n);
    snprintf(doc + at + n, 200, "\"]," DOC_BASE "}");
    doc_refuse(doc, "s", "queues holds a name longer than 4095 bytes");
    free(doc);
}

TEST(an_env_value_that_is_not_utf8_is_refused_unshown)
{
    refuse("QUEEN_S3_PREFIX", "p\xff",
           "QUEEN_S3_PREFIX holds bytes that are not UTF-8 (at byte 2): the "
           "names it gives go into keys, /status and logs, which are UTF-8");
    refuse("QUEEN_S3_INSTANCE", "node-\xc3",
           "QUEEN_S3_INSTANCE holds bytes that are not UTF-8 (at byte 6): the "
           "names it gives go into keys, /status and logs, which are UTF-8");
    /* An overlong form is not UTF-8 either. */
    refuse("QUEEN_S3_BUCKET", "\xc0\xaflake",
           "QUEEN_S3_BUCKET holds bytes that are not UTF-8 (at byte 1): the "
           "names it gives go into keys, /status and logs, which are UTF-8");
}
