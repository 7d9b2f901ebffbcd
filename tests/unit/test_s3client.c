/* Tests of the S3 client over a scripted fake transport (the cases of
 * docs/design/scenarios.md §8 that apply), plus the pure pieces it
 * stands on: retry decisions, endpoint refusals and the counter table.
 * No network: the fake answers from a script and records every request;
 * the fake clock records every wait instead of sleeping. */
#include "harness.h"

#include <pthread.h>

#include "base/sha256.h"
#include "s3/client.h"
#include "s3/sigv4.h"

/* ---- the fake transport and clock -------------------------------------- */

struct answer {
    int rc; /* 0, or ERR_IO / ERR_TIMEOUT for a transport failure */
    int status;
    const char *etag;
    const char *body;
    int64_t retry_after_ms;
    int64_t content_length;
};

struct seen {
    char method[16];
    char url[1024];
    char headers[4096]; /* "name: value\n" lines */
    char body[1024];
    size_t body_len;
    long timeout_ms;
    bool is_fresh_connection;
};

#define MAX_SEEN 64

struct fake {
    const struct answer *script;
    size_t n_script;
    size_t next;        /* past the script: 200 with no body */
    uint64_t unreached; /* bit i: script[i] failed before connecting */
    struct seen seen[MAX_SEEN];
    size_t n_seen;
    uint64_t waits[MAX_SEEN];
    size_t n_waits;
    int hook_calls[8];
    int n_hook;
    int64_t mono_ms; /* the fake monotonic clock, moved by the waits */
};

static int fake_perform(void *arg, const struct s3_http_request *req,
                        struct s3_http_answer *ans, struct err *err)
{
    struct fake *f = arg;
    struct answer a = {0, 200, NULL, NULL, -1, -1};
    struct seen *s = &f->seen[f->n_seen < MAX_SEEN ? f->n_seen : 0];
    size_t off = 0;

    if (f->next < f->n_script) {
        a = f->script[f->next];
    }
    ans->is_unreached = f->next < 64 && (f->unreached >> f->next & 1) != 0;
    f->next++;
    f->n_seen++;
    snprintf(s->method, sizeof(s->method), "%s", req->method);
    snprintf(s->url, sizeof(s->url), "%s", req->url);
    s->headers[0] = '\0';
    for (size_t i = 0; i < req->n_headers; i++) {
        off += (size_t)snprintf(s->headers + off, sizeof(s->headers) - off,
                                "%s\n", req->headers[i]);
    }
    s->body_len = req->body_len;
    s->timeout_ms = req->timeout_ms;
    s->is_fresh_connection = req->is_fresh_connection;
    snprintf(s->body, sizeof(s->body), "%.*s", (int)req->body_len,
             req->body == NULL ? "" : (const char *)req->body);
    buf_reset(ans->body);
    if (a.rc != 0) {
        return err_set(err, a.rc, "scripted failure");
    }
    ans->status = a.status;
    snprintf(ans->etag, sizeof(ans->etag), "%s", a.etag ? a.etag : "");
    ans->retry_after_ms = a.retry_after_ms;
    ans->content_length = a.content_length;
    if (a.body != NULL && buf_append_str(ans->body, a.body, err) != 0) {
        return err->code;
    }
    return 0;
}

static int64_t fake_now(void *arg)
{
    UNUSED(arg);
    return 1795953600; /* 2026-11-29T12:00:00Z */
}

static void fake_sleep(void *arg, uint64_t ms)
{
    struct fake *f = arg;

    if (f->n_waits < MAX_SEEN) {
        f->waits[f->n_waits++] = ms;
    }
    f->mono_ms += (int64_t)ms;
}

static int64_t fake_mono(void *arg)
{
    struct fake *f = arg;

    return f->mono_ms;
}

static double fake_random(void *arg)
{
    UNUSED(arg);
    return 0.0; /* the shortest jittered wait: step / 10 */
}

static void hook(void *arg, int part_done)
{
    struct fake *f = arg;

    if (f->n_hook < 8) {
        f->hook_calls[f->n_hook++] = part_done;
    }
}

/* A client on the scripted fake, and what its calls answer. */
struct rig {
    struct fake f;
    struct s3_transport t;
    struct s3_clock clock;
    struct s3_client *c;
    struct s3_put_result res;
    struct s3_object_info info;
    struct s3_status st;
    struct err err;
};

/* The defaults, with bucket "lake" path-style at url in us-east-1. */
static void lake_config(struct s3_config *cfg, const char *url)
{
    struct err err = {0};

    s3_config_defaults(cfg);
    s3_endpoint_parse(&cfg->ep, "QUEEN_S3_ENDPOINT", url, "QUEEN_S3_PREFIX",
                      &err);
    s3_endpoint_set_bucket(&cfg->ep, "QUEEN_S3_BUCKET", "lake",
                           "QUEEN_S3_PREFIX", &err);
    cfg->ep.path_style = true;
    strcpy(cfg->region, "us-east-1");
}

static void rig_open(struct rig *r, const struct answer *script, size_t n,
                     void (*tune)(struct s3_config *))
{
    struct s3_config cfg;

    memset(r, 0, sizeof(*r));
    r->f.script = script;
    r->f.n_script = n;
    r->t = (struct s3_transport){fake_perform, &r->f};
    r->clock =
        (struct s3_clock){fake_now, fake_sleep, fake_random, &r->f, fake_mono};
    r->f.mono_ms = 5000000;
    lake_config(&cfg, "http://127.0.0.1:9000");
    strcpy(cfg.access_key, "queen");
    strcpy(cfg.secret_key, "queen-secret-key");
    if (tune != NULL) {
        tune(&cfg);
    }
    r->c = s3_client_new(&cfg, &r->t, &r->clock);
}

static void rig_close(struct rig *r)
{
    s3_client_free(r->c);
}

static bool has_header(const struct seen *s, const char *line)
{
    return strstr(s->headers, line) != NULL;
}

/* PUT body at key through r's client, into r->res and r->err. */
static int rig_put(struct rig *r, const char *key, const char *body)
{
    struct s3_put p = {key,  body,  strlen(body), "application/x-ndjson",
                       hook, &r->f, NULL,         NULL,
                       NULL};

    return s3_client_put(r->c, &p, &r->res, &r->err);
}

#define MD5_HELLO "5d41402abc4b2a76b9719d911017c592" /* md5("hello") */

/* ---- single PUT --------------------------------------------------------- */

TEST(path_style_put_has_the_wire_shape_of_reference_4_9)
{
    struct answer a[] = {{0, 200, "\"" MD5_HELLO "\"", NULL, -1, -1}};
    struct rig r;

    rig_open(&r, a, 1, NULL);
    EXPECT_EQ_I64(rig_put(&r, "queen/a b=1.jsonl", "hello"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    EXPECT_STR_EQ(r.f.seen[0].method, "PUT");
    EXPECT_STR_EQ(r.f.seen[0].url,
                  "http://127.0.0.1:9000/lake/queen/a%20b%3D1.jsonl");
    EXPECT(has_header(&r.f.seen[0], "Host: 127.0.0.1:9000\n"));
    EXPECT(has_header(&r.f.seen[0], "x-amz-date: 20261129T120000Z\n"));
    EXPECT(has_header(&r.f.seen[0], "x-amz-content-sha256: 2cf24dba5fb0a30e"
                                    "26e83b2ac5b9e29e1b161e5c1fa7425e7304336"
                                    "2938b9824\n"));
    EXPECT(has_header(&r.f.seen[0], "content-md5: XUFAKrxLKna5cZ2REBfFkg==\n"));
    EXPECT(has_header(&r.f.seen[0], "content-type: application/x-ndjson\n"));
    EXPECT(has_header(&r.f.seen[0],
                      "Authorization: AWS4-HMAC-SHA256 Credential=queen/"
                      "20261129/us-east-1/s3/aws4_request, SignedHeaders="
                      "content-md5;content-type;host;x-amz-content-sha256;"
                      "x-amz-date, Signature="));
    EXPECT(!has_header(&r.f.seen[0], "queen-secret-key"));
    EXPECT_STR_EQ(r.f.seen[0].body, "hello");
    EXPECT_STR_EQ(r.res.etag, MD5_HELLO);
    EXPECT(!r.res.is_multipart);
    EXPECT_EQ_I64(r.res.st.attempts, 1);
    rig_close(&r);
}

static void virtual_host(struct s3_config *cfg)
{
    cfg->ep.path_style = false;
    strcpy(cfg->ep.authority, "s3.test:9000");
    strcpy(cfg->ep.host, "s3.test");
}

TEST(virtual_host_put_goes_to_the_bucket_host)
{
    struct rig r;

    rig_open(&r, NULL, 0, virtual_host);
    EXPECT_EQ_I64(rig_put(&r, "queen/a.jsonl", "hello"), 0);
    EXPECT_STR_EQ(r.f.seen[0].url, "http://lake.s3.test:9000/queen/a.jsonl");
    EXPECT(has_header(&r.f.seen[0], "Host: lake.s3.test:9000\n"));
    rig_close(&r);
}

static void sse_kms(struct s3_config *cfg)
{
    cfg->sse = S3_SSE_KMS;
    strcpy(cfg->kms_key_id, "key-7");
    cfg->multipart_threshold = 8;
    cfg->part_size = 4;
    cfg->part_concurrency = 1;
}

static void sse_aes(struct s3_config *cfg)
{
    cfg->sse = S3_SSE_AES256;
}

/* Scripted answers: a 200 with no body, and parts 1 to 3 answered with
 * the ETags "e1" to "e3". */
#define OK_200                     \
    {                              \
        0, 200, NULL, NULL, -1, -1 \
    }
#define THREE_PARTS_OK                                                  \
    {0, 200, "\"e1\"", NULL, -1, -1}, {0, 200, "\"e2\"", NULL, -1, -1}, \
    {                                                                   \
        0, 200, "\"e3\"", NULL, -1, -1                                  \
    }

TEST(sse_headers_are_sent_exactly_as_configured)
{
    struct answer up[] = {{0, 200, NULL,
                           "<InitiateMultipartUploadResult><UploadId>up-42"
                           "</UploadId></InitiateMultipartUploadResult>",
                           -1, -1},
                          THREE_PARTS_OK,
                          {0, 200, NULL, "<ETag>x-3</ETag>", -1, -1}};
    struct rig r;

    rig_open(&r, NULL, 0, sse_aes);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT(has_header(&r.f.seen[0], "x-amz-server-side-encryption: AES256\n"));
    EXPECT(!has_header(&r.f.seen[0], "kms-key-id"));
    rig_close(&r);
    rig_open(&r, up, ARRAY_LEN(up), sse_kms);
    EXPECT_EQ_I64(rig_put(&r, "k", "0123456789"), 0);
    EXPECT(has_header(&r.f.seen[0], "x-amz-server-side-encryption: aws:kms\n"));
    EXPECT(has_header(&r.f.seen[0],
                      "x-amz-server-side-encryption-aws-kms-key-id: key-7\n"));
    EXPECT(!has_header(&r.f.seen[1], "x-amz-server-side-encryption"));
    rig_close(&r);
}

/* SSE-KMS (asked for, or the bucket's default) answers a 32-hex ETag that
 * is no MD5: the PUT succeeded, and the service checked the Content-MD5. */
TEST(a_put_etag_that_is_not_the_md5_is_a_success)
{
    struct answer kms[] = {
        {0, 200, "\"00000000000000000000000000000000\"", NULL, -1, -1}};
    struct answer opaque[] = {{0, 200, "\"kms-opaque-etag\"", NULL, -1, -1}};
    struct rig r;

    rig_open(&r, kms, 1, sse_kms);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    EXPECT_STR_EQ(r.res.etag, "00000000000000000000000000000000");
    EXPECT(has_header(&r.f.seen[0], "content-md5: XUFAKrxLKna5cZ2REBfFkg==\n"));
    rig_close(&r);
    rig_open(&r, kms, 1, NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    rig_close(&r);
    rig_open(&r, opaque, 1, NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_STR_EQ(r.res.etag, "kms-opaque-etag");
    rig_close(&r);
}

/* ---- multipart ------------------------------------------------------------
 */

static void small_parts(struct s3_config *cfg)
{
    cfg->multipart_threshold = 8;
    cfg->part_size = 4;
    cfg->part_concurrency = 1; /* the scripted fake answers in order */
}

/* Open r with small parts on script a[0..n-1] and PUT the ten bytes
 * "0123456789" at "k": three parts of 4, 4 and 2 bytes. */
static int rig_put_parts(struct rig *r, const struct answer *a, size_t n)
{
    rig_open(r, a, n, small_parts);
    return rig_put(r, "k", "0123456789");
}

#define CREATE_OK(id)                                                          \
    {                                                                          \
        0, 200, NULL,                                                          \
            "<InitiateMultipartUploadResult><Bucket>lake</Bucket><Key>k</Key>" \
            "<UploadId>" id "</UploadId></InitiateMultipartUploadResult>",     \
            -1, -1                                                             \
    }

TEST(multipart_sends_parts_completes_and_calls_the_hook_between_parts)
{
    struct answer a[] = {
        CREATE_OK("up-42"),
        THREE_PARTS_OK,
        {0, 200, NULL,
         "<CompleteMultipartUploadResult><ETag>&quot;deadbeef-3&quot;</ETag>"
         "</CompleteMultipartUploadResult>",
         -1, -1}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, a, ARRAY_LEN(a)), 0);
    EXPECT_EQ_U64(r.f.n_seen, 5);
    EXPECT_STR_EQ(r.f.seen[0].method, "POST");
    EXPECT_STR_EQ(r.f.seen[0].url, "http://127.0.0.1:9000/lake/k?uploads=");
    EXPECT(has_header(&r.f.seen[0], "content-type: application/x-ndjson\n"));
    EXPECT_STR_EQ(r.f.seen[1].url, "http://127.0.0.1:9000/lake/k?partNumber=1"
                                   "&uploadId=up-42");
    EXPECT_STR_EQ(r.f.seen[1].body, "0123");
    EXPECT_STR_EQ(r.f.seen[2].body, "4567");
    EXPECT_STR_EQ(r.f.seen[3].url, "http://127.0.0.1:9000/lake/k?partNumber=3"
                                   "&uploadId=up-42");
    EXPECT_STR_EQ(r.f.seen[3].body, "89");
    EXPECT_STR_EQ(r.f.seen[4].method, "POST");
    EXPECT_STR_EQ(r.f.seen[4].url, "http://127.0.0.1:9000/lake/k?uploadId="
                                   "up-42");
    EXPECT(has_header(&r.f.seen[4], "content-type: application/xml\n"));
    EXPECT_STR_EQ(r.f.seen[4].body,
                  "<CompleteMultipartUpload>"
                  "<Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag></Part>"
                  "<Part><PartNumber>2</PartNumber><ETag>\"e2\"</ETag></Part>"
                  "<Part><PartNumber>3</PartNumber><ETag>\"e3\"</ETag></Part>"
                  "</CompleteMultipartUpload>");
    EXPECT_STR_EQ(r.res.etag, "deadbeef-3");
    EXPECT(r.res.is_multipart);
    EXPECT_EQ_I64(r.res.parts, 3);
    EXPECT_EQ_I64(r.f.n_hook, 2);
    EXPECT_EQ_I64(r.f.hook_calls[0], 1);
    EXPECT_EQ_I64(r.f.hook_calls[1], 2);
    rig_close(&r);
}

TEST(bad_put_arguments_are_refused_before_any_request)
{
    struct rig r;
    struct s3_put p = {"k",  "x",  1,   "text/plain\r\nX-Evil: 1", NULL, NULL,
                       NULL, NULL, NULL};

    rig_open(&r, NULL, 0, NULL);
    EXPECT_EQ_I64(s3_client_put(r.c, &p, &r.res, &r.err), ERR_INVALID);
    p.content_type = "text/plain";
    p.key = "";
    EXPECT_EQ_I64(s3_client_put(r.c, &p, &r.res, &r.err), ERR_INVALID);
    EXPECT_EQ_U64(r.f.n_seen, 0);
    rig_close(&r);
}

TEST(a_body_at_the_threshold_is_a_single_put)
{
    struct rig r;

    rig_open(&r, NULL, 0, small_parts);
    EXPECT_EQ_I64(rig_put(&r, "k", "01234567"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    EXPECT_STR_EQ(r.f.seen[0].method, "PUT");
    rig_close(&r);
}

static void complete_answer_fails(const char *complete_body, const char *want)
{
    struct answer a[] = {CREATE_OK("up-1"),
                         THREE_PARTS_OK,
                         {0, 200, NULL, complete_body, -1, -1},
                         {0, 204, NULL, NULL, -1, -1}};
    struct rig r;

    EXPECT(rig_put_parts(&r, a, ARRAY_LEN(a)) != 0);
    EXPECT(strstr(r.err.msg, want) != NULL);
    EXPECT_EQ_U64(r.f.n_seen, 6); /* not retried, then aborted */
    EXPECT_STR_EQ(r.f.seen[5].method, "DELETE");
    EXPECT_STR_EQ(r.f.seen[5].url, "http://127.0.0.1:9000/lake/k?uploadId="
                                   "up-1");
    rig_close(&r);
}

TEST(a_part_count_mismatch_is_an_integrity_failure)
{
    complete_answer_fails("<CompleteMultipartUploadResult><ETag>\"abc-2\""
                          "</ETag></CompleteMultipartUploadResult>",
                          "integrity:");
}

TEST(an_escaped_completion_etag_is_still_checked)
{
    complete_answer_fails("<ETag>&quot;abc-2&quot;</ETag>", "integrity:");
    complete_answer_fails("<ETag>&#34;abc-4&#34;</ETag>", "abc-4");
}

#define NO_SUCH_UPLOAD                                                       \
    {                                                                        \
        0, 404, NULL,                                                        \
            "<Error><Code>NoSuchUpload</Code><Message>The specified upload " \
            "does not exist.</Message></Error>",                             \
            -1, -1                                                           \
    }

/* The upload succeeded on what the HEAD of k (request `at`, the last one)
 * found: its ETag, no failure. */
static void expect_completed_by_head(const struct rig *r, size_t at,
                                     const char *etag)
{
    EXPECT_EQ_U64(r->f.n_seen, at + 1);
    EXPECT_STR_EQ(r->f.seen[at].method, "HEAD");
    EXPECT_STR_EQ(r->f.seen[at].url, "http://127.0.0.1:9000/lake/k");
    EXPECT_STR_EQ(r->res.etag, etag);
    EXPECT_EQ_I64(r->res.st.kind, S3_FAIL_NONE);
}

/* The first Complete's answer is lost (a transport failure after the
 * service acted), the retry answers 404 NoSuchUpload: the client HEADs the
 * key and takes an object of our size and multipart ETag as completed. */
TEST(a_retried_complete_that_finds_no_upload_heads_the_object)
{
    /* Part ETags e1..e3 are opaque: only the "-3" of the final ETag can be
     * checked. */
    struct answer a[] = {CREATE_OK("up-5"),
                         THREE_PARTS_OK,
                         {ERR_IO, 0, NULL, NULL, -1, -1},
                         NO_SUCH_UPLOAD,
                         {0, 200, "\"feed-3\"", NULL, -1, 10}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, a, ARRAY_LEN(a)), 0);
    expect_completed_by_head(&r, 6, "feed-3");
    rig_close(&r);
}

/* Part ETags that are MD5s pin the final ETag exactly: md5 of the three
 * binary MD5s, "-3". An object of another size or ETag is not ours. */
TEST(a_lost_complete_is_taken_only_for_our_size_and_multipart_etag)
{
#define MD5_0123 "\"eb62f6b9306db575c2d596b1279627a4\""
#define MD5_4567 "\"c3c4dd1d3f2e1a0a6f2e5c6e3a1d2f4e\""
#define MD5_89   "\"d3d9446802a44259755d38e6d163e820\""
#define PARTS_MD5                                                       \
    {0, 200, MD5_0123, NULL, -1, -1}, {0, 200, MD5_4567, NULL, -1, -1}, \
        {0, 200, MD5_89, NULL, -1, -1}
    uint8_t bin[48];
    uint8_t d[16];
    char hex[33];
    char plain[40];
    char want[48];
    const char *parts[] = {MD5_0123, MD5_4567, MD5_89};

    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 16; j++) {
            unsigned v = 0;
            sscanf(parts[i] + 1 + 2 * j, "%2x", &v);
            bin[i * 16 + j] = (uint8_t)v;
        }
    }
    md5(bin, sizeof(bin), d);
    hex_lower(d, 16, hex);
    snprintf(plain, sizeof(plain), "%s-3", hex);
    snprintf(want, sizeof(want), "\"%s\"", plain);

    struct answer ok[] = {CREATE_OK("up-6"),
                          PARTS_MD5,
                          {ERR_IO, 0, NULL, NULL, -1, -1},
                          NO_SUCH_UPLOAD,
                          {0, 200, want, NULL, -1, 10}};
    struct answer other_etag[] = {
        CREATE_OK("up-6"),
        PARTS_MD5,
        {ERR_IO, 0, NULL, NULL, -1, -1},
        NO_SUCH_UPLOAD,
        {0, 200, "\"0123456789abcdef0123456789abcdef-3\"", NULL, -1, 10}};
    struct answer other_size[] = {CREATE_OK("up-6"),
                                  PARTS_MD5,
                                  {ERR_IO, 0, NULL, NULL, -1, -1},
                                  NO_SUCH_UPLOAD,
                                  {0, 200, want, NULL, -1, 11}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, ok, ARRAY_LEN(ok)), 0);
    EXPECT_EQ_U64(r.f.n_seen, 7);
    EXPECT_STR_EQ(r.res.etag, plain);
    rig_close(&r);

    EXPECT_EQ_I64(rig_put_parts(&r, other_etag, ARRAY_LEN(other_etag)),
                  ERR_REMOTE);
    EXPECT(strstr(r.err.msg, "NoSuchUpload") != NULL);
    EXPECT_STR_EQ(r.f.seen[6].method, "HEAD");
    EXPECT_STR_EQ(r.f.seen[7].method, "DELETE"); /* aborted as before */
    rig_close(&r);

    EXPECT_EQ_I64(rig_put_parts(&r, other_size, ARRAY_LEN(other_size)),
                  ERR_REMOTE);
    EXPECT_STR_EQ(r.f.seen[6].method, "HEAD");
    rig_close(&r);
#undef PARTS_MD5
#undef MD5_0123
#undef MD5_4567
#undef MD5_89
}

/* Ceph RGW 16.2 completes with an empty <ETag> (HEAD shows the object's
 * "-N" one), and an answer may carry none: the client HEADs the key and
 * takes the object only at our size and multipart ETag; anything else
 * there, or nothing, is a retriable integrity failure. */
#define COMPLETE_NO_ETAG(body)     \
    {                              \
        0, 200, NULL, body, -1, -1 \
    }
#define ABORT_OK                   \
    {                              \
        0, 204, NULL, NULL, -1, -1 \
    }

static void complete_without_etag_heads(const char *complete_body)
{
    struct answer ok[] = {CREATE_OK("up-7"),
                          THREE_PARTS_OK,
                          COMPLETE_NO_ETAG(complete_body),
                          {0, 200, "\"feed-3\"", NULL, -1, 10}};
    struct answer other[] = {CREATE_OK("up-7"),
                             THREE_PARTS_OK,
                             COMPLETE_NO_ETAG(complete_body),
                             {0, 200, "\"feed-2\"", NULL, -1, 10},
                             ABORT_OK};
    struct answer shorter[] = {CREATE_OK("up-7"),
                               THREE_PARTS_OK,
                               COMPLETE_NO_ETAG(complete_body),
                               {0, 200, "\"feed-3\"", NULL, -1, 9},
                               ABORT_OK};
    struct answer absent[] = {CREATE_OK("up-7"),
                              THREE_PARTS_OK,
                              COMPLETE_NO_ETAG(complete_body),
                              {0, 404, NULL, NULL, -1, -1},
                              ABORT_OK};
    struct answer *bad[] = {other, shorter, absent};
    size_t n_bad[] = {ARRAY_LEN(other), ARRAY_LEN(shorter), ARRAY_LEN(absent)};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, ok, ARRAY_LEN(ok)), 0);
    expect_completed_by_head(&r, 5, "feed-3");
    rig_close(&r);
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        EXPECT_EQ_I64(rig_put_parts(&r, bad[i], n_bad[i]), ERR_CORRUPT);
        EXPECT(strstr(r.err.msg, "integrity:") != NULL);
        EXPECT(strstr(r.err.msg, "answered no ETag") != NULL);
        EXPECT_STR_EQ(r.f.seen[5].method, "HEAD");
        EXPECT_EQ_I64(r.res.st.kind, S3_FAIL_INTEGRITY);
        EXPECT(r.res.st.is_retriable);
        rig_close(&r);
    }
}

TEST(a_complete_without_an_etag_heads_the_object)
{
    complete_without_etag_heads("<CompleteMultipartUploadResult><ETag></ETag>"
                                "</CompleteMultipartUploadResult>");
    complete_without_etag_heads("<CompleteMultipartUploadResult><Key>k</Key>"
                                "</CompleteMultipartUploadResult>");
}
#undef COMPLETE_NO_ETAG

/* A 404 NoSuchUpload on the first attempt is the upload gone, not a lost
 * answer: no HEAD, the failure stands. */
TEST(a_first_complete_that_finds_no_upload_is_a_failure)
{
    struct answer a[] = {CREATE_OK("up-7"),
                         THREE_PARTS_OK,
                         NO_SUCH_UPLOAD,
                         {0, 200, "\"feed-3\"", NULL, -1, 10}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, a, ARRAY_LEN(a)), ERR_REMOTE);
    EXPECT(strstr(r.err.msg, "NoSuchUpload") != NULL);
    EXPECT_STR_EQ(r.f.seen[5].method, "DELETE");
    rig_close(&r);
}

#define COMPLETE_200_ERROR(code)                                      \
    {                                                                 \
        0, 200, NULL,                                                 \
            "<Error><Code>" code "</Code><Message>We encountered an " \
            "internal error.</Message></Error>",                      \
            -1, -1                                                    \
    }

/* AWS documents a 200 carrying an <Error> document for Complete: not a
 * success. A passing code (InternalError, SlowDown...) is tried again like
 * a 5xx; another code is final. */
TEST(a_200_carrying_a_passing_error_is_retried_like_a_5xx)
{
    struct answer a[] = {
        CREATE_OK("up-1"),
        THREE_PARTS_OK,
        COMPLETE_200_ERROR("InternalError"),
        COMPLETE_200_ERROR("SlowDown"),
        {0, 200, NULL,
         "<CompleteMultipartUploadResult><ETag>\"abc-3\"</ETag>"
         "</CompleteMultipartUploadResult>",
         -1, -1}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, a, ARRAY_LEN(a)), 0);
    EXPECT_EQ_U64(r.f.n_seen, 7);
    EXPECT_STR_EQ(r.f.seen[6].method, "POST");
    EXPECT_STR_EQ(r.f.seen[6].url, "http://127.0.0.1:9000/lake/k?uploadId="
                                   "up-1");
    EXPECT_STR_EQ(r.res.etag, "abc-3");
    EXPECT_EQ_I64(r.res.st.attempts, 3);
    EXPECT_EQ_I64(r.res.st.kind, S3_FAIL_NONE);
    rig_close(&r);
}

/* The first Complete was carried out and answered 200 InternalError all
 * the same: the retry finds no upload, and the HEAD finds our object. */
TEST(a_complete_carried_out_behind_a_200_error_is_found_by_head)
{
    struct answer a[] = {CREATE_OK("up-5"),
                         THREE_PARTS_OK,
                         COMPLETE_200_ERROR("InternalError"),
                         NO_SUCH_UPLOAD,
                         {0, 200, "\"feed-3\"", NULL, -1, 10}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, a, ARRAY_LEN(a)), 0);
    expect_completed_by_head(&r, 6, "feed-3");
    rig_close(&r);
}

TEST(a_200_carrying_a_final_error_is_not_retried)
{
    struct answer a[] = {CREATE_OK("up-1"), THREE_PARTS_OK,
                         COMPLETE_200_ERROR("InvalidPart"), ABORT_OK};
    struct rig r;

    complete_answer_fails("<Error><Code>AccessDenied</Code><Message>no"
                          "</Message></Error>",
                          "status 200: AccessDenied: no");
    EXPECT(rig_put_parts(&r, a, ARRAY_LEN(a)) != 0);
    EXPECT_EQ_I64(r.res.st.status, 200);
    EXPECT_STR_EQ(r.res.st.code, "InvalidPart");
    EXPECT(!r.res.st.is_retriable);
    EXPECT_EQ_U64(r.f.n_seen, 6);
    EXPECT_STR_EQ(r.f.seen[5].method, "DELETE");
    rig_close(&r);
}
#undef COMPLETE_200_ERROR
#undef ABORT_OK

TEST(a_403_on_part_1_is_not_retried_and_the_upload_is_aborted)
{
    struct answer a[] = {
        CREATE_OK("up-9"),
        {0, 403, NULL,
         "<Error><Code>AccessDenied</Code><Message>no</Message></Error>", -1,
         -1},
        {0, 204, NULL, NULL, -1, -1}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, a, ARRAY_LEN(a)), ERR_REMOTE);
    EXPECT_EQ_I64(r.res.st.status, 403);
    EXPECT(!r.res.st.is_retriable);
    EXPECT_STR_EQ(r.res.st.code, "AccessDenied");
    EXPECT_EQ_U64(r.f.n_seen, 3);
    EXPECT_STR_EQ(r.f.seen[2].method, "DELETE");
    EXPECT(strstr(r.err.msg, "status 403: AccessDenied") != NULL);
    rig_close(&r);
}

/* The first Create's answer was cut short, so its upload may exist: once
 * the second one is completed, the uploads left at the key are listed and
 * aborted (an upload at another key is not ours). */
TEST(truncated_create_answer_is_retried_as_a_body_failure)
{
    struct answer a[] = {
        {0, 200, NULL, "<InitiateMultipartUploadResult><UploadId>up-", -1, -1},
        CREATE_OK("up-2"),
        THREE_PARTS_OK,
        {0, 200, NULL, "<ETag>\"z-3\"</ETag>", -1, -1},
        {0, 200, NULL,
         "<ListMultipartUploadsResult><Upload><Key>k</Key><UploadId>up-1"
         "</UploadId></Upload><Upload><Key>k2</Key><UploadId>up-9</UploadId>"
         "</Upload></ListMultipartUploadsResult>",
         -1, -1},
        {0, 204, NULL, NULL, -1, -1}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, a, ARRAY_LEN(a)), 0);
    EXPECT_EQ_U64(r.f.n_seen, 8);
    EXPECT(strstr(r.f.seen[2].url, "uploadId=up-2") != NULL);
    EXPECT_EQ_U64(
        s3_metrics_get(s3_client_metrics(r.c), S3_OP_MULTIPART_CREATE, 200), 2);
    EXPECT_STR_EQ(r.f.seen[6].method, "GET");
    EXPECT(strstr(r.f.seen[6].url, "uploads") != NULL);
    EXPECT_STR_EQ(r.f.seen[7].method, "DELETE");
    EXPECT_STR_EQ(r.f.seen[7].url,
                  "http://127.0.0.1:9000/lake/k?uploadId=up-1");
    EXPECT_STR_EQ(r.res.etag, "z-3");
    rig_close(&r);
}

static void small_parts_one_try(struct s3_config *cfg)
{
    small_parts(cfg);
    cfg->max_attempts = 1;
}

#define COMPLETE_OK                                  \
    {                                                \
        0, 200, NULL, "<ETag>\"z-3\"</ETag>", -1, -1 \
    }

/* A Create sent once whose answer was lost (no retry was left) may have
 * made an upload: the put fails, and the next put of the key that lands
 * lists the key's uploads and aborts what is left. A put after that lists
 * nothing: the key is clean. */
TEST(a_create_whose_only_answer_was_lost_is_cleaned_by_the_next_landed_put)
{
    struct answer a[] = {
        {ERR_IO, 0, NULL, NULL, -1, -1},
        CREATE_OK("up-2"),
        THREE_PARTS_OK,
        COMPLETE_OK,
        {0, 200, NULL,
         "<ListMultipartUploadsResult><Upload><Key>k</Key><UploadId>up-1"
         "</UploadId></Upload></ListMultipartUploadsResult>",
         -1, -1},
        {0, 204, NULL, NULL, -1, -1},
        CREATE_OK("up-3"),
        THREE_PARTS_OK,
        COMPLETE_OK};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), small_parts_one_try);
    EXPECT(rig_put(&r, "k", "0123456789") != 0);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    EXPECT_EQ_I64(rig_put(&r, "k", "0123456789"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 8);
    EXPECT_STR_EQ(r.f.seen[6].method, "GET");
    EXPECT(strstr(r.f.seen[6].url, "uploads") != NULL);
    EXPECT_STR_EQ(r.f.seen[7].method, "DELETE");
    EXPECT_STR_EQ(r.f.seen[7].url,
                  "http://127.0.0.1:9000/lake/k?uploadId=up-1");
    EXPECT_EQ_I64(rig_put(&r, "k", "0123456789"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 13);
    EXPECT_STR_EQ(r.f.seen[12].method, "POST");
    rig_close(&r);
}

/* A put that fails again after the lost Create keeps the key marked; a put
 * of another key lists nothing; the key's own landed put cleans it. */
TEST(a_key_a_lost_create_marked_stays_marked_until_a_put_of_it_lands)
{
    struct answer a[] = {
        {ERR_IO, 0, NULL, NULL, -1, -1},
        CREATE_OK("up-2"),
        {0, 403, NULL, "<Error><Code>AccessDenied</Code></Error>", -1, -1},
        {0, 204, NULL, NULL, -1, -1},
        CREATE_OK("up-3"),
        THREE_PARTS_OK,
        COMPLETE_OK,
        CREATE_OK("up-4"),
        THREE_PARTS_OK,
        COMPLETE_OK,
        {0, 200, NULL, "<ListMultipartUploadsResult/>", -1, -1}};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), small_parts_one_try);
    EXPECT(rig_put(&r, "k", "0123456789") != 0);
    /* the second put's Create lands, its part 1 is refused: it aborts its
     * own upload and keeps the key marked */
    EXPECT_EQ_I64(rig_put(&r, "k", "0123456789"), ERR_REMOTE);
    EXPECT_EQ_U64(r.f.n_seen, 4);
    EXPECT_STR_EQ(r.f.seen[3].url,
                  "http://127.0.0.1:9000/lake/k?uploadId=up-2");
    EXPECT_EQ_I64(rig_put(&r, "other", "0123456789"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 9);
    EXPECT_EQ_I64(rig_put(&r, "k", "0123456789"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 15);
    EXPECT_STR_EQ(r.f.seen[14].method, "GET");
    rig_close(&r);
}

/* A listing that fails keeps the mark: the next landed put lists again. A
 * Create answered 500 (its one attempt) marks the key too; a single PUT of
 * the key that lands cleans it as a multipart one does. */
TEST(a_failed_listing_keeps_the_mark_and_a_single_put_cleans_the_key)
{
    struct answer a[] = {
        {0, 500, NULL, "<Error><Code>InternalError</Code></Error>", -1, -1},
        CREATE_OK("up-2"),
        THREE_PARTS_OK,
        COMPLETE_OK,
        {0, 403, NULL, "<Error><Code>AccessDenied</Code></Error>", -1, -1},
        {0, 200, "\"e9\"", NULL, -1, -1},
        {0, 200, NULL,
         "<ListMultipartUploadsResult><Upload><Key>k</Key><UploadId>up-1"
         "</UploadId></Upload></ListMultipartUploadsResult>",
         -1, -1},
        {0, 204, NULL, NULL, -1, -1},
        {0, 200, "\"e9\"", NULL, -1, -1}};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), small_parts_one_try);
    EXPECT_EQ_I64(rig_put(&r, "k", "0123456789"), ERR_REMOTE);
    EXPECT_EQ_I64(rig_put(&r, "k", "0123456789"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 7);
    EXPECT_STR_EQ(r.f.seen[6].method, "GET"); /* refused: 403 */
    /* a put below the multipart threshold: one PUT, then the listing */
    EXPECT_EQ_I64(rig_put(&r, "k", "0123"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 10);
    EXPECT_STR_EQ(r.f.seen[7].method, "PUT");
    EXPECT_STR_EQ(r.f.seen[8].method, "GET");
    EXPECT_STR_EQ(r.f.seen[9].url,
                  "http://127.0.0.1:9000/lake/k?uploadId=up-1");
    EXPECT_EQ_I64(rig_put(&r, "k", "0123"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 11);
    rig_close(&r);
}

/* A Create refused outright (a 4xx) made no upload: the next put of the
 * key lists nothing. */
TEST(a_refused_create_marks_no_key)
{
    struct answer a[] = {
        {0, 403, NULL, "<Error><Code>AccessDenied</Code></Error>", -1, -1},
        CREATE_OK("up-2"),
        THREE_PARTS_OK,
        COMPLETE_OK};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), small_parts_one_try);
    EXPECT_EQ_I64(rig_put(&r, "k", "0123456789"), ERR_REMOTE);
    EXPECT_EQ_I64(rig_put(&r, "k", "0123456789"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 6);
    EXPECT_STR_EQ(r.f.seen[5].method, "POST");
    rig_close(&r);
}
#undef COMPLETE_OK

/* A Create is sent on a new connection (the transport must not resend it
 * unseen); every other request may reuse one. */
TEST(only_the_create_asks_for_a_fresh_connection)
{
    struct answer a[] = {CREATE_OK("up-2"),
                         THREE_PARTS_OK,
                         {0, 200, NULL, "<ETag>\"z-3\"</ETag>", -1, -1}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, a, ARRAY_LEN(a)), 0);
    EXPECT_EQ_U64(r.f.n_seen, 5);
    for (size_t i = 0; i < r.f.n_seen; i++) {
        EXPECT(r.f.seen[i].is_fresh_connection == (i == 0));
    }
    rig_close(&r);
}

TEST(a_part_answer_without_etag_is_retried)
{
    struct answer a[] = {CREATE_OK("up-3"),
                         OK_200,
                         THREE_PARTS_OK,
                         {0, 200, NULL, "<ETag>\"z-3\"</ETag>", -1, -1}};
    struct rig r;

    EXPECT_EQ_I64(rig_put_parts(&r, a, ARRAY_LEN(a)), 0);
    EXPECT_EQ_U64(r.f.n_seen, 6);
    EXPECT_STR_EQ(r.f.seen[2].body, "0123");
    rig_close(&r);
}

/* ---- retries --------------------------------------------------------------
 */

TEST(a_503_then_500_then_200_takes_three_requests)
{
    struct answer a[] = {
        {0, 503, NULL, "<Error><Code>SlowDown</Code></Error>", 1000, -1},
        {0, 500, NULL, "<Error><Code>InternalError</Code></Error>", -1, -1},
        OK_200};
    struct rig r;
    struct buf text;

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 3);
    EXPECT_EQ_U64(r.f.n_waits, 2);
    EXPECT_EQ_U64(r.f.waits[0], 1000); /* Retry-After 1 s beats 100 ms */
    EXPECT_EQ_U64(r.f.waits[1], 200);  /* attempt 2: step 2 s, u = 0 */
    buf_init(&text, 4096);
    EXPECT_EQ_I64(
        s3_metrics_render(s3_client_metrics(r.c), NULL, &text, &r.err), 0);
    EXPECT_STR_EQ(text.data, "queen_s3_s3_requests_total{op=\"put\",code="
                             "\"200\"} 1\n"
                             "queen_s3_s3_requests_total{op=\"put\",code="
                             "\"500\"} 1\n"
                             "queen_s3_s3_requests_total{op=\"put\",code="
                             "\"503\"} 1\n");
    buf_free(&text);
    rig_close(&r);
}

/* What on_retrying saw: each call's flag and the waits before it. */
static struct {
    struct fake *f;
    bool flags[8];
    size_t waits_before[8];
    size_t n;
} retrying_seen;

static void record_retrying(void *arg, bool is_retrying)
{
    EXPECT(arg == &retrying_seen);
    if (retrying_seen.n < ARRAY_LEN(retrying_seen.flags)) {
        retrying_seen.flags[retrying_seen.n] = is_retrying;
        retrying_seen.waits_before[retrying_seen.n] = retrying_seen.f->n_waits;
        retrying_seen.n++;
    }
}

static void tune_retrying(struct s3_config *cfg)
{
    cfg->on_retrying = record_retrying;
    cfg->on_retrying_arg = &retrying_seen;
}

TEST(on_retrying_brackets_a_call_from_its_first_wait_to_its_return)
{
    struct answer a[] = {
        {0, 503, NULL, "<Error><Code>SlowDown</Code></Error>", -1, -1},
        {0, 500, NULL, "<Error><Code>InternalError</Code></Error>", -1, -1},
        OK_200,
        OK_200};
    struct rig r;

    memset(&retrying_seen, 0, sizeof(retrying_seen));
    rig_open(&r, a, ARRAY_LEN(a), tune_retrying);
    retrying_seen.f = &r.f;
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_U64(retrying_seen.n, 2);
    EXPECT(retrying_seen.flags[0] && !retrying_seen.flags[1]);
    EXPECT_EQ_U64(retrying_seen.waits_before[0], 0); /* before the wait */
    EXPECT_EQ_U64(retrying_seen.waits_before[1], 2); /* after the last */
    /* a call that is not retried is not bracketed */
    EXPECT_EQ_I64(rig_put(&r, "k2", "hello"), 0);
    EXPECT_EQ_U64(retrying_seen.n, 2);
    rig_close(&r);
}

TEST(a_403_takes_one_request)
{
    struct answer a[] = {{0, 403, NULL,
                          "<Error><Code>SignatureDoesNotMatch</Code>"
                          "<Message>bad</Message></Error>",
                          -1, -1}};
    struct rig r;

    rig_open(&r, a, 1, NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), ERR_REMOTE);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    EXPECT_STR_EQ(r.err.msg, "status 403: SignatureDoesNotMatch: bad");
    rig_close(&r);
}

TEST(a_403_without_a_code_names_the_status_text_not_an_empty_code)
{
    struct answer a[] = {{0, 403, NULL, NULL, -1, -1}};
    struct rig r;

    rig_open(&r, a, 1, NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), ERR_REMOTE);
    EXPECT_STR_EQ(r.err.msg, "status 403 Forbidden");
    EXPECT_STR_EQ(r.res.st.code, "");
    rig_close(&r);
}

TEST(a_body_that_is_no_error_document_is_quoted_on_one_line)
{
    struct answer a[] = {
        {0, 403, NULL,
         "\r\n<html>\r\n<body>Denied by\tthe proxy</body>\n</html>\n", -1, -1}};
    struct rig r;

    rig_open(&r, a, 1, NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), ERR_REMOTE);
    EXPECT_STR_EQ(r.err.msg, "status 403 Forbidden: <html>  <body>Denied by "
                             "the proxy</body> </html>");
    rig_close(&r);
}

TEST(a_long_body_is_cut_at_200_bytes_on_a_character_boundary)
{
    char body[400];
    char want[300];
    struct answer a[] = {{0, 418, NULL, body, -1, -1}};
    struct rig r;

    /* 199 ASCII bytes, then 2-byte characters: byte 200 starts one */
    memset(body, 'x', 199);
    for (int i = 199; i < 399; i += 2) {
        body[i] = (char)0xC3;
        body[i + 1] = (char)0xA9;
    }
    body[399] = '\0';
    snprintf(want, sizeof(want), "status 418: %.199s", body);
    rig_open(&r, a, 1, NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), ERR_REMOTE);
    EXPECT_STR_EQ(r.err.msg, want);
    rig_close(&r);
}

static void three_attempts(struct s3_config *cfg)
{
    cfg->max_attempts = 3;
}

TEST(max_attempts_3_makes_3_requests_and_returns_the_last_503)
{
    struct answer a[] = {{0, 503, NULL, "busy 1", -1, -1},
                         {0, 503, NULL, "busy 2", -1, -1},
                         {0, 503, NULL, "busy 3", -1, -1},
                         OK_200};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), three_attempts);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), ERR_REMOTE);
    EXPECT_EQ_U64(r.f.n_seen, 3);
    EXPECT_STR_EQ(r.err.msg, "status 503 Service Unavailable: busy 3");
    EXPECT(r.res.st.is_retriable);
    EXPECT_EQ_I64(r.res.st.attempts, 3);
    rig_close(&r);
}

TEST(a_stopped_client_returns_a_retriable_failure_without_retrying_it)
{
    struct answer a[] = {{0, 503, NULL, "busy", -1, -1}, OK_200};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    s3_client_stop(r.c, r.f.mono_ms + 7000);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), ERR_REMOTE);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    EXPECT_EQ_U64(r.f.n_waits, 0);
    EXPECT(r.res.st.is_retriable); /* the caller's loop decides */
    /* sent while stopping: done by the deadline */
    EXPECT_EQ_I64(r.f.seen[0].timeout_ms, 7000);
    rig_close(&r);
}

TEST(past_the_stop_deadline_nothing_is_sent)
{
    struct answer a[] = {OK_200};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    s3_client_stop(r.c, r.f.mono_ms);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), ERR_TIMEOUT);
    EXPECT_EQ_U64(r.f.n_seen, 0);
    EXPECT(r.res.st.is_retriable);
    EXPECT_EQ_I64(r.res.st.status, 0);
    EXPECT_STR_EQ(r.err.msg, "PUT k: not sent: the process is stopping and "
                             "its shutdown grace is used up");
    rig_close(&r);
}

TEST(a_client_not_stopped_keeps_its_timeouts_and_retries)
{
    struct answer a[] = {{0, 503, NULL, "busy", -1, -1}, OK_200};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 2);
    EXPECT_EQ_I64(r.f.seen[0].timeout_ms, S3_REQUEST_TIMEOUT_MS);
    rig_close(&r);
}

TEST(a_429_with_retry_after_waits_at_least_that_long)
{
    struct answer a[] = {{0, 429, NULL, NULL, 1000, -1}, OK_200};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_U64(r.f.n_waits, 1);
    EXPECT(r.f.waits[0] >= 900);
    rig_close(&r);
}

TEST(transport_failures_count_as_code_0_and_are_retried_six_times)
{
    static struct answer a[6];
    struct rig r;

    for (int i = 0; i < 6; i++) {
        a[i] = (struct answer){
            i % 2 ? ERR_TIMEOUT : ERR_IO, 0, NULL, NULL, -1, -1};
    }
    rig_open(&r, a, 6, NULL);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), ERR_TIMEOUT);
    EXPECT_EQ_U64(r.f.n_seen, 6);
    EXPECT_EQ_I64(r.res.st.kind, S3_FAIL_TRANSPORT);
    EXPECT_EQ_I64(r.res.st.status, 0);
    EXPECT(strncmp(r.err.msg, "transport: ", 11) == 0);
    EXPECT_EQ_U64(s3_metrics_get(s3_client_metrics(r.c), S3_OP_PUT, 0), 6);
    EXPECT_EQ_U64(r.f.n_waits, 5);
    EXPECT_EQ_U64(r.f.waits[4], 1600); /* attempt 5: step 16 s, u = 0 */
    rig_close(&r);
}

static void unreached_final(struct s3_config *cfg)
{
    cfg->is_unreached_final = true;
}

/* A transport failure; it made no connection where f.unreached says so. */
#define IO_FAILURE                    \
    {                                 \
        ERR_IO, 0, NULL, NULL, -1, -1 \
    }

TEST(an_unreached_endpoint_is_final_until_it_first_answers)
{
    struct answer a[] = {IO_FAILURE, OK_200, IO_FAILURE, OK_200};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), unreached_final);
    r.f.unreached = 1u << 0 | 1u << 2;
    /* a wrong endpoint: one request, no wait, not retriable */
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), ERR_IO);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    EXPECT_EQ_U64(r.f.n_waits, 0);
    EXPECT(!r.res.st.is_retriable);
    EXPECT(r.res.st.is_unreached);
    /* once it answered, a lost connection is retried as before */
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 4);
    EXPECT_EQ_U64(r.f.n_waits, 1);
    rig_close(&r);
}

TEST(an_unreached_endpoint_is_retried_by_default)
{
    struct answer a[] = {IO_FAILURE, IO_FAILURE, OK_200};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    r.f.unreached = 1u << 0 | 1u << 1;
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 3);
    EXPECT_EQ_U64(r.f.n_waits, 2);
    rig_close(&r);
}

TEST(with_unreached_final_a_5xx_429_timeout_or_reset_is_still_retried)
{
    struct answer a[] = {{0, 503, NULL, "busy", -1, -1},
                         {0, 429, NULL, NULL, -1, -1},
                         {ERR_TIMEOUT, 0, NULL, NULL, -1, -1},
                         IO_FAILURE,
                         OK_200};
    struct rig r;

    rig_open(&r, a, ARRAY_LEN(a), unreached_final);
    EXPECT_EQ_I64(rig_put(&r, "k", "hello"), 0);
    EXPECT_EQ_U64(r.f.n_seen, 5);
    EXPECT_EQ_U64(r.f.n_waits, 4);
    rig_close(&r);
}

/* ---- HEAD, GET, LIST ----------------------------------------------
 */

TEST(head_get_404_are_absent_without_retry)
{
    struct answer a[] = {
        {0, 404, NULL, NULL, -1, -1},
        {0, 404, NULL, "<Error><Code>NoSuchKey</Code></Error>", -1, -1}};
    struct rig r;
    struct buf body;

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    buf_init(&body, 1024);
    EXPECT_EQ_I64(s3_client_head(r.c, "k", &r.info, &r.st, &r.err), 0);
    EXPECT(!r.info.found);
    EXPECT_STR_EQ(r.f.seen[0].method, "HEAD");
    EXPECT_EQ_I64(s3_client_get(r.c, "k", &body, &r.info, &r.st, &r.err), 0);
    EXPECT(!r.info.found);
    EXPECT_EQ_U64(body.len, 0);
    EXPECT_EQ_U64(r.f.n_seen, 2);
    EXPECT_EQ_U64(s3_metrics_get(s3_client_metrics(r.c), S3_OP_HEAD, 404), 1);
    buf_free(&body);
    rig_close(&r);
}

TEST(head_and_get_strip_quotes_and_report_size)
{
    struct answer a[] = {{0, 200, "\"abc\"", NULL, -1, 5},
                         {0, 200, "\"def\"", "hello", -1, 5}};
    struct rig r;
    struct buf body;

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    buf_init(&body, 1024);
    EXPECT_EQ_I64(s3_client_head(r.c, "k", &r.info, &r.st, &r.err), 0);
    EXPECT(r.info.found);
    EXPECT_EQ_U64(r.info.size, 5);
    EXPECT_STR_EQ(r.info.etag, "abc");
    EXPECT_EQ_I64(s3_client_get(r.c, "k", &body, &r.info, &r.st, &r.err), 0);
    EXPECT_STR_EQ(body.data, "hello");
    EXPECT_EQ_U64(r.info.size, 5);
    EXPECT_STR_EQ(r.info.etag, "def");
    buf_free(&body);
    rig_close(&r);
}

/* The uploads a crash stranded: every one listed under exactly the key is
 * aborted (404: gone already, done too); a longer key the prefix also lists
 * is left alone; a failed abort is not counted and the rest go on. */
TEST(abort_uploads_aborts_only_the_keys_own_uploads)
{
    struct answer a[] = {
        {0, 200, NULL,
         "<ListMultipartUploadsResult>"
         "<Upload><Key>q/k</Key><UploadId>u1</UploadId></Upload>"
         "<Upload><Key>q/k2</Key><UploadId>u9</UploadId></Upload>"
         "<Upload><Key>q/k</Key><UploadId>u2</UploadId></Upload>"
         "<Upload><Key>q/k</Key><UploadId>u3</UploadId></Upload>"
         "<Upload><Key>q/k</Key><UploadId></UploadId></Upload>"
         "</ListMultipartUploadsResult>",
         -1, -1},
        {0, 204, NULL, NULL, -1, -1},
        {0, 403, NULL,
         "<Error><Code>AccessDenied</Code><Message>no</Message></Error>", -1,
         -1},
        {0, 404, NULL, "<Error><Code>NoSuchUpload</Code></Error>", -1, -1}};
    const char *want[] = {"uploadId=u1", "uploadId=u2", "uploadId=u3"};
    struct rig r;
    int n = -1;

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    EXPECT_EQ_I64(s3_client_abort_uploads(r.c, "q/k", &n, &r.err), 0);
    EXPECT_EQ_I64(n, 2);
    EXPECT_EQ_U64(r.f.n_seen, 4);
    EXPECT_STR_EQ(r.f.seen[0].method, "GET");
    EXPECT(strstr(r.f.seen[0].url, "uploads") != NULL);
    for (size_t i = 0; i < ARRAY_LEN(want) && i + 1 < r.f.n_seen; i++) {
        EXPECT_STR_EQ(r.f.seen[i + 1].method, "DELETE");
        EXPECT(strstr(r.f.seen[i + 1].url, "/lake/q/k?") != NULL);
        EXPECT(strstr(r.f.seen[i + 1].url, want[i]) != NULL);
    }
    rig_close(&r);
}

TEST(get_over_the_callers_cap_is_too_big_and_not_retried)
{
    struct answer a[] = {{0, 200, "\"x\"", "0123456789", -1, 10}};
    struct rig r;
    struct buf body;

    rig_open(&r, a, 1, NULL);
    buf_init(&body, 4);
    EXPECT_EQ_I64(s3_client_get(r.c, "k", &body, &r.info, &r.st, &r.err),
                  ERR_TOO_BIG);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    buf_free(&body);
    rig_close(&r);
}

TEST(list_pages_with_start_after_and_decodes_entities)
{
    struct answer a[] = {
        {0, 200, NULL,
         "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>"
         "queen/_queen/orders/checkpoint/a&amp;b</Key></Contents>"
         "<Contents><Key>queen/_queen/orders/checkpoint/c</Key></Contents>"
         "</ListBucketResult>",
         -1, -1},
        {0, 200, NULL,
         "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>"
         "queen/_queen/orders/checkpoint/d</Key></Contents>"
         "</ListBucketResult>",
         -1, -1}};
    struct rig r;
    struct s3xml_list page;
    struct s3xml_list page2;
    struct s3_list_req q = {"queen/_queen/orders/checkpoint/", NULL, 2};

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    EXPECT_EQ_I64(s3_client_list_page(r.c, &q, &page, &r.st, &r.err), 0);
    EXPECT_STR_EQ(r.f.seen[0].url,
                  "http://127.0.0.1:9000/lake?list-type=2&max-keys=2&prefix="
                  "queen%2F_queen%2Forders%2Fcheckpoint%2F");
    EXPECT_EQ_U64(page.n_keys, 2);
    EXPECT_STR_EQ(page.keys[0], "queen/_queen/orders/checkpoint/a&b");
    EXPECT(page.is_truncated);
    q.start_after = page.n_keys == 2 ? page.keys[1] : "";
    EXPECT_EQ_I64(s3_client_list_page(r.c, &q, &page2, &r.st, &r.err), 0);
    EXPECT_STR_EQ(r.f.seen[1].url,
                  "http://127.0.0.1:9000/lake?list-type=2&max-keys=2&prefix="
                  "queen%2F_queen%2Forders%2Fcheckpoint%2F&start-after=queen"
                  "%2F_queen%2Forders%2Fcheckpoint%2Fc");
    EXPECT_EQ_U64(page2.n_keys, 1);
    EXPECT(!page2.is_truncated);
    s3xml_list_free(&page);
    s3xml_list_free(&page2);
    rig_close(&r);
}

TEST(list_all_follows_pages_and_virtual_host_lists_slash)
{
    struct answer a[] = {
        {0, 200, NULL,
         "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>p/1"
         "</Key></Contents></ListBucketResult>",
         -1, -1},
        {0, 200, NULL, "<ListBucketResult><IsTruncated>true</IsTruncated>", -1,
         -1},
        {0, 200, NULL,
         "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>p/2"
         "</Key></Contents></ListBucketResult>",
         -1, -1}};
    struct rig r;
    struct s3xml_list all;

    rig_open(&r, a, ARRAY_LEN(a), virtual_host);
    EXPECT_EQ_I64(s3_client_list_all(r.c, "p/", 100, &all, &r.st, &r.err), 0);
    EXPECT_EQ_U64(all.n_keys, 2);
    EXPECT_EQ_U64(r.f.n_seen, 3); /* the truncated answer was retried */
    EXPECT_STR_EQ(r.f.seen[0].url, "http://lake.s3.test:9000/?list-type=2&"
                                   "max-keys=1000&prefix=p%2F");
    EXPECT(strstr(r.f.seen[2].url, "&start-after=p%2F1") != NULL);
    s3xml_list_free(&all);
    rig_close(&r);
}

/* A store that ignores start-after answers the same page again: paging on
 * it would never end, so a page that does not move past start-after is an
 * error, and list_all stops at it. */
TEST(a_page_that_does_not_move_past_start_after_is_refused)
{
    static const char same[] =
        "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>p/1"
        "</Key></Contents><Contents><Key>p/2</Key></Contents>"
        "</ListBucketResult>";
    struct answer a[] = {{0, 200, NULL, same, -1, -1},
                         {0, 200, NULL, same, -1, -1}};
    struct rig r;
    struct s3xml_list all;
    struct s3xml_list page;
    struct s3_list_req q = {"p/", "p/2", 1000};

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    EXPECT_EQ_I64(s3_client_list_all(r.c, "p/", 100, &all, &r.st, &r.err),
                  ERR_CORRUPT);
    EXPECT_EQ_U64(r.f.n_seen, 2);
    EXPECT(strstr(r.err.msg, "does not move past start-after") != NULL);
    rig_close(&r);

    rig_open(&r, a, 1, NULL);
    EXPECT_EQ_I64(s3_client_list_page(r.c, &q, &page, &r.st, &r.err),
                  ERR_CORRUPT);
    EXPECT_EQ_U64(page.n_keys, 0);
    rig_close(&r);
    q.start_after = "p/1"; /* p/2 is past it */
    rig_open(&r, a, 1, NULL);
    EXPECT_EQ_I64(s3_client_list_page(r.c, &q, &page, &r.st, &r.err), 0);
    EXPECT_EQ_U64(page.n_keys, 2);
    s3xml_list_free(&page);
    rig_close(&r);
}

/* ---- metrics ------------------------------------------------------------- */

TEST(metrics_render_sorted_with_an_optional_tenant_prefix)
{
    struct s3_metrics m;
    struct buf b;
    struct err err = {0};

    s3_metrics_init(&m);
    buf_init(&b, 4096);
    s3_metrics_add(&m, S3_OP_PUT, 200);
    s3_metrics_add(&m, S3_OP_MULTIPART_PART, 0);
    s3_metrics_add(&m, S3_OP_GET, 404);
    s3_metrics_add(&m, S3_OP_PUT, 200);
    EXPECT_EQ_I64(s3_metrics_render(&m, "tenant=\"acme\",", &b, &err), 0);
    EXPECT_STR_EQ(b.data, "queen_s3_s3_requests_total{tenant=\"acme\",op=\""
                          "get\",code=\"404\"} 1\n"
                          "queen_s3_s3_requests_total{tenant=\"acme\",op=\""
                          "multipart_part\",code=\"0\"} 1\n"
                          "queen_s3_s3_requests_total{tenant=\"acme\",op=\""
                          "put\",code=\"200\"} 2\n");
    EXPECT_EQ_U64(s3_metrics_total(&m, S3_OP_COUNT), 4);
    buf_free(&b);
    s3_metrics_free(&m);
}

/* ---- retry decisions ----------------------------------------------------- */

TEST(retriable_outcomes_are_transport_body_integrity_408_429_5xx)
{
    EXPECT(s3_retry_is_retriable(S3_FAIL_TRANSPORT, 0, NULL));
    EXPECT(s3_retry_is_retriable(S3_FAIL_BODY, 200, NULL));
    EXPECT(s3_retry_is_retriable(S3_FAIL_INTEGRITY, 200, NULL));
    EXPECT(s3_retry_is_retriable(S3_FAIL_STATUS, 408, NULL));
    EXPECT(s3_retry_is_retriable(S3_FAIL_STATUS, 429, NULL));
    EXPECT(s3_retry_is_retriable(S3_FAIL_STATUS, 500, NULL));
    EXPECT(s3_retry_is_retriable(S3_FAIL_STATUS, 503, NULL));
    EXPECT(!s3_retry_is_retriable(S3_FAIL_STATUS, 200, NULL));
    EXPECT(!s3_retry_is_retriable(S3_FAIL_STATUS, 200, "AccessDenied"));
    EXPECT(s3_retry_is_retriable(S3_FAIL_STATUS, 200, "InternalError"));
    EXPECT(s3_retry_is_retriable(S3_FAIL_STATUS, 200, "SlowDown"));
    EXPECT(s3_retry_is_retriable(S3_FAIL_STATUS, 400, "RequestTimeout"));
    EXPECT(!s3_retry_is_retriable(S3_FAIL_STATUS, 400, "InternalErrorX"));
    EXPECT(!s3_retry_is_retriable(S3_FAIL_STATUS, 403, "SlowDown"));
    EXPECT(!s3_retry_is_retriable(S3_FAIL_STATUS, 400, NULL));
    EXPECT(!s3_retry_is_retriable(S3_FAIL_STATUS, 403, NULL));
    EXPECT(!s3_retry_is_retriable(S3_FAIL_STATUS, 404, NULL));
    EXPECT(!s3_retry_is_retriable(S3_FAIL_NONE, 200, NULL));
}

TEST(client_waits_are_jittered_between_a_tenth_and_the_step_capped_at_60s)
{
    EXPECT_EQ_U64(s3_retry_wait_ms(1, -1, 0.0), 100);
    EXPECT_EQ_U64(s3_retry_wait_ms(1, -1, 0.5), 550);
    EXPECT(s3_retry_wait_ms(1, -1, 0.999999) <= 1000);
    EXPECT_EQ_U64(s3_retry_wait_ms(3, -1, 0.0), 400);
    EXPECT_EQ_U64(s3_retry_wait_ms(7, -1, 0.0), 6000);
    EXPECT(s3_retry_wait_ms(40, -1, 0.999) <= 60000);
    EXPECT_EQ_U64(s3_retry_wait_ms(1, 3000, 0.5), 3000);
    EXPECT_EQ_U64(s3_retry_wait_ms(1, 120000, 0.5), 60000);
    EXPECT_EQ_U64(s3_retry_wait_ms(5, 0, 1.5), 16000 - 1 + 0 * 1); /* u<1 */
}

TEST(driver_backoff_doubles_from_1s_with_jitter_and_honours_retry_after)
{
    EXPECT_EQ_U64(s3_retry_driver_backoff_ms(1, -1, 0.0), 750);
    EXPECT_EQ_U64(s3_retry_driver_backoff_ms(1, -1, 0.5), 1000);
    EXPECT_EQ_U64(s3_retry_driver_backoff_ms(3, -1, 0.5), 4000);
    EXPECT_EQ_U64(s3_retry_driver_backoff_ms(30, -1, 0.0), 45000);
    EXPECT_EQ_U64(s3_retry_driver_backoff_ms(2, 59000, 0.5), 59000);
    /* a day's Retry-After waits the cap, as every other wait does */
    EXPECT_EQ_U64(s3_retry_driver_backoff_ms(2, 120000, 0.5), 60000);
    EXPECT_EQ_U64(s3_retry_driver_backoff_ms(2, 86400000, 0.5), 60000);
    EXPECT_EQ_U64(s3_retry_driver_backoff_ms(2, 0, 0.5), 0);
}

TEST(retry_after_parses_whole_seconds_only)
{
    EXPECT_EQ_I64(s3_retry_parse_retry_after("1", 1), 1000);
    EXPECT_EQ_I64(s3_retry_parse_retry_after(" 30\r\n", 5), 30000);
    EXPECT_EQ_I64(s3_retry_parse_retry_after("", 0), -1);
    EXPECT_EQ_I64(s3_retry_parse_retry_after("1.5", 3), -1);
    EXPECT_EQ_I64(
        s3_retry_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 29), -1);
}

/* ---- endpoint and bucket ------------------------------------------------- */

static void endpoint_refused(const char *raw, const char *want)
{
    struct s3_endpoint ep;
    struct err err = {0};

    EXPECT_EQ_I64(s3_endpoint_parse(&ep, "QUEEN_S3_ENDPOINT", raw,
                                    "QUEEN_S3_PREFIX", &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(err.msg, want);
}

TEST(endpoint_refusals_use_the_reference_messages)
{
    endpoint_refused("s3.example.com", "QUEEN_S3_ENDPOINT=s3.example.com has "
                                       "no scheme: it starts with http:// or "
                                       "https://");
    endpoint_refused("http://", "QUEEN_S3_ENDPOINT=http:// has no host");
    endpoint_refused("http://:9000", "QUEEN_S3_ENDPOINT=http://:9000 has no "
                                     "host");
    endpoint_refused("http://gw:7070/lake",
                     "QUEEN_S3_ENDPOINT=http://gw:7070/lake carries a path. "
                     "The endpoint is scheme://host[:port] only; a prefix "
                     "inside the bucket is QUEEN_S3_PREFIX");
    endpoint_refused("http://gw:70x", "QUEEN_S3_ENDPOINT=http://gw:70x has a "
                                      "port that is not one");
    endpoint_refused("http://gw:70000", "QUEEN_S3_ENDPOINT=http://gw:70000 "
                                        "has a port that is not one");
    endpoint_refused("http://[fd00::7", "QUEEN_S3_ENDPOINT=http://[fd00::7 "
                                        "has a bracketed host that does not "
                                        "close");
    endpoint_refused("http://[fd00::7]x", "QUEEN_S3_ENDPOINT=http://[fd00::7]x "
                                          "has a bracketed host that does not "
                                          "close");
    endpoint_refused("http://[]:80", "QUEEN_S3_ENDPOINT=http://[]:80 has no "
                                     "host");
    endpoint_refused("http://[fd00::7]:x",
                     "QUEEN_S3_ENDPOINT=http://[fd00::7]:x "
                     "has a port that is not one");
    /* a host no resolver takes is found at boot, not at the first call */
    endpoint_refused("http://ho st:1",
                     "QUEEN_S3_ENDPOINT=http://ho st:1 has a host with a byte "
                     "no host name holds (at byte 3): a name is letters, "
                     "digits, '-', '.' and '_', an IPv6 literal hex digits "
                     "and ':' in brackets");
    endpoint_refused("http://h%40x",
                     "QUEEN_S3_ENDPOINT=http://h%40x has a host with a byte "
                     "no host name holds (at byte 2): a name is letters, "
                     "digits, '-', '.' and '_', an IPv6 literal hex digits "
                     "and ':' in brackets");
    endpoint_refused("http://[fd00::g]:80",
                     "QUEEN_S3_ENDPOINT=http://[fd00::g]:80 has a host with a "
                     "byte no host name holds (at byte 8): a name is letters, "
                     "digits, '-', '.' and '_', an IPv6 literal hex digits "
                     "and ':' in brackets");
    {
        struct s3_endpoint ep;
        struct err err = {0};
        EXPECT_EQ_I64(s3_endpoint_parse(&ep, "e", "http://my_minio-1.lan:9000",
                                        "p", &err),
                      0);
        EXPECT_STR_EQ(ep.host, "my_minio-1.lan");
    }
    /* credentials in the URL: refused, and never echoed */
    static const char *const with_user[] = {
        "http://AKID:s3cr3t@gw:7070", "https://u@gw",    "http://u:s3cr3t@gw/x",
        "u:s3cr3t@gw:7070",           "http://gw:7070@",
    };
    for (size_t i = 0; i < ARRAY_LEN(with_user); i++) {
        endpoint_refused(with_user[i],
                         "QUEEN_S3_ENDPOINT has an '@' in it "
                         "(user:password@host?); it is not printed, as it "
                         "may hold a secret. The endpoint is "
                         "scheme://host[:port] only, and the keys have "
                         "settings of their own");
    }
}

TEST(an_ipv6_literal_is_taken_in_brackets_with_or_without_a_port)
{
    struct s3_endpoint ep;
    struct err err = {0};
    struct buf b;

    buf_init(&b, 1024);
    EXPECT_EQ_I64(s3_endpoint_parse(&ep, "endpoint", "http://[fd00::7]:9000",
                                    "prefix", &err),
                  0);
    EXPECT_STR_EQ(ep.host, "[fd00::7]");
    EXPECT_STR_EQ(ep.authority, "[fd00::7]:9000");
    EXPECT_EQ_I64(ep.port, 9000);
    EXPECT_EQ_I64(s3_endpoint_set_bucket(&ep, "bucket", "lake", "prefix", &err),
                  0);
    ep.path_style = true;
    EXPECT_EQ_I64(s3_endpoint_base_url(&ep, &b, &err), 0);
    EXPECT_STR_EQ(b.data, "http://[fd00::7]:9000");
    EXPECT_EQ_I64(
        s3_endpoint_parse(&ep, "endpoint", "https://[::1]/", "prefix", &err),
        0);
    EXPECT_STR_EQ(ep.host, "[::1]");
    EXPECT_EQ_I64(ep.port, 0);
    buf_free(&b);
}

TEST(endpoint_accepts_host_port_and_one_trailing_slash)
{
    struct s3_endpoint ep;
    struct err err = {0};
    struct buf b;

    buf_init(&b, 1024);
    EXPECT_EQ_I64(
        s3_endpoint_parse(&ep, "endpoint", "https://gw:7070/", "prefix", &err),
        0);
    EXPECT(ep.is_https);
    EXPECT_STR_EQ(ep.host, "gw");
    EXPECT_STR_EQ(ep.authority, "gw:7070");
    EXPECT_EQ_I64(ep.port, 7070);
    EXPECT_EQ_I64(s3_endpoint_set_bucket(&ep, "bucket", "lake", "prefix", &err),
                  0);
    ep.path_style = false;
    EXPECT_EQ_I64(s3_endpoint_base_url(&ep, &b, &err), 0);
    EXPECT_STR_EQ(b.data, "https://lake.gw:7070");
    buf_reset(&b);
    EXPECT_EQ_I64(s3_endpoint_object_path(&ep, "a/b", &b, &err), 0);
    EXPECT_STR_EQ(b.data, "/a/b");
    buf_free(&b);
}

TEST(bucket_refusals_use_the_reference_message)
{
    struct s3_endpoint ep;
    struct err err = {0};
    const char *bad[] = {"", "lake/x", "la ke"};

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char want[512];

        snprintf(want, sizeof(want),
                 "bucket=%s is not a bucket name: it is one name, with no "
                 "slash and no space. A prefix inside the bucket is prefix",
                 bad[i]);
        EXPECT_EQ_I64(
            s3_endpoint_set_bucket(&ep, "bucket", bad[i], "prefix", &err),
            ERR_INVALID);
        EXPECT_STR_EQ(err.msg, want);
    }
}

TEST(environment_gives_endpoint_bucket_and_path_style)
{
    struct s3_endpoint ep;
    struct err err = {0};

    unsetenv("QUEEN_S3_ENDPOINT");
    EXPECT_EQ_I64(s3_endpoint_from_env(&ep, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_S3_ENDPOINT is not set: it is the S3 API "
                           "base URL, e.g. https://s3.eu-central-1.amazonaws"
                           ".com or http://gw:7070");
    setenv("QUEEN_S3_ENDPOINT", " http://127.0.0.1:9 ", 1);
    setenv("QUEEN_S3_BUCKET", "lake", 1);
    setenv("QUEEN_S3_PATH_STYLE", "Maybe", 1);
    EXPECT_EQ_I64(s3_endpoint_from_env(&ep, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_S3_PATH_STYLE=maybe is not a boolean. It is "
                           "`true` or `false`");
    setenv("QUEEN_S3_PATH_STYLE", "YES", 1);
    EXPECT_EQ_I64(s3_endpoint_from_env(&ep, &err), 0);
    EXPECT(ep.path_style);
    EXPECT_STR_EQ(ep.authority, "127.0.0.1:9");
    EXPECT_STR_EQ(ep.bucket, "lake");
}

/* ---- threads ---------------------------------------------------------------
 */

static int ok_perform(void *arg, const struct s3_http_request *req,
                      struct s3_http_answer *ans, struct err *err)
{
    UNUSED(req);
    UNUSED(err);
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED);
    buf_reset(ans->body);
    ans->status = 200;
    return 0;
}

static void *put_loop(void *arg)
{
    struct s3_client *c = arg;

    for (int i = 0; i < 50; i++) {
        struct s3_put p = {"k",  "hello", 5,    "text/plain", NULL,
                           NULL, NULL,    NULL, NULL};
        struct s3_put_result r;
        struct err err = {0};

        if (s3_client_put(c, &p, &r, &err) != 0) {
            return arg;
        }
    }
    return NULL;
}

TEST(one_client_serves_several_threads_and_counts_every_request)
{
    int calls = 0;
    struct s3_transport t = {ok_perform, &calls};
    struct s3_config cfg;
    pthread_t th[4];
    struct s3_client *c;

    lake_config(&cfg, "http://127.0.0.1:9");
    c = s3_client_new(&cfg, &t, NULL);
    for (int i = 0; i < 4; i++) {
        pthread_create(&th[i], NULL, put_loop, c);
    }
    for (int i = 0; i < 4; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        EXPECT(rv == NULL);
    }
    EXPECT_EQ_I64(__atomic_load_n(&calls, __ATOMIC_RELAXED), 200);
    EXPECT_EQ_U64(s3_metrics_get(s3_client_metrics(c), S3_OP_PUT, 200), 200);
    s3_client_free(c);
}

/* A thread-safe fake for concurrent parts: every part answers the ETag
 * "e<partNumber>", part 5 fails with 403 when told to. */
struct mp_fake {
    pthread_mutex_t mu;
    int parts_seen;
    int aborts;
    bool fail_part_5;
    char complete_body[2048];
    int hook_calls;
    int parts_at_first_hook;
};

static void mp_hook(void *arg, int part_done)
{
    struct mp_fake *f = arg;

    UNUSED(part_done);
    pthread_mutex_lock(&f->mu);
    if (f->hook_calls++ == 0) {
        f->parts_at_first_hook = f->parts_seen;
    }
    pthread_mutex_unlock(&f->mu);
}

static int mp_perform(void *arg, const struct s3_http_request *req,
                      struct s3_http_answer *ans, struct err *err)
{
    struct mp_fake *f = arg;
    const char *pn = strstr(req->url, "partNumber=");

    buf_reset(ans->body);
    ans->status = 200;
    ans->etag[0] = '\0';
    pthread_mutex_lock(&f->mu);
    if (strstr(req->url, "?uploads=") != NULL) {
        buf_append_str(ans->body, "<UploadId>up-7</UploadId>", err);
    } else if (pn != NULL) {
        int n = atoi(pn + 11);
        f->parts_seen++;
        snprintf(ans->etag, sizeof(ans->etag), "\"e%d\"", n);
        if (n == 5 && f->fail_part_5) {
            ans->status = 403;
        }
    } else if (strcmp(req->method, "DELETE") == 0) {
        f->aborts++;
        ans->status = 204;
    } else {
        snprintf(f->complete_body, sizeof(f->complete_body), "%.*s",
                 (int)req->body_len, (const char *)req->body);
        buf_append_str(ans->body, "<ETag>\"x-10\"</ETag>", err);
    }
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static struct s3_client *mp_client(struct mp_fake *f, struct s3_transport *t)
{
    struct s3_config cfg;

    *t = (struct s3_transport){mp_perform, f};
    lake_config(&cfg, "http://127.0.0.1:9");
    cfg.multipart_threshold = 8;
    cfg.part_size = 4;
    cfg.part_concurrency = 3;
    return s3_client_new(&cfg, t, NULL);
}

TEST(concurrent_parts_complete_in_part_order)
{
    struct mp_fake f = {PTHREAD_MUTEX_INITIALIZER, 0, 0, false, "", 0, 0};
    struct s3_transport t;
    struct s3_client *c = mp_client(&f, &t);
    char body[40];
    struct s3_put p = {"k", body, sizeof(body), "text/plain", mp_hook,
                       &f,  NULL, NULL,         NULL};
    struct s3_put_result r;
    struct err err = {0};

    memset(body, 'x', sizeof(body));
    EXPECT_EQ_I64(s3_client_put(c, &p, &r, &err), 0);
    EXPECT_EQ_I64(f.parts_seen, 10);
    EXPECT_STR_EQ(r.etag, "x-10");
    EXPECT_EQ_I64(f.hook_calls, 9);
    EXPECT_EQ_I64(f.parts_at_first_hook, 1); /* part 1 is in first */
    EXPECT(strstr(f.complete_body, "<Part><PartNumber>1</PartNumber><ETag>"
                                   "\"e1\"</ETag></Part><Part><PartNumber>2"
                                   "</PartNumber><ETag>\"e2\"</ETag>") != NULL);
    EXPECT(strstr(f.complete_body, "<PartNumber>10</PartNumber><ETag>\"e10"
                                   "\"</ETag></Part></CompleteMultipartUpload"
                                   ">") != NULL);
    EXPECT_EQ_U64(
        s3_metrics_get(s3_client_metrics(c), S3_OP_MULTIPART_PART, 200), 10);
    s3_client_free(c);
}

TEST(a_failed_concurrent_part_stops_the_rest_and_aborts)
{
    struct mp_fake f = {PTHREAD_MUTEX_INITIALIZER, 0, 0, true, "", 0, 0};
    struct s3_transport t;
    struct s3_client *c = mp_client(&f, &t);
    char body[40];
    struct s3_put p = {"k",  body, sizeof(body), "text/plain", NULL,
                       NULL, NULL, NULL,         NULL};
    struct s3_put_result r;
    struct err err = {0};

    memset(body, 'x', sizeof(body));
    EXPECT_EQ_I64(s3_client_put(c, &p, &r, &err), ERR_REMOTE);
    EXPECT_EQ_I64(r.st.status, 403);
    EXPECT(strstr(err.msg, "part 5: status 403") != NULL);
    EXPECT_EQ_I64(f.aborts, 1);
    EXPECT_STR_EQ(f.complete_body, "");
    s3_client_free(c);
}

TEST(an_empty_object_is_one_put_with_the_empty_digests)
{
    struct rig r;
    struct s3_put p = {"empty", NULL, 0,   "application/x-ndjson", NULL, NULL,
                       NULL,    NULL, NULL};

    rig_open(&r, NULL, 0, small_parts);
    EXPECT_EQ_I64(s3_client_put(r.c, &p, &r.res, &r.err), 0);
    EXPECT_EQ_U64(r.f.n_seen, 1);
    EXPECT(has_header(&r.f.seen[0],
                      "x-amz-content-sha256: " SIGV4_EMPTY_SHA256 "\n"));
    EXPECT(has_header(&r.f.seen[0], "content-md5: 1B2M2Y8AsgTpgAmY7PhCfg==\n"));
    EXPECT_EQ_U64(r.f.seen[0].body_len, 0);
    rig_close(&r);
}

/* may_send lets the first `allow` requests out, then refuses. */
struct gate {
    int calls;
    int allow;
};

static int gate_fn(void *arg, struct err *err)
{
    struct gate *g = arg;

    if (++g->calls <= g->allow) {
        return 0;
    }
    return err_set(err, ERR_PRECONDITION, "gate closed at request %d",
                   g->calls);
}

TEST(a_closed_gate_stops_a_multipart_upload_before_its_next_request)
{
    struct answer a[] = {CREATE_OK("up-7"), THREE_PARTS_OK};
    struct gate g = {0, 3}; /* create, part 1, part 2 */
    struct rig r;
    struct s3_put p = {"k",  "0123456789", 10,   "application/x-ndjson",
                       NULL, NULL,         NULL, gate_fn,
                       &g};

    rig_open(&r, a, ARRAY_LEN(a), small_parts);
    EXPECT_EQ_I64(s3_client_put(r.c, &p, &r.res, &r.err), ERR_PRECONDITION);
    EXPECT(strstr(r.err.msg, "gate closed at request 4") != NULL);
    EXPECT(!r.res.st.is_retriable);
    EXPECT_EQ_I64(g.calls, 4);
    /* part 3 and the Complete never went out; the upload was aborted */
    EXPECT_EQ_U64(r.f.n_seen, 4);
    EXPECT_STR_EQ(r.f.seen[2].body, "4567");
    EXPECT_STR_EQ(r.f.seen[3].method, "DELETE");
    rig_close(&r);
}

/* A Create tried twice, then the gate closes (the lease is lost): the put
 * aborts its own upload and lists nothing, since another owner may be
 * writing the key now and its upload is no orphan. */
TEST(a_closed_gate_leaves_other_uploads_at_the_key_alone)
{
    struct answer a[] = {{0, 503, NULL, "", -1, -1},
                         CREATE_OK("up-7"),
                         {0, 200, "\"e1\"", NULL, -1, -1},
                         {0, 204, NULL, NULL, -1, -1}};
    struct gate g = {0, 3}; /* create twice, part 1 */
    struct rig r;
    struct s3_put p = {"k",  "0123456789", 10,   "application/x-ndjson",
                       NULL, NULL,         NULL, gate_fn,
                       &g};

    rig_open(&r, a, ARRAY_LEN(a), small_parts);
    EXPECT_EQ_I64(s3_client_put(r.c, &p, &r.res, &r.err), ERR_PRECONDITION);
    EXPECT_EQ_U64(r.f.n_seen, 4);
    EXPECT_STR_EQ(r.f.seen[3].method, "DELETE");
    EXPECT_STR_EQ(r.f.seen[3].url, "http://127.0.0.1:9000/lake/k?uploadId="
                                   "up-7");
    rig_close(&r);
}

TEST(a_closed_gate_sends_no_put_and_is_not_retried)
{
    struct answer a[] = {{0, 503, NULL, "", -1, -1},
                         {0, 200, NULL, "", -1, -1}};
    struct gate g = {0, 1};
    struct rig r;
    struct s3_put p = {"k",  "x",     1, "text/plain", NULL, NULL,
                       NULL, gate_fn, &g};

    rig_open(&r, a, ARRAY_LEN(a), NULL);
    EXPECT_EQ_I64(s3_client_put(r.c, &p, &r.res, &r.err), ERR_PRECONDITION);
    EXPECT_EQ_U64(r.f.n_seen, 1); /* the 503's retry was asked first */
    EXPECT_EQ_I64(g.calls, 2);
    rig_close(&r);
}
