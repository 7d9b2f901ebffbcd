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
#include <time.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "store/store_impl.h"

#define WARM_PERIOD_NS    10000000L /* a round every 10 ms */
#define WARM_IDLE_NS      80000000L /* at most, after rounds with nothing to do */
#define WARM_READ         ((size_t)1 << 20)
#define WARM_STEP         ((uint64_t)4 << 20) /* at most per round (4) */
#define WARM_NICE         10                  /* above the broker's own (4) */
#define WARM_PAUSE_ROUNDS 100 /* ~1 s without trying after a failure */
#define WARM_MAP_STEP     ((uint64_t)16 << 20) /* mapped at most per round (5) */

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
    uint64_t mapped_to; /* the first pages mapped up to (5) */
    uint64_t map_end;   /* where they end: the store's end at the first round */
    unsigned char *map; /* LMDB's map of this gen, or NULL */
    uint64_t map_len;   /* and its length */
    unsigned map_tries; /* rounds since the map was not found */
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

    if (s->env == NULL || mdb_env_info(s->env, &info) != 0 ||
        mdb_env_stat(s->env, &st) != 0 || mdb_env_get_fd(s->env, &h) != 0) {
        return false;
    }
    *end = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    *fd = h;
    if (s->env_gen != w->gen) {
        w->gen = s->env_gen;
        w->warmed_to = 0;
        w->mapped_to = 0;
        w->map_end = *end;
        w->map = store_map_addr(s, &w->map_len);
        w->map_tries = 0;
    } else if (w->map == NULL && ++w->map_tries % WARM_PAUSE_ROUNDS == 0) {
        w->map = store_map_addr(s, &w->map_len); /* ~1 s after a miss */
        w->mapped_to = 0; /* the first pass starts over once it is found */
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
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char vec[WARM_READ / 4096];
    unsigned sum = 0;

    if (w->map == NULL || page < 4096) {
        return;
    }
    to = to < w->map_len ? to : w->map_len;
    from -= from % page; /* mincore takes whole pages; LMDB's may be less */
    for (uint64_t at = from; at < to; at += WARM_READ) {
        unsigned char *p = w->map + at;
        size_t n = to - at < WARM_READ ? (size_t)(to - at) : WARM_READ;

        /* only what is resident: a page not cached would be a disk read */
        if (mincore(p, n, vec) != 0) {
            return;
        }
        for (size_t i = 0; i * page < n; i++) {
            if ((vec[i] & 1) != 0) {
                sum += ((const volatile unsigned char *)p)[i * page];
            }
        }
    }
    (void)sum;
}

/* Goes over [from, to) of the file a WARM_READ at a time, taking
 * swap_lock for each piece only, so a swap waits one piece at most:
 * reads it once into the page cache (when is_read) and maps what is
 * cached (5). Stops when the environment was swapped meanwhile or a read
 * failed; returns how far it went: only that much counts as warmed. */
static uint64_t warm_pieces(struct store_warm *w, uint64_t gen, uint64_t from,
                            uint64_t to, bool is_read)
{
    struct store *s = w->s;

    for (uint64_t at = from; at < to; at += WARM_READ) {
        uint64_t next = at + WARM_READ < to ? at + WARM_READ : to;
        mdb_filehandle_t fd;
        bool is_same;

        pthread_rwlock_rdlock(&s->swap_lock);
        is_same = s->env_gen == gen && s->env != NULL &&
                  mdb_env_get_fd(s->env, &fd) == 0;
        if (is_same && is_read) {
            is_same = pread(fd, w->buf, next - at, (off_t)at) >= 0;
        }
        if (is_same) {
            warm_map_range(w, at, next);
        }
        pthread_rwlock_unlock(&s->swap_lock);
        if (!is_same) {
            return at;
        }
    }
    return to;
}

/* One round: when less than STORE_WARM_AHEAD past the end is ready,
 * allocate the next WARM_STEP (2) and read it once. true when it allocated
 * or mapped anything (or tried to). */
static bool warm_round(struct store_warm *w)
{
    struct store *s = w->s;
    uint64_t end = 0;
    uint64_t from = 0;
    uint64_t to = 0;
    uint64_t gen;
    int fd;
    bool is_busy = false;

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
        uint64_t got = warm_pieces(w, gen, from, to, true);
        is_busy = true;
        pthread_rwlock_rdlock(&s->swap_lock);
        if (s->env_gen == gen) { /* else the next round starts over */
            w->warmed_to = got;
            if (got < to) {
                w->paused = WARM_PAUSE_ROUNDS; /* a failed read */
            }
        }
        pthread_rwlock_unlock(&s->swap_lock);
    }
    if (w->gen == gen && w->mapped_to < w->map_end) {
        uint64_t next = w->mapped_to + WARM_MAP_STEP;

        w->mapped_to = warm_pieces(
            w, gen, w->mapped_to, next < w->map_end ? next : w->map_end, false);
        is_busy = true;
    }
    atomic_store(&w->ready,
                 w->gen == gen && w->warmed_to > end ? w->warmed_to - end : 0);
    return is_busy || w->paused > 0;
}

static void *warm_main(void *arg)
{
    struct store_warm *w = arg;
    long period = WARM_PERIOD_NS;
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
        bool is_busy = true;
        pthread_mutex_unlock(&w->mu);
        if (w->paused > 0) {
            w->paused--;
        } else {
            is_busy = warm_round(w);
        }
        atomic_fetch_add(&w->rounds, 1);
        /* (4): each idle round waits twice the last, up to WARM_IDLE_NS */
        period = is_busy                     ? WARM_PERIOD_NS
                 : period < WARM_IDLE_NS / 2 ? 2 * period
                                             : WARM_IDLE_NS;
        clock_gettime(CLOCK_MONOTONIC, &next);
        next.tv_nsec += period;
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

/* One line of /proc/self/maps ("lo-hi perms offset dev inode path"):
 * whether it maps address `in` shared, from offset 0 of its file; [*lo,
 * *hi) is the mapping. */
static bool maps_line_holds(const char *line, uintptr_t in, uintptr_t *lo,
                            uintptr_t *hi)
{
    char *e;

    *lo = (uintptr_t)strtoull(line, &e, 16);
    if (*e != '-') {
        return false;
    }
    *hi = (uintptr_t)strtoull(e + 1, &e, 16);
    if (in < *lo || in >= *hi || e[0] != ' ' || strlen(e) < 6 || e[4] != 's' ||
        e[5] != ' ') {
        return false; /* perms "r--s": shared */
    }
    return strtoull(e + 6, &e, 16) == 0 && *e == ' ';
}

/* An address inside s's map: the first key of the meta database (its
 * "schema" row is written at open) lies in a leaf page there; a read
 * transaction without MDB_WRITEMAP hands out pointers into the map. The
 * handle is open already: mdb_dbi_open must not run beside another. 0
 * when none. */
static uintptr_t map_some_address(struct store *s)
{
    MDB_txn *txn;
    MDB_cursor *c;
    MDB_val k;
    MDB_val v;
    uintptr_t in = 0;

    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0) {
        return 0;
    }
    if (mdb_cursor_open(txn, s->meta, &c) == 0) {
        if (mdb_cursor_get(c, &k, &v, MDB_FIRST) == 0) {
            in = (uintptr_t)k.mv_data;
        }
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
    return in;
}

void *store_map_addr(struct store *s, uint64_t *len)
{
    FILE *f;
    char line[4096];
    uintptr_t in;
    uintptr_t lo = 0;
    uintptr_t hi = 0;
    bool is_found = false;

    *len = 0;
    if (s->env == NULL || (in = map_some_address(s)) == 0 ||
        (f = fopen("/proc/self/maps", "re")) == NULL) {
        return NULL;
    }
    while (!is_found && fgets(line, sizeof(line), f) != NULL) {
        is_found = maps_line_holds(line, in, &lo, &hi);
        if (strchr(line, '\n') == NULL) { /* a long path: skip its rest */
            int ch;
            while ((ch = getc(f)) != EOF && ch != '\n') {
            }
        }
    }
    fclose(f);
    if (!is_found) {
        return NULL;
    }
    *len = hi - lo;
    /* NOLINTNEXTLINE(performance-no-int-to-ptr): an address the kernel gave */
    return (void *)lo;
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
