/* Fuzz target for the snapshot decoder (store/store_snapshot.h): snapshots
 * come from the leader over the network and from disk, so they are
 * untrusted. Arbitrary bytes must never crash, read out of bounds or leak;
 * the input is tried as is and again with its checksum made right, so the
 * fuzzer reaches the parser behind the CRC; a buffer the checker accepts
 * must still be accepted with the same index. An LZ4 frame (how snapshots
 * are stored) is inflated first, and what comes out is checked the same
 * way. */
#include <stdlib.h>
#include <string.h>

#include "raft/snapshot.h"
#include "store/schema.h"
#include "store/store_snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct err err;
    uint64_t index = 0;
    uint64_t again = 0;
    uint8_t *fixed;
    int rc;

    if (snapshot_is_lz4(data, size)) {
        uint8_t *raw = NULL;
        size_t raw_len = 0;

        rc = snapshot_inflate(data, size, &raw, &raw_len, &err);
        ASSERT(rc == 0 || rc == ERR_CORRUPT);
        if (rc == 0) {
            ASSERT(raw_len <= (uint64_t)size * 256 + 65536);
            rc = store_snap_check(raw, raw_len, &index, &err);
            ASSERT(rc == 0 || rc == ERR_CORRUPT);
            free(raw);
        }
    }
    rc = store_snap_check(data, size, &index, &err);
    ASSERT(rc == 0 || rc == ERR_CORRUPT);
    if (size < 4) {
        return 0;
    }
    fixed = malloc(size);
    ASSERT(fixed != NULL);
    memcpy(fixed, data, size);
    be32_put(fixed + size - 4, store_snap_crc(fixed, size));
    rc = store_snap_check(fixed, size, &index, &err);
    ASSERT(rc == 0 || rc == ERR_CORRUPT);
    if (rc == 0) {
        ASSERT(store_snap_is_ours(fixed, size));
        ASSERT(store_snap_check(fixed, size, &again, &err) == 0);
        ASSERT(again == index);
        ASSERT(index == be64_get(fixed + 8));
    }
    free(fixed);
    return 0;
}
