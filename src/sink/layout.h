/* Layout: every name the sink writes, in the bucket and in the KV store
 * (docs/design/formats.md §1, §2 and docs/design/protocol.md §3, §4). Pure
 * string building; no I/O.
 *
 * Bucket keys (esc = pct_escape; the prefix and the sink name are never
 * escaped, they are validated by the config):
 *   data, merged:
 *     <prefix>/tenant=<esc>/queue=<esc>/dt=YYYY-MM-DD[/hour=HH]/
 *       w-<k:10>-<tStart:16>-<tEnd:16>.<ext>
 *   data, per-partition (first/last: inclusive offsets in the object):
 *     .../w-<k:10>-<tStart:16>-<tEnd:16>-p-<esc
 * part>-<first:12>-<last:12>.<ext> sidecar root:
 * <prefix>/_queen/tenant=<esc>/queue=<esc> manifest: <root>/windows/<k:10>.json
 *   checkpoint:   <root>/checkpoint/<k:10>.json.zst
 *   intent parts: <root>/intents/<k:10>-<sha16>.json
 * dt and hour come from bucket_ts (layout_bucket_ts): align hour writes both,
 * day only dt, none both. Numbers are zero-padded to their width and clamp
 * negatives to 0 (so MIN pads to 0000000000000000 and its dt/hour is
 * 1970-01-01/00). Because '/' is always escaped inside names, a merged
 * hour-aligned key under a one-segment prefix has exactly 5 slashes, and the
 * keys of successive windows sort in window order.
 *
 * KV keys (namespace queen-s3, the queue's tenant):
 *   s3:<sink>:<esc queue>:lease | intent | committed | start
 *   s3:<sink>:node=<esc instance>      (presence; '=' is always escaped in
 *                                       queue names, so no queue key falls
 *                                       under the prefix s3:<sink>:node=) */
#ifndef QUEEN_SINK_LAYOUT_H
#define QUEEN_SINK_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"

#define LAYOUT_SIDECAR_DIR "_queen"

enum layout_kind {
    LAYOUT_MERGED,
    LAYOUT_PER_PARTITION,
};

enum layout_align {
    LAYOUT_ALIGN_HOUR,
    LAYOUT_ALIGN_DAY,
    LAYOUT_ALIGN_NONE,
};

enum layout_kv {
    LAYOUT_KV_LEASE,
    LAYOUT_KV_INTENT,
    LAYOUT_KV_COMMITTED,
    LAYOUT_KV_START, /* a `latest` queue's first window start */
};

/* "merged" / "per-partition"; parse returns false for anything else. */
const char *layout_kind_name(enum layout_kind k);
bool layout_kind_parse(const char *s, enum layout_kind *out);
/* "hour" / "day" / "none". */
const char *layout_align_name(enum layout_align a);
bool layout_align_parse(const char *s, enum layout_align *out);
/* The align unit in us: an hour, a day, or 0 for none. */
int64_t layout_align_unit(enum layout_align a);

/* Which queue of which tenant, under which prefix. Borrowed. */
struct layout_queue {
    const char *prefix; /* "queen" or "a/b"; "" = keys start at tenant= */
    struct slice tenant;
    struct slice queue;
};

/* One window's data object(s). */
struct layout_window {
    enum layout_align align;
    int64_t k;
    int64_t t_start;
    int64_t t_end;
    int64_t bucket_ts; /* layout_bucket_ts() */
    const char *ext;   /* "jsonl.zst", "parquet", ... */
};

/* bucket_ts = t_start, or when t_start is MIN (first window under
 * earliest) the first record's ts (min_ts), or t_end without records. */
int64_t layout_bucket_ts(int64_t t_start, bool has_records, int64_t min_ts,
                         int64_t t_end);

/* Append the merged data key to out. Returns 0 or ERR_TOO_BIG. */
int layout_data_key(struct buf *out, const struct layout_queue *q,
                    const struct layout_window *w, struct err *err);
/* Append the per-partition data key of partition part (first..last). */
int layout_part_key(struct buf *out, const struct layout_queue *q,
                    const struct layout_window *w, struct slice part,
                    const int64_t first_last[2], struct err *err);

int layout_sidecar_root(struct buf *out, const struct layout_queue *q,
                        struct err *err);
int layout_manifest_key(struct buf *out, const struct layout_queue *q,
                        int64_t k, struct err *err);
int layout_checkpoint_key(struct buf *out, const struct layout_queue *q,
                          int64_t k, struct err *err);
/* <root>/intents/<k:10>-<first 16 hex of sha256_hex>.json: the per-partition
 * offsets of window k's intent when they outgrow the KV value
 * (docs/design/formats.md §5); named by their digest, so two writers of one
 * k never overwrite each other's. */
int layout_parts_key(struct buf *out, const struct layout_queue *q, int64_t k,
                     const char *sha256_hex, struct err *err);
/* "<root>/checkpoint/": the LIST prefix for checkpoints. */
int layout_checkpoint_prefix(struct buf *out, const struct layout_queue *q,
                             struct err *err);

/* k of a checkpoint key: the digits between the last "/checkpoint/" and a
 * final ".json.zst" (non-empty, all digits, fits int64). Manifest likewise
 * with "/windows/" and ".json". False when the key does not parse. */
bool layout_parse_checkpoint_k(const char *key, size_t n, int64_t *k);
bool layout_parse_manifest_k(const char *key, size_t n, int64_t *k);

/* KV keys. */
int layout_kv_key(struct buf *out, const char *sink, struct slice queue,
                  enum layout_kv what, struct err *err);
int layout_presence_key(struct buf *out, const char *sink,
                        struct slice instance, struct err *err);
int layout_presence_prefix(struct buf *out, const char *sink, struct err *err);

#endif
