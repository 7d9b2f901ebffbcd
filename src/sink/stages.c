/* Where the sink's CPU goes: per-stage counters of thread CPU time (see
 * stages.h).
 *
 * Thread CPU time, not wall time: a stage that waits (a PUT on the network,
 * a lock) costs what it computes, and a machine busy with other work does
 * not inflate the stage that happened to be preempted. Each thread also keeps
 * the ns it counted to stages in a thread-local, so a step's rest is its CPU
 * less what its own stages took, whatever another thread counted meanwhile. */
#include "sink/stages.h"

#include <stddef.h>
#include <time.h>

static _Thread_local uint64_t staged_here;

const char *stages_name(enum stages_stage st)
{
    static const char *const names[STAGES_COUNT] = {
        "read", "merge", "format", "compress", "sha256", "upload", "rest"};

    return (size_t)st < STAGES_COUNT ? names[st] : "";
}

uint64_t stages_clock(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        return 0;
    }
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void stages_add(struct stages *s, enum stages_stage st, uint64_t ns)
{
    if (s == NULL || (size_t)st >= STAGES_COUNT) {
        return;
    }
    atomic_fetch_add_explicit(&s->ns[st], ns, memory_order_relaxed);
    staged_here += ns;
}

uint64_t stages_begin(const struct stages *s)
{
    return s != NULL ? stages_clock() : 0;
}

void stages_end(struct stages *s, enum stages_stage st, uint64_t begun)
{
    if (s != NULL) {
        uint64_t now = stages_clock();
        stages_add(s, st, now > begun ? now - begun : 0);
    }
}

void stages_frame_begin(const struct stages *s, struct stages_frame *f)
{
    f->cpu = stages_begin(s);
    f->staged = staged_here;
}

void stages_frame_end(struct stages *s, const struct stages_frame *f,
                      enum stages_stage st)
{
    if (s == NULL) {
        return;
    }
    uint64_t now = stages_clock();
    uint64_t spent = now > f->cpu ? now - f->cpu : 0;
    uint64_t staged = staged_here - f->staged;

    if (spent > staged) {
        stages_add(s, st, spent - staged);
    }
}

uint64_t stages_ns(const struct stages *s, enum stages_stage st)
{
    if (s == NULL || (size_t)st >= STAGES_COUNT) {
        return 0;
    }
    return atomic_load_explicit(&s->ns[st], memory_order_relaxed);
}

void stages_add_read(struct stages *s, uint64_t n)
{
    if (s != NULL) {
        atomic_fetch_add_explicit(&s->records_read, n, memory_order_relaxed);
    }
}

uint64_t stages_records_read(const struct stages *s)
{
    return s != NULL
               ? atomic_load_explicit(&s->records_read, memory_order_relaxed)
               : 0;
}
