/* Percent-encoding of names (docs/design/formats.md §1): tenant, queue,
 * partition and instance names inside object keys and KV keys.
 *   (1) Every byte outside A-Z a-z 0-9 . _ - is written as '%' and two
 *       uppercase hex digits; the others are written as they are. So a
 *       name's escape never contains '/', '=' or ':'.
 *   (2) Unescape turns %XX with two valid hex digits (either case) into that
 *       byte and keeps any other '%' sequence literally ("100%zz" stays). */
#ifndef QUEEN_BASE_PCT_H
#define QUEEN_BASE_PCT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"

/* Append esc(p[0..n)) to b. Returns 0 or ERR_TOO_BIG (b unchanged). */
int pct_escape(struct buf *b, const char *p, size_t n, struct err *err);
/* Append the unescaped bytes of p[0..n) to b. Returns 0 or ERR_TOO_BIG. */
int pct_unescape(struct buf *b, const char *p, size_t n, struct err *err);
/* Whether byte c is written as is by pct_escape. */
bool pct_is_plain(unsigned char c);

#endif
