/* Tests of the galloping/bisecting seek (docs/design/window.md §4 and
 * docs/design/scenarios.md §8 engine_seek). The log is simulated: segments of
 * records sharing one stamp, one segment per second, answered with the broker's
 * fetch rules (OFFSET_OUT_OF_RANGE outside [logStart, head], empty at the head,
 * the first record always). */
#include "harness.h"

#include "sink/seek.h"

#define T0  1788480000000000LL /* 2026-09-04T00:00:00Z in µs */
#define SEC 1000000LL

struct sim_log {
    int64_t log_start;
    int64_t head; /* last offset + 1 */
    int64_t per_seg;
    bool is_unknown;
    bool answers_empty; /* a log that keeps moving under the seek */
    struct seek_probe_record recs[512];
};

static int64_t sim_ts(const struct sim_log *l, int64_t off)
{
    return T0 + (off / l->per_seg) * SEC;
}

static void sim_answer(struct sim_log *l, int64_t off, uint32_t max_bytes,
                       struct seek_answer *a)
{
    int64_t k = max_bytes / 4096;

    memset(a, 0, sizeof(*a));
    a->high_watermark = l->head;
    a->log_start = l->log_start;
    a->records = l->recs;
    if (l->is_unknown) {
        a->error = SEEK_ANSWER_UNKNOWN;
        return;
    }
    if (off < l->log_start || off > l->head) {
        a->error = SEEK_ANSWER_OFFSET_OUT_OF_RANGE;
        return;
    }
    if (l->answers_empty) {
        return;
    }
    for (int64_t o = off; o < l->head && (int64_t)a->n < k && a->n < 512; o++) {
        l->recs[a->n].offset = o;
        l->recs[a->n].ts = sim_ts(l, o);
        a->n++;
    }
}

/* Runs a seek to the end, begun with log start `from` (the log may have
 * moved since); returns the state, the answer and the probes. */
static enum seek_state run_from(struct sim_log *l, int64_t from, int64_t t,
                                uint32_t recs, int64_t *found, uint32_t *probes)
{
    struct seek s;
    struct err err;
    struct seek_answer a;
    enum seek_state st;
    int64_t off = -1;
    uint32_t mb = 0;

    seek_init(&s, SLICE_LIT("p"), t, from, l->head - 1, recs);
    while ((st = seek_next(&s, &off, &mb, &err)) == SEEK_PROBE) {
        sim_answer(l, off, mb, &a);
        seek_on_answer(&s, &a);
    }
    *found = off;
    *probes = s.probes;
    return st;
}

static enum seek_state run(struct sim_log *l, int64_t t, uint32_t recs,
                           int64_t *found, uint32_t *probes)
{
    return run_from(l, l->log_start, t, recs, found, probes);
}

/* A seek for t with one-record probes finds offset want; returns the
 * probes it took. A failure names t. */
static uint32_t expect_found(struct sim_log *l, int64_t t, int64_t want)
{
    int64_t found = -1;
    uint32_t probes = 0;
    enum seek_state st = run(l, t, 1, &found, &probes);

    if (st != SEEK_FOUND || found != want) {
        HARNESS_FAIL("seek t=%" PRId64 ": state %d offset %" PRId64
                     ", want found %" PRId64,
                     t, (int)st, found, want);
    }
    return probes;
}

/* The first offset with ts >= t, by a linear scan (the oracle). */
static int64_t oracle(const struct sim_log *l, int64_t t)
{
    for (int64_t o = l->log_start; o < l->head; o++) {
        if (sim_ts(l, o) >= t) {
            return o;
        }
    }
    return l->head;
}

/* Offsets 0..head-1, per_seg records a second from T0. */
static struct sim_log sim_log_of(int64_t head, int64_t per_seg)
{
    struct sim_log l;

    memset(&l, 0, sizeof(l));
    l.head = head;
    l.per_seg = per_seg;
    return l;
}

static struct sim_log million(void)
{
    return sim_log_of(1000000, 100);
}

TEST(exact_offsets_at_many_targets_within_the_probe_budget)
{
    struct sim_log l = million();
    uint32_t worst = 0;

    for (int64_t t = T0 - SEC; t < T0 + 10001 * SEC; t += 997 * SEC / 10) {
        uint32_t probes = expect_found(&l, t, oracle(&l, t));

        worst = probes > worst ? probes : worst;
    }
    EXPECT(worst <= 42);
}

TEST(half_a_second_past_a_segment_lands_on_the_next_segment)
{
    struct sim_log l = million();

    expect_found(&l, T0 + 700 * SEC + SEC / 2, 70100);
    expect_found(&l, T0 + 700 * SEC, 70000);
}

TEST(below_everything_answers_the_log_start_within_22_probes)
{
    struct sim_log l = million();

    EXPECT(expect_found(&l, T0 - 5 * SEC, 0) <= 22);
}

TEST(above_everything_answers_the_head_in_exactly_one_probe)
{
    struct sim_log l = million();

    EXPECT_EQ_U64(expect_found(&l, T0 + 20000 * SEC, 1000000), 1);
}

TEST(a_raised_log_start_bounds_the_answer)
{
    struct sim_log l = million();

    l.log_start = 500000;
    expect_found(&l, T0, 500000);
    expect_found(&l, T0 + 7000 * SEC, 700000);
}

TEST(multi_record_probes_agree_and_take_no_more_probes)
{
    struct sim_log l = million();
    int64_t one;
    int64_t many;
    uint32_t p1;
    uint32_t pn;
    uint64_t sum1 = 0;
    uint64_t sumn = 0;

    for (int64_t t = T0; t < T0 + 10000 * SEC; t += 1234567) {
        EXPECT(run(&l, t, 1, &one, &p1) == SEEK_FOUND);
        EXPECT(run(&l, t, 64, &many, &pn) == SEEK_FOUND);
        EXPECT_EQ_I64(one, many);
        sum1 += p1;
        sumn += pn;
    }
    EXPECT(sumn < sum1);
}

TEST(empty_and_never_written_partitions_answer_without_a_probe)
{
    struct sim_log l = sim_log_of(0, 1);

    EXPECT_EQ_U64(expect_found(&l, T0, 0), 0);
    l.log_start = 1; /* one record, retained away */
    l.head = 1;
    EXPECT_EQ_U64(expect_found(&l, T0, 1), 0);
}

TEST(minus_infinity_answers_the_log_start_without_a_probe)
{
    struct sim_log l = million();

    l.log_start = 77;
    EXPECT_EQ_U64(expect_found(&l, INT64_MIN, 77), 0);
}

TEST(a_single_record_partition_is_exact_both_ways)
{
    struct sim_log l = sim_log_of(1, 1);

    expect_found(&l, T0, 0);
    expect_found(&l, T0 + 1, 1);
}

TEST(every_offset_of_a_200_record_partition_is_reachable)
{
    struct sim_log l = sim_log_of(200, 1);

    for (int64_t o = 0; o < 200; o++) {
        int64_t t = T0 + o * SEC;

        expect_found(&l, t, o);
        expect_found(&l, t - 1, o);
        expect_found(&l, t + 1, o + 1);
    }
}

TEST(an_unknown_partition_fails_after_one_probe)
{
    struct sim_log l = million();
    int64_t found;
    uint32_t probes;

    l.is_unknown = true;
    EXPECT(run(&l, T0 + 5 * SEC, 1, &found, &probes) == SEEK_FAILED);
    EXPECT_EQ_U64(probes, 1);
}

TEST(a_log_that_never_answers_fails_at_the_probe_budget)
{
    struct sim_log l = million();
    struct seek s;
    struct seek_answer a;
    struct err err;
    int64_t off = 0;
    uint32_t mb = 0;
    uint32_t probes = 0;

    l.answers_empty = true;
    seek_init(&s, SLICE_LIT("p"), T0 + 5 * SEC, 0, l.head - 1, 1);
    while (seek_next(&s, &off, &mb, &err) == SEEK_PROBE && probes < 1000) {
        probes++;
        sim_answer(&l, off, mb, &a);
        a.high_watermark = l.head; /* the head looks unchanged */
        seek_on_answer(&s, &a);
    }
    EXPECT(probes <= 2 * 20 + 8);
    EXPECT(seek_next(&s, &off, &mb, &err) == SEEK_FAILED);
    EXPECT(strstr(err.msg, "probes over partition \"p\"") != NULL);
}

TEST(retention_moving_the_log_start_during_the_seek_is_followed)
{
    struct sim_log l = million();
    int64_t found;
    uint32_t probes;

    l.log_start = 600000; /* trimmed after the seek started at 0 */
    EXPECT(run_from(&l, 0, T0 - SEC, 1, &found, &probes) == SEEK_FOUND);
    EXPECT_EQ_I64(found, 600000);
}

TEST(another_fetch_error_fails_the_seek_with_its_text)
{
    struct seek s;
    struct seek_answer a;
    struct err err;
    int64_t off = 0;
    uint32_t mb = 0;

    seek_init(&s, SLICE_LIT("p"), T0, 0, 9, 1);
    EXPECT(seek_next(&s, &off, &mb, &err) == SEEK_PROBE);
    EXPECT_EQ_U64(mb, 4096);
    memset(&a, 0, sizeof(a));
    a.error = SEEK_ANSWER_OTHER;
    a.error_text = SLICE_LIT("INTERNAL");
    seek_on_answer(&s, &a);
    EXPECT(seek_next(&s, &off, &mb, &err) == SEEK_FAILED);
    EXPECT_STR_EQ(err.msg, "seek: fetch error INTERNAL");
}
