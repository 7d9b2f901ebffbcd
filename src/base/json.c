/* JSON: a strict RFC 8259 scanner that returns byte spans, and a compact
 * writer with serde_json's string escaping.
 *
 * The scanner is one pass over the text with an explicit stack of open
 * containers (no recursion, so hostile nesting costs a bounded array, not the
 * C stack). Each open container is a frame; the loop alternates between
 * "a value starts here" (scan a scalar or open a frame) and "a value just
 * ended" (a comma, or the close of the innermost frame). A value is given a
 * token only when its depth is <= tok_depth, so a push body of 64 MiB makes
 * tokens for its envelope and a single span per payload; the payload's
 * insides are still validated byte by byte.
 *
 * Tokens live in one growing array; they are referred to by index, never by
 * pointer, since the array moves when it grows. Sibling links (`next`) are
 * filled in as the next sibling appears, via the frame's `last` index. */
#include "base/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/json_fast.h"
#include "base/xalloc.h"

struct jp_frame {
    int32_t tok;    /* token of the container, -1 when not tokenized */
    int32_t last;   /* last tokenized element / key, -1 = none yet */
    uint32_t count; /* elements or pairs so far */
    uint8_t is_obj;
};

struct jp {
    const char *s;
    size_t n;
    size_t pos;
    struct json_doc *doc; /* NULL: validate only */
    int max_depth;
    int tok_depth;
    size_t max_tokens;
    bool is_line; /* a raw LF or CR is not whitespace: one line's text */
    struct jp_frame *frames;
    int nframes;
    uint8_t *kinds; /* max_depth container kinds, for jv_inside */
    struct err *err;
};

/* Bytes that end the fast run inside a string: controls, '"', '\\' and
 * every non-ASCII lead byte (checked as UTF-8). */
static const uint8_t jp_str_stop[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* jp_run_len(s): how many of the JP_STEP bytes at s come before the first
 * stop byte (a byte >= 0x80, < 0x20, '"' or '\\'); JP_STEP when there is
 * none. Fewer may be counted (down to 0), never more: the table loop after
 * it goes on byte by byte. */
#if defined(__SSE2__)
#define JP_STEP 16

static inline size_t jp_run_len(const unsigned char *s)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)s);
    /* signed: bytes >= 0x80 are negative, so below 0x20 as well */
    __m128i m =
        _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                     _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                  _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
    unsigned bits = (unsigned)_mm_movemask_epi8(m);

    return bits == 0 ? JP_STEP : (size_t)__builtin_ctz(bits);
}
#else
#define JP_STEP 8
#define JP_ONES ((uint64_t)0x0101010101010101)

/* The high bit of each byte that may be a stop byte. A borrow can flag a
 * byte above the first true stop byte, never one below it, so on a
 * little-endian machine the lowest flag is exact. */
static inline size_t jp_run_len(const unsigned char *s)
{
    uint64_t v;
    uint64_t q;
    uint64_t b;
    uint64_t m;

    memcpy(&v, s, 8);
    q = v ^ JP_ONES * '"';
    b = v ^ JP_ONES * '\\';
    m = (v | ((v - JP_ONES * 0x20) & ~v) | ((q - JP_ONES) & ~q) |
         ((b - JP_ONES) & ~b)) &
        JP_ONES * 0x80;
    if (m == 0) {
        return JP_STEP;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (size_t)__builtin_ctzll(m) / 8;
#else
    return 0;
#endif
}
#endif

/* The index of the first stop byte of s[i..n), or n: JP_STEP bytes at a
 * time, then the table decides the rest. */
static inline size_t jp_stop_at(const unsigned char *s, size_t i, size_t n)
{
    while (i + JP_STEP <= n) {
        size_t k = jp_run_len(s + i);

        i += k;
        if (k < JP_STEP) {
            break;
        }
    }
    while (i < n && !jp_str_stop[s[i]]) {
        i++;
    }
    return i;
}

static int jp_fail(struct jp *p, const char *reason)
{
    return err_set(p->err, ERR_INVALID, "invalid JSON at byte %zu: %s", p->pos,
                   reason);
}

static inline void jp_skip_ws(struct jp *p)
{
    /* compact JSON has none: one compare decides the common case */
    if (p->pos < p->n && (unsigned char)p->s[p->pos] > ' ') {
        return;
    }
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && ((c != '\n' && c != '\r') || p->is_line)) {
            return;
        }
        p->pos++;
    }
}

/* Append a token for a value at depth `depth` starting at p->pos; returns
 * its index, -1 when this depth is not tokenized, -2 on the token cap. */
static int32_t jp_tok(struct jp *p, int depth, enum json_type type)
{
    struct json_doc *d = p->doc;
    struct json_tok *t;

    if (d == NULL || depth > p->tok_depth) {
        return -1;
    }
    if (p->max_tokens != 0 && d->ntoks >= p->max_tokens) {
        err_set(p->err, ERR_TOO_BIG, "JSON at byte %zu: more than %zu tokens",
                p->pos, p->max_tokens);
        return -2;
    }
    if (d->ntoks == d->cap) {
        d->cap = d->cap == 0 ? 64 : d->cap * 2;
        d->toks = xrealloc(d->toks, d->cap * sizeof(*d->toks));
    }
    t = &d->toks[d->ntoks];
    t->type = (uint8_t)type;
    t->has_escapes = 0;
    t->start = (uint32_t)p->pos;
    t->len = 0;
    t->count = 0;
    t->next = 0;
    return (int32_t)d->ntoks++;
}

/* Link a new tokenized child into its parent frame's sibling chain. */
static void jp_link(struct jp *p, int32_t t)
{
    struct jp_frame *f;

    if (t < 0 || p->nframes == 0) {
        return;
    }
    f = &p->frames[p->nframes - 1];
    if (f->is_obj) {
        return; /* an object links its keys, see jp_key */
    }
    if (f->last >= 0) {
        p->doc->toks[f->last].next = (uint32_t)t;
    }
    f->last = t;
}

size_t json_utf8_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80;
    unsigned char hi = 0xbf;
    size_t len;

    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80; /* overlong */
        hi = c == 0xed ? 0x9f : 0xbf; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        lo = c == 0xf0 ? 0x90 : 0x80; /* overlong */
        hi = c == 0xf4 ? 0x8f : 0xbf; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (avail < len || s[1] < lo || s[1] > hi) {
        return 0;
    }
    for (size_t i = 2; i < len; i++) {
        if (s[i] < 0x80 || s[i] > 0xbf) {
            return 0;
        }
    }
    return len;
}

size_t json_msg_quote(char *dst, const char *src, size_t n, size_t max)
{
    size_t o = json_utf8_quote(dst, src, n, max);

    for (size_t i = 0; i < o; i++) {
        if (dst[i] == '\0') {
            dst[i] = '?';
        }
    }
    return o;
}

size_t json_utf8_prefix(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    while (i < n) {
        size_t len = json_utf8_len(p + i, n - i);

        if (len == 0) {
            break;
        }
        i += len;
    }
    return i;
}

size_t json_utf8_quote(char *dst, const char *src, size_t n, size_t max)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0;
    size_t o = 0;

    while (i < n) {
        size_t len = json_utf8_len(s + i, n - i);

        if (len == 0) {
            if (o == max) {
                break;
            }
            dst[o++] = '?';
            i++;
            continue;
        }
        if (o + len > max) {
            break;
        }
        memcpy(dst + o, s + i, len);
        o += len;
        i += len;
    }
    return o;
}

static int jp_hex4(const char *s, size_t avail, uint32_t *out)
{
    uint32_t v = 0;

    if (avail < 4) {
        return -1;
    }
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d;
        if (c >= '0' && c <= '9') {
            d = c - '0';
        } else if (c >= 'a' && c <= 'f') {
            d = c - 'a' + 10;
        } else if (c >= 'A' && c <= 'F') {
            d = c - 'A' + 10;
        } else {
            return -1;
        }
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* p->pos is at a backslash. Checks one escape (a surrogate pair counts as
 * one) and moves past it. */
static int jp_escape(struct jp *p)
{
    uint32_t u;
    uint32_t lo;
    size_t at = p->pos + 1;

    if (at >= p->n) {
        return jp_fail(p, "unterminated string");
    }
    if (strchr("\"\\/bfnrt", p->s[at]) != NULL && p->s[at] != '\0') {
        p->pos = at + 1;
        return 0;
    }
    if (p->s[at] != 'u' || jp_hex4(p->s + at + 1, p->n - at - 1, &u) != 0) {
        return jp_fail(p, "bad escape in string");
    }
    at += 5;
    if (u >= 0xdc00 && u <= 0xdfff) {
        return jp_fail(p, "lone low surrogate escape in string");
    }
    if (u >= 0xd800 && u <= 0xdbff) {
        if (at + 1 >= p->n || p->s[at] != '\\' || p->s[at + 1] != 'u' ||
            jp_hex4(p->s + at + 2, p->n - at - 2, &lo) != 0 || lo < 0xdc00 ||
            lo > 0xdfff) {
            return jp_fail(p, "lone high surrogate escape in string");
        }
        at += 6;
    }
    p->pos = at;
    return 0;
}

/* p->pos is at the opening quote; on success p->pos is past the closing
 * one. *esc tells whether a backslash occurred. */
static int jp_string(struct jp *p, uint8_t *esc)
{
    const unsigned char *s = (const unsigned char *)p->s;
    size_t i = p->pos + 1;

    *esc = 0;
    for (;;) {
        i = jp_stop_at(s, i, p->n);
        if (i >= p->n) {
            p->pos = i;
            return jp_fail(p, "unterminated string");
        }
        if (s[i] == '"') {
            p->pos = i + 1;
            return 0;
        }
        p->pos = i;
        if (s[i] == '\\') {
            *esc = 1;
            if (jp_escape(p) != 0) {
                return p->err->code;
            }
            i = p->pos;
        } else if (s[i] < 0x20) {
            return jp_fail(p, "control character in string");
        } else {
            size_t k = json_utf8_len(s + i, p->n - i);
            if (k == 0) {
                return jp_fail(p, "invalid UTF-8 in string");
            }
            i += k;
        }
    }
}

static size_t jp_digits(struct jp *p)
{
    size_t start = p->pos;

    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        p->pos++;
    }
    return p->pos - start;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int jp_number(struct jp *p)
{
    if (p->s[p->pos] == '-') {
        p->pos++;
    }
    if (p->pos < p->n && p->s[p->pos] == '0') {
        p->pos++;
    } else if (jp_digits(p) == 0) {
        return jp_fail(p, "bad number");
    }
    if (p->pos < p->n && p->s[p->pos] == '.') {
        p->pos++;
        if (jp_digits(p) == 0) {
            return jp_fail(p, "bad number: no digit after '.'");
        }
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) {
            p->pos++;
        }
        if (jp_digits(p) == 0) {
            return jp_fail(p, "bad number: no digit in exponent");
        }
    }
    return 0;
}

static int jp_literal(struct jp *p, const char *lit, size_t n)
{
    if (p->n - p->pos < n || memcmp(p->s + p->pos, lit, n) != 0) {
        return jp_fail(p, "unexpected character");
    }
    p->pos += n;
    return 0;
}

/* Scan a scalar at p->pos (depth = number of open frames). */
static int jp_scalar(struct jp *p, char c)
{
    int depth = p->nframes;
    enum json_type type;
    size_t start = p->pos;
    size_t end;
    uint8_t esc = 0;
    int32_t t;
    int rc;

    if (c == '"') {
        type = JSON_STRING;
        rc = jp_string(p, &esc);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        type = JSON_NUMBER;
        rc = jp_number(p);
    } else if (c == 't') {
        type = JSON_TRUE;
        rc = jp_literal(p, "true", 4);
    } else if (c == 'f') {
        type = JSON_FALSE;
        rc = jp_literal(p, "false", 5);
    } else if (c == 'n') {
        type = JSON_NULL;
        rc = jp_literal(p, "null", 4);
    } else {
        return jp_fail(p, "unexpected character");
    }
    if (rc != 0) {
        return rc;
    }
    end = p->pos;
    p->pos = start;
    t = jp_tok(p, depth, type);
    p->pos = end;
    if (t == -2) {
        return p->err->code;
    }
    if (t >= 0) {
        p->doc->toks[t].len = (uint32_t)(end - start);
        p->doc->toks[t].has_escapes = esc;
        jp_link(p, t);
    }
    return 0;
}

/* Open a container at p->pos (the bracket). */
static int jp_open(struct jp *p, char c)
{
    struct jp_frame *f;
    int32_t t;

    if (p->nframes >= p->max_depth) {
        return jp_fail(p, "nested too deeply");
    }
    t = jp_tok(p, p->nframes, c == '{' ? JSON_OBJECT : JSON_ARRAY);
    if (t == -2) {
        return p->err->code;
    }
    jp_link(p, t);
    f = &p->frames[p->nframes++];
    f->tok = t;
    f->last = -1;
    f->count = 0;
    f->is_obj = c == '{';
    p->pos++;
    return 0;
}

/* p->pos is at the closing bracket of the innermost frame. */
static void jp_close(struct jp *p)
{
    struct jp_frame *f = &p->frames[--p->nframes];

    p->pos++;
    if (f->tok >= 0) {
        struct json_tok *t;

        ASSERT(p->doc->toks != NULL); /* jp_tok made f->tok */
        t = &p->doc->toks[f->tok];
        t->len = (uint32_t)(p->pos - t->start);
        t->count = f->count;
    }
}

/* A key, the ':' and the whitespace after it; p->pos is at the key. */
static int jp_key(struct jp *p)
{
    struct jp_frame *f = &p->frames[p->nframes - 1];
    size_t start = p->pos;
    uint8_t esc = 0;
    int32_t t;

    if (p->pos >= p->n || p->s[p->pos] != '"') {
        return jp_fail(p, "expected a string key");
    }
    if (jp_string(p, &esc) != 0) {
        return p->err->code;
    }
    f->count++;
    if (p->doc != NULL && p->nframes <= p->tok_depth) {
        size_t end = p->pos;
        p->pos = start;
        t = jp_tok(p, p->nframes, JSON_STRING);
        p->pos = end;
        if (t == -2) {
            return p->err->code;
        }
        p->doc->toks[t].len = (uint32_t)(end - start);
        p->doc->toks[t].has_escapes = esc;
        if (f->last >= 0) {
            p->doc->toks[f->last].next = (uint32_t)t;
        }
        f->last = t;
    }
    jp_skip_ws(p);
    if (p->pos >= p->n || p->s[p->pos] != ':') {
        return jp_fail(p, "expected ':' after a key");
    }
    p->pos++;
    return 0;
}

/* After a value: commas and closes until the next value starts (returns 1)
 * or the text ends (returns 0). */
static int jp_after_value(struct jp *p)
{
    while (p->nframes > 0) {
        struct jp_frame *f = &p->frames[p->nframes - 1];
        char c;
        jp_skip_ws(p);
        if (p->pos >= p->n) {
            jp_fail(p, "unexpected end of text");
            return -1;
        }
        c = p->s[p->pos];
        if (c == (f->is_obj ? '}' : ']')) {
            jp_close(p);
        } else if (c == ',') {
            p->pos++;
            jp_skip_ws(p);
            if (f->is_obj) {
                return jp_key(p) == 0 ? 1 : -1;
            }
            f->count++;
            return 1;
        } else {
            jp_fail(p,
                    f->is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
            return -1;
        }
    }
    jp_skip_ws(p);
    if (p->pos != p->n) {
        jp_fail(p, "trailing characters after the value");
        return -1;
    }
    return 0;
}

/* A container was just opened: handle an immediate close or the first
 * member's key. Returns 1 when a value must follow, 0 when it closed, -1 on
 * error. */
static int jp_first_member(struct jp *p)
{
    struct jp_frame *f = &p->frames[p->nframes - 1];

    jp_skip_ws(p);
    if (p->pos >= p->n) {
        jp_fail(p, "unexpected end of text");
        return -1;
    }
    if (p->s[p->pos] == (f->is_obj ? '}' : ']')) {
        jp_close(p);
        return 0;
    }
    if (f->is_obj) {
        return jp_key(p) == 0 ? 1 : -1;
    }
    f->count++;
    return 1;
}

static size_t jv_inside(struct jp *p, const unsigned char *s, size_t i,
                        uint8_t *is_obj, int base, uint32_t *count);

/* The container just opened holds nothing that gets a token: the
 * validation loop reads it to its close, which is the one kept tokens'
 * loop would have made (same rules and errors, direct members counted).
 * Returns 0 (closed) or -1. */
static int jp_untokenized(struct jp *p)
{
    struct jp_frame *f = &p->frames[p->nframes - 1];
    struct json_fast_span sp;
    size_t end;

    /* json_fast.h (1): a yes is this loop's yes */
    if (json_fast_container(p->s, p->n, p->pos - 1,
                            p->max_depth - p->nframes + 1, p->is_line, &sp)) {
        f->count = sp.count;
        p->pos = sp.end - 1;
        jp_close(p);
        return 0;
    }
    p->kinds[p->nframes - 1] = f->is_obj;
    end = jv_inside(p, (const unsigned char *)p->s, p->pos, p->kinds,
                    p->nframes - 1, &f->count);
    if (end == 0) {
        return -1;
    }
    p->pos = end - 1;
    jp_close(p);
    return 0;
}

static int jp_run(struct jp *p)
{
    int rc;

    do {
        char c;
        jp_skip_ws(p);
        if (p->pos >= p->n) {
            return jp_fail(p, "unexpected end of text");
        }
        c = p->s[p->pos];
        if (c == '{' || c == '[') {
            if (jp_open(p, c) != 0) {
                return p->err->code;
            }
            if (p->nframes > p->tok_depth) {
                rc = jp_untokenized(p); /* nothing inside gets a token */
            } else {
                rc = jp_first_member(p);
            }
            if (rc < 0) {
                return p->err->code;
            }
            if (rc == 1) {
                continue; /* the first member's value */
            }
        } else if (jp_scalar(p, c) != 0) {
            return p->err->code;
        }
        rc = jp_after_value(p);
        if (rc < 0) {
            return p->err->code;
        }
    } while (rc == 1);
    return 0;
}

static int jp_start(struct jp *p, struct err *err)
{
    struct jp_frame local[JSON_MAX_DEPTH_DEFAULT];
    uint8_t local_kinds[JSON_MAX_DEPTH_DEFAULT];
    int rc;

    if (p->n > JSON_TEXT_MAX) {
        return err_set(err, ERR_TOO_BIG,
                       "JSON text of %zu bytes is 2 GiB or more", p->n);
    }
    if (p->max_depth < 1) {
        p->max_depth = 1;
    }
    p->frames = local;
    p->kinds = local_kinds;
    if (p->max_depth > (int)ARRAY_LEN(local)) {
        p->frames = xmalloc((size_t)p->max_depth * sizeof(*p->frames));
        p->kinds = xmalloc((size_t)p->max_depth);
    }
    p->nframes = 0;
    p->pos = 0;
    p->err = err;
    rc = jp_run(p);
    if (p->frames != local) {
        free(p->frames);
        free(p->kinds);
    }
    p->frames = NULL; /* local dies here */
    p->kinds = NULL;
    return rc;
}

int json_parse(struct json_doc *doc, const char *text, size_t len,
               const struct json_limits *lim, struct err *err)
{
    struct json_limits l = lim != NULL ? *lim : JSON_LIMITS_DEFAULT;
    struct jp p = {.s = text,
                   .n = len,
                   .doc = doc,
                   .max_depth = l.max_depth,
                   .tok_depth = l.tok_depth,
                   .max_tokens = l.max_tokens};
    int rc;

    doc->text = text;
    doc->len = len;
    doc->toks = NULL;
    doc->ntoks = 0;
    doc->cap = 0;
    rc = jp_start(&p, err);
    if (rc != 0) {
        json_doc_free(doc);
    }
    return rc;
}

void json_doc_free(struct json_doc *doc)
{
    free(doc->toks);
    doc->toks = NULL;
    doc->ntoks = 0;
    doc->cap = 0;
}

/* ---- validation only ----
 *
 * The loop keeps its place in locals (the text, its length, the index)
 * and scans the common string (printable ASCII up to the quote) itself;
 * anything else in a string, and every number and literal, goes through
 * the shared jp_ functions from p->pos, so the rules and the messages are
 * json_parse's. */

static int jv_fail(struct jp *p, size_t at, const char *reason)
{
    p->pos = at;
    return jp_fail(p, reason);
}

/* The index of the first byte at or after i that is not whitespace (a raw
 * LF or CR is not, on one line). */
static inline size_t jv_ws(const struct jp *p, const unsigned char *s, size_t i)
{
    if (i < p->n && s[i] > ' ') {
        return i;
    }
    while (i < p->n && (s[i] == ' ' || s[i] == '\t' ||
                        ((s[i] == '\n' || s[i] == '\r') && !p->is_line))) {
        i++;
    }
    return i;
}

/* The string opening at s[i]: the index past its closing quote, or 0 on
 * an error (p->err set by jp_string). */
static inline size_t jv_string(struct jp *p, const unsigned char *s, size_t i)
{
    size_t at = jp_stop_at(s, i + 1, p->n);
    uint8_t esc = 0;

    if (at < p->n && s[at] == '"') {
        return at + 1;
    }
    p->pos = i; /* an escape, UTF-8, a control or the end: the full rules */
    return jp_string(p, &esc) == 0 ? p->pos : 0;
}

/* A key at s[i], the whitespace and the ':' after it: the index past the
 * ':', or 0 on an error. */
static size_t jv_key(struct jp *p, const unsigned char *s, size_t i)
{
    if (i >= p->n || s[i] != '"') {
        jv_fail(p, i, "expected a string key");
        return 0;
    }
    i = jv_string(p, s, i);
    if (i == 0) {
        return 0;
    }
    i = jv_ws(p, s, i);
    if (i >= p->n || s[i] != ':') {
        jv_fail(p, i, "expected ':' after a key");
        return 0;
    }
    return i + 1;
}

/* A scalar at p->pos starting with c (jp_scalar without tokens). */
static int jv_scalar(struct jp *p, char c)
{
    uint8_t esc = 0;

    if (c == '"') {
        return jp_string(p, &esc);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        return jp_number(p);
    }
    if (c == 't') {
        return jp_literal(p, "true", 4);
    }
    if (c == 'f') {
        return jp_literal(p, "false", 5);
    }
    if (c == 'n') {
        return jp_literal(p, "null", 4);
    }
    return jp_fail(p, "unexpected character");
}

/* A value starts at s[i] (c, not whitespace): a container opens (its
 * kind pushed on is_obj, and closed at once when empty) or a scalar is
 * read. The index after what was read, or 0 on an error. */
static size_t jv_value(struct jp *p, const unsigned char *s, size_t i,
                       uint8_t *is_obj, int *depth)
{
    unsigned char c = s[i];

    if (c == '"') {
        return jv_string(p, s, i);
    }
    if (c != '{' && c != '[') {
        p->pos = i;
        return jv_scalar(p, (char)c) == 0 ? p->pos : 0;
    }
    if (*depth >= p->max_depth) {
        jv_fail(p, i, "nested too deeply");
        return 0;
    }
    is_obj[(*depth)++] = c == '{';
    i = jv_ws(p, s, i + 1);
    if (i >= p->n) {
        jv_fail(p, i, "unexpected end of text");
        return 0;
    }
    if (s[i] == (c == '{' ? '}' : ']')) {
        (*depth)--;
        return i + 1;
    }
    return c == '{' ? jv_key(p, s, i) : i; /* the first member's value */
}

/* After a value inside the container at depth base: the closes that
 * follow it (never past base), then a comma and, in an object, the next
 * key, counting base's direct members. The index of the next value, the
 * index past base's closing bracket (*depth is base then), or 0 on an
 * error. */
static size_t jv_next(struct jp *p, size_t i, const uint8_t *is_obj, int *depth,
                      int base, uint32_t *count)
{
    const unsigned char *s = (const unsigned char *)p->s;

    for (;;) {
        bool o = is_obj[*depth - 1] != 0;

        i = jv_ws(p, s, i);
        if (i >= p->n) {
            jv_fail(p, i, "unexpected end of text");
            return 0;
        }
        if (s[i] == (o ? '}' : ']')) {
            i++;
            if (--*depth == base) {
                return i;
            }
            continue;
        }
        if (s[i] != ',') {
            jv_fail(p, i, o ? "expected ',' or '}'" : "expected ',' or ']'");
            return 0;
        }
        *count += *depth == base + 1;
        i = jv_ws(p, s, i + 1);
        return o ? jv_key(p, s, i) : i;
    }
}

/* The rest of a container that sits at depth base (is_obj[base] says its
 * kind) and whose opening bracket is s[i - 1]: validated with the grammar,
 * limits and errors of jp_run, using is_obj (max_depth entries) as the
 * stack of the containers inside it, and its direct members counted into
 * *count. The index past its closing bracket, or 0 on an error. */
static size_t jv_inside(struct jp *p, const unsigned char *s, size_t i,
                        uint8_t *is_obj, int base, uint32_t *count)
{
    int depth = base + 1;

    i = jv_ws(p, s, i);
    if (i >= p->n) {
        jv_fail(p, i, "unexpected end of text");
        return 0;
    }
    *count = 0;
    if (s[i] == (is_obj[base] ? '}' : ']')) {
        return i + 1;
    }
    if (is_obj[base] && (i = jv_key(p, s, i)) == 0) {
        return 0;
    }
    *count = 1;
    while (depth > base) {
        int was = depth;

        i = jv_ws(p, s, i);
        if (i >= p->n) {
            jv_fail(p, i, "unexpected end of text");
            return 0;
        }
        i = jv_value(p, s, i, is_obj, &depth);
        if (i != 0 && depth == was) { /* not a container that stays open */
            i = jv_next(p, i, is_obj, &depth, base, count);
        }
        if (i == 0) {
            return 0;
        }
    }
    return i;
}

/* jp_run for json_validate: the same grammar, limits and errors, with a
 * stack of container kinds (is_obj, max_depth entries) instead of frames
 * and tokens. */
static int jv_run(struct jp *p, uint8_t *is_obj)
{
    const unsigned char *s = (const unsigned char *)p->s;
    size_t i = jv_ws(p, s, p->pos);
    struct json_fast_span sp;
    uint32_t count = 0;
    int depth = 0;

    if (i >= p->n) {
        return jv_fail(p, i, "unexpected end of text");
    }
    /* json_fast.h (1): a yes is this loop's yes */
    if (json_fast_container(p->s, p->n, i, p->max_depth, p->is_line, &sp) &&
        jv_ws(p, s, sp.end) == p->n) {
        return 0;
    }
    if (s[i] == '{' || s[i] == '[') {
        is_obj[0] = s[i] == '{';
        i = jv_inside(p, s, i + 1, is_obj, 0, &count);
    } else {
        i = jv_value(p, s, i, is_obj, &depth);
    }
    if (i == 0) {
        return p->err->code;
    }
    i = jv_ws(p, s, i);
    return i == p->n ? 0 : jv_fail(p, i, "trailing characters after the value");
}

static int jv_text(const char *text, size_t len, int max_depth, bool is_line,
                   struct err *err)
{
    struct jp p = {.s = text,
                   .n = len,
                   .doc = NULL,
                   .max_depth = max_depth < 1 ? 1 : max_depth,
                   .tok_depth = -1,
                   .max_tokens = 0,
                   .is_line = is_line,
                   .err = err};
    uint8_t local[JSON_MAX_DEPTH_DEFAULT];
    uint8_t *is_obj = local;
    int rc;

    if (len > JSON_TEXT_MAX) {
        return err_set(err, ERR_TOO_BIG,
                       "JSON text of %zu bytes is 2 GiB or more", len);
    }
    if (p.max_depth > (int)sizeof(local)) {
        is_obj = xmalloc((size_t)p.max_depth);
    }
    rc = jv_run(&p, is_obj);
    if (is_obj != local) {
        free(is_obj);
    }
    return rc;
}

int json_validate(const char *text, size_t len, int max_depth, struct err *err)
{
    return jv_text(text, len, max_depth, false, err);
}

int json_validate_line(const char *text, size_t len, int max_depth,
                       struct err *err)
{
    return jv_text(text, len, max_depth, true, err);
}

/* ---- navigation ---- */

static bool jd_valid(const struct json_doc *d, int i)
{
    return i >= 0 && (uint32_t)i < d->ntoks;
}

int json_type(const struct json_doc *d, int i)
{
    return jd_valid(d, i) ? d->toks[i].type : -1;
}

struct slice json_span(const struct json_doc *d, int i)
{
    struct slice s = {NULL, 0};

    if (jd_valid(d, i)) {
        s.ptr = d->text + d->toks[i].start;
        s.len = d->toks[i].len;
    }
    return s;
}

int json_child(const struct json_doc *d, int i)
{
    const struct json_tok *t;

    if (!jd_valid(d, i)) {
        return -1;
    }
    t = &d->toks[i];
    if ((t->type != JSON_ARRAY && t->type != JSON_OBJECT) || t->count == 0) {
        return -1;
    }
    /* Children deeper than tok_depth have no tokens: then token i+1, if
     * any, starts after this container's span. */
    if (!jd_valid(d, i + 1) || d->toks[i + 1].start >= t->start + t->len) {
        return -1;
    }
    return i + 1;
}

int json_next(const struct json_doc *d, int i)
{
    if (!jd_valid(d, i) || d->toks[i].next == 0) {
        return -1;
    }
    return (int)d->toks[i].next;
}

bool json_str_eq(const struct json_doc *d, int i, const char *lit)
{
    const struct json_tok *t;
    size_t n = strlen(lit);
    struct buf b;
    struct err err;
    bool eq;

    if (!jd_valid(d, i) || d->toks[i].type != JSON_STRING) {
        return false;
    }
    t = &d->toks[i];
    if (!t->has_escapes) {
        return t->len - 2 == n && memcmp(d->text + t->start + 1, lit, n) == 0;
    }
    buf_init(&b, BUF_UNLIMITED);
    eq = json_get_str(d, i, &b, &err) == 0 && b.len == n &&
         memcmp(b.data, lit, n) == 0;
    buf_free(&b);
    return eq;
}

int json_obj_get(const struct json_doc *d, int obj, const char *key)
{
    if (json_type(d, obj) != JSON_OBJECT) {
        return -1;
    }
    for (int k = json_child(d, obj); k >= 0; k = json_next(d, k)) {
        if (json_str_eq(d, k, key)) {
            return k + 1;
        }
    }
    return -1;
}

/* Which of keys[0..n) the text name[0..len) is, or -1. */
static int jd_pick_match(const char *name, size_t len, const char *const *keys,
                         int n)
{
    for (int i = 0; i < n; i++) {
        if (strlen(keys[i]) == len && memcmp(keys[i], name, len) == 0) {
            return i;
        }
    }
    return -1;
}

/* Which of keys[0..n) key token k names, or -1. An escaped key is
 * unescaped once; one longer than JD_PICK_KEY_MAX names none of them. */
#define JD_PICK_KEY_MAX 64

static int jd_pick_which(const struct json_doc *d, int k,
                         const char *const *keys, int n)
{
    const struct json_tok *t = &d->toks[k];
    struct buf b;
    struct err err;
    int which = -1;

    if (!t->has_escapes) {
        return jd_pick_match(d->text + t->start + 1, t->len - 2, keys, n);
    }
    buf_init(&b, JD_PICK_KEY_MAX);
    if (json_get_str(d, k, &b, &err) == 0 && b.len > 0) {
        which = jd_pick_match(b.data, b.len, keys, n);
    }
    buf_free(&b);
    return which;
}

int json_obj_pick(const struct json_doc *d, int obj, const char *const *keys,
                  int n, int *vals)
{
    int dup = -1;

    for (int i = 0; i < n; i++) {
        vals[i] = -1;
    }
    if (json_type(d, obj) != JSON_OBJECT) {
        return -1;
    }
    for (int k = json_child(d, obj); k >= 0 && dup < 0; k = json_next(d, k)) {
        int which = jd_pick_which(d, k, keys, n);

        if (which >= 0 && vals[which] >= 0) {
            dup = which;
        } else if (which >= 0) {
            vals[which] = k + 1;
        }
    }
    return dup;
}

bool json_is_null(const struct json_doc *d, int i)
{
    return json_type(d, i) == JSON_NULL;
}

/* ---- typed getters ---- */

/* The digits of an integer-grammar number token (no fraction/exponent). */
static bool jd_int_digits(const struct json_doc *d, int i, bool *neg,
                          struct slice *digits)
{
    struct slice s = json_span(d, i);

    if (json_type(d, i) != JSON_NUMBER) {
        return false;
    }
    *neg = s.ptr[0] == '-';
    digits->ptr = s.ptr + (*neg ? 1 : 0);
    digits->len = s.len - (*neg ? 1 : 0);
    for (size_t k = 0; k < digits->len; k++) {
        if (digits->ptr[k] < '0' || digits->ptr[k] > '9') {
            return false;
        }
    }
    return true;
}

static bool jd_u64(struct slice digits, uint64_t *out)
{
    uint64_t v = 0;

    for (size_t k = 0; k < digits.len; k++) {
        uint64_t dgt = (uint64_t)(digits.ptr[k] - '0');
        if (v > (UINT64_MAX - dgt) / 10) {
            return false;
        }
        v = v * 10 + dgt;
    }
    *out = v;
    return true;
}

bool json_get_u64(const struct json_doc *d, int i, uint64_t *out)
{
    struct slice digits;
    bool neg;

    if (!jd_int_digits(d, i, &neg, &digits) || neg) {
        return false;
    }
    return jd_u64(digits, out);
}

bool json_get_i64(const struct json_doc *d, int i, int64_t *out)
{
    struct slice digits;
    uint64_t v;
    bool neg;

    if (!jd_int_digits(d, i, &neg, &digits) || !jd_u64(digits, &v)) {
        return false;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) {
            return false;
        }
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX) {
            return false;
        }
        *out = (int64_t)v;
    }
    return true;
}

bool json_get_bool(const struct json_doc *d, int i, bool *out)
{
    int t = json_type(d, i);

    if (t != JSON_TRUE && t != JSON_FALSE) {
        return false;
    }
    *out = t == JSON_TRUE;
    return true;
}

bool json_get_double(const struct json_doc *d, int i, double *out)
{
    struct slice s = json_span(d, i);
    char *copy;
    double v;

    if (json_type(d, i) != JSON_NUMBER) {
        return false;
    }
    copy = xstrndup(s.ptr, s.len);
    v = strtod(copy, NULL);
    free(copy);
    if (!isfinite(v)) {
        return false;
    }
    *out = v;
    return true;
}

static size_t jd_utf8_put(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One escape at s (after the backslash, validated by the scanner) into
 * out; returns the bytes consumed after the backslash. */
static size_t jd_unescape_one(const char *s, char out[4], size_t *olen)
{
    static const char from[] = "\"\\/bfnrt";
    static const char to[] = "\"\\/\b\f\n\r\t";
    uint32_t cp = 0;
    uint32_t lo = 0;
    const char *hit = strchr(from, s[0]);

    if (s[0] != 'u' && hit != NULL) {
        out[0] = to[hit - from];
        *olen = 1;
        return 1;
    }
    (void)jp_hex4(s + 1, 4, &cp);
    if (cp >= 0xd800 && cp <= 0xdbff) {
        (void)jp_hex4(s + 7, 4, &lo);
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        *olen = jd_utf8_put(cp, out);
        return 11;
    }
    *olen = jd_utf8_put(cp, out);
    return 5;
}

int json_get_str(const struct json_doc *d, int i, struct buf *out,
                 struct err *err)
{
    const char *s;
    size_t n;
    size_t run = 0;

    if (json_type(d, i) != JSON_STRING) {
        return err_set(err, ERR_INVALID, "JSON token %d is not a string", i);
    }
    s = d->text + d->toks[i].start + 1;
    n = d->toks[i].len - 2;
    if (!d->toks[i].has_escapes) {
        return buf_append(out, s, n, err);
    }
    /* Unescaped text is never longer than its source; where the source
     * does not fit out's cap, the decoded length is what counts (an
     * escaped "\u0041" is one byte). */
    if (buf_reserve(out, n, err) != 0) {
        size_t dec = 0;

        for (size_t k = 0; k < n;) {
            char tmp[4];
            size_t tl = 1;

            k += s[k] != '\\' ? 1 : 1 + jd_unescape_one(s + k + 1, tmp, &tl);
            dec += tl;
        }
        if (buf_reserve(out, dec, err) != 0) {
            return err->code;
        }
    }
    for (size_t k = 0; k < n;) {
        char tmp[4];
        size_t tl;
        if (s[k] != '\\') {
            out->data[out->len + run++] = s[k++];
            continue;
        }
        k += 1 + jd_unescape_one(s + k + 1, tmp, &tl);
        memcpy(out->data + out->len + run, tmp, tl);
        run += tl;
    }
    out->len += run;
    out->data[out->len] = '\0';
    return 0;
}

/* ---- escaping and the writer ---- */

/* Escape text for byte c, "" when written raw. */
static const char *je_escape_of(unsigned char c, char tmp[8])
{
    switch (c) {
    case '"':
        return "\\\"";
    case '\\':
        return "\\\\";
    case '\b':
        return "\\b";
    case '\f':
        return "\\f";
    case '\n':
        return "\\n";
    case '\r':
        return "\\r";
    case '\t':
        return "\\t";
    default:
        break;
    }
    if (c < 0x20) {
        snprintf(tmp, 8, "\\u%04x", c);
        return tmp;
    }
    return "";
}

int json_compact(struct buf *out, const char *p, size_t n, struct err *err)
{
    bool is_in_str = false;
    bool is_escaped = false;
    char *o;

    if (buf_reserve(out, n, err) != 0) {
        return err->code;
    }
    o = out->data + out->len;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];

        if (is_in_str) {
            is_in_str = is_escaped || c != '"';
            is_escaped = !is_escaped && c == '\\';
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            continue;
        } else {
            is_in_str = c == '"';
        }
        *o++ = c;
    }
    out->len = (size_t)(o - out->data);
    out->data[out->len] = '\0';
    return 0;
}

int json_escape(struct buf *b, const char *p, size_t n, struct err *err)
{
    size_t total = 2;
    char tmp[8];
    char *o;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        total += c >= 0x20 && c != '"' && c != '\\'
                     ? 1
                     : strlen(je_escape_of(c, tmp));
    }
    if (buf_reserve(b, total, err) != 0) {
        return err->code;
    }
    o = b->data + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
        } else {
            for (const char *e = je_escape_of(c, tmp); *e != '\0'; e++) {
                *o++ = *e;
            }
        }
    }
    *o++ = '"';
    b->len += total;
    b->data[b->len] = '\0';
    return 0;
}

void jw_init(struct jw *w, struct buf *b)
{
    w->b = b;
    w->need_comma = false;
    w->code = 0;
    err_clear(&w->err);
}

/* Comma if needed; false when the writer already failed. */
static bool jw_pre(struct jw *w)
{
    if (w->code != 0) {
        return false;
    }
    if (w->need_comma) {
        w->code = buf_append_byte(w->b, ',', &w->err);
    }
    return w->code == 0;
}

static void jw_put(struct jw *w, const char *p, size_t n, bool value_done)
{
    if (jw_pre(w)) {
        w->code = buf_append(w->b, p, n, &w->err);
        w->need_comma = value_done;
    }
}

void jw_obj_begin(struct jw *w)
{
    jw_put(w, "{", 1, false);
}

void jw_arr_begin(struct jw *w)
{
    jw_put(w, "[", 1, false);
}

static void jw_end(struct jw *w, char c)
{
    if (w->code == 0) {
        w->code = buf_append_byte(w->b, c, &w->err);
        w->need_comma = true;
    }
}

void jw_obj_end(struct jw *w)
{
    jw_end(w, '}');
}

void jw_arr_end(struct jw *w)
{
    jw_end(w, ']');
}

void jw_key(struct jw *w, const char *key)
{
    if (jw_pre(w)) {
        w->code = json_escape(w->b, key, strlen(key), &w->err);
        if (w->code == 0) {
            w->code = buf_append_byte(w->b, ':', &w->err);
        }
        w->need_comma = false;
    }
}

void jw_str(struct jw *w, const char *p, size_t n)
{
    if (jw_pre(w)) {
        w->code = json_escape(w->b, p, n, &w->err);
        w->need_comma = true;
    }
}

void jw_cstr(struct jw *w, const char *s)
{
    jw_str(w, s, strlen(s));
}

void jw_text(struct jw *w, const char *s)
{
    size_t n = strlen(s);
    char *t = xmalloc(n + 1);

    jw_str(w, t, json_utf8_quote(t, s, n, n));
    free(t);
}

void jw_i64(struct jw *w, int64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%lld", (long long)v);

    jw_put(w, tmp, (size_t)n, true);
}

void jw_u64(struct jw *w, uint64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v);

    jw_put(w, tmp, (size_t)n, true);
}

void jw_double(struct jw *w, double v)
{
    char tmp[40];
    int n = 0;

    if (!isfinite(v)) {
        if (w->code == 0) {
            w->code = err_set(&w->err, ERR_INVALID,
                              "JSON cannot represent a non-finite number");
        }
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        n = snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) {
            break;
        }
    }
    /* a float stays a float to a reader: 5 s of lag is 5.0, not the
     * integer 5 (/status's lagSeconds, docs/design/observability.md) */
    if (strpbrk(tmp, ".e") == NULL) {
        tmp[n++] = '.';
        tmp[n++] = '0';
        tmp[n] = '\0';
    }
    jw_put(w, tmp, (size_t)n, true);
}

void jw_bool(struct jw *w, bool v)
{
    jw_put(w, v ? "true" : "false", v ? 4 : 5, true);
}

void jw_null(struct jw *w)
{
    jw_put(w, "null", 4, true);
}

void jw_raw(struct jw *w, const char *p, size_t n)
{
    jw_put(w, p, n, true);
}

int jw_finish(struct jw *w, struct err *err)
{
    if (w->code != 0) {
        *err = w->err;
        err->code = w->code;
    }
    return w->code;
}
