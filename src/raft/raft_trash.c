/* libraft's big file removals, renamed away and cut on a thread. */
#include "raft/raft_trash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/thread.h"

#define TRASH_QUEUE 64

static pthread_mutex_t trash_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t trash_cv = PTHREAD_COND_INITIALIZER;
static char *trash_queue[TRASH_QUEUE];
static int trash_n;
static int trash_thread_state; /* 0 not started, 1 running, -1 failed */
static uint64_t trash_serial;
static struct raft_trash_stats trash_stats;

long raft_trash_period_ns(int waiting)
{
    long period = (long)((uint64_t)RAFT_TRASH_STEP * 1000000000u /
                         ((uint64_t)RAFT_TRASH_RATE_MIB << 20));

    return waiting > RAFT_TRASH_BEHIND ? period * RAFT_TRASH_BEHIND / waiting
                                       : period;
}

/* Cuts the file at path down a step at a time, then unlinks it. Each cut
 * starts one period after the one before it (the time a cut takes is part
 * of its period). */
static void trash_cut(const char *path)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    struct stat st;

    if (fd >= 0 && fstat(fd, &st) == 0) {
        off_t size = st.st_size;
        while (size > 0) {
            struct timespec next;
            clock_gettime(CLOCK_MONOTONIC, &next);
            size = size > (off_t)RAFT_TRASH_STEP ? size - RAFT_TRASH_STEP : 0;
            if (ftruncate(fd, size) != 0) {
                break;
            }
            pthread_mutex_lock(&trash_mu);
            long period = raft_trash_period_ns(trash_n);
            pthread_mutex_unlock(&trash_mu);
            next.tv_nsec += period;
            next.tv_sec += next.tv_nsec / 1000000000;
            next.tv_nsec %= 1000000000;
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        }
    }
    if (fd >= 0) {
        close(fd);
    }
    (void)unlink(path);
}

static void *trash_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&trash_mu);
    for (;;) {
        while (trash_n == 0) {
            pthread_cond_wait(&trash_cv, &trash_mu);
        }
        char *path = trash_queue[0];
        memmove(trash_queue, trash_queue + 1,
                (size_t)(trash_n - 1) * sizeof trash_queue[0]);
        trash_n--;
        pthread_mutex_unlock(&trash_mu);
        trash_cut(path);
        free(path);
        pthread_mutex_lock(&trash_mu);
        trash_stats.removed++;
    }
    return NULL;
}

/* Under trash_mu: whether the thread runs, starting it the first time. */
static bool trash_thread_up(void)
{
    if (trash_thread_state == 0) {
        trash_thread_state =
            thread_start_detached(trash_main, "queen-trash") ? 1 : -1;
    }
    return trash_thread_state == 1;
}

static int unlink_in_place(const char *path)
{
    int rc = unlink(path) == 0 ? 0 : -errno;
    pthread_mutex_lock(&trash_mu);
    trash_stats.in_place++;
    pthread_mutex_unlock(&trash_mu);
    return rc;
}

/* The trash name of path: its directory, the prefix, a serial, its name.
 * Returns NULL when it does not fit or memory is out. */
static char *trash_name(const char *path, uint64_t serial)
{
    const char *slash = strrchr(path, '/');
    int dir_len = slash != NULL ? (int)(slash - path) + 1 : 0;
    const char *base = path + dir_len;
    size_t cap = strlen(path) + sizeof RAFT_TRASH_PREFIX + 24;
    char *out = malloc(cap);

    if (out != NULL &&
        (size_t)snprintf(out, cap, "%.*s%s%llu-%s", dir_len, path,
                         RAFT_TRASH_PREFIX, (unsigned long long)serial,
                         base) >= cap) {
        free(out);
        out = NULL;
    }
    return out;
}

/* Whether name is a closed segment's, "<first>-<last>" in decimal. */
static bool is_closed_segment(const char *name)
{
    size_t a = strspn(name, "0123456789");

    return a > 0 && name[a] == '-' && name[a + 1] != '\0' &&
           strspn(name + a + 1, "0123456789") == strlen(name + a + 1);
}

/* Whether path's file system keeps RAFT_TRASH_FREE bytes free while the
 * file waits in the trash. */
static bool is_room_to_wait(const char *path)
{
    struct statvfs vfs;

    return statvfs(path, &vfs) == 0 &&
           (uint64_t)vfs.f_bavail * vfs.f_frsize >= RAFT_TRASH_FREE;
}

int UvOsUnlink(const char *path)
{
    struct stat st;
    const char *slash = strrchr(path, '/');

    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size < (off_t)RAFT_TRASH_MIN ||
        !is_closed_segment(slash != NULL ? slash + 1 : path) ||
        !is_room_to_wait(path)) {
        return unlink_in_place(path);
    }
    pthread_mutex_lock(&trash_mu);
    bool is_room = trash_thread_up() && trash_n < TRASH_QUEUE;
    uint64_t serial = ++trash_serial;
    pthread_mutex_unlock(&trash_mu);
    char *trash = is_room ? trash_name(path, serial) : NULL;
    if (trash == NULL || rename(path, trash) != 0) {
        free(trash);
        return unlink_in_place(path);
    }
    pthread_mutex_lock(&trash_mu);
    if (trash_n < TRASH_QUEUE) {
        trash_queue[trash_n++] = trash;
        trash_stats.queued++;
        pthread_cond_signal(&trash_cv);
        trash = NULL;
    }
    pthread_mutex_unlock(&trash_mu);
    if (trash != NULL) { /* the queue filled meanwhile */
        int rc = unlink_in_place(trash);
        free(trash);
        return rc;
    }
    return 0;
}

int raft_trash_sweep(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    if (d == NULL) {
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, RAFT_TRASH_PREFIX,
                    sizeof RAFT_TRASH_PREFIX - 1) == 0 &&
            unlinkat(dirfd(d), e->d_name, 0) == 0) {
            n++;
        }
    }
    closedir(d);
    return n;
}

void raft_trash_get_stats(struct raft_trash_stats *out)
{
    pthread_mutex_lock(&trash_mu);
    *out = trash_stats;
    out->pending = out->queued - out->removed;
    pthread_mutex_unlock(&trash_mu);
}
