/* Allocation wrappers that abort with one line when memory runs out. */
#include "base/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void xalloc_die(size_t n)
{
    fprintf(stderr, "fatal: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n == 0 ? 1 : n);

    if (p == NULL) {
        xalloc_die(n);
    }
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count == 0 ? 1 : count, size == 0 ? 1 : size);

    if (p == NULL) {
        xalloc_die(count * size);
    }
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n == 0 ? 1 : n);

    if (q == NULL) {
        xalloc_die(n);
    }
    return q;
}

char *xstrdup(const char *s)
{
    return xmemdup(s, strlen(s) + 1);
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);

    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void *xmemdup(const void *p, size_t n)
{
    void *q = xmalloc(n);

    if (n > 0) {
        memcpy(q, p, n);
    }
    return q;
}
