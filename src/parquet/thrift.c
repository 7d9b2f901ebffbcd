/* The Thrift compact protocol, as much of it as a Parquet file needs: a
 * writer for the footer and page headers that src/parquet/parquet.c emits, and
 * a small tree decoder that tests, the fuzz target and tools use to read those
 * bytes back. Pure: no I/O.
 *
 * The decoder is deliberately plain: it builds every node of one struct into
 * one array, children linked by index, so a caller frees one allocation and
 * navigates with thrift_get(). It recurses, bounded by THRIFT_MAX_DEPTH. */
#include "parquet/thrift.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* ---- Writer ---- */

void thrift_w_init(struct thrift_w *w, struct buf *out)
{
    memset(w, 0, sizeof(*w));
    w->out = out;
}

static void put(struct thrift_w *w, const void *p, size_t n)
{
    if (w->rc != 0) {
        return;
    }
    w->rc = buf_append(w->out, p, n, &w->err);
}

static void put_byte(struct thrift_w *w, uint8_t b)
{
    put(w, &b, 1);
}

void thrift_w_varint(struct thrift_w *w, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;

    while (v >= 0x80) {
        tmp[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (uint8_t)v;
    put(w, tmp, n);
}

void thrift_w_zigzag(struct thrift_w *w, int64_t v)
{
    thrift_w_varint(w, ((uint64_t)v << 1) ^ (v < 0 ? UINT64_MAX : 0));
}

void thrift_w_binval(struct thrift_w *w, const void *p, size_t n)
{
    thrift_w_varint(w, n);
    put(w, p, n);
}

void thrift_w_begin(struct thrift_w *w)
{
    ASSERT(w->depth < THRIFT_MAX_DEPTH);
    w->last_id[w->depth++] = 0;
}

void thrift_w_end(struct thrift_w *w)
{
    ASSERT(w->depth > 0);
    put_byte(w, THRIFT_STOP);
    w->depth--;
}

void thrift_w_field(struct thrift_w *w, int16_t id, enum thrift_type type)
{
    int16_t *last;
    int delta;

    ASSERT(w->depth > 0 && id > 0);
    last = &w->last_id[w->depth - 1];
    delta = id - *last;
    if (delta > 0 && delta <= 15) {
        put_byte(w, (uint8_t)((delta << 4) | (int)type));
    } else {
        put_byte(w, (uint8_t)type);
        thrift_w_zigzag(w, id);
    }
    *last = id;
}

void thrift_w_i32(struct thrift_w *w, int16_t id, int32_t v)
{
    thrift_w_field(w, id, THRIFT_I32);
    thrift_w_zigzag(w, v);
}

void thrift_w_i64(struct thrift_w *w, int16_t id, int64_t v)
{
    thrift_w_field(w, id, THRIFT_I64);
    thrift_w_zigzag(w, v);
}

void thrift_w_bool(struct thrift_w *w, int16_t id, bool v)
{
    thrift_w_field(w, id, v ? THRIFT_TRUE : THRIFT_FALSE);
}

void thrift_w_bin(struct thrift_w *w, int16_t id, const void *p, size_t n)
{
    thrift_w_field(w, id, THRIFT_BINARY);
    thrift_w_binval(w, p, n);
}

void thrift_w_str(struct thrift_w *w, int16_t id, const char *s)
{
    thrift_w_bin(w, id, s, strlen(s));
}

void thrift_w_list(struct thrift_w *w, int16_t id, enum thrift_type elem,
                   size_t n)
{
    thrift_w_field(w, id, THRIFT_LIST);
    if (n < 15) {
        put_byte(w, (uint8_t)((n << 4) | (size_t)elem));
    } else {
        put_byte(w, (uint8_t)(0xF0 | (unsigned)elem));
        thrift_w_varint(w, n);
    }
}

int thrift_w_check(const struct thrift_w *w, struct err *err)
{
    if (w->rc != 0) {
        *err = w->err;
        return err_wrap(err, "thrift");
    }
    return 0;
}

/* ---- Decoder ---- */

#define THRIFT_MAX_NODES 1000000

struct reader {
    const uint8_t *p;
    const uint8_t *end;
    const uint8_t *start;
    struct thrift_tree *t;
    struct err *err;
};

static int corrupt(struct reader *r, const char *what)
{
    return err_set(r->err, ERR_CORRUPT, "thrift: %s at byte %zu", what,
                   (size_t)(r->p - r->start));
}

static int get_varint(struct reader *r, uint64_t *v)
{
    uint64_t x = 0;

    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) {
            return corrupt(r, "truncated varint");
        }
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7F) << shift;
        if ((b & 0x80) == 0) {
            *v = x;
            return 0;
        }
    }
    return corrupt(r, "varint longer than 10 bytes");
}

static int get_zigzag(struct reader *r, int64_t *v)
{
    uint64_t u = 0;

    if (get_varint(r, &u) != 0) {
        return r->err->code;
    }
    *v = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
    return 0;
}

static int32_t new_node(struct reader *r, int16_t id, uint8_t type)
{
    struct thrift_tree *t = r->t;

    if (t->n >= THRIFT_MAX_NODES) {
        corrupt(r, "more than 1000000 nodes");
        return -1;
    }
    if (t->n == t->cap) {
        t->cap = t->cap == 0 ? 64 : t->cap * 2;
        t->nodes = xrealloc(t->nodes, t->cap * sizeof(*t->nodes));
    }
    struct thrift_node *nd = &t->nodes[t->n];
    memset(nd, 0, sizeof(*nd));
    nd->id = id;
    nd->type = type;
    nd->first = -1;
    nd->next = -1;
    return (int32_t)t->n++;
}

/* NOLINTNEXTLINE(misc-no-recursion): bounded by THRIFT_MAX_DEPTH */
static int read_value(struct reader *r, int32_t idx, int depth);

static int read_binary(struct reader *r, int32_t idx)
{
    uint64_t len = 0;

    if (get_varint(r, &len) != 0) {
        return r->err->code;
    }
    if (len > (uint64_t)(r->end - r->p)) {
        return corrupt(r, "binary longer than the input");
    }
    r->t->nodes[idx].bin.ptr = (const char *)r->p;
    r->t->nodes[idx].bin.len = (size_t)len;
    r->p += len;
    return 0;
}

/* Appends child to the end of parent's child list; tail tracks the end. */
static void link_child(struct reader *r, int32_t parent, int32_t *tail,
                       int32_t child)
{
    if (*tail < 0) {
        r->t->nodes[parent].first = child;
    } else {
        r->t->nodes[*tail].next = child;
    }
    *tail = child;
}

/* NOLINTNEXTLINE(misc-no-recursion): bounded by THRIFT_MAX_DEPTH */
static int read_list(struct reader *r, int32_t idx, int depth)
{
    uint8_t h;
    uint64_t size;
    int32_t tail = -1;

    if (r->p >= r->end) {
        return corrupt(r, "truncated list header");
    }
    h = *r->p++;
    size = h >> 4;
    if (size == 15 && get_varint(r, &size) != 0) {
        return r->err->code;
    }
    if (size > (uint64_t)(r->end - r->p) || size > 0x7FFF) {
        return corrupt(r, "list longer than the input");
    }
    r->t->nodes[idx].i = (int64_t)size;
    for (uint64_t k = 0; k < size; k++) {
        uint8_t et = h & 0x0F;
        int32_t c =
            new_node(r, (int16_t)k, et == THRIFT_FALSE ? THRIFT_TRUE : et);
        if (c < 0) {
            return r->err->code;
        }
        link_child(r, idx, &tail, c);
        if (et == THRIFT_TRUE || et == THRIFT_FALSE) {
            if (r->p >= r->end) {
                return corrupt(r, "truncated bool");
            }
            r->t->nodes[c].i = *r->p++ == 1;
        } else if (read_value(r, c, depth + 1) != 0) {
            return r->err->code;
        }
    }
    return 0;
}

/* Reads the fields of a struct whose node is idx, up to its stop byte. */
/* NOLINTNEXTLINE(misc-no-recursion): bounded by THRIFT_MAX_DEPTH */
static int read_struct(struct reader *r, int32_t idx, int depth)
{
    int16_t last = 0;
    int32_t tail = -1;

    if (depth >= THRIFT_MAX_DEPTH) {
        return corrupt(r, "nesting too deep");
    }
    for (;;) {
        int64_t id = 0;
        if (r->p >= r->end) {
            return corrupt(r, "truncated struct");
        }
        uint8_t h = *r->p++;
        uint8_t type = h & 0x0F;
        if (type == THRIFT_STOP) {
            return 0;
        }
        if ((h >> 4) != 0) {
            id = last + (h >> 4);
        } else if (get_zigzag(r, &id) != 0) {
            return r->err->code;
        }
        if (id < INT16_MIN || id > INT16_MAX) {
            return corrupt(r, "field id out of range");
        }
        last = (int16_t)id;
        int32_t c =
            new_node(r, last, type == THRIFT_FALSE ? THRIFT_TRUE : type);
        if (c < 0) {
            return r->err->code;
        }
        link_child(r, idx, &tail, c);
        if (type == THRIFT_TRUE || type == THRIFT_FALSE) {
            r->t->nodes[c].i = type == THRIFT_TRUE;
        } else if (read_value(r, c, depth) != 0) {
            return r->err->code;
        }
    }
}

/* NOLINTNEXTLINE(misc-no-recursion): bounded by THRIFT_MAX_DEPTH */
static int read_value(struct reader *r, int32_t idx, int depth)
{
    switch (r->t->nodes[idx].type) {
    case THRIFT_BYTE:
        if (r->p >= r->end) {
            return corrupt(r, "truncated byte");
        }
        r->t->nodes[idx].i = *r->p < 128 ? *r->p : (int64_t)*r->p - 256;
        r->p++;
        return 0;
    case THRIFT_I16:
    case THRIFT_I32:
    case THRIFT_I64:
        return get_zigzag(r, &r->t->nodes[idx].i);
    case THRIFT_DOUBLE:
        if (r->end - r->p < 8) {
            return corrupt(r, "truncated double");
        }
        memcpy(&r->t->nodes[idx].d, r->p, 8);
        r->p += 8;
        return 0;
    case THRIFT_BINARY:
        return read_binary(r, idx);
    case THRIFT_LIST:
    case THRIFT_SET:
        return read_list(r, idx, depth);
    case THRIFT_STRUCT:
        return read_struct(r, idx, depth + 1);
    default:
        return corrupt(r, "unsupported type (map or unknown)");
    }
}

int thrift_decode(const void *p, size_t n, struct thrift_tree *t, size_t *used,
                  struct err *err)
{
    // cppcheck-suppress ctuuninitvar ; err is an output, only written
    struct reader r = {p, (const uint8_t *)p + n, p, t, err};

    memset(t, 0, sizeof(*t));
    if (new_node(&r, 0, THRIFT_STRUCT) < 0 || read_struct(&r, 0, 0) != 0) {
        thrift_tree_free(t);
        return err->code;
    }
    *used = (size_t)(r.p - r.start);
    return 0;
}

void thrift_tree_free(struct thrift_tree *t)
{
    free(t->nodes);
    memset(t, 0, sizeof(*t));
}

const struct thrift_node *thrift_get(const struct thrift_tree *t,
                                     const struct thrift_node *node, int id)
{
    if (node == NULL) {
        return NULL;
    }
    for (int32_t c = node->first; c >= 0; c = t->nodes[c].next) {
        if (t->nodes[c].id == id) {
            return &t->nodes[c];
        }
    }
    return NULL;
}

int64_t thrift_get_i(const struct thrift_tree *t,
                     const struct thrift_node *node, int id, int64_t def)
{
    const struct thrift_node *c = thrift_get(t, node, id);

    return c == NULL ? def : c->i;
}

struct slice thrift_get_bin(const struct thrift_tree *t,
                            const struct thrift_node *node, int id)
{
    const struct thrift_node *c = thrift_get(t, node, id);
    struct slice none = {NULL, 0};

    return c == NULL ? none : c->bin;
}
