/* Allocation wrappers that abort with one line when memory runs out. Caps
 * elsewhere keep memory bounded, so call sites never check for NULL. */
#ifndef QUEEN_BASE_XALLOC_H
#define QUEEN_BASE_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
void *xmemdup(const void *p, size_t n);

#endif
