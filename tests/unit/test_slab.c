/* Tests of the spares pools count together (base/slab.h (B)) and of the
 * slabs made ahead ((A)): the thread keeps
 * SLAB_AHEAD faulted-in slabs ready once a pool asked for one, a pool takes
 * them before mapping its own, and none is held or made while a pool is
 * tight. Waits poll the real count with a deadline. */
#include "base/slab.h"

#include <time.h>

#include "engine_sim.h"
#include "harness.h"

/* Wait up to ms for slab_ahead_ready(NULL) == want. */
static bool ready_within(size_t want, int ms)
{
    struct timespec nap = {0, 2000000};

    for (int i = 0; i < ms / 2; i++) {
        if (slab_ahead_ready(NULL) == want) {
            return true;
        }
        nanosleep(&nap, NULL);
    }
    return slab_ahead_ready(NULL) == want;
}

/* Whether slab_ahead_ready() stays 0 for ms (polled each millisecond): a
 * bound on how long nothing is made, for checks that nothing is. */
static bool stays_empty(int ms)
{
    struct timespec nap = {0, 1000000};

    for (int i = 0; i < ms; i++) {
        if (slab_ahead_ready(NULL) != 0) {
            return false;
        }
        nanosleep(&nap, NULL);
    }
    return slab_ahead_ready(NULL) == 0;
}

/* Fill n SLAB_SIZE slabs of p (each a string of a quarter slab, four a
 * slab), writing every byte given. */
static void fill(struct slab_pool *p, struct slab **got, size_t n)
{
    char bytes[SLAB_SIZE / 4];

    memset(bytes, 'x', sizeof(bytes));
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) {
            struct slab *s = slab_for(p, sizeof(bytes));

            EXPECT(s->cap == SLAB_SIZE);
            (void)slab_put(s, bytes, sizeof(bytes), NULL, 0);
            got[i] = s;
        }
    }
}

/* Let go of the four quarter strings of each of the n slabs. */
static void release(struct slab_pool *p, struct slab **got, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) {
            slab_unref(p, got[i], SLAB_SIZE / 4);
        }
    }
}

/* Pools sharing a count (B) keep at most its limit of spares together,
 * whatever each pool's own bound; spares one pool takes or frees make room
 * for another's. */
TEST(pools_sharing_a_count_keep_at_most_its_limit_of_spares)
{
    static struct slab *got[16];
    struct slab_spares sh;
    struct slab_pool p;
    struct slab_pool q;

    slab_spares_init(&sh, 3);
    slab_pool_init(&p, 8);
    slab_pool_init(&q, 8);
    p.shared = &sh;
    q.shared = &sh;
    fill(&p, got, 5); /* the fifth is p's current slab */
    fill(&q, got + 5, 5);
    release(&p, got, 4);
    EXPECT_EQ_U64(p.n_spare, 3);
    EXPECT_EQ_U64(atomic_load(&sh.n), 3);
    release(&q, got + 5, 4);
    EXPECT_EQ_U64(q.n_spare, 0); /* the count is full: freed */
    EXPECT_EQ_U64(q.bytes, SLAB_SIZE);
    fill(&p, got, 1); /* p takes one of its spares back */
    EXPECT_EQ_U64(p.n_spare, 2);
    EXPECT_EQ_U64(atomic_load(&sh.n), 2);
    slab_spares_free(&p, 0);
    EXPECT_EQ_U64(atomic_load(&sh.n), 0);
    fill(&q, got + 10, 4);
    release(&q, got + 9, 5); /* q's old current slab and three of the new */
    EXPECT_EQ_U64(q.n_spare, 3);
    EXPECT_EQ_U64(atomic_load(&sh.n), 3);
    slab_pool_free(&q);
    EXPECT_EQ_U64(atomic_load(&sh.n), 0);
    slab_pool_free(&p);
    EXPECT_EQ_U64(atomic_load(&sh.n), 0);
}

TEST(slabs_are_made_ahead_taken_first_and_dropped_while_a_pool_is_tight)
{
    static struct slab *got[3 * SLAB_AHEAD];
    struct slab_pool p;
    struct slab_pool q;
    uint64_t before;
    uint64_t after;

    slab_pool_init(&p, 0);
    slab_pool_init(&q, 0);
    fill(&p, got, 1); /* not allowed: no thread, nothing made */
    EXPECT(stays_empty(200));
    slab_ahead_allow(true);
    fill(&p, got + 1, 1); /* the first slab starts the thread */
    EXPECT(ready_within(SLAB_AHEAD, HARNESS_WAIT_MS));
    (void)slab_ahead_ready(&before);
    fill(&p, got + 2, SLAB_AHEAD); /* the ready ones are taken... */
    (void)slab_ahead_ready(&after);
    EXPECT_EQ_U64(after - before, SLAB_AHEAD);
    EXPECT(ready_within(SLAB_AHEAD, HARNESS_WAIT_MS)); /* ...and made again */
    EXPECT_EQ_U64(p.bytes, (uint64_t)(SLAB_AHEAD + 2) * SLAB_SIZE);

    slab_trim(&q, 0, true); /* another pool goes tight: none held */
    EXPECT_EQ_U64(slab_ahead_ready(NULL), 0);
    fill(&p, got + SLAB_AHEAD + 2, 2); /* mapped in place, none made */
    (void)slab_ahead_ready(&before);
    EXPECT_EQ_U64(before, after);
    EXPECT(stays_empty(200));
    slab_trim(&q, 0, false); /* no pool tight: made again */
    EXPECT(ready_within(SLAB_AHEAD, HARNESS_WAIT_MS));

    slab_trim(&q, 0, true);
    EXPECT_EQ_U64(slab_ahead_ready(NULL), 0);
    slab_pool_free(&q); /* a freed pool is no longer tight */
    EXPECT(ready_within(SLAB_AHEAD, HARNESS_WAIT_MS));
    slab_ahead_allow(false); /* not allowed: freed at once */
    EXPECT_EQ_U64(slab_ahead_ready(NULL), 0);
    for (size_t i = 0; i < SLAB_AHEAD + 4; i++) {
        for (int k = 0; k < 4; k++) {
            slab_unref(&p, got[i], SLAB_SIZE / 4);
        }
    }
    slab_pool_free(&p);
    EXPECT_EQ_U64(p.bytes, 0);
}

/* The engine's pool under the budget (engine_force_close): the slabs made
 * ahead are freed at once, none is made or taken while the window closes,
 * and once the engine is gone the list is made again (the count of tight
 * pools came back to 0). */
TEST(a_window_the_budget_closes_frees_the_slabs_made_ahead)
{
    struct engine_config c;
    struct sim s;
    uint64_t before;
    uint64_t after;

    slab_ahead_allow(true);
    sim_test_config(&c);
    c.start = ENGINE_START_LATEST;
    c.target_bytes = 1000000000000ULL;
    c.max_window_us = 600 * SIM_SEC;
    sim_init(&s, &c);
    sim_advance(&s, SIM_T0);
    sim_run(&s, 5);
    s.idle_advance_us = 100 * SIM_MS;
    sim_push(&s, "a", 60000, sim_safe(&s) + 100 * SIM_MS, 95);
    sim_run(&s, 200); /* four slabs buffered: the thread is started */
    EXPECT(engine_buffered_bytes(s.e) > 3 * SLAB_SIZE);
    EXPECT(ready_within(SLAB_AHEAD, HARNESS_WAIT_MS));

    engine_force_close(s.e);
    EXPECT_EQ_U64(slab_ahead_ready(&before), 0);
    sim_push(&s, "a", 60000, sim_safe(&s) + 100 * SIM_MS, 95);
    EXPECT(sim_run_until_commits(&s, 1, 4000));
    EXPECT(engine_is_tight(s.e));
    EXPECT(stays_empty(200));
    (void)slab_ahead_ready(&after);
    EXPECT_EQ_U64(after, before);
    EXPECT_EQ_I64(s.violations, 0);

    sim_free(&s); /* its pool is no longer tight */
    EXPECT(ready_within(SLAB_AHEAD, HARNESS_WAIT_MS));
    slab_ahead_allow(false);
    EXPECT_EQ_U64(slab_ahead_ready(NULL), 0);
}
