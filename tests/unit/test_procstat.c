/* base/procstat: the /proc/<pid>/stat parser (a command name with spaces
 * and parentheses, malformed texts), the btime line, and a read of this
 * process's own figures. */
#include "base/procstat.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* Fields 1..24 of a stat line after the command name; 14=utime 15=stime
 * 22=starttime 23=vsize 24=rss. */
#define TAIL                                                             \
    " S 1 2 3 4 5 6 7 8 9 10 250 31 13 14 15 16 17 18 123456 987654321 " \
    "4321 18446744073709551615 1 2 3"

TEST(stat_fields_after_the_last_paren)
{
    struct procstat_raw r;

    EXPECT(procstat_parse_stat("42 (queen)" TAIL "\n", &r));
    EXPECT_EQ_U64(r.utime_ticks, 250);
    EXPECT_EQ_U64(r.stime_ticks, 31);
    EXPECT_EQ_U64(r.starttime_ticks, 123456);
    EXPECT_EQ_U64(r.vsize_bytes, 987654321);
    EXPECT_EQ_U64(r.rss_pages, 4321);
    /* A name that looks like the fields that follow it. */
    EXPECT(procstat_parse_stat("42 (a) S 1 2 (b c)" TAIL, &r));
    EXPECT_EQ_U64(r.utime_ticks, 250);
    EXPECT_EQ_U64(r.rss_pages, 4321);
}

TEST(stat_refuses_other_shapes)
{
    struct procstat_raw r;

    EXPECT(!procstat_parse_stat("", &r));
    EXPECT(!procstat_parse_stat("42 queen S 1 2 3", &r));
    EXPECT(!procstat_parse_stat("42 (queen) S 1 2 3", &r)); /* too short */
    EXPECT(!procstat_parse_stat("42 (queen)S 1", &r));
    EXPECT(!procstat_parse_stat(
        "42 (q) S 1 2 3 4 5 6 7 8 9 10 x 31 13 14 15 16 17 18 1 2 3", &r));
}

TEST(btime_line)
{
    uint64_t t = 0;

    EXPECT(procstat_parse_btime("cpu  1 2 3\nintr 5 6\nbtime 1700000000\n"
                                "processes 9\n",
                                &t));
    EXPECT_EQ_U64(t, 1700000000);
    EXPECT(procstat_parse_btime("btime 5", &t));
    EXPECT_EQ_U64(t, 5);
    EXPECT(!procstat_parse_btime("cpu 1\nxbtime 7\n", &t));
    EXPECT(!procstat_parse_btime("btime x\n", &t));
}

TEST(this_process)
{
    struct procstat p;
    struct rlimit lim;
    struct err err = {0};
    time_t now = time(NULL);

    EXPECT_EQ_I64(procstat_read(&p, &err), 0);
    EXPECT(p.cpu_seconds >= 0 && p.cpu_seconds < 3600);
    EXPECT(p.resident_bytes > 100 * 1024);
    EXPECT(p.virtual_bytes >= p.resident_bytes);
    EXPECT(p.open_fds >= 3);
    EXPECT_EQ_I64(getrlimit(RLIMIT_NOFILE, &lim), 0);
    EXPECT(
        p.max_fds ==
        (lim.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)lim.rlim_cur));
    EXPECT(p.open_fds <= p.max_fds);
    /* Started within the last hour (a test binary), not in the future. */
    EXPECT(p.start_time_seconds <= (double)now + 2);
    EXPECT(p.start_time_seconds > (double)now - 3600);
}
