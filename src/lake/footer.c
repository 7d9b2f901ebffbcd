/* The footer of a Parquet object of the lake, checked against the rows the
 * object holds (docs/design/formats.md §7).
 *
 * The writer's footer is a function of the rows and of where its pages
 * landed. Where they landed depends on the codec library's output, so
 * those numbers are read from the footer and proven against the pages
 * (invariant (2) of footer.h); everything else is computed from the rows.
 * The rebuild makes the same Thrift calls as write_footer() in
 * src/parquet/parquet.c, in the same order, so it gives the same bytes
 * (parquet/thrift.h: the bytes are a function of the calls). A change to
 * the writer's footer must be made here too: every Parquet lake the sink
 * writes would otherwise fail verify, which tests/e2e/test_lake_tool.py
 * shows at once. */
#include "lake/footer.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/xalloc.h"
#include "parquet/thrift.h"

enum { COL_PARTITION, COL_OFFSET, COL_TXN, COL_TS, COL_PAYLOAD, NCOLS };

/* parquet.thrift's values, as src/parquet/parquet.c writes them */
enum { TYPE_INT64 = 2, TYPE_BYTE_ARRAY = 6 };
enum { ENC_PLAIN = 0, ENC_PLAIN_DICTIONARY = 2, ENC_RLE = 3, ENC_DELTA = 5 };
enum { CODEC_SNAPPY = 1, CODEC_ZSTD = 6 };
enum { PAGE_DATA = 0, PAGE_DICTIONARY = 2 };

static const char *const col_names[NCOLS] = {"partition", "offset",
                                             "transaction_id", "ts", "payload"};

/* A column chunk as the footer places it: invariant (2). */
struct foot_chunk {
    int64_t dict_off; /* -1: no dictionary page */
    int64_t data_off;
    int64_t unc;
    int64_t comp;
};

struct foot_stat {
    bool has;
    size_t len;
    char v[PARQUET_STATS_MAX];
};

/* A column chunk's Statistics as the writer fills them. */
struct foot_stats {
    int64_t nulls;
    struct foot_stat min;
    struct foot_stat max;
};

/* Where a part of the rebuilt footer starts: invariant (3). */
struct foot_mark {
    size_t at;
    char what[96];
};

struct foot {
    const struct parquet_file *f;
    const struct lake_footer_want *want;
    const uint8_t *file;
    size_t data_end; /* where the footer starts */
    int64_t at;      /* where the next column chunk must start */
    size_t row0;     /* the first row of the next row group */
    struct buf out;
    struct thrift_w t;
    struct foot_mark *marks;
    size_t n_marks;
};

static void foot_mark(struct foot *b, const char *fmt, ...) PRINTF(2, 3);

static void foot_mark(struct foot *b, const char *fmt, ...)
{
    struct foot_mark *m;
    va_list ap;

    b->marks = xrealloc(b->marks, (b->n_marks + 1) * sizeof(*b->marks));
    m = &b->marks[b->n_marks++];
    m->at = b->out.len;
    va_start(ap, fmt);
    vsnprintf(m->what, sizeof(m->what), fmt, ap);
    va_end(ap);
}

/* ---- statistics, as parquet.c's stat_i64 and stat_bytes ---- */

static void foot_stat_set(struct foot_stat *s, const char *p, size_t n)
{
    s->has = true;
    s->len = n;
    memcpy(s->v, p, n);
}

static void foot_stat_i64(struct foot_stat *s, int64_t v)
{
    char b[8];

    for (int i = 0; i < 8; i++) {
        b[i] = (char)(uint8_t)((uint64_t)v >> (8 * i));
    }
    foot_stat_set(s, b, 8);
}

/* Byte order, a proper prefix first (parquet.c's bytes_cmp). */
static int foot_cmp(struct slice a, struct slice b)
{
    int c = a.len > 0 && b.len > 0
                ? memcmp(a.ptr, b.ptr, a.len < b.len ? a.len : b.len)
                : 0;

    return c != 0 ? c : a.len < b.len ? -1 : a.len > b.len;
}

/* The longest prefix of at most PARQUET_STATS_MAX bytes that ends on a
 * UTF-8 character boundary. */
static size_t foot_utf8_cut(const char *p, size_t n)
{
    if (n <= PARQUET_STATS_MAX) {
        return n;
    }
    n = PARQUET_STATS_MAX;
    while (n > 0 && ((uint8_t)p[n] & 0xC0) == 0x80) {
        n--;
    }
    return n;
}

/* min: a cut prefix. max: whole when short, else a cut prefix whose last
 * byte below 0x7F is raised by one, or none when there is no such byte. */
static void foot_stat_bytes(struct foot_stats *s, struct slice lo,
                            struct slice hi)
{
    size_t n = foot_utf8_cut(lo.ptr, lo.len);
    char tmp[PARQUET_STATS_MAX];

    foot_stat_set(&s->min, lo.ptr, n);
    if (hi.len <= PARQUET_STATS_MAX) {
        foot_stat_set(&s->max, hi.ptr, hi.len);
        return;
    }
    n = foot_utf8_cut(hi.ptr, hi.len);
    while (n > 0 && (uint8_t)hi.ptr[n - 1] >= 0x7F) {
        n--;
    }
    if (n > 0) {
        memcpy(tmp, hi.ptr, n);
        tmp[n - 1]++;
        foot_stat_set(&s->max, tmp, n);
    }
}

static struct slice foot_bytes_of(const struct parquet_record *r, int c)
{
    return c == COL_PARTITION ? r->partition
           : c == COL_TXN     ? r->txn
                              : r->payload;
}

/* Column c's statistics over rows r0..r0+n-1: min and max of the values
 * (the partition's over its dictionary, which holds the same names), a
 * NULL payload (length 0) counted and left out. */
static void foot_stats_of(const struct parquet_file *f, size_t r0, size_t n,
                          int c, struct foot_stats *s)
{
    struct slice lo = {NULL, 0};
    struct slice hi = {NULL, 0};
    bool any = false;

    memset(s, 0, sizeof(*s));
    if (c == COL_OFFSET || c == COL_TS) {
        int64_t a = INT64_MAX;
        int64_t z = INT64_MIN;

        for (size_t i = r0; i < r0 + n; i++) {
            int64_t v = c == COL_OFFSET ? f->recs[i].offset : f->recs[i].ts;

            a = v < a ? v : a;
            z = v > z ? v : z;
        }
        foot_stat_i64(&s->min, a);
        foot_stat_i64(&s->max, z);
        return;
    }
    for (size_t i = r0; i < r0 + n; i++) {
        struct slice v = foot_bytes_of(&f->recs[i], c);

        if (c == COL_PAYLOAD && v.len == 0) {
            s->nulls++;
            continue;
        }
        lo = !any || foot_cmp(v, lo) < 0 ? v : lo;
        hi = !any || foot_cmp(v, hi) > 0 ? v : hi;
        any = true;
    }
    if (any) {
        foot_stat_bytes(s, lo, hi);
    }
}

/* ---- the placement, proven against the pages: invariant (2) ---- */

/* The page header at p[0..n): its type, sizes and length. */
static bool foot_page(const uint8_t *p, size_t n, int64_t v[3], size_t *used)
{
    struct thrift_tree t = {0};
    struct err err;
    bool is_ok = thrift_decode(p, n, &t, used, &err) == 0;

    for (int i = 0; is_ok && i < 3; i++) {
        v[i] = thrift_get_i(&t, &t.nodes[0], i + 1, -1);
        is_ok = v[i] >= 0;
    }
    thrift_tree_free(&t);
    return is_ok;
}

/* Chunk ch of column c starts where the one before ended; a dictionary
 * page comes first exactly when the footer places one (only the partition
 * column has one); the first data page is where the footer says; the
 * headers and bodies add up to the chunk's sizes. */
static bool foot_pages_match(struct foot *b, int c, const struct foot_chunk *ch)
{
    int64_t start = ch->dict_off >= 0 ? ch->dict_off : ch->data_off;
    int64_t unc = 0;
    bool has_data = false;
    size_t pos = (size_t)start;

    if (start != b->at || ch->comp < 0 ||
        (uint64_t)ch->comp > b->data_end - (uint64_t)start ||
        (ch->dict_off >= 0 && c != COL_PARTITION)) {
        return false;
    }
    b->at = start + ch->comp;
    while (pos < (size_t)b->at) {
        int64_t v[3]; /* type, uncompressed and compressed size */
        size_t used = 0;
        int want = pos == (size_t)start && ch->dict_off >= 0 ? PAGE_DICTIONARY
                                                             : PAGE_DATA;

        if (!foot_page(b->file + pos, (size_t)b->at - pos, v, &used) ||
            v[0] != want || (uint64_t)v[2] > (size_t)b->at - pos - used ||
            (want == PAGE_DATA && !has_data && (int64_t)pos != ch->data_off)) {
            return false;
        }
        has_data = has_data || want == PAGE_DATA;
        unc += (int64_t)used + v[1];
        pos += used + (size_t)v[2];
    }
    return has_data && unc == ch->unc;
}

/* ---- the rebuild: write_footer()'s calls ---- */

static void foot_stats_write(struct thrift_w *t, const struct foot_stats *s)
{
    thrift_w_field(t, 12, THRIFT_STRUCT);
    thrift_w_begin(t);
    thrift_w_i64(t, 3, s->nulls);
    if (s->max.has) {
        thrift_w_bin(t, 5, s->max.v, s->max.len);
    }
    if (s->min.has) {
        thrift_w_bin(t, 6, s->min.v, s->min.len);
    }
    thrift_w_end(t);
}

/* One ColumnChunk of row group g (rows of them), as footer_column(). */
static void foot_column(struct foot *b, const struct foot_chunk *ch,
                        int64_t rows, int c, size_t g)
{
    struct thrift_w *t = &b->t;
    bool dict = ch->dict_off >= 0;
    bool is_int = c == COL_OFFSET || c == COL_TS;
    int enc = dict ? ENC_PLAIN_DICTIONARY : is_int ? ENC_DELTA : ENC_PLAIN;
    struct foot_stats s;

    foot_stats_of(b->f, b->row0, (size_t)rows, c, &s);
    foot_mark(b, "column %s of row group %zu", col_names[c], g);
    thrift_w_begin(t);
    thrift_w_i64(t, 2, dict ? ch->dict_off : ch->data_off);
    thrift_w_field(t, 3, THRIFT_STRUCT);
    thrift_w_begin(t);
    thrift_w_i32(t, 1, is_int ? TYPE_INT64 : TYPE_BYTE_ARRAY);
    thrift_w_list(t, 2, THRIFT_I32, 2); /* encodings, ascending */
    thrift_w_zigzag(t, enc < ENC_RLE ? enc : ENC_RLE);
    thrift_w_zigzag(t, enc < ENC_RLE ? ENC_RLE : enc);
    thrift_w_list(t, 3, THRIFT_BINARY, 1);
    thrift_w_binval(t, col_names[c], strlen(col_names[c]));
    thrift_w_i32(t, 4,
                 b->want->codec == PARQUET_ZSTD ? CODEC_ZSTD : CODEC_SNAPPY);
    thrift_w_i64(t, 5, rows);
    thrift_w_i64(t, 6, ch->unc);
    thrift_w_i64(t, 7, ch->comp);
    thrift_w_i64(t, 9, ch->data_off);
    if (dict) {
        thrift_w_i64(t, 11, ch->dict_off);
    }
    foot_mark(b, "the statistics of column %s in row group %zu", col_names[c],
              g);
    foot_stats_write(t, &s);
    foot_mark(b, "column %s of row group %zu", col_names[c], g);
    thrift_w_end(t);
    thrift_w_end(t);
}

/* Row group g (node rg), as footer_row_group(), its chunks' placement
 * checked first. Returns 0, or ERR_CORRUPT (err). */
static int foot_row_group(struct foot *b, const struct thrift_node *rg,
                          size_t g, struct err *err)
{
    const struct thrift_tree *tree = &b->f->meta;
    const struct thrift_node *cols = thrift_get(tree, rg, 1);
    int64_t rows = thrift_get_i(tree, rg, 3, -1);
    struct foot_chunk ch[NCOLS];
    int64_t unc = 0;
    int64_t comp = 0;

    for (int c = 0; c < NCOLS; c++) {
        const struct thrift_node *md =
            thrift_get(tree, thrift_get(tree, cols, c), 3);

        ch[c] = (struct foot_chunk){
            thrift_get_i(tree, md, 11, -1), thrift_get_i(tree, md, 9, -1),
            thrift_get_i(tree, md, 6, -1), thrift_get_i(tree, md, 7, -1)};
        if (!foot_pages_match(b, c, &ch[c])) {
            return err_set(err, ERR_CORRUPT,
                           "parquet footer: column %s of row group %zu: "
                           "offsets or sizes do not match its pages",
                           col_names[c], g);
        }
        unc += ch[c].unc;
        comp += ch[c].comp;
    }
    foot_mark(b, "row group %zu", g);
    thrift_w_begin(&b->t);
    thrift_w_list(&b->t, 1, THRIFT_STRUCT, NCOLS);
    for (int c = 0; c < NCOLS; c++) {
        foot_column(b, &ch[c], rows, c, g);
    }
    foot_mark(b, "row group %zu", g);
    thrift_w_i64(&b->t, 2, unc);
    thrift_w_i64(&b->t, 3, rows);
    thrift_w_i64(&b->t, 5,
                 ch[0].dict_off >= 0 ? ch[0].dict_off : ch[0].data_off);
    thrift_w_i64(&b->t, 6, comp);
    if (g <= INT16_MAX) {
        thrift_w_field(&b->t, 7, THRIFT_I16);
        thrift_w_zigzag(&b->t, (int64_t)g);
    }
    thrift_w_end(&b->t);
    b->row0 += (size_t)rows; /* parquet_file_read checked the sum */
    return 0;
}

static void foot_kv(struct thrift_w *t, const char *k, struct slice v)
{
    thrift_w_begin(t);
    thrift_w_str(t, 1, k);
    thrift_w_bin(t, 2, v.ptr, v.len);
    thrift_w_end(t);
}

/* A name as the writer keeps it: a C string, so up to its first NUL. */
static struct slice foot_cstr(struct slice s)
{
    const char *nul = s.len > 0 ? memchr(s.ptr, '\0', s.len) : NULL;

    s.len = nul != NULL ? (size_t)(nul - s.ptr) : s.len;
    return s;
}

/* What follows the row groups, as write_footer(): the queue and tenant
 * only when the file has rows. */
static void foot_tail(struct foot *b)
{
    struct thrift_w *t = &b->t;
    bool is_named = b->f->nrecs > 0;

    foot_mark(b, "the key-value metadata");
    thrift_w_list(t, 5, THRIFT_STRUCT, is_named ? 3 : 1);
    foot_kv(t, "queen.envelope", (struct slice){"1", 1});
    if (is_named) {
        foot_kv(t, "queen.queue", foot_cstr(b->want->queue));
        foot_kv(t, "queen.tenant", foot_cstr(b->want->tenant));
    }
    foot_mark(b, "created_by");
    thrift_w_str(t, 6, PARQUET_CREATED_BY);
    foot_mark(b, "the column orders");
    thrift_w_list(t, 7, THRIFT_STRUCT, NCOLS);
    for (int c = 0; c < NCOLS; c++) {
        thrift_w_begin(t);
        thrift_w_field(t, 1, THRIFT_STRUCT); /* TYPE_ORDER */
        thrift_w_begin(t);
        thrift_w_end(t);
        thrift_w_end(t);
    }
    thrift_w_end(t);
}

/* The rebuilt footer against the file's: invariant (3). */
static int foot_compare(const struct foot *b, const char *have, size_t n,
                        struct err *err)
{
    size_t common = b->out.len < n ? b->out.len : n;
    size_t i = 0;
    const char *what = "the footer";

    while (i < common && b->out.data[i] == have[i]) {
        i++;
    }
    if (i == common && b->out.len == n) {
        return 0;
    }
    for (size_t m = 0; m < b->n_marks && b->marks[m].at <= i; m++) {
        what = b->marks[m].what;
    }
    return err_set(err, ERR_CORRUPT,
                   "parquet footer: %s differs from what the writer makes of "
                   "its rows",
                   what);
}

int lake_footer_check(const void *p, size_t n, const struct parquet_file *f,
                      const struct lake_footer_want *want, struct err *err)
{
    const struct thrift_tree *t = &f->meta;
    const struct thrift_node *rgs = thrift_get(t, &t->nodes[0], 4);
    struct foot b = {.f = f,
                     .want = want,
                     .file = p,
                     .data_end = n - 8 - f->footer_len,
                     .at = 4};
    size_t g = 0;
    int rc = 0;

    buf_init(&b.out, BUF_UNLIMITED);
    thrift_w_init(&b.t, &b.out);
    thrift_w_begin(&b.t);
    foot_mark(&b, "the format version");
    thrift_w_i32(&b.t, 1, 1);
    foot_mark(&b, "the schema");
    parquet_footer_schema(&b.t);
    foot_mark(&b, "num_rows");
    thrift_w_i64(&b.t, 3, (int64_t)f->nrecs);
    foot_mark(&b, "the row groups");
    thrift_w_list(&b.t, 4, THRIFT_STRUCT, rgs != NULL ? (size_t)rgs->i : 0);
    for (int32_t i = rgs != NULL ? rgs->first : -1; rc == 0 && i >= 0;
         i = t->nodes[i].next) {
        rc = foot_row_group(&b, &t->nodes[i], g++, err);
    }
    if (rc == 0 && (size_t)b.at != b.data_end) {
        rc = err_set(err, ERR_CORRUPT,
                     "parquet footer: its column chunks end at byte %" PRId64
                     ", not where the footer starts (%zu)",
                     b.at, b.data_end);
    }
    if (rc == 0) {
        foot_tail(&b);
        rc = thrift_w_check(&b.t, err);
    }
    if (rc == 0) {
        rc = foot_compare(&b, (const char *)p + b.data_end, f->footer_len, err);
    }
    free(b.marks);
    buf_free(&b.out);
    return rc;
}
