/* The window engine's table of pruned partitions: the name, the id and the
 * exact next offset of each partition nothing moved in for long, packed in
 * one arena with a compact open-addressing index (docs/design/window.md §6).
 * Pure: no I/O, no clock.
 *
 * Invariants:
 *   (1) Every live entry has exactly one index slot pointing at it; a
 *       removed entry has none and only waits for compaction.
 *   (2) (name, id) is unique among the live entries.
 *   (3) The index is at most 3/4 full, so a free slot ends every probe.
 *   (4) A position is >= 0; what dormant_get() returns is what
 *       dormant_add() was given, byte for byte (name, id) and exactly
 *       (position).
 *
 * Entry layout in the arena (byte offsets within the entry):
 *
 *   off  size   field
 *   0    1      flags: bit 0 removed, bit 1 named by the running full sweep
 *   1    1|2    name length n: < 0x80 in one byte; else two bytes, big
 *               endian, with the top bit of the first set (n <= 0x7fff)
 *   .    1      id form: 0xff = a canonical lowercase UUID text (36 bytes)
 *               kept as its 16 bytes; else the id's length (0..254), raw
 *   .    n      name
 *   .    16|len id
 *   .    1..10  position, unsigned LEB128
 *
 * So a partition with an 8-byte name and a UUID costs 28 bytes plus 4 to
 * 8 bytes of index (one 32-bit slot per 1.33 to 2 entries), against ~400
 * for a tracked one. A reference is an entry's arena offset + 1 (0: none),
 * valid until the next dormant_add(), dormant_remove() or
 * dormant_drop_unmarked() (they may compact the arena).
 *
 * Ownership: the table owns its arena and index; names and ids are copied
 * in. Not thread-safe. */
#ifndef QUEEN_SINK_DORMANT_H
#define QUEEN_SINK_DORMANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

#define DORMANT_NAME_MAX  0x7fff
#define DORMANT_ID_MAX    254 /* bytes of an id kept raw */
#define DORMANT_ARENA_MAX ((size_t)UINT32_MAX - 1)

struct dormant {
    unsigned char *arena;
    size_t len;
    size_t cap;
    size_t dead;     /* bytes of removed entries, until compaction */
    uint32_t *slots; /* n_slots of them; 0 = free, else a reference */
    size_t n_slots;
    size_t n; /* live entries */
};

/* An empty table (no allocation until the first add). */
void dormant_init(struct dormant *t);
void dormant_free(struct dormant *t);

/* The live entry of (name, id), or 0. */
uint32_t dormant_find(const struct dormant *t, struct slice name,
                      struct slice id);
/* Add (name, id) at position (>= 0), marked as named by the running full
 * sweep. false, nothing changed, when it is there already, when the name
 * is over DORMANT_NAME_MAX or the id over DORMANT_ID_MAX bytes (and not a
 * UUID), or when the arena would pass DORMANT_ARENA_MAX: the caller keeps
 * the partition tracked. */
bool dormant_add(struct dormant *t, struct slice name, struct slice id,
                 int64_t position);
/* Remove the live entry ref (from dormant_find()). */
void dormant_remove(struct dormant *t, uint32_t ref);

/* Where a UUID id is rendered: its 36 bytes of text. */
#define DORMANT_ID_TEXT 36

/* The entry ref: name points into the arena, id into the arena or into
 * idbuf (DORMANT_ID_TEXT bytes, for a UUID kept as 16 bytes); both valid
 * while ref is. */
void dormant_get(const struct dormant *t, uint32_t ref, struct slice *name,
                 struct slice *id, char *idbuf, int64_t *position);

/* The entry ref's position. */
int64_t dormant_position(const struct dormant *t, uint32_t ref);

/* Full sweeps: a sweep starts with every entry unmarked, marks those its
 * pages name, and drops the others when it ends. Returns how many went. */
void dormant_mark(struct dormant *t, uint32_t ref);
void dormant_unmark_all(struct dormant *t);
size_t dormant_drop_unmarked(struct dormant *t);

size_t dormant_count(const struct dormant *t);
/* Bytes held: the arena's and the index's capacity. */
uint64_t dormant_bytes(const struct dormant *t);

/* The live entries' references in checkpoint order: name bytes (a prefix
 * first), then position, then id text. Returns an owned array of *n (4
 * bytes an entry; free with free()); valid as the references are. */
uint32_t *dormant_sorted(const struct dormant *t, size_t *n);

/* Costly self-check of (1)-(3); compiled out under NDEBUG. */
void dormant_check_invariants(const struct dormant *t);

#endif
