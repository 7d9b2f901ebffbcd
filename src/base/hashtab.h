/* A small open-addressing hash table of borrowed items, for lookups by a
 * key the items carry (the sink's engine: partitions by name, O(1) per name
 * an answer carries).
 *
 * Linear probing over a power-of-two array of item pointers; NULL is a free
 * slot. There is no delete and no growth: the owner rebuilds the table
 * (hashtab_reset(), then hashtab_insert() of every item it keeps) when it
 * drops items or when the count passes half the slots. The caller hashes
 * (hashtab_hash(), FNV-1a, or its own) and says what a match is.
 *
 * Ownership: the table owns its slot array only; items are borrowed and
 * must outlive their slot. Not thread-safe. */
#ifndef QUEEN_BASE_HASHTAB_H
#define QUEEN_BASE_HASHTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hashtab {
    void **slots; /* cap of them, NULL = free */
    size_t cap;   /* 0 or a power of two */
};

/* FNV-1a of p[0..n). */
uint64_t hashtab_hash(const void *p, size_t n);
/* Make t empty with cap slots (a power of two, > 0); frees the old array. */
void hashtab_reset(struct hashtab *t, size_t cap);
/* Put item (borrowed) in; the caller keeps the table at most half full, so
 * a free slot always exists. */
void hashtab_insert(struct hashtab *t, uint64_t hash, void *item);
/* The first item with this hash for which is_key(item, key) holds, or NULL
 * (also when the table has no slots). */
void *hashtab_find(const struct hashtab *t, uint64_t hash,
                   bool (*is_key)(const void *item, const void *key),
                   const void *key);
/* Free the slot array; t is then empty (cap 0). */
void hashtab_free(struct hashtab *t);

#endif
