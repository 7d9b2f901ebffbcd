/* sink/status: the `s3` block of docs/design/observability.md §1 from plain
 * structs: key order, nulls, sorting, the ok rule and the crate's test vector.
 * */
#include "sink/status.h"

#include "harness.h"

static struct status_sink lake_sink(void)
{
    struct status_sink s = {
        .tenant = "00000000-0000-0000-0000-000000000000",
        .source = "env",
        .phase = "running",
        .has_uptime = true,
        .uptime_ms = 1500,
        .sink = "default",
        .instance = "node-1@box",
        .running = true,
        .bucket = {.reachable = 1,
                   .checked_at_ms = 1788520800123LL,
                   .name = "lake",
                   .endpoint = "http://127.0.0.1:7070",
                   .region = "us-east-1",
                   .prefix = "queen"},
        .format = "jsonl",
        .compression = "zstd",
        .layout = "merged",
        .align = "hour",
        .health = {.ok = true, .queues = 1},
        .placement = {.nodes = 1, .queues = 1, .share = 1, .held = 1},
        .buffered_bytes = 64,
        .limit_bytes = 536870912,
    };
    return s;
}

static struct status_queue orders_row(void)
{
    struct status_queue q = {
        .name = "orders",
        .owned_here = true,
        .state = "filling",
        .k = 2,
        .t_end_us = 1788520800000001LL, /* 2026-09-04T11:20:00.000001Z */
        .complete_through_us = 1788520800000001LL,
        .safe_time_us = STATUS_NONE,
        .has_lag = true,
        .lag_seconds = 0.0,
        .windows_committed = 2,
        .records = 30,
        .bytes = 811,
        .error_at_us = STATUS_NONE,
    };
    return q;
}

TEST(queue_row_in_order)
{
    struct status_queue q = orders_row();
    struct buf b;
    struct jw w;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    jw_init(&w, &b);
    status_render_queue(&w, &q);
    EXPECT_EQ_I64(jw_finish(&w, &err), 0);
    EXPECT_STR_EQ(b.data,
                  "{\"name\":\"orders\",\"ownedHere\":true,\"heldBy\":null,"
                  "\"state\":\"filling\",\"k\":2,"
                  "\"tEnd\":\"2026-09-04T11:20:00.000001Z\","
                  "\"completeThrough\":\"2026-09-04T11:20:00.000001Z\","
                  "\"safeTime\":null,\"lagSeconds\":0.0,\"redo\":false,"
                  "\"bufferedBytes\":0,\"partitions\":0,"
                  "\"windowsCommitted\":2,\"records\":30,\"bytes\":811,"
                  "\"recordsLost\":0,\"lastError\":null}");
    buf_reset(&b);
    q.has_lag = false;
    q.held_by = "node-2@x";
    q.error_at_us = 1788520800000000LL;
    q.error_message = "crash point \"after_intent\"";
    jw_init(&w, &b);
    status_render_queue(&w, &q);
    EXPECT_EQ_I64(jw_finish(&w, &err), 0);
    EXPECT(strstr(b.data, "\"heldBy\":\"node-2@x\"") != NULL);
    EXPECT(strstr(b.data, "\"lagSeconds\":null") != NULL);
    EXPECT(strstr(b.data, "\"lastError\":{\"at\":\"2026-09-04T11:20:00."
                          "000000Z\",\"message\":\"crash point "
                          "\\\"after_intent\\\"\"}}") != NULL);
    buf_free(&b);
}

TEST(block_with_one_sink)
{
    struct status_queue rows[2] = {orders_row(), orders_row()};
    struct status_sink s = lake_sink();
    struct status_node n = {.phase = "running", .threads = 1};
    struct buf b;
    struct err err;

    rows[1].name = "audit";
    s.queues = rows;
    s.n_queues = 2;
    n.sinks = &s;
    n.n_sinks = 1;
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(status_render(&n, &b, &err), 0);
    EXPECT(strncmp(b.data,
                   "{\"mode\":\"in-process\",\"phase\":\"running\","
                   "\"threads\":1,\"controlPlane\":{\"error\":null},"
                   "\"sinks\":[{\"tenant\":\"00000000-0000-0000-0000-"
                   "000000000000\",\"source\":\"env\",\"cluster\":null,"
                   "\"phase\":\"running\",\"error\":null,\"restarts\":0,"
                   "\"lastExit\":null,\"uptimeMs\":1500,\"backoffMs\":0,"
                   "\"ok\":true,\"sink\":\"default\",\"instance\":\"node-1@"
                   "box\",\"version\":\"2.0.0\",\"running\":true,\"bucket\":"
                   "{\"reachable\":true,\"error\":null,\"checkedAt\":\"2026-"
                   "09-04T11:20:00.123000Z\",\"name\":\"lake\",\"endpoint\":"
                   "\"http://127.0.0.1:7070\",\"region\":\"us-east-1\","
                   "\"prefix\":\"queen\"},\"format\":\"jsonl\","
                   "\"compression\":\"zstd\",\"layout\":\"merged\","
                   "\"align\":\"hour\",\"health\":{\"ok\":true,\"queues\":1},"
                   "\"placement\":{\"givingBack\":null,\"held\":1,"
                   "\"nodes\":1,\"queues\":1,\"share\":1},\"memory\":"
                   "{\"bufferedBytes\":64,\"limitBytes\":536870912},"
                   "\"queues\":[{\"name\":\"audit\"",
                   strlen("{\"mode\":\"in-process\",\"phase\":\"running\","
                          "\"threads\":1,\"controlPlane\":{\"error\":null},"
                          "\"sinks\":[{\"tenant\":\"00000000-0000-0000-0000-"
                          "000000000000\",\"source\":\"env\",\"cluster\":"
                          "null,")) == 0);
    EXPECT(strstr(b.data,
                  "\"memory\":{\"bufferedBytes\":64,\"limitBytes\":"
                  "536870912},\"queues\":[{\"name\":\"audit\"") != NULL);
    EXPECT(strstr(b.data, "},{\"name\":\"orders\"") != NULL);
    EXPECT(strstr(b.data, "\"placement\":{\"givingBack\":null,\"held\":1,"
                          "\"nodes\":1,\"queues\":1,\"share\":1}") != NULL);
    EXPECT(b.data[b.len - 1] == '}');
    buf_free(&b);
}

TEST(ok_needs_health_and_a_reachable_bucket)
{
    struct status_sink s = lake_sink();

    EXPECT(status_sink_ok(&s));
    s.bucket.reachable = -1; /* not probed yet: still ok */
    EXPECT(status_sink_ok(&s));
    s.bucket.reachable = 0;
    EXPECT(!status_sink_ok(&s));
    s.bucket.reachable = 1;
    s.health.ok = false;
    EXPECT(!status_sink_ok(&s));
}

TEST(sinks_sorted_by_tenant_and_error_cut)
{
    struct status_sink s[2] = {lake_sink(), lake_sink()};
    struct status_node n = {
        .phase = "running", .threads = 2, .sinks = s, .n_sinks = 2};
    char long_err[700];
    struct buf b;
    struct err err;

    memset(long_err, 'x', sizeof(long_err) - 1);
    long_err[sizeof(long_err) - 1] = '\0';
    s[0].tenant = "b";
    s[1].tenant = "a";
    s[1].error = long_err;
    s[1].bucket.reachable = -1;
    s[1].bucket.checked_at_ms = STATUS_NONE;
    s[1].has_uptime = false;
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(status_render(&n, &b, &err), 0);
    const char *a = strstr(b.data, "\"tenant\":\"a\"");
    const char *bb = strstr(b.data, "\"tenant\":\"b\"");
    EXPECT(a != NULL && bb != NULL && a < bb);
    EXPECT(strstr(b.data, "\"reachable\":null,\"error\":null,\"checkedAt\":"
                          "null") != NULL);
    char want[600];
    snprintf(want, sizeof(want), "\"error\":\"%.*s\",\"restarts\"", 512,
             long_err);
    EXPECT(strstr(b.data, want) != NULL);
    buf_free(&b);
}
