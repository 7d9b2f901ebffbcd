/* Fuzz target: the raft command decoder. Entries are read back from disk and
 * from peers, so any bytes must decode or be refused without a crash; a push
 * that decodes must re-encode to the same bytes (stamp and padding aside). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "raft/cmd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_push(const struct cmd_header *h)
{
    struct cmd_push_iter it;
    struct cmd_push_item *items;
    struct err err = {0};
    struct buf b;
    uint32_t n = 0;
    int rc;

    if (cmd_push_validate(h->body, &n, &err) != 0) {
        return;
    }
    items = calloc(n, sizeof(*items));
    cmd_push_iter_init(&it, h->body, &err);
    for (uint32_t i = 0; i < n; i++) {
        if (cmd_push_next(&it, &items[i], &err) != 1) {
            abort();
        }
    }
    if (cmd_push_next(&it, &items[0], &err) != 0) {
        abort();
    }
    buf_init(&b, BUF_UNLIMITED);
    rc = cmd_push_encode(&b, h->tenant, items, n, &err);
    if (rc != 0 || b.len != CMD_HEADER_LEN + h->body.len ||
        memcmp(b.data + CMD_HEADER_LEN, h->body.ptr, h->body.len) != 0) {
        abort();
    }
    buf_free(&b);
    free(items);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cmd_header h;
    struct err err = {0};

    if (cmd_decode_header(data, size, &h, &err) != 0) {
        return 0;
    }
    if (h.type == CMD_PUSH) {
        check_push(&h);
    }
    return 0;
}
