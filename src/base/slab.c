/* Slabs (see slab.h). */
#include "base/slab.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/common.h"
#include "base/populate.h"
#include "base/thread.h"
#include "base/xalloc.h"

void slab_spares_init(struct slab_spares *s, size_t limit)
{
    atomic_init(&s->n, 0);
    s->limit = limit;
}

/* One more spare counted in p's shared count (B); false (nothing counted)
 * when that is at its limit. */
static bool shared_take(struct slab_pool *p)
{
    if (p->shared == NULL) {
        return true;
    }
    if (atomic_fetch_add(&p->shared->n, 1) < p->shared->limit) {
        return true;
    }
    atomic_fetch_sub(&p->shared->n, 1);
    return false;
}

/* A spare of p left its list (taken or freed). */
static void shared_give(struct slab_pool *p)
{
    if (p->shared != NULL) {
        atomic_fetch_sub(&p->shared->n, 1);
    }
}

void slab_pool_init(struct slab_pool *p, size_t min_spare)
{
    memset(p, 0, sizeof(*p));
    p->min_spare = min_spare;
    p->max_spare = min_spare;
}

/* A slab of SLAB_SIZE bytes is mapped aligned to its size (twice the size
 * mapped, the rest unmapped) and asks for a huge page: filling fresh memory
 * then faults once per 2 MiB, not per 4 KiB, and those faults are most of
 * what fresh memory costs. Unmapping gives it back at once. */
static char *slab_map(void)
{
    size_t len = 2 * SLAB_SIZE;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (m == MAP_FAILED) {
        return NULL;
    }
    size_t head = (SLAB_SIZE - (uintptr_t)m % SLAB_SIZE) % SLAB_SIZE;
    char *at = m + head;
    if (head > 0) {
        (void)munmap(m, head);
    }
    (void)munmap(at + SLAB_SIZE, len - head - SLAB_SIZE);
#ifdef MADV_HUGEPAGE
    (void)madvise(at, SLAB_SIZE, MADV_HUGEPAGE); /* a hint only */
#endif
    return at;
}

/* ---- Slabs made ahead (slab.h (A)) ------------------------------------- */

static pthread_mutex_t ahead_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ahead_cv = PTHREAD_COND_INITIALIZER;
static char *ahead[SLAB_AHEAD]; /* mapped, every page faulted in */
static size_t n_ahead;
static size_t n_tight;        /* pools keeping no spares: make none */
static uint64_t n_taken;      /* slabs taken from the list, ever */
static bool has_ahead_thread; /* started, or tried to */
static bool is_ahead_allowed; /* slab_ahead_allow() */
static bool is_ahead_failed;  /* mmap or populate failed: wait for a take */

/* Under ahead_mu: whether a slab made now would be dropped (the list is
 * full, a pool is tight, or the list is not allowed). */
static bool ahead_is_unwanted(void)
{
    return n_ahead == SLAB_AHEAD || n_tight > 0 || !is_ahead_allowed;
}

static void *ahead_main(void *arg)
{
    UNUSED(arg);
    pthread_mutex_lock(&ahead_mu);
    for (;;) {
        char *m;

        while (ahead_is_unwanted() || is_ahead_failed) {
            pthread_cond_wait(&ahead_cv, &ahead_mu);
        }
        pthread_mutex_unlock(&ahead_mu);
        m = slab_map();
        if (m != NULL && !populate_huge(m)) {
            (void)munmap(m, SLAB_SIZE);
            m = NULL;
        }
        pthread_mutex_lock(&ahead_mu);
        if (m == NULL) {
            is_ahead_failed = true; /* out of memory: try at the next take */
            continue;
        }
        if (ahead_is_unwanted()) {
            /* a pool went tight meanwhile: unmapped unlocked, as elsewhere */
            pthread_mutex_unlock(&ahead_mu);
            (void)munmap(m, SLAB_SIZE);
            pthread_mutex_lock(&ahead_mu);
            continue;
        }
        ahead[n_ahead++] = m;
    }
    pthread_mutex_unlock(&ahead_mu);
    return NULL;
}

/* A slab made ahead, or NULL (none ready, or tight): the thread starts
 * with the first call and makes the next one. */
static char *ahead_take(void)
{
    char *m = NULL;

    pthread_mutex_lock(&ahead_mu);
    if (!is_ahead_allowed) {
        pthread_mutex_unlock(&ahead_mu);
        return NULL;
    }
    if (!has_ahead_thread) {
        /* not started: nothing is ever ready, slab_new maps in place */
        has_ahead_thread = true;
        (void)thread_start_detached(ahead_main, "queen-slabs");
    }
    if (n_ahead > 0 && n_tight == 0) {
        m = ahead[--n_ahead];
        n_taken++;
    }
    is_ahead_failed = false;
    pthread_cond_signal(&ahead_cv);
    pthread_mutex_unlock(&ahead_mu);
    return m;
}

/* Under ahead_mu: empty the list into drop; returns how many. */
static size_t ahead_empty(char **drop)
{
    size_t n = n_ahead;

    memcpy(drop, ahead, n * sizeof(drop[0]));
    n_ahead = 0;
    return n;
}

/* Unmap what ahead_empty() took out (after the mutex). */
static void ahead_unmap(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        (void)munmap(v[i], SLAB_SIZE);
    }
}

void slab_ahead_allow(bool on)
{
    char *drop[SLAB_AHEAD];
    size_t n = 0;

    pthread_mutex_lock(&ahead_mu);
    is_ahead_allowed = on;
    if (!on) {
        n = ahead_empty(drop);
    }
    pthread_cond_signal(&ahead_cv);
    pthread_mutex_unlock(&ahead_mu);
    ahead_unmap(drop, n);
}

void slab_set_tight(struct slab_pool *p, bool is_tight)
{
    char *drop[SLAB_AHEAD];
    size_t n = 0;

    if (p->is_tight == is_tight) {
        return;
    }
    p->is_tight = is_tight;
    /* the first tight pool empties the list and stops the thread's work;
     * the last one resumes it */
    pthread_mutex_lock(&ahead_mu);
    if (is_tight) {
        n_tight++;
        n = ahead_empty(drop);
    } else {
        ASSERT(n_tight > 0);
        n_tight--;
        pthread_cond_signal(&ahead_cv);
    }
    pthread_mutex_unlock(&ahead_mu);
    ahead_unmap(drop, n);
}

size_t slab_ahead_ready(uint64_t *taken)
{
    size_t n;

    pthread_mutex_lock(&ahead_mu);
    n = n_ahead;
    if (taken != NULL) {
        *taken = n_taken;
    }
    pthread_mutex_unlock(&ahead_mu);
    return n;
}

static struct slab *slab_new(struct slab_pool *p, size_t cap)
{
    struct slab *s = xcalloc(1, sizeof(*s));

    p->bytes += cap;
    s->cap = cap;
    s->data = NULL;
    if (cap == SLAB_SIZE) {
        s->data = ahead_take();
        s->data = s->data != NULL ? s->data : slab_map();
    }
    s->is_mapped = s->data != NULL;
    if (s->data == NULL) {
        s->data = xmalloc(cap);
    }
    return s;
}

static void slab_free(struct slab_pool *p, struct slab *s)
{
    p->bytes -= s->cap;
    if (s->is_mapped) {
        (void)munmap(s->data, s->cap);
    } else {
        free(s->data);
    }
    free(s);
}

static void slab_release(struct slab_pool *p, struct slab *s)
{
    if (s->cap == SLAB_SIZE && !p->is_tight && p->n_spare < p->max_spare &&
        shared_take(p)) {
        s->next = p->spare;
        p->spare = s;
        p->n_spare++;
        return;
    }
    slab_free(p, s);
}

void slab_pool_free(struct slab_pool *p)
{
    slab_set_tight(p, false);
    if (p->cur != NULL) {
        slab_free(p, p->cur);
        p->cur = NULL;
    }
    while (p->spare != NULL) {
        struct slab *s = p->spare;
        p->spare = s->next;
        shared_give(p);
        slab_free(p, s);
    }
    p->n_spare = 0;
}

struct slab *slab_for(struct slab_pool *p, size_t n)
{
    struct slab *s = p->cur;

    if (n > SLAB_SIZE / 4) {
        return slab_new(p, n);
    }
    if (s != NULL && s->cap - s->used >= n) {
        return s;
    }
    if (s != NULL && s->live == 0) {
        s->used = 0; /* every string in it left: start over */
        return s;
    }
    p->taken++;
    if (p->spare != NULL) {
        s = p->spare;
        p->spare = s->next;
        p->n_spare--;
        shared_give(p);
    } else {
        s = slab_new(p, SLAB_SIZE);
    }
    s->next = NULL;
    s->used = 0;
    s->live = 0;
    s->live_bytes = 0;
    p->cur = s;
    return s;
}

char *slab_put(struct slab *s, const void *a, size_t na, const void *b,
               size_t nb)
{
    char *at = s->data + s->used;

    ASSERT(s->cap - s->used >= na + nb);
    if (na > 0) {
        memcpy(at, a, na);
    }
    if (nb > 0) {
        memcpy(at + na, b, nb);
    }
    s->used += na + nb;
    s->live++;
    s->live_bytes += na + nb;
    return at;
}

void slab_unref(struct slab_pool *p, struct slab *s, size_t n)
{
    ASSERT(s->live > 0 && s->live_bytes >= n);
    s->live_bytes -= n;
    if (--s->live == 0 && s != p->cur) {
        slab_release(p, s);
    }
}

void slab_spares_free(struct slab_pool *p, size_t keep)
{
    while (p->n_spare > keep) {
        struct slab *s = p->spare;
        p->spare = s->next;
        p->n_spare--;
        shared_give(p);
        slab_free(p, s);
    }
}

void slab_trim(struct slab_pool *p, size_t cap, bool is_tight)
{
    size_t n = p->taken < cap ? p->taken : cap;

    slab_set_tight(p, is_tight);
    p->max_spare = n > p->min_spare ? n : p->min_spare;
    p->taken = 0;
    slab_spares_free(p, p->is_tight ? 0 : p->max_spare);
}

bool slab_is_holey(const struct slab_pool *p, const struct slab *s)
{
    return s != p->cur && s->cap == SLAB_SIZE &&
           s->used - s->live_bytes >= SLAB_SIZE / 8;
}
