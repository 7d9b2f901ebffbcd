/* A window's objects and the uploader thread (see upload.h). */
#include "sink/upload.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/sha256.h"
#include "base/xalloc.h"
#include "parquet/parquet.h"
#include "s3/client.h"
#include "sink/jsonl.h"

#define UPLOAD_KEY_MAX    2048
#define UPLOAD_LINE_EXTRA 100  /* a JSONL line past its txn, payload */
#define UPLOAD_PLAN_PIECE 4096 /* records read from a plan at a time */

void upload_init(struct upload *u, const struct driver_config *cfg,
                 const struct layout_queue *lq, struct engine *e,
                 struct s3_client *s3)
{
    memset(u, 0, sizeof(*u));
    u->cfg = cfg;
    u->lq = lq;
    u->e = e;
    u->s3 = s3;
    buf_init(&u->spare_body, BUF_UNLIMITED);
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    buf_init(&u->manifest.body, BUF_UNLIMITED);
    buf_init(&u->manifest.key, UPLOAD_KEY_MAX);
}

void upload_free(struct upload *u)
{
    upload_clear(u);
    upload_drop_prebuilt(u);
    buf_free(&u->manifest.body);
    buf_free(&u->manifest.key);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    buf_free(&u->spare_body);
    jsonl_cctx_free(u->zc);
    u->zc = NULL;
    free(u->pin_gaps);
    u->pin_gaps = NULL;
}

bool upload_s3_retriable(const struct s3_status *st, int rc)
{
    return st->is_retriable || rc == ERR_IO || rc == ERR_TIMEOUT;
}

/* ---- crash points -------------------------------------------------------- */

bool upload_crash_fires(struct upload_crash c, enum driver_crash at)
{
    if (c.at != at || at == DRIVER_CRASH_NEVER) {
        return false;
    }
    if (!c.returns) {
        log_error("queen-s3", "QUEEN_S3_CRASH_AT fired: aborting");
        abort();
    }
    return true;
}

void upload_between_parts(void *arg, int part_done)
{
    const struct upload_crash *c = arg;

    UNUSED(part_done);
    if (c->at == DRIVER_CRASH_MID_UPLOAD && !c->returns) {
        log_error("queen-s3", "QUEEN_S3_CRASH_AT=mid_upload: aborting between "
                              "multipart parts");
        abort();
    }
}

/* ---- formats ------------------------------------------------------------ */

int upload_codec_strings(const struct driver_config *c, const char **comp,
                         const char **writer, const char **ext, struct err *err)
{
    if (c->format == DRIVER_FORMAT_JSONL) {
        enum jsonl_codec jc;
        if (jsonl_codec_parse(c->compression, &jc, err) != 0) {
            return err->code;
        }
        *comp = jsonl_codec_name(jc);
        *writer = jsonl_writer_string(jc);
        *ext = jsonl_extension(jc);
        return 0;
    }
    bool is_snappy = strcmp(c->compression, "snappy") == 0;
    if (!is_snappy && strcmp(c->compression, "zstd") != 0) {
        return err_set(err, ERR_INVALID, "parquet: unknown compression \"%s\"",
                       c->compression);
    }
    enum parquet_codec pc = is_snappy ? PARQUET_SNAPPY : PARQUET_ZSTD;
    *comp = parquet_codec_name(pc);
    *writer = parquet_writer_string(pc);
    *ext = "parquet";
    return 0;
}

const char *upload_codec_library(const struct driver_config *c)
{
    struct err err;

    if (c->format == DRIVER_FORMAT_JSONL) {
        enum jsonl_codec jc;
        return jsonl_codec_parse(c->compression, &jc, &err) == 0
                   ? jsonl_codec_library(jc)
                   : "";
    }
    if (strcmp(c->compression, "snappy") == 0) {
        return parquet_codec_library(PARQUET_SNAPPY);
    }
    return strcmp(c->compression, "zstd") == 0
               ? parquet_codec_library(PARQUET_ZSTD)
               : "";
}

/* ---- building a window's objects (docs/design/formats.md §2) ------------ */

static bool same_slice(struct slice a, struct slice b)
{
    return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

/* A body being written: JSONL or Parquet. */
struct body {
    struct jsonl_writer *j;
    struct parquet_writer *q;
};

/* Start a body. expect: about what its JSONL lines take before compression
 * (0: unknown), so the body is reserved once (jsonl_writer_expect). */
static int body_open(struct upload *u, struct body *b, size_t expect,
                     struct err *err)
{
    memset(b, 0, sizeof(*b));
    if (u->cfg->format == DRIVER_FORMAT_PARQUET) {
        struct parquet_opts o = {
            .codec = strcmp(u->cfg->compression, "snappy") == 0 ? PARQUET_SNAPPY
                                                                : PARQUET_ZSTD,
            .queue = u->cfg->queue,
            .tenant = u->cfg->tenant_text,
            .max_bytes = u->cfg->object_max_bytes,
        };
        b->q = parquet_writer_new(&o);
        return 0;
    }
    enum jsonl_codec c = JSONL_ZSTD;
    jsonl_codec_parse(u->cfg->compression, &c, err);
    if (c == JSONL_ZSTD && u->zc == NULL) {
        u->zc = jsonl_cctx_new();
    }
    b->j = jsonl_writer_new_with(c, u->cfg->object_max_bytes, &u->spare_body,
                                 u->zc);
    if (u->cfg->stages != NULL) {
        jsonl_writer_time(b->j, stages_clock, &u->compress_ns);
    }
    return expect > 0 ? jsonl_writer_expect(b->j, expect, err) : 0;
}

static int body_add(struct body *b, const struct sink_record *r,
                    struct err *err)
{
    if (b->q != NULL) { /* src/parquet/ has its own record type */
        struct parquet_record pr = {r->partition, r->offset, r->txn, r->ts,
                                    r->payload};
        return parquet_writer_add(b->q, &pr, err);
    }
    return jsonl_writer_add(b->j, r, err);
}

/* Finish the body into out (rc: what came before) and drop the writer. */
static int body_close(struct body *b, int rc, struct buf *out, struct err *err)
{
    if (b->q != NULL) {
        rc = rc != 0 ? rc : parquet_writer_finish(b->q, out, err);
        parquet_writer_free(b->q);
    } else if (b->j != NULL) {
        rc = rc != 0 ? rc : jsonl_writer_finish(b->j, out, err);
        jsonl_writer_free(b->j);
    }
    memset(b, 0, sizeof(*b));
    return rc;
}

/* Partition name order (plan order): bytes, then length. */
static int name_cmp(struct slice a, struct slice b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n == 0 ? 0 : memcmp(a.ptr, b.ptr, n);

    return c != 0 ? c : a.len == b.len ? 0 : a.len < b.len ? -1 : 1;
}

static const struct docs_intent_part *find_pin(const struct upload *u,
                                               struct slice partition)
{
    size_t lo = 0;
    size_t hi = u->n_pins;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = name_cmp(u->pins[mid].partition, partition);
        if (c == 0) {
            return &u->pins[mid];
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

static void add_gap(struct upload *u, struct slice partition, int64_t from,
                    int64_t to)
{
    if (u->n_pin_gaps == u->cap_pin_gaps) {
        u->cap_pin_gaps = u->cap_pin_gaps < 8 ? 8 : u->cap_pin_gaps * 2;
        u->pin_gaps =
            xrealloc(u->pin_gaps, u->cap_pin_gaps * sizeof(*u->pin_gaps));
    }
    u->pin_gaps[u->n_pin_gaps++] =
        (struct engine_lost_range){partition, from, to};
}

/* The offsets pin names that object x (its records as read now) lacks: the
 * records a trim took between the first attempt and the redo. A window's
 * records of one partition are consecutive offsets, so what is gone is a
 * head and a tail, or everything when x holds no record. */
static void pin_gaps(struct upload *u, const struct docs_intent_part *pin,
                     const struct upload_object *x)
{
    if (x->records == 0) {
        add_gap(u, pin->partition, pin->first, pin->last);
        return;
    }
    if (x->first > pin->first) {
        add_gap(u, pin->partition, pin->first, x->first - 1);
    }
    if (x->last < pin->last) {
        add_gap(u, pin->partition, x->last + 1, pin->last);
    }
}

/* The body of x is complete: finish it, name it, hash it. */
static int object_close(struct upload *u, struct upload_object *x,
                        struct body *b, int rc, const struct layout_window *w,
                        struct err *err)
{
    rc = body_close(b, rc, &x->body, err);
    if (rc == 0 && x->has_partition) {
        const struct docs_intent_part *pin =
            u->pins != NULL ? find_pin(u, x->partition) : NULL;
        if (pin != NULL) { /* a redo: the key its first attempt wrote */
            pin_gaps(u, pin, x);
            x->first = pin->first;
            x->last = pin->last;
        }
        int64_t fl[2] = {x->first, x->last};
        rc = layout_part_key(&x->key, u->lq, w, x->partition, fl, err);
    } else if (rc == 0) {
        rc = layout_data_key(&x->key, u->lq, w, err);
    }
    if (rc == 0) {
        uint8_t h[32];
        uint64_t t0 = stages_begin(u->cfg->stages);
        sha256(x->body.data, x->body.len, h);
        hex_lower(h, sizeof(h), x->sha256);
        stages_end(u->cfg->stages, STAGES_SHA256, t0);
    }
    return rc;
}

/* Start the next object of *o (n of them, room for cap) with record r. */
static struct upload_object *object_open(struct upload *u,
                                         struct upload_object **o, size_t *n,
                                         size_t *cap,
                                         const struct sink_record *r)
{
    if (*n == *cap) {
        *cap = *cap < 4 ? 4 : *cap + *cap / 2;
        *o = xrealloc(*o, (*cap + 1) * sizeof(**o));
    }
    struct upload_object *x = &(*o)[(*n)++];
    memset(x, 0, sizeof(*x));
    buf_init(&x->body, BUF_UNLIMITED);
    buf_init(&x->key, UPLOAD_KEY_MAX);
    x->has_partition = u->cfg->per_partition; /* names it in the manifest */
    x->partition = r->partition;
    x->first = r->offset;
    return x;
}

static int object_cmp(const void *a, const void *b)
{
    const struct upload_object *x = a;
    const struct upload_object *y = b;

    return name_cmp(x->partition, y->partition);
}

/* A redo with pinned offsets (object_close keyed the objects with them):
 * an object of no record for each partition of the intent that has no
 * record left, and the objects back in partition order. */
static int apply_pins(struct upload *u, struct upload_object **o, size_t *n,
                      size_t *cap, const struct layout_window *w,
                      struct err *err)
{
    size_t had = *n;
    size_t j = 0;
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < u->n_pins; i++) {
        const struct docs_intent_part *p = &u->pins[i];
        while (j < had && name_cmp((*o)[j].partition, p->partition) < 0) {
            j++; /* both in partition order: one walk */
        }
        if (j < had && name_cmp((*o)[j].partition, p->partition) == 0) {
            continue;
        }
        struct sink_record r = {.partition = p->partition, .offset = p->first};
        struct body b;
        struct upload_object *x = object_open(u, o, n, cap, &r);
        x->last = p->last;
        rc = body_open(u, &b, 0, err);
        rc = object_close(u, x, &b, rc, w, err);
    }
    if (*n > had) {
        qsort(*o, *n, sizeof(**o), object_cmp);
    }
    return rc;
}

/* The next piece of the plan, counted as the merge stage. */
static size_t plan_read(struct upload *u, struct engine_plan_cursor *c,
                        struct sink_record *v)
{
    uint64_t t0 = stages_begin(u->cfg->stages);
    size_t got = engine_plan_read(u->e, c, v, UPLOAD_PLAN_PIECE);

    stages_end(u->cfg->stages, STAGES_MERGE, t0);
    return got;
}

/* The records come from the engine a piece at a time (engine_plan_read),
 * not as one array of the whole window. A merged body is reserved at its
 * JSONL size up front: the records' weight (64 + txn + partition + payload,
 * docs/design/window.md) less 64, plus the rest of a line; compressed, the body
 * is smaller. */
int upload_build(struct upload *u, const struct engine_plan *p,
                 struct upload_object **out, size_t *n_out, struct err *err)
{
    const char *comp = "";
    const char *writer = "";
    const char *ext = "";
    struct layout_window w = {
        (enum layout_align)u->cfg->align, p->k, p->t_start, p->t_end, 0, NULL};
    struct engine_plan_cursor c = {0, 0, 0};
    struct sink_record *v = xmalloc(UPLOAD_PLAN_PIECE * sizeof(*v));
    struct upload_object *o = xcalloc(1, sizeof(*o));
    struct upload_object *x = NULL;
    struct body b = {NULL, NULL};
    size_t n = 0;
    size_t cap = 0;
    size_t got;
    size_t expect = u->cfg->per_partition
                        ? 0
                        : (size_t)p->bytes_estimate +
                              p->n_records * (UPLOAD_LINE_EXTRA - 64);
    struct stages_frame f;
    int rc = upload_codec_strings(u->cfg, &comp, &writer, &ext, err);

    stages_frame_begin(u->cfg->stages, &f);
    u->compress_ns = 0;
    u->n_pin_gaps = 0;
    w.ext = ext;
    w.bucket_ts =
        layout_bucket_ts(p->t_start, p->n_records > 0, p->min_ts, p->t_end);
    while (rc == 0 && (got = plan_read(u, &c, v)) > 0) {
        for (size_t i = 0; rc == 0 && i < got; i++) {
            if (x != NULL && u->cfg->per_partition &&
                !same_slice(v[i].partition, x->partition)) {
                rc = object_close(u, x, &b, rc, &w, err);
                x = NULL;
            }
            if (rc == 0 && x == NULL) {
                x = object_open(u, &o, &n, &cap, &v[i]);
                rc = body_open(u, &b, expect, err);
            }
            rc = rc != 0 ? rc : body_add(&b, &v[i], err);
            if (rc != 0) {
                break;
            }
            x->records++;
            x->last = v[i].offset;
        }
    }
    if (x != NULL) {
        rc = object_close(u, x, &b, rc, &w, err);
    }
    if (rc == 0 && u->pins != NULL && u->cfg->per_partition) {
        rc = apply_pins(u, &o, &n, &cap, &w, err);
    }
    if (rc == 0 && n == 0 && u->is_redo_build && !u->cfg->per_partition) {
        struct sink_record none = {0};

        x = object_open(u, &o, &n, &cap, &none);
        rc = body_open(u, &b, 0, err);
        rc = object_close(u, x, &b, rc, &w, err);
    }
    free(v);
    *out = o;
    *n_out = n;
    stages_add(u->cfg->stages, STAGES_COMPRESS, u->compress_ns);
    stages_frame_end(u->cfg->stages, &f, STAGES_FORMAT);
    return rc;
}

void upload_free_objects(struct upload *u, struct upload_object *o, size_t n)
{
    for (size_t i = 0; o != NULL && i < n; i++) {
        if (o[i].body.cap > u->spare_body.cap) {
            struct buf b = u->spare_body;
            u->spare_body = o[i].body;
            u->spare_body.max = BUF_UNLIMITED;
            buf_reset(&u->spare_body);
            o[i].body = b;
        }
        buf_free(&o[i].body);
        buf_free(&o[i].key);
    }
    free(o);
}

void upload_drop_prebuilt(struct upload *u)
{
    upload_free_objects(u, u->pre.o, u->pre.n);
    u->pre.o = NULL;
    u->pre.n = 0;
}

bool upload_take_prebuilt(struct upload *u, int64_t k, struct upload_object **o,
                          size_t *n)
{
    if (u->pre.o == NULL || u->pre.k != k) {
        upload_drop_prebuilt(u);
        return false;
    }
    *o = u->pre.o; /* built while the window before went up */
    *n = u->pre.n;
    u->pre.o = NULL;
    u->pre.n = 0;
    return true;
}

bool upload_prebuild(struct upload *u, const struct engine_plan *p)
{
    struct err err;

    if (u->pre.is_done && u->pre.k == p->k) {
        return false;
    }
    upload_drop_prebuilt(u);
    u->pre.k = p->k;
    u->pre.is_done = true;
    if (upload_build(u, p, &u->pre.o, &u->pre.n, &err) != 0) {
        upload_drop_prebuilt(u);
        return false;
    }
    return true;
}

void upload_abort_stranded(struct s3_client *s3, const char *key)
{
    struct err err = {0};
    int n = 0;

    if (s3_client_abort_uploads(s3, key, &n, &err) != 0) {
        log_warn_kv("queen-s3",
                    "could not list the multipart uploads a crash may have "
                    "left",
                    {"key", key}, {"error", err.msg});
    } else if (n > 0) {
        log_info_kv("queen-s3",
                    "aborted the multipart uploads a crashed attempt left",
                    {"key", key}, {"uploads", LOG_I64(n)});
    }
}

/* ---- the uploader thread (overlap_upload) -------------------------------- */

/* One pass: the objects not stored yet in order, then the manifest. The
 * thread touches only u's objects and the S3 client (see upload.h). */
static void *upload_main(void *arg)
{
    struct upload *u = arg;
    struct s3_put_result r;
    struct err err = {0};
    const char *key = "";
    int rc = 0;
    struct stages_frame f;

    stages_frame_begin(u->cfg->stages, &f);
    /* this thread's lines carry the tenant as the sink thread's do */
    log_context_set("tenant", u->cfg->log_tenant);
    memset(&r, 0, sizeof(r));
    while (rc == 0 && u->landed < u->n) {
        struct upload_object *x = &u->o[u->landed];
        struct s3_put p = {x->key.data, x->body.data,         x->body.len,
                           u->ctype,    upload_between_parts, &u->crash,
                           x->sha256,   u->may_send,          u->gate_arg};
        key = x->key.data;
        memset(&r, 0, sizeof(r));
        rc = s3_client_put(u->s3, &p, &r, &err);
        if (rc == 0 && u->is_redo) {
            upload_abort_stranded(u->s3, key);
        }
        if (rc == 0 && ++u->landed == 1 &&
            upload_crash_fires(u->crash, DRIVER_CRASH_MID_UPLOAD)) {
            u->hit_mid_upload = true; /* return mode: stop the pass here */
            break;
        }
    }
    if (rc == 0 && !u->hit_mid_upload && !u->is_manifest_landed) {
        struct s3_put p = {u->manifest.key.data,
                           u->manifest.body.data,
                           u->manifest.body.len,
                           "application/json",
                           upload_between_parts,
                           &u->crash,
                           NULL,
                           u->may_send,
                           u->gate_arg};
        key = u->manifest.key.data;
        memset(&r, 0, sizeof(r));
        rc = s3_client_put(u->s3, &p, &r, &err);
        u->is_manifest_landed = rc == 0;
    }
    stages_frame_end(u->cfg->stages, &f, STAGES_UPLOAD);
    pthread_mutex_lock(&u->mu);
    u->rc = rc;
    if (rc != 0) {
        u->is_retriable = upload_s3_retriable(&r.st, rc);
        u->retry_after_ms = r.st.retry_after_ms;
        upload_put_why(u->why, sizeof(u->why), key, err.msg);
    }
    u->is_done = true;
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

void upload_put_why(char *out, size_t cap, const char *key, const char *msg)
{
    enum { SHOWN = 96, HEAD = 56, TAIL = SHOWN - HEAD - 3 };
    size_t n = strlen(key);

    if (n <= SHOWN) {
        snprintf(out, cap, "PUT %s: %s", key, msg);
    } else {
        snprintf(out, cap, "PUT %.*s...%s: %s", (int)HEAD, key, key + n - TAIL,
                 msg);
    }
}

void upload_launch(struct upload *u)
{
    u->is_done = false;
    u->rc = 0;
    u->is_retriable = false;
    u->hit_mid_upload = false;
    u->retry_after_ms = -1;
    u->why[0] = '\0';
    u->state = UPLOAD_PUTTING;
    u->has_th = pthread_create(&u->th, NULL, upload_main, u) == 0;
    if (!u->has_th) {
        upload_main(u); /* no thread to be had: put inline */
    }
}

bool upload_join(struct upload *u, bool wait)
{
    return upload_join_for(u, wait ? -1 : 0);
}

bool upload_join_for(struct upload *u, int64_t max_ms)
{
    struct timespec until;
    bool done;

    clock_gettime(CLOCK_REALTIME, &until); /* the condvar's clock */
    until.tv_sec += (time_t)(max_ms / 1000);
    until.tv_nsec += (long)(max_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&u->mu);
    while (!u->is_done && max_ms != 0) {
        if (max_ms < 0) {
            pthread_cond_wait(&u->cv, &u->mu);
        } else if (pthread_cond_timedwait(&u->cv, &u->mu, &until) ==
                   ETIMEDOUT) {
            break;
        }
    }
    done = u->is_done;
    pthread_mutex_unlock(&u->mu);
    if (done && u->has_th) {
        pthread_join(u->th, NULL);
        u->has_th = false;
    }
    return done;
}

void upload_drop_warm(struct upload *u)
{
    buf_free(&u->spare_body);
    buf_init(&u->spare_body, BUF_UNLIMITED);
    jsonl_cctx_free(u->zc);
    u->zc = NULL;
    /* What was freed (these, the plan array, record arrays shrunk at the
     * commit) may sit in a malloc arena below the mmap threshold, which
     * glibc raises to the largest block freed: give its pages back. */
    (void)malloc_trim(0);
}

void upload_clear(struct upload *u)
{
    if (u->state == UPLOAD_PUTTING) {
        upload_join(u, true);
    }
    upload_free_objects(u, u->o, u->n);
    u->o = NULL;
    u->n = 0;
    u->has_commit = false;
    u->state = UPLOAD_NONE;
}

void upload_begin(struct upload *u, struct upload_object *o, size_t n,
                  const char *ctype, int64_t k, int64_t t_start)
{
    u->o = o;
    u->n = n;
    u->landed = 0;
    u->is_manifest_landed = false;
    u->ctype = ctype;
    u->k = k;
    u->t_start = t_start;
    u->has_commit = false;
    u->retry_at = 0;
    upload_launch(u);
}
