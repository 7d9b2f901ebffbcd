/* A minimal reader of the Parquet files src/parquet/parquet.c writes: the
 * footer as a Thrift tree and every record decoded back. It exists for
 * `queen lake` (src/lake/), the unit tests, the round-trip fuzz target and
 * tools; the broker itself never reads Parquet. It understands exactly what our
 * writer emits (data page v1, the five-column schema, PLAIN / dictionary /
 * DELTA_BINARY_PACKED values, RLE/bit-packed levels, zstd / snappy /
 * uncompressed pages) and refuses anything else with ERR_CORRUPT. Pure: no I/O.
 */
#ifndef QUEEN_PARQUET_READ_H
#define QUEEN_PARQUET_READ_H

#include <stddef.h>

#include "base/err.h"
#include "parquet/parquet.h"
#include "parquet/thrift.h"

struct parquet_file {
    struct thrift_tree meta; /* FileMetaData; meta.nodes[0] is the root */
    size_t footer_len;
    struct parquet_record *recs; /* every row, in file order */
    size_t nrecs;
    char **pages; /* decompressed pages the records' slices point into */
    size_t *page_lens;
    size_t npages;
    size_t cap_pages;
    size_t decoded;     /* bytes allocated for what the file decodes to */
    size_t decoded_max; /* the bound on decoded */
};

/* Decode the file p[0..n) (borrowed: footer slices point into it) into f
 * (free with parquet_file_free, also after a failure). Returns 0 or
 * ERR_CORRUPT with the reason. */
int parquet_file_read(const void *p, size_t n, struct parquet_file *f,
                      struct err *err);

/* parquet_file_read, refusing (ERR_CORRUPT, "decodes to more than ...")
 * a file whose rows, dictionaries and decompressed pages would take more
 * than max bytes: a page may declare up to 1 GiB and compress ~30,000:1,
 * so a small hostile file could otherwise take any amount of memory. */
int parquet_file_read_max(const void *p, size_t n, size_t max,
                          struct parquet_file *f, struct err *err);
void parquet_file_free(struct parquet_file *f);

#endif
