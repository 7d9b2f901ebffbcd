/* Tests for src/parquet/parquet.c: the footer decoded with our own Thrift
 * reader (schema, row groups, column chunk metadata, statistics, key-value
 * metadata), every record decoded back by src/parquet/read.c,
 * determinism, row-group boundaries and the refusals. DuckDB and hyparquet
 * read the same files in tests/compat/. */
#include "parquet/parquet.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>

#include "base/xalloc.h"
#include "harness.h"
#include "parquet/read.h"

/* A set of records whose slices point into one arena. */
struct corpus {
    struct parquet_record *r;
    size_t n;
    size_t cap;
    char **owned;
    size_t nowned;
    size_t cap_owned;
};

static const char *keep(struct corpus *c, const char *s, size_t n)
{
    char *p = xmalloc(n + 1);

    if (n > 0) {
        memcpy(p, s, n);
    }
    if (c->nowned == c->cap_owned) {
        c->cap_owned = c->cap_owned == 0 ? 64 : c->cap_owned * 2;
        c->owned = xrealloc(c->owned, c->cap_owned * sizeof(char *));
    }
    c->owned[c->nowned++] = p;
    return p;
}

static void add(struct corpus *c, const char *part, int64_t off,
                const char *txn, int64_t ts, const char *payload, size_t plen)
{
    struct parquet_record *r;

    if (c->n == c->cap) {
        c->cap = c->cap == 0 ? 64 : c->cap * 2;
        c->r = xrealloc(c->r, c->cap * sizeof(*c->r));
    }
    r = &c->r[c->n++];
    r->partition.len = strlen(part);
    r->partition.ptr = keep(c, part, r->partition.len);
    r->offset = off;
    r->txn.len = strlen(txn);
    r->txn.ptr = keep(c, txn, r->txn.len);
    r->ts = ts;
    r->payload.len = plen;
    r->payload.ptr = plen > 0 ? keep(c, payload, plen) : NULL;
}

static void corpus_free(struct corpus *c)
{
    for (size_t i = 0; i < c->nowned; i++) {
        free(c->owned[i]);
    }
    free(c->owned);
    free(c->r);
    memset(c, 0, sizeof(*c));
}

/* n records over `parts` partitions, sorted, some payloads null. */
static void make(struct corpus *c, size_t n, size_t parts)
{
    char part[32];
    char txn[32];
    char pl[96];

    for (size_t p = 0; p < parts; p++) {
        snprintf(part, sizeof(part), "cust-%04zu", p);
        for (size_t i = p; i < n; i += parts) {
            snprintf(txn, sizeof(txn), "txn-%zu", i);
            int k = snprintf(pl, sizeof(pl), "{\"n\":%zu,\"amount\":42.00}", i);
            add(c, part, (int64_t)(i / parts), txn,
                1791007200000000 + (int64_t)i * 1000, pl,
                i % 7 == 3 ? 0 : (size_t)k);
        }
    }
}

static void write_file(const struct corpus *c, const struct parquet_opts *o,
                       struct buf *out)
{
    struct err e;
    struct parquet_writer *w = parquet_writer_new(o);

    buf_init(out, BUF_UNLIMITED);
    for (size_t i = 0; i < c->n; i++) {
        ASSERT(parquet_writer_add(w, &c->r[i], &e) == 0);
    }
    ASSERT(parquet_writer_finish(w, out, &e) == 0);
    parquet_writer_free(w);
}

static bool slice_eq(struct slice a, struct slice b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* Decodes out and checks every record equals c's. */
static void expect_records(const struct corpus *c, const struct buf *out,
                           struct parquet_file *f)
{
    struct err e;

    EXPECT_EQ_I64(parquet_file_read(out->data, out->len, f, &e), 0);
    EXPECT_EQ_U64(f->nrecs, c->n);
    for (size_t i = 0; i < c->n && i < f->nrecs; i++) {
        const struct parquet_record *a = &c->r[i];
        const struct parquet_record *b = &f->recs[i];
        if (!slice_eq(a->partition, b->partition) || a->offset != b->offset ||
            !slice_eq(a->txn, b->txn) || a->ts != b->ts ||
            !slice_eq(a->payload, b->payload)) {
            HARNESS_FAIL("record %zu differs", i);
            break;
        }
    }
}

static const struct thrift_node *root(const struct parquet_file *f)
{
    return &f->meta.nodes[0];
}

static const struct thrift_node *
node_at(const struct parquet_file *f, const struct thrift_node *n, int a, int b)
{
    return thrift_get(&f->meta, thrift_get(&f->meta, n, a), b);
}

/* ColumnMetaData of column c in row group g. */
static const struct thrift_node *colmeta(const struct parquet_file *f, int g,
                                         int c)
{
    const struct thrift_node *rg = node_at(f, root(f), 4, g);
    return thrift_get(&f->meta, node_at(f, rg, 1, c), 3);
}

static bool bin_is(struct slice s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

static int64_t le64(struct slice s)
{
    uint64_t v = 0;

    for (size_t i = 0; i < 8 && i < s.len; i++) {
        v |= (uint64_t)(uint8_t)s.ptr[i] << (8 * i);
    }
    return s.len == 8 ? (int64_t)v : -999;
}

TEST(footer_has_the_five_columns_with_their_types)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .queue = "orders"};
    struct buf out;
    struct parquet_file f;
    static const char *names[] = {"partition", "offset", "transaction_id", "ts",
                                  "payload"};
    static const int64_t types[] = {6, 2, 6, 2, 6};
    static const int64_t conv[] = {0, -1, 0, 10, 0};

    make(&c, 50, 3);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    const struct thrift_tree *t = &f.meta;
    EXPECT_EQ_I64(thrift_get_i(t, root(&f), 1, 0), 1); /* version */
    EXPECT(bin_is(thrift_get_bin(t, root(&f), 6), "queen-s3"));
    const struct thrift_node *schema = thrift_get(t, root(&f), 2);
    EXPECT_EQ_I64(schema->i, 6);
    EXPECT(
        bin_is(thrift_get_bin(t, thrift_get(t, schema, 0), 4), "queen_record"));
    EXPECT_EQ_I64(thrift_get_i(t, thrift_get(t, schema, 0), 5, 0), 5);
    for (int i = 0; i < 5; i++) {
        const struct thrift_node *el = thrift_get(t, schema, i + 1);
        EXPECT(bin_is(thrift_get_bin(t, el, 4), names[i]));
        EXPECT_EQ_I64(thrift_get_i(t, el, 1, -1), types[i]);
        EXPECT_EQ_I64(thrift_get_i(t, el, 3, -1), i == 4 ? 1 : 0);
        EXPECT_EQ_I64(thrift_get_i(t, el, 6, -1), conv[i]);
    }
    /* ts: logicalType TIMESTAMP(isAdjustedToUTC=true, unit=MICROS) */
    const struct thrift_node *ts = node_at(&f, thrift_get(t, schema, 4), 10, 8);
    EXPECT_EQ_I64(thrift_get_i(t, ts, 1, 0), 1);
    EXPECT(node_at(&f, ts, 2, 2) != NULL);
    /* payload: logicalType STRING */
    EXPECT(node_at(&f, thrift_get(t, schema, 5), 10, 1) != NULL);
    EXPECT_EQ_I64(thrift_get(t, root(&f), 7)->i, 5); /* column_orders */
    parquet_file_free(&f);
    buf_free(&out);
    corpus_free(&c);
}

TEST(row_groups_close_at_the_configured_count)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_SNAPPY,
                             .row_group_records = 1000};
    struct buf out;
    struct parquet_file f;
    static const int64_t want[] = {1000, 1000, 500};

    make(&c, 2500, 4);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    const struct thrift_node *rgs = thrift_get(&f.meta, root(&f), 4);
    EXPECT_EQ_I64(rgs->i, 3);
    for (int g = 0; g < 3; g++) {
        const struct thrift_node *rg = thrift_get(&f.meta, rgs, g);
        EXPECT_EQ_I64(thrift_get_i(&f.meta, rg, 3, 0), want[g]);
        EXPECT_EQ_I64(thrift_get_i(&f.meta, rg, 7, -1), g); /* ordinal */
    }
    EXPECT_EQ_I64(thrift_get_i(&f.meta, root(&f), 3, 0), 2500);
    parquet_file_free(&f);
    buf_free(&out);
    o.row_group_records = 500;
    corpus_free(&c);
    make(&c, 1000, 2);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    EXPECT_EQ_I64(thrift_get(&f.meta, root(&f), 4)->i, 2); /* no empty group */
    parquet_file_free(&f);
    buf_free(&out);
    corpus_free(&c);
}

/* Chunks tile the file: PAR1, then each chunk right after the previous
 * one, and the footer right after the last. */
TEST(column_chunks_tile_the_file_with_codec_encodings_and_counts)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .row_group_records = 300};
    struct buf out;
    struct parquet_file f;
    int64_t pos = 4;
    static const int64_t enc0[] = {2, 3, 0, 3, 0};
    static const int64_t enc1[] = {3, 5, 3, 5, 3};

    make(&c, 1000, 5);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    for (int g = 0; g < 4; g++) {
        for (int k = 0; k < 5; k++) {
            const struct thrift_node *m = colmeta(&f, g, k);
            int64_t dict = thrift_get_i(&f.meta, m, 11, -1);
            int64_t start = dict >= 0 ? dict : thrift_get_i(&f.meta, m, 9, -1);
            EXPECT_EQ_I64(start, pos);
            EXPECT_EQ_I64(dict >= 0, k == 0);
            EXPECT_EQ_I64(thrift_get_i(&f.meta, m, 4, -1), 6); /* ZSTD */
            EXPECT_EQ_I64(thrift_get_i(&f.meta, m, 5, -1), g < 3 ? 300 : 100);
            const struct thrift_node *enc = thrift_get(&f.meta, m, 2);
            EXPECT_EQ_I64(thrift_get_i(&f.meta, enc, 0, -1), enc0[k]);
            EXPECT_EQ_I64(thrift_get_i(&f.meta, enc, 1, -1), enc1[k]);
            EXPECT(thrift_get_i(&f.meta, m, 6, 0) > 0);
            pos = start + thrift_get_i(&f.meta, m, 7, 0);
        }
    }
    EXPECT_EQ_I64(pos, (int64_t)(out.len - 8 - f.footer_len));
    parquet_file_free(&f);
    buf_free(&out);
    corpus_free(&c);
}

TEST(statistics_give_min_max_per_row_group)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .row_group_records = 2};
    struct buf out;
    struct parquet_file f;

    add(&c, "a", 5, "t1", 100, "{}", 2);
    add(&c, "b", 7, "t0", 90, NULL, 0);
    add(&c, "b", 8, "t2", -50, NULL, 0);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    const struct thrift_node *s = thrift_get(&f.meta, colmeta(&f, 0, 1), 12);
    EXPECT_EQ_I64(le64(thrift_get_bin(&f.meta, s, 6)), 5);
    EXPECT_EQ_I64(le64(thrift_get_bin(&f.meta, s, 5)), 7);
    EXPECT_EQ_I64(thrift_get_i(&f.meta, s, 3, -1), 0);
    s = thrift_get(&f.meta, colmeta(&f, 0, 3), 12);
    EXPECT_EQ_I64(le64(thrift_get_bin(&f.meta, s, 6)), 90);
    EXPECT_EQ_I64(le64(thrift_get_bin(&f.meta, s, 5)), 100);
    s = thrift_get(&f.meta, colmeta(&f, 0, 0), 12);
    EXPECT(bin_is(thrift_get_bin(&f.meta, s, 6), "a"));
    EXPECT(bin_is(thrift_get_bin(&f.meta, s, 5), "b"));
    s = thrift_get(&f.meta, colmeta(&f, 0, 2), 12);
    EXPECT(bin_is(thrift_get_bin(&f.meta, s, 6), "t0"));
    EXPECT(bin_is(thrift_get_bin(&f.meta, s, 5), "t1"));
    s = thrift_get(&f.meta, colmeta(&f, 0, 4), 12);
    EXPECT_EQ_I64(thrift_get_i(&f.meta, s, 3, -1), 1);
    s = thrift_get(&f.meta, colmeta(&f, 1, 4), 12); /* all null */
    EXPECT_EQ_I64(thrift_get_i(&f.meta, s, 3, -1), 1);
    EXPECT(thrift_get(&f.meta, s, 6) == NULL);
    s = thrift_get(&f.meta, colmeta(&f, 1, 3), 12);
    EXPECT_EQ_I64(le64(thrift_get_bin(&f.meta, s, 6)), -50);
    parquet_file_free(&f);
    buf_free(&out);
    corpus_free(&c);
}

/* The payload column's min and max are those of each row group's own
 * non-null values, in byte order with a prefix first, whatever the order
 * they came in and wherever the nulls are. */
TEST(payload_statistics_are_each_row_groups_own)
{
    static const char *const pl[] = {"b",  NULL, "ab", "abd", "abc", "ab",
                                     NULL, NULL, "z",  NULL,  NULL,  NULL};
    static const char *const want[][2] = {
        {"ab", "b"}, {"ab", "abd"}, {"z", "z"}, {NULL, NULL}};
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .row_group_records = 3};
    struct buf out;
    struct parquet_file f;
    char txn[16];

    for (size_t i = 0; i < sizeof(pl) / sizeof(pl[0]); i++) {
        snprintf(txn, sizeof(txn), "t%zu", i);
        add(&c, "p", (int64_t)i, txn, 1000 + (int64_t)i, pl[i],
            pl[i] != NULL ? strlen(pl[i]) : 0);
    }
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    for (int g = 0; g < 4; g++) {
        const struct thrift_node *s =
            thrift_get(&f.meta, colmeta(&f, g, 4), 12);
        if (want[g][0] == NULL) {
            EXPECT(thrift_get(&f.meta, s, 6) == NULL);
            EXPECT(thrift_get(&f.meta, s, 5) == NULL);
            EXPECT_EQ_I64(thrift_get_i(&f.meta, s, 3, -1), 3);
            continue;
        }
        EXPECT(bin_is(thrift_get_bin(&f.meta, s, 6), want[g][0]));
        EXPECT(bin_is(thrift_get_bin(&f.meta, s, 5), want[g][1]));
    }
    parquet_file_free(&f);
    buf_free(&out);
    corpus_free(&c);
}

TEST(long_string_statistics_are_cut_to_64_bytes_and_still_bound)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_SNAPPY};
    struct buf out;
    struct parquet_file f;
    char lo[101];
    char hi[101];

    memset(lo, 'a', 100);
    lo[100] = '\0';
    memset(hi, 'z', 100);
    hi[100] = '\0';
    memcpy(hi + 60, "\xc3\xa9\xc3\xa9", 4); /* two é end at byte 64 */
    add(&c, lo, 0, "x", 1, NULL, 0);
    add(&c, hi, 0, "x", 1, NULL, 0);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    const struct thrift_node *s = thrift_get(&f.meta, colmeta(&f, 0, 0), 12);
    struct slice mn = thrift_get_bin(&f.meta, s, 6);
    struct slice mx = thrift_get_bin(&f.meta, s, 5);
    EXPECT_EQ_U64(mn.len, 64);
    EXPECT(memcmp(mn.ptr, lo, 64) == 0);
    /* max: cut before the split é, last ASCII byte raised: "z"*59 + "{" */
    EXPECT_EQ_U64(mx.len, 60);
    EXPECT(memcmp(mx.ptr, hi, 59) == 0 && mx.ptr[59] == '{');
    EXPECT(memcmp(mx.ptr, hi, mx.len) > 0);
    parquet_file_free(&f);
    buf_free(&out);
    corpus_free(&c);
}

static void kv_expect(const struct parquet_file *f, int i, const char *k,
                      const char *v)
{
    const struct thrift_node *kv = node_at(f, root(f), 5, i);

    EXPECT(bin_is(thrift_get_bin(&f->meta, kv, 1), k));
    EXPECT(bin_is(thrift_get_bin(&f->meta, kv, 2), v));
}

TEST(key_value_metadata_names_envelope_queue_and_tenant_in_order)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD,
                             .queue = "orders",
                             .tenant = "00000000-0000-0000-0000-000000000001"};
    struct buf out;
    struct parquet_file f;

    make(&c, 10, 2);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    EXPECT_EQ_I64(thrift_get(&f.meta, root(&f), 5)->i, 3);
    kv_expect(&f, 0, "queen.envelope", "1");
    kv_expect(&f, 1, "queen.queue", "orders");
    kv_expect(&f, 2, "queen.tenant", "00000000-0000-0000-0000-000000000001");
    parquet_file_free(&f);
    buf_free(&out);
    o.tenant = NULL;
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    EXPECT_EQ_I64(thrift_get(&f.meta, root(&f), 5)->i, 2);
    parquet_file_free(&f);
    buf_free(&out);
    corpus_free(&c);
}

TEST(an_empty_file_is_valid_with_no_row_group_and_only_the_envelope)
{
    struct corpus c = {0};
    struct parquet_opts o = {
        .codec = PARQUET_ZSTD, .queue = "q", .tenant = "t"};
    struct buf out;
    struct parquet_file f;

    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    EXPECT_EQ_I64(thrift_get(&f.meta, root(&f), 4)->i, 0);
    EXPECT_EQ_I64(thrift_get(&f.meta, root(&f), 5)->i, 1);
    EXPECT_MEM_EQ(out.data, 4, "PAR1", 4);
    EXPECT_MEM_EQ(out.data + out.len - 4, 4, "PAR1", 4);
    parquet_file_free(&f);
    buf_free(&out);
}

TEST(same_records_give_the_same_bytes)
{
    struct corpus c = {0};
    struct parquet_opts o = {
        .codec = PARQUET_ZSTD, .row_group_records = 2500, .queue = "orders"};
    struct buf a;
    struct buf b;

    make(&c, 10000, 13);
    for (int codec = 0; codec < 2; codec++) {
        o.codec = codec == 0 ? PARQUET_ZSTD : PARQUET_SNAPPY;
        write_file(&c, &o, &a);
        write_file(&c, &o, &b);
        EXPECT_MEM_EQ(a.data, a.len, b.data, b.len);
        buf_free(&a);
        buf_free(&b);
    }
    corpus_free(&c);
}

TEST(codecs_and_row_group_sizes_change_bytes_not_content)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .row_group_records = 500};
    struct buf a;
    struct buf b;
    struct parquet_file fa;
    struct parquet_file fb;

    make(&c, 4000, 9);
    write_file(&c, &o, &a);
    o.codec = PARQUET_SNAPPY;
    o.row_group_records = 4000;
    write_file(&c, &o, &b);
    EXPECT(a.len != b.len || memcmp(a.data, b.data, a.len) != 0);
    expect_records(&c, &a, &fa);
    expect_records(&c, &b, &fb);
    EXPECT_EQ_I64(thrift_get(&fa.meta, root(&fa), 4)->i, 8);
    EXPECT_EQ_I64(thrift_get(&fb.meta, root(&fb), 4)->i, 1);
    parquet_file_free(&fa);
    parquet_file_free(&fb);
    buf_free(&a);
    buf_free(&b);
    corpus_free(&c);
}

/* Every page decompresses to the same bytes under either codec, and the
 * statistics agree; only the codec field and the compressed bytes differ. */
TEST(codecs_differ_only_in_compressed_pages)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD};
    struct buf a;
    struct buf b;
    struct parquet_file fa;
    struct parquet_file fb;

    make(&c, 3000, 5);
    write_file(&c, &o, &a);
    o.codec = PARQUET_SNAPPY;
    write_file(&c, &o, &b);
    expect_records(&c, &a, &fa);
    expect_records(&c, &b, &fb);
    EXPECT_EQ_U64(fa.npages, fb.npages);
    for (size_t i = 0; i < fa.npages && i < fb.npages; i++) {
        EXPECT_MEM_EQ(fa.pages[i], fa.page_lens[i], fb.pages[i],
                      fb.page_lens[i]);
    }
    for (int k = 0; k < 5; k++) {
        const struct thrift_node *sa =
            thrift_get(&fa.meta, colmeta(&fa, 0, k), 12);
        const struct thrift_node *sb =
            thrift_get(&fb.meta, colmeta(&fb, 0, k), 12);
        struct slice x = thrift_get_bin(&fa.meta, sa, 6);
        struct slice y = thrift_get_bin(&fb.meta, sb, 6);
        EXPECT_MEM_EQ(x.ptr, x.len, y.ptr, y.len);
        EXPECT_EQ_I64(thrift_get_i(&fa.meta, colmeta(&fa, 0, k), 4, 0), 6);
        EXPECT_EQ_I64(thrift_get_i(&fb.meta, colmeta(&fb, 0, k), 4, 0), 1);
    }
    parquet_file_free(&fa);
    parquet_file_free(&fb);
    buf_free(&a);
    buf_free(&b);
    corpus_free(&c);
}

/* Default page sizes: under zstd a page holds up to 4 MiB of values and
 * many more than 20,000 rows (one frame sees repeats far apart), under
 * snappy 1 MiB. 60,000 records in one partition: about 0.8 MB of
 * transaction ids and 1.7 MB of payloads. zstd: dictionary + index page,
 * then one page each for offset, transaction_id, ts and payload (6);
 * snappy: the payload needs two (7). */
TEST(default_pages_are_4_MiB_under_zstd_and_1_MiB_under_snappy)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD};
    struct buf a;
    struct buf b;
    struct parquet_file fa;
    struct parquet_file fb;

    make(&c, 60000, 1);
    write_file(&c, &o, &a);
    o.codec = PARQUET_SNAPPY;
    write_file(&c, &o, &b);
    expect_records(&c, &a, &fa);
    expect_records(&c, &b, &fb);
    EXPECT_EQ_U64(fa.npages, 6);
    EXPECT_EQ_U64(fb.npages, 7);
    parquet_file_free(&fa);
    parquet_file_free(&fb);
    buf_free(&a);
    buf_free(&b);
    corpus_free(&c);
}

TEST(awkward_payloads_and_names_round_trip_verbatim)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .page_bytes = 4096};
    struct buf out;
    struct parquet_file f;
    char big[200];
    size_t hugelen = 1500000;
    char *huge = xmalloc(hugelen);
    static const char pretty[] = "{\r\n  \"price\": 42.00,\n  \"big\": "
                                 "1234567890123456789012345678901234567890"
                                 "12345678901234567890123456789012345678901"
                                 "234567890123456789,\n  \"s\": \"a\\nb\"\n}";

    memset(big, '9', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memset(huge, ' ', hugelen);
    huge[0] = '[';
    huge[hugelen - 1] = ']';
    add(&c, "caff\xc3\xa8 \xe2\x82\xac/\xf0\x9f\x98\x80", 0, "", 0, pretty,
        strlen(pretty));
    add(&c, "caff\xc3\xa8 \xe2\x82\xac/\xf0\x9f\x98\x80", 1, "t", 1, big,
        strlen(big));
    add(&c, "x", -5, "\xe2\x80\xa8", INT64_MIN, "null", 4);
    add(&c, "x", INT64_MAX, "t", INT64_MAX, huge, hugelen);
    add(&c, "y", 0, "t", 0, NULL, 0);
    add(&c, "y", 1, "t", -1, "\"\"", 2);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    EXPECT(f.nrecs == 6 && f.recs[4].payload.len == 0);
    parquet_file_free(&f);
    buf_free(&out);
    free(huge);
    corpus_free(&c);
}

TEST(ten_thousand_partitions_round_trip)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_SNAPPY};
    struct buf out;
    struct parquet_file f;

    make(&c, 30000, 10000);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    const struct thrift_node *m = colmeta(&f, 0, 0);
    EXPECT(thrift_get(&f.meta, m, 11) != NULL); /* dictionary kept */
    parquet_file_free(&f);
    buf_free(&out);
    corpus_free(&c);
}

TEST(a_dictionary_over_a_page_falls_back_to_plain)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .page_bytes = 1024};
    struct buf out;
    struct parquet_file f;

    make(&c, 600, 300);
    write_file(&c, &o, &out);
    expect_records(&c, &out, &f);
    const struct thrift_node *m = colmeta(&f, 0, 0);
    EXPECT(thrift_get(&f.meta, m, 11) == NULL);
    EXPECT_EQ_I64(thrift_get_i(&f.meta, thrift_get(&f.meta, m, 2), 0, -1), 0);
    parquet_file_free(&f);
    buf_free(&out);
    corpus_free(&c);
}

static struct buf bytes_with(const struct corpus *c, size_t bad_after,
                             const struct parquet_record *bad, int want_rc)
{
    struct parquet_opts o = {.codec = PARQUET_SNAPPY};
    struct parquet_writer *w = parquet_writer_new(&o);
    struct buf out;
    struct err e;

    buf_init(&out, BUF_UNLIMITED);
    for (size_t i = 0; i < c->n; i++) {
        EXPECT_EQ_I64(parquet_writer_add(w, &c->r[i], &e), 0);
        if (i == bad_after && bad != NULL) {
            uint64_t before = parquet_writer_bytes_so_far(w);
            EXPECT_EQ_I64(parquet_writer_add(w, bad, &e), want_rc);
            EXPECT_EQ_U64(parquet_writer_bytes_so_far(w), before);
        }
    }
    EXPECT_EQ_I64(parquet_writer_finish(w, &out, &e), 0);
    parquet_writer_free(w);
    return out;
}

TEST(bad_records_are_refused_and_change_nothing)
{
    struct corpus c = {0};
    struct corpus bad = {0};
    struct buf good;

    add(&c, "b", 5, "t", 100, "1", 1);
    add(&c, "b", 6, "t", 101, "2", 1);
    add(&c, "b", 0, "t", 200, "3", 1); /* new incarnation: greater ts */
    add(&c, "c", 0, "t", 1, "4", 1);
    add(&bad, "a", 9, "t", 300, "x", 1);            /* partition back */
    add(&bad, "b", 6, "t", 101, "x", 1);            /* repeat */
    add(&bad, "b", 2, "t", 50, "x", 1);             /* lower, older */
    add(&bad, "b\xff", 7, "t", 300, "x", 1);        /* not UTF-8 */
    add(&bad, "b", 7, "t", 300, "\xed\xa0\x80", 3); /* surrogate */
    add(&bad, "b", 7, "t\xc0\xaf", 300, "x", 1);    /* overlong */
    good = bytes_with(&c, 0, NULL, 0);
    for (size_t i = 0; i < bad.n; i++) {
        struct buf b = bytes_with(&c, 1, &bad.r[i], ERR_INVALID);
        EXPECT_MEM_EQ(b.data, b.len, good.data, good.len);
        buf_free(&b);
    }
    buf_free(&good);
    corpus_free(&c);
    corpus_free(&bad);
}

TEST(bytes_so_far_sums_record_weights)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .row_group_records = 1};
    struct parquet_writer *w = parquet_writer_new(&o);
    struct err e;

    add(&c, "cust-1", 0, "txn-1", 1, "{\"a\":1}", 7); /* 64+5+6+7 */
    add(&c, "cust-1", 1, "", 2, NULL, 0);             /* 64+0+6+4 */
    for (size_t i = 0; i < c.n; i++) {
        EXPECT_EQ_I64(parquet_writer_add(w, &c.r[i], &e), 0);
    }
    EXPECT_EQ_U64(parquet_writer_bytes_so_far(w), 82 + 74);
    EXPECT_EQ_U64(parquet_writer_records(w), 2);
    parquet_writer_free(w);
    corpus_free(&c);
}

TEST(a_file_over_its_cap_is_too_big)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_SNAPPY, .max_bytes = 2000};
    struct parquet_writer *w = parquet_writer_new(&o);
    struct buf out;
    struct err e;
    int rc = 0;

    make(&c, 5000, 3);
    buf_init(&out, BUF_UNLIMITED);
    for (size_t i = 0; i < c.n && rc == 0; i++) {
        rc = parquet_writer_add(w, &c.r[i], &e);
    }
    if (rc == 0) {
        rc = parquet_writer_finish(w, &out, &e);
    }
    EXPECT_EQ_I64(rc, ERR_TOO_BIG);
    parquet_writer_free(w);
    buf_free(&out);
    corpus_free(&c);
}

TEST(writer_strings_and_names)
{
    char want[128];
    EXPECT_STR_EQ(parquet_writer_string(PARQUET_ZSTD),
                  "queen-s3/2.0.0 parquet/q2 zstd");
    EXPECT_STR_EQ(parquet_writer_string(PARQUET_SNAPPY),
                  "queen-s3/2.0.0 parquet/q2 snappy");
    snprintf(want, sizeof(want), "libzstd/%s", ZSTD_versionString());
    EXPECT_STR_EQ(parquet_codec_library(PARQUET_ZSTD), want);
    EXPECT_STR_EQ(parquet_codec_library(PARQUET_SNAPPY),
                  "snappy/" QUEEN_SNAPPY_VERSION);
    EXPECT_STR_EQ(parquet_codec_name(PARQUET_SNAPPY), "snappy");
    EXPECT_STR_EQ(PARQUET_CONTENT_TYPE, "application/vnd.apache.parquet");
    EXPECT_STR_EQ(PARQUET_EXTENSION, "parquet");
}

TEST(files_differ_only_by_the_queue_name_when_only_the_queue_differs)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .queue = "orders"};
    struct buf a;
    struct buf b;

    make(&c, 500, 3);
    write_file(&c, &o, &a);
    o.queue = "orders-eu";
    write_file(&c, &o, &b);
    EXPECT_EQ_U64(b.len, a.len + 3);
    /* everything before the footer is identical */
    size_t footer = a.len - 8 - (size_t)(uint8_t)a.data[a.len - 8] -
                    ((size_t)(uint8_t)a.data[a.len - 7] << 8);
    EXPECT(memcmp(a.data, b.data, footer) == 0);
    buf_free(&a);
    buf_free(&b);
    corpus_free(&c);
}

TEST(a_hundred_thousand_small_records_compress_below_half)
{
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD};
    struct parquet_writer *w = parquet_writer_new(&o);
    struct buf out;
    struct err e;
    char pl[256];

    for (int i = 0; i < 100000; i++) {
        int n =
            snprintf(pl, sizeof(pl),
                     "{\"type\":\"paid\",\"amount\":%d,\"currency\":\"EUR\","
                     "\"customer\":{\"id\":%d,\"name\":\"customer %d\"},"
                     "\"items\":[%d,%d,%d],\"note\":\"order %d of day\"}",
                     i % 5000, i % 977, i % 977, i, i * 3, i * 7, i);
        struct parquet_record r = {
            {"cust-000042", 11}, i, {pl, 20}, i, {pl, (size_t)n}};
        EXPECT_EQ_I64(parquet_writer_add(w, &r, &e), 0);
    }
    uint64_t raw = parquet_writer_bytes_so_far(w);
    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(parquet_writer_finish(w, &out, &e), 0);
    EXPECT(out.len < raw / 2);
    parquet_writer_free(w);
    buf_free(&out);
    corpus_free(&c);
}

TEST(a_cap_below_the_magic_is_too_big_at_finish)
{
    struct parquet_opts o = {.codec = PARQUET_ZSTD, .max_bytes = 2};
    struct parquet_writer *w = parquet_writer_new(&o);
    struct buf out;
    struct err e;

    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(parquet_writer_finish(w, &out, &e), ERR_TOO_BIG);
    EXPECT_EQ_U64(out.len, 0);
    parquet_writer_free(w);
    buf_free(&out);
}

TEST(a_bound_on_what_a_file_decodes_to_refuses_it_past_the_bound)
{
    /* 8 MiB of one byte compresses ~1000:1: what the file decodes to, not
     * its size, is what a reader holds. */
    struct corpus c = {0};
    struct parquet_opts o = {.codec = PARQUET_ZSTD};
    struct parquet_file f;
    struct buf out;
    struct err e;
    size_t big = (size_t)8 << 20;
    char *pl = xmalloc(big);

    memset(pl, 'a', big);
    pl[0] = '"';
    pl[big - 1] = '"';
    add(&c, "p", 0, "t0", 1, pl, big);
    add(&c, "p", 1, "t1", 2, "{}", 2);
    write_file(&c, &o, &out);
    EXPECT(out.len < big / 100);
    EXPECT_EQ_I64(parquet_file_read_max(out.data, out.len, SIZE_MAX, &f, &e),
                  0);
    size_t need = f.decoded;
    EXPECT(need > big && need < big + ((size_t)1 << 20));
    EXPECT_EQ_U64(f.nrecs, 2);
    parquet_file_free(&f);
    EXPECT_EQ_I64(parquet_file_read_max(out.data, out.len, need, &f, &e), 0);
    EXPECT_EQ_U64(f.nrecs, 2);
    EXPECT(f.recs[0].payload.len == big);
    parquet_file_free(&f);
    EXPECT_EQ_I64(parquet_file_read_max(out.data, out.len, need - 1, &f, &e),
                  ERR_CORRUPT);
    EXPECT(strstr(e.msg, "decodes to more than") != NULL);
    parquet_file_free(&f);
    /* a footer declaring more rows than the bound can hold is refused
     * before they are allocated */
    EXPECT_EQ_I64(parquet_file_read_max(out.data, out.len, 64, &f, &e),
                  ERR_CORRUPT);
    EXPECT(strstr(e.msg, "decodes to more than 64 bytes") != NULL);
    EXPECT(f.recs == NULL);
    parquet_file_free(&f);
    free(pl);
    buf_free(&out);
    corpus_free(&c);
}
