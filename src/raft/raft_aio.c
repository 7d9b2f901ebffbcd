/* libraft's AIO contexts, made and destroyed on a thread of their own. */
#include "raft/raft_aio.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/thread.h"

#define AIO_QUEUE 64 /* contexts waiting to be destroyed */

static pthread_mutex_t aio_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t aio_cv = PTHREAD_COND_INITIALIZER;
static aio_context_t aio_doomed[AIO_QUEUE];
static int aio_n_doomed;
static aio_context_t aio_spare; /* 0: none */
static unsigned aio_spare_nr;   /* its events */
static unsigned aio_want_nr;    /* a spare of this size is wanted; 0: none */
static int aio_thread_state;    /* 0 not started, 1 running, -1 failed */
static struct raft_aio_stats aio_stats;

static int sys_io_setup(unsigned nr, aio_context_t *ctxp)
{
    return syscall(SYS_io_setup, nr, ctxp) == 0 ? 0 : -errno;
}

static int sys_io_destroy(aio_context_t ctx)
{
    return syscall(SYS_io_destroy, ctx) == 0 ? 0 : -errno;
}

/* Under aio_mu: nothing for the thread to do. */
static bool aio_idle(void)
{
    return aio_n_doomed == 0 && (aio_want_nr == 0 || aio_spare != 0);
}

static void *aio_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&aio_mu);
    for (;;) {
        while (aio_idle()) {
            pthread_cond_wait(&aio_cv, &aio_mu);
        }
        if (aio_n_doomed > 0) {
            aio_context_t ctx = aio_doomed[--aio_n_doomed];
            pthread_mutex_unlock(&aio_mu);
            (void)sys_io_destroy(ctx);
            pthread_mutex_lock(&aio_mu);
            aio_stats.destroyed++;
            continue;
        }
        unsigned nr = aio_want_nr;
        aio_context_t ctx = 0;
        pthread_mutex_unlock(&aio_mu);
        int rc = sys_io_setup(nr, &ctx);
        pthread_mutex_lock(&aio_mu);
        if (rc != 0) {
            aio_want_nr = 0; /* asked again by the next setup */
        } else if (aio_spare == 0 && nr == aio_want_nr) {
            aio_spare = ctx;
            aio_spare_nr = nr;
        } else if (aio_n_doomed < AIO_QUEUE) {
            aio_doomed[aio_n_doomed++] = ctx; /* the size changed meanwhile */
        } else {
            pthread_mutex_unlock(&aio_mu);
            (void)sys_io_destroy(ctx);
            pthread_mutex_lock(&aio_mu);
        }
    }
    return NULL;
}

/* Under aio_mu: whether the thread runs, starting it the first time. */
static bool aio_thread_up(void)
{
    if (aio_thread_state == 0) {
        aio_thread_state =
            thread_start_detached(aio_main, "queen-aio") ? 1 : -1;
    }
    return aio_thread_state == 1;
}

int UvOsIoSetup(unsigned nr, aio_context_t *ctxp)
{
    pthread_mutex_lock(&aio_mu);
    bool up = aio_thread_up();
    if (up && aio_spare != 0 && aio_spare_nr == nr) {
        *ctxp = aio_spare;
        aio_spare = 0;
        aio_stats.setups++;
        aio_stats.spares_used++;
        pthread_cond_signal(&aio_cv); /* make the next one */
        pthread_mutex_unlock(&aio_mu);
        return 0;
    }
    if (up) {
        if (aio_spare != 0 && aio_n_doomed < AIO_QUEUE) {
            aio_doomed[aio_n_doomed++] = aio_spare; /* the wrong size */
            aio_spare = 0;
        }
        aio_want_nr = nr;
        pthread_cond_signal(&aio_cv);
    }
    pthread_mutex_unlock(&aio_mu);
    int rc = sys_io_setup(nr, ctxp);
    if (rc == 0) {
        pthread_mutex_lock(&aio_mu);
        aio_stats.setups++;
        pthread_mutex_unlock(&aio_mu);
    }
    return rc;
}

int UvOsIoDestroy(aio_context_t ctx)
{
    pthread_mutex_lock(&aio_mu);
    aio_stats.destroys++;
    if (aio_thread_up() && aio_n_doomed < AIO_QUEUE) {
        aio_doomed[aio_n_doomed++] = ctx;
        pthread_cond_signal(&aio_cv);
        pthread_mutex_unlock(&aio_mu);
        return 0;
    }
    aio_stats.in_place++;
    pthread_mutex_unlock(&aio_mu);
    int rc = sys_io_destroy(ctx);
    pthread_mutex_lock(&aio_mu);
    aio_stats.destroyed++;
    pthread_mutex_unlock(&aio_mu);
    return rc;
}

void raft_aio_get_stats(struct raft_aio_stats *out)
{
    pthread_mutex_lock(&aio_mu);
    *out = aio_stats;
    out->spare_nr = aio_spare != 0 ? aio_spare_nr : 0;
    out->want_nr = aio_want_nr;
    pthread_mutex_unlock(&aio_mu);
}
