/* libraft's AIO contexts as the broker links them (src/raft/raft_aio.c):
 * a context handed to UvOsIoDestroy is really destroyed, by the module's
 * thread; one handed out by UvOsIoSetup, spare or not, really writes. */
#include "raft/raft_aio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static void nap_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static struct raft_aio_stats stats_now(void)
{
    struct raft_aio_stats s;
    raft_aio_get_stats(&s);
    return s;
}

/* Waits (HARNESS_WAIT_S at most) until the module destroyed `want`
 * contexts in all. */
static bool wait_destroyed(uint64_t want)
{
    for (int i = 0; i < HARNESS_WAIT_S * 200; i++) {
        if (stats_now().destroyed >= want) {
            return true;
        }
        nap_ms(5);
    }
    return false;
}

/* Waits until the thread holds a spare of nr events. */
static bool wait_spare(unsigned nr)
{
    for (int i = 0; i < HARNESS_WAIT_S * 200; i++) {
        struct raft_aio_stats s = stats_now();
        if (s.spare_nr == nr) {
            return true;
        }
        nap_ms(5);
    }
    return false;
}

/* io_destroy on a context that no longer exists fails with EINVAL. */
static bool is_gone(aio_context_t ctx)
{
    return syscall(SYS_io_destroy, ctx) != 0 && errno == EINVAL;
}

/* Writes `text` at offset 0 of fd through ctx and reads it back. */
static void expect_writes(aio_context_t ctx, int fd, const char *text)
{
    struct iocb cb;
    struct iocb *cbs[1] = {&cb};
    struct io_event ev;
    char back[64] = {0};
    size_t n = strlen(text);

    memset(&cb, 0, sizeof cb);
    cb.aio_fildes = (uint32_t)fd;
    cb.aio_lio_opcode = IOCB_CMD_PWRITE;
    cb.aio_buf = (uint64_t)(uintptr_t)text;
    cb.aio_nbytes = n;
    EXPECT_EQ_I64(syscall(SYS_io_submit, ctx, 1L, cbs), 1);
    EXPECT_EQ_I64(syscall(SYS_io_getevents, ctx, 1L, 1L, &ev, NULL), 1);
    EXPECT_EQ_I64(ev.res, (int64_t)n);
    EXPECT_EQ_I64(pread(fd, back, n, 0), (int64_t)n);
    EXPECT_MEM_EQ(back, n, text, n);
}

static int temp_file(char *path)
{
    strcpy(path, "/tmp/queen-test-aio.XXXXXX");
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    return fd;
}

TEST(a_destroyed_context_is_gone_once_the_thread_ran)
{
    aio_context_t ctx = 0;
    EXPECT_EQ_I64(syscall(SYS_io_setup, 4, &ctx), 0);
    /* A spare being made now could take the address ctx frees. */
    struct raft_aio_stats s = stats_now();
    if (s.want_nr != 0) {
        EXPECT(wait_spare(s.want_nr));
    }
    uint64_t before = stats_now().destroyed;
    EXPECT_EQ_I64(UvOsIoDestroy(ctx), 0);
    EXPECT(wait_destroyed(before + 1));
    EXPECT(is_gone(ctx));
    EXPECT_EQ_U64(stats_now().in_place, 0);
}

TEST(setup_hands_out_working_contexts_and_makes_the_next_ahead)
{
    char path[64];
    int fd = temp_file(path);
    aio_context_t a = 0, b = 0;
    uint64_t spares = stats_now().spares_used;

    EXPECT_EQ_I64(UvOsIoSetup(1, &a), 0);
    expect_writes(a, fd, "first context");
    EXPECT(wait_spare(1));
    EXPECT_EQ_I64(UvOsIoSetup(1, &b), 0);
    EXPECT_EQ_U64(stats_now().spares_used, spares + 1);
    EXPECT(a != b);
    expect_writes(b, fd, "the spare, made on the thread");

    uint64_t before = stats_now().destroyed;
    EXPECT(wait_spare(1)); /* nothing is made after the two are freed */
    EXPECT_EQ_I64(UvOsIoDestroy(a), 0);
    EXPECT_EQ_I64(UvOsIoDestroy(b), 0);
    EXPECT(wait_destroyed(before + 2));
    EXPECT(is_gone(a));
    EXPECT(is_gone(b));
    close(fd);
    unlink(path);
}

TEST(a_spare_of_another_size_is_not_handed_out)
{
    char path[64];
    int fd = temp_file(path);
    aio_context_t a = 0, c = 0;

    EXPECT_EQ_I64(UvOsIoSetup(1, &a), 0);
    EXPECT(wait_spare(1));
    uint64_t spares = stats_now().spares_used;
    EXPECT_EQ_I64(UvOsIoSetup(8, &c), 0);
    EXPECT_EQ_U64(stats_now().spares_used, spares);
    expect_writes(c, fd, "eight events");
    EXPECT(wait_spare(8)); /* the one of size 1 was let go */

    uint64_t before = stats_now().destroyed;
    EXPECT_EQ_I64(UvOsIoDestroy(a), 0);
    EXPECT_EQ_I64(UvOsIoDestroy(c), 0);
    EXPECT(wait_destroyed(before + 2));
    close(fd);
    unlink(path);
}
