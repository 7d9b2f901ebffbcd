/* Tests of the log line renderer (src/base/log.h (1)-(5)): the text
 * format's head, logfmt quoting, JSON escaping, keys, cut lines, the level
 * on a direct call, and a thread's context field. */
#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

#define TS "2026-12-01T10:00:00.000001Z"

static char line[LOG_LINE_MAX];

static const char *render(int format, const char *msg,
                          const struct log_field *f)
{
    struct log_event e = {TS, LOG_INFO, "sink", msg, f};
    size_t n = log_render(line, sizeof(line), format, &e);
    line[n] = '\0';
    return line;
}

TEST(text_is_ts_level_area_then_the_bare_message_and_logfmt_fields)
{
    const struct log_field f[] = {{"queue", "orders"},
                                  {"k", "3"},
                                  {"why", "lease taken by \"b\""},
                                  {NULL, NULL}};
    struct log_event e = {TS, LOG_ERROR, "boot", "FATAL: X=1 is \"bad\"\n",
                          NULL};
    size_t n;

    /* what the reference's log regexes read: "window committed queue=" */
    EXPECT_STR_EQ(render(LOG_FORMAT_TEXT, "window committed", f),
                  TS "  INFO sink: window committed queue=orders k=3 "
                     "why=\"lease taken by \\\"b\\\"\"\n");
    /* the product page's boot line; quotes stay, a newline is escaped */
    n = log_render(line, sizeof(line), LOG_FORMAT_TEXT, &e);
    line[n] = '\0';
    EXPECT_STR_EQ(line, TS " ERROR boot: FATAL: X=1 is \"bad\"\\n\n");
    e.level = LOG_WARN;
    e.msg = "queue fenced";
    e.module = "queen-s3";
    n = log_render(line, sizeof(line), LOG_FORMAT_TEXT, &e);
    line[n] = '\0';
    EXPECT_STR_EQ(line, TS "  WARN queen-s3: queue fenced\n");
    e.level = LOG_DEBUG;
    n = log_render(line, sizeof(line), LOG_FORMAT_TEXT, &e);
    line[n] = '\0';
    EXPECT_STR_EQ(line, TS " DEBUG queen-s3: queue fenced\n");
}

TEST(logfmt_quotes_a_value_with_a_space_a_quote_an_equals_or_nothing)
{
    const struct log_field f[] = {
        {"queue", "orders"}, {"why", "queue \"orders\" does not exist"},
        {"retry_in_s", "5"}, {"empty", ""},
        {"null", NULL},      {"eq", "a=b"},
        {"bs", "c:\\tmp"},   {NULL, NULL},
    };

    EXPECT_STR_EQ(render(LOG_FORMAT_LOGFMT, "the queue does not exist", f),
                  "ts=" TS " level=info area=sink msg=\"the queue does not "
                  "exist\" queue=orders why=\"queue \\\"orders\\\" does not "
                  "exist\" retry_in_s=5 empty=\"\" null=\"\" eq=\"a=b\" "
                  "bs=\"c:\\\\tmp\"\n");
}

TEST(logfmt_escapes_control_bytes_inside_quotes)
{
    const struct log_field f[] = {{"v", "a\nb\tc\rd\x01"
                                        "e\x7f"},
                                  {NULL, NULL}};

    EXPECT_STR_EQ(render(LOG_FORMAT_LOGFMT, "m", f),
                  "ts=" TS " level=info area=sink msg=m "
                  "v=\"a\\nb\\tc\\rd\\u0001e\\u007f\"\n");
}

TEST(json_is_one_object_with_ts_level_area_msg_first_and_escaped_strings)
{
    const struct log_field f[] = {
        {"queue", "orders"},
        {"why", "say \"hi\"\n\\"},
        {"k", LOG_I64(-42)},
        {NULL, NULL},
    };

    EXPECT_STR_EQ(render(LOG_FORMAT_JSON, "window committed", f),
                  "{\"ts\":\"" TS "\",\"level\":\"info\",\"area\":\"sink\","
                  "\"msg\":\"window committed\",\"queue\":\"orders\","
                  "\"why\":\"say \\\"hi\\\"\\n\\\\\",\"k\":\"-42\"}\n");
}

TEST(bytes_that_are_not_utf8_become_the_replacement_character)
{
    const struct log_field f[] = {{"v", "\xc3\xa9\xff\xc3"}, {NULL, NULL}};

    /* é passes; 0xff and a cut sequence become U+FFFD */
    EXPECT_STR_EQ(render(LOG_FORMAT_JSON, "m", f),
                  "{\"ts\":\"" TS "\",\"level\":\"info\",\"area\":\"sink\","
                  "\"msg\":\"m\",\"v\":\"\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\"}"
                  "\n");
}

TEST(a_key_is_cleaned_and_never_repeats_a_head_field)
{
    const struct log_field f[] = {
        {"msg", "x"}, {"a b=c", "y"}, {"", "z"}, {NULL, NULL}};

    EXPECT_STR_EQ(render(LOG_FORMAT_LOGFMT, "m", f),
                  "ts=" TS " level=info area=sink msg=m _msg=x a_b_c=y _=z\n");
}

TEST(a_line_too_long_is_cut_closed_and_marked)
{
    static char big[LOG_LINE_MAX * 2];
    const struct log_field f[] = {{"v", big}, {"after", "x"}, {NULL, NULL}};
    struct log_event e = {TS, LOG_WARN, "s", "m", f};
    size_t n;

    memset(big, '"', sizeof(big) - 1);
    n = log_render(line, sizeof(line), LOG_FORMAT_LOGFMT, &e);
    EXPECT(n <= sizeof(line));
    line[n] = '\0';
    EXPECT(strstr(line, "after=") == NULL);
    EXPECT_STR_EQ(line + n - strlen("\\\"\" truncated=true\n"),
                  "\\\"\" truncated=true\n");
    n = log_render(line, sizeof(line), LOG_FORMAT_JSON, &e);
    EXPECT(n <= sizeof(line));
    line[n] = '\0';
    EXPECT_STR_EQ(line + n - strlen("\\\"\",\"truncated\":true}\n"),
                  "\\\"\",\"truncated\":true}\n");
    n = log_render(line, sizeof(line), LOG_FORMAT_TEXT, &e);
    EXPECT(n <= sizeof(line));
    line[n] = '\0';
    EXPECT(strncmp(line, TS "  WARN s: m v=\"", strlen(TS) + 15) == 0);
    EXPECT_STR_EQ(line + n - strlen("\\\"\" truncated=true\n"),
                  "\\\"\" truncated=true\n");
}

TEST(a_thread_s_context_field_follows_the_call_site_s_unless_it_names_it)
{
    const struct log_field f[] = {
        {"queue", "orders"}, {"k", "3"}, {NULL, NULL}};
    const struct log_field own[] = {{"tenant", "b"}, {NULL, NULL}};
    struct log_field out[LOG_FIELDS_MAX + 2];
    struct log_field many[LOG_FIELDS_MAX + 2];

    EXPECT(log_context_fields(f, out) == f); /* none set */
    log_context_set("tenant", "0193a1b2-acme");
    EXPECT_STR_EQ(
        render(LOG_FORMAT_TEXT, "window committed", log_context_fields(f, out)),
        TS "  INFO sink: window committed queue=orders k=3 "
           "tenant=0193a1b2-acme\n");
    EXPECT_STR_EQ(render(LOG_FORMAT_JSON, "m", log_context_fields(NULL, out)),
                  "{\"ts\":\"" TS "\",\"level\":\"info\",\"area\":"
                  "\"sink\",\"msg\":\"m\",\"tenant\":\"0193a1b2-acme\"}\n");
    /* the call site's own field of that key wins, and is not repeated */
    EXPECT(log_context_fields(own, out) == own);
    /* LOG_FIELDS_MAX fields still get it; one more does not */
    for (size_t i = 0; i <= LOG_FIELDS_MAX; i++) {
        many[i] = (struct log_field){"x", "1"};
    }
    many[LOG_FIELDS_MAX + 1] = (struct log_field){NULL, NULL};
    EXPECT(log_context_fields(many, out) == many);
    many[LOG_FIELDS_MAX] = (struct log_field){NULL, NULL};
    EXPECT(log_context_fields(many, out) == out);
    EXPECT_STR_EQ(out[LOG_FIELDS_MAX].key, "tenant");
    EXPECT(out[LOG_FIELDS_MAX + 1].key == NULL);
    log_context_set(NULL, NULL);
    EXPECT(log_context_fields(f, out) == f);
    /* a NULL value clears it too: the default tenant's sink names none */
    log_context_set("tenant", NULL);
    EXPECT(log_context_fields(f, out) == f);
}

TEST(the_format_setting_takes_text_logfmt_or_json_only)
{
    EXPECT_EQ_I64(log_parse_format("logfmt"), LOG_FORMAT_LOGFMT);
    EXPECT_EQ_I64(log_parse_format("JSON"), LOG_FORMAT_JSON);
    EXPECT_EQ_I64(log_parse_format("Text"), LOG_FORMAT_TEXT);
    EXPECT_EQ_I64(log_parse_format("tracing"), -1);
    EXPECT_EQ_I64(log_parse_format(""), -1);
    EXPECT_STR_EQ(LOG_FMT("%d-%s", 7, "x"), "7-x");
    EXPECT_STR_EQ(LOG_U64(UINT64_MAX), "18446744073709551615");
}

/* Bytes written to stderr while fn runs with the threshold at level. */
static long stderr_bytes(int level, void (*fn)(void))
{
    FILE *tmp = tmpfile();
    int saved = dup(STDERR_FILENO);
    int was = log_threshold;
    long n = -1;

    if (tmp != NULL && saved >= 0 && dup2(fileno(tmp), STDERR_FILENO) >= 0) {
        log_set_level(level);
        fn();
        log_set_level(was);
        n = lseek(fileno(tmp), 0, SEEK_END);
        dup2(saved, STDERR_FILENO);
    }
    if (saved >= 0) {
        close(saved);
    }
    if (tmp != NULL) {
        fclose(tmp);
    }
    return n;
}

static void info_called_directly(void)
{
    log_fields(LOG_INFO, "queen-s3", "boot",
               (const struct log_field[]){{"k", "v"}, {NULL, NULL}});
    log_write(LOG_INFO, "queen-s3", "boot %d", 1);
}

static void warn_called_directly(void)
{
    log_fields(LOG_WARN, "queen-s3", "slow", NULL);
}

TEST(a_direct_call_below_the_threshold_writes_nothing)
{
    EXPECT_EQ_I64(stderr_bytes(LOG_WARN, info_called_directly), 0);
    EXPECT(stderr_bytes(LOG_INFO, info_called_directly) > 0);
    EXPECT(stderr_bytes(LOG_WARN, warn_called_directly) > 0);
}
