/* The queue driver: one queue's life inside the sink as a step machine
 * (docs/design/protocol.md §5, §6, §7, §8 and docs/design/window.md §11).
 *
 * The window engine decides what to do; the driver does it. A tick restores
 * once (the intent and committed pointers with their versions, the latest
 * checkpoint at or below the commit, and the redo's manifest), then runs
 * rounds of engine actions until the engine asks to idle, an error asks for
 * a backoff, or the queue stops. Every read and KV call is synchronous, so
 * every action is answered inside the round that asked for it.
 *
 * Exactly once rests on three rules kept here:
 *   (1) The intent (k, tStart, tEnd, and every input of the keys and bytes:
 *       format, compression, layout, writer, align, prefix, libraries,
 *       per-partition offsets) is written through the fence before any
 *       object of window k, so a restart rebuilds the identical window
 *       under the same keys (pin_redo), whatever the settings became.
 *   (2) The commit pointer moves only through the fence, after the objects
 *       and the manifest landed.
 *   (3) A redo whose manifest matches its intent is committed from the
 *       manifest without a PUT; otherwise it is rebuilt with the same bytes
 *       under the same keys. A redo of an intent this node did not write
 *       (another writer string, or other or no codec library versions)
 *       never overwrites other bytes under a key (redo_keys_free).
 *
 * The closing actions (WriteIntent, Upload, Commit) are emitted once by the
 * engine; the driver keeps a copy of the one in flight and repeats it after
 * a backoff until it succeeds or the queue stops.
 *
 * What a window's objects are, how the next window's are built ahead, and
 * the uploader thread that puts them while the engine reads on
 * (overlap_upload) live in upload.c; upload.h says what crosses threads.
 * The driver decides when, and it alone writes the pointers. */
#include "sink/driver.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/isotime.h"
#include "base/json.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/xalloc.h"
#include "parquet/parquet.h"
#include "s3/client.h"
#include "sink/docs.h"
#include "sink/engine.h"
#include "sink/jsonl.h"
#include "sink/layout.h"
#include "sink/lease.h"
#include "sink/seek.h"
#include "sink/upload.h"

#define DRIVER_ROUNDS_PER_TICK 64
#define DRIVER_ERROR_DELAY_MS  500
#define DRIVER_UPLOAD_WAIT_MS  500 /* a slice of waiting on a pass */
#define DRIVER_STOP_SLEEP_MS   250
#define DRIVER_KEY_MAX         2048
#define DRIVER_AGED_US         ((int64_t)10 * 1000 * 1000)
#define DRIVER_CHECKPOINT_LIST ((size_t)1000 * 1000)
/* At most this many manifests are read at a start to make the positions
 * exact at the commit pointer (engine.h (5)). */
#define DRIVER_REBUILD_MAX_WINDOWS 10000
/* Per store read: a slice is merged while its records are still in the
 * core's L2 from the walk (store_read.c prefetches each leaf page). */
#define DRIVER_FETCH_SLICE ((uint64_t)1 * 1024 * 1024)

enum pending_kind {
    PENDING_NONE,
    PENDING_INTENT,
    PENDING_UPLOAD,
    PENDING_COMMIT
};

struct pending {
    enum pending_kind kind;
    struct engine_intent_action intent; /* slices into strs */
    const struct engine_plan *plan;     /* valid until engine_on_committed */
    struct engine_commit commit;        /* manifest_key into manifest_key */
    struct buf manifest_key;
    int64_t commit_wall_ms; /* committedAt, fixed at the first attempt */
    char strs[4][128];
};

struct lost_copy {
    char partition[256];
    int64_t from;
    int64_t to;
};

/* One line per 5 s per kind of failure, with the count suppressed
 * (docs/design/window.md §11). */
enum sample_kind {
    SAMPLE_PUT,
    SAMPLE_KV,
    SAMPLE_FETCH,
    SAMPLE_DISCOVERY,
    SAMPLE_KINDS
};

#define DRIVER_SAMPLE_MS 5000

struct sampler {
    bool has_logged;
    int64_t last_ms;
    uint64_t suppressed;
};

struct driver {
    struct driver_config cfg;
    struct sampler samplers[SAMPLE_KINDS];
    int64_t now_ms;
    const struct sink_broker *b;
    struct s3_client *s3;
    struct lease *lease;
    struct engine *e;
    struct layout_queue lq;
    char intent_key[KV_KEY_MAX + 1];
    char committed_key[KV_KEY_MAX + 1];
    char start_key[KV_KEY_MAX + 1];
    uint64_t intent_version;
    uint64_t committed_version;
    uint64_t start_version;
    bool is_start_kept; /* the start row is written, read, or not needed */
    bool has_started;
    bool is_restored;
    bool is_redo;
    struct docs_intent redo_intent; /* slices into redo_arena */
    char redo_comp[32];             /* the redo's compression, as a string */
    struct buf redo_arena;
    /* A redo runs with its intent's settings from the restore until it
     * commits (pin_redo, unpin_redo); the configured ones are kept here. */
    bool is_pinned;
    bool is_pin_done; /* the redo's parts loaded and pin_redo ran */
    /* Without a redo: the window after the commit pointer, whose manifest
     * key must be free before anything is written (check_next_free). */
    int64_t next_k;
    bool is_next_checked;
    /* The start took its positions from the redo's manifest, which then
     * must be committed from (read_redo_positions()). */
    bool is_redo_manifest_applied;
    struct buf parts_arena; /* the redo's parts when read from the bucket */
    struct driver_config unpinned;
    char redo_prefix[512];
    /* Lost ranges the redo's pinned offsets reveal that the engine did not
     * find (it knew no position below them): they join the window's. */
    struct engine_lost_range *pin_lost;
    size_t n_pin_lost;
    bool is_pin_lost_counted;
    enum driver_stop stop;
    char why[512];
    bool is_stop_logged;
    bool is_upload_wait; /* a wait on the pass is under way (bg_poll) */
    /* The checkpoint of the window going up, encoded when the engine
     * asked for it and put once that window's pointer is written
     * (checkpoint_after_commit). */
    bool has_cp_kept;
    int64_t cp_kept_k;
    struct buf cp_kept_key;
    struct buf cp_kept_body;
    atomic_bool drain_requested;
    atomic_bool giving_back;
    atomic_bool force_close;
    /* The last manifest GET failed with a status not worth retrying (a
     * 403): a start that needs it fails the queue (docs/design/protocol.md §7).
     */
    bool is_get_refused;
    bool is_draining;
    int64_t drain_from_k; /* committed_k when the drain began */
    /* The drain passed over a closing action of the engine (one window a
     * drain), or dropped an intent taken before it began and not written
     * yet: the engine waits for its answer, so it is not FILLING again, and
     * the drain ends without that window. */
    bool is_close_passed;
    bool did_work; /* this tick ran a closing or checkpoint action */
    int attempt;   /* failures in a row, for the backoff */
    int64_t retry_after_ms;
    int64_t next_at;
    int64_t wall_ms;
    struct pending pend;
    struct lost_copy *lost;
    size_t n_lost;
    uint64_t last_records;
    uint64_t last_bytes;
    struct driver_window_size recent[DRIVER_RECENT_WINDOWS];
    int64_t last_t_end;
    bool has_t_end;
    struct driver_counters ctr;
    char last_error[512];
    pthread_mutex_t mu;
    struct driver_status st; /* published at the end of every tick */
    /* The window's objects, the prebuild and the uploader thread. */
    struct upload up;
};

static const char *bg_state_name(const struct driver *d);
static void checkpoint_put_kept(struct driver *d, int64_t committed_k);
static void checkpoint_drop_kept(struct driver *d);
static void pin_redo(struct driver *d);

/* ---- small helpers --------------------------------------------------- */

static const char *const crash_names[] = {
    "never",        "after_intent",  "mid_upload",
    "after_upload", "before_commit", "after_commit",
};

bool driver_crash_parse(const char *s, enum driver_crash *out)
{
    if (s == NULL || s[0] == '\0' || strcasecmp(s, "off") == 0 ||
        strcasecmp(s, "none") == 0) {
        *out = DRIVER_CRASH_NEVER;
        return true;
    }
    for (size_t i = 0; i < ARRAY_LEN(crash_names); i++) {
        if (strcasecmp(s, crash_names[i]) == 0) {
            *out = (enum driver_crash)i;
            return true;
        }
    }
    return false;
}

const char *driver_crash_name(enum driver_crash c)
{
    return (size_t)c < ARRAY_LEN(crash_names) ? crash_names[c] : "never";
}

const char *driver_stop_name(enum driver_stop s)
{
    static const char *const names[] = {"running", "drained", "fenced",
                                        "missing", "failed",  "crashed"};

    return (size_t)s < ARRAY_LEN(names) ? names[s] : "running";
}

void driver_config_defaults(struct driver_config *c)
{
    memset(c, 0, sizeof(*c));
    c->sink = "default";
    c->prefix = "queen";
    c->tenant_text = "";
    c->queue = "";
    c->format = DRIVER_FORMAT_JSONL;
    c->compression = "zstd";
    c->align = LAYOUT_ALIGN_HOUR;
    c->start = ENGINE_START_EARLIEST;
    c->target_bytes = (uint64_t)64 << 20;
    c->max_window_ms = 300000;
    c->guard_ms = 5000;
    c->checkpoint_every = 20;
    c->fetch_concurrency = 4;
    c->discovery_interval_ms = 1000;
    c->object_max_bytes = (uint64_t)5 << 30;
}

static struct slice cstr(const char *s)
{
    return (struct slice){s, strlen(s)};
}

static bool same_slice(struct slice a, struct slice b)
{
    return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

static void set_error(struct driver *d, const char *fmt, ...) PRINTF(2, 3);
static void fail_doc(struct driver *d, const struct err *err);

static void set_error(struct driver *d, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(d->last_error, sizeof(d->last_error), fmt, ap);
    va_end(ap);
}

/* Record a failure in last_error and log it through the kind's sampler. */
static void fail_sampled(struct driver *d, enum sample_kind kind,
                         const char *fmt, ...) PRINTF(3, 4);

static void fail_sampled(struct driver *d, enum sample_kind kind,
                         const char *fmt, ...)
{
    static const char *const names[] = {"put", "kv", "fetch", "discovery"};
    struct sampler *s = &d->samplers[kind];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(d->last_error, sizeof(d->last_error), fmt, ap);
    va_end(ap);
    if (s->has_logged && d->now_ms - s->last_ms < DRIVER_SAMPLE_MS) {
        s->suppressed++;
        return;
    }
    log_warn_kv("queen-s3", LOG_FMT("%s failed", names[kind]),
                {"queue", d->cfg.queue}, {"error", d->last_error},
                {"suppressed", LOG_U64(s->suppressed)});
    s->has_logged = true;
    s->last_ms = d->now_ms;
    s->suppressed = 0;
}

static void stop(struct driver *d, enum driver_stop s, const char *why)
{
    size_t n = strnlen(why, sizeof(d->why) - 1);

    d->stop = s;
    memcpy(d->why, why, n);
    d->why[n] = '\0';
}

/* docs/design/protocol.md §7: min(1 s * 2^(n-1), 60 s) times a jitter in
 * [0.75, 1.25), or the Retry-After exactly up to the same 60 s: a service
 * (or a proxy) answering Retry-After: 86400 stalled a queue for a day,
 * with the bucket well again, and nothing said it slept. */
static int64_t backoff_ms(struct driver *d)
{
    return (int64_t)s3_retry_driver_backoff_ms(
        d->attempt, d->retry_after_ms,
        d->cfg.random != NULL ? d->cfg.random(d->cfg.random_arg) : 0.5);
}

/* Ask for a retry after the backoff. */
static void retry_later(struct driver *d, int64_t now, int64_t retry_after)
{
    d->attempt++;
    d->retry_after_ms = retry_after;
    int64_t wait = backoff_ms(d);
    if (d->is_draining && wait > DRIVER_STOP_SLEEP_MS) {
        wait = DRIVER_STOP_SLEEP_MS;
    }
    d->next_at = now + wait;
}

/* A crash point: false when it did not fire. In return mode the driver
 * stops Crashed; otherwise the process aborts. */
static struct upload_crash crash_point_of(const struct driver *d)
{
    return (struct upload_crash){d->cfg.crash_at, d->cfg.crash_returns};
}

static bool crash(struct driver *d, enum driver_crash at)
{
    if (!upload_crash_fires(crash_point_of(d), at)) {
        return false;
    }
    stop(d, DRIVER_CRASHED, driver_crash_name(at));
    set_error(d, "crash point %s", driver_crash_name(at));
    return true;
}

/* ---- construction ---------------------------------------------------- */

static const char *format_name(const struct driver_config *c)
{
    return c->format == DRIVER_FORMAT_PARQUET ? "parquet" : "jsonl";
}

static struct engine *make_engine(const struct driver_config *c,
                                  struct err *err)
{
    struct engine_config ec;
    const char *ext;

    engine_config_defaults(&ec);
    ec.queue = c->queue;
    ec.start = (enum engine_start)c->start;
    ec.align = c->align == LAYOUT_ALIGN_HOUR  ? ENGINE_ALIGN_HOUR
               : c->align == LAYOUT_ALIGN_DAY ? ENGINE_ALIGN_DAY
                                              : ENGINE_ALIGN_NONE;
    ec.target_bytes = c->target_bytes < 1 ? 1 : c->target_bytes;
    ec.max_window_us = c->max_window_ms * 1000;
    ec.guard_us = c->guard_ms * 1000;
    ec.checkpoint_every = c->checkpoint_every;
    ec.fetch_concurrency = c->fetch_concurrency < 1 ? 1 : c->fetch_concurrency;
    ec.discovery_interval_ms = c->discovery_interval_ms;
    ec.prune_after_windows = 60;
    if (c->max_buffer_bytes > 0) {
        ec.max_buffer_bytes = c->max_buffer_bytes;
    }
    ec.spares = c->spares;
    ec.format = format_name(c);
    ec.layout = c->per_partition ? "per-partition" : "merged";
    if (upload_codec_strings(c, &ec.compression, &ec.writer, &ext, err) != 0) {
        return NULL;
    }
    return engine_new(&ec, err);
}

struct driver *driver_new(const struct driver_config *cfg,
                          const struct sink_broker *b, struct s3_client *s3,
                          struct lease *lease, struct err *err)
{
    struct buf k;
    struct engine *e = make_engine(cfg, err);

    if (e == NULL) {
        return NULL;
    }
    struct driver *d = xcalloc(1, sizeof(*d));
    d->cfg = *cfg;
    d->b = b;
    d->s3 = s3;
    d->lease = lease;
    d->e = e;
    d->lq = (struct layout_queue){cfg->prefix, cstr(cfg->tenant_text),
                                  cstr(cfg->queue)};
    buf_init(&k, KV_KEY_MAX);
    if (layout_kv_key(&k, cfg->sink, cstr(cfg->queue), LAYOUT_KV_INTENT, err) ==
        0) {
        snprintf(d->intent_key, sizeof(d->intent_key), "%s", k.data);
        buf_reset(&k);
        layout_kv_key(&k, cfg->sink, cstr(cfg->queue), LAYOUT_KV_COMMITTED,
                      err);
        snprintf(d->committed_key, sizeof(d->committed_key), "%s", k.data);
        buf_reset(&k);
        layout_kv_key(&k, cfg->sink, cstr(cfg->queue), LAYOUT_KV_START, err);
        snprintf(d->start_key, sizeof(d->start_key), "%s", k.data);
    }
    /* only `latest` records a start (keep_start) */
    d->is_start_kept = cfg->start != ENGINE_START_LATEST;
    buf_free(&k);
    buf_init(&d->pend.manifest_key, DRIVER_KEY_MAX);
    buf_init(&d->redo_arena, BUF_UNLIMITED);
    buf_init(&d->parts_arena, BUF_UNLIMITED);
    pthread_mutex_init(&d->mu, NULL);
    upload_init(&d->up, &d->cfg, &d->lq, d->e, d->s3);
    d->up.may_send = lease_may_send; /* lease.h (4), on the uploader too */
    d->up.gate_arg = lease;
    d->retry_after_ms = -1;
    snprintf(d->st.state, sizeof(d->st.state), "restoring");
    return d;
}

void driver_free(struct driver *d)
{
    if (d == NULL) {
        return;
    }
    upload_free(&d->up);
    engine_free(d->e);
    checkpoint_drop_kept(d);
    buf_free(&d->pend.manifest_key);
    buf_free(&d->redo_arena);
    buf_free(&d->parts_arena);
    free(d->lost);
    free(d->pin_lost);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

void driver_request_drain(struct driver *d, bool giving_back)
{
    atomic_store(&d->giving_back, giving_back);
    atomic_store(&d->drain_requested, true);
}

void driver_force_close(struct driver *d)
{
    atomic_store(&d->force_close, true);
}

/* ---- start (docs/design/protocol.md §5) --------------------------------- */

struct restore_docs {
    struct buf arena_i;
    struct buf arena_c;
    bool has_committed;
    struct docs_committed committed;
    bool has_intent;
    struct docs_intent intent;
    bool has_start;
    int64_t t_start;
};

/* getMany([intent, committed, start]) keeping the versions even of documents
 * that do not parse. */
static int read_pointers(struct driver *d, struct restore_docs *r,
                         struct err *err)
{
    struct slice keys[3] = {cstr(d->intent_key), cstr(d->committed_key),
                            cstr(d->start_key)};
    struct kv_op op = {.op = KV_GET_MANY,
                       .ns = SLICE_LIT(LEASE_NS),
                       .keys = keys,
                       .n_keys = 3};
    struct kv_answer a;
    struct err e2;

    memset(&a, 0, sizeof(a));
    if (d->b->kv(d->b->arg, d->cfg.tenant, &op, 1, d->cfg.kv_timeout_ms, &a,
                 err) != 0) {
        return err->code;
    }
    if (a.status != 0 || a.n_results != 1) {
        int rc = err_set(err, a.status != 0 ? a.status : ERR_IO,
                         "kv getMany: %s", a.msg);
        kv_answer_free(&a);
        return rc;
    }
    for (size_t i = 0; i < a.results[0].n_rows; i++) {
        const struct kv_row *row = &a.results[0].rows[i];
        struct slice v = row->value;
        if (row->key.len == keys[0].len &&
            memcmp(row->key.ptr, keys[0].ptr, keys[0].len) == 0) {
            d->intent_version = row->version;
            r->has_intent = docs_intent_decode(v.ptr, v.len, &r->intent,
                                               &r->arena_i, &e2) == 0;
        } else if (row->key.len == keys[2].len &&
                   memcmp(row->key.ptr, keys[2].ptr, keys[2].len) == 0) {
            d->start_version = row->version;
            r->has_start =
                docs_start_decode(v.ptr, v.len, &r->t_start, &e2) == 0;
        } else {
            d->committed_version = row->version;
            r->has_committed =
                docs_committed_decode(v.ptr, v.len, &r->committed, &r->arena_c,
                                      &e2) == 0;
        }
    }
    kv_answer_free(&a);
    return 0;
}

/* LIST the queue's checkpoints into all (s3xml_list_free() it). Returns 0
 * with *listed; the LIST's retriable error; or 0 without *listed when it
 * failed otherwise, logged here: the start goes on without a checkpoint. */
static int list_checkpoints(struct driver *d, struct s3xml_list *all,
                            bool *listed, struct err *err)
{
    struct buf prefix;
    struct s3_status st;
    int rc;

    *listed = false;
    buf_init(&prefix, DRIVER_KEY_MAX);
    memset(all, 0, sizeof(*all));
    memset(&st, 0, sizeof(st));
    rc = layout_checkpoint_prefix(&prefix, &d->lq, err);
    if (rc == 0) {
        rc = s3_client_list_all(d->s3, prefix.data, DRIVER_CHECKPOINT_LIST, all,
                                &st, err);
    }
    if (rc == 0) {
        *listed = true;
        buf_free(&prefix);
        return 0;
    }
    err_wrap(err, "LIST %s", prefix.data);
    if (!upload_s3_retriable(&st, rc)) {
        log_warn_kv("queen-s3",
                    "cannot list checkpoints; starting from the commit "
                    "pointer and the manifests",
                    {"queue", d->cfg.queue}, {"error", err->msg});
        rc = 0;
    }
    buf_free(&prefix);
    return rc;
}

/* The index in all of the checkpoint with the greatest k <= committed_k into
 * *best_i; false when there is none. */
static bool latest_checkpoint(const struct s3xml_list *all, int64_t committed_k,
                              size_t *best_i)
{
    int64_t best = -1;

    *best_i = 0;
    for (size_t i = 0; i < all->n_keys; i++) {
        int64_t k;
        if (layout_parse_checkpoint_k(all->keys[i], strlen(all->keys[i]), &k) &&
            k <= committed_k && k > best) {
            best = k;
            *best_i = i;
        }
    }
    return best >= 0;
}

/* The latest checkpoint with k <= committed_k (docs/design/protocol.md §6.6)
 * into cp (positions in arena), *found false when there is none or it does
 * not decode. Returns 0, or the LIST's or GET's retriable error: the start
 * is retried rather than run from older positions than the bucket holds. */
static int load_checkpoint(struct driver *d, int64_t committed_k,
                           struct docs_checkpoint *cp, struct buf *arena,
                           bool *found, struct err *err)
{
    struct buf body;
    struct s3xml_list all;
    struct s3_status st;
    struct s3_object_info info;
    bool listed = false;
    size_t best_i;
    const char *key;
    int rc;

    *found = false;
    rc = list_checkpoints(d, &all, &listed, err);
    if (!listed || !latest_checkpoint(&all, committed_k, &best_i)) {
        goto out_free;
    }
    key = all.keys[best_i];
    buf_init(&body, DOCS_CHECKPOINT_MAX_DECODED);
    memset(&info, 0, sizeof(info));
    rc = s3_client_get(d->s3, key, &body, &info, &st, err);
    if (rc != 0 && upload_s3_retriable(&st, rc)) {
        err_wrap(err, "GET %s", key);
    } else if (rc == 0 && info.found &&
               docs_checkpoint_decode(body.data, body.len, cp, arena, err) ==
                   0) {
        *found = true;
    } else {
        log_warn_kv("queen-s3", "checkpoint unreadable",
                    {"queue", d->cfg.queue}, {"key", key},
                    {"error", rc == 0 && !info.found ? "not found" : err->msg});
        rc = 0;
    }
    buf_free(&body);
out_free:
    s3xml_list_free(&all);
    return rc;
}

/* Tell the engine the lost ranges manifest m names (committed): a restart
 * that finds them again from older positions does not report them twice. */
static void known_lost(struct driver *d, const struct docs_manifest *m)
{
    struct engine_lost_range *v = xcalloc(m->n_lost + 1, sizeof(*v));

    for (size_t i = 0; i < m->n_lost; i++) {
        v[i] = (struct engine_lost_range){m->lost[i].partition, m->lost[i].from,
                                          m->lost[i].to};
    }
    engine_restore_lost(d->e, v, m->n_lost);
    free(v);
}

/* A manifest read with its buffers: m points into body and arena. */
struct got_manifest {
    struct buf key;
    struct buf body;
    struct buf arena;
    struct docs_manifest m;
    bool is_found;  /* an object is at the key, a manifest or not */
    bool is_unseen; /* a 403 taken as absent (start_get's unlisted) */
};

/* Empty buffers for a manifest of any size (got_manifest_free() them). */
static void got_manifest_init(struct got_manifest *g)
{
    buf_init(&g->key, DRIVER_KEY_MAX);
    buf_init(&g->body, BUF_UNLIMITED); /* the manifest's size, whatever */
    buf_init(&g->arena, BUF_UNLIMITED);
    g->is_found = false;
    g->is_unseen = false;
}

static void got_manifest_free(struct got_manifest *g)
{
    buf_free(&g->arena);
    buf_free(&g->body);
    buf_free(&g->key);
}

/* A GET of the start of a run (a manifest, the redo's offsets) of key
 * into body. Returns 0 with *found, or the GET's error naming the key, with
 * d->is_get_refused when the bucket refused it (not worth retrying at once:
 * fail_refused()). Without s3:ListBucket a missing key answers 403, not
 * 404: with unlisted, a 403 is taken as absent and *unseen says so (its
 * caller tells what it goes on with); without, it is a refusal. */
struct start_seen {
    bool found;  /* the key is there */
    bool unseen; /* a 403 taken as absent (unlisted) */
};

static int start_get(struct driver *d, const char *key, struct buf *body,
                     bool unlisted, struct start_seen *seen, struct err *err)
{
    struct s3_object_info info;
    struct s3_status st;
    int rc;

    memset(&info, 0, sizeof(info));
    memset(&st, 0, sizeof(st));
    seen->found = false;
    rc = s3_client_get(d->s3, key, body, &info, &st, err);
    seen->unseen = rc != 0 && unlisted && st.status == 403;
    if (seen->unseen) {
        err_wrap(err, "GET %s", key);
        rc = 0;
        info.found = false;
    }
    d->is_get_refused = rc != 0 && !upload_s3_retriable(&st, rc);
    if (rc != 0) {
        err_wrap(err, "GET %s", key);
        return rc;
    }
    seen->found = info.found;
    return 0;
}

/* GET and decode the manifest of window k into g: g->key gets its key,
 * g->m points into g->body and g->arena. Returns 0 with *ok when it is there
 * and decodes, 0 without *ok when it is absent or does not decode, or the
 * GET's error. unlisted: start_get()'s (g->is_unseen). */
static int get_manifest(struct driver *d, int64_t k, struct got_manifest *g,
                        bool unlisted, bool *ok, struct err *err)
{
    struct err e2;
    int rc;

    *ok = false;
    if (layout_manifest_key(&g->key, &d->lq, k, err) != 0) {
        return err->code;
    }
    struct start_seen seen;

    rc = start_get(d, g->key.data, &g->body, unlisted, &seen, err);
    g->is_found = seen.found;
    g->is_unseen = seen.unseen;
    if (rc != 0) {
        return rc;
    }
    *ok = g->is_found && docs_manifest_decode(g->body.data, g->body.len, &g->m,
                                              &g->arena, &e2) == 0;
    return 0;
}

/* Without a redo, the manifest key of the window after the commit pointer
 * must be free: an object there is a committed window this sink's pointer
 * does not know (another sink with the same prefix and another name, such
 * as QUEEN_S3_SINK misspelt on one node, or a KV that lost the pointer),
 * and writing the window would overwrite it. The queue then fails, writing
 * nothing, and is tried again later (when another node may hold it). 0,
 * the GET's error (retried), or the failure. */
static int check_next_free(struct driver *d, struct err *err)
{
    struct got_manifest g;
    bool ok = false;
    int rc;

    got_manifest_init(&g);
    rc = get_manifest(d, d->next_k, &g, true, &ok, err);
    if (rc == 0 && g.is_unseen) {
        /* the key cannot be told free, which is no reason to hold the
         * queue (the probe's message names the permission) */
        log_warn_kv("queen-s3",
                    "cannot tell whether the next window's manifest key is "
                    "free (403: s3:ListBucket missing?); going on",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(d->next_k)},
                    {"error", err->msg});
        rc = 0;
    } else if (rc == 0 && g.is_found) {
        char by[96] = "";

        if (ok) {
            snprintf(by, sizeof(by), " (sink \"%.*s\")",
                     (int)(g.m.sink.len > 40 ? 40 : g.m.sink.len),
                     g.m.sink.ptr);
        }
        log_error_kv("queen-s3",
                     "the next window's manifest is already in the bucket; "
                     "nothing is written",
                     {"queue", d->cfg.queue}, {"k", LOG_I64(d->next_k)},
                     {"key", g.key.data},
                     {"written_by", ok ? by : " (not a manifest)"});
        rc = err_set(err, ERR_CONFLICT,
                     "window %" PRId64 " already has a manifest%s but this "
                     "sink's pointer is at %" PRId64
                     ": not overwritten. QUEEN_S3_SINK differs between "
                     "nodes, two sinks share a prefix, or the KV lost the "
                     "pointer",
                     d->next_k, by, d->next_k - 1);
        fail_doc(d, err);
    }
    got_manifest_free(&g);
    return rc;
}

/* The manifest of the commit pointer's window k when no checkpoint follows
 * it (a crash right after the commit, or its checkpoint failed): its lost
 * ranges are committed. Best effort: a failed read is logged. */
static void load_committed_lost(struct driver *d, int64_t k)
{
    struct got_manifest g;
    struct err err = {0};
    bool ok = false;
    int rc;

    got_manifest_init(&g);
    rc = get_manifest(d, k, &g, false, &ok, &err);
    if (rc != 0 || !ok) {
        log_warn_kv("queen-s3",
                    "cannot read the last window's manifest; a loss it names "
                    "may be reported again",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(k)},
                    {"error", rc != 0 ? err.msg : "absent or undecodable"});
    } else {
        known_lost(d, &g.m);
    }
    got_manifest_free(&g);
}

/* GET the manifest of the intent's window into g (got_manifest_free() it):
 * *match when it is there, decodes and is the intent's (a redo may be
 * committed from it). Returns 0, or the GET's error. */
static int get_redo_manifest(struct driver *d, const struct docs_intent *in,
                             struct got_manifest *g, bool *match,
                             struct err *err)
{
    bool ok = false;
    int rc;

    got_manifest_init(g);
    rc = get_manifest(d, in->k, g, true, &ok, err);
    if (rc == 0 && g->is_unseen) {
        /* a redo's manifest is missing whenever its upload did not
         * finish: taken as absent, the window is written again, the same
         * bytes under the same keys (check_next_free() goes on alike) */
        log_warn_kv("queen-s3",
                    "cannot tell whether the redo's manifest is there (403: "
                    "s3:ListBucket missing?); taken as absent",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(in->k)},
                    {"error", err->msg});
    }
    *match =
        rc == 0 && ok &&
        docs_manifest_matches(&g->m, in, cstr(d->cfg.sink),
                              cstr(d->cfg.tenant_text), cstr(d->cfg.queue));
    return rc;
}

/* The redo's manifest, when its upload already finished
 * (docs/design/protocol.md §5). Returns 0 (committed from it or not), or the
 * GET's error when it may be retried. */
static int check_redo_manifest(struct driver *d, const struct docs_intent *in,
                               bool *taken, struct err *err)
{
    struct got_manifest g;
    bool match = false;
    int rc = get_redo_manifest(d, in, &g, &match, err);
    const struct docs_manifest *m = &g.m;
    bool is_at_start = !d->has_started;

    if (!match) {
        goto out_free;
    }
    /* At start the engine commits it at once; a manifest that landed
     * while the redo read stands in for the upload. */
    *taken = d->has_started
                 ? (engine_on_uploaded(d->e, m->records, m->bytes), true)
                 : engine_on_manifest_found(d->e, in->k, buf_slice(&g.key),
                                            m->records, m->bytes);
    if (*taken) {
        log_info_kv("queen-s3",
                    "the redo's upload finished: committing it from its "
                    "manifest",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(in->k)});
        known_lost(d, m);
        d->last_records = m->records;
        d->last_bytes = m->bytes;
        free(d->lost);
        d->lost = xcalloc(m->n_lost + 1, sizeof(*d->lost));
        d->n_lost = m->n_lost;
        for (size_t i = 0; i < m->n_lost; i++) {
            snprintf(d->lost[i].partition, sizeof(d->lost[i].partition), "%.*s",
                     (int)m->lost[i].partition.len, m->lost[i].partition.ptr);
            d->lost[i].from = m->lost[i].from;
            d->lost[i].to = m->lost[i].to;
            /* At start this process read nothing of the window, so the
             * loss its manifest names was counted only by the process
             * that found it, which is gone: counted here, as it commits
             * (a redo that read the window counted what it found). */
            if (is_at_start) {
                d->ctr.records_lost +=
                    (uint64_t)(m->lost[i].to - m->lost[i].from + 1);
            }
        }
    }
out_free:
    if (rc == 0 && !*taken && d->is_redo_manifest_applied) {
        /* the engine starts after that window: a redo would miss it */
        rc = err_set(err, ERR_INVALID,
                     "the manifest of window %" PRId64 " was there when the "
                     "queue started and is gone or changed now; the queue "
                     "stops rather than write that window again",
                     in->k);
        stop(d, DRIVER_FAILED, err->msg);
    }
    got_manifest_free(&g);
    return rc;
}

/* The positions at the commit pointer (engine.h (5)): those of the last
 * checkpoint, each overridden by the manifests after it in k order, and
 * the lost ranges those manifests name. Owned copies. */
struct rebuilt {
    struct rebuilt_pos *v;
    size_t n;
    size_t cap;
    struct engine_lost_range *lost; /* partition names in lost_names */
    char **lost_names;
    size_t n_lost;
    size_t cap_lost;
};

struct rebuilt_pos {
    char *name;
    size_t name_len;
    char *id;
    size_t id_len;
    int64_t offset;
    size_t seq; /* later wins */
};

static void rebuilt_add(struct rebuilt *r, struct slice name, int64_t offset,
                        struct slice id)
{
    if (r->n == r->cap) {
        r->cap = r->cap == 0 ? 64 : r->cap * 2;
        r->v = xrealloc(r->v, r->cap * sizeof(*r->v));
    }
    r->v[r->n] = (struct rebuilt_pos){xstrndup(name.ptr, name.len),
                                      name.len,
                                      xstrndup(id.ptr, id.len),
                                      id.len,
                                      offset,
                                      r->n};
    r->n++;
}

static void rebuilt_add_lost(struct rebuilt *r, const struct docs_manifest *m)
{
    for (size_t i = 0; i < m->n_lost; i++) {
        if (r->n_lost == r->cap_lost) {
            r->cap_lost = r->cap_lost == 0 ? 16 : r->cap_lost * 2;
            r->lost = xrealloc(r->lost, r->cap_lost * sizeof(*r->lost));
            r->lost_names =
                xrealloc(r->lost_names, r->cap_lost * sizeof(*r->lost_names));
        }
        const struct docs_lost *l = &m->lost[i];
        char *name = xstrndup(l->partition.ptr, l->partition.len);
        r->lost_names[r->n_lost] = name;
        r->lost[r->n_lost++] = (struct engine_lost_range){
            {name, l->partition.len}, l->from, l->to};
    }
}

static void rebuilt_free(struct rebuilt *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].name);
        free(r->v[i].id);
    }
    for (size_t i = 0; i < r->n_lost; i++) {
        free(r->lost_names[i]);
    }
    free(r->v);
    free(r->lost);
    free(r->lost_names);
    memset(r, 0, sizeof(*r));
}

static int rebuilt_cmp(const void *a, const void *b)
{
    const struct rebuilt_pos *x = a;
    const struct rebuilt_pos *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = n == 0 ? 0 : memcmp(x->name, y->name, n);

    if (c != 0) {
        return c;
    }
    if (x->name_len != y->name_len) {
        return x->name_len < y->name_len ? -1 : 1;
    }
    return x->seq < y->seq ? -1 : (x->seq > y->seq ? 1 : 0);
}

/* The latest position per name, as engine positions into r (valid while
 * r is). Returns an owned array of *n. */
static struct engine_position *rebuilt_positions(struct rebuilt *r, size_t *n)
{
    struct engine_position *v = xcalloc(r->n + 1, sizeof(*v));

    if (r->n > 1) {
        qsort(r->v, r->n, sizeof(*r->v), rebuilt_cmp);
    }
    *n = 0;
    for (size_t i = 0; i < r->n; i++) {
        const struct rebuilt_pos *x = &r->v[i];
        const struct rebuilt_pos *y = i + 1 < r->n ? &r->v[i + 1] : NULL;
        if (y != NULL && x->name_len == y->name_len &&
            memcmp(x->name, y->name, x->name_len) == 0) {
            continue; /* a later manifest moved it */
        }
        v[(*n)++] = (struct engine_position){
            {x->name, x->name_len}, x->offset, {x->id, x->id_len}};
    }
    return v;
}

/* Whether manifest m, read as window k's (got: it was there and decodes),
 * carries window k's positions; when not, logs that the start goes on from
 * the last checkpoint alone. */
static bool has_positions_of(struct driver *d, int64_t k, bool got,
                             const struct docs_manifest *m)
{
    if (got && m->has_positions && m->k == k) {
        return true;
    }
    log_warn_kv("queen-s3",
                "a committed window's manifest is absent, "
                "undecodable or has no positions; restarting from "
                "the last checkpoint alone, which may report "
                "committed records lost",
                {"queue", d->cfg.queue}, {"k", LOG_I64(k)});
    return false;
}

/* Apply the positions of the manifests of windows from..to (committed) to
 * r. Returns 0 with *ok when every one was read and carries positions; 0
 * without *ok when one is absent, undecodable or older than positions in
 * manifests (the start then goes on from the checkpoint alone); or the
 * GET's error, which the start retries. */
static int read_manifest_positions(struct driver *d, int64_t from, int64_t to,
                                   struct rebuilt *r, bool *ok, struct err *err)
{
    struct got_manifest g;
    int rc = 0;

    *ok = true;
    got_manifest_init(&g);
    for (int64_t k = from; k <= to && *ok; k++) {
        bool got = false;
        buf_reset(&g.key);
        buf_reset(&g.body);
        buf_reset(&g.arena);
        rc = get_manifest(d, k, &g, false, &got, err);
        if (rc != 0) {
            break;
        }
        if (!has_positions_of(d, k, got, &g.m)) {
            *ok = false;
            break;
        }
        for (size_t i = 0; i < g.m.n_positions; i++) {
            rebuilt_add(r, g.m.positions[i].name, g.m.positions[i].offset,
                        g.m.positions[i].id);
        }
        rebuilt_add_lost(r, &g.m);
    }
    got_manifest_free(&g);
    return rc;
}

/* Read what the start needs from the bucket: the checkpoint, and the
 * manifests after it up to the commit pointer. Returns 0, or a retriable
 * error of the bucket (nothing given to the engine yet). */
static int read_restore_positions(struct driver *d, int64_t committed_k,
                                  struct rebuilt *r, int64_t *exact_k,
                                  int64_t *written_k, struct err *err)
{
    struct docs_checkpoint cp;
    struct buf arena;
    bool has_cp = false;
    bool ok = false;
    int rc;

    buf_init(&arena, BUF_UNLIMITED);
    /* Also at k 0: a loss found before the first commit is checkpointed
     * at k 0 (engine.h (5)). */
    rc = load_checkpoint(d, committed_k, &cp, &arena, &has_cp, err);
    *exact_k = -1; /* no positions at all */
    *written_k = has_cp ? cp.k : 0;
    if (rc == 0 && has_cp) {
        for (size_t i = 0; i < cp.n; i++) {
            rebuilt_add(r, cp.positions[i].name, cp.positions[i].offset,
                        cp.positions[i].id);
        }
        *exact_k = cp.k;
    }
    buf_free(&arena);
    if (rc != 0 || *written_k >= committed_k) {
        return rc;
    }
    if (committed_k - *written_k > DRIVER_REBUILD_MAX_WINDOWS) {
        log_warn_kv("queen-s3",
                    LOG_FMT("more than %d windows since the last checkpoint; "
                            "restarting from it alone, which may report "
                            "committed records lost",
                            DRIVER_REBUILD_MAX_WINDOWS),
                    {"queue", d->cfg.queue},
                    {"checkpoint_k", LOG_I64(*written_k)},
                    {"committed_k", LOG_I64(committed_k)});
        return 0;
    }
    size_t n_cp = r->n;
    rc = read_manifest_positions(d, *written_k + 1, committed_k, r, &ok, err);
    if (rc == 0 && ok) {
        *exact_k = committed_k;
    } else {
        /* back to the checkpoint's positions alone */
        for (size_t i = n_cp; i < r->n; i++) {
            free(r->v[i].name);
            free(r->v[i].id);
        }
        r->n = n_cp;
    }
    return rc;
}

/* A redo whose upload finished before the crash is committed from its
 * manifest at the start, so the positions the engine starts from are that
 * manifest's, not the commit pointer's: else what the window holds and a
 * trim took since would be found again and reported lost (engine.h (5)).
 * Only on positions exact at the pointer; the manifest must match the
 * intent, as check_redo_manifest() asks. Returns 0, or the GET's error. */
static int read_redo_positions(struct driver *d, const struct restore_docs *r,
                               struct rebuilt *rb, struct err *err)
{
    struct got_manifest g;
    bool match = false;
    int rc = get_redo_manifest(d, &r->intent, &g, &match, err);
    const struct docs_manifest *m = &g.m;

    if (match && m->has_positions && m->k == r->intent.k) {
        for (size_t i = 0; i < m->n_positions; i++) {
            rebuilt_add(rb, m->positions[i].name, m->positions[i].offset,
                        m->positions[i].id);
        }
        rebuilt_add_lost(rb, m);
        d->is_redo_manifest_applied = true;
    }
    got_manifest_free(&g);
    return rc;
}

/* Hand the restored documents and positions (read_restore_positions())
 * to the engine. Returns 0, or the engine's refusal. */
static int restore_engine(struct driver *d, struct restore_docs *r,
                          struct rebuilt *rb, int64_t exact_k,
                          int64_t written_k, struct err *err)
{
    struct engine_committed c = {0, 0};
    struct engine_intent in;
    struct engine_checkpoint ecp;
    struct engine_position *pos = NULL;
    char s[4][128];
    int rc;

    if (r->has_committed) {
        c.k = r->committed.k;
        c.t_end = r->committed.t_end;
        d->last_t_end = c.t_end;
        d->has_t_end = true;
    }
    d->is_redo = r->has_intent && r->intent.k == c.k + 1;
    memset(&in, 0, sizeof(in));
    if (d->is_redo) {
        const struct docs_intent *x = &r->intent;
        const struct slice f[4] = {x->format, x->compression, x->layout,
                                   x->writer};
        for (int i = 0; i < 4; i++) {
            snprintf(s[i], sizeof(s[i]), "%.*s", (int)f[i].len, f[i].ptr);
        }
        in = (struct engine_intent){x->k, x->t_start, x->t_end, s[0],
                                    s[1], s[2],       s[3]};
    }
    if (exact_k >= 0) {
        size_t n = 0;
        pos = rebuilt_positions(rb, &n);
        ecp = (struct engine_checkpoint){exact_k, pos, n, exact_k != written_k,
                                         written_k};
    }
    rc = engine_restore(d->e, r->has_committed ? &c : NULL,
                        d->is_redo ? &in : NULL, exact_k >= 0 ? &ecp : NULL,
                        err);
    if (rc == 0 && r->has_start) {
        /* an earlier owner's first window start (keep_start) */
        engine_restore_start(d->e, r->t_start);
        d->is_start_kept = true;
    }
    if (rc == 0) {
        /* Committed ranges found again from older positions are not
         * reported twice. */
        engine_restore_lost(d->e, rb->lost, rb->n_lost);
        if (c.k > (exact_k >= 0 ? exact_k : 0)) {
            load_committed_lost(d, c.k);
        }
    }
    free(pos);
    log_at_kv(d->cfg.is_quiet_restore ? LOG_DEBUG : LOG_INFO, "queen-s3",
              "queue restored", {"queue", d->cfg.queue},
              {"committed_k", LOG_I64(c.k)}, {"redo", LOG_BOOL(d->is_redo)},
              {"checkpoint_k", LOG_I64(written_k)},
              {"exact_positions", LOG_BOOL(exact_k == c.k)});
    return rc;
}

/* The redo's per-partition offsets when its intent keeps them in the bucket
 * (partsKey): GET, check the digest, decode. 0, also when they are absent
 * or do not match (logged: the redo keys its objects from the records, as
 * for an intent without offsets); or the GET's error, to retry. */
static int load_parts(struct driver *d, struct err *err)
{
    struct docs_intent *in = &d->redo_intent;
    struct buf body;
    struct docs_intent got;
    struct err e2;
    const char *why = NULL;
    struct start_seen seen;
    int rc;

    if (!in->has_parts_key) {
        return 0;
    }
    buf_init(&body, DOCS_CHECKPOINT_MAX_DECODED);
    /* a 403 (a missing key, without s3:ListBucket): as absent, below */
    rc = start_get(d, in->parts_key.ptr, &body, true, &seen, err);
    if (rc != 0) {
        buf_free(&body);
        return rc;
    }
    uint8_t h[32];
    char hex[65] = "";
    if (seen.found) {
        sha256(body.data, body.len, h);
        hex_lower(h, sizeof(h), hex);
    }
    memset(&got, 0, sizeof(got));
    buf_reset(&d->parts_arena);
    if (!seen.found) {
        why = seen.unseen ? "absent (403: s3:ListBucket missing?)" : "absent";
    } else if (!same_slice(cstr(hex), in->parts_sha256)) {
        why = "its sha256 differs from the intent's";
    } else if (docs_parts_decode(body.data, body.len, &got, &d->parts_arena,
                                 &e2) != 0 ||
               got.k != in->k) {
        why = "undecodable or of another window";
    }
    if (why != NULL) {
        log_error_kv("queen-s3",
                     "the redo's per-partition offsets are unreadable; its "
                     "objects are keyed from the records",
                     {"queue", d->cfg.queue}, {"k", LOG_I64(in->k)},
                     {"key", in->parts_key.ptr}, {"error", why});
    } else {
        in->has_parts = true;
        in->parts = got.parts;
        in->n_parts = got.n_parts;
    }
    buf_free(&body);
    return 0;
}

/* The commit pointer names its window's manifest key: one this node would
 * not write (another QUEEN_S3_PREFIX, most likely) means the queue goes on
 * under other keys than its last window's. That is right when the prefix
 * was changed on purpose on every node, and splits the lake when one node
 * differs, so it is said once at the start, naming both. */
static void warn_moved(struct driver *d, const struct docs_committed *c)
{
    struct buf key;
    struct err err = {0};

    buf_init(&key, DRIVER_KEY_MAX);
    if (layout_manifest_key(&key, &d->lq, c->k, &err) == 0 &&
        !same_slice(cstr(key.data), c->manifest)) {
        char was[DRIVER_KEY_MAX];

        snprintf(was, sizeof(was), "%.*s", (int)c->manifest.len,
                 c->manifest.ptr);
        log_warn_kv("queen-s3",
                    "the last committed window's manifest is not where this "
                    "node writes: if QUEEN_S3_PREFIX was not changed on "
                    "purpose on every node, this node's differs from the "
                    "others' and the lake is being split",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(c->k)},
                    {"committed", was}, {"here", key.data});
    }
    buf_free(&key);
}

/* A GET at the start that the bucket refused (d->is_get_refused: not to be
 * retried at once) fails the queue, with the GET in lastError; it is tried
 * again after a while. true when it did. */
static bool fail_refused(struct driver *d, int rc, const struct err *err)
{
    if (rc == 0 || !d->is_get_refused || d->stop != DRIVER_RUNNING) {
        return false;
    }
    stop(d, DRIVER_FAILED, err->msg);
    set_error(d, "%s", err->msg);
    return true;
}

/* Restore once, then check the redo's manifest. 0 when done; otherwise the
 * error (the caller retries the part that is left). */
static int start(struct driver *d, struct err *err)
{
    struct restore_docs r;
    int rc = 0;

    if (!d->is_restored) {
        memset(&r, 0, sizeof(r));
        buf_init(&r.arena_i, BUF_UNLIMITED);
        buf_init(&r.arena_c, BUF_UNLIMITED);
        struct rebuilt rb;
        int64_t exact_k = -1;
        int64_t written_k = 0;
        memset(&rb, 0, sizeof(rb));
        d->is_get_refused = false;
        rc = read_pointers(d, &r, err);
        if (rc != 0) {
            err_wrap(err, "kv restore");
        } else {
            int64_t ck = r.has_committed ? r.committed.k : 0;
            rc = read_restore_positions(d, ck, &rb, &exact_k, &written_k, err);
            if (rc == 0 && exact_k == ck && r.has_intent &&
                r.intent.k == ck + 1) {
                rc = read_redo_positions(d, &r, &rb, err);
            }
        }
        if (fail_refused(d, rc, err) || rc != 0) {
            /* retried after a while: nothing was given to the engine */
        } else if (restore_engine(d, &r, &rb, exact_k, written_k, err) != 0) {
            rc = err->code;
            stop(d, DRIVER_FAILED, err->msg);
        } else {
            d->is_restored = true;
            if (r.has_committed) {
                warn_moved(d, &r.committed);
            }
            d->next_k = (r.has_committed ? r.committed.k : 0) + 1;
            d->redo_intent = r.intent;
            d->redo_arena = r.arena_i; /* the intent's slices live here */
            buf_init(&r.arena_i, BUF_UNLIMITED);
        }
        rebuilt_free(&rb);
        buf_free(&r.arena_i);
        buf_free(&r.arena_c);
        if (rc != 0) {
            return rc;
        }
    }
    if (d->is_redo && !d->is_pin_done) {
        d->is_get_refused = false;
        rc = load_parts(d, err);
        if (rc != 0) {
            fail_refused(d, rc, err);
            return rc;
        }
        pin_redo(d);
        d->is_pin_done = true;
    }
    if (d->is_redo) {
        bool taken = false;
        d->is_get_refused = false;
        rc = check_redo_manifest(d, &d->redo_intent, &taken, err);
        if (rc != 0) {
            fail_refused(d, rc, err);
            return rc;
        }
    } else if (!d->is_next_checked) {
        rc = check_next_free(d, err);
        if (rc != 0) {
            return rc;
        }
        d->is_next_checked = true;
    }
    d->has_started = true;
    return 0;
}

/* ---- reads: discovery, fetch, seek ------------------------------------ */

static enum engine_answer_error answer_error(int e)
{
    switch (e) {
    case STORE_ENTRY_OK:
        return ENGINE_ANSWER_OK;
    case STORE_OFFSET_OUT_OF_RANGE:
        return ENGINE_ANSWER_OFFSET_OUT_OF_RANGE;
    case STORE_UNKNOWN_TOPIC_OR_PARTITION:
        return ENGINE_ANSWER_UNKNOWN;
    default:
        return ENGINE_ANSWER_OTHER;
    }
}

static const char *entry_error_text(int e)
{
    const char *s = store_entry_error_name(e);

    return s != NULL ? s : "";
}

/* One partitions/changed page. false when the call failed. */
static bool do_discover(struct driver *d, const struct engine_discover *a)
{
    struct store_changed_req req = {
        .queue = cstr(d->cfg.queue),
        .since = a->has_since ? a->since : INT64_MIN,
        .after = a->after,
        .limit = (int)a->limit,
    };
    struct store_changed_answer ans;
    struct err err;
    char cursor[64];

    memset(&ans, 0, sizeof(ans));
    if (d->b->changed(d->b->arg, d->cfg.tenant, &req, 1, &ans, &err) != 0 ||
        ans.n_entries != 1) {
        fail_sampled(d, SAMPLE_DISCOVERY, "discovery: %s",
                     ans.n_entries != 1 && err.msg[0] == '\0'
                         ? "discovery answered no entry for this queue"
                         : err.msg);
        store_changed_answer_free(&ans);
        engine_on_discovery_failed(d->e);
        return false;
    }
    const struct store_changed_entry *en = &ans.entries[0];
    struct engine_partition_info *v = xcalloc(en->n_partitions + 1, sizeof(*v));
    char(*ids)[37] = xcalloc(en->n_partitions + 1, sizeof(*ids));
    for (size_t i = 0; i < en->n_partitions; i++) {
        const struct store_partition_info *p = &en->partitions[i];
        static const char hex[] = "0123456789abcdef";
        size_t o = 0;
        for (size_t j = 0; j < 16; j++) {
            if (j == 4 || j == 6 || j == 8 || j == 10) {
                ids[i][o++] = '-';
            }
            ids[i][o++] = hex[p->uuid[j] >> 4];
            ids[i][o++] = hex[p->uuid[j] & 15];
        }
        v[i] = (struct engine_partition_info){p->name,
                                              {ids[i], 36},
                                              p->last_offset,
                                              p->log_start,
                                              p->last_write_at};
    }
    snprintf(cursor, sizeof(cursor), "p|%" PRIu64, en->next_pid);
    struct engine_discovery_page page = {
        .error = answer_error(en->error),
        .error_text = cstr(entry_error_text(en->error)),
        .safe_time = ans.safe_time,
        .partitions = v,
        .n = en->n_partitions,
        .has_next = en->has_next,
        .next = cstr(cursor),
    };
    int rc = engine_on_discovery_page(d->e, &page, &err);
    free(ids);
    free(v);
    store_changed_answer_free(&ans);
    if (rc != 0) {
        fail_sampled(d, SAMPLE_DISCOVERY, "discovery: %s", err.msg);
    }
    return rc == 0 && page.error == ENGINE_ANSWER_OK;
}

static void to_engine_result(const struct store_fetch_entry *en,
                             struct slice partition,
                             struct engine_fetched_record *recs,
                             struct engine_fetch_result *r)
{
    for (size_t j = 0; j < en->n_records; j++) {
        const struct store_record *x = &en->records[j];
        recs[j] = (struct engine_fetched_record){x->offset, x->txn, x->ts,
                                                 x->payload};
    }
    *r = (struct engine_fetch_result){
        .partition = partition,
        .error = answer_error(en->error),
        .error_text = cstr(entry_error_text(en->error)),
        .high_watermark = en->high_watermark,
        .log_start = en->log_start,
        .records = recs,
        .n = en->n_records,
    };
}

/* Read the entries of one engine fetch call [from, to) with one store call.
 * 0, or the call's error (ans freed). */
static int fetch_slice(struct driver *d, const struct engine_fetch *a,
                       size_t from, size_t to, struct store_fetch_answer *ans,
                       struct err *err)
{
    struct store_fetch_req *reqs = xcalloc(to - from + 1, sizeof(*reqs));
    int rc;

    for (size_t i = from; i < to; i++) {
        /* A payload this node cannot decrypt goes to the lake as a JSON
         * string of its stored bytes (docs/s3-sink.md). */
        reqs[i - from] = (struct store_fetch_req){
            cstr(d->cfg.queue), a->entries[i].partition, a->entries[i].offset,
            a->entries[i].max_bytes, true};
    }
    memset(ans, 0, sizeof(*ans));
    rc = d->b->fetch(d->b->arg, d->cfg.tenant, reqs, to - from, ans, err);
    if (rc == 0 && ans->n_entries != to - from) {
        rc = err_set(err, ERR_INVALID, "the read answered %zu of %zu entries",
                     ans->n_entries, to - from);
    }
    if (rc != 0) {
        store_fetch_answer_free(ans);
    }
    free(reqs);
    return rc;
}

/* Merge one read's answer as entries [from, from + ans->n_entries) of the
 * engine's call. */
static int merge_slice(struct driver *d, const struct engine_fetch *a,
                       size_t from, const struct store_fetch_answer *ans,
                       struct err *err)
{
    size_t n = ans->n_entries;
    struct engine_fetch_result *r = xcalloc(n + 1, sizeof(*r));
    struct engine_fetched_record **recs =
        xcalloc(n + 1, sizeof(struct engine_fetched_record *));
    int rc;

    for (size_t i = 0; i < n; i++) {
        recs[i] = xcalloc(ans->entries[i].n_records + 1, sizeof(**recs));
        to_engine_result(&ans->entries[i], a->entries[from + i].partition,
                         recs[i], &r[i]);
    }
    rc = engine_on_fetch_part(d->e, a->call_id, from, r, n, err);
    for (size_t i = 0; i < n; i++) {
        free(recs[i]);
    }
    free(recs);
    free(r);
    return rc;
}

/* One fetch call, read in slices of at most DRIVER_FETCH_SLICE bytes asked
 * (one entry at the default 1 MiB per entry), each merged and freed before
 * the next: the slab copy then reads what the walk just brought into the
 * cache, and the store hands the same warm answer buffer back slice after
 * slice, where one answer for the whole call (64 MiB for 64 busy partitions)
 * would be fresh pages every time. false when it failed as a whole. */
static bool do_fetch(struct driver *d, const struct engine_fetch *a)
{
    struct store_fetch_answer ans;
    struct err err;
    int rc = 0;

    err_clear(&err);
    for (size_t i = 0; rc == 0 && i < a->n;) {
        size_t j = i;
        uint64_t asked = 0;
        while (j < a->n && (j == i || asked + a->entries[j].max_bytes <=
                                          DRIVER_FETCH_SLICE)) {
            asked += a->entries[j++].max_bytes;
        }
        uint64_t t0 = stages_begin(d->cfg.stages);
        rc = fetch_slice(d, a, i, j, &ans, &err);
        stages_end(d->cfg.stages, STAGES_READ, t0);
        if (rc == 0) {
            for (size_t k = 0; k < ans.n_entries; k++) {
                stages_add_read(d->cfg.stages, ans.entries[k].n_records);
            }
            t0 = stages_begin(d->cfg.stages);
            rc = merge_slice(d, a, i, &ans, &err);
            stages_end(d->cfg.stages, STAGES_MERGE, t0);
            t0 = stages_begin(d->cfg.stages);
            store_fetch_answer_free(&ans); /* ends a pinned read */
            stages_end(d->cfg.stages, STAGES_READ, t0);
            if (rc != 0) {
                break; /* the engine released the call */
            }
        } else {
            engine_on_fetch_failed(d->e, a->call_id);
        }
        i = j;
    }
    if (rc == 0) {
        engine_on_fetch_done(d->e, a->call_id);
    } else {
        fail_sampled(d, SAMPLE_FETCH, "fetch: %s", err.msg);
    }
    d->ctr.fetch_ok += rc == 0;
    d->ctr.fetch_error += rc != 0;
    return rc == 0;
}

/* One probe of a seek: fetch one record at offset. */
static bool seek_probe(struct driver *d, struct slice partition, int64_t offset,
                       uint32_t max_bytes, struct seek *s)
{
    struct store_fetch_req req = {cstr(d->cfg.queue), partition, offset,
                                  max_bytes, true};
    struct store_fetch_answer ans;
    struct seek_probe_record *v;
    struct err err;

    memset(&ans, 0, sizeof(ans));
    for (int attempt = 0;; attempt++) {
        if (d->b->fetch(d->b->arg, d->cfg.tenant, &req, 1, &ans, &err) == 0 &&
            ans.n_entries == 1) {
            break;
        }
        store_fetch_answer_free(&ans);
        if (attempt == 2) {
            return false;
        }
    }
    const struct store_fetch_entry *en = &ans.entries[0];
    v = xcalloc(en->n_records + 1, sizeof(*v));
    for (size_t i = 0; i < en->n_records; i++) {
        v[i] = (struct seek_probe_record){en->records[i].offset,
                                          en->records[i].ts};
    }
    enum engine_answer_error e = answer_error(en->error);
    struct seek_answer sa = {
        .error = e == ENGINE_ANSWER_OK ? SEEK_ANSWER_OK
                 : e == ENGINE_ANSWER_OFFSET_OUT_OF_RANGE
                     ? SEEK_ANSWER_OFFSET_OUT_OF_RANGE
                 : e == ENGINE_ANSWER_UNKNOWN ? SEEK_ANSWER_UNKNOWN
                                              : SEEK_ANSWER_OTHER,
        .error_text = cstr(entry_error_text(en->error)),
        .high_watermark = en->high_watermark,
        .log_start = en->log_start,
        .records = v,
        .n = en->n_records,
    };
    seek_on_answer(s, &sa);
    free(v);
    store_fetch_answer_free(&ans);
    return true;
}

static void do_seek(struct driver *d, const struct engine_seek *a)
{
    struct seek s;
    struct err err;
    int64_t offset;
    uint32_t max_bytes;

    seek_init(&s, a->partition, a->t, a->log_start, a->last_offset, 1);
    for (;;) {
        enum seek_state st = seek_next(&s, &offset, &max_bytes, &err);
        if (st == SEEK_FOUND) {
            engine_on_seek_result(d->e, a->seek_id, true, offset);
            return;
        }
        if (st == SEEK_FAILED ||
            !seek_probe(d, a->partition, offset, max_bytes, &s)) {
            engine_on_seek_result(d->e, a->seek_id, false, 0);
            return;
        }
    }
}

/* ---- the commit sequence (docs/design/protocol.md §6) ------------------- */

/* A fenced write of one pointer; *version gets the row's new version.
 * Returns 0; or stops the driver (Fenced / Failed) and returns -1; or asks
 * for a retry and returns 1 (kv_retry of docs/design/protocol.md §7). */
/* After a failed call the batch may still have landed (a timeout across a
 * leader change): read the lease and the pointer back. Adopts our lease
 * row's version; true when the pointer already holds doc (*version set). */
static bool landed(struct driver *d, const char *key, struct slice doc,
                   uint64_t *version)
{
    struct slice keys[2] = {cstr(lease_key(d->lease)), cstr(key)};
    struct kv_op op = {.op = KV_GET_MANY,
                       .ns = SLICE_LIT(LEASE_NS),
                       .keys = keys,
                       .n_keys = 2};
    struct kv_answer a;
    struct err err;
    bool done = false;
    char inc[24];

    memset(&a, 0, sizeof(a));
    if (d->b->kv(d->b->arg, d->cfg.tenant, &op, 1, d->cfg.kv_timeout_ms, &a,
                 &err) != 0) {
        return false;
    }
    for (size_t i = 0; a.status == 0 && i < a.results[0].n_rows; i++) {
        const struct kv_row *row = &a.results[0].rows[i];
        if (same_slice(row->key, keys[1])) {
            done = same_slice(row->value, doc);
            *version = done ? row->version : *version;
            continue;
        }
        snprintf(inc, sizeof(inc), "\"%s\"", lease_incarnation(d->lease));
        if (memmem(row->value.ptr, row->value.len, inc, strlen(inc)) != NULL) {
            lease_adopt_version(d->lease, row->version);
        }
    }
    kv_answer_free(&a);
    return done;
}

static int fenced_put(struct driver *d, const char *what, const char *key,
                      uint64_t *version, struct slice doc, int64_t now)
{
    struct kv_op op;
    struct kv_answer a;
    struct err err;
    char why[512];

    if (d->attempt > 0 && landed(d, key, doc, version)) {
        d->attempt = 0;
        return 0;
    }
    lease_put_op(&op, key, doc, 0, version, true);
    int rc = lease_fenced(d->lease, &op, 1, &a, &err);
    if (rc == 0) {
        *version = a.n_results > 1 ? a.results[1].version : 0;
        kv_answer_free(&a);
        d->attempt = 0;
        return 0;
    }
    kv_answer_free(&a);
    snprintf(why, sizeof(why), "%s: %s", what, err.msg);
    if (rc == ERR_PRECONDITION) {
        d->ctr.commit_precondition_lost++;
        stop(d, DRIVER_FENCED, why);
        set_error(d, "%s", why);
        return -1;
    }
    if (sink_broker_kv_retriable(rc)) {
        fail_sampled(d, SAMPLE_KV, "kv %s", why);
        retry_later(d, now, -1);
        return 1;
    }
    stop(d, DRIVER_FAILED, why);
    set_error(d, "%s", why);
    return -1;
}

/* The sink's documents have no size cap of their own (issue 13 item 5):
 * they follow the window. Where a store has a real limit, the queue fails
 * at once with a message naming it and the settings that keep a window
 * within it: no retry can pass it. ERR_TOO_BIG. */
static int over_limit(struct err *err, int64_t k, const char *what, size_t len,
                      size_t limit, const char *limit_name)
{
    return err_set(err, ERR_TOO_BIG,
                   "window %" PRId64 ": %s %zu bytes, over %s of %zu; "
                   "set QUEEN_S3_LAYOUT=merged or a lower "
                   "QUEEN_S3_MAX_WINDOW_MS / QUEEN_S3_TARGET_MB",
                   k, what, len, limit_name, limit);
}

/* Stop Failed on a document that cannot be written (status lastError;
 * the host logs the stop with its reason). */
static void fail_doc(struct driver *d, const struct err *err)
{
    stop(d, DRIVER_FAILED, err->msg);
    set_error(d, "%s", err->msg);
}

/* A KV pointer document of window k (encoded without a cap): the KV store
 * takes values up to KV_VALUE_MAX. */
static int kv_doc_fits(int64_t k, const char *what, const struct buf *doc,
                       struct err *err)
{
    if (doc->len <= KV_VALUE_MAX) {
        return 0;
    }
    return over_limit(err, k, what, doc->len, KV_VALUE_MAX,
                      "the KV value limit");
}

/* The longest manifest the sink writes: what it can read back. */
static size_t manifest_max(const struct driver *d)
{
    uint64_t m = d->cfg.manifest_max_bytes;

    return m != 0 && m < JSON_TEXT_MAX ? (size_t)m : JSON_TEXT_MAX;
}

/* Bytes a manifest takes at least per per-partition object (its sha256 and
 * the names of its fields; the key comes on top) and per lost range. */
#define DRIVER_MANIFEST_OBJECT_MIN 160
#define DRIVER_MANIFEST_LOST_MIN   30

/* Before the intent pins the window's settings (a redo keeps them): a
 * window whose manifest cannot fit whatever its keys fails here, where
 * the settings named still apply to it. The manifest itself is measured
 * when encoded (manifest_encode). */
static int manifest_floor_fits(const struct driver *d,
                               const struct engine_plan *p, struct err *err)
{
    size_t floor = 0;

    if (p == NULL) {
        return 0;
    }
    if (d->cfg.per_partition) {
        floor += p->partitions * DRIVER_MANIFEST_OBJECT_MIN;
    }
    for (size_t i = 0; i < p->n_lost; i++) {
        floor += p->lost[i].partition.len + DRIVER_MANIFEST_LOST_MIN;
    }
    if (floor <= manifest_max(d)) {
        return 0;
    }
    return over_limit(err, p->k, "its manifest takes at least", floor,
                      manifest_max(d), "what the sink can read back");
}

/* Per-partition: the first and last offset of each partition's records in
 * plan p, the offsets its object's key names (upload.c object_open). Returns
 * how many; *out is owned, its names point into the engine's plan. */
static size_t plan_parts(struct driver *d, const struct engine_plan *p,
                         struct docs_intent_part **out)
{
    struct engine_plan_cursor c = {0, 0, 0};
    struct sink_record *v = xmalloc(1024 * sizeof(*v));
    struct docs_intent_part *parts = NULL;
    size_t n = 0;
    size_t cap = 0;
    size_t got;

    while (p != NULL && (got = engine_plan_read(d->e, &c, v, 1024)) > 0) {
        for (size_t i = 0; i < got; i++) {
            if (n > 0 && same_slice(parts[n - 1].partition, v[i].partition)) {
                parts[n - 1].last = v[i].offset;
                continue;
            }
            if (n == cap) {
                cap = cap < 16 ? 16 : cap * 2;
                parts = xrealloc(parts, cap * sizeof(*parts));
            }
            parts[n++] = (struct docs_intent_part){v[i].partition, v[i].offset,
                                                   v[i].offset};
        }
    }
    free(v);
    *out = parts;
    return n;
}

static int put_object(struct driver *d, const char *key, const struct buf *b,
                      const char *sha256_hex, const char *content_type,
                      int64_t now);

/* Window in.k's per-partition offsets as a bucket object (formats.md §5),
 * keyed by their digest: key and sha get them. 0; 1 retry later; -1
 * stopped. */
static int put_parts(struct driver *d, const struct docs_intent *in,
                     struct buf *key, char sha[65], int64_t now)
{
    struct buf body;
    struct err err;
    uint8_t h[32];
    int rc;

    buf_init(&body, BUF_UNLIMITED);
    rc = docs_parts_encode(&body, in, &err);
    if (rc == 0) {
        sha256(body.data, body.len, h);
        hex_lower(h, sizeof(h), sha);
        rc = layout_parts_key(key, &d->lq, in->k, sha, &err);
    }
    if (rc != 0) {
        stop(d, DRIVER_FAILED, err.msg);
        buf_free(&body);
        return -1;
    }
    rc = put_object(d, key->data, &body, sha, "application/json", now);
    buf_free(&body);
    return rc;
}

/* This node's codec library for the format and compression intent a names
 * (the libraries field, docs/design/formats.md §5). */
static const char *intent_libraries(const struct driver *d,
                                    const struct engine_intent_action *a)
{
    struct driver_config c = d->cfg;
    char comp[32];
    size_t n = a->compression.len < sizeof(comp) - 1 ? a->compression.len
                                                     : sizeof(comp) - 1;

    memcpy(comp, a->compression.ptr, n);
    comp[n] = '\0';
    c.format = same_slice(a->format, cstr("parquet")) ? DRIVER_FORMAT_PARQUET
                                                      : DRIVER_FORMAT_JSONL;
    c.compression = comp;
    return upload_codec_library(&c);
}

/* The intent of action a, but for its parts (borrowed from a and d). */
static void intent_of(struct driver *d, const struct engine_intent_action *a,
                      struct docs_intent *in)
{
    memset(in, 0, sizeof(*in));
    in->k = a->k;
    in->t_start = a->t_start;
    in->t_end = a->t_end;
    in->format = a->format;
    in->compression = a->compression;
    in->layout = a->layout;
    in->writer = a->writer;
    in->has_align = true;
    in->align = cstr(layout_align_name((enum layout_align)d->cfg.align));
    in->has_prefix = true;
    in->prefix = cstr(d->cfg.prefix);
    in->has_libraries = true;
    in->libraries = cstr(intent_libraries(d, a));
    in->has_records = true;
    in->records = (int64_t)a->plan->n_records;
}

static int do_intent(struct driver *d, int64_t now)
{
    const struct engine_intent_action *a = &d->pend.intent;
    struct docs_intent in;
    struct docs_intent_part *parts = NULL;
    struct buf doc;
    struct buf key;
    char sha[65] = "";
    struct err err;
    int rc;

    if (manifest_floor_fits(d, a->plan, &err) != 0) {
        fail_doc(d, &err);
        return -1;
    }
    buf_init(&key, DRIVER_KEY_MAX);
    intent_of(d, a, &in);
    if (same_slice(a->layout, cstr("per-partition"))) {
        in.has_parts = true;
        in.n_parts = plan_parts(d, a->plan, &parts);
        in.parts = parts;
    }
    buf_init(&doc, d->cfg.intent_max_bytes > 0 &&
                           d->cfg.intent_max_bytes < KV_VALUE_MAX
                       ? d->cfg.intent_max_bytes
                       : KV_VALUE_MAX);
    rc = docs_intent_encode(&doc, &in, &err);
    if (rc == ERR_TOO_BIG && in.has_parts) {
        /* The offsets go to the bucket first, the intent names them. */
        rc = put_parts(d, &in, &key, sha, now);
        if (rc != 0) {
            free(parts);
            buf_free(&key);
            buf_free(&doc);
            return rc;
        }
        in.has_parts = false;
        in.has_parts_key = true;
        in.parts_key = buf_slice(&key);
        in.parts_sha256 = cstr(sha);
        buf_free(&doc);
        buf_init(&doc, KV_VALUE_MAX);
        rc = docs_intent_encode(&doc, &in, &err);
    }
    free(parts);
    buf_free(&key);
    if (rc == ERR_TOO_BIG) { /* with the offsets in the bucket: not reached */
        snprintf(err.msg, sizeof(err.msg),
                 "window k=%" PRId64 ": the intent is over the KV value "
                 "limit (%d bytes)",
                 a->k, KV_VALUE_MAX);
    }
    if (rc != 0) {
        fail_doc(d, &err);
        buf_free(&doc);
        return -1;
    }
    rc = fenced_put(d, "intent", d->intent_key, &d->intent_version,
                    buf_slice(&doc), now);
    buf_free(&doc);
    if (rc != 0) {
        return rc;
    }
    engine_on_intent_written(d->e);
    d->pend.kind = PENDING_NONE;
    return crash(d, DRIVER_CRASH_AFTER_INTENT) ? -1 : 0;
}

/* A PUT failed after the lease was lost: refused by the lease's age check
 * (lease.h (4)), or lost meanwhile. Stop Fenced (the host logs "queue
 * fenced" with why): the queue is another node's, or will be after the
 * TTL. */
static bool stop_if_lease_lost(struct driver *d, const char *why)
{
    if (!lease_lost(d->lease)) {
        return false;
    }
    stop(d, DRIVER_FENCED, why);
    set_error(d, "%s", why);
    return true;
}

/* PUT one body. 0; 1 retry later; -1 stopped. */
static int put_object(struct driver *d, const char *key, const struct buf *b,
                      const char *sha256_hex, const char *content_type,
                      int64_t now)
{
    struct upload_crash cp = crash_point_of(d);
    struct s3_put p = {
        key, b->data,    b->len,         content_type, upload_between_parts,
        &cp, sha256_hex, lease_may_send, d->lease};
    struct s3_put_result r;
    struct err err;
    char why[512];

    memset(&r, 0, sizeof(r));
    uint64_t t0 = stages_begin(d->cfg.stages);
    int rc = s3_client_put(d->s3, &p, &r, &err);
    stages_end(d->cfg.stages, STAGES_UPLOAD, t0);
    if (rc == 0) {
        return 0;
    }
    upload_put_why(why, sizeof(why), key, err.msg);
    if (stop_if_lease_lost(d, why)) {
        return -1;
    }
    fail_sampled(d, SAMPLE_PUT, "%s", why);
    if (upload_s3_retriable(&r.st, rc)) {
        retry_later(d, now, r.st.retry_after_ms);
        return 1;
    }
    stop(d, DRIVER_FAILED, why);
    return -1;
}

/* The manifest of plan p over its objects o[0..n): its body and key. Sets
 * last_records and last_bytes. Returns 0, or ERR_* with err set. */
static int manifest_encode(struct driver *d, const struct engine_plan *p,
                           const struct upload_object *o, size_t n,
                           struct upload_doc *out, struct err *err)
{
    struct docs_object *v = xcalloc(n + 1, sizeof(*v));
    struct docs_lost *l = xcalloc(p->n_lost + d->n_pin_lost + 1, sizeof(*l));
    struct docs_manifest m;
    int rc;

    memset(&m, 0, sizeof(m));
    for (size_t i = 0; i < n; i++) {
        v[i] = (struct docs_object){
            buf_slice(&o[i].key), o[i].body.len,  o[i].records, "",
            o[i].has_partition,   o[i].partition, o[i].first,   o[i].last};
        memcpy(v[i].sha256, o[i].sha256, sizeof(o[i].sha256));
        m.records += o[i].records;
        m.bytes += o[i].body.len;
    }
    for (size_t i = 0; i < p->n_lost; i++) {
        l[i] = (struct docs_lost){p->lost[i].partition, p->lost[i].from,
                                  p->lost[i].to};
    }
    for (size_t i = 0; i < d->n_pin_lost; i++) {
        const struct engine_lost_range *x = &d->pin_lost[i];
        l[p->n_lost + i] = (struct docs_lost){x->partition, x->from, x->to};
    }
    const char *comp = "";
    const char *writer = "";
    const char *ext = "";
    upload_codec_strings(&d->cfg, &comp, &writer, &ext, err);
    m.sink = cstr(d->cfg.sink);
    m.tenant = cstr(d->cfg.tenant_text);
    m.queue = cstr(d->cfg.queue);
    m.k = p->k;
    m.t_start = p->t_start;
    m.t_end = p->t_end;
    m.format = cstr(format_name(&d->cfg));
    m.compression = cstr(comp);
    m.layout = cstr(d->cfg.per_partition ? "per-partition" : "merged");
    m.objects = v;
    m.n_objects = n;
    m.partitions = p->partitions;
    m.has_ts = p->n_records > 0;
    m.min_ts = p->min_ts;
    m.max_ts = p->max_ts;
    m.lost = l;
    m.n_lost = p->n_lost + d->n_pin_lost;
    m.writer = cstr(writer);
    m.committed_at_ms = d->wall_ms;
    struct docs_position *pos = xcalloc(p->n_positions + 1, sizeof(*pos));
    for (size_t i = 0; i < p->n_positions; i++) {
        pos[i] = (struct docs_position){
            p->positions[i].name, p->positions[i].offset, p->positions[i].id};
    }
    m.has_positions = true;
    m.positions = pos;
    m.n_positions = p->n_positions;
    rc = docs_manifest_encode(&out->body, &m, err);
    free(pos);
    size_t max = manifest_max(d);
    if (rc == 0 && out->body.len > max) {
        rc = over_limit(err, p->k, "its manifest takes", out->body.len, max,
                        "what the sink can read back");
    }
    rc = rc != 0 ? rc : layout_manifest_key(&out->key, &d->lq, p->k, err);
    d->last_records = m.records;
    d->last_bytes = m.bytes;
    free(l);
    free(v);
    return rc;
}

/* Keep the plan's lost ranges for the log after the commit. */
static void keep_lost(struct driver *d, const struct engine_plan *p)
{
    free(d->lost);
    d->lost = xcalloc(p->n_lost + d->n_pin_lost + 1, sizeof(*d->lost));
    d->n_lost = p->n_lost + d->n_pin_lost;
    for (size_t i = 0; i < d->n_lost; i++) {
        const struct engine_lost_range *x =
            i < p->n_lost ? &p->lost[i] : &d->pin_lost[i - p->n_lost];
        snprintf(d->lost[i].partition, sizeof(d->lost[i].partition), "%.*s",
                 (int)x->partition.len, x->partition.ptr);
        d->lost[i].from = x->from;
        d->lost[i].to = x->to;
    }
}

static void add_pin_lost(struct driver *d, size_t *cap, struct slice part,
                         int64_t from, int64_t to)
{
    if (d->n_pin_lost == *cap) {
        *cap = *cap < 8 ? 8 : *cap * 2;
        d->pin_lost = xrealloc(d->pin_lost, *cap * sizeof(*d->pin_lost));
    }
    d->pin_lost[d->n_pin_lost++] = (struct engine_lost_range){part, from, to};
}

/* The first offset from cur on that no lost range of p in partition part
 * covers. */
static int64_t past_covered(const struct engine_plan *p, struct slice part,
                            int64_t cur)
{
    bool moved = true;

    while (moved) {
        moved = false;
        for (size_t i = 0; i < p->n_lost; i++) {
            const struct engine_lost_range *y = &p->lost[i];
            if (same_slice(y->partition, part) && y->from <= cur &&
                cur <= y->to) {
                cur = y->to + 1;
                moved = true;
            }
        }
    }
    return cur;
}

/* The start of the first lost range of p in partition part above cur, or
 * limit. */
static int64_t next_covered(const struct engine_plan *p, struct slice part,
                            int64_t cur, int64_t limit)
{
    for (size_t i = 0; i < p->n_lost; i++) {
        const struct engine_lost_range *y = &p->lost[i];
        if (same_slice(y->partition, part) && y->from > cur &&
            y->from < limit) {
            limit = y->from;
        }
    }
    return limit;
}

/* The redo's build found offsets its intent pinned gone (upload.h
 * pin_gaps): what of them the plan's lost ranges do not name already is
 * lost too (the engine knew no position below them, e.g. before the first
 * checkpoint), logged and counted once, and goes into the window's
 * manifest. */
static void note_pin_gaps(struct driver *d, const struct engine_plan *p)
{
    size_t cap = 0;

    d->n_pin_lost = 0;
    for (size_t g = 0; g < d->up.n_pin_gaps; g++) {
        const struct engine_lost_range *x = &d->up.pin_gaps[g];
        int64_t cur = past_covered(p, x->partition, x->from);
        while (cur <= x->to) {
            int64_t next = next_covered(p, x->partition, cur, x->to + 1);
            add_pin_lost(d, &cap, x->partition, cur, next - 1);
            cur = past_covered(p, x->partition, next);
        }
    }
    for (size_t i = 0; !d->is_pin_lost_counted && i < d->n_pin_lost; i++) {
        const struct engine_lost_range *v = &d->pin_lost[i];
        d->ctr.records_lost += (uint64_t)(v->to - v->from + 1);
        log_warn_kv("queen-s3",
                    "records of a redo's window went away before it read "
                    "them again",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(p->k)},
                    {"partition",
                     LOG_FMT("%.*s", (int)v->partition.len, v->partition.ptr)},
                    {"from", LOG_I64(v->from)}, {"to", LOG_I64(v->to)});
    }
    d->is_pin_lost_counted = true;
}

/* A prefix as the config leaves it (config.c parse_prefix): non-empty, no
 * outer slash, no empty or relative segment. */
static bool prefix_ok(struct slice p, size_t cap)
{
    if (p.len == 0 || p.len >= cap || memchr(p.ptr, '\0', p.len) != NULL) {
        return false;
    }
    for (size_t i = 0; i <= p.len;) {
        const char *seg = p.ptr + i;
        const char *slash = memchr(seg, '/', p.len - i);
        size_t len = slash != NULL ? (size_t)(slash - seg) : p.len - i;
        if (len == 0 || (len == 1 && seg[0] == '.') ||
            (len == 2 && seg[0] == '.' && seg[1] == '.')) {
            return false;
        }
        i += len + 1;
    }
    return true;
}

/* The intent's parts in strict partition order (as a plan writes them),
 * which the redo's build relies on (upload.h pins). */
static bool parts_sorted(const struct docs_intent *in)
{
    for (size_t i = 1; i < in->n_parts; i++) {
        struct slice a = in->parts[i - 1].partition;
        struct slice b = in->parts[i].partition;
        size_t n = a.len < b.len ? a.len : b.len;
        int c = n == 0 ? 0 : memcmp(a.ptr, b.ptr, n);
        if (c > 0 || (c == 0 && a.len >= b.len)) {
            return false;
        }
    }
    return true;
}

/* Append " NAME intent (now current)" to the list of what differs. */
static void note_pin(char *out, size_t cap, const char *name,
                     const char *intent, const char *now)
{
    size_t n = strlen(out);

    if (strcmp(intent, now) != 0 && n < cap) {
        snprintf(out + n, cap - n, "%s%s=%s (now %s)", n > 0 ? " " : "", name,
                 intent, now);
    }
}

/* A redo rebuilds the window its intent names with the intent's settings
 * (same keys, same bytes), also when this sink's settings changed since:
 * format, compression, layout, align, prefix, and per-partition the offsets
 * each object's key names. One line names what differs; the configured
 * settings come back when the redo commits (unpin_redo), so they take effect
 * from the next window. A field an older intent lacks keeps this sink's
 * value; an intent this sink cannot read keeps them all (logged). */
static void pin_redo(struct driver *d)
{
    const struct docs_intent *in = &d->redo_intent;
    struct driver_config c = d->cfg;
    const char *comp = "";
    const char *writer = "";
    const char *ext = "";
    char align[8];
    char diff[1024] = "";
    enum layout_align al = (enum layout_align)d->cfg.align;
    struct err err;

    align[0] = '\0';
    if (in->has_align && in->align.len < sizeof(align)) {
        memcpy(align, in->align.ptr, in->align.len);
        align[in->align.len] = '\0';
    }
    if (in->compression.len >= sizeof(d->redo_comp) ||
        (!same_slice(in->format, cstr("jsonl")) &&
         !same_slice(in->format, cstr("parquet"))) ||
        (!same_slice(in->layout, cstr("merged")) &&
         !same_slice(in->layout, cstr("per-partition"))) ||
        (in->has_align && !layout_align_parse(align, &al)) ||
        (in->has_prefix && !prefix_ok(in->prefix, sizeof(d->redo_prefix))) ||
        !parts_sorted(in)) {
        log_warn_kv("queen-s3",
                    "the redo's intent names settings this sink cannot read; "
                    "rebuilding its window with the current ones",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(in->k)});
        return;
    }
    memcpy(d->redo_comp, in->compression.ptr, in->compression.len);
    d->redo_comp[in->compression.len] = '\0';
    c.format = same_slice(in->format, cstr("parquet")) ? DRIVER_FORMAT_PARQUET
                                                       : DRIVER_FORMAT_JSONL;
    c.compression = d->redo_comp;
    c.per_partition = same_slice(in->layout, cstr("per-partition"));
    c.align = (int)al;
    if (in->has_prefix) {
        memcpy(d->redo_prefix, in->prefix.ptr, in->prefix.len);
        d->redo_prefix[in->prefix.len] = '\0';
        c.prefix = d->redo_prefix;
    }
    if (upload_codec_strings(&c, &comp, &writer, &ext, &err) != 0) {
        log_warn_kv("queen-s3",
                    "the redo's intent names settings this sink cannot read; "
                    "rebuilding its window with the current ones",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(in->k)},
                    {"error", err.msg});
        return;
    }
    note_pin(diff, sizeof(diff), "format", format_name(&c),
             format_name(&d->cfg));
    note_pin(diff, sizeof(diff), "compression", c.compression,
             d->cfg.compression);
    note_pin(diff, sizeof(diff), "layout",
             c.per_partition ? "per-partition" : "merged",
             d->cfg.per_partition ? "per-partition" : "merged");
    note_pin(diff, sizeof(diff), "align", layout_align_name(al),
             layout_align_name((enum layout_align)d->cfg.align));
    note_pin(diff, sizeof(diff), "prefix", c.prefix, d->cfg.prefix);
    if (diff[0] != '\0') {
        log_warn_kv("queen-s3",
                    "the redo's intent names other settings; rebuilding its "
                    "window with the intent's, the current ones apply from "
                    "the next window",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(in->k)},
                    {"settings", diff});
    }
    d->unpinned = d->cfg;
    d->cfg = c;
    d->lq.prefix = d->cfg.prefix;
    if (in->has_parts && c.per_partition) {
        d->up.pins = in->parts;
        d->up.n_pins = in->n_parts;
    }
    /* Only a first attempt that had records may have put an object. */
    d->up.is_redo_build = in->has_records && in->records > 0;
    d->is_pinned = true;
}

/* The redo committed: the configured settings apply from the next window. */
static void unpin_redo(struct driver *d)
{
    if (!d->is_pinned) {
        return;
    }
    d->cfg.format = d->unpinned.format;
    d->cfg.compression = d->unpinned.compression;
    d->cfg.per_partition = d->unpinned.per_partition;
    d->cfg.align = d->unpinned.align;
    d->cfg.prefix = d->unpinned.prefix;
    d->lq.prefix = d->cfg.prefix;
    d->up.pins = NULL;
    d->up.n_pins = 0;
    d->up.is_redo_build = false;
    d->n_pin_lost = 0;
    d->is_pin_lost_counted = false;
    d->is_pinned = false;
}

/* ---- uploads (the objects and the thread are upload.c) ----------------- */

/* A window committed under memory pressure (engine_is_tight): the buffers
 * kept warm for the next window (the spare body, the zstd context) go back
 * too, as the engine's spare slabs and plan array do; the next window
 * starts them afresh. */
static void drop_warm_if_tight(struct driver *d)
{
    if (engine_is_tight(d->e)) {
        upload_drop_warm(&d->up);
    }
}

/* The objects of plan p are built: encode the manifest, start the thread,
 * and tell the engine they landed so it asks for the commit (do_commit
 * holds it). Takes o. 0; -1 stopped. */
static int bg_begin(struct driver *d, const struct engine_plan *p,
                    struct upload_object *o, size_t n, const char *ctype)
{
    struct upload *g = &d->up;
    struct err err;

    buf_reset(&g->manifest.body);
    buf_reset(&g->manifest.key);
    if (manifest_encode(d, p, o, n, &g->manifest, &err) != 0) {
        fail_doc(d, &err);
        upload_free_objects(g, o, n);
        return -1;
    }
    keep_lost(d, p);
    g->is_redo = d->is_redo && p->k == d->redo_intent.k;
    g->crash = crash_point_of(d);
    upload_begin(g, o, n, ctype, p->k, p->t_start);
    g->ct_floor =
        p->n_records > 0 && p->min_ts > p->t_start ? p->min_ts : p->t_start;
    d->attempt = 0;
    d->pend.kind = PENDING_NONE;
    engine_on_uploaded(d->e, d->last_records, d->last_bytes);
    return 0;
}

static int upload_objects(struct driver *d, int64_t now);

static int do_upload(struct driver *d, int64_t now)
{
    struct err err;

    if (d->is_redo && d->pend.plan->k == d->redo_intent.k) {
        bool taken = false;
        if (check_redo_manifest(d, &d->redo_intent, &taken, &err) != 0) {
            fail_sampled(d, SAMPLE_PUT, "%s", err.msg);
            retry_later(d, now, -1);
            return 1;
        }
        if (taken) {
            d->pend.kind = PENDING_NONE;
            return 0;
        }
    }
    return upload_objects(d, now);
}

/* The libraries an intent names, for a log line: "unknown" when it names
 * none (an older node wrote it). */
static struct slice intent_libs_named(const struct docs_intent *in)
{
    return in->has_libraries ? in->libraries : cstr("unknown");
}

/* Whether object o, as this node built it, may go up under its key for the
 * redo of an intent this node did not write (another writer string, other
 * codec library versions, or no libraries: an older node;
 * docs/design/formats.md §8): only when no object is there yet, or the one
 * there holds these very bytes. A redo never overwrites different bytes
 * under a key. 0 go on; 1 retry later (the read failed); -1 stopped. */
static int redo_key_free(struct driver *d, const struct upload_object *o,
                         int64_t now)
{
    const struct docs_intent *in = &d->redo_intent;
    struct slice libs = intent_libs_named(in);
    struct s3_object_info info;
    struct s3_status st;
    struct err err;
    struct buf body;
    char why[512];
    bool same = false;
    int rc;

    memset(&info, 0, sizeof(info));
    memset(&st, 0, sizeof(st));
    rc = s3_client_head(d->s3, o->key.data, &info, &st, &err);
    if (rc == 0 && info.found && info.size == o->body.len) {
        buf_init(&body, o->body.len + 1);
        rc = s3_client_get(d->s3, o->key.data, &body, &info, &st, &err);
        if (rc == 0 && info.found) {
            uint8_t h[32];
            char hex[65];
            sha256(body.data, body.len, h);
            hex_lower(h, sizeof(h), hex);
            same = strcmp(hex, o->sha256) == 0;
        }
        buf_free(&body);
    }
    if (rc != 0 && st.status == 403) {
        /* Without s3:ListBucket a missing key answers 403 too: whether the
         * key is free cannot be told, and retrying will not tell it */
        snprintf(why, sizeof(why),
                 "window k=%" PRId64 " of writer \"%.*s\" libraries \"%.*s\": "
                 "cannot tell whether %s is free for this node's bytes "
                 "(HEAD answered 403: s3:ListBucket missing?); grant it, or "
                 "finish the window with that writer's libraries",
                 in->k, (int)in->writer.len, in->writer.ptr, (int)libs.len,
                 libs.ptr, o->key.data);
        log_error_kv("queen-s3", "a redo never overwrites bytes it cannot see",
                     {"queue", d->cfg.queue}, {"why", why});
        stop(d, DRIVER_FAILED, why);
        set_error(d, "%s", why);
        return -1;
    }
    if (rc != 0) {
        fail_sampled(d, SAMPLE_PUT, "HEAD/GET %s: %s", o->key.data, err.msg);
        retry_later(d, now, st.retry_after_ms);
        return 1;
    }
    if (!info.found || same) {
        return 0;
    }
    snprintf(why, sizeof(why),
             "window k=%" PRId64 " of writer \"%.*s\" libraries \"%.*s\": "
             "this node's bytes (libraries \"%s\") differ from the object "
             "under %s; finish the window with that writer's libraries",
             in->k, (int)in->writer.len, in->writer.ptr, (int)libs.len,
             libs.ptr, upload_codec_library(&d->cfg), o->key.data);
    log_error_kv("queen-s3", "a redo never overwrites different bytes",
                 {"queue", d->cfg.queue}, {"why", why});
    stop(d, DRIVER_FAILED, why);
    set_error(d, "%s", why);
    return -1;
}

/* The redo of an intent whose manifest is not there: the intent is this
 * node's own only when its writer string and its libraries are both this
 * node's; otherwise every key must be free for this node's bytes
 * (redo_key_free). */
static int redo_keys_free(struct driver *d, const struct engine_plan *p,
                          const struct upload_object *o, size_t n, int64_t now)
{
    const struct docs_intent *in = &d->redo_intent;
    struct slice in_libs = intent_libs_named(in);
    const char *comp = "";
    const char *writer = "";
    const char *ext = "";
    const char *libs = upload_codec_library(&d->cfg);
    struct err err;

    if (!d->is_redo || p->k != in->k ||
        upload_codec_strings(&d->cfg, &comp, &writer, &ext, &err) != 0 ||
        (same_slice(in->writer, cstr(writer)) && in->has_libraries &&
         same_slice(in->libraries, cstr(libs)))) {
        return 0;
    }
    log_warn_kv(
        "queen-s3",
        "the redo's intent names another writer or other libraries; "
        "its keys take this node's bytes only where they are free",
        {"queue", d->cfg.queue}, {"k", LOG_I64(p->k)},
        {"intent_writer", LOG_FMT("%.*s", (int)in->writer.len, in->writer.ptr)},
        {"writer", writer},
        {"intent_libraries", LOG_FMT("%.*s", (int)in_libs.len, in_libs.ptr)},
        {"libraries", libs});
    for (size_t i = 0; i < n; i++) {
        int rc = redo_key_free(d, &o[i], now);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static int upload_objects(struct driver *d, int64_t now)
{
    const struct engine_plan *p = d->pend.plan;
    struct upload_object *o = NULL;
    size_t n = 0;
    struct err err;
    const char *ctype = d->cfg.format == DRIVER_FORMAT_PARQUET
                            ? PARQUET_CONTENT_TYPE
                            : JSONL_CONTENT_TYPE;
    int rc = 0;

    if (!upload_take_prebuilt(&d->up, p->k, &o, &n)) {
        rc = upload_build(&d->up, p, &o, &n, &err);
    }
    if (rc != 0) {
        stop(d, DRIVER_FAILED, err.msg);
        set_error(d, "%s", err.msg);
        upload_free_objects(&d->up, o, n);
        return -1;
    }
    if (d->is_pinned) {
        note_pin_gaps(d, p);
    }
    rc = redo_keys_free(d, p, o, n, now);
    if (rc != 0) {
        upload_free_objects(&d->up, o, n);
        return rc;
    }
    if (d->cfg.overlap_upload) {
        return bg_begin(d, p, o, n, ctype);
    }
    /* The manifest first: one past its limit fails the queue before any
     * PUT of the window. */
    struct upload_doc m;
    buf_init(&m.body, BUF_UNLIMITED);
    buf_init(&m.key, DRIVER_KEY_MAX);
    if (manifest_encode(d, p, o, n, &m, &err) != 0) {
        fail_doc(d, &err);
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = put_object(d, o[i].key.data, &o[i].body, o[i].sha256, ctype, now);
        if (rc == 0 && d->is_redo && p->k == d->redo_intent.k) {
            upload_abort_stranded(d->s3, o[i].key.data);
        }
        if (rc == 0 && i == 0 && crash(d, DRIVER_CRASH_MID_UPLOAD)) {
            rc = -1;
        }
    }
    if (rc == 0) {
        rc = put_object(d, m.key.data, &m.body, NULL, "application/json", now);
    }
    buf_free(&m.key);
    buf_free(&m.body);
    upload_free_objects(&d->up, o, n);
    if (rc != 0 || crash(d, DRIVER_CRASH_AFTER_UPLOAD)) {
        return rc != 0 ? rc : -1;
    }
    d->attempt = 0;
    keep_lost(d, p);
    d->pend.kind = PENDING_NONE;
    engine_on_uploaded(d->e, d->last_records, d->last_bytes);
    return 0;
}

/* Lost ranges are logged and counted when the engine finds them (engine.h
 * (5)), not when their window commits: a loss is never silent, even while
 * no window carries it yet. */
static void note_found_lost(struct driver *d)
{
    const struct engine_lost_range *v;
    size_t n;

    engine_found_lost(d->e, &v, &n);
    for (size_t i = 0; i < n; i++) {
        d->ctr.records_lost += (uint64_t)(v[i].to - v[i].from + 1);
        log_warn_kv("queen-s3", "records went away before the sink read them",
                    {"queue", d->cfg.queue},
                    {"partition", LOG_FMT("%.*s", (int)v[i].partition.len,
                                          v[i].partition.ptr)},
                    {"from", LOG_I64(v[i].from)}, {"to", LOG_I64(v[i].to)});
    }
}

static void log_committed(struct driver *d, const struct engine_commit *c)
{
    char t_end[32];
    uint64_t lost = 0;
    int64_t lag = 0;

    for (size_t i = 0; i < d->n_lost; i++) { /* logged when found */
        lost += (uint64_t)(d->lost[i].to - d->lost[i].from + 1);
    }
    d->n_lost = 0;
    if (d->cfg.on_commit != NULL) {
        d->cfg.on_commit(d->cfg.on_commit_arg, c->k, c->records, c->bytes,
                         lost);
    }
    engine_lag(d->e, &lag);
    isotime_format_us(c->t_end, t_end);
    log_info_kv("queen-s3", "window committed", {"queue", d->cfg.queue},
                {"k", LOG_I64(c->k)}, {"records", LOG_U64(c->records)},
                {"bytes", LOG_U64(c->bytes)}, {"t_end", t_end},
                {"lag_seconds", LOG_FMT("%.3f", (double)lag / 1e6)},
                {"lost", LOG_U64(lost)});
}

/* Write the commit pointer of c (its manifest key in mkey, made when
 * empty). tell_engine: engine_on_committed() after it (false when the
 * engine was told already: overlap). 0; 1 retry later; -1 stopped. */
static int commit_write(struct driver *d, const struct engine_commit *c,
                        struct buf *mkey, int64_t wall_ms, int64_t now,
                        bool tell_engine)
{
    struct buf doc;
    struct err err;

    if (crash(d, DRIVER_CRASH_BEFORE_COMMIT)) {
        return -1;
    }
    if (mkey->len == 0 && layout_manifest_key(mkey, &d->lq, c->k, &err) != 0) {
        stop(d, DRIVER_FAILED, err.msg);
        return -1;
    }
    struct docs_committed cd = {c->k,       c->t_end, buf_slice(mkey),
                                c->records, c->bytes, wall_ms};
    buf_init(&doc, BUF_UNLIMITED);
    if (docs_committed_encode(&doc, &cd, &err) != 0 ||
        kv_doc_fits(c->k, "its commit pointer takes", &doc, &err) != 0) {
        fail_doc(d, &err);
        buf_free(&doc);
        return -1;
    }
    int rc = fenced_put(d, "commit", d->committed_key, &d->committed_version,
                        buf_slice(&doc), now);
    buf_free(&doc);
    if (rc != 0) {
        return rc;
    }
    d->is_redo = false;
    if (tell_engine) {
        engine_on_committed(d->e);
    }
    d->recent[d->ctr.windows_committed % DRIVER_RECENT_WINDOWS] =
        (struct driver_window_size){c->records, c->bytes};
    d->ctr.windows_committed++;
    d->ctr.records += c->records;
    if (d->cfg.format == DRIVER_FORMAT_PARQUET) {
        d->ctr.bytes_parquet += c->bytes;
    } else {
        d->ctr.bytes_jsonl += c->bytes;
    }
    unpin_redo(d);
    d->last_records = c->records;
    d->last_bytes = c->bytes;
    d->last_t_end = c->t_end;
    d->has_t_end = true;
    d->last_error[0] = '\0';
    log_committed(d, c);
    return crash(d, DRIVER_CRASH_AFTER_COMMIT) ? -1 : 0;
}

static int do_commit(struct driver *d, int64_t now)
{
    struct upload *g = &d->up;

    if (g->state != UPLOAD_NONE) {
        /* Overlap: the pointer waits for the objects (bg_poll); the engine
         * reads the next window meanwhile. */
        g->commit = d->pend.commit;
        g->commit.manifest_key = (struct slice){NULL, 0};
        g->commit_wall_ms = d->pend.commit_wall_ms;
        g->has_commit = true;
        engine_on_committed(d->e);
        d->pend.kind = PENDING_NONE;
        return 0;
    }
    int rc = commit_write(d, &d->pend.commit, &d->pend.manifest_key,
                          d->pend.commit_wall_ms, now, true);
    if (rc == 0) {
        d->pend.kind = PENDING_NONE;
        drop_warm_if_tight(d);
    }
    return rc;
}

/* The pass is over: its outcome. 0 landed (COMMIT); 1 retry later; -1
 * stopped. */
static int bg_outcome(struct driver *d, int64_t now)
{
    struct upload *g = &d->up;

    if (g->hit_mid_upload) {
        crash(d, DRIVER_CRASH_MID_UPLOAD);
        return -1;
    }
    if (g->rc != 0) {
        if (stop_if_lease_lost(d, g->why)) {
            return -1;
        }
        fail_sampled(d, SAMPLE_PUT, "%s", g->why);
        if (!g->is_retriable) {
            stop(d, DRIVER_FAILED, g->why);
            return -1;
        }
        retry_later(d, now, g->retry_after_ms);
        g->retry_at = d->next_at;
        g->state = UPLOAD_RETRY;
        return 1;
    }
    if (crash(d, DRIVER_CRASH_AFTER_UPLOAD)) {
        return -1;
    }
    d->attempt = 0;
    g->retry_at = 0;
    g->state = UPLOAD_COMMIT;
    return 0;
}

/* Move the window going up along (enum upload_state); with wait, block until
 * its pass is over and commit it. 0 go on (with wait: the window is
 * committed); 1 wait until next_at; -1 stopped. */
static int bg_poll(struct driver *d, int64_t now, bool wait)
{
    struct upload *g = &d->up;

    if ((g->state == UPLOAD_RETRY || g->state == UPLOAD_COMMIT) &&
        now < g->retry_at) {
        if (wait) {
            d->next_at = g->retry_at;
            return 1;
        }
        return 0;
    }
    if (g->state == UPLOAD_RETRY) {
        upload_launch(g);
    }
    if (g->state == UPLOAD_PUTTING) {
        if (!(wait ? upload_join_for(g, DRIVER_UPLOAD_WAIT_MS)
                   : upload_join(g, false))) {
            if (wait) { /* the tick ends (status published) and comes back
                           to this wait (run_round) */
                d->is_upload_wait = true;
                d->next_at = now;
                return 1;
            }
            return 0;
        }
        d->is_upload_wait = false;
        int rc = bg_outcome(d, now);
        if (rc != 0) {
            return rc;
        }
    }
    if (g->state != UPLOAD_COMMIT || !g->has_commit) {
        return 0;
    }
    d->did_work = true;
    int rc = commit_write(d, &g->commit, &g->manifest.key, g->commit_wall_ms,
                          now, false);
    if (rc == 1) {
        g->retry_at = d->next_at;
    } else if (rc == 0) {
        int64_t k = g->k;

        upload_clear(g);
        drop_warm_if_tight(d);
        checkpoint_put_kept(d, k);
    }
    return rc;
}

/* The round has nothing left but a wait until at: finish the window going
 * up instead, if any. 0 go on; 1 wait; -1 stopped. */
static int wait_until(struct driver *d, int64_t now, int64_t at)
{
    if (d->up.state != UPLOAD_NONE) {
        int rc = bg_poll(d, now, true);
        if (rc == 1 && at < d->next_at) {
            d->next_at = at;
        }
        return rc;
    }
    d->next_at = at;
    return 1;
}

/* The engine's checkpoint positions as a docs source (read a batch at a
 * time: the positions are never one array). */
struct cp_source {
    struct engine *e;
    struct engine_positions_cursor c;
    struct engine_position v[256];
};

static void cp_source_rewind(void *ctx)
{
    struct cp_source *s = ctx;

    memset(&s->c, 0, sizeof(s->c));
}

static size_t cp_source_read(void *ctx, struct docs_position *out, size_t max)
{
    struct cp_source *s = ctx;
    size_t n = engine_positions_read(
        s->e, &s->c, s->v, max < ARRAY_LEN(s->v) ? max : ARRAY_LEN(s->v));

    for (size_t i = 0; i < n; i++) {
        out[i] =
            (struct docs_position){s->v[i].name, s->v[i].offset, s->v[i].id};
    }
    return n;
}

/* Encode checkpoint a (the engine's positions now) into key and body
 * (initialised here). 0, or err. */
static int checkpoint_encode(struct driver *d,
                             const struct engine_checkpoint_action *a,
                             struct buf *key, struct buf *body, struct err *err)
{
    struct cp_source *cs = xcalloc(1, sizeof(*cs));
    struct docs_position_source src = {cs, cp_source_rewind, cp_source_read};

    cs->e = d->e;
    buf_init(body, BUF_UNLIMITED);
    buf_init(key, DRIVER_KEY_MAX);
    int rc = docs_checkpoint_encode_stream(body, a->k, a->t_end, &src, err);
    rc = rc != 0 ? rc : layout_checkpoint_key(key, &d->lq, a->k, err);
    free(cs);
    return rc;
}

/* PUT checkpoint k (encoded with rc and err by checkpoint_encode), up to 3
 * passes of the client's attempts, and free key and body. */
static void checkpoint_put(struct driver *d, int64_t k, struct buf *key,
                           struct buf *body, int rc, struct err *err)
{
    struct s3_put_result r;

    for (int attempt = 0; rc == 0 && attempt < 3; attempt++) {
        struct s3_put p = {key->data, body->data, body->len, "application/zstd",
                           NULL,      NULL,       NULL,      lease_may_send,
                           d->lease};
        memset(&r, 0, sizeof(r));
        rc = s3_client_put(d->s3, &p, &r, err);
        if (rc == 0 || !upload_s3_retriable(&r.st, rc)) {
            break;
        }
        rc = attempt < 2 ? 0 : rc; /* the client already waited between */
        if (attempt == 2) {
            break;
        }
    }
    if (rc != 0) {
        log_warn_kv("queen-s3",
                    "checkpoint not written; the next restart re-reads more, "
                    "and nothing else",
                    {"queue", d->cfg.queue}, {"k", LOG_I64(k)},
                    {"error", err->msg});
    } else {
        d->ctr.checkpoints_written++;
    }
    buf_free(key);
    buf_free(body);
}

static void do_checkpoint(struct driver *d,
                          const struct engine_checkpoint_action *a)
{
    struct buf body;
    struct buf key;
    struct err err;
    int rc = checkpoint_encode(d, a, &key, &body, &err);

    checkpoint_put(d, a->k, &key, &body, rc, &err);
}

/* The checkpoint kept for the window going up (checkpoint_after_commit),
 * written once that window's pointer (committed_k) is. */
static void checkpoint_put_kept(struct driver *d, int64_t committed_k)
{
    struct err err = {0};

    if (!d->has_cp_kept || d->cp_kept_k > committed_k) {
        return;
    }
    d->has_cp_kept = false;
    checkpoint_put(d, d->cp_kept_k, &d->cp_kept_key, &d->cp_kept_body, 0, &err);
}

static void checkpoint_drop_kept(struct driver *d)
{
    if (d->has_cp_kept) {
        buf_free(&d->cp_kept_key);
        buf_free(&d->cp_kept_body);
        d->has_cp_kept = false;
    }
}

/* ---- the tick (docs/design/window.md §11) ------------------------------- */

static void copy_str(char *dst, size_t cap, struct slice s, struct slice *out)
{
    size_t n = s.len < cap - 1 ? s.len : cap - 1;

    memcpy(dst, s.ptr, n);
    dst[n] = '\0';
    *out = (struct slice){dst, n};
}

/* Take a closing action into d->pend, so a failure can repeat it. */
static void take_closing(struct driver *d, const struct engine_action *a)
{
    struct pending *p = &d->pend;
    struct err err;

    if (a->kind == ENGINE_ACT_WRITE_INTENT) {
        p->kind = PENDING_INTENT;
        p->intent = a->u.intent;
        copy_str(p->strs[0], 128, a->u.intent.format, &p->intent.format);
        copy_str(p->strs[1], 128, a->u.intent.compression,
                 &p->intent.compression);
        copy_str(p->strs[2], 128, a->u.intent.layout, &p->intent.layout);
        copy_str(p->strs[3], 128, a->u.intent.writer, &p->intent.writer);
    } else if (a->kind == ENGINE_ACT_UPLOAD) {
        p->kind = PENDING_UPLOAD;
        p->plan = a->u.upload;
    } else {
        p->kind = PENDING_COMMIT;
        p->commit = a->u.commit;
        buf_reset(&p->manifest_key);
        buf_append(&p->manifest_key, a->u.commit.manifest_key.ptr,
                   a->u.commit.manifest_key.len, &err);
        p->commit.manifest_key = buf_slice(&p->manifest_key);
        p->commit_wall_ms = d->wall_ms;
    }
}

/* The next window's intent waits for the window going up (never two in
 * flight), but its objects need not: they are bytes in memory until their
 * PUTs, which still follow the intent (docs/design/protocol.md §6), and a
 * window's bytes depend on its records alone. So they are built meanwhile, once
 * per window; a build that failed is left for upload_objects to repeat and
 * report. Not for a redo, whose settings are its intent's
 * (pin_redo), nor under memory pressure (engine_is_tight), where one
 * object at a time is all. */
static void prebuild(struct driver *d)
{
    const struct engine_plan *p = d->pend.intent.plan;

    if (d->pend.kind != PENDING_INTENT || d->up.state == UPLOAD_NONE ||
        d->is_redo || engine_is_tight(d->e) || p == NULL) {
        return;
    }
    if (upload_prebuild(&d->up, p)) {
        d->ctr.windows_prebuilt++;
    }
}

static int run_pending(struct driver *d, int64_t now)
{
    d->did_work = true;
    if (d->up.state != UPLOAD_NONE && d->pend.kind != PENDING_COMMIT) {
        /* Never two windows in flight: the next intent waits until the
         * window going up is committed. */
        prebuild(d);
        int rc = bg_poll(d, now, true);
        if (rc != 0) {
            return rc;
        }
        if (d->up.state != UPLOAD_NONE) {
            d->next_at = now + 10;
            return 1;
        }
    }
    switch (d->pend.kind) {
    case PENDING_INTENT:
        return do_intent(d, now);
    case PENDING_UPLOAD:
        return do_upload(d, now);
    case PENDING_COMMIT:
        return do_commit(d, now);
    default:
        return 0;
    }
}

/* A checkpoint follows its commit (docs/design/protocol.md §6). With a
 * window still going up (the engine hears of a commit before its pointer
 * is written, to read on meanwhile), the checkpoint's positions are
 * encoded now, before the engine is told anything more, and the PUT waits
 * for that window's pointer (bg_poll): the driver never blocks on the
 * upload here (its status would stand still through a bucket outage), and
 * a pass that fails and is retried no longer costs the checkpoint. 0. */
static int checkpoint_after_commit(struct driver *d,
                                   const struct engine_checkpoint_action *a)
{
    if (d->up.state == UPLOAD_NONE || a->k < d->up.k) {
        do_checkpoint(d, a);
        return 0;
    }
    struct err err;

    checkpoint_drop_kept(d);
    if (checkpoint_encode(d, a, &d->cp_kept_key, &d->cp_kept_body, &err) != 0) {
        checkpoint_put(d, a->k, &d->cp_kept_key, &d->cp_kept_body, -1, &err);
        return 0;
    }
    d->cp_kept_k = a->k;
    d->has_cp_kept = true;
    return 0;
}

/* Execute one action. 0 go on; 1 wait (next_at set); -1 stopped. *idle_ms
 * gets an Idle's wait; *failed is set by a failed read. */
static int run_action(struct driver *d, const struct engine_action *a,
                      int64_t now, int64_t *idle_ms, bool *failed)
{
    switch (a->kind) {
    case ENGINE_ACT_DISCOVER:
        *failed |= !d->is_draining && !do_discover(d, &a->u.discover);
        return 0;
    case ENGINE_ACT_FETCH:
        if (d->is_draining) {
            engine_on_fetch_failed(d->e, a->u.fetch.call_id);
        } else {
            *failed |= !do_fetch(d, &a->u.fetch);
        }
        return 0;
    case ENGINE_ACT_SEEK:
        if (!d->is_draining) {
            do_seek(d, &a->u.seek);
        }
        return 0;
    case ENGINE_ACT_CHECKPOINT:
        d->did_work = true;
        return checkpoint_after_commit(d, &a->u.checkpoint);
    case ENGINE_ACT_IDLE:
        *idle_ms = a->u.idle_min_wait_ms;
        return 0;
    default:
        take_closing(d, a);
        return run_pending(d, now);
    }
}

static bool is_closing_action(const struct engine_action *a)
{
    return a->kind == ENGINE_ACT_WRITE_INTENT || a->kind == ENGINE_ACT_UPLOAD ||
           a->kind == ENGINE_ACT_COMMIT;
}

/* Under `latest`, a queue that has committed nothing records where its
 * first window starts, once the engine knows it, before any intent: a next
 * owner (after a kill -9, or a drain that left records younger than the
 * guard) starts there too, not at its own first safeTime, which would leave
 * the records in between out of the lake for good. Written fenced, only
 * where no start row is. 0 go on; 1 wait; -1 stopped. */
static int keep_start(struct driver *d, int64_t now)
{
    struct buf doc;
    struct err err;
    int64_t t;
    int rc;

    if (d->is_start_kept || !engine_first_start(d->e, &t)) {
        d->is_start_kept |= engine_committed_k(d->e) > 0;
        return 0;
    }
    buf_init(&doc, KV_VALUE_MAX);
    rc = docs_start_encode(&doc, t, &err);
    if (rc != 0) {
        fail_doc(d, &err);
        buf_free(&doc);
        return -1;
    }
    rc = fenced_put(d, "start", d->start_key, &d->start_version,
                    buf_slice(&doc), now);
    buf_free(&doc);
    d->is_start_kept = rc == 0;
    return rc;
}

/* What a round does before its actions: the upload going up polled, and
 * the start document kept. true when the round ends here, with *rc as
 * run_round's answer. */
static bool round_prepare(struct driver *d, int64_t now, int *rc)
{
    *rc = 0;
    if (d->is_upload_wait) {
        /* a wait on the pass that a slice ended: it goes on before the
         * round runs anything else, as one long wait did */
        if (d->up.state == UPLOAD_PUTTING) {
            *rc = bg_poll(d, now, true);
            return true;
        }
        d->is_upload_wait = false;
    }
    if (d->up.state != UPLOAD_NONE) {
        /* A drain waits for the window going up (run_pending makes a
         * closing action wait too). */
        *rc = bg_poll(d, now, d->is_draining);
        if (*rc != 0) {
            return true;
        }
    }
    if (!d->is_start_kept) {
        *rc = keep_start(d, now);
    }
    return *rc != 0;
}

/* One round of actions. 0 go on; 1 wait (next_at set); -1 stopped. */
static int run_round(struct driver *d, int64_t now)
{
    struct engine_actions acts;
    int64_t idle_ms = -1;
    int64_t wait_at = now;
    bool failed = false;
    bool waiting = false;
    bool is_closing_only =
        d->is_draining && engine_committed_k(d->e) > d->drain_from_k;
    int pre = 0;

    if (round_prepare(d, now, &pre)) {
        return pre;
    }
    if (is_closing_only && d->pend.kind == PENDING_INTENT) {
        /* an intent taken before the drain began, for the window after
         * the drain's one: passed over unwritten, its prebuilt objects
         * dropped; the next owner closes that window */
        d->pend.kind = PENDING_NONE;
        d->is_close_passed = true;
        upload_drop_prebuilt(&d->up);
    }
    if (d->pend.kind != PENDING_NONE) {
        return run_pending(d, now);
    }
    uint64_t t0 = stages_begin(d->cfg.stages);
    engine_next_actions(d->e, &acts);
    stages_end(d->cfg.stages, STAGES_MERGE, t0);
    if (acts.n == 0) {
        return wait_until(d, now, now + (d->is_draining ? 0 : 10));
    }
    for (size_t i = 0; i < acts.n; i++) {
        const struct engine_action *a = &acts.v[i];
        if (is_closing_only && a->kind != ENGINE_ACT_CHECKPOINT) {
            d->is_close_passed |= is_closing_action(a);
            continue; /* one window per drain at most */
        }
        /* Every action of the round is answered, even after one asked to
         * wait: the engine hands out each read (a discovery page, a fetch,
         * a seek) and each closing action once, and waits for its answer. A
         * read left unrun after a checkpoint waited on the window going up
         * kept the queue from reading ever after. A closing action after a
         * wait is only taken (run_pending runs it in a later round). */
        int rc = waiting && is_closing_action(a)
                     ? (take_closing(d, a), 0)
                     : run_action(d, a, now, &idle_ms, &failed);
        if (rc < 0) {
            return rc;
        }
        if (rc == 1 && !waiting) {
            waiting = true;
            wait_at = d->next_at;
        }
    }
    if (waiting) {
        d->next_at = wait_at;
        return 1;
    }
    if (failed) {
        return wait_until(d, now, now + DRIVER_ERROR_DELAY_MS);
    }
    if (idle_ms >= 0) {
        return wait_until(d, now, now + (d->is_draining ? 0 : idle_ms));
    }
    return 0;
}

static void begin_drain(struct driver *d)
{
    int64_t lag = 0;
    bool has_lag = engine_lag(d->e, &lag);
    uint64_t buffered = engine_buffered_bytes(d->e);
    enum engine_state s = engine_state(d->e);
    bool in_bg = d->up.state != UPLOAD_NONE;
    bool in_flight = s == ENGINE_INTENT || s == ENGINE_UPLOAD ||
                     s == ENGINE_COMMIT || d->pend.kind != PENDING_NONE ||
                     in_bg;
    /* A known safeTime with nothing complete yet (the first window under
     * earliest) is an unbounded lag: aged. */
    bool aged = has_lag ? lag >= DRIVER_AGED_US
                        : engine_safe_time(d->e) != ENGINE_MIN &&
                              engine_complete_through(d->e) == ENGINE_MIN;
    /* A window going up is the drain's one window: the engine, which counts
     * it committed already, is not asked to close another (the driver stops
     * the reads itself). */
    bool worth = !in_bg && engine_begin_drain(d->e);

    if (!in_bg && !worth && aged && buffered > 0) {
        engine_force_close(d->e);
        worth = true;
    }
    bool closing = worth || in_flight;
    d->is_draining = true;
    d->drain_from_k = in_bg ? d->up.k - 1 : engine_committed_k(d->e);
    log_info_kv("queen-s3",
                atomic_load(&d->giving_back)
                    ? "giving the queue back: stopping the reads"
                    : "shutting down: stopping the reads",
                {"queue", d->cfg.queue}, {"buffered", LOG_U64(buffered)},
                {"aged", LOG_BOOL(aged)}, {"closing", LOG_BOOL(closing)},
                {"state", in_bg ? bg_state_name(d) : engine_state_name(s)});
}

/* The driver logs "queue drained" (its e2e line); the host logs the other
 * stops where it decides what comes next (fenced, failed, missing,
 * crashed), so each is reported once. */
static void log_stop(struct driver *d)
{
    if (d->stop == DRIVER_DRAINED) {
        log_info_kv("queen-s3", "queue drained", {"queue", d->cfg.queue});
    }
}

/* The state a window going up shows in status. */
static const char *bg_state_name(const struct driver *d)
{
    return d->up.state == UPLOAD_COMMIT ? "commit" : "upload";
}

static const char *status_state(const struct driver *d)
{
    static const char *const stopped[] = {"",        "drained", "fenced",
                                          "missing", "failed",  "crashed"};

    if (d->stop != DRIVER_RUNNING) {
        return stopped[d->stop];
    }
    if (!d->has_started) {
        return "restoring";
    }
    /* a drain finishing a window shows the window's step, as the reference
     * names the states (upload, commit) */
    if (d->up.state != UPLOAD_NONE) {
        return bg_state_name(d);
    }
    if (d->is_draining) {
        return "draining";
    }
    return engine_state_name(engine_state(d->e));
}

static void publish(struct driver *d)
{
    struct driver_status s;
    int64_t t;

    memset(&s, 0, sizeof(s));
    snprintf(s.state, sizeof(s.state), "%s", status_state(d));
    s.committed_k = engine_committed_k(d->e);
    s.k = engine_closing_k(d->e) != 0 ? engine_closing_k(d->e)
                                      : s.committed_k + 1;
    if (d->up.state != UPLOAD_NONE) { /* the pointer, not the engine's belief */
        s.committed_k = d->up.k - 1;
        s.k = d->up.k;
    }
    s.has_t_end = d->has_t_end;
    s.t_end = d->last_t_end;
    t = engine_complete_through(d->e);
    s.has_complete_through = t != ENGINE_MIN;
    s.complete_through = t;
    t = engine_safe_time(d->e);
    s.has_safe_time = t != ENGINE_MIN;
    s.safe_time = t;
    s.has_lag = engine_lag(d->e, &s.lag_us);
    /* While window up.k goes up, none of its records is in a committed
     * window, whatever the engine was told (overlap: it hears of the
     * commit before the pointer is written, to read on meanwhile), so
     * completeThrough, the lag and the health stay at its first record
     * until the pointer lands (an outage holds them there). Not at its
     * tStart: no record lies between the two, and on a queue idle before
     * the window, completeThrough had followed the clock past tStart and
     * must not step back (the lag would count the idle time). */
    if (d->up.state != UPLOAD_NONE && s.has_complete_through &&
        s.complete_through > d->up.ct_floor) {
        s.complete_through = d->up.ct_floor;
        s.lag_us = s.has_safe_time && s.safe_time > s.complete_through
                       ? s.safe_time - s.complete_through
                       : 0;
    }
    s.redo = d->is_redo;
    s.buffered_bytes = engine_buffered_bytes(d->e);
    s.partition_bytes = engine_tracked_bytes(d->e);
    s.partitions = engine_tracked_partitions(d->e);
    s.discovery_partitions = engine_discovery_partitions(d->e);
    s.checkpoint_age = s.committed_k - engine_last_checkpoint_k(d->e);
    s.checkpoint_age = s.checkpoint_age < 0 ? 0 : s.checkpoint_age;
    s.last_window_records = d->last_records;
    s.last_window_bytes = d->last_bytes;
    memcpy(s.recent, d->recent, sizeof(s.recent));
    s.counters = d->ctr;
    snprintf(s.last_error, sizeof(s.last_error), "%s", d->last_error);
    pthread_mutex_lock(&d->mu);
    d->st = s;
    pthread_mutex_unlock(&d->mu);
}

void driver_status(struct driver *d, struct driver_status *out)
{
    pthread_mutex_lock(&d->mu);
    *out = d->st;
    pthread_mutex_unlock(&d->mu);
}

/* The checks at the top of every tick (docs/design/window.md §11). false when
 * stopped. */
static bool check_running(struct driver *d)
{
    char why[800];
    if (lease_lost(d->lease)) {
        snprintf(why, sizeof(why), "queue \"%s\": %s", d->cfg.queue,
                 lease_lost_reason(d->lease));
        stop(d, DRIVER_FENCED, why);
        return false;
    }
    if (engine_state(d->e) == ENGINE_FAILED) {
        stop(d, DRIVER_MISSING, engine_failure(d->e));
        return false;
    }
    if (atomic_exchange(&d->force_close, false)) {
        log_info_kv("queen-s3",
                    "memory budget reached: closing this queue's window early",
                    {"queue", d->cfg.queue});
        engine_force_close(d->e);
    }
    if (atomic_load(&d->drain_requested) && !d->is_draining) {
        begin_drain(d);
    }
    return true;
}

/* Run rounds until one asks to wait or the queue stops. */
static void run_rounds(struct driver *d, int64_t now)
{
    d->next_at = now;
    for (int i = 0; i < DRIVER_ROUNDS_PER_TICK; i++) {
        d->did_work = false;
        int rc = run_round(d, now);
        note_found_lost(d);
        if (rc < 0 || !check_running(d)) {
            return;
        }
        if (d->is_draining && d->pend.kind == PENDING_NONE &&
            d->up.state == UPLOAD_NONE &&
            (!d->did_work || engine_committed_k(d->e) > d->drain_from_k) &&
            (engine_state(d->e) == ENGINE_FILLING || d->is_close_passed)) {
            if (!d->did_work || rc == 1) {
                stop(d, DRIVER_DRAINED, "drained");
                return;
            }
        }
        if (rc == 1) {
            return;
        }
    }
}

int driver_tick(struct driver *d, int64_t now_ms, int64_t wall_ms,
                struct driver_next *next)
{
    struct err err;

    d->wall_ms = wall_ms;
    d->now_ms = now_ms;
    if (d->stop == DRIVER_RUNNING && !d->has_started &&
        atomic_load(&d->drain_requested)) {
        /* nothing read yet: nothing to finish */
        stop(d, DRIVER_DRAINED, "drained before the start");
    }
    if (d->stop == DRIVER_RUNNING && !d->has_started) {
        err_clear(&err);
        if (start(d, &err) != 0 && d->stop == DRIVER_RUNNING) {
            set_error(d, "%s", err.msg);
            retry_later(d, now_ms, -1);
            goto out;
        }
        d->attempt = 0;
    }
    if (d->stop == DRIVER_RUNNING && check_running(d)) {
        run_rounds(d, now_ms);
    }
    if (d->stop != DRIVER_RUNNING && d->up.state == UPLOAD_PUTTING) {
        upload_join(&d->up, true); /* no PUT of ours outlives the stop */
    }
    if (d->stop != DRIVER_RUNNING && !d->is_stop_logged) {
        d->is_stop_logged = true;
        log_stop(d);
    }
out:
    publish(d);
    memset(next, 0, sizeof(*next));
    next->stop = d->stop;
    next->at_ms = d->next_at;
    snprintf(next->why, sizeof(next->why), "%s", d->why);
    return 0;
}
