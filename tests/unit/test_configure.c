/* Unit tests of the pure part of POST /api/v1/configure (api/configure.c):
 * parsing, merging onto a starting configuration, and the answer. */
#include "harness.h"

#include <string.h>

#include "api/api.h"

static int merge(const char *body, struct store_queue_options *o,
                 struct err *err)
{
    struct api_configure c;
    const char *code = NULL;
    int rc = api_configure_parse(&c, body, strlen(body), &code, err);

    if (rc == 0) {
        rc = api_configure_merge(&c, o, err);
    }
    api_configure_free(&c);
    return rc;
}

TEST(parse_refusals_and_codes)
{
    struct {
        const char *body;
        const char *code;
        const char *msg;
    } cases[] = {
        {"{\"options\":{}}", "bad_request", "queue is required"},
        {"{\"queue\":\"\"}", "bad_request", "queue is required"},
        {"{\"queue\":7}", "bad_request", "queue is required"},
        {"{\"queue\":\"q\",\"mode\":\"upsert\"}", NULL,
         "mode must be \"merge\" or \"replace\", got \"upsert\""},
        {"{\"queue\":\"q\",\"mode\":1}", NULL,
         "mode must be \"merge\" or \"replace\", got 1"},
        {"[1]", "bad_body", "bad configure body: not a JSON object"},
        /* The scanner's sentence, once, after the prefix. */
        {"", "bad_body",
         "bad configure body: invalid JSON at byte 0: unexpected end of text"},
        {"hello", "bad_body",
         "bad configure body: invalid JSON at byte 0: unexpected character"},
    };

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct api_configure c;
        const char *code = "unset";
        struct err err = {0};

        EXPECT_EQ_I64(api_configure_parse(&c, cases[i].body,
                                          strlen(cases[i].body), &code, &err),
                      ERR_INVALID);
        if (cases[i].code == NULL) {
            EXPECT(code == NULL);
        } else {
            EXPECT(code != NULL && strcmp(code, cases[i].code) == 0);
        }
        EXPECT_STR_EQ(err.msg, cases[i].msg);
        api_configure_free(&c);
    }
}

/* The queue name is checked as push checks it (api_check_name). */
TEST(queue_name_is_checked_as_push_does)
{
    char body[1200] = "{\"queue\":\"";
    struct api_configure c;
    const char *code = "unset";
    struct err err;

    memset(body + strlen(body), 'n', 448);
    strcat(body, "\"}");
    EXPECT_EQ_I64(api_configure_parse(&c, body, strlen(body), &code, &err),
                  ERR_TOO_BIG);
    EXPECT(code != NULL && strcmp(code, "too_large") == 0);
    EXPECT_STR_EQ(err.msg,
                  "queue: name of 448 bytes is over the 447-byte limit");
    api_configure_free(&c);
    strcpy(body, "{\"queue\":\"a\\u0000\"}");
    EXPECT_EQ_I64(api_configure_parse(&c, body, strlen(body), &code, &err), 0);
    api_configure_free(&c);
}

/* A field the route reads, given twice, refuses the call (bad_body)
 * instead of being read first-wins. */
TEST(a_repeated_field_is_refused)
{
    static const struct {
        const char *body;
        const char *msg;
    } cases[] = {
        {"{\"queue\":\"a\",\"queue\":\"b\"}",
         "bad configure body: duplicate key \"queue\""},
        {"{\"queue\":\"a\",\"mode\":\"merge\",\"mode\":\"replace\"}",
         "bad configure body: duplicate key \"mode\""},
        {"{\"queue\":\"a\",\"options\":{},\"options\":{\"ttl\":1}}",
         "bad configure body: duplicate key \"options\""},
        {"{\"queue\":\"a\",\"options\":{\"ttl\":1,\"ttl\":2}}",
         "bad configure body: options: duplicate key \"ttl\""},
        {"{\"queue\":\"a\",\"leaseTime\":1,\"l\\u0065aseTime\":2}",
         "bad configure body: duplicate key \"leaseTime\""},
        {"{\"queue\":\"a\",\"task\":\"x\",\"options\":{},\"task\":\"y\"}",
         "bad configure body: duplicate key \"task\""},
    };
    /* Beside an options object the root's option names are not read. */
    const char *ok = "{\"queue\":\"a\",\"ttl\":1,\"ttl\":2,\"other\":1,"
                     "\"other\":2,\"options\":{\"ttl\":3}}";
    struct api_configure c;
    const char *code = "unset";
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        EXPECT_EQ_I64(api_configure_parse(&c, cases[i].body,
                                          strlen(cases[i].body), &code, &err),
                      ERR_INVALID);
        EXPECT(code != NULL && strcmp(code, "bad_body") == 0);
        EXPECT_STR_EQ(err.msg, cases[i].msg);
        api_configure_free(&c);
    }
    EXPECT_EQ_I64(api_configure_parse(&c, ok, strlen(ok), &code, &err), 0);
    api_configure_free(&c);
}

TEST(bad_mode_is_quoted_cut_at_a_whole_utf8_sequence)
{
    /* The mode's JSON text is '"' then 80 two-byte letters: a cut at byte
     * 100 would split the 50th letter. */
    char body[256] = "{\"queue\":\"q\",\"mode\":\"";
    char want[160] = "mode must be \"merge\" or \"replace\", got \"";
    struct api_configure c;
    const char *code = "unset";
    struct err err;

    for (int i = 0; i < 80; i++) {
        strcat(body, "\xc3\xa9");
        if (i < 49) {
            strcat(want, "\xc3\xa9");
        }
    }
    strcat(body, "\"}");
    EXPECT_EQ_I64(api_configure_parse(&c, body, strlen(body), &code, &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(err.msg, want);
    api_configure_free(&c);
}

TEST(merge_types_clamps_and_null)
{
    struct store_queue_options o;
    struct store_queue_options before;
    struct err err = {0};

    store_queue_options_configured(&o);
    EXPECT_EQ_I64(merge("{\"queue\":\"q\",\"options\":{\"ttl\":5,"
                        "\"minPopWaitTime\":70000,\"dedupWindowSeconds\":-1,"
                        "\"retentionEnabled\":true,\"task\":\"t\"}}",
                        &o, &err),
                  0);
    EXPECT_EQ_I64(o.ttl, 5);
    EXPECT_EQ_I64(o.min_pop_wait_time, 60000);
    EXPECT_EQ_I64(o.dedup_window_seconds, 0);
    EXPECT(o.retention_enabled);
    EXPECT_STR_EQ(o.task, "t");
    before = o;
    EXPECT_EQ_I64(merge("{\"queue\":\"q\",\"options\":{\"ttl\":1,"
                        "\"retryLimit\":2147483648}}",
                        &o, &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "retryLimit must be an integer");
    EXPECT(memcmp(&o, &before, sizeof(o)) == 0); /* unchanged */
    EXPECT_EQ_I64(merge("{\"queue\":\"q\",\"options\":{\"ttl\":null,"
                        "\"task\":null,\"retentionEnabled\":null}}",
                        &o, &err),
                  0);
    EXPECT_EQ_I64(o.ttl, 3600);
    EXPECT_STR_EQ(o.task, "");
    EXPECT(!o.retention_enabled);
    EXPECT_EQ_I64(merge("{\"queue\":\"q\",\"options\":{"
                        "\"encryptionEnabled\":\"yes\"}}",
                        &o, &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "encryptionEnabled must be a boolean");
    EXPECT_EQ_I64(merge("{\"queue\":\"q\",\"options\":{"
                        "\"retentionSinkHold\":\"a:b\"}}",
                        &o, &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "retentionSinkHold must match [A-Za-z0-9._-]{0,64}");
    EXPECT_EQ_I64(merge("{\"queue\":\"q\",\"options\":{"
                        "\"retentionSinkHoldMaxSeconds\":59}}",
                        &o, &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "retentionSinkHoldMaxSeconds must be between 60 and "
                           "31536000");
    EXPECT_EQ_I64(merge("{\"queue\":\"q\",\"options\":{"
                        "\"namespace\":\"a\\u0000b\"}}",
                        &o, &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(
        err.msg, "namespace must be a string of at most 64 bytes, without NUL");
    /* the bound counts the decoded bytes: 11 escaped letters are 11 */
    EXPECT_EQ_I64(
        merge("{\"queue\":\"q\",\"options\":{\"task\":\""
              "\\u0041\\u0041\\u0041\\u0041\\u0041\\u0041\\u0041"
              "\\u0041\\u0041\\u0041\\u0041\",\"retentionSinkHold\":\""
              "\\u0041\\u0041\\u0041\\u0041\\u0041\\u0041\\u0041"
              "\\u0041\\u0041\\u0041\\u0041\"}}",
              &o, &err),
        0);
    EXPECT_STR_EQ(o.task, "AAAAAAAAAAA");
    EXPECT_STR_EQ(o.retention_sink_hold, "AAAAAAAAAAA");
    /* 22 x e-acute escaped: 44 bytes decoded, 132 escaped */
    char body[512];
    int at = snprintf(body, sizeof(body),
                      "{\"queue\":\"q\",\"options\":{\"namespace\":\"");
    for (int i = 0; i < 22; i++) {
        at += snprintf(body + at, sizeof(body) - (size_t)at, "\\u00e9");
    }
    snprintf(body + at, sizeof(body) - (size_t)at, "\"}}");
    EXPECT_EQ_I64(merge(body, &o, &err), 0);
    EXPECT_EQ_U64(strlen(o.namespace_), 44);
    /* 65 decoded bytes stay refused however they are written */
    at = snprintf(body, sizeof(body),
                  "{\"queue\":\"q\",\"options\":{\"task\":\"");
    for (int i = 0; i < 65; i++) {
        at += snprintf(body + at, sizeof(body) - (size_t)at, "\\u0041");
    }
    snprintf(body + at, sizeof(body) - (size_t)at, "\"}}");
    EXPECT_EQ_I64(merge(body, &o, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg,
                  "task must be a string of at most 64 bytes, without NUL");
}

TEST(implicit_hold_ceiling_reads_as_604800)
{
    struct store_queue_options o;
    struct err err = {0};

    store_queue_options_implicit(&o);
    EXPECT_EQ_I64(o.retention_sink_hold_max_seconds, 0);
    EXPECT_EQ_I64(merge("{\"queue\":\"q\"}", &o, &err), 0);
    EXPECT_EQ_I64(o.retention_sink_hold_max_seconds, 604800);
    EXPECT_EQ_I64(o.lease_time, 60);
}

TEST(root_options_and_top_level_namespace)
{
    struct store_queue_options o;
    struct err err = {0};

    store_queue_options_configured(&o);
    EXPECT_EQ_I64(merge("{\"queue\":\"q\",\"options\":5,\"ttl\":9,"
                        "\"namespace\":\"n\"}",
                        &o, &err),
                  0);
    EXPECT_EQ_I64(o.ttl, 9);
    EXPECT_STR_EQ(o.namespace_, "n");
    EXPECT_EQ_I64(merge("{\"queue\":\"q\",\"task\":\"top\","
                        "\"namespace\":\"top\",\"options\":{\"namespace\":"
                        "\"in\",\"ttl\":1}}",
                        &o, &err),
                  0);
    EXPECT_STR_EQ(o.namespace_, "in");
    EXPECT_STR_EQ(o.task, "top");
    EXPECT_EQ_I64(o.ttl, 1);
}

TEST(render_shape)
{
    struct store_queue_options o;
    uint8_t id[16] = {0x01, 0x02};
    struct err err = {0};
    struct buf b;

    store_queue_options_configured(&o);
    o.max_size = 12;
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(
        api_configure_render((struct slice){"q\"1", 3}, id, &o, &b, &err), 0);
    EXPECT_STR_EQ(
        b.data,
        "{\"configured\":true,\"queueId\":\"01020000-0000-0000-0000-"
        "000000000000\",\"partitionId\":null,\"queue\":\"q\\\"1\","
        "\"namespace\":\"\",\"task\":\"\",\"storage\":\"segments\","
        "\"options\":{\"priority\":0,\"leaseTime\":300,\"retryLimit\":3,"
        "\"retryDelay\":1000,\"maxSize\":12,\"maxQueueSize\":12,\"ttl\":3600,"
        "\"deadLetterQueue\":true,\"dlqAfterMaxRetries\":true,"
        "\"delayedProcessing\":0,\"windowBuffer\":0,\"retentionSeconds\":0,"
        "\"completedRetentionSeconds\":0,\"retentionEnabled\":false,"
        "\"encryptionEnabled\":false,\"maxWaitTimeSeconds\":0,"
        "\"minPopWaitTime\":0,\"dedupWindowSeconds\":3600,"
        "\"retentionSinkHold\":\"\",\"retentionSinkHoldMaxSeconds\":604800}}");
    buf_free(&b);
}
