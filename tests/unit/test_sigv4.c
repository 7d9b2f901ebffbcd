/* Tests of the SigV4 signer: AWS's documented S3 examples (access key
 * AKIAIOSFODNN7EXAMPLE, 2013-05-24, us-east-1, examplebucket) and fixed-date
 * vectors for keys holding = % + space é 日本, whose signatures were computed
 * independently with botocore's S3SigV4Auth. */
#include <stdlib.h>

#include "harness.h"

#include "s3/sigv4.h"

static const struct sigv4_key aws_key = {
    "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "us-east-1", "s3"};
static const struct sigv4_key queen_key = {"queen", "queen-secret-key",
                                           "us-east-1", "s3"};

#define HOST_EX "examplebucket.s3.amazonaws.com"

static void sign_ok(const struct sigv4_request *r, const struct sigv4_key *k,
                    struct sigv4_out *o)
{
    struct err err = {0};

    sigv4_out_init(o);
    EXPECT_EQ_I64(sigv4_sign(r, k, o, &err), 0);
    if (err.code != 0) {
        fprintf(stderr, "  sign: %s\n", err.msg);
    }
}

/* Sign r with k: the request URI and the signature must be uri and sig. */
static void expect_signed(const struct sigv4_request *r,
                          const struct sigv4_key *k, const char *uri,
                          const char *sig)
{
    struct sigv4_out o;

    sign_ok(r, k, &o);
    EXPECT_STR_EQ(o.uri.data, uri);
    EXPECT_STR_EQ(o.signature, sig);
    sigv4_out_free(&o);
}

/* The signed headers of a request with no body, to host at date. */
#define EMPTY_BODY_HEADERS(host, date)                 \
    {                                                  \
        {"host", host}, {"x-amz-date", date},          \
        {                                              \
            "x-amz-content-sha256", SIGV4_EMPTY_SHA256 \
        }                                              \
    }

TEST(aws_get_object_example)
{
    struct sigv4_kv h[] = {{"Host", HOST_EX},
                           {"Range", "bytes=0-9"},
                           {"x-amz-content-sha256", SIGV4_EMPTY_SHA256},
                           {"x-amz-date", "20130524T000000Z"}};
    struct sigv4_request r = {"GET", "/test.txt", NULL, 0, h, ARRAY_LEN(h)};
    struct sigv4_out o;

    sign_ok(&r, &aws_key, &o);
    EXPECT_STR_EQ(o.canonical.data,
                  "GET\n/test.txt\n\nhost:" HOST_EX "\nrange:bytes=0-9\n"
                  "x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
                  "x-amz-date:20130524T000000Z\n\n"
                  "host;range;x-amz-content-sha256;x-amz-date\n" //
                  SIGV4_EMPTY_SHA256);
    EXPECT_STR_EQ(o.string_to_sign.data,
                  "AWS4-HMAC-SHA256\n20130524T000000Z\n"
                  "20130524/us-east-1/s3/aws4_request\n"
                  "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964"
                  "946972");
    EXPECT_STR_EQ(o.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba"
                               "48dd91039c6036bdb41");
    EXPECT_STR_EQ(o.authorization.data,
                  "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/"
                  "us-east-1/s3/aws4_request, SignedHeaders=host;range;"
                  "x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c96442"
                  "0e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    EXPECT_STR_EQ(o.uri.data, "/test.txt");
    sigv4_out_free(&o);
}

/* The control plane takes a secretKey of up to 4 KiB (docs/s3-sink.md), so
 * the signer keys with the whole of one that long: AWS's GET example again,
 * with secrets of 300 and 4096 bytes (its example secret repeated); the
 * signatures were computed independently with Python's hmac and hashlib. */
static void sign_with_long_secret(size_t n, const char *sig)
{
    static const char base[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    char *secret = malloc(n + 1);
    struct sigv4_kv h[] = {{"Host", HOST_EX},
                           {"Range", "bytes=0-9"},
                           {"x-amz-content-sha256", SIGV4_EMPTY_SHA256},
                           {"x-amz-date", "20130524T000000Z"}};
    struct sigv4_request r = {"GET", "/test.txt", NULL, 0, h, ARRAY_LEN(h)};

    for (size_t i = 0; i < n; i++) {
        secret[i] = base[i % (sizeof(base) - 1)];
    }
    secret[n] = '\0';
    struct sigv4_key k = {"AKIAIOSFODNN7EXAMPLE", secret, "us-east-1", "s3"};
    expect_signed(&r, &k, "/test.txt", sig);
    free(secret);
}

TEST(a_secret_of_up_to_4_kib_signs_whole)
{
    sign_with_long_secret(300, "a524ec420f2eeffe80e4bebb9c52ebcb17c5d3bed32257"
                               "f81699042d4051cfc8");
    sign_with_long_secret(SIGV4_SECRET_MAX, "07740edefeecb2c06045264cb6b44ce1"
                                            "7eca19949254bafbe5d35ab51639f614");
}

TEST(aws_put_object_example)
{
    struct sigv4_kv h[] = {
        {"Host", HOST_EX},
        {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
        {"x-amz-date", "20130524T000000Z"},
        {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
        {"x-amz-content-sha256",
         "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"}};
    struct sigv4_request r = {"PUT", "/test$file.text", NULL, 0,
                              h,     ARRAY_LEN(h)};
    struct sigv4_out o;

    sign_ok(&r, &aws_key, &o);
    EXPECT_STR_EQ(o.uri.data, "/test%24file.text");
    EXPECT_STR_EQ(o.signed_headers.data,
                  "date;host;x-amz-content-sha256;x-amz-date;"
                  "x-amz-storage-class");
    EXPECT_STR_EQ(o.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd7"
                               "7a1b5971af0ece108bd");
    sigv4_out_free(&o);
}

TEST(aws_get_bucket_list_example)
{
    struct sigv4_kv q[] = {{"prefix", "J"}, {"max-keys", "2"}};
    struct sigv4_kv h[] = EMPTY_BODY_HEADERS(HOST_EX, "20130524T000000Z");
    struct sigv4_request r = {"GET", "/", q, ARRAY_LEN(q), h, ARRAY_LEN(h)};

    expect_signed(&r, &aws_key, "/?max-keys=2&prefix=J",
                  "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db"
                  "6670ed5711ef69dc6f7");
}

TEST(aws_get_bucket_lifecycle_example_signs_empty_value)
{
    struct sigv4_kv q[] = {{"lifecycle", ""}};
    struct sigv4_kv h[] = EMPTY_BODY_HEADERS(HOST_EX, "20130524T000000Z");
    struct sigv4_request r = {"GET", "", q, 1, h, ARRAY_LEN(h)};

    expect_signed(&r, &aws_key, "/?lifecycle=",
                  "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f9"
                  "1ac7a200a0136783543");
}

TEST(put_of_key_with_equals_percent_plus_space_and_unicode)
{
    struct sigv4_kv h[] = {
        {"content-type", "application/x-ndjson"},
        {"host", "127.0.0.1:9000"},
        {"x-amz-date", "20261129T120000Z"},
        {"x-amz-content-sha256",
         "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}};
    struct sigv4_request r = {"PUT",
                              "/lake/tenant=a/100%+ x \xc3\xa9 "
                              "\xe6\x97\xa5\xe6\x9c\xac.jsonl",
                              NULL,
                              0,
                              h,
                              ARRAY_LEN(h)};

    expect_signed(&r, &queen_key,
                  "/lake/tenant%3Da/100%25%2B%20x%20%C3%A9%20"
                  "%E6%97%A5%E6%9C%AC.jsonl",
                  "1d3ff7c944638f336ea25e5af04e9c6007bbfe2b888b9"
                  "2daff6d227c1c1ecd20");
}

TEST(list_query_values_are_encoded_with_slash_and_sorted)
{
    struct sigv4_kv q[] = {
        {"list-type", "2"},
        {"prefix", "q=1/ \xc3\xa9+%\xe6\x97\xa5\xe6\x9c\xac/"},
        {"max-keys", "1000"},
        {"start-after", "a b"}};
    struct sigv4_kv h[] =
        EMPTY_BODY_HEADERS("127.0.0.1:9000", "20261129T120000Z");
    struct sigv4_request r = {"GET", "/lake", q, ARRAY_LEN(q), h, ARRAY_LEN(h)};

    expect_signed(&r, &queen_key,
                  "/lake?list-type=2&max-keys=1000&prefix=q%3D1%2F%20%C3%A9"
                  "%2B%25%E6%97%A5%E6%9C%AC%2F&start-after=a%20b",
                  "e12e92e56d51ede39eed5bcc07e7c62b594cdff61dc73"
                  "d1711aa05e6b05f5de5");
}

TEST(create_multipart_signs_uploads_with_an_equals_sign)
{
    struct sigv4_kv q[] = {{"uploads", ""}};
    struct sigv4_kv h[] =
        EMPTY_BODY_HEADERS("127.0.0.1:9000", "20261129T120000Z");
    struct sigv4_request r = {"POST", "/lake/k", q, 1, h, ARRAY_LEN(h)};

    expect_signed(&r, &queen_key, "/lake/k?uploads=",
                  "9bc0569bd76105e342163358e0b91d53552df2a3f685d"
                  "84243cfd63cfc27c270");
}

TEST(header_values_are_trimmed_and_duplicates_joined_in_order)
{
    struct sigv4_kv h[] = {{"X-Meta", "  b   c\t d  "},
                           {"host", "h"},
                           {"x-meta", "a"},
                           {"x-amz-date", "20261129T120000Z"},
                           {"x-amz-content-sha256", "UNSIGNED-PAYLOAD"}};
    struct sigv4_request r = {"GET", "/k", NULL, 0, h, ARRAY_LEN(h)};
    struct sigv4_out o;

    sign_ok(&r, &queen_key, &o);
    EXPECT_STR_EQ(o.canonical.data,
                  "GET\n/k\n\nhost:h\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n"
                  "x-amz-date:20261129T120000Z\nx-meta:b c d,a\n\n"
                  "host;x-amz-content-sha256;x-amz-date;x-meta\n"
                  "UNSIGNED-PAYLOAD");
    sigv4_out_free(&o);
}

TEST(missing_date_or_hash_or_host_is_refused)
{
    struct sigv4_kv no_date[] = {{"host", "h"},
                                 {"x-amz-content-sha256", SIGV4_EMPTY_SHA256}};
    struct sigv4_kv bad_date[] = {{"host", "h"},
                                  {"x-amz-date", "2026-11-29T12:00:00Z"},
                                  {"x-amz-content-sha256", "x"}};
    struct sigv4_kv no_host[] = {{"x-amz-date", "20261129T120000Z"},
                                 {"x-amz-content-sha256", "x"}};
    struct sigv4_request r = {"GET", "/", NULL, 0, no_date, 2};
    struct sigv4_out o;
    struct err err = {0};

    sigv4_out_init(&o);
    EXPECT_EQ_I64(sigv4_sign(&r, &queen_key, &o, &err), ERR_INVALID);
    r.headers = bad_date;
    r.n_headers = 3;
    EXPECT_EQ_I64(sigv4_sign(&r, &queen_key, &o, &err), ERR_INVALID);
    r.headers = no_host;
    r.n_headers = 2;
    EXPECT_EQ_I64(sigv4_sign(&r, &queen_key, &o, &err), ERR_INVALID);
    sigv4_out_free(&o);
}

TEST(uri_encode_keeps_unreserved_and_optionally_slash)
{
    struct buf b;
    struct err err = {0};

    buf_init(&b, 64);
    EXPECT_EQ_I64(sigv4_uri_encode(&b, "aZ09-._~/=%+ ", 13, true, &err), 0);
    EXPECT_STR_EQ(b.data, "aZ09-._~/%3D%25%2B%20");
    buf_reset(&b);
    EXPECT_EQ_I64(sigv4_uri_encode(&b, "a/b", 3, false, &err), 0);
    EXPECT_STR_EQ(b.data, "a%2Fb");
    buf_free(&b);
    buf_init(&b, 4);
    EXPECT_EQ_I64(sigv4_uri_encode(&b, "ab c", 4, true, &err), ERR_TOO_BIG);
    EXPECT_EQ_U64(b.len, 0);
    buf_free(&b);
}

TEST(amz_date_formats_unix_seconds)
{
    char d[17];

    sigv4_amz_date(1369353600, d); /* 2013-05-24T00:00:00Z */
    EXPECT_STR_EQ(d, "20130524T000000Z");
    sigv4_amz_date(1795953601, d);
    EXPECT_STR_EQ(d, "20261129T120001Z");
}

TEST(empty_query_names_and_values_sign_without_touching_null)
{
    struct sigv4_kv q[] = {{"", ""}, {"", ""}};
    struct sigv4_kv h[] = EMPTY_BODY_HEADERS("h", "20261129T120000Z");
    struct sigv4_request r = {"GET", "/k", q, 2, h, ARRAY_LEN(h)};
    struct sigv4_out o;

    sign_ok(&r, &queen_key, &o);
    EXPECT_STR_EQ(o.uri.data, "/k?=&=");
    sigv4_out_free(&o);
}
