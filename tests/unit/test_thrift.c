/* Tests for src/parquet/thrift.c: the compact-protocol bytes the writer emits
 * (hand-computed from the Thrift compact protocol spec) and the decoder
 * reading them back. */
#include "parquet/thrift.h"

#include "harness.h"

static struct buf out;
static struct thrift_w w;

static void start(void)
{
    buf_free(&out);
    buf_init(&out, BUF_UNLIMITED);
    thrift_w_init(&w, &out);
    thrift_w_begin(&w);
}

TEST(short_field_headers_carry_the_id_delta)
{
    start();
    thrift_w_i32(&w, 1, 1);    /* 0x15 0x02 */
    thrift_w_i64(&w, 3, -1);   /* delta 2, type 6: 0x26, zigzag(-1)=1 */
    thrift_w_str(&w, 4, "ab"); /* 0x18 0x02 'a' 'b' */
    thrift_w_bool(&w, 5, true);
    thrift_w_bool(&w, 6, false);
    thrift_w_end(&w);
    EXPECT_MEM_EQ(out.data, out.len,
                  "\x15\x02\x26\x01\x18\x02"
                  "ab\x11\x12\x00",
                  11);
    EXPECT_EQ_I64(thrift_w_check(&w, &(struct err){0}), 0);
}

TEST(long_field_headers_after_a_jump_over_15)
{
    start();
    thrift_w_i32(&w, 20, 300); /* 0x05, zigzag(20)=40, zigzag(300)=600 */
    thrift_w_end(&w);
    EXPECT_MEM_EQ(out.data, out.len, "\x05\x28\xd8\x04\x00", 5);
}

TEST(list_headers_switch_to_a_varint_size_at_15)
{
    start();
    thrift_w_list(&w, 1, THRIFT_I32, 2);
    thrift_w_zigzag(&w, 0);
    thrift_w_zigzag(&w, 3);
    thrift_w_list(&w, 2, THRIFT_BINARY, 15);
    for (int i = 0; i < 15; i++) {
        thrift_w_binval(&w, "", 0);
    }
    thrift_w_end(&w);
    EXPECT_MEM_EQ(out.data, 6, "\x19\x25\x00\x06\x19\xf8", 6);
    EXPECT_EQ_U64((uint8_t)out.data[6], 15);
    EXPECT_EQ_U64(out.len, 7 + 15 + 1);
}

TEST(nested_structs_round_trip_through_the_decoder)
{
    struct thrift_tree t = {0};
    struct err e = {0};
    size_t used = 0;

    start();
    thrift_w_i64(&w, 1, INT64_MIN);
    thrift_w_field(&w, 2, THRIFT_STRUCT);
    thrift_w_begin(&w);
    thrift_w_i32(&w, 7, INT32_MAX);
    thrift_w_bin(&w, 30, "x\0y", 3);
    thrift_w_end(&w);
    thrift_w_list(&w, 3, THRIFT_STRUCT, 20);
    for (int i = 0; i < 20; i++) {
        thrift_w_begin(&w);
        thrift_w_i32(&w, 1, -i);
        thrift_w_end(&w);
    }
    thrift_w_bool(&w, 4, true);
    thrift_w_end(&w);
    buf_append(&out, "junk", 4, &e);
    EXPECT_EQ_I64(thrift_decode(out.data, out.len, &t, &used, &e), 0);
    EXPECT_EQ_U64(used, out.len - 4);
    const struct thrift_node *root = &t.nodes[0];
    EXPECT_EQ_I64(thrift_get_i(&t, root, 1, 0), INT64_MIN);
    const struct thrift_node *s = thrift_get(&t, root, 2);
    EXPECT_EQ_I64(thrift_get_i(&t, s, 7, 0), INT32_MAX);
    struct slice b = thrift_get_bin(&t, s, 30);
    EXPECT_MEM_EQ(b.ptr, b.len, "x\0y", 3);
    const struct thrift_node *l = thrift_get(&t, root, 3);
    EXPECT_EQ_I64(l->i, 20);
    EXPECT_EQ_I64(thrift_get_i(&t, thrift_get(&t, l, 19), 1, 0), -19);
    EXPECT_EQ_I64(thrift_get_i(&t, root, 4, 0), 1);
    EXPECT(thrift_get(&t, root, 5) == NULL);
    thrift_tree_free(&t);
}

TEST(every_truncation_is_a_corrupt_error_not_a_crash)
{
    struct thrift_tree t = {0};
    struct err e = {0};
    size_t used = 0;

    start();
    thrift_w_i32(&w, 1, 1000);
    thrift_w_str(&w, 2, "hello");
    thrift_w_list(&w, 3, THRIFT_I64, 3);
    thrift_w_zigzag(&w, 1);
    thrift_w_zigzag(&w, 2);
    thrift_w_zigzag(&w, 3);
    thrift_w_end(&w);
    for (size_t n = 0; n < out.len; n++) {
        EXPECT_EQ_I64(thrift_decode(out.data, n, &t, &used, &e), ERR_CORRUPT);
    }
    EXPECT_EQ_I64(thrift_decode(out.data, out.len, &t, &used, &e), 0);
    thrift_tree_free(&t);
}

TEST(nesting_past_the_depth_limit_is_refused)
{
    char deep[64];
    struct thrift_tree t = {0};
    struct err e = {0};
    size_t used = 0;

    memset(deep, 0x1c, sizeof(deep)); /* field 1, struct, again and again */
    EXPECT_EQ_I64(thrift_decode(deep, sizeof(deep), &t, &used, &e),
                  ERR_CORRUPT);
    EXPECT(strstr(e.msg, "deep") != NULL);
}

TEST(maps_are_refused)
{
    struct thrift_tree t = {0};
    struct err e = {0};
    size_t used = 0;

    EXPECT_EQ_I64(thrift_decode("\x1b\x00\x00", 3, &t, &used, &e), ERR_CORRUPT);
}

TEST(a_full_output_buffer_is_a_sticky_too_big_error)
{
    struct buf small;
    struct thrift_w sw;
    struct err e = {0};

    buf_init(&small, 4);
    thrift_w_init(&sw, &small);
    thrift_w_begin(&sw);
    thrift_w_str(&sw, 1, "longer than four bytes");
    thrift_w_i32(&sw, 2, 1);
    thrift_w_end(&sw);
    EXPECT_EQ_I64(thrift_w_check(&sw, &e), ERR_TOO_BIG);
    EXPECT(small.len <= 4);
    buf_free(&small);
}
