/* The Parquet writer: a window's records as one Parquet file, in memory.
 * Pure: no I/O, no clock. The bytes are a function of the records and the
 * options only (same records, same bytes), which exactly-once needs.
 *
 * Schema (docs/design/formats.md §7), message `queen_record`:
 *   partition      REQUIRED BYTE_ARRAY STRING       dictionary encoded
 *   offset         REQUIRED INT64                   DELTA_BINARY_PACKED
 *   transaction_id REQUIRED BYTE_ARRAY STRING       PLAIN
 *   ts             REQUIRED INT64 TIMESTAMP(MICROS, UTC)  DELTA_BINARY_PACKED
 *   payload        OPTIONAL BYTE_ARRAY STRING       PLAIN; NULL iff empty
 * The payload is the stored JSON text verbatim, raw line breaks included.
 * Row groups close every row_group_records records (no empty trailing
 * group); data pages hold up to page_bytes of values (4 MiB under zstd,
 * 1 MiB under snappy) or 2^20 rows; every
 * column chunk carries min/max statistics (byte arrays cut to 64 bytes) and
 * a null count. Footer: created_by `queen-s3`, key-value metadata
 * queen.envelope=1, then, when the file has records, queen.queue and
 * queen.tenant (each only when set).
 *
 * Writer string: docs/design/formats.md §8 has the Rust writer say `parquet/59
 * <codec>` (its parquet-rs major version); our bytes differ from parquet-rs's,
 * and docs/design/formats.md §8 lets a re-implementation name its own writer,
 * so ours is `queen-s3/2.0.0 parquet/q2 <codec>`; the codec library's
 * version (libzstd as this process runs it; snappy as built, the library
 * reports none), whose bytes may change with it, goes beside it in the
 * intent (parquet_codec_library). Bump `q2` whenever our own bytes for the
 * same records change: a redo compares writer strings. (q1 cut pages at
 * 1 MiB under both codecs and at 20,000 rows; `queen lake` still accepts
 * its objects.)
 *
 * Memory: the writer copies the records of the open row group (one copy of
 * the column data) and keeps the compressed file built so far. */
#ifndef QUEEN_PARQUET_PARQUET_H
#define QUEEN_PARQUET_PARQUET_H

#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"

#define PARQUET_EXTENSION         "parquet"
#define PARQUET_CONTENT_TYPE      "application/vnd.apache.parquet"
#define PARQUET_CREATED_BY        "queen-s3"
#define PARQUET_ROW_GROUP_DEF     100000
#define PARQUET_PAGE_BYTES_ZSTD   ((size_t)4 << 20)
#define PARQUET_PAGE_BYTES_SNAPPY ((size_t)1 << 20)
#define PARQUET_PAGE_ROWS         ((size_t)1 << 20)
#define PARQUET_STATS_MAX         64 /* statistics values are cut to this */
#define PARQUET_VALUE_MAX         ((size_t)256 << 20) /* one field's cap */

enum parquet_codec {
    PARQUET_ZSTD,   /* level 3, 4 MiB pages */
    PARQUET_SNAPPY, /* 1 MiB pages */
};

struct parquet_opts {
    enum parquet_codec codec;
    uint32_t row_group_records; /* 0 = PARQUET_ROW_GROUP_DEF */
    size_t page_bytes;          /* 0 = PARQUET_PAGE_BYTES_<codec> */
    const char *queue;          /* copied; NULL = no queen.queue pair */
    const char *tenant;         /* copied; NULL = no queen.tenant pair */
    size_t max_bytes; /* cap on the file; 0 = none (ERR_TOO_BIG past it) */
};

/* One record to write. Its own type, not the sink's: the writer knows
 * nothing of the sink (src/parquet/ stands alone, as src/s3/ does). Every
 * field is borrowed. */
struct parquet_record {
    struct slice partition; /* partition name, UTF-8 */
    int64_t offset;         /* offset in its partition, from 0 */
    struct slice txn;       /* transactionId, "" when none */
    int64_t ts;             /* stamp of the push, µs since the epoch (UTC) */
    struct slice payload;   /* the stored JSON text; len 0 = empty (null) */
};

struct parquet_writer;

/* Returns an owned writer; free with parquet_writer_free. */
struct parquet_writer *parquet_writer_new(const struct parquet_opts *o);
/* Add one record (borrowed; copied). Records come sorted by (partition,
 * offset); within one partition a record with a lower or equal offset is
 * accepted only with a greater ts (a new incarnation restarting offsets).
 * Returns 0; ERR_INVALID for out-of-order records or text that is not UTF-8
 * (the writer is unchanged); ERR_TOO_BIG for a field over PARQUET_VALUE_MAX
 * (unchanged) or a file over max_bytes (the writer is then failed: later
 * calls return the same error, and it can only be freed). */
int parquet_writer_add(struct parquet_writer *w, const struct parquet_record *r,
                       struct err *err);
/* Sum of record weights added so far (docs/design/window.md §7): 64 + len(txn)
 * + len(partition) + (payload length, or 4 when null). */
uint64_t parquet_writer_bytes_so_far(const struct parquet_writer *w);
uint64_t parquet_writer_records(const struct parquet_writer *w);
/* Close the file and append it to out (when out is empty the bytes move
 * without a copy). The writer accepts nothing afterwards. Returns 0 or
 * ERR_TOO_BIG (max_bytes, or out's own cap). */
int parquet_writer_finish(struct parquet_writer *w, struct buf *out,
                          struct err *err);
void parquet_writer_free(struct parquet_writer *w);

/* "zstd" or "snappy". */
const char *parquet_codec_name(enum parquet_codec c);
/* The manifest's and intent's writer string: "queen-s3/2.0.0 parquet/q2
 * zstd" or "queen-s3/2.0.0 parquet/q2 snappy". */
const char *parquet_writer_string(enum parquet_codec c);
/* The codec library and its version, which the intent records: libzstd's
 * as this process runs it ("libzstd/1.5.4"), snappy's as the broker was
 * built against ("snappy/1.1.9"; the library has no call that reports it). */
const char *parquet_codec_library(enum parquet_codec c);

/* Writes FileMetaData's schema (field 2: the root and the five columns)
 * into t, as every file's footer holds it; lake/footer.c rebuilds a footer
 * with it. */
struct thrift_w;
void parquet_footer_schema(struct thrift_w *t);

#endif
