/* Percent-encoding of names (docs/design/formats.md §1). */
#include "base/pct.h"

#include "base/sha256.h"

static const char pct_hex[] = "0123456789ABCDEF";

bool pct_is_plain(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

int pct_escape(struct buf *b, const char *p, size_t n, struct err *err)
{
    size_t extra = 0;
    char *o;

    for (size_t i = 0; i < n; i++) {
        if (!pct_is_plain((unsigned char)p[i])) {
            extra += 2;
        }
    }
    if (buf_reserve(b, n + extra, err) != 0) {
        return err->code;
    }
    o = b->data + b->len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (pct_is_plain(c)) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = pct_hex[c >> 4];
            *o++ = pct_hex[c & 15];
        }
    }
    b->len += n + extra;
    b->data[b->len] = '\0';
    return 0;
}

int pct_unescape(struct buf *b, const char *p, size_t n, struct err *err)
{
    size_t len = 0;
    char *o;

    /* Decoded text is never longer than its source. */
    if (buf_reserve(b, n, err) != 0) {
        return err->code;
    }
    o = b->data + b->len;
    for (size_t i = 0; i < n; i++) {
        int hi = -1;
        int lo = -1;
        if (p[i] == '%' && i + 2 < n) {
            hi = hex_digit(p[i + 1]);
            lo = hex_digit(p[i + 2]);
        }
        if (hi >= 0 && lo >= 0) {
            o[len++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            o[len++] = p[i];
        }
    }
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}
