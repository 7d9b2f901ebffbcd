/* Fuzz target: the CONFIGURE and RETENTION command bodies (read back from
 * disk and from peers) and the sink hold's committed row (a KV value any
 * client can write). The first byte picks the decoder; the rest is its
 * input. A body that decodes must re-encode to the same bytes; a sink floor
 * must lie between the cap and the pointer's value. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "broker/retention.h"
#include "raft/cmd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t tenant[16] = {0};

static void check_configure(struct slice body)
{
    struct store_queue_options o;
    struct slice q;
    struct err err = {0};
    struct buf b;

    if (cmd_configure_decode(body, &q, &o, &err) != 0) {
        return;
    }
    buf_init(&b, BUF_UNLIMITED);
    if (cmd_configure_encode(&b, tenant, q, &o, &err) != 0 ||
        b.len != CMD_HEADER_LEN + body.len ||
        memcmp(b.data + CMD_HEADER_LEN, body.ptr, body.len) != 0) {
        abort();
    }
    buf_free(&b);
}

static void check_trim(struct slice body)
{
    struct cmd_trim_iter it;
    struct cmd_trim_item *items;
    struct err err = {0};
    struct buf b;
    uint32_t n = 0;

    if (cmd_trim_validate(body, &n, &err) != 0) {
        return;
    }
    items = calloc(n, sizeof(*items));
    cmd_trim_iter_init(&it, body, &err);
    for (uint32_t i = 0; i < n; i++) {
        if (cmd_trim_next(&it, &items[i], &err) != 1) {
            abort();
        }
    }
    buf_init(&b, BUF_UNLIMITED);
    if (cmd_trim_encode(&b, tenant, items, n, &err) != 0 ||
        b.len != CMD_HEADER_LEN + body.len ||
        memcmp(b.data + CMD_HEADER_LEN, body.ptr, body.len) != 0) {
        abort();
    }
    buf_free(&b);
    free(items);
}

static void check_floor(struct slice row)
{
    struct store_queue_options o;
    const int64_t now = 1760000000000000LL;
    int64_t f;

    store_queue_options_configured(&o);
    memcpy(o.retention_sink_hold, "default", 8);
    o.retention_sink_hold_max_seconds = 3600;
    f = retention_sink_floor(&o, now, row);
    if (f < now - 3600LL * 1000000) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct slice rest;

    if (size == 0) {
        return 0;
    }
    rest.ptr = (const char *)data + 1;
    rest.len = size - 1;
    switch (data[0] % 3) {
    case 0:
        check_configure(rest);
        break;
    case 1:
        check_trim(rest);
        break;
    default:
        check_floor(rest);
        break;
    }
    return 0;
}
