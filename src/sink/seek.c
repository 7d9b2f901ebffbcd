/* The seek: the first offset of a partition whose record stamp is at or above
 * a time T, found by probing single records. Pure: the caller fetches each
 * probe and feeds the answer back.
 *
 * Why galloping from the head: the engine seeks when a `latest` start (or a
 * redo under `latest`) needs the records from t_prev on, and those are nearly
 * always close to the head. Galloping finds them in O(log distance) probes;
 * bisection then narrows the last doubling. A partition whose records are all
 * older costs exactly one probe (head - 1).
 *
 * A probe may answer OFFSET_OUT_OF_RANGE (retention moved the log start, or
 * the head is lower than we were told): the bounds move and the seek goes on.
 * An empty answer means the probe sat at the end of the log: the head moves
 * down. Each probe counts against the budget of invariant (2), so a partition
 * that keeps changing under the seek ends in a failure, never a loop. */
#include "sink/seek.h"

#include <inttypes.h>
#include <stdio.h>

#define SEEK_PROBE_BYTES     ((uint64_t)4096)
#define SEEK_MAX_PROBE_BYTES ((uint64_t)1 << 20)

static uint32_t bit_length(uint64_t n)
{
    uint32_t bits = 0;

    while (n != 0) {
        bits++;
        n >>= 1;
    }
    return bits;
}

void seek_init(struct seek *s, struct slice partition, int64_t t,
               int64_t log_start, int64_t last_offset, uint32_t probe_records)
{
    int64_t n;

    s->partition = partition;
    s->target = t;
    s->head = last_offset + 1;
    s->lo = log_start < 0 ? 0 : log_start;
    s->hi = s->head < s->lo ? s->lo : s->head;
    s->step = 1;
    s->is_bisecting = false;
    s->has_failed = false;
    s->probes = 0;
    s->probe_records = probe_records == 0 ? 1 : probe_records;
    s->failure[0] = '\0';
    if (t == INT64_MIN) {
        s->hi = s->lo; /* every record is at or above minus infinity */
    }
    n = s->hi - s->lo;
    s->budget = 2 * bit_length((uint64_t)n) + 8;
}

static void seek_fail(struct seek *s, const char *what, struct slice detail)
{
    snprintf(s->failure, sizeof(s->failure), "seek: %s%.*s", what,
             (int)detail.len, detail.ptr);
    s->has_failed = true;
}

static int64_t next_probe(const struct seek *s)
{
    int64_t p;

    if (s->is_bisecting) {
        return s->lo + (s->hi - s->lo) / 2;
    }
    p = s->step > s->head ? s->lo : s->head - s->step;
    if (p < s->lo) {
        p = s->lo;
    }
    if (p >= s->hi) {
        p = s->hi - 1;
    }
    return p;
}

enum seek_state seek_next(struct seek *s, int64_t *offset, uint32_t *max_bytes,
                          struct err *err)
{
    uint64_t bytes;

    if (s->has_failed) {
        err_set(err, ERR_REMOTE, "%s", s->failure);
        return SEEK_FAILED;
    }
    if (s->lo >= s->hi) {
        *offset = s->lo; /* (1) */
        return SEEK_FOUND;
    }
    if (s->probes >= s->budget) { /* (2) */
        snprintf(s->failure, sizeof(s->failure),
                 "seek: %" PRIu32
                 " probes over partition \"%.*s\" without an answer",
                 s->probes, (int)s->partition.len, s->partition.ptr);
        s->has_failed = true;
        err_set(err, ERR_TIMEOUT, "%s", s->failure);
        return SEEK_FAILED;
    }
    bytes = (uint64_t)s->probe_records * SEEK_PROBE_BYTES;
    if (bytes > SEEK_MAX_PROBE_BYTES) {
        bytes = SEEK_MAX_PROBE_BYTES;
    }
    *max_bytes = (uint32_t)bytes;
    *offset = next_probe(s);
    s->probes++;
    return SEEK_PROBE;
}

static void narrow_by_bounds(struct seek *s, const struct seek_answer *a)
{
    if (a->log_start > s->lo) {
        s->lo = a->log_start;
    }
    if (a->high_watermark < s->hi) {
        s->hi = a->high_watermark;
    }
    if (s->hi < s->lo) {
        s->hi = s->lo;
    }
}

static void narrow_by_records(struct seek *s, const struct seek_answer *a)
{
    bool saw_older = false;

    for (size_t i = 0; i < a->n; i++) {
        const struct seek_probe_record *r = &a->records[i];

        if (r->ts < s->target) {
            if (r->offset + 1 > s->lo) {
                s->lo = r->offset + 1;
            }
            saw_older = true;
            continue;
        }
        if (r->offset < s->hi) {
            s->hi = r->offset;
        }
        break;
    }
    if (s->hi < s->lo) {
        s->hi = s->lo; /* stamps went backwards: take the lower bound */
    }
    if (saw_older) {
        s->is_bisecting = true;
    } else if (!s->is_bisecting && s->step <= INT64_MAX / 2) {
        s->step *= 2;
    }
}

void seek_on_answer(struct seek *s, const struct seek_answer *a)
{
    switch (a->error) {
    case SEEK_ANSWER_UNKNOWN:
        seek_fail(s, "the queue or the partition does not exist",
                  SLICE_LIT(""));
        return;
    case SEEK_ANSWER_OTHER:
        seek_fail(s, "fetch error ", a->error_text);
        return;
    case SEEK_ANSWER_OFFSET_OUT_OF_RANGE:
        narrow_by_bounds(s, a);
        return;
    case SEEK_ANSWER_OK:
        break;
    }
    if (a->n == 0) {
        narrow_by_bounds(s, a); /* the probe sat at the end of the log */
        return;
    }
    if (a->log_start > s->lo) {
        s->lo = a->log_start;
    }
    narrow_by_records(s, a);
}
