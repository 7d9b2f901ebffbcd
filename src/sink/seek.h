/* The seek: the first offset of a partition whose record stamp is at or above
 * a time T, found by probing single records. Pure: the caller fetches each
 * probe and feeds the answer back.
 *
 * Galloping backwards from the head (probes at head-1, head-2, head-4, ...,
 * clamped to the log start) until a record older than T is seen, then
 * bisection between the last older and the first newer record. Stamps are
 * non-decreasing with the offset inside a partition (docs/design/http-api.md
 * §12), which is what makes both phases sound.
 *
 * Invariants, with head = last_offset + 1:
 *   (1) lo <= answer <= hi, where every existing offset below lo has ts < T
 *       and every offset at or above hi has ts >= T (or is past the head).
 *   (2) At most 2 * bitlength(head - log_start) + 8 probes; one more fails.
 *
 *   INIT --seek_next()--> PROBE --seek_on_answer()--> PROBE | FOUND | FAILED
 *   INIT --seek_next()--> FOUND   (T = MIN, empty range: no probe at all)
 */
#ifndef QUEEN_SINK_SEEK_H
#define QUEEN_SINK_SEEK_H

#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"
#include "base/err.h"

enum seek_state {
    SEEK_PROBE,  /* fetch *offset with *max_bytes and call seek_on_answer() */
    SEEK_FOUND,  /* *offset is the answer */
    SEEK_FAILED, /* err says why; the caller positions at the log start */
};

enum seek_answer_error {
    SEEK_ANSWER_OK,
    SEEK_ANSWER_OFFSET_OUT_OF_RANGE,
    SEEK_ANSWER_UNKNOWN, /* UNKNOWN_TOPIC_OR_PARTITION */
    SEEK_ANSWER_OTHER,
};

struct seek_probe_record {
    int64_t offset;
    int64_t ts;
};

/* One fetch answer for a probe; records ascend by offset. */
struct seek_answer {
    enum seek_answer_error error;
    struct slice error_text; /* for SEEK_ANSWER_OTHER */
    int64_t high_watermark;
    int64_t log_start;
    const struct seek_probe_record *records;
    size_t n;
};

struct seek {
    struct slice partition; /* borrowed, for messages */
    int64_t target;
    int64_t head; /* last_offset + 1 at the start */
    int64_t lo;   /* (1) */
    int64_t hi;   /* (1) */
    int64_t step; /* galloping distance below the head */
    bool is_bisecting;
    bool has_failed;
    uint32_t probes;
    uint32_t budget;        /* (2) */
    uint32_t probe_records; /* records asked per probe, >= 1 */
    char failure[240];
};

/* Start a seek for the first offset with ts >= t in [log_start, last_offset].
 * Borrows partition until the seek ends. probe_records (>= 1) sets the
 * maxBytes of each probe: clamp(probe_records * 4096, 4096, 1 MiB). */
void seek_init(struct seek *s, struct slice partition, int64_t t,
               int64_t log_start, int64_t last_offset, uint32_t probe_records);

/* What to do now. SEEK_PROBE: fetch *offset with *max_bytes. SEEK_FOUND:
 * *offset is the answer. SEEK_FAILED: err holds the reason. */
enum seek_state seek_next(struct seek *s, int64_t *offset, uint32_t *max_bytes,
                          struct err *err);

/* Feed the answer of the last probe. Borrows a. */
void seek_on_answer(struct seek *s, const struct seek_answer *a);

#endif
