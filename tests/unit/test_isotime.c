/* Tests of the timestamp forms and micro arithmetic (docs/design/formats.md
 * §10). */
#include "base/isotime.h"

#include "base/common.h"

#include "harness.h"

static void expect_iso(int64_t us, const char *want)
{
    char out[32];
    int64_t back = 0;

    isotime_format_us(us, out);
    EXPECT_STR_EQ(out, want);
    EXPECT(isotime_parse_us(out, strlen(out), &back));
    EXPECT_EQ_I64(back, us);
}

TEST(format_and_parse_round_trip)
{
    expect_iso(1788480000000000, "2026-09-04T00:00:00.000000Z");
    expect_iso(1788516000000000, "2026-09-04T10:00:00.000000Z");
    expect_iso(1788516300000000, "2026-09-04T10:05:00.000000Z");
    expect_iso(1791007200000000, "2026-10-03T06:00:00.000000Z");
    expect_iso(1791009458377855, "2026-10-03T06:37:38.377855Z");
    expect_iso(1791009457501942, "2026-10-03T06:37:37.501942Z");
    expect_iso(1791009464741000, "2026-10-03T06:37:44.741000Z");
    expect_iso(1788516221918204, "2026-09-04T10:03:41.918204Z");
    expect_iso(0, "1970-01-01T00:00:00.000000Z");
    expect_iso(-1, "1969-12-31T23:59:59.999999Z");
    expect_iso(-62135596800000000, "0001-01-01T00:00:00.000000Z");
    expect_iso(951782400000000, "2000-02-29T00:00:00.000000Z");
    expect_iso(253402300799999999, "9999-12-31T23:59:59.999999Z");
    expect_iso(-86400000000 - 500000, "1969-12-30T23:59:59.500000Z");
}

TEST(format_of_min_does_not_overflow)
{
    char out[32];

    isotime_format_us(INT64_MIN, out);
    EXPECT(strlen(out) > 20);
    EXPECT(out[strlen(out) - 1] == 'Z');
}

TEST(parser_accepts_short_fractions)
{
    int64_t us = 0;

    EXPECT(isotime_parse_us("2026-09-04T00:00:00Z", 20, &us));
    EXPECT_EQ_I64(us, 1788480000000000);
    EXPECT(isotime_parse_us("2026-09-04T00:00:00.5Z", 22, &us));
    EXPECT_EQ_I64(us, 1788480000500000);
    EXPECT(isotime_parse_us("2026-09-04T00:00:00.000123Z", 27, &us));
    EXPECT_EQ_I64(us, 1788480000000123);
    EXPECT(isotime_parse_us("2026-09-04T23:59:60Z", 20, &us));
    EXPECT_EQ_I64(us, 1788480000000000 + 86400000000);
}

TEST(parser_rejects_everything_else)
{
    static const char *bad[] = {"2026-09-04T00:00:00+00:00",
                                "2026-09-04 00:00:00Z",
                                "2026-09-04T00:00:00.1234567Z",
                                "2026-13-04T00:00:00Z",
                                "2026-09-04T00:00:00",
                                "2026-09-04T00:00:00.Z",
                                "2026-00-04T00:00:00Z",
                                "2026-09-00T00:00:00Z",
                                "2026-09-32T00:00:00Z",
                                "2026-09-04T24:00:00Z",
                                "2026-09-04T00:60:00Z",
                                "2026-09-04T00:00:61Z",
                                "2026-09-04T00:00:00ZZ",
                                "2026-9-04T00:00:00Z",
                                "",
                                "2026-09-04",
                                "+026-09-04T00:00:00Z",
                                "2026-09-04T00:00:00z",
                                "2026-09-04T00:00:00.12aZ"};
    int64_t us = 42;

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        if (isotime_parse_us(bad[i], strlen(bad[i]), &us)) {
            HARNESS_FAIL("accepted %s", bad[i]);
        }
    }
    EXPECT_EQ_I64(us, 42);
}

/* A day its month does not have is refused by both parsers, not carried
 * into the next month (2020-02-30 would otherwise read as 2020-03-01). */
TEST(a_day_its_month_does_not_have_is_refused)
{
    static const char *bad[] = {
        "2020-02-30T00:00:00Z",   "2021-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",   "2100-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",   "2026-06-31T00:00:00Z",
        "2026-09-31T12:00:00.5Z", "2026-11-31T00:00:00.000000Z"};
    static const char *good[] = {
        "2020-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "0000-02-29T00:00:00Z",
        "2026-01-31T00:00:00Z", "2026-04-30T00:00:00Z", "2026-12-31T00:00:00Z"};
    int64_t us = 42;
    int64_t ms = 42;

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        if (isotime_parse_us(bad[i], strlen(bad[i]), &us) ||
            isotime_parse_ms_lenient(bad[i], strlen(bad[i]), &ms)) {
            HARNESS_FAIL("accepted %s", bad[i]);
        }
    }
    EXPECT_EQ_I64(us, 42);
    EXPECT_EQ_I64(ms, 42);
    for (size_t i = 0; i < ARRAY_LEN(good); i++) {
        if (!isotime_parse_us(good[i], strlen(good[i]), &us) ||
            !isotime_parse_ms_lenient(good[i], strlen(good[i]), &ms)) {
            HARNESS_FAIL("refused %s", good[i]);
        }
    }
}

/* What the writer makes is still read back, for every day of years
 * 0000..9999: the day check refuses nothing isotime_format_us() prints. */
TEST(every_day_the_writer_prints_parses_back)
{
    int64_t first = -62167219200LL * ISOTIME_US_S; /* 0000-01-01 */
    int64_t last = 253402300799LL * ISOTIME_US_S;  /* 9999-12-31T23:59:59 */
    size_t refused = 0;
    char out[32];
    int64_t back;

    for (int64_t us = first + 43200123456LL; us <= last; us += ISOTIME_US_D) {
        isotime_format_us(us, out);
        if (!isotime_parse_us(out, strlen(out), &back) || back != us) {
            if (refused++ == 0) {
                HARNESS_FAIL("%s did not read back", out);
            }
        }
    }
    EXPECT_EQ_U64(refused, 0);
}

TEST(lenient_ms_parser_truncates_and_ignores_the_rest)
{
    int64_t ms = 0;

    EXPECT(isotime_parse_ms_lenient("2026-09-04T00:00:00.123456Z", 27, &ms));
    EXPECT_EQ_I64(ms, 1788480000123);
    EXPECT(isotime_parse_ms_lenient("2026-09-04T00:00:00.9+00:00", 27, &ms));
    EXPECT_EQ_I64(ms, 1788480000900);
    EXPECT(isotime_parse_ms_lenient("2026-09-04T00:00:01", 19, &ms));
    EXPECT_EQ_I64(ms, 1788480001000);
    EXPECT(!isotime_parse_ms_lenient("2026-09-04 00:00:01", 19, &ms));
    EXPECT(!isotime_parse_ms_lenient("2026-09-04", 10, &ms));
}

TEST(kv_form_trims_trailing_zeros)
{
    char out[40];

    isotime_format_kv(1788480000000000, out);
    EXPECT_STR_EQ(out, "2026-09-04T00:00:00+00:00");
    isotime_format_kv(1788480000500000, out);
    EXPECT_STR_EQ(out, "2026-09-04T00:00:00.5+00:00");
    isotime_format_kv(1788480000123450, out);
    EXPECT_STR_EQ(out, "2026-09-04T00:00:00.12345+00:00");
    isotime_format_kv(1788480000000001, out);
    EXPECT_STR_EQ(out, "2026-09-04T00:00:00.000001+00:00");
}

TEST(floor_and_next_boundary_are_euclidean)
{
    EXPECT_EQ_I64(isotime_floor(1791009458377855, ISOTIME_US_H),
                  1791007200000000);
    EXPECT_EQ_I64(isotime_floor(-1, ISOTIME_US_H), -ISOTIME_US_H);
    EXPECT_EQ_I64(isotime_floor(-ISOTIME_US_H, ISOTIME_US_H), -ISOTIME_US_H);
    EXPECT_EQ_I64(isotime_floor(0, ISOTIME_US_D), 0);
    EXPECT_EQ_I64(isotime_floor(INT64_MIN, ISOTIME_US_H), INT64_MIN);
    EXPECT_EQ_I64(isotime_floor(INT64_MIN + 1, ISOTIME_US_H), INT64_MIN);
    EXPECT_EQ_I64(isotime_next_boundary(1791007200000000, ISOTIME_US_H),
                  1791007200000000 + ISOTIME_US_H);
    EXPECT_EQ_I64(isotime_next_boundary(1791009458377855, ISOTIME_US_H),
                  1791007200000000 + ISOTIME_US_H);
    EXPECT_EQ_I64(isotime_next_boundary(-1, ISOTIME_US_D), 0);
    EXPECT_EQ_I64(isotime_next_boundary(INT64_MIN, ISOTIME_US_H), INT64_MIN);
    EXPECT_EQ_I64(isotime_next_boundary(INT64_MAX, ISOTIME_US_H), INT64_MAX);
}

TEST(date_and_hour_for_key_paths)
{
    char dt[11];
    char hour[3];

    isotime_date_hour(1788516000000000, dt, hour);
    EXPECT_STR_EQ(dt, "2026-09-04");
    EXPECT_STR_EQ(hour, "10");
    isotime_date_hour(1791009458377855, dt, hour);
    EXPECT_STR_EQ(dt, "2026-10-03");
    EXPECT_STR_EQ(hour, "06");
    isotime_date_hour(INT64_MIN, dt, hour);
    EXPECT_STR_EQ(dt, "1970-01-01");
    EXPECT_STR_EQ(hour, "00");
    isotime_date_hour(-1, dt, hour);
    EXPECT_STR_EQ(dt, "1969-12-31");
    EXPECT_STR_EQ(hour, "23");
}
