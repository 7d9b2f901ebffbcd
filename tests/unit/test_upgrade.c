/* broker/upgrade.h: the rolling-upgrade gate's decision. */
#include "harness.h"

#include "broker/upgrade.h"
#include "store/format.h"

static enum upgrade_step step(int cluster, int self, bool leader,
                              const int *rows, size_t n)
{
    struct upgrade_view v = {cluster, self, leader, n, rows};

    return upgrade_next(&v);
}

/* A node says what it runs first; only a leader raises the format, and
 * only when every voter of its configuration said it runs a build of it:
 * one older voter (no row, or a lower level) holds it where it is. */
TEST(the_format_rises_only_when_every_voter_runs_it)
{
    const int B = STORE_FORMAT_BUILD;
    const int all[3] = {B, B, B};
    const int one_old[3] = {B, 0, B};
    const int one_low[3] = {B, B, B - 1};

    EXPECT_EQ_I64(step(0, 0, true, all, 3), UPGRADE_ANNOUNCE);
    EXPECT_EQ_I64(step(0, B - 1, false, NULL, 0), UPGRADE_ANNOUNCE);
    EXPECT_EQ_I64(step(0, B, false, all, 3), UPGRADE_IDLE);
    EXPECT_EQ_I64(step(0, B, true, one_old, 3), UPGRADE_IDLE);
    EXPECT_EQ_I64(step(0, B, true, one_low, 3), UPGRADE_IDLE);
    EXPECT_EQ_I64(step(0, B, true, NULL, 0), UPGRADE_IDLE);
    EXPECT_EQ_I64(step(0, B, true, all, 3), UPGRADE_RAISE);
    EXPECT_EQ_I64(step(B - 1, B, true, all, 1), UPGRADE_RAISE);
    EXPECT_EQ_I64(step(B, 0, true, one_old, 3), UPGRADE_DONE);
    EXPECT_EQ_I64(step(B + 1, B, false, NULL, 0), UPGRADE_DONE);
}
