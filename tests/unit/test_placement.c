/* Tests of placement's pure parts (docs/design/protocol.md §4, §7 claim retry).
 * */
#include "sink/placement.h"

#include "driver_fake.h"
#include "harness.h"

TEST(fair_share_vectors)
{
    EXPECT_EQ_U64(placement_fair_share(6, 3), 2);
    EXPECT_EQ_U64(placement_fair_share(7, 3), 3);
    EXPECT_EQ_U64(placement_fair_share(6, 1), 6);
    EXPECT_EQ_U64(placement_fair_share(6, 0), 6);
    EXPECT_EQ_U64(placement_fair_share(2, 5), 1);
    EXPECT_EQ_U64(placement_fair_share(0, 3), 0);
    EXPECT(placement_at_or_above(2, 2));
    EXPECT(!placement_at_or_above(1, 2));
    EXPECT_EQ_I64(placement_period_ms(30000), 10000);
    EXPECT_EQ_I64(placement_period_ms(200), 100);
}

TEST(claim_pacing_steps_a_second_per_queue_capped_at_half_a_ttl)
{
    struct placement_claim c = {
        .task_start_ms = 1000, .jitter_ms = 50, .before = 3, .ttl_ms = 30000};

    EXPECT_EQ_I64(placement_claim_due(&c), 1000 + 50 + 3000);
    c.before = 100;
    EXPECT_EQ_I64(placement_claim_due(&c), 1000 + 50 + 15000);
    c.at_or_above = true;
    EXPECT_EQ_I64(placement_claim_due(&c), 1000 + 50 + 15000 + 30000);
    c.gave_back = true;
    c.gave_back_at_ms = 5000;
    EXPECT_EQ_I64(placement_claim_due(&c), 5000 + 60000);
    c.gave_back_at_ms = -100000;
    EXPECT_EQ_I64(placement_claim_due(&c), 1000 + 50 + 15000);
    EXPECT_EQ_I64(placement_claim_sleep_ms(50000, 10000, 30000), 10000);
    EXPECT_EQ_I64(placement_claim_sleep_ms(12000, 10000, 30000), 2000);
    EXPECT_EQ_I64(placement_claim_sleep_ms(9000, 10000, 30000), 0);
}

TEST(held_wait)
{
    EXPECT_EQ_I64(placement_held_wait_ms(30000, true, 7), 30007);
    EXPECT_EQ_I64(placement_held_wait_ms(30000, false, 7), 10007);
}

TEST(claim_retry_delay_vectors)
{
    EXPECT_EQ_I64(placement_claim_retry_ms(1, true, -1, 150, 30000), 1150);
    EXPECT_EQ_I64(placement_claim_retry_ms(2, true, -1, 150, 30000), 2150);
    EXPECT_EQ_I64(placement_claim_retry_ms(3, true, -1, 150, 30000), 4150);
    EXPECT_EQ_I64(placement_claim_retry_ms(9, true, -1, 150, 30000), 30000);
    EXPECT_EQ_I64(placement_claim_retry_ms(1, true, 3000, 150, 30000), 3000);
    EXPECT_EQ_I64(placement_claim_retry_ms(1, true, 120000, 150, 30000), 30000);
    EXPECT_EQ_I64(placement_claim_retry_ms(1, false, -1, 150, 30000), 30000);
}

static struct slice sl(const char *s)
{
    return (struct slice){s, strlen(s)};
}

/* placement_decide at now_ms (kept in in for the next step). */
static enum placement_verdict decide_at(struct placement_state *st,
                                        struct placement_input *in,
                                        int64_t now_ms)
{
    in->now_ms = now_ms;
    return placement_decide(st, in);
}

TEST(pick_least_buffered_ties_by_name)
{
    struct placement_held a[] = {{sl("b"), 10}, {sl("a"), 30}, {sl("c"), 10}};
    struct placement_held z[] = {{sl("z"), 0}, {sl("y"), 0}};

    EXPECT_EQ_I64(placement_pick(a, 3), 0);
    EXPECT_EQ_I64(placement_pick(z, 2), 1);
    EXPECT_EQ_I64(placement_pick(z, 0), -1);
}

TEST(beat_counts_rows_and_adds_itself_when_missing)
{
    struct kv_op ops[2];
    struct kv_row rows[2] = {{.key = SLICE_LIT("s3:default:node=a")},
                             {.key = SLICE_LIT("s3:default:node=b")}};
    struct kv_result r = {.n_rows = 2, .rows = rows};
    uint32_t n = 0;
    bool own = false;
    bool more = true;

    placement_beat_ops(ops, sl("s3:default:node=c"), sl("{}"), 30,
                       sl("s3:default:node="), sl(""));
    EXPECT_EQ_I64(ops[0].op, KV_PUT);
    EXPECT(!ops[0].has_expect);
    EXPECT_EQ_I64(ops[0].ttl_seconds, 30);
    EXPECT_EQ_I64(ops[1].op, KV_GET_PREFIX);
    EXPECT_EQ_I64(ops[1].limit, 1000);
    placement_beat_count(&r, sl("s3:default:node=c"), &n, &own, &more);
    EXPECT_EQ_U64(placement_nodes(n, own), 3);
    EXPECT(!more);
    n = 0;
    placement_beat_count(&r, sl("s3:default:node=a"), &n, &own, &more);
    EXPECT_EQ_U64(placement_nodes(n, own), 2);
    r.truncated = true;
    r.has_next_after = true;
    placement_beat_count(&r, sl("s3:default:node=a"), &n, &own, &more);
    EXPECT(more);
    EXPECT_EQ_U64(n, 4); /* counts accumulate over pages */
}

TEST(give_back_only_after_a_full_ttl_over_share_one_at_a_time)
{
    struct placement_state st;
    struct placement_held h[] = {
        {sl("q1"), 500}, {sl("q2"), 20}, {sl("q3"), 900}};
    struct placement_input in = {
        .now_ms = 0, .ttl_ms = 30000, .share = 2, .held = h, .n_held = 3};

    memset(&st, 0, sizeof(st));
    EXPECT_EQ_I64(placement_decide(&st, &in), PLACEMENT_NOTHING);
    EXPECT_EQ_I64(decide_at(&st, &in, 29999), PLACEMENT_NOTHING);
    EXPECT_EQ_I64(decide_at(&st, &in, 30000), PLACEMENT_GIVE_BACK);
    EXPECT_STR_EQ(st.giving, "q2");
    EXPECT_EQ_I64(decide_at(&st, &in, 40000), PLACEMENT_WAIT);
    placement_on_released(&st, 41000);
    EXPECT_EQ_I64(decide_at(&st, &in, 50000), PLACEMENT_WAIT);
    EXPECT_EQ_I64(decide_at(&st, &in, 71000), PLACEMENT_NOBODY_TOOK);
    EXPECT(!st.is_giving);
}

TEST(give_back_ends_when_another_node_holds_it)
{
    struct placement_state st;
    struct placement_held h[] = {{sl("q1"), 1}, {sl("q2"), 2}};
    struct placement_input in = {
        .now_ms = 0, .ttl_ms = 1000, .share = 1, .held = h, .n_held = 2};

    memset(&st, 0, sizeof(st));
    EXPECT_EQ_I64(placement_decide(&st, &in), PLACEMENT_NOTHING);
    EXPECT_EQ_I64(decide_at(&st, &in, 1000), PLACEMENT_GIVE_BACK);
    placement_on_released(&st, 1100);
    in.giving_held_by_other = true;
    EXPECT_EQ_I64(decide_at(&st, &in, 1200), PLACEMENT_TAKEN_OVER);
    /* back at share: the over mark is cleared */
    in.n_held = 1;
    EXPECT_EQ_I64(decide_at(&st, &in, 5000), PLACEMENT_NOTHING);
    EXPECT(!st.is_over);
}

TEST(a_node_over_share_for_a_moment_moves_nothing)
{
    struct placement_state st;
    struct placement_held h[] = {{sl("q1"), 1}, {sl("q2"), 2}};
    struct placement_input in = {
        .now_ms = 0, .ttl_ms = 30000, .share = 1, .held = h, .n_held = 2};

    memset(&st, 0, sizeof(st));
    EXPECT_EQ_I64(placement_decide(&st, &in), PLACEMENT_NOTHING);
    in.now_ms = 5000;
    in.share = 2; /* the other node left again */
    EXPECT_EQ_I64(placement_decide(&st, &in), PLACEMENT_NOTHING);
    in.share = 1;
    EXPECT_EQ_I64(decide_at(&st, &in, 31000), PLACEMENT_NOTHING);
}

TEST(beat_writes_the_presence_row_and_counts_every_page)
{
    struct fake_broker f;
    struct sink_broker b;
    struct err err;
    uint32_t nodes = 0;
    char key[64];
    struct placement_presence p = {.sink = "default",
                                   .instance = "node-1@host",
                                   .incarnation = "0123456789abcdef",
                                   .since_ms = 77,
                                   .ttl_ms = 30000};

    fake_init(&f, "orders");
    fake_broker_seam(&f, &b);
    EXPECT_EQ_I64(placement_beat(&b, &p, &nodes, &err), 0);
    EXPECT_EQ_U64(nodes, 1);
    struct fake_row *row = fake_row_must(&f, "s3:default:node=node-1%40host");
    EXPECT_EQ_I64(row->ttl, 30);
    EXPECT(strstr(row->value, "\"incarnation\":\"0123456789abcdef\"") != NULL);
    /* 40 rows of other nodes plus ours; a queue key and another sink's
     * row must not count */
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "s3:default:node=n%02d", i);
        fake_row_set(&f, key, "{}");
    }
    fake_row_set(&f, "s3:default:orders:lease", "{}");
    fake_row_set(&f, "s3:other:node=zz", "{}");
    EXPECT_EQ_I64(placement_beat(&b, &p, &nodes, &err), 0);
    EXPECT_EQ_U64(nodes, 41);
    f.fail_next = 1;
    EXPECT_EQ_I64(placement_beat(&b, &p, &nodes, &err), ERR_BUSY);
}

/* A queue's name is bounded only by its KV keys (KV_KEY_MAX), not by 255
 * bytes: the queue given back is named in full, or the sink could not find
 * the task to drain (and asserted). */
TEST(a_queue_with_a_long_name_is_given_back_by_its_whole_name)
{
    struct placement_state st;
    char name[480];

    memset(name, 'a', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    struct placement_held h[] = {{sl(name), 0}, {sl("b"), 0}};
    struct placement_input in = {
        .now_ms = 0, .ttl_ms = 1000, .share = 1, .held = h, .n_held = 2};

    memset(&st, 0, sizeof(st));
    EXPECT_EQ_I64(placement_decide(&st, &in), PLACEMENT_NOTHING);
    EXPECT_EQ_I64(decide_at(&st, &in, 1000), PLACEMENT_GIVE_BACK);
    EXPECT_STR_EQ(st.giving, name);
}
