/* Growable byte buffers with a hard cap. A buffer's data is always
 * NUL-terminated; an append past max fails with ERR_TOO_BIG and leaves the
 * buffer unchanged. */
#ifndef QUEEN_BASE_BUF_H
#define QUEEN_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "base/common.h"
#include "base/err.h"

#define BUF_UNLIMITED ((size_t)-1)

struct buf {
    char *data; /* always NUL-terminated once anything was appended */
    size_t len;
    size_t cap;
    size_t max; /* hard cap: appends past it fail with ERR_TOO_BIG */
};

void buf_init(struct buf *b, size_t max);
int buf_append(struct buf *b, const void *p, size_t n, struct err *err);
int buf_append_str(struct buf *b, const char *s, struct err *err);
int buf_append_byte(struct buf *b, char c, struct err *err);
int buf_printf(struct buf *b, struct err *err, const char *fmt, ...)
    PRINTF(3, 4);
int buf_vprintf(struct buf *b, struct err *err, const char *fmt, va_list ap)
    PRINTF(3, 0);
/* Make room for n more bytes; returns 0 or ERR_TOO_BIG. */
int buf_reserve(struct buf *b, size_t n, struct err *err);
void buf_reset(struct buf *b); /* len = 0, keeps the allocation */
void buf_free(struct buf *b);
/* Take the bytes: returns owned memory (free with free()), resets b. */
char *buf_steal(struct buf *b, size_t *len);

static inline struct slice buf_slice(const struct buf *b)
{
    struct slice s = {b->data, b->len};
    return s;
}

#endif
