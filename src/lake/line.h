/* One JSONL line of the lake read back (docs/design/formats.md §6): the
 * envelope {"partition","offset","transactionId","ts","payload"} parsed and
 * checked byte for byte against what the sink's own writer (jsonl_line)
 * makes of the parsed record. Pure: no I/O.
 *   (1) A line is accepted only when jsonl_line() of the record it parses
 *       to gives back exactly its bytes (plus the LF): keys in order, no
 *       space, strings escaped as the writer escapes them, ts ISO with 6
 *       digits, and a payload that is one JSON text with no raw LF or CR.
 *   (2) The record's slices point into the line (payload) or into scratch
 *       (partition, transactionId: unescaped); both must outlive it. */
#ifndef QUEEN_LAKE_LINE_H
#define QUEEN_LAKE_LINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "sink/record.h"

/* Parse line p[0..n) (without its LF) into r. scratch is reset and holds
 * the unescaped strings afterwards. Returns 0, or ERR_CORRUPT with the
 * reason ("not the envelope ...", "ts ... is not ISO with 6 digits",
 * "payload is not JSON", "envelope is not byte-exact"). */
int lake_line_parse(const char *p, size_t n, struct sink_record *r,
                    struct buf *scratch, struct err *err);

/* What a reader of many lines remembers between them, so that the common
 * line is checked in place rather than rebuilt: the last second of ts
 * whose spelling was proven the writer's (by formatting it once). Zero it
 * before the first line. */
struct lake_line_memo {
    char sec[20]; /* "2026-09-04T10:03:41." */
    int64_t sec_us;
    bool is_set;
};

/* lake_line_parse with a memo (NULL: none); the same answers. A line
 * whose strings need no escape, whose offset has under 19 digits and
 * whose ts second is the memo's is accepted without the rebuild: for such
 * a line the writer's bytes are the line's bytes exactly when those
 * fields are spelled as checked here. Anything else is rebuilt. */
int lake_line_read(const char *p, size_t n, struct sink_record *r,
                   struct buf *scratch, struct lake_line_memo *memo,
                   struct err *err);

#endif
