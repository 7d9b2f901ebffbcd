/* sink/obs: the sixteen families of docs/design/observability.md §2 in order,
 * tenant labels, histograms, number rendering, label escaping, gauge removal,
 * the S3 counters, the Sampler's vector, and promtool's verdict on the text. */
#include "sink/obs.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static char *render(struct obs *o)
{
    struct buf b;
    struct err err;
    size_t n;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(obs_render(o, &b, &err), 0);
    return buf_steal(&b, &n);
}

static bool has_line(const char *text, const char *line)
{
    size_t n = strlen(line);

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0')) {
            return true;
        }
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    return false;
}

TEST(families_declared_in_order_without_samples)
{
    struct obs *o = obs_new();
    char *t = render(o);
    const char *p = t;

    for (int f = 0; f < OBS_FAMILY_COUNT; f++) {
        char help[128], type[128];

        snprintf(help, sizeof(help), "# HELP %s ",
                 obs_family_name((enum obs_family)f));
        snprintf(type, sizeof(type), "# TYPE %s ",
                 obs_family_name((enum obs_family)f));
        const char *h = strstr(p, help);
        EXPECT(h != NULL);
        if (h == NULL) {
            break;
        }
        EXPECT(strstr(h, type) != NULL);
        p = h + 1;
    }
    EXPECT(has_line(t, "# TYPE queen_s3_window_bytes histogram"));
    EXPECT(has_line(t, "# TYPE queen_s3_lag_seconds gauge"));
    EXPECT(has_line(t, "# HELP queen_s3_windows_committed_total Windows "
                       "committed to the lake"));
    free(t);
    obs_free(o);
}

TEST(reference_vectors)
{
    struct obs *o = obs_new();
    struct s3_metrics m;
    char *t;

    s3_metrics_init(&m);
    s3_metrics_add(&m, S3_OP_PUT, 200);
    obs_set_s3(o, "acme", &m);
    obs_counter_add(o, OBS_WINDOWS_COMMITTED, NULL, "orders", NULL, 1);
    obs_counter_add(o, OBS_WINDOWS_COMMITTED, "acme", "orders", NULL, 3);
    obs_observe(o, OBS_WINDOW_RECORDS, "acme", 10);
    obs_gauge_set(o, OBS_BUFFER_BYTES, NULL, NULL, 64);
    obs_gauge_set(o, OBS_SAFE_LAG_SECONDS, "acme", NULL, 0.5);
    obs_counter_add(o, OBS_QUEUES_GIVEN_BACK, NULL, NULL, NULL, 2);
    obs_counter_add(o, OBS_BYTES_WRITTEN, NULL, "orders", "jsonl", 811);
    t = render(o);
    EXPECT(has_line(t, "queen_s3_windows_committed_total{queue=\"orders\"} 1"));
    EXPECT(has_line(t, "queen_s3_windows_committed_total{tenant=\"acme\","
                       "queue=\"orders\"} 3"));
    EXPECT(has_line(t, "queen_s3_s3_requests_total{tenant=\"acme\",op=\"put\","
                       "code=\"200\"} 1"));
    EXPECT(has_line(t, "queen_s3_window_records_bucket{tenant=\"acme\","
                       "le=\"10\"} 1"));
    EXPECT(has_line(t, "queen_s3_window_records_bucket{tenant=\"acme\","
                       "le=\"1\"} 0"));
    EXPECT(has_line(t, "queen_s3_window_records_bucket{tenant=\"acme\","
                       "le=\"+Inf\"} 1"));
    EXPECT(has_line(t, "queen_s3_window_records_sum{tenant=\"acme\"} 10"));
    EXPECT(has_line(t, "queen_s3_window_records_count{tenant=\"acme\"} 1"));
    EXPECT(has_line(t, "queen_s3_buffer_bytes 64"));
    EXPECT(has_line(t, "queen_s3_safe_lag_seconds 0.5"));
    EXPECT(has_line(t, "queen_s3_queues_given_back_total 2"));
    EXPECT(has_line(t, "queen_s3_bytes_written_total{queue=\"orders\","
                       "format=\"jsonl\"} 811"));
    /* Default tenant sorts before tenant="acme" within the family. */
    EXPECT(strstr(t, "{queue=\"orders\"} 1") <
           strstr(t, "{tenant=\"acme\",queue=\"orders\"} 3"));
    free(t);
    obs_free(o);
    s3_metrics_free(&m);
}

TEST(numbers_and_escaping)
{
    char n[40];
    struct buf b;
    struct err err;

    obs_format_number(3, n);
    EXPECT_STR_EQ(n, "3");
    obs_format_number(1.5, n);
    EXPECT_STR_EQ(n, "1.5");
    obs_format_number(6.366447, n);
    EXPECT_STR_EQ(n, "6.366447");
    obs_format_number(1e15, n);
    EXPECT_STR_EQ(n, "1e+15");
    obs_format_number(-2, n);
    EXPECT_STR_EQ(n, "-2");
    obs_format_number(1.0 / 0.0, n);
    EXPECT_STR_EQ(n, "+Inf");
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(obs_escape_label(&b, "a\\b\"c\nd", &err), 0);
    EXPECT_STR_EQ(b.data, "a\\\\b\\\"c\\nd");
    buf_free(&b);
}

TEST(byte_histogram_first_bucket_at_or_above)
{
    struct obs *o = obs_new();
    char *t;

    obs_observe(o, OBS_WINDOW_BYTES, NULL, 1048576);
    obs_observe(o, OBS_WINDOW_BYTES, NULL, 1048577);
    obs_observe(o, OBS_WINDOW_BYTES, NULL, 2e9);
    t = render(o);
    EXPECT(has_line(t, "queen_s3_window_bytes_bucket{le=\"1048576\"} 1"));
    EXPECT(has_line(t, "queen_s3_window_bytes_bucket{le=\"4194304\"} 2"));
    EXPECT(has_line(t, "queen_s3_window_bytes_bucket{le=\"1073741824\"} 2"));
    EXPECT(has_line(t, "queen_s3_window_bytes_bucket{le=\"+Inf\"} 3"));
    EXPECT(has_line(t, "queen_s3_window_bytes_count 3"));
    free(t);
    obs_free(o);
}

TEST(queue_gauges_removed_counters_stay)
{
    struct obs *o = obs_new();
    char *t;

    obs_gauge_set(o, OBS_LAG_SECONDS, NULL, "q", 1.25);
    obs_gauge_set(o, OBS_DISCOVERY_PARTITIONS, NULL, "q", 4);
    obs_gauge_set(o, OBS_CHECKPOINT_AGE_WINDOWS, NULL, "q", 2);
    obs_counter_add(o, OBS_RECORDS_WRITTEN, NULL, "q", NULL, 30);
    t = render(o);
    EXPECT(has_line(t, "queen_s3_lag_seconds{queue=\"q\"} 1.25"));
    free(t);
    obs_queue_stopped(o, NULL, "q");
    t = render(o);
    EXPECT(strstr(t, "queen_s3_lag_seconds{") == NULL);
    EXPECT(strstr(t, "queen_s3_discovery_partitions{") == NULL);
    EXPECT(strstr(t, "queen_s3_checkpoint_age_windows{") == NULL);
    EXPECT(has_line(t, "queen_s3_records_written_total{queue=\"q\"} 30"));
    EXPECT(has_line(t, "# TYPE queen_s3_lag_seconds gauge"));
    free(t);
    obs_free(o);
}

TEST(tenant_removed_drops_everything_of_it)
{
    struct obs *o = obs_new();
    struct s3_metrics m;
    char *t;

    s3_metrics_init(&m);
    s3_metrics_add(&m, S3_OP_GET, 404);
    obs_set_s3(o, "acme", &m);
    obs_counter_add(o, OBS_RECORDS_LOST, "acme", "q", NULL, 1);
    obs_counter_add(o, OBS_RECORDS_LOST, NULL, "q", NULL, 1);
    obs_tenant_removed(o, "acme");
    t = render(o);
    EXPECT(strstr(t, "acme") == NULL);
    EXPECT(has_line(t, "queen_s3_records_lost_total{queue=\"q\"} 1"));
    free(t);
    obs_free(o);
    s3_metrics_free(&m);
}

TEST(sampler_vector)
{
    struct obs_sampler s;
    uint64_t n = 99;

    obs_sampler_init(&s, 1000);
    EXPECT(obs_sampler_tick(&s, 10000, &n) && n == 0);
    EXPECT(!obs_sampler_tick(&s, 10100, &n));
    EXPECT(!obs_sampler_tick(&s, 10999, &n));
    EXPECT(obs_sampler_tick(&s, 11000, &n));
    EXPECT_EQ_U64(n, 2);
    EXPECT(obs_sampler_tick(&s, 12000, &n) && n == 0);
    obs_sampler_destroy(&s);
    obs_sampler_init(&s, 1000);
    EXPECT(obs_sampler_tick(&s, 10000, &n));
    EXPECT(!obs_sampler_tick(&s, 9000, &n)); /* backwards */
    EXPECT(obs_sampler_tick(&s, 11000, &n));
    EXPECT_EQ_U64(n, 1);
    obs_sampler_destroy(&s);
}

/* promtool check metrics reads the exposition on stdin; exit 0 = valid. */
TEST(promtool_accepts_the_text)
{
    struct obs *o = obs_new();
    struct s3_metrics m;
    char path[] = "/tmp/test_obs_XXXXXX";
    char cmd[256];
    char *t;
    int fd, rc;

    /* scripts/setup.sh installs promtool (package prometheus): without
     * it the test fails, it does not pass unchecked. */
    if (access("/usr/bin/promtool", X_OK) != 0) {
        HARNESS_FAIL("/usr/bin/promtool is missing (scripts/setup.sh installs "
                     "it with the package prometheus)");
        obs_free(o);
        return;
    }
    s3_metrics_init(&m);
    s3_metrics_add(&m, S3_OP_PUT, 200);
    s3_metrics_add(&m, S3_OP_MULTIPART_PART, 0);
    obs_set_s3(o, NULL, &m);
    obs_set_s3(o, "ac\"me", &m);
    obs_gauge_set(o, OBS_LAG_SECONDS, NULL, "q\\1\n", 2.5);
    obs_gauge_set(o, OBS_LAG_SECONDS, "ac\"me", "q", 0.25);
    obs_counter_add(o, OBS_FETCH_CALLS, NULL, "q", "ok", 4);
    obs_counter_add(o, OBS_FETCH_CALLS, NULL, "q", "error", 1);
    obs_observe(o, OBS_WINDOW_RECORDS, NULL, 30);
    obs_observe(o, OBS_WINDOW_BYTES, "ac\"me", 811);
    obs_counter_add(o, OBS_COMMIT_PRECONDITION_LOST, NULL, NULL, NULL, 1);
    stages_add(obs_stages(o), STAGES_UPLOAD, 2500);
    t = render(o);
    fd = mkstemp(path);
    EXPECT(fd >= 0);
    EXPECT(write(fd, t, strlen(t)) == (ssize_t)strlen(t));
    close(fd);
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s >&2", path);
    rc = system(cmd);
    EXPECT(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    if (rc != 0) {
        fprintf(stderr, "%s", t);
    }
    unlink(path);
    free(t);
    obs_free(o);
    s3_metrics_free(&m);
}

TEST(stage_counters_render_every_stage_in_seconds)
{
    struct obs *o = obs_new();
    char *t;

    stages_add(obs_stages(o), STAGES_COMPRESS, 1500000000);
    stages_add(obs_stages(o), STAGES_COMPRESS, 250000000);
    stages_add(obs_stages(o), STAGES_SHA256, 125000);
    t = render(o);
    EXPECT(has_line(t, "# TYPE queen_s3_stage_cpu_seconds_total counter"));
    EXPECT(has_line(t, "queen_s3_stage_cpu_seconds_total{stage=\"compress\"} "
                       "1.75"));
    EXPECT(has_line(t, "queen_s3_stage_cpu_seconds_total{stage=\"sha256\"} "
                       "0.000125"));
    /* A stage that counted nothing is still there, at 0. */
    static const char *const zero[] = {"read", "merge", "format", "upload",
                                       "rest"};
    for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++) {
        char line[128];
        snprintf(line, sizeof(line),
                 "queen_s3_stage_cpu_seconds_total{stage=\"%s\"} 0", zero[i]);
        EXPECT(has_line(t, line));
    }
    free(t);
    obs_free(o);
}

TEST(s3_write_streak_counts_failed_writes_until_one_succeeds)
{
    struct s3_metrics m;
    int code = -1;

    s3_metrics_init(&m);
    EXPECT(s3_metrics_write_streak(&m, &code) == 0);
    EXPECT(s3_metrics_write_at_ms(&m) == 0);
    s3_metrics_add(&m, S3_OP_GET, 503); /* a read is not a write */
    EXPECT(s3_metrics_write_at_ms(&m) == 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t before = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    s3_metrics_add(&m, S3_OP_PUT, 503);
    EXPECT(s3_metrics_write_at_ms(&m) >= before);
    EXPECT(s3_metrics_write_at_ms(&m) < before + 60000);
    s3_metrics_add(&m, S3_OP_MULTIPART_PART, 0);
    s3_metrics_add(&m, S3_OP_GET, 200); /* a read does not end it */
    s3_metrics_add(&m, S3_OP_HEAD, 404);
    s3_metrics_add(&m, S3_OP_PUT, 403);
    EXPECT(s3_metrics_write_streak(&m, &code) == 3);
    EXPECT(code == 403);
    s3_metrics_add(&m, S3_OP_MULTIPART_COMPLETE, 200);
    EXPECT(s3_metrics_write_streak(&m, &code) == 0);
    s3_metrics_add(&m, S3_OP_PUT, 0);
    EXPECT(s3_metrics_write_streak(&m, &code) == 1);
    EXPECT(code == 0);
    s3_metrics_free(&m);
}

/* A refusal (403; 404 on a PUT or a multipart start: no such bucket) is
 * told apart, so one is enough to call the bucket unreachable; a 404 on a
 * later multipart step (the upload's) and a 5xx are not refusals. */
TEST(s3_write_refused_is_403_or_a_missing_bucket)
{
    struct s3_metrics m;

    s3_metrics_init(&m);
    EXPECT(!s3_metrics_write_refused(&m));
    s3_metrics_add(&m, S3_OP_PUT, 403);
    EXPECT(s3_metrics_write_refused(&m));
    s3_metrics_add(&m, S3_OP_PUT, 200);
    EXPECT(!s3_metrics_write_refused(&m));
    s3_metrics_add(&m, S3_OP_MULTIPART_COMPLETE, 404);
    EXPECT(!s3_metrics_write_refused(&m));
    s3_metrics_add(&m, S3_OP_MULTIPART_CREATE, 404);
    EXPECT(s3_metrics_write_refused(&m));
    s3_metrics_add(&m, S3_OP_PUT, 503);
    EXPECT(!s3_metrics_write_refused(&m));
    s3_metrics_add(&m, S3_OP_PUT, 404);
    EXPECT(s3_metrics_write_refused(&m));
    s3_metrics_add(&m, S3_OP_GET, 200); /* a read does not end it */
    EXPECT(s3_metrics_write_refused(&m));
    s3_metrics_free(&m);
}
