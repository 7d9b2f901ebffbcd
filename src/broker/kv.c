/* The in-process KV interface (broker/kv.h): batches from any thread become
 * CMD_KV raft entries; the apply handler runs store_kv_apply() inside the
 * fsm's write transaction and keeps the answer of each entry it applies,
 * keyed by raft index, which the proposal's callback (on the loop thread)
 * hands to the caller.
 *
 *   kv_submit() -> validate -> encode -> node_propose_async()
 *   loop: kv_service_apply() -> svc->answers (keyed by raft index)
 *   loop: kv_on_applied() -> cb(arg, answer) -> free
 *
 * Answers wait in log order. A callback usually runs right after its
 * entry's apply, but not always: a drain (raft/node.c (D2): a snapshot
 * taken, a leader's barrier) applies every queued entry first and calls
 * back later, in order (D1). So a callback for index X takes X's answer
 * and drops the older ones, whose callbacks, if any, have run. Answers are
 * kept only while a call of this node waits (n_waiting), so a node that
 * proposes none keeps none; KV_ANSWERS_MAX bounds them otherwise.
 *
 * kv_call_batch() wraps kv_submit() with a waiter (mutex + condition variable)
 * that both sides reference, so a caller that gave up on time leaves the
 * late callback a valid place to drop its answer.
 *
 * Closing: a sink thread past its grace may still call in while the broker
 * closes raft. Every call enters under svc->mu (kv_enter: refused once
 * is_closing is set, else n_inflight++) and leaves the same way (kv_leave);
 * kv_service_close() sets is_closing and waits for n_inflight to reach 0, so
 * once it returns no call can reach the node or the store again, and
 * node_close() may proceed. The service itself (its lock) lives until
 * kv_service_free(), which the broker skips while a sink may still call. */
#include "broker/kv.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "cp/registry.h"
#include "raft/cmd.h"
#include "raft/node.h"

struct kv_service {
    struct store *store;
    struct node *node;
    pthread_mutex_t mu;  /* guards is_closing and n_inflight */
    pthread_cond_t idle; /* signalled when n_inflight drops to 0 */
    bool is_closing;     /* set by kv_service_close(); never cleared */
    unsigned n_inflight; /* calls between kv_enter() and kv_leave() */
    /* Loop thread only: answers of applied entries, oldest first. */
    struct kv_kept *answers;
    size_t n_answers;
    size_t cap_answers;
    _Atomic unsigned n_waiting; /* submitted, not yet called back */
};

/* The answer an applied entry left. */
struct kv_kept {
    uint64_t index;
    struct kv_answer a;
};

#define KV_ANSWERS_MAX 4096

struct kv_pending {
    struct kv_service *svc;
    kv_done_fn cb;
    void *arg;
};

struct kv_service *kv_service_new(struct store *store)
{
    struct kv_service *s = xcalloc(1, sizeof(*s));

    s->store = store;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    return s;
}

void kv_service_attach(struct kv_service *s, struct node *node)
{
    s->node = node;
}

/* Free the kept answers of entries below index, the oldest first. */
static void kv_answers_drop(struct kv_service *s, uint64_t index)
{
    size_t n = 0;

    while (n < s->n_answers && s->answers[n].index < index) {
        kv_answer_free(&s->answers[n++].a);
    }
    if (n == 0) {
        return;
    }
    memmove(s->answers, s->answers + n,
            (s->n_answers - n) * sizeof(s->answers[0]));
    s->n_answers -= n;
}

/* Keep a, the answer of entry index (moved in), when a call waits. */
static void kv_answers_keep(struct kv_service *s, uint64_t index,
                            struct kv_answer *a)
{
    if (atomic_load(&s->n_waiting) == 0) {
        kv_answer_free(a); /* no callback of this node can want it */
        return;
    }
    if (s->n_answers == KV_ANSWERS_MAX) {
        kv_answers_drop(s, s->answers[0].index + 1);
    }
    if (s->n_answers == s->cap_answers) {
        s->cap_answers = s->cap_answers == 0 ? 8 : 2 * s->cap_answers;
        s->answers =
            xrealloc(s->answers, s->cap_answers * sizeof(s->answers[0]));
    }
    s->answers[s->n_answers].index = index;
    kv_answer_move(a, &s->answers[s->n_answers].a);
    s->n_answers++;
}

void kv_service_free(struct kv_service *s)
{
    if (s == NULL) {
        return;
    }
    kv_answers_drop(s, UINT64_MAX);
    free(s->answers);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void kv_service_close(struct kv_service *s)
{
    pthread_mutex_lock(&s->mu);
    s->is_closing = true;
    while (s->n_inflight > 0) {
        pthread_cond_wait(&s->idle, &s->mu);
    }
    s->node = NULL;
    pthread_mutex_unlock(&s->mu);
}

/* Admit one call, or refuse it once closing has begun. */
static int kv_enter(struct kv_service *s, struct err *err)
{
    pthread_mutex_lock(&s->mu);
    if (s->is_closing) {
        pthread_mutex_unlock(&s->mu);
        return err_set(err, ERR_BUSY, "kv: the node is closing");
    }
    s->n_inflight++;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void kv_leave(struct kv_service *s)
{
    pthread_mutex_lock(&s->mu);
    if (--s->n_inflight == 0) {
        pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->mu);
}

void kv_answer_take(const struct kv_answer *ans, struct kv_answer *out)
{
    /* The callback borrows ans, which the service frees after it returns:
     * moving it out is the one write a borrower may do. */
    /* NOLINTNEXTLINE(performance-no-int-to-ptr) */
    kv_answer_move((struct kv_answer *)(uintptr_t)ans, out);
}

static void kv_refused(struct fsm_result *res, int code, const char *msg)
{
    res->code = code;
    snprintf(res->msg, sizeof(res->msg), "%.159s", msg);
}

int kv_service_apply(void *arg, struct store *s, MDB_txn *txn,
                     const struct cmd_header *h, struct fsm_result *res,
                     struct err *err)
{
    struct kv_service *svc = arg;
    struct kv_cmd c;
    struct err derr = {0};
    char reason[40];
    uint32_t removed;
    int rc = 0;

    if (kv_cmd_decode(h->body, &c, &derr) != 0) {
        kv_refused(res, ERR_CORRUPT, derr.msg);
    } else if (c.is_sweep) {
        rc = store_kv_sweep(s, txn, h->stamp,
                            c.sweep_max > KV_SWEEP_MAX ? KV_SWEEP_MAX
                                                       : c.sweep_max,
                            &removed, err);
    } else if (kv_validate(c.ops, c.n, false, reason, &derr) != 0) {
        kv_refused(res, derr.code, derr.msg); /* same on every node */
    } else {
        struct kv_batch b = {h->tenant, c.ops, c.n};
        struct kv_answer a;

        memset(&a, 0, sizeof(a));
        cp_gate_touch(h->tenant); /* cp/registry.h (2) */
        rc = store_kv_apply(s, txn, &b, h->stamp, &a, err);
        if (rc == 0) {
            kv_answers_keep(svc, res->index, &a);
        } else {
            kv_answer_free(&a);
        }
    }
    kv_cmd_free(&c);
    return rc;
}

static void kv_call_error(kv_done_fn cb, void *arg, int code, const char *msg)
{
    struct kv_answer a;

    memset(&a, 0, sizeof(a));
    a.status = code;
    snprintf(a.msg, sizeof(a.msg), "%s", msg);
    cb(arg, &a);
    kv_answer_free(&a);
}

static void kv_on_applied(void *arg, int status, const struct fsm_result *res,
                          const struct err *perr)
{
    struct kv_pending *p = arg;
    struct kv_service *svc = p->svc;

    if (status == 0) {
        kv_answers_drop(svc, res->index); /* (D1): theirs were called */
    }
    if (status != 0) {
        kv_call_error(p->cb, p->arg, status, perr->msg);
    } else if (res->code != 0) {
        kv_call_error(p->cb, p->arg, res->code, res->msg);
    } else if (svc->n_answers == 0 || svc->answers[0].index != res->index) {
        log_error("kv", "entry %" PRIu64 ": the apply left no answer",
                  res->index);
        kv_call_error(p->cb, p->arg, ERR_IO, "the kv answer was lost");
    } else {
        p->cb(p->arg, &svc->answers[0].a);
        kv_answers_drop(svc, res->index + 1);
    }
    if (atomic_fetch_sub(&svc->n_waiting, 1) == 1) {
        kv_answers_drop(svc, UINT64_MAX); /* no call waits: none is wanted */
    }
    free(p);
}

/* kv_submit() between kv_enter() and kv_leave(). */
static int kv_submit_admitted(struct kv_service *s, const struct kv_batch *b,
                              kv_done_fn cb, void *arg, struct err *err)
{
    char reason[40];
    struct buf cmd;
    struct kv_pending *p;
    int rc;

    if (kv_validate(b->ops, b->n, false, reason, err) != 0) {
        char msg[sizeof(err->msg)];

        memcpy(msg, err->msg, sizeof(msg));
        return err_set(err, err->code, "%s: %.200s", reason, msg);
    }
    if (s->node == NULL) {
        return err_set(err, ERR_BUSY, "kv: the node is not started");
    }
    buf_init(&cmd, CMD_HEADER_LEN + CMD_BODY_MAX);
    rc = cmd_begin(&cmd, CMD_KV, b->tenant, err);
    if (rc == 0) {
        rc = kv_cmd_encode(&cmd, b->ops, b->n, err);
    }
    if (rc == 0) {
        rc = cmd_finish(&cmd, 0, err);
    }
    if (rc == 0) {
        p = xcalloc(1, sizeof(*p));
        *p = (struct kv_pending){s, cb, arg};
        atomic_fetch_add(&s->n_waiting, 1); /* before its entry can apply */
        rc = node_propose_async(s->node, CMD_KV, cmd.data, cmd.len,
                                kv_on_applied, p, err);
        if (rc != 0) {
            atomic_fetch_sub(&s->n_waiting, 1);
            free(p);
        }
    }
    buf_free(&cmd);
    return rc;
}

int kv_submit(struct kv_service *s, const struct kv_batch *b, kv_done_fn cb,
              void *arg, struct err *err)
{
    int rc = kv_enter(s, err);

    if (rc != 0) {
        return rc;
    }
    rc = kv_submit_admitted(s, b, cb, arg, err);
    kv_leave(s);
    return rc;
}

/* ---- the blocking call ---- */

struct kv_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool is_done;
    struct kv_answer ans;
};

static void kv_waiter_unref(struct kv_waiter *w)
{
    bool is_last;

    pthread_mutex_lock(&w->mu);
    is_last = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (is_last) {
        kv_answer_free(&w->ans);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
    }
}

static void kv_waiter_done(void *arg, const struct kv_answer *ans)
{
    struct kv_waiter *w = arg;

    pthread_mutex_lock(&w->mu);
    kv_answer_take(ans, &w->ans);
    w->is_done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    kv_waiter_unref(w);
}

static int64_t kv_wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int kv_wait(struct kv_waiter *w, int timeout_ms, struct kv_answer *out,
                   struct err *err)
{
    struct timespec dl;
    int rc = 0;

    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->mu);
    while (!w->is_done && rc == 0) {
        rc = pthread_cond_timedwait(&w->cv, &w->mu, &dl);
    }
    if (w->is_done) {
        kv_answer_move(&w->ans, out);
        rc = 0;
    }
    pthread_mutex_unlock(&w->mu);
    if (rc != 0) {
        return err_set(err, ERR_TIMEOUT, "kv: no answer within %d ms",
                       timeout_ms);
    }
    if (out->status != 0 && out->status != ERR_PRECONDITION) {
        err_set(err, out->status, "%s", out->msg);
        kv_answer_free(out);
        return err->code;
    }
    return 0;
}

/* A batch of reads only: one read transaction at the wall clock. */
static int kv_read_admitted(struct kv_service *s, const struct kv_batch *b,
                            struct kv_answer *out, struct err *err)
{
    char reason[40];
    int rc;

    if (kv_validate(b->ops, b->n, false, reason, err) != 0) {
        char msg[sizeof(err->msg)];

        memcpy(msg, err->msg, sizeof(msg));
        return err_set(err, err->code, "%s: %.200s", reason, msg);
    }
    rc = store_kv_read(s->store, b, kv_wall_us(), out, err);
    if (rc != 0) {
        kv_answer_free(out);
    }
    return rc;
}

int kv_call_batch(struct kv_service *s, const struct kv_batch *b,
                  int timeout_ms, struct kv_answer *out, struct err *err)
{
    struct kv_waiter *w;
    int rc;

    memset(out, 0, sizeof(*out));
    if (!kv_has_write(b->ops, b->n)) {
        rc = kv_enter(s, err);
        if (rc == 0) {
            rc = kv_read_admitted(s, b, out, err);
            kv_leave(s);
        }
        return rc;
    }
    w = xcalloc(1, sizeof(*w));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->refs = 2;
    rc = kv_submit(s, b, kv_waiter_done, w, err);
    if (rc != 0) {
        w->refs = 1;
        kv_waiter_unref(w);
        return rc;
    }
    rc = kv_wait(w, timeout_ms > 0 ? timeout_ms : KV_CALL_TIMEOUT_MS, out, err);
    kv_waiter_unref(w);
    return rc;
}
