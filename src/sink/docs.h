/* Documents the sink writes and reads back (docs/design/formats.md §3-§5): the
 * window manifest, the checkpoint object, and the KV intent, committed, lease
 * and presence documents. Pure: encode to a buffer, decode from bytes.
 *
 * Encoders write compact JSON with keys in the order of docs/design/formats.md.
 * Decoders treat their input as untrusted (it comes from the bucket or the KV
 * store): any malformed input is an error, never a crash, and they are tolerant
 * where docs/design/formats.md says so (manifest tenant "" and lost [] when
 * absent; checkpoint positions with a null id or extra elements; committed tEnd
 * as an ISO-us string or integer us).
 *
 * Decoded strings and arrays live in a caller's arena: pass an empty buffer
 * (buf_init, any max >= the input size); on success the slices and arrays of
 * the result point into arena->data; free them all with buf_free(arena).
 * On failure the arena may hold garbage and must still be freed. */
#ifndef QUEEN_SINK_DOCS_H
#define QUEEN_SINK_DOCS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"

/* ---- manifest (docs/design/formats.md §3) -------------------------------- */

struct docs_object {
    struct slice key;
    uint64_t bytes; /* stored body length */
    uint64_t records;
    char sha256[65];    /* lowercase hex of the stored body */
    bool has_partition; /* per-partition objects only */
    struct slice partition;
    int64_t first_offset;
    int64_t last_offset;
};

struct docs_lost {
    struct slice partition;
    int64_t from; /* inclusive */
    int64_t to;   /* inclusive */
};

struct docs_position; /* below */

struct docs_manifest {
    struct slice sink;
    struct slice tenant;
    struct slice queue; /* raw queue name */
    int64_t k;
    int64_t t_start;
    int64_t t_end;
    struct slice format;      /* "jsonl" | "parquet" */
    struct slice compression; /* effective codec */
    struct slice layout;      /* "merged" | "per-partition" */
    const struct docs_object *objects;
    size_t n_objects;
    uint64_t records;    /* sum over objects */
    uint64_t bytes;      /* sum over objects */
    uint64_t partitions; /* distinct partitions with >= 1 record */
    bool has_ts;         /* minTs/maxTs present (some record) */
    int64_t min_ts;
    int64_t max_ts;
    const struct docs_lost *lost;
    size_t n_lost;
    struct slice writer;
    int64_t committed_at_ms; /* wall clock; rendered ISO-us (ends 000Z) */
    /* Where each partition the window touched (records or lost ranges)
     * starts after it, as in a checkpoint (docs/design/formats.md §3):
     * the last checkpoint plus the positions of the manifests after it
     * are the exact positions at the commit pointer. Absent in manifests
     * written before it existed (has_positions false). */
    bool has_positions;
    const struct docs_position *positions;
    size_t n_positions;
};

int docs_manifest_encode(struct buf *out, const struct docs_manifest *m,
                         struct err *err);
/* ERR_CORRUPT "manifest: ..." for anything malformed. */
int docs_manifest_decode(const char *p, size_t n, struct docs_manifest *m,
                         struct buf *arena, struct err *err);

/* ---- checkpoint (docs/design/formats.md §4) ------------------------------ */

#define DOCS_CHECKPOINT_MAX_DECODED ((size_t)512 * 1024 * 1024)

struct docs_position {
    struct slice name;
    int64_t offset;  /* the next offset to read */
    struct slice id; /* partition UUID; len 0 = unknown (omitted) */
};

struct docs_checkpoint {
    int64_t k;
    int64_t t_end;
    const struct docs_position *positions; /* encode: any order */
    size_t n;
};

/* One zstd frame (level 3) of {"k":K,"tEnd":T,"positions":[[name,offset
 * (,id)],...]} with positions sorted by name bytes (then offset, then id),
 * so the bytes are a function of the set of positions only (sorted in a
 * copy when they come out of order, then docs_checkpoint_encode_stream()).
 * ERR_TOO_BIG, nothing written, when the JSON passes
 * DOCS_CHECKPOINT_MAX_DECODED (the decoder would refuse it; ~13 million
 * positions). */
int docs_checkpoint_encode(struct buf *out, const struct docs_checkpoint *cp,
                           struct err *err);
/* Where docs_checkpoint_encode_stream() reads positions from: read()
 * copies up to max positions into out, going on from where its last call
 * left off (from the first after rewind()), and returns how many, 0 at the
 * end; the slices in out stay valid until its next call. */
struct docs_position_source {
    void *ctx;
    void (*rewind)(void *ctx);
    size_t (*read)(void *ctx, struct docs_position *out, size_t max);
};

/* A checkpoint object of positions a source gives in checkpoint order
 * (name bytes, then offset, then id): one zstd frame (level 3, the
 * content size in its header) of the same JSON docs_checkpoint_encode()
 * writes. Reads the source twice (to size the JSON, then to compress it)
 * and holds a 64 KiB piece of JSON at a time, never all of it: a million
 * positions are ~50 MB of JSON. The bytes are a function of the positions
 * only, and those of a one-shot ZSTD_compress() of the JSON while it fits
 * zstd's 2 MiB window. Appends to out; on an error
 * nothing is appended: ERR_INVALID for positions out of order or a source
 * that gave other bytes the second time, ERR_TOO_BIG as
 * docs_checkpoint_encode(). */
int docs_checkpoint_encode_stream(struct buf *out, int64_t k, int64_t t_end,
                                  const struct docs_position_source *src,
                                  struct err *err);
/* Whether window k writes a checkpoint: every != 0 and k % every == 0
 * (docs/design/protocol.md §6.4; every 20 over k = 1..41 gives 20 and 40; 0
 * disables). */
bool docs_checkpoint_due(int64_t k, int64_t every);

/* Positions come back sorted as stored. Errors are ERR_CORRUPT with the
 * texts of docs/design/formats.md §4: "checkpoint: not a zstd frame: ...",
 * "checkpoint: zstd decode: ...", "checkpoint: decodes to more than 536870912
 * bytes; refusing", "checkpoint: bad JSON: ...". */
int docs_checkpoint_decode(const void *p, size_t n, struct docs_checkpoint *cp,
                           struct buf *arena, struct err *err);

/* ---- KV documents (docs/design/formats.md §5) ---------------------------- */

/* The offsets a per-partition object's key names (docs/design/formats.md
 * §5): the first and last offset of the partition's records in the window
 * when its intent was written. */
struct docs_intent_part {
    struct slice partition;
    int64_t first;
    int64_t last;
};

/* Every input of a window's keys and bytes, so a redo rebuilds the window
 * its intent names whatever the settings are now. align, prefix, libraries
 * and parts are absent from intents written before they were pinned: has_*
 * false then means "this sink's current value" (what such a redo always
 * used), except libraries, whose absence means another writer's bytes. */
struct docs_intent {
    int64_t k;
    int64_t t_start;
    int64_t t_end;
    struct slice format;
    struct slice compression;
    struct slice layout;
    struct slice writer;
    bool has_align;
    struct slice align; /* "hour" | "day" | "none" */
    bool has_prefix;
    struct slice prefix;
    /* The codec library and its version that made the bytes
     * ("libzstd/1.5.4"; "" for uncompressed JSONL): a redo rebuilds with
     * its own, so it treats the intent as its own only when they are equal
     * (docs/design/protocol.md §5). Absent from older intents. */
    bool has_libraries;
    struct slice libraries;
    /* The window's record count when its intent was written: a redo with
     * none left knows whether the first attempt may have put an object
     * (merged layout: upload.h is_redo_build). Absent from older intents. */
    bool has_records;
    int64_t records;
    bool has_parts;                       /* per-partition layout only */
    const struct docs_intent_part *parts; /* sorted as the plan is */
    size_t n_parts;
    /* Instead of parts, when they outgrow the KV value: the bucket key of
     * a parts document (docs_parts_encode) and its SHA-256 (hex). */
    bool has_parts_key;
    struct slice parts_key;
    struct slice parts_sha256;
};

struct docs_committed {
    int64_t k;
    int64_t t_end;         /* us; encoded as an ISO-us string */
    struct slice manifest; /* manifest key */
    uint64_t records;
    uint64_t bytes;
    int64_t committed_at_ms;
};

/* Lease and presence rows share this shape. */
struct docs_lease {
    struct slice instance;
    struct slice incarnation; /* 16 lowercase hex digits */
    int64_t since_ms;
};

int docs_intent_encode(struct buf *out, const struct docs_intent *in,
                       struct err *err);
int docs_intent_decode(const char *p, size_t n, struct docs_intent *in,
                       struct buf *arena, struct err *err);
/* The parts document: {"k":K,"parts":[[partition,first,last],...]} with the
 * parts of in (k and parts only). Decode fills k, has_parts, parts and
 * n_parts of *in and leaves the rest alone. */
int docs_parts_encode(struct buf *out, const struct docs_intent *in,
                      struct err *err);
int docs_parts_decode(const char *p, size_t n, struct docs_intent *in,
                      struct buf *arena, struct err *err);
int docs_committed_encode(struct buf *out, const struct docs_committed *c,
                          struct err *err);
int docs_committed_decode(const char *p, size_t n, struct docs_committed *c,
                          struct buf *arena, struct err *err);
/* The start row of a queue under `latest` that has committed nothing:
 * {"tStart": ISO-us}, its first window's start (docs/design/protocol.md
 * §3). */
int docs_start_encode(struct buf *out, int64_t t_start, struct err *err);
int docs_start_decode(const char *p, size_t n, int64_t *t_start,
                      struct err *err);
int docs_lease_encode(struct buf *out, const struct docs_lease *l,
                      struct err *err);
int docs_lease_decode(const char *p, size_t n, struct docs_lease *l,
                      struct buf *arena, struct err *err);

/* Whether a decoded manifest is the upload of this intent for this queue
 * (docs/design/protocol.md §5: k, bounds, format, compression, layout, writer,
 * sink, tenant, queue all equal). */
bool docs_manifest_matches(const struct docs_manifest *m,
                           const struct docs_intent *in, struct slice sink,
                           struct slice tenant, struct slice queue);

#endif
