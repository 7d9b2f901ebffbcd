/* The store's next pages, warmed on a thread of their own. */
#include "store/store_warm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "store/store_impl.h"

#define WARM_PERIOD_NS 10000000L /* a round every 10 ms */
#define WARM_READ      ((size_t)1 << 20)

struct store_warm {
    struct store *s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool is_stopping;
    bool is_off;  /* the file system has no fallocate */
    MDB_env *env; /* the environment warmed_to belongs to */
    uint64_t warmed_to;
    _Atomic uint64_t ready;
    char *buf;
};

static bool warm_is_room(int fd)
{
    struct statvfs vfs;

    return fstatvfs(fd, &vfs) == 0 &&
           (uint64_t)vfs.f_bavail * vfs.f_frsize >= STORE_WARM_FREE;
}

/* Allocate [from, to) of fd and read it once. Under swap_lock shared. */
static void warm_range(struct store_warm *w, int fd, uint64_t from, uint64_t to)
{
    if (fallocate(fd, 0, (off_t)from, (off_t)(to - from)) != 0) {
        w->is_off = errno == EOPNOTSUPP;
        return;
    }
    for (uint64_t at = from; at < to; at += WARM_READ) {
        if (pread(fd, w->buf, WARM_READ, (off_t)at) < 0) {
            return;
        }
    }
    w->warmed_to = to;
}

/* One round: warm up to twice STORE_WARM_AHEAD past the end once less
 * than STORE_WARM_AHEAD is ready. */
static void warm_round(struct store_warm *w)
{
    struct store *s = w->s;
    MDB_envinfo info;
    MDB_stat st;
    mdb_filehandle_t fd;

    pthread_rwlock_rdlock(&s->swap_lock);
    if (s->env != w->env) { /* (3) */
        w->env = s->env;
        w->warmed_to = 0;
    }
    if (mdb_env_info(s->env, &info) == 0 && mdb_env_stat(s->env, &st) == 0 &&
        mdb_env_get_fd(s->env, &fd) == 0) {
        uint64_t end = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
        if (w->warmed_to < end + STORE_WARM_AHEAD && warm_is_room(fd)) {
            uint64_t from = w->warmed_to > end ? w->warmed_to : end;
            uint64_t to = (end + 2 * STORE_WARM_AHEAD) & ~(WARM_READ - 1);
            warm_range(w, fd, from, to);
        }
        atomic_store(&w->ready, w->warmed_to > end ? w->warmed_to - end : 0);
    }
    pthread_rwlock_unlock(&s->swap_lock);
}

static void *warm_main(void *arg)
{
    struct store_warm *w = arg;

    pthread_mutex_lock(&w->mu);
    while (!w->is_stopping && !w->is_off) {
        struct timespec next;
        pthread_mutex_unlock(&w->mu);
        warm_round(w);
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

bool store_warm_start(struct store *s)
{
    struct store_warm *w;
    pthread_condattr_t ca;

    if (s->warm != NULL) {
        return true;
    }
    w = xcalloc(1, sizeof(*w));
    w->s = s;
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
