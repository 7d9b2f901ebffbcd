/* Where the sink's CPU goes: per-stage counters of thread CPU time, shared by
 * every sink thread of a node (docs/design/observability.md §2, family 16).
 *   (1) A stage's counter only grows; it is the thread CPU time (ns) spent
 *       inside that stage's spans, summed over threads.
 *   (2) Stages do not overlap on one thread: a span is never opened inside
 *       another, so the stages of one thread add up to at most its CPU.
 *   (3) STAGES_REST is what a step of a sink thread cost beyond the stages
 *       it ran (a frame, stages_frame_end), so read + merge + format + compress
 * + sha256 + upload + rest is the CPU of the sink's threads (and of its
 *       uploader threads), and nothing is counted twice.
 * NULL stages: every call is a no-op (unit tests of the driver and writers).
 * The clock is read here, once per span: a span covers a batch (a store
 * read, a plan piece, a 256 KiB compression stage, an object), never one
 * record, so the cost stays a few syscalls per thousand records. */
#ifndef QUEEN_SINK_STAGES_H
#define QUEEN_SINK_STAGES_H

#include <stdatomic.h>
#include <stdint.h>

enum stages_stage {
    STAGES_READ = 0, /* the store read and copying its answer */
    STAGES_MERGE,    /* the engine: taking records in, planning, plan reads */
    STAGES_FORMAT,   /* JSONL lines (Parquet: encoding and compression) */
    STAGES_COMPRESS, /* zstd / gzip over the JSONL lines */
    STAGES_SHA256,   /* the digest of each object body */
    STAGES_UPLOAD,   /* S3 PUTs: signing, curl, the uploader thread */
    STAGES_REST,     /* the rest of a sink step: KV, leases, bookkeeping */
    STAGES_COUNT
};

struct stages {
    _Atomic uint64_t ns[STAGES_COUNT];
    /* Records the read stage handed to the engine: reads run a window or
     * more ahead of the commits, so their cost per record is over these. */
    _Atomic uint64_t records_read;
};

/* "read", "merge", "format", "compress", "sha256", "upload", "rest". */
const char *stages_name(enum stages_stage st);

/* The calling thread's CPU time in ns (CLOCK_THREAD_CPUTIME_ID). */
uint64_t stages_clock(void);

/* Count ns of this thread's CPU to st (s may be NULL: nothing). */
void stages_add(struct stages *s, enum stages_stage st, uint64_t ns);

/* A span: t = stages_begin(s); ...; stages_end(s, st, t). With s NULL the
 * clock is not read. */
uint64_t stages_begin(const struct stages *s);
void stages_end(struct stages *s, enum stages_stage st, uint64_t begun);

/* A frame: what a stretch of this thread cost beyond the stages counted on
 * this thread inside it goes to one stage. A sink step is a frame of
 * STAGES_REST (3); building an object is one of STAGES_FORMAT around the
 * spans of merge (plan reads), compress and sha256. Frames nest. */
struct stages_frame {
    uint64_t cpu;    /* thread CPU at the start */
    uint64_t staged; /* this thread's staged ns at the start */
};
void stages_frame_begin(const struct stages *s, struct stages_frame *f);
void stages_frame_end(struct stages *s, const struct stages_frame *f,
                      enum stages_stage st);

/* A stage's total so far, in ns. */
uint64_t stages_ns(const struct stages *s, enum stages_stage st);

/* Count n records read (s may be NULL); the count so far. */
void stages_add_read(struct stages *s, uint64_t n);
uint64_t stages_records_read(const struct stages *s);

#endif
