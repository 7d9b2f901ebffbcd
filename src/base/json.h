/* JSON: a strict RFC 8259 scanner that returns byte spans, and a compact
 * writer with serde_json's string escaping.
 *
 * The scanner never copies or re-serialises a value: a token is a span of the
 * caller's text, so a payload is stored and emitted byte for byte (`42.00`
 * stays `42.00`, `1E+400` and 100-digit integers survive).
 *
 * Strictness (every rule is a unit test):
 *   (1) UTF-8 is validated everywhere: overlong forms, surrogates encoded
 *       directly (U+D800-DFFF) and code points above U+10FFFF are rejected.
 *   (2) Inside strings, bytes < 0x20 are rejected; escapes are exactly
 *       \" \\ \/ \b \f \n \r \t \uXXXX. A \u escape of a high surrogate must
 *       be followed by a \u escape of a low surrogate; a lone surrogate (high
 *       or low) is rejected, as serde_json does, so json_get_str always
 *       produces valid UTF-8.
 *   (3) Numbers follow the RFC grammar exactly: `-?(0|[1-9][0-9]*)
 *       (\.[0-9]+)?([eE][+-]?[0-9]+)?`. Any length and exponent is accepted
 *       by the scanner; the typed getters decide what fits.
 *   (4) Whitespace is only SP, HT, LF, CR. Trailing garbage, trailing commas,
 *       bad literals and unterminated values are rejected.
 *   (5) Duplicate keys are allowed (json_obj_get returns the first; a
 *       reader that must refuse them asks json_obj_pick); a top-level
 *       scalar is allowed.
 *   (6) Containers nested deeper than max_depth are rejected.
 * Errors are ERR_INVALID "invalid JSON at byte N: <reason>", or ERR_TOO_BIG
 * when more than max_tokens tokens would be needed, or the text is 2 GiB or
 * more (token indices are int). */
#ifndef QUEEN_BASE_JSON_H
#define QUEEN_BASE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"

enum json_type {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
};

/* One value (or object key). Object children are key, value, key, value...;
 * a key's `next` is the next key, a value's `next` is 0 (use the key's).
 * Token 0 is the root, so 0 never names a sibling. */
struct json_tok {
    uint8_t type;        /* enum json_type */
    uint8_t has_escapes; /* strings: a backslash occurs inside */
    uint32_t start;      /* byte offset of the value in the text */
    uint32_t len;        /* whole span incl. quotes / brackets */
    uint32_t count;      /* array elements or object pairs (tokenized or not) */
    uint32_t next;       /* index of the next sibling; 0 = none */
};

/* Depth: the root value is at depth 0, a container's children (keys and
 * values) one deeper. */
struct json_limits {
    int max_depth;     /* at most this many nested containers (default 128) */
    int tok_depth;     /* values deeper than this are validated, not
                          tokenized: their container's span covers them.
                          -1 = no tokens at all. A push body needs 3. */
    size_t max_tokens; /* 0 = unlimited */
};

#define JSON_MAX_DEPTH_DEFAULT 128
/* The longest text json_parse() and json_validate() read: token offsets are
 * 32-bit. */
#define JSON_TEXT_MAX ((size_t)INT32_MAX - 1)
#define JSON_LIMITS_DEFAULT \
    ((struct json_limits){JSON_MAX_DEPTH_DEFAULT, JSON_MAX_DEPTH_DEFAULT, 0})

struct json_doc {
    const char *text; /* borrowed: the caller's text outlives the doc */
    size_t len;
    struct json_tok *toks; /* owned */
    uint32_t ntoks;
    uint32_t cap;
};

/* Scan text (len bytes, need not be NUL-terminated). Borrows text; on success
 * doc holds the tokens (free with json_doc_free). lim NULL = defaults. On
 * failure doc is empty (json_doc_free is still safe). */
int json_parse(struct json_doc *doc, const char *text, size_t len,
               const struct json_limits *lim, struct err *err);
void json_doc_free(struct json_doc *doc);

/* Validate one complete JSON text without making tokens (e.g. a payload
 * span). Same rules and messages as json_parse. */
int json_validate(const char *text, size_t len, int max_depth, struct err *err);

/* json_validate for a text that must fit on one line: a raw LF or CR is
 * refused everywhere (inside a string it is a control character anyway;
 * here it is not whitespace either), in the same single pass. */
int json_validate_line(const char *text, size_t len, int max_depth,
                       struct err *err);

/* Navigation. Indices are token indices; -1 = none. Only tokenized values
 * are reachable: children of a value deeper than tok_depth are not. */
int json_obj_get(const struct json_doc *d, int obj, const char *key);
/* The members named keys[0..n) of object obj, in one pass over its members
 * (keys compared unescaped): vals[k] is the value token of keys[k], or -1
 * when absent (all -1 when obj is not an object). Returns -1, or the index
 * k of the first of keys found twice (vals[k] is then its first value).
 * Members with other names are skipped, repeated or not. For a reader that
 * refuses a repeated field instead of taking the first (rule (5)). */
int json_obj_pick(const struct json_doc *d, int obj, const char *const *keys,
                  int n, int *vals);
int json_child(const struct json_doc *d, int i);
int json_next(const struct json_doc *d, int i);
int json_type(const struct json_doc *d, int i); /* enum json_type, -1 bad i */
struct slice json_span(const struct json_doc *d, int i);

/* Typed getters: false when i is -1, of another type, or out of range.
 * i64/u64 accept only the integer grammar (no fraction, no exponent, no
 * `-0` for u64). double accepts any number that is finite as a double. */
bool json_get_i64(const struct json_doc *d, int i, int64_t *out);
bool json_get_u64(const struct json_doc *d, int i, uint64_t *out);
bool json_get_bool(const struct json_doc *d, int i, bool *out);
bool json_get_double(const struct json_doc *d, int i, double *out);
/* Append the unescaped UTF-8 text of string token i to out. ERR_INVALID when
 * i is not a string; ERR_TOO_BIG from out's cap. */
int json_get_str(const struct json_doc *d, int i, struct buf *out,
                 struct err *err);
/* Whether string token i unescapes to exactly lit. */
bool json_str_eq(const struct json_doc *d, int i, const char *lit);
bool json_is_null(const struct json_doc *d, int i);

/* Append the valid JSON text p[0..n) to out without the whitespace between
 * its tokens (compact JSON: strings, numbers and literals as they are).
 * ERR_TOO_BIG from out's cap. */
int json_compact(struct buf *out, const char *p, size_t n, struct err *err);

/* Append "p" as a JSON string with serde_json's escaping: \" \\ \b \f \n \r
 * \t, other bytes < 0x20 as \u00xx (lowercase hex), `/`, DEL and non-ASCII
 * bytes raw. Bytes are not UTF-8 checked. */
int json_escape(struct buf *b, const char *p, size_t n, struct err *err);

/* Length of the valid UTF-8 sequence at s[0..avail) (1 for ASCII), or 0
 * when it is not one: overlong forms, surrogates, above U+10FFFF or cut
 * short (RFC 3629). avail >= 1. */
size_t json_utf8_len(const unsigned char *s, size_t avail);
/* Length of the longest valid UTF-8 prefix of s[0..n): n when it all is. */
size_t json_utf8_prefix(const char *s, size_t n);

/* Copy at most max bytes of src[0..n) to dst so that they are valid UTF-8,
 * for quoting text from the network in an answer: each byte that does not
 * start a valid sequence becomes '?', and a sequence that would cross max is
 * left out whole. Returns the bytes written (no NUL is added); never more
 * than min(n, max), so dst needs that much room. */
size_t json_utf8_quote(char *dst, const char *src, size_t n, size_t max);
/* The same for a quote that goes into a message (a C string, printed with
 * "%.*s", which ends at a NUL): each NUL becomes '?' too. */
size_t json_msg_quote(char *dst, const char *src, size_t n, size_t max);

/* The writer: compact output (no spaces), automatic commas, sticky error.
 * Borrows b, which must outlive the writer. After the first failure every
 * call is a no-op and jw_finish returns that error. */
struct jw {
    struct buf *b;
    bool need_comma;
    int code; /* sticky: 0 or ERR_* */
    struct err err;
};

void jw_init(struct jw *w, struct buf *b);
void jw_obj_begin(struct jw *w);
void jw_obj_end(struct jw *w);
void jw_arr_begin(struct jw *w);
void jw_arr_end(struct jw *w);
void jw_key(struct jw *w, const char *key);
void jw_str(struct jw *w, const char *p, size_t n);
void jw_cstr(struct jw *w, const char *s);
/* s quoted as valid UTF-8 (json_utf8_quote): for a message that may carry
 * request text, or request text cut at a cap (struct err's 256 bytes). */
void jw_text(struct jw *w, const char *s);
void jw_i64(struct jw *w, int64_t v);
void jw_u64(struct jw *w, uint64_t v);
/* Shortest %g text that reads back as v, always a float to a reader:
 * 6.366447, 0.5, 3.0 (an integral value gets ".0"), 1e+20. NaN and
 * infinities are ERR_INVALID. */
void jw_double(struct jw *w, double v);
void jw_bool(struct jw *w, bool v);
void jw_null(struct jw *w);
/* Splice verbatim JSON (the caller vouches for it), e.g. a stored payload. */
void jw_raw(struct jw *w, const char *p, size_t n);
/* Returns 0 or the sticky error, copied into err. */
int jw_finish(struct jw *w, struct err *err);

#endif
