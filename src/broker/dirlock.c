/* See dirlock.h. */
#include "broker/dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/env.h"

#define DIRLOCK_PATH_MAX 4200

/* dir/name into path (DIRLOCK_PATH_MAX bytes), or ERR_INVALID. */
static int dir_file(char *path, const char *dir, const char *name,
                    struct err *err)
{
    if ((size_t)snprintf(path, DIRLOCK_PATH_MAX, "%s/%s", dir, name) >=
        DIRLOCK_PATH_MAX) {
        return err_set(err, ERR_INVALID, "QUEEN_RAFT_DIR=%.200s: too long",
                       dir);
    }
    return 0;
}

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
    int d;
    int f;
    int n;

    *fd = -1;
    if (dir_file(path, dir, DIRLOCK_FILE, err) != 0) {
        return err->code;
    }
    /* The lock is on the directory itself: a lock on the file alone was
     * lost with the file, and a cleanup of a "stale" queen.lock let a
     * second broker into the directory (two raft logs, one corrupt). */
    d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) {
        return err_set(err, ERR_IO, "QUEEN_RAFT_DIR=%.200s: open: %s", dir,
                       strerror(errno));
    }
    f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) {
        int e = errno;
        close(d);
        return err_set(err, ERR_IO, "QUEEN_RAFT_DIR=%.200s: open %s: %s", dir,
                       DIRLOCK_FILE, strerror(e));
    }
    if (flock(d, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        long holder = e == EWOULDBLOCK ? holder_pid(f) : 0;
        close(f);
        close(d);
        if (e != EWOULDBLOCK) {
            return err_set(err, ERR_IO, "QUEEN_RAFT_DIR=%.200s: lock: %s", dir,
                           strerror(e));
        }
        return err_set(err, ERR_BUSY,
                       "QUEEN_RAFT_DIR=%.200s: in use by another queen process "
                       "(pid %ld); one process per data directory: stop it, "
                       "or give this one a directory of its own",
                       dir, holder);
    }
    /* The file holds the PID for that message only. */
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n) {
        /* the lock holds without it; only the message loses the PID */
        (void)0;
    }
    close(f);
    *fd = d;
    return 0;
}

/* The id in path: 1 with *id, 0 when there is no file, -1 when it holds
 * something else (*e the errno of a failed read, else 0). */
static int read_id(const char *path, uint64_t *id, int *e)
{
    char b[32];
    int f = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    *e = 0;
    if (f < 0) {
        *e = errno;
        return errno == ENOENT ? 0 : -1;
    }
    n = read(f, b, sizeof(b) - 1);
    *e = n < 0 ? errno : 0;
    close(f);
    if (n <= 0) {
        return -1;
    }
    n -= b[n - 1] == '\n';
    b[n] = '\0';
    return env_parse_u64(b, id) ? 1 : -1; /* digits only: "-1" is no id */
}

/* Whether raft has written its term and vote in dir (raft/metadata1 or
 * metadata2): what makes the directory a member's. */
static bool has_votes(const char *dir)
{
    char path[DIRLOCK_PATH_MAX];

    for (int i = 1; i <= 2; i++) {
        snprintf(path, sizeof(path), "%s/raft/metadata%d", dir, i);
        if (access(path, F_OK) == 0) {
            return true;
        }
    }
    return false;
}

int dirlock_check_id(const char *dir, uint64_t id, struct err *err)
{
    char path[DIRLOCK_PATH_MAX];
    char tmp[DIRLOCK_PATH_MAX + 8];
    char text[32];
    uint64_t had = 0;
    int e = 0;
    int rc;
    int f;
    int n;

    if (dir_file(path, dir, DIRLOCK_ID_FILE, err) != 0) {
        return err->code;
    }
    rc = read_id(path, &had, &e);
    if (rc == 1 && had == id) {
        return 0;
    }
    if (rc == 1 && !has_votes(dir)) {
        rc = 0; /* a first boot that stopped before raft wrote: retaken */
    }
    if (rc == 1) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_RAFT_DIR=%.200s holds node %" PRIu64
                       "'s data, and this node is QUEEN_RAFT_NODE_ID=%" PRIu64
                       ": a raft log and its votes belong to one member. Give "
                       "each node its own directory (a member whose "
                       "directory was lost rejoins with an empty one)",
                       dir, had, id);
    }
    if (rc < 0) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_RAFT_DIR=%.200s: %s is unreadable or not a node "
                       "id (%s); it names the member the directory belongs "
                       "to: put that member's QUEEN_RAFT_NODE_ID in it",
                       dir, DIRLOCK_ID_FILE,
                       e != 0 ? strerror(e) : "no number");
    }
    /* absent: written whole under another name, then renamed */
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    n = snprintf(text, sizeof(text), "%" PRIu64 "\n", id);
    f = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f < 0 || write(f, text, (size_t)n) != n || fsync(f) != 0) {
        e = errno;
        if (f >= 0) {
            close(f);
        }
        return err_set(err, ERR_IO, "QUEEN_RAFT_DIR=%.200s: write %s: %s", dir,
                       DIRLOCK_ID_FILE, strerror(e));
    }
    close(f);
    if (rename(tmp, path) != 0) {
        return err_set(err, ERR_IO, "QUEEN_RAFT_DIR=%.200s: rename %s: %s", dir,
                       DIRLOCK_ID_FILE, strerror(errno));
    }
    return 0;
}

void dirlock_release(int fd)
{
    if (fd >= 0) {
        close(fd);
    }
}
