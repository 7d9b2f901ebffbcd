/* Fuzz target for the JSON scanner: arbitrary bytes must never crash or
 * leak; json_validate and json_parse (with full and shallow tokens) must
 * agree, and json_validate_line with them when there is no raw LF or CR; every
 * token's span lies inside the input and starts with the byte its type implies;
 * unescaped strings and escaped output stay valid JSON; the block-wise check
 * (base/json_fast.h) says yes only where the full-token parser does, at the
 * same end. */
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/json_fast.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A string unescapes, and its raw text escaped again is a valid string. */
static void check_string(const struct json_doc *d, uint32_t i, struct buf *b)
{
    const struct json_tok *t = &d->toks[i];
    struct err err;

    buf_reset(b);
    ASSERT(json_get_str(d, (int)i, b, &err) == 0);
    buf_reset(b);
    ASSERT(json_escape(b, d->text + t->start, t->len, &err) == 0);
    ASSERT(json_validate(b->data, b->len, 8, &err) == 0);
}

static void check_tokens(const struct json_doc *d, size_t size)
{
    static const char first[] = {'n', 'f', 't', '\0', '"', '[', '{'};
    struct buf b;

    buf_init(&b, BUF_UNLIMITED);
    for (uint32_t i = 0; i < d->ntoks; i++) {
        const struct json_tok *t = &d->toks[i];
        char c = d->text[t->start];
        ASSERT((size_t)t->start + t->len <= size && t->len > 0);
        ASSERT(t->next == 0 || t->next > i);
        ASSERT(t->type == JSON_NUMBER ? c == '-' || (c >= '0' && c <= '9')
                                      : c == first[t->type]);
        if (t->type == JSON_STRING) {
            check_string(d, i, &b);
        }
    }
    buf_free(&b);
}

/* json_fast.h (1): its yes, on a whole line or not, with each classifier,
 * is the full-token parser's yes for the container it read. */
static void check_fast(const char *s, size_t size,
                       const struct json_limits *full)
{
    for (int k = 0; k < 2 * (json_fast_level_max() + 1); k++) {
        int line = k % 2;
        struct json_doc d;
        struct err err;
        struct json_fast_span sp = {0, 99};

        json_fast_set_level(k / 2); /* every classifier the CPU has */
        if (!json_fast_container(s, size, 0, full->max_depth, line != 0, &sp)) {
            continue;
        }
        ASSERT(sp.end <= size);
        ASSERT(json_parse(&d, s, sp.end, full, &err) == 0);
        ASSERT(d.ntoks > 0 && d.toks[0].count == sp.count);
        json_doc_free(&d);
        ASSERT(line == 0 || (memchr(s, '\n', sp.end) == NULL &&
                             memchr(s, '\r', sp.end) == NULL));
    }
    json_fast_set_level(-1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct json_limits shallow = {64, 1, 0};
    struct json_limits full = {64, 64, 0};
    struct json_doc d;
    struct err err;
    int v = json_validate(s, size, 64, &err);
    int p = json_parse(&d, s, size, &full, &err);

    ASSERT((v == 0) == (p == 0));
    /* on one line: the same verdict, and no raw LF or CR at all */
    ASSERT((json_validate_line(s, size, 64, &err) == 0) ==
           (v == 0 && memchr(s, '\n', size) == NULL &&
            memchr(s, '\r', size) == NULL));
    if (p == 0) {
        check_tokens(&d, size);
        json_doc_free(&d);
    }
    check_fast(s, size, &full);
    p = json_parse(&d, s, size, &shallow, &err);
    ASSERT((v == 0) == (p == 0));
    if (p == 0) {
        ASSERT(d.ntoks >= 1 && d.toks[0].len + d.toks[0].start <= size);
        check_tokens(&d, size);
        json_doc_free(&d);
    }
    return 0;
}
