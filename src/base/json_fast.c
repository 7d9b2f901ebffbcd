/* A fast check of one JSON container (see json_fast.h).
 *
 * Why: validating payloads byte by byte costs a dependent load and a branch
 * per byte, which made json.c's loop most of what `queen lake verify` spends
 * beyond zstd, and a share of every push. Here one pass classifies 64 bytes
 * with a few vector compares into masks, and the grammar only looks at the
 * bytes where a token starts.
 *
 * Per block of 64 bytes (bit i is byte base+i):
 *   escaped  the bytes after an unescaped backslash (a scalar loop over the
 *            backslashes, which are rare; each escape is checked there)
 *   quote    '"' that are not escaped
 *   in_str   prefix XOR of quote, carried across blocks: 1 on an opening
 *            quote and the bytes inside, 0 on the closing one and outside
 *   bad      a control inside a string, a control other than whitespace
 *            outside, a non-ASCII byte outside, a bad escape
 *   tokens   brackets, ':' and ',' outside strings, opening quotes, and
 *            the first byte of each run of other bytes outside strings (a
 *            number or literal, checked from the text)
 * UTF-8 inside strings is checked once over the container, from the first
 * block that has a non-ASCII byte. */
#include "base/json_fast.h"

#include <stdatomic.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/json.h"

/* What the grammar expects next. The first two take a value. */
enum jf_state {
    JF_VALUE,
    JF_VALUE_OR_CLOSE, /* just after '[' */
    JF_KEY,
    JF_KEY_OR_CLOSE, /* just after '{' */
    JF_COLON,
    JF_AFTER, /* a value ended: ',' or the close */
};

struct jf_masks {
    uint64_t quote;
    uint64_t bs;
    uint64_t ctrl; /* < 0x20 */
    uint64_t high; /* >= 0x80 */
    uint64_t op;   /* { } [ ] : , */
    uint64_t ws;   /* space, tab, and LF, CR unless is_line */
};

#if defined(__SSE2__)
static inline uint64_t jf_bits(__m128i m, size_t k)
{
    return (uint64_t)(unsigned)_mm_movemask_epi8(m) << (16 * k);
}

static inline void jf_classify_base(const unsigned char *p, bool is_line,
                                    struct jf_masks *m)
{
    memset(m, 0, sizeof(*m));
    for (size_t k = 0; k < 4; k++) {
        __m128i v =
            _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * k));
        /* '[' and ']' are '{' and '}' without 0x20 */
        __m128i v20 = _mm_or_si128(v, _mm_set1_epi8(0x20));
        __m128i ws = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')),
                                  _mm_cmpeq_epi8(v, _mm_set1_epi8('\t')));

        if (!is_line) {
            ws = _mm_or_si128(
                ws, _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')),
                                 _mm_cmpeq_epi8(v, _mm_set1_epi8('\r'))));
        }
        m->quote |= jf_bits(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), k);
        m->bs |= jf_bits(_mm_cmpeq_epi8(v, _mm_set1_epi8('\\')), k);
        /* signed: bytes >= 0x80 are below 0x20 too, removed below */
        m->ctrl |= jf_bits(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)), k);
        m->high |= jf_bits(v, k);
        m->op |= jf_bits(
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v20, _mm_set1_epi8('{')),
                                      _mm_cmpeq_epi8(v20, _mm_set1_epi8('}'))),
                         _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(':')),
                                      _mm_cmpeq_epi8(v, _mm_set1_epi8(',')))),
            k);
        m->ws |= jf_bits(ws, k);
    }
    m->ctrl &= ~m->high;
}
#else
static inline void jf_classify_base(const unsigned char *p, bool is_line,
                                    struct jf_masks *m)
{
    memset(m, 0, sizeof(*m));
    for (unsigned i = 0; i < 64; i++) {
        unsigned char c = p[i];
        uint64_t b = (uint64_t)1 << i;

        m->quote |= c == '"' ? b : 0;
        m->bs |= c == '\\' ? b : 0;
        m->ctrl |= c < 0x20 ? b : 0;
        m->high |= c >= 0x80 ? b : 0;
        m->op |= (c | 0x20) == '{' || (c | 0x20) == '}' || c == ':' || c == ','
                     ? b
                     : 0;
        m->ws |= c == ' ' || c == '\t' || (!is_line && (c == '\n' || c == '\r'))
                     ? b
                     : 0;
    }
}
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define JF_WIDE   1
#define JF_INLINE static inline __attribute__((always_inline))

JF_INLINE __attribute__((target("avx2"))) void
jf_classify_avx2(const unsigned char *p, bool is_line, struct jf_masks *m)
{
    memset(m, 0, sizeof(*m));
    for (size_t k = 0; k < 2; k++) {
        __m256i v =
            _mm256_loadu_si256((const __m256i *)(const void *)(p + 32 * k));
        __m256i v20 = _mm256_or_si256(v, _mm256_set1_epi8(0x20));
        __m256i ws =
            _mm256_or_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(' ')),
                            _mm256_cmpeq_epi8(v, _mm256_set1_epi8('\t')));
        __m256i op = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi8(v20, _mm256_set1_epi8('{')),
                            _mm256_cmpeq_epi8(v20, _mm256_set1_epi8('}'))),
            _mm256_or_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(':')),
                            _mm256_cmpeq_epi8(v, _mm256_set1_epi8(','))));
        /* below 0x20 unsigned: min(v, 0x1f) == v */
        __m256i ctrl =
            _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1f)), v);
        size_t sh = 32 * k;

        if (!is_line) {
            ws = _mm256_or_si256(
                ws,
                _mm256_or_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi8('\n')),
                                _mm256_cmpeq_epi8(v, _mm256_set1_epi8('\r'))));
        }
        m->quote |= (uint64_t)(uint32_t)_mm256_movemask_epi8(
                        _mm256_cmpeq_epi8(v, _mm256_set1_epi8('"')))
                    << sh;
        m->bs |= (uint64_t)(uint32_t)_mm256_movemask_epi8(
                     _mm256_cmpeq_epi8(v, _mm256_set1_epi8('\\')))
                 << sh;
        m->ctrl |= (uint64_t)(uint32_t)_mm256_movemask_epi8(ctrl) << sh;
        m->high |= (uint64_t)(uint32_t)_mm256_movemask_epi8(v) << sh;
        m->op |= (uint64_t)(uint32_t)_mm256_movemask_epi8(op) << sh;
        m->ws |= (uint64_t)(uint32_t)_mm256_movemask_epi8(ws) << sh;
    }
}

JF_INLINE __attribute__((target("avx512f,avx512bw"))) void
jf_classify_avx512(const unsigned char *p, bool is_line, struct jf_masks *m)
{
    __m512i v = _mm512_loadu_si512((const void *)p);
    __m512i v20 = _mm512_or_si512(v, _mm512_set1_epi8(0x20));

    m->quote = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('"'));
    m->bs = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\\'));
    m->ctrl = _mm512_cmplt_epu8_mask(v, _mm512_set1_epi8(0x20));
    m->high = _mm512_movepi8_mask(v);
    m->op = _mm512_cmpeq_epi8_mask(v20, _mm512_set1_epi8('{')) |
            _mm512_cmpeq_epi8_mask(v20, _mm512_set1_epi8('}')) |
            _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(':')) |
            _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(','));
    m->ws = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(' ')) |
            _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\t'));
    if (!is_line) {
        m->ws |= _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\n')) |
                 _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\r'));
    }
}
#else
#define JF_INLINE static inline
#endif

static inline uint64_t jf_prefix_xor(uint64_t x)
{
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

static inline bool jf_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

/* The escape whose backslash is s[i - 1]: one of json.c's, and no
 * surrogate (a pair is left to json.c). */
static bool jf_escape(const unsigned char *s, size_t n, size_t i)
{
    unsigned char c;

    if (i >= n) {
        return false;
    }
    c = s[i];
    if (c == 'u') {
        if (n - i < 5 || !jf_hex(s[i + 1]) || !jf_hex(s[i + 2]) ||
            !jf_hex(s[i + 3]) || !jf_hex(s[i + 4])) {
            return false;
        }
        /* D800-DFFF: the second digit is 8-9, a-f or A-F */
        return (s[i + 1] | 0x20) != 'd' || s[i + 2] < '8';
    }
    return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' ||
           c == 'n' || c == 'r' || c == 't';
}

/* s[i] may end a number or literal: the text's end, whitespace (a raw LF
 * or CR on one line is caught as bad), or a byte that starts a token. */
static inline bool jf_delim(const unsigned char *s, size_t n, size_t i)
{
    unsigned char c;

    if (i >= n) {
        return true;
    }
    c = s[i];
    return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' ||
           c == '\r' || c == '\t' || c == ':' || c == '"' || c == '{' ||
           c == '[';
}

static inline size_t jf_digits(const unsigned char *s, size_t n, size_t i)
{
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        i++;
    }
    return i;
}

/* A number or literal at s[i]: json.c's grammar, ending at a delimiter. */
static bool jf_scalar(const unsigned char *s, size_t n, size_t i)
{
    unsigned char c = s[i];
    size_t j;

    if (c == 't' || c == 'n') {
        return n - i >= 4 &&
               memcmp(s + i, c == 't' ? "true" : "null", 4) == 0 &&
               jf_delim(s, n, i + 4);
    }
    if (c == 'f') {
        return n - i >= 5 && memcmp(s + i, "false", 5) == 0 &&
               jf_delim(s, n, i + 5);
    }
    i += c == '-';
    if (i >= n) {
        return false;
    }
    if (s[i] == '0') {
        i++;
    } else if ((j = jf_digits(s, n, i)) > i) {
        i = j;
    } else {
        return false;
    }
    if (i < n && s[i] == '.') {
        j = jf_digits(s, n, i + 1);
        if (j == i + 1) {
            return false;
        }
        i = j;
    }
    if (i < n && (s[i] | 0x20) == 'e') {
        i++;
        i += i < n && (s[i] == '+' || s[i] == '-');
        j = jf_digits(s, n, i);
        if (j == i) {
            return false;
        }
        i = j;
    }
    return jf_delim(s, n, i);
}

/* UTF-8 of s[i..n), ASCII skipped 8 bytes at a time. */
static bool jf_utf8(const unsigned char *s, size_t i, size_t n)
{
    while (i < n) {
        uint64_t w;
        size_t k;

        if (n - i >= 8) {
            memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        k = json_utf8_len(s + i, n - i);
        if (k == 0) {
            return false;
        }
        i += k;
    }
    return true;
}

/* The escaped bytes of a block whose backslashes are bs, *carry saying the
 * block's first byte is escaped (and set for the next block); bad escapes
 * are added to *bad. */
static uint64_t jf_escaped(const unsigned char *s, size_t n, size_t base,
                           uint64_t bs, uint64_t *carry, uint64_t *bad)
{
    uint64_t escaped = *carry;

    bs &= ~*carry;
    *carry = 0;
    while (bs != 0) {
        unsigned i = (unsigned)__builtin_ctzll(bs);

        if (!jf_escape(s, n, base + i + 1)) {
            *bad |= (uint64_t)1 << i;
        }
        bs &= bs - 1;
        if (i == 63) {
            *carry = 1;
        } else {
            escaped |= (uint64_t)1 << (i + 1);
            bs &= ~((uint64_t)1 << (i + 1));
        }
    }
    return escaped;
}

typedef void (*jf_classify_fn)(const unsigned char *p, bool is_line,
                               struct jf_masks *m);

/* The walk's state, carried from block to block. */
struct jf_walk {
    const unsigned char *s;
    size_t n;
    enum jf_state state;
    int depth;
    int limit;
    uint32_t commas;   /* at depth 1 */
    uint64_t in_str;   /* all ones: the last block ended in a string */
    uint64_t esc;      /* 1: the next block's first byte is escaped */
    uint64_t prev_run; /* 1: the last block ended inside a scalar run */
    size_t high_from;  /* the first block with a non-ASCII byte, or n */
    bool is_line;
    uint8_t is_obj[JSON_FAST_DEPTH];
};

/* What a token did. */
enum jf_step { JF_NO, JF_GO_ON, JF_CLOSED };

/* The token starting with c at s[i]. */
JF_INLINE enum jf_step jf_token(struct jf_walk *w, unsigned char c, size_t i)
{
    switch (c) {
    case '{':
    case '[':
        if (w->state > JF_VALUE_OR_CLOSE || w->depth == w->limit) {
            return JF_NO;
        }
        w->is_obj[w->depth++] = c == '{';
        w->state = c == '{' ? JF_KEY_OR_CLOSE : JF_VALUE_OR_CLOSE;
        return JF_GO_ON;
    case '}':
    case ']':
        if (w->depth == 0 ||
            (w->state != JF_AFTER &&
             w->state != (c == '}' ? JF_KEY_OR_CLOSE : JF_VALUE_OR_CLOSE)) ||
            w->is_obj[w->depth - 1] != (c == '}')) {
            return JF_NO;
        }
        if (--w->depth == 0) {
            return JF_CLOSED; /* w->state tells whether it was empty */
        }
        w->state = JF_AFTER;
        return JF_GO_ON;
    case ',':
        if (w->state != JF_AFTER || w->depth == 0) {
            return JF_NO;
        }
        w->commas += w->depth == 1;
        w->state = w->is_obj[w->depth - 1] ? JF_KEY : JF_VALUE;
        return JF_GO_ON;
    case ':':
        if (w->state != JF_COLON) {
            return JF_NO;
        }
        w->state = JF_VALUE;
        return JF_GO_ON;
    case '"':
        if (w->state == JF_KEY || w->state == JF_KEY_OR_CLOSE) {
            w->state = JF_COLON;
        } else if (w->state <= JF_VALUE_OR_CLOSE) {
            w->state = JF_AFTER;
        } else {
            return JF_NO;
        }
        return JF_GO_ON;
    default:
        if (w->state > JF_VALUE_OR_CLOSE || !jf_scalar(w->s, w->n, i)) {
            return JF_NO;
        }
        w->state = JF_AFTER;
        return JF_GO_ON;
    }
}

/* The masks of the block at s[base] (p: its 64 bytes): *bad gets what is
 * wrong in it; the token starts are returned. */
JF_INLINE uint64_t jf_block(struct jf_walk *w, const unsigned char *p,
                            size_t base, bool is_line, uint64_t *bad,
                            jf_classify_fn jf_classify)
{
    struct jf_masks m;
    uint64_t escaped = 0;
    uint64_t quote;
    uint64_t str;
    uint64_t run;
    uint64_t tokens;

    jf_classify(p, is_line, &m);
    *bad = 0;
    if ((m.bs | w->esc) != 0) {
        escaped = jf_escaped(w->s, w->n, base, m.bs, &w->esc, bad);
    }
    quote = m.quote & ~escaped;
    str = jf_prefix_xor(quote) ^ w->in_str;
    w->in_str = (uint64_t)0 - (str >> 63);
    *bad |= (m.ctrl & ~(m.ws & ~str)) | (m.high & ~str);
    if (m.high != 0 && w->high_from == w->n) {
        w->high_from = base;
    }
    run = ~str & ~m.ws & ~m.op & ~m.quote;
    tokens = (m.op & ~str) | (quote & str) | (run & ~(run << 1 | w->prev_run));
    w->prev_run = run >> 63;
    return tokens;
}

/* The token at the lowest bit of tokens, or 0 when none is left. */
static inline unsigned char jf_peek(const unsigned char *p, uint64_t tokens)
{
    return tokens == 0 ? 0 : p[__builtin_ctzll(tokens)];
}

/* After a key (w->state JF_COLON), the members that follow in the block
 * as long as they are plain: ':', a string or a number or literal, ',',
 * the next key, and again. Each step is the very step jf_token takes for
 * that token in that state (in an object: a ',' after a value leads to a
 * key), only without its dispatch on the byte, which was most of the
 * walk's time on event JSON (where every member is a key and most values
 * are strings or numbers). It stops at anything else, with w->state where
 * it got, and *tokens less what it took. false: a bad number or literal. */
JF_INLINE bool jf_members(struct jf_walk *w, const unsigned char *p,
                          size_t base, uint64_t *tokens)
{
    while (w->state == JF_COLON && jf_peek(p, *tokens) == ':') {
        unsigned char c;

        *tokens &= *tokens - 1;
        w->state = JF_VALUE;
        c = jf_peek(p, *tokens);
        if (c == 0 || c == '{' || c == '[' || c == '}' || c == ']' ||
            c == ',' || c == ':') {
            return true; /* none left, or for jf_token */
        }
        if (c != '"' &&
            !jf_scalar(w->s, w->n, base + (size_t)__builtin_ctzll(*tokens))) {
            return false;
        }
        *tokens &= *tokens - 1;
        w->state = JF_AFTER;
        if (jf_peek(p, *tokens) != ',') {
            return true;
        }
        *tokens &= *tokens - 1;
        w->commas += w->depth == 1;
        w->state = JF_KEY;
        if (jf_peek(p, *tokens) != '"') {
            return true;
        }
        *tokens &= *tokens - 1;
        w->state = JF_COLON;
    }
    return true;
}

/* The container closed at the block's bit i: true when nothing before
 * it in the block is bad and its UTF-8 holds. */
static bool jf_closed(const struct jf_walk *w, uint64_t bad, size_t base,
                      unsigned i, struct json_fast_span *out)
{
    size_t stop = base + i + 1;

    if ((bad & (((uint64_t)2 << i) - 1)) != 0 ||
        (w->high_from < stop && !jf_utf8(w->s, w->high_from, stop))) {
        return false;
    }
    out->count = w->state == JF_AFTER ? w->commas + 1 : 0;
    out->end = stop;
    return true;
}

/* The check of the container at w->s[at], w set up by
 * json_fast_container, with the classifier of one instruction set (inlined
 * into each of the entry points below). */
JF_INLINE bool jf_run(struct jf_walk *w, size_t at, struct json_fast_span *out,
                      jf_classify_fn jf_classify)
{
    unsigned char pad[64];

    for (size_t base = at; base < w->n; base += 64) {
        const unsigned char *p = w->s + base;
        uint64_t bad;
        uint64_t tokens;

        if (w->n - base < 64) {
            memset(pad, ' ', sizeof(pad));
            memcpy(pad, p, w->n - base);
            p = pad;
        }
        tokens = jf_block(w, p, base, w->is_line, &bad, jf_classify);
        while (tokens != 0) {
            unsigned i = (unsigned)__builtin_ctzll(tokens);
            enum jf_step step = jf_token(w, p[i], base + i);

            tokens &= tokens - 1;
            if (step == JF_NO) {
                return false;
            }
            if (step == JF_CLOSED) {
                return jf_closed(w, bad, base, i, out);
            }
            if (w->state == JF_COLON && !jf_members(w, p, base, &tokens)) {
                return false;
            }
        }
        if (bad != 0) {
            return false;
        }
    }
    return false;
}

static bool jf_run_base(struct jf_walk *w, size_t at,
                        struct json_fast_span *out)
{
    return jf_run(w, at, out, jf_classify_base);
}

#if defined(JF_WIDE)
__attribute__((target("avx2"))) static bool
jf_run_avx2(struct jf_walk *w, size_t at, struct json_fast_span *out)
{
    return jf_run(w, at, out, jf_classify_avx2);
}

__attribute__((target("avx512f,avx512bw"))) static bool
jf_run_avx512(struct jf_walk *w, size_t at, struct json_fast_span *out)
{
    return jf_run(w, at, out, jf_classify_avx512);
}
#endif

/* -1 until the first call picks the best the CPU has. */
static _Atomic int jf_level = -1;

int json_fast_level_max(void)
{
#if defined(JF_WIDE)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512f")) {
        return 2;
    }
    if (__builtin_cpu_supports("avx2")) {
        return 1;
    }
#endif
    return 0;
}

void json_fast_set_level(int level)
{
    int max = json_fast_level_max();

    atomic_store(&jf_level, level < 0 || level > max ? max : level);
}

bool json_fast_container(const char *s, size_t n, size_t at, int max_depth,
                         bool is_line, struct json_fast_span *out)
{
    int level = atomic_load_explicit(&jf_level, memory_order_relaxed);
    struct jf_walk w;

    if (at >= n || (s[at] != '{' && s[at] != '[')) {
        return false;
    }
    if (level < 0) {
        json_fast_set_level(-1);
        level = atomic_load(&jf_level);
    }
    w.s = (const unsigned char *)s;
    w.n = n;
    w.state = JF_VALUE;
    w.depth = 0;
    w.limit = max_depth < JSON_FAST_DEPTH ? max_depth : JSON_FAST_DEPTH;
    w.commas = 0;
    w.in_str = 0;
    w.esc = 0;
    w.prev_run = 0;
    w.high_from = n;
    w.is_line = is_line;
#if defined(JF_WIDE)
    if (level == 2) {
        return jf_run_avx512(&w, at, out);
    }
    if (level == 1) {
        return jf_run_avx2(&w, at, out);
    }
#endif
    return jf_run_base(&w, at, out);
}
