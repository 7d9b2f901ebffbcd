/* The lease of one queue (docs/design/protocol.md §3): a KV row in namespace
 * queen-s3, key s3:<sink>:<esc queue>:lease, value {"instance","incarnation",
 * "sinceMs"} with a TTL of max(1, ttl_ms / 1000) seconds.
 *
 * The lease is the only thing that keeps two nodes from writing the same
 * window: not the TTL (a paused node outlives it) but the fence. Every
 * pointer write carries a required put expecting the version this handle
 * last wrote; a node that lost its row can still upload objects (same bytes,
 * same keys, harmless) but can never move the intent or the commit pointer.
 * Once lost the handle stays lost: the driver stops Fenced and the host
 * claims afresh with a new handle and a new incarnation. */
#include "sink/lease.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "sink/docs.h"
#include "sink/layout.h"

/* Instance names read back from rows: QUEEN_S3_INSTANCE allows 511 bytes,
 * and a shorter buffer would read our own row as another node's. */
#define LEASE_INSTANCE_MAX 512

struct lease {
    const struct sink_broker *b;
    uint8_t tenant[16];
    const char *instance;
    int64_t ttl_s;
    struct lease_clock clock;
    char incarnation[17];
    char key[KV_KEY_MAX + 1];
    pthread_mutex_t mu;
    uint64_t version; /* (1) 0 = not held */
    /* (1) sticky; written under mu, read without it: lease_lost() is
     * asked at every driver tick and must not wait behind a fence whose KV
     * call holds mu (up to the KV timeout). */
    atomic_bool is_lost;
    atomic_int lost_why; /* enum lease_lost_why, set before is_lost */
    int64_t since_ms;
    struct buf doc; /* the value of the last fence/acquire */
    /* (4) When the last renewal that landed (acquire, takeover, fence) was
     * sent, on l->clock; read without mu by every PUT's age check. */
    _Atomic int64_t renewed_ms;
};

bool sink_broker_kv_retriable(int code)
{
    /* The reference's rule for the KV's answers: 408, 429 and 5xx retry.
     * A full disk (507) frees up: the queue waits for it, its lease is not
     * given up as if another instance had taken it. */
    return code == ERR_NOT_LEADER || code == ERR_BUSY || code == ERR_TIMEOUT ||
           code == ERR_IO || code == ERR_FULL || code == ERR_LIMIT ||
           code == ERR_REMOTE;
}

int64_t lease_ttl_seconds(int64_t ttl_ms)
{
    int64_t s = ttl_ms / 1000;

    return s < 1 ? 1 : s;
}

int64_t lease_margin_ms(int64_t ttl_ms)
{
    int64_t ttl = lease_ttl_seconds(ttl_ms) * 1000;
    int64_t m = ttl / 5 > 1000 ? ttl / 5 : 1000;

    return m > ttl / 2 ? ttl / 2 : m;
}

int64_t lease_refresh_interval_ms(int64_t ttl_ms)
{
    int64_t v = lease_ttl_seconds(ttl_ms) * 1000 / 3;

    return v < 100 ? 100 : v;
}

static void real_random(void *arg, uint8_t *out, size_t n)
{
    UNUSED(arg);
    size_t got = 0;

    while (got < n) {
        ssize_t r = getrandom(out + got, n - got, 0);
        if (r > 0) {
            got += (size_t)r;
        }
    }
}

void lease_new_incarnation(void (*random_bytes)(void *, uint8_t *, size_t),
                           void *arg, char out[17])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t r[8] = {0};

    (random_bytes != NULL ? random_bytes : real_random)(arg, r, sizeof(r));
    for (size_t i = 0; i < sizeof(r); i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[16] = '\0';
}

static int64_t real_now_ms(void *arg)
{
    UNUSED(arg);
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void real_sleep_ms(void *arg, int64_t ms)
{
    UNUSED(arg);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

static int64_t clock_now(const struct lease_clock *c)
{
    return c->now_ms != NULL ? c->now_ms(c->arg) : real_now_ms(NULL);
}

static void clock_sleep(const struct lease_clock *c, int64_t ms)
{
    if (c->sleep_ms != NULL) {
        c->sleep_ms(c->arg, ms);
    } else {
        real_sleep_ms(NULL, ms);
    }
}

struct lease *lease_new(const struct lease_config *cfg,
                        const struct sink_broker *b, struct err *err)
{
    struct buf k;

    if (cfg->sink == NULL || cfg->queue == NULL || cfg->instance == NULL ||
        cfg->instance[0] == '\0') {
        err_set(err, ERR_INVALID, "lease: sink, queue and instance are needed");
        return NULL;
    }
    buf_init(&k, KV_KEY_MAX);
    /* the longest of the queue's keys, so that a name is refused here,
     * once, rather than at its first KV call (claim, restore or commit):
     * within the store's key with the tenant and namespace */
    int rc = layout_kv_key(&k, cfg->sink,
                           (struct slice){cfg->queue, strlen(cfg->queue)},
                           LAYOUT_KV_COMMITTED, err);
    if (rc == ERR_TOO_BIG ||
        (rc == 0 && k.len > KV_KEY_FITS(strlen(LEASE_NS)))) {
        rc = err_set(err, ERR_TOO_BIG,
                     "the queue's name, percent-encoded in its KV keys "
                     "(s3:%s:<queue>:committed), makes them longer than the "
                     "KV's %d bytes in namespace %s: this queue cannot be "
                     "mirrored",
                     cfg->sink, (int)KV_KEY_FITS(strlen(LEASE_NS)), LEASE_NS);
    }
    if (rc != 0) {
        buf_free(&k);
        return NULL;
    }
    buf_reset(&k);
    if (layout_kv_key(&k, cfg->sink,
                      (struct slice){cfg->queue, strlen(cfg->queue)},
                      LAYOUT_KV_LEASE, err) != 0) {
        buf_free(&k);
        return NULL;
    }
    struct lease *l = xcalloc(1, sizeof(*l));
    l->b = b;
    memcpy(l->tenant, cfg->tenant, 16);
    l->instance = cfg->instance;
    l->ttl_s = lease_ttl_seconds(cfg->ttl_ms);
    l->clock = cfg->clock;
    memcpy(l->key, k.data, k.len + 1);
    buf_free(&k);
    lease_new_incarnation(cfg->random_bytes, cfg->random_arg, l->incarnation);
    pthread_mutex_init(&l->mu, NULL);
    atomic_init(&l->is_lost, false);
    atomic_init(&l->lost_why, LEASE_LOST_NONE);
    atomic_init(&l->renewed_ms, INT64_MIN / 2);
    buf_init(&l->doc, 4096);
    return l;
}

void lease_free(struct lease *l)
{
    if (l == NULL) {
        return;
    }
    pthread_mutex_destroy(&l->mu);
    buf_free(&l->doc);
    free(l);
}

const char *lease_incarnation(const struct lease *l)
{
    return l->incarnation;
}

const char *lease_key(const struct lease *l)
{
    return l->key;
}

uint64_t lease_version(struct lease *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t v = l->version;
    pthread_mutex_unlock(&l->mu);
    return v;
}

bool lease_lost(struct lease *l)
{
    return atomic_load(&l->is_lost);
}

/* Mark l lost for why; the first reason stays. */
static void lose(struct lease *l, enum lease_lost_why why)
{
    int none = LEASE_LOST_NONE;

    atomic_compare_exchange_strong(&l->lost_why, &none, (int)why);
    atomic_store(&l->is_lost, true);
}

const char *lease_lost_reason(struct lease *l)
{
    switch (atomic_load(&l->lost_why)) {
    case LEASE_LOST_TAKEN:
        return "the lease is held by another instance";
    case LEASE_LOST_AGE:
        return "the lease was not renewed in time here (the last renewal "
               "that landed is older than the TTL less its margin), so this "
               "node gave the queue up; another node takes it over";
    case LEASE_LOST_REFUSED:
        return "the broker refused the lease renewal for good";
    case LEASE_LOST_EXPIRED:
        return "the lease expired: its row was gone when this node renewed "
               "it (no renewal landed within its TTL); no other instance "
               "held it, and this node claims the queue again";
    default:
        return "the lease was given up";
    }
}

enum lease_lost_why lease_lost_cause(struct lease *l)
{
    return (enum lease_lost_why)atomic_load(&l->lost_why);
}

void lease_adopt_version(struct lease *l, uint64_t v)
{
    pthread_mutex_lock(&l->mu);
    if (!l->is_lost && l->version != 0) {
        l->version = v;
    }
    pthread_mutex_unlock(&l->mu);
}

void lease_mark_lost(struct lease *l)
{
    pthread_mutex_lock(&l->mu);
    lose(l, LEASE_LOST_REFUSED);
    pthread_mutex_unlock(&l->mu);
}

void lease_put_op(struct kv_op *op, const char *key, struct slice value,
                  int64_t ttl_seconds, const uint64_t *expect, bool required)
{
    memset(op, 0, sizeof(*op));
    op->op = KV_PUT;
    op->ns = SLICE_LIT(LEASE_NS);
    op->key = (struct slice){key, strlen(key)};
    op->value = value;
    op->ttl_seconds = ttl_seconds;
    op->forever = ttl_seconds == 0;
    op->has_expect = expect != NULL;
    op->expect = expect != NULL ? *expect : 0;
    op->required = required;
}

/* Encode our document into l->doc (under l->mu). */
static int encode_doc(struct lease *l, struct err *err)
{
    struct docs_lease d = {
        .instance = {l->instance, strlen(l->instance)},
        .incarnation = {l->incarnation, 16},
        .since_ms = l->since_ms,
    };

    buf_reset(&l->doc);
    return docs_lease_encode(&l->doc, &d, err);
}

/* The instance and incarnation of a row value; false if unparsable. */
static bool parse_doc(struct slice v, char *inst, size_t cap, char inc[17])
{
    struct buf arena;
    struct docs_lease d;
    struct err e;
    bool ok;

    buf_init(&arena, BUF_UNLIMITED);
    ok = docs_lease_decode(v.ptr, v.len, &d, &arena, &e) == 0;
    if (ok) {
        snprintf(inst, cap, "%.*s", (int)d.instance.len, d.instance.ptr);
        snprintf(inc, 17, "%.*s", (int)d.incarnation.len, d.incarnation.ptr);
    }
    buf_free(&arena);
    return ok;
}

static int kv_get(const struct sink_broker *b, const uint8_t tenant[16],
                  const char *key, struct kv_answer *ans, struct err *err)
{
    struct kv_op op;

    memset(&op, 0, sizeof(op));
    op.op = KV_GET;
    op.ns = SLICE_LIT(LEASE_NS);
    op.key = (struct slice){key, strlen(key)};
    memset(ans, 0, sizeof(*ans));
    int rc = b->kv(b->arg, tenant, &op, 1, 0, ans, err);
    if (rc == 0 && ans->status != 0) {
        rc = err_set(err, ans->status, "kv get %s: %s", key, ans->msg);
        kv_answer_free(ans);
    }
    return rc;
}

int lease_holder(struct lease *l, enum lease_holder_kind *kind, char *other,
                 size_t cap, struct err *err)
{
    struct kv_answer a;
    char inst[LEASE_INSTANCE_MAX];
    char inc[17];

    if (kv_get(l->b, l->tenant, l->key, &a, err) != 0) {
        return err->code;
    }
    *kind = LEASE_FREE;
    if (a.n_results == 1 && a.results[0].found) {
        if (!parse_doc(a.results[0].value, inst, sizeof(inst), inc)) {
            snprintf(inst, sizeof(inst), "unknown");
        }
        *kind = strcmp(inst, l->instance) == 0 ? LEASE_MINE : LEASE_OTHER;
        snprintf(other, cap, "%s", inst);
    }
    kv_answer_free(&a);
    return 0;
}

/* The existing row of a failed putIfAbsent: take it over when it is an
 * earlier life of this instance. */
static int takeover(struct lease *l, const struct kv_result *r, bool *taken,
                    char *holder, size_t cap, struct err *err)
{
    char inst[LEASE_INSTANCE_MAX] = "unknown";
    char inc[17] = "";
    struct kv_op op;
    struct kv_answer a;

    if (!r->has_value || !parse_doc(r->value, inst, sizeof(inst), inc)) {
        snprintf(inst, sizeof(inst), "unknown");
    }
    if (strcmp(inst, l->instance) != 0 || strcmp(inc, l->incarnation) == 0) {
        snprintf(holder, cap, "%s", inst);
        return 0;
    }
    lease_put_op(&op, l->key, buf_slice(&l->doc), l->ttl_s, &r->version, true);
    memset(&a, 0, sizeof(a));
    int64_t sent = clock_now(&l->clock);
    if (l->b->kv(l->b->arg, l->tenant, &op, 1, 0, &a, err) != 0) {
        return err->code;
    }
    if (a.status == 0 && a.n_results == 1 && a.results[0].applied &&
        a.results[0].version != 0) {
        l->version = a.results[0].version;
        atomic_store(&l->renewed_ms, sent);
        *taken = true;
    } else if (a.status == ERR_PRECONDITION) {
        if (!a.has_value || !parse_doc(a.value, inst, sizeof(inst), inc)) {
            snprintf(inst, sizeof(inst), "unknown");
        }
        snprintf(holder, cap, "%s", inst);
    } else {
        int rc = err_set(err, a.status != 0 ? a.status : ERR_PRECONDITION,
                         "lease takeover: %s", a.msg);
        kv_answer_free(&a);
        return rc;
    }
    kv_answer_free(&a);
    return 0;
}

int lease_acquire(struct lease *l, int64_t wall_ms, bool *taken, char *holder,
                  size_t cap, struct err *err)
{
    struct kv_op op;
    struct kv_answer a;
    int rc;

    *taken = false;
    holder[0] = '\0';
    pthread_mutex_lock(&l->mu);
    l->since_ms = wall_ms;
    rc = encode_doc(l, err);
    if (rc != 0) {
        goto out_unlock;
    }
    lease_put_op(&op, l->key, buf_slice(&l->doc), l->ttl_s, NULL, false);
    op.op = KV_PUT_IF_ABSENT;
    memset(&a, 0, sizeof(a));
    int64_t sent = clock_now(&l->clock);
    rc = l->b->kv(l->b->arg, l->tenant, &op, 1, 0, &a, err);
    if (rc != 0) {
        goto out_unlock;
    }
    if (a.status != 0 || a.n_results != 1) {
        rc = err_set(err, a.status != 0 ? a.status : ERR_IO,
                     "lease putIfAbsent: %s", a.msg);
    } else if (a.results[0].applied) {
        l->version = a.results[0].version;
        atomic_store(&l->renewed_ms, sent);
        *taken = true;
    } else {
        rc = takeover(l, &a.results[0], taken, holder, cap, err);
    }
    kv_answer_free(&a);
out_unlock:
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* A fence that lost its precondition against a row still carrying this
 * handle's incarnation: an earlier call of ours (a heartbeat or a pointer
 * batch whose caller gave up on a timeout) was applied after all, and the
 * row moved one version past the one we remember. Only this handle writes
 * its incarnation, and only expecting a version it wrote itself, so no
 * other writer can have come in between: adopt the row's version. A row of
 * another instance or incarnation (or an expired one) is never adopted.
 * Under l->mu; true when adopted. */
static bool fence_adopt(struct lease *l, const struct kv_answer *a)
{
    char inst[LEASE_INSTANCE_MAX];
    char inc[17];

    if (a->status != ERR_PRECONDITION || a->failed_index != 0 ||
        !a->has_value || a->version == 0 || a->version == l->version ||
        !parse_doc(a->value, inst, sizeof(inst), inc)) {
        return false;
    }
    if (strcmp(inst, l->instance) != 0 || strcmp(inc, l->incarnation) != 0) {
        return false;
    }
    l->version = a->version;
    return true;
}

/* After a fenced batch: keep the fence's version or mark the lease lost
 * (under l->mu). */
static int fence_outcome(struct lease *l, const struct kv_answer *a,
                         struct err *err)
{
    if (a->status == ERR_PRECONDITION && a->failed_index == 0 &&
        a->kv_reason == KV_REASON_ABSENT) {
        /* no row to fence: it expired, nobody took it */
        lose(l, LEASE_LOST_EXPIRED);
        return err_set(err, ERR_PRECONDITION,
                       "lease expired: its row is gone (no renewal landed "
                       "within its TTL of %" PRId64 " s); no other instance "
                       "holds it",
                       l->ttl_s);
    }
    if (a->status == ERR_PRECONDITION) {
        if (a->failed_index == 0) {
            lose(l, LEASE_LOST_TAKEN);
        }
        return err_set(err, ERR_PRECONDITION,
                       "precondition lost at op %zu: %s (winner version "
                       "%" PRIu64 ")",
                       a->failed_index,
                       kv_reason_name(a->kv_reason) != NULL
                           ? kv_reason_name(a->kv_reason)
                           : "unknown",
                       a->version);
    }
    if (a->status != 0) {
        return err_set(err, a->status, "%s", a->msg);
    }
    if (a->n_results < 1 || !a->results[0].applied ||
        a->results[0].version == 0) {
        lose(l, LEASE_LOST_TAKEN);
        return err_set(err, ERR_PRECONDITION,
                       "precondition lost at op 0: the fence was not applied");
    }
    l->version = a->results[0].version;
    return 0;
}

int lease_fenced(struct lease *l, const struct kv_op *ops, size_t n,
                 struct kv_answer *out, struct err *err)
{
    struct kv_op *batch = xcalloc(n + 1, sizeof(*batch));
    int rc;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&l->mu);
    if (l->is_lost || l->version == 0) {
        rc = err_set(err, ERR_PRECONDITION, "the lease is not held");
        goto out_unlock;
    }
    rc = encode_doc(l, err);
    if (rc != 0) {
        goto out_unlock;
    }
    if (n > 0) {
        memcpy(batch + 1, ops, n * sizeof(*ops));
    }
    /* At most one resend: the batch rolled back as a whole, and the row
     * carried our incarnation at a version we now know. */
    int64_t sent = 0;
    for (int tries = 0;; tries++) {
        lease_put_op(&batch[0], l->key, buf_slice(&l->doc), l->ttl_s,
                     &l->version, true);
        sent = clock_now(&l->clock);
        rc = l->b->kv(l->b->arg, l->tenant, batch, n + 1, 0, out, err);
        if (rc != 0 || tries > 0 || !fence_adopt(l, out)) {
            break;
        }
        kv_answer_free(out); /* leaves it empty for the resend */
    }
    if (rc == 0) {
        rc = fence_outcome(l, out, err);
        if (rc == 0) {
            atomic_store(&l->renewed_ms, sent);
        }
        if (rc != 0 && rc != ERR_PRECONDITION) {
            kv_answer_free(out); /* a call error leaves *out empty */
        }
    }
out_unlock:
    pthread_mutex_unlock(&l->mu);
    free(batch);
    return rc;
}

int lease_check_age(struct lease *l, struct err *err)
{
    int64_t ttl = l->ttl_s * 1000;
    int64_t margin = lease_margin_ms(ttl);
    int64_t age = clock_now(&l->clock) - atomic_load(&l->renewed_ms);

    if (atomic_load(&l->is_lost)) {
        return err_set(err, ERR_PRECONDITION, "the lease is not held");
    }
    if (age < ttl - margin) {
        return 0;
    }
    /* (4) Sticky as any loss; set without mu, which a renewal stuck in a
     * KV call may hold for its whole timeout. */
    lose(l, LEASE_LOST_AGE);
    return err_set(err, ERR_PRECONDITION,
                   "lease expired here: last renewed %" PRId64
                   " ms ago, at or past its TTL of %" PRId64
                   " ms less a margin of %" PRId64
                   " ms; giving the queue up before this PUT",
                   age, ttl, margin);
}

int lease_may_send(void *arg, struct err *err)
{
    return lease_check_age(arg, err);
}

int lease_refresh(struct lease *l, struct err *err)
{
    struct kv_answer a;
    int rc = lease_fenced(l, NULL, 0, &a, err);

    kv_answer_free(&a);
    if (rc != 0 && rc != ERR_PRECONDITION && !sink_broker_kv_retriable(rc)) {
        lease_mark_lost(l); /* a refusal that will not change: stop */
    }
    return rc;
}

/* One round of delete-if-ours: 0 done, or the failing call's error. */
static int delete_round(const struct sink_broker *b, const uint8_t tenant[16],
                        const char *key, const char *incarnation,
                        struct err *err)
{
    struct kv_answer a;
    char inst[LEASE_INSTANCE_MAX];
    char inc[17] = "";
    struct kv_op op;

    if (kv_get(b, tenant, key, &a, err) != 0) {
        return err->code;
    }
    bool is_ours = a.n_results == 1 && a.results[0].found &&
                   parse_doc(a.results[0].value, inst, sizeof(inst), inc) &&
                   strcmp(inc, incarnation) == 0;
    uint64_t version = is_ours ? a.results[0].version : 0;
    kv_answer_free(&a);
    if (!is_ours) {
        return 0;
    }
    memset(&op, 0, sizeof(op));
    op.op = KV_DELETE;
    op.ns = SLICE_LIT(LEASE_NS);
    op.key = (struct slice){key, strlen(key)};
    op.has_expect = true;
    op.expect = version;
    memset(&a, 0, sizeof(a));
    if (b->kv(b->arg, tenant, &op, 1, 0, &a, err) != 0) {
        return err->code;
    }
    int rc = a.status == 0 || a.status == ERR_PRECONDITION
                 ? 0
                 : err_set(err, a.status, "kv delete %s: %s", key, a.msg);
    bool again = a.status == 0 && a.n_results == 1 && !a.results[0].applied;
    kv_answer_free(&a);
    if (rc == 0 && again) {
        /* the row changed between get and delete: look again */
        return err_set(err, ERR_BUSY, "kv delete %s: the row changed", key);
    }
    return rc;
}

static void log_gave_up(const char *what, const char *key, const char *msg)
{
    log_warn_kv(
        "queen-s3",
        LOG_FMT("could not give the %s back; it expires after its TTL", what),
        {"key", key}, {"error", msg});
}

int lease_delete_if_ours(const struct sink_broker *b, const uint8_t tenant[16],
                         const char *key, const char *incarnation,
                         const char *what, const struct lease_clock *clock)
{
    struct lease_clock real = {0};
    const struct lease_clock *c = clock != NULL ? clock : &real;
    int64_t start = clock_now(c);
    int64_t step = LEASE_RELEASE_STEP_MS;
    struct err err;

    err_clear(&err);
    while (delete_round(b, tenant, key, incarnation, &err) != 0) {
        if (clock_now(c) - start + step > LEASE_RELEASE_BUDGET) {
            log_gave_up(what, key, err.msg);
            return ERR_TIMEOUT;
        }
        log_debug_kv("queen-s3",
                     LOG_FMT("giving a %s back failed; retrying", what),
                     {"key", key}, {"error", err.msg});
        clock_sleep(c, step);
        step =
            step * 2 > LEASE_RELEASE_MAX_MS ? LEASE_RELEASE_MAX_MS : step * 2;
        err_clear(&err);
    }
    return 0;
}

int lease_release(struct lease *l)
{
    pthread_mutex_lock(&l->mu);
    bool was_held = l->version != 0;
    l->version = 0;
    pthread_mutex_unlock(&l->mu);
    if (!was_held) {
        return 0;
    }
    return lease_delete_if_ours(l->b, l->tenant, l->key, l->incarnation,
                                "lease", &l->clock);
}
