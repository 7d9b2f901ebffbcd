/* One tenant's S3 sink (docs/design/protocol.md §2, §4, §8): a pool of threads
 * named queen-s3 that runs, from one run queue ordered by next-run time, the
 * control task and one task per queue.
 *
 * The pool: every task has a due time on CLOCK_MONOTONIC and a running
 * flag. A free thread takes the task with the smallest due time that is not
 * running, clears nothing else, runs its step without the lock and puts it
 * back with the due time the step returned. So a queue's driver is never
 * ticked by two threads at once, and a step may block (an upload, a KV call)
 * without holding up the other queues while a thread is free.
 *
 * Everything the status block and the metrics read (row state, the driver's
 * last snapshot, counters of finished runs) is copied under s->mu after each
 * step; readers never touch a driver.
 *
 * The control task lists the queue set first, so every queue has a row
 * while the bucket probe still fails; no queue task claims before the
 * probe answered and the run's presence row is written (has_set).
 *
 * Placement (docs/design/protocol.md §4): the control task beats (presence row,
 * N nodes) and then runs placement_decide(); a give-back asks one queue's
 * driver to drain exactly as on SIGTERM and its task then claims again after
 * the 2-TTL cooldown. A free queue is claimed when placement_claim_due() says
 * so: the node's load (queues owned or being claimed) paces the claims, and
 * a node at or above its share waits a TTL longer.
 *
 * Leases are refreshed by their own thread (queen-s3-main), never by the
 * queue's task: a tick blocked in a long upload must not let the lease
 * expire. The refresher borrows a task's lease only while the task is
 * owned and marks it busy; the task waits for that mark to clear before it
 * releases and frees the lease. A refresh and a fenced batch of the driver
 * never race on the version: the lease serialises its fences (lease.h,
 * invariant 3). When a refresh finds the lease lost, the task is poked:
 * due at once, or right after the step it is running, and the same poke
 * starts a give-back's drain.
 *
 * The run and its restart ladder (docs/design/protocol.md §1): if the control
 * task fails (the presence key cannot be built, or the run_check seam says so),
 * the run ends: every queue drains and releases its lease, the presence row
 * goes, and the run starts again after 1 s, doubling up to 30 s; a run that was
 * healthy for an hour resets the ladder.
 *   STARTING --first control step----------------> RUNNING
 *   RUNNING --control task fails-----------------> ENDING (queues drain)
 *   ENDING --every queue ended-------------------> BACKOFF (restarts + 1)
 *   BACKOFF --backoff elapsed--------------------> RUNNING (probe again)
 *   any --sink_stop(), every task ended----------> STOPPED */
#include "sink/sink.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/isotime.h"
#include "base/json.h"
#include "base/log.h"
#include "base/slab.h"
#include "base/xalloc.h"
#include "s3/client.h"
#include "sink/budget.h"
#include "sink/docs.h"
#include "sink/health.h"
#include "sink/layout.h"
#include "sink/lease.h"
#include "sink/obs.h"
#include "sink/placement.h"
#include "sink/status.h"

#define SINK_MISSING_RETRY_MS 5000
/* A queue that stays missing is logged again at most this often. */
#define SINK_MISSING_LOG_MS    600000
#define SINK_TERMINAL_RETRY_MS 60000
#define SINK_PROBE_MIN_MS      1000
#define SINK_PROBE_MAX_MS      60000
#define SINK_LOG_EVERY_MS      30000
#define SINK_STOP_POLL_MS      50
#define SINK_SET_UP_POLL_MS    5000 /* a task waiting for the set-up */
#define SINK_EXTRA_MAX         64 /* extra threads at once (sink_s3_retrying) */
/* Writes failed in a row that make bucket.reachable false (status); a
 * refusal (403: credentials or policy; 404 on a write: no such bucket)
 * does at once, since its queue then waits a minute before the next. */
#define SINK_WRITE_FAILS_DOWN 3
/* The S3 deadline comes this long before the grace ends (a third of a
 * short grace), so a transfer cut at it (curl looks about once a second)
 * and the queues it leaves undrained are logged before the broker goes on
 * to close raft. */
#define SINK_STOP_MARGIN_MS 1500

enum qstate { Q_CLAIM, Q_OWNED, Q_ENDED };
enum run_state { RUN_STARTING, RUN_RUNNING, RUN_ENDING, RUN_BACKOFF };

/* The lag a queue had when it was fenced here for a reason of this node's
 * own, kept for task_strand (health.h (2)). */
struct strand_lag {
    bool is_set;
    uint64_t lag_ms; /* at at_ms */
    int64_t at_ms;
    bool has_ct; /* and its lag base then (has_lag_base) */
    int64_t ct;
};

struct task {
    int64_t due_ms;
    bool is_running;
    bool is_poked; /* asked to run at once while its step was running */
    bool is_done;
    bool is_control;
    /* queue tasks only */
    char *name;
    char *bkey; /* the budget's key: esc(tenant) + "/" + esc(name) */
    enum qstate state;
    struct lease *lease;
    struct driver *drv;
    struct driver_config dc;
    int64_t start_ms;  /* creation, set-up or restart: claim pacing */
    int64_t jitter_ms; /* fixed per task, in [0, 200) */
    bool is_drain_asked;
    bool is_cut_logged;  /* under s->mu: named as not drained */
    bool is_giving_back; /* this run drains for a give-back */
    bool has_gave_back;  /* cooldown: not reclaimed before 2 TTLs */
    int64_t gave_back_at_ms;
    int claim_failures;
    /* The last run found the queue missing: the next claims and restores
     * log at debug, and the missing line repeats only every
     * SINK_MISSING_LOG_MS (missing_logged_ms, mono) with the looks since. */
    bool is_missing;
    int64_t missing_logged_ms;
    uint64_t missing_looks;
    /* under s->mu: the refresher's share of the lease */
    bool is_refreshable;
    bool is_refreshing;
    int64_t refresh_due_ms;
    bool is_give_back_asked;
    char holder[SINK_STR_MAX]; /* the other node last seen holding it, or "" */
    /* published under s->mu */
    char row_state[16];
    bool owned_here;
    char held_by[SINK_STR_MAX];
    bool has_snap;
    struct driver_status snap;
    /* completeThrough of the last step that knew it: the lag is computed
     * from it at scrape time (and kept for a failed or stranded queue). */
    bool has_lag_base;
    int64_t lag_base_ct;
    /* Under s->mu: this node stopped running the queue (fenced, or its
     * claim failed) for a reason of its own, and no other instance is known
     * to hold it: it stays in the health verdict and its lag keeps growing
     * with the clock (task_strand). */
    bool is_stranded;
    /* Task thread only: fenced here for a reason of this node's own, with
     * its lag then; the queue is stranded if its next claim fails with no
     * holder known. */
    struct strand_lag strand;
    struct driver_counters base;     /* runs that ended */
    struct driver_counters reported; /* this run's, as told to obs */
    int64_t last_k;                  /* of the last run, for the row */
    int64_t last_t_end;
    char last_error[512];
    int64_t last_error_us;
};

/* The threads, the lock and what is node-wide (see sink.h). Every field
 * under mu but the thread handles, which only start and free touch. */
struct sink_pool {
    const struct sink_node_config *node;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *threads;
    uint32_t n_threads;
    /* Threads inside an S3 call that is retrying (sink_s3_retrying), and
     * the extra threads that stand in for them meanwhile (detached; each
     * ends once n_extra > n_retrying, or at the pool's exit). */
    uint32_t n_retrying;
    uint32_t n_extra;
    pthread_t refresher;
    bool has_refresher;
    bool is_exiting;
    struct sink **sinks; /* started and not yet freed */
    size_t n_sinks;
    uint32_t load;    /* queues owned or being claimed, every tenant */
    uint32_t n_owned; /* queues owned: safe_lag_seconds exists iff > 0 */
    struct obs *obs;
    struct budget *budget;
    /* Spare slabs of every queue's engine together: at most half the
     * budget (base/slab.h (B)). */
    struct slab_spares spares;
};

struct sink {
    struct sink_params p;
    struct sink_pool *pool;
    bool owns_pool;      /* made by sink_new: freed with the sink */
    const char *mtenant; /* the metrics' tenant label, NULL for none */
    bool is_started;
    bool is_stopping;
    bool is_stopped;
    /* under s->mu: set by sink_stop (CLOCK_MONOTONIC ms); past it the S3
     * client sends nothing and a queue still draining is cut */
    int64_t stop_deadline_ms;
    size_t n_cut; /* queues cut at the deadline */
    struct task control;
    struct task **queues; /* by queue name order of creation */
    size_t n_queues;
    /* Names `*` found that hold a NUL byte, each warned about once: the
     * sink's queue names are C strings, so such a queue is not mirrored
     * (docs/s3-sink.md). Each as a 4-byte length and its bytes. */
    struct buf nul_names;
    /* control state */
    bool has_probed;
    bool is_reachable;
    char bucket_error[2048];
    /* The bucket.error of a streak of failed writes (sink_write_streak()),
     * and whether the control task logged it. */
    char write_error[2048];
    bool is_write_down;
    int64_t checked_at_us;
    int64_t probe_wait_ms;
    int64_t probe_logged_ms;
    /* The presence row of this run is written (under s->mu, read by the
     * queue tasks: none claims before it). */
    bool has_set;
    bool has_listed; /* the queue set was listed once */
    int64_t relist_due_ms;
    int64_t beat_due_ms;
    int64_t beat_logged_ms;
    uint32_t nodes;
    int beat_failures;
    uint32_t n_owned; /* queues owned by this sink */
    struct placement_state pl;
    /* the run and its restart ladder (under s->mu) */
    enum run_state run;
    int64_t run_started_ms;
    int64_t ladder_ms; /* the next backoff */
    int64_t backoff_ms;
    int64_t backoff_until_ms;
    uint64_t restarts;
    char last_exit[128];
    char run_error[STATUS_ERROR_MAX + 1];
    bool needs_probe;
    char presence_key[600];
    char presence_incarnation[17];
    int64_t presence_since_ms;
    struct health *health;
};

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t jitter_ms(int64_t below)
{
    return below <= 0 ? 0 : (int64_t)(random() % below);
}

static int64_t ttl_ms(const struct sink *s)
{
    return (int64_t)s->p.node->lease_ttl_ms;
}

/* ---- the pool ----------------------------------------------------------- */

static int64_t sink_step(struct sink *s, struct task *t, int64_t now);

static struct task *sink_pick(struct sink *s)
{
    struct task *best = NULL;

    if (!s->control.is_running && !s->control.is_done) {
        best = &s->control;
    }
    for (size_t i = 0; i < s->n_queues; i++) {
        struct task *t = s->queues[i];

        if (t->is_running || t->is_done) {
            continue;
        }
        if (best == NULL || t->due_ms < best->due_ms) {
            best = t;
        }
    }
    return best;
}

/* Under pool->mu: the task due first over every sink of the pool. */
static struct task *pool_pick(struct sink_pool *pool, struct sink **owner)
{
    struct task *best = NULL;

    for (size_t i = 0; i < pool->n_sinks; i++) {
        struct task *t = sink_pick(pool->sinks[i]);

        if (t != NULL && (best == NULL || t->due_ms < best->due_ms)) {
            best = t;
            *owner = pool->sinks[i];
        }
    }
    return best;
}

static void pool_wait_until(struct sink_pool *pool, int64_t due_ms)
{
    struct timespec ts;

    ts.tv_sec = (time_t)(due_ms / 1000);
    ts.tv_nsec = (long)(due_ms % 1000) * 1000000;
    pthread_cond_timedwait(&pool->cv, &pool->mu, &ts);
}

/* The pool a thread runs tasks for (a pool thread or an extra one); NULL on
 * every other thread, whose S3 calls sink_s3_retrying() leaves alone. */
static _Thread_local struct sink_pool *tls_pool;

/* The run loop of a pool thread, or of an extra one (is_extra), which ends
 * between steps once it no longer stands in for a retrying thread. */
static void pool_run(struct sink_pool *pool, bool is_extra)
{
    tls_pool = pool;
    pthread_mutex_lock(&pool->mu);
    while (!pool->is_exiting &&
           !(is_extra && pool->n_extra > pool->n_retrying)) {
        struct sink *s = NULL;
        struct task *t = pool_pick(pool, &s);
        int64_t now = mono_ms();

        if (t == NULL) {
            pool_wait_until(pool, now + 1000);
            continue;
        }
        if (t->due_ms > now) {
            pool_wait_until(pool, t->due_ms);
            continue;
        }
        t->is_running = true;
        t->is_poked = false;
        pthread_mutex_unlock(&pool->mu);
        struct stages_frame f;
        stages_frame_begin(obs_stages(pool->obs), &f);
        log_context_set("tenant", s->mtenant); /* none: default tenant */
        int64_t next = sink_step(s, t, now);
        log_context_set(NULL, NULL);
        stages_frame_end(obs_stages(pool->obs), &f, STAGES_REST);
        pthread_mutex_lock(&pool->mu);
        t->is_running = false;
        /* A stop (or the run's end), a lost lease or a give-back that came
         * during the step must not wait out its backoff. */
        bool down = s->is_stopping || s->run == RUN_ENDING || t->is_poked;
        t->due_ms = down && next > now ? now : next;
        pthread_cond_broadcast(&pool->cv);
    }
    if (is_extra) {
        pool->n_extra--;
        pthread_cond_broadcast(&pool->cv); /* pool_join may wait for it */
    }
    pthread_mutex_unlock(&pool->mu);
    tls_pool = NULL;
}

static void *sink_thread(void *arg)
{
    pool_run(arg, false);
    return NULL;
}

static void *sink_extra_thread(void *arg)
{
    pool_run(arg, true);
    return NULL;
}

/* Under pool->mu: one more thread while fewer than n_threads are free to
 * step (a hint: without it the pool runs on as before). */
static void pool_add_extra(struct sink_pool *pool)
{
    pthread_attr_t at;
    pthread_t th;

    if (pool->is_exiting || pool->n_threads == 0 ||
        pool->n_extra >= pool->n_retrying || pool->n_extra >= SINK_EXTRA_MAX) {
        return;
    }
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, sink_extra_thread, pool) == 0) {
        pthread_setname_np(th, "queen-s3-extra");
        pool->n_extra++;
    }
    pthread_attr_destroy(&at);
}

void sink_s3_retrying(void *arg, bool is_retrying)
{
    struct sink_pool *pool = tls_pool;

    (void)arg;
    if (pool == NULL) {
        return; /* the uploader, a tool: nothing waits on this thread */
    }
    pthread_mutex_lock(&pool->mu);
    if (is_retrying) {
        pool->n_retrying++;
        pool_add_extra(pool);
    } else {
        pool->n_retrying--;
        pthread_cond_broadcast(&pool->cv); /* an extra may end */
    }
    pthread_mutex_unlock(&pool->mu);
}

/* Under s->mu: run t at once, or right after the step it is running. */
static void sink_poke(struct sink *s, struct task *t, int64_t now)
{
    t->is_poked = true;
    t->due_ms = t->due_ms > now ? now : t->due_ms;
    pthread_cond_broadcast(&s->pool->cv);
}

/* ---- the lease refresher ------------------------------------------------ */

/* Under s->mu: the owned task whose refresh is due first, or NULL; *wake is
 * when to look again (lowered, never raised). */
static struct task *refresh_pick(struct sink *s, int64_t now, int64_t *wake)
{
    struct task *best = NULL;

    for (size_t i = 0; i < s->n_queues; i++) {
        struct task *t = s->queues[i];

        if (!t->is_refreshable) {
            continue;
        }
        if (t->refresh_due_ms <= now &&
            (best == NULL || t->refresh_due_ms < best->refresh_due_ms)) {
            best = t;
        }
        *wake = t->refresh_due_ms < *wake ? t->refresh_due_ms : *wake;
    }
    return best;
}

/* The log line of a refresh that lost the lease, by how it was lost: only a
 * fence lost to another row says another instance owns the queue. */
static const char *refresh_lost_line(struct lease *l)
{
    switch (lease_lost_cause(l)) {
    case LEASE_LOST_EXPIRED:
        return "lease expired: its row was gone at the renewal, so no "
               "renewal landed within its TTL; claiming the queue again";
    case LEASE_LOST_REFUSED:
        return "lease lost: the broker refused its renewal for good";
    case LEASE_LOST_AGE:
        return "lease lost: it was not renewed in time here; another node "
               "may take the queue over";
    case LEASE_LOST_TAKEN:
        return "lease lost: another instance owns this queue";
    default:
        return "lease lost";
    }
}

/* One heartbeat of one lease, without s->mu: 3.3's refresh outcomes. */
static void refresh_one(const struct task *t, struct lease *l)
{
    struct err err = {0};
    struct err aged;
    int rc = lease_refresh(l, &err);

    if (rc == 0) {
        return;
    }
    /* lease.h (4): past its TTL less the margin it is lost here, and the
     * refresher pokes the queue so that it stops at once */
    if (!lease_lost(l) && lease_check_age(l, &aged) != 0 && lease_lost(l)) {
        log_error_kv("queen-s3",
                     "lease expired: its renewals failed for longer than its "
                     "TTL allows",
                     {"queue", t->name}, {"error", aged.msg},
                     {"renewal", err.msg});
        return;
    }
    if (lease_lost(l)) {
        log_error_kv("queen-s3", refresh_lost_line(l), {"queue", t->name},
                     {"error", err.msg});
    } else {
        log_warn_kv("queen-s3",
                    "lease refresh failed; retrying on the next tick",
                    {"queue", t->name}, {"error", err.msg});
    }
}

static void *sink_refresher(void *arg)
{
    struct sink_pool *pool = arg;
    int64_t every =
        lease_refresh_interval_ms((int64_t)pool->node->lease_ttl_ms);

    pthread_mutex_lock(&pool->mu);
    while (!pool->is_exiting) {
        int64_t now = mono_ms();
        int64_t wake = now + 1000;
        struct task *t = NULL;
        struct sink *s = NULL;

        for (size_t i = 0; i < pool->n_sinks; i++) {
            struct task *c = refresh_pick(pool->sinks[i], now, &wake);

            if (c != NULL &&
                (t == NULL || c->refresh_due_ms < t->refresh_due_ms)) {
                t = c;
                s = pool->sinks[i];
            }
        }
        if (t == NULL) {
            pool_wait_until(pool, wake);
            continue;
        }
        t->is_refreshing = true;
        t->refresh_due_ms = now + every;
        struct lease *l = t->lease;
        pthread_mutex_unlock(&pool->mu);
        log_context_set("tenant", s->mtenant);
        refresh_one(t, l);
        log_context_set(NULL, NULL);
        /* A lost lease is not refreshed again, and its queue runs at once:
         * the driver stops Fenced at the top of its next tick, which a PUT
         * backoff could otherwise hold off for a minute. */
        bool is_lost = lease_lost(l);
        pthread_mutex_lock(&pool->mu);
        if (is_lost && t->is_refreshable) {
            sink_poke(s, t, mono_ms());
        }
        t->is_refreshable = t->is_refreshable && !is_lost;
        t->is_refreshing = false; /* l may be freed once this is seen */
        pthread_cond_broadcast(&pool->cv);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

/* The task's lease becomes the refresher's to heartbeat. */
static void refresh_share(struct sink *s, struct task *t, int64_t now)
{
    pthread_mutex_lock(&s->pool->mu);
    t->refresh_due_ms = now + lease_refresh_interval_ms(ttl_ms(s));
    t->is_refreshable = true;
    pthread_cond_broadcast(&s->pool->cv);
    pthread_mutex_unlock(&s->pool->mu);
}

/* Take the lease back from the refresher: after this it is the task's
 * alone (to release and free). */
static void refresh_unshare(struct sink *s, struct task *t)
{
    pthread_mutex_lock(&s->pool->mu);
    t->is_refreshable = false;
    while (t->is_refreshing) {
        pthread_cond_wait(&s->pool->cv, &s->pool->mu);
    }
    pthread_mutex_unlock(&s->pool->mu);
}

struct sink_pool *sink_pool_new(const struct sink_node_config *node)
{
    struct sink_pool *pool = xcalloc(1, sizeof(*pool));
    pthread_condattr_t ca;

    pool->node = node;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&pool->cv, &ca);
    pthread_condattr_destroy(&ca);
    pool->obs = obs_new();
    pool->budget = budget_new(node->memory_bytes);
    slab_spares_init(&pool->spares,
                     (size_t)(node->memory_bytes / 2 / SLAB_SIZE));
    /* slabs faulted in ahead (base/slab.h (A)): 16 MiB beside the budget's
     * weight, allowed when that is at most a sixteenth of the budget */
    slab_ahead_allow(node->memory_bytes >=
                     16 * (uint64_t)SLAB_AHEAD * SLAB_SIZE);
    return pool;
}

int sink_pool_start(struct sink_pool *pool, struct err *err)
{
    uint32_t n = pool->node->threads == 0 ? 1 : pool->node->threads;

    if (pool->threads != NULL) {
        return 0;
    }
    pool->threads = xcalloc(n, sizeof(*pool->threads));
    for (uint32_t i = 0; i < n; i++) {
        int rc = pthread_create(&pool->threads[i], NULL, sink_thread, pool);

        if (rc != 0) {
            return err_set(err, ERR_IO, "pthread_create: %s", strerror(rc));
        }
        /* Named by the creator, so the name is there once start returns. */
        pthread_setname_np(pool->threads[i], "queen-s3");
        pthread_mutex_lock(&pool->mu); /* pool_add_extra reads it */
        pool->n_threads++;
        pthread_mutex_unlock(&pool->mu);
    }
    int rc = pthread_create(&pool->refresher, NULL, sink_refresher, pool);
    if (rc != 0) {
        return err_set(err, ERR_IO, "pthread_create: %s", strerror(rc));
    }
    pthread_setname_np(pool->refresher, "queen-s3-main");
    pool->has_refresher = true;
    return 0;
}

struct obs *sink_pool_obs(struct sink_pool *pool)
{
    return pool->obs;
}

uint64_t sink_pool_buffered(struct sink_pool *pool)
{
    return budget_total(pool->budget);
}

/* The threads end (each after the step it runs) and are joined. */
static void pool_join(struct sink_pool *pool)
{
    pthread_mutex_lock(&pool->mu);
    pool->is_exiting = true;
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (uint32_t i = 0; i < pool->n_threads; i++) {
        pthread_join(pool->threads[i], NULL);
    }
    if (pool->has_refresher) {
        pthread_join(pool->refresher, NULL);
    }
    pthread_mutex_lock(&pool->mu);
    while (pool->n_extra > 0) { /* detached: each says when it ends */
        pthread_cond_wait(&pool->cv, &pool->mu);
    }
    pthread_mutex_unlock(&pool->mu);
    pool->n_threads = 0;
    pool->has_refresher = false;
}

void sink_pool_free(struct sink_pool *pool)
{
    if (pool == NULL) {
        return;
    }
    ASSERT(pool->n_sinks == 0);
    pool_join(pool);
    free(pool->threads);
    free(pool->sinks);
    obs_free(pool->obs);
    budget_free(pool->budget);
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}

struct sink *sink_new(const struct sink_params *p)
{
    struct sink *s = xcalloc(1, sizeof(*s));

    s->p = *p;
    buf_init(&s->nul_names, (size_t)1 << 20);
    s->pool = p->pool;
    if (s->pool == NULL) {
        s->pool = sink_pool_new(p->node);
        s->owns_pool = true;
    }
    s->mtenant = p->metrics_tenant;
    s->control.is_control = true;
    s->probe_wait_ms = SINK_PROBE_MIN_MS;
    s->ladder_ms = SINK_LADDER_MIN_MS;
    s->nodes = 1;
    s->health = health_new(p->cfg->max_window_ms);
    obs_set_s3(s->pool->obs, s->mtenant, s3_client_metrics(p->s3));
    obs_counter_add(s->pool->obs, OBS_QUEUES_GIVEN_BACK, s->mtenant, NULL, NULL,
                    0);
    srandom((unsigned)wall_us());
    return s;
}

int sink_start(struct sink *s, struct err *err)
{
    struct sink_pool *pool = s->pool;

    pthread_mutex_lock(&pool->mu);
    s->control.due_ms = mono_ms();
    s->is_started = true;
    pool->sinks =
        xrealloc(pool->sinks, (pool->n_sinks + 1) * sizeof(struct sink *));
    pool->sinks[pool->n_sinks++] = s;
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    if (s->owns_pool && sink_pool_start(pool, err) != 0) {
        sink_stop(s);
        return err->code;
    }
    return 0;
}

void sink_stop(struct sink *s)
{
    pthread_mutex_lock(&s->pool->mu);
    if (!s->is_stopping) {
        s->is_stopping = true;
        log_info_kv("queen-s3",
                    "stopping: no new reads, the window in flight is finished",
                    {"tenant", s->p.tenant_text});
        int64_t now = mono_ms();
        int64_t grace = (int64_t)s->p.node->shutdown_grace_ms;
        int64_t margin =
            grace / 3 < SINK_STOP_MARGIN_MS ? grace / 3 : SINK_STOP_MARGIN_MS;
        s->stop_deadline_ms = now + grace - margin;
        s3_client_stop(s->p.s3, s->stop_deadline_ms);
        s->control.due_ms = now;
        for (size_t i = 0; i < s->n_queues; i++) {
            s->queues[i]->due_ms = now;
        }
        if (!s->is_started || s->pool->n_threads == 0) {
            s->is_stopped = true;
        }
    }
    pthread_cond_broadcast(&s->pool->cv);
    pthread_mutex_unlock(&s->pool->mu);
}

bool sink_stopped(struct sink *s)
{
    pthread_mutex_lock(&s->pool->mu);
    bool stopped = s->is_stopped;
    pthread_mutex_unlock(&s->pool->mu);
    return stopped;
}

/* Under pool->mu: no thread of the pool is in a step of s or holds one of
 * its leases. */
static bool sink_idle(const struct sink *s)
{
    if (s->control.is_running) {
        return false;
    }
    for (size_t i = 0; i < s->n_queues; i++) {
        if (s->queues[i]->is_running || s->queues[i]->is_refreshing) {
            return false;
        }
    }
    return true;
}

/* Take s out of its pool once no thread is in one of its steps. */
static void sink_leave(struct sink *s)
{
    struct sink_pool *pool = s->pool;

    pthread_mutex_lock(&pool->mu);
    for (size_t i = 0; i < pool->n_sinks; i++) {
        if (pool->sinks[i] != s) {
            continue;
        }
        while (!pool->is_exiting && !sink_idle(s)) {
            pthread_cond_wait(&pool->cv, &pool->mu);
        }
        pool->sinks[i] = pool->sinks[--pool->n_sinks];
        break;
    }
    pthread_mutex_unlock(&pool->mu);
}

void sink_free(struct sink *s)
{
    if (s == NULL) {
        return;
    }
    if (s->owns_pool) {
        pool_join(s->pool);
    }
    sink_leave(s);
    for (size_t i = 0; i < s->n_queues; i++) {
        struct task *t = s->queues[i];

        driver_free(t->drv);
        lease_free(t->lease);
        free(t->name);
        free(t->bkey);
        free(t);
    }
    free(s->queues);
    buf_free(&s->nul_names);
    health_free(s->health);
    if (s->owns_pool) {
        sink_pool_free(s->pool);
    } else if (s->mtenant != NULL) {
        obs_tenant_removed(s->pool->obs, s->mtenant);
    } else {
        obs_set_s3(s->pool->obs, NULL, NULL);
    }
    free(s);
}

/* ---- the control task: bucket probe ------------------------------------- */

/* Under s->mu, which it releases. */
static void sink_probe_ok(struct sink *s)
{
    bool was_down = s->bucket_error[0] != '\0';

    s->is_reachable = true;
    s->bucket_error[0] = '\0';
    pthread_mutex_unlock(&s->pool->mu);
    if (was_down) {
        log_info("queen-s3", "the bucket answers; starting the queues");
    }
}

/* Under s->mu: true when the last SINK_WRITE_FAILS_DOWN or more writes
 * failed in a row (the probe alone would keep saying reachable through an
 * outage that began after it), with s->write_error saying so. */
static bool sink_write_streak(struct sink *s)
{
    const struct sink_config *c = s->p.cfg;
    int code = 0;
    uint32_t n = s3_metrics_write_streak(s3_client_metrics(s->p.s3), &code);
    char last[32];

    if (n == 0 || (n < SINK_WRITE_FAILS_DOWN &&
                   !s3_metrics_write_refused(s3_client_metrics(s->p.s3)))) {
        return false;
    }
    if (code == 0) {
        snprintf(last, sizeof(last), "no answer");
    } else {
        snprintf(last, sizeof(last), "status %d", code);
    }
    if (n == 1) {
        snprintf(s->write_error, sizeof(s->write_error),
                 "the last write to the bucket %s at %s was refused (%s): "
                 "a 403 is the credentials or the policy on the prefix, a "
                 "404 a missing bucket; the queues retry with backoff",
                 c->bucket, c->endpoint, last);
        return true;
    }
    snprintf(s->write_error, sizeof(s->write_error),
             "the last %" PRIu32 " writes to the bucket %s at %s failed "
             "(the last: %s); the queues retry with backoff",
             n, c->bucket, c->endpoint, last);
    return true;
}

/* The control task logs a streak of failed writes once when it begins and
 * once when a write succeeds again. */
static void sink_watch_writes(struct sink *s)
{
    pthread_mutex_lock(&s->pool->mu);
    bool down = sink_write_streak(s);
    bool was = s->is_write_down;
    s->is_write_down = down;
    pthread_mutex_unlock(&s->pool->mu);
    if (down && !was) {
        log_error("queen-s3", "%s", s->write_error);
    } else if (!down && was) {
        log_info("queen-s3", "writes to the bucket succeed again");
    }
}

/* Under s->mu: the probe's error, with the hint that fits its cause only:
 * the path style for a virtual-host name that did not resolve, the key's
 * permissions for a refusal, none for a refused connection or a timeout. */
static void sink_probe_error(struct sink *s, const struct s3_status *st,
                             const char *e)
{
    const struct sink_config *c = s->p.cfg;
    int n = snprintf(s->bucket_error, sizeof(s->bucket_error),
                     "cannot reach the bucket %s at %s (%s)", c->bucket,
                     c->endpoint, e);
    size_t used = n < 0 ? 0 : (size_t)n;

    if (used >= sizeof(s->bucket_error)) {
        return;
    }
    if (st->is_unresolved && !c->path_style) {
        snprintf(s->bucket_error + used, sizeof(s->bucket_error) - used,
                 ". The bucket goes in the host name (virtual-host style), "
                 "and %s.<host of QUEEN_S3_ENDPOINT> did not resolve: "
                 "QUEEN_S3_PATH_STYLE=true puts it in the path instead, as "
                 "most self-hosted gateways want",
                 c->bucket);
    } else if (st->is_untrusted) {
        snprintf(s->bucket_error + used, sizeof(s->bucket_error) - used,
                 ". No authority this node trusts signed %s's certificate: "
                 "QUEEN_S3_CA_FILE names a PEM file of the one that did (or "
                 "add it to the system's store)",
                 c->endpoint);
    } else if (st->region[0] != '\0' && strcmp(st->region, c->region) != 0) {
        /* AWS answers a request signed for another region 301 (or 400)
         * with the bucket's own in x-amz-bucket-region */
        snprintf(s->bucket_error + used, sizeof(s->bucket_error) - used,
                 ". The bucket is in region %s (x-amz-bucket-region), and "
                 "requests are signed for %s: set %s to %s",
                 st->region, c->region,
                 s->mtenant != NULL ? "the tenant's region" : "QUEEN_S3_REGION",
                 st->region);
    } else if (st->status == 401 || st->status == 403) {
        /* a control-plane tenant's sink has its keys from its document */
        snprintf(s->bucket_error + used, sizeof(s->bucket_error) - used,
                 ". %s must be allowed s3:PutObject, s3:GetObject and "
                 "s3:ListBucket on %s/*",
                 s->mtenant != NULL ? "The tenant's accessKey/secretKey"
                                    : "QUEEN_S3_ACCESS_KEY/_SECRET_KEY",
                 c->prefix);
    }
}

/* One LIST of one key under the prefix, for what the probe's HEAD cannot
 * say: its result, with *ls and *le its status and error. */
static int probe_list(struct sink *s, const char *key, struct s3_status *ls,
                      struct err *le)
{
    struct s3_list_req q = {key, NULL, 1};
    struct s3xml_list page;
    int rc;

    memset(&page, 0, sizeof(page));
    memset(ls, 0, sizeof(*ls));
    rc = s3_client_list_page(s->p.s3, &q, &page, ls, le);
    s3xml_list_free(&page);
    return rc;
}

static bool sink_probe(struct sink *s, int64_t now)
{
    const struct sink_config *c = s->p.cfg;
    struct s3_object_info info;
    struct s3_status st;
    struct err err = {0};
    char key[SINK_STR_MAX + 2];
    int rc;

    snprintf(key, sizeof(key), "%s/", c->prefix);
    /* One attempt: the probe's own backoff tries again after 1 s, and a
     * bucket that does not answer shows reachable=false at once rather
     * than after the client's whole retry ladder (~15 s). */
    rc = s3_client_head_once(s->p.s3, key, &info, &st, &err);
    struct s3_status ls;
    struct err le = {0};
    /* A HEAD's answer has no body to say why (a wrong QUEEN_S3_REGION is
     * answered 400): one LIST of one key names the S3 code and its
     * message, which then are the probe's error. */
    if (rc != 0 && st.status == 400 && probe_list(s, key, &ls, &le) != 0 &&
        ls.code[0] != '\0') {
        err = le;
        st = ls;
    }
    /* A HEAD of a key answers 404 alike for a missing key and a missing
     * bucket: one LIST of one key tells them apart (NoSuchBucket is
     * certain, so it is named; any other LIST answer leaves the verdict to
     * the HEAD). */
    bool no_bucket = rc == 0 && !info.found &&
                     probe_list(s, key, &ls, &le) != 0 &&
                     strcmp(ls.code, "NoSuchBucket") == 0;
    pthread_mutex_lock(&s->pool->mu);
    s->has_probed = true;
    s->checked_at_us = wall_us() / 1000 * 1000;
    if (rc == 0 && !no_bucket) {
        sink_probe_ok(s);
        return true;
    }
    s->is_reachable = false;
    if (no_bucket) {
        snprintf(s->bucket_error, sizeof(s->bucket_error),
                 "QUEEN_S3_BUCKET=%s: no such bucket at %s (NoSuchBucket); "
                 "no queue starts until it exists. Create it, or name one "
                 "that does",
                 c->bucket, c->endpoint);
    } else {
        sink_probe_error(s, &st, err.msg);
    }
    if (!s->is_stopping && (s->probe_logged_ms == 0 ||
                            now - s->probe_logged_ms >= SINK_LOG_EVERY_MS)) {
        s->probe_logged_ms = now;
        log_error_kv("queen-s3", "the bucket does not answer; retrying",
                     {"error", s->bucket_error});
    }
    pthread_mutex_unlock(&s->pool->mu);
    return false;
}

/* ---- the control task: queue set ---------------------------------------- */

static char *sink_budget_key(const struct sink *s, const char *name)
{
    struct buf key;
    struct err err = {0};

    buf_init(&key, BUF_UNLIMITED);
    if (budget_key(&key, s->p.tenant_text, name, &err) != 0) {
        buf_free(&key);
        return xstrdup(name);
    }
    char *out = xstrndup(key.data, key.len);
    buf_free(&key);
    return out;
}

static void sink_add_queue(struct sink *s, const char *name, size_t len)
{
    struct task *t;

    for (size_t i = 0; i < s->n_queues; i++) {
        if (strlen(s->queues[i]->name) == len &&
            memcmp(s->queues[i]->name, name, len) == 0) {
            return;
        }
    }
    t = xcalloc(1, sizeof(*t));
    t->name = xstrndup(name, len);
    t->bkey = sink_budget_key(s, t->name);
    t->state = Q_CLAIM;
    snprintf(t->row_state, sizeof(t->row_state), "claiming");
    t->last_t_end = STATUS_NONE;
    t->start_ms = mono_ms();
    t->jitter_ms = jitter_ms(PLACEMENT_JITTER_MS);
    t->due_ms = t->start_ms + t->jitter_ms;
    log_info_kv("queen-s3", "starting a queue task", {"queue", t->name});
    pthread_mutex_lock(&s->pool->mu);
    s->queues = xrealloc(s->queues, (s->n_queues + 1) * sizeof(struct task *));
    s->queues[s->n_queues++] = t;
    pthread_cond_broadcast(&s->pool->cv);
    pthread_mutex_unlock(&s->pool->mu);
}

/* A name `*` found that holds a NUL byte: warned about the first time,
 * and never made a task (its name would be cut at the NUL, another queue's
 * name or none, and the task for it made again at every listing). */
static void sink_skip_nul_name(struct sink *s, const char *name, size_t len)
{
    struct buf shown;
    struct err err = {0};
    uint32_t n32 = (uint32_t)len;

    for (size_t at = 0; at + 4 <= s->nul_names.len;) {
        uint32_t k;

        memcpy(&k, s->nul_names.data + at, 4);
        if (k == n32 && memcmp(s->nul_names.data + at + 4, name, len) == 0) {
            return;
        }
        at += 4 + k;
    }
    if (buf_reserve(&s->nul_names, 4 + len, &err) != 0) {
        return; /* over the cap: not kept, so warned about again */
    }
    (void)buf_append(&s->nul_names, &n32, 4, &err); /* room reserved */
    (void)buf_append(&s->nul_names, name, len, &err);
    buf_init(&shown, BUF_UNLIMITED);
    /* The name as JSON escapes it (the NUL as \u0000), without the quotes
     * json_escape adds: the log line quotes its values itself. */
    if (json_escape(&shown, name, len, &err) == 0 && shown.len >= 2) {
        shown.data[shown.len - 1] = '\0';
        log_warn_kv("queen-s3",
                    "a queue name holds a NUL byte, which the sink cannot "
                    "mirror; the queue is skipped",
                    {"queue", shown.data + 1});
    }
    buf_free(&shown);
}

static void sink_list_queues(struct sink *s)
{
    const struct sink_config *c = s->p.cfg;
    struct store_queue_list l;
    struct err err = {0};

    if (!c->all_queues) {
        for (size_t i = 0; i < c->n_queues; i++) {
            sink_add_queue(s, c->queues[i], strlen(c->queues[i]));
        }
        return;
    }
    memset(&l, 0, sizeof(l));
    if (s->p.broker->list_queues(s->p.broker->arg, s->p.tenant, &l, &err) !=
        0) {
        log_warn_kv("queen-s3",
                    "cannot list the queues; keeping the set this node "
                    "already has",
                    {"error", err.msg});
        return;
    }
    for (size_t i = 0; i < l.n; i++) {
        struct slice nm = l.queues[i].name;

        if (memchr(nm.ptr, '\0', nm.len) != NULL) {
            sink_skip_nul_name(s, nm.ptr, nm.len);
        } else {
            sink_add_queue(s, nm.ptr, nm.len);
        }
    }
    store_queue_list_free(&l);
}

/* ---- the control task: presence row ------------------------------------- */

/* A fresh presence row for this run: key, incarnation, sinceMs. */
static int sink_presence_init(struct sink *s, struct err *err)
{
    struct buf b;
    const char *inst = s->p.node->instance;
    int rc;

    buf_init(&b, sizeof(s->presence_key) - 1);
    rc = layout_presence_key(&b, s->p.cfg->sink,
                             (struct slice){inst, strlen(inst)}, err);
    if (rc == 0) {
        memcpy(s->presence_key, b.data, b.len + 1);
    }
    buf_free(&b);
    lease_new_incarnation(NULL, NULL, s->presence_incarnation);
    s->presence_since_ms = wall_us() / 1000;
    return rc == 0 ? 0 : err_wrap(err, "presence row");
}

/* Under s->mu: how many queues this node owns, and its fair share. */
static uint32_t sink_held(const struct sink *s)
{
    uint32_t held = 0;

    for (size_t i = 0; i < s->n_queues; i++) {
        held += s->queues[i]->owned_here ? 1 : 0;
    }
    return held;
}

static uint32_t sink_share(const struct sink *s)
{
    return placement_fair_share((uint32_t)s->n_queues, s->nodes);
}

/* The beat (docs/design/protocol.md §4): put the presence row, count the rows.
 * Returns the delay to the next beat: the period, or min(1 s << (failures - 1),
 * period). */
static int64_t sink_beat(struct sink *s, int64_t now)
{
    int64_t period = placement_period_ms(ttl_ms(s));
    struct placement_presence pp = {
        s->p.cfg->sink,       s->p.node->instance, s->presence_incarnation,
        s->presence_since_ms, ttl_ms(s),           {0}};
    struct err err = {0};
    uint32_t nodes = 1;

    memcpy(pp.tenant, s->p.tenant, 16);
    if (placement_beat(s->p.broker, &pp, &nodes, &err) == 0) {
        s->beat_failures = 0;
        pthread_mutex_lock(&s->pool->mu);
        s->nodes = nodes;
        pthread_mutex_unlock(&s->pool->mu);
        return period;
    }
    s->beat_failures++;
    if (s->beat_logged_ms == 0 ||
        now - s->beat_logged_ms >= SINK_LOG_EVERY_MS) {
        s->beat_logged_ms = now;
        log_warn_kv("queen-s3",
                    "cannot write this node's presence row; retrying",
                    {"error", err.msg});
    }
    int shift = s->beat_failures > 16 ? 15 : s->beat_failures - 1;
    int64_t wait = (int64_t)1000 << shift;
    return wait < period ? wait : period;
}

static struct task *sink_find(struct sink *s, const char *name)
{
    for (size_t i = 0; i < s->n_queues; i++) {
        if (strcmp(s->queues[i]->name, name) == 0) {
            return s->queues[i];
        }
    }
    return NULL;
}

/* Under s->mu: run placement_decide() over the owned queues; a give-back
 * asks that queue's task to drain. Returns the verdict. */
static enum placement_verdict sink_decide_locked(struct sink *s, int64_t now)
{
    struct placement_held *held = xcalloc(s->n_queues + 1, sizeof(*held));
    struct placement_input in;
    size_t n = 0;

    for (size_t i = 0; i < s->n_queues; i++) {
        const struct task *t = s->queues[i];

        if (t->owned_here) {
            held[n].name = (struct slice){t->name, strlen(t->name)};
            held[n++].buffered = t->has_snap ? t->snap.buffered_bytes : 0;
        }
    }
    const struct task *g = s->pl.is_giving ? sink_find(s, s->pl.giving) : NULL;
    memset(&in, 0, sizeof(in));
    in.now_ms = now;
    in.ttl_ms = ttl_ms(s);
    in.share = sink_share(s);
    in.held = held;
    in.n_held = n;
    in.giving_held_by_other = g != NULL && g->holder[0] != '\0';
    enum placement_verdict v = placement_decide(&s->pl, &in);
    free(held);
    if (v == PLACEMENT_GIVE_BACK) {
        struct task *t = sink_find(s, s->pl.giving);
        ASSERT(t != NULL);
        t->is_give_back_asked = true;
        sink_poke(s, t, now);
    }
    return v;
}

static void sink_decide(struct sink *s, int64_t now)
{
    char name[sizeof(s->pl.giving)];
    uint32_t held;
    uint32_t share;
    uint32_t nodes;
    size_t queues;

    pthread_mutex_lock(&s->pool->mu);
    enum placement_verdict v = sink_decide_locked(s, now);
    snprintf(name, sizeof(name), "%s", s->pl.giving);
    held = sink_held(s);
    share = sink_share(s);
    nodes = s->nodes;
    queues = s->n_queues;
    pthread_mutex_unlock(&s->pool->mu);
    if (v == PLACEMENT_GIVE_BACK) {
        log_info_kv("queen-s3",
                    "this node holds more than its share: giving one queue "
                    "back",
                    {"queue", name}, {"held", LOG_U64(held)},
                    {"share", LOG_U64(share)}, {"nodes", LOG_U64(nodes)},
                    {"queues", LOG_U64(queues)});
    } else if (v == PLACEMENT_TAKEN_OVER) {
        log_info_kv("queen-s3", "the queue given back is held by another node",
                    {"queue", name});
    } else if (v == PLACEMENT_NOBODY_TOOK) {
        log_info_kv("queen-s3",
                    "no node took the queue given back within a TTL; moving on",
                    {"queue", name});
    }
}

/* ---- the control task ---------------------------------------------------- */

static bool sink_queues_ended(struct sink *s)
{
    bool ended = true;

    pthread_mutex_lock(&s->pool->mu);
    for (size_t i = 0; i < s->n_queues; i++) {
        ended = ended && s->queues[i]->is_done;
    }
    pthread_mutex_unlock(&s->pool->mu);
    return ended;
}

/* Every queue ended: the presence row goes (docs/design/protocol.md §4). */
static void sink_presence_delete(struct sink *s)
{
    if (s->has_set && s->presence_key[0] != '\0') {
        lease_delete_if_ours(s->p.broker, s->p.tenant, s->presence_key,
                             s->presence_incarnation, "presence row", NULL);
    }
}

static int64_t sink_control_stop(struct sink *s, int64_t now)
{
    if (!sink_queues_ended(s)) {
        return now + SINK_STOP_POLL_MS;
    }
    pthread_mutex_lock(&s->pool->mu);
    size_t n_cut = s->n_cut;
    bool is_late = now >= s->stop_deadline_ms;
    pthread_mutex_unlock(&s->pool->mu);
    if (is_late) {
        /* past the deadline the KV seam is about to close: the row
         * expires with its TTL, as the cut queues' leases do */
        log_warn("queen-s3",
                 "the sink has stopped; %zu queues were not drained, and "
                 "their leases and this node's presence row expire after "
                 "their TTL",
                 n_cut);
    } else {
        sink_presence_delete(s);
        log_info("queen-s3", "every queue drained; the sink has stopped");
    }
    pthread_mutex_lock(&s->pool->mu);
    s->control.is_done = true;
    s->is_stopped = true;
    s->pool->is_exiting = s->pool->is_exiting || s->owns_pool;
    pthread_cond_broadcast(&s->pool->cv);
    pthread_mutex_unlock(&s->pool->mu);
    return now;
}

/* The control task failed: the run ends (its queues drain first). */
static int64_t sink_run_failed(struct sink *s, int64_t now, const char *why)
{
    pthread_mutex_lock(&s->pool->mu);
    s->run = RUN_ENDING;
    snprintf(s->run_error, sizeof(s->run_error), "%s", why);
    for (size_t i = 0; i < s->n_queues; i++) {
        s->queues[i]->due_ms = now;
    }
    pthread_cond_broadcast(&s->pool->cv);
    pthread_mutex_unlock(&s->pool->mu);
    return now;
}

int64_t sink_restart_backoff(int64_t *ladder_ms, int64_t run_ms)
{
    if (run_ms >= SINK_HEALTHY_RUN_MS || *ladder_ms < SINK_LADDER_MIN_MS) {
        *ladder_ms = SINK_LADDER_MIN_MS;
    }
    int64_t wait = *ladder_ms;
    *ladder_ms = wait * 2 > SINK_LADDER_MAX_MS ? SINK_LADDER_MAX_MS : wait * 2;
    return wait;
}

/* ENDING: once every queue ended, back off before the next run. */
static int64_t sink_run_ending(struct sink *s, int64_t now)
{
    if (!sink_queues_ended(s)) {
        return now + SINK_STOP_POLL_MS;
    }
    sink_presence_delete(s);
    pthread_mutex_lock(&s->pool->mu);
    int64_t wait = sink_restart_backoff(&s->ladder_ms, now - s->run_started_ms);
    s->run = RUN_BACKOFF;
    s->backoff_ms = wait;
    s->backoff_until_ms = now + wait;
    s->restarts++;
    snprintf(s->last_exit, sizeof(s->last_exit),
             "the sink returned without being stopped");
    pthread_mutex_unlock(&s->pool->mu);
    log_error_kv("queen-s3", "an in-process S3 sink stopped; restarting it",
                 {"backoff_ms", LOG_I64(wait)}, {"error", s->run_error});
    return now + wait;
}

/* BACKOFF elapsed: a new run over the same queue tasks. */
static void sink_run_restart(struct sink *s, int64_t now)
{
    pthread_mutex_lock(&s->pool->mu);
    for (size_t i = 0; i < s->n_queues; i++) {
        struct task *t = s->queues[i];

        t->state = Q_CLAIM;
        t->is_done = false;
        t->start_ms = now;
        t->due_ms = now + t->jitter_ms;
    }
    memset(&s->pl, 0, sizeof(s->pl));
    s->run = RUN_RUNNING;
    s->run_started_ms = now;
    s->backoff_ms = 0;
    s->has_set = false;
    s->needs_probe = true;
    s->beat_due_ms = now;
    pthread_cond_broadcast(&s->pool->cv);
    pthread_mutex_unlock(&s->pool->mu);
}

/* The bucket probe with its backoff; true once the bucket answered. */
static bool sink_control_probe(struct sink *s, int64_t now, int64_t *next)
{
    if (s->is_reachable && !s->needs_probe) {
        return true;
    }
    if (!sink_probe(s, now)) {
        int64_t wait = s->probe_wait_ms;

        s->probe_wait_ms = s->probe_wait_ms * 2 > SINK_PROBE_MAX_MS
                               ? SINK_PROBE_MAX_MS
                               : s->probe_wait_ms * 2;
        *next = now + wait / 2 + jitter_ms(wait / 2 + 1);
        return false;
    }
    s->probe_wait_ms = SINK_PROBE_MIN_MS;
    s->needs_probe = false;
    return true;
}

static void sink_relist(struct sink *s, int64_t now)
{
    uint64_t every = 10 * s->p.node->discovery_interval_ms;

    sink_list_queues(s);
    s->relist_due_ms = now + (int64_t)(every < 1000 ? 1000 : every);
}

/* The presence row is written and N known: the queue tasks that waited
 * for it claim from now on, each after its jitter. */
static void sink_set_up(struct sink *s, int64_t now)
{
    pthread_mutex_lock(&s->pool->mu);
    s->has_set = true;
    for (size_t i = 0; i < s->n_queues; i++) {
        struct task *t = s->queues[i];

        /* a task being stepped now sees has_set at its next step */
        if (!t->is_running && !t->is_done && t->state == Q_CLAIM) {
            t->start_ms = now; /* the claim pacing counts from here */
            t->due_ms = now + t->jitter_ms;
        }
    }
    pthread_cond_broadcast(&s->pool->cv);
    pthread_mutex_unlock(&s->pool->mu);
}

/* RUNNING: queue set, probe, presence, beats and give-backs. 0, or the
 * error that ends the run. */
static int sink_control_run(struct sink *s, int64_t now, int64_t *next,
                            struct err *err)
{
    if (s->p.run_check != NULL && s->p.run_check(s->p.run_check_arg, err)) {
        return err->code != 0 ? err->code : ERR_IO;
    }
    /* The queue set does not need the bucket: its rows show in /status
     * while the probe still fails, and their tasks wait for the set-up
     * below before they claim (task_step). */
    if (!s->has_listed || (s->p.cfg->all_queues && now >= s->relist_due_ms)) {
        s->has_listed = true;
        sink_relist(s, now);
    }
    if (!sink_control_probe(s, now, next)) {
        if (s->p.cfg->all_queues && s->relist_due_ms < *next) {
            *next = s->relist_due_ms;
        }
        return 0;
    }
    sink_watch_writes(s);
    if (!s->has_set) {
        if (sink_presence_init(s, err) != 0) {
            return err->code;
        }
        /* The first beat before the first claim: N is known when the
         * queue tasks ask for their turn. */
        s->beat_due_ms = now + sink_beat(s, now);
        sink_set_up(s, now);
    }
    if (now >= s->beat_due_ms) {
        s->beat_due_ms = now + sink_beat(s, now);
        sink_decide(s, now);
    }
    *next = s->beat_due_ms;
    if (s->p.cfg->all_queues && s->relist_due_ms < *next) {
        *next = s->relist_due_ms;
    }
    return 0;
}

static int64_t sink_control_step(struct sink *s, int64_t now)
{
    struct err err = {0};
    int64_t next = now;

    /* s->run is written by this task alone; is_stopping by sink_stop(),
     * from any thread, under s->mu. */
    pthread_mutex_lock(&s->pool->mu);
    bool is_stopping = s->is_stopping;
    pthread_mutex_unlock(&s->pool->mu);
    if (is_stopping) {
        return sink_control_stop(s, now);
    }
    if (s->run == RUN_ENDING) {
        return sink_run_ending(s, now);
    }
    if (s->run == RUN_BACKOFF) {
        if (now < s->backoff_until_ms) {
            return s->backoff_until_ms;
        }
        sink_run_restart(s, now);
    }
    if (s->run == RUN_STARTING) {
        pthread_mutex_lock(&s->pool->mu);
        s->run = RUN_RUNNING;
        s->run_started_ms = now;
        pthread_mutex_unlock(&s->pool->mu);
    }
    if (sink_control_run(s, now, &next, &err) != 0) {
        log_error_kv("queen-s3", "the sink's control task failed",
                     {"error", err.msg});
        return sink_run_failed(s, now, err.msg);
    }
    return next;
}

/* ---- queue tasks ------------------------------------------------------------
 */

static void task_error(struct sink *s, struct task *t, const char *msg)
{
    pthread_mutex_lock(&s->pool->mu);
    snprintf(t->last_error, sizeof(t->last_error), "%s", msg);
    t->last_error_us = wall_us();
    pthread_mutex_unlock(&s->pool->mu);
}

static void task_set_state(struct sink *s, struct task *t, const char *state,
                           const char *held_by)
{
    pthread_mutex_lock(&s->pool->mu);
    snprintf(t->row_state, sizeof(t->row_state), "%s", state);
    snprintf(t->held_by, sizeof(t->held_by), "%s",
             held_by == NULL ? "" : held_by);
    t->owned_here =
        strcmp(state, "held") != 0 && held_by == NULL && t->state == Q_OWNED;
    if (held_by != NULL) {
        t->has_snap = false; /* held_by clears the run's gauges */
    }
    pthread_mutex_unlock(&s->pool->mu);
}

/* A uniform draw in [0, 1) for the driver's backoff jitter: random() is
 * thread-safe in glibc, and sink_new seeded it. */
static double unit_random(void *arg)
{
    UNUSED(arg);
    return (double)random() / ((double)RAND_MAX + 1.0);
}

void sink_driver_config(const struct sink_params *p, const char *queue,
                        struct driver_config *d)
{
    const struct sink_config *c = p->cfg;
    const struct sink_node_config *n = p->node;

    driver_config_defaults(d);
    d->sink = c->sink;
    d->prefix = c->prefix;
    memcpy(d->tenant, p->tenant, 16);
    d->tenant_text = p->tenant_text;
    d->log_tenant = p->metrics_tenant;
    d->queue = queue;
    d->format = c->format == SINK_FORMAT_PARQUET ? DRIVER_FORMAT_PARQUET
                                                 : DRIVER_FORMAT_JSONL;
    d->compression = sink_config_compression_name(c);
    d->per_partition = c->layout == LAYOUT_PER_PARTITION;
    d->align = (int)c->align;
    d->start = (int)c->start;
    d->target_bytes = c->target_bytes;
    d->max_window_ms = (int64_t)c->max_window_ms;
    d->guard_ms = (int64_t)n->safe_guard_ms;
    d->checkpoint_every = (uint32_t)n->checkpoint_every;
    d->fetch_concurrency = (uint32_t)n->fetch_concurrency;
    d->discovery_interval_ms = (uint32_t)n->discovery_interval_ms;
    d->crash_at = (enum driver_crash)n->crash_at;
    d->overlap_upload = true; /* the next window reads while one goes up */
    d->max_buffer_bytes = n->memory_bytes;
    d->random = unit_random; /* nodes that failed together retry apart */
    d->random_arg = NULL;
}

/* Under s->mu: held >= share. */
static bool sink_at_or_above(const struct sink *s)
{
    return placement_at_or_above(sink_held(s), sink_share(s));
}

/* The queue stopped running here for a reason of this node's own (its lease
 * expired or aged out here, the broker refused it) and its claim then failed
 * with no other instance known to hold it: nobody mirrors it, so it goes
 * back into the health verdict with the lag it had at the fence, growing
 * with the clock (health.h (2)), until a claim takes it again or finds its
 * holder (docs/design/window.md §13). A fence alone strands nothing: after
 * a failover the claim finds the new holder, and the queue never turns this
 * node red. */
static void task_strand(struct sink *s, struct task *t, int64_t now)
{
    if (!t->strand.is_set && !t->is_stranded) {
        return; /* not run here, or stopped for another reason */
    }
    if (t->is_missing) {
        health_forget(s->health, t->name);
        return;
    }
    health_watch(s->health, t->name, now);
    pthread_mutex_lock(&s->pool->mu);
    if (t->strand.is_set) {
        health_report(s->health, t->name, true,
                      (int64_t)t->strand.lag_ms * 1000, t->strand.at_ms);
        t->has_lag_base = t->strand.has_ct;
        t->lag_base_ct = t->strand.ct;
        t->strand.is_set = false;
    }
    t->is_stranded = true;
    pthread_mutex_unlock(&s->pool->mu);
}

/* Under s->mu: none of the queue's lag stays here; its gauges go. */
static void task_drop_lag(struct sink *s, struct task *t)
{
    t->is_stranded = false;
    t->has_lag_base = false;
    obs_queue_stopped(s->pool->obs, s->mtenant, t->name);
}

/* The queue is no longer stranded here: out of the verdict, its gauges
 * gone (the sink winds down). */
static void task_unstrand(struct sink *s, struct task *t)
{
    t->strand.is_set = false;
    pthread_mutex_lock(&s->pool->mu);
    bool was = t->is_stranded;
    if (was) {
        task_drop_lag(s, t);
    }
    pthread_mutex_unlock(&s->pool->mu);
    if (was) {
        health_forget(s->health, t->name);
    }
}

/* Another instance holds the lease: say so, look again later. */
static int64_t task_held(struct sink *s, struct task *t, const char *other,
                         int64_t now)
{
    pthread_mutex_lock(&s->pool->mu);
    bool is_new = strcmp(other, t->holder) != 0;
    snprintf(t->holder, sizeof(t->holder), "%s", other);
    task_drop_lag(s, t); /* its owner reports its lag now */
    pthread_mutex_unlock(&s->pool->mu);
    t->strand.is_set = false;
    if (is_new) { /* logged when the owner changes, not at every look */
        log_info_kv("queen-s3",
                    "another node owns this queue; claiming again after the "
                    "lease TTL",
                    {"queue", t->name}, {"held_by", other});
    }
    task_set_state(s, t, "held", other);
    health_forget(s->health, t->name);
    lease_free(t->lease);
    t->lease = NULL;
    pthread_mutex_lock(&s->pool->mu);
    bool above = sink_at_or_above(s);
    pthread_mutex_unlock(&s->pool->mu);
    return now + placement_held_wait_ms(ttl_ms(s), above,
                                        jitter_ms(PLACEMENT_JITTER_MS));
}

/* wait_turn (docs/design/protocol.md §4) for a free queue: reserve a load slot;
 * keep it and return true when the claim is due, else give it back and set
 * *due. */
static bool task_turn(struct sink *s, struct task *t, int64_t now, int64_t *due)
{
    struct placement_claim c;

    pthread_mutex_lock(&s->pool->mu);
    memset(&c, 0, sizeof(c));
    c.task_start_ms = t->start_ms;
    c.jitter_ms = t->jitter_ms;
    c.before = s->pool->load++;
    c.ttl_ms = ttl_ms(s);
    c.gave_back = t->has_gave_back && now - t->gave_back_at_ms < 2 * ttl_ms(s);
    c.gave_back_at_ms = t->gave_back_at_ms;
    c.at_or_above = sink_at_or_above(s);
    *due = placement_claim_due(&c);
    if (now < *due) {
        s->pool->load--;
    }
    pthread_mutex_unlock(&s->pool->mu);
    return now >= *due;
}

static void task_load(struct sink *s, int delta)
{
    pthread_mutex_lock(&s->pool->mu);
    ASSERT(delta > 0 || s->pool->load > 0);
    s->pool->load = (uint32_t)((int64_t)s->pool->load + delta);
    pthread_mutex_unlock(&s->pool->mu);
}

/* A failed holder read or claim: warn, retry later (docs/design/protocol.md
 * §7). */
static int64_t task_claim_failed(struct sink *s, struct task *t, int64_t now,
                                 int rc, const struct err *err)
{
    char msg[300];

    t->claim_failures++;
    log_warn_kv("queen-s3", "cannot claim the queue lease; retrying",
                {"queue", t->name}, {"error", err->msg});
    snprintf(msg, sizeof(msg), "lease claim: %s", err->msg);
    task_error(s, t, msg);
    if (t->holder[0] == '\0') { /* nobody else known to run it */
        task_strand(s, t, now);
    }
    return now + placement_claim_retry_ms(
                     t->claim_failures, sink_broker_kv_retriable(rc), -1,
                     jitter_ms(PLACEMENT_JITTER_MS), ttl_ms(s));
}

static struct lease *task_lease(struct sink *s, struct task *t, struct err *err)
{
    struct lease_config lc;

    memset(&lc, 0, sizeof(lc));
    lc.sink = s->p.cfg->sink;
    lc.queue = t->name;
    lc.instance = s->p.node->instance;
    memcpy(lc.tenant, s->p.tenant, 16);
    lc.ttl_ms = ttl_ms(s);
    return lease_new(&lc, s->p.broker, err);
}

/* The lease is ours: start the driver, hand the lease to the refresher. */
static int64_t task_own(struct sink *s, struct task *t, int64_t now)
{
    struct err err = {0};

    sink_driver_config(&s->p, t->name, &t->dc);
    t->dc.is_quiet_restore = t->is_missing;
    t->dc.stages = obs_stages(s->pool->obs);
    t->dc.spares = &s->pool->spares;
    t->drv = driver_new(&t->dc, s->p.broker, s->p.s3, t->lease, &err);
    if (t->drv == NULL) {
        log_error_kv("queen-s3", "cannot start the queue", {"queue", t->name},
                     {"error", err.msg});
        task_error(s, t, err.msg);
        lease_release(t->lease);
        lease_free(t->lease);
        t->lease = NULL;
        task_load(s, -1);
        return now + SINK_TERMINAL_RETRY_MS;
    }
    /* Not "owns the queue" before the queue is known to exist: a queue
     * that was missing at the last look is taken quietly (log.h). */
    if (t->is_missing) {
        log_debug_kv("queen-s3", "took the lease of a queue missing so far",
                     {"queue", t->name}, {"instance", s->p.node->instance});
    } else {
        log_info_kv("queen-s3", "took the queue lease; starting it",
                    {"queue", t->name}, {"instance", s->p.node->instance});
    }
    t->state = Q_OWNED;
    /* A queue missing at the last look is watched once it is found to
     * exist (task_publish): a bucket outage while it restores must not
     * make a queue that does not exist the stale one of the verdict
     * (docs/design/protocol.md §8: a missing queue is forgotten). */
    if (!t->is_missing) {
        health_watch(s->health, t->name, now);
    }
    t->is_drain_asked = false;
    t->is_giving_back = false;
    pthread_mutex_lock(&s->pool->mu);
    t->is_give_back_asked = false;
    t->is_stranded = false;
    t->strand.is_set = false;
    s->n_owned++;
    s->pool->n_owned++;
    pthread_mutex_unlock(&s->pool->mu);
    task_set_state(s, t, "restoring", NULL);
    refresh_share(s, t, now);
    return now;
}

/* Claim: holder, our turn, then acquire. Returns the next due time. */
static int64_t task_claim(struct sink *s, struct task *t, int64_t now)
{
    struct err err = {0};
    enum lease_holder_kind kind;
    char other[SINK_STR_MAX] = "";
    bool taken = false;
    int64_t due = now;
    int rc;

    if (t->lease == NULL) {
        t->lease = task_lease(s, t, &err);
    }
    if (t->lease == NULL) {
        log_error_kv("queen-s3", "cannot start the queue", {"queue", t->name},
                     {"error", err.msg});
        task_error(s, t, err.msg);
        task_set_state(s, t, "failed", NULL);
        /* failed, so watched: red once past the limit, as a queue failed
         * by its driver (docs/design/protocol.md §8) */
        health_watch(s->health, t->name, now);
        return now + SINK_TERMINAL_RETRY_MS;
    }
    task_set_state(s, t, "claiming", NULL);
    rc = lease_holder(t->lease, &kind, other, sizeof(other), &err);
    if (rc != 0) {
        return task_claim_failed(s, t, now, rc, &err);
    }
    if (kind == LEASE_OTHER) {
        return task_held(s, t, other, now);
    }
    pthread_mutex_lock(&s->pool->mu);
    t->holder[0] = '\0';
    pthread_mutex_unlock(&s->pool->mu);
    /* Our own row is a restart within the TTL (claim at once), unless
     * this node gave the queue back and its release did not land: then the
     * cooldown holds as for a free row, or the queue would come straight
     * back. */
    bool cooling = t->has_gave_back && now - t->gave_back_at_ms < 2 * ttl_ms(s);
    if ((kind == LEASE_FREE || cooling) && !task_turn(s, t, now, &due)) {
        return now + placement_claim_sleep_ms(due, now, ttl_ms(s));
    }
    if (kind == LEASE_MINE && !cooling) {
        task_load(s, 1);
    }
    rc = lease_acquire(t->lease, wall_us() / 1000, &taken, other, sizeof(other),
                       &err);
    if (rc != 0 || !taken) {
        task_load(s, -1);
        return rc != 0 ? task_claim_failed(s, t, now, rc, &err)
                       : task_held(s, t, other, now);
    }
    t->claim_failures = 0;
    return task_own(s, t, now);
}

static void task_report(struct sink *s, struct task *t,
                        const struct driver_status *st);

static void task_publish(struct sink *s, struct task *t, int64_t now)
{
    struct driver_status st;

    driver_status(t->drv, &st);
    if (t->is_missing && st.has_complete_through) {
        log_info_kv("queen-s3", "the queue exists now; running it",
                    {"queue", t->name});
        t->is_missing = false;
        t->missing_looks = 0;
        health_watch(s->health, t->name, now); /* see task_own */
    }
    task_report(s, t, &st);
    /* docs/design/window.md §12: over the node's budget and the largest: close
     * early. The partitions' own bytes count too (issue 13 item 8); a close
     * frees records only, so a queue with none buffered is not asked. */
    if (budget_report(s->pool->budget, t->bkey,
                      st.buffered_bytes + st.partition_bytes) &&
        st.buffered_bytes > 0) {
        driver_force_close(t->drv);
    }
    pthread_mutex_lock(&s->pool->mu);
    t->snap = st;
    t->has_snap = true;
    if (st.has_lag && st.has_complete_through) {
        t->has_lag_base = true;
        t->lag_base_ct = st.complete_through;
    }
    snprintf(t->row_state, sizeof(t->row_state), "%s", st.state);
    t->owned_here = true;
    t->held_by[0] = '\0';
    if (st.last_error[0] != '\0' && strcmp(st.last_error, t->last_error) != 0) {
        snprintf(t->last_error, sizeof(t->last_error), "%s", st.last_error);
        t->last_error_us = wall_us();
    }
    pthread_mutex_unlock(&s->pool->mu);
}

/* A missing queue: logged at its first look, then at most every
 * SINK_MISSING_LOG_MS with the looks in between (docs/design/protocol.md
 * §8). */
static void task_log_missing(struct task *t, int64_t now)
{
    t->missing_looks++;
    if (t->is_missing && now - t->missing_logged_ms < SINK_MISSING_LOG_MS) {
        return;
    }
    log_info_kv("queen-s3",
                "the queue does not exist; looking again until it "
                "does",
                {"queue", t->name},
                {"retry_in_s", LOG_I64(SINK_MISSING_RETRY_MS / 1000)},
                {"looks", LOG_U64(t->missing_looks)});
    t->is_missing = true;
    t->missing_logged_ms = now;
    t->missing_looks = 0;
}

/* The stop's log line and row error (docs/design/protocol.md §8); "queue
 * drained" is the driver's own line. */
static void task_log_stop(struct sink *s, struct task *t,
                          const struct driver_next *nx, int64_t now)
{
    if (nx->stop == DRIVER_CRASHED) {
        log_error_kv("queen-s3", "crash point fired", {"queue", t->name},
                     {"at", nx->why});
        task_error(s, t, "crash point fired");
    } else if (nx->stop == DRIVER_FENCED) {
        log_warn_kv("queen-s3", "queue fenced", {"queue", t->name},
                    {"why", nx->why});
        task_error(s, t, nx->why);
    } else if (nx->stop == DRIVER_MISSING) {
        task_log_missing(t, now);
    } else if (nx->stop == DRIVER_FAILED) {
        log_error_kv("queen-s3",
                     "queue stopped; it will be tried again in case the cause "
                     "was fixed",
                     {"queue", t->name}, {"why", nx->why});
        task_error(s, t, nx->why);
    }
}

/* Under s->mu: fold this run's counters into the task's base. */
static void task_fold(struct task *t)
{
    struct driver_counters *b = &t->base;
    struct driver_counters *c = &t->snap.counters;

    b->windows_committed += c->windows_committed;
    b->records += c->records;
    b->bytes_jsonl += c->bytes_jsonl;
    b->bytes_parquet += c->bytes_parquet;
    b->records_lost += c->records_lost;
    b->fetch_ok += c->fetch_ok;
    b->fetch_error += c->fetch_error;
    b->commit_precondition_lost += c->commit_precondition_lost;
    b->checkpoints_written += c->checkpoints_written;
    t->last_k = t->snap.committed_k;
    t->last_t_end = t->snap.has_t_end ? t->snap.t_end : STATUS_NONE;
    memset(c, 0, sizeof(*c));
    memset(&t->reported, 0, sizeof(t->reported));
}

/* The queue no longer runs here: its row, gauges, load slot and, with the
 * last one, safe_lag_seconds (docs/design/observability.md §2); a give-back in
 * flight learns the lease is back. */
static void task_unown(struct sink *s, struct task *t, const char *state,
                       int64_t now)
{
    pthread_mutex_lock(&s->pool->mu);
    task_fold(t);
    t->has_snap = false;
    /* a failed or stranded queue keeps its lag, growing
     * (docs/design/protocol.md §8) */
    t->has_lag_base =
        t->has_lag_base && (strcmp(state, "failed") == 0 || t->is_stranded);
    t->owned_here = false;
    snprintf(t->row_state, sizeof(t->row_state), "%s", state);
    ASSERT(s->n_owned > 0 && s->pool->load > 0);
    s->n_owned--;
    s->pool->n_owned--;
    s->pool->load--;
    obs_queue_stopped(s->pool->obs, s->mtenant, t->name);
    if (s->pool->n_owned == 0) {
        obs_gauge_remove(s->pool->obs, OBS_SAFE_LAG_SECONDS, NULL, NULL);
    }
    if (s->pl.is_giving && strcmp(s->pl.giving, t->name) == 0) {
        placement_on_released(&s->pl, now);
    }
    pthread_mutex_unlock(&s->pool->mu);
}

/* A drain asked by a give-back ended: count it, claim again after the
 * cooldown. */
static int64_t task_gave_back(struct sink *s, struct task *t, int64_t now)
{
    obs_counter_add(s->pool->obs, OBS_QUEUES_GIVEN_BACK, s->mtenant, NULL, NULL,
                    1);
    log_info_kv("queen-s3",
                "gave the queue back so a node below its fair share can take "
                "it",
                {"queue", t->name});
    t->has_gave_back = true;
    t->gave_back_at_ms = now;
    return now + placement_claim_sleep_ms(now + 2 * ttl_ms(s), now, ttl_ms(s));
}

/* The health watch after a stop (docs/design/protocol.md §8): a failed queue
 * stays watched; any other is forgotten, and one fenced for a reason of
 * this node's own keeps its lag for task_strand. */
static void task_stop_watch(struct sink *s, struct task *t,
                            const struct driver_next *nx, bool is_down,
                            int64_t now)
{
    uint64_t lag_ms = 0;

    if (nx->stop == DRIVER_FAILED) {
        return;
    }
    t->strand.is_set = nx->stop == DRIVER_FENCED && !is_down &&
                       lease_lost_cause(t->lease) != LEASE_LOST_TAKEN &&
                       health_lag(s->health, t->name, now, &lag_ms);
    t->strand.lag_ms = lag_ms;
    t->strand.at_ms = now;
    pthread_mutex_lock(&s->pool->mu);
    t->strand.has_ct = t->has_lag_base;
    t->strand.ct = t->lag_base_ct;
    pthread_mutex_unlock(&s->pool->mu);
    health_forget(s->health, t->name);
}

/* The driver stopped: release, keep its counters, decide by reason. */
static int64_t task_stopped(struct sink *s, struct task *t, int64_t now,
                            const struct driver_next *nx, bool is_down)
{
    bool gave_back =
        nx->stop == DRIVER_DRAINED && t->is_giving_back && !is_down;
    int64_t wait = 0;

    /* the reason first, before the release (which retries for up to
     * LEASE_RELEASE_BUDGET when the KV fails): a status read meanwhile
     * would show the row stopped without it (or with the one before) */
    task_log_stop(s, t, nx, now);
    refresh_unshare(s, t);
    lease_release(t->lease);
    task_stop_watch(s, t, nx, is_down, now);
    task_unown(s, t, gave_back ? "released" : driver_stop_name(nx->stop), now);
    budget_forget(s->pool->budget, t->bkey);
    driver_free(t->drv);
    t->drv = NULL;
    lease_free(t->lease);
    t->lease = NULL;
    t->state = Q_CLAIM;
    switch (nx->stop) {
    case DRIVER_DRAINED:
        if (gave_back) {
            return task_gave_back(s, t, now);
        }
        t->state = Q_ENDED;
        return now;
    case DRIVER_CRASHED:
        t->state = Q_ENDED;
        return now;
    case DRIVER_FENCED:
        wait = ttl_ms(s);
        break;
    case DRIVER_MISSING:
        wait = SINK_MISSING_RETRY_MS;
        break;
    default:
        wait = SINK_TERMINAL_RETRY_MS;
        break;
    }
    return now + wait;
}

/* Stopping, or the run ending: no new claims, owned queues drain. */
static bool sink_winding_down(struct sink *s)
{
    pthread_mutex_lock(&s->pool->mu);
    bool v = s->is_stopping || s->run == RUN_ENDING;
    pthread_mutex_unlock(&s->pool->mu);
    return v;
}

/* Under s->mu: name t as not drained, once. */
static void task_log_cut(struct task *t, const char *state, int64_t k)
{
    if (t->is_cut_logged) {
        return;
    }
    t->is_cut_logged = true;
    log_warn("queen-s3",
             "queue not drained: the shutdown grace is used up; the next "
             "owner redoes its open window from the intent after the lease "
             "TTL queue=%s state=%s k=%" PRId64,
             t->name, state, k);
}

/* Past the stop's deadline with the queue still draining: give up the
 * window in flight. Whatever it reached is safe (docs/design/protocol.md
 * §6.5: the intent makes the next owner redo it) and nothing more of it is
 * written: the S3 client sends nothing now, and the lease is not released
 * (the broker is about to close the KV seam) but left to expire. */
static int64_t task_cut(struct sink *s, struct task *t, int64_t now)
{
    struct driver_status st;

    driver_status(t->drv, &st);
    refresh_unshare(s, t);
    pthread_mutex_lock(&s->pool->mu);
    task_log_cut(t, st.state, st.k);
    s->n_cut++;
    pthread_mutex_unlock(&s->pool->mu);
    task_unown(s, t, "cut", now);
    budget_forget(s->pool->budget, t->bkey);
    health_forget(s->health, t->name);
    driver_free(t->drv); /* joins an upload thread: cut by the client too */
    t->drv = NULL;
    lease_free(t->lease);
    t->lease = NULL;
    t->state = Q_ENDED;
    return now;
}

static bool sink_past_deadline(struct sink *s)
{
    pthread_mutex_lock(&s->pool->mu);
    bool v = s->is_stopping && mono_ms() >= s->stop_deadline_ms;
    pthread_mutex_unlock(&s->pool->mu);
    return v;
}

size_t sink_undrained(struct sink *s)
{
    size_t n;

    pthread_mutex_lock(&s->pool->mu);
    n = s->n_cut;
    for (size_t i = 0; i < s->n_queues; i++) {
        struct task *t = s->queues[i];

        if (t->owned_here && !t->is_done) {
            task_log_cut(t, t->row_state,
                         t->has_snap ? t->snap.k : t->last_k + 1);
            n++;
        }
    }
    pthread_mutex_unlock(&s->pool->mu);
    return n;
}

static int64_t task_step(struct sink *s, struct task *t, int64_t now)
{
    struct driver_next nx;

    pthread_mutex_lock(&s->pool->mu);
    bool down = s->is_stopping || s->run == RUN_ENDING;
    bool give_back = t->is_give_back_asked;
    bool is_set_up = s->has_set;
    pthread_mutex_unlock(&s->pool->mu);
    if (t->state == Q_OWNED && sink_past_deadline(s)) {
        return task_cut(s, t, now);
    }
    if (t->state != Q_OWNED) {
        if (down) {
            task_unstrand(s, t);
            t->state = Q_ENDED;
            return now;
        }
        if (!is_set_up) { /* the bucket probe or the presence row pends */
            return now + SINK_SET_UP_POLL_MS;
        }
        return task_claim(s, t, now);
    }
    if ((down || give_back) && !t->is_drain_asked) {
        t->is_drain_asked = true;
        t->is_giving_back = !down;
        driver_request_drain(t->drv, t->is_giving_back);
    }
    memset(&nx, 0, sizeof(nx));
    driver_tick(t->drv, now, wall_us() / 1000, &nx);
    task_publish(s, t, now);
    if (nx.stop != DRIVER_RUNNING) {
        return task_stopped(s, t, mono_ms(), &nx, sink_winding_down(s));
    }
    if (sink_past_deadline(s)) {
        return task_cut(s, t, mono_ms());
    }
    return nx.at_ms;
}

static int64_t sink_step(struct sink *s, struct task *t, int64_t now)
{
    int64_t next;

    if (t->is_control) {
        return sink_control_step(s, now);
    }
    next = task_step(s, t, now);
    if (t->state == Q_ENDED) {
        pthread_mutex_lock(&s->pool->mu);
        t->is_done = true;
        pthread_mutex_unlock(&s->pool->mu);
    }
    return next;
}

/* ---- -- status (docs/design/observability.md §1) and metrics
 * (docs/design/observability.md §2) */

static int64_t or_none(bool has, int64_t v)
{
    return has ? v : STATUS_NONE;
}

/* This node's safeTime now, or none (no seam, or it failed). */
static bool sink_safe_now(const struct sink *s, int64_t *now_us)
{
    const struct sink_broker *b = s->p.broker;

    return b->safe_time != NULL && b->safe_time(b->arg, now_us) == 0;
}

/* Under s->mu: t's lag at this moment (the page's safeTime minus
 * completeThrough, with safeTime read now), or the one its last step saw
 * when safeTime cannot be read. */
static bool task_lag(const struct task *t, bool has_safe, int64_t safe_us,
                     int64_t *lag_us)
{
    if (t->has_lag_base && has_safe) {
        *lag_us = safe_us > t->lag_base_ct ? safe_us - t->lag_base_ct : 0;
        return true;
    }
    *lag_us = t->snap.lag_us;
    return t->has_snap && t->snap.has_lag;
}

/* Under s->mu: task_lag(), and for a stranded queue at least the lag its
 * health verdict judges (the last one reported, growing with the clock): a
 * node whose own writes fail has a safeTime that stands still. */
static bool task_lag_now(struct sink *s, const struct task *t, bool has_safe,
                         int64_t safe_us, int64_t now, int64_t *lag_us)
{
    bool has = task_lag(t, has_safe, safe_us, lag_us);
    uint64_t ms = 0;

    if (!t->is_stranded || !health_lag(s->health, t->name, now, &ms)) {
        return has;
    }
    if (!has || (int64_t)ms * 1000 > *lag_us) {
        *lag_us = (int64_t)ms * 1000;
    }
    return true;
}

/* Under s->mu: one row, its strings borrowed from t. */
static void sink_row(struct sink *s, const struct task *t, bool has_safe,
                     int64_t safe_us, int64_t now, struct status_queue *q)
{
    int64_t lag_us = 0;

    const struct driver_status *st = &t->snap;
    const struct driver_counters *b = &t->base;
    bool snap = t->has_snap;

    memset(q, 0, sizeof(*q));
    q->name = t->name;
    q->owned_here = t->owned_here;
    q->held_by = t->held_by[0] != '\0' ? t->held_by : NULL;
    q->state = t->row_state;
    q->k = snap ? st->committed_k : t->last_k;
    q->t_end_us = snap ? or_none(st->has_t_end, st->t_end) : t->last_t_end;
    q->complete_through_us =
        or_none(snap && st->has_complete_through, st->complete_through);
    q->safe_time_us = or_none(snap && st->has_safe_time, st->safe_time);
    q->has_lag = task_lag_now(s, t, has_safe, safe_us, now, &lag_us);
    if (t->has_lag_base && has_safe) {
        /* the safeTime the lag was taken from: the row's safeTime less its
         * completeThrough is its lagSeconds (the last step's safeTime is
         * older, by as long as the queue has been quiet) */
        q->safe_time_us = safe_us;
    }
    q->lag_seconds = (double)lag_us / 1e6;
    q->redo = snap && st->redo;
    q->buffered_bytes = snap ? st->buffered_bytes : 0;
    q->partitions = snap ? st->partitions : 0;
    q->windows_committed = b->windows_committed;
    q->records = b->records;
    q->bytes = b->bytes_jsonl + b->bytes_parquet;
    q->records_lost = b->records_lost;
    if (snap) {
        q->windows_committed += st->counters.windows_committed;
        q->records += st->counters.records;
        q->bytes += st->counters.bytes_jsonl + st->counters.bytes_parquet;
        q->records_lost += st->counters.records_lost;
    }
    q->error_at_us = t->last_error[0] != '\0' ? t->last_error_us : STATUS_NONE;
    q->error_message = t->last_error;
}

static void sink_keys(struct sink *s, struct status_sink *ss)
{
    const struct sink_config *c = s->p.cfg;

    ss->sink = c->sink;
    ss->instance = s->p.node->instance;
    ss->running = s->is_started && !s->is_stopped && s->run != RUN_BACKOFF;
    ss->bucket.reachable = !s->has_probed ? -1 : s->is_reachable ? 1 : 0;
    ss->bucket.error = s->bucket_error[0] != '\0' ? s->bucket_error : NULL;
    if (ss->bucket.reachable == 1 && sink_write_streak(s)) {
        ss->bucket.reachable = 0;
        ss->bucket.error = s->write_error;
    }
    /* reachable is the probe's verdict until a write is answered, and the
     * writes' from then on: checked at whichever came last */
    int64_t wrote_ms = s3_metrics_write_at_ms(s3_client_metrics(s->p.s3));
    int64_t probed_ms = s->checked_at_us / 1000;
    ss->bucket.checked_at_ms = !s->has_probed         ? STATUS_NONE
                               : wrote_ms > probed_ms ? wrote_ms
                                                      : probed_ms;
    ss->bucket.name = c->bucket;
    ss->bucket.endpoint = c->endpoint;
    ss->bucket.region = c->region;
    ss->bucket.prefix = c->prefix;
    ss->format = sink_format_name(c->format);
    ss->compression = sink_config_compression_name(c);
    ss->layout = layout_kind_name(c->layout);
    ss->align = layout_align_name(c->align);
    ss->limit_bytes = s->p.node->memory_bytes;
}

/* Under s->mu: the run's host keys (3.1's ladder) and the node's phase. */
static void sink_run_keys(struct sink *s, struct status_node *node,
                          struct status_sink *ss)
{
    bool starting = !s->is_started || s->run == RUN_STARTING;
    bool backoff = s->run == RUN_ENDING || s->run == RUN_BACKOFF;

    ss->phase = s->is_stopped ? "stopped"
                : starting    ? "starting"
                : backoff     ? "backoff"
                              : "running";
    ss->error = s->run_error[0] != '\0' ? s->run_error : NULL;
    ss->restarts = s->restarts;
    ss->last_exit = s->last_exit[0] != '\0' ? s->last_exit : NULL;
    ss->has_uptime = strcmp(ss->phase, "running") == 0;
    ss->uptime_ms = (uint64_t)(mono_ms() - s->run_started_ms);
    ss->backoff_ms = (uint64_t)s->backoff_ms;
    if (node->phase == NULL) {
        node->phase = s->is_stopped ? "stopped"
                      : starting    ? "starting"
                                    : "running";
    }
}

/* Under s->mu: fill ss (host keys from the run, sink keys) and its rows
 * (n_queues + 1 entries, owned by the caller), node's phase when NULL. */
static struct status_queue *sink_fill(struct sink *s, struct status_node *node,
                                      struct status_sink *ss, bool has_safe,
                                      int64_t safe_us, int64_t now)
{
    struct status_queue *rows = xcalloc(s->n_queues + 1, sizeof(*rows));
    uint64_t held = 0;

    sink_keys(s, ss);
    sink_run_keys(s, node, ss);
    ss->buffered_bytes = budget_total(s->pool->budget);
    for (size_t i = 0; i < s->n_queues; i++) {
        const struct task *t = s->queues[i];
        sink_row(s, t, has_safe, safe_us, now, &rows[i]);
        held += rows[i].owned_here ? 1 : 0;
        /* health follows */
        if (rows[i].has_lag &&
            ((t->has_lag_base && has_safe) || t->is_stranded)) {
            int64_t lag_us = (int64_t)(rows[i].lag_seconds * 1e6);
            health_report(s->health, t->name, true, lag_us, now);
        }
    }
    health_check(s->health, now, &ss->health);
    ss->placement = (struct status_placement){
        s->nodes, s->n_queues,
        placement_fair_share((uint32_t)s->n_queues, s->nodes), held,
        s->pl.is_giving ? s->pl.giving : NULL};
    ss->queues = rows;
    ss->n_queues = s->n_queues;
    return rows;
}

int sink_status_render(struct sink *s, struct status_node *node,
                       struct status_sink *ss, struct buf *out, struct err *err)
{
    struct sink_entries e = {&s, ss, 1};

    return sink_pool_status_render(s->pool, &e, node, out, err);
}

/* This node's safeTime now, from the first sink that can tell. */
static bool sinks_safe_now(struct sink *const *sinks, size_t n,
                           int64_t *safe_us)
{
    for (size_t i = 0; i < n; i++) {
        if (sinks[i] != NULL && sink_safe_now(sinks[i], safe_us)) {
            return true;
        }
    }
    return false;
}

int sink_pool_status_render(struct sink_pool *pool,
                            const struct sink_entries *e,
                            struct status_node *node, struct buf *out,
                            struct err *err)
{
    int rc;
    int64_t safe_us = 0;
    struct sink *const *sinks = e->sinks;
    struct status_sink *ss = e->ss;
    size_t n = e->n;
    bool has_safe = sinks_safe_now(sinks, n, &safe_us);
    int64_t now = mono_ms();
    struct status_queue **rows = xcalloc(n + 1, sizeof(struct status_queue *));

    pthread_mutex_lock(&pool->mu);
    for (size_t i = 0; i < n; i++) {
        if (sinks[i] != NULL && sinks[i]->pool == pool) {
            rows[i] = sink_fill(sinks[i], node, &ss[i], has_safe, safe_us, now);
        }
    }
    node->sinks = ss;
    node->n_sinks = n;
    rc = status_render(node, out, err);
    pthread_mutex_unlock(&pool->mu);
    for (size_t i = 0; i < n; i++) {
        free(rows[i]);
        if (sinks[i] != NULL) {
            ss[i].queues = NULL;
        }
    }
    free(rows);
    return rc;
}

/* After a tick: the counters' growth since the last report, the histograms
 * of the windows committed since, and the queue's gauges. */
static void task_report(struct sink *s, struct task *t,
                        const struct driver_status *st)
{
    const struct driver_counters *c = &st->counters;
    struct driver_counters *r = &t->reported;
    const char *q = t->name;
    const char *fmt = sink_format_name(s->p.cfg->format);
    struct obs *o = s->pool->obs;

    obs_counter_add(o, OBS_WINDOWS_COMMITTED, s->mtenant, q, NULL,
                    (double)(c->windows_committed - r->windows_committed));
    obs_counter_add(o, OBS_RECORDS_WRITTEN, s->mtenant, q, NULL,
                    (double)(c->records - r->records));
    obs_counter_add(o, OBS_BYTES_WRITTEN, s->mtenant, q, fmt,
                    (double)(c->bytes_jsonl + c->bytes_parquet -
                             r->bytes_jsonl - r->bytes_parquet));
    obs_counter_add(o, OBS_RECORDS_LOST, s->mtenant, q, NULL,
                    (double)(c->records_lost - r->records_lost));
    obs_counter_add(o, OBS_FETCH_CALLS, s->mtenant, q, "ok",
                    (double)(c->fetch_ok - r->fetch_ok));
    obs_counter_add(o, OBS_FETCH_CALLS, s->mtenant, q, "error",
                    (double)(c->fetch_error - r->fetch_error));
    obs_counter_add(
        o, OBS_COMMIT_PRECONDITION_LOST, s->mtenant, NULL, NULL,
        (double)(c->commit_precondition_lost - r->commit_precondition_lost));
    uint64_t from = r->windows_committed;
    if (c->windows_committed - from > DRIVER_RECENT_WINDOWS) {
        from = c->windows_committed - DRIVER_RECENT_WINDOWS;
    }
    for (uint64_t i = from; i < c->windows_committed; i++) {
        const struct driver_window_size *w =
            &st->recent[i % DRIVER_RECENT_WINDOWS];
        obs_observe(o, OBS_WINDOW_RECORDS, s->mtenant, (double)w->records);
        obs_observe(o, OBS_WINDOW_BYTES, s->mtenant, (double)w->bytes);
    }
    *r = *c;
    health_report(s->health, q, st->has_lag, st->lag_us, mono_ms());
    if (st->has_lag) {
        obs_gauge_set(o, OBS_LAG_SECONDS, s->mtenant, q,
                      (double)st->lag_us / 1e6);
    }
    if (st->has_safe_time) {
        obs_gauge_set(o, OBS_SAFE_LAG_SECONDS, NULL, NULL,
                      (double)(wall_us() - st->safe_time) / 1e6);
    }
    obs_gauge_set(o, OBS_DISCOVERY_PARTITIONS, s->mtenant, q,
                  (double)st->discovery_partitions);
    obs_gauge_set(o, OBS_CHECKPOINT_AGE_WINDOWS, s->mtenant, q,
                  (double)st->checkpoint_age);
}

/* Under pool->mu: the lag of s's queues at scrape time. */
static void sink_scrape_lags(struct sink *s, bool has_safe, int64_t safe_us)
{
    int64_t now = mono_ms();

    for (size_t i = 0; i < s->n_queues; i++) {
        const struct task *t = s->queues[i];
        int64_t lag_us;
        if ((t->has_lag_base || t->is_stranded) &&
            task_lag_now(s, t, has_safe, safe_us, now, &lag_us)) {
            obs_gauge_set(s->pool->obs, OBS_LAG_SECONDS, s->mtenant, t->name,
                          (double)lag_us / 1e6);
        }
    }
}

int sink_metrics(struct sink *s, struct buf *out, struct err *err)
{
    return sink_pool_metrics(s->pool, &s, 1, out, err);
}

int sink_pool_metrics(struct sink_pool *pool, struct sink *const *sinks,
                      size_t n, struct buf *out, struct err *err)
{
    int64_t safe_us = 0;
    bool has_safe = sinks_safe_now(sinks, n, &safe_us);

    obs_gauge_set(pool->obs, OBS_BUFFER_BYTES, NULL, NULL,
                  (double)budget_total(pool->budget));
    pthread_mutex_lock(&pool->mu);
    for (size_t i = 0; i < n; i++) {
        if (sinks[i] != NULL) {
            sink_scrape_lags(sinks[i], has_safe, safe_us);
        }
    }
    /* the node's safeTime now, not as a driver last read it: a driver
     * waiting on the bucket reads none, and the gauge stood still through
     * an outage (in either direction) */
    if (has_safe && pool->n_owned > 0) {
        obs_gauge_set(pool->obs, OBS_SAFE_LAG_SECONDS, NULL, NULL,
                      (double)(wall_us() - safe_us) / 1e6);
    }
    pthread_mutex_unlock(&pool->mu);
    return obs_render(pool->obs, out, err);
}
