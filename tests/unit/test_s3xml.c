/* Tests of the S3 answer scanner: UploadId, ETag, list pages, error
 * documents, entities decoded exactly once, truncated and hostile input. */
#include "harness.h"

#include "s3/xml.h"

#define FIND(doc, tag, rc_want, text_want)                             \
    do {                                                               \
        struct buf v_;                                                 \
        struct err e_ = {0};                                           \
        buf_init(&v_, 1 << 16);                                        \
        EXPECT_EQ_I64(s3xml_find((doc), strlen(doc), (tag), &v_, &e_), \
                      (rc_want));                                      \
        EXPECT_STR_EQ(v_.data == NULL ? "" : v_.data, (text_want));    \
        buf_free(&v_);                                                 \
    } while (0)

TEST(upload_id_is_found)
{
    FIND("<?xml version=\"1.0\"?><InitiateMultipartUploadResult xmlns=\"x\">"
         "<Bucket>lake</Bucket><Key>a</Key><UploadId>up-42</UploadId>"
         "</InitiateMultipartUploadResult>",
         "UploadId", 0, "up-42");
}

TEST(entities_are_decoded_once)
{
    FIND("<ETag>&quot;abc&quot;</ETag>", "ETag", 0, "\"abc\"");
    FIND("<ETag>&#34;abc&#x22;</ETag>", "ETag", 0, "\"abc\"");
    FIND("<Key>a&amp;amp;b &lt;&gt;&apos;</Key>", "Key", 0, "a&amp;b <>'");
    FIND("<Key>&#233;&#x65E5;&#x1F600;</Key>", "Key", 0,
         "\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80");
}

TEST(unknown_or_broken_entities_stay_literal)
{
    FIND("<Key>a&nbsp;b&#;c&#xZZ;&#0;&#xD800;&</Key>", "Key", 0,
         "a&nbsp;b&#;c&#xZZ;&#0;&#xD800;&");
}

TEST(a_tag_matches_only_its_exact_name)
{
    FIND("<KeyCount>2</KeyCount><Key>x</Key>", "Key", 0, "x");
    FIND("<Key attr=\"1\">y</Key>", "Key", 0, "y");
    FIND("<Key/><Key>z</Key>", "Key", 0, "");
    FIND("<KeyCount>2</KeyCount>", "Key", ERR_NOT_FOUND, "");
}

TEST(truncated_documents_lack_the_cut_element)
{
    FIND("<UploadId>up-4", "UploadId", ERR_NOT_FOUND, "");
    FIND("<UploadId", "UploadId", ERR_NOT_FOUND, "");
    FIND("<Upload", "UploadId", ERR_NOT_FOUND, "");
    FIND("", "UploadId", ERR_NOT_FOUND, "");
}

TEST(error_document_gives_code_and_message)
{
    const char *doc = "<Error><Code>SlowDown</Code><Message>Please reduce "
                      "your request rate.</Message><RequestId>1</RequestId>"
                      "</Error>";
    struct buf code;
    struct buf msg;

    buf_init(&code, 4096);
    buf_init(&msg, 4096);
    EXPECT(s3xml_error(doc, strlen(doc), &code, &msg));
    EXPECT_STR_EQ(code.data, "SlowDown");
    EXPECT_STR_EQ(msg.data, "Please reduce your request rate.");
    EXPECT(!s3xml_error("<CompleteMultipartUploadResult><ETag>x</ETag>", 45,
                        &code, &msg));
    buf_free(&code);
    buf_free(&msg);
}

TEST(list_page_gives_keys_and_truncation)
{
    const char *doc =
        "<ListBucketResult><Name>lake</Name><Prefix>q/</Prefix>"
        "<KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
        "<IsTruncated>true</IsTruncated>"
        "<Contents><Key>q/a&amp;b</Key><Size>3</Size></Contents>"
        "<Contents><Key>q/\xc3\xa9 x</Key><Size>4</Size></Contents>"
        "</ListBucketResult>";
    struct s3xml_list l;
    struct err err = {0};

    EXPECT_EQ_I64(s3xml_parse_list(doc, strlen(doc), &l, &err), 0);
    EXPECT_EQ_U64(l.n_keys, 2);
    if (l.n_keys == 2) {
        EXPECT_STR_EQ(l.keys[0], "q/a&b");
        EXPECT_STR_EQ(l.keys[1], "q/\xc3\xa9 x");
    }
    EXPECT(l.is_truncated);
    s3xml_list_free(&l);
    doc = "<ListBucketResult><IsTruncated>false</IsTruncated>"
          "</ListBucketResult>";
    EXPECT_EQ_I64(s3xml_parse_list(doc, strlen(doc), &l, &err), 0);
    EXPECT_EQ_U64(l.n_keys, 0);
    EXPECT(!l.is_truncated);
    s3xml_list_free(&l);
}

TEST(a_value_over_the_cap_is_too_big)
{
    size_t n = S3XML_MAX_VALUE + 100;
    char *doc = malloc(n + 20);
    struct buf v;
    struct err err = {0};

    memcpy(doc, "<Key>", 5);
    memset(doc + 5, 'a', n);
    memcpy(doc + 5 + n, "</Key>", 7);
    buf_init(&v, BUF_UNLIMITED);
    EXPECT_EQ_I64(s3xml_find(doc, strlen(doc), "Key", &v, &err), ERR_TOO_BIG);
    buf_free(&v);
    free(doc);
}

TEST(unquote_strips_one_pair_of_quotes)
{
    struct buf b;
    struct err err = {0};

    buf_init(&b, 64);
    buf_append_str(&b, "\"abc-3\"", &err);
    s3xml_unquote(&b);
    EXPECT_STR_EQ(b.data, "abc-3");
    s3xml_unquote(&b);
    EXPECT_STR_EQ(b.data, "abc-3");
    buf_reset(&b);
    buf_append_str(&b, "\"", &err);
    s3xml_unquote(&b);
    EXPECT_STR_EQ(b.data, "\"");
    buf_free(&b);
}
