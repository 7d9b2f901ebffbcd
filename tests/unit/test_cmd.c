/* Unit tests of the raft command codec (raft/cmd.h): round trips and every
 * malformed input rejected. */
#include "harness.h"

#include "base/buf.h"
#include "base/uuid7.h"
#include "raft/cmd.h"
#include "store/store.h"

static struct cmd_push_item item(const char *q, const char *p, const char *t,
                                 const char *payload, uint8_t id)
{
    struct cmd_push_item it;

    memset(&it, 0, sizeof(it));
    it.queue = (struct slice){q, strlen(q)};
    it.partition = (struct slice){p, strlen(p)};
    it.txn = (struct slice){t, strlen(t)};
    it.payload = (struct slice){payload, strlen(payload)};
    memset(it.message_id, id, 16);
    return it;
}

static void encode3(struct buf *b)
{
    struct cmd_push_item items[3] = {
        item("orders", "Default", "t1", "{\"a\":1}", 1),
        item("orders", "eu", "", "", 2),
        item("q2", "p", "tx-3", "42.00", 3),
    };
    struct err err = {0};

    buf_init(b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_push_encode(b, STORE_DEFAULT_TENANT, items, 3, &err), 0);
}

TEST(push_round_trips_every_field)
{
    struct buf b;
    struct cmd_header h;
    struct cmd_push_iter it;
    struct cmd_push_item got;
    struct err err = {0};
    uint8_t id[16];

    encode3(&b);
    cmd_set_stamp(b.data, 1234567890123456LL);
    EXPECT_EQ_I64(cmd_decode_header(b.data, b.len, &h, &err), 0);
    EXPECT_EQ_I64(h.type, CMD_PUSH);
    EXPECT_EQ_I64(h.stamp, 1234567890123456LL);
    EXPECT_MEM_EQ(h.tenant, 16, STORE_DEFAULT_TENANT, 16);
    EXPECT_EQ_I64(cmd_push_iter_init(&it, h.body, &err), 0);
    EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), 1);
    EXPECT_MEM_EQ(got.queue.ptr, got.queue.len, "orders", 6);
    EXPECT_MEM_EQ(got.partition.ptr, got.partition.len, "Default", 7);
    EXPECT_MEM_EQ(got.txn.ptr, got.txn.len, "t1", 2);
    EXPECT_MEM_EQ(got.payload.ptr, got.payload.len, "{\"a\":1}", 7);
    memset(id, 1, 16);
    EXPECT_MEM_EQ(got.message_id, 16, id, 16);
    EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), 1);
    EXPECT_EQ_U64(got.txn.len, 0);
    EXPECT_EQ_U64(got.payload.len, 0);
    EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), 1);
    EXPECT_MEM_EQ(got.payload.ptr, got.payload.len, "42.00", 5);
    EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), 0);
    buf_free(&b);
}

/* docs/design/formats.md §11: a sealed payload (binary form) is marked by
 * bit 31 of its length and decodes marked, the payload unchanged; an
 * unmarked one (plaintext, or an envelope written by older builds) decodes
 * unmarked. A sealed payload shorter than iv and tag is refused by the
 * encoder and, when an entry says so, by the decoder. */
TEST(push_sealed_payload_is_marked_in_its_length)
{
    static const char sealed[] = "0123456789abcdef0123456789abcdefCT";
    struct cmd_push_item items[2] = {
        item("q", "p", "t1", sealed, 1),
        item("q", "p", "t2", "{\"encrypted\":\"\"}", 2),
    };
    struct buf b;
    struct cmd_header h;
    struct cmd_push_iter it;
    struct cmd_push_item got;
    struct err err = {0};
    size_t at;

    items[0].sealed = true;
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_push_encode(&b, STORE_DEFAULT_TENANT, items, 2, &err), 0);
    EXPECT_EQ_I64(cmd_decode_header(b.data, b.len, &h, &err), 0);
    EXPECT_EQ_I64(cmd_push_iter_init(&it, h.body, &err), 0);
    EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), 1);
    EXPECT(got.sealed);
    EXPECT_MEM_EQ(got.payload.ptr, got.payload.len, sealed, strlen(sealed));
    EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), 1);
    EXPECT(!got.sealed);
    EXPECT_EQ_U64(got.payload.len, 16);
    EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), 0);
    /* The length word of item 0: body count (4), q, p, t1, id (16). */
    at = CMD_HEADER_LEN + 4 + 3 + 3 + 4 + 16;
    EXPECT_EQ_U64((uint8_t)b.data[at], 0x80);
    EXPECT_EQ_U64((uint8_t)b.data[at + 3], strlen(sealed));
    /* Marked but 31 bytes: corrupt. */
    b.data[at + 3] = 31;
    EXPECT_EQ_I64(cmd_decode_header(b.data, b.len, &h, &err), 0);
    EXPECT_EQ_I64(cmd_push_iter_init(&it, h.body, &err), 0);
    EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), ERR_CORRUPT);
    buf_reset(&b);
    items[0].payload.len = 31;
    EXPECT_EQ_I64(cmd_push_encode(&b, STORE_DEFAULT_TENANT, items, 2, &err),
                  ERR_INVALID);
    EXPECT_EQ_U64(b.len, 0);
    buf_free(&b);
}

/* A defaulted transaction id (the message id's text) is marked, not
 * carried: 36 B less per item, and it decodes to the same text as the
 * older entries that carried it (those still decode). */
TEST(push_txn_that_is_the_message_id_is_marked_not_carried)
{
    uint8_t id[16] = {0x01, 0x8f, 0x3c, 0x2a, 0x11, 0x22, 0x73, 0x33,
                      0x84, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa};
    char text[37];
    struct cmd_push_item in[2];
    struct buf marked, carried;
    struct cmd_header h;
    struct cmd_push_iter it;
    struct cmd_push_item got;
    struct err err = {0};

    uuid7_format(id, text);
    for (int k = 0; k < 2; k++) {
        in[k] = item("orders", "Default", text, "{}", 0);
        memcpy(in[k].message_id, id, 16);
    }
    in[0].txn_is_id = true;
    buf_init(&marked, BUF_UNLIMITED);
    buf_init(&carried, BUF_UNLIMITED);
    EXPECT_EQ_I64(
        cmd_push_encode(&marked, STORE_DEFAULT_TENANT, &in[0], 1, &err), 0);
    EXPECT_EQ_I64(
        cmd_push_encode(&carried, STORE_DEFAULT_TENANT, &in[1], 1, &err), 0);
    size_t body_len[2];
    for (int k = 0; k < 2; k++) {
        const struct buf *b = k == 0 ? &marked : &carried;

        EXPECT_EQ_I64(cmd_decode_header(b->data, b->len, &h, &err), 0);
        body_len[k] = h.body.len;
        EXPECT_EQ_I64(cmd_push_iter_init(&it, h.body, &err), 0);
        EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), 1);
        EXPECT_EQ_I64(got.txn_is_id, k == 0);
        EXPECT_MEM_EQ(got.txn.ptr, got.txn.len, text, 36);
        EXPECT_MEM_EQ(got.payload.ptr, got.payload.len, "{}", 2);
        EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), 0);
    }
    EXPECT_EQ_U64(body_len[1] - body_len[0], 36);
    /* the mark with the message id cut short is malformed */
    EXPECT_EQ_I64(cmd_decode_header(marked.data, marked.len, &h, &err), 0);
    h.body.len -= 2 + 4 + 2 + 10;
    EXPECT_EQ_I64(cmd_push_iter_init(&it, h.body, &err), 0);
    EXPECT_EQ_I64(cmd_push_next(&it, &got, &err), ERR_CORRUPT);
    buf_free(&marked);
    buf_free(&carried);
}

TEST(noop_round_trips)
{
    struct buf b;
    struct cmd_header h;
    struct err err = {0};

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_begin(&b, CMD_NOOP, STORE_DEFAULT_TENANT, &err), 0);
    EXPECT_EQ_I64(cmd_finish(&b, 0, &err), 0);
    EXPECT_EQ_U64(b.len, CMD_HEADER_LEN);
    EXPECT_EQ_I64(cmd_decode_header(b.data, b.len, &h, &err), 0);
    EXPECT_EQ_I64(h.type, CMD_NOOP);
    EXPECT_EQ_U64(h.body.len, 0);
    buf_free(&b);
}

TEST(every_truncation_is_rejected)
{
    struct buf b;
    struct err err = {0};

    encode3(&b);
    for (size_t n = 0; n < b.len; n++) {
        struct cmd_header h;
        uint32_t count;
        int rc = cmd_decode_header(b.data, n, &h, &err);

        /* A shorter buffer never decodes: the header length disagrees. */
        EXPECT_EQ_I64(rc, ERR_CORRUPT);
        if (n > CMD_HEADER_LEN) {
            struct slice body = {b.data + CMD_HEADER_LEN, n - CMD_HEADER_LEN};

            EXPECT_EQ_I64(cmd_push_validate(body, &count, &err), ERR_CORRUPT);
        }
    }
    buf_free(&b);
}

TEST(bad_header_fields_are_rejected)
{
    struct buf b;
    struct cmd_header h;
    struct err err = {0};
    const size_t fields[] = {0, 1, 2, 3, 4, 7};

    encode3(&b);
    for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
        char saved = b.data[fields[i]];

        b.data[fields[i]] = (char)0x7f;
        EXPECT_EQ_I64(cmd_decode_header(b.data, b.len, &h, &err), ERR_CORRUPT);
        b.data[fields[i]] = saved;
    }
    EXPECT_EQ_I64(cmd_decode_header(b.data, b.len, &h, &err), 0);
    buf_free(&b);
}

TEST(trailing_bytes_and_bad_counts_are_rejected)
{
    struct buf b;
    struct err err = {0};
    uint32_t count = 0;
    struct slice body;
    char *copy;

    encode3(&b);
    copy = malloc(b.len + 1);
    memcpy(copy, b.data, b.len);
    copy[b.len] = 'x';
    body = (struct slice){copy + CMD_HEADER_LEN, b.len - CMD_HEADER_LEN + 1};
    EXPECT_EQ_I64(cmd_push_validate(body, &count, &err), ERR_CORRUPT);
    body.len--;
    EXPECT_EQ_I64(cmd_push_validate(body, &count, &err), 0);
    EXPECT_EQ_U64(count, 3);
    copy[CMD_HEADER_LEN + 3] = 4; /* count 4, only 3 items */
    EXPECT_EQ_I64(cmd_push_validate(body, &count, &err), ERR_CORRUPT);
    copy[CMD_HEADER_LEN + 3] = 0; /* count 0 */
    EXPECT_EQ_I64(cmd_push_validate(body, &count, &err), ERR_CORRUPT);
    copy[CMD_HEADER_LEN + 3] = 3;
    copy[CMD_HEADER_LEN + 4] = 0; /* queue name length 0 */
    copy[CMD_HEADER_LEN + 5] = 0;
    EXPECT_EQ_I64(cmd_push_validate(body, &count, &err), ERR_CORRUPT);
    copy[CMD_HEADER_LEN + 4] = (char)0xff; /* queue name length 65286 */
    copy[CMD_HEADER_LEN + 5] = 6;
    EXPECT_EQ_I64(cmd_push_validate(body, &count, &err), ERR_CORRUPT);
    free(copy);
    buf_free(&b);
}

TEST(encoder_refuses_bad_items)
{
    struct buf b;
    struct err err = {0};
    char big[CMD_NAME_MAX + 2];
    struct cmd_push_item it = item("q", "p", "t", "1", 0);

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(cmd_push_encode(&b, STORE_DEFAULT_TENANT, &it, 0, &err),
                  ERR_INVALID);
    it.queue.len = 0;
    EXPECT_EQ_I64(cmd_push_encode(&b, STORE_DEFAULT_TENANT, &it, 1, &err),
                  ERR_INVALID);
    memset(big, 'a', sizeof(big));
    it.queue = (struct slice){big, CMD_NAME_MAX + 1};
    EXPECT_EQ_I64(cmd_push_encode(&b, STORE_DEFAULT_TENANT, &it, 1, &err),
                  ERR_INVALID);
    it.queue = (struct slice){big, CMD_NAME_MAX};
    EXPECT_EQ_I64(cmd_push_encode(&b, STORE_DEFAULT_TENANT, &it, 1, &err), 0);
    EXPECT_EQ_U64(b.len > CMD_NAME_MAX, 1);
    buf_free(&b);
}

TEST(encoder_respects_the_buffer_cap)
{
    struct buf b;
    struct err err = {0};
    struct cmd_push_item it = item("q", "p", "t", "12345678901234567890", 0);

    buf_init(&b, 40);
    EXPECT_EQ_I64(cmd_push_encode(&b, STORE_DEFAULT_TENANT, &it, 1, &err),
                  ERR_TOO_BIG);
    EXPECT_EQ_U64(b.len, 0);
    buf_free(&b);
}

TEST(zero_padding_up_to_7_bytes_is_accepted_and_nothing_else)
{
    struct buf b;
    struct cmd_header h;
    struct err err = {0};
    char *p;

    encode3(&b);
    p = calloc(1, b.len + 8);
    memcpy(p, b.data, b.len);
    for (size_t pad = 0; pad <= 8; pad++) {
        EXPECT_EQ_I64(cmd_decode_header(p, b.len + pad, &h, &err),
                      pad <= CMD_PAD_MAX ? 0 : ERR_CORRUPT);
        if (pad <= CMD_PAD_MAX) {
            EXPECT_EQ_U64(h.body.len, b.len - CMD_HEADER_LEN);
        }
    }
    p[b.len + 3] = 1;
    EXPECT_EQ_I64(cmd_decode_header(p, b.len + 4, &h, &err), ERR_CORRUPT);
    free(p);
    buf_free(&b);
}
