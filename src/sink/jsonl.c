/* The JSONL writer: a window's records as one object body
 * (docs/design/formats.md §6).
 *
 * Records arrive in (partition, offset) order and are formatted one line at
 * a time. For `none` a line goes straight into the body. For zstd and gzip
 * lines gather in a staging buffer of JSONL_STAGE bytes, which is handed to
 * the compressor when full and once more at finish; the compressor's output
 * grows the body. Chunking is a function of the line bytes alone, so the
 * same records give the same body.
 *
 * gzip header (RFC 1952) as zlib writes it with our gz_header:
 *   OFFSET SIZE DESCRIPTION
 *        0    2 1f 8b
 *        2    1 CM 8 (deflate)
 *        3    1 FLG 0 (no FNAME, FCOMMENT, FEXTRA, FHCRC)
 *        4    4 MTIME 0
 *        8    1 XFL (0 at level 6)
 *        9    1 OS 255 (unknown) */
#include "sink/jsonl.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ZLIB_CONST /* next_in is const: zlib never writes its input */
#include <zlib.h>
#include <zstd.h>

#include "base/isotime.h"
#include "base/json.h"
#include "base/xalloc.h"

#define JSONL_STAGE ((size_t)256 * 1024)
#define JSONL_CHUNK ((size_t)128 * 1024)
#define JSONL_HUGE  ((size_t)2 * 1024 * 1024)

/* The ISO-µs text of the last second formatted: consecutive records share
 * their second, so only the six fraction digits change. */
struct ts_cache {
    int64_t sec; /* floor(ts / 1e6); valid when text[0] != 0 */
    char text[32];
    size_t len; /* strlen(text) */
};

struct jsonl_cctx {
    ZSTD_CCtx *zc;
};

struct jsonl_writer {
    enum jsonl_codec codec;
    bool owns_zc;     /* zc is the writer's own, not a jsonl_cctx's */
    struct buf out;   /* the body so far (compressed unless none) */
    struct buf stage; /* plain lines not yet compressed */
    ZSTD_CCtx *zc;
    z_stream zs;
    gz_header gz; /* zlib reads it while writing the header */
    bool zs_open;
    bool broken;   /* an error left the body unusable */
    bool finished; /* finish ran */
    struct buf last_part;
    struct buf head; /* last_part's line head (part_head) */
    int64_t last_offset;
    int64_t last_ts;
    uint64_t records;
    uint64_t plain_bytes;
    struct ts_cache ts;      /* the stamp text of the last line's second */
    uint64_t (*clock)(void); /* NULL: compression is not timed */
    uint64_t *clock_ns;
};

int jsonl_codec_parse(const char *name, enum jsonl_codec *out, struct err *err)
{
    if (strcmp(name, "zstd") == 0) {
        *out = JSONL_ZSTD;
    } else if (strcmp(name, "gzip") == 0) {
        *out = JSONL_GZIP;
    } else if (strcmp(name, "none") == 0 || strcmp(name, "plain") == 0 ||
               name[0] == '\0') {
        *out = JSONL_NONE;
    } else if (strcmp(name, "snappy") == 0) {
        return err_set(err, ERR_INVALID,
                       "jsonl: snappy is a Parquet codec; a JSONL object is "
                       "zstd, gzip or plain");
    } else {
        return err_set(err, ERR_INVALID, "jsonl: unknown compression \"%s\"",
                       name);
    }
    return 0;
}

const char *jsonl_codec_name(enum jsonl_codec c)
{
    return c == JSONL_ZSTD ? "zstd" : c == JSONL_GZIP ? "gzip" : "none";
}

const char *jsonl_extension(enum jsonl_codec c)
{
    return c == JSONL_ZSTD   ? "jsonl.zst"
           : c == JSONL_GZIP ? "jsonl.gz"
                             : "jsonl";
}

const char *jsonl_writer_string(enum jsonl_codec c)
{
    return c == JSONL_ZSTD   ? "queen-s3/2.0.0 jsonl+zstd"
           : c == JSONL_GZIP ? "queen-s3/2.0.0 jsonl+gzip"
                             : "queen-s3/2.0.0 jsonl";
}

static char library_zstd[64];
static char library_gzip[64];
static pthread_once_t library_once = PTHREAD_ONCE_INIT;

/* The versions are those of the libraries this process runs with, asked
 * once: the bytes are theirs. */
static void libraries_init(void)
{
    snprintf(library_zstd, sizeof(library_zstd), "libzstd/%s",
             ZSTD_versionString());
    snprintf(library_gzip, sizeof(library_gzip), "zlib/%s", zlibVersion());
}

const char *jsonl_codec_library(enum jsonl_codec c)
{
    pthread_once(&library_once, libraries_init);
    return c == JSONL_ZSTD ? library_zstd : c == JSONL_GZIP ? library_gzip : "";
}

static ZSTD_CCtx *zstd_new(void)
{
    ZSTD_CCtx *zc = ZSTD_createCCtx();

    ASSERT(zc != NULL);
    ASSERT(
        !ZSTD_isError(ZSTD_CCtx_setParameter(zc, ZSTD_c_compressionLevel, 3)));
    return zc;
}

struct jsonl_cctx *jsonl_cctx_new(void)
{
    struct jsonl_cctx *z = xcalloc(1, sizeof(*z));

    z->zc = zstd_new();
    return z;
}

void jsonl_cctx_free(struct jsonl_cctx *z)
{
    if (z == NULL) {
        return;
    }
    ZSTD_freeCCtx(z->zc);
    free(z);
}

static struct jsonl_writer *writer_new(enum jsonl_codec c, size_t max_bytes,
                                       struct jsonl_cctx *z)
{
    struct jsonl_writer *w = xcalloc(1, sizeof(*w));

    w->codec = c;
    buf_init(&w->out, max_bytes == 0 ? BUF_UNLIMITED : max_bytes);
    buf_init(&w->stage, BUF_UNLIMITED);
    buf_init(&w->last_part, BUF_UNLIMITED);
    buf_init(&w->head, BUF_UNLIMITED);
    if (c == JSONL_ZSTD && z != NULL) {
        w->zc = z->zc;
        ASSERT(!ZSTD_isError(ZSTD_CCtx_reset(w->zc, ZSTD_reset_session_only)));
    } else if (c == JSONL_ZSTD) {
        w->zc = zstd_new();
        w->owns_zc = true;
    } else if (c == JSONL_GZIP) {
        ASSERT(deflateInit2(&w->zs, 6, Z_DEFLATED, 15 + 16, 8,
                            Z_DEFAULT_STRATEGY) == Z_OK);
        w->gz.time = 0;
        w->gz.os = 255;
        ASSERT(deflateSetHeader(&w->zs, &w->gz) == Z_OK);
        w->zs_open = true;
    }
    return w;
}

struct jsonl_writer *jsonl_writer_new(enum jsonl_codec c, size_t max_bytes)
{
    return writer_new(c, max_bytes, NULL);
}

struct jsonl_writer *jsonl_writer_new_with(enum jsonl_codec c, size_t max_bytes,
                                           struct buf *spare,
                                           struct jsonl_cctx *z)
{
    struct jsonl_writer *w = writer_new(c, max_bytes, z);

    w->out.data = spare->data;
    w->out.cap = spare->cap;
    if (w->out.data != NULL) {
        w->out.data[0] = '\0';
    }
    buf_init(spare, spare->max);
    return w;
}

void jsonl_writer_free(struct jsonl_writer *w)
{
    if (w == NULL) {
        return;
    }
    if (w->owns_zc) {
        ZSTD_freeCCtx(w->zc);
    }
    if (w->zs_open) {
        deflateEnd(&w->zs);
    }
    buf_free(&w->out);
    buf_free(&w->stage);
    buf_free(&w->last_part);
    buf_free(&w->head);
    free(w);
}

#define US_PER_S 1000000

/* The 27 bytes of r->ts as ISO-µs ("2026-09-04T10:03:41.918204Z") and a
 * NUL at out; returns their count. */
static size_t line_ts(struct ts_cache *c, int64_t ts, char out[32])
{
    int64_t sec = ts >= 0 ? ts / US_PER_S : -((-ts + US_PER_S - 1) / US_PER_S);
    int64_t frac = ts - sec * US_PER_S;

    if (c->text[0] == '\0' || c->sec != sec) {
        isotime_format_us(sec * US_PER_S, c->text);
        c->sec = sec;
        c->len = strlen(c->text);
    }
    memcpy(out, c->text, 32);
    if (c->len != 27) {
        isotime_format_us(ts, out); /* a year outside 0000..9999 */
        return strlen(out);
    }
    for (int i = 25; i >= 20; i--) {
        out[i] = (char)('0' + frac % 10);
        frac /= 10;
    }
    return 27;
}

/* Decimal digits of v at o; returns the count. */
static size_t line_i64(char *o, int64_t v)
{
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    size_t len = n + (v < 0);
    if (v < 0) {
        *o++ = '-';
    }
    while (n > 0) {
        *o++ = tmp[--n];
    }
    return len;
}

/* Whether s needs any escape (a quote, a backslash or a control byte). */
static bool needs_escape(struct slice s)
{
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c < 0x20 || c == '"' || c == '\\') {
            return true;
        }
    }
    return false;
}

/* A JSON string at b's end: copied as is when nothing needs escaping. */
static int line_string(struct buf *b, struct slice s, struct err *err)
{
    if (needs_escape(s)) {
        return json_escape(b, s.ptr, s.len, err);
    }
    if (buf_reserve(b, s.len + 2, err) != 0) {
        return err->code;
    }
    b->data[b->len] = '"';
    if (s.len > 0) {
        memcpy(b->data + b->len + 1, s.ptr, s.len);
    }
    b->data[b->len + 1 + s.len] = '"';
    b->len += s.len + 2;
    b->data[b->len] = '\0';
    return 0;
}

/* Payload text with raw CR/LF turned into spaces, or null, at o (room for
 * max(p.len, 4) bytes); returns the count. */
static size_t line_payload(char *o, struct slice p)
{
    static const char k_null[4] = {'n', 'u', 'l', 'l'};
    char *end = o + p.len;

    if (p.len == 0) {
        memcpy(o, k_null, sizeof(k_null));
        return sizeof(k_null);
    }
    memcpy(o, p.ptr, p.len);
    for (char *q = memchr(o, '\n', p.len); q != NULL;
         q = memchr(q + 1, '\n', (size_t)(end - q - 1))) {
        *q = ' ';
    }
    for (char *q = memchr(o, '\r', p.len); q != NULL;
         q = memchr(q + 1, '\r', (size_t)(end - q - 1))) {
        *q = ' ';
    }
    return p.len;
}

/* What every line of one partition starts with, escaped once per
 * partition rather than once per record: {"partition":<name>,"offset": */
static int part_head(struct buf *h, struct slice partition, struct err *err)
{
    static const char k_offset[] = ",\"offset\":";

    buf_reset(h);
    if (buf_append(h, "{\"partition\":", 13, err) != 0 ||
        line_string(h, partition, err) != 0 ||
        buf_append(h, k_offset, sizeof(k_offset) - 1, err) != 0) {
        return err->code;
    }
    return 0;
}

/* The bytes a line may take at most past its head: the offset, the txn
 * escaped at worst (6 bytes a byte), the stamp, the payload. */
static size_t line_room(const struct sink_record *r)
{
    return 96 + 6 * r->txn.len + (r->payload.len < 4 ? 4 : r->payload.len);
}

/* One line after its partition's head, with the stamp cache c, written in
 * place into the room line_room() reserved at b's end, which no write
 * below can overrun: 20 bytes of offset, the keys (17, 7, 12), the txn
 * quoted (2 + 6 a byte at worst), the stamp (27 bytes, up to 30 for a year
 * of more than four digits; its 32 bytes copied reach byte 78 + 6 * txn),
 * the payload or null, "}\n" and the NUL take at most
 * 91 + 6 * txn + max(payload, 4). */
static int line_write(struct buf *b, struct slice head,
                      const struct sink_record *r, struct ts_cache *c,
                      struct err *err)
{
    static const char k_txn[] = ",\"transactionId\":";
    static const char k_ts[] = ",\"ts\":\"";
    static const char k_payload[] = "\",\"payload\":";
    char *o = b->data + b->len;

    memcpy(o, head.ptr, head.len);
    o += head.len;
    o += line_i64(o, r->offset);
    memcpy(o, k_txn, sizeof(k_txn) - 1);
    o += sizeof(k_txn) - 1;
    if (needs_escape(r->txn)) {
        b->len = (size_t)(o - b->data);
        if (json_escape(b, r->txn.ptr, r->txn.len, err) != 0) {
            return err->code;
        }
        o = b->data + b->len;
    } else {
        *o++ = '"';
        if (r->txn.len > 0) {
            memcpy(o, r->txn.ptr, r->txn.len);
        }
        o += r->txn.len;
        *o++ = '"';
    }
    memcpy(o, k_ts, sizeof(k_ts) - 1);
    o += sizeof(k_ts) - 1;
    o += line_ts(c, r->ts, o);
    memcpy(o, k_payload, sizeof(k_payload) - 1);
    o += sizeof(k_payload) - 1;
    o += line_payload(o, r->payload);
    memcpy(o, "}\n", 3);
    b->len = (size_t)(o + 2 - b->data);
    return 0;
}

/* One line: reserved once, at its worst case, and written in place. Near
 * b's cap, where that room may not be had although the line fits, the
 * line is written into a buffer of its own and appended. On an error b is
 * as it was. */
static int line_into(struct buf *b, struct slice head,
                     const struct sink_record *r, struct ts_cache *c,
                     struct err *err)
{
    size_t mark = b->len;
    size_t room = head.len + line_room(r);
    int rc;

    if (b->max != BUF_UNLIMITED && (room > b->max || b->len > b->max - room)) {
        struct buf t;
        buf_init(&t, BUF_UNLIMITED);
        rc = buf_reserve(&t, room, err);
        rc = rc != 0 ? rc : line_write(&t, head, r, c, err);
        rc = rc != 0 ? rc : buf_append(b, t.data, t.len, err);
        buf_free(&t);
        return rc;
    }
    if (buf_reserve(b, room, err) != 0) {
        return err->code;
    }
    if (line_write(b, head, r, c, err) != 0) {
        b->len = mark;
        b->data[mark] = '\0';
        return err->code;
    }
    return 0;
}

int jsonl_line(struct buf *b, const struct sink_record *r, struct err *err)
{
    struct ts_cache c = {0, {0}, 0};
    struct buf h;
    int rc;

    buf_init(&h, BUF_UNLIMITED);
    rc = part_head(&h, r->partition, err);
    rc = rc != 0 ? rc : line_into(b, buf_slice(&h), r, &c, err);
    buf_free(&h);
    return rc;
}

/* The body grew: ask for huge pages over its new part, so filling it
 * faults once per 2 MiB rather than per 4 KiB (a hint; errors ignored). */
static void jsonl_hint_huge(const struct buf *b, size_t old_cap)
{
#ifdef MADV_HUGEPAGE
    size_t at = (uintptr_t)b->data % JSONL_HUGE;
    size_t lo = (old_cap + at + JSONL_HUGE - 1) / JSONL_HUGE * JSONL_HUGE - at;
    size_t hi = (b->cap + at) / JSONL_HUGE * JSONL_HUGE - at;

    if (hi > lo && (b->cap + at) >= JSONL_HUGE) {
        (void)madvise(b->data + lo, hi - lo, MADV_HUGEPAGE);
    }
#else
    (void)b;
    (void)old_cap;
#endif
}

int jsonl_writer_expect(struct jsonl_writer *w, size_t bytes, struct err *err)
{
    size_t before = w->out.cap;

    if (w->out.max != BUF_UNLIMITED && bytes > w->out.max) {
        bytes = w->out.max;
    }
    if (bytes <= before || bytes <= w->out.len) {
        return 0;
    }
    if (w->out.len == 0 && w->out.data != NULL) {
        /* Nothing is written yet: growing in place would copy the old
         * allocation's whole capacity into the new one, faulting in every
         * page it copies to (a quarter of the sink's CPU on a busy queue),
         * to keep bytes nobody reads. A fresh allocation is touched only
         * where the body is written. */
        size_t max = w->out.max;
        buf_free(&w->out);
        buf_init(&w->out, max);
        before = 0;
    }
    if (buf_reserve(&w->out, bytes - w->out.len, err) != 0) {
        return err->code;
    }
    jsonl_hint_huge(&w->out, before);
    return 0;
}

/* Room at the end of the body for compressor output: at most JSONL_CHUNK,
 * never past the body's cap. Returns the room, 0 with err set when full. */
static size_t jsonl_room(struct jsonl_writer *w, struct err *err)
{
    size_t want = JSONL_CHUNK;
    size_t before = w->out.cap;
    size_t room;

    if (w->out.max != BUF_UNLIMITED) {
        size_t left = w->out.max - w->out.len;
        if (left == 0) {
            err_set(err, ERR_TOO_BIG, "jsonl: object over its cap of %zu bytes",
                    w->out.max);
            return 0;
        }
        want = want < left ? want : left;
    }
    if (buf_reserve(&w->out, want, err) != 0) {
        return 0;
    }
    if (w->out.cap != before) {
        jsonl_hint_huge(&w->out, before);
    }
    room = w->out.cap - w->out.len - 1;
    if (w->out.max != BUF_UNLIMITED && room > w->out.max - w->out.len) {
        room = w->out.max - w->out.len;
    }
    return room;
}

/* Feed p[0..n) to zstd; end = finish the frame. */
static int jsonl_zstd(struct jsonl_writer *w, const char *p, size_t n, bool end,
                      struct err *err)
{
    ZSTD_inBuffer in = {p, n, 0};
    size_t left;

    do {
        size_t room = jsonl_room(w, err);
        ZSTD_outBuffer out;
        if (room == 0) {
            return err->code;
        }
        out.dst = w->out.data + w->out.len;
        out.size = room;
        out.pos = 0;
        left = ZSTD_compressStream2(w->zc, &out, &in,
                                    end ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(left)) {
            return err_set(err, ERR_INVALID, "jsonl: zstd: %s",
                           ZSTD_getErrorName(left));
        }
        w->out.len += out.pos;
        w->out.data[w->out.len] = '\0';
    } while (end ? left != 0 : in.pos < in.size);
    return 0;
}

/* Feed p[0..n) to deflate; end = finish the gzip member. */
static int jsonl_gzip(struct jsonl_writer *w, const char *p, size_t n, bool end,
                      struct err *err)
{
    int rc;

    w->zs.next_in = (const Bytef *)p;
    w->zs.avail_in = (uInt)n;
    do {
        size_t room = jsonl_room(w, err);
        if (room == 0) {
            return err->code;
        }
        w->zs.next_out = (Bytef *)w->out.data + w->out.len;
        w->zs.avail_out = (uInt)room;
        rc = deflate(&w->zs, end ? Z_FINISH : Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
            return err_set(err, ERR_INVALID, "jsonl: deflate: error %d", rc);
        }
        w->out.len += room - w->zs.avail_out;
        w->out.data[w->out.len] = '\0';
    } while (end ? rc != Z_STREAM_END
                 : (w->zs.avail_in > 0 || w->zs.avail_out == 0));
    return 0;
}

void jsonl_writer_time(struct jsonl_writer *w, uint64_t (*clock)(void),
                       uint64_t *ns)
{
    w->clock = clock;
    w->clock_ns = ns;
}

static int jsonl_flush_stage(struct jsonl_writer *w, bool end, struct err *err)
{
    uint64_t t0 = w->clock != NULL ? w->clock() : 0;
    int rc;

    if (w->codec == JSONL_ZSTD) {
        rc = jsonl_zstd(w, w->stage.data, w->stage.len, end, err);
    } else {
        rc = jsonl_gzip(w, w->stage.data, w->stage.len, end, err);
    }
    if (w->clock != NULL) {
        uint64_t t1 = w->clock();
        *w->clock_ns += t1 > t0 ? t1 - t0 : 0;
    }
    buf_reset(&w->stage);
    if (rc != 0) {
        w->broken = true;
    }
    return rc;
}

/* Invariant: records sorted by (partition bytes, offset), or the same
 * partition with a greater ts (a new incarnation restarting offsets). */
static int jsonl_check_order(struct jsonl_writer *w,
                             const struct sink_record *r, struct err *err)
{
    struct slice lp = buf_slice(&w->last_part);
    size_t n = lp.len < r->partition.len ? lp.len : r->partition.len;
    int cmp;
    struct buf a;
    struct buf b;
    struct err e2;

    if (w->records == 0) {
        return 0;
    }
    cmp = n == 0 ? 0 : memcmp(r->partition.ptr, lp.ptr, n);
    if (cmp == 0) {
        cmp = (r->partition.len > lp.len) - (r->partition.len < lp.len);
    }
    if (cmp > 0 ||
        (cmp == 0 && (r->offset > w->last_offset || r->ts > w->last_ts))) {
        return 0;
    }
    buf_init(&a, 512);
    buf_init(&b, 512);
    json_escape(&a, r->partition.ptr,
                r->partition.len < 60 ? r->partition.len : 60, &e2);
    json_escape(&b, lp.ptr, lp.len < 60 ? lp.len : 60, &e2);
    err_set(err, ERR_INVALID,
            "jsonl: records must be sorted by (partition, offset): "
            "%s/%lld after %s/%lld",
            a.data ? a.data : "\"\"", (long long)r->offset,
            b.data ? b.data : "\"\"", (long long)w->last_offset);
    buf_free(&a);
    buf_free(&b);
    return ERR_INVALID;
}

int jsonl_writer_add(struct jsonl_writer *w, const struct sink_record *r,
                     struct err *err)
{
    struct buf *dst = w->codec == JSONL_NONE ? &w->out : &w->stage;
    size_t before = dst->len;

    ASSERT(!w->finished);
    if (w->broken) {
        return err_set(err, ERR_TOO_BIG, "jsonl: writer failed earlier");
    }
    if (jsonl_check_order(w, r, err) != 0) {
        return err->code;
    }
    if (w->records == 0 || w->last_part.len != r->partition.len ||
        (r->partition.len > 0 &&
         memcmp(w->last_part.data, r->partition.ptr, r->partition.len) != 0)) {
        buf_reset(&w->last_part);
        if (buf_append(&w->last_part, r->partition.ptr, r->partition.len,
                       err) != 0 ||
            part_head(&w->head, r->partition, err) != 0) {
            w->broken = true;
            return err->code;
        }
    }
    if (line_into(dst, buf_slice(&w->head), r, &w->ts, err) != 0) {
        w->broken = true;
        return err->code;
    }
    w->plain_bytes += dst->len - before;
    w->records++;
    w->last_offset = r->offset;
    w->last_ts = r->ts;
    if (w->codec != JSONL_NONE && w->stage.len >= JSONL_STAGE) {
        return jsonl_flush_stage(w, false, err);
    }
    return 0;
}

uint64_t jsonl_writer_bytes_so_far(const struct jsonl_writer *w)
{
    return w->plain_bytes;
}

uint64_t jsonl_writer_records(const struct jsonl_writer *w)
{
    return w->records;
}

int jsonl_writer_finish(struct jsonl_writer *w, struct buf *out,
                        struct err *err)
{
    ASSERT(!w->finished);
    w->finished = true;
    if (w->broken) {
        return err_set(err, ERR_TOO_BIG, "jsonl: writer failed earlier");
    }
    if (w->codec != JSONL_NONE && jsonl_flush_stage(w, true, err) != 0) {
        return err->code;
    }
    if (out->len == 0 && w->out.len <= out->max) {
        size_t max = out->max;
        buf_free(out);
        *out = w->out;
        out->max = max;
        buf_init(&w->out, BUF_UNLIMITED);
        return 0;
    }
    return buf_append(out, w->out.data, w->out.len, err);
}
