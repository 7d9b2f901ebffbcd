/* Known-answer tests of the digest and encoding wrappers. */
#include "base/sha256.h"

#include "harness.h"

static void expect_sha(const char *in, const char *want)
{
    uint8_t d[32];
    char hex[65];
    struct sha256_ctx c;

    sha256(in, strlen(in), d);
    hex_lower(d, 32, hex);
    EXPECT_STR_EQ(hex, want);
    sha256_init(&c);
    for (size_t i = 0; i < strlen(in); i++) {
        sha256_update(&c, in + i, 1);
    }
    sha256_final(&c, d);
    hex_lower(d, 32, hex);
    EXPECT_STR_EQ(hex, want);
}

TEST(sha256_known_answers)
{
    expect_sha("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b"
                   "7852b855");
    expect_sha("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff"
                      "61f20015ad");
    expect_sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db"
               "06c1");
}

TEST(sha256_abandon_frees_the_context)
{
    struct sha256_ctx c;

    sha256_init(&c);
    sha256_update(&c, "x", 1);
    sha256_abandon(&c);
    EXPECT(c.md == NULL);
}

TEST(md5_known_answers)
{
    uint8_t d[16];
    char hex[33];

    md5("", 0, d);
    hex_lower(d, 16, hex);
    EXPECT_STR_EQ(hex, "d41d8cd98f00b204e9800998ecf8427e");
    md5("abc", 3, d);
    hex_lower(d, 16, hex);
    EXPECT_STR_EQ(hex, "900150983cd24fb0d6963f7d28e17f72");
}

TEST(hmac_sha256_rfc4231_case_2)
{
    uint8_t d[32];
    char hex[65];
    const char *msg = "what do ya want for nothing?";

    hmac_sha256("Jefe", 4, msg, strlen(msg), d);
    hex_lower(d, 32, hex);
    EXPECT_STR_EQ(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec5"
                       "8b964ec3843");
}

TEST(base64_rfc4648_vectors_round_trip)
{
    static const char *plain[] = {"",     "f",     "fo",    "foo",
                                  "foob", "fooba", "foobar"};
    static const char *enc[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(plain); i++) {
        struct buf b;
        buf_init(&b, BUF_UNLIMITED);
        EXPECT_EQ_I64(base64_encode((const uint8_t *)plain[i], strlen(plain[i]),
                                    &b, &err),
                      0);
        EXPECT_STR_EQ(b.data ? b.data : "", enc[i]);
        buf_reset(&b);
        EXPECT_EQ_I64(base64_decode(enc[i], strlen(enc[i]), &b, &err), 0);
        EXPECT_MEM_EQ(b.data ? b.data : "", b.len, plain[i], strlen(plain[i]));
        buf_free(&b);
    }
}

TEST(base64_of_binary_md5_is_content_md5)
{
    uint8_t d[16];
    struct buf b;
    struct err err;

    md5("", 0, d);
    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(base64_encode(d, 16, &b, &err), 0);
    EXPECT_STR_EQ(b.data, "1B2M2Y8AsgTpgAmY7PhCfg==");
    buf_free(&b);
}

TEST(base64_decode_rejects_bad_text_and_changes_nothing)
{
    static const char *bad[] = {
        "Zg=", "Zg=a", "Z===", "Zh==", "Zm9v\n", "Zm=v", "Zm9*", "=Zm9"};
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        struct buf b;
        buf_init(&b, BUF_UNLIMITED);
        buf_append_str(&b, "keep", &err);
        if (base64_decode(bad[i], strlen(bad[i]), &b, &err) != ERR_INVALID) {
            HARNESS_FAIL("accepted %s", bad[i]);
        }
        EXPECT_STR_EQ(b.data, "keep");
        buf_free(&b);
    }
}
