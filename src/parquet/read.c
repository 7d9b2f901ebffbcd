/* A minimal reader of the Parquet files src/parquet/parquet.c writes: the
 * footer as a Thrift tree and every record decoded back. Tests, the fuzz target
 * and tools use it to prove what the writer wrote; the broker never reads
 * Parquet. It is written for clarity, not speed (bits are read one by one),
 * and checks every length against the bytes that remain. */
#include "parquet/read.h"

#include <snappy-c.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "base/xalloc.h"

#define MAX_ROWS      100000000
#define MAX_PAGE      (1u << 30)
#define MAX_DICT      (1u << 24)
#define N_COLS        5
#define COL_PARTITION 0
#define COL_OFFSET    1
#define COL_TXN       2
#define COL_TS        3
#define COL_PAYLOAD   4

static const char *const names[N_COLS] = {"partition", "offset",
                                          "transaction_id", "ts", "payload"};

struct cur { /* a bounded byte cursor */
    const uint8_t *p;
    const uint8_t *end;
};

struct chunk { /* what decoding one column chunk needs */
    struct parquet_file *f;
    int col;
    int codec;
    size_t row0;  /* first row of the row group */
    size_t nrows; /* rows of the row group */
    size_t done;  /* rows decoded so far */
    struct slice *dict;
    size_t ndict;
    struct err *err;
};

static int bad(struct err *err, const char *what)
{
    return err_set(err, ERR_CORRUPT, "parquet: %s", what);
}

/* Counts n more decoded bytes against the file's bound (before they are
 * allocated). */
static int charge(struct parquet_file *f, size_t n, struct err *err)
{
    if (n > f->decoded_max - f->decoded) {
        return err_set(err, ERR_CORRUPT,
                       "parquet: decodes to more than %zu bytes",
                       f->decoded_max);
    }
    f->decoded += n;
    return 0;
}

static bool cur_varint(struct cur *c, uint64_t *v)
{
    uint64_t x = 0;

    for (int s = 0; s < 64 && c->p < c->end; s += 7) {
        uint8_t b = *c->p++;
        x |= (uint64_t)(b & 0x7F) << s;
        if ((b & 0x80) == 0) {
            *v = x;
            return true;
        }
    }
    return false;
}

static bool cur_le32(struct cur *c, uint32_t *v)
{
    if (c->end - c->p < 4) {
        return false;
    }
    *v = (uint32_t)c->p[0] | (uint32_t)c->p[1] << 8 | (uint32_t)c->p[2] << 16 |
         (uint32_t)c->p[3] << 24;
    c->p += 4;
    return true;
}

static uint64_t get_bits(const uint8_t *p, size_t pos, int width)
{
    uint64_t v = 0;

    for (int i = 0; i < width; i++) {
        size_t b = pos + (size_t)i;
        v |= (uint64_t)((p[b >> 3] >> (b & 7)) & 1) << i;
    }
    return v;
}

/* ---- the RLE / bit-packing hybrid ---- */

struct hybrid {
    struct cur c;
    int width;
    uint64_t run_val;
    size_t run_left; /* values left in an RLE run */
    const uint8_t *packed;
    size_t packed_left; /* values left in a bit-packed run */
    size_t packed_pos;  /* bit position */
};

static bool hybrid_next(struct hybrid *h, uint64_t *v)
{
    uint64_t hdr;

    while (h->run_left == 0 && h->packed_left == 0) {
        if (!cur_varint(&h->c, &hdr)) {
            return false;
        }
        size_t bytes = (size_t)(h->width + 7) / 8;
        if ((hdr & 1) == 0) {
            if ((size_t)(h->c.end - h->c.p) < bytes) {
                return false;
            }
            h->run_left = (size_t)(hdr >> 1);
            h->run_val = get_bits(h->c.p, 0, h->width);
            h->c.p += bytes;
        } else {
            size_t groups = (size_t)(hdr >> 1);
            if (groups > (size_t)(h->c.end - h->c.p)) {
                return false;
            }
            size_t len = groups * (size_t)h->width;
            if (len > (size_t)(h->c.end - h->c.p)) {
                return false;
            }
            h->packed = h->c.p;
            h->packed_left = groups * 8;
            h->packed_pos = 0;
            h->c.p += len;
        }
    }
    if (h->run_left > 0) {
        h->run_left--;
        *v = h->run_val;
        return true;
    }
    *v = get_bits(h->packed, h->packed_pos, h->width);
    h->packed_pos += (size_t)h->width;
    h->packed_left--;
    return true;
}

/* ---- DELTA_BINARY_PACKED ---- */

static int delta_header(struct cur *c, uint64_t *bs, uint64_t *minis,
                        uint64_t *total, int64_t *first)
{
    uint64_t z;

    if (!cur_varint(c, bs) || !cur_varint(c, minis) || !cur_varint(c, total) ||
        !cur_varint(c, &z) || *minis == 0 || *minis > 64 || *bs == 0 ||
        *bs % 128 != 0 || (*bs / *minis) % 32 != 0 || *bs > 1u << 16) {
        return -1;
    }
    *first = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
    return 0;
}

/* Decodes exactly n values into out. */
static int delta_decode(struct cur *c, int64_t *out, size_t n, struct err *err)
{
    uint64_t bs;
    uint64_t minis;
    uint64_t total;
    size_t k = 1;

    if (delta_header(c, &bs, &minis, &total, &out[0]) != 0 || total != n ||
        n == 0) {
        return bad(err, "bad DELTA_BINARY_PACKED header");
    }
    size_t per = (size_t)(bs / minis);
    while (k < n) {
        uint64_t z;
        if (!cur_varint(c, &z) || (uint64_t)(c->end - c->p) < minis) {
            return bad(err, "truncated delta block");
        }
        uint64_t min = (z >> 1) ^ -(z & 1);
        const uint8_t *widths = c->p;
        c->p += minis;
        for (size_t m = 0; m < minis && k < n; m++) {
            int w = widths[m];
            size_t bytes = per * (size_t)w / 8;
            if (w > 64 || bytes > (size_t)(c->end - c->p)) {
                return bad(err, "truncated delta miniblock");
            }
            for (size_t i = 0; i < per && k < n; i++, k++) {
                uint64_t d = min + get_bits(c->p, i * (size_t)w, w);
                out[k] = (int64_t)((uint64_t)out[k - 1] + d);
            }
            c->p += bytes;
        }
    }
    return 0;
}

/* ---- pages ---- */

static int decompress(struct chunk *k, struct slice src, size_t unc,
                      const uint8_t **out)
{
    struct parquet_file *f = k->f;
    char *dst;

    if (unc > MAX_PAGE) {
        return bad(k->err, "page over 1 GiB");
    }
    if (charge(f, unc + 1, k->err) != 0) {
        return k->err->code;
    }
    dst = xmalloc(unc + 1);
    if (f->npages == f->cap_pages) {
        f->cap_pages = f->cap_pages == 0 ? 16 : f->cap_pages * 2;
        f->pages = xrealloc(f->pages, f->cap_pages * sizeof(char *));
        f->page_lens =
            xrealloc(f->page_lens, f->cap_pages * sizeof(*f->page_lens));
    }
    f->page_lens[f->npages] = unc;
    f->pages[f->npages++] = dst;
    *out = (const uint8_t *)dst;
    if (k->codec == 0 && src.len == unc) {
        memcpy(dst, src.ptr, unc);
        return 0;
    }
    if (k->codec == 6) {
        size_t r = ZSTD_decompress(dst, unc, src.ptr, src.len);
        return ZSTD_isError(r) || r != unc ? bad(k->err, "zstd page") : 0;
    }
    size_t got = unc;
    if (k->codec == 1 &&
        snappy_validate_compressed_buffer(src.ptr, src.len) == SNAPPY_OK &&
        snappy_uncompressed_length(src.ptr, src.len, &got) == SNAPPY_OK &&
        got == unc &&
        snappy_uncompress(src.ptr, src.len, dst, &got) == SNAPPY_OK) {
        return 0;
    }
    return bad(k->err, "unsupported codec or bad compressed page");
}

static bool take_plain(struct cur *c, struct slice *s)
{
    uint32_t n;

    if (!cur_le32(c, &n) || n > (size_t)(c->end - c->p)) {
        return false;
    }
    s->ptr = (const char *)c->p;
    s->len = n;
    c->p += n;
    return true;
}

static int read_dict(struct chunk *k, struct cur c, size_t n)
{
    if (n > MAX_DICT || n > (size_t)(c.end - c.p) / 4 || k->dict != NULL) {
        return bad(k->err, "bad dictionary page");
    }
    if (charge(k->f, (n + 1) * sizeof(*k->dict), k->err) != 0) {
        return k->err->code;
    }
    k->dict = xcalloc(n + 1, sizeof(*k->dict));
    k->ndict = n;
    for (size_t i = 0; i < n; i++) {
        if (!take_plain(&c, &k->dict[i])) {
            return bad(k->err, "truncated dictionary");
        }
    }
    return 0;
}

/* One byte-array value: PLAIN or a dictionary index. */
static bool next_bytes(struct chunk *k, int enc, struct cur *c,
                       struct hybrid *h, struct slice *s)
{
    uint64_t i;

    if (enc == 0) {
        return take_plain(c, s);
    }
    if (!hybrid_next(h, &i) || i >= k->ndict) {
        return false;
    }
    *s = k->dict[i];
    return true;
}

static struct parquet_record *row(struct chunk *k, size_t i)
{
    return &k->f->recs[k->row0 + k->done + i];
}

static int read_bytes_page(struct chunk *k, struct cur c, size_t n, int enc)
{
    struct hybrid h = {0};
    uint8_t *defs = xmalloc(n + 1);
    int rc = 0;

    memset(defs, 1, n);
    if (k->col == COL_PAYLOAD) {
        uint32_t len;
        uint64_t d;
        struct hybrid dh = {.c = c, .width = 1};
        if (!cur_le32(&c, &len) || len > (size_t)(c.end - c.p)) {
            free(defs);
            return bad(k->err, "bad definition levels");
        }
        dh.c.p = c.p;
        dh.c.end = c.p + len;
        for (size_t i = 0; i < n; i++) {
            if (!hybrid_next(&dh, &d) || d > 1) {
                free(defs);
                return bad(k->err, "bad definition levels");
            }
            defs[i] = (uint8_t)d;
        }
        c.p += len;
    }
    if (enc == 2 || enc == 8) {
        if (c.p >= c.end || *c.p > 32) {
            free(defs);
            return bad(k->err, "bad dictionary index width");
        }
        h.width = *c.p++;
        h.c = c;
    } else if (enc != 0) {
        free(defs);
        return bad(k->err, "unsupported byte-array encoding");
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct parquet_record *r = row(k, i);
        struct slice *dst = k->col == COL_PARTITION ? &r->partition
                            : k->col == COL_TXN     ? &r->txn
                                                    : &r->payload;
        if (defs[i] != 0 && !next_bytes(k, enc, &c, &h, dst)) {
            rc = bad(k->err, "truncated byte-array values");
        }
    }
    free(defs);
    return rc;
}

static int read_int_page(struct chunk *k, struct cur c, size_t n, int enc)
{
    int64_t *v = xmalloc(n * sizeof(*v));
    int rc = 0;

    if (enc == 5) {
        rc = delta_decode(&c, v, n, k->err);
    } else if (enc == 0 && (size_t)(c.end - c.p) / 8 >= n) {
        for (size_t i = 0; i < n; i++) {
            memcpy(&v[i], c.p + 8 * i, 8);
        }
    } else {
        rc = bad(k->err, "unsupported int64 encoding");
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (k->col == COL_OFFSET) {
            row(k, i)->offset = v[i];
        } else {
            row(k, i)->ts = v[i];
        }
    }
    free(v);
    return rc;
}

/* Decodes the page whose header starts at *pos, advancing *pos past it. */
static int read_page(struct chunk *k, const uint8_t *file, size_t end,
                     size_t *pos)
{
    struct thrift_tree t = {0};
    size_t used = 0;
    const uint8_t *body = NULL;
    int rc;

    if (thrift_decode(file + *pos, end - *pos, &t, &used, k->err) != 0) {
        return err_wrap(k->err, "parquet: page header");
    }
    const struct thrift_node *h = &t.nodes[0];
    int64_t type = thrift_get_i(&t, h, 1, -1);
    int64_t unc = thrift_get_i(&t, h, 2, -1);
    int64_t comp = thrift_get_i(&t, h, 3, -1);
    const struct thrift_node *dh = thrift_get(&t, h, type == 0 ? 5 : 7);
    int64_t nv = thrift_get_i(&t, dh, 1, -1);
    int enc = (int)thrift_get_i(&t, dh, 2, -1);
    thrift_tree_free(&t);
    *pos += used;
    if (dh == NULL || unc < 0 || comp < 0 || (uint64_t)comp > end - *pos ||
        nv < 0 || (type != 0 && type != 2)) {
        return bad(k->err, "bad page header");
    }
    struct slice src = {(const char *)file + *pos, (size_t)comp};
    *pos += (size_t)comp;
    if (decompress(k, src, (size_t)unc, &body) != 0) {
        return k->err->code;
    }
    struct cur c = {body, body + unc};
    if (type == 2) {
        return read_dict(k, c, (size_t)nv);
    }
    if ((size_t)nv > k->nrows - k->done) {
        return bad(k->err, "more values than rows");
    }
    rc = k->col == COL_OFFSET || k->col == COL_TS
             ? read_int_page(k, c, (size_t)nv, enc)
             : read_bytes_page(k, c, (size_t)nv, enc);
    k->done += (size_t)nv;
    return rc;
}

/* Decodes the column chunk cc into rows [k->row0, k->row0 + k->nrows). */
static int read_chunk(struct chunk *k, const uint8_t *file, size_t n,
                      const struct thrift_node *cc)
{
    const struct thrift_tree *t = &k->f->meta;
    const struct thrift_node *md = thrift_get(t, cc, 3);
    const struct thrift_node *path = thrift_get(t, thrift_get(t, md, 3), 0);
    int64_t dict = thrift_get_i(t, md, 11, -1);
    int64_t size = thrift_get_i(t, md, 7, -1);
    int64_t start = dict >= 0 ? dict : thrift_get_i(t, md, 9, -1);
    const char *name = names[k->col];
    int rc = 0;

    k->codec = (int)thrift_get_i(t, md, 4, -1);
    if (path == NULL || path->bin.len != strlen(name) ||
        memcmp(path->bin.ptr, name, path->bin.len) != 0 ||
        thrift_get_i(t, md, 5, -1) != (int64_t)k->nrows) {
        return bad(k->err, "column chunk is not the expected column");
    }
    if (start < 4 || size < 0 || (uint64_t)start > n ||
        (uint64_t)size > n - (uint64_t)start) {
        return bad(k->err, "column chunk outside the file");
    }
    size_t pos = (size_t)start;
    size_t end = (size_t)(start + size);
    while (pos < end && rc == 0) {
        rc = read_page(k, file, end, &pos);
    }
    if (rc == 0 && k->done != k->nrows) {
        rc = bad(k->err, "column chunk has fewer values than rows");
    }
    free(k->dict);
    k->dict = NULL;
    return rc;
}

static int read_row_groups(struct parquet_file *f, const uint8_t *file,
                           size_t n, struct err *err)
{
    const struct thrift_tree *t = &f->meta;
    const struct thrift_node *rgs = thrift_get(t, &t->nodes[0], 4);
    size_t row0 = 0;

    for (int64_t g = 0; rgs != NULL && g < rgs->i; g++) {
        const struct thrift_node *rg = thrift_get(t, rgs, (int)g);
        const struct thrift_node *cols = thrift_get(t, rg, 1);
        int64_t rows = thrift_get_i(t, rg, 3, -1);
        if (cols == NULL || cols->i != N_COLS || rows <= 0 ||
            (uint64_t)rows > f->nrecs - row0) {
            return bad(err, "bad row group");
        }
        for (int c = 0; c < N_COLS; c++) {
            struct chunk k = {.f = f,
                              .col = c,
                              .row0 = row0,
                              .nrows = (size_t)rows,
                              .err = err};
            if (read_chunk(&k, file, n, thrift_get(t, cols, c)) != 0) {
                return err->code;
            }
        }
        row0 += (size_t)rows;
    }
    return row0 == f->nrecs ? 0 : bad(err, "row groups miss rows");
}

int parquet_file_read(const void *p, size_t n, struct parquet_file *f,
                      struct err *err)
{
    return parquet_file_read_max(p, n, SIZE_MAX, f, err);
}

int parquet_file_read_max(const void *p, size_t n, size_t max,
                          struct parquet_file *f, struct err *err)
{
    const uint8_t *file = p;
    uint32_t flen;
    size_t used;

    memset(f, 0, sizeof(*f));
    f->decoded_max = max;
    if (n < 12 || memcmp(file, "PAR1", 4) != 0 ||
        memcmp(file + n - 4, "PAR1", 4) != 0) {
        return bad(err, "no PAR1 magic at both ends");
    }
    memcpy(&flen, file + n - 8, 4); /* little-endian host */
    if (flen > n - 12) {
        return bad(err, "footer longer than the file");
    }
    f->footer_len = flen;
    if (thrift_decode(file + n - 8 - flen, flen, &f->meta, &used, err) != 0) {
        return err_wrap(err, "parquet: footer");
    }
    if (used != flen) {
        return bad(err, "footer length disagrees with its contents");
    }
    int64_t rows = thrift_get_i(&f->meta, &f->meta.nodes[0], 3, -1);
    if (rows < 0 || rows > MAX_ROWS) {
        return bad(err, "bad num_rows");
    }
    f->nrecs = (size_t)rows;
    /* rows, with the per-page level and int64 arrays they bound */
    if (charge(f, (f->nrecs + 1) * (sizeof(*f->recs) + 9), err) != 0) {
        return err->code;
    }
    f->recs = xcalloc(f->nrecs + 1, sizeof(*f->recs));
    return read_row_groups(f, file, n - 8 - flen, err);
}

void parquet_file_free(struct parquet_file *f)
{
    thrift_tree_free(&f->meta);
    free(f->recs);
    for (size_t i = 0; i < f->npages; i++) {
        free(f->pages[i]);
    }
    free(f->pages);
    free(f->page_lens);
    memset(f, 0, sizeof(*f));
}
