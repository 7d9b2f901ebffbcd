/* The window engine: which records of a queue form window k, and when it may
 * close. Pure: no clock, no I/O, no threads; broker answers and the decision
 * to force a close are arguments. The driver (the I/O shell) asks for actions
 * with engine_next_actions(), executes them, and feeds every answer back.
 *
 * Invariants (docs/design/window.md and docs/design/README.md §2):
 *   (1) Window k holds exactly the records with tStart <= ts < tEnd, k starts
 *       at committed_k + 1, and tStart(k) == tEnd(k-1): windows tile.
 *   (2) tEnd <= complete_pass_safe - guard, where complete_pass_safe is the
 *       least safeTime of the pages of the last complete discovery pass, so no
 *       record can still arrive below tEnd.
 *   (3) tEnd <= every tracked partition's frontier, so no unread record of
 *       any partition falls below tEnd.
 *   (4) Records below t_filter (the end of the last committed window) are
 *       dropped on arrival: nothing ships twice.
 *   (5) Records that went away before they were read (retention, offset
 *       jumps, dead incarnations, a seek answer a trim passed) become lost
 *       ranges in the next window that closes; never silence. A range is
 *       counted and handed to engine_found_lost() when it is found, and a
 *       window of lost ranges alone closes by the rules a window of records
 *       does (age, alignment, force, drain), so a loss no record follows
 *       still reaches a manifest within one max window age.
 *   (6) A window with neither records nor lost ranges is never emitted
 *       (a redo rebuilds its intent's bounds, whatever they now hold); empty
 *       aligned stretches are stepped over.
 *
 * Loss, precisely (engine.h (5), issue 13). A record is lost only when its
 * stamp is at or above T = t_filter, the end of the last committed window
 * (or of the last stretch stepped over): every record below T is in a
 * committed window or in a committed lost range, because no window closes
 * past a partition's unread offsets (3). Offsets skipped without being read
 * (a logStart above the read position, an offset jump, a dead incarnation's
 * unread tail, a seek answer below logStart) form one range [a, b] per skip,
 * and the engine knows stamps around it only:
 *   - a floor L <= every stamp from a on: the last record read (stamps never
 *     fall along a partition's offsets), the seek's target for its answer,
 *     the safeTime of the page that saw the partition caught up (what it
 *     gains later is stamped above it), or T itself for a position from a
 *     checkpoint written at the commit pointer (the positions of any moment
 *     of FILLING are exact: the first unread or uncommitted offset);
 *   - a ceiling H >= every stamp up to b: the partition's lastWriteAt when it
 *     was reported with a lastOffset >= b, and the first record read after b.
 * L >= T: all of [a, b] is lost, at once. H < T: none of it (all committed
 * or below the horizon), silently correct. Otherwise the range waits for the
 * first record read after it (its stamp is H: lost if >= T); with nothing
 * left to read it is lost (never silent). Each plan carries the positions
 * after it of the partitions it touches (its manifest's `positions`), so
 * the driver restores positions exact at the commit pointer from the last
 * checkpoint and the manifests after it (engine_checkpoint.is_rebuilt).
 * Only when one of those manifests is gone can a restart from an older
 * checkpoint leave a range that holds committed records below T and
 * records trimmed at or above T with no proof either way; it is then
 * reported whole.
 *
 * A lost range not yet in a plan holds the positions (engine_positions())
 * back to its start, and finding one asks for a checkpoint at the commit
 * pointer at once; so a restart or a takeover before its window commits
 * finds the same range again with L = T (reported once, by that window),
 * and one after the commit starts past it, or is told the committed ranges
 * (engine_restore_lost()) when no checkpoint followed (never twice). A
 * drain checkpoints too, so a trim made while the queue was not running is
 * judged from exact positions.
 *
 * States (reported in status as filling/intent/upload/commit/failed):
 *
 *   FILLING --try_close--------------------------> INTENT  (WriteIntent)
 *   FILLING --try_close with a redo intent--------> UPLOAD  (Upload)
 *   FILLING --engine_on_manifest_found (redo)----> COMMIT  (Commit)
 *   INTENT  --engine_on_intent_written-----------> UPLOAD  (Upload)
 *   UPLOAD  --engine_on_uploaded-----------------> COMMIT  (Commit)
 *   COMMIT  --engine_on_committed----------------> FILLING (Checkpoint?)
 *   any     --UNKNOWN_TOPIC_OR_PARTITION---------> FAILED  (no more actions)
 *
 * Ownership: the engine owns every buffered record (copied on arrival). The
 * slices in actions and plans point into engine memory: an action's slices
 * are valid until the next engine_next_actions() (a Checkpoint's positions
 * are read with engine_positions_read(), before any answer); a Fetch call's
 * entries until its answer; a Seek's partition until its result; a plan until
 * engine_on_committed() or engine_free().
 *
 * Driver contract (docs/design/window.md §11): execute the actions of one call
 * (Discover, WriteIntent, Upload, Commit, Checkpoint, Idle, then Seeks and
 * Fetches concurrently), feed every answer back through the engine_on_*()
 * calls, and call engine_next_actions() again after each answer or sleep. Time
 * only enters through the safeTime of discovery pages: the engine never waits.
 *
 * Costs: each call walks the active partitions (unread, seeking or holding
 * records), not the cold ones; a commit walks all of them once (pruning),
 * and the plan and the checkpoint sort by name. Memory is the buffered
 * records plus about 300 bytes per tracked partition (max_partitions) and
 * ~30 plus its name per pruned one (engine_tracked_bytes()), all within
 * max_buffer_bytes: fetches ask for no more than what the records, the
 * partitions and the asks out leave of it (docs/design/window.md §6). A
 * checkpoint is read from sorted references a batch at a time, never
 * built as one array of positions.
 *
 * One deliberate reading of docs/design/window.md §9: the age of the first
 * `earliest` window is measured from its tStart (the align floor of its first
 * record), not from t_prev = MIN, so a fresh queue does not close a window at
 * once. */
#ifndef QUEEN_SINK_ENGINE_H
#define QUEEN_SINK_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "base/err.h"
#include "base/slab.h"
#include "sink/record.h"

#define ENGINE_MIN INT64_MIN /* minus infinity on the broker's clock */

enum engine_start { ENGINE_START_EARLIEST, ENGINE_START_LATEST };
enum engine_align { ENGINE_ALIGN_NONE, ENGINE_ALIGN_HOUR, ENGINE_ALIGN_DAY };

struct engine_config {
    const char *queue; /* copied */
    enum engine_start start;
    enum engine_align align;
    uint64_t target_bytes;           /* size close, in record weight (>= 1) */
    int64_t max_window_us;           /* age close (> 0) */
    int64_t guard_us;                /* safeTime guard (>= 0) */
    uint32_t checkpoint_every;       /* 0 = never */
    uint32_t fetch_entries_per_call; /* 1..1024 */
    uint32_t fetch_concurrency;      /* >= 1 */
    uint32_t max_bytes_per_entry;    /* 1 MiB */
    int64_t discovery_slack_us;      /* 2 s */
    uint32_t discovery_limit;        /* 1..1000 partitions per page */
    uint32_t full_sweep_every;       /* >= 1 passes */
    uint32_t prune_after_windows;    /* >= 1 */
    uint32_t discovery_interval_ms;
    uint64_t drain_min_bytes;  /* a drain closes from this many bytes */
    int64_t drain_min_lag_us;  /* or from this lag with anything buffered */
    uint32_t max_partitions;   /* cap on tracked partitions */
    uint64_t max_buffer_bytes; /* fetches ask within what is left of it */
    /* The node's count of spare slabs, shared by every queue's engine
     * (base/slab.h (B)), borrowed; NULL: this engine's bounds only. */
    struct slab_spares *spares;
    /* Copied into intents (docs/design/formats.md §5). */
    const char *format;
    const char *compression;
    const char *layout;
    const char *writer;
};

/* The product's values (docs/design/window.md §2); queue and strings left NULL.
 */
void engine_config_defaults(struct engine_config *c);

struct engine;

/* Returns an engine owning a copy of cfg, or NULL with ERR_INVALID when a
 * value is out of range. Free with engine_free(). */
struct engine *engine_new(const struct engine_config *cfg, struct err *err);
void engine_free(struct engine *e);

/* ---- Restore (docs/design/protocol.md §5 and docs/design/window.md §1) -- */

struct engine_committed {
    int64_t k;
    int64_t t_end;
};

struct engine_intent {
    int64_t k;
    int64_t t_start;
    int64_t t_end;
    const char *format;
    const char *compression;
    const char *layout;
    const char *writer;
};

/* A checkpoint position: where a partition's next window starts. */
struct engine_position {
    struct slice name;
    int64_t offset;
    struct slice id; /* partition UUID; len 0 = unknown */
};

struct engine_checkpoint {
    int64_t k; /* the commit the positions are exact at */
    const struct engine_position *positions; /* any order */
    size_t n;
    /* The positions are the checkpoint object of written_k (0: none)
     * plus the positions of the manifests after it up to k (engine.h
     * (5)); no checkpoint object of k exists. */
    bool is_rebuilt;
    int64_t written_k;
};

/* Once, before the first engine_next_actions(); any argument may be NULL.
 * The intent is a redo only when intent->k == committed_k + 1; the checkpoint
 * is used only when cp->k <= committed_k. Copies what it keeps. Returns 0, or
 * ERR_INVALID (called late, or bounds that do not make a window). */
int engine_restore(struct engine *e, const struct engine_committed *committed,
                   const struct engine_intent *intent,
                   const struct engine_checkpoint *cp, struct err *err);

/* Right after engine_restore(): under `latest` with nothing committed and no
 * redo, the first window starts at t_start, the start an earlier owner
 * found and recorded (the driver's start row), not at this engine's own
 * first safeTime. Ignored otherwise. */
void engine_restore_start(struct engine *e, int64_t t_start);
/* Under `latest` with nothing committed and no redo: the first window's
 * start once known, to record. False otherwise. */
bool engine_first_start(const struct engine *e, int64_t *t_start);

/* ---- Actions ------------------------------------------------------------- */

enum engine_action_kind {
    ENGINE_ACT_DISCOVER,
    ENGINE_ACT_FETCH,
    ENGINE_ACT_SEEK,
    ENGINE_ACT_WRITE_INTENT,
    ENGINE_ACT_UPLOAD,
    ENGINE_ACT_COMMIT,
    ENGINE_ACT_CHECKPOINT,
    ENGINE_ACT_IDLE,
};

/* One partitions/changed page for this queue. */
struct engine_discover {
    bool has_since;     /* false = since null (a full sweep) */
    int64_t since;      /* µs */
    struct slice after; /* cursor; len 0 = from the start */
    uint32_t limit;
};

struct engine_fetch_entry {
    struct slice queue;
    struct slice partition;
    int64_t offset;
    uint32_t max_bytes;
};

/* One fetch call (maxWaitMs 0, minBytes 1); answer with engine_on_fetch()
 * or engine_on_fetch_failed() quoting call_id. */
struct engine_fetch {
    uint64_t call_id;
    const struct engine_fetch_entry *entries;
    size_t n;
};

/* Locate the first offset with ts >= t (src/sink/seek.h); answer with
 * engine_on_seek_result() quoting seek_id. */
struct engine_seek {
    uint64_t seek_id;
    struct slice partition;
    int64_t t;
    int64_t last_offset;
    int64_t log_start;
};

struct engine_intent_action {
    int64_t k;
    int64_t t_start;
    int64_t t_end;
    struct slice format;
    struct slice compression;
    struct slice layout;
    struct slice writer;
    const struct engine_plan *plan; /* the window's, as its Upload carries */
};

struct engine_lost_range {
    struct slice partition;
    int64_t from; /* inclusive */
    int64_t to;   /* inclusive */
};

/* What a closing window holds: records sorted by (partition name bytes,
 * incarnation, offset), every one with t_start <= ts < t_end. */
struct engine_plan {
    int64_t k;
    int64_t t_start;
    int64_t t_end;
    /* NULL from the engine, which holds no record array (64 bytes a record
     * less at each close): read the records with engine_plan_read(). A
     * copy of the plan may point it at its records read into an array (the
     * tests' simulator does). */
    const struct sink_record *records;
    size_t n_records;
    const struct engine_lost_range *lost;
    size_t n_lost;
    /* Where each partition the window touches (records or lost ranges)
     * starts once it commits, sorted by name: its manifest carries them, so
     * the last checkpoint plus the manifests after it are the exact
     * positions at the commit pointer. */
    const struct engine_position *positions;
    size_t n_positions;
    size_t partitions; /* distinct partitions with >= 1 record */
    int64_t min_ts;
    int64_t max_ts;
    uint64_t bytes_estimate; /* sum of record weights */
};

struct engine_commit {
    int64_t k;
    int64_t t_end;
    struct slice manifest_key; /* len 0 unless committed from a manifest */
    uint64_t records;
    uint64_t bytes;
};

/* Its n positions are read with engine_positions_read() (a million
 * partitions are 40 MB as one array: never built), before any answer is
 * fed back. */
struct engine_checkpoint_action {
    int64_t k;
    int64_t t_end;
    size_t n;
};

struct engine_action {
    enum engine_action_kind kind;
    union {
        struct engine_discover discover;
        struct engine_fetch fetch;
        struct engine_seek seek;
        struct engine_intent_action intent;
        const struct engine_plan *upload;
        struct engine_commit commit;
        struct engine_checkpoint_action checkpoint;
        uint32_t idle_min_wait_ms;
    } u;
};

/* Actions of one call, in the driver's order of execution
 * (docs/design/window.md §11). */
struct engine_actions {
    const struct engine_action *v;
    size_t n;
};

/* Where engine_plan_read() goes on from: all zero at the plan's start. */
struct engine_plan_cursor {
    size_t part;
    size_t rec;
    size_t done;
};

/* Copy up to max records of the plan of the window closing (the one an
 * Intent or Upload names), in plan order, from c on into out, and move c
 * past them. Returns how many; 0 at the end. Valid while the plan is
 * (until engine_on_committed()). The slices point into engine memory, valid
 * as long. */
size_t engine_plan_read(const struct engine *e, struct engine_plan_cursor *c,
                        struct sink_record *out, size_t max);

/* What to do now. Fills out with engine-owned actions valid until the next
 * call; out->n == 0 means wait for an answer already asked for (or the
 * engine failed: see engine_state()). */
void engine_next_actions(struct engine *e, struct engine_actions *out);

/* ---- Answers ------------------------------------------------------------- */

enum engine_answer_error {
    ENGINE_ANSWER_OK,
    ENGINE_ANSWER_OFFSET_OUT_OF_RANGE,
    ENGINE_ANSWER_UNKNOWN, /* UNKNOWN_TOPIC_OR_PARTITION */
    ENGINE_ANSWER_OTHER,   /* BAD_CURSOR, INTERNAL, ... */
};

struct engine_partition_info {
    struct slice name;
    struct slice id;     /* len 0 = unknown */
    int64_t last_offset; /* -1 when empty */
    int64_t log_start;
    int64_t last_write_at; /* µs */
};

struct engine_discovery_page {
    enum engine_answer_error error;
    struct slice error_text;
    int64_t safe_time; /* µs */
    const struct engine_partition_info *partitions;
    size_t n;
    bool has_next;
    struct slice next; /* cursor when has_next */
};

/* Borrows p. Returns 0; ERR_TOO_BIG past max_partitions or for a cursor over
 * 1024 bytes (the pass restarts); ERR_INVALID for a page nobody asked for.
 * UNKNOWN_TOPIC_OR_PARTITION fails the engine and returns 0; any other page
 * error restarts the pass from its first page. */
int engine_on_discovery_page(struct engine *e,
                             const struct engine_discovery_page *p,
                             struct err *err);
/* The call failed: the pass restarts from its first page. */
void engine_on_discovery_failed(struct engine *e);

struct engine_fetched_record {
    int64_t offset;
    struct slice txn;
    int64_t ts;
    struct slice payload; /* len 0 = empty (null) */
};

struct engine_fetch_result {
    struct slice partition;
    enum engine_answer_error error;
    struct slice error_text;
    int64_t high_watermark;
    int64_t log_start;
    const struct engine_fetched_record *records; /* ascending offsets */
    size_t n;
};

/* The answer of call call_id, entries in request order. Borrows r; copies
 * the records it keeps. Returns 0, or ERR_INVALID for an unknown call or
 * entries that do not match the call (the call is then released). */
int engine_on_fetch(struct engine *e, uint64_t call_id,
                    const struct engine_fetch_result *r, size_t n,
                    struct err *err);
/* Part of the answer of call call_id: entries [from, from + n) in request
 * order, merged at once (borrows r, copies the records it keeps) so the
 * caller can free each part before reading the next. The call stays out
 * until engine_on_fetch_done() or engine_on_fetch_failed(). Returns 0, or
 * ERR_INVALID for an unknown call or entries that do not match it (the
 * call is then released). */
int engine_on_fetch_part(struct engine *e, uint64_t call_id, size_t from,
                         const struct engine_fetch_result *r, size_t n,
                         struct err *err);
/* Every entry of call call_id was merged: release it. */
void engine_on_fetch_done(struct engine *e, uint64_t call_id);
/* The call failed as a whole: its partitions not merged yet are fetched
 * again (from where a merged part left them). */
void engine_on_fetch_failed(struct engine *e, uint64_t call_id);

/* A seek ended: is_found with the offset, or failed (position = logStart). */
void engine_on_seek_result(struct engine *e, uint64_t seek_id, bool is_found,
                           int64_t offset);

void engine_on_intent_written(struct engine *e);
/* The objects and the manifest landed: records and bytes of the window. */
void engine_on_uploaded(struct engine *e, uint64_t records, uint64_t bytes);
void engine_on_committed(struct engine *e);

/* The redo's manifest exists and matches the intent (docs/design/protocol.md
 * §5): commit it without a read. Ignored (returns false) unless a redo of
 * window k is pending. */
bool engine_on_manifest_found(struct engine *e, int64_t k,
                              struct slice manifest_key, uint64_t records,
                              uint64_t bytes);

/* Lost ranges a committed manifest names (the commit pointer's window when
 * no checkpoint follows it, or a redo committed from its manifest): found
 * again from older positions after a restart, they are not reported twice
 * (for the partition's first incarnation of this run). Copies. */
void engine_restore_lost(struct engine *e, const struct engine_lost_range *v,
                         size_t n);

/* Lost ranges found since the last call (engine.h (5)), in the order found,
 * each handed out once: the driver logs and counts them when found. Valid
 * until the next call of this function or engine_free(). They also travel
 * in the next window's plan. */
void engine_found_lost(struct engine *e, const struct engine_lost_range **v,
                       size_t *n);

/* Close at the largest legal tEnd at the next chance (memory budget). */
void engine_force_close(struct engine *e);
/* Stop reading; returns true when the buffered window is worth finishing
 * (>= drain_min_bytes, or lag >= drain_min_lag_us with anything buffered,
 * or lost ranges not in a window yet), in which case a close is forced. */
bool engine_begin_drain(struct engine *e);

/* ---- Status -------------------------------------------------------------- */

enum engine_state {
    ENGINE_FILLING,
    ENGINE_INTENT,
    ENGINE_UPLOAD,
    ENGINE_COMMIT,
    ENGINE_FAILED,
};

struct engine_stats {
    uint64_t windows_closed;
    uint64_t windows_committed;
    uint64_t records_dropped;
    uint64_t records_lost;
    uint64_t fetch_errors;
    uint64_t boundaries_skipped;
    uint64_t seeks_issued;
    uint64_t discoveries;
    uint64_t full_sweeps;
    uint64_t partitions_pruned;
    uint64_t incarnations;
    uint64_t records_compacted; /* moved out of slabs a commit left holey */
};

enum engine_state engine_state(const struct engine *e);
const char *engine_state_name(enum engine_state s); /* "filling", ... */
/* Why the engine failed: `queue "name" does not exist` (the broker's
 * UNKNOWN_TOPIC_OR_PARTITION entry error, in plain words). */
const char *engine_failure(const struct engine *e);
/* The window in INTENT/UPLOAD/COMMIT, else 0. */
int64_t engine_closing_k(const struct engine *e);
int64_t engine_committed_k(const struct engine *e);
int64_t engine_last_checkpoint_k(const struct engine *e);
/* false while t_prev is unknown (latest before the first discovery). */
bool engine_t_prev(const struct engine *e, int64_t *t_prev);
int64_t engine_complete_through(const struct engine *e); /* MIN: unknown */
int64_t engine_safe_time(const struct engine *e);        /* MIN: unknown */
/* max(0, safeTime - complete_through); false while either is unknown. */
bool engine_lag(const struct engine *e, int64_t *lag_us);
uint64_t engine_buffered_bytes(const struct engine *e);
/* Empty record slabs kept for reuse (memory beyond the weight): none from
 * engine_force_close() until a window commits without a force. */
size_t engine_spare_slabs(const struct engine *e);
/* The memory budget closed the last window (or forces this one): keep
 * nothing warm between windows (no spare slabs; the driver
 * drops its own buffers too) until a window commits without a force. */
bool engine_is_tight(const struct engine *e);
/* Bytes of every record slab held (filling, full, spare): the buffered
 * records' bytes plus holes and spares. */
uint64_t engine_slab_bytes(const struct engine *e);
size_t engine_tracked_partitions(const struct engine *e);
/* Pruned partitions whose position is kept (sink/dormant.h: ~30 bytes
 * and the name each; checkpoints carry them). */
size_t engine_dormant_partitions(const struct engine *e);
/* Bytes the partitions cost besides their records: the tracked ones'
 * structs, names and ids, the lookup arrays, the dormant table and the
 * checkpoint's positions until the first full sweep. Counted against
 * max_buffer_bytes with the buffered weight (fetches are scheduled within
 * what is left) and reported to the node's budget by the driver. */
uint64_t engine_tracked_bytes(const struct engine *e);
/* Partitions counted by the last full sweep (queen_s3_discovery_partitions). */
uint64_t engine_discovery_partitions(const struct engine *e);
const struct engine_stats *engine_stats(const struct engine *e);
/* The read position of one partition (tests, status); false if untracked. */
bool engine_partition_position(const struct engine *e, struct slice name,
                               int64_t *offset, struct slice *id);

/* Where engine_positions_read() goes on from: all zero at the first. */
struct engine_positions_cursor {
    size_t part;
    size_t dormant;
};

/* Take the checkpoint positions now (docs/design/window.md §10), as a
 * Checkpoint action does; returns how many. They are read with
 * engine_positions_read() until the next engine_next_actions(),
 * engine_on_discovery_page() or engine_on_committed(). Holds 4 bytes a
 * dormant partition and a position (40 bytes) a tracked one meanwhile:
 * the tracked ones' are taken now, the dormant ones' never move. */
size_t engine_positions_snapshot(struct engine *e);
/* Copy up to max of the positions taken, in checkpoint order (name bytes,
 * then offset, then id), from c on into out, and move c past them.
 * Returns how many; 0 at the end. The slices point into engine memory,
 * valid until the next call of this function or into the engine. */
size_t engine_positions_read(struct engine *e,
                             struct engine_positions_cursor *c,
                             struct engine_position *out, size_t max);

#endif
