/* sink/budget: the "over" rule of docs/design/window.md §12 and its test
 * vector. */
#include "sink/budget.h"

#include <pthread.h>

#include "harness.h"

TEST(reference_vector)
{
    struct budget *b = budget_new(100);

    EXPECT(!budget_report(b, "t/small", 10));
    EXPECT(!budget_report(b, "t/large", 80));
    EXPECT(budget_report(b, "t/large", 95)); /* total 105 */
    EXPECT(!budget_report(b, "t/small", 10));
    EXPECT_EQ_U64(budget_total(b), 105);
    budget_free(b);
}

TEST(ties_count_as_largest_and_zero_is_never_over)
{
    struct budget *b = budget_new(10);

    EXPECT(!budget_report(b, "a", 6));
    EXPECT(budget_report(b, "b", 6));
    EXPECT(budget_report(b, "a", 6));
    EXPECT(!budget_report(b, "c", 0));
    budget_free(b);
}

TEST(forget_drops_the_weight)
{
    struct budget *b = budget_new(0); /* limit 1 */

    EXPECT_EQ_U64(budget_limit(b), 1);
    EXPECT(budget_report(b, "a", 5));
    budget_forget(b, "a");
    EXPECT_EQ_U64(budget_total(b), 0);
    EXPECT(!budget_report(b, "b", 1)); /* 1 is not > 1 */
    budget_forget(b, "nothing");
    budget_free(b);
}

TEST(key_escapes_both_parts)
{
    struct buf k;
    struct err err;

    buf_init(&k, BUF_UNLIMITED);
    EXPECT_EQ_I64(budget_key(&k, "acme", "a/b c", &err), 0);
    EXPECT_STR_EQ(k.data, "acme/a%2Fb%20c");
    buf_free(&k);
}

struct worker {
    struct budget *b;
    char key[8];
};

static void *work(void *arg)
{
    struct worker *w = arg;

    for (int i = 0; i < 10000; i++) {
        budget_report(w->b, w->key, (uint64_t)(i % 7));
    }
    budget_report(w->b, w->key, 3);
    return NULL;
}

TEST(threads_keep_the_total_exact)
{
    struct budget *b = budget_new(1000);
    pthread_t t[4];
    struct worker w[4];

    for (int i = 0; i < 4; i++) {
        w[i].b = b;
        w[i].key[0] = (char)('a' + i);
        w[i].key[1] = '\0';
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
    }
    EXPECT_EQ_U64(budget_total(b), 12);
    budget_free(b);
}
