/* Fuzz target for what `queen lake` reads from the bucket (untrusted): a
 * JSONL line (lake_line_parse) and a manifest (docs_manifest_decode).
 * Arbitrary bytes must never crash or leak; a line that parses must be
 * exactly what the sink's writer makes of the record it parsed to (line.h
 * (1)); a manifest that decodes must encode and decode again. */
#include <string.h>

#include "lake/line.h"
#include "sink/docs.h"
#include "sink/jsonl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void try_line(const char *p, size_t n)
{
    struct buf scratch;
    struct buf again;
    struct sink_record r;
    struct err err;

    buf_init(&scratch, BUF_UNLIMITED);
    if (lake_line_parse(p, n, &r, &scratch, &err) == 0) {
        buf_init(&again, BUF_UNLIMITED);
        ASSERT(jsonl_line(&again, &r, &err) == 0);
        ASSERT(again.len == n + 1 && memcmp(again.data, p, n) == 0);
        ASSERT(again.data[n] == '\n');
        buf_free(&again);
    }
    buf_free(&scratch);
}

static void try_manifest(const char *p, size_t n)
{
    struct buf arena;
    struct buf enc;
    struct buf arena2;
    struct docs_manifest m;
    struct docs_manifest m2;
    struct err err;

    buf_init(&arena, BUF_UNLIMITED);
    if (docs_manifest_decode(p, n, &m, &arena, &err) == 0) {
        buf_init(&enc, BUF_UNLIMITED);
        buf_init(&arena2, BUF_UNLIMITED);
        if (docs_manifest_encode(&enc, &m, &err) == 0) {
            ASSERT(docs_manifest_decode(enc.data, enc.len, &m2, &arena2,
                                        &err) == 0);
            ASSERT(m2.k == m.k && m2.t_start == m.t_start &&
                   m2.t_end == m.t_end && m2.n_objects == m.n_objects &&
                   m2.n_lost == m.n_lost && m2.records == m.records);
        }
        buf_free(&enc);
        buf_free(&arena2);
    }
    buf_free(&arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;

    try_line(s, size);
    try_manifest(s, size);
    return 0;
}
