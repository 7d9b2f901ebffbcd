/* Fuzz target for the checkpoint decoder: checkpoint objects are read back
 * from the bucket, so they are untrusted. Arbitrary bytes must never crash
 * or leak; raw input is also tried as the JSON inside a valid zstd frame so
 * the fuzzer reaches the JSON reader; a decoded checkpoint must re-encode
 * and decode to the same positions. */
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "sink/docs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_round_trip(const struct docs_checkpoint *cp)
{
    struct buf enc;
    struct buf arena;
    struct docs_checkpoint again;
    struct err err;

    buf_init(&enc, BUF_UNLIMITED);
    buf_init(&arena, BUF_UNLIMITED);
    ASSERT(docs_checkpoint_encode(&enc, cp, &err) == 0);
    ASSERT(docs_checkpoint_decode(enc.data, enc.len, &again, &arena, &err) ==
           0);
    ASSERT(again.k == cp->k && again.t_end == cp->t_end && again.n == cp->n);
    for (size_t i = 0; i < again.n; i++) {
        ASSERT(again.positions[i].name.ptr[again.positions[i].name.len] ==
               '\0');
    }
    buf_free(&enc);
    buf_free(&arena);
}

static void try_decode(const void *p, size_t n)
{
    struct buf arena;
    struct docs_checkpoint cp;
    struct err err;

    buf_init(&arena, BUF_UNLIMITED);
    if (docs_checkpoint_decode(p, n, &cp, &arena, &err) == 0) {
        check_round_trip(&cp);
    } else {
        ASSERT(err.code == ERR_CORRUPT &&
               strncmp(err.msg, "checkpoint: ", 12) == 0);
    }
    buf_free(&arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t bound = ZSTD_compressBound(size);
    void *z = malloc(bound);
    size_t zn;

    try_decode(data, size);
    zn = ZSTD_compress(z, bound, data, size, 1);
    ASSERT(!ZSTD_isError(zn));
    try_decode(z, zn);
    free(z);
    return 0;
}
