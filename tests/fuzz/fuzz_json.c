/* Fuzz target for the JSON scanner: arbitrary bytes must never crash or
 * leak; json_validate and json_parse (with full and shallow tokens) must
 * agree, and json_validate_line with them when there is no raw LF or CR; every
 * token's span lies inside the input and starts with the byte its type implies;
 * unescaped strings and escaped output stay valid JSON. */
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

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
    p = json_parse(&d, s, size, &shallow, &err);
    ASSERT((v == 0) == (p == 0));
    if (p == 0) {
        ASSERT(d.ntoks >= 1 && d.toks[0].len + d.toks[0].start <= size);
        check_tokens(&d, size);
        json_doc_free(&d);
    }
    return 0;
}
