/* libraft's file removals as the broker links them (src/raft/raft_trash.c):
 * the name is gone when UvOsUnlink returns, a big file is really removed by
 * the thread, errors are unlink's, and a crash's leftovers are swept. */
#include "raft/raft_trash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static void test_tmpdir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/queen-test-trash.XXXXXX");
    EXPECT(mkdtemp(dir) != NULL);
}

static void test_rmdir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    EXPECT_EQ_I64(system(cmd), 0);
}

static struct raft_trash_stats stats_now(void)
{
    struct raft_trash_stats s;
    raft_trash_get_stats(&s);
    return s;
}

static void make_file(const char *dir, const char *name, off_t size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT(fd >= 0);
    EXPECT_EQ_I64(write(fd, "segment", 7), 7);
    EXPECT_EQ_I64(ftruncate(fd, size), 0);
    close(fd);
}

static bool exists(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Files in dir whose name starts with the trash prefix. */
static int count_trash(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^%s' || true", dir,
             RAFT_TRASH_PREFIX);
    FILE *p = popen(cmd, "r");
    int n = -1;
    EXPECT(p != NULL && fscanf(p, "%d", &n) == 1);
    pclose(p);
    return n;
}

static bool wait_no_trash(const char *dir)
{
    for (int i = 0; i < HARNESS_WAIT_S * 100; i++) {
        if (count_trash(dir) == 0 && stats_now().pending == 0) {
            return true;
        }
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

TEST(a_big_file_is_gone_at_once_and_removed_by_the_thread)
{
    char dir[64], path[600];
    test_tmpdir(dir, sizeof dir);
    make_file(dir, "0000000000000001-0000000000000900", 40 << 20);
    snprintf(path, sizeof path, "%s/0000000000000001-0000000000000900", dir);
    struct raft_trash_stats before = stats_now();

    EXPECT_EQ_I64(UvOsUnlink(path), 0);
    EXPECT(!exists(dir, "0000000000000001-0000000000000900"));
    EXPECT_EQ_U64(stats_now().queued, before.queued + 1);
    EXPECT(wait_no_trash(dir));
    EXPECT_EQ_U64(stats_now().removed, before.removed + 1);
    EXPECT_EQ_U64(stats_now().in_place, before.in_place);
    test_rmdir(dir);
}

TEST(a_small_file_or_a_missing_one_is_unlinked_in_place)
{
    char dir[64], path[600];
    test_tmpdir(dir, sizeof dir);
    make_file(dir, "snapshot-1-4-100.meta", 100);
    snprintf(path, sizeof path, "%s/snapshot-1-4-100.meta", dir);
    struct raft_trash_stats before = stats_now();

    EXPECT_EQ_I64(UvOsUnlink(path), 0);
    EXPECT(!exists(dir, "snapshot-1-4-100.meta"));
    EXPECT_EQ_I64(UvOsUnlink(path), -ENOENT);
    EXPECT_EQ_U64(stats_now().in_place, before.in_place + 2);
    EXPECT_EQ_U64(stats_now().queued, before.queued);
    EXPECT_EQ_I64(count_trash(dir), 0);
    test_rmdir(dir);
}

/* Only closed segments wait in the trash: libraft removes empty open
 * segments at boot and preallocates new ones at once, so their blocks must
 * be free when the call returns; other names are not its log. */
TEST(an_open_segment_or_another_big_file_is_unlinked_in_place)
{
    char dir[64], path[600];
    const char *names[] = {"open-5", "0000000000000001-", "-0000000000000009",
                           "0000000000000001-0000000000000900.tmp",
                           "snapshot-1-4-100"};
    test_tmpdir(dir, sizeof dir);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        struct raft_trash_stats before = stats_now();
        make_file(dir, names[i], 40 << 20);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        EXPECT_EQ_I64(UvOsUnlink(path), 0);
        EXPECT(!exists(dir, names[i]));
        EXPECT_EQ_U64(stats_now().in_place, before.in_place + 1);
        EXPECT_EQ_U64(stats_now().queued, before.queued);
    }
    EXPECT_EQ_I64(count_trash(dir), 0);
    test_rmdir(dir);
}

TEST(the_sweep_removes_what_a_crash_left_and_nothing_else)
{
    char dir[64];
    test_tmpdir(dir, sizeof dir);
    make_file(dir, RAFT_TRASH_PREFIX "7-0000000000000001-0000000000000900",
              1 << 20);
    make_file(dir, RAFT_TRASH_PREFIX "8-open-3", 0);
    make_file(dir, "0000000000000901-0000000000001000", 100);
    make_file(dir, "open-4", 100);

    EXPECT_EQ_I64(raft_trash_sweep(dir), 2);
    EXPECT_EQ_I64(count_trash(dir), 0);
    EXPECT(exists(dir, "0000000000000901-0000000000001000"));
    EXPECT(exists(dir, "open-4"));
    EXPECT_EQ_I64(raft_trash_sweep(dir), 0);
    test_rmdir(dir);
}

TEST(the_cuts_keep_their_rate_until_the_trash_falls_behind)
{
    long base = raft_trash_period_ns(0);

    /* 2 MiB at 256 MiB/s: a cut every 7.8 ms. */
    EXPECT_EQ_I64(base, (long)((uint64_t)RAFT_TRASH_STEP * 1000000000u /
                               ((uint64_t)RAFT_TRASH_RATE_MIB << 20)));
    EXPECT(base > 1000000 && base < 100000000);
    EXPECT_EQ_I64(raft_trash_period_ns(RAFT_TRASH_BEHIND), base);
    EXPECT_EQ_I64(raft_trash_period_ns(2 * RAFT_TRASH_BEHIND), base / 2);
    EXPECT_EQ_I64(raft_trash_period_ns(4 * RAFT_TRASH_BEHIND), base / 4);
}
