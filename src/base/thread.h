/* A detached helper thread, started once by the module that owns it. */
#ifndef QUEEN_BASE_THREAD_H
#define QUEEN_BASE_THREAD_H

#include <pthread.h>
#include <stdbool.h>

/* Starts fn(NULL) on a detached thread named name (15 bytes at most shown
 * by ps/top); false when it could not be started. Static inline so that
 * objects linked outside libqueen.a (src/raft/raft_aio.c, raft_trash.c)
 * can call it. */
static inline bool thread_start_detached(void *(*fn)(void *), const char *name)
{
    pthread_t t;
    pthread_attr_t attr;
    bool ok = false;

    if (pthread_attr_init(&attr) == 0) {
        (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, fn, NULL) == 0) {
            (void)pthread_setname_np(t, name);
            ok = true;
        }
        (void)pthread_attr_destroy(&attr);
    }
    return ok;
}

#endif
