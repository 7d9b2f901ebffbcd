/* Round trip: records made from the fuzz bytes -> our Parquet file -> decoded
 * back by src/parquet/read.c -> the same records, and the same bytes
 * when written twice. The raw input also goes through the Thrift decoder,
 * which must refuse garbage without crashing.
 *
 * Input: byte 0 picks the options (bit 0 codec, bits 1-3 row-group size,
 * bits 4-6 page size). Then records, each:
 *   1 byte  partition length (low 3 bits), then that many name bytes
 *   1 byte  offset step within the partition (+1)
 *   8 bytes ts (any int64)
 *   1 byte  payload length (0 = null), then that many payload bytes
 * Bytes >= 0x80 in names and payloads become "é" so the text stays UTF-8.
 * Records are sorted by partition and offsets made increasing, as the sink
 * delivers them.
 *
 * What `queen lake` reads is untrusted: the file written is also damaged
 * (bytes the input picks, flipped) and read again, and the raw input read
 * as a file, under a bound on what it may decode to; either reads or is
 * refused (ERR_CORRUPT), never a crash or more memory than the bound. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/xalloc.h"
#include "parquet/parquet.h"
#include "parquet/read.h"
#include "parquet/thrift.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct cursor {
    const uint8_t *p;
    size_t left;
};

static uint8_t next(struct cursor *c)
{
    if (c->left == 0) {
        return 0;
    }
    c->left--;
    return *c->p++;
}

/* Text from n input bytes into b; returns its slice offset. */
static size_t text(struct cursor *c, size_t n, struct buf *b)
{
    size_t start = b->len;
    struct err e = {0};

    for (size_t i = 0; i < n; i++) {
        uint8_t x = next(c);
        if (x >= 0x80) {
            buf_append(b, "\xc3\xa9", 2, &e);
        } else {
            buf_append_byte(b, (char)x, &e);
        }
    }
    return start;
}

struct rec {
    size_t part;
    size_t plen;
    uint8_t step;
    int64_t ts;
    size_t pay;
    size_t paylen;
    size_t idx;
};

static const char *arena_base;

static int by_partition(const void *a, const void *b)
{
    const struct rec *x = a;
    const struct rec *y = b;
    size_t n = x->plen < y->plen ? x->plen : y->plen;
    int c = memcmp(arena_base + x->part, arena_base + y->part, n);

    if (c != 0) {
        return c;
    }
    if (x->plen != y->plen) {
        return x->plen < y->plen ? -1 : 1;
    }
    return x->idx < y->idx ? -1 : x->idx > y->idx; /* stable */
}

static bool same_partition(const struct rec *a, const struct rec *b)
{
    return a->plen == b->plen &&
           memcmp(arena_base + a->part, arena_base + b->part, a->plen) == 0;
}

static size_t parse(const uint8_t *data, size_t size, struct buf *arena,
                    struct rec **out)
{
    struct cursor c = {data + 1, size - 1};
    struct rec *rs = NULL;
    size_t n = 0;

    while (c.left > 0 && n < 20000) {
        struct rec r;
        uint64_t ts = 0;
        r.plen = next(&c) & 7;
        r.part = text(&c, r.plen, arena);
        r.plen = arena->len - r.part;
        r.step = next(&c);
        for (int i = 0; i < 8; i++) {
            ts = ts << 8 | next(&c);
        }
        r.ts = (int64_t)ts;
        r.paylen = next(&c);
        r.pay = text(&c, r.paylen, arena);
        r.paylen = arena->len - r.pay;
        r.idx = n;
        rs = xrealloc(rs, (n + 1) * sizeof(*rs));
        rs[n++] = r;
    }
    *out = rs;
    return n;
}

static bool same(struct slice a, struct slice b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void write_mem(const struct parquet_opts *o,
                      const struct parquet_record *rs, size_t n,
                      struct buf *out)
{
    struct parquet_writer *w = parquet_writer_new(o);
    struct err e = {0};

    buf_init(out, BUF_UNLIMITED);
    for (size_t i = 0; i < n; i++) {
        ASSERT(parquet_writer_add(w, &rs[i], &e) == 0);
    }
    ASSERT(parquet_writer_finish(w, out, &e) == 0);
    parquet_writer_free(w);
}

/* A bound on what a damaged file may decode to: far above what the
 * target's inputs write, far below libFuzzer's RSS limit. */
#define FUZZ_DECODED_MAX ((size_t)64 << 20)

static void read_untrusted(const void *p, size_t n)
{
    struct parquet_file f;
    struct err e = {0};
    int rc = parquet_file_read_max(p, n, FUZZ_DECODED_MAX, &f, &e);

    ASSERT(rc == 0 || rc == ERR_CORRUPT);
    ASSERT(f.decoded <= FUZZ_DECODED_MAX);
    parquet_file_free(&f);
}

/* file with up to 8 bytes flipped at places data picks, read again. */
static void read_damaged(const struct buf *file, const uint8_t *data,
                         size_t size)
{
    uint8_t *d;

    if (file->len == 0 || size < 2) {
        return;
    }
    d = xmalloc(file->len);
    memcpy(d, file->data, file->len);
    for (size_t i = 0; i + 1 < size && i < 8; i++) {
        size_t at =
            ((size_t)data[size - 1 - i] * 2654435761u + i * 977) % file->len;
        d[at] ^= (uint8_t)(data[i] | 1);
    }
    read_untrusted(d, file->len);
    free(d);
}

static void round_trip(const struct parquet_opts *o,
                       const struct parquet_record *rs, size_t n,
                       const uint8_t *data, size_t size)
{
    struct buf a;
    struct buf b;
    struct parquet_file f;
    struct err e = {0};

    write_mem(o, rs, n, &a);
    write_mem(o, rs, n, &b);
    ASSERT(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    ASSERT(parquet_file_read(a.data, a.len, &f, &e) == 0);
    ASSERT(f.nrecs == n);
    for (size_t i = 0; i < n; i++) {
        const struct parquet_record *x = &rs[i];
        const struct parquet_record *y = &f.recs[i];
        ASSERT(same(x->partition, y->partition) && x->offset == y->offset &&
               same(x->txn, y->txn) && x->ts == y->ts &&
               same(x->payload, y->payload));
    }
    parquet_file_free(&f);
    read_damaged(&a, data, size);
    buf_free(&a);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct thrift_tree t = {0};
    struct err e = {0};
    size_t used = 0;
    struct buf arena;
    struct rec *rs;
    struct parquet_record *recs;
    uint8_t h = size > 0 ? data[0] : 0;
    struct parquet_opts o = {.codec =
                                 (h & 1) != 0 ? PARQUET_SNAPPY : PARQUET_ZSTD,
                             .row_group_records = 1 + ((h >> 1) & 7) * 7u,
                             .page_bytes = (size_t)16 << ((h >> 4) & 7),
                             .queue = "q",
                             .tenant = "t"};

    if (thrift_decode(data, size, &t, &used, &e) == 0) {
        thrift_tree_free(&t);
    }
    read_untrusted(data, size);
    if (size == 0) {
        return 0;
    }
    buf_init(&arena, BUF_UNLIMITED);
    buf_reserve(&arena, 1, &e); /* never a NULL base */
    size_t n = parse(data, size, &arena, &rs);
    arena_base = arena.data;
    if (n > 0) {
        qsort(rs, n, sizeof(*rs), by_partition);
    }
    recs = xcalloc(n + 1, sizeof(*recs));
    for (size_t i = 0; i < n; i++) {
        bool first = i == 0 || !same_partition(&rs[i], &rs[i - 1]);
        recs[i].partition = (struct slice){arena.data + rs[i].part, rs[i].plen};
        recs[i].offset = first ? (int64_t)rs[i].step - 5
                               : recs[i - 1].offset + rs[i].step + 1;
        recs[i].txn = (struct slice){arena.data + rs[i].part, rs[i].plen};
        recs[i].ts = rs[i].ts;
        recs[i].payload = (struct slice){arena.data + rs[i].pay, rs[i].paylen};
    }
    round_trip(&o, recs, n, data, size);
    free(recs);
    free(rs);
    buf_free(&arena);
    return 0;
}
