/* The Thrift compact protocol, as much of it as a Parquet file needs: a
 * writer for the footer and page headers that src/parquet/parquet.c emits, and
 * a small tree decoder that tests, the fuzz target and tools use to read those
 * bytes back. Pure: no I/O.
 *
 * Writer errors are sticky (as stdio's ferror): the first failed append (the
 * output buffer's cap) is kept in w->rc and w->err, later calls do nothing,
 * and thrift_w_check() reports it once at the end. Every emitted byte is a
 * function of the calls only, so the same calls give the same bytes.
 *
 * Wire facts (Apache Thrift compact protocol spec):
 *   VALUE     ENCODING
 *   i16/i32/i64  zigzag varint, 7 bits a byte, low group first
 *   binary       varint length, then the bytes
 *   double       8 bytes little-endian
 *   field header one byte (id delta << 4 | type) when the delta from the
 *                previous field of the same struct is 1..15, else the type
 *                byte and the id as a zigzag varint; bools carry their value
 *                in the type (1 true, 2 false)
 *   struct       fields in any order, then a stop byte 0x00
 *   list/set     one byte (size << 4 | elem type) when size < 15, else
 *                0xF0 | elem type followed by the size as a varint */
#ifndef QUEEN_PARQUET_THRIFT_H
#define QUEEN_PARQUET_THRIFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

enum thrift_type {
    THRIFT_STOP = 0,
    THRIFT_TRUE = 1, /* also the element type of a list of bools */
    THRIFT_FALSE = 2,
    THRIFT_BYTE = 3,
    THRIFT_I16 = 4,
    THRIFT_I32 = 5,
    THRIFT_I64 = 6,
    THRIFT_DOUBLE = 7,
    THRIFT_BINARY = 8,
    THRIFT_LIST = 9,
    THRIFT_SET = 10,
    THRIFT_MAP = 11,
    THRIFT_STRUCT = 12,
};

#define THRIFT_MAX_DEPTH 16

struct thrift_w {
    struct buf *out; /* borrowed */
    int16_t last_id[THRIFT_MAX_DEPTH];
    int depth; /* structs open; last_id[depth-1] is the innermost */
    int rc;    /* 0 or the first error's code */
    struct err err;
};

/* Start writing into out (borrowed; it must outlive w). */
void thrift_w_init(struct thrift_w *w, struct buf *out);
/* Open a struct (the top-level one, a struct field after thrift_w_field, or a
 * list element); thrift_w_end writes its stop byte. */
void thrift_w_begin(struct thrift_w *w);
void thrift_w_end(struct thrift_w *w);
/* A field header of the innermost struct; ids must be > 0. */
void thrift_w_field(struct thrift_w *w, int16_t id, enum thrift_type type);
/* Whole fields: header and value. */
void thrift_w_i32(struct thrift_w *w, int16_t id, int32_t v);
void thrift_w_i64(struct thrift_w *w, int16_t id, int64_t v);
void thrift_w_bool(struct thrift_w *w, int16_t id, bool v);
void thrift_w_bin(struct thrift_w *w, int16_t id, const void *p, size_t n);
void thrift_w_str(struct thrift_w *w, int16_t id, const char *s);
/* A list field's header; then write n elements with the value writers. */
void thrift_w_list(struct thrift_w *w, int16_t id, enum thrift_type elem,
                   size_t n);
/* Bare values (list elements). */
void thrift_w_varint(struct thrift_w *w, uint64_t v);
void thrift_w_zigzag(struct thrift_w *w, int64_t v);
void thrift_w_binval(struct thrift_w *w, const void *p, size_t n);
/* Returns 0, or the first error (ERR_TOO_BIG) copied into err. */
int thrift_w_check(const struct thrift_w *w, struct err *err);

/* ---- Decoder: a whole struct into a tree of nodes (tests and tools). ---- */

struct thrift_node {
    int16_t id;       /* field id; for a list element its index */
    uint8_t type;     /* enum thrift_type; bools are THRIFT_TRUE */
    int64_t i;        /* integer value, bool 0/1, or a list's size */
    double d;         /* DOUBLE value */
    struct slice bin; /* BINARY value, borrowed from the decoded input */
    int32_t first;    /* index of the first child (field/element), or -1 */
    int32_t next;     /* index of the next sibling, or -1 */
};

struct thrift_tree {
    struct thrift_node *nodes; /* nodes[0] is the root struct */
    size_t n;
    size_t cap;
};

/* Decode one struct from p[0..n). Borrows p (BINARY slices point into it),
 * fills t (free with thrift_tree_free) and *used with the struct's length.
 * Returns 0, or ERR_CORRUPT for truncated or malformed input, nesting deeper
 * than THRIFT_MAX_DEPTH, a map, or more than 1,000,000 nodes. */
int thrift_decode(const void *p, size_t n, struct thrift_tree *t, size_t *used,
                  struct err *err);
void thrift_tree_free(struct thrift_tree *t);
/* The child of node with field id (struct) or index (list), or NULL. */
const struct thrift_node *thrift_get(const struct thrift_tree *t,
                                     const struct thrift_node *node, int id);
/* Shorthands: the integer / binary of child id, or def when absent. */
int64_t thrift_get_i(const struct thrift_tree *t,
                     const struct thrift_node *node, int id, int64_t def);
struct slice thrift_get_bin(const struct thrift_tree *t,
                            const struct thrift_node *node, int id);

#endif
