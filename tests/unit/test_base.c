/* Unit tests of the base modules: err, buf, xalloc. */
#include "harness.h"

#include "base/buf.h"
#include "base/err.h"

TEST(err_set_returns_its_code_and_wrap_adds_context)
{
    struct err e;

    EXPECT_EQ_I64(err_set(&e, ERR_IO, "open %s: %s", "/x", "denied"), ERR_IO);
    EXPECT_STR_EQ(e.msg, "open /x: denied");
    EXPECT_EQ_I64(err_wrap(&e, "window %d", 42), ERR_IO);
    EXPECT_STR_EQ(e.msg, "window 42: open /x: denied");
    EXPECT_EQ_I64(err_http_status(ERR_TOO_BIG), 413);
    EXPECT_STR_EQ(err_name(ERR_FULL), "ERR_FULL");
    EXPECT_EQ_I64(err_http_status(ERR_FULL), 507);
}

TEST(err_public_keeps_the_last_name_of_every_absolute_path)
{
    char out[256];

    err_public("raft log /var/lib/queen/raft: create segment open-7: No "
               "space left on device",
               out, sizeof(out));
    EXPECT_STR_EQ(out, "raft log .../raft: create segment open-7: No space "
                       "left on device");
    err_public("commit entry 9 to /d/store/data.mdb: x (QUEEN_RAFT_DIR=/d/r)",
               out, sizeof(out));
    EXPECT_STR_EQ(out, "commit entry 9 to .../data.mdb: x "
                       "(QUEEN_RAFT_DIR=.../r)");
    /* not a path: inside a word, a bare "/", a ratio */
    err_public("/top and a/b, 1/2, / alone, '/q/x/'", out, sizeof(out));
    EXPECT_STR_EQ(out, ".../top and a/b, 1/2, / alone, '.../x/'");
    /* cut at cap, still terminated */
    err_public("at /a/b/c/dddddddd", out, 10);
    EXPECT_STR_EQ(out, "at .../dd");
    err_public("", out, sizeof(out));
    EXPECT_STR_EQ(out, "");
}

TEST(buf_appends_grow_and_stay_nul_terminated)
{
    struct buf b;
    struct err e;

    buf_init(&b, BUF_UNLIMITED);
    for (int i = 0; i < 1000; i++) {
        EXPECT_EQ_I64(buf_append(&b, "ab", 2, &e), 0);
    }
    EXPECT_EQ_U64(b.len, 2000);
    EXPECT_EQ_U64(b.data[b.len], 0);
    EXPECT_EQ_I64(buf_printf(&b, &e, "%d-%s", 7, "x"), 0);
    EXPECT_MEM_EQ(b.data + 2000, b.len - 2000, "7-x", 3);
    buf_reset(&b);
    EXPECT_EQ_U64(b.len, 0);
    EXPECT_STR_EQ(b.data, "");
    buf_free(&b);
}

TEST(buf_append_past_the_cap_fails_and_changes_nothing)
{
    struct buf b;
    struct err e;

    buf_init(&b, 5);
    EXPECT_EQ_I64(buf_append(&b, "abc", 3, &e), 0);
    EXPECT_EQ_I64(buf_append(&b, "def", 3, &e), ERR_TOO_BIG);
    EXPECT_EQ_U64(b.len, 3);
    EXPECT_STR_EQ(b.data, "abc");
    EXPECT_EQ_I64(buf_printf(&b, &e, "%s", "toolong"), ERR_TOO_BIG);
    EXPECT_STR_EQ(b.data, "abc");
    EXPECT_EQ_I64(buf_append(&b, "de", 2, &e), 0);
    EXPECT_STR_EQ(b.data, "abcde");
    buf_free(&b);
}
