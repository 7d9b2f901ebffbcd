/* base/aead: the envelope's text, round trips, tampering, wrong keys,
 * malformed envelopes, key parsing and a published AES-256-GCM vector. */
#include "base/aead.h"

#include <pthread.h>

#include "base/aead_seam.h"
#include "base/json.h"
#include "base/sha256.h"
#include "harness.h"

static const char key_hex[] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

static void test_key(uint8_t key[AEAD_KEY_LEN])
{
    ASSERT(aead_key_parse(key_hex, key));
}

static void unhex(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        ASSERT(sscanf(hex + 2 * i, "%2x", &v) == 1);
        out[i] = (uint8_t)v;
    }
}

/* Seal pt, check the envelope's shape, open it and compare. */
static void round_trip(const uint8_t *pt, size_t n)
{
    uint8_t key[AEAD_KEY_LEN];
    struct buf env;
    struct buf back;
    struct json_doc d;
    struct err err;

    test_key(key);
    buf_init(&env, BUF_UNLIMITED);
    buf_init(&back, BUF_UNLIMITED);
    EXPECT(aead_seal(key, pt, n, &env, &err) == 0);
    EXPECT(aead_is_envelope((const uint8_t *)env.data, env.len));
    EXPECT(json_parse(&d, env.data, env.len, NULL, &err) == 0);
    EXPECT_EQ_U64(d.toks[0].count, 3);
    json_doc_free(&d);
    EXPECT(strncmp(env.data, "{\"encrypted\":\"", 14) == 0);
    EXPECT(aead_open(key, (const uint8_t *)env.data, env.len, &back, &err) ==
           0);
    EXPECT_EQ_U64(back.len, n);
    EXPECT(n == 0 || memcmp(back.data, pt, n) == 0);
    buf_free(&env);
    buf_free(&back);
}

TEST(aead_round_trips)
{
    static const char *const texts[] = {
        "", "x", "{\"a\":1}", "\"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x90\x9d\"",
        "[1,2,3,\"ab\"]"};
    uint8_t *big = malloc(1 << 20);

    for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
        round_trip((const uint8_t *)texts[i], strlen(texts[i]));
    }
    /* Every length across a chunk boundary and the base64 remainders. */
    for (size_t i = 0; i < (1 << 20); i++) {
        big[i] = (uint8_t)(i * 131 + (i >> 8));
    }
    for (size_t n = 3068; n <= 3076; n++) {
        round_trip(big, n);
    }
    round_trip(big, 1 << 20);
    free(big);
}

TEST(aead_seal_appends_and_two_seals_differ)
{
    uint8_t key[AEAD_KEY_LEN];
    struct buf a;
    struct buf b;
    struct err err;

    test_key(key);
    buf_init(&a, BUF_UNLIMITED);
    buf_init(&b, BUF_UNLIMITED);
    EXPECT(buf_append_str(&a, "prefix", &err) == 0);
    EXPECT(aead_seal(key, (const uint8_t *)"same", 4, &a, &err) == 0);
    EXPECT(strncmp(a.data, "prefix{", 7) == 0);
    EXPECT(aead_seal(key, (const uint8_t *)"same", 4, &b, &err) == 0);
    EXPECT(strcmp(a.data + 6, b.data) != 0); /* a fresh IV each time */
    buf_free(&a);
    buf_free(&b);
}

/* NIST GCM specification, test case 15: AES-256, 96-bit IV, no AAD. */
/* The key and plaintext of the GCM specification's test case 15. */
static const char case15_key[] =
    "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308";
static const char case15_pt[] =
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
    "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";

TEST(aead_known_answer_gcm_spec_case_15)
{
    static const char c[] =
        "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
        "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad";
    static const char t[] = "b094dac5d93471bdec1a502270e3cc6c";
    uint8_t key[AEAD_KEY_LEN];
    /* The nonce is the first 12 bytes; the last 4 are stored, not used. */
    uint8_t iv[AEAD_IV_LEN] = {0xca, 0xfe, 0xba, 0xbe, 0xfa, 0xce, 0xdb, 0xad,
                               0xde, 0xca, 0xf8, 0x88, 0x01, 0x02, 0x03, 0x04};
    uint8_t pt[64];
    uint8_t ct[64];
    uint8_t tag[16];
    struct buf want;
    struct buf got;
    struct buf back;
    struct err err;

    EXPECT(aead_key_parse(case15_key, key));
    unhex(case15_pt, pt, sizeof(pt));
    unhex(c, ct, sizeof(ct));
    unhex(t, tag, sizeof(tag));
    buf_init(&want, BUF_UNLIMITED);
    buf_init(&got, BUF_UNLIMITED);
    buf_init(&back, BUF_UNLIMITED);
    EXPECT(buf_append_str(&want, "{\"encrypted\":\"", &err) == 0);
    EXPECT(base64_encode(ct, sizeof(ct), &want, &err) == 0);
    EXPECT(buf_append_str(&want, "\",\"iv\":\"", &err) == 0);
    EXPECT(base64_encode(iv, sizeof(iv), &want, &err) == 0);
    EXPECT(buf_append_str(&want, "\",\"authTag\":\"", &err) == 0);
    EXPECT(base64_encode(tag, sizeof(tag), &want, &err) == 0);
    EXPECT(buf_append_str(&want, "\"}", &err) == 0);
    EXPECT(aead_seal_with_iv(key, iv, pt, sizeof(pt), &got, &err) == 0);
    EXPECT_STR_EQ(got.data, want.data);
    EXPECT(aead_open(key, (const uint8_t *)want.data, want.len, &back, &err) ==
           0);
    EXPECT_MEM_EQ(back.data, back.len, pt, sizeof(pt));
    buf_free(&want);
    buf_free(&got);
    buf_free(&back);
}

/* The binary form of the GCM case 15 vector (iv || tag || ciphertext) is
 * what the envelope carries, without base64: aead_envelope turns it into
 * exactly the envelope aead_seal_with_iv writes, and aead_open_raw opens
 * it. */
TEST(aead_binary_form_is_the_envelope_without_base64)
{
    static const char raw_hex[] =
        "cafebabefacedbaddecaf88801020304" /* iv, nonce + 4 stored bytes */
        "b094dac5d93471bdec1a502270e3cc6c" /* tag */
        "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
        "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad";
    uint8_t key[AEAD_KEY_LEN];
    uint8_t other[AEAD_KEY_LEN] = {1};
    uint8_t pt[64];
    uint8_t raw[96];
    struct buf env;
    struct buf want;
    struct buf back;
    struct err err;

    EXPECT(aead_key_parse(case15_key, key));
    unhex(case15_pt, pt, sizeof(pt));
    unhex(raw_hex, raw, sizeof(raw));
    buf_init(&env, BUF_UNLIMITED);
    buf_init(&want, BUF_UNLIMITED);
    buf_init(&back, BUF_UNLIMITED);
    EXPECT(aead_seal_with_iv(key, raw, pt, sizeof(pt), &want, &err) == 0);
    EXPECT(aead_envelope(raw, sizeof(raw), &env, &err) == 0);
    EXPECT_STR_EQ(env.data, want.data);
    EXPECT(aead_open_raw(key, raw, sizeof(raw), &back, &err) == 0);
    EXPECT_MEM_EQ(back.data, back.len, pt, sizeof(pt));
    /* A wrong key or any altered byte of nonce, tag or ciphertext: no
     * plaintext, the output as it was. */
    buf_reset(&back);
    EXPECT(aead_open_raw(other, raw, sizeof(raw), &back, &err) ==
           ERR_FORBIDDEN);
    EXPECT_EQ_U64(back.len, 0);
    for (size_t i = 0; i < sizeof(raw); i++) {
        if (i >= AEAD_NONCE_LEN && i < AEAD_IV_LEN) {
            continue; /* the IV's last 4 bytes are covered by nothing */
        }
        raw[i] ^= 0x40;
        EXPECT(aead_open_raw(key, raw, sizeof(raw), &back, &err) ==
               ERR_FORBIDDEN);
        EXPECT_EQ_U64(back.len, 0);
        raw[i] ^= 0x40;
    }
    /* Shorter than iv and tag: not a sealed payload. */
    EXPECT(aead_open_raw(key, raw, 31, &back, &err) == ERR_INVALID);
    EXPECT(aead_envelope(raw, 31, &env, &err) == ERR_INVALID);
    EXPECT_STR_EQ(env.data, want.data);
    buf_free(&env);
    buf_free(&want);
    buf_free(&back);
}

/* aead_seal_raw: 32 bytes over the plaintext, no plaintext in it, a fresh
 * IV each time, appended after what out held, and it opens. */
TEST(aead_seal_raw_round_trips)
{
    static const char *const texts[] = {"", "x", "{\"order\":123456}"};
    uint8_t key[AEAD_KEY_LEN];
    struct buf a;
    struct buf b;
    struct buf back;
    struct err err;

    test_key(key);
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        size_t n = strlen(texts[i]);
        buf_init(&a, BUF_UNLIMITED);
        buf_init(&b, BUF_UNLIMITED);
        buf_init(&back, BUF_UNLIMITED);
        EXPECT(buf_append_str(&a, "head", &err) == 0);
        EXPECT(aead_seal_raw(key, (const uint8_t *)texts[i], n, &a, &err) == 0);
        EXPECT(aead_seal_raw(key, (const uint8_t *)texts[i], n, &b, &err) == 0);
        EXPECT_EQ_U64(a.len, 4 + n + AEAD_SEALED_OVERHEAD);
        EXPECT(memcmp(a.data, "head", 4) == 0);
        EXPECT(memcmp(a.data + 4, b.data, AEAD_IV_LEN) != 0);
        EXPECT(n < 2 || memmem(a.data, a.len, texts[i], n) == NULL);
        EXPECT(aead_open_raw(key, (const uint8_t *)a.data + 4, a.len - 4, &back,
                             &err) == 0);
        EXPECT_MEM_EQ(back.data, back.len, texts[i], n);
        buf_free(&a);
        buf_free(&b);
        buf_free(&back);
    }
}

/* Replace the value of member name in env with the base64 of bytes whose
 * byte at index pos is flipped. */
static void tamper(struct buf *env, const char *name, size_t pos)
{
    struct json_doc d;
    struct buf raw;
    struct buf b64;
    struct buf next;
    struct err err;
    int i;

    ASSERT(json_parse(&d, env->data, env->len, NULL, &err) == 0);
    i = json_obj_get(&d, 0, name);
    buf_init(&raw, BUF_UNLIMITED);
    buf_init(&b64, BUF_UNLIMITED);
    buf_init(&next, BUF_UNLIMITED);
    ASSERT(base64_decode(env->data + d.toks[i].start + 1, d.toks[i].len - 2,
                         &raw, &err) == 0);
    ASSERT(pos < raw.len);
    raw.data[pos] ^= 0x01;
    ASSERT(base64_encode((const uint8_t *)raw.data, raw.len, &b64, &err) == 0);
    ASSERT(buf_append(&next, env->data, d.toks[i].start + 1, &err) == 0);
    ASSERT(buf_append(&next, b64.data, b64.len, &err) == 0);
    ASSERT(buf_append_str(&next,
                          env->data + d.toks[i].start + d.toks[i].len - 1,
                          &err) == 0);
    json_doc_free(&d);
    buf_reset(env);
    ASSERT(buf_append(env, next.data, next.len, &err) == 0);
    buf_free(&raw);
    buf_free(&b64);
    buf_free(&next);
}

static int open_code(const uint8_t key[AEAD_KEY_LEN], const struct buf *env)
{
    struct buf out;
    struct err err;
    int rc;

    buf_init(&out, BUF_UNLIMITED);
    ASSERT(buf_append_str(&out, "kept", &err) == 0);
    rc = aead_open(key, (const uint8_t *)env->data, env->len, &out, &err);
    if (rc != 0) {
        EXPECT_STR_EQ(out.data, "kept"); /* out unchanged on error */
    }
    buf_free(&out);
    return rc;
}

TEST(aead_tamper_and_wrong_key_are_forbidden)
{
    static const char *const fields[] = {"encrypted", "iv", "authTag"};
    static const char pt[] = "{\"secret\":\"do not alter\"}";
    uint8_t key[AEAD_KEY_LEN];
    uint8_t other[AEAD_KEY_LEN];
    struct buf env;
    struct err err;

    test_key(key);
    memcpy(other, key, sizeof(other));
    other[31] ^= 0x80;
    buf_init(&env, BUF_UNLIMITED);
    for (size_t f = 0; f < ARRAY_LEN(fields); f++) {
        size_t positions[] = {0, 5, 11};
        for (size_t j = 0; j < ARRAY_LEN(positions); j++) {
            buf_reset(&env);
            EXPECT(aead_seal(key, (const uint8_t *)pt, strlen(pt), &env,
                             &err) == 0);
            EXPECT_EQ_I64(open_code(key, &env), 0);
            tamper(&env, fields[f], positions[j]);
            EXPECT_EQ_I64(open_code(key, &env), ERR_FORBIDDEN);
        }
    }
    /* The IV's last 4 bytes are stored but not the nonce: flipping one
     * changes nothing the tag covers. */
    buf_reset(&env);
    EXPECT(aead_seal(key, (const uint8_t *)pt, strlen(pt), &env, &err) == 0);
    tamper(&env, "iv", 13);
    EXPECT_EQ_I64(open_code(key, &env), 0);
    buf_reset(&env);
    EXPECT(aead_seal(key, (const uint8_t *)pt, strlen(pt), &env, &err) == 0);
    EXPECT_EQ_I64(open_code(other, &env), ERR_FORBIDDEN);
    buf_free(&env);
}

TEST(aead_malformed_envelopes_are_invalid)
{
    static const char *const bad[] = {
        "",
        "null",
        "\"authTag\"",
        "[\"encrypted\",\"iv\",\"authTag\"]",
        "{\"encrypted\":\"\",\"iv\":\"AAAAAAAAAAAAAAAAAAAAAA==\"}",
        "{\"encrypted\":\"\",\"iv\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
        "\"authTag\":7}",
        "{\"encrypted\":\"\",\"iv\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
        "\"authTag\":\"AAAAAAAAAAAAAAAAAAAAAA==\"",
        /* IV of 12 bytes, tag of 15, bad base64, unpadded base64 */
        "{\"encrypted\":\"\",\"iv\":\"AAAAAAAAAAAAAAAA\","
        "\"authTag\":\"AAAAAAAAAAAAAAAAAAAAAA==\"}",
        "{\"encrypted\":\"\",\"iv\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
        "\"authTag\":\"AAAAAAAAAAAAAAAAAAAA\"}",
        "{\"encrypted\":\"**==\",\"iv\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
        "\"authTag\":\"AAAAAAAAAAAAAAAAAAAAAA==\"}",
        "{\"encrypted\":\"QQ\",\"iv\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
        "\"authTag\":\"AAAAAAAAAAAAAAAAAAAAAA==\"}",
    };
    uint8_t key[AEAD_KEY_LEN];
    struct buf env;
    struct err err;

    test_key(key);
    buf_init(&env, BUF_UNLIMITED);
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        buf_reset(&env);
        EXPECT(buf_append_str(&env, bad[i], &err) == 0);
        EXPECT_EQ_I64(open_code(key, &env), ERR_INVALID);
    }
    EXPECT(!aead_is_envelope((const uint8_t *)"", 0));
    EXPECT(!aead_is_envelope((const uint8_t *)"{\"a\":1}", 7));
    EXPECT(!aead_is_envelope((const uint8_t *)bad[5], strlen(bad[5])));
    /* Shape alone makes an envelope; its bytes are checked by opening. */
    EXPECT(aead_is_envelope((const uint8_t *)bad[7], strlen(bad[7])));
    buf_free(&env);
}

/* Members in another order, extra members, white space and escaped
 * characters are the same envelope. */
TEST(aead_open_accepts_any_member_order)
{
    uint8_t key[AEAD_KEY_LEN];
    struct buf env;
    struct buf alt;
    struct buf out;
    struct json_doc d;
    struct err err;
    struct slice ct;
    struct slice iv;
    struct slice tag;

    test_key(key);
    buf_init(&env, BUF_UNLIMITED);
    buf_init(&alt, BUF_UNLIMITED);
    buf_init(&out, BUF_UNLIMITED);
    EXPECT(aead_seal(key, (const uint8_t *)"[\"order\"]", 9, &env, &err) == 0);
    ASSERT(json_parse(&d, env.data, env.len, NULL, &err) == 0);
    ct = json_span(&d, json_obj_get(&d, 0, "encrypted"));
    iv = json_span(&d, json_obj_get(&d, 0, "iv"));
    tag = json_span(&d, json_obj_get(&d, 0, "authTag"));
    EXPECT(buf_printf(&alt, &err,
                      " {\"authTag\" : %.*s,\n\"x\":{\"y\":[1]},\"i\\u0076\":"
                      "%.*s,\"encrypted\":%.*s} ",
                      (int)tag.len, tag.ptr, (int)iv.len, iv.ptr, (int)ct.len,
                      ct.ptr) == 0);
    json_doc_free(&d);
    EXPECT(aead_is_envelope((const uint8_t *)alt.data, alt.len));
    EXPECT(aead_open(key, (const uint8_t *)alt.data, alt.len, &out, &err) == 0);
    EXPECT_STR_EQ(out.data, "[\"order\"]");
    buf_free(&env);
    buf_free(&alt);
    buf_free(&out);
}

/* The sniff finds the authTag member wherever it falls among other 'T's,
 * and a near miss ("authtag", "authTa" cut short) is not an envelope. */
TEST(aead_sniff_finds_auth_tag_among_other_ts)
{
    static const char *const yes[] = {
        "{\"encrypted\":\"\",\"iv\":\"\",\"authTag\":\"\"}",
        "{\"authTag\":\"\",\"iv\":\"\",\"encrypted\":\"\"}",
        " \t{\"T\":\"TTauthTa\",\"authTag\":\"T\",\"iv\":\"T\","
        "\"encrypted\":\"T\"}",
        "{\"authTauthTag\":0,\"encrypted\":\"\",\"iv\":\"\",\"authTag\":\"\"}",
        /* through an escape: no plain "authTag" at all */
        "{\"encrypted\":\"\",\"iv\":\"\",\"auth\\u0054ag\":\"\"}",
    };
    static const char *const no[] = {
        "{\"encrypted\":\"\",\"iv\":\"\",\"authtag\":\"\"}",
        "{\"encrypted\":\"\",\"iv\":\"\",\"authTa\":\"\",\"Tag\":\"\"}",
        "{\"encrypted\":\"\",\"iv\":\"\",\"authTag\":1}",
        "[\"authTag\"]",
        "authTag",
        "{authTag",
        "TTTTTTTTTTTTTTTTTTTT",
    };
    char buf[256];

    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        EXPECT(aead_is_envelope((const uint8_t *)yes[i], strlen(yes[i])));
    }
    for (size_t i = 0; i < ARRAY_LEN(no); i++) {
        EXPECT(!aead_is_envelope((const uint8_t *)no[i], strlen(no[i])));
    }
    /* authTag at every offset after a run of 'T's */
    for (int k = 0; k < 40; k++) {
        int n = snprintf(buf, sizeof(buf),
                         "{\"%.*s\":0,\"iv\":\"\",\"encrypted\":\"\","
                         "\"authTag\":\"\"}",
                         k, "TTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTT");
        EXPECT(aead_is_envelope((const uint8_t *)buf, (size_t)n));
        buf[n - 6] = 'G'; /* "authTaG" */
        EXPECT(!aead_is_envelope((const uint8_t *)buf, (size_t)n));
    }
}

TEST(aead_key_parse_takes_exactly_64_hex)
{
    uint8_t key[AEAD_KEY_LEN];
    uint8_t before[AEAD_KEY_LEN];
    static const char *const bad[] = {
        "",
        "00",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f0",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1g",
        " 00102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
    };

    EXPECT(aead_key_parse(
        "000102030405060708090A0B0C0D0E0F101112131415161718191a1b1c1d1e1F",
        key));
    for (int i = 0; i < AEAD_KEY_LEN; i++) {
        EXPECT_EQ_U64(key[i], i);
    }
    memcpy(before, key, sizeof(key));
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        EXPECT(!aead_key_parse(bad[i], key));
    }
    EXPECT(!aead_key_parse(NULL, key));
    EXPECT(memcmp(before, key, sizeof(key)) == 0);
}

TEST(aead_too_small_output_is_too_big_and_unchanged)
{
    uint8_t key[AEAD_KEY_LEN];
    struct buf out;
    struct err err;

    test_key(key);
    buf_init(&out, 40);
    EXPECT(aead_seal(key, (const uint8_t *)"payload", 7, &out, &err) ==
           ERR_TOO_BIG);
    EXPECT_EQ_U64(out.len, 0);
    buf_free(&out);
}

static void *seal_many(void *arg)
{
    uint8_t key[AEAD_KEY_LEN];
    struct buf env;
    struct buf back;
    struct err err;
    int *fails = arg;

    test_key(key);
    buf_init(&env, BUF_UNLIMITED);
    buf_init(&back, BUF_UNLIMITED);
    for (int i = 0; i < 200; i++) {
        char pt[32];
        int n = snprintf(pt, sizeof(pt), "{\"i\":%d}", i);
        buf_reset(&env);
        buf_reset(&back);
        if (aead_seal(key, (const uint8_t *)pt, (size_t)n, &env, &err) != 0 ||
            aead_open(key, (const uint8_t *)env.data, env.len, &back, &err) !=
                0 ||
            strcmp(back.data, pt) != 0) {
            (*fails)++;
        }
    }
    buf_free(&env);
    buf_free(&back);
    return NULL;
}

/* Each thread has its own cipher context. */
TEST(aead_threads_seal_at_once)
{
    pthread_t t[4];
    int fails[4] = {0};

    for (int i = 0; i < 4; i++) {
        ASSERT(pthread_create(&t[i], NULL, seal_many, &fails[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        ASSERT(pthread_join(t[i], NULL) == 0);
        EXPECT_EQ_I64(fails[i], 0);
    }
}
