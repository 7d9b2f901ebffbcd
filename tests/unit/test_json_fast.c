/* Tests of the block-wise JSON check (base/json_fast.h): it says yes to
 * valid containers wherever their strings, escapes, UTF-8 and numbers fall
 * across its 64-byte blocks, with their end and member count, and never
 * says yes to a text the byte-by-byte parser refuses. */
#include "base/json_fast.h"

#include "base/json.h"
#include "harness.h"

/* The byte-by-byte verdict: full tokens never reach json_fast. */
static bool slow_ok(const char *s, size_t n, int max_depth, bool is_line)
{
    struct json_limits lim = {max_depth, max_depth, 0};
    struct json_doc d;
    struct err err;
    int rc = json_parse(&d, s, n, &lim, &err);

    if (rc == 0) {
        json_doc_free(&d);
    }
    if (rc == 0 && is_line) {
        return memchr(s, '\n', n) == NULL && memchr(s, '\r', n) == NULL;
    }
    return rc == 0;
}

/* body once per classifier the CPU has (SSE2 or plain C, AVX2,
 * AVX-512BW), then the best is put back. */
static void each_level(void (*body)(void))
{
    for (int lv = 0; lv <= json_fast_level_max(); lv++) {
        json_fast_set_level(lv);
        body();
    }
    json_fast_set_level(-1);
}

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void gen_value(struct buf *b, uint64_t *r, int depth);

static void gen_string(struct buf *b, uint64_t *r)
{
    static const char *const parts[] = {
        "abc",      "\\\"",         "\\\\",
        "\\n",      "\\u00e9",      "\\u20AC",
        "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
        "/x/",      "\\/",          "sku-12345678",
        " ",        "\\t\\b\\f\\r", "2026-09-04T10:03:41.918204Z",
        "\\u0e4b",
    };
    size_t n = rng_next(r) % 6;
    struct err err;

    buf_append_byte(b, '"', &err);
    for (size_t i = 0; i < n; i++) {
        const char *p = parts[rng_next(r) % ARRAY_LEN(parts)];

        buf_append(b, p, strlen(p), &err);
    }
    buf_append_byte(b, '"', &err);
}

static void gen_ws(struct buf *b, uint64_t *r)
{
    static const char *const ws[] = {"", "", "", " ", "  ", "\t", " \n "};
    const char *w = ws[rng_next(r) % ARRAY_LEN(ws)];
    struct err err;

    buf_append(b, w, strlen(w), &err);
}

static void gen_value(struct buf *b, uint64_t *r, int depth)
{
    static const char *const scalars[] = {
        "0",     "-1",   "12.5", "-0.25e+10", "3E-2", "true",
        "false", "null", "1e9",  "987654321", "0.0",
    };
    unsigned k = (unsigned)(rng_next(r) % 10);
    struct err err;

    if (depth < 6 && k < 4) {
        bool is_obj = k < 2;
        size_t n = rng_next(r) % 5;

        buf_append_byte(b, is_obj ? '{' : '[', &err);
        for (size_t i = 0; i < n; i++) {
            gen_ws(b, r);
            if (i > 0) {
                buf_append_byte(b, ',', &err);
                gen_ws(b, r);
            }
            if (is_obj) {
                gen_string(b, r);
                gen_ws(b, r);
                buf_append_byte(b, ':', &err);
                gen_ws(b, r);
            }
            gen_value(b, r, depth + 1);
        }
        gen_ws(b, r);
        buf_append_byte(b, is_obj ? '}' : ']', &err);
    } else if (k < 7) {
        gen_string(b, r);
    } else {
        const char *s = scalars[rng_next(r) % ARRAY_LEN(scalars)];

        buf_append(b, s, strlen(s), &err);
    }
}

/* A container of at least min bytes: an object of generated members. */
static void gen_doc(struct buf *b, uint64_t *r, size_t min)
{
    struct err err;

    buf_reset(b);
    buf_append_byte(b, '{', &err);
    for (size_t i = 0; b->len < min; i++) {
        if (i > 0) {
            buf_append_byte(b, ',', &err);
        }
        gen_string(b, r);
        buf_append_byte(b, ':', &err);
        gen_value(b, r, 1);
    }
    buf_append_byte(b, '}', &err);
}

static void valid_containers_are_accepted_at_every_block_offset_body(void)
{
    uint64_t r = 0x9e3779b97f4a7c15ULL;
    struct buf doc;
    struct buf text;
    struct err err;
    size_t yes = 0;
    size_t total = 0;

    buf_init(&doc, BUF_UNLIMITED);
    buf_init(&text, BUF_UNLIMITED);
    for (int d = 0; d < 40; d++) {
        gen_doc(&doc, &r, 40 + (size_t)d * 23);
        EXPECT(slow_ok(doc.data, doc.len, 64, false));
        /* every shift puts each byte at each place in a block */
        for (size_t shift = 0; shift < 64; shift++) {
            struct json_fast_span sp = {0, 99};
            bool has_surrogate = strstr(doc.data, "\\ud") != NULL;

            buf_reset(&text);
            for (size_t i = 0; i < shift; i++) {
                buf_append_byte(&text, ' ', &err);
            }
            buf_append(&text, doc.data, doc.len, &err);
            buf_append(&text, " ,\"tail\\\\\"", 10, &err); /* not judged */
            total++;
            if (json_fast_container(text.data, text.len, shift, 64, false,
                                    &sp)) {
                yes++;
                EXPECT_EQ_U64(sp.end, shift + doc.len);
            }
            EXPECT(!has_surrogate);
        }
    }
    /* every one of them: nothing here is left to the slow loop */
    EXPECT_EQ_U64(yes, total);
    buf_free(&doc);
    buf_free(&text);
}

TEST(valid_containers_are_accepted_at_every_block_offset)
{
    each_level(valid_containers_are_accepted_at_every_block_offset_body);
}

static void member_counts_and_ends_body(void)
{
    static const struct {
        const char *s;
        size_t end;
        uint32_t count;
    } cases[] = {
        {"[]", 2, 0},
        {"{}", 2, 0},
        {"[1,2,[3,4]]", 11, 3},
        {"{\"a\":1,\"b\":{\"c\":2,\"d\":3}} trailing", 25, 2},
        {"[ \"x\" ]", 7, 1},
        {"[{\"k\":\"a,b]\"},\"\\\"],\"]", 21, 2},
        {"{\"a\":\"x\",\"b\":-2.5e3,\"c\":true,\"d\":null,\"e\":{}}", 45, 5},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct json_fast_span sp = {0, 99};

        EXPECT(json_fast_container(cases[i].s, strlen(cases[i].s), 0, 8, false,
                                   &sp));
        EXPECT_EQ_U64(sp.end, cases[i].end);
        EXPECT_EQ_U64(sp.count, cases[i].count);
    }
}

TEST(member_counts_and_ends)
{
    each_level(member_counts_and_ends_body);
}

/* Broken members at every block offset: the run of plain members (key,
 * ':', a string or number or literal, ',') is walked in one go, and each
 * of its steps still refuses what does not belong there. */
static void broken_members_are_refused_body(void)
{
    static const char *const bad[] = {
        "{\"a\":tru,\"b\":1}", "{\"a\":1,}",         "{\"a\":\"x\",\"b\":}",
        "{\"a\" \"b\"}",       "{\"a\":,\"b\":1}",   "{\"a\":1 \"b\":2}",
        "{\"a\":1,2}",         "{\"a\"::1}",         "{\"a\":1,\"b\"}",
        "{\"a\":01}",          "{\"a\":\"x\"\"y\"}", "{\"a\":-}",
        "{\"a\":1,,\"b\":2}",  "{\"a\":\"x\",:1}",   "{\"a\":1.}",
        "{\"a\":\"x\"]",       "{\"a\":nul}",        "{\"a\":1,\"b\":2,\"c\"}",
    };
    char text[128];
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        size_t n = strlen(bad[i]);

        EXPECT(json_validate(bad[i], n, 8, &err) != 0);
        for (size_t shift = 0; shift < 64; shift++) {
            struct json_fast_span sp = {0, 99};

            memset(text, ' ', shift);
            memcpy(text + shift, bad[i], n);
            EXPECT(!json_fast_container(text, shift + n, shift, 8, true, &sp));
        }
    }
}

TEST(broken_members_are_refused)
{
    each_level(broken_members_are_refused_body);
}

/* What it leaves to the slow loop, which then decides. */
static void undecided_cases_are_left_to_the_loop_body(void)
{
    static const char *const valid_but_left[] = {
        "[\"\\ud83d\\ude00\"]", /* a surrogate pair */
        "\"a string\"",         /* not a container */
        "17",
    };
    char deep[2 * JSON_FAST_DEPTH + 4];
    struct json_fast_span sp = {0, 99};
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(valid_but_left); i++) {
        const char *s = valid_but_left[i];

        EXPECT(!json_fast_container(s, strlen(s), 0, 8, false, &sp));
        EXPECT_EQ_I64(json_validate(s, strlen(s), 8, &err), 0);
    }
    memset(deep, '[', JSON_FAST_DEPTH + 1);
    memset(deep + JSON_FAST_DEPTH + 1, ']', JSON_FAST_DEPTH + 1);
    EXPECT(!json_fast_container(deep, 2 * JSON_FAST_DEPTH + 2, 0, 1000, false,
                                &sp));
    EXPECT_EQ_I64(json_validate(deep, 2 * JSON_FAST_DEPTH + 2, 1000, &err), 0);
    /* at the limit itself it decides */
    EXPECT(json_fast_container(deep + 1, 2 * JSON_FAST_DEPTH, 0,
                               JSON_FAST_DEPTH, false, &sp));
    EXPECT(!json_fast_container(deep + 1, 2 * JSON_FAST_DEPTH, 0,
                                JSON_FAST_DEPTH - 1, false, &sp));
}

TEST(undecided_cases_are_left_to_the_loop)
{
    each_level(undecided_cases_are_left_to_the_loop_body);
}

/* Every generated document, cut short and with each byte replaced by
 * bytes that matter to the masks, at every block offset that matters:
 * a yes is always the parser's yes, at the same end. */
static void a_yes_is_always_the_parsers_yes_body(void)
{
    static const unsigned char subs[] = {
        '"',  '\\', '{',  '}',  '[',  ']',  ':',  ',',  ' ',  '\n', '\r',
        0x01, 0x7f, 0x80, 0xbf, 0xc0, 0xc3, 0xe2, 0xed, 0xf0, 0xf5, 0xff,
        'u',  'e',  '-',  '.',  '0',  '9',  'x',  't',  'D',  '/',
    };
    uint64_t r = 0x2545f4914f6cdd1dULL;
    struct buf doc;
    char text[1024];
    size_t yes = 0;
    size_t no = 0;

    buf_init(&doc, BUF_UNLIMITED);
    for (int d = 0; d < 12; d++) {
        gen_doc(&doc, &r, 60 + (size_t)d * 17);
        if (doc.len + 64 > sizeof(text)) {
            continue;
        }
        for (size_t at = 0; at < doc.len; at++) {
            for (size_t m = 0; m <= ARRAY_LEN(subs); m++) {
                size_t shift = (at * 7 + m) % 64;
                size_t n = shift + doc.len;
                struct json_fast_span sp = {0, 99};

                memset(text, ' ', shift);
                memcpy(text + shift, doc.data, doc.len);
                if (m < ARRAY_LEN(subs)) {
                    text[shift + at] = (char)subs[m];
                } else {
                    n = shift + at; /* cut short */
                }
                for (int line = 0; line < 2; line++) {
                    if (json_fast_container(text, n, shift, 6, line != 0,
                                            &sp)) {
                        yes++;
                        EXPECT(sp.end <= n);
                        EXPECT(slow_ok(text + shift, sp.end - shift, 6,
                                       line != 0));
                    } else {
                        no++;
                    }
                }
            }
        }
    }
    /* both answers occurred, so the check above was exercised */
    EXPECT(yes > 1000 && no > 1000);
    buf_free(&doc);
}

TEST(a_yes_is_always_the_parsers_yes)
{
    each_level(a_yes_is_always_the_parsers_yes_body);
}

/* On one line a raw LF or CR is refused outside strings (inside them any
 * control is). */
static void line_mode_refuses_raw_line_breaks_body(void)
{
    struct json_fast_span sp = {0, 99};

    EXPECT(json_fast_container("[1,\n2]", 6, 0, 8, false, &sp));
    EXPECT(!json_fast_container("[1,\n2]", 6, 0, 8, true, &sp));
    EXPECT(!json_fast_container("[1,\r2]", 6, 0, 8, true, &sp));
    EXPECT(!json_fast_container("[\"a\nb\"]", 7, 0, 8, false, &sp));
    EXPECT(json_fast_container("[1,\t2]", 6, 0, 8, true, &sp));
}

TEST(line_mode_refuses_raw_line_breaks)
{
    each_level(line_mode_refuses_raw_line_breaks_body);
}
