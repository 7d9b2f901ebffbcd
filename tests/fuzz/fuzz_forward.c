/* Fuzz target: the forward channel's frame decoder (raft/forward.h). Frames
 * come from an authenticated peer, but a bug or a bad build must not crash
 * the leader: any bytes decode frame by frame or are refused, a decoded
 * frame stays inside the input, and it re-encodes to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "raft/forward.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;

    while (off < size) {
        struct fwd_frame f;
        struct err err = {0};
        struct buf b;
        size_t used = 0;
        int rc = fwd_decode(data + off, size - off, &f, &used, &err);

        if (rc <= 0) {
            break;
        }
        if (used == 0 || used > size - off) {
            abort();
        }
        buf_init(&b, BUF_UNLIMITED);
        if (fwd_encode(&b, &f, &err) != 0 || b.len != used ||
            memcmp(b.data, data + off, used) != 0) {
            abort();
        }
        buf_free(&b);
        off += used;
    }
    return 0;
}
