/* Tests of object and KV key layout (docs/design/formats.md §1, §2 and
 * docs/design/protocol.md §3, §4). */
#include "sink/layout.h"

#include "base/isotime.h"
#include "harness.h"

#define T1 "00000000-0000-0000-0000-000000000001"

static struct layout_queue lq(const char *prefix, const char *tenant,
                              const char *queue)
{
    struct layout_queue q = {
        prefix, {tenant, strlen(tenant)}, {queue, strlen(queue)}};
    return q;
}

static struct slice sl(const char *s)
{
    struct slice r = {s, strlen(s)};
    return r;
}

/* The data key of window w of queue q must be want. */
static void expect_data_key(const struct layout_queue *q,
                            const struct layout_window *w, const char *want)
{
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(layout_data_key(&b, q, w, &err), 0);
    EXPECT_STR_EQ(b.data, want);
    buf_free(&b);
}

TEST(merged_key_reference_vector)
{
    struct layout_queue q = lq("queen", T1, "orders");
    struct layout_window w = {LAYOUT_ALIGN_HOUR, 1842,
                              1788516000000000,  1788516300000000,
                              1788516000000000,  "jsonl.zst"};

    expect_data_key(&q, &w,
                    "queen/tenant=" T1 "/queue=orders/dt=2026-09-04/"
                    "hour=10/w-0000001842-1788516000000000-"
                    "1788516300000000.jsonl.zst");
}

TEST(seed_run_key_under_earliest)
{
    struct layout_queue q = lq("queen", T1, "orders");
    struct layout_window w = {LAYOUT_ALIGN_HOUR, 1, 1791007200000000,
                              1791009458377855,  0, "jsonl.zst"};

    w.bucket_ts = layout_bucket_ts(w.t_start, true, 1791009457000000, w.t_end);
    expect_data_key(&q, &w,
                    "queen/tenant=" T1 "/queue=orders/dt=2026-10-03/"
                    "hour=06/w-0000000001-1791007200000000-"
                    "1791009458377855.jsonl.zst");
}

TEST(per_partition_suffix_vector)
{
    struct layout_queue q = lq("queen", T1, "orders");
    struct layout_window w = {LAYOUT_ALIGN_HOUR, 1842,
                              1788516000000000,  1788516300000000,
                              1788516000000000,  "parquet"};
    const int64_t fl[2] = {1400, 1811};
    struct buf b;
    struct err err;
    const char *want = "-p-cust-0420-000000001400-000000001811.parquet";

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(layout_part_key(&b, &q, &w, sl("cust-0420"), fl, &err), 0);
    EXPECT(b.len > strlen(want));
    EXPECT_STR_EQ(b.data + b.len - strlen(want), want);
    EXPECT(
        strstr(b.data, "/w-0000001842-1788516000000000-1788516300000000-p-"));
    buf_free(&b);
}

TEST(alignment_day_and_none)
{
    struct layout_queue q = lq("queen", "t", "q");
    struct layout_window w = {LAYOUT_ALIGN_DAY, 2,
                              1788516000000000, 1788516300000000,
                              1788516000000000, "jsonl"};

    expect_data_key(&q, &w,
                    "queen/tenant=t/queue=q/dt=2026-09-04/w-0000000002-"
                    "1788516000000000-1788516300000000.jsonl");
    w.align = LAYOUT_ALIGN_NONE;
    expect_data_key(&q, &w,
                    "queen/tenant=t/queue=q/dt=2026-09-04/hour=10/"
                    "w-0000000002-1788516000000000-1788516300000000."
                    "jsonl");
}

TEST(padding_clamps_negatives_and_min)
{
    struct layout_queue q = lq("queen", "t", "q");
    struct layout_window w = {LAYOUT_ALIGN_HOUR, 1,         ISOTIME_MIN, 5,
                              ISOTIME_MIN,       "jsonl.gz"};
    const int64_t fl[2] = {-3, 7};
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(layout_part_key(&b, &q, &w, sl("p"), fl, &err), 0);
    EXPECT_STR_EQ(b.data, "queen/tenant=t/queue=q/dt=1970-01-01/hour=00/"
                          "w-0000000001-0000000000000000-0000000000000005-p-p-"
                          "000000000000-000000000007.jsonl.gz");
    EXPECT_EQ_I64(layout_bucket_ts(ISOTIME_MIN, true, 42, 99), 42);
    EXPECT_EQ_I64(layout_bucket_ts(ISOTIME_MIN, false, 42, 99), 99);
    EXPECT_EQ_I64(layout_bucket_ts(7, true, 42, 99), 7);
    buf_free(&b);
}

TEST(sidecar_keys)
{
    struct layout_queue q = lq("queen", T1, "orders");
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(layout_manifest_key(&b, &q, 1, &err), 0);
    EXPECT_STR_EQ(b.data, "queen/_queen/tenant=" T1 "/queue=orders/windows/"
                          "0000000001.json");
    buf_reset(&b);
    EXPECT_EQ_I64(layout_checkpoint_key(&b, &q, 40, &err), 0);
    EXPECT_STR_EQ(b.data, "queen/_queen/tenant=" T1 "/queue=orders/checkpoint/"
                          "0000000040.json.zst");
    buf_reset(&b);
    EXPECT_EQ_I64(layout_parts_key(&b, &q, 7,
                                   "0123456789abcdef0123456789abcdef0123456789"
                                   "abcdef0123456789abcdef",
                                   &err),
                  0);
    EXPECT_STR_EQ(b.data, "queen/_queen/tenant=" T1 "/queue=orders/intents/"
                          "0000000007-0123456789abcdef.json");
    buf_reset(&b);
    EXPECT_EQ_I64(layout_sidecar_root(&b, &q, &err), 0);
    EXPECT_STR_EQ(b.data, "queen/_queen/tenant=" T1 "/queue=orders");
    buf_reset(&b);
    EXPECT_EQ_I64(layout_checkpoint_prefix(&b, &q, &err), 0);
    EXPECT_STR_EQ(b.data,
                  "queen/_queen/tenant=" T1 "/queue=orders/checkpoint/");
    buf_free(&b);
}

TEST(names_are_escaped_and_prefix_is_not)
{
    struct layout_queue q =
        lq("lake/raw", "a/b", "e.ord/eu \xc3\xa9t\xc3\xa9:1%");
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(layout_sidecar_root(&b, &q, &err), 0);
    EXPECT_STR_EQ(b.data, "lake/raw/_queen/tenant=a%2Fb/queue=e.ord%2Feu%20"
                          "%C3%A9t%C3%A9%3A1%25");
    buf_reset(&b);
    q.prefix = "";
    EXPECT_EQ_I64(layout_sidecar_root(&b, &q, &err), 0);
    EXPECT(strncmp(b.data, "_queen/tenant=", 14) == 0);
    buf_free(&b);
}

TEST(forged_names_produce_exactly_5_slashes)
{
    static const char *names[] = {"../../etc", "a/b/c", "dt=x/hour=1", "/",
                                  "..",        "%2F",   "w-1/x.jsonl"};
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        for (size_t j = 0; j < ARRAY_LEN(names); j++) {
            struct layout_queue q = lq("queen", names[i], names[j]);
            struct layout_window w = {LAYOUT_ALIGN_HOUR, 3,
                                      1788516000000000,  1788516300000000,
                                      1788516000000000,  "jsonl.zst"};
            int slashes = 0;
            buf_reset(&b);
            EXPECT_EQ_I64(layout_data_key(&b, &q, &w, &err), 0);
            for (size_t k = 0; k < b.len; k++) {
                slashes += b.data[k] == '/';
            }
            EXPECT_EQ_I64(slashes, 5);
        }
    }
    buf_free(&b);
}

TEST(key_order_is_window_order_over_40_windows)
{
    struct layout_queue q = lq("queen", "t", "orders");
    struct buf prev;
    struct buf cur;
    struct err err;
    int64_t t = 1788516000000000 - 7 * ISOTIME_US_H;

    buf_init(&prev, BUF_UNLIMITED);
    buf_init(&cur, BUF_UNLIMITED);
    for (int64_t k = 1; k <= 40; k++) {
        /* windows of varying length crossing hours and days */
        int64_t end = t + (k % 3 + 1) * 1700 * ISOTIME_US_S + k;
        struct layout_window w = {LAYOUT_ALIGN_HOUR, k, t, end, t, "jsonl.zst"};
        buf_reset(&cur);
        EXPECT_EQ_I64(layout_data_key(&cur, &q, &w, &err), 0);
        if (k > 1 && strcmp(prev.data, cur.data) >= 0) {
            HARNESS_FAIL("window %lld sorts before its predecessor",
                         (long long)k);
        }
        buf_reset(&prev);
        buf_append(&prev, cur.data, cur.len, &err);
        t = end;
    }
    buf_free(&prev);
    buf_free(&cur);
}

TEST(key_parsing_of_checkpoint_and_manifest_k)
{
    int64_t k = -1;
    const char *c =
        "queen/_queen/tenant=t/queue=q/checkpoint/0000000040.json.zst";
    const char *m = "queen/_queen/tenant=t/queue=q/windows/0000001842.json";

    EXPECT(layout_parse_checkpoint_k(c, strlen(c), &k) && k == 40);
    EXPECT(layout_parse_manifest_k(m, strlen(m), &k) && k == 1842);
    EXPECT(layout_parse_checkpoint_k("x/checkpoint/7.json.zst", 23, &k) &&
           k == 7);
    EXPECT(!layout_parse_checkpoint_k("x/checkpoint/.json.zst", 22, &k));
    EXPECT(!layout_parse_checkpoint_k("x/checkpoint/1a.json.zst", 24, &k));
    EXPECT(!layout_parse_checkpoint_k("x/checkpoint/12.json", 20, &k));
    EXPECT(!layout_parse_checkpoint_k("x/windows/12.json.zst", 21, &k));
    EXPECT(!layout_parse_manifest_k("x/windows/12.json.zst", 21, &k));
    EXPECT(!layout_parse_manifest_k("x/windows/99999999999999999999.json", 35,
                                    &k));
    EXPECT(layout_parse_checkpoint_k("a/checkpoint/b/checkpoint/3.json.zst", 36,
                                     &k) &&
           k == 3);
}

TEST(kv_key_vectors)
{
    static const struct {
        const char *sink;
        const char *queue;
        enum layout_kv kind;
        const char *want;
    } keys[] = {
        {"default", "orders", LAYOUT_KV_LEASE, "s3:default:orders:lease"},
        {"sink-2", "a/b", LAYOUT_KV_INTENT, "s3:sink-2:a%2Fb:intent"},
        {"default", "a b", LAYOUT_KV_COMMITTED, "s3:default:a%20b:committed"},
        {"default", "a:b", LAYOUT_KV_LEASE, "s3:default:a%3Ab:lease"},
        {"default", "a b/\xc3\xbc:c", LAYOUT_KV_COMMITTED,
         "s3:default:a%20b%2F%C3%BC%3Ac:committed"},
        {"lake-eu.1", "Orders_2026.v-1", LAYOUT_KV_COMMITTED,
         "s3:lake-eu.1:Orders_2026.v-1:committed"},
    };
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        buf_reset(&b);
        layout_kv_key(&b, keys[i].sink, sl(keys[i].queue), keys[i].kind, &err);
        EXPECT_STR_EQ(b.data, keys[i].want);
    }
    buf_reset(&b);
    layout_presence_key(&b, "default", sl("node-1@host"), &err);
    EXPECT_STR_EQ(b.data, "s3:default:node=node-1%40host");
    buf_reset(&b);
    layout_kv_key(&b, "default", sl("node=x"), LAYOUT_KV_LEASE, &err);
    EXPECT(strncmp(b.data, "s3:default:node=", 16) != 0);
    buf_free(&b);
}

TEST(names_of_kinds_and_alignments)
{
    enum layout_kind k;
    enum layout_align a;

    EXPECT(layout_kind_parse("per-partition", &k) && k == LAYOUT_PER_PARTITION);
    EXPECT_STR_EQ(layout_kind_name(LAYOUT_MERGED), "merged");
    EXPECT(!layout_kind_parse("perpartition", &k));
    EXPECT(layout_align_parse("day", &a) && a == LAYOUT_ALIGN_DAY);
    EXPECT_STR_EQ(layout_align_name(LAYOUT_ALIGN_NONE), "none");
    EXPECT(!layout_align_parse("minute", &a));
    EXPECT_EQ_I64(layout_align_unit(LAYOUT_ALIGN_HOUR), 3600000000);
    EXPECT_EQ_I64(layout_align_unit(LAYOUT_ALIGN_NONE), 0);
}

TEST(a_key_past_the_cap_leaves_the_buffer_unchanged)
{
    struct layout_queue q = lq("queen", T1, "orders");
    struct buf b;
    struct err err;

    buf_init(&b, 40);
    buf_append_str(&b, "keep", &err);
    EXPECT_EQ_I64(layout_manifest_key(&b, &q, 1, &err), ERR_TOO_BIG);
    EXPECT_STR_EQ(b.data, "keep");
    buf_free(&b);
}
