/* A window's objects: built from the engine's plan, built ahead for the
 * next window while one is going up (the prebuild), and put on the
 * uploader thread (overlap_upload). The queue driver (driver.c) decides
 * when; this is the mechanism, and the only place in the sink where a queue
 * has a second thread.
 *
 * What crosses threads. The driver's thread (the one calling driver_tick)
 * owns struct upload and everything in it, with one exception: from
 * upload_launch() until upload_join() returns true, the uploader thread
 * runs a pass over the window's objects and
 *   - reads o[0..n), manifest, ctype, crash and is_redo, which the driver
 *     does not
 *     touch meanwhile (it reads the next window into the engine, and may
 *     build the next window's objects into pre: other memory);
 *   - writes landed and is_manifest_landed (the driver reads them only
 *     after the join);
 *   - writes its outcome (rc, is_retriable, retry_after_ms, why,
 *     hit_mid_upload) and then is_done, all under mu, and signals cv;
 *   - calls the S3 client, which is thread-safe (s3/client.h) and which
 *     the driver's thread may call at the same time (a checkpoint).
 * upload_join() takes mu to read is_done, then joins the thread, so after
 * it returned true every field is the driver's again. Nothing else is
 * shared: the uploader never touches the engine, the KV seam or the
 * driver's counters, and of the lease it only asks the age before every
 * PUT (may_send: lease_check_age(), lock-free, lease.h (4)); pre, spare_body,
 * zc, state, k, retry_at and the commit held for the window are the driver's
 * thread's alone.
 *
 * Ownership: the upload owns the window's objects from upload_begin() to
 * upload_clear(), the prebuilt objects, the warm body buffer and the zstd
 * context. It borrows cfg, lq, the engine and the S3 client from the
 * driver, which outlives it (cfg and lq are the driver's own copies: a redo
 * swaps in its intent's settings there until it commits). */
#ifndef QUEEN_SINK_UPLOAD_H
#define QUEEN_SINK_UPLOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"
#include "sink/docs.h"
#include "sink/driver.h"
#include "sink/engine.h"
#include "sink/layout.h"

struct s3_client;
struct s3_status;
struct jsonl_cctx;

/* QUEEN_S3_CRASH_AT as the point and its mode (abort, or return). */
struct upload_crash {
    enum driver_crash at;
    bool returns;
};

/* After a redo's object landed at key: abort the multipart uploads a
 * crashed attempt left under that key (best effort, logged). */
void upload_abort_stranded(struct s3_client *s3, const char *key);

/* Whether an S3 failure is worth another try. */
bool upload_s3_retriable(const struct s3_status *st, int rc);

/* Whether point `at` fires: the process aborts, or (return mode) true. */
bool upload_crash_fires(struct upload_crash c, enum driver_crash at);
/* The multipart hook (struct s3_put); arg is a const struct upload_crash:
 * aborts at mid_upload unless in return mode. */
void upload_between_parts(void *arg, int part_done);

/* One object of a window. */
struct upload_object {
    struct buf body;
    struct buf key;
    char sha256[65]; /* of body, lowercase hex: the PUT and the manifest */
    uint64_t records;
    bool has_partition;
    struct slice partition;
    int64_t first;
    int64_t last;
};

/* An encoded document and its key. */
struct upload_doc {
    struct buf body;
    struct buf key;
};

/* The window whose objects go up on the uploader thread while the engine
 * reads the next one (overlap_upload):
 *
 *   NONE --upload_begin(): built, thread started--> PUTTING
 *   PUTTING --the driver's poll: landed-----------> COMMIT
 *   PUTTING --the driver's poll: retriable failure-> RETRY
 *   RETRY --backoff over, upload_launch() again---> PUTTING
 *   COMMIT --commit pointer written, upload_clear()-> NONE
 *
 * The engine was told the window committed when it asked for the commit,
 * so it reads the next window meanwhile; the driver itself holds every
 * write that must follow the commit (the next intent, a checkpoint) until
 * it wrote the pointer, and its status reports the pointer as written, not
 * the engine's belief. */
enum upload_state { UPLOAD_NONE, UPLOAD_PUTTING, UPLOAD_RETRY, UPLOAD_COMMIT };

/* The next window's objects, built while the window before it is going up
 * (upload_prebuild). */
struct upload_prebuilt {
    struct upload_object *o; /* NULL: none */
    size_t n;
    int64_t k;    /* the window they are of */
    bool is_done; /* a build of window k was tried (it may have failed) */
};

struct upload {
    /* Borrowed from the driver (see the top). */
    const struct driver_config *cfg;
    const struct layout_queue *lq;
    struct engine *e;
    struct s3_client *s3;

    /* Kept warm across windows; the driver's thread only. */
    struct buf spare_body; /* the last window's body buffer, for the next */
    struct jsonl_cctx *zc; /* zstd context */
    uint64_t compress_ns;  /* the build's compression CPU (stages.h) */
    struct upload_prebuilt pre;
    /* A redo's per-partition offsets (its intent's parts, sorted by name
     * bytes), set by the driver for the redo's build: an object of a
     * partition named here is keyed with them, and a partition named here
     * with no record left (a trim since) gets an object of no record under
     * its key, so the redo writes every key the first attempt did. NULL:
     * keys come from the records. */
    const struct docs_intent_part *pins;
    size_t n_pins;
    /* The build is a redo's whose intent counted records (set by the
     * driver with the intent's settings): in the merged layout, a window
     * with no record left still gets its object, of no record, under its
     * key, so the first attempt's object (a crash after its PUT, then a
     * trim of every record) is replaced rather than left where no manifest
     * names it. */
    bool is_redo_build;
    /* What the last build found missing of the offsets pins name (records
     * a trim took since the first attempt), in partition order; the
     * partitions point into pins. */
    struct engine_lost_range *pin_gaps;
    size_t n_pin_gaps;
    size_t cap_pin_gaps;

    /* The window going up. */
    enum upload_state state;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool is_done; /* the thread ended its pass (under mu) */
    bool has_th;  /* th is to be joined */
    int rc;       /* the pass: 0 every object and the manifest landed */
    bool is_retriable;
    bool hit_mid_upload; /* return mode: stopped at the crash point */
    int64_t retry_after_ms;
    int64_t retry_at;
    char why[512];
    struct upload_object *o;
    size_t n;
    size_t landed; /* objects stored, in order */
    bool is_manifest_landed;
    struct upload_doc manifest;
    const char *ctype;
    struct upload_crash crash; /* a copy for the thread: cfg is not */
    /* Asked before every request of every PUT of the pass (struct
     * s3_put): the driver sets the lease's age check. NULL = none. */
    int (*may_send)(void *arg, struct err *err);
    void *gate_arg;
    bool is_redo; /* the window redoes an intent: abort stranded uploads */
    int64_t k;
    int64_t t_start; /* the window's: nothing at or after it is committed */
    /* The window's first stamp (its tStart when it holds no record): every
     * record below it is committed, so completeThrough while it goes up
     * (the driver sets it after upload_begin). */
    int64_t ct_floor;
    bool has_commit; /* the engine asked for the commit: commit, wall */
    struct engine_commit commit;
    int64_t commit_wall_ms;
};

/* Set u up over the driver's cfg, lq, engine and S3 client (borrowed). */
void upload_init(struct upload *u, const struct driver_config *cfg,
                 const struct layout_queue *lq, struct engine *e,
                 struct s3_client *s3);
/* Join a pass still running, free everything u owns. */
void upload_free(struct upload *u);

/* The codec names, the writer string and the object extension of c's
 * format and compression. Returns 0 or ERR_INVALID. */
int upload_codec_strings(const struct driver_config *c, const char **comp,
                         const char **writer, const char **ext,
                         struct err *err);
/* The codec library and its version for c's format and compression, which
 * the intent records ("libzstd/1.5.4", "zlib/1.2.13", "snappy/1.1.9"; ""
 * for uncompressed JSONL or a compression this sink does not know). */
const char *upload_codec_library(const struct driver_config *c);

/* Build every object of plan p (4.2) with *u->cfg: one merged object, or
 * one per run of equal partition names. *out is owned (free with
 * upload_free_objects, also after a failure). Returns 0 or ERR_*. */
int upload_build(struct upload *u, const struct engine_plan *p,
                 struct upload_object **out, size_t *n_out, struct err *err);
/* Free o[0..n); the largest body stays as the next window's spare. */
void upload_free_objects(struct upload *u, struct upload_object *o, size_t n);

/* Build plan p's objects into pre (once per window: a build of p->k
 * already tried is not repeated, and a failed one is left for the upload
 * to repeat and report). True when built now. */
bool upload_prebuild(struct upload *u, const struct engine_plan *p);
/* Move the objects prebuilt for window k into *o, *n (owned) and return
 * true; false (and the prebuilt ones, of another window, freed) when there
 * are none. */
bool upload_take_prebuilt(struct upload *u, int64_t k, struct upload_object **o,
                          size_t *n);
void upload_drop_prebuilt(struct upload *u);

/* The window k's (from t_start) objects o[0..n) (taken) and its encoded
 * manifest (in u->manifest already) start going up: PUTTING, on a new
 * thread (inline when no thread can be had). The driver sets crash and
 * is_redo for the pass before. */
void upload_begin(struct upload *u, struct upload_object *o, size_t n,
                  const char *ctype, int64_t k, int64_t t_start);
/* "PUT <key>: <msg>" into out (cap bytes), a key of more than 96 bytes cut
 * in its middle ("...") so that a long key (a long partition name) never
 * hides the status and S3 code that follow it. Keys are percent-encoded
 * ASCII, so no cut splits a character. */
void upload_put_why(char *out, size_t cap, const char *key, const char *msg);
/* Start a pass over what has not landed yet (after RETRY). */
void upload_launch(struct upload *u);
/* Wait for the pass (when wait, or when it is over) and join. true when
 * the pass is over: its outcome fields are then the caller's to read. */
bool upload_join(struct upload *u, bool wait);
/* upload_join waiting at most max_ms (a pass of a bucket that does not
 * answer lasts the client's every attempt, tens of seconds: the driver
 * waits in slices, so its status is published between them); max_ms < 0
 * waits for the end of the pass, 0 not at all. */
bool upload_join_for(struct upload *u, int64_t max_ms);
/* Drop the window going up (stopped, or committed): join, free, NONE. */
void upload_clear(struct upload *u);
/* Free what is kept warm for the next window (the spare body, the zstd
 * context) and give malloc's free pages back: a window committed under
 * memory pressure. */
void upload_drop_warm(struct upload *u);

#endif
