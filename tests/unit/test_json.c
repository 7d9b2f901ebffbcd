/* Tests of the strict JSON scanner, the getters and the writer. */
#include "base/json.h"

#include "harness.h"

static bool valid(const char *s)
{
    struct err err;

    return json_validate(s, strlen(s), JSON_MAX_DEPTH_DEFAULT, &err) == 0;
}

/* Both entry points must agree on every verdict. */
static bool parses(const char *s)
{
    struct json_doc d;
    struct err err;
    int rc = json_parse(&d, s, strlen(s), NULL, &err);

    json_doc_free(&d);
    EXPECT((rc == 0) == valid(s));
    return rc == 0;
}

TEST(valid_documents_are_accepted)
{
    static const char *ok[] = {
        "{}",
        "[]",
        " {\"a\" : [1, 2 ,{}]}\r\n\t",
        "0",
        "-0",
        "1E+400",
        "1.5e-3",
        "12345678901234567890123456789012345678901234567890"
        "12345678901234567890123456789012345678901234567890",
        "\"\"",
        "true",
        "false",
        "null",
        "{\"a\":1,\"a\":2}",
        "\"caf\\u00e9 \\ud83d\\ude00 \\/\\b\\f\\n\\r\\t\\\"\\\\\"",
        "\"\xc3\xa9\xe2\x80\xa8\xf0\x9f\x98\x80\x7f\"",
        "[[[[]]]]",
        "{\"price\":42.00}",
        "-12.5E3"};

    for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
        if (!parses(ok[i])) {
            HARNESS_FAIL("rejected %s", ok[i]);
        }
    }
}

TEST(invalid_documents_are_rejected)
{
    static const char *bad[] = {"",
                                " ",
                                "01",
                                "1.",
                                ".5",
                                "+1",
                                "1e",
                                "1e+",
                                "-",
                                "--1",
                                "[1,]",
                                "{\"a\":tru}",
                                "{\"a\":1,}",
                                "\"abc",
                                "[1 2]",
                                "{\"a\" 1}",
                                "{1:2}",
                                "{\"a\":1",
                                "[",
                                "]",
                                "1 2",
                                "{}x",
                                "nul",
                                "\"\\x\"",
                                "\"\\u12\"",
                                "\"\\ud800\"",
                                "\"\\udc00\"",
                                "\"\\ud800\\u0041\"",
                                "\"a\tb\"",
                                "\"\x01\"",
                                "\"\xc0\xaf\"",
                                "\"\xe0\x80\xaf\"",
                                "\"\xed\xa0\x80\"",
                                "\"\xf4\x90\x80\x80\"",
                                "\"\xff\"",
                                "\"\xc3\"",
                                "\xef\xbb\xbf{}",
                                "\f{}",
                                "{}\v",
                                "[1,,2]",
                                "NaN",
                                "Infinity",
                                "'a'",
                                "[-]",
                                "0x10"};

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        if (parses(bad[i])) {
            HARNESS_FAIL("accepted #%zu %s", i, bad[i]);
        }
    }
}

TEST(nul_bytes_outside_and_inside_strings_are_rejected)
{
    struct err err;

    EXPECT(json_validate("[1]\0", 4, 8, &err) != 0);
    EXPECT(json_validate("\"a\0b\"", 5, 8, &err) != 0);
    EXPECT(json_validate("\"a\\u0000b\"", 10, 8, &err) == 0);
}

/* json_validate_line: a raw LF or CR is whitespace to json_validate but
 * refused on one line; the rest of the grammar is the same. */
TEST(validate_line_refuses_a_raw_lf_or_cr_between_tokens)
{
    static const char *const cut[] = {"[1,\n2]", "{\"a\":\r1}", "\n1", "1\r",
                                      "[\r\n]"};
    static const char *const ok[] = {"[1,\t2]", "{ \"a\" : 1 }", "\"\\n\\r\"",
                                     " 1 "};
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(cut); i++) {
        const char *s = cut[i];

        EXPECT_EQ_I64(json_validate(s, strlen(s), 8, &err), 0);
        EXPECT(json_validate_line(s, strlen(s), 8, &err) != 0);
    }
    for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
        EXPECT_EQ_I64(json_validate_line(ok[i], strlen(ok[i]), 8, &err), 0);
    }
    EXPECT(json_validate_line("[\"a\nb\"]", 7, 8, &err) != 0);
    EXPECT(json_validate_line("[1,]", 4, 8, &err) != 0);
}

/* A stop byte anywhere in a long string (the scan takes 8 or 16 bytes at a
 * time) is found: at every position, each kind of byte is judged as in a
 * short string. */
TEST(a_stop_byte_at_any_position_of_a_long_string_is_seen)
{
    static const struct {
        const char *put;
        size_t n;
        bool is_ok;
    } kinds[] = {
        {"\x01", 1, false}, {"\x1f", 1, false},    {"\"", 1, false},
        {"\\", 1, false},   {"\x80", 1, false},    {"\xff", 1, false},
        {"\\n", 2, true},   {"\xc3\xa9", 2, true}, {"\x7f", 1, true},
        {" ", 1, true},     {"~", 1, true},
    };
    struct err err;
    char s[64];

    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        for (size_t at = 1; at < 40; at++) {
            size_t n = 0;

            memset(s, 'a', sizeof(s));
            s[n++] = '"';
            n = at;
            memcpy(s + n, kinds[k].put, kinds[k].n);
            n += kinds[k].n + 20;
            s[n++] = '"';
            EXPECT((json_validate(s, n, 8, &err) == 0) == kinds[k].is_ok);
        }
    }
}

/* json_validate has a loop of its own (no tokens): on every prefix of
 * some documents, and on each of them with any byte replaced by one of a
 * few structural ones, it accepts exactly what json_parse accepts, and
 * fails at the same byte. */
TEST(validate_answers_as_parse_on_prefixes_and_mutations)
{
    static const char *const seeds[] = {
        "{\"a\":[1,-2.5e+3,true,false,null,{\"b\":\"c\\u00e9\\n\"}],"
        "\"d\":{},\"e\":[],\"f\":\"\xc3\xa9\"}",
        " [ {\"k\" : [ [ ] , { } ] } , \"\\ud83d\\ude00\" , 0 ] ",
        "\"just a string\"",
        "[[[[{\"x\":[[1]]}]]]]",
    };
    static const char subs[] = "{}[]\":,0 \\tn-";
    char buf[256];
    struct err e1;
    struct err e2;

    for (size_t k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++) {
        size_t len = strlen(seeds[k]);

        for (size_t cut = 0; cut <= len; cut++) {
            for (size_t at = 0; at <= cut; at++) {
                for (size_t m = 0; m <= sizeof(subs) - 1; m++) {
                    struct json_doc d;
                    struct json_limits lim = JSON_LIMITS_DEFAULT;
                    int a;
                    int b;

                    if ((at == cut) != (m == 0)) {
                        continue; /* m == 0: the prefix unchanged */
                    }
                    memcpy(buf, seeds[k], cut);
                    if (m > 0) {
                        buf[at] = subs[m - 1];
                    }
                    lim.max_depth = 5;
                    a = json_validate(buf, cut, 5, &e1);
                    b = json_parse(&d, buf, cut, &lim, &e2);
                    if (b == 0) {
                        json_doc_free(&d);
                    }
                    EXPECT_EQ_I64(a, b);
                    if (a != 0 && b != 0) {
                        EXPECT_STR_EQ(e1.msg, e2.msg);
                    }
                    /* Shallow tokens read what lies below them with the
                     * validation loop: the same verdict and message. */
                    for (int td = 0; td <= 2; td++) {
                        struct json_limits sh = {5, td, 0};
                        int c = json_parse(&d, buf, cut, &sh, &e1);

                        if (c == 0) {
                            json_doc_free(&d);
                        }
                        EXPECT_EQ_I64(c, b);
                        if (c != 0 && b != 0) {
                            EXPECT_STR_EQ(e1.msg, e2.msg);
                        }
                    }
                }
            }
        }
    }
}

TEST(error_names_the_byte_offset)
{
    struct json_doc d;
    struct err err;

    EXPECT_EQ_I64(json_parse(&d, "[1,]", 4, NULL, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "invalid JSON at byte 3: unexpected character");
    EXPECT_EQ_I64(json_parse(&d, "{\"a\":1} x", 9, NULL, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg,
                  "invalid JSON at byte 8: trailing characters after the "
                  "value");
    json_doc_free(&d);
}

TEST(depth_over_the_limit_is_rejected)
{
    char deep[300];
    struct err err;

    memset(deep, '[', 129);
    memset(deep + 129, ']', 129);
    EXPECT(json_validate(deep + 1, 256, 128, &err) == 0);
    EXPECT(json_validate(deep, 258, 128, &err) == ERR_INVALID);
    EXPECT(strstr(err.msg, "nested too deeply") != NULL);
    EXPECT(json_validate(deep + 127, 4, 1, &err) == ERR_INVALID);
    EXPECT(json_validate(deep + 128, 2, 1, &err) == 0);
}

TEST(deep_nesting_beyond_the_default_stack_uses_the_heap)
{
    size_t n = 5000;
    char *s = malloc(2 * n);
    struct json_doc d;
    struct json_limits lim = {10000, 2, 0};
    struct err err;

    memset(s, '[', n);
    memset(s + n, ']', n);
    EXPECT_EQ_I64(json_parse(&d, s, 2 * n, &lim, &err), 0);
    EXPECT_EQ_U64(d.ntoks, 3);
    EXPECT_EQ_U64(d.toks[2].len, 2 * n - 4);
    json_doc_free(&d);
    free(s);
}

TEST(tokens_give_spans_types_counts_and_siblings)
{
    const char *s = "{\"a\":[1,\"x\",null],\"b\":{\"c\":true},\"a\":2}";
    struct json_doc d;
    struct err err;
    int a;
    int b;
    struct slice sp;

    EXPECT_EQ_I64(json_parse(&d, s, strlen(s), NULL, &err), 0);
    EXPECT_EQ_I64(json_type(&d, 0), JSON_OBJECT);
    EXPECT_EQ_U64(d.toks[0].count, 3);
    a = json_obj_get(&d, 0, "a");
    EXPECT_EQ_I64(json_type(&d, a), JSON_ARRAY);
    EXPECT_EQ_U64(d.toks[a].count, 3);
    sp = json_span(&d, a);
    EXPECT_MEM_EQ(sp.ptr, sp.len, "[1,\"x\",null]", 12);
    EXPECT_EQ_I64(json_type(&d, json_child(&d, a)), JSON_NUMBER);
    EXPECT_EQ_I64(json_type(&d, json_next(&d, json_child(&d, a))), JSON_STRING);
    EXPECT(json_is_null(&d, json_next(&d, json_next(&d, json_child(&d, a)))));
    EXPECT_EQ_I64(
        json_next(&d, json_next(&d, json_next(&d, json_child(&d, a)))), -1);
    b = json_obj_get(&d, 0, "b");
    EXPECT_EQ_I64(json_type(&d, json_obj_get(&d, b, "c")), JSON_TRUE);
    EXPECT_EQ_I64(json_obj_get(&d, 0, "zz"), -1);
    EXPECT_EQ_I64(json_child(&d, json_obj_get(&d, b, "c")), -1);
    json_doc_free(&d);
}

TEST(empty_containers_have_no_children)
{
    struct json_doc d;
    struct err err;

    EXPECT_EQ_I64(json_parse(&d, "[{},[]]", 7, NULL, &err), 0);
    EXPECT_EQ_U64(d.ntoks, 3);
    EXPECT_EQ_I64(json_child(&d, 1), -1);
    EXPECT_EQ_I64(json_child(&d, 2), -1);
    EXPECT_EQ_I64(json_next(&d, 1), 2);
    json_doc_free(&d);
}

TEST(tok_depth_keeps_deep_values_as_one_span)
{
    const char *s = "{\"items\":[{\"payload\":{\"x\":[1,2,{\"y\":1}]},"
                    "\"q\":\"a\"},{\"payload\":7}]}";
    struct json_limits lim = {128, 3, 0};
    struct json_doc d;
    struct err err;
    int items;
    int it;
    int pl;
    struct slice sp;

    EXPECT_EQ_I64(json_parse(&d, s, strlen(s), &lim, &err), 0);
    items = json_obj_get(&d, 0, "items");
    it = json_child(&d, items);
    pl = json_obj_get(&d, it, "payload");
    sp = json_span(&d, pl);
    EXPECT_MEM_EQ(sp.ptr, sp.len, "{\"x\":[1,2,{\"y\":1}]}", 19);
    EXPECT_EQ_U64(d.toks[pl].count, 1);
    EXPECT_EQ_I64(json_child(&d, pl), -1);
    EXPECT(json_str_eq(&d, json_obj_get(&d, it, "q"), "a"));
    it = json_next(&d, it);
    EXPECT_EQ_I64(json_type(&d, json_obj_get(&d, it, "payload")), JSON_NUMBER);
    EXPECT_EQ_I64(json_next(&d, it), -1);
    EXPECT_EQ_U64(d.ntoks, 11);
    json_doc_free(&d);
    /* The last tokenized containers count their members as a full parse
     * does, though what is inside them is only validated. */
    {
        const char *t = "[{\"a\":[1,[2,3],{}],\"b\":{\"c\":[]},\"d\":0},[],"
                        "[[4],5,\"6\",{\"e\":7}],{}]";
        struct json_limits one = {128, 1, 0};
        struct json_doc full;

        EXPECT_EQ_I64(json_parse(&d, t, strlen(t), &one, &err), 0);
        EXPECT_EQ_I64(json_parse(&full, t, strlen(t), NULL, &err), 0);
        for (int c = json_child(&d, 0), f = json_child(&full, 0); c >= 0;
             c = json_next(&d, c), f = json_next(&full, f)) {
            EXPECT(f >= 0);
            EXPECT_EQ_U64(d.toks[c].count, full.toks[f].count);
            EXPECT_EQ_U64(d.toks[c].len, full.toks[f].len);
        }
        EXPECT_EQ_U64(d.toks[0].count, 4);
        json_doc_free(&d);
        json_doc_free(&full);
    }
    /* Invalid text below tok_depth is still an error. */
    EXPECT(json_parse(&d, "[[[[01]]]]", 10, &lim, &err) == ERR_INVALID);
}

TEST(token_cap_is_too_big)
{
    struct json_limits lim = {128, 128, 3};
    struct json_doc d;
    struct err err;

    EXPECT_EQ_I64(json_parse(&d, "[1,2]", 5, &lim, &err), 0);
    json_doc_free(&d);
    EXPECT_EQ_I64(json_parse(&d, "[1,2,3]", 7, &lim, &err), ERR_TOO_BIG);
    EXPECT_EQ_U64(d.ntoks, 0);
}

TEST(integer_getters_are_strict_and_range_checked)
{
    const char *s = "[9223372036854775807,-9223372036854775808,"
                    "9223372036854775808,18446744073709551615,"
                    "18446744073709551616,1.0,1e2,-0,-1]";
    struct json_doc d;
    struct err err;
    int64_t i;
    uint64_t u;
    int e;

    EXPECT_EQ_I64(json_parse(&d, s, strlen(s), NULL, &err), 0);
    e = json_child(&d, 0);
    EXPECT(json_get_i64(&d, e, &i) && i == INT64_MAX);
    e = json_next(&d, e);
    EXPECT(json_get_i64(&d, e, &i) && i == INT64_MIN);
    e = json_next(&d, e);
    EXPECT(!json_get_i64(&d, e, &i));
    EXPECT(json_get_u64(&d, e, &u) && u == 9223372036854775808ull);
    e = json_next(&d, e);
    EXPECT(json_get_u64(&d, e, &u) && u == UINT64_MAX);
    e = json_next(&d, e);
    EXPECT(!json_get_u64(&d, e, &u));
    e = json_next(&d, e);
    EXPECT(!json_get_i64(&d, e, &i));
    e = json_next(&d, e);
    EXPECT(!json_get_i64(&d, e, &i));
    e = json_next(&d, e);
    EXPECT(json_get_i64(&d, e, &i) && i == 0);
    EXPECT(!json_get_u64(&d, e, &u));
    e = json_next(&d, e);
    EXPECT(!json_get_u64(&d, e, &u));
    EXPECT(!json_get_i64(&d, -1, &i));
    EXPECT(!json_get_i64(&d, 0, &i));
    json_doc_free(&d);
}

TEST(double_and_bool_getters)
{
    const char *s = "[6.366447,1E+400,true,false,\"1\"]";
    struct json_doc d;
    struct err err;
    double v = 0;
    bool b = false;

    EXPECT_EQ_I64(json_parse(&d, s, strlen(s), NULL, &err), 0);
    EXPECT(json_get_double(&d, 1, &v) && v == 6.366447);
    EXPECT(!json_get_double(&d, 2, &v));
    EXPECT(json_get_bool(&d, 3, &b) && b);
    EXPECT(json_get_bool(&d, 4, &b) && !b);
    EXPECT(!json_get_bool(&d, 5, &b));
    EXPECT(!json_get_double(&d, 5, &v));
    json_doc_free(&d);
}

TEST(strings_unescape_to_utf8)
{
    const char *s = "[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\","
                    "\"\\u00e9\\u20AC\\ud83d\\ude00\\u0000\",\"plain\"]";
    struct json_doc d;
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(json_parse(&d, s, strlen(s), NULL, &err), 0);
    EXPECT_EQ_I64(json_get_str(&d, 1, &b, &err), 0);
    EXPECT_MEM_EQ(b.data, b.len, "a\"b\\c/d\b\f\n\r\t", 12);
    buf_reset(&b);
    EXPECT_EQ_I64(json_get_str(&d, 2, &b, &err), 0);
    EXPECT_MEM_EQ(b.data, b.len, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\0", 10);
    EXPECT(d.toks[3].has_escapes == 0);
    EXPECT(json_str_eq(&d, 3, "plain"));
    EXPECT(!json_str_eq(&d, 3, "plai"));
    EXPECT(json_str_eq(&d, 1, "a\"b\\c/d\b\f\n\r\t"));
    EXPECT_EQ_I64(json_get_str(&d, 0, &b, &err), ERR_INVALID);
    buf_free(&b);
    json_doc_free(&d);
}

TEST(obj_get_compares_unescaped_keys_and_takes_the_first)
{
    const char *s = "{\"k\\u0065y\":1,\"key\":2}";
    struct json_doc d;
    struct err err;
    int64_t v = 0;

    EXPECT_EQ_I64(json_parse(&d, s, strlen(s), NULL, &err), 0);
    EXPECT(json_get_i64(&d, json_obj_get(&d, 0, "key"), &v) && v == 1);
    json_doc_free(&d);
}

/* json_obj_pick finds named members in one pass, compares keys
 * unescaped, names the first of them that repeats, and leaves other
 * members (repeated or not) alone. */
TEST(obj_pick_finds_keys_and_names_the_first_repeated_one)
{
    static const char *const keys[] = {"a", "key", "z"};
    /* The last key is escaped and longer than any name picked. */
    const char *once = "{\"x\":0,\"k\\u0065y\":1,\"x\":5,\"a\":[2],\""
                       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                       "aaaaaaaaaaaaaaaaaaaa\\u0061\":3}";
    const char *twice = "{\"z\":1,\"key\":2,\"k\\u0065y\":3,\"z\":4}";
    struct json_doc d;
    struct err err;
    int v[3];
    int64_t n = 0;

    EXPECT_EQ_I64(json_parse(&d, once, strlen(once), NULL, &err), 0);
    EXPECT_EQ_I64(json_obj_pick(&d, 0, keys, 3, v), -1);
    EXPECT_EQ_I64(json_type(&d, v[0]), JSON_ARRAY);
    EXPECT(json_get_i64(&d, v[1], &n) && n == 1);
    EXPECT_EQ_I64(v[2], -1);
    EXPECT_EQ_I64(json_obj_pick(&d, v[0], keys, 3, v), -1); /* an array */
    EXPECT_EQ_I64(v[0], -1);
    json_doc_free(&d);
    EXPECT_EQ_I64(json_parse(&d, twice, strlen(twice), NULL, &err), 0);
    EXPECT_EQ_I64(json_obj_pick(&d, 0, keys, 3, v), 1); /* key, escaped */
    EXPECT(json_get_i64(&d, v[1], &n) && n == 2);
    EXPECT_EQ_I64(json_obj_pick(&d, 0, keys + 2, 1, v), 0); /* z */
    json_doc_free(&d);
}

TEST(payload_spans_are_byte_exact)
{
    const char *s = "{\"payload\":{\"price\":42.00,\"n\":1E+400,"
                    "\"big\":123456789012345678901234567890}}";
    struct json_doc d;
    struct err err;
    struct slice sp;

    EXPECT_EQ_I64(json_parse(&d, s, strlen(s), NULL, &err), 0);
    sp = json_span(&d, json_obj_get(&d, 0, "payload"));
    EXPECT_MEM_EQ(sp.ptr, sp.len, s + 11, strlen(s) - 12);
    json_doc_free(&d);
}

TEST(escape_matches_serde_json)
{
    struct buf b;
    struct err err;
    const char in[] = "a\"\\/\b\f\n\r\t\x01\x1f\x7f\xc3\xa9";

    buf_init(&b, BUF_UNLIMITED);
    EXPECT_EQ_I64(json_escape(&b, in, sizeof(in) - 1, &err), 0);
    EXPECT_STR_EQ(b.data, "\"a\\\"\\\\/\\b\\f\\n\\r\\t\\u0001\\u001f\x7f"
                          "\xc3\xa9\"");
    buf_reset(&b);
    EXPECT_EQ_I64(json_escape(&b, "", 0, &err), 0);
    EXPECT_STR_EQ(b.data, "\"\"");
    buf_free(&b);
    buf_init(&b, 4);
    EXPECT_EQ_I64(json_escape(&b, "abc", 3, &err), ERR_TOO_BIG);
    EXPECT_EQ_U64(b.len, 0);
    buf_free(&b);
}

TEST(utf8_quote_replaces_bad_bytes_and_never_cuts_a_sequence)
{
    char out[32];
    size_t n;

    /* A stray byte and a cut sequence become '?'; good ones stay. */
    n = json_utf8_quote(out,
                        "a\xff\xc3\xa9"
                        "b\xe2\x82",
                        7, sizeof(out));
    EXPECT_MEM_EQ(out, n,
                  "a?\xc3\xa9"
                  "b??",
                  7);
    /* A cap inside a two-byte sequence leaves the whole sequence out. */
    n = json_utf8_quote(out, "ab\xc3\xa9", 4, 3);
    EXPECT_MEM_EQ(out, n, "ab", 2);
    n = json_utf8_quote(out, "ab\xc3\xa9", 4, 4);
    EXPECT_EQ_U64(n, 4);
    /* Overlong forms and surrogates are not valid UTF-8. */
    n = json_utf8_quote(out, "\xc0\xaf\xed\xa0\x80", 5, sizeof(out));
    EXPECT_MEM_EQ(out, n, "?????", 5);
    EXPECT_EQ_U64(json_utf8_quote(out, "abc", 3, 0), 0);
    /* A NUL is valid UTF-8 (a length-counted writer keeps it), but it
     * would end a message: json_msg_quote turns it into '?'. */
    n = json_utf8_quote(out, "queen-s3\0x", 10, sizeof(out));
    EXPECT_MEM_EQ(out, n, "queen-s3\0x", 10);
    n = json_msg_quote(out, "queen-s3\0x\xff", 11, sizeof(out));
    EXPECT_MEM_EQ(out, n, "queen-s3?x?", 11);
}

TEST(utf8_prefix_stops_at_the_first_byte_that_starts_no_sequence)
{
    EXPECT_EQ_U64(json_utf8_prefix(NULL, 0), 0);
    EXPECT_EQ_U64(json_utf8_prefix("plain", 5), 5);
    EXPECT_EQ_U64(json_utf8_prefix("caf\xc3\xa9", 5), 5);
    EXPECT_EQ_U64(json_utf8_prefix("p\xff", 2), 1);
    EXPECT_EQ_U64(json_utf8_prefix("\xc0\xaf", 2), 0);     /* overlong */
    EXPECT_EQ_U64(json_utf8_prefix("ab\xc3", 3), 2);       /* cut short */
    EXPECT_EQ_U64(json_utf8_prefix("\xed\xa0\x80", 3), 0); /* surrogate */
}

TEST(writer_text_is_always_utf8)
{
    struct buf b;
    struct jw w;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    jw_init(&w, &b);
    jw_arr_begin(&w);
    jw_text(&w, "cut \xc3");          /* a message cut inside a sequence */
    jw_text(&w, "\xc3\xa9 \"\xff\""); /* escapes still apply */
    jw_arr_end(&w);
    EXPECT_EQ_I64(jw_finish(&w, &err), 0);
    EXPECT_STR_EQ(b.data, "[\"cut ?\",\"\xc3\xa9 \\\"?\\\"\"]");
    buf_free(&b);
}

TEST(writer_makes_compact_json_with_commas)
{
    struct buf b;
    struct jw w;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    jw_init(&w, &b);
    jw_obj_begin(&w);
    jw_key(&w, "a");
    jw_i64(&w, -5);
    jw_key(&w, "b");
    jw_arr_begin(&w);
    jw_u64(&w, UINT64_MAX);
    jw_bool(&w, true);
    jw_null(&w);
    jw_obj_begin(&w);
    jw_obj_end(&w);
    jw_arr_begin(&w);
    jw_arr_end(&w);
    jw_cstr(&w, "x\ny");
    jw_raw(&w, "{\"p\":42.00}", 11);
    jw_arr_end(&w);
    jw_key(&w, "d");
    jw_double(&w, 6.366447);
    jw_key(&w, "e");
    jw_double(&w, 0.5);
    jw_key(&w, "f");
    jw_double(&w, 3.0);
    jw_key(&w, "g");
    jw_double(&w, 0.1);
    jw_obj_end(&w);
    EXPECT_EQ_I64(jw_finish(&w, &err), 0);
    EXPECT_STR_EQ(b.data,
                  "{\"a\":-5,\"b\":[18446744073709551615,true,null,{},[],"
                  "\"x\\ny\",{\"p\":42.00}],\"d\":6.366447,\"e\":0.5,\"f\":3.0,"
                  "\"g\":0.1}");
    EXPECT(valid(b.data));
    buf_free(&b);
}

TEST(writer_error_is_sticky)
{
    struct buf b;
    struct jw w;
    struct err err;

    buf_init(&b, 8);
    jw_init(&w, &b);
    jw_arr_begin(&w);
    jw_cstr(&w, "0123456789");
    jw_i64(&w, 1);
    jw_arr_end(&w);
    EXPECT_EQ_I64(jw_finish(&w, &err), ERR_TOO_BIG);
    EXPECT_STR_EQ(b.data, "[");
    buf_free(&b);
    buf_init(&b, BUF_UNLIMITED);
    jw_init(&w, &b);
    jw_double(&w, 1.0 / 0.0);
    EXPECT_EQ_I64(jw_finish(&w, &err), ERR_INVALID);
    buf_free(&b);
}

TEST(double_round_trips_shortest)
{
    static const double v[] = {1e-7,    123456.789, 1e21, -2.5,
                               1.0 / 3, 5.0,        -0.0, 1e15};
    struct buf b;
    struct jw w;
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        buf_init(&b, BUF_UNLIMITED);
        jw_init(&w, &b);
        jw_double(&w, v[i]);
        EXPECT_EQ_I64(jw_finish(&w, &err), 0);
        EXPECT(strtod(b.data, NULL) == v[i]);
        EXPECT(strpbrk(b.data, ".e") != NULL); /* a float, never an int */
        EXPECT(valid(b.data));
        buf_free(&b);
    }
}

/* json_compact drops the whitespace between tokens and nothing inside a
 * string, whatever its escapes; the result parses to the same tokens. */
TEST(compact_drops_the_layout_and_keeps_strings_whole)
{
    static const struct {
        const char *in;
        const char *out;
    } cases[] = {
        {" { \"a\" :\t[ 1 ,\r\n2 ] } ", "{\"a\":[1,2]}"},
        {"\"a  b\"", "\"a  b\""},
        {"[\"x\\\" y\" , \"\\\\\" , \" \\\\\\\" \"]",
         "[\"x\\\" y\",\"\\\\\",\" \\\\\\\" \"]"},
        {"\"\\u0020 \"", "\"\\u0020 \""},
        {"null", "null"},
        {" -1.5e3 ", "-1.5e3"},
    };
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct buf b;

        buf_init(&b, BUF_UNLIMITED);
        EXPECT_EQ_I64(json_compact(&b, cases[i].in, strlen(cases[i].in), &err),
                      0);
        EXPECT_STR_EQ(b.data, cases[i].out);
        EXPECT(valid(b.data));
        buf_free(&b);
    }
}
