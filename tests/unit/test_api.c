/* Unit tests for the pure parts of src/api: the push, fetch and changed body
 * parsers, their renderers (exact bytes and key orders of
 * docs/design/http-api.md §2-§4) and the metrics registry's exposition. No
 * loop, no store, no raft. */
#include "api/api.h"
#include "api/metrics.h"
#include "api/tenant.h"
#include "base/aead.h"
#include "harness.h"

static void counter_mint(void *ctx, uint8_t id[16])
{
    int *n = ctx;

    memset(id, 0, 16);
    id[6] = 0x70;
    id[8] = 0x80;
    id[15] = (uint8_t)++ * n;
}

#define PRODUCT_PAGE                                                           \
    "{\"items\":[ {\"queue\":\"orders\",\"partition\":\"cust-1\",\"payload\":" \
    "{\"order\":1,\"total\":42.00}}, {\"queue\":\"orders\",\"partition\":"     \
    "\"cust-2\",\"transactionId\":\"t-2\",\"payload\":[1E+400, -0]}, "         \
    "{\"queue\":\"orders\",\"payload\":null} ]}"

TEST(push_parse_keeps_payload_bytes_and_defaults_partition)
{
    struct api_push p;
    struct err err;
    int n = 0;

    EXPECT_EQ_I64(api_push_parse(&p, PRODUCT_PAGE, strlen(PRODUCT_PAGE), &err),
                  0);
    EXPECT_EQ_U64(p.n, 3);
    EXPECT_MEM_EQ(p.items[0].payload.ptr, p.items[0].payload.len,
                  "{\"order\":1,\"total\":42.00}", 25);
    EXPECT_MEM_EQ(p.items[1].payload.ptr, p.items[1].payload.len,
                  "[1E+400, -0]", 12);
    EXPECT_MEM_EQ(p.items[2].payload.ptr, p.items[2].payload.len, "null", 4);
    EXPECT_MEM_EQ(p.items[2].partition.ptr, p.items[2].partition.len, "Default",
                  7);
    api_push_mint(&p, counter_mint, &n);
    EXPECT_MEM_EQ(p.items[0].txn.ptr, p.items[0].txn.len,
                  "00000000-0000-7000-8000-000000000001", 36);
    EXPECT_MEM_EQ(p.items[1].txn.ptr, p.items[1].txn.len, "t-2", 3);
    EXPECT_EQ_U64(p.items[2].message_id[15], 3);
    api_push_free(&p);
}

TEST(push_parse_unescapes_names)
{
    const char *body = "{\"items\":[{\"queue\":\"q\\u00e9\\\"\",\"partition\":"
                       "\"a\\/b\",\"transactionId\":\"\\n\",\"payload\":1}]}";
    struct api_push p;
    struct err err;

    EXPECT_EQ_I64(api_push_parse(&p, body, strlen(body), &err), 0);
    EXPECT_MEM_EQ(p.items[0].queue.ptr, p.items[0].queue.len, "q\xc3\xa9\"", 4);
    EXPECT_MEM_EQ(p.items[0].partition.ptr, p.items[0].partition.len, "a/b", 3);
    EXPECT_MEM_EQ(p.items[0].txn.ptr, p.items[0].txn.len, "\n", 1);
    api_push_free(&p);
}

TEST(push_parse_refuses_bad_bodies_with_a_reason)
{
    static const struct {
        const char *body;
        int code;
        const char *msg;
    } cases[] = {
        {"[]", ERR_INVALID,
         "bad push body: an object with an items array is required"},
        {"{\"items\":[1]}", ERR_INVALID,
         "bad push body: items[0]: an object is required"},
        {"{\"items\":[{\"payload\":1}]}", ERR_INVALID,
         "bad push body: items[0].queue is required"},
        {"{\"items\":[{\"queue\":1,\"payload\":1}]}", ERR_INVALID,
         "bad push body: items[0].queue: a string is required"},
        {"{\"items\":[{\"queue\":\"q\"}]}", ERR_INVALID,
         "bad push body: items[0].payload is required"},
        {"{\"items\":[{\"queue\":\"\",\"payload\":1}]}", ERR_INVALID,
         "bad push body: items[0].queue is empty"},
        {"{\"items\":[{\"queue\":\"q\",\"transactionId\":5,\"payload\":1}]}",
         ERR_INVALID,
         "bad push body: items[0].transactionId: a string is required"},
        {"{\"items\":[{\"queue\":\"q\",\"payload\":01}]}", ERR_INVALID, NULL},
    };

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct api_push p;
        struct err err;

        EXPECT_EQ_I64(
            api_push_parse(&p, cases[i].body, strlen(cases[i].body), &err),
            cases[i].code);
        if (cases[i].msg != NULL) {
            EXPECT_STR_EQ(err.msg, cases[i].msg);
        } else {
            EXPECT(strncmp(err.msg, "bad push body: invalid JSON", 27) == 0);
        }
        api_push_free(&p);
    }
}

TEST(push_parse_refuses_names_over_447_bytes_as_too_big)
{
    char body[1200];
    char name[449];
    struct api_push p;
    struct err err;

    memset(name, 'q', 448);
    name[448] = '\0';
    snprintf(body, sizeof(body),
             "{\"items\":[{\"queue\":\"%s\",\"payload\":1}]}", name);
    EXPECT_EQ_I64(api_push_parse(&p, body, strlen(body), &err), ERR_TOO_BIG);
    EXPECT_STR_EQ(err.msg,
                  "items[0].queue: name of 448 bytes is over the 447-byte "
                  "limit");
    api_push_free(&p);
    name[447] = '\0';
    snprintf(body, sizeof(body),
             "{\"items\":[{\"queue\":\"%s\",\"payload\":1}]}", name);
    EXPECT_EQ_I64(api_push_parse(&p, body, strlen(body), &err), 0);
    api_push_free(&p);
}

/* Any bytes are a name's, control bytes and NUL included (escaped in
 * JSON; a raw control byte is not JSON); a payload is not a name. */
TEST(push_parse_takes_control_bytes_and_nul_in_names)
{
    const char *ok = "{\"items\":[{\"queue\":\"q \\u00e9~\\t\\u001f\x7f\","
                     "\"partition\":\"\\u0020!\\n\\u0000x\",\"payload\":"
                     "\"\\u0001\"}]}";
    struct api_push p;
    struct err err;

    EXPECT_EQ_I64(api_push_parse(&p, ok, strlen(ok), &err), 0);
    EXPECT_EQ_I64(p.n, 1);
    EXPECT_EQ_I64(p.items[0].queue.len, 8);
    EXPECT(memcmp(p.items[0].queue.ptr, "q \xc3\xa9~\t\x1f\x7f", 8) == 0);
    EXPECT_EQ_I64(p.items[0].partition.len, 5);
    EXPECT(memcmp(p.items[0].partition.ptr, " !\n\0x", 5) == 0);
    api_push_free(&p);
}

/* More items than one push command holds is a cap, answered as the
 * other caps of a push are (413 too_large), not as a malformed body. */
TEST(push_parse_refuses_more_than_100000_items_as_too_big)
{
    struct buf b;
    struct api_push p;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_append_str(&b, "{\"items\":[", &err);
    for (int i = 0; i <= CMD_PUSH_MAX_ITEMS; i++) {
        buf_append_str(&b,
                       i > 0 ? ",{\"queue\":\"q\",\"payload\":1}"
                             : "{\"queue\":\"q\",\"payload\":1}",
                       &err);
    }
    buf_append_str(&b, "]}", &err);
    EXPECT_EQ_I64(api_push_parse(&p, b.data, b.len, &err), ERR_TOO_BIG);
    EXPECT_STR_EQ(err.msg,
                  "items: 100001 items is over the limit of 100000 per push");
    api_push_free(&p);
    /* One item fewer is a push. */
    b.len -= strlen(",{\"queue\":\"q\",\"payload\":1}]}");
    buf_append_str(&b, "]}", &err);
    EXPECT_EQ_I64(api_push_parse(&p, b.data, b.len, &err), 0);
    EXPECT_EQ_U64(p.n, CMD_PUSH_MAX_ITEMS);
    api_push_free(&p);
    buf_free(&b);
}

/* A field the parser reads, given twice, refuses the push instead of
 * being read first-wins; other members and the payload's own are left
 * alone (the payload is stored as sent, repeated keys and all). */
TEST(push_parse_refuses_a_repeated_field)
{
    static const struct {
        const char *body;
        const char *msg;
    } cases[] = {
        {"{\"items\":[],\"items\":[{\"queue\":\"q\",\"payload\":1}]}",
         "bad push body: duplicate key \"items\""},
        {"{\"items\":[{\"queue\":\"a\",\"queue\":\"b\",\"payload\":1}]}",
         "bad push body: items[0]: duplicate key \"queue\""},
        {"{\"items\":[{\"queue\":\"a\",\"payload\":1},{\"queue\":\"a\","
         "\"payload\":1,\"partition\":\"p\",\"p\\u0061rtition\":\"q\"}]}",
         "bad push body: items[1]: duplicate key \"partition\""},
        {"{\"items\":[{\"queue\":\"a\",\"payload\":1,\"payload\":2}]}",
         "bad push body: items[0]: duplicate key \"payload\""},
        {"{\"items\":[{\"queue\":\"a\",\"transactionId\":\"t\","
         "\"transactionId\":\"u\",\"payload\":1}]}",
         "bad push body: items[0]: duplicate key \"transactionId\""},
    };
    const char *ok = "{\"x\":1,\"x\":2,\"items\":[{\"queue\":\"a\",\"traceId\":"
                     "1,\"traceId\":2,\"payload\":{\"k\":1,\"k\":2}}]}";
    struct api_push p;
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        EXPECT_EQ_I64(
            api_push_parse(&p, cases[i].body, strlen(cases[i].body), &err),
            ERR_INVALID);
        EXPECT_STR_EQ(err.msg, cases[i].msg);
        api_push_free(&p);
    }
    EXPECT_EQ_I64(api_push_parse(&p, ok, strlen(ok), &err), 0);
    EXPECT_MEM_EQ(p.items[0].payload.ptr, p.items[0].payload.len,
                  "{\"k\":1,\"k\":2}", 13);
    api_push_free(&p);
}

TEST(push_render_has_the_reference_key_order)
{
    const char *body =
        "{\"items\":[{\"queue\":\"q\",\"payload\":1},"
        "{\"queue\":\"q\",\"transactionId\":\"x\",\"payload\":2},"
        "{\"queue\":\"q\",\"payload\":3}]}";
    struct fsm_item_result items[3] = {
        {FSM_ITEM_QUEUED, 7, {0}},
        {FSM_ITEM_DUPLICATE, 2, {0}},
        {FSM_ITEM_ERROR, 0, {0}},
    };
    struct fsm_result res;
    struct api_push p;
    struct buf out;
    struct err err;
    int n = 0;

    memset(&res, 0, sizeof(res));
    res.n_items = 3;
    res.items = items;
    EXPECT_EQ_I64(api_push_parse(&p, body, strlen(body), &err), 0);
    api_push_mint(&p, counter_mint, &n);
    memcpy(items[0].message_id, p.items[0].message_id, 16);
    memcpy(items[1].message_id, p.items[0].message_id, 16); /* original */
    memcpy(items[2].message_id, p.items[2].message_id, 16);
    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(api_push_render(&p, &res, &out, &err), 0);
    EXPECT_STR_EQ(
        out.data,
        "[{\"index\":0,\"message_id\":\"00000000-0000-7000-8000-000000000001\","
        "\"transaction_id\":\"00000000-0000-7000-8000-000000000001\","
        "\"queueName\":\"q\",\"status\":\"queued\",\"offset\":7},"
        "{\"index\":1,\"message_id\":\"00000000-0000-7000-8000-000000000001\","
        "\"transaction_id\":\"x\",\"queueName\":\"q\",\"status\":"
        "\"duplicate\",\"offset\":2},"
        "{\"index\":2,\"message_id\":\"00000000-0000-7000-8000-000000000003\","
        "\"transaction_id\":\"00000000-0000-7000-8000-000000000003\","
        "\"queueName\":\"q\",\"status\":\"error\"}]");
    EXPECT_EQ_U64(api_push_queued_bytes(&p, &res), 1);
    buf_free(&out);
    api_push_free(&p);
}

TEST(fetch_parse_applies_defaults_and_clamps)
{
    const char *body =
        "{\"entries\":[{\"queue\":\"q\",\"offset\":3},"
        "{\"queue\":\"q\",\"partition\":7,\"offset\":0,\"maxBytes\":0},"
        "{\"queue\":\"q\",\"partition\":\"p\",\"offset\":0,"
        "\"maxBytes\":99999999999999999999}],\"maxWaitMs\":99999,"
        "\"minBytes\":-5}";
    struct api_fetch f;
    const char *code;
    struct err err;

    EXPECT_EQ_I64(api_fetch_parse(&f, body, strlen(body), &code, &err), 0);
    EXPECT_EQ_U64(f.n, 3);
    EXPECT_MEM_EQ(f.reqs[0].partition.ptr, f.reqs[0].partition.len, "Default",
                  7);
    EXPECT_EQ_I64(f.reqs[0].offset, 3);
    EXPECT_EQ_U64(f.reqs[0].max_bytes, 1 << 20);
    EXPECT_MEM_EQ(f.reqs[1].partition.ptr, f.reqs[1].partition.len, "7", 1);
    EXPECT_EQ_U64(f.reqs[1].max_bytes, 1);
    EXPECT_EQ_U64(f.reqs[2].max_bytes, 8 << 20);
    EXPECT_EQ_I64(f.max_wait_ms, 30000);
    EXPECT_EQ_U64(f.min_bytes, 0);
    api_fetch_free(&f);
}

TEST(fetch_parse_refusals_carry_the_reference_messages)
{
    static const struct {
        const char *body;
        const char *code;
        const char *msg;
    } cases[] = {
        {"{\"entries\":[{\"queue\":\"q\",\"offset\":0},{\"queue\":\"q\","
         "\"offset\":-1}]}",
         NULL, "offset must be non-negative"},
        {"{\"entries\":[{\"queue\":\"q\"}]}", "bad_body",
         "bad fetch body: entries[0].offset: an integer is required"},
        {"{\"entries\":[{\"offset\":1}]}", "bad_body",
         "bad fetch body: entries[0]: queue (a string) is required"},
        {"{}", "bad_body",
         "bad fetch body: an object with an entries array is required"},
        {"{\"entries\":[{\"queue\":\"q\",\"offset\":1.5}]}", "bad_body",
         "bad fetch body: entries[0].offset: an integer is required"},
        /* Negative past 64 bits is still a negative offset. */
        {"{\"entries\":[{\"queue\":\"q\",\"offset\":"
         "-100000000000000000000000}]}",
         NULL, "offset must be non-negative"},
        {"{\"entries\":[{\"queue\":\"q\",\"offset\":-1e3}]}", "bad_body",
         "bad fetch body: entries[0].offset: an integer is required"},
    };

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct api_fetch f;
        const char *code = "unset";
        struct err err;

        EXPECT_EQ_I64(api_fetch_parse(&f, cases[i].body, strlen(cases[i].body),
                                      &code, &err),
                      ERR_INVALID);
        EXPECT(code == cases[i].code ||
               (code != NULL && cases[i].code != NULL &&
                strcmp(code, cases[i].code) == 0));
        EXPECT_STR_EQ(err.msg, cases[i].msg);
        api_fetch_free(&f);
    }
}

/* Names are bounded as push bounds them (api_check_name): over 447 bytes
 * is 413 too_large with push's sentence, never
 * reads as an unknown queue. */
TEST(fetch_parse_checks_names_as_push_does)
{
    char name[449];
    char body[1400];
    struct api_fetch f;
    const char *code = "unset";
    struct err err;

    memset(name, 'q', 448);
    name[448] = '\0';
    snprintf(body, sizeof(body),
             "{\"entries\":[{\"queue\":\"%s\",\"offset\":0}]}", name);
    EXPECT_EQ_I64(api_fetch_parse(&f, body, strlen(body), &code, &err),
                  ERR_TOO_BIG);
    EXPECT_STR_EQ(err.msg, "entries[0].queue: name of 448 bytes is over the "
                           "447-byte limit");
    api_fetch_free(&f);
    snprintf(body, sizeof(body),
             "{\"entries\":[{\"queue\":\"q\",\"offset\":0},{\"queue\":\"q\","
             "\"partition\":\"%s\",\"offset\":0}]}",
             name);
    EXPECT_EQ_I64(api_fetch_parse(&f, body, strlen(body), &code, &err),
                  ERR_TOO_BIG);
    EXPECT_STR_EQ(err.msg, "entries[1].partition: name of 448 bytes is over "
                           "the 447-byte limit");
    api_fetch_free(&f);
    snprintf(body, sizeof(body),
             "{\"entries\":[{\"queue\":\"q\\u0000\",\"offset\":0}]}");
    EXPECT_EQ_I64(api_fetch_parse(&f, body, strlen(body), &code, &err), 0);
    api_fetch_free(&f);
    snprintf(body, sizeof(body),
             "{\"entries\":[{\"queue\":\"q\\n\",\"offset\":0}]}");
    EXPECT_EQ_I64(api_fetch_parse(&f, body, strlen(body), &code, &err), 0);
    api_fetch_free(&f);
    name[447] = '\0';
    snprintf(body, sizeof(body),
             "{\"entries\":[{\"queue\":\"%s\",\"partition\":\"%s\","
             "\"offset\":0}]}",
             name, name);
    EXPECT_EQ_I64(api_fetch_parse(&f, body, strlen(body), &code, &err), 0);
    api_fetch_free(&f);
}

TEST(fetch_parse_refuses_more_than_1024_entries)
{
    struct buf b;
    struct api_fetch f;
    const char *code = "unset";
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_append_str(&b, "{\"entries\":[", &err);
    for (int i = 0; i < 1025; i++) {
        buf_append_str(&b,
                       i ? ",{\"queue\":\"q\",\"offset\":0}"
                         : "{\"queue\":\"q\",\"offset\":0}",
                       &err);
    }
    buf_append_str(&b, "]}", &err);
    EXPECT_EQ_I64(api_fetch_parse(&f, b.data, b.len, &code, &err), ERR_INVALID);
    EXPECT(code == NULL);
    EXPECT_STR_EQ(err.msg, "too many entries");
    api_fetch_free(&f);
    buf_free(&b);
}

/* Fetch reads its fields once each, as push does; an empty partition is
 * Default (push writes it there) and an empty queue is refused. */
TEST(fetch_parse_refuses_a_repeated_field_and_an_empty_queue)
{
    static const struct {
        const char *body;
        const char *msg;
    } cases[] = {
        {"{\"entries\":[],\"entries\":[]}",
         "bad fetch body: duplicate key \"entries\""},
        {"{\"entries\":[],\"minBytes\":1,\"m\\u0069nBytes\":2}",
         "bad fetch body: duplicate key \"minBytes\""},
        {"{\"entries\":[{\"queue\":\"a\",\"offset\":0},{\"queue\":\"a\","
         "\"offset\":0,\"offset\":1}]}",
         "bad fetch body: entries[1]: duplicate key \"offset\""},
        {"{\"entries\":[{\"queue\":\"a\",\"partition\":null,\"partition\":"
         "\"p\",\"offset\":0}]}",
         "bad fetch body: entries[0]: duplicate key \"partition\""},
        {"{\"entries\":[{\"queue\":\"\",\"offset\":0}]}",
         "bad fetch body: entries[0].queue is empty"},
    };
    const char *ok = "{\"x\":1,\"x\":2,\"entries\":[{\"queue\":\"a\","
                     "\"partition\":\"\",\"offset\":0,\"y\":1,\"y\":2}]}";
    struct api_fetch f;
    const char *code = NULL;
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        EXPECT_EQ_I64(api_fetch_parse(&f, cases[i].body, strlen(cases[i].body),
                                      &code, &err),
                      ERR_INVALID);
        EXPECT_STR_EQ(code, "bad_body");
        EXPECT_STR_EQ(err.msg, cases[i].msg);
        api_fetch_free(&f);
    }
    EXPECT_EQ_I64(api_fetch_parse(&f, ok, strlen(ok), &code, &err), 0);
    EXPECT_MEM_EQ(f.reqs[0].partition.ptr, f.reqs[0].partition.len, "Default",
                  7);
    api_fetch_free(&f);
}

TEST(fetch_render_splices_payloads_and_orders_keys)
{
    const char *body = "{\"entries\":[{\"queue\":\"q\",\"partition\":\"p\","
                       "\"offset\":0},{\"queue\":\"z\",\"offset\":0}]}";
    struct store_record recs[2] = {
        {0, 1795953470283179, {0}, {"t0", 2}, {"{\"a\":42.00}", 11}},
        {1, 1795953470283179, {0}, {"", 0}, {NULL, 0}},
    };
    struct store_fetch_entry entries[2] = {
        {STORE_ENTRY_OK, 2, 0, 2, recs},
        {STORE_UNKNOWN_TOPIC_OR_PARTITION, 0, 0, 0, NULL},
    };
    struct store_fetch_answer ans = {2, entries, {0}, NULL, NULL};
    struct api_fetch f;
    const char *code;
    struct buf out;
    struct err err;

    EXPECT_EQ_I64(api_fetch_parse(&f, body, strlen(body), &code, &err), 0);
    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(api_fetch_render(&f, &ans, &out, &err), 0);
    EXPECT_STR_EQ(out.data,
                  "{\"entries\":[{\"queue\":\"q\",\"partition\":\"p\","
                  "\"records\":[{\"offset\":0,\"transactionId\":\"t0\","
                  "\"payload\":{\"a\":42.00},\"ts\":"
                  "\"2026-11-29T11:57:50.283179Z\"},{\"offset\":1,"
                  "\"transactionId\":\"\",\"payload\":null,\"ts\":"
                  "\"2026-11-29T11:57:50.283179Z\"}],\"highWatermark\":2,"
                  "\"logStartOffset\":0},{\"queue\":\"z\",\"partition\":"
                  "\"Default\",\"records\":[],\"highWatermark\":0,"
                  "\"logStartOffset\":0,\"error\":"
                  "\"UNKNOWN_TOPIC_OR_PARTITION\"}]}");
    EXPECT_EQ_U64(api_fetch_weight(&ans), 12); /* 11 + max(1, 0) */
    EXPECT(api_fetch_is_ready(&f, &ans));      /* an entry error */
    entries[1].error = STORE_ENTRY_OK;
    f.min_bytes = 13;
    EXPECT(!api_fetch_is_ready(&f, &ans));
    f.min_bytes = 12;
    EXPECT(api_fetch_is_ready(&f, &ans));
    buf_free(&out);
    api_fetch_free(&f);
}

TEST(changed_parse_reads_since_after_and_limit)
{
    const char *body =
        "{\"entries\":[{\"queue\":\"q\"},{\"queue\":\"q\",\"since\":"
        "\"2026-11-29T11:57:50.283179Z\",\"after\":\"p|12\",\"limit\":5000},"
        "{\"queue\":\"q\",\"after\":5,\"limit\":-1,\"since\":null}]}";
    struct api_changed c;
    const char *code;
    struct err err;

    EXPECT_EQ_I64(api_changed_parse(&c, body, strlen(body), &code, &err), 0);
    EXPECT_EQ_U64(c.n, 3);
    EXPECT_EQ_I64(c.reqs[0].since, INT64_MIN);
    EXPECT_EQ_U64(c.reqs[0].after.len, 0);
    EXPECT_EQ_I64(c.reqs[0].limit, 1000);
    EXPECT_EQ_I64(c.reqs[1].since, 1795953470283179);
    EXPECT_MEM_EQ(c.reqs[1].after.ptr, c.reqs[1].after.len, "p|12", 4);
    EXPECT_EQ_I64(c.reqs[1].limit, 1000);
    EXPECT_MEM_EQ(c.reqs[2].after.ptr, c.reqs[2].after.len, "5", 1);
    EXPECT_EQ_I64(c.reqs[2].limit, 1);
    api_changed_free(&c);
}

TEST(changed_parse_refuses_an_unparsable_since)
{
    const char *body = "{\"entries\":[{\"queue\":\"q\"},{\"queue\":\"q\","
                       "\"since\":\"yesterday\"}]}";
    struct api_changed c;
    const char *code = "unset";
    struct err err;

    EXPECT_EQ_I64(api_changed_parse(&c, body, strlen(body), &code, &err),
                  ERR_INVALID);
    EXPECT(code == NULL);
    EXPECT_STR_EQ(err.msg,
                  "bad body: entry 1: since is not a timestamp: yesterday");
    api_changed_free(&c);
}

TEST(changed_parse_checks_names_as_push_does)
{
    char name[449];
    char body[1400];
    struct api_changed c;
    const char *code = "unset";
    struct err err;

    memset(name, 'q', 448);
    name[448] = '\0';
    snprintf(body, sizeof(body), "{\"entries\":[{\"queue\":\"%s\"}]}", name);
    EXPECT_EQ_I64(api_changed_parse(&c, body, strlen(body), &code, &err),
                  ERR_TOO_BIG);
    EXPECT_STR_EQ(err.msg, "entries[0].queue: name of 448 bytes is over the "
                           "447-byte limit");
    api_changed_free(&c);
    snprintf(body, sizeof(body),
             "{\"entries\":[{\"queue\":\"q\"},{\"queue\":\"\\u0000\"}]}");
    EXPECT_EQ_I64(api_changed_parse(&c, body, strlen(body), &code, &err), 0);
    api_changed_free(&c);
    name[447] = '\0';
    snprintf(body, sizeof(body), "{\"entries\":[{\"queue\":\"%s\"}]}", name);
    EXPECT_EQ_I64(api_changed_parse(&c, body, strlen(body), &code, &err), 0);
    api_changed_free(&c);
}

TEST(changed_parse_refuses_a_repeated_field_and_an_empty_queue)
{
    static const struct {
        const char *body;
        const char *msg;
    } cases[] = {
        {"{\"entries\":[],\"entries\":[]}",
         "bad changed body: duplicate key \"entries\""},
        {"{\"entries\":[{\"queue\":\"a\",\"limit\":1,\"limit\":2}]}",
         "bad changed body: entries[0]: duplicate key \"limit\""},
        {"{\"entries\":[{\"queue\":\"a\"},{\"queue\":\"a\",\"after\":null,"
         "\"\\u0061fter\":\"p|1\"}]}",
         "bad changed body: entries[1]: duplicate key \"after\""},
        {"{\"entries\":[{\"queue\":\"\"}]}",
         "bad changed body: entries[0].queue is empty"},
    };
    const char *ok = "{\"x\":1,\"x\":2,\"entries\":[{\"queue\":\"a\","
                     "\"y\":1,\"y\":2}]}";
    struct api_changed c;
    const char *code = NULL;
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        EXPECT_EQ_I64(api_changed_parse(&c, cases[i].body,
                                        strlen(cases[i].body), &code, &err),
                      ERR_INVALID);
        EXPECT_STR_EQ(code, "bad_body");
        EXPECT_STR_EQ(err.msg, cases[i].msg);
        api_changed_free(&c);
    }
    EXPECT_EQ_I64(api_changed_parse(&c, ok, strlen(ok), &code, &err), 0);
    api_changed_free(&c);
}

TEST(changed_refusal_quotes_since_cut_at_a_whole_utf8_sequence)
{
    /* "a" then 80 two-byte letters: a cut at byte 100 would split one. */
    char body[256] = "{\"entries\":[{\"queue\":\"q\",\"since\":\"a";
    char want[160] = "bad body: entry 0: since is not a timestamp: a";
    struct api_changed c;
    const char *code = "unset";
    struct err err;

    for (int i = 0; i < 80; i++) {
        strcat(body, "\xc3\xa9");
        if (i < 49) {
            strcat(want, "\xc3\xa9"); /* 1 + 49 * 2 = 99 bytes fit 100 */
        }
    }
    strcat(body, "\"}]}");
    EXPECT_EQ_I64(api_changed_parse(&c, body, strlen(body), &code, &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(err.msg, want);
    api_changed_free(&c);
}

TEST(changed_render_has_the_reference_shape)
{
    const char *body = "{\"entries\":[{\"queue\":\"q\"},{\"queue\":\"x\"}]}";
    struct store_partition_info parts[1] = {
        {{"p", 1}, 4, {0}, 2, 0, 1795953470283179, 1795953470283179},
    };
    struct store_changed_entry entries[2] = {
        {STORE_ENTRY_OK, 1, parts, true, 4},
        {STORE_BAD_CURSOR, 0, NULL, false, 0},
    };
    struct store_changed_answer ans = {1795953470283180, 2, entries, {0}};
    struct api_changed c;
    const char *code;
    struct buf out;
    struct err err;

    parts[0].uuid[6] = 0x70;
    parts[0].uuid[8] = 0x80;
    EXPECT_EQ_I64(api_changed_parse(&c, body, strlen(body), &code, &err), 0);
    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(api_changed_render(&c, &ans, &out, &err), 0);
    EXPECT_STR_EQ(out.data,
                  "{\"safeTime\":\"2026-11-29T11:57:50.283180Z\","
                  "\"safeTimeDegraded\":false,\"entries\":[{\"queue\":\"q\","
                  "\"partitions\":[{\"name\":\"p\",\"id\":"
                  "\"00000000-0000-7000-8000-000000000000\",\"lastOffset\":2,"
                  "\"logStart\":0,\"lastWriteAt\":"
                  "\"2026-11-29T11:57:50.283179Z\"}],\"next\":\"p|4\"},"
                  "{\"queue\":\"x\",\"error\":\"BAD_CURSOR\"}]}");
    buf_free(&out);
    api_changed_free(&c);
}

TEST(metrics_render_groups_samples_under_help_and_type)
{
    struct metrics *m = metrics_new();
    int f = metrics_family(m, "queen_test_total", METRIC_COUNTER, "a test");
    char esc[32];
    struct buf out;
    struct err err;

    metrics_add(m, f, "route=\"/a\"", 2);
    metrics_add(m, f, "route=\"/b\"", 1);
    metrics_add(m, f, "route=\"/a\"", 3);
    metrics_push(m, 3, 1, 120);
    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(metrics_render(m, &out, &err), 0);
    EXPECT(strstr(out.data, "# HELP queen_test_total a test\n"
                            "# TYPE queen_test_total counter\n"
                            "queen_test_total{route=\"/a\"} 5\n"
                            "queen_test_total{route=\"/b\"} 1\n") != NULL);
    EXPECT(strstr(out.data, "queen_push_records_total 3\n") != NULL);
    EXPECT(strstr(out.data, "queen_push_bytes_total 120\n") != NULL);
    /* gauges without samples are left out */
    EXPECT(strstr(out.data, "queen_raft_applied_index") == NULL);
    EXPECT_EQ_I64(metrics_get(m, f, "route=\"/a\""), 5);
    EXPECT(metrics_label_escape("a\"b\\c\nd", esc, sizeof(esc)));
    EXPECT_STR_EQ(esc, "a\\\"b\\\\c\\nd");
    EXPECT(!metrics_label_escape("abcdef", esc, 4));
    buf_free(&out);
    metrics_free(m);
}

/* ---- tenant (api/tenant.h) ---- */

TEST(tenant_parse_reads_the_canonical_form_in_either_case)
{
    static const uint8_t want[16] = {0x0a, 0x0b, 0x0c, 0x0d, 0xe0, 0xf0,
                                     0x40, 0x00, 0x80, 0x00, 0x00, 0x00,
                                     0x00, 0x00, 0x00, 0xff};
    uint8_t out[16];

    EXPECT(api_tenant_parse("0a0b0c0d-e0f0-4000-8000-0000000000ff", out));
    EXPECT_MEM_EQ(out, 16, want, 16);
    memset(out, 0, sizeof(out));
    EXPECT(api_tenant_parse("0A0B0C0D-E0F0-4000-8000-0000000000FF", out));
    EXPECT_MEM_EQ(out, 16, want, 16);
}

TEST(tenant_parse_refuses_anything_else_and_leaves_out_alone)
{
    static const char *const bad[] = {
        "",
        "0a0b0c0d-e0f0-4000-8000-0000000000f",   /* 35 */
        "0a0b0c0d-e0f0-4000-8000-0000000000ff0", /* 37 */
        "0a0b0c0de0f0-4000-8000-0000000000ff0",  /* dash moved */
        "0a0b0c0d-e0f0-4000-8000+0000000000ff",
        "0a0b0c0d-e0f0-4000-8000-0000000000fg",
        " 0a0b0c0d-e0f0-4000-8000-0000000000f",
        "{a0b0c0d-e0f0-4000-8000-0000000000f}",
        "0a0b0c0d0e0f040000800000000000000000",
    };
    uint8_t out[16];
    uint8_t keep[16];

    memset(keep, 0x5a, sizeof(keep));
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        memcpy(out, keep, sizeof(out));
        EXPECT(!api_tenant_parse(bad[i], out));
        EXPECT_MEM_EQ(out, 16, keep, 16);
    }
}

TEST(tenant_of_is_the_default_when_off_or_absent)
{
    uint8_t out[16];
    struct err err;

    memset(out, 0x5a, sizeof(out));
    EXPECT_EQ_I64(api_tenant_of(false, "not-a-uuid", out, &err), 0);
    EXPECT_MEM_EQ(out, 16, STORE_DEFAULT_TENANT, 16);
    memset(out, 0x5a, sizeof(out));
    EXPECT_EQ_I64(api_tenant_of(true, NULL, out, &err), 0);
    EXPECT_MEM_EQ(out, 16, STORE_DEFAULT_TENANT, 16);
    EXPECT_EQ_I64(
        api_tenant_of(true, "00000000-0000-0000-0000-00000000fffe", out, &err),
        0);
    EXPECT_EQ_U64(out[14], 0xff);
    EXPECT_EQ_U64(out[15], 0xfe);
}

TEST(tenant_of_refuses_a_malformed_header_with_a_printable_quote)
{
    char longv[200];
    uint8_t out[16];
    uint8_t keep[16];
    struct err err;

    memset(keep, 0x5a, sizeof(keep));
    memcpy(out, keep, sizeof(out));
    EXPECT_EQ_I64(api_tenant_of(true, "nope", out, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "bad x-queen-tenant header: \"nope\" is not a UUID "
                           "(8-4-4-4-12 hex digits)");
    EXPECT_MEM_EQ(out, 16, keep, 16);
    memset(longv, 'x', sizeof(longv) - 1);
    longv[0] = '\x01';
    longv[1] = (char)0xe9;
    longv[sizeof(longv) - 1] = '\0';
    EXPECT_EQ_I64(api_tenant_of(true, longv, out, &err), ERR_INVALID);
    EXPECT(strstr(err.msg, "\"??xxxxxxxx") != NULL);
    EXPECT(strstr(err.msg, "x...\" is not a UUID") != NULL);
    EXPECT_EQ_U64(strlen(err.msg), strlen("bad x-queen-tenant header: \"") +
                                       64 +
                                       strlen("...\" is not a UUID "
                                              "(8-4-4-4-12 hex digits)"));
    EXPECT_MEM_EQ(out, 16, keep, 16);
}

/* docs/design/formats.md §11: the flagged items' payloads become the binary
 * sealed form (iv || tag || ciphertext, 32 bytes over the plaintext, no
 * JSON) and are marked sealed for the command, or, while the cluster's
 * format is below 2 (store/format.h), the JSON envelope, unmarked; either
 * opens to the exact bytes pushed. The others stay unmarked slices of the
 * body. */
TEST(push_seal_replaces_only_the_flagged_payloads)
{
    static const char body[] =
        "{\"items\":[{\"queue\":\"v\",\"payload\":{\"a\": 42.00}},"
        "{\"queue\":\"p\",\"payload\":\"caf\xc3\xa9\"},"
        "{\"queue\":\"v\",\"payload\":[1,\n2]}]}";
    static const char *const want[] = {"{\"a\": 42.00}", "\"caf\xc3\xa9\"",
                                       "[1,\n2]"};
    const bool seal[3] = {true, false, true};
    uint8_t key[AEAD_KEY_LEN] = {7};
    struct api_push p;
    struct buf out;
    struct err err;

    buf_init(&out, BUF_UNLIMITED);
    for (int binary = 0; binary < 2; binary++) {
        EXPECT_EQ_I64(api_push_parse(&p, body, strlen(body), &err), 0);
        EXPECT_EQ_U64(api_push_seal(&p, seal, key, binary == 1), 0);
        for (size_t i = 0; i < 3; i++) {
            struct slice pl = p.items[i].payload;
            const uint8_t *u = (const uint8_t *)pl.ptr;
            EXPECT(p.items[i].sealed == (seal[i] && binary == 1));
            EXPECT(aead_is_envelope(u, pl.len) == (seal[i] && binary == 0));
            if (!seal[i]) {
                EXPECT(pl.ptr >= body && pl.ptr < body + sizeof(body));
                EXPECT_MEM_EQ(pl.ptr, pl.len, want[i], strlen(want[i]));
                continue;
            }
            EXPECT(memmem(pl.ptr, pl.len, want[i], strlen(want[i])) == NULL);
            buf_reset(&out);
            if (binary == 1) {
                EXPECT_EQ_U64(pl.len, strlen(want[i]) + AEAD_SEALED_OVERHEAD);
                EXPECT_EQ_I64(aead_open_raw(key, u, pl.len, &out, &err), 0);
            } else {
                EXPECT_EQ_I64(aead_open(key, u, pl.len, &out, &err), 0);
            }
            EXPECT_MEM_EQ(out.data, out.len, want[i], strlen(want[i]));
        }
        api_push_free(&p);
    }
    buf_free(&out);
}
