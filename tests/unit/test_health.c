/* sink/health: the verdict of docs/design/window.md §13 and its test vectors.
 * */
#include "sink/health.h"

#include "harness.h"

static void json_of(struct health *h, int64_t now, char *out, size_t cap)
{
    struct health_verdict v;
    struct buf b;
    struct err err;

    health_check(h, now, &v);
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(health_json(&v, &b, &err), 0);
    snprintf(out, cap, "%s", b.data != NULL ? b.data : "");
    buf_free(&b);
}

TEST(limit)
{
    EXPECT_EQ_U64(health_limit_ms(300000), 900000);
    EXPECT_EQ_U64(health_limit_ms(1000), 30000);
}

TEST(empty_is_healthy)
{
    struct health *h = health_new(300000);
    char s[256];

    json_of(h, 0, s, sizeof(s));
    EXPECT_STR_EQ(s, "{\"ok\":true,\"queues\":0}");
    health_free(h);
}

TEST(equal_is_healthy_one_more_is_stale)
{
    struct health *h = health_new(300000);
    char s[256];

    health_watch(h, "orders", 0);
    health_report(h, "orders", true, 900000000LL, 10);
    json_of(h, 10, s, sizeof(s));
    EXPECT_STR_EQ(s, "{\"ok\":true,\"queues\":1}");
    health_report(h, "orders", true, 901000000LL, 20);
    json_of(h, 20, s, sizeof(s));
    EXPECT_STR_EQ(s, "{\"ok\":false,\"queue\":\"orders\",\"staleMs\":901000,"
                     "\"limitMs\":900000}");
    health_free(h);
}

TEST(lag_ages_from_the_report)
{
    struct health *h = health_new(1000);
    struct health_verdict v;
    int64_t t0 = 1000000;

    health_watch(h, "q", 0);
    health_report(h, "q", true, 5000000, t0);
    health_check(h, t0 + 25000, &v);
    EXPECT(v.ok);
    health_check(h, t0 + 25001, &v);
    EXPECT(!v.ok);
    EXPECT_EQ_U64(v.stale_ms, 30001);
    /* An older report and a lag-less one change nothing. */
    health_report(h, "q", true, 0, t0 - 1);
    health_report(h, "q", false, 0, t0 + 25001);
    health_check(h, t0 + 25001, &v);
    EXPECT(!v.ok);
    /* A negative lag counts as 0. */
    health_report(h, "q", true, -5, t0 + 25001);
    health_check(h, t0 + 25001, &v);
    EXPECT(v.ok);
    health_free(h);
}

TEST(no_report_ages_from_registration)
{
    struct health *h = health_new(1000);
    struct health_verdict v;

    health_watch(h, "q", 500);
    health_check(h, 30500, &v);
    EXPECT(v.ok);
    health_check(h, 30501, &v);
    EXPECT(!v.ok);
    health_forget(h, "q");
    health_check(h, 99999999, &v);
    EXPECT(v.ok && v.queues == 0);
    health_free(h);
}

TEST(first_stale_by_name)
{
    struct health *h = health_new(1000);
    struct health_verdict v;

    health_watch(h, "zeta", 0);
    health_watch(h, "beta", 0);
    health_watch(h, "alpha", 40000); /* young */
    health_check(h, 50000, &v);
    EXPECT(!v.ok);
    EXPECT_STR_EQ(v.queue, "beta");
    EXPECT_EQ_U64(v.queues, 3);
    health_free(h);
}

/* The lag the verdict judges a queue by, for the sink's row and gauge of a
 * queue stuck here: the last report growing with the clock, or the time
 * since it was first watched. */
TEST(lag_of_one_queue_is_what_the_verdict_judges)
{
    struct health *h = health_new(1000);
    uint64_t lag = 7;

    EXPECT(!health_lag(h, "q", 100, &lag));
    EXPECT_EQ_U64(lag, 7);
    health_watch(h, "q", 500);
    EXPECT(health_lag(h, "q", 30501, &lag));
    EXPECT_EQ_U64(lag, 30001);
    health_report(h, "q", true, 4000000, 1000);
    EXPECT(health_lag(h, "q", 27000, &lag));
    EXPECT_EQ_U64(lag, 30000);
    /* a clock that seems to go back adds nothing */
    EXPECT(health_lag(h, "q", 900, &lag));
    EXPECT_EQ_U64(lag, 4000);
    health_forget(h, "q");
    EXPECT(!health_lag(h, "q", 27000, &lag));
    health_free(h);
}
