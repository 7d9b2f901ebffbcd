/* parquet_tool: drives src/parquet/parquet.c for the Python/Node tests and the
 * benchmark.
 *
 *   parquet_tool write [options] IN OUT   records of IN -> OUT (.parquet)
 *       --codec zstd|snappy  --row-group N  --page-bytes N
 *       --queue NAME  --tenant ID  --time (print the writer's own seconds)
 *   parquet_tool gen N PARTITIONS PAYLOAD_BYTES OUT
 *       N deterministic bench records, sorted by (partition, offset)
 *
 * IN is a sequence of records, each (integers little-endian):
 *   SIZE  FIELD
 *   4     partition length P, then P bytes
 *   8     offset (int64)
 *   4     transaction id length T, then T bytes
 *   8     ts, µs since the epoch (int64)
 *   4     payload length L (0 = null), then L bytes (raw JSON text)
 * Exit status: 0 ok, 1 the writer refused (message on stderr), 2 usage or
 * I/O. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/xalloc.h"
#include "parquet/parquet.h"

struct input {
    char *data;
    size_t len;
};

static int read_file(const char *path, struct input *in)
{
    FILE *f = fopen(path, "rb");
    struct buf b;
    struct err e;
    char tmp[1 << 16];
    size_t n;

    if (f == NULL) {
        perror(path);
        return 2;
    }
    buf_init(&b, BUF_UNLIMITED);
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0) {
        if (buf_append(&b, tmp, n, &e) != 0) {
            break;
        }
    }
    fclose(f);
    in->data = b.data;
    in->len = b.len;
    return 0;
}

static bool take(const struct input *in, size_t *pos, size_t n, const char **p)
{
    if (in->len - *pos < n) {
        return false;
    }
    *p = in->data + *pos;
    *pos += n;
    return true;
}

static bool take_u32(const struct input *in, size_t *pos, uint32_t *v)
{
    const char *p;

    if (!take(in, pos, 4, &p)) {
        return false;
    }
    memcpy(v, p, 4);
    return true;
}

static bool take_slice(const struct input *in, size_t *pos, struct slice *s)
{
    uint32_t n;

    if (!take_u32(in, pos, &n) || !take(in, pos, n, &s->ptr)) {
        return false;
    }
    s->len = n;
    return true;
}

static bool take_i64(const struct input *in, size_t *pos, int64_t *v)
{
    const char *p;

    if (!take(in, pos, 8, &p)) {
        return false;
    }
    memcpy(v, p, 8);
    return true;
}

/* Parses every record of in (slices borrow from it). */
static int parse_records(const struct input *in, struct parquet_record **out,
                         size_t *n)
{
    size_t pos = 0;
    size_t cap = 0;
    struct parquet_record *rs = NULL;

    *n = 0;
    while (pos < in->len) {
        struct parquet_record r;
        if (!take_slice(in, &pos, &r.partition) ||
            !take_i64(in, &pos, &r.offset) || !take_slice(in, &pos, &r.txn) ||
            !take_i64(in, &pos, &r.ts) || !take_slice(in, &pos, &r.payload)) {
            fprintf(stderr, "parquet_tool: truncated record %zu\n", *n);
            free(rs);
            return 2;
        }
        if (*n == cap) {
            cap = cap == 0 ? 1024 : cap * 2;
            rs = xrealloc(rs, cap * sizeof(*rs));
        }
        rs[(*n)++] = r;
    }
    *out = rs;
    return 0;
}

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int rc = 0;

    if (f == NULL) {
        perror(path);
        return 2;
    }
    if (fwrite(p, 1, n, f) != n) {
        rc = 2;
    }
    if (fclose(f) != 0 || rc != 0) {
        perror(path);
        return 2;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int write_all(const struct parquet_opts *o,
                     const struct parquet_record *rs, size_t n,
                     const char *path, bool timed)
{
    struct err e;
    struct buf out;
    double t0 = now_s();
    struct parquet_writer *w = parquet_writer_new(o);
    uint64_t raw;

    buf_init(&out, BUF_UNLIMITED);
    for (size_t i = 0; i < n; i++) {
        if (parquet_writer_add(w, &rs[i], &e) != 0) {
            fprintf(stderr, "parquet_tool: record %zu: %s\n", i, e.msg);
            parquet_writer_free(w);
            return 1;
        }
    }
    raw = parquet_writer_bytes_so_far(w);
    if (parquet_writer_finish(w, &out, &e) != 0) {
        fprintf(stderr, "parquet_tool: finish: %s\n", e.msg);
        parquet_writer_free(w);
        return 1;
    }
    double t1 = now_s();
    parquet_writer_free(w);
    if (timed) {
        printf("records=%zu weight=%" PRIu64 " bytes=%zu seconds=%.6f\n", n,
               raw, out.len, t1 - t0);
    }
    int rc = write_file(path, out.data, out.len);
    buf_free(&out);
    return rc;
}

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static void put_u32(struct buf *b, uint32_t v)
{
    struct err e;

    buf_append(b, &v, 4, &e);
}

static void put_i64(struct buf *b, int64_t v)
{
    struct err e;

    buf_append(b, &v, 8, &e);
}

/* A JSON order event of about size bytes: fixed keys, varying numbers and
 * words from a small vocabulary, as real payloads are. */
static void gen_payload(struct buf *b, uint64_t *rng, uint64_t j, size_t size)
{
    static const char *const words[] = {
        "alpha", "bravo",  "delivery", "express",  "invoice",   "parcel",
        "north", "refund", "priority", "customer", "warehouse", "shipped",
        "euro",  "paid",   "pending",  "returned", "gift",      "fragile"};
    struct err e;
    size_t start = b->len;

    buf_printf(b, &e,
               "{\"type\":\"%s\",\"order\":%" PRIu64 ",\"amount\":%" PRIu64
               ".%02" PRIu64 ",\"currency\":\"EUR\",\"items\":[%" PRIu64
               ",%" PRIu64 "],\"note\":\"",
               words[rng_next(rng) % ARRAY_LEN(words)], j, rng_next(rng) % 5000,
               rng_next(rng) % 100, rng_next(rng) % 100000,
               rng_next(rng) % 100000);
    while (b->len - start + 20 < size) {
        buf_printf(b, &e, "%s ", words[rng_next(rng) % ARRAY_LEN(words)]);
    }
    buf_append_str(b, "\"}", &e);
}

/* Record j goes to partition j % parts with offset j / parts; ts grows
 * with j, several records sharing a stamp as a push batch does. */
static int gen(uint64_t n, uint64_t parts, size_t size, const char *path)
{
    struct buf b;
    struct buf pl;
    struct err e;
    uint64_t rng = 42;
    char name[32];
    char txn[40];
    int rc;

    buf_init(&b, BUF_UNLIMITED);
    buf_init(&pl, BUF_UNLIMITED);
    for (uint64_t p = 0; p < parts; p++) {
        int nl = snprintf(name, sizeof(name), "cust-%06" PRIu64, p);
        for (uint64_t j = p; j < n; j += parts) {
            int64_t ts = 1791007200000000LL + (int64_t)(j / 8) * 250;
            int tl = snprintf(txn, sizeof(txn),
                              "%08" PRIx64 "-%04" PRIx64 "-7%03" PRIx64
                              "-%04" PRIx64 "-%012" PRIx64,
                              (uint64_t)ts / 1000000, (j >> 16) & 0xffff,
                              j & 0xfff, rng_next(&rng) & 0xffff,
                              rng_next(&rng) << 16 | rng_next(&rng));
            buf_reset(&pl);
            gen_payload(&pl, &rng, j, size);
            put_u32(&b, (uint32_t)nl);
            buf_append(&b, name, (size_t)nl, &e);
            put_i64(&b, (int64_t)(j / parts));
            put_u32(&b, (uint32_t)tl);
            buf_append(&b, txn, (size_t)tl, &e);
            put_i64(&b, ts);
            put_u32(&b, (uint32_t)pl.len);
            buf_append(&b, pl.data, pl.len, &e);
        }
    }
    rc = write_file(path, b.data, b.len);
    buf_free(&b);
    buf_free(&pl);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: parquet_tool write [--codec zstd|snappy] "
                    "[--row-group N] [--page-bytes N] [--queue Q] "
                    "[--tenant T] [--time] IN OUT\n"
                    "       parquet_tool gen N PARTITIONS PAYLOAD_BYTES OUT\n");
    return 2;
}

static int cmd_write(int argc, char **argv)
{
    struct parquet_opts o = {.codec = PARQUET_ZSTD};
    bool timed = false;
    int i = 2;
    struct input in;
    struct parquet_record *rs;
    size_t n;
    int rc;

    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--time") == 0) {
            timed = true;
        } else if (strcmp(argv[i], "--codec") == 0) {
            o.codec = strcmp(argv[++i], "snappy") == 0 ? PARQUET_SNAPPY
                                                       : PARQUET_ZSTD;
        } else if (strcmp(argv[i], "--row-group") == 0) {
            o.row_group_records = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--page-bytes") == 0) {
            o.page_bytes = strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--queue") == 0) {
            o.queue = argv[++i];
        } else if (strcmp(argv[i], "--tenant") == 0) {
            o.tenant = argv[++i];
        } else {
            return usage();
        }
    }
    if (argc - i != 2) {
        return usage();
    }
    if ((rc = read_file(argv[i], &in)) != 0) {
        return rc;
    }
    rc = parse_records(&in, &rs, &n);
    if (rc == 0) {
        rc = write_all(&o, rs, n, argv[i + 1], timed);
        free(rs);
    }
    free(in.data);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "write") == 0) {
        return cmd_write(argc, argv);
    }
    if (argc == 6 && strcmp(argv[1], "gen") == 0) {
        return gen(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
                   strtoul(argv[4], NULL, 10), argv[5]);
    }
    return usage();
}
