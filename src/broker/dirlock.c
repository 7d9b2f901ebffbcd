/* See dirlock.h. */
#include "broker/dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define DIRLOCK_PATH_MAX 4200

/* The PID the holder wrote, or 0 when it cannot be read. */
static long holder_pid(int fd)
{
    char b[32];
    ssize_t n = pread(fd, b, sizeof(b) - 1, 0);

    if (n <= 0) {
        return 0;
    }
    b[n] = '\0';
    return strtol(b, NULL, 10);
}

int dirlock_take(const char *dir, int *fd, struct err *err)
{
    char path[DIRLOCK_PATH_MAX];
    char pid[32];
    int f;
    int n;

    *fd = -1;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, DIRLOCK_FILE) >=
        sizeof(path)) {
        return err_set(err, ERR_INVALID, "QUEEN_RAFT_DIR=%.200s: too long",
                       dir);
    }
    f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) {
        return err_set(err, ERR_IO, "QUEEN_RAFT_DIR=%.200s: open %s: %s", dir,
                       DIRLOCK_FILE, strerror(errno));
    }
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        long holder = e == EWOULDBLOCK ? holder_pid(f) : 0;
        close(f);
        if (e != EWOULDBLOCK) {
            return err_set(err, ERR_IO, "QUEEN_RAFT_DIR=%.200s: lock %s: %s",
                           dir, DIRLOCK_FILE, strerror(e));
        }
        return err_set(err, ERR_BUSY,
                       "QUEEN_RAFT_DIR=%.200s: in use by another queen process "
                       "(pid %ld); one process per data directory: stop it, "
                       "or give this one a directory of its own",
                       dir, holder);
    }
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n) {
        /* the lock holds without it; only the message loses the PID */
        (void)0;
    }
    *fd = f;
    return 0;
}

void dirlock_release(int fd)
{
    if (fd >= 0) {
        close(fd);
    }
}
