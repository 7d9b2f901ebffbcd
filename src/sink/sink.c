/* One tenant's S3 sink (reference 3.2, 3.4, 3.11): a pool of threads named
 * queen-s3 that runs, from one run queue ordered by next-run time, the
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
 * Left out for now (see docs/s3-sink.md): the rebalancer's give-back,
 * claim pacing across nodes (a free queue is claimed at once), the memory
 * budget's forced closes and the whole-sink restart ladder. */
#include "sink/sink.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/isotime.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "s3/client.h"
#include "sink/docs.h"
#include "sink/layout.h"
#include "sink/lease.h"
#include "sink/placement.h"

#define SINK_MISSING_RETRY_MS  5000
#define SINK_TERMINAL_RETRY_MS 60000
#define SINK_PROBE_MIN_MS      1000
#define SINK_PROBE_MAX_MS      60000
#define SINK_LOG_EVERY_MS      30000
#define SINK_STOP_POLL_MS      50

enum qstate { Q_CLAIM, Q_OWNED, Q_ENDED };

struct task {
    int64_t due_ms;
    bool is_running;
    bool is_done;
    bool is_control;
    /* queue tasks only */
    char *name;
    enum qstate state;
    struct lease *lease;
    struct driver *drv;
    struct driver_config dc;
    int64_t refresh_due_ms;
    bool is_drain_asked;
    int claim_failures;
    bool missing_logged;
    /* published under s->mu */
    char row_state[16];
    bool owned_here;
    char held_by[128];
    bool has_snap;
    struct driver_status snap;
    struct driver_counters base; /* runs that ended */
    char last_error[512];
    int64_t last_error_us;
};

struct sink {
    struct sink_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *threads;
    uint32_t n_threads;
    bool is_started;
    bool is_stopping;
    bool is_stopped;
    bool is_exiting;
    struct task control;
    struct task **queues; /* by queue name order of creation */
    size_t n_queues;
    /* control state */
    bool has_probed;
    bool is_reachable;
    char bucket_error[2048];
    int64_t checked_at_us;
    int64_t probe_wait_ms;
    int64_t probe_logged_ms;
    bool has_set;
    int64_t relist_due_ms;
    int64_t beat_due_ms;
    int64_t beat_logged_ms;
    uint32_t nodes;
    char presence_key[600];
    char presence_incarnation[17];
    int64_t presence_since_ms;
    char instance_slice[SINK_STR_MAX];
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

static void sink_wait_until(struct sink *s, int64_t due_ms)
{
    struct timespec ts;

    ts.tv_sec = (time_t)(due_ms / 1000);
    ts.tv_nsec = (long)(due_ms % 1000) * 1000000;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

static void *sink_thread(void *arg)
{
    struct sink *s = arg;

    pthread_mutex_lock(&s->mu);
    while (!s->is_exiting) {
        struct task *t = sink_pick(s);
        int64_t now = mono_ms();

        if (t == NULL) {
            sink_wait_until(s, now + 1000);
            continue;
        }
        if (t->due_ms > now) {
            sink_wait_until(s, t->due_ms);
            continue;
        }
        t->is_running = true;
        pthread_mutex_unlock(&s->mu);
        int64_t next = sink_step(s, t, now);
        pthread_mutex_lock(&s->mu);
        t->is_running = false;
        /* A stop that came during the step must not wait out its backoff. */
        t->due_ms = s->is_stopping && next > now ? now : next;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

struct sink *sink_new(const struct sink_params *p)
{
    struct sink *s = xcalloc(1, sizeof(*s));
    pthread_condattr_t ca;

    s->p = *p;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->control.is_control = true;
    s->probe_wait_ms = SINK_PROBE_MIN_MS;
    s->nodes = 1;
    srandom((unsigned)wall_us());
    return s;
}

int sink_start(struct sink *s, struct err *err)
{
    uint32_t n = s->p.node->threads == 0 ? 1 : s->p.node->threads;

    s->threads = xcalloc(n, sizeof(*s->threads));
    s->control.due_ms = mono_ms();
    s->is_started = true;
    for (uint32_t i = 0; i < n; i++) {
        int rc = pthread_create(&s->threads[i], NULL, sink_thread, s);

        if (rc != 0) {
            sink_stop(s);
            return err_set(err, ERR_IO, "pthread_create: %s", strerror(rc));
        }
        /* Named by the creator, so the name is there once start returns. */
        pthread_setname_np(s->threads[i], "queen-s3");
        s->n_threads++;
    }
    return 0;
}

void sink_stop(struct sink *s)
{
    pthread_mutex_lock(&s->mu);
    if (!s->is_stopping) {
        s->is_stopping = true;
        log_info("queen-s3",
                 "stopping: no new reads, the window in flight is finished");
        int64_t now = mono_ms();
        s->control.due_ms = now;
        for (size_t i = 0; i < s->n_queues; i++) {
            s->queues[i]->due_ms = now;
        }
        if (s->n_threads == 0) {
            s->is_stopped = true;
        }
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

bool sink_stopped(struct sink *s)
{
    pthread_mutex_lock(&s->mu);
    bool stopped = s->is_stopped;
    pthread_mutex_unlock(&s->mu);
    return stopped;
}

void sink_free(struct sink *s)
{
    if (s == NULL) {
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->is_exiting = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < s->n_threads; i++) {
        pthread_join(s->threads[i], NULL);
    }
    for (size_t i = 0; i < s->n_queues; i++) {
        struct task *t = s->queues[i];

        driver_free(t->drv);
        lease_free(t->lease);
        free(t->name);
        free(t);
    }
    free(s->queues);
    free(s->threads);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- the control task: bucket probe ------------------------------------- */

static bool sink_probe(struct sink *s, int64_t now)
{
    const struct sink_config *c = s->p.cfg;
    struct s3_object_info info;
    struct s3_status st;
    struct err err = {0};
    char key[SINK_STR_MAX + 2];
    int rc;

    snprintf(key, sizeof(key), "%s/", c->prefix);
    rc = s3_client_head(s->p.s3, key, &info, &st, &err);
    pthread_mutex_lock(&s->mu);
    s->has_probed = true;
    s->checked_at_us = wall_us() / 1000 * 1000;
    if (rc == 0) {
        if (!s->is_reachable && s->bucket_error[0] != '\0') {
            log_info("queen-s3", "the bucket answers; starting the queues");
        }
        s->is_reachable = true;
        s->bucket_error[0] = '\0';
        pthread_mutex_unlock(&s->mu);
        return true;
    }
    s->is_reachable = false;
    snprintf(s->bucket_error, sizeof(s->bucket_error),
             "cannot reach the bucket %s at %s (%s). "
             "QUEEN_S3_ACCESS_KEY/_SECRET_KEY must be allowed s3:PutObject, "
             "s3:GetObject and s3:ListBucket on %s/*, and "
             "QUEEN_S3_PATH_STYLE=true is what most gateways need",
             c->bucket, c->endpoint, err.msg, c->prefix);
    if (s->probe_logged_ms == 0 ||
        now - s->probe_logged_ms >= SINK_LOG_EVERY_MS) {
        s->probe_logged_ms = now;
        log_error("queen-s3", "%s; retrying", s->bucket_error);
    }
    pthread_mutex_unlock(&s->mu);
    return false;
}

/* ---- the control task: queue set ---------------------------------------- */

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
    t->state = Q_CLAIM;
    snprintf(t->row_state, sizeof(t->row_state), "claiming");
    t->due_ms = mono_ms() + jitter_ms(PLACEMENT_JITTER_MS);
    log_info("queen-s3", "starting a queue task queue=%s", t->name);
    pthread_mutex_lock(&s->mu);
    s->queues = xrealloc(s->queues, (s->n_queues + 1) * sizeof(*s->queues));
    s->queues[s->n_queues++] = t;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
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
        log_warn("queen-s3",
                 "cannot list the queues; keeping the set this "
                 "node already has error=%s",
                 err.msg);
        return;
    }
    for (size_t i = 0; i < l.n; i++) {
        sink_add_queue(s, l.queues[i].name.ptr, l.queues[i].name.len);
    }
    store_queue_list_free(&l);
}

/* ---- the control task: presence row ------------------------------------- */

static void sink_presence_init(struct sink *s)
{
    struct buf b;
    struct err err = {0};
    const char *inst = s->p.node->instance;

    buf_init(&b, sizeof(s->presence_key) - 1);
    if (layout_presence_key(&b, s->p.cfg->sink,
                            (struct slice){inst, strlen(inst)}, &err) == 0) {
        memcpy(s->presence_key, b.data, b.len + 1);
    }
    buf_free(&b);
    lease_new_incarnation(NULL, NULL, s->presence_incarnation);
    s->presence_since_ms = wall_us() / 1000;
}

static void sink_beat(struct sink *s, int64_t now)
{
    const char *inst = s->p.node->instance;
    struct docs_lease dl = {{inst, strlen(inst)},
                            {s->presence_incarnation, 16},
                            s->presence_since_ms};
    struct buf doc;
    struct buf prefix;
    struct kv_op ops[2];
    struct kv_answer ans;
    struct err err = {0};
    int rc;

    buf_init(&doc, BUF_UNLIMITED);
    buf_init(&prefix, BUF_UNLIMITED);
    rc = docs_lease_encode(&doc, &dl, &err);
    if (rc == 0) {
        rc = layout_presence_prefix(&prefix, s->p.cfg->sink, &err);
    }
    if (rc == 0) {
        placement_beat_ops(
            ops, (struct slice){s->presence_key, strlen(s->presence_key)},
            (struct slice){doc.data, doc.len}, lease_ttl_seconds(ttl_ms(s)),
            (struct slice){prefix.data, prefix.len},
            (struct slice){"", 0}); /* kv_validate memchr()s the cursor */
        memset(&ans, 0, sizeof(ans));
        rc = s->p.broker->kv(s->p.broker->arg, s->p.tenant, ops, 2, 0, &ans,
                             &err);
        if (rc == 0 && ans.status == 0 && ans.n_results == 2) {
            uint32_t rows = 0;
            bool saw = false;
            bool more = false;

            placement_beat_count(
                &ans.results[1],
                (struct slice){s->presence_key, strlen(s->presence_key)}, &rows,
                &saw, &more);
            pthread_mutex_lock(&s->mu);
            s->nodes = placement_nodes(rows, saw);
            pthread_mutex_unlock(&s->mu);
        } else if (rc == 0) {
            rc = ERR_REMOTE;
            snprintf(err.msg, sizeof(err.msg), "%s", ans.msg);
        }
        kv_answer_free(&ans);
    }
    if (rc != 0 && (s->beat_logged_ms == 0 ||
                    now - s->beat_logged_ms >= SINK_LOG_EVERY_MS)) {
        s->beat_logged_ms = now;
        log_warn("queen-s3",
                 "cannot write this node's presence row; retrying error=%s",
                 err.msg);
    }
    buf_free(&doc);
    buf_free(&prefix);
}

/* ---- the control task ---------------------------------------------------- */

static bool sink_queues_ended(struct sink *s)
{
    bool ended = true;

    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_queues; i++) {
        ended = ended && s->queues[i]->is_done;
    }
    pthread_mutex_unlock(&s->mu);
    return ended;
}

static int64_t sink_control_stop(struct sink *s, int64_t now)
{
    if (!sink_queues_ended(s)) {
        return now + SINK_STOP_POLL_MS;
    }
    if (s->has_set && s->presence_key[0] != '\0') {
        lease_delete_if_ours(s->p.broker, s->p.tenant, s->presence_key,
                             s->presence_incarnation, "presence row", NULL);
    }
    log_info("queen-s3", "every queue drained; the sink has stopped");
    pthread_mutex_lock(&s->mu);
    s->control.is_done = true;
    s->is_stopped = true;
    s->is_exiting = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return now;
}

static int64_t sink_control_step(struct sink *s, int64_t now)
{
    int64_t period = placement_period_ms(ttl_ms(s));
    int64_t next;

    if (s->is_stopping) {
        return sink_control_stop(s, now);
    }
    if (!s->is_reachable) {
        if (!sink_probe(s, now)) {
            int64_t wait = s->probe_wait_ms;

            s->probe_wait_ms = s->probe_wait_ms * 2 > SINK_PROBE_MAX_MS
                                   ? SINK_PROBE_MAX_MS
                                   : s->probe_wait_ms * 2;
            return now + wait / 2 + jitter_ms(wait / 2 + 1);
        }
        s->probe_wait_ms = SINK_PROBE_MIN_MS;
    }
    if (!s->has_set) {
        sink_presence_init(s);
        s->has_set = true;
        sink_list_queues(s);
        uint64_t every = 10 * s->p.node->discovery_interval_ms;
        s->relist_due_ms = now + (int64_t)(every < 1000 ? 1000 : every);
    } else if (s->p.cfg->all_queues && now >= s->relist_due_ms) {
        sink_list_queues(s);
        uint64_t every = 10 * s->p.node->discovery_interval_ms;
        s->relist_due_ms = now + (int64_t)(every < 1000 ? 1000 : every);
    }
    if (now >= s->beat_due_ms) {
        sink_beat(s, now);
        s->beat_due_ms = now + period;
    }
    next = s->beat_due_ms;
    if (s->p.cfg->all_queues && s->relist_due_ms < next) {
        next = s->relist_due_ms;
    }
    return next;
}

/* ---- queue tasks ------------------------------------------------------------
 */

static void task_error(struct sink *s, struct task *t, const char *msg)
{
    pthread_mutex_lock(&s->mu);
    snprintf(t->last_error, sizeof(t->last_error), "%s", msg);
    t->last_error_us = wall_us();
    pthread_mutex_unlock(&s->mu);
}

static void task_set_state(struct sink *s, struct task *t, const char *state,
                           const char *held_by)
{
    pthread_mutex_lock(&s->mu);
    snprintf(t->row_state, sizeof(t->row_state), "%s", state);
    snprintf(t->held_by, sizeof(t->held_by), "%s",
             held_by == NULL ? "" : held_by);
    t->owned_here =
        strcmp(state, "held") != 0 && held_by == NULL && t->state == Q_OWNED;
    if (held_by != NULL) {
        t->has_snap = false; /* held_by clears the run's gauges */
    }
    pthread_mutex_unlock(&s->mu);
}

static void task_driver_config(struct sink *s, struct task *t)
{
    const struct sink_config *c = s->p.cfg;
    const struct sink_node_config *n = s->p.node;
    struct driver_config *d = &t->dc;

    driver_config_defaults(d);
    d->sink = c->sink;
    d->prefix = c->prefix;
    memcpy(d->tenant, s->p.tenant, 16);
    d->tenant_text = s->p.tenant_text;
    d->queue = t->name;
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
}

/* Claim: holder, then acquire. Returns the next due time. */
static int64_t task_claim(struct sink *s, struct task *t, int64_t now)
{
    struct lease_config lc;
    struct err err = {0};
    enum lease_holder_kind kind;
    char other[128] = "";
    bool taken = false;
    int rc;

    if (t->lease == NULL) {
        memset(&lc, 0, sizeof(lc));
        lc.sink = s->p.cfg->sink;
        lc.queue = t->name;
        lc.instance = s->p.node->instance;
        memcpy(lc.tenant, s->p.tenant, 16);
        lc.ttl_ms = ttl_ms(s);
        t->lease = lease_new(&lc, s->p.broker, &err);
        if (t->lease == NULL) {
            log_error("queen-s3", "queue=%s: %s", t->name, err.msg);
            task_error(s, t, err.msg);
            return now + SINK_TERMINAL_RETRY_MS;
        }
    }
    task_set_state(s, t, "claiming", NULL);
    rc = lease_holder(t->lease, &kind, other, sizeof(other), &err);
    if (rc == 0 && kind != LEASE_OTHER) {
        rc = lease_acquire(t->lease, wall_us() / 1000, &taken, other,
                           sizeof(other), &err);
    }
    if (rc != 0) {
        char msg[300];

        t->claim_failures++;
        log_warn("queen-s3",
                 "cannot claim the queue lease; retrying queue=%s error=%s",
                 t->name, err.msg);
        snprintf(msg, sizeof(msg), "lease claim: %s", err.msg);
        task_error(s, t, msg);
        return now + placement_claim_retry_ms(
                         t->claim_failures, sink_broker_kv_retriable(rc), -1,
                         jitter_ms(PLACEMENT_JITTER_MS), ttl_ms(s));
    }
    t->claim_failures = 0;
    if (!taken) {
        bool changed = strcmp(other, t->held_by) != 0;

        if (changed) {
            log_info("queen-s3",
                     "another node owns this queue; claiming again after the "
                     "lease TTL queue=%s heldBy=%s",
                     t->name, other);
        }
        task_set_state(s, t, "held", other);
        lease_free(t->lease);
        t->lease = NULL;
        return now + placement_held_wait_ms(ttl_ms(s), false,
                                            jitter_ms(PLACEMENT_JITTER_MS));
    }
    task_driver_config(s, t);
    t->drv = driver_new(&t->dc, s->p.broker, s->p.s3, t->lease, &err);
    if (t->drv == NULL) {
        log_error("queen-s3", "queue=%s: %s", t->name, err.msg);
        task_error(s, t, err.msg);
        lease_release(t->lease);
        lease_free(t->lease);
        t->lease = NULL;
        return now + SINK_TERMINAL_RETRY_MS;
    }
    log_info("queen-s3", "this node owns the queue queue=%s instance=%s",
             t->name, s->p.node->instance);
    t->state = Q_OWNED;
    t->is_drain_asked = false;
    t->missing_logged = t->missing_logged && true;
    t->refresh_due_ms = now + lease_refresh_interval_ms(ttl_ms(s));
    task_set_state(s, t, "restoring", NULL);
    return now;
}

static void task_refresh(struct sink *s, struct task *t, int64_t now)
{
    struct err err = {0};
    int rc;

    if (now < t->refresh_due_ms) {
        return;
    }
    t->refresh_due_ms = now + lease_refresh_interval_ms(ttl_ms(s));
    rc = lease_refresh(t->lease, &err);
    if (rc == ERR_PRECONDITION) {
        log_error("queen-s3",
                  "lease lost: another instance owns this queue queue=%s "
                  "error=%s",
                  t->name, err.msg);
    } else if (rc != 0) {
        log_warn("queen-s3",
                 "lease refresh failed; retrying on the next tick queue=%s "
                 "error=%s",
                 t->name, err.msg);
    }
}

static void task_publish(struct sink *s, struct task *t)
{
    struct driver_status st;

    driver_status(t->drv, &st);
    pthread_mutex_lock(&s->mu);
    t->snap = st;
    t->has_snap = true;
    snprintf(t->row_state, sizeof(t->row_state), "%s", st.state);
    t->owned_here = true;
    t->held_by[0] = '\0';
    if (st.last_error[0] != '\0' && strcmp(st.last_error, t->last_error)) {
        snprintf(t->last_error, sizeof(t->last_error), "%s", st.last_error);
        t->last_error_us = wall_us();
    }
    pthread_mutex_unlock(&s->mu);
}

/* The driver stopped: release, keep its counters, decide by reason. */
static int64_t task_stopped(struct sink *s, struct task *t, int64_t now,
                            const struct driver_next *nx)
{
    const char *name = driver_stop_name(nx->stop);
    int64_t wait = 0;

    lease_release(t->lease);
    pthread_mutex_lock(&s->mu);
    struct driver_counters *b = &t->base, *c = &t->snap.counters;
    b->windows_committed += c->windows_committed;
    b->records += c->records;
    b->bytes_jsonl += c->bytes_jsonl;
    b->bytes_parquet += c->bytes_parquet;
    b->records_lost += c->records_lost;
    b->fetch_ok += c->fetch_ok;
    b->fetch_error += c->fetch_error;
    b->commit_precondition_lost += c->commit_precondition_lost;
    b->checkpoints_written += c->checkpoints_written;
    memset(c, 0, sizeof(*c));
    t->has_snap = false;
    t->owned_here = false;
    snprintf(t->row_state, sizeof(t->row_state), "%s", name);
    pthread_mutex_unlock(&s->mu);
    driver_free(t->drv);
    t->drv = NULL;
    lease_free(t->lease);
    t->lease = NULL;
    t->state = Q_CLAIM;
    switch (nx->stop) {
    case DRIVER_DRAINED: /* the driver logged "queue drained" */
        t->state = Q_ENDED;
        return now;
    case DRIVER_CRASHED:
        log_error("queen-s3", "crash point fired queue=%s at=%s", t->name,
                  nx->why);
        task_error(s, t, "crash point fired");
        t->state = Q_ENDED;
        return now;
    case DRIVER_FENCED:
        log_warn("queen-s3", "queue fenced queue=%s why=%s", t->name, nx->why);
        task_error(s, t, nx->why);
        wait = ttl_ms(s);
        break;
    case DRIVER_MISSING:
        if (!t->missing_logged) {
            log_info("queen-s3",
                     "the queue does not exist; looking again until it does "
                     "queue=%s why=%s retry_in_s=5",
                     t->name, nx->why);
            t->missing_logged = true;
        }
        wait = SINK_MISSING_RETRY_MS;
        break;
    default:
        log_error("queen-s3",
                  "queue stopped; it will be tried again in case the cause "
                  "was fixed queue=%s why=%s",
                  t->name, nx->why);
        task_error(s, t, nx->why);
        wait = SINK_TERMINAL_RETRY_MS;
        break;
    }
    return now + wait;
}

static int64_t task_step(struct sink *s, struct task *t, int64_t now)
{
    struct driver_next nx;
    bool stopping;

    pthread_mutex_lock(&s->mu);
    stopping = s->is_stopping;
    pthread_mutex_unlock(&s->mu);
    if (t->state != Q_OWNED) {
        if (stopping) {
            t->state = Q_ENDED;
            return now;
        }
        return task_claim(s, t, now);
    }
    if (stopping && !t->is_drain_asked) {
        t->is_drain_asked = true;
        driver_request_drain(t->drv, false);
    }
    task_refresh(s, t, now);
    memset(&nx, 0, sizeof(nx));
    driver_tick(t->drv, now, wall_us() / 1000, &nx);
    task_publish(s, t);
    if (nx.stop != DRIVER_RUNNING) {
        return task_stopped(s, t, mono_ms(), &nx);
    }
    return nx.at_ms < t->refresh_due_ms ? nx.at_ms : t->refresh_due_ms;
}

static int64_t sink_step(struct sink *s, struct task *t, int64_t now)
{
    int64_t next;

    if (t->is_control) {
        return sink_control_step(s, now);
    }
    next = task_step(s, t, now);
    if (t->state == Q_ENDED) {
        pthread_mutex_lock(&s->mu);
        t->is_done = true;
        pthread_mutex_unlock(&s->mu);
    }
    return next;
}

/* ---- status (6.1) and metrics (6.2) ------------------------------------- */

static void jw_iso_or_null(struct jw *w, bool has, int64_t us)
{
    char t[32];

    if (!has) {
        jw_null(w);
        return;
    }
    isotime_format_us(us, t);
    jw_cstr(w, t);
}

static void sink_row_json(const struct task *t, struct jw *w)
{
    const struct driver_status *st = &t->snap;
    const struct driver_counters *b = &t->base;
    bool snap = t->has_snap;

    jw_obj_begin(w);
    jw_key(w, "name");
    jw_cstr(w, t->name);
    jw_key(w, "ownedHere");
    jw_bool(w, t->owned_here);
    jw_key(w, "heldBy");
    if (t->held_by[0] != '\0') {
        jw_cstr(w, t->held_by);
    } else {
        jw_null(w);
    }
    jw_key(w, "state");
    jw_cstr(w, t->row_state);
    jw_key(w, "k");
    jw_i64(w, snap ? st->committed_k : 0);
    jw_key(w, "tEnd");
    jw_iso_or_null(w, snap && st->has_t_end, st->t_end);
    jw_key(w, "completeThrough");
    jw_iso_or_null(w, snap && st->has_complete_through, st->complete_through);
    jw_key(w, "safeTime");
    jw_iso_or_null(w, snap && st->has_safe_time, st->safe_time);
    jw_key(w, "lagSeconds");
    if (snap && st->has_lag) {
        jw_double(w, (double)st->lag_us / 1e6);
    } else {
        jw_null(w);
    }
    jw_key(w, "redo");
    jw_bool(w, snap && st->redo);
    jw_key(w, "bufferedBytes");
    jw_u64(w, snap ? st->buffered_bytes : 0);
    jw_key(w, "partitions");
    jw_u64(w, snap ? st->partitions : 0);
    jw_key(w, "windowsCommitted");
    jw_u64(w, b->windows_committed + st->counters.windows_committed);
    jw_key(w, "records");
    jw_u64(w, b->records + st->counters.records);
    jw_key(w, "bytes");
    jw_u64(w, b->bytes_jsonl + b->bytes_parquet + st->counters.bytes_jsonl +
                  st->counters.bytes_parquet);
    jw_key(w, "recordsLost");
    jw_u64(w, b->records_lost + st->counters.records_lost);
    jw_key(w, "lastError");
    if (t->last_error[0] == '\0') {
        jw_null(w);
    } else {
        jw_obj_begin(w);
        jw_key(w, "at");
        jw_iso_or_null(w, true, t->last_error_us);
        jw_key(w, "message");
        jw_cstr(w, t->last_error);
        jw_obj_end(w);
    }
    jw_obj_end(w);
}

static int task_cmp(const void *a, const void *b)
{
    const struct task *x = *(struct task *const *)a;
    const struct task *y = *(struct task *const *)b;

    return strcmp(x->name, y->name);
}

/* Under s->mu: the rows sorted by name (a copy of the pointer array). */
static struct task **sink_sorted(struct sink *s)
{
    struct task **v = xcalloc(s->n_queues + 1, sizeof(*v));

    if (s->n_queues > 0) {
        memcpy(v, s->queues, s->n_queues * sizeof(*v));
        qsort(v, s->n_queues, sizeof(*v), task_cmp);
    }
    return v;
}

static void sink_bucket_json(struct sink *s, struct jw *w)
{
    const struct sink_config *c = s->p.cfg;

    jw_obj_begin(w);
    jw_key(w, "reachable");
    if (s->has_probed) {
        jw_bool(w, s->is_reachable);
    } else {
        jw_null(w);
    }
    jw_key(w, "error");
    if (s->bucket_error[0] != '\0') {
        jw_cstr(w, s->bucket_error);
    } else {
        jw_null(w);
    }
    jw_key(w, "checkedAt");
    jw_iso_or_null(w, s->has_probed, s->checked_at_us);
    jw_key(w, "name");
    jw_cstr(w, c->bucket);
    jw_key(w, "endpoint");
    jw_cstr(w, c->endpoint);
    jw_key(w, "region");
    jw_cstr(w, c->region);
    jw_key(w, "prefix");
    jw_cstr(w, c->prefix);
    jw_obj_end(w);
}

static void sink_status_tail(struct sink *s, struct jw *w, uint64_t held,
                             uint64_t buffered)
{
    uint32_t share = placement_fair_share((uint32_t)s->n_queues, s->nodes);

    jw_key(w, "health");
    jw_obj_begin(w);
    jw_key(w, "ok");
    jw_bool(w, true);
    jw_key(w, "queues");
    jw_u64(w, held);
    jw_obj_end(w);
    jw_key(w, "placement");
    jw_obj_begin(w);
    jw_key(w, "nodes");
    jw_u64(w, s->nodes);
    jw_key(w, "queues");
    jw_u64(w, s->n_queues);
    jw_key(w, "share");
    jw_u64(w, share);
    jw_key(w, "held");
    jw_u64(w, held);
    jw_key(w, "givingBack");
    jw_null(w);
    jw_obj_end(w);
    jw_key(w, "memory");
    jw_obj_begin(w);
    jw_key(w, "bufferedBytes");
    jw_u64(w, buffered);
    jw_key(w, "limitBytes");
    jw_u64(w, s->p.node->memory_bytes);
    jw_obj_end(w);
}

void sink_status_json(struct sink *s, struct jw *w)
{
    const struct sink_config *c = s->p.cfg;
    uint64_t held = 0;
    uint64_t buffered = 0;

    pthread_mutex_lock(&s->mu);
    struct task **v = sink_sorted(s);
    for (size_t i = 0; i < s->n_queues; i++) {
        held += v[i]->owned_here ? 1 : 0;
        buffered += v[i]->has_snap ? v[i]->snap.buffered_bytes : 0;
    }
    jw_key(w, "ok");
    jw_bool(w, s->is_reachable || !s->has_probed ? s->has_probed : false);
    jw_key(w, "sink");
    jw_cstr(w, c->sink);
    jw_key(w, "instance");
    jw_cstr(w, s->p.node->instance);
    jw_key(w, "version");
    jw_cstr(w, SINK_VERSION);
    jw_key(w, "running");
    jw_bool(w, s->is_started && !s->is_stopped);
    jw_key(w, "bucket");
    sink_bucket_json(s, w);
    jw_key(w, "format");
    jw_cstr(w, sink_format_name(c->format));
    jw_key(w, "compression");
    jw_cstr(w, sink_config_compression_name(c));
    jw_key(w, "layout");
    jw_cstr(w, layout_kind_name(c->layout));
    jw_key(w, "align");
    jw_cstr(w, layout_align_name(c->align));
    sink_status_tail(s, w, held, buffered);
    jw_key(w, "queues");
    jw_arr_begin(w);
    for (size_t i = 0; i < s->n_queues; i++) {
        sink_row_json(v[i], w);
    }
    jw_arr_end(w);
    pthread_mutex_unlock(&s->mu);
    free(v);
}

struct family {
    const char *name;
    const char *type;
    const char *help;
};

static const struct family FAMILIES[] = {
    {"queen_s3_lag_seconds", "gauge",
     "Seconds this node's safeTime is ahead of the stamp the queue's lake is "
     "complete through \xe2\x80\x94 the SLO"},
    {"queen_s3_safe_lag_seconds", "gauge",
     "Seconds between this node's wall clock and its safeTime"},
    {"queen_s3_windows_committed_total", "counter",
     "Windows committed to the lake"},
    {"queen_s3_records_written_total", "counter",
     "Records written into objects"},
    {"queen_s3_bytes_written_total", "counter",
     "Object bytes written, after compression"},
    {"queen_s3_records_lost_total", "counter",
     "Records that went away before the sink read them (plan \xc2\xa7"
     "4.6)"},
    {"queen_s3_window_records", "histogram", "Records per window"},
    {"queen_s3_window_bytes", "histogram", "Object bytes per window"},
    {"queen_s3_buffer_bytes", "gauge",
     "Buffered record bytes across every queue"},
    {"queen_s3_fetch_calls_total", "counter", "Fetch calls into the broker"},
    {"queen_s3_discovery_partitions", "gauge",
     "Partitions of the queue the last full discovery sweep enumerated, over "
     "all its pages"},
    {"queen_s3_s3_requests_total", "counter", "S3 API requests"},
    {"queen_s3_commit_precondition_lost_total", "counter",
     "KV commit batches a lost precondition rolled back"},
    {"queen_s3_checkpoint_age_windows", "gauge",
     "Windows committed since the last position checkpoint"},
    {"queen_s3_queues_given_back_total", "counter",
     "Queues this node gave back so a node below its fair share could take "
     "them"},
};

static void family_head(struct buf *out, size_t i, struct err *err)
{
    buf_printf(out, err, "# HELP %s %s\n# TYPE %s %s\n", FAMILIES[i].name,
               FAMILIES[i].help, FAMILIES[i].name, FAMILIES[i].type);
}

/* One counter/gauge sample per queue; which picks the value. */
static void sink_per_queue(struct sink *s, struct task **v, struct buf *out,
                           size_t fam, int which, struct err *err)
{
    for (size_t i = 0; i < s->n_queues; i++) {
        const struct task *t = v[i];
        const struct driver_counters *b = &t->base;
        const struct driver_counters *c = &t->snap.counters;
        const char *n = FAMILIES[fam].name;

        switch (which) {
        case 0:
            if (t->has_snap && t->snap.has_lag) {
                buf_printf(out, err, "%s{queue=\"%s\"} %g\n", n, t->name,
                           (double)t->snap.lag_us / 1e6);
            }
            break;
        case 1:
            buf_printf(out, err, "%s{queue=\"%s\"} %" PRIu64 "\n", n, t->name,
                       b->windows_committed + c->windows_committed);
            break;
        case 2:
            buf_printf(out, err, "%s{queue=\"%s\"} %" PRIu64 "\n", n, t->name,
                       b->records + c->records);
            break;
        case 3:
            buf_printf(out, err, "%s{queue=\"%s\"} %" PRIu64 "\n", n, t->name,
                       b->records_lost + c->records_lost);
            break;
        default:
            break;
        }
    }
}

static void sink_metrics_rest(struct sink *s, struct task **v, struct buf *out,
                              struct err *err)
{
    const char *fmt = sink_format_name(s->p.cfg->format);
    uint64_t buffered = 0;

    family_head(out, 4, err);
    for (size_t i = 0; i < s->n_queues; i++) {
        const struct driver_counters *b = &v[i]->base;
        const struct driver_counters *c = &v[i]->snap.counters;

        buf_printf(out, err,
                   "queen_s3_bytes_written_total{queue=\"%s\",format=\"%s\"} "
                   "%" PRIu64 "\n",
                   v[i]->name, fmt,
                   b->bytes_jsonl + b->bytes_parquet + c->bytes_jsonl +
                       c->bytes_parquet);
        buffered += v[i]->has_snap ? v[i]->snap.buffered_bytes : 0;
    }
    family_head(out, 5, err);
    sink_per_queue(s, v, out, 5, 3, err);
    family_head(out, 6, err);
    family_head(out, 7, err);
    family_head(out, 8, err);
    buf_printf(out, err, "queen_s3_buffer_bytes %" PRIu64 "\n", buffered);
    family_head(out, 9, err);
    for (size_t i = 0; i < s->n_queues; i++) {
        const struct driver_counters *b = &v[i]->base;
        const struct driver_counters *c = &v[i]->snap.counters;

        buf_printf(out, err,
                   "queen_s3_fetch_calls_total{queue=\"%s\",result=\"error\"} "
                   "%" PRIu64 "\n"
                   "queen_s3_fetch_calls_total{queue=\"%s\",result=\"ok\"} "
                   "%" PRIu64 "\n",
                   v[i]->name, b->fetch_error + c->fetch_error, v[i]->name,
                   b->fetch_ok + c->fetch_ok);
    }
    family_head(out, 10, err);
    for (size_t i = 0; i < s->n_queues; i++) {
        if (v[i]->has_snap) {
            buf_printf(out, err,
                       "queen_s3_discovery_partitions{queue=\"%s\"} %" PRIu64
                       "\n",
                       v[i]->name, v[i]->snap.discovery_partitions);
        }
    }
}

int sink_metrics(struct sink *s, struct buf *out, struct err *err)
{
    uint64_t lost = 0;
    struct err e = {0};

    pthread_mutex_lock(&s->mu);
    struct task **v = sink_sorted(s);
    family_head(out, 0, &e);
    sink_per_queue(s, v, out, 0, 0, &e);
    family_head(out, 1, &e);
    family_head(out, 2, &e);
    sink_per_queue(s, v, out, 2, 1, &e);
    family_head(out, 3, &e);
    sink_per_queue(s, v, out, 3, 2, &e);
    sink_metrics_rest(s, v, out, &e);
    family_head(out, 11, &e);
    s3_metrics_render(s3_client_metrics(s->p.s3), NULL, out, &e);
    family_head(out, 12, &e);
    for (size_t i = 0; i < s->n_queues; i++) {
        lost += v[i]->base.commit_precondition_lost +
                v[i]->snap.counters.commit_precondition_lost;
    }
    buf_printf(out, &e, "queen_s3_commit_precondition_lost_total %" PRIu64 "\n",
               lost);
    family_head(out, 13, &e);
    for (size_t i = 0; i < s->n_queues; i++) {
        if (v[i]->has_snap) {
            buf_printf(out, &e,
                       "queen_s3_checkpoint_age_windows{queue=\"%s\"} %" PRId64
                       "\n",
                       v[i]->name, v[i]->snap.checkpoint_age);
        }
    }
    family_head(out, 14, &e);
    buf_printf(out, &e, "queen_s3_queues_given_back_total 0\n");
    pthread_mutex_unlock(&s->mu);
    free(v);
    if (e.code != 0) {
        return err_set(err, e.code, "%s", e.msg);
    }
    return 0;
}
