/* sink/stages: spans count this thread's CPU to their stage, and a frame
 * counts to its own stage only what the spans inside it did not, so the
 * stages of a thread add up to its CPU without counting anything twice. */
#include "sink/stages.h"

#include <pthread.h>

#include "harness.h"

/* Burn at least ns of this thread's CPU. */
static void burn(uint64_t ns)
{
    volatile uint64_t x = 0;
    uint64_t until = stages_clock() + ns;

    while (stages_clock() < until) {
        for (int i = 0; i < 1000; i++) {
            x += (uint64_t)i;
        }
    }
}

#define MS 1000000ull

TEST(a_frame_counts_what_its_spans_did_not)
{
    struct stages s = {0};
    struct stages_frame f;
    uint64_t t0 = stages_clock();

    stages_frame_begin(&s, &f);
    burn(20 * MS);
    uint64_t t = stages_begin(&s);
    burn(30 * MS);
    stages_end(&s, STAGES_READ, t);
    stages_add(&s, STAGES_COMPRESS, 5 * MS); /* counted elsewhere, here */
    burn(10 * MS);
    stages_frame_end(&s, &f, STAGES_REST);
    uint64_t spent = stages_clock() - t0;

    uint64_t read = stages_ns(&s, STAGES_READ);
    uint64_t rest = stages_ns(&s, STAGES_REST);
    EXPECT(read >= 30 * MS && read < 40 * MS);
    /* 20 + 10 ms burnt outside the span, less the 5 ms counted inside */
    EXPECT(rest >= 25 * MS && rest < 35 * MS);
    uint64_t sum = read + rest + stages_ns(&s, STAGES_COMPRESS);
    EXPECT(sum <= spent);
    EXPECT(sum + 2 * MS >= spent);
    EXPECT_EQ_U64(stages_ns(&s, STAGES_UPLOAD), 0);
}

TEST(frames_nest_and_null_counts_nothing)
{
    struct stages s = {0};
    struct stages_frame outer;
    struct stages_frame inner;

    stages_frame_begin(&s, &outer);
    burn(10 * MS);
    stages_frame_begin(&s, &inner);
    burn(20 * MS);
    stages_frame_end(&s, &inner, STAGES_FORMAT);
    stages_frame_end(&s, &outer, STAGES_REST);
    EXPECT(stages_ns(&s, STAGES_FORMAT) >= 20 * MS);
    EXPECT(stages_ns(&s, STAGES_FORMAT) < 28 * MS);
    EXPECT(stages_ns(&s, STAGES_REST) >= 10 * MS);
    EXPECT(stages_ns(&s, STAGES_REST) < 18 * MS);

    stages_frame_begin(NULL, &outer);
    stages_add(NULL, STAGES_READ, 1);
    stages_end(NULL, STAGES_READ, stages_begin(NULL));
    stages_frame_end(NULL, &outer, STAGES_REST);
    EXPECT_STR_EQ(stages_name(STAGES_SHA256), "sha256");
    EXPECT_STR_EQ(stages_name(STAGES_REST), "rest");
}

/* Another thread's spans do not shrink this thread's frame. */
struct other {
    struct stages *s;
};

static void *other_main(void *arg)
{
    struct other *o = arg;
    uint64_t t = stages_begin(o->s);

    burn(20 * MS);
    stages_end(o->s, STAGES_UPLOAD, t);
    return NULL;
}

TEST(another_threads_spans_leave_this_frame_alone)
{
    struct stages s = {0};
    struct stages_frame f;
    struct other o = {&s};
    pthread_t th;

    stages_frame_begin(&s, &f);
    EXPECT(pthread_create(&th, NULL, other_main, &o) == 0);
    burn(15 * MS);
    pthread_join(th, NULL);
    stages_frame_end(&s, &f, STAGES_REST);
    EXPECT(stages_ns(&s, STAGES_UPLOAD) >= 20 * MS);
    EXPECT(stages_ns(&s, STAGES_REST) >= 15 * MS);
    EXPECT(stages_ns(&s, STAGES_REST) < 23 * MS);
}
