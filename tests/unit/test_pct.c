/* Tests of the name percent-encoding (docs/design/formats.md §1 and
 * docs/design/protocol.md §3). */
#include "base/pct.h"

#include "harness.h"

static void expect_esc(const char *in, const char *want)
{
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(pct_escape(&b, in, strlen(in), &err), 0);
    EXPECT_STR_EQ(b.data, want);
    buf_reset(&b);
    EXPECT_EQ_I64(pct_unescape(&b, want, strlen(want), &err), 0);
    EXPECT_STR_EQ(b.data, in);
    buf_free(&b);
}

static void expect_unesc(const char *in, const char *want)
{
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(pct_unescape(&b, in, strlen(in), &err), 0);
    EXPECT_STR_EQ(b.data, want);
    buf_free(&b);
}

TEST(reference_vectors_escape_and_round_trip)
{
    expect_esc("a/b", "a%2Fb");
    expect_esc("with space", "with%20space");
    expect_esc("..", "..");
    expect_esc("../../etc", "..%2F..%2Fetc");
    expect_esc("caff\xc3\xa8", "caff%C3%A8");
    expect_esc("100%", "100%25");
    expect_esc("dt=x", "dt%3Dx");
    expect_esc("node-1@host", "node-1%40host");
    expect_esc("e.ord/eu \xc3\xa9t\xc3\xa9:1%",
               "e.ord%2Feu%20%C3%A9t%C3%A9%3A1%25");
    expect_esc("a b/\xc3\xbc:c", "a%20b%2F%C3%BC%3Ac");
    expect_esc("Orders_2026.v-1", "Orders_2026.v-1");
    expect_esc("a:b", "a%3Ab");
    expect_esc("", "");
}

TEST(every_byte_outside_the_set_is_escaped_uppercase)
{
    for (int c = 0; c < 256; c++) {
        char in[1] = {(char)c};
        struct buf b;
        struct err err;
        buf_init(&b, BUF_UNLIMITED);
        EXPECT_EQ_I64(pct_escape(&b, in, 1, &err), 0);
        if (pct_is_plain((unsigned char)c)) {
            EXPECT_EQ_U64(b.len, 1);
        } else {
            char want[4];
            snprintf(want, sizeof(want), "%%%02X", c);
            EXPECT_STR_EQ(b.data, want);
        }
        buf_free(&b);
    }
    EXPECT(!pct_is_plain('~'));
    EXPECT(!pct_is_plain('/'));
    EXPECT(pct_is_plain('_'));
}

TEST(invalid_sequences_are_kept_literally)
{
    expect_unesc("100%zz", "100%zz");
    expect_unesc("%", "%");
    expect_unesc("a%2", "a%2");
    expect_unesc("%2f%2F", "//");
    expect_unesc("%G1%41", "%G1A");
}

TEST(escape_past_the_cap_leaves_the_buffer_unchanged)
{
    struct buf b;
    struct err err;

    buf_init(&b, 4);
    EXPECT_EQ_I64(pct_escape(&b, "ab", 2, &err), 0);
    EXPECT_EQ_I64(pct_escape(&b, "/", 1, &err), ERR_TOO_BIG);
    EXPECT_STR_EQ(b.data, "ab");
    buf_free(&b);
}
