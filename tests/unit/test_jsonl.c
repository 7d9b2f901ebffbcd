/* Tests of the JSONL writer (docs/design/formats.md §6, §8 and
 * docs/design/scenarios.md §8 engine_jsonl). */
#include "sink/jsonl.h"

#include <zlib.h>
#include <zstd.h>

#include "base/isotime.h"
#include "base/json.h"
#include "harness.h"

static const char *parts[] = {"a/b space", "cust-0001", "cust-0002",
                              "\xc3\xbc\xc3\xb1\xc3\xae"};
static const char *payloads[] = {
    "{\"type\":\"paid\",\"amount\":1290}",
    "\"esc \\\" \\\\ \\n \\u2028 \xe2\x80\xa8 \\t\"", "",
    "[1,\"a\\u0000b\",null,42.00]"};

static struct sink_record rec(const char *part, int64_t off, const char *txn,
                              int64_t ts, const char *payload)
{
    struct sink_record r = {{part, strlen(part)},
                            off,
                            {txn, strlen(txn)},
                            ts,
                            {payload, strlen(payload)}};
    return r;
}

/* The 4 x 25 corpus of engine_jsonl, written with codec c. */
static void write_corpus(enum jsonl_codec c, struct buf *out)
{
    struct jsonl_writer *w = jsonl_writer_new(c, 0);
    struct err err;
    char txn[32];

    for (size_t p = 0; p < ARRAY_LEN(parts); p++) {
        for (int o = 0; o < 25; o++) {
            snprintf(txn, sizeof(txn), "txn-%zu-%d", p, o);
            struct sink_record r =
                rec(parts[p], o, txn, 1788516000000000 + o * 1000,
                    payloads[(p + (size_t)o) % 4]);
            EXPECT_EQ_I64(jsonl_writer_add(w, &r, &err), 0);
        }
    }
    buf_init(out, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_writer_finish(w, out, &err), 0);
    jsonl_writer_free(w);
}

static void unzstd(const struct buf *in, struct buf *out)
{
    ZSTD_DCtx *d = ZSTD_createDCtx();
    ZSTD_inBuffer ib = {in->data, in->len, 0};
    char tmp[65536];
    struct err err;
    size_t rc = 1;

    buf_init(out, BUF_UNLIMITED);
    buf_append(out, "", 0, &err);
    while (ib.pos < ib.size || rc != 0) {
        ZSTD_outBuffer ob = {tmp, sizeof(tmp), 0};
        rc = ZSTD_decompressStream(d, &ob, &ib);
        EXPECT(!ZSTD_isError(rc));
        if (ZSTD_isError(rc) || (ob.pos == 0 && ib.pos == ib.size)) {
            break;
        }
        buf_append(out, tmp, ob.pos, &err);
    }
    EXPECT_EQ_U64(rc, 0);
    ZSTD_freeDCtx(d);
}

static void ungzip(const struct buf *in, struct buf *out)
{
    z_stream zs;
    char tmp[65536];
    struct err err;
    int rc;

    memset(&zs, 0, sizeof(zs));
    buf_init(out, BUF_UNLIMITED);
    buf_append(out, "", 0, &err);
    EXPECT(inflateInit2(&zs, 15 + 16) == Z_OK);
    zs.next_in = (Bytef *)in->data;
    zs.avail_in = (uInt)in->len;
    do {
        zs.next_out = (Bytef *)tmp;
        zs.avail_out = sizeof(tmp);
        rc = inflate(&zs, Z_NO_FLUSH);
        buf_append(out, tmp, sizeof(tmp) - zs.avail_out, &err);
    } while (rc == Z_OK);
    EXPECT_EQ_I64(rc, Z_STREAM_END);
    EXPECT_EQ_U64(zs.avail_in, 0);
    inflateEnd(&zs);
}

TEST(reference_test_line_is_exact)
{
    struct buf b;
    struct err err;
    struct sink_record r = rec("cust-0420", 1811, "ord-9f21", 1788516221918204,
                               "{\"type\":\"paid\",\"amount\":1290}");

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_line(&b, &r, &err), 0);
    EXPECT_STR_EQ(b.data,
                  "{\"partition\":\"cust-0420\",\"offset\":1811,"
                  "\"transactionId\":\"ord-9f21\",\"ts\":\"2026-09-04T10:03:"
                  "41.918204Z\",\"payload\":{\"type\":\"paid\",\"amount\":"
                  "1290}}\n");
    buf_free(&b);
}

TEST(empty_payload_is_null_and_raw_line_breaks_become_spaces)
{
    struct buf b;
    struct err err;
    struct sink_record r = rec("p", 0, "", 0, "");
    struct sink_record r2 = rec("p", 1, "", 0, "[\r\n\"a\\nb\",1.500]");

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_line(&b, &r, &err), 0);
    EXPECT_STR_EQ(b.data, "{\"partition\":\"p\",\"offset\":0,"
                          "\"transactionId\":\"\",\"ts\":\"1970-01-01T00:00:"
                          "00.000000Z\",\"payload\":null}\n");
    buf_reset(&b);
    EXPECT_EQ_I64(jsonl_line(&b, &r2, &err), 0);
    EXPECT(strstr(b.data, "\"payload\":[  \"a\\nb\",1.500]}\n") != NULL);
    buf_free(&b);
}

TEST(same_records_give_the_same_bytes_per_codec)
{
    for (int c = JSONL_ZSTD; c <= JSONL_NONE; c++) {
        struct buf a;
        struct buf b;
        write_corpus((enum jsonl_codec)c, &a);
        write_corpus((enum jsonl_codec)c, &b);
        EXPECT(a.len > 0);
        EXPECT_MEM_EQ(a.data, a.len, b.data, b.len);
        buf_free(&a);
        buf_free(&b);
    }
}

TEST(gzip_header_is_deterministic)
{
    struct buf g;

    write_corpus(JSONL_GZIP, &g);
    EXPECT_EQ_U64((uint8_t)g.data[0], 0x1f);
    EXPECT_EQ_U64((uint8_t)g.data[1], 0x8b);
    EXPECT_EQ_U64((uint8_t)g.data[2], 8);
    EXPECT_EQ_U64((uint8_t)g.data[3] & 0x18, 0); /* FNAME, FCOMMENT */
    EXPECT_MEM_EQ(g.data + 4, 4, "\0\0\0\0", 4);
    EXPECT_EQ_U64((uint8_t)g.data[9], 255);
    buf_free(&g);
}

TEST(every_codec_decompresses_to_the_same_lines)
{
    struct buf plain;
    struct buf z;
    struct buf g;
    struct buf zd;
    struct buf gd;

    write_corpus(JSONL_NONE, &plain);
    write_corpus(JSONL_ZSTD, &z);
    write_corpus(JSONL_GZIP, &g);
    EXPECT_EQ_U64(((uint8_t)z.data[0]), 0x28); /* zstd magic 28 b5 2f fd */
    unzstd(&z, &zd);
    ungzip(&g, &gd);
    EXPECT_MEM_EQ(zd.data, zd.len, plain.data, plain.len);
    EXPECT_MEM_EQ(gd.data, gd.len, plain.data, plain.len);
    EXPECT(z.len < plain.len);
    EXPECT(g.len < plain.len);
    buf_free(&plain);
    buf_free(&z);
    buf_free(&g);
    buf_free(&zd);
    buf_free(&gd);
}

TEST(every_line_is_json_with_the_envelope_in_order)
{
    static const char *keys[] = {"partition", "offset", "transactionId", "ts",
                                 "payload"};
    struct buf plain;
    size_t lines = 0;

    write_corpus(JSONL_NONE, &plain);
    EXPECT(plain.len > 0 && plain.data[plain.len - 1] == '\n');
    for (char *s = plain.data; s < plain.data + plain.len;) {
        char *nl = memchr(s, '\n', (size_t)(plain.data + plain.len - s));
        struct json_doc d;
        struct err err;
        int k;
        size_t i = 0;
        EXPECT(nl != NULL);
        EXPECT(strncmp(s, "{\"partition\":", 13) == 0);
        EXPECT_EQ_I64(json_parse(&d, s, (size_t)(nl - s), NULL, &err), 0);
        EXPECT_EQ_U64(d.toks[0].count, 5);
        for (k = json_child(&d, 0); k >= 0; k = json_next(&d, k), i++) {
            EXPECT(json_str_eq(&d, k, keys[i]));
        }
        EXPECT_EQ_I64(json_obj_get(&d, 0, "queue"), -1);
        json_doc_free(&d);
        lines++;
        s = nl + 1;
    }
    EXPECT_EQ_U64(lines, 100);
    buf_free(&plain);
}

TEST(stamps_match_the_iso_form_within_and_across_seconds)
{
    static const int64_t base[] = {
        0,        1788516221918204,   -1,
        -1000001, -62135596800000000, 253402300799999999};
    static const int64_t step[] = {0, 1, 999999, 1000000, 1000001, 3600000017};

    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
        for (size_t j = 0; j < sizeof(step) / sizeof(step[0]); j++) {
            int64_t ts[2] = {base[i],
                             base[i] + (base[i] > 0 ? -1 : 1) * step[j]};
            struct jsonl_writer *w = jsonl_writer_new(JSONL_NONE, 0);
            struct buf body;
            struct err err;
            char want[32];

            for (int k = 0; k < 2; k++) { /* the second reuses the cache */
                struct sink_record r = rec("p", k, "t", ts[k], "1");
                EXPECT_EQ_I64(jsonl_writer_add(w, &r, &err), 0);
            }
            buf_init(&body, BUF_UNLIMITED);
            EXPECT_EQ_I64(jsonl_writer_finish(w, &body, &err), 0);
            for (int k = 0; k < 2; k++) {
                isotime_format_us(ts[k], want);
                char *at = body.data;
                for (int skip = 0; at != NULL && skip <= k; skip++) {
                    at = strstr(at + (skip > 0), "\"ts\":\"");
                }
                EXPECT(at != NULL && strncmp(at + 6, want, strlen(want)) == 0 &&
                       at[6 + strlen(want)] == '"');
            }
            buf_free(&body);
            jsonl_writer_free(w);
        }
    }
}

TEST(names_copied_without_escapes_equal_the_escaped_form)
{
    char name[3];
    struct buf b;
    struct buf want;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&want, BUF_UNLIMITED);
    for (int c = 1; c < 256; c++) {
        name[0] = 'x';
        name[1] = (char)c;
        name[2] = '\0';
        struct sink_record r = rec(name, -7, name, 0, "1");
        buf_reset(&b);
        buf_reset(&want);
        EXPECT_EQ_I64(jsonl_line(&b, &r, &err), 0);
        buf_append_str(&want, "{\"partition\":", &err);
        json_escape(&want, name, 2, &err);
        buf_append_str(&want, ",\"offset\":-7,\"transactionId\":", &err);
        json_escape(&want, name, 2, &err);
        buf_append_str(
            &want, ",\"ts\":\"1970-01-01T00:00:00.000000Z\",\"payload\":1}\n",
            &err);
        EXPECT_STR_EQ(b.data, want.data);
    }
    buf_free(&b);
    buf_free(&want);
}

TEST(payload_with_every_escape_survives_verbatim)
{
    const char *p = "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000\\u2028\","
                    "\"raw\":\"\xe2\x80\xa8\xe2\x80\xa9\x7f\",\"n\":1E+400}";
    struct sink_record r = rec("p", 0, "t", 0, p);
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_line(&b, &r, &err), 0);
    EXPECT(strstr(b.data, p) != NULL);
    EXPECT_EQ_I64(json_validate(b.data, b.len - 1, 128, &err), 0);
    buf_free(&b);
}

TEST(partition_with_quote_backslash_newline_is_valid_json)
{
    const char part[] = "a\"b\\c\nd\x01";
    struct sink_record r = rec(part, 0, "t\"x", 0, "1");
    struct buf b;
    struct json_doc d;
    struct buf got;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_line(&b, &r, &err), 0);
    EXPECT(strstr(b.data, "\"a\\\"b\\\\c\\nd\\u0001\"") != NULL);
    EXPECT_EQ_I64(json_parse(&d, b.data, b.len - 1, NULL, &err), 0);
    EXPECT_EQ_I64(
        json_get_str(&d, json_obj_get(&d, 0, "partition"), &got, &err), 0);
    EXPECT_STR_EQ(got.data, part);
    json_doc_free(&d);
    buf_free(&b);
    buf_free(&got);
}

TEST(hundred_thousand_records_size_check)
{
    const char *payload = "{\"type\":\"paid\",\"amount\":1290,"
                          "\"currency\":\"EUR\"}";
    struct jsonl_writer *w[3];
    struct buf out[3];
    struct buf dec;
    struct err err;
    char txn[48];

    for (int c = 0; c < 3; c++) {
        w[c] = jsonl_writer_new((enum jsonl_codec)c, 0);
    }
    for (int i = 0; i < 100000; i++) {
        snprintf(txn, sizeof(txn), "txn-cust-000042-%d", i);
        struct sink_record r =
            rec("cust-000042", i, txn, 1788516000000000 + i * 37, payload);
        for (int c = 0; c < 3; c++) {
            EXPECT_EQ_I64(jsonl_writer_add(w[c], &r, &err), 0);
        }
    }
    for (int c = 0; c < 3; c++) {
        buf_init(&out[c], BUF_UNLIMITED);
        EXPECT_EQ_U64(jsonl_writer_records(w[c]), 100000);
        EXPECT_EQ_I64(jsonl_writer_finish(w[c], &out[c], &err), 0);
    }
    EXPECT_EQ_U64(jsonl_writer_bytes_so_far(w[JSONL_ZSTD]), out[2].len);
    EXPECT_EQ_U64(jsonl_writer_bytes_so_far(w[JSONL_GZIP]), out[2].len);
    EXPECT(out[2].len >= 168u * 100000 && out[2].len <= 183u * 100000);
    EXPECT(out[0].len < out[2].len / 10);
    EXPECT(out[1].len < out[2].len / 10);
    /* Many staging flushes: the streams still decode to the plain body. */
    unzstd(&out[0], &dec);
    EXPECT(dec.len == out[2].len &&
           memcmp(dec.data, out[2].data, dec.len) == 0);
    buf_free(&dec);
    ungzip(&out[1], &dec);
    EXPECT(dec.len == out[2].len &&
           memcmp(dec.data, out[2].data, dec.len) == 0);
    buf_free(&dec);
    for (int c = 0; c < 3; c++) {
        jsonl_writer_free(w[c]);
        buf_free(&out[c]);
    }
}

TEST(factory_naming)
{
    enum jsonl_codec c;
    struct err err;

    EXPECT_STR_EQ(jsonl_extension(JSONL_ZSTD), "jsonl.zst");
    EXPECT_STR_EQ(jsonl_extension(JSONL_GZIP), "jsonl.gz");
    EXPECT_STR_EQ(jsonl_extension(JSONL_NONE), "jsonl");
    EXPECT_STR_EQ(JSONL_CONTENT_TYPE, "application/x-ndjson");
    EXPECT_STR_EQ(jsonl_writer_string(JSONL_ZSTD), "queen-s3/2.0.0 jsonl+zstd");
    EXPECT_STR_EQ(jsonl_writer_string(JSONL_GZIP), "queen-s3/2.0.0 jsonl+gzip");
    EXPECT_STR_EQ(jsonl_writer_string(JSONL_NONE), "queen-s3/2.0.0 jsonl");
    char want[128];
    snprintf(want, sizeof(want), "libzstd/%s", ZSTD_versionString());
    EXPECT_STR_EQ(jsonl_codec_library(JSONL_ZSTD), want);
    snprintf(want, sizeof(want), "zlib/%s", zlibVersion());
    EXPECT_STR_EQ(jsonl_codec_library(JSONL_GZIP), want);
    EXPECT_STR_EQ(jsonl_codec_library(JSONL_NONE), "");
    EXPECT_STR_EQ(jsonl_codec_name(JSONL_NONE), "none");
    EXPECT(jsonl_codec_parse("gzip", &c, &err) == 0 && c == JSONL_GZIP);
    EXPECT(jsonl_codec_parse("zstd", &c, &err) == 0 && c == JSONL_ZSTD);
    EXPECT(jsonl_codec_parse("none", &c, &err) == 0 && c == JSONL_NONE);
    EXPECT_EQ_I64(jsonl_codec_parse("snappy", &c, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "jsonl: snappy is a Parquet codec; a JSONL object "
                           "is zstd, gzip or plain");
    EXPECT_EQ_I64(jsonl_codec_parse("lz4", &c, &err), ERR_INVALID);
}

TEST(empty_window_produces_a_valid_object)
{
    for (int c = 0; c < 3; c++) {
        struct jsonl_writer *w = jsonl_writer_new((enum jsonl_codec)c, 0);
        struct buf out;
        struct buf plain;
        struct err err;
        buf_init(&out, BUF_UNLIMITED);
        EXPECT_EQ_I64(jsonl_writer_finish(w, &out, &err), 0);
        if (c == JSONL_ZSTD) {
            EXPECT(out.len > 0);
            unzstd(&out, &plain);
            EXPECT_EQ_U64(plain.len, 0);
            buf_free(&plain);
        } else if (c == JSONL_GZIP) {
            EXPECT(out.len >= 18);
            ungzip(&out, &plain);
            EXPECT_EQ_U64(plain.len, 0);
            buf_free(&plain);
        } else {
            EXPECT_EQ_U64(out.len, 0);
        }
        jsonl_writer_free(w);
        buf_free(&out);
    }
}

TEST(out_of_order_records_are_refused_and_change_nothing)
{
    struct jsonl_writer *w = jsonl_writer_new(JSONL_NONE, 0);
    struct sink_record a = rec("b", 5, "", 100, "1");
    struct sink_record same = rec("b", 5, "", 100, "1");
    struct sink_record back = rec("a", 9, "", 100, "1");
    struct sink_record reinc = rec("b", 0, "", 101, "1");
    struct sink_record lower = rec("b", 0, "", 50, "1");
    struct buf out;
    struct err err;

    EXPECT_EQ_I64(jsonl_writer_add(w, &a, &err), 0);
    EXPECT_EQ_I64(jsonl_writer_add(w, &same, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "jsonl: records must be sorted by (partition, "
                           "offset): \"b\"/5 after \"b\"/5");
    EXPECT_EQ_I64(jsonl_writer_add(w, &back, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "jsonl: records must be sorted by (partition, "
                           "offset): \"a\"/9 after \"b\"/5");
    EXPECT_EQ_I64(jsonl_writer_add(w, &reinc, &err), 0);
    EXPECT_EQ_I64(jsonl_writer_add(w, &lower, &err), ERR_INVALID);
    EXPECT_EQ_U64(jsonl_writer_records(w), 2);
    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_writer_finish(w, &out, &err), 0);
    EXPECT_EQ_U64(out.len, jsonl_writer_bytes_so_far(w));
    jsonl_writer_free(w);
    buf_free(&out);
}

TEST(cap_on_the_body_is_too_big)
{
    struct jsonl_writer *w = jsonl_writer_new(JSONL_NONE, 150);
    struct sink_record r = rec("p", 0, "", 0, "[1,2,3,4,5,6,7,8,9,10]");
    struct sink_record r2 = rec("p", 1, "", 0, "[1,2,3,4,5,6,7,8,9,10]");
    struct buf out;
    struct err err;

    EXPECT_EQ_I64(jsonl_writer_add(w, &r, &err), 0);
    EXPECT_EQ_I64(jsonl_writer_add(w, &r2, &err), ERR_TOO_BIG);
    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_writer_finish(w, &out, &err), ERR_TOO_BIG);
    jsonl_writer_free(w);
    buf_free(&out);
}

/* The writer reserves a line's worst case before writing it; near the cap
 * a line that fits must still go in, to the byte. */
TEST(a_body_of_exactly_the_cap_fits)
{
    struct sink_record r = rec("p\"1", 0, "t\"x", 0, "[1,2,3]");
    struct sink_record r2 = rec("p\"1", 1, "t\\y", 5, "{\"a\":\"b\"}");
    struct buf want;
    struct buf out;
    struct err err;

    buf_init(&want, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_line(&want, &r, &err), 0);
    EXPECT_EQ_I64(jsonl_line(&want, &r2, &err), 0);
    struct jsonl_writer *w = jsonl_writer_new(JSONL_NONE, want.len);
    EXPECT_EQ_I64(jsonl_writer_add(w, &r, &err), 0);
    EXPECT_EQ_I64(jsonl_writer_add(w, &r2, &err), 0);
    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_writer_finish(w, &out, &err), 0);
    EXPECT_MEM_EQ(out.data, out.len, want.data, want.len);
    jsonl_writer_free(w);
    buf_free(&out);
    buf_free(&want);
}

TEST(finish_appends_when_the_output_is_not_empty)
{
    struct jsonl_writer *w = jsonl_writer_new(JSONL_NONE, 0);
    struct sink_record r = rec("p", 0, "", 0, "1");
    struct buf out;
    struct err err;

    buf_init(&out, BUF_UNLIMITED);
    buf_append_str(&out, "X", &err);
    EXPECT_EQ_I64(jsonl_writer_add(w, &r, &err), 0);
    EXPECT_EQ_I64(jsonl_writer_finish(w, &out, &err), 0);
    EXPECT(out.data[0] == 'X' && out.data[out.len - 1] == '\n');
    EXPECT_EQ_U64(out.len, 1 + jsonl_writer_bytes_so_far(w));
    jsonl_writer_free(w);
    buf_free(&out);
}

TEST(order_error_quotes_control_bytes_escaped)
{
    char part[61];
    struct jsonl_writer *w = jsonl_writer_new(JSONL_NONE, 0);
    struct sink_record a;
    struct err err;
    const char *want = "jsonl: records must be sorted by (partition, offset): "
                       "\"\\u0001\\u0001";

    memset(part, 1, 60);
    part[60] = '\0';
    a = rec(part, 5, "", 1, "1");
    EXPECT_EQ_I64(jsonl_writer_add(w, &a, &err), 0);
    EXPECT_EQ_I64(jsonl_writer_add(w, &a, &err), ERR_INVALID);
    EXPECT(strncmp(err.msg, want, strlen(want)) == 0);
    jsonl_writer_free(w);
}

/* The corpus through a writer on context z (NULL: its own), with room
 * for expect bytes asked up front (0: none). */
static void write_corpus_expecting(struct jsonl_cctx *z, size_t n,
                                   size_t expect, struct buf *out)
{
    struct buf spare;
    struct err err;
    char txn[32];

    buf_init(&spare, BUF_UNLIMITED);
    struct jsonl_writer *w = jsonl_writer_new_with(JSONL_ZSTD, 0, &spare, z);
    if (expect > 0) {
        EXPECT_EQ_I64(jsonl_writer_expect(w, expect, &err), 0);
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(txn, sizeof(txn), "txn-%zu", i);
        struct sink_record r =
            rec("p", (int64_t)i, txn, 1788516000000000 + (int64_t)i * 1000,
                payloads[i % 4]);
        EXPECT_EQ_I64(jsonl_writer_add(w, &r, &err), 0);
    }
    buf_init(out, BUF_UNLIMITED);
    EXPECT_EQ_I64(jsonl_writer_finish(w, out, &err), 0);
    jsonl_writer_free(w);
    buf_free(&spare);
}

static void write_corpus_with(struct jsonl_cctx *z, size_t n, struct buf *out)
{
    write_corpus_expecting(z, n, 0, out);
}

TEST(a_shared_zstd_context_writes_the_bytes_of_a_fresh_one)
{
    struct jsonl_cctx *z = jsonl_cctx_new();
    struct buf fresh;
    struct buf shared;
    struct buf plain;
    struct err err;

    /* 40,000 lines (~3 MiB): several staging flushes, one frame */
    write_corpus_with(NULL, 40000, &fresh);
    for (int round = 0; round < 3; round++) {
        write_corpus_with(z, 40000, &shared);
        EXPECT_MEM_EQ(shared.data, shared.len, fresh.data, fresh.len);
        buf_free(&shared);
    }
    /* a writer dropped halfway leaves the context usable */
    struct buf spare;
    buf_init(&spare, BUF_UNLIMITED);
    struct jsonl_writer *w = jsonl_writer_new_with(JSONL_ZSTD, 0, &spare, z);
    for (int i = 0; i < 20000; i++) {
        struct sink_record r = rec("p", i, "t", 0, payloads[0]);
        EXPECT_EQ_I64(jsonl_writer_add(w, &r, &err), 0);
    }
    jsonl_writer_free(w);
    buf_free(&spare);
    write_corpus_with(z, 40000, &shared);
    EXPECT_MEM_EQ(shared.data, shared.len, fresh.data, fresh.len);
    unzstd(&shared, &plain);
    EXPECT_EQ_U64(ZSTD_getFrameContentSize(shared.data, shared.len),
                  ZSTD_CONTENTSIZE_UNKNOWN);
    EXPECT_EQ_U64(ZSTD_findFrameCompressedSize(shared.data, shared.len),
                  shared.len); /* exactly one frame */
    EXPECT(plain.len > 3u * 1024 * 1024);
    EXPECT(memcmp(plain.data, "{\"partition\":\"p\",\"offset\":0,", 28) == 0);
    buf_free(&plain);
    buf_free(&shared);
    buf_free(&fresh);
    jsonl_cctx_free(z);
}

/* Room asked up front changes no byte (the body is written into it) and
 * never goes past the writer's cap. */
TEST(expected_room_changes_no_byte_and_stays_under_the_cap)
{
    struct jsonl_cctx *z = jsonl_cctx_new();
    struct buf want;
    struct buf got;
    struct err err;

    write_corpus_with(z, 40000, &want);
    write_corpus_expecting(z, 40000, 4u * 1024 * 1024, &got);
    EXPECT_MEM_EQ(got.data, got.len, want.data, want.len);
    EXPECT(got.cap >= 4u * 1024 * 1024); /* the body that was asked for */
    buf_free(&got);
    buf_free(&want);

    /* capped at the writer's max; and under what is there, nothing moves */
    struct jsonl_writer *c = jsonl_writer_new(JSONL_NONE, 150);
    struct sink_record r = rec("p", 0, "", 0, "[1,2,3]");
    EXPECT_EQ_I64(jsonl_writer_expect(c, 1u << 30, &err), 0);
    EXPECT_EQ_I64(jsonl_writer_add(c, &r, &err), 0);
    EXPECT_EQ_I64(jsonl_writer_expect(c, 1, &err), 0);
    buf_init(&got, 150);
    EXPECT_EQ_I64(jsonl_writer_finish(c, &got, &err), 0);
    EXPECT(got.cap <= 256);
    EXPECT(got.len > 0 && got.data[got.len - 1] == '\n');
    jsonl_writer_free(c);
    buf_free(&got);
    jsonl_cctx_free(z);
}
