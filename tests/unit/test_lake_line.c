/* lake_line_parse (src/lake/line.h): the sink's own lines are read back,
 * and anything its writer would not have written is refused. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "lake/line.h"
#include "sink/jsonl.h"

static int parse(const char *s, struct sink_record *r, struct buf *scratch,
                 struct err *err)
{
    return lake_line_parse(s, strlen(s), r, scratch, err);
}

TEST(the_format_vector_parses)
{
    const char *s = "{\"partition\":\"cust-0420\",\"offset\":1811,"
                    "\"transactionId\":\"ord-9f21\",\"ts\":\"2026-09-04T10:"
                    "03:41.918204Z\",\"payload\":{\"type\":\"paid\","
                    "\"amount\":1290}}";
    struct buf scratch;
    struct sink_record r;
    struct err err;

    buf_init(&scratch, BUF_UNLIMITED);
    EXPECT_EQ_I64(parse(s, &r, &scratch, &err), 0);
    EXPECT_MEM_EQ(r.partition.ptr, r.partition.len, "cust-0420", 9);
    EXPECT_EQ_I64(r.offset, 1811);
    EXPECT_MEM_EQ(r.txn.ptr, r.txn.len, "ord-9f21", 8);
    EXPECT_EQ_I64(r.ts, 1788516221918204LL);
    EXPECT_MEM_EQ(r.payload.ptr, r.payload.len,
                  "{\"type\":\"paid\",\"amount\":1290}", 29);
    buf_free(&scratch);
}

TEST(escapes_round_trip_through_the_writer)
{
    struct sink_record in = {
        {"p \"q\"\x01\xc3\xa9/", 10}, 7, {"t\\\n", 3}, 0, {"", 0}};
    struct buf line;
    struct buf scratch;
    struct sink_record r;
    struct err err;

    buf_init(&line, BUF_UNLIMITED);
    buf_init(&scratch, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_line(&line, &in, &err), 0);
    EXPECT_EQ_I64(lake_line_parse(line.data, line.len - 1, &r, &scratch, &err),
                  0);
    EXPECT_MEM_EQ(r.partition.ptr, r.partition.len, in.partition.ptr, 10);
    EXPECT_MEM_EQ(r.txn.ptr, r.txn.len, in.txn.ptr, 3);
    EXPECT_MEM_EQ(r.payload.ptr, r.payload.len, "null", 4);
    buf_free(&line);
    buf_free(&scratch);
}

TEST(what_the_writer_would_not_write_is_refused)
{
    static const char *const bad[] = {
        /* a space, keys out of order, a key missing */
        "{\"partition\": \"p\",\"offset\":0,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        "{\"offset\":0,\"partition\":\"p\",\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":0,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\"}",
        /* an escape the writer does not use, a leading zero */
        "{\"partition\":\"\\u0070\",\"offset\":0,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":01,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        /* ts with 3 digits, a payload that is not JSON */
        "{\"partition\":\"p\",\"offset\":0,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":0,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":{\"a\":}}",
        "",
        "{",
        "not json at all",
    };
    struct buf scratch;
    struct sink_record r;
    struct err err;

    buf_init(&scratch, BUF_UNLIMITED);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        EXPECT_EQ_I64(parse(bad[i], &r, &scratch, &err), ERR_CORRUPT);
    }
    buf_free(&scratch);
}

/* The payload is one JSON text on the line: a raw LF or CR in it is
 * refused even where JSON would take it as whitespace (the writer makes
 * them spaces), with or without a memo. */
TEST(a_raw_lf_or_cr_in_the_payload_is_refused)
{
    static const char *const ws[] = {"\r", "\n", "\r\n"};
    char line[256];
    struct buf scratch;
    struct sink_record r;
    struct lake_line_memo memo;
    struct err err;

    buf_init(&scratch, BUF_UNLIMITED);
    memset(&memo, 0, sizeof(memo));
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
        int n = snprintf(line, sizeof(line),
                         "{\"partition\":\"p\",\"offset\":1,\"transactionId\""
                         ":\"t\",\"ts\":\"2026-09-04T10:03:41.918204Z\","
                         "\"payload\":[1,%s2]}",
                         ws[i]);

        EXPECT_EQ_I64(
            lake_line_read(line, (size_t)n, &r, &scratch, &memo, &err),
            ERR_CORRUPT);
        EXPECT_EQ_I64(lake_line_parse(line, (size_t)n, &r, &scratch, &err),
                      ERR_CORRUPT);
    }
    EXPECT_EQ_I64(parse("{\"partition\":\"p\",\"offset\":1,\"transactionId\""
                        ":\"t\",\"ts\":\"2026-09-04T10:03:41.918204Z\","
                        "\"payload\":[1,\t 2]}",
                        &r, &scratch, &err),
                  0);
    buf_free(&scratch);
}

/* With a memo warmed by a good line of the same second, what the in-place
 * check accepts and refuses is what the rebuild does. */
TEST(a_warm_memo_answers_as_the_rebuild)
{
    static const char *const lines[] = {
        "{\"partition\":\"p\",\"offset\":0,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.000007Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":-12,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.999999Z\",\"payload\":[]}",
        "{\"partition\":\"p\",\"offset\":-0,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":-01,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":00,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":9223372036854775807,"
        "\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":1,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.91820aZ\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":1,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":1,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204+\",\"payload\":1}",
        "{\"partition\":\"p\x7f\",\"offset\":1,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":1,\"transactionId\":\"\\/t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":1,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:42.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":1,\"transactionId\":\"t\","
        "\"ts\":\"2026-02-30T10:03:41.918204Z\",\"payload\":1}",
        "{\"partition\":\"p\",\"offset\":1,\"transactionId\":\"t\","
        "\"ts\":\"2026-09-04T10:03:41.918204Z\",\"payload\":{\"a\":}}",
    };
    const char *warm = "{\"partition\":\"w\",\"offset\":5,\"transactionId\":"
                       "\"x\",\"ts\":\"2026-09-04T10:03:41.500000Z\","
                       "\"payload\":null}";
    struct buf scratch;
    struct sink_record r;
    struct sink_record cold;
    struct lake_line_memo memo;
    struct err err;

    buf_init(&scratch, BUF_UNLIMITED);
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        int want = parse(lines[i], &cold, &scratch, &err);
        int64_t cold_ts = cold.ts;
        int64_t cold_off = cold.offset;

        memset(&memo, 0, sizeof(memo));
        EXPECT_EQ_I64(
            lake_line_read(warm, strlen(warm), &r, &scratch, &memo, &err), 0);
        EXPECT_EQ_I64(memo.is_set, 1);
        EXPECT_EQ_I64(lake_line_read(lines[i], strlen(lines[i]), &r, &scratch,
                                     &memo, &err),
                      want);
        if (want == 0) {
            EXPECT_EQ_I64(r.ts, cold_ts);
            EXPECT_EQ_I64(r.offset, cold_off);
        }
    }
    EXPECT_EQ_I64(parse(lines[0], &r, &scratch, &err), 0);
    EXPECT_EQ_I64(parse(lines[1], &r, &scratch, &err), 0);
    EXPECT_EQ_I64(r.offset, -12);
    EXPECT_EQ_I64(parse(lines[2], &r, &scratch, &err), ERR_CORRUPT);
    EXPECT_EQ_I64(parse(lines[6], &r, &scratch, &err), ERR_CORRUPT);
    buf_free(&scratch);
}
