/* The window engine's table of pruned partitions: the name, the id and the
 * exact next offset of each partition nothing moved in for long, packed in
 * one arena with a compact open-addressing index (docs/design/window.md §6).
 *
 * Why packed. A queue of a million partitions written once keeps nearly all
 * of them here, and everything here is counted against the sink's memory
 * budget: a heap node per entry (a struct, a name and an id allocation, ~100
 * bytes with malloc's own) would leave little of the budget to the records.
 * So an entry is a few header bytes, the name, the id (a UUID as its 16
 * bytes) and a varint, appended to one arena; the index is an array of
 * 32-bit arena offsets probed linearly, its key the name and the id read
 * from the arena (exact: no hash is trusted for identity).
 *
 * Removal marks the entry removed and shifts the probe run back (no
 * tombstones); the bytes it held are reclaimed by compacting the arena in
 * place once they pass a quarter of it, and a full sweep's end compacts too
 * (dropping what it did not name). Growth and compaction rebuild the index
 * from the arena, so no second copy of either is ever held.
 *
 * What it must never do: change a name, id or position it was given
 * (dormant.h (4)), or hold an entry twice (2). */
#include "sink/dormant.h"

#include <stdlib.h>
#include <string.h>

#include "base/hashtab.h"
#include "base/xalloc.h"

#define DORMANT_REMOVED  0x01
#define DORMANT_MARKED   0x02
#define DORMANT_UUID     0xff
#define DORMANT_GROW_MIN ((size_t)4096)
#define DORMANT_HEAD_MAX (1 + 2 + 1)
#define DORMANT_VARINT   10

/* An entry decoded from the arena. */
struct dent {
    unsigned char flags;
    const unsigned char *name;
    size_t name_len;
    unsigned char id_form; /* DORMANT_UUID or the raw length */
    const unsigned char *id;
    size_t id_len; /* bytes stored */
    int64_t position;
    size_t size; /* bytes of the whole entry */
};

/* ---- Ids ----------------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

static bool is_dash_at(size_t i)
{
    return i == 8 || i == 13 || i == 18 || i == 23;
}

/* A canonical lowercase UUID text into its 16 bytes; false for any other
 * id (kept raw, so the text comes back exactly as given). */
static bool uuid_pack(struct slice id, unsigned char out[16])
{
    size_t o = 0;

    if (id.len != DORMANT_ID_TEXT) {
        return false;
    }
    for (size_t i = 0; i < id.len; i++) {
        if (is_dash_at(i)) {
            if (id.ptr[i] != '-') {
                return false;
            }
            continue;
        }
        int hi = hexval(id.ptr[i]);
        int lo = hexval(id.ptr[i + 1]);
        if (hi < 0 || lo < 0 || is_dash_at(i + 1)) {
            return false;
        }
        out[o++] = (unsigned char)(hi << 4 | lo);
        i++;
    }
    return o == 16;
}

static void uuid_text(const unsigned char in[16], char *out)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    for (size_t i = 0; i < 16; i++) {
        if (o == 8 || o == 13 || o == 18 || o == 23) {
            out[o++] = '-';
        }
        out[o++] = hex[in[i] >> 4];
        out[o++] = hex[in[i] & 15];
    }
}

/* The stored form of an id: its form byte and bytes, into out (1 + 254
 * bytes at most). 0 when it cannot be kept. */
static size_t id_stored(struct slice id, unsigned char *out)
{
    if (uuid_pack(id, out + 1)) {
        out[0] = DORMANT_UUID;
        return 17;
    }
    if (id.len > DORMANT_ID_MAX) {
        return 0;
    }
    out[0] = (unsigned char)id.len;
    if (id.len > 0) {
        memcpy(out + 1, id.ptr, id.len);
    }
    return 1 + id.len;
}

/* ---- Entries ------------------------------------------------------------- */

static void dent_read(const struct dormant *t, size_t at, struct dent *d)
{
    const unsigned char *p = t->arena + at;
    const unsigned char *q;
    uint64_t v = 0;
    unsigned shift = 0;

    d->flags = p[0];
    if (p[1] & 0x80) {
        d->name_len = ((size_t)(p[1] & 0x7f) << 8) | p[2];
        q = p + 3;
    } else {
        d->name_len = p[1];
        q = p + 2;
    }
    d->id_form = *q++;
    d->id_len = d->id_form == DORMANT_UUID ? 16 : d->id_form;
    d->name = q;
    d->id = q + d->name_len;
    q = d->id + d->id_len;
    do {
        v |= (uint64_t)(*q & 0x7f) << shift;
        shift += 7;
    } while (*q++ & 0x80);
    d->position = (int64_t)v;
    d->size = (size_t)(q - p);
}

/* Over the name, the id's form byte and its stored bytes. */
static uint64_t key_hash(const unsigned char *name, size_t name_len,
                         unsigned char form, const unsigned char *id,
                         size_t id_len)
{
    uint64_t h = hashtab_hash(name, name_len);
    uint64_t g = hashtab_hash(id, id_len) ^ ((uint64_t)form << 56);

    h ^= g + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31; /* splitmix64's finish */
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    return h;
}

/* The hash of the entry at `at`, as a lookup computes it. */
static uint64_t dent_hash(const struct dormant *t, size_t at)
{
    struct dent d;

    dent_read(t, at, &d);
    return key_hash(d.name, d.name_len, d.id_form, d.id, d.id_len);
}

/* ---- Index --------------------------------------------------------------- */

static void index_place(struct dormant *t, size_t at)
{
    size_t i = (size_t)(dent_hash(t, at) % t->n_slots);

    while (t->slots[i] != 0) {
        i = i + 1 == t->n_slots ? 0 : i + 1;
    }
    t->slots[i] = (uint32_t)(at + 1);
}

/* Index every live entry in n_slots slots (the old array is freed first:
 * never two at once). */
static void index_rebuild(struct dormant *t, size_t n_slots)
{
    free(t->slots);
    t->slots = NULL;
    t->n_slots = n_slots;
    if (n_slots == 0) {
        return;
    }
    t->slots = xcalloc(n_slots, sizeof(*t->slots));
    for (size_t at = 0; at < t->len;) {
        struct dent d;

        dent_read(t, at, &d);
        if ((d.flags & DORMANT_REMOVED) == 0) {
            index_place(t, at);
        }
        at += d.size;
    }
}

/* Room for want entries with the index at most half full after it grows
 * (3/4 before it grows again: dormant.h (3)). */
static size_t slots_for(size_t want)
{
    return want == 0 ? 0 : want * 2 + 16;
}

/* Move the live entries down over the removed (and, when drop_unmarked,
 * the unmarked) ones, in place; returns how many went. The index is
 * stale afterwards: the caller rebuilds it. */
static size_t arena_compact(struct dormant *t, bool drop_unmarked)
{
    size_t to = 0;
    size_t dropped = 0;

    for (size_t at = 0; at < t->len;) {
        struct dent d;

        dent_read(t, at, &d);
        bool is_kept = (d.flags & DORMANT_REMOVED) == 0 &&
                       (!drop_unmarked || (d.flags & DORMANT_MARKED) != 0);
        if (is_kept) {
            if (to != at) {
                memmove(t->arena + to, t->arena + at, d.size);
            }
            to += d.size;
        } else if ((d.flags & DORMANT_REMOVED) == 0) {
            dropped++;
        }
        at += d.size;
    }
    t->len = to;
    t->dead = 0;
    t->n -= dropped;
    /* give back what growth left when it is much more than is used */
    if (t->cap > t->len + t->len / 2 + DORMANT_GROW_MIN) {
        t->cap = t->len + DORMANT_GROW_MIN;
        t->arena = xrealloc(t->arena, t->cap);
    }
    return dropped;
}

/* ---- The table ----------------------------------------------------------- */

void dormant_init(struct dormant *t)
{
    memset(t, 0, sizeof(*t));
}

void dormant_free(struct dormant *t)
{
    free(t->arena);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

/* The slot holding (name, id), or SIZE_MAX. */
static size_t find_slot(const struct dormant *t, struct slice name,
                        const unsigned char *ids, size_t id_n)
{
    size_t i;

    if (t->n_slots == 0) {
        return SIZE_MAX;
    }
    i = (size_t)(key_hash((const unsigned char *)name.ptr, name.len, ids[0],
                          ids + 1, id_n - 1) %
                 t->n_slots);
    for (; t->slots[i] != 0; i = i + 1 == t->n_slots ? 0 : i + 1) {
        struct dent d;

        dent_read(t, t->slots[i] - 1, &d);
        if (d.name_len == name.len && d.id_len + 1 == id_n &&
            d.id_form == ids[0] && memcmp(d.name, name.ptr, name.len) == 0 &&
            memcmp(d.id, ids + 1, d.id_len) == 0) {
            return i;
        }
    }
    return SIZE_MAX;
}

uint32_t dormant_find(const struct dormant *t, struct slice name,
                      struct slice id)
{
    unsigned char ids[1 + DORMANT_ID_MAX];
    size_t id_n = id_stored(id, ids);
    size_t i;

    if (id_n == 0 || name.len > DORMANT_NAME_MAX) {
        return 0;
    }
    i = find_slot(t, name, ids, id_n);
    return i == SIZE_MAX ? 0 : t->slots[i];
}

static size_t varint_put(unsigned char *p, uint64_t v)
{
    size_t n = 0;

    do {
        p[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        p[n] |= v != 0 ? 0x80 : 0;
        n++;
    } while (v != 0);
    return n;
}

/* Make room for need more bytes: growth by a quarter at least (the arena's
 * untouched tail costs no RSS, but it is counted). */
static bool arena_reserve(struct dormant *t, size_t need)
{
    size_t cap;

    if (t->len + need <= t->cap) {
        return true;
    }
    if (t->len + need > DORMANT_ARENA_MAX) {
        return false;
    }
    cap = t->cap + t->cap / 4;
    cap = cap < t->len + need + DORMANT_GROW_MIN
              ? t->len + need + DORMANT_GROW_MIN
              : cap;
    cap = cap > DORMANT_ARENA_MAX ? DORMANT_ARENA_MAX : cap;
    t->arena = xrealloc(t->arena, cap);
    t->cap = cap;
    return true;
}

bool dormant_add(struct dormant *t, struct slice name, struct slice id,
                 int64_t position)
{
    unsigned char ids[1 + DORMANT_ID_MAX];
    unsigned char head[DORMANT_HEAD_MAX];
    unsigned char var[DORMANT_VARINT];
    size_t id_n = id_stored(id, ids);
    size_t h = 0;
    size_t v;
    size_t at;

    ASSERT(position >= 0); /* dormant.h (4) */
    if (id_n == 0 || name.len > DORMANT_NAME_MAX ||
        find_slot(t, name, ids, id_n) != SIZE_MAX) {
        return false;
    }
    head[h++] = DORMANT_MARKED;
    if (name.len < 0x80) {
        head[h++] = (unsigned char)name.len;
    } else {
        head[h++] = (unsigned char)(0x80 | (name.len >> 8));
        head[h++] = (unsigned char)(name.len & 0xff);
    }
    v = varint_put(var, (uint64_t)position);
    if (!arena_reserve(t, h + name.len + id_n + v)) {
        return false;
    }
    at = t->len;
    memcpy(t->arena + at, head, h);
    memcpy(t->arena + at + h, ids, 1); /* the id's form byte */
    if (name.len > 0) {
        memcpy(t->arena + at + h + 1, name.ptr, name.len);
    }
    memcpy(t->arena + at + h + 1 + name.len, ids + 1, id_n - 1);
    memcpy(t->arena + at + h + id_n + name.len, var, v);
    t->len += h + name.len + id_n + v;
    t->n++;
    if (t->n * 4 > t->n_slots * 3) {
        index_rebuild(t, slots_for(t->n));
    } else {
        index_place(t, at);
    }
    return true;
}

void dormant_remove(struct dormant *t, uint32_t ref)
{
    size_t i = SIZE_MAX;
    struct dent d;

    ASSERT(ref != 0 && ref - 1 < t->len);
    dent_read(t, ref - 1, &d);
    ASSERT((d.flags & DORMANT_REMOVED) == 0);
    for (size_t j = (size_t)(dent_hash(t, ref - 1) % t->n_slots);;
         j = j + 1 == t->n_slots ? 0 : j + 1) {
        ASSERT(t->slots[j] != 0); /* dormant.h (1) */
        if (t->slots[j] == ref) {
            i = j;
            break;
        }
    }
    t->arena[ref - 1] |= DORMANT_REMOVED;
    t->dead += d.size;
    t->n--;
    t->slots[i] = 0;
    /* shift the run after i back (linear probing, no tombstones) */
    for (size_t j = i;;) {
        j = j + 1 == t->n_slots ? 0 : j + 1;
        if (t->slots[j] == 0) {
            break;
        }
        size_t home = (size_t)(dent_hash(t, t->slots[j] - 1) % t->n_slots);
        /* j's entry may move to i when i lies cyclically in [home, j) */
        if ((i <= j) ? (home <= i || home > j) : (home <= i && home > j)) {
            t->slots[i] = t->slots[j];
            t->slots[j] = 0;
            i = j;
        }
    }
    if (t->dead > t->len / 4 && t->dead > DORMANT_GROW_MIN) {
        arena_compact(t, false);
        index_rebuild(t, t->n_slots);
    }
}

void dormant_get(const struct dormant *t, uint32_t ref, struct slice *name,
                 struct slice *id, char *idbuf, int64_t *position)
{
    struct dent d;

    ASSERT(ref != 0 && ref - 1 < t->len);
    dent_read(t, ref - 1, &d);
    *name = (struct slice){(const char *)d.name, d.name_len};
    if (d.id_form == DORMANT_UUID) {
        uuid_text(d.id, idbuf);
        *id = (struct slice){idbuf, DORMANT_ID_TEXT};
    } else {
        *id = (struct slice){(const char *)d.id, d.id_len};
    }
    *position = d.position;
}

int64_t dormant_position(const struct dormant *t, uint32_t ref)
{
    struct dent d;

    ASSERT(ref != 0 && ref - 1 < t->len);
    dent_read(t, ref - 1, &d);
    return d.position;
}

void dormant_mark(struct dormant *t, uint32_t ref)
{
    ASSERT(ref != 0 && ref - 1 < t->len);
    t->arena[ref - 1] |= DORMANT_MARKED;
}

void dormant_unmark_all(struct dormant *t)
{
    for (size_t at = 0; at < t->len;) {
        struct dent d;

        dent_read(t, at, &d);
        t->arena[at] &= (unsigned char)~DORMANT_MARKED;
        at += d.size;
    }
}

size_t dormant_drop_unmarked(struct dormant *t)
{
    size_t dropped = arena_compact(t, true);
    size_t fit = slots_for(t->n);

    /* rebuild when entries went, or when growth left the index far
     * larger than the entries need */
    if (dropped > 0 || t->n_slots > fit + fit / 2) {
        index_rebuild(t, fit);
    }
    return dropped;
}

size_t dormant_count(const struct dormant *t)
{
    return t->n;
}

uint64_t dormant_bytes(const struct dormant *t)
{
    return (uint64_t)t->cap + (uint64_t)t->n_slots * sizeof(*t->slots);
}

/* ---- Checkpoint order ---------------------------------------------------- */

struct sort_ctx {
    const struct dormant *t;
};

static int dent_cmp(const void *a, const void *b, void *ctx)
{
    const struct dormant *t = ((const struct sort_ctx *)ctx)->t;
    struct dent x;
    struct dent y;
    char xb[DORMANT_ID_TEXT];
    char yb[DORMANT_ID_TEXT];
    struct slice xi;
    struct slice yi;
    int c;

    dent_read(t, *(const uint32_t *)a - 1, &x);
    dent_read(t, *(const uint32_t *)b - 1, &y);
    c = memcmp(x.name, y.name,
               x.name_len < y.name_len ? x.name_len : y.name_len);
    if (c != 0) {
        return c;
    }
    if (x.name_len != y.name_len) {
        return x.name_len < y.name_len ? -1 : 1;
    }
    if (x.position != y.position) {
        return x.position < y.position ? -1 : 1;
    }
    xi = x.id_form == DORMANT_UUID
             ? (uuid_text(x.id, xb), (struct slice){xb, DORMANT_ID_TEXT})
             : (struct slice){(const char *)x.id, x.id_len};
    yi = y.id_form == DORMANT_UUID
             ? (uuid_text(y.id, yb), (struct slice){yb, DORMANT_ID_TEXT})
             : (struct slice){(const char *)y.id, y.id_len};
    c = memcmp(xi.ptr, yi.ptr, xi.len < yi.len ? xi.len : yi.len);
    if (c != 0) {
        return c;
    }
    return (xi.len > yi.len) - (xi.len < yi.len);
}

uint32_t *dormant_sorted(const struct dormant *t, size_t *n)
{
    uint32_t *v = xmalloc((t->n + 1) * sizeof(*v));
    struct sort_ctx ctx = {t};
    size_t k = 0;

    for (size_t at = 0; at < t->len;) {
        struct dent d;

        dent_read(t, at, &d);
        if ((d.flags & DORMANT_REMOVED) == 0) {
            v[k++] = (uint32_t)(at + 1);
        }
        at += d.size;
    }
    ASSERT(k == t->n);
    if (k > 1) {
        qsort_r(v, k, sizeof(*v), dent_cmp, &ctx);
    }
    *n = k;
    return v;
}

#ifndef NDEBUG
/* Index slots in use, each pointing at a live entry (1). */
static size_t slots_used(const struct dormant *t)
{
    size_t used = 0;

    for (size_t i = 0; i < t->n_slots; i++) {
        struct dent d;

        if (t->slots[i] == 0) {
            continue;
        }
        used++;
        dent_read(t, t->slots[i] - 1, &d);
        ASSERT((d.flags & DORMANT_REMOVED) == 0); /* (1) */
    }
    return used;
}

static size_t live_entries(const struct dormant *t)
{
    size_t live = 0;

    for (size_t at = 0; at < t->len;) {
        struct dent d;

        dent_read(t, at, &d);
        live += (d.flags & DORMANT_REMOVED) == 0;
        at += d.size;
    }
    return live;
}
#endif

void dormant_check_invariants(const struct dormant *t)
{
#ifndef NDEBUG
    ASSERT(t->n * 4 <= t->n_slots * 3 || t->n == 0);          /* (3) */
    ASSERT(slots_used(t) == t->n && live_entries(t) == t->n); /* (1) */
#else
    (void)t;
#endif
}
