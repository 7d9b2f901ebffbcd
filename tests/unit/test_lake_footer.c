/* lake_footer_check (src/lake/footer.h): the footers our Parquet writer
 * makes pass, whatever the rows (long and non-ASCII strings at the
 * statistics' cut, NULL payloads, many row groups, a dictionary too big
 * for a page, no row at all), and an edit to any part of one is named. */
#include "lake/footer.h"

#include <stdio.h>
#include <string.h>

#include "base/xalloc.h"
#include "harness.h"
#include "parquet/read.h"
#include "parquet/thrift.h"

#define QUEUE  "orders"
#define TENANT "00000000-0000-0000-0000-000000000001"

static const struct lake_footer_want want_zstd = {
    PARQUET_ZSTD, {QUEUE, sizeof(QUEUE) - 1}, {TENANT, sizeof(TENANT) - 1}};

/* Strings at the statistics' 64-byte cut: a 2-byte character across it, a
 * max whose cut prefix ends in bytes >= 0x7F (no short upper bound), and
 * plain long ASCII. */
static const char *const long_strings[] = {
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9"
    "tail",
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9",
    "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
};

/* A file of n records over the writer's options o (rows of 3
 * partitions, every third payload NULL, long strings in every column). */
static void write_file(const struct parquet_opts *o, size_t n, struct buf *out)
{
    struct parquet_writer *w = parquet_writer_new(o);
    struct err err;
    char pay[160];
    char txn[96];
    int rc = 0;

    buf_init(out, BUF_UNLIMITED);
    for (size_t i = 0; i < n; i++) {
        const char *s = long_strings[i % 3];
        const char *part = i < n / 3       ? "a"
                           : i < 2 * n / 3 ? long_strings[0]
                                           : "\xc3\xa9";
        int pl = snprintf(pay, sizeof(pay), "\"%s\"", s);
        struct parquet_record r = {{part, strlen(part)},
                                   (int64_t)i,
                                   {txn, 0},
                                   1788516221918204LL + (int64_t)(i * 7),
                                   {pay, i % 3 == 2 ? 0 : (size_t)pl}};

        r.txn.len =
            i == 0 ? 0 : (size_t)snprintf(txn, sizeof(txn), "%s%zu", s, i);
        rc = rc != 0 ? rc : parquet_writer_add(w, &r, &err);
    }
    EXPECT_EQ_I64(rc, 0);
    EXPECT_EQ_I64(parquet_writer_finish(w, out, &err), 0);
    parquet_writer_free(w);
}

/* lake_footer_check of body read back; its reason in err. */
static int check(const struct buf *body, const struct lake_footer_want *want,
                 struct err *err)
{
    struct parquet_file f;
    int rc = parquet_file_read(body->data, body->len, &f, err);

    if (rc == 0) {
        rc = lake_footer_check(body->data, body->len, &f, want, err);
    }
    parquet_file_free(&f);
    return rc;
}

/* The check of a file of the writer's with codec c and the i-th of a few
 * shapes: "" when it passes, else why, into why. */
static void writer_shape(enum parquet_codec c, size_t i, char why[300])
{
    static const size_t rows[] = {1, 2, 9, 12};
    struct parquet_opts o = {c, 0, 0, QUEUE, TENANT, 0};
    struct lake_footer_want want = want_zstd;
    struct buf body;
    struct err err;

    o.row_group_records = i % 2 == 0 ? 0 : 2; /* one row group, or many */
    o.page_bytes = i < 2 ? 0 : 64;            /* a dictionary over a page */
    want.codec = c;
    write_file(&o, rows[i], &body);
    why[0] = '\0';
    if (check(&body, &want, &err) != 0) {
        snprintf(why, 300, "codec %d, %zu rows: %s", (int)c, rows[i], err.msg);
    }
    buf_free(&body);
}

TEST(footers_the_writer_makes_pass)
{
    char why[300];
    char first[300] = "";

    for (size_t i = 0; i < 8; i++) {
        writer_shape(i < 4 ? PARQUET_ZSTD : PARQUET_SNAPPY, i % 4, why);
        if (first[0] == '\0') {
            memcpy(first, why, sizeof(first));
        }
    }
    EXPECT_STR_EQ(first, "");
}

TEST(a_file_without_rows_passes_with_the_envelope_alone)
{
    struct parquet_opts o = {PARQUET_ZSTD, 0, 0, QUEUE, TENANT, 0};
    struct buf body;
    struct err err;

    write_file(&o, 0, &body);
    EXPECT_EQ_I64(check(&body, &want_zstd, &err), 0);
    buf_free(&body);
}

/* body with the first `from` in its footer made `to` (same length). */
static bool edit_footer(struct buf *body, const char *from, const char *to,
                        size_t n)
{
    uint32_t flen;
    size_t start;

    memcpy(&flen, body->data + body->len - 8, 4);
    start = body->len - 8 - flen;
    for (size_t i = start; i + n <= body->len - 8; i++) {
        if (memcmp(body->data + i, from, n) == 0) {
            memcpy(body->data + i, to, n);
            return true;
        }
    }
    return false;
}

static void expect_named(struct buf *body, const struct lake_footer_want *want,
                         const char *part)
{
    struct err err;
    char msg[256];

    snprintf(
        msg, sizeof(msg),
        "parquet footer: %s differs from what the writer makes of its rows",
        part);
    EXPECT_EQ_I64(check(body, want, &err), ERR_CORRUPT);
    EXPECT_STR_EQ(err.msg, msg);
}

/* A file of 9 records with the first `from` of its footer made `to`, the
 * check naming part. */
static void edit_is_named(const char *from, const char *to, size_t n,
                          const char *part)
{
    struct parquet_opts o = {PARQUET_ZSTD, 0, 0, QUEUE, TENANT, 0};
    struct buf body;

    write_file(&o, 9, &body);
    EXPECT(edit_footer(&body, from, to, n));
    expect_named(&body, &want_zstd, part);
    buf_free(&body);
}

TEST(an_edit_to_each_part_is_named)
{
    int64_t top = 1788516221918204LL + 56; /* the 9th record's ts */
    char was[8];
    char now[8];

    edit_is_named("transaction_id", "transaction_ix", 14, "the schema");
    edit_is_named("queen.queue", "queen.queux", 11, "the key-value metadata");
    edit_is_named("queen-s3", "queen-s4", 8, "created_by");
    for (int i = 0; i < 8; i++) {
        was[i] = (char)(uint8_t)((uint64_t)top >> (8 * i));
        now[i] = (char)(uint8_t)((uint64_t)(top + 1) >> (8 * i));
    }
    edit_is_named(was, now, 8, "the statistics of column ts in row group 0");
}

TEST(another_queue_tenant_or_codec_than_the_manifests_is_named)
{
    struct parquet_opts o = {PARQUET_ZSTD, 0, 0, QUEUE, TENANT, 0};
    struct lake_footer_want want = want_zstd;
    struct buf body;
    struct err err;

    write_file(&o, 3, &body);
    want.queue = (struct slice){"orderz", 6};
    expect_named(&body, &want, "the key-value metadata");
    want = want_zstd;
    want.tenant = (struct slice){"t", 1};
    expect_named(&body, &want, "the key-value metadata");
    want = want_zstd;
    want.codec = PARQUET_SNAPPY;
    expect_named(&body, &want, "column partition of row group 0");
    /* the writer keeps a name up to its NUL */
    want = want_zstd;
    want.queue = (struct slice){QUEUE "\0x", sizeof(QUEUE) + 1};
    EXPECT_EQ_I64(check(&body, &want, &err), 0);
    buf_free(&body);
}

/* Field id of the ColumnMetaData of column c of row group 0 in f's tree,
 * to be edited, or NULL. */
static struct thrift_node *column_field(struct parquet_file *f, int c, int id)
{
    const struct thrift_tree *t = &f->meta;
    const struct thrift_node *rg =
        thrift_get(t, thrift_get(t, &t->nodes[0], 4), 0);
    const struct thrift_node *md =
        thrift_get(t, thrift_get(t, thrift_get(t, rg, 1), c), 3);
    const struct thrift_node *v = thrift_get(t, md, id);

    return v != NULL ? &f->meta.nodes[v - t->nodes] : NULL;
}

/* body's footer read, field id of column ts's metadata moved by one, and
 * checked: the reason. */
static void check_moved(const struct buf *body, int id, struct err *err)
{
    struct parquet_file f;
    struct thrift_node *v;

    EXPECT_EQ_I64(parquet_file_read(body->data, body->len, &f, err), 0);
    v = column_field(&f, 3, id);
    EXPECT(v != NULL);
    if (v != NULL) {
        v->i += 1;
    }
    EXPECT_EQ_I64(lake_footer_check(body->data, body->len, &f, &want_zstd, err),
                  ERR_CORRUPT);
    EXPECT_STR_EQ(err->msg, "parquet footer: column ts of row group 0: "
                            "offsets or sizes do not match its pages");
    parquet_file_free(&f);
}

TEST(placement_that_does_not_match_the_pages_is_named)
{
    static const int fields[] = {6, 7, 9}; /* unc, comp, data_page_offset */
    struct parquet_opts o = {PARQUET_ZSTD, 0, 0, QUEUE, TENANT, 0};
    struct buf body;
    struct err err;

    write_file(&o, 9, &body);
    for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
        check_moved(&body, fields[i], &err);
    }
    buf_free(&body);
}
