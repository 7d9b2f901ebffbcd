/* Growable byte buffers with a hard cap. */
#include "base/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

void buf_init(struct buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

int buf_reserve(struct buf *b, size_t n, struct err *err)
{
    size_t want;
    size_t cap;

    if (n > b->max || b->len > b->max - n) {
        return err_set(err, ERR_TOO_BIG, "buffer over its cap of %zu bytes",
                       b->max);
    }
    want = b->len + n + 1; /* room for the NUL */
    if (want <= b->cap) {
        return 0;
    }
    cap = b->cap < 64 ? 64 : b->cap;
    while (cap < want) {
        cap = cap > ((size_t)-1) / 2 ? want : cap * 2;
    }
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n, struct err *err)
{
    if (buf_reserve(b, n, err) != 0) {
        return err->code;
    }
    if (n > 0) {
        memcpy(b->data + b->len, p, n);
    }
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_append_str(struct buf *b, const char *s, struct err *err)
{
    return buf_append(b, s, strlen(s), err);
}

int buf_append_byte(struct buf *b, char c, struct err *err)
{
    return buf_append(b, &c, 1, err);
}

int buf_vprintf(struct buf *b, struct err *err, const char *fmt, va_list ap)
{
    va_list ap2;
    int n;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        return err_set(err, ERR_INVALID, "bad format");
    }
    if (buf_reserve(b, (size_t)n, err) != 0) {
        return err->code;
    }
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, struct err *err, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = buf_vprintf(b, err, fmt, ap);
    va_end(ap);
    return rc;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data != NULL) {
        b->data[0] = '\0';
    }
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

char *buf_steal(struct buf *b, size_t *len)
{
    char *p = b->data;

    if (p == NULL) {
        p = xstrdup("");
    }
    if (len != NULL) {
        *len = b->len;
    }
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}
