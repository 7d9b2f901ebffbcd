/* Open-addressing hash table (see hashtab.h). */
#include "base/hashtab.h"

#include <stdlib.h>

#include "base/xalloc.h"

uint64_t hashtab_hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void hashtab_reset(struct hashtab *t, size_t cap)
{
    free(t->slots);
    t->cap = cap;
    t->slots = xcalloc(cap, sizeof(*t->slots));
}

void hashtab_insert(struct hashtab *t, uint64_t hash, void *item)
{
    size_t mask = t->cap - 1;
    size_t i = (size_t)hash & mask;

    while (t->slots[i] != NULL) {
        i = (i + 1) & mask;
    }
    t->slots[i] = item;
}

void *hashtab_find(const struct hashtab *t, uint64_t hash,
                   bool (*is_key)(const void *item, const void *key),
                   const void *key)
{
    size_t mask;
    size_t i;

    if (t->cap == 0) {
        return NULL;
    }
    mask = t->cap - 1;
    i = (size_t)hash & mask;
    while (t->slots[i] != NULL) {
        if (is_key(t->slots[i], key)) {
            return t->slots[i];
        }
        i = (i + 1) & mask;
    }
    return NULL;
}

void hashtab_free(struct hashtab *t)
{
    free(t->slots);
    t->slots = NULL;
    t->cap = 0;
}
