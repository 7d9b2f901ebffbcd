/* The JSONL writer: a window's records as one object body, one line per
 * record (docs/design/formats.md §6). Pure: no I/O, no clock; the bytes are a
 * function of the records and the codec only (same records, same bytes).
 *
 * A line is exactly
 *   {"partition":<str>,"offset":<int>,"transactionId":<str>,
 *    "ts":"<ISO-us>","payload":<payload>} LF
 * with serde_json escaping for the two strings, the payload's stored JSON
 * text verbatim except that every raw CR and LF byte becomes one space, and
 * `null` for an empty payload.
 *
 * Compression is streamed: lines gather in a 256 KiB staging buffer that is
 * fed to the compressor, so a 128 MiB window never exists twice in plain
 * text. zstd: one frame, level 3. gzip: deflate level 6 with a header whose
 * MTIME is 0 and OS byte 255, no name or comment (deterministic). none: the
 * lines themselves. */
#ifndef QUEEN_SINK_JSONL_H
#define QUEEN_SINK_JSONL_H

#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "sink/record.h"

#define JSONL_CONTENT_TYPE "application/x-ndjson"

enum jsonl_codec {
    JSONL_ZSTD,
    JSONL_GZIP,
    JSONL_NONE,
};

/* "zstd", "gzip" or "none" (also accepted: "" and "plain" for none).
 * "snappy" is refused with the text of docs/design/formats.md §6; anything else
 * with `jsonl: unknown compression "<name>"`. */
int jsonl_codec_parse(const char *name, enum jsonl_codec *out, struct err *err);
/* "zstd", "gzip", "none": the manifest's and intent's compression. */
const char *jsonl_codec_name(enum jsonl_codec c);
/* "jsonl.zst", "jsonl.gz", "jsonl". */
const char *jsonl_extension(enum jsonl_codec c);
/* The manifest's and intent's writer string: "queen-s3/2.0.0 jsonl+zstd",
 * "queen-s3/2.0.0 jsonl+gzip" or "queen-s3/2.0.0 jsonl". */
const char *jsonl_writer_string(enum jsonl_codec c);
/* The codec library and its version as this process runs it, which the
 * intent records because another version's bytes may differ
 * (docs/design/formats.md §8): "libzstd/1.5.4", "zlib/1.2.13", "" for none. */
const char *jsonl_codec_library(enum jsonl_codec c);

struct jsonl_writer;

/* Returns an owned writer; free with jsonl_writer_free. max_bytes caps the
 * stored (compressed) body; 0 = no cap. */
struct jsonl_writer *jsonl_writer_new(enum jsonl_codec c, size_t max_bytes);
/* A zstd context (level 3) that outlives writers, so its tables stay warm
 * from window to window instead of being allocated and faulted in for each
 * one; the frame is the one a fresh context writes. Returns owned; free
 * with jsonl_cctx_free. */
struct jsonl_cctx;
struct jsonl_cctx *jsonl_cctx_new(void);
void jsonl_cctx_free(struct jsonl_cctx *z);
/* Like jsonl_writer_new, but the body grows in spare's allocation, which it
 * takes (spare is left empty): a caller that hands each finished body back
 * as the next spare writes window after window into warm pages. A zstd
 * writer borrows z (NULL: a context of its own with the same settings),
 * which serves one writer at a time and must outlive it. */
struct jsonl_writer *jsonl_writer_new_with(enum jsonl_codec c, size_t max_bytes,
                                           struct buf *spare,
                                           struct jsonl_cctx *z);
/* Add one record (borrowed, not kept). Records come sorted by (partition
 * bytes, offset) strictly; within one partition a lower or equal offset is
 * accepted only with a greater ts (a new incarnation restarting offsets).
 * Returns 0; ERR_INVALID for out-of-order records (the writer is unchanged);
 * ERR_TOO_BIG past max_bytes (the writer is then unusable). */
int jsonl_writer_add(struct jsonl_writer *w, const struct sink_record *r,
                     struct err *err);
/* Uncompressed length of every line added so far. */
uint64_t jsonl_writer_bytes_so_far(const struct jsonl_writer *w);
uint64_t jsonl_writer_records(const struct jsonl_writer *w);
/* Finish the body and append it to out (when out is empty the bytes move
 * without a copy). The writer accepts nothing afterwards. Returns 0 or
 * ERR_TOO_BIG (max_bytes, or out's own cap). */
int jsonl_writer_finish(struct jsonl_writer *w, struct buf *out,
                        struct err *err);
/* The body will take about `bytes` (capped at the writer's max): room for
 * them now, so it never moves while it is written (growing copies what is
 * written so far). Address space only: pages are touched as they are
 * written. 0, or ERR_* with err set. */
int jsonl_writer_expect(struct jsonl_writer *w, size_t bytes, struct err *err);
void jsonl_writer_free(struct jsonl_writer *w);
/* Time the compressor: from now on the writer reads clock() before and
 * after each compressor call and adds the difference to *ns (borrowed; it
 * must outlive the writer). The clock is the caller's (the sink passes its
 * thread CPU clock, sink/stages.h); the bytes do not depend on it. */
void jsonl_writer_time(struct jsonl_writer *w, uint64_t (*clock)(void),
                       uint64_t *ns);

/* Append one record's line (with its LF) to b: the plain text the writer
 * compresses. */
int jsonl_line(struct buf *b, const struct sink_record *r, struct err *err);

#endif
