/* Tests of the manifest, checkpoint and KV documents (docs/design/formats.md
 * §3-§5; docs/design/scenarios.md §8, checkpoint). */
#include "sink/docs.h"

#include <zstd.h>

#include "base/xalloc.h"
#include "harness.h"
#include "store/kv.h"

static struct slice sl(const char *s)
{
    struct slice r = {s, strlen(s)};
    return r;
}

static bool sl_is(struct slice s, const char *lit)
{
    return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0;
}

static struct docs_manifest sample_manifest(struct docs_object *o,
                                            struct docs_lost *l)
{
    struct docs_manifest m;

    memset(&m, 0, sizeof(m));
    memset(o, 0, 2 * sizeof(*o));
    o[0].key =
        sl("queen/tenant=t/queue=orders/dt=2026-09-04/hour=10/w-1.jsonl");
    o[0].bytes = 120;
    o[0].records = 3;
    strcpy(o[0].sha256, "ab01");
    o[1] = o[0];
    o[1].has_partition = true;
    o[1].partition = sl("cust \"7\"");
    o[1].first_offset = 4;
    o[1].last_offset = 9;
    l[0].partition = sl("p");
    l[0].from = 1;
    l[0].to = 2;
    m.sink = sl("default");
    m.tenant = sl("t");
    m.queue = sl("orders");
    m.k = 1;
    m.t_start = 1788516000000000;
    m.t_end = 1788516300000000;
    m.format = sl("jsonl");
    m.compression = sl("zstd");
    m.layout = sl("per-partition");
    m.objects = o;
    m.n_objects = 2;
    m.records = 6;
    m.bytes = 240;
    m.partitions = 2;
    m.has_ts = true;
    m.min_ts = 1788516000000001;
    m.max_ts = 1788516000000009;
    m.lost = l;
    m.n_lost = 1;
    m.writer = sl("queen-s3/2.0.0 jsonl+zstd");
    m.committed_at_ms = 1791009464741;
    return m;
}

TEST(manifest_is_compact_with_keys_in_order)
{
    struct docs_object o[2];
    struct docs_lost l[1];
    struct docs_manifest m = sample_manifest(o, l);
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_manifest_encode(&b, &m, &err), 0);
    EXPECT_STR_EQ(
        b.data,
        "{\"sink\":\"default\",\"tenant\":\"t\",\"queue\":\"orders\",\"k\":1,"
        "\"tStart\":1788516000000000,\"tEnd\":1788516300000000,\"format\":"
        "\"jsonl\",\"compression\":\"zstd\",\"layout\":\"per-partition\","
        "\"objects\":[{\"key\":\"queen/tenant=t/queue=orders/dt=2026-09-04/"
        "hour=10/w-1.jsonl\",\"bytes\":120,\"records\":3,\"sha256\":\"ab01\"},"
        "{\"key\":\"queen/tenant=t/queue=orders/dt=2026-09-04/hour=10/"
        "w-1.jsonl\",\"bytes\":120,\"records\":3,\"sha256\":\"ab01\","
        "\"partition\":\"cust \\\"7\\\"\",\"firstOffset\":4,\"lastOffset\":9}"
        "],\"records\":6,\"bytes\":240,\"partitions\":2,\"minTs\":"
        "1788516000000001,\"maxTs\":1788516000000009,\"lost\":[{\"partition\":"
        "\"p\",\"from\":1,\"to\":2}],\"writer\":\"queen-s3/2.0.0 jsonl+zstd\","
        "\"committedAt\":\"2026-10-03T06:37:44.741000Z\"}");
    buf_free(&b);
}

TEST(manifest_without_records_omits_min_and_max)
{
    struct docs_object o[2];
    struct docs_lost l[1];
    struct docs_manifest m = sample_manifest(o, l);
    struct buf b;
    struct err err;

    m.has_ts = false;
    m.n_lost = 0;
    m.n_objects = 0;
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_manifest_encode(&b, &m, &err), 0);
    EXPECT(strstr(b.data, "minTs") == NULL);
    EXPECT(strstr(b.data, "\"objects\":[],") != NULL);
    EXPECT(strstr(b.data, "\"lost\":[],") != NULL);
    buf_free(&b);
}

TEST(manifest_round_trips)
{
    struct docs_object o[2];
    struct docs_lost l[1];
    struct docs_manifest m = sample_manifest(o, l);
    struct docs_manifest r;
    struct buf b;
    struct buf arena;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_manifest_encode(&b, &m, &err), 0);
    EXPECT_EQ_I64(docs_manifest_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(sl_is(r.sink, "default") && sl_is(r.tenant, "t") &&
           sl_is(r.queue, "orders"));
    EXPECT(r.k == 1 && r.t_start == m.t_start && r.t_end == m.t_end);
    EXPECT(sl_is(r.layout, "per-partition"));
    EXPECT_EQ_U64(r.n_objects, 2);
    EXPECT(!r.objects[0].has_partition);
    EXPECT(r.objects[1].has_partition);
    EXPECT(sl_is(r.objects[1].partition, "cust \"7\""));
    EXPECT_EQ_I64(r.objects[1].last_offset, 9);
    EXPECT_STR_EQ(r.objects[1].sha256, "ab01");
    EXPECT_EQ_U64(r.n_lost, 1);
    EXPECT(sl_is(r.lost[0].partition, "p") && r.lost[0].to == 2);
    EXPECT(r.has_ts && r.min_ts == m.min_ts && r.max_ts == m.max_ts);
    EXPECT_EQ_I64(r.committed_at_ms, m.committed_at_ms);
    EXPECT(sl_is(r.writer, "queen-s3/2.0.0 jsonl+zstd"));
    buf_free(&b);
    buf_free(&arena);
}

TEST(manifest_decode_is_tolerant_of_absent_tenant_and_lost)
{
    const char *s = "{\"sink\":\"s\",\"queue\":\"q\",\"k\":2,\"tStart\":1,"
                    "\"tEnd\":5,\"format\":\"parquet\",\"compression\":"
                    "\"snappy\",\"layout\":\"merged\",\"objects\":[],"
                    "\"records\":0,\"bytes\":0,\"partitions\":0,\"writer\":"
                    "\"w\",\"extra\":[1,{\"x\":2}]}";
    struct docs_manifest r;
    struct buf arena;
    struct err err;

    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_manifest_decode(s, strlen(s), &r, &arena, &err), 0);
    EXPECT_EQ_U64(r.tenant.len, 0);
    EXPECT_EQ_U64(r.n_lost, 0);
    EXPECT(!r.has_ts);
    buf_free(&arena);
}

TEST(manifest_decode_errors_are_clear)
{
    static const char *bad[] = {"", "[]", "{\"sink\":1}", "{\"k\":1",
                                "{\"sink\":\"s\",\"queue\":\"q\"}"};
    struct docs_manifest r;
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        struct buf arena;
        buf_init(&arena, BUF_UNLIMITED);
        EXPECT_EQ_I64(
            docs_manifest_decode(bad[i], strlen(bad[i]), &r, &arena, &err),
            ERR_CORRUPT);
        EXPECT(strncmp(err.msg, "manifest: ", 10) == 0);
        buf_free(&arena);
    }
}

TEST(manifest_matches_intent_on_every_field)
{
    struct docs_object o[2];
    struct docs_lost l[1];
    struct docs_manifest m = sample_manifest(o, l);
    struct docs_intent in = {.k = 1,
                             .t_start = m.t_start,
                             .t_end = m.t_end,
                             .format = m.format,
                             .compression = m.compression,
                             .layout = m.layout,
                             .writer = m.writer};

    EXPECT(
        docs_manifest_matches(&m, &in, sl("default"), sl("t"), sl("orders")));
    EXPECT(
        !docs_manifest_matches(&m, &in, sl("default"), sl("t"), sl("orders2")));
    EXPECT(!docs_manifest_matches(&m, &in, sl("other"), sl("t"), sl("orders")));
    in.writer = sl("queen-s3/0.0.0 jsonl+zstd");
    EXPECT(
        !docs_manifest_matches(&m, &in, sl("default"), sl("t"), sl("orders")));
    in.writer = m.writer;
    in.t_end++;
    EXPECT(
        !docs_manifest_matches(&m, &in, sl("default"), sl("t"), sl("orders")));
}

/* ---- checkpoint ---- */

static char names[1000][32];
static char ids[1000][40];

static void make_positions(struct docs_position *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "part-%04zu", (i * 7919) % n);
        snprintf(ids[i], sizeof(ids[i]), "id-%zu", i);
        v[i].name = sl(names[i]);
        v[i].offset = i % 10 == 0 ? -1 : (int64_t)i * 1000;
        v[i].id = i % 2 == 0 ? sl(ids[i]) : sl("");
    }
}

TEST(checkpoint_round_trip_of_1000_positions)
{
    static struct docs_position v[1000];
    struct docs_checkpoint cp = {40, 1788516300000000, v, 1000};
    struct docs_checkpoint r;
    struct buf b;
    struct buf arena;
    struct err err;

    make_positions(v, 1000);
    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_checkpoint_encode(&b, &cp, &err), 0);
    EXPECT_EQ_I64(docs_checkpoint_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT_EQ_I64(r.k, 40);
    EXPECT_EQ_I64(r.t_end, 1788516300000000);
    EXPECT_EQ_U64(r.n, 1000);
    for (size_t i = 0; i < r.n; i++) {
        char want[32];
        snprintf(want, sizeof(want), "part-%04zu", i);
        EXPECT(sl_is(r.positions[i].name, want));
    }
    /* every input position comes back */
    for (size_t i = 0; i < 1000; i++) {
        size_t j = (i * 7919) % 1000;
        EXPECT_EQ_I64(r.positions[j].offset, v[i].offset);
        EXPECT_MEM_EQ(r.positions[j].id.ptr, r.positions[j].id.len, v[i].id.ptr,
                      v[i].id.len);
    }
    buf_free(&b);
    buf_free(&arena);
}

TEST(checkpoint_is_a_function_of_the_positions_only)
{
    static struct docs_position v[200];
    static struct docs_position rev[200];
    struct docs_checkpoint a = {3, 9, v, 200};
    struct docs_checkpoint c = {3, 9, rev, 200};
    struct buf ba;
    struct buf bc;
    struct err err;

    make_positions(v, 200);
    for (size_t i = 0; i < 200; i++) {
        rev[i] = v[199 - i];
    }
    buf_init(&ba, BUF_UNLIMITED);
    buf_init(&bc, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_checkpoint_encode(&ba, &a, &err), 0);
    EXPECT_EQ_I64(docs_checkpoint_encode(&bc, &c, &err), 0);
    EXPECT_MEM_EQ(ba.data, ba.len, bc.data, bc.len);
    rev[5].offset++;
    buf_reset(&bc);
    EXPECT_EQ_I64(docs_checkpoint_encode(&bc, &c, &err), 0);
    EXPECT(ba.len != bc.len || memcmp(ba.data, bc.data, ba.len) != 0);
    rev[5].offset--;
    rev[6].id = sl("other-id");
    buf_reset(&bc);
    EXPECT_EQ_I64(docs_checkpoint_encode(&bc, &c, &err), 0);
    EXPECT(ba.len != bc.len || memcmp(ba.data, bc.data, ba.len) != 0);
    buf_free(&ba);
    buf_free(&bc);
}

TEST(checkpoint_names_needing_escaping_survive_and_decode_sorted)
{
    struct docs_position v[4] = {{sl("z\ttab"), 1, sl("q\"id\"")},
                                 {sl(""), 2, sl("")},
                                 {sl("new\nline"), 3, sl("\\")},
                                 {sl("\xc3\xbc"), 4, sl("")}};
    struct docs_checkpoint cp = {1, 2, v, 4};
    struct docs_checkpoint r;
    struct buf b;
    struct buf arena;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_checkpoint_encode(&b, &cp, &err), 0);
    EXPECT_EQ_I64(docs_checkpoint_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT_EQ_U64(r.n, 4);
    EXPECT(sl_is(r.positions[0].name, "") && r.positions[0].offset == 2);
    EXPECT(sl_is(r.positions[1].name, "new\nline") &&
           sl_is(r.positions[1].id, "\\"));
    EXPECT(sl_is(r.positions[2].name, "z\ttab") &&
           sl_is(r.positions[2].id, "q\"id\""));
    EXPECT(sl_is(r.positions[3].name, "\xc3\xbc"));
    buf_free(&b);
    buf_free(&arena);
}

static int zjson(const char *js, struct buf *out)
{
    struct err err;
    size_t bound = ZSTD_compressBound(strlen(js));

    buf_init(out, BUF_UNLIMITED);
    buf_reserve(out, bound, &err);
    out->len = ZSTD_compress(out->data, bound, js, strlen(js), 3);
    return 0;
}

TEST(checkpoint_decoder_is_tolerant_of_null_id_and_extras)
{
    struct buf z;
    struct buf arena;
    struct docs_checkpoint r;
    struct err err;

    zjson("{\"k\":5,\"tEnd\":7,\"positions\":[[\"a\",1,null],[\"b\",2,\"id\","
          "9,{}],[\"c\",3]],\"more\":1}",
          &z);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_checkpoint_decode(z.data, z.len, &r, &arena, &err), 0);
    EXPECT_EQ_U64(r.n, 3);
    EXPECT_EQ_U64(r.positions[0].id.len, 0);
    EXPECT(sl_is(r.positions[1].id, "id"));
    EXPECT_EQ_I64(r.positions[2].offset, 3);
    buf_free(&z);
    buf_free(&arena);
}

static void expect_cp_error(const void *p, size_t n, const char *prefix)
{
    struct buf arena;
    struct docs_checkpoint r;
    struct err err;

    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_checkpoint_decode(p, n, &r, &arena, &err), ERR_CORRUPT);
    if (strncmp(err.msg, prefix, strlen(prefix)) != 0) {
        HARNESS_FAIL("message \"%s\" does not start with \"%s\"", err.msg,
                     prefix);
    }
    buf_free(&arena);
}

TEST(corrupt_checkpoints_are_errors_not_crashes)
{
    static struct docs_position v[50];
    struct docs_checkpoint cp = {3, 9, v, 50};
    struct buf b;
    struct buf z;
    struct err err;

    make_positions(v, 50);
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_checkpoint_encode(&b, &cp, &err), 0);
    expect_cp_error("", 0, "checkpoint: not a zstd frame: ");
    expect_cp_error("{\"k\":1}", 7, "checkpoint: not a zstd frame: ");
    expect_cp_error(b.data, b.len - 5, "checkpoint: zstd decode: ");
    expect_cp_error(b.data, 8, "checkpoint: ");
    for (size_t i = 0; i < b.len; i++) {
        struct buf arena;
        struct docs_checkpoint r;
        b.data[i] ^= 0x21;
        buf_init(&arena, BUF_UNLIMITED);
        (void)docs_checkpoint_decode(b.data, b.len, &r, &arena, &err);
        buf_free(&arena);
        b.data[i] ^= 0x21;
    }
    zjson("{\"k\":1,\"tEnd\":2,\"positions\":[[\"a\"]]}", &z);
    expect_cp_error(z.data, z.len, "checkpoint: bad JSON: ");
    buf_free(&z);
    zjson("{\"k\":1,\"tEnd\":2,\"positions\":[[\"a\",1,]]}", &z);
    expect_cp_error(z.data, z.len, "checkpoint: bad JSON: ");
    buf_free(&z);
    zjson("{\"k\":1,\"positions\":[]}", &z);
    expect_cp_error(z.data, z.len, "checkpoint: bad JSON: ");
    buf_free(&z);
    buf_free(&b);
}

TEST(checkpoint_over_the_decoded_cap_is_refused)
{
    /* A frame header that declares 1 GiB of content. */
    struct buf z;
    struct err err;
    ZSTD_CCtx *c = ZSTD_createCCtx();
    char small[16] = "{}";
    size_t n;

    buf_init(&z, BUF_UNLIMITED);
    buf_reserve(&z, 256, &err);
    ZSTD_CCtx_setPledgedSrcSize(c, 1ull << 30);
    {
        ZSTD_inBuffer in = {small, 2, 0};
        ZSTD_outBuffer out = {z.data, 256, 0};
        n = ZSTD_compressStream2(c, &out, &in, ZSTD_e_flush);
        EXPECT(!ZSTD_isError(n));
        z.len = out.pos;
    }
    ZSTD_freeCCtx(c);
    expect_cp_error(z.data, z.len,
                    "checkpoint: decodes to more than 536870912 bytes; "
                    "refusing");
    buf_free(&z);
}

/* ---- KV documents ---- */

TEST(intent_round_trips)
{
    struct docs_intent in = {.k = 3,
                             .t_start = 1788516000000000,
                             .t_end = 1788516300000000,
                             .format = sl("jsonl"),
                             .compression = sl("zstd"),
                             .layout = sl("merged"),
                             .writer = sl("queen-s3/2.0.0 jsonl+zstd")};
    struct docs_intent r;
    struct buf b;
    struct buf arena;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_intent_encode(&b, &in, &err), 0);
    EXPECT_STR_EQ(b.data, "{\"k\":3,\"tStart\":1788516000000000,\"tEnd\":"
                          "1788516300000000,\"format\":\"jsonl\","
                          "\"compression\":\"zstd\",\"layout\":\"merged\","
                          "\"writer\":\"queen-s3/2.0.0 jsonl+zstd\"}");
    EXPECT_EQ_I64(docs_intent_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(r.k == 3 && r.t_start == in.t_start && r.t_end == in.t_end);
    EXPECT(sl_is(r.writer, "queen-s3/2.0.0 jsonl+zstd"));
    EXPECT(r.format.ptr[r.format.len] == '\0');
    EXPECT_EQ_I64(docs_intent_decode("{\"k\":3}", 7, &r, &arena, &err),
                  ERR_CORRUPT);
    buf_free(&b);
    buf_free(&arena);
}

/* Issue 13 item 3: every input of the keys is in the intent. */
TEST(intent_pins_align_prefix_and_per_partition_offsets)
{
    struct docs_intent_part parts[2] = {{sl("a"), 0, 2}, {sl("b\"/c"), 7, 9}};
    struct docs_intent in = {.k = 3,
                             .t_start = 10,
                             .t_end = 20,
                             .format = sl("jsonl"),
                             .compression = sl("zstd"),
                             .layout = sl("per-partition"),
                             .writer = sl("w"),
                             .has_align = true,
                             .align = sl("day"),
                             .has_prefix = true,
                             .prefix = sl("lake/q"),
                             .has_libraries = true,
                             .libraries = sl("libzstd/1.5.4"),
                             .has_parts = true,
                             .parts = parts,
                             .n_parts = 2};
    struct docs_intent r;
    struct buf b;
    struct buf arena;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_intent_encode(&b, &in, &err), 0);
    EXPECT_STR_EQ(b.data, "{\"k\":3,\"tStart\":10,\"tEnd\":20,\"format\":"
                          "\"jsonl\",\"compression\":\"zstd\",\"layout\":"
                          "\"per-partition\",\"writer\":\"w\",\"align\":"
                          "\"day\",\"prefix\":\"lake/q\",\"libraries\":"
                          "\"libzstd/1.5.4\",\"parts\":[[\"a\",0,2],"
                          "[\"b\\\"/c\",7,9]]}");
    EXPECT_EQ_I64(docs_intent_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(r.has_align && sl_is(r.align, "day"));
    EXPECT(r.has_prefix && sl_is(r.prefix, "lake/q"));
    EXPECT(r.has_libraries && sl_is(r.libraries, "libzstd/1.5.4"));
    EXPECT(r.has_parts);
    EXPECT_EQ_U64(r.n_parts, 2);
    if (r.n_parts == 2) {
        EXPECT(sl_is(r.parts[0].partition, "a") && r.parts[0].first == 0 &&
               r.parts[0].last == 2);
        EXPECT(sl_is(r.parts[1].partition, "b\"/c") && r.parts[1].first == 7 &&
               r.parts[1].last == 9);
    }
    buf_free(&b);
    buf_free(&arena);
}

/* Offsets too many for a KV value live in the bucket: the intent names the
 * object and its digest, the parts document round-trips. */
TEST(intent_names_parts_kept_in_the_bucket)
{
    static const char sha[] =
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    struct docs_intent_part parts[1] = {{sl("a"), 4, 9}};
    struct docs_intent in = {.k = 5,
                             .format = sl("jsonl"),
                             .compression = sl("zstd"),
                             .layout = sl("per-partition"),
                             .writer = sl("w"),
                             .has_parts_key = true,
                             .parts_key = sl("q/_queen/intents/x.json"),
                             .parts_sha256 = sl(sha)};
    struct docs_intent r;
    struct buf b;
    struct buf arena;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_intent_encode(&b, &in, &err), 0);
    EXPECT(strstr(b.data, "\"partsKey\":\"q/_queen/intents/x.json\","
                          "\"partsSha256\":\"0123") != NULL);
    EXPECT_EQ_I64(docs_intent_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(r.has_parts_key && !r.has_parts &&
           sl_is(r.parts_key, "q/_queen/intents/x.json") &&
           sl_is(r.parts_sha256, sha));
    buf_free(&arena);
    buf_reset(&b);
    in.parts = parts;
    in.n_parts = 1;
    EXPECT_EQ_I64(docs_parts_encode(&b, &in, &err), 0);
    EXPECT_STR_EQ(b.data, "{\"k\":5,\"parts\":[[\"a\",4,9]]}");
    memset(&r, 0, sizeof(r));
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_parts_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(r.k == 5 && r.has_parts && r.n_parts == 1 &&
           sl_is(r.parts[0].partition, "a") && r.parts[0].first == 4 &&
           r.parts[0].last == 9);
    buf_free(&arena);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_parts_decode("{\"k\":5}", 7, &r, &arena, &err),
                  ERR_CORRUPT);
    buf_free(&arena);
    buf_free(&b);
}

/* Issue 13 item 13b: the intent names the codec library that made its
 * bytes, the empty string for uncompressed JSONL; an intent without it
 * (an older node's) reads with has_libraries false. */
TEST(intent_libraries_round_trip)
{
    static const char *const libs[] = {"libzstd/1.5.4", "zlib/1.2.13",
                                       "snappy/1.1.9", ""};
    struct docs_intent in = {.k = 4,
                             .format = sl("jsonl"),
                             .compression = sl("zstd"),
                             .layout = sl("merged"),
                             .writer = sl("queen-s3/2.0.0 jsonl+zstd"),
                             .has_align = true,
                             .align = sl("hour"),
                             .has_prefix = true,
                             .prefix = sl("")};
    struct docs_intent r;
    struct buf b;
    struct buf arena;
    struct err err;
    char want[96];

    for (size_t i = 0; i < ARRAY_LEN(libs); i++) {
        in.has_libraries = true;
        in.libraries = sl(libs[i]);
        buf_init(&b, BUF_UNLIMITED);
        buf_init(&arena, BUF_UNLIMITED);
        EXPECT_EQ_I64(docs_intent_encode(&b, &in, &err), 0);
        snprintf(want, sizeof(want), ",\"prefix\":\"\",\"libraries\":\"%s\"}",
                 libs[i]);
        EXPECT(strstr(b.data, want) != NULL);
        EXPECT(strstr(b.data, "\"writer\":\"queen-s3/2.0.0 jsonl+zstd\",") !=
               NULL);
        EXPECT_EQ_I64(docs_intent_decode(b.data, b.len, &r, &arena, &err), 0);
        EXPECT(r.has_libraries && sl_is(r.libraries, libs[i]));
        EXPECT(sl_is(r.writer, "queen-s3/2.0.0 jsonl+zstd"));
        buf_free(&arena);
        buf_free(&b);
    }
    in.has_libraries = false;
    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_intent_encode(&b, &in, &err), 0);
    EXPECT(strstr(b.data, "libraries") == NULL);
    EXPECT_EQ_I64(docs_intent_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(!r.has_libraries && r.libraries.len == 0);
    buf_free(&arena);
    buf_free(&b);
}

/* An intent written before the pins: readable, every pin absent (the redo
 * then keeps this sink's settings, as it always did). */
TEST(an_intent_without_pins_reads_as_before)
{
    static const char old[] =
        "{\"k\":3,\"tStart\":10,\"tEnd\":20,\"format\":\"jsonl\","
        "\"compression\":\"zstd\",\"layout\":\"merged\",\"writer\":"
        "\"queen-s3/2.0.0 jsonl+zstd\"}";
    struct docs_intent r;
    struct buf arena;
    struct err err;

    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_intent_decode(old, strlen(old), &r, &arena, &err), 0);
    EXPECT(r.k == 3 && !r.has_align && !r.has_prefix && !r.has_parts &&
           !r.has_libraries);
    EXPECT_EQ_U64(r.n_parts, 0);
    buf_free(&arena);
}

TEST(an_intent_with_bad_pins_is_corrupt)
{
    static const char *const bad[] = {
        "\"align\":1}",           "\"prefix\":null}",
        "\"libraries\":[]}",      "\"parts\":{}}",
        "\"parts\":[[\"a\",0]]}", "\"parts\":[[\"a\",3,2]]}",
        "\"parts\":[[1,0,2]]}",   "\"parts\":[[\"a\",0,2,4]]}",
        "\"partsKey\":\"k\"}",    "\"partsKey\":\"k\",\"partsSha256\":\"00\"}",
    };
    struct docs_intent r;
    struct buf arena;
    struct err err;
    char doc[256];

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        snprintf(doc, sizeof(doc),
                 "{\"k\":3,\"tStart\":10,\"tEnd\":20,\"format\":\"jsonl\","
                 "\"compression\":\"zstd\",\"layout\":\"merged\","
                 "\"writer\":\"w\",%s",
                 bad[i]);
        buf_init(&arena, BUF_UNLIMITED);
        EXPECT_EQ_I64(docs_intent_decode(doc, strlen(doc), &r, &arena, &err),
                      ERR_CORRUPT);
        buf_free(&arena);
    }
}

/* The pinned offsets of many partitions outgrow a KV value: the encoder
 * says so rather than cut the document (the driver then keeps them in the
 * bucket, formats.md §5). */
TEST(an_intent_over_the_kv_value_limit_is_too_big)
{
    enum { N = 2000 };
    static char part_names[N][24];
    struct docs_intent_part *parts = xcalloc(N, sizeof(*parts));
    struct docs_intent in = {.k = 1,
                             .format = sl("jsonl"),
                             .compression = sl("zstd"),
                             .layout = sl("per-partition"),
                             .writer = sl("w"),
                             .has_parts = true,
                             .parts = parts,
                             .n_parts = N};
    struct buf b;
    struct err err;

    for (size_t i = 0; i < N; i++) {
        snprintf(part_names[i], sizeof(part_names[i]), "customer-%06zu", i);
        parts[i] =
            (struct docs_intent_part){sl(part_names[i]), 1000000, 2000000};
    }
    buf_init(&b, KV_VALUE_MAX);
    EXPECT_EQ_I64(docs_intent_encode(&b, &in, &err), ERR_TOO_BIG);
    buf_free(&b);
    buf_init(&b, BUF_UNLIMITED);
    in.n_parts = 100;
    EXPECT_EQ_I64(docs_intent_encode(&b, &in, &err), 0);
    EXPECT(b.len < KV_VALUE_MAX);
    buf_free(&b);
    free(parts);
}

TEST(committed_round_trips_with_an_iso_t_end)
{
    struct docs_committed c = {7,
                               1791009458377855,
                               sl("queen/_queen/tenant=t/queue=q/windows/"
                                  "0000000007.json"),
                               12,
                               3456,
                               1791009464741};
    struct docs_committed r;
    struct buf b;
    struct buf arena;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_committed_encode(&b, &c, &err), 0);
    EXPECT_STR_EQ(b.data, "{\"k\":7,\"tEnd\":\"2026-10-03T06:37:38.377855Z\","
                          "\"manifest\":\"queen/_queen/tenant=t/queue=q/"
                          "windows/0000000007.json\",\"records\":12,\"bytes\":"
                          "3456,\"committedAtMs\":1791009464741}");
    EXPECT_EQ_I64(docs_committed_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(r.k == 7 && r.t_end == c.t_end && r.records == 12 &&
           r.bytes == 3456 && r.committed_at_ms == c.committed_at_ms);
    EXPECT(sl_is(r.manifest, "queen/_queen/tenant=t/queue=q/windows/"
                             "0000000007.json"));
    buf_free(&b);
    buf_free(&arena);
}

TEST(committed_decoder_accepts_integer_t_end_and_rejects_bad_text)
{
    const char *old = "{\"k\":2,\"tEnd\":1788516300000000,\"manifest\":\"m\","
                      "\"records\":1,\"bytes\":2}";
    const char *bad = "{\"k\":2,\"tEnd\":\"2026-10-03 06:37:38Z\","
                      "\"manifest\":\"m\",\"records\":1,\"bytes\":2}";
    struct docs_committed r;
    struct buf arena;
    struct err err;

    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_committed_decode(old, strlen(old), &r, &arena, &err), 0);
    EXPECT_EQ_I64(r.t_end, 1788516300000000);
    EXPECT_EQ_I64(r.committed_at_ms, 0);
    buf_free(&arena);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_committed_decode(bad, strlen(bad), &r, &arena, &err),
                  ERR_CORRUPT);
    EXPECT_STR_EQ(err.msg, "committed: missing or bad \"tEnd\"");
    buf_free(&arena);
}

TEST(start_round_trips_and_names_a_bad_t_start)
{
    const char *bad[] = {"{\"tStart\":\"2026-10-03 06:37:38Z\"}",
                         "{\"tstart\":\"2026-10-03T06:37:38.377855Z\"}",
                         "[\"2026-10-03T06:37:38.377855Z\"]", "{"};
    struct buf b;
    struct err err;
    int64_t t = 0;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_start_encode(&b, 1791009458377855, &err), 0);
    EXPECT_STR_EQ(b.data, "{\"tStart\":\"2026-10-03T06:37:38.377855Z\"}");
    EXPECT_EQ_I64(docs_start_decode(b.data, b.len, &t, &err), 0);
    EXPECT_EQ_I64(t, 1791009458377855);
    buf_free(&b);
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        EXPECT_EQ_I64(docs_start_decode(bad[i], strlen(bad[i]), &t, &err),
                      ERR_CORRUPT);
        EXPECT(strncmp(err.msg, "start: ", 7) == 0);
    }
    EXPECT_STR_EQ(err.msg, /* the last: "{" */
                  "start: invalid JSON at byte 1: unexpected end of text");
}

TEST(lease_and_presence_round_trip)
{
    struct docs_lease l = {sl("node-1@host"), sl("0123456789abcdef"),
                           1791009464741};
    struct docs_lease r;
    struct buf b;
    struct buf arena;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_lease_encode(&b, &l, &err), 0);
    EXPECT_STR_EQ(b.data, "{\"instance\":\"node-1@host\",\"incarnation\":"
                          "\"0123456789abcdef\",\"sinceMs\":1791009464741}");
    EXPECT_EQ_I64(docs_lease_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(sl_is(r.instance, "node-1@host") &&
           sl_is(r.incarnation, "0123456789abcdef") &&
           r.since_ms == l.since_ms);
    buf_free(&arena);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_lease_decode("nonsense", 8, &r, &arena, &err),
                  ERR_CORRUPT);
    EXPECT(strncmp(err.msg, "lease: invalid JSON at byte 0", 29) == 0);
    buf_free(&b);
    buf_free(&arena);
}

TEST(a_million_positions_fit_in_39_mib)
{
    size_t n = 1000000;
    struct docs_position *v = malloc(n * sizeof(*v));
    char *text = malloc(n * 64);
    struct docs_checkpoint cp;
    struct docs_checkpoint r;
    struct buf b;
    struct buf arena;
    struct err err;

    for (size_t i = 0; i < n; i++) {
        char *name = text + i * 64;
        char *id = name + 16;
        int nl = snprintf(name, 16, "p-%07zu", i);
        int il = snprintf(id, 48, "%08zx-0000-7000-8000-%012zx",
                          (i * 2654435761u) & 0xffffffffu, i * 40503u);
        v[i].name.ptr = name;
        v[i].name.len = (size_t)nl;
        v[i].id.ptr = id;
        v[i].id.len = (size_t)il;
        v[i].offset = (int64_t)(i * 977u % 100000000u);
    }
    cp.k = 20;
    cp.t_end = 1788516300000000;
    cp.positions = v;
    cp.n = n;
    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_checkpoint_encode(&b, &cp, &err), 0);
    EXPECT(b.len < 39u * 1024 * 1024);
    EXPECT(b.len > 15000000u);
    EXPECT_EQ_I64(docs_checkpoint_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT_EQ_U64(r.n, n);
    EXPECT(sl_is(r.positions[n - 1].name, "p-0999999"));
    buf_free(&b);
    buf_free(&arena);
    free(v);
    free(text);
}

TEST(checkpoint_cadence_every_20_over_41_windows)
{
    int64_t due[4];
    size_t n = 0;

    for (int64_t k = 1; k <= 41; k++) {
        if (docs_checkpoint_due(k, 20)) {
            due[n < 4 ? n : 3] = k;
            n++;
        }
        EXPECT(!docs_checkpoint_due(k, 0));
    }
    EXPECT_EQ_U64(n, 2);
    EXPECT_EQ_I64(due[0], 20);
    EXPECT_EQ_I64(due[1], 40);
    EXPECT(docs_checkpoint_due(5, 1));
}

/* Issue 13: a window of lost ranges alone (no object, no record) round-trips
 * and still matches its intent, so its redo commits from it. */
TEST(a_manifest_of_lost_ranges_alone_round_trips_and_matches_its_intent)
{
    struct docs_object o[2];
    struct docs_lost l[1];
    struct docs_manifest m = sample_manifest(o, l);
    struct docs_manifest r;
    struct docs_intent in;
    struct buf b;
    struct buf arena;
    struct err err;

    m.n_objects = 0;
    m.records = 0;
    m.bytes = 0;
    m.partitions = 0;
    m.has_ts = false;
    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_manifest_encode(&b, &m, &err), 0);
    EXPECT(strstr(b.data, "\"objects\":[],\"records\":0,\"bytes\":0,"
                          "\"partitions\":0,\"lost\":[{\"partition\":\"p\","
                          "\"from\":1,\"to\":2}]") != NULL);
    EXPECT_EQ_I64(docs_manifest_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT_EQ_U64(r.n_objects, 0);
    EXPECT_EQ_U64(r.records, 0);
    EXPECT(!r.has_ts);
    EXPECT_EQ_U64(r.n_lost, 1);
    in = (struct docs_intent){.k = m.k,
                              .t_start = m.t_start,
                              .t_end = m.t_end,
                              .format = m.format,
                              .compression = m.compression,
                              .layout = m.layout,
                              .writer = m.writer};
    EXPECT(
        docs_manifest_matches(&r, &in, sl("default"), sl("t"), sl("orders")));
    buf_free(&b);
    buf_free(&arena);
}

/* Issue 13 item 2: the positions after a window travel last in its
 * manifest and decode back; a manifest without them decodes with
 * has_positions false. */
TEST(manifest_positions_are_last_and_round_trip)
{
    struct docs_object o[2];
    struct docs_lost l[1];
    struct docs_manifest m = sample_manifest(o, l);
    struct docs_position pos[2] = {
        {{"a\"b", 3}, 7, {"", 0}},
        {{"c", 1}, 12, {"0190a3b2-7c4d-7e8f-9a0b-1c2d3e4f5a6b", 36}}};
    struct docs_manifest r;
    struct buf b;
    struct buf arena;
    struct err err;

    m.has_positions = true;
    m.positions = pos;
    m.n_positions = 2;
    buf_init(&b, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    EXPECT_EQ_I64(docs_manifest_encode(&b, &m, &err), 0);
    EXPECT(strstr(b.data,
                  "\"committedAt\":\"2026-10-03T06:37:44.741000Z\","
                  "\"positions\":[[\"a\\\"b\",7],[\"c\",12,"
                  "\"0190a3b2-7c4d-7e8f-9a0b-1c2d3e4f5a6b\"]]}") != NULL);
    EXPECT_EQ_I64(docs_manifest_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(r.has_positions);
    EXPECT_EQ_U64(r.n_positions, 2);
    if (r.n_positions == 2) {
        EXPECT(sl_is(r.positions[0].name, "a\"b"));
        EXPECT_EQ_I64(r.positions[0].offset, 7);
        EXPECT_EQ_U64(r.positions[0].id.len, 0);
        EXPECT(
            sl_is(r.positions[1].id, "0190a3b2-7c4d-7e8f-9a0b-1c2d3e4f5a6b"));
    }
    EXPECT_EQ_U64(r.n_lost, 1); /* the other arrays are intact */
    EXPECT_EQ_U64(r.n_objects, 2);
    m.has_positions = false;
    buf_reset(&b);
    buf_reset(&arena);
    EXPECT_EQ_I64(docs_manifest_encode(&b, &m, &err), 0);
    EXPECT(strstr(b.data, "positions") == NULL);
    EXPECT_EQ_I64(docs_manifest_decode(b.data, b.len, &r, &arena, &err), 0);
    EXPECT(!r.has_positions);
    EXPECT_EQ_I64(
        docs_manifest_decode("{\"sink\":\"s\",\"queue\":\"q\",\"k\":1,"
                             "\"objects\":[],\"positions\":{}}",
                             58, &r, &arena, &err),
        ERR_CORRUPT);
    buf_free(&arena);
    buf_free(&b);
}

/* ---- the streaming checkpoint encoder (issue 13 item 8) ---- */

/* The checkpoint as the encoder before streaming made it: the whole JSON
 * (written here by hand, escapes included) compressed in one call at
 * level 3. */
static void reference_checkpoint(struct buf *out, int64_t k, int64_t t_end,
                                 const struct docs_position *v, size_t n)
{
    struct buf js;
    struct err err;

    buf_init(&js, BUF_UNLIMITED);
    buf_printf(&js, &err, "{\"k\":%lld,\"tEnd\":%lld,\"positions\":[",
               (long long)k, (long long)t_end);
    for (size_t i = 0; i < n; i++) {
        const struct slice f[2] = {v[i].name, v[i].id};
        buf_append_str(&js, i == 0 ? "[" : ",[", &err);
        for (int j = 0; j < 2; j++) {
            if (j == 1 && f[j].len == 0) {
                break;
            }
            buf_append_str(&js, j == 0 ? "\"" : ",\"", &err);
            for (size_t c = 0; c < f[j].len; c++) {
                unsigned char ch = (unsigned char)f[j].ptr[c];
                if (ch == '"' || ch == '\\') {
                    buf_printf(&js, &err, "\\%c", ch);
                } else if (ch == '\n') {
                    buf_append_str(&js, "\\n", &err);
                } else if (ch == '\t') {
                    buf_append_str(&js, "\\t", &err);
                } else if (ch < 0x20) {
                    buf_printf(&js, &err, "\\u%04x", ch);
                } else {
                    buf_append_byte(&js, (char)ch, &err);
                }
            }
            buf_append_str(&js, "\"", &err);
            if (j == 0) {
                buf_printf(&js, &err, ",%lld", (long long)v[i].offset);
            }
        }
        buf_append_str(&js, "]", &err);
    }
    buf_append_str(&js, "]}", &err);
    size_t bound = ZSTD_compressBound(js.len);
    buf_reserve(out, bound, &err);
    size_t z = ZSTD_compress(out->data, bound, js.data, js.len, 3);
    ASSERT(!ZSTD_isError(z));
    out->len = z;
    buf_free(&js);
}

/* An array source that hands out a few positions at a time, and can
 * change one between its two reads. */
struct test_source {
    struct docs_position *v;
    size_t n;
    size_t at;
    size_t batch;
    int rewinds;
    bool change_on_second;
};

static void test_rewind(void *ctx)
{
    struct test_source *s = ctx;

    s->at = 0;
    s->rewinds++;
    if (s->change_on_second && s->rewinds == 2) {
        s->v[s->n / 2].offset += 1000;
    }
}

static size_t test_read(void *ctx, struct docs_position *out, size_t max)
{
    struct test_source *s = ctx;
    size_t n = s->n - s->at;

    n = n < max ? n : max;
    n = n < s->batch ? n : s->batch;
    memcpy(out, s->v + s->at, n * sizeof(*out));
    s->at += n;
    return n;
}

/* Names of 20 to 60 bytes, some needing escapes, ids mostly UUIDs: 30,000
 * of them are ~2 MB of JSON, many 64 KiB pieces and 128 KiB zstd blocks. */
static struct docs_position *many_positions(size_t n, char **store)
{
    struct docs_position *v = xcalloc(n, sizeof(*v));
    char *p = *store = xmalloc(n * 128);

    for (size_t i = 0; i < n; i++) {
        int nl = snprintf(p, 64, "part-%06zu%s%.*s", i,
                          i % 97 == 0 ? "\"q\\\n\x01" : "", (int)(i % 41),
                          "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG");
        v[i].name = (struct slice){p, (size_t)nl};
        p += 64;
        int il = i % 13 == 0 ? 0
                             : snprintf(p, 64, "%08zx-0000-4000-8000-%012zx",
                                        i * 2654435761u & 0xffffffffu, i);
        v[i].id = (struct slice){p, (size_t)il};
        p += 64;
        v[i].offset = (int64_t)(i * 7 % 1000003);
    }
    return v;
}

/* While the JSON fits zstd's window (2 MiB at level 3; 20,000 of these
 * positions are ~1.5 MiB), the bytes are the one-shot encoder's. */
TEST(a_streamed_checkpoint_is_byte_identical_to_the_one_shot_encoder)
{
    const size_t sizes[] = {0, 1, 3, 20000};
    char *store;
    struct docs_position *v = many_positions(20000, &store);
    struct err err;

    for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
        struct test_source ts = {v, sizes[s], 0, 5 + s * 100, 0, false};
        struct docs_position_source src = {&ts, test_rewind, test_read};
        struct docs_checkpoint cp = {77, 1788516300000000, v, sizes[s]};
        struct buf want;
        struct buf got;
        struct buf arr;

        buf_init(&want, BUF_UNLIMITED);
        buf_init(&got, BUF_UNLIMITED);
        buf_init(&arr, BUF_UNLIMITED);
        reference_checkpoint(&want, 77, 1788516300000000, v, sizes[s]);
        EXPECT_EQ_I64(docs_checkpoint_encode_stream(&got, 77, 1788516300000000,
                                                    &src, &err),
                      0);
        EXPECT_EQ_I64(docs_checkpoint_encode(&arr, &cp, &err), 0);
        EXPECT_MEM_EQ(got.data, got.len, want.data, want.len);
        EXPECT_MEM_EQ(arr.data, arr.len, want.data, want.len);
        buf_free(&want);
        buf_free(&got);
        buf_free(&arr);
    }
    free(v);
    free(store);
}

/* Past the window: the same JSON, and the same bytes whatever the batches
 * the source hands out. */
TEST(a_large_streamed_checkpoint_decodes_to_the_one_shot_json)
{
    const size_t n = 60000;
    char *store;
    struct docs_position *v = many_positions(n, &store);
    struct test_source a = {v, n, 0, 1, 0, false};
    struct test_source b = {v, n, 0, 1000, 0, false};
    struct docs_position_source sa = {&a, test_rewind, test_read};
    struct docs_position_source sb = {&b, test_rewind, test_read};
    struct buf want;
    struct buf got;
    struct buf got2;
    char *wj = xmalloc(8 << 20);
    char *gj = xmalloc(8 << 20);
    struct err err;

    buf_init(&want, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    buf_init(&got2, BUF_UNLIMITED);
    reference_checkpoint(&want, 5, 6, v, n);
    EXPECT_EQ_I64(docs_checkpoint_encode_stream(&got, 5, 6, &sa, &err), 0);
    EXPECT_EQ_I64(docs_checkpoint_encode_stream(&got2, 5, 6, &sb, &err), 0);
    EXPECT_MEM_EQ(got.data, got.len, got2.data, got2.len);
    size_t wn = ZSTD_decompress(wj, 8 << 20, want.data, want.len);
    size_t gn = ZSTD_decompress(gj, 8 << 20, got.data, got.len);
    EXPECT(!ZSTD_isError(wn) && !ZSTD_isError(gn) && wn > (3u << 20));
    EXPECT_MEM_EQ(gj, gn, wj, wn);
    EXPECT_EQ_U64(ZSTD_getFrameContentSize(got.data, got.len), wn);
    free(wj);
    free(gj);
    buf_free(&want);
    buf_free(&got);
    buf_free(&got2);
    free(v);
    free(store);
}

TEST(a_streamed_checkpoint_refuses_positions_out_of_order_and_writes_nothing)
{
    char *store;
    struct docs_position *v = many_positions(3000, &store);
    struct test_source ts = {v, 3000, 0, 64, 0, false};
    struct docs_position_source src = {&ts, test_rewind, test_read};
    struct docs_position t;
    struct buf got;
    struct err err;

    buf_init(&got, BUF_UNLIMITED);
    buf_append_str(&got, "kept", &err);
    t = v[2000]; /* across a read's batch edge */
    v[2000] = v[1999];
    v[1999] = t;
    EXPECT_EQ_I64(docs_checkpoint_encode_stream(&got, 1, 2, &src, &err),
                  ERR_INVALID);
    EXPECT(strstr(err.msg, "out of order") != NULL);
    EXPECT_MEM_EQ(got.data, got.len, "kept", 4);
    v[1999] = v[2000];
    v[2000] = t;
    ts.change_on_second = true; /* the source moved between the reads */
    ts.rewinds = 0;
    EXPECT_EQ_I64(docs_checkpoint_encode_stream(&got, 1, 2, &src, &err),
                  ERR_INVALID);
    EXPECT_MEM_EQ(got.data, got.len, "kept", 4);
    buf_free(&got);
    free(v);
    free(store);
}
