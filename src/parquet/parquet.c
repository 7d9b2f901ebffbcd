/* The Parquet writer: a window's records as one Parquet file, in memory.
 * Pure: no I/O, no clock. The bytes are a function of the records and the
 * options only (same records, same bytes), which exactly-once needs.
 *
 * How it works. parquet_writer_add() copies each record into the open row
 * group's columns: the partition as an index into a per-row-group
 * dictionary, offset and ts into int64 arrays, transaction_id and payload as
 * PLAIN byte arrays (4-byte little-endian length, then the bytes) with one
 * definition level per row for the payload. When the row group is full (and
 * at finish) each column is cut into data pages, each page compressed and
 * appended to the output after its Thrift page header, and the column
 * chunk's offsets, sizes and statistics are kept for the footer. So the
 * writer holds one copy of at most one row group plus the compressed file.
 *
 * File layout (Parquet format, data page v1, file format version 1):
 *   OFFSET  SIZE  DESCRIPTION
 *   0       4     magic "PAR1"
 *   4       ...   row group 0: column chunks in schema order; a chunk is
 *                 [dictionary page] data page*, a page = PageHeader (Thrift
 *                 compact) + body compressed with the file's codec
 *   ...     ...   row groups 1..n-1 alike
 *   F       L     FileMetaData (Thrift compact), below
 *   F+L     4     L, little-endian
 *   F+L+4   4     magic "PAR1"
 *
 * FileMetaData as written (field id: value):
 *   1 version        i32 1
 *   2 schema         list: root {4 name "queen_record", 5 num_children 5},
 *                    then per column {1 type, 3 repetition, 4 name,
 *                    6 converted_type, 10 logicalType} (table in parquet.h)
 *   3 num_rows       i64
 *   4 row_groups     list of RowGroup {1 columns: list of ColumnChunk
 *                    {2 file_offset, 3 ColumnMetaData {1 type, 2 encodings,
 *                    3 path_in_schema, 4 codec, 5 num_values,
 *                    6 total_uncompressed_size, 7 total_compressed_size,
 *                    9 data_page_offset, 11 dictionary_page_offset?,
 *                    12 Statistics {3 null_count, 5 max_value?,
 *                    6 min_value?}}}, 2 total_byte_size, 3 num_rows,
 *                    5 file_offset, 6 total_compressed_size, 7 ordinal}
 *   5 key_value_metadata  list of {1 key, 2 value}
 *   6 created_by     "queen-s3"
 *   7 column_orders  list of 5 {1 TYPE_ORDER {}}
 *
 * Page bodies:
 *   partition  dictionary page: PLAIN byte arrays in order of first use;
 *              data page: 1 byte bit width, then RLE runs of indices
 *              (varint run<<1, index in ceil(width/8) bytes). A dictionary
 *              over page_bytes falls back to PLAIN pages for that chunk.
 *   offset,ts  DELTA_BINARY_PACKED: blocks of 128 values in 4 miniblocks.
 *   txn        PLAIN.
 *   payload    4-byte length + RLE definition levels (width 1), then the
 *              PLAIN values of the non-null rows.
 * Encodings were chosen by measurement (bench/parquet.sh's rows: 1M
 * records, 64 partitions, zstd): DELTA_BINARY_PACKED stores offset in 1.5 KB
 * and ts in 2.1 KB where DuckDB's dictionary/PLAIN pages take 1.19 MB and
 * 1.41 MB; the partition dictionary takes 1.2 KB. transaction_id and payload
 * are near-unique, so a dictionary would only cost time: PLAIN + zstd.
 *
 * Page sizes, measured the same way (events corpus). A zstd page is one
 * frame, and level 3 finds matches up to 2 MiB back within it, so small
 * pages cut repeats apart: transaction ids of neighbouring partitions share
 * their stamps, 450 KB apart. At 1 MiB / 20,000-row pages transaction_id
 * took 5.6 MB (DuckDB, whose pages span a row group: 1.8 MB); with 4 MiB
 * pages and no small row cap it takes 2.1 MB, and payload 0.3% less, for
 * the same time. Snappy works in 64 KiB blocks whatever the page, so its
 * pages stay at 1 MiB. The row cap (2^20) only keeps num_values far from
 * 2^31.
 *
 * Invariants:
 *   (1) Records are sorted by (partition, offset), or by ts within a
 *       partition whose offsets restart (parquet_writer_add rejects others).
 *   (2) No row group is empty; each has at most row_group_records rows.
 *   (3) Every page holds >= 1 value, so page sizes stay below
 *       page_bytes + PARQUET_VALUE_MAX + headers < 2^31 (Thrift i32). */
#include "parquet/parquet.h"

#include <inttypes.h>
#include <pthread.h>
#include <snappy-c.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "base/xalloc.h"
#include "parquet/thrift.h"

enum { COL_PARTITION, COL_OFFSET, COL_TXN, COL_TS, COL_PAYLOAD, NCOLS };

/* parquet.thrift enum values */
enum { TYPE_INT64 = 2, TYPE_BYTE_ARRAY = 6 };
enum { REP_REQUIRED = 0, REP_OPTIONAL = 1 };
enum { CONV_UTF8 = 0, CONV_TIMESTAMP_MICROS = 10 };
enum { ENC_PLAIN = 0, ENC_PLAIN_DICTIONARY = 2, ENC_RLE = 3, ENC_DELTA = 5 };
enum { CODEC_SNAPPY = 1, CODEC_ZSTD = 6 };
enum { PAGE_DATA = 0, PAGE_DICTIONARY = 2 };

#define ZSTD_LEVEL    3
#define DELTA_BLOCK   128
#define DELTA_MINIS   4
#define DELTA_MINI_SZ (DELTA_BLOCK / DELTA_MINIS)
/* Room before the first payload value for a page's definition levels:
 * 4 + 3 (one run of up to 2^20 rows) + 1, so a first page without nulls is
 * not copied (payload_page). */
#define PAYLOAD_ROOM 8

static const char *const col_names[NCOLS] = {"partition", "offset",
                                             "transaction_id", "ts", "payload"};

struct stat_val {
    bool has;
    uint8_t len;
    char v[PARQUET_STATS_MAX];
};

struct chunk_meta {
    int64_t dict_off; /* -1 when the chunk has no dictionary page */
    int64_t data_off;
    int64_t unc; /* page headers included, as the format asks */
    int64_t comp;
    int64_t nulls;
    struct stat_val min;
    struct stat_val max;
};

struct rg_meta {
    struct chunk_meta col[NCOLS];
    int64_t rows;
};

struct parquet_writer {
    enum parquet_codec codec;
    size_t rg_rows;
    size_t page_bytes;
    char *queue;
    char *tenant;
    struct buf out;
    bool failed;
    struct err fail; /* why, once failed */
    bool finished;
    /* The open row group. */
    size_t rows;
    size_t cap_rows;
    uint32_t *part_idx;
    int64_t *offs;
    int64_t *tss;
    uint8_t *defs;
    uint32_t *plens; /* each row's payload length (0: null) */
    struct buf dict; /* PLAIN entries */
    size_t *dict_pos;
    size_t ndict;
    size_t dict_cap;
    uint32_t *slots; /* open addressing: entry index + 1, 0 = free */
    size_t nslots;
    struct buf txn;     /* PLAIN */
    struct buf payload; /* PAYLOAD_ROOM, then PLAIN, non-null rows only */
    /* The payload column's min and max so far in this row group, taken as
     * each value is added (it is in the cache then): where their bytes
     * start in payload, and their lengths. */
    bool has_minmax;
    size_t lo_at, lo_len, hi_at, hi_len;
    /* Order check (1), across row groups. */
    struct buf last_part;
    int64_t last_off;
    int64_t last_ts;
    bool has_last;
    uint64_t weight;
    uint64_t total_rows;
    /* Closed row groups. */
    struct rg_meta *rgs;
    size_t nrg;
    size_t rg_cap;
    /* Scratch. */
    struct chunk_meta *cur; /* the chunk write_page() appends to */
    struct buf page;
    struct buf comp;
    struct buf hdr;
    ZSTD_CCtx *zc;
};

/* ---- small helpers ---- */

/* Appends to an uncapped scratch buffer, which cannot fail (xrealloc aborts
 * on out of memory). */
static void put(struct buf *b, const void *p, size_t n)
{
    struct err e;

    ASSERT(buf_append(b, p, n, &e) == 0);
}

static void put_le32(struct buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                    (uint8_t)(v >> 24)};

    put(b, x, 4);
}

static void set_le32(char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (char)(uint8_t)(v >> (8 * i));
    }
}

/* Room for n more bytes in an uncapped scratch buffer. */
static char *reserve(struct buf *b, size_t n)
{
    struct err e;

    ASSERT(buf_reserve(b, n, &e) == 0);
    return b->data + b->len;
}

static uint32_t get_le32(const char *p)
{
    const uint8_t *u = (const uint8_t *)p;

    return (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
           (uint32_t)u[3] << 24;
}

static void put_varint(struct buf *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;

    while (v >= 0x80) {
        tmp[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (uint8_t)v;
    put(b, tmp, n);
}

static uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (v < 0 ? UINT64_MAX : 0);
}

static int bit_width(uint64_t v)
{
    return v == 0 ? 0 : 64 - __builtin_clzll(v);
}

/* Byte order, a proper prefix first (Parquet's unsigned byte-wise order). */
static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);

    if (c != 0) {
        return c;
    }
    return an < bn ? -1 : an > bn;
}

static bool utf8_valid(const char *s, size_t n)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;

    while (i < n) {
        if (i + 8 <= n) {
            uint64_t x;
            memcpy(&x, p + i, 8);
            if ((x & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        uint8_t c = p[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            k = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i <= k) {
            return false;
        }
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) {
                return false;
            }
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
            return false;
        }
        i += k + 1;
    }
    return true;
}

/* ---- statistics ---- */

static void stat_set(struct stat_val *s, const char *p, size_t n)
{
    ASSERT(n <= PARQUET_STATS_MAX);
    s->has = true;
    s->len = (uint8_t)n;
    memcpy(s->v, p, n);
}

static void stat_i64(struct chunk_meta *cm, const int64_t *v, size_t n)
{
    int64_t lo = v[0];
    int64_t hi = v[0];
    uint8_t b[8];

    for (size_t i = 1; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    for (int i = 0; i < 8; i++) {
        b[i] = (uint8_t)((uint64_t)lo >> (8 * i));
    }
    stat_set(&cm->min, (const char *)b, 8);
    for (int i = 0; i < 8; i++) {
        b[i] = (uint8_t)((uint64_t)hi >> (8 * i));
    }
    stat_set(&cm->max, (const char *)b, 8);
}

/* Longest prefix of at most PARQUET_STATS_MAX bytes ending on a UTF-8
 * character boundary. */
static size_t utf8_cut(const char *p, size_t n)
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

/* min: a prefix is a lower bound. max: a cut prefix with its last ASCII
 * byte below 0x7F raised by one is an upper bound and stays UTF-8; without
 * such a byte there is no short upper bound and max is left out. */
static void stat_bytes(struct chunk_meta *cm, struct slice lo, struct slice hi)
{
    size_t n = utf8_cut(lo.ptr, lo.len);
    char tmp[PARQUET_STATS_MAX];

    stat_set(&cm->min, lo.ptr, n);
    if (hi.len <= PARQUET_STATS_MAX) {
        stat_set(&cm->max, hi.ptr, hi.len);
        return;
    }
    n = utf8_cut(hi.ptr, hi.len);
    while (n > 0 && (uint8_t)hi.ptr[n - 1] >= 0x7F) {
        n--;
    }
    if (n == 0) {
        return;
    }
    memcpy(tmp, hi.ptr, n);
    tmp[n - 1]++;
    stat_set(&cm->max, tmp, n);
}

/* Min and max over the PLAIN byte arrays of b from byte `from` on; false
 * when there are none. */
static bool plain_minmax(const struct buf *b, size_t from, struct slice *lo,
                         struct slice *hi)
{
    size_t pos = from;
    bool any = false;

    while (pos < b->len) {
        size_t n = get_le32(b->data + pos);
        const char *p = b->data + pos + 4;
        if (!any || bytes_cmp(p, n, lo->ptr, lo->len) < 0) {
            lo->ptr = p;
            lo->len = n;
        }
        if (!any || bytes_cmp(p, n, hi->ptr, hi->len) > 0) {
            hi->ptr = p;
            hi->len = n;
        }
        any = true;
        pos += 4 + n;
    }
    return any;
}

/* ---- encoders ---- */

/* One RLE run of the RLE/bit-packing hybrid: varint (count << 1), then the
 * value in ceil(width / 8) little-endian bytes. */
static void rle_run(struct buf *b, size_t count, uint32_t v, int width)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                    (uint8_t)(v >> 24)};

    put_varint(b, (uint64_t)count << 1);
    put(b, x, (size_t)(width + 7) / 8);
}

static void rle_u32(struct buf *b, const uint32_t *v, size_t n, int width)
{
    size_t i = 0;

    while (i < n) {
        size_t j = i + 1;
        while (j < n && v[j] == v[i]) {
            j++;
        }
        rle_run(b, j - i, v[i], width);
        i = j;
    }
}

static void rle_u8(struct buf *b, const uint8_t *v, size_t n)
{
    size_t i = 0;

    while (i < n) {
        size_t j = i + 1;
        while (j < n && v[j] == v[i]) {
            j++;
        }
        rle_run(b, j - i, v[i], 1);
        i = j;
    }
}

/* Packs 32 values of width bits, least significant bit first. */
static void pack32(struct buf *b, const uint64_t *v, int width)
{
    uint8_t out[DELTA_MINI_SZ * 8];
    size_t o = 0;
    uint64_t acc = 0;
    int nbits = 0;

    for (int i = 0; i < DELTA_MINI_SZ; i++) {
        uint64_t x = v[i];
        int left = width;
        while (left > 0) {
            int take = left < 64 - nbits ? left : 64 - nbits;
            uint64_t part = take == 64 ? x : x & ((1ULL << take) - 1);
            acc |= part << nbits;
            x = take == 64 ? 0 : x >> take;
            nbits += take;
            left -= take;
            if (nbits == 64) {
                memcpy(out + o, &acc, 8); /* little-endian host */
                o += 8;
                acc = 0;
                nbits = 0;
            }
        }
    }
    for (int k = 0; k < nbits / 8; k++) {
        out[o++] = (uint8_t)(acc >> (8 * k));
    }
    put(b, out, o);
}

/* One block of up to 128 deltas: min delta, 4 bit widths, the miniblocks
 * that hold values (a last partial block leaves the others out). */
static void delta_block(struct buf *b, const int64_t *d, size_t n)
{
    int64_t min = d[0];
    uint8_t widths[DELTA_MINIS] = {0};
    uint64_t rel[DELTA_MINI_SZ];
    size_t minis = (n + DELTA_MINI_SZ - 1) / DELTA_MINI_SZ;

    for (size_t i = 1; i < n; i++) {
        min = d[i] < min ? d[i] : min;
    }
    put_varint(b, zigzag(min));
    for (size_t m = 0; m < minis; m++) {
        uint64_t all = 0;
        for (size_t i = m * DELTA_MINI_SZ; i < n && i < (m + 1) * DELTA_MINI_SZ;
             i++) {
            all |= (uint64_t)d[i] - (uint64_t)min;
        }
        widths[m] = (uint8_t)bit_width(all);
    }
    put(b, widths, DELTA_MINIS);
    for (size_t m = 0; m < minis; m++) {
        for (size_t i = 0; i < DELTA_MINI_SZ; i++) {
            size_t k = m * DELTA_MINI_SZ + i;
            rel[i] = k < n ? (uint64_t)d[k] - (uint64_t)min : 0;
        }
        pack32(b, rel, widths[m]);
    }
}

/* DELTA_BINARY_PACKED: header (block size, miniblocks, count, first value
 * zigzag), then blocks of the wrapping differences. */
static void delta_encode(struct buf *b, const int64_t *v, size_t n)
{
    int64_t d[DELTA_BLOCK];

    put_varint(b, DELTA_BLOCK);
    put_varint(b, DELTA_MINIS);
    put_varint(b, n);
    put_varint(b, zigzag(v[0]));
    for (size_t i = 1; i < n; i += DELTA_BLOCK) {
        size_t k = 0;
        for (; k < DELTA_BLOCK && i + k < n; k++) {
            d[k] = (int64_t)((uint64_t)v[i + k] - (uint64_t)v[i + k - 1]);
        }
        delta_block(b, d, k);
    }
}

/* ---- pages ---- */

static int compress(struct parquet_writer *w, const char *src, size_t n,
                    struct err *err)
{
    buf_reset(&w->comp);
    if (w->codec == PARQUET_ZSTD) {
        size_t bound = ZSTD_compressBound(n);
        size_t r = ZSTD_compressCCtx(w->zc, reserve(&w->comp, bound), bound,
                                     src, n, ZSTD_LEVEL);
        if (ZSTD_isError(r)) {
            return err_set(err, ERR_IO, "parquet: zstd: %s",
                           ZSTD_getErrorName(r));
        }
        w->comp.len = r;
        return 0;
    }
    size_t outlen = snappy_max_compressed_length(n);
    if (snappy_compress(src, n, reserve(&w->comp, outlen), &outlen) !=
        SNAPPY_OK) {
        return err_set(err, ERR_IO, "parquet: snappy_compress failed");
    }
    w->comp.len = outlen;
    return 0;
}

static void page_header(struct parquet_writer *w, int type, size_t unc,
                        size_t nvals, int encoding)
{
    struct thrift_w t;

    buf_reset(&w->hdr);
    thrift_w_init(&t, &w->hdr);
    thrift_w_begin(&t);
    thrift_w_i32(&t, 1, type);
    thrift_w_i32(&t, 2, (int32_t)unc);
    thrift_w_i32(&t, 3, (int32_t)w->comp.len);
    thrift_w_field(&t, type == PAGE_DATA ? 5 : 7, THRIFT_STRUCT);
    thrift_w_begin(&t);
    thrift_w_i32(&t, 1, (int32_t)nvals);
    thrift_w_i32(&t, 2, encoding);
    if (type == PAGE_DATA) {
        thrift_w_i32(&t, 3, ENC_RLE); /* definition levels */
        thrift_w_i32(&t, 4, ENC_RLE); /* repetition levels (none) */
    }
    thrift_w_end(&t);
    thrift_w_end(&t);
}

/* Compress body, append header + compressed body to the file, and count
 * both in the chunk's sizes. */
static int write_page(struct parquet_writer *w, int type, struct slice body,
                      size_t nvals, int encoding, struct err *err)
{
    struct chunk_meta *cm = w->cur;

    ASSERT(body.len < INT32_MAX && nvals > 0); /* (3) */
    if (compress(w, body.ptr, body.len, err) != 0) {
        return err->code;
    }
    page_header(w, type, body.len, nvals, encoding);
    if (type == PAGE_DATA && cm->data_off < 0) {
        cm->data_off = (int64_t)w->out.len;
    }
    if (buf_append(&w->out, w->hdr.data, w->hdr.len, err) != 0 ||
        buf_append(&w->out, w->comp.data, w->comp.len, err) != 0) {
        return err_wrap(err, "parquet file");
    }
    cm->unc += (int64_t)(w->hdr.len + body.len);
    cm->comp += (int64_t)(w->hdr.len + w->comp.len);
    return 0;
}

static struct slice buf_sl(const struct buf *b)
{
    struct slice s = {b->data, b->len};
    return s;
}

/* ---- column chunks ---- */

static int write_int64_col(struct parquet_writer *w, struct chunk_meta *cm,
                           const int64_t *v, struct err *err)
{
    for (size_t i = 0; i < w->rows; i += PARQUET_PAGE_ROWS) {
        size_t n =
            w->rows - i < PARQUET_PAGE_ROWS ? w->rows - i : PARQUET_PAGE_ROWS;
        buf_reset(&w->page);
        delta_encode(&w->page, v + i, n);
        if (write_page(w, PAGE_DATA, buf_sl(&w->page), n, ENC_DELTA, err) !=
            0) {
            return err->code;
        }
    }
    stat_i64(cm, v, w->rows);
    return 0;
}

/* PLAIN pages straight from a PLAIN buffer, cut at page_bytes or
 * PARQUET_PAGE_ROWS values. */
static int write_plain_col(struct parquet_writer *w, struct chunk_meta *cm,
                           const struct buf *b, struct err *err)
{
    size_t start = 0;
    size_t pos = 0;
    size_t n = 0;
    struct slice lo;
    struct slice hi;

    while (pos < b->len) {
        pos += 4 + get_le32(b->data + pos);
        n++;
        if (pos - start >= w->page_bytes || n == PARQUET_PAGE_ROWS ||
            pos == b->len) {
            struct slice body = {b->data + start, pos - start};
            if (write_page(w, PAGE_DATA, body, n, ENC_PLAIN, err) != 0) {
                return err->code;
            }
            start = pos;
            n = 0;
        }
    }
    if (plain_minmax(b, 0, &lo, &hi)) {
        stat_bytes(cm, lo, hi);
    }
    return 0;
}

/* The partition chunk when its dictionary is too big for one page: PLAIN
 * values rebuilt from the dictionary. */
static int write_partition_plain(struct parquet_writer *w, struct err *err)
{
    size_t n = 0;

    buf_reset(&w->page);
    for (size_t i = 0; i < w->rows; i++) {
        const char *e = w->dict.data + w->dict_pos[w->part_idx[i]];
        put(&w->page, e, 4 + get_le32(e));
        n++;
        if (w->page.len >= w->page_bytes || n == PARQUET_PAGE_ROWS ||
            i + 1 == w->rows) {
            if (write_page(w, PAGE_DATA, buf_sl(&w->page), n, ENC_PLAIN, err) !=
                0) {
                return err->code;
            }
            buf_reset(&w->page);
            n = 0;
        }
    }
    return 0;
}

static int write_partition_col(struct parquet_writer *w, struct chunk_meta *cm,
                               struct err *err)
{
    struct slice lo;
    struct slice hi;
    int width = bit_width(w->ndict - 1);

    width = width == 0 ? 1 : width;
    if (plain_minmax(&w->dict, 0, &lo, &hi)) {
        stat_bytes(cm, lo, hi);
    }
    if (w->dict.len > w->page_bytes) {
        return write_partition_plain(w, err);
    }
    cm->dict_off = (int64_t)w->out.len;
    if (write_page(w, PAGE_DICTIONARY, buf_sl(&w->dict), w->ndict,
                   ENC_PLAIN_DICTIONARY, err) != 0) {
        return err->code;
    }
    for (size_t i = 0; i < w->rows; i += PARQUET_PAGE_ROWS) {
        size_t n =
            w->rows - i < PARQUET_PAGE_ROWS ? w->rows - i : PARQUET_PAGE_ROWS;
        uint8_t wb = (uint8_t)width;
        buf_reset(&w->page);
        put(&w->page, &wb, 1);
        rle_u32(&w->page, w->part_idx + i, n, width);
        if (write_page(w, PAGE_DATA, buf_sl(&w->page), n, ENC_PLAIN_DICTIONARY,
                       err) != 0) {
            return err->code;
        }
    }
    return 0;
}

/* The page of rows [r0, r1), whose values start at *pos in the payload
 * buffer: definition levels (4-byte length, RLE), then the values. The
 * levels are built in w->page and, when they fit, copied into the bytes
 * just before the values (PAYLOAD_ROOM, or the tail of the previous page's
 * values, already compressed and written), so the values themselves are
 * not copied again; otherwise the values follow the levels in w->page.
 * Advances *pos past the values. */
static struct slice payload_page(struct parquet_writer *w, size_t r0, size_t r1,
                                 size_t *pos)
{
    size_t lenpos;
    size_t start = *pos;
    struct slice body;

    buf_reset(&w->page);
    put_le32(&w->page, 0);
    lenpos = w->page.len;
    rle_u8(&w->page, w->defs + r0, r1 - r0);
    set_le32(w->page.data, (uint32_t)(w->page.len - lenpos));
    for (size_t r = r0; r < r1; r++) {
        *pos += w->defs[r] != 0 ? 4 + (size_t)w->plens[r] : 0;
    }
    if (w->page.len <= start) {
        body.ptr = w->payload.data + start - w->page.len;
        memcpy(w->payload.data + start - w->page.len, w->page.data,
               w->page.len);
        body.len = w->page.len + (*pos - start);
        return body;
    }
    put(&w->page, w->payload.data + start, *pos - start);
    return buf_sl(&w->page);
}

/* Statistics first: writing a page overwrites the tail of the previous
 * page's values (payload_page). */
static int write_payload_col(struct parquet_writer *w, struct chunk_meta *cm,
                             struct err *err)
{
    size_t r0 = 0;
    size_t pos = PAYLOAD_ROOM;
    size_t bytes = 0;

    if (w->has_minmax) {
        struct slice lo = {w->payload.data + w->lo_at, w->lo_len};
        struct slice hi = {w->payload.data + w->hi_at, w->hi_len};
        stat_bytes(cm, lo, hi);
    }
    for (size_t r = 0; r < w->rows; r++) {
        if (w->defs[r] != 0) {
            bytes += 4 + (size_t)w->plens[r];
        } else {
            cm->nulls++;
        }
        if (bytes >= w->page_bytes || r + 1 - r0 == PARQUET_PAGE_ROWS ||
            r + 1 == w->rows) {
            struct slice body = payload_page(w, r0, r + 1, &pos);
            if (write_page(w, PAGE_DATA, body, r + 1 - r0, ENC_PLAIN, err) !=
                0) {
                return err->code;
            }
            r0 = r + 1;
            bytes = 0;
        }
    }
    return 0;
}

/* ---- row groups ---- */

static void reset_row_group(struct parquet_writer *w)
{
    w->rows = 0;
    w->ndict = 0;
    buf_reset(&w->dict);
    memset(w->slots, 0, w->nslots * sizeof(*w->slots));
    buf_reset(&w->txn);
    buf_reset(&w->payload);
    put(&w->payload, (const char[PAYLOAD_ROOM]){0}, PAYLOAD_ROOM);
    w->has_minmax = false;
}

static int write_column(struct parquet_writer *w, struct chunk_meta *cm, int c,
                        struct err *err)
{
    w->cur = cm;
    switch (c) {
    case COL_PARTITION:
        return write_partition_col(w, cm, err);
    case COL_OFFSET:
        return write_int64_col(w, cm, w->offs, err);
    case COL_TXN:
        return write_plain_col(w, cm, &w->txn, err);
    case COL_TS:
        return write_int64_col(w, cm, w->tss, err);
    default:
        return write_payload_col(w, cm, err);
    }
}

static int flush_row_group(struct parquet_writer *w, struct err *err)
{
    struct rg_meta *rg;
    int rc = 0;

    if (w->nrg == w->rg_cap) {
        w->rg_cap = w->rg_cap == 0 ? 4 : w->rg_cap * 2;
        w->rgs = xrealloc(w->rgs, w->rg_cap * sizeof(*w->rgs));
    }
    rg = &w->rgs[w->nrg];
    memset(rg, 0, sizeof(*rg));
    rg->rows = (int64_t)w->rows;
    for (int c = 0; c < NCOLS; c++) {
        rg->col[c].dict_off = -1;
        rg->col[c].data_off = -1;
    }
    for (int c = 0; c < NCOLS && rc == 0; c++) {
        rc = write_column(w, &rg->col[c], c, err);
    }
    if (rc != 0) {
        w->failed = true;
        w->fail = *err;
        return rc;
    }
    w->nrg++;
    reset_row_group(w);
    return 0;
}

/* ---- footer ---- */

void parquet_footer_schema(struct thrift_w *t)
{
    static const int types[NCOLS] = {TYPE_BYTE_ARRAY, TYPE_INT64,
                                     TYPE_BYTE_ARRAY, TYPE_INT64,
                                     TYPE_BYTE_ARRAY};

    thrift_w_list(t, 2, THRIFT_STRUCT, NCOLS + 1);
    thrift_w_begin(t);
    thrift_w_str(t, 4, "queen_record");
    thrift_w_i32(t, 5, NCOLS);
    thrift_w_end(t);
    for (int c = 0; c < NCOLS; c++) {
        thrift_w_begin(t);
        thrift_w_i32(t, 1, types[c]);
        thrift_w_i32(t, 3, c == COL_PAYLOAD ? REP_OPTIONAL : REP_REQUIRED);
        thrift_w_str(t, 4, col_names[c]);
        if (types[c] == TYPE_BYTE_ARRAY || c == COL_TS) {
            thrift_w_i32(t, 6, c == COL_TS ? CONV_TIMESTAMP_MICROS : CONV_UTF8);
            thrift_w_field(t, 10, THRIFT_STRUCT); /* LogicalType union */
            thrift_w_begin(t);
            thrift_w_field(t, c == COL_TS ? 8 : 1, THRIFT_STRUCT);
            thrift_w_begin(t);
            if (c == COL_TS) {                       /* TimestampType */
                thrift_w_bool(t, 1, true);           /* isAdjustedToUTC */
                thrift_w_field(t, 2, THRIFT_STRUCT); /* TimeUnit */
                thrift_w_begin(t);
                thrift_w_field(t, 2, THRIFT_STRUCT); /* MICROS */
                thrift_w_begin(t);
                thrift_w_end(t);
                thrift_w_end(t);
            }
            thrift_w_end(t);
            thrift_w_end(t);
        }
        thrift_w_end(t);
    }
}

static void footer_stats(struct thrift_w *t, const struct chunk_meta *cm)
{
    thrift_w_field(t, 12, THRIFT_STRUCT);
    thrift_w_begin(t);
    thrift_w_i64(t, 3, cm->nulls);
    if (cm->max.has) {
        thrift_w_bin(t, 5, cm->max.v, cm->max.len);
    }
    if (cm->min.has) {
        thrift_w_bin(t, 6, cm->min.v, cm->min.len);
    }
    thrift_w_end(t);
}

static void footer_column(struct thrift_w *t, const struct parquet_writer *w,
                          const struct rg_meta *rg, int c)
{
    const struct chunk_meta *cm = &rg->col[c];
    bool dict = cm->dict_off >= 0;
    int data_enc = c == COL_OFFSET || c == COL_TS ? ENC_DELTA : ENC_PLAIN;

    thrift_w_begin(t); /* ColumnChunk */
    thrift_w_i64(t, 2, dict ? cm->dict_off : cm->data_off);
    thrift_w_field(t, 3, THRIFT_STRUCT);
    thrift_w_begin(t); /* ColumnMetaData */
    thrift_w_i32(t, 1,
                 c == COL_OFFSET || c == COL_TS ? TYPE_INT64 : TYPE_BYTE_ARRAY);
    int enc = dict ? ENC_PLAIN_DICTIONARY : data_enc;
    thrift_w_list(t, 2, THRIFT_I32, 2); /* encodings, ascending */
    thrift_w_zigzag(t, enc < ENC_RLE ? enc : ENC_RLE);
    thrift_w_zigzag(t, enc < ENC_RLE ? ENC_RLE : enc);
    thrift_w_list(t, 3, THRIFT_BINARY, 1);
    thrift_w_binval(t, col_names[c], strlen(col_names[c]));
    thrift_w_i32(t, 4, w->codec == PARQUET_ZSTD ? CODEC_ZSTD : CODEC_SNAPPY);
    thrift_w_i64(t, 5, rg->rows);
    thrift_w_i64(t, 6, cm->unc);
    thrift_w_i64(t, 7, cm->comp);
    thrift_w_i64(t, 9, cm->data_off);
    if (dict) {
        thrift_w_i64(t, 11, cm->dict_off);
    }
    footer_stats(t, cm);
    thrift_w_end(t);
    thrift_w_end(t);
}

static void footer_row_group(struct thrift_w *t, const struct parquet_writer *w,
                             size_t i)
{
    const struct rg_meta *rg = &w->rgs[i];
    int64_t unc = 0;
    int64_t comp = 0;
    const struct chunk_meta *c0 = &rg->col[0];

    thrift_w_begin(t);
    thrift_w_list(t, 1, THRIFT_STRUCT, NCOLS);
    for (int c = 0; c < NCOLS; c++) {
        footer_column(t, w, rg, c);
        unc += rg->col[c].unc;
        comp += rg->col[c].comp;
    }
    thrift_w_i64(t, 2, unc);
    thrift_w_i64(t, 3, rg->rows);
    thrift_w_i64(t, 5, c0->dict_off >= 0 ? c0->dict_off : c0->data_off);
    thrift_w_i64(t, 6, comp);
    if (i <= INT16_MAX) {
        thrift_w_field(t, 7, THRIFT_I16);
        thrift_w_zigzag(t, (int64_t)i);
    }
    thrift_w_end(t);
}

static void footer_kv(struct thrift_w *t, const char *k, const char *v)
{
    thrift_w_begin(t);
    thrift_w_str(t, 1, k);
    thrift_w_str(t, 2, v);
    thrift_w_end(t);
}

/* FileMetaData, its length and the closing magic. */
static int write_footer(struct parquet_writer *w, struct err *err)
{
    struct thrift_w t;
    size_t start = w->out.len;
    bool named = w->total_rows > 0;
    size_t nkv = 1 + (named && w->queue != NULL) + (named && w->tenant != NULL);
    uint8_t tail[8] = {0, 0, 0, 0, 'P', 'A', 'R', '1'};

    thrift_w_init(&t, &w->out);
    thrift_w_begin(&t);
    thrift_w_i32(&t, 1, 1);
    parquet_footer_schema(&t);
    thrift_w_i64(&t, 3, (int64_t)w->total_rows);
    thrift_w_list(&t, 4, THRIFT_STRUCT, w->nrg);
    for (size_t i = 0; i < w->nrg; i++) {
        footer_row_group(&t, w, i);
    }
    thrift_w_list(&t, 5, THRIFT_STRUCT, nkv);
    footer_kv(&t, "queen.envelope", "1");
    if (named && w->queue != NULL) {
        footer_kv(&t, "queen.queue", w->queue);
    }
    if (named && w->tenant != NULL) {
        footer_kv(&t, "queen.tenant", w->tenant);
    }
    thrift_w_str(&t, 6, PARQUET_CREATED_BY);
    thrift_w_list(&t, 7, THRIFT_STRUCT, NCOLS);
    for (int c = 0; c < NCOLS; c++) {
        thrift_w_begin(&t);
        thrift_w_field(&t, 1, THRIFT_STRUCT); /* TYPE_ORDER */
        thrift_w_begin(&t);
        thrift_w_end(&t);
        thrift_w_end(&t);
    }
    thrift_w_end(&t);
    if (thrift_w_check(&t, err) != 0) {
        return err_wrap(err, "parquet footer");
    }
    set_le32((char *)tail, (uint32_t)(w->out.len - start));
    if (buf_append(&w->out, tail, sizeof(tail), err) != 0) {
        return err_wrap(err, "parquet footer");
    }
    return 0;
}

/* ---- the partition dictionary (per row group) ---- */

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (size_t i = 0; i < n; i++) {
        h = (h ^ (uint8_t)p[i]) * 1099511628211ULL;
    }
    return h;
}

static bool dict_eq(const struct parquet_writer *w, uint32_t i, struct slice s)
{
    const char *e = w->dict.data + w->dict_pos[i];

    return get_le32(e) == s.len && memcmp(e + 4, s.ptr, s.len) == 0;
}

static void dict_grow(struct parquet_writer *w)
{
    size_t n = w->nslots == 0 ? 256 : w->nslots * 2;

    free(w->slots);
    w->slots = xcalloc(n, sizeof(*w->slots));
    w->nslots = n;
    for (size_t i = 0; i < w->ndict; i++) {
        const char *e = w->dict.data + w->dict_pos[i];
        size_t h = (size_t)hash_bytes(e + 4, get_le32(e)) & (n - 1);
        while (w->slots[h] != 0) {
            h = (h + 1) & (n - 1);
        }
        w->slots[h] = (uint32_t)i + 1;
    }
}

static uint32_t dict_index(struct parquet_writer *w, struct slice s)
{
    size_t h;

    if (w->rows > 0 && dict_eq(w, w->part_idx[w->rows - 1], s)) {
        return w->part_idx[w->rows - 1]; /* sorted input: the usual case */
    }
    if ((w->ndict + 1) * 2 > w->nslots) {
        dict_grow(w);
    }
    h = (size_t)hash_bytes(s.ptr, s.len) & (w->nslots - 1);
    while (w->slots[h] != 0) {
        if (dict_eq(w, w->slots[h] - 1, s)) {
            return w->slots[h] - 1;
        }
        h = (h + 1) & (w->nslots - 1);
    }
    if (w->ndict == w->dict_cap) {
        w->dict_cap = w->dict_cap == 0 ? 64 : w->dict_cap * 2;
        w->dict_pos = xrealloc(w->dict_pos, w->dict_cap * sizeof(size_t));
    }
    w->dict_pos[w->ndict] = w->dict.len;
    put_le32(&w->dict, (uint32_t)s.len);
    put(&w->dict, s.ptr, s.len);
    w->slots[h] = (uint32_t)w->ndict + 1;
    return (uint32_t)w->ndict++;
}

/* ---- public API ---- */

struct parquet_writer *parquet_writer_new(const struct parquet_opts *o)
{
    struct parquet_writer *w = xcalloc(1, sizeof(*w));

    w->codec = o->codec;
    w->rg_rows = o->row_group_records != 0 ? o->row_group_records
                                           : PARQUET_ROW_GROUP_DEF;
    if (o->page_bytes != 0) {
        w->page_bytes = o->page_bytes;
    } else if (w->codec == PARQUET_ZSTD) {
        w->page_bytes = PARQUET_PAGE_BYTES_ZSTD;
    } else {
        w->page_bytes = PARQUET_PAGE_BYTES_SNAPPY;
    }
    w->queue = o->queue != NULL ? xstrdup(o->queue) : NULL;
    w->tenant = o->tenant != NULL ? xstrdup(o->tenant) : NULL;
    buf_init(&w->out, BUF_UNLIMITED);
    buf_init(&w->dict, BUF_UNLIMITED);
    buf_init(&w->txn, BUF_UNLIMITED);
    buf_init(&w->payload, BUF_UNLIMITED);
    put(&w->payload, (const char[PAYLOAD_ROOM]){0}, PAYLOAD_ROOM);
    buf_init(&w->last_part, BUF_UNLIMITED);
    buf_init(&w->page, BUF_UNLIMITED);
    buf_init(&w->comp, BUF_UNLIMITED);
    buf_init(&w->hdr, BUF_UNLIMITED);
    if (w->codec == PARQUET_ZSTD) {
        w->zc = ZSTD_createCCtx();
        ASSERT(w->zc != NULL);
    }
    put(&w->out, "PAR1", 4);
    /* A cap below 4 bytes is caught by parquet_writer_finish. */
    w->out.max = o->max_bytes != 0 ? o->max_bytes : BUF_UNLIMITED;
    return w;
}

void parquet_writer_free(struct parquet_writer *w)
{
    if (w == NULL) {
        return;
    }
    free(w->queue);
    free(w->tenant);
    buf_free(&w->out);
    free(w->part_idx);
    free(w->offs);
    free(w->tss);
    free(w->defs);
    free(w->plens);
    buf_free(&w->dict);
    free(w->dict_pos);
    free(w->slots);
    buf_free(&w->txn);
    buf_free(&w->payload);
    buf_free(&w->last_part);
    free(w->rgs);
    buf_free(&w->page);
    buf_free(&w->comp);
    buf_free(&w->hdr);
    ZSTD_freeCCtx(w->zc);
    free(w);
}

/* Checks a record before anything changes: sizes, UTF-8, order (1). */
static int check_record(const struct parquet_writer *w,
                        const struct parquet_record *r, struct err *err)
{
    if (r->partition.len > PARQUET_VALUE_MAX ||
        r->txn.len > PARQUET_VALUE_MAX || r->payload.len > PARQUET_VALUE_MAX) {
        return err_set(err, ERR_TOO_BIG,
                       "parquet: a field of record %" PRId64
                       " is over %zu bytes",
                       r->offset, PARQUET_VALUE_MAX);
    }
    if (!utf8_valid(r->partition.ptr, r->partition.len) ||
        !utf8_valid(r->txn.ptr, r->txn.len) ||
        !utf8_valid(r->payload.ptr, r->payload.len)) {
        return err_set(err, ERR_INVALID,
                       "parquet: record %" PRId64 " has text that is not UTF-8",
                       r->offset);
    }
    if (!w->has_last) {
        return 0;
    }
    int c = bytes_cmp(r->partition.ptr, r->partition.len, w->last_part.data,
                      w->last_part.len);
    if (c > 0 || (c == 0 && (r->offset > w->last_off || r->ts > w->last_ts))) {
        return 0;
    }
    return err_set(err, ERR_INVALID,
                   "parquet: records must be sorted by (partition, offset): "
                   "\"%.*s\"/%" PRId64 " after \"%.*s\"/%" PRId64,
                   (int)(r->partition.len > 64 ? 64 : r->partition.len),
                   r->partition.ptr, r->offset,
                   (int)(w->last_part.len > 64 ? 64 : w->last_part.len),
                   w->last_part.data, w->last_off);
}

static void ensure_rows(struct parquet_writer *w)
{
    if (w->rows < w->cap_rows) {
        return;
    }
    w->cap_rows = w->cap_rows == 0 ? 1024 : w->cap_rows * 2;
    w->cap_rows = w->cap_rows > w->rg_rows ? w->rg_rows : w->cap_rows;
    w->part_idx = xrealloc(w->part_idx, w->cap_rows * sizeof(*w->part_idx));
    w->offs = xrealloc(w->offs, w->cap_rows * sizeof(*w->offs));
    w->tss = xrealloc(w->tss, w->cap_rows * sizeof(*w->tss));
    w->defs = xrealloc(w->defs, w->cap_rows * sizeof(*w->defs));
    w->plens = xrealloc(w->plens, w->cap_rows * sizeof(*w->plens));
}

/* The payload just appended (its last n bytes) against the row group's
 * min and max so far. */
static void payload_minmax(struct parquet_writer *w, size_t n)
{
    size_t at = w->payload.len - n;
    const char *p = w->payload.data + at;

    if (!w->has_minmax ||
        bytes_cmp(p, n, w->payload.data + w->lo_at, w->lo_len) < 0) {
        w->lo_at = at;
        w->lo_len = n;
    }
    if (!w->has_minmax ||
        bytes_cmp(p, n, w->payload.data + w->hi_at, w->hi_len) > 0) {
        w->hi_at = at;
        w->hi_len = n;
    }
    w->has_minmax = true;
}

static void put_plain(struct buf *b, struct slice s)
{
    char *p = reserve(b, 4 + s.len);

    set_le32(p, (uint32_t)s.len);
    memcpy(p + 4, s.ptr, s.len);
    b->len += 4 + s.len;
    b->data[b->len] = '\0';
}

int parquet_writer_add(struct parquet_writer *w, const struct parquet_record *r,
                       struct err *err)
{
    ASSERT(!w->finished);
    if (w->failed) {
        *err = w->fail;
        return err->code;
    }
    if (check_record(w, r, err) != 0) {
        return err->code;
    }
    ensure_rows(w);
    w->part_idx[w->rows] = dict_index(w, r->partition);
    w->offs[w->rows] = r->offset;
    w->tss[w->rows] = r->ts;
    w->defs[w->rows] = r->payload.len > 0;
    w->plens[w->rows] = (uint32_t)r->payload.len;
    put_plain(&w->txn, r->txn);
    if (r->payload.len > 0) {
        put_plain(&w->payload, r->payload);
        payload_minmax(w, r->payload.len);
    }
    w->rows++;
    if (!w->has_last || w->last_part.len != r->partition.len ||
        memcmp(w->last_part.data, r->partition.ptr, r->partition.len) != 0) {
        buf_reset(&w->last_part);
        put(&w->last_part, r->partition.ptr, r->partition.len);
    }
    w->has_last = true;
    w->last_off = r->offset;
    w->last_ts = r->ts;
    w->total_rows++;
    w->weight += 64 + r->txn.len + r->partition.len +
                 (r->payload.len > 0 ? r->payload.len : 4);
    if (w->rows == w->rg_rows) {
        return flush_row_group(w, err); /* (2) */
    }
    return 0;
}

uint64_t parquet_writer_bytes_so_far(const struct parquet_writer *w)
{
    return w->weight;
}

uint64_t parquet_writer_records(const struct parquet_writer *w)
{
    return w->total_rows;
}

int parquet_writer_finish(struct parquet_writer *w, struct buf *out,
                          struct err *err)
{
    ASSERT(!w->finished);
    w->finished = true;
    if (w->failed) {
        *err = w->fail;
        return err->code;
    }
    if (w->out.len > w->out.max) {
        return err_set(err, ERR_TOO_BIG, "parquet file: over its cap of %zu",
                       w->out.max);
    }
    if ((w->rows > 0 && flush_row_group(w, err) != 0) ||
        write_footer(w, err) != 0) {
        return err->code;
    }
    if (out->len == 0 && out->max >= w->out.len) {
        struct buf tmp = *out;
        out->data = w->out.data;
        out->len = w->out.len;
        out->cap = w->out.cap;
        w->out = tmp;
        return 0;
    }
    return buf_append(out, w->out.data, w->out.len, err);
}

const char *parquet_codec_name(enum parquet_codec c)
{
    return c == PARQUET_ZSTD ? "zstd" : "snappy";
}

#ifndef QUEEN_SNAPPY_VERSION
#define QUEEN_SNAPPY_VERSION "unknown"
#endif

const char *parquet_writer_string(enum parquet_codec c)
{
    return c == PARQUET_ZSTD ? "queen-s3/2.0.0 parquet/q2 zstd"
                             : "queen-s3/2.0.0 parquet/q2 snappy";
}

static char library_zstd[64];
static pthread_once_t library_once = PTHREAD_ONCE_INIT;

static void library_init(void)
{
    snprintf(library_zstd, sizeof(library_zstd), "libzstd/%s",
             ZSTD_versionString());
}

const char *parquet_codec_library(enum parquet_codec c)
{
    pthread_once(&library_once, library_init);
    return c == PARQUET_ZSTD ? library_zstd : "snappy/" QUEEN_SNAPPY_VERSION;
}
