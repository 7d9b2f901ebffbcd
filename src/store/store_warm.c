/* The store's next pages, warmed on a thread of their own. */
#include "store/store_warm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "store/store_impl.h"

#define WARM_PERIOD_NS    10000000L /* a round every 10 ms */
#define WARM_READ         ((size_t)1 << 20)
#define WARM_STEP         ((uint64_t)4 << 20) /* at most per round (4) */
#define WARM_NICE         10                  /* above the broker's own (4) */
#define WARM_PAUSE_ROUNDS 100 /* ~1 s without trying after a failure */
#define WARM_PAGE         ((size_t)4096) /* the map's unit of first touch */
#define WARM_MAP_STEP     ((uint64_t)64 << 20) /* mapped at most per round (5) */

struct store_warm {
    struct store *s;
    uint64_t keep_free;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool is_stopping;
    bool is_off;  /* the file system has no fallocate */
    int paused;   /* rounds left to skip after a failed fallocate */
    uint64_t gen; /* the env_gen warmed_to belongs to */
    uint64_t warmed_to;
    uint64_t mapped_to; /* the boot's pages mapped up to (5) */
    uint64_t map_end;   /* where the boot's pages end, for this gen */
    unsigned char *map; /* LMDB's map of this gen, or NULL */
    uint64_t map_len;   /* and its length */
    _Atomic uint64_t ready;
    _Atomic uint64_t rounds;
    char *buf;
};

static bool warm_is_room(const struct store_warm *w, int fd)
{
    struct statvfs vfs;

    return fstatvfs(fd, &vfs) == 0 &&
           (uint64_t)vfs.f_bavail * vfs.f_frsize >= w->keep_free;
}

/* Under swap_lock shared: the end of the committed pages and the file,
 * after restarting the count when the environment was swapped (3). */
static bool warm_where(struct store_warm *w, uint64_t *end, int *fd)
{
    struct store *s = w->s;
    MDB_envinfo info;
    MDB_stat st;
    mdb_filehandle_t h;

    if (s->env_gen != w->gen) {
        w->gen = s->env_gen;
        w->warmed_to = 0;
        w->mapped_to = 0;
        w->map_end = UINT64_MAX; /* set below, once */
        w->map = store_map_addr(s);
    }
    if (s->env == NULL || mdb_env_info(s->env, &info) != 0 ||
        mdb_env_stat(s->env, &st) != 0 || mdb_env_get_fd(s->env, &h) != 0) {
        return false;
    }
    *end = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    *fd = h;
    if (w->map_end == UINT64_MAX) {
        w->map_end = *end;
        w->map_len = info.me_mapsize;
    }
    return true;
}

/* Under swap_lock shared: reads one byte of each page of the map in
 * [from, to) that the page cache holds, so the page is mapped into the
 * process before the store's readers meet it (5). to is at or below the
 * file's length: a page past it would fault. */
static void warm_map_range(const struct store_warm *w, uint64_t from,
                           uint64_t to)
{
    unsigned char vec[WARM_READ / WARM_PAGE];
    unsigned sum = 0;

    if (w->map == NULL) {
        return;
    }
    to = to < w->map_len ? to : w->map_len;
    for (uint64_t at = from; at < to; at += WARM_READ) {
        unsigned char *p = w->map + at;
        size_t n = to - at < WARM_READ ? (size_t)(to - at) : WARM_READ;

        /* only what is resident: a page not cached would be a disk read */
        if (mincore(p, n, vec) != 0) {
            return;
        }
        for (size_t i = 0; i * WARM_PAGE < n; i++) {
            if ((vec[i] & 1) != 0) {
                sum += ((const volatile unsigned char *)p)[i * WARM_PAGE];
            }
        }
    }
    (void)sum;
}

/* Maps up to WARM_MAP_STEP of the pages the store had when this
 * environment was opened, a WARM_READ at a time under swap_lock. */
static void warm_map_boot(struct store_warm *w, uint64_t gen)
{
    struct store *s = w->s;
    uint64_t to = w->mapped_to + WARM_MAP_STEP;

    to = to < w->map_end ? to : w->map_end;
    while (w->mapped_to < to) {
        uint64_t next = w->mapped_to + WARM_READ;

        next = next < to ? next : to;
        pthread_rwlock_rdlock(&s->swap_lock);
        if (s->env_gen != gen) {
            pthread_rwlock_unlock(&s->swap_lock);
            return;
        }
        warm_map_range(w, w->mapped_to, next);
        pthread_rwlock_unlock(&s->swap_lock);
        w->mapped_to = next;
    }
}

/* Reads [from, to) of the file once, a WARM_READ at a time, taking
 * swap_lock for each read only, so a swap waits one read at most; stops
 * when the environment was swapped meanwhile or a read failed. Returns
 * how far it read: only that much counts as warmed. */
static uint64_t warm_read(struct store_warm *w, uint64_t gen, uint64_t from,
                          uint64_t to)
{
    struct store *s = w->s;

    for (uint64_t at = from; at < to; at += WARM_READ) {
        mdb_filehandle_t fd;
        bool is_same;

        pthread_rwlock_rdlock(&s->swap_lock);
        is_same = s->env_gen == gen && s->env != NULL &&
                  mdb_env_get_fd(s->env, &fd) == 0;
        if (is_same) {
            is_same = pread(fd, w->buf, WARM_READ, (off_t)at) >= 0;
        }
        if (is_same) {
            warm_map_range(w, at, at + WARM_READ < to ? at + WARM_READ : to);
        }
        pthread_rwlock_unlock(&s->swap_lock);
        if (!is_same) {
            return at;
        }
    }
    return to;
}

/* One round: when less than STORE_WARM_AHEAD past the end is ready,
 * allocate the next WARM_STEP (2) and read it once. */
static void warm_round(struct store_warm *w)
{
    struct store *s = w->s;
    uint64_t end = 0;
    uint64_t from = 0;
    uint64_t to = 0;
    uint64_t gen;
    int fd;

    pthread_rwlock_rdlock(&s->swap_lock);
    gen = s->env_gen;
    if (warm_where(w, &end, &fd) && w->warmed_to < end + STORE_WARM_AHEAD &&
        warm_is_room(w, fd)) {
        from = w->warmed_to > end ? w->warmed_to : end;
        to = (from + WARM_STEP) & ~(uint64_t)(WARM_READ - 1);
        if (fallocate(fd, 0, (off_t)from, (off_t)(to - from)) != 0) {
            w->is_off = errno == EOPNOTSUPP;
            w->paused = WARM_PAUSE_ROUNDS; /* a full disk, a quota */
            to = 0;
        }
    }
    pthread_rwlock_unlock(&s->swap_lock);
    if (to > from) {
        uint64_t got = warm_read(w, gen, from, to);
        pthread_rwlock_rdlock(&s->swap_lock);
        if (s->env_gen == gen) { /* else the next round starts over */
            w->warmed_to = got;
            if (got < to) {
                w->paused = WARM_PAUSE_ROUNDS; /* a failed read */
            }
        }
        pthread_rwlock_unlock(&s->swap_lock);
    }
    if (w->gen == gen && w->map_end != UINT64_MAX &&
        w->mapped_to < w->map_end) {
        warm_map_boot(w, gen);
    }
    atomic_store(&w->ready,
                 w->gen == gen && w->warmed_to > end ? w->warmed_to - end : 0);
}

static void *warm_main(void *arg)
{
    struct store_warm *w = arg;
    int base;

    /* a thread's own nice value on Linux; speed only, so a refusal (no
     * CAP_SYS_NICE is needed to lower one's priority) changes nothing */
    errno = 0;
    base = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (errno == 0) {
        (void)setpriority(PRIO_PROCESS, (id_t)gettid(),
                          base + WARM_NICE < 19 ? base + WARM_NICE : 19);
    }
    pthread_mutex_lock(&w->mu);
    while (!w->is_stopping && !w->is_off) {
        struct timespec next;
        pthread_mutex_unlock(&w->mu);
        if (w->paused > 0) {
            w->paused--;
        } else {
            warm_round(w);
        }
        atomic_fetch_add(&w->rounds, 1);
        clock_gettime(CLOCK_MONOTONIC, &next);
        next.tv_nsec += WARM_PERIOD_NS;
        next.tv_sec += next.tv_nsec / 1000000000L;
        next.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&w->mu);
        if (!w->is_stopping) {
            (void)pthread_cond_timedwait(&w->cv, &w->mu, &next);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* One line of /proc/self/maps ("lo-hi perms offset major:minor inode
 * path"): whether it maps the file (dev, ino) from offset 0 shared for len
 * bytes; *lo is where. */
static bool maps_line_is(const char *line, dev_t dev, ino_t ino, size_t len,
                         uintptr_t *lo)
{
    char *e;
    uintptr_t hi;
    unsigned long maj;
    unsigned long min;

    *lo = (uintptr_t)strtoull(line, &e, 16);
    if (*e != '-') {
        return false;
    }
    hi = (uintptr_t)strtoull(e + 1, &e, 16);
    if (e[0] != ' ' || strlen(e) < 6 || e[4] != 's' || e[5] != ' ') {
        return false; /* perms "r--s": shared */
    }
    if (strtoull(e + 6, &e, 16) != 0) {
        return false; /* offset */
    }
    maj = strtoul(e, &e, 16);
    if (*e != ':') {
        return false;
    }
    min = strtoul(e + 1, &e, 16);
    return hi - *lo == len && maj == major(dev) && min == minor(dev) &&
           strtoull(e, NULL, 10) == (unsigned long long)ino;
}

void *store_map_addr(struct store *s)
{
    MDB_envinfo info;
    mdb_filehandle_t fd;
    struct stat st;
    FILE *f;
    char line[4096];
    uintptr_t at = 0;

    if (s->env == NULL || mdb_env_info(s->env, &info) != 0 ||
        mdb_env_get_fd(s->env, &fd) != 0 || fstat(fd, &st) != 0 ||
        (f = fopen("/proc/self/maps", "re")) == NULL) {
        return NULL;
    }
    while (fgets(line, sizeof(line), f) != NULL &&
           !maps_line_is(line, st.st_dev, st.st_ino, info.me_mapsize, &at)) {
        at = 0;
    }
    fclose(f);
    /* NOLINTNEXTLINE(performance-no-int-to-ptr): an address the kernel gave */
    return (void *)at;
}

bool store_warm_start(struct store *s, uint64_t keep_free)
{
    struct store_warm *w;
    pthread_condattr_t ca;

    if (s->warm != NULL) {
        return true;
    }
    w = xcalloc(1, sizeof(*w));
    w->s = s;
    w->keep_free = keep_free;
    w->gen = UINT64_MAX; /* no env warmed yet */
    w->buf = xmalloc(WARM_READ);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&w->thread, NULL, warm_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w->buf);
        free(w);
        return false;
    }
    (void)pthread_setname_np(w->thread, "queen-warm");
    s->warm = w;
    return true;
}

void store_warm_stop(struct store *s)
{
    struct store_warm *w = s != NULL ? s->warm : NULL;

    if (w == NULL) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->is_stopping = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->buf);
    free(w);
    s->warm = NULL;
}

uint64_t store_warm_ready(struct store *s)
{
    return s->warm != NULL ? atomic_load(&s->warm->ready) : 0;
}

uint64_t store_warm_rounds(struct store *s)
{
    return s->warm != NULL ? atomic_load(&s->warm->rounds) : 0;
}
