/* The footer of a Parquet object of the lake, checked against the rows the
 * object holds (docs/design/formats.md §7): rebuilt as the sink's writer
 * (src/parquet/parquet.c, write_footer) builds it, and compared byte for
 * byte, as lake/line.c does with a JSONL line. Pure: no I/O.
 *   (1) Everything the writer derives from the rows is derived again: the
 *       schema (names, types, repetition, converted and logical types),
 *       num_rows, each column chunk's type, encodings, path, codec, value
 *       count and statistics (the row group's min and max, byte arrays cut
 *       to PARQUET_STATS_MAX bytes as the writer cuts them, the payload's
 *       null count), each row group's rows, sizes and ordinal, the
 *       key-value metadata (queen.envelope, queen.queue, queen.tenant),
 *       created_by and the column orders.
 *   (2) What depends on the compressed bytes (where each chunk and its
 *       first data page start, each chunk's compressed and uncompressed
 *       size) is taken from the footer and checked against the pages
 *       themselves: the chunks tile the file from byte 4 to the footer,
 *       and each chunk's page headers add up to its sizes.
 *   (3) A footer that differs is named by the first part of it that does
 *       ("the schema", "the statistics of column ts in row group 0", "the
 *       key-value metadata", ...). */
#ifndef QUEEN_LAKE_FOOTER_H
#define QUEEN_LAKE_FOOTER_H

#include <stddef.h>

#include "base/common.h"
#include "base/err.h"
#include "parquet/parquet.h"
#include "parquet/read.h"

/* What the manifest says the footer must hold. */
struct lake_footer_want {
    enum parquet_codec codec; /* the manifest's compression */
    struct slice queue;       /* the writer keeps a name up to a NUL */
    struct slice tenant;
};

/* Check the footer of the file p[0..n), which parquet_file_read() read
 * into f without an error (all borrowed). Returns 0, or ERR_CORRUPT with
 * "parquet footer: <part> differs from what the writer makes of its rows" (1),
 * or "parquet footer: column <c> of row group <g>: offsets or sizes do not
 * match its pages" (2). */
int lake_footer_check(const void *p, size_t n, const struct parquet_file *f,
                      const struct lake_footer_want *want, struct err *err);

#endif
