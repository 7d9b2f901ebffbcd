/* The window engine: which records of a queue form window k, and when it may
 * close. Pure: no clock, no I/O, no threads; broker answers are arguments.
 *
 * How it works. The engine keeps one `struct part` per tracked partition: the
 * read position, the bounds the broker last reported, and the records read
 * but not yet committed (each one allocation, so plans can point into them
 * while later answers grow the partition's array). Discovery passes (pages
 * of partitions/changed) tell it which partitions moved and give it the
 * node's safeTime; fetches read them; the close rules of docs/design/window.md
 * §9 cut a window [t_prev, T_k) when every partition has been read past T_k and
 * the last complete pass proves no record can still arrive below it.
 *
 * Why a record can never ship twice or go missing:
 *   - a window's end is capped by the complete pass's safeTime minus the
 *     guard (engine.h (2)) and by every partition's frontier (3), the stamp
 *     up to which that partition is known to be read;
 *   - after a commit, t_filter = tEnd and anything read again below it is
 *     dropped on arrival (4);
 *   - offsets that disappear before we read them become lost ranges that
 *     travel in the next closing window's manifest (5), judged by the
 *     stamps around them against t_filter (skip_to, settle_gap; the rule
 *     is engine.h's), and a window of lost ranges alone closes when no
 *     record follows them.
 *
 * Record bytes live in slabs of SLAB_SIZE bytes (base/slab.h), filled front
 * to back in arrival order; a slab goes back to a short free list when the
 * last record in it is committed. Records arrive in stamp order within a
 * partition and windows are cut by stamp, so a slab's records mostly leave
 * together. One copy into a warm slab costs far less than a malloc per record,
 * and fresh pages are what a fetch-heavy sink pays most for (first touches
 * fault). The free list keeps as many slabs as the last window took (at least
 * ENGINE_SPARE_MIN; at most a target window's worth up to half the read
 * cap, or ENGINE_SPARE_MAX when that is more; never more than half the read
 * cap, the floors included, so a small budget keeps few: memory the
 * budget's weight does not see): a busy queue refills from it, an idle one
 * lets go. Once
 * the memory budget closes a window (engine_force_close), the list is
 * emptied and stays empty until a window closes by the other rules: under
 * pressure the node's memory is the budget's weight, not spares; and a
 * commit under the budget moves the records it leaves behind out of slabs
 * it emptied in part (compact_slabs), so holes do not add to the weight
 * either. Slabs are mapped and unmapped directly, so a freed slab leaves
 * the process's RSS (malloc would keep it in an arena). After a commit, a
 * partition's record array shrinks when far larger than what is left. The
 * plan holds no record array: engine_plan_read() reads the window's records
 * out of the partitions a piece at a time.
 *
 * Partition lookup is a small open-addressing hash on the name
 * (base/hashtab.h), so merging an answer costs O(1) per partition named. The
 * per-call walks (frontier, fetch candidates, seeks, the close rules) go over
 * the active set only: partitions with unread data, a seek, or buffered
 * records. A commit walks every partition once to prune; only the plan and the
 * checkpoint sort (partitions, not records: a size close finds its stamp in
 * linear time, size_point). Memory held for a cold partition is its `struct
 * part` alone, so what is buffered does not grow with the number of
 * partitions (docs/design/window.md §6).
 *
 * A caught-up partition (read past the lastOffset a discovery page reported)
 * does not hold a close back: every record it gains later is stamped above
 * the safeTime of the page that reported that lastOffset, and the close is
 * capped by the complete pass's safeTime anyway.
 *
 * What it must never do: read a clock, block, or emit a window whose end is
 * above (2) or (3); an empty window is never emitted (6). */
#include "sink/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hashtab.h"
#include "base/isotime.h"
#include "base/slab.h"
#include "base/xalloc.h"
#include "sink/dormant.h"

#define ENGINE_MAX_CURSOR   1024
#define ENGINE_MAX_CLOSE    100000 /* try_close iterations per call */
#define ENGINE_RECORD_BASE  64     /* weight of a record beyond its bytes */
#define ENGINE_NULL_PAYLOAD 4      /* weight of a null payload ("null") */
#define ENGINE_SPARE_MIN    4      /* empty slabs kept for reuse, at least */
#define ENGINE_SPARE_MAX    32     /* at most, unless a window takes more */
#define ENGINE_SHRINK_MIN   32     /* arrays of up to this many are kept */
#define ENGINE_ALLOC_EXTRA  16     /* malloc's own bytes per allocation */

/* A buffered record: its txn bytes, then its payload bytes, in a slab.
 * 48 bytes: the weight of a record fits 32 bits (a record is bounded by the
 * broker's body limit). */
struct brec {
    int64_t offset;
    int64_t ts;
    uint32_t gen; /* incarnation of its partition */
    uint32_t txn_len;
    uint32_t payload_len;
    uint32_t weight;
    struct slab *slab;
    char *data;
};

struct part {
    char *name;
    size_t name_len;
    char *id; /* NULL = unknown */
    size_t id_len;
    uint32_t gen;
    int64_t position; /* next offset to read */
    int64_t last_offset;
    int64_t log_start;
    int64_t last_write_at;
    bool has_read; /* something of this incarnation was read */
    int64_t last_read_ts;
    /* Loss (engine.h (5)): a stamp at or below every record from position
     * on (MIN: unknown); the start of a skipped range not judged yet, which
     * ends at position - 1 (-1: none); the lastOffset last_write_at was
     * reported with (the stamps up to it are at most last_write_at); the
     * least `from` of this incarnation's lost ranges not in a plan yet. */
    int64_t floor_ts;
    int64_t gap_from;
    int64_t lw_last_offset;
    int64_t lost_floor;
    int64_t seen_safe;       /* safeTime of the page that last named it */
    uint64_t last_seen_pass; /* complete passes when discovery named it */
    bool is_seek_pending;    /* position is provisional until a seek */
    bool is_seeking;         /* a Seek action is out */
    bool is_fetching;        /* an entry of an outstanding call */
    int64_t last_seen_k;     /* committed_k when discovery last named it */
    size_t active_at;        /* index in engine.active, SIZE_MAX if idle */
    uint64_t serial;         /* creation order, for stable scheduling */
    struct brec *recs;       /* ascending (gen, offset) */
    size_t n_recs;
    size_t cap_recs;
    uint64_t buffered;
};

struct fetch_call {
    bool is_used;
    uint64_t id;
    size_t n;
    struct part **parts;
    uint32_t *gens;
    uint32_t *asks; /* max_bytes of each entry not merged yet, else 0 */
    struct engine_fetch_entry *entries;
};

struct seek_slot {
    bool is_used;
    uint64_t id;
    struct part *part;
    uint32_t gen;
    int64_t t; /* what it looks for: records from its answer on are >= t */
};

struct lost {
    char *partition;
    size_t len;
    int64_t from;
    int64_t to;
    uint32_t gen;
};

struct restored {
    char *name;
    size_t name_len;
    char *id;
    size_t id_len;
    int64_t offset;
    bool is_used;
};

struct engine {
    struct engine_config cfg; /* strings point at the owned copies below */
    char *queue;
    char *format;
    char *compression;
    char *layout;
    char *writer;

    char failure[256];
    int64_t committed_k;
    int64_t last_checkpoint_k;
    int64_t t_prev;
    int64_t t_filter;

    struct engine_intent redo; /* strings point at redo_strings */
    char *redo_strings[4];     /* format, compression, layout, writer */

    struct restored *restored; /* from a checkpoint, sorted by name */
    size_t n_restored;
    uint64_t restored_bytes;

    /* Pruned partitions (prune() and observe()): name, id -> position
     * (sink/dormant.h). */
    struct dormant dormant;
    /* Bytes of the tracked partitions' structs and strings (engine.h). */
    uint64_t parts_bytes;

    /* Discovery. */
    int64_t pass_since;
    char cursor[ENGINE_MAX_CURSOR];
    size_t cursor_len;
    int64_t pass_min_safe;
    uint64_t pass_count;
    int64_t complete_pass_safe;
    int64_t safe_time;
    uint64_t discovery_partitions;

    /* Partitions. */
    struct part **parts;
    size_t n_parts;
    size_t cap_parts;
    struct hashtab table; /* the parts by name (base/hashtab.h) */
    struct part **active; /* unread, seeking or holding records */
    size_t n_active;
    size_t cap_active;
    uint64_t next_serial;

    struct fetch_call *calls; /* fetch_concurrency slots */
    size_t n_calls_out;
    /* maxBytes of the entries out and not merged yet: what may still
     * arrive, counted against the budget with what is buffered. */
    uint64_t asked_bytes;
    uint64_t max_record_bytes; /* the largest record read, broker's weight */
    uint64_t next_call_id;
    struct seek_slot *seeks; /* fetch_concurrency slots */
    size_t n_seeks_out;

    struct lost *lost;
    size_t n_lost;
    size_t cap_lost;
    /* Lost ranges found since engine_found_lost() last handed them out,
     * and the batch it handed out (freed at its next call). */
    struct lost *found;
    size_t n_found;
    size_t cap_found;
    struct lost *found_out;
    size_t n_found_out;
    struct lost *known; /* named by a committed manifest (restore) */
    size_t n_known;
    size_t cap_known;
    struct engine_lost_range *found_view;
    int64_t cp_floor; /* floor_ts of a restored position (MIN: unknown) */
    int64_t committed_t_end; /* the commit pointer's tEnd (0: none) */
    int64_t page_safe;       /* safeTime of the discovery page being merged */

    /* Record bytes (base/slab.h). A round is a window: slabs.taken counts
     * since the last commit; slabs.is_tight: the budget closed the window,
     * keep no spares. */
    struct slab_pool slabs;

    /* The closing window. */
    struct engine_plan plan;
    struct part **plan_parts; /* the plan's partitions, by name */
    size_t plan_np;
    struct engine_lost_range *plan_lost;
    struct lost *plan_lost_owned;
    size_t plan_n_lost;
    struct engine_position *plan_pos; /* names point into the parts */
    size_t plan_n_pos;
    struct engine_commit commit;
    char *manifest_key;

    int64_t checkpoint_k;
    int64_t checkpoint_t_end;

    /* The positions a Checkpoint action (or engine_positions_snapshot())
     * took: the tracked partitions and the dormant entries, each sorted,
     * merged as they are read (engine_positions_read()). */
    bool has_snap;
    struct engine_position *snap_parts; /* at the snapshot's moment */
    size_t n_snap_parts;
    uint32_t *snap_dormant; /* dormant references (sink/dormant.h) */
    size_t n_snap_dormant;
    char *snap_ids; /* dormant UUIDs rendered for one read */
    size_t cap_snap_ids;

    struct engine_action *acts;
    size_t n_acts;
    size_t cap_acts;
    struct engine_action *tail; /* seeks and fetches of one call */
    size_t n_tail;
    size_t cap_tail;

    uint64_t total_buffered;
    int64_t complete_through;
    struct engine_stats stats;

    /* Flags, last to keep the struct tight. */
    enum engine_state state;
    bool has_started; /* restore is refused after this */
    bool is_t_prev_known;
    bool has_redo;
    bool is_pass_active;
    bool is_page_out;
    bool is_pass_full;
    bool has_complete_pass;
    bool has_discovered;
    bool has_discovered_this_window;
    bool is_idle_armed;
    bool is_action_out; /* the state's action was emitted */
    bool is_forced;
    bool is_plan_forced; /* the closing window was closed by force */
    bool is_draining;
    bool is_checkpoint_pending;
    /* A checkpoint is due at checkpoint_k, but its positions are not exact
     * yet: the window committed (or was found committed) before this run
     * discovered and read past its tEnd. fill_actions makes it pending
     * once every partition is read past checkpoint_t_end. */
    bool is_checkpoint_deferred;
    bool is_loss_checkpoint_due; /* a loss was found: keep its positions */
    /* The restore found a run before this one (a commit pointer, a redo or
     * a checkpoint): a partition it has no position for may have been read
     * by that run, so its offsets from 0 are judged (position_new()), as
     * those of a partition first named after the first full sweep are. */
    bool has_prior_run;
};

/* ---- Small helpers ------------------------------------------------------- */

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t sat_add(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b) {
        return INT64_MAX;
    }
    return a + b;
}

static int64_t sat_sub(int64_t a, int64_t b)
{
    if (b > 0 && a < INT64_MIN + b) {
        return INT64_MIN;
    }
    if (b < 0 && a > INT64_MAX + b) {
        return INT64_MAX;
    }
    return a - b;
}

static int64_t align_unit(const struct engine *e)
{
    switch (e->cfg.align) {
    case ENGINE_ALIGN_HOUR:
        return ISOTIME_US_H;
    case ENGINE_ALIGN_DAY:
        return ISOTIME_US_D;
    case ENGINE_ALIGN_NONE:
        break;
    }
    return 0;
}

static int name_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);

    if (c != 0) {
        return c;
    }
    return al < bl ? -1 : (al > bl ? 1 : 0);
}

static bool slice_eq(const char *a, size_t al, struct slice b)
{
    return al == b.len && (al == 0 || memcmp(a, b.ptr, al) == 0);
}

static char *dup_slice(struct slice s)
{
    return xstrndup(s.len == 0 ? "" : s.ptr, s.len);
}

static char *dup_str(const char *s)
{
    return xstrdup(s == NULL ? "" : s);
}

static struct slice str_slice(const char *s)
{
    struct slice v = {s, strlen(s)};
    return v;
}

static void grow(void **v, size_t *cap, size_t need, size_t size)
{
    size_t n = *cap == 0 ? 8 : *cap;

    if (need <= *cap) {
        return;
    }
    while (n < need) {
        n *= 2;
    }
    *v = xrealloc(*v, n * size);
    *cap = n;
}

/* A partition's record array grows by half: ten thousand partitions of a
 * dozen records each hold about a fifth more than they need, not a third
 * (the slack is memory the budget's weight does not see). */
static void grow_recs(struct part *p)
{
    size_t n = p->cap_recs < 8 ? 8 : p->cap_recs + p->cap_recs / 2;

    if (p->n_recs < p->cap_recs) {
        return;
    }
    p->recs = xrealloc(p->recs, n * sizeof(*p->recs));
    p->cap_recs = n;
}

static void fail_engine(struct engine *e)
{
    e->state = ENGINE_FAILED;
    snprintf(e->failure, sizeof(e->failure), "queue \"%s\" does not exist",
             e->queue);
}

/* ---- Config -------------------------------------------------------------- */

/* The product's defaults (docs/design/config.md §3 and docs/design/window.md
 * §2). */
void engine_config_defaults(struct engine_config *c)
{
    memset(c, 0, sizeof(*c));
    c->start = ENGINE_START_LATEST;
    c->align = ENGINE_ALIGN_HOUR;
    c->target_bytes = 128ULL << 20;
    c->max_window_us = 300LL * ISOTIME_US_S;
    c->guard_us = 5LL * ISOTIME_US_S;
    c->checkpoint_every = 20;
    c->fetch_entries_per_call = 1024;
    c->fetch_concurrency = 4;
    c->max_bytes_per_entry = 1048576;
    c->discovery_slack_us = 2 * ISOTIME_US_S;
    c->discovery_limit = 1000;
    c->full_sweep_every = 30;
    c->prune_after_windows = 60;
    c->discovery_interval_ms = 2000;
    c->drain_min_bytes = 1048576;
    c->drain_min_lag_us = 10 * ISOTIME_US_S;
    c->max_partitions = 4000000;
    c->max_buffer_bytes = 4ULL << 30;
}

static int check_config(const struct engine_config *c, struct err *err)
{
    if (c->queue == NULL || c->queue[0] == '\0') {
        return err_set(err, ERR_INVALID, "engine: the queue name is empty");
    }
    if (c->target_bytes < 1 || c->max_window_us <= 0 || c->guard_us < 0) {
        return err_set(err, ERR_INVALID,
                       "engine: target, max window or guard out of range");
    }
    if (c->fetch_entries_per_call < 1 || c->fetch_entries_per_call > 1024 ||
        c->fetch_concurrency < 1 || c->fetch_concurrency > 1024 ||
        c->max_bytes_per_entry < 1) {
        return err_set(err, ERR_INVALID,
                       "engine: fetch entries, concurrency or max bytes out of "
                       "range");
    }
    if (c->discovery_limit < 1 || c->discovery_limit > 1000 ||
        c->full_sweep_every < 1 || c->prune_after_windows < 1 ||
        c->max_partitions < 1) {
        return err_set(err, ERR_INVALID,
                       "engine: discovery limit, sweep, prune or partition "
                       "cap out of range");
    }
    return 0;
}

/* want spares, or fewer when that is more than half the read cap: a floor
 * of spares must not take a small budget's memory beside it (a node with
 * QUEEN_S3_MEMORY_MB=8 kept 64 MiB of them). */
static size_t spare_floor(const struct engine *e, size_t want)
{
    size_t half = (size_t)(e->cfg.max_buffer_bytes / 2 / SLAB_SIZE);

    return want < half ? want : half;
}

struct engine *engine_new(const struct engine_config *cfg, struct err *err)
{
    struct engine *e;

    if (check_config(cfg, err) != 0) {
        return NULL;
    }
    e = xcalloc(1, sizeof(*e));
    e->cfg = *cfg;
    e->queue = dup_str(cfg->queue);
    e->format = dup_str(cfg->format);
    e->compression = dup_str(cfg->compression);
    e->layout = dup_str(cfg->layout);
    e->writer = dup_str(cfg->writer);
    e->cfg.queue = e->queue;
    e->cfg.format = e->format;
    e->cfg.compression = e->compression;
    e->cfg.layout = e->layout;
    e->cfg.writer = e->writer;
    e->state = ENGINE_FILLING;
    e->is_t_prev_known = cfg->start == ENGINE_START_EARLIEST;
    e->t_prev = ENGINE_MIN;
    e->t_filter = ENGINE_MIN;
    e->cp_floor = ENGINE_MIN;
    e->safe_time = ENGINE_MIN;
    e->complete_pass_safe = ENGINE_MIN;
    e->complete_through = ENGINE_MIN;
    e->calls = xcalloc(cfg->fetch_concurrency, sizeof(*e->calls));
    e->seeks = xcalloc(cfg->fetch_concurrency, sizeof(*e->seeks));
    e->next_call_id = 1;
    slab_pool_init(&e->slabs, spare_floor(e, ENGINE_SPARE_MIN));
    e->slabs.shared = cfg->spares;
    return e;
}

/* ---- Slabs (the pool is base/slab.h) ----------------------------------- */

/* Spares kept at most: a target window's worth of slabs up to half the
 * read cap, or ENGINE_SPARE_MAX when that is more, but never above half
 * the read cap (spare_floor). */
static size_t spare_cap(const struct engine *e)
{
    uint64_t bytes = e->cfg.target_bytes;

    if (bytes > e->cfg.max_buffer_bytes / 2) {
        bytes = e->cfg.max_buffer_bytes / 2;
    }
    size_t n = (size_t)(bytes / SLAB_SIZE);
    size_t floor = spare_floor(e, ENGINE_SPARE_MAX);
    return n > floor ? n : floor;
}

/* After a commit: keep as many spares as the window took, none while the
 * budget closes the windows. */
static void trim_slabs(struct engine *e, bool was_forced)
{
    slab_trim(&e->slabs, spare_cap(e), was_forced || e->is_forced);
}

/* What a tracked partition costs besides its records (engine_tracked_bytes):
 * the struct, its name and id, malloc's share of each. */
static uint64_t part_bytes(const struct part *p)
{
    uint64_t n = sizeof(*p) + p->name_len + 1 + 2ULL * ENGINE_ALLOC_EXTRA;

    return p->id == NULL ? n : n + p->id_len + 1 + ENGINE_ALLOC_EXTRA;
}

static void free_part(struct engine *e, struct part *p)
{
    e->parts_bytes -= part_bytes(p);
    for (size_t i = 0; i < p->n_recs; i++) {
        const struct brec *b = &p->recs[i];

        slab_unref(&e->slabs, b->slab, (size_t)b->txn_len + b->payload_len);
    }
    free(p->recs);
    free(p->name);
    free(p->id);
    free(p);
}

static void free_lost(struct lost *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].partition);
    }
    free(v);
}

static void free_plan(struct engine *e)
{
    free(e->plan_lost);
    free_lost(e->plan_lost_owned, e->plan_n_lost);
    free(e->manifest_key);
    e->plan_lost = NULL;
    e->plan_lost_owned = NULL;
    e->plan_n_lost = 0;
    e->manifest_key = NULL;
    free(e->plan_parts);
    e->plan_parts = NULL;
    e->plan_np = 0;
    free(e->plan_pos);
    e->plan_pos = NULL;
    e->plan_n_pos = 0;
    memset(&e->plan, 0, sizeof(e->plan));
}

static void free_redo(struct engine *e)
{
    for (size_t i = 0; i < ARRAY_LEN(e->redo_strings); i++) {
        free(e->redo_strings[i]);
        e->redo_strings[i] = NULL;
    }
    memset(&e->redo, 0, sizeof(e->redo));
    e->has_redo = false;
}

static void free_calls(struct engine *e)
{
    for (size_t i = 0; i < e->cfg.fetch_concurrency; i++) {
        free(e->calls[i].parts);
        free(e->calls[i].gens);
        free(e->calls[i].asks);
        free(e->calls[i].entries);
    }
    free(e->calls);
    free(e->seeks);
}

static void free_snapshot(struct engine *e);

static void free_restored(struct engine *e)
{
    for (size_t i = 0; i < e->n_restored; i++) {
        free(e->restored[i].name);
        free(e->restored[i].id);
    }
    free(e->restored);
    e->restored = NULL;
    e->n_restored = 0;
    e->restored_bytes = 0;
}

void engine_free(struct engine *e)
{
    if (e == NULL) {
        return;
    }
    for (size_t i = 0; i < e->n_parts; i++) {
        free_part(e, e->parts[i]);
    }
    slab_pool_free(&e->slabs);
    free_restored(e);
    dormant_free(&e->dormant);
    free_snapshot(e);
    free(e->parts);
    hashtab_free(&e->table);
    free(e->active);
    free_calls(e);
    free_lost(e->lost, e->n_lost);
    free_lost(e->found, e->n_found);
    free_lost(e->found_out, e->n_found_out);
    free_lost(e->known, e->n_known);
    free(e->found_view);
    free_plan(e);
    free_redo(e);
    free(e->acts);
    free(e->tail);
    free(e->queue);
    free(e->format);
    free(e->compression);
    free(e->layout);
    free(e->writer);
    free(e);
}

/* ---- Partition table ----------------------------------------------------- */

static void table_insert(struct engine *e, struct part *p)
{
    hashtab_insert(&e->table, hashtab_hash(p->name, p->name_len), p);
}

static void table_rebuild(struct engine *e, size_t cap)
{
    hashtab_reset(&e->table, cap);
    for (size_t i = 0; i < e->n_parts; i++) {
        table_insert(e, e->parts[i]);
    }
}

static bool part_is_named(const void *item, const void *key)
{
    const struct part *p = item;

    return slice_eq(p->name, p->name_len, *(const struct slice *)key);
}

static struct part *find_part(const struct engine *e, struct slice name)
{
    return hashtab_find(&e->table, hashtab_hash(name.ptr, name.len),
                        part_is_named, &name);
}

static struct part *add_part(struct engine *e, struct slice name)
{
    struct part *p = xcalloc(1, sizeof(*p));

    p->name = dup_slice(name);
    p->name_len = name.len;
    p->last_offset = -1;
    p->floor_ts = ENGINE_MIN;
    p->gap_from = -1;
    p->lw_last_offset = -1;
    p->lost_floor = INT64_MAX;
    p->active_at = SIZE_MAX;
    p->serial = e->next_serial++;
    e->parts_bytes += part_bytes(p);
    grow((void **)&e->parts, &e->cap_parts, e->n_parts + 1,
         sizeof(struct part *));
    e->parts[e->n_parts++] = p;
    if (e->n_parts * 2 > e->table.cap) {
        table_rebuild(e, e->table.cap == 0 ? 64 : e->table.cap * 2);
    } else {
        table_insert(e, p);
    }
    return p;
}

static void set_part_id(struct engine *e, struct part *p, struct slice id)
{
    e->parts_bytes -= part_bytes(p);
    free(p->id);
    p->id = id.len == 0 ? NULL : dup_slice(id);
    p->id_len = id.len;
    e->parts_bytes += part_bytes(p);
}

/* ---- Pruned partitions --------------------------------------------------
 *
 * A partition is pruned (prune()) only when caught up, with nothing buffered,
 * out, pending or lost, so its whole state is its position: every record
 * below it is committed or dropped, every one from it on is unread. That
 * position goes into a packed table keyed by (name, id) (sink/dormant.h,
 * ~30 bytes and the name a partition). A page that names it with nothing to
 * read (lastOffset below the position, logStart at or below it) leaves it
 * there; one that shows a record or a trim past it brings it back as a
 * tracked partition at that exact position, the offsets a trim took judged
 * as any skip (skip_to()). A full sweep that does not name a dormant entry
 * (the partition was deleted, or created again under a new id) drops it. */

/* ---- Lost ranges (engine.h (5)) ----------------------------------------- */

static void push_lost(struct lost **v, size_t *n, size_t *cap,
                      const struct part *p, int64_t from, int64_t to)
{
    struct lost *l;

    grow((void **)v, cap, *n + 1, sizeof(**v));
    l = &(*v)[(*n)++];
    l->partition = xstrndup(p->name, p->name_len);
    l->len = p->name_len;
    l->from = from;
    l->to = to;
    l->gen = p->gen;
}

/* The first range a committed manifest named (engine_restore_lost()) that
 * overlaps [from, to] of p, or NULL; those name p's first incarnation. */
static const struct lost *known_overlap(const struct engine *e,
                                        const struct part *p, int64_t from,
                                        int64_t to)
{
    for (size_t i = 0; p->gen == 0 && i < e->n_known; i++) {
        const struct lost *k = &e->known[i];

        if (k->len == p->name_len &&
            memcmp(k->partition, p->name, k->len) == 0 && k->from <= to &&
            k->to >= from) {
            return k;
        }
    }
    return NULL;
}

/* [from, to] of p, none of it committed, is lost now. */
static void record_lost(struct engine *e, struct part *p, int64_t from,
                        int64_t to)
{
    push_lost(&e->lost, &e->n_lost, &e->cap_lost, p, from, to);
    push_lost(&e->found, &e->n_found, &e->cap_found, p, from, to);
    p->lost_floor = min64(p->lost_floor, from);
    e->stats.records_lost += (uint64_t)(to - from + 1);
    e->is_loss_checkpoint_due = true;
}

/* A piece of a lost range still to be judged by add_lost(). */
struct lost_piece {
    int64_t from;
    int64_t to;
};

/* [from, to] of p is lost: it travels in the next window that closes, is
 * counted now and handed to engine_found_lost(), and the positions stop
 * before it until that window is planned (a restart finds it again).
 * What a committed manifest named is cut out (once): the piece below the
 * first overlap is judged first, the one above waits on a stack, so the
 * pieces are recorded in ascending order. */
static void add_lost(struct engine *e, struct part *p, int64_t from, int64_t to)
{
    struct lost_piece *above = NULL;
    size_t n = 0;
    size_t cap = 0;

    for (;;) {
        from = max64(from, 0);
        if (to >= from) {
            const struct lost *k = known_overlap(e, p, from, to);

            if (k != NULL) { /* committed already: once */
                grow((void **)&above, &cap, n + 1, sizeof(*above));
                above[n++] = (struct lost_piece){k->to + 1, to};
                to = k->from - 1;
                continue;
            }
            record_lost(e, p, from, to);
        }
        if (n == 0) {
            break;
        }
        n--;
        from = above[n].from;
        to = above[n].to;
    }
    free(above);
}

/* Judge p's skipped range [gap_from, position - 1] by what is known of its
 * stamps (engine.h (5)): not lost when every record in it is proved below
 * t_filter (the partition's last write, reported with a lastOffset at or
 * past the range, is below it); lost when nothing is left to read after
 * it; else it waits for the first record read after it. */
static void settle_gap(struct engine *e, struct part *p)
{
    int64_t to = p->position - 1;

    if (p->gap_from < 0) {
        return;
    }
    if (p->last_write_at < e->t_filter && to <= p->lw_last_offset) {
        p->gap_from = -1; /* committed, or below the horizon: not lost */
    } else if (p->position > p->last_offset) {
        add_lost(e, p, p->gap_from, to);
        p->gap_from = -1;
    }
}

/* Every skip of offsets never read goes through here: p moves to `to` and
 * the offsets passed over are judged. Lost at once when a stamp at or
 * above t_filter is known to bound them from below (floor_ts: the last
 * record read, the seek's target, the safeTime that saw p caught up, or a
 * checkpoint written at the commit pointer); else settle_gap(). */
static void skip_to(struct engine *e, struct part *p, int64_t to)
{
    int64_t from = p->gap_from >= 0 ? p->gap_from : p->position;

    if (to <= p->position) {
        return;
    }
    p->position = to;
    if (p->floor_ts >= e->t_filter) {
        add_lost(e, p, from, to - 1);
        p->gap_from = -1;
        return;
    }
    p->gap_from = from;
    settle_gap(e, p);
}

void engine_restore_lost(struct engine *e, const struct engine_lost_range *v,
                         size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct lost *l;

        grow((void **)&e->known, &e->cap_known, e->n_known + 1,
             sizeof(*e->known));
        l = &e->known[e->n_known++];
        l->partition = dup_slice(v[i].partition);
        l->len = v[i].partition.len;
        l->from = v[i].from;
        l->to = v[i].to;
        l->gen = 0;
    }
}

void engine_found_lost(struct engine *e, const struct engine_lost_range **v,
                       size_t *n)
{
    free_lost(e->found_out, e->n_found_out);
    free(e->found_view);
    e->found_out = e->found;
    e->n_found_out = e->n_found;
    e->found = NULL;
    e->n_found = 0;
    e->cap_found = 0;
    e->found_view = xcalloc(e->n_found_out + 1, sizeof(*e->found_view));
    for (size_t i = 0; i < e->n_found_out; i++) {
        const struct lost *l = &e->found_out[i];

        e->found_view[i] =
            (struct engine_lost_range){{l->partition, l->len}, l->from, l->to};
    }
    *v = e->found_view;
    *n = e->n_found_out;
}

/* ---- Restore ------------------------------------------------------------- */

static int restored_cmp(const void *a, const void *b)
{
    const struct restored *x = a;
    const struct restored *y = b;

    return name_cmp(x->name, x->name_len, y->name, y->name_len);
}

static void restore_checkpoint(struct engine *e,
                               const struct engine_checkpoint *cp)
{
    e->restored = xcalloc(cp->n == 0 ? 1 : cp->n, sizeof(*e->restored));
    for (size_t i = 0; i < cp->n; i++) {
        const struct engine_position *src = &cp->positions[i];
        struct restored *r = &e->restored[e->n_restored++];

        r->name = dup_slice(src->name);
        r->name_len = src->name.len;
        r->id = src->id.len == 0 ? NULL : dup_slice(src->id);
        r->id_len = src->id.len;
        r->offset = src->offset;
        e->restored_bytes += sizeof(*r) + src->name.len + src->id.len + 2 +
                             2ULL * ENGINE_ALLOC_EXTRA;
    }
    qsort(e->restored, e->n_restored, sizeof(*e->restored), restored_cmp);
    e->last_checkpoint_k = cp->k;
}

static void restore_redo(struct engine *e, const struct engine_intent *in)
{
    e->has_redo = true;
    e->redo = *in;
    e->redo_strings[0] = dup_str(in->format);
    e->redo_strings[1] = dup_str(in->compression);
    e->redo_strings[2] = dup_str(in->layout);
    e->redo_strings[3] = dup_str(in->writer);
    e->redo.format = e->redo_strings[0];
    e->redo.compression = e->redo_strings[1];
    e->redo.layout = e->redo_strings[2];
    e->redo.writer = e->redo_strings[3];
}

int engine_restore(struct engine *e, const struct engine_committed *committed,
                   const struct engine_intent *intent,
                   const struct engine_checkpoint *cp, struct err *err)
{
    if (e->has_started) {
        return err_set(err, ERR_INVALID,
                       "engine: restore after the first action");
    }
    if (intent != NULL && intent->t_end <= intent->t_start) {
        return err_set(err, ERR_INVALID,
                       "engine: intent %lld has tEnd <= tStart",
                       (long long)intent->k);
    }
    e->has_started = true;
    e->committed_k = committed != NULL && committed->k > 0 ? committed->k : 0;
    if (committed != NULL && e->committed_k > 0) {
        e->committed_t_end = committed->t_end;
        e->t_prev = committed->t_end;
        e->t_filter = committed->t_end;
        e->is_t_prev_known = true;
    }
    if (intent != NULL && intent->k == e->committed_k + 1) {
        restore_redo(e, intent);
        if (e->committed_k == 0) {
            /* Nothing below the first window's start belongs to it. */
            e->t_filter = intent->t_start;
            if (e->cfg.start == ENGINE_START_LATEST) {
                e->t_prev = intent->t_start;
                e->is_t_prev_known = true;
            }
        }
    }
    e->has_prior_run = e->committed_k > 0 || e->has_redo ||
                       (cp != NULL && cp->k <= e->committed_k);
    if (cp != NULL && cp->k <= e->committed_k) {
        restore_checkpoint(e, cp);
        /* Exact at the commit pointer (written there, or rebuilt from the
         * manifests after an older one): every record from a position on
         * is stamped at or above the commit's tEnd. */
        e->cp_floor = cp->k == e->committed_k ? e->t_filter : ENGINE_MIN;
        if (cp->is_rebuilt) {
            e->last_checkpoint_k = cp->written_k;
        }
    }
    /* The commit pointer's window was due a checkpoint that a crash right
     * after the commit never wrote: write it once the positions are exact. */
    if (e->committed_k > 0 && e->cfg.checkpoint_every != 0 &&
        e->committed_k % e->cfg.checkpoint_every == 0 &&
        (cp == NULL || cp->k < e->committed_k || cp->is_rebuilt)) {
        e->is_checkpoint_deferred = true;
        e->checkpoint_k = e->committed_k;
        e->checkpoint_t_end = e->committed_t_end;
    }
    if (e->is_t_prev_known && e->t_prev != ENGINE_MIN) {
        e->complete_through = e->t_prev;
    }
    return 0;
}

void engine_restore_start(struct engine *e, int64_t t_start)
{
    if (e->cfg.start != ENGINE_START_LATEST || e->is_t_prev_known ||
        e->committed_k > 0 || e->has_redo || t_start == ENGINE_MIN) {
        return;
    }
    e->is_t_prev_known = true;
    e->t_prev = t_start;
    e->t_filter = t_start;
    e->complete_through = t_start;
}

bool engine_first_start(const struct engine *e, int64_t *t_start)
{
    *t_start = e->t_prev;
    return e->cfg.start == ENGINE_START_LATEST && e->is_t_prev_known &&
           e->committed_k == 0 && !e->has_redo && e->t_prev != ENGINE_MIN;
}

/* ---- Discovery (docs/design/window.md §3) and positioning (§4) ---------- */

static struct restored *find_restored(struct engine *e, struct slice name)
{
    size_t lo = 0;
    size_t hi = e->n_restored;

    while (lo < hi) { /* restored is sorted by name */
        size_t mid = lo + (hi - lo) / 2;
        struct restored *r = &e->restored[mid];
        int c = name_cmp(r->name, r->name_len, name.ptr, name.len);

        if (c == 0) {
            return r->is_used ? NULL : r;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

static bool same_incarnation(const char *id, size_t id_len, struct slice b)
{
    return id == NULL || b.len == 0 || slice_eq(id, id_len, b);
}

/* Where a partition seen for the first time starts reading. */
static void position_new(struct engine *e, struct part *p,
                         const struct engine_partition_info *in)
{
    struct restored *r = find_restored(e, in->name);

    if (r != NULL && same_incarnation(r->id, r->id_len, in->id)) {
        r->is_used = true;
        p->position = r->offset;
        p->floor_ts = e->cp_floor;
        if (in->id.len == 0 && r->id != NULL) {
            set_part_id(e, p, (struct slice){r->id, r->id_len});
        }
        skip_to(e, p, in->log_start);
        return;
    }
    if (e->cfg.start == ENGINE_START_EARLIEST) {
        p->position = in->log_start; /* a first run's first full sweep */
        if (e->has_prior_run || e->has_complete_pass) {
            /* A run before this one may have read and not committed what
             * a trim took since; and a partition the first full sweep did
             * not name was created after this run began, so all of it was
             * the sink's (a stall, an outage, let a trim pass it before a
             * page named it). Its offsets from 0 are a skip, judged like
             * any other (engine.h (5)), never passed in silence. */
            p->position = 0;
            p->floor_ts = ENGINE_MIN;
            skip_to(e, p, in->log_start);
        }
        return;
    }
    if (!e->is_t_prev_known ||
        sat_add(in->last_write_at, ISOTIME_US_S) < e->t_prev) {
        p->position = in->last_offset + 1; /* nothing to read: the head */
        return;
    }
    p->position = in->log_start; /* provisional until the seek answers */
    p->is_seek_pending = true;
}

/* A changed partition id: the partition was deleted and created again. */
static void new_incarnation(struct engine *e, struct part *p,
                            const struct engine_partition_info *in)
{
    /* What the old incarnation held unread is lost, judged as a skip to
     * its end; with a seek pending, from where the seek started (the
     * records below its answer, if any, were below the window's start, and
     * the last write tells when none was above it). */
    if (p->is_seek_pending || p->is_seeking) {
        p->floor_ts = ENGINE_MIN;
    }
    skip_to(e, p, p->last_offset + 1);
    if (p->gap_from >= 0) {
        add_lost(e, p, p->gap_from, p->last_offset); /* nothing follows */
    }
    p->gap_from = -1;
    p->lost_floor = INT64_MAX;
    p->gen++;
    e->stats.incarnations++;
    set_part_id(e, p, in->id);
    p->log_start = in->log_start;
    p->last_offset = in->last_offset;
    p->last_write_at = in->last_write_at;
    p->lw_last_offset = in->last_offset;
    p->has_read = false;
    p->is_seek_pending = false;
    p->is_seeking = false; /* its answer is stale now */
    /* The new one's offsets start at 0, and it was created after the page
     * that last named the old one: what a trim took of it before this page
     * is a skip like any other. */
    p->position = 0;
    p->floor_ts = p->seen_safe;
    skip_to(e, p, in->log_start);
}

static void update_part(struct engine *e, struct part *p,
                        const struct engine_partition_info *in)
{
    if (p->id != NULL && in->id.len != 0 &&
        !slice_eq(p->id, p->id_len, in->id)) {
        new_incarnation(e, p, in);
    } else if (p->id == NULL && in->id.len != 0) {
        set_part_id(e, p, in->id);
    }
    p->last_offset = max64(p->last_offset, in->last_offset);
    p->last_write_at = in->last_write_at;
    p->lw_last_offset = in->last_offset;
    p->log_start = max64(p->log_start, in->log_start);
    if (p->is_seek_pending || p->is_seeking) {
        return; /* the seek's answer is judged against logStart */
    }
    skip_to(e, p, p->log_start);
    settle_gap(e, p);
}

static void touch(struct engine *e, struct part *p);
static bool has_unread(const struct part *p);

/* A partition the engine does not track: *out stays NULL when it stays
 * untracked, a dormant entry with nothing to read, or one nothing above the
 * commit was ever written to (it goes dormant at its head: every record of
 * it is stamped below t_filter, committed or never ours). */
static int observe_untracked(struct engine *e,
                             const struct engine_partition_info *in,
                             struct part **out, struct err *err)
{
    uint32_t d =
        in->id.len > 0 ? dormant_find(&e->dormant, in->name, in->id) : 0;
    int64_t pos = d == 0 ? 0 : dormant_position(&e->dormant, d);
    struct part *p;

    *out = NULL;
    if (d != 0 && in->last_offset < pos && in->log_start <= pos) {
        if (e->is_pass_full) {
            dormant_mark(&e->dormant, d);
        }
        return 0; /* still caught up: nothing to read, nothing trimmed */
    }
    if (d == 0 && in->id.len > 0 && e->t_filter != ENGINE_MIN &&
        e->is_t_prev_known &&
        sat_add(in->last_write_at, ISOTIME_US_S) < e->t_filter &&
        find_restored(e, in->name) == NULL &&
        dormant_add(&e->dormant, in->name, in->id,
                    max64(in->last_offset + 1, 0))) {
        return 0;
    }
    if (e->n_parts >= e->cfg.max_partitions) {
        return err_set(err, ERR_TOO_BIG,
                       "engine: queue \"%s\" has more than %u partitions",
                       e->queue, e->cfg.max_partitions);
    }
    p = add_part(e, in->name);
    set_part_id(e, p, in->id);
    p->last_offset = in->last_offset;
    p->log_start = in->log_start;
    p->last_write_at = in->last_write_at;
    p->lw_last_offset = in->last_offset;
    if (d != 0) {
        /* moved again: on from its exact position, a trim judged as any
         * skip (what it skips is stamped above what was committed when it
         * was pruned; settle_gap() knows the rest) */
        dormant_remove(&e->dormant, d);
        p->position = pos;
        skip_to(e, p, in->log_start);
    } else {
        position_new(e, p, in);
    }
    *out = p;
    return 0;
}

static int observe(struct engine *e, const struct engine_partition_info *in,
                   struct err *err)
{
    struct part *p = find_part(e, in->name);
    bool is_moved = true;

    if (p == NULL) {
        if (observe_untracked(e, in, &p, err) != 0) {
            return err->code;
        }
        if (p == NULL) {
            return 0;
        }
    } else {
        int64_t last = p->last_offset;
        int64_t start = p->log_start;
        uint32_t gen = p->gen;

        update_part(e, p, in);
        is_moved =
            p->last_offset != last || p->log_start != start || p->gen != gen;
    }
    if (!has_unread(p) && !p->is_seek_pending && !p->is_seeking) {
        /* caught up: what it gains later is stamped at or above the page's
         * safeTime */
        p->floor_ts = max64(p->floor_ts, e->page_safe);
    }
    if (is_moved) { /* a page that only names it does not keep it */
        p->last_seen_k = e->committed_k;
        p->last_seen_pass = e->stats.discoveries;
    }
    p->seen_safe = e->page_safe;
    touch(e, p);
    return 0;
}

static void restart_pass(struct engine *e)
{
    e->cursor_len = 0;
    e->pass_min_safe = INT64_MAX;
    e->pass_count = 0;
}

static void start_pass(struct engine *e)
{
    bool is_full = !e->has_discovered ||
                   e->stats.discoveries % e->cfg.full_sweep_every == 0 ||
                   !e->is_t_prev_known || e->t_prev == ENGINE_MIN;

    e->is_pass_active = true;
    e->is_pass_full = is_full;
    e->pass_since =
        is_full ? ENGINE_MIN : sat_sub(e->t_prev, e->cfg.discovery_slack_us);
    e->has_discovered_this_window = true;
    e->is_idle_armed = false;
    if (is_full) {
        dormant_unmark_all(&e->dormant);
    }
    restart_pass(e);
}

static void complete_pass(struct engine *e)
{
    e->is_pass_active = false;
    e->has_complete_pass = true;
    e->complete_pass_safe = max64(e->complete_pass_safe, e->pass_min_safe);
    e->has_discovered = true;
    e->stats.discoveries++;
    if (e->is_pass_full) {
        e->stats.full_sweeps++;
        e->discovery_partitions = e->pass_count;
        /* every partition of the queue was named: what a checkpoint held
         * is used, and a dormant entry no page named is gone */
        free_restored(e);
        dormant_drop_unmarked(&e->dormant);
    }
}

static void update_completeness(struct engine *e);

static int on_page(struct engine *e, const struct engine_discovery_page *p,
                   struct err *err)
{
    if (p->error == ENGINE_ANSWER_UNKNOWN) {
        fail_engine(e);
        return 0;
    }
    if (p->error != ENGINE_ANSWER_OK) {
        restart_pass(e);
        return 0;
    }
    if (p->has_next && p->next.len > ENGINE_MAX_CURSOR) {
        restart_pass(e);
        return err_set(err, ERR_TOO_BIG,
                       "engine: discovery cursor of %zu "
                       "bytes",
                       p->next.len);
    }
    e->safe_time = max64(e->safe_time, p->safe_time);
    e->page_safe = p->safe_time;
    e->pass_min_safe = min64(e->pass_min_safe, p->safe_time);
    if (!e->is_t_prev_known) {
        /* latest: T_0 = just above the first safeTime seen. A record
         * stamped at that safeTime was applied before this page was read
         * (every later one is stamped strictly above it), so it is one of
         * the records before the start: window 1 holds ts > safeTime. */
        e->is_t_prev_known = true;
        e->t_prev = sat_add(p->safe_time, 1);
        e->t_filter = e->t_prev;
    }
    for (size_t i = 0; i < p->n; i++) {
        if (observe(e, &p->partitions[i], err) != 0) {
            restart_pass(e);
            return err->code;
        }
    }
    e->pass_count += p->n;
    if (p->has_next) {
        memcpy(e->cursor, p->next.ptr, p->next.len);
        e->cursor_len = p->next.len;
    } else {
        complete_pass(e);
    }
    return 0;
}

int engine_on_discovery_page(struct engine *e,
                             const struct engine_discovery_page *p,
                             struct err *err)
{
    int rc;

    free_snapshot(e); /* the page may revive or prune: refs move */
    if (!e->is_page_out || e->state == ENGINE_FAILED) {
        return err_set(err, ERR_INVALID,
                       "engine: a discovery page nobody asked for");
    }
    e->is_page_out = false;
    rc = on_page(e, p, err);
    update_completeness(e);
    return rc;
}

void engine_on_discovery_failed(struct engine *e)
{
    if (e->is_page_out) {
        e->is_page_out = false;
        restart_pass(e);
    }
}

/* ---- Frontier (docs/design/window.md §5) -------------------------------- */

static bool has_unread(const struct part *p)
{
    return p->position <= p->last_offset;
}

/* Only active partitions can hold a close back, need a read or hold
 * records: the per-call walks go over them alone, so thousands of cold,
 * caught-up partitions cost nothing between discoveries. */
static bool is_active(const struct part *p)
{
    return has_unread(p) || p->is_seek_pending || p->is_seeking ||
           p->n_recs > 0;
}

/* Bring p's membership of the active set up to date after a change. */
static void touch(struct engine *e, struct part *p)
{
    bool is_now = is_active(p);

    if (is_now && p->active_at == SIZE_MAX) {
        grow((void **)&e->active, &e->cap_active, e->n_active + 1,
             sizeof(struct part *));
        p->active_at = e->n_active;
        e->active[e->n_active++] = p;
    } else if (!is_now && p->active_at != SIZE_MAX) {
        struct part *last = e->active[--e->n_active];

        e->active[p->active_at] = last;
        last->active_at = p->active_at;
        p->active_at = SIZE_MAX;
    }
}

/* The stamp below which this partition holds no unread record. */
static int64_t part_frontier(const struct engine *e, const struct part *p)
{
    if (p->is_seek_pending || p->is_seeking) {
        return ENGINE_MIN;
    }
    if (has_unread(p)) {
        return p->has_read ? p->last_read_ts : ENGINE_MIN;
    }
    return e->complete_pass_safe; /* caught up as of the complete pass */
}

static int64_t min_frontier(const struct engine *e)
{
    int64_t m = INT64_MAX;

    for (size_t i = 0; i < e->n_active; i++) {
        m = min64(m, part_frontier(e, e->active[i]));
    }
    return m;
}

/* The index past the last record of p from `from` on of the same
 * incarnation as recs[from]: recs ascend by gen, so a binary search. */
static size_t gen_end(const struct part *p, size_t from)
{
    uint32_t gen = p->recs[from].gen;
    size_t lo = from + 1;
    size_t hi = p->n_recs;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->recs[mid].gen == gen) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static bool min_buffered_ts(const struct engine *e, int64_t *ts)
{
    bool found = false;

    for (size_t i = 0; i < e->n_active; i++) {
        const struct part *p = e->active[i];

        /* stamps ascend within an incarnation: its first is its least, and
         * the walk goes from one incarnation's first record to the next's
         * (a close step asks while a window's records are buffered) */
        for (size_t j = 0; j < p->n_recs; j = gen_end(p, j)) {
            if (!found || p->recs[j].ts < *ts) {
                *ts = p->recs[j].ts;
                found = true;
            }
        }
    }
    return found;
}

/* The next align boundary strictly above t_prev (or above the least buffered
 * stamp while t_prev is MIN); false when there is none. */
static bool align_cap(const struct engine *e, int64_t *cap)
{
    int64_t unit = align_unit(e);
    int64_t base = e->t_prev;

    if (unit == 0 || !e->is_t_prev_known) {
        return false;
    }
    if (base == ENGINE_MIN && !min_buffered_ts(e, &base)) {
        return false;
    }
    *cap = isotime_next_boundary(base, unit);
    return true;
}

/* Partitions at or above this frontier are not fetched (docs/design/window.md
 * §6). */
static int64_t fetch_ceiling(const struct engine *e)
{
    int64_t base;
    int64_t ac;
    int64_t horizon = align_unit(e);

    if (!e->has_complete_pass || !e->is_t_prev_known) {
        return INT64_MAX;
    }
    base = sat_sub(e->complete_pass_safe, e->cfg.guard_us);
    if (align_cap(e, &ac)) {
        base = min64(base, ac);
    }
    if (horizon == 0) {
        horizon = e->cfg.max_window_us;
    }
    return sat_add(base, horizon);
}

/* ---- Fetch scheduling (docs/design/window.md §6) ------------------------ */

struct candidate {
    int64_t frontier;
    uint64_t index; /* creation serial: ties go to the older partition */
    struct part *part;
};

static int candidate_cmp(const void *a, const void *b)
{
    const struct candidate *x = a;
    const struct candidate *y = b;

    if (x->frontier != y->frontier) {
        return x->frontier < y->frontier ? -1 : 1;
    }
    return x->index < y->index ? -1 : (x->index > y->index ? 1 : 0);
}

static struct engine_action *push_action(struct engine_action **v, size_t *n,
                                         size_t *cap)
{
    struct engine_action *a;

    grow((void **)v, cap, *n + 1, sizeof(**v));
    a = &(*v)[(*n)++];
    memset(a, 0, sizeof(*a));
    return a;
}

static struct fetch_call *free_call_slot(struct engine *e)
{
    for (size_t i = 0; i < e->cfg.fetch_concurrency; i++) {
        if (!e->calls[i].is_used) {
            return &e->calls[i];
        }
    }
    return NULL;
}

/* One call of n candidates: each entry asks min(max_bytes_per_entry,
 * share) and takes it off *left (the budget not spoken for yet), the
 * last one what is left when that is less; 1 byte for the one entry a
 * full budget still lets out. Returns the entries emitted (fewer than n
 * once the budget runs out). */
static size_t emit_call(struct engine *e, const struct candidate *c, size_t n,
                        uint64_t share, uint64_t *left)
{
    struct fetch_call *call = free_call_slot(e);
    struct engine_action *a;
    size_t k = 0;

    if (call == NULL) {
        return 0; /* cannot happen: the caller counted free slots */
    }
    call->parts = xrealloc(call->parts, n * sizeof(struct part *));
    call->gens = xrealloc(call->gens, n * sizeof(*call->gens));
    call->asks = xrealloc(call->asks, n * sizeof(*call->asks));
    call->entries = xrealloc(call->entries, n * sizeof(*call->entries));
    for (; k < n && (*left > 0 || k == 0); k++) {
        struct part *p = c[k].part;
        struct engine_fetch_entry *en = &call->entries[k];
        uint64_t ask = e->cfg.max_bytes_per_entry < share
                           ? e->cfg.max_bytes_per_entry
                           : share;

        if (*left == 0) {
            ask = 1; /* the one entry that keeps a full budget moving */
        } else {
            ask = ask < *left ? ask : *left;
            *left -= ask;
        }
        p->is_fetching = true;
        call->parts[k] = p;
        call->gens[k] = p->gen;
        call->asks[k] = (uint32_t)ask;
        e->asked_bytes += ask;
        en->queue = str_slice(e->queue);
        en->partition = (struct slice){p->name, p->name_len};
        en->offset = p->position;
        en->max_bytes = (uint32_t)ask;
    }
    call->is_used = true;
    call->id = e->next_call_id++;
    call->n = k;
    e->n_calls_out++;
    a = push_action(&e->tail, &e->n_tail, &e->cap_tail);
    a->kind = ENGINE_ACT_FETCH;
    a->u.fetch.call_id = call->id;
    a->u.fetch.entries = call->entries;
    a->u.fetch.n = k;
    return k;
}

static size_t gather_candidates(struct engine *e, struct candidate **out)
{
    int64_t ceiling = fetch_ceiling(e);
    struct candidate *c = NULL;
    size_t n = 0;
    size_t cap = 0;

    for (size_t i = 0; i < e->n_active; i++) {
        struct part *p = e->active[i];
        int64_t f;

        if (!has_unread(p) || p->is_fetching || p->is_seek_pending ||
            p->is_seeking) {
            continue;
        }
        f = part_frontier(e, p);
        if (f >= ceiling) {
            continue;
        }
        grow((void **)&c, &cap, n + 1, sizeof(*c));
        c[n].frontier = f;
        c[n].index = p->serial;
        c[n].part = p;
        n++;
    }
    *out = c;
    return n;
}

/* What the budget has left for new asks: max_buffer_bytes less the
 * buffered weight, the tracked partitions' bytes and the maxBytes of the
 * entries still out (issue 13 item 7). */
static uint64_t budget_left(const struct engine *e)
{
    uint64_t used = e->total_buffered + engine_tracked_bytes(e);

    used =
        used > UINT64_MAX - e->asked_bytes ? UINT64_MAX : used + e->asked_bytes;
    return used < e->cfg.max_buffer_bytes ? e->cfg.max_buffer_bytes - used : 0;
}

/* Lowest frontier first, at most (free calls) x (entries per call), and
 * never more maxBytes out than the budget has left (issue 13 item 7): what
 * is left is shared evenly among every partition waiting for a read, each
 * share at least the largest record read so far (so the budget goes to a
 * little of every partition, not all of the first ones, and the frontiers
 * that hold the close back move), and as many entries go out as shares
 * fit (a record's worth each until the first complete pass has named
 * them all). A broker answers an entry's
 * first record whatever its size, so what a round brings in stays within
 * the budget but for a record larger than every one read before. With
 * nothing left and nothing out, one entry of the partition holding the
 * close back asks for 1 byte (one record): a close can still free memory,
 * and a record larger than what is left is still read. */
static void schedule_fetches(struct engine *e)
{
    size_t slots = e->cfg.fetch_concurrency - e->n_calls_out;
    size_t per = e->cfg.fetch_entries_per_call;
    uint64_t left = budget_left(e);
    uint64_t floor = e->max_record_bytes > 0 ? e->max_record_bytes : 1;
    uint64_t share;
    struct candidate *c;
    size_t n;
    size_t done = 0;

    if (slots == 0 || (left == 0 && e->n_calls_out > 0)) {
        return;
    }
    n = gather_candidates(e, &c);
    if (n > 0) {
        qsort(c, n, sizeof(*c), candidate_cmp);
    }
    /* the share of every candidate, not of this round's: the partitions
     * a round leaves out get theirs in the next ones */
    share = n > 0 && left / n > floor ? left / n : floor;
    if (!e->has_complete_pass) {
        /* the partitions waiting are not all known yet: the first pages'
         * would take the whole budget; a record each until they are */
        share = floor;
    }
    n = n < slots * per ? n : slots * per;
    if (left / share < n) {
        n = left / share > 0 ? (size_t)(left / share) : (n > 0 ? 1 : 0);
    }
    while (done < n && slots > 0) {
        size_t take = n - done < per ? n - done : per;

        done += emit_call(e, c + done, take, share, &left);
        slots--;
        if (left == 0) {
            break;
        }
    }
    free(c);
}

static struct seek_slot *free_seek_slot(struct engine *e)
{
    for (size_t i = 0; i < e->cfg.fetch_concurrency; i++) {
        if (!e->seeks[i].is_used) {
            return &e->seeks[i];
        }
    }
    return NULL;
}

static void schedule_seeks(struct engine *e)
{
    for (size_t i = 0; i < e->n_active; i++) {
        struct part *p = e->active[i];
        struct seek_slot *s;
        struct engine_action *a;

        if (!p->is_seek_pending || p->is_seeking) {
            continue;
        }
        s = free_seek_slot(e);
        if (s == NULL) {
            return;
        }
        s->is_used = true;
        s->id = e->next_call_id++;
        s->part = p;
        s->gen = p->gen;
        s->t = e->t_prev;
        p->is_seeking = true;
        e->n_seeks_out++;
        e->stats.seeks_issued++;
        a = push_action(&e->tail, &e->n_tail, &e->cap_tail);
        a->kind = ENGINE_ACT_SEEK;
        a->u.seek.seek_id = s->id;
        a->u.seek.partition = (struct slice){p->name, p->name_len};
        a->u.seek.t = e->t_prev;
        a->u.seek.last_offset = p->last_offset;
        a->u.seek.log_start = p->log_start;
    }
}

void engine_on_seek_result(struct engine *e, uint64_t seek_id, bool is_found,
                           int64_t offset)
{
    for (size_t i = 0; i < e->cfg.fetch_concurrency; i++) {
        struct seek_slot *s = &e->seeks[i];
        struct part *p = s->part;

        if (!s->is_used || s->id != seek_id) {
            continue;
        }
        s->is_used = false;
        e->n_seeks_out--;
        if (p->gen != s->gen || !p->is_seeking) {
            return; /* a seek of an older incarnation */
        }
        p->is_seeking = false;
        p->is_seek_pending = false;
        if (is_found) {
            /* From its answer on every record is stamped >= t: an answer a
             * trim passed since is a lost range, not a silent clamp. */
            p->position = offset;
            p->floor_ts = max64(p->floor_ts, s->t);
            skip_to(e, p, p->log_start);
        } else {
            skip_to(e, p, p->log_start); /* from where it would have begun */
        }
        touch(e, p);
        update_completeness(e);
        return;
    }
}

/* ---- Merging a fetch answer (docs/design/window.md §7) ------------------ */

static uint64_t record_weight(const struct part *p,
                              const struct engine_fetched_record *r)
{
    return ENGINE_RECORD_BASE + r->txn.len + p->name_len +
           (r->payload.len == 0 ? ENGINE_NULL_PAYLOAD : r->payload.len);
}

static void buffer_record(struct engine *e, struct part *p,
                          const struct engine_fetched_record *r)
{
    size_t n = r->txn.len + r->payload.len;
    struct slab *s;
    struct brec *b;

    /* A record is bounded by the broker's body limit (64 MiB). */
    ASSERT(r->txn.len <= UINT32_MAX && r->payload.len <= UINT32_MAX);
    grow_recs(p);
    b = &p->recs[p->n_recs++];
    s = slab_for(&e->slabs, n);
    b->offset = r->offset;
    b->ts = r->ts;
    b->gen = p->gen;
    b->txn_len = (uint32_t)r->txn.len;
    b->payload_len = (uint32_t)r->payload.len;
    uint64_t w = record_weight(p, r);
    ASSERT(w <= UINT32_MAX);
    b->weight = (uint32_t)w;
    b->slab = s;
    b->data =
        slab_put(s, r->txn.ptr, r->txn.len, r->payload.ptr, r->payload.len);
    p->buffered += b->weight;
    e->total_buffered += b->weight;
}

static void merge_records(struct engine *e, struct part *p,
                          const struct engine_fetch_result *r)
{
    for (size_t i = 0; i < r->n; i++) {
        const struct engine_fetched_record *rec = &r->records[i];

        int64_t from = p->gap_from >= 0 ? p->gap_from : p->position;

        if (rec->offset < p->position) {
            continue; /* already seen */
        }
        if (rec->payload.len > e->max_record_bytes) {
            e->max_record_bytes = rec->payload.len;
        }
        p->gap_from = -1;
        if (rec->ts < e->t_filter) {
            /* (4); a skipped range before it was stamped below it too */
            e->stats.records_dropped++;
        } else {
            if (rec->offset > from) { /* an offset jump, or a skip */
                add_lost(e, p, from, rec->offset - 1);
            }
            buffer_record(e, p, rec);
        }
        p->position = rec->offset + 1;
        p->last_read_ts = rec->ts;
        p->floor_ts = rec->ts;
        p->has_read = true;
    }
}

static void merge_entry(struct engine *e, struct part *p,
                        const struct engine_fetch_result *r)
{
    p->last_offset = r->high_watermark - 1;
    p->log_start = max64(p->log_start, r->log_start);
    switch (r->error) {
    case ENGINE_ANSWER_UNKNOWN:
        fail_engine(e);
        return;
    case ENGINE_ANSWER_OFFSET_OUT_OF_RANGE:
        if (p->log_start > p->position) {
            skip_to(e, p, p->log_start);
        } else if (p->position > r->high_watermark) {
            p->position = r->high_watermark; /* from a node that was ahead */
        }
        return;
    case ENGINE_ANSWER_OTHER:
        e->stats.fetch_errors++; /* still unread: it blocks and is retried */
        return;
    case ENGINE_ANSWER_OK:
        break;
    }
    if (r->n > 0) { /* read something: not idle */
        p->last_seen_k = e->committed_k;
        p->last_seen_pass = e->stats.discoveries;
    }
    merge_records(e, p, r);
    settle_gap(e, p);
}

static struct fetch_call *find_call(struct engine *e, uint64_t id)
{
    for (size_t i = 0; i < e->cfg.fetch_concurrency; i++) {
        if (e->calls[i].is_used && e->calls[i].id == id) {
            return &e->calls[i];
        }
    }
    return NULL;
}

/* Entry i's answer is merged (its weight is buffered) or will never come:
 * its ask leaves the budget's count. */
static void release_ask(struct engine *e, struct fetch_call *call, size_t i)
{
    e->asked_bytes -= call->asks[i];
    call->asks[i] = 0;
}

static void release_call(struct engine *e, struct fetch_call *call)
{
    for (size_t i = 0; i < call->n; i++) {
        call->parts[i]->is_fetching = false;
        release_ask(e, call, i);
    }
    call->is_used = false;
    e->n_calls_out--;
}

/* Merge entries [from, from + n) of call (their results in r). */
static int merge_part(struct engine *e, struct fetch_call *call, size_t from,
                      const struct engine_fetch_result *r, size_t n,
                      struct err *err)
{
    for (size_t i = 0; i < n && e->state != ENGINE_FAILED; i++) {
        struct part *p = call->parts[from + i];

        release_ask(e, call, from + i);
        if (p->gen != call->gens[from + i]) {
            continue; /* an answer for an older incarnation */
        }
        if (!slice_eq(p->name, p->name_len, r[i].partition)) {
            return err_set(err, ERR_INVALID,
                           "engine: fetch entry %zu names another partition",
                           from + i);
        }
        merge_entry(e, p, &r[i]);
        touch(e, p);
    }
    return 0;
}

int engine_on_fetch_part(struct engine *e, uint64_t call_id, size_t from,
                         const struct engine_fetch_result *r, size_t n,
                         struct err *err)
{
    struct fetch_call *call = find_call(e, call_id);
    int rc;

    if (call == NULL) {
        return err_set(err, ERR_INVALID, "engine: no fetch call %llu",
                       (unsigned long long)call_id);
    }
    if (from > call->n || n > call->n - from) {
        rc = err_set(err, ERR_INVALID,
                     "engine: fetch call %llu answered entries %zu..%zu of %zu",
                     (unsigned long long)call_id, from, from + n, call->n);
    } else {
        rc = merge_part(e, call, from, r, n, err);
    }
    if (rc != 0) {
        release_call(e, call);
        update_completeness(e);
    }
    return rc;
}

void engine_on_fetch_done(struct engine *e, uint64_t call_id)
{
    struct fetch_call *call = find_call(e, call_id);

    if (call != NULL) {
        release_call(e, call);
        update_completeness(e);
    }
}

int engine_on_fetch(struct engine *e, uint64_t call_id,
                    const struct engine_fetch_result *r, size_t n,
                    struct err *err)
{
    struct fetch_call *call = find_call(e, call_id);

    if (call != NULL && n != call->n) {
        int rc = err_set(err, ERR_INVALID,
                         "engine: fetch call %llu answered %zu of %zu entries",
                         (unsigned long long)call_id, n, call->n);
        engine_on_fetch_done(e, call_id);
        return rc;
    }
    if (engine_on_fetch_part(e, call_id, 0, r, n, err) != 0) {
        return err->code;
    }
    engine_on_fetch_done(e, call_id);
    return 0;
}

void engine_on_fetch_failed(struct engine *e, uint64_t call_id)
{
    struct fetch_call *call = find_call(e, call_id);

    if (call != NULL) {
        e->stats.fetch_errors++;
        release_call(e, call);
    }
}

/* ---- The plan (docs/design/window.md §9, the plan) ---------------------- */

/* Whether b belongs to the window [t_start, t_end): rule (1). */
static bool in_window(const struct brec *b, int64_t t_start, int64_t t_end)
{
    return b->ts >= t_start && b->ts < t_end;
}

/* Where p starts once the records of [t_start, t_end) are committed: its
 * first record of this incarnation outside them, else its read position;
 * never past a loss not yet in a plan (a restart finds it again). */
static void part_position(const struct part *p, int64_t t_start, int64_t t_end,
                          struct engine_position *ps)
{
    ps->name = (struct slice){p->name, p->name_len};
    ps->id = (struct slice){p->id == NULL ? "" : p->id, p->id_len};
    ps->offset = p->position;
    for (size_t j = 0; j < p->n_recs; j++) {
        const struct brec *b = &p->recs[j];

        /* never an older incarnation */
        if (b->gen == p->gen && !in_window(b, t_start, t_end)) {
            ps->offset = b->offset;
            break;
        }
    }
    ps->offset = min64(ps->offset, p->lost_floor);
    if (p->gap_from >= 0) {
        ps->offset = min64(ps->offset, p->gap_from);
    }
}

static int position_cmp(const void *a, const void *b)
{
    const struct engine_position *x = a;
    const struct engine_position *y = b;

    return name_cmp(x->name.ptr, x->name.len, y->name.ptr, y->name.len);
}

static int part_name_cmp(const void *a, const void *b)
{
    const struct part *x = *(struct part *const *)a;
    const struct part *y = *(struct part *const *)b;

    return name_cmp(x->name, x->name_len, y->name, y->name_len);
}

static size_t plan_parts(struct engine *e, int64_t t_start, int64_t t_end,
                         struct part ***out, size_t *n_records)
{
    struct part **v = NULL;
    size_t n = 0;
    size_t cap = 0;

    *n_records = 0;
    for (size_t i = 0; i < e->n_active; i++) {
        struct part *p = e->active[i];
        size_t k = 0;

        for (size_t j = 0; j < p->n_recs; j++) {
            k += in_window(&p->recs[j], t_start, t_end);
        }
        if (k > 0) {
            grow((void **)&v, &cap, n + 1, sizeof(struct part *));
            v[n++] = p;
            *n_records += k;
        }
    }
    if (n > 1) {
        qsort(v, n, sizeof(struct part *), part_name_cmp);
    }
    *out = v;
    return n;
}

static void plan_take_lost(struct engine *e)
{
    for (size_t i = 0; i < e->n_lost; i++) { /* planned: positions move on */
        struct part *p =
            find_part(e, (struct slice){e->lost[i].partition, e->lost[i].len});

        if (p != NULL) {
            p->lost_floor = INT64_MAX;
        }
    }
    e->plan_lost_owned = e->lost;
    e->plan_n_lost = e->n_lost;
    e->plan_lost =
        xcalloc(e->n_lost == 0 ? 1 : e->n_lost, sizeof(*e->plan_lost));
    for (size_t i = 0; i < e->n_lost; i++) {
        e->plan_lost[i].partition =
            (struct slice){e->lost[i].partition, e->lost[i].len};
        e->plan_lost[i].from = e->lost[i].from;
        e->plan_lost[i].to = e->lost[i].to;
    }
    e->lost = NULL;
    e->n_lost = 0;
    e->cap_lost = 0;
}

static void plan_record(const struct part *p, const struct brec *b,
                        struct sink_record *r)
{
    r->partition = (struct slice){p->name, p->name_len};
    r->offset = b->offset;
    r->txn = (struct slice){b->data, b->txn_len};
    r->ts = b->ts;
    r->payload = (struct slice){b->data + b->txn_len, b->payload_len};
}

/* Count p's records of [t_start, t_end) into the plan's figures; returns
 * the count. */
static size_t plan_add_part(struct engine *e, const struct part *p,
                            int64_t t_start, int64_t t_end)
{
    struct engine_plan *pl = &e->plan;
    size_t n = 0;

    for (size_t j = 0; j < p->n_recs; j++) {
        const struct brec *b = &p->recs[j];

        if (!in_window(b, t_start, t_end)) {
            continue;
        }
        pl->min_ts = min64(pl->min_ts, b->ts);
        pl->max_ts = max64(pl->max_ts, b->ts);
        pl->bytes_estimate += b->weight;
        n++;
    }
    return n;
}

/* The positions after the window of every partition it touches (records
 * or lost ranges), sorted by name, for its manifest: the last checkpoint
 * and the manifests after it give exact positions at the commit pointer
 * (engine.h (5)). Runs after plan_take_lost(): the planned ranges no
 * longer hold the positions back. */
static void plan_positions(struct engine *e, int64_t t_start, int64_t t_end)
{
    size_t n = e->plan_np + e->plan_n_lost;
    struct engine_position *v = xcalloc(n + 1, sizeof(*v));
    size_t at = 0;

    for (size_t i = 0; i < e->plan_np; i++) {
        part_position(e->plan_parts[i], t_start, t_end, &v[at++]);
    }
    for (size_t i = 0; i < e->plan_n_lost; i++) {
        const struct engine_lost_range *l = &e->plan_lost[i];
        const struct part *p = find_part(e, l->partition);

        if (p != NULL) {
            part_position(p, t_start, t_end, &v[at++]);
        } else { /* not tracked any more: past the range */
            v[at++] =
                (struct engine_position){l->partition, l->to + 1, {"", 0}};
        }
    }
    if (at > 1) {
        qsort(v, at, sizeof(*v), position_cmp);
    }
    n = 0;
    for (size_t i = 0; i < at; i++) { /* one per name */
        if (n > 0 &&
            slice_eq(v[n - 1].name.ptr, v[n - 1].name.len, v[i].name)) {
            continue;
        }
        v[n++] = v[i];
    }
    e->plan_pos = v;
    e->plan_n_pos = n;
}

/* Records of [t_start, t_end) in (partition, incarnation, offset) order. */
static void build_plan(struct engine *e, int64_t k, int64_t t_start,
                       int64_t t_end)
{
    struct part **v;
    size_t n_rec;
    size_t np;
    struct engine_plan *pl = &e->plan;
    size_t at = 0;

    free_plan(e);
    np = plan_parts(e, t_start, t_end, &v, &n_rec);
    pl->min_ts = INT64_MAX;
    pl->max_ts = ENGINE_MIN;
    for (size_t i = 0; i < np; i++) {
        at += plan_add_part(e, v[i], t_start, t_end);
    }
    ASSERT(at == n_rec);
    e->plan_parts = v; /* engine_plan_read() walks them */
    e->plan_np = np;
    plan_take_lost(e);
    plan_positions(e, t_start, t_end);
    pl->k = k;
    pl->t_start = t_start;
    pl->t_end = t_end;
    pl->n_records = at;
    pl->lost = e->plan_lost;
    pl->n_lost = e->plan_n_lost;
    pl->positions = e->plan_pos;
    pl->n_positions = e->plan_n_pos;
    pl->partitions = np;
    if (at == 0) {
        pl->min_ts = ENGINE_MIN;
        pl->max_ts = ENGINE_MIN;
    }
}

/* ---- Close rules (docs/design/window.md §9) ----------------------------- */

struct stamp_weight {
    int64_t ts;
    uint64_t weight;
};

static uint64_t weight_below(const struct engine *e, int64_t cap)
{
    uint64_t w = 0;

    for (size_t i = 0; i < e->n_active; i++) {
        const struct part *p = e->active[i];

        for (size_t j = 0; j < p->n_recs; j++) {
            w += p->recs[j].ts < cap ? p->recs[j].weight : 0;
        }
    }
    return w;
}

static int64_t median3(int64_t a, int64_t b, int64_t c)
{
    if (a > b) {
        int64_t t = a;
        a = b;
        b = t;
    }
    return c <= a ? a : (c >= b ? b : c);
}

/* What split3() made of the stamps: lo below the pivot, then eq equal to
 * it, weighing w_lo and w_eq. */
struct split {
    size_t lo;
    size_t eq;
    uint64_t w_lo;
    uint64_t w_eq;
};

/* Split v[0..n) around the stamp pivot: below it first, then equal, then
 * above; returns the counts and weights of the first two groups. */
static struct split split3(struct stamp_weight *v, size_t n, int64_t pivot)
{
    struct split sp = {0, 0, 0, 0};
    size_t a = 0; /* v[0..a) below */
    size_t b = 0; /* v[a..b) equal */
    size_t c = n; /* v[c..n) above; v[b..c) not looked at */

    while (b < c) {
        struct stamp_weight x = v[b];
        if (x.ts < pivot) {
            sp.w_lo += x.weight;
            v[b++] = v[a];
            v[a++] = x;
        } else if (x.ts == pivot) {
            sp.w_eq += x.weight;
            b++;
        } else {
            v[b] = v[--c];
            v[c] = x;
        }
    }
    sp.lo = a;
    sp.eq = b - a;
    return sp;
}

/* The least stamp s of v[0..n) with weight(stamps < s) >= target, or none
 * (returns none): a selection, not a sort. Each round splits the stamps
 * still in question around a pivot (the median of three) and keeps the
 * side where s lies: below the pivot when the weight below it reaches the
 * target already (the pivot is then the answer unless a smaller stamp
 * is), above it otherwise, less what the pivot and below it weigh. Linear
 * on average; v is reordered. */
static int64_t least_stamp_reaching(struct stamp_weight *v, size_t n,
                                    uint64_t target, int64_t none)
{
    int64_t best = none;

    while (n > 0) {
        struct split sp;

        if (target == 0) { /* every stamp here reaches: the least */
            int64_t m = v[0].ts;
            for (size_t i = 1; i < n; i++) {
                m = v[i].ts < m ? v[i].ts : m;
            }
            return m;
        }
        sp = split3(v, n, median3(v[0].ts, v[n / 2].ts, v[n - 1].ts));
        if (sp.w_lo >= target) {
            best = v[sp.lo].ts; /* the pivot */
            n = sp.lo;
        } else {
            target -= sp.w_lo + sp.w_eq < target ? sp.w_lo + sp.w_eq : target;
            v += sp.lo + sp.eq;
            n -= sp.lo + sp.eq;
        }
    }
    return best;
}

#define SIZE_BUCKETS 4096 /* stamp buckets of size_point's first cut */

/* The first record stamp t at which the weight of the records below t
 * reaches the target; cap when no stamp does (they all share the last one).
 * That is the least stamp t above the least one with weight(< t) >= target
 * (target_bytes >= 1, so the least stamp never qualifies itself).
 *
 * Hundreds of thousands of records may be buffered below cap, so no sort:
 * the records' stamps go into SIZE_BUCKETS equal ranges, with their weight
 * and least stamp; the bucket where the running weight reaches the target
 * holds t, or else t is the least stamp of the next bucket that has any.
 * Only that bucket's records are copied out, for least_stamp_reaching(). */
static int64_t size_point(const struct engine *e, int64_t cap)
{
    uint64_t *w = xcalloc(SIZE_BUCKETS, sizeof(*w));
    int64_t *least = xmalloc(SIZE_BUCKETS * sizeof(*least));
    size_t *count = xcalloc(SIZE_BUCKETS, sizeof(*count));
    struct stamp_weight *v;
    int64_t lo = INT64_MAX;
    int64_t hi = INT64_MIN;
    uint64_t width;
    uint64_t below = 0;
    size_t j = 0;
    size_t n = 0;
    int64_t next = cap;
    int64_t t = cap;

    for (size_t i = 0; i < e->n_active; i++) {
        const struct part *p = e->active[i];

        for (size_t k = 0; k < p->n_recs; k++) {
            int64_t ts = p->recs[k].ts;
            if (ts < cap) {
                lo = ts < lo ? ts : lo;
                hi = ts > hi ? ts : hi;
            }
        }
    }
    if (lo > hi) { /* nothing below cap */
        goto done;
    }
    width = ((uint64_t)hi - (uint64_t)lo) / SIZE_BUCKETS + 1;
    for (size_t i = 0; i < SIZE_BUCKETS; i++) {
        least[i] = INT64_MAX;
    }
    for (size_t i = 0; i < e->n_active; i++) {
        const struct part *p = e->active[i];

        for (size_t k = 0; k < p->n_recs; k++) {
            int64_t ts = p->recs[k].ts;
            if (ts < cap) {
                size_t b = (size_t)(((uint64_t)ts - (uint64_t)lo) / width);
                w[b] += p->recs[k].weight;
                least[b] = ts < least[b] ? ts : least[b];
                count[b]++;
            }
        }
    }
    while (j < SIZE_BUCKETS && below + w[j] < e->cfg.target_bytes) {
        below += w[j++];
    }
    if (j == SIZE_BUCKETS) { /* the whole weight is under the target */
        goto done;
    }
    for (size_t b = j + 1; b < SIZE_BUCKETS; b++) {
        if (count[b] > 0) {
            next = least[b];
            break;
        }
    }
    v = xmalloc(count[j] * sizeof(*v));
    for (size_t i = 0; i < e->n_active; i++) {
        const struct part *p = e->active[i];

        for (size_t k = 0; k < p->n_recs; k++) {
            int64_t ts = p->recs[k].ts;
            if (ts < cap &&
                ((uint64_t)ts - (uint64_t)lo) / width == (uint64_t)j) {
                v[n].ts = ts;
                v[n].weight = p->recs[k].weight;
                n++;
            }
        }
    }
    /* below < target: no stamp of an earlier bucket reaches it */
    t = least_stamp_reaching(v, n, e->cfg.target_bytes - below, next);
    free(v);
done:
    free(w);
    free(least);
    free(count);
    return t;
}

enum close_step { CLOSE_STOP, CLOSE_CLOSED, CLOSE_SKIPPED };

struct close_bounds {
    int64_t c_safe;   /* complete_pass_safe - guard: (2) */
    int64_t frontier; /* min_frontier: (3) */
};

static void close_window(struct engine *e, int64_t k, int64_t t_start,
                         int64_t t_end, enum engine_state next)
{
    build_plan(e, k, t_start, t_end);
    e->state = next;
    e->is_action_out = false;
    e->is_plan_forced = e->is_forced;
    e->is_forced = false;
    e->stats.windows_closed++;
}

/* Step t_prev over empty aligned stretches: to the next boundary, or with
 * nothing buffered at all straight to the last boundary below the caps (an
 * idle queue back from a long quiet spell skips them in one step). */
static void skip_empty(struct engine *e, const struct close_bounds *b,
                       int64_t boundary, bool has_min)
{
    int64_t unit = align_unit(e);
    int64_t last = isotime_floor(min64(b->c_safe, b->frontier), unit);
    uint64_t n = 1;

    if (!has_min && last > boundary) {
        n += (uint64_t)((last - boundary) / unit);
        boundary = last;
    }
    e->t_prev = boundary;
    e->t_filter = boundary;
    e->stats.boundaries_skipped += n;
}

static enum close_step close_step(struct engine *e,
                                  const struct close_bounds *b)
{
    int64_t unit = align_unit(e);
    int64_t min_ts = 0;
    bool has_min = min_buffered_ts(e, &min_ts);
    int64_t t_start = e->t_prev;
    int64_t ac = 0;
    bool has_ac = align_cap(e, &ac);
    int64_t cap = min64(b->c_safe, b->frontier);
    int64_t t_end;
    bool is_size = false;
    bool is_aligned;
    bool is_aged;
    bool has_lost = e->n_lost > 0;

    if (t_start == ENGINE_MIN) { /* first window under earliest */
        if (has_min) {
            t_start = unit == 0 ? min_ts : isotime_floor(min_ts, unit);
        } else if (has_lost && cap != ENGINE_MIN && cap != INT64_MAX) {
            /* lost ranges alone: a window that ends where it may */
            t_start = unit == 0 ? sat_sub(cap, e->cfg.max_window_us)
                                : isotime_floor(sat_sub(cap, 1), unit);
        } else {
            return CLOSE_STOP;
        }
    }
    cap = has_ac ? min64(cap, ac) : cap;
    if (cap <= t_start) {
        return CLOSE_STOP;
    }
    t_end = cap;
    if (e->total_buffered >= e->cfg.target_bytes &&
        weight_below(e, cap) >= e->cfg.target_bytes) {
        t_end = size_point(e, cap);
        is_size = true;
    }
    is_aligned = has_ac && cap == ac;
    is_aged = sat_sub(e->complete_pass_safe, t_start) >= e->cfg.max_window_us;
    if (!is_size && !is_aligned && !is_aged && !e->is_forced) {
        return CLOSE_STOP;
    }
    if ((!has_min || min_ts >= t_end) && !has_lost) {
        if (is_aligned && !is_size) { /* (6): step over an empty stretch */
            skip_empty(e, b, t_end, has_min);
            return CLOSE_SKIPPED;
        }
        return CLOSE_STOP; /* (6) */
    }
    /* (5), (6): a window of lost ranges alone closes as one with records
     * would, so a loss reaches the bucket within one max window age even
     * when no record follows it. */
    close_window(e, e->committed_k + 1, t_start, t_end, ENGINE_INTENT);
    return CLOSE_CLOSED;
}

static bool try_close(struct engine *e)
{
    struct close_bounds b;

    if (e->state != ENGINE_FILLING || !e->is_t_prev_known ||
        !e->has_complete_pass) {
        return false;
    }
    b.c_safe = sat_sub(e->complete_pass_safe, e->cfg.guard_us);
    b.frontier = min_frontier(e);
    if (e->has_redo) { /* the intent fixed the bounds: wait, then rebuild */
        if (b.c_safe < e->redo.t_end || b.frontier < e->redo.t_end) {
            return false;
        }
        close_window(e, e->redo.k, e->redo.t_start, e->redo.t_end,
                     ENGINE_UPLOAD);
        return true;
    }
    for (int i = 0; i < ENGINE_MAX_CLOSE; i++) {
        enum close_step s = close_step(e, &b);

        if (s != CLOSE_SKIPPED) {
            return s == CLOSE_CLOSED;
        }
    }
    return false;
}

void engine_force_close(struct engine *e)
{
    e->is_forced = true;
    slab_set_tight(&e->slabs, true);
    slab_spares_free(&e->slabs, 0);
}

bool engine_begin_drain(struct engine *e)
{
    int64_t lag = 0;
    bool is_aged = engine_lag(e, &lag) && lag >= e->cfg.drain_min_lag_us;
    /* Under `latest` with nothing committed yet, any buffered record is
     * worth a window: the next engine starts at this one's T_0 only when
     * the driver recorded it (its start row, which a KV outage can delay),
     * else at its own first safeTime, past whatever this one buffered. */
    bool is_first_latest = e->cfg.start == ENGINE_START_LATEST &&
                           e->committed_k == 0 && !e->has_redo &&
                           e->total_buffered > 0;
    bool is_worth = e->total_buffered >= e->cfg.drain_min_bytes ||
                    (is_aged && e->total_buffered > 0) || e->n_lost > 0 ||
                    is_first_latest;

    e->is_draining = true;
    if (is_worth) {
        e->is_forced = true;
    }
    return is_worth;
}

/* ---- Commit sequence (docs/design/protocol.md §6) ----------------------- */

void engine_on_intent_written(struct engine *e)
{
    if (e->state == ENGINE_INTENT) {
        e->state = ENGINE_UPLOAD;
        e->is_action_out = false;
    }
}

void engine_on_uploaded(struct engine *e, uint64_t records, uint64_t bytes)
{
    if (e->state != ENGINE_UPLOAD) {
        return;
    }
    memset(&e->commit, 0, sizeof(e->commit));
    e->commit.k = e->plan.k;
    e->commit.t_end = e->plan.t_end;
    e->commit.records = records;
    e->commit.bytes = bytes;
    e->state = ENGINE_COMMIT;
    e->is_action_out = false;
}

bool engine_on_manifest_found(struct engine *e, int64_t k,
                              struct slice manifest_key, uint64_t records,
                              uint64_t bytes)
{
    if (!e->has_redo || e->redo.k != k || e->state != ENGINE_FILLING) {
        return false;
    }
    free_plan(e);
    e->plan.k = k;
    e->plan.t_start = e->redo.t_start;
    e->plan.t_end = e->redo.t_end;
    e->plan.min_ts = ENGINE_MIN;
    e->plan.max_ts = ENGINE_MIN;
    e->manifest_key = dup_slice(manifest_key);
    memset(&e->commit, 0, sizeof(e->commit));
    e->commit.k = k;
    e->commit.t_end = e->redo.t_end;
    e->commit.manifest_key = (struct slice){e->manifest_key, manifest_key.len};
    e->commit.records = records;
    e->commit.bytes = bytes;
    e->state = ENGINE_COMMIT;
    e->is_action_out = false;
    return true;
}

/* A record array far larger than what it holds (a quarter or less, above
 * ENGINE_SHRINK_MIN) is cut to twice that: one big window does not pin its
 * arrays for every window after it. */
static void shrink_recs(struct part *p)
{
    size_t want = p->n_recs * 2 < 8 ? 8 : p->n_recs * 2;

    if (p->cap_recs <= ENGINE_SHRINK_MIN || p->cap_recs < 4 * p->n_recs) {
        return;
    }
    if (p->n_recs == 0) {
        free(p->recs);
        p->recs = NULL;
        p->cap_recs = 0;
        return;
    }
    p->recs = xrealloc(p->recs, want * sizeof(*p->recs));
    p->cap_recs = want;
}

/* Forget the records of the committed window. */
static void drop_committed(struct engine *e, int64_t t_end)
{
    /* Backwards, because touch() moves the last active entry into the
     * slot it frees. */
    for (size_t i = e->n_active; i > 0; i--) {
        struct part *p = e->active[i - 1];
        size_t kept = 0;

        for (size_t j = 0; j < p->n_recs; j++) {
            struct brec *b = &p->recs[j];

            if (b->ts < t_end) {
                p->buffered -= b->weight;
                e->total_buffered -= b->weight;
                slab_unref(&e->slabs, b->slab,
                           (size_t)b->txn_len + b->payload_len);
            } else {
                p->recs[kept++] = *b;
            }
        }
        p->n_recs = kept;
        shrink_recs(p);
        touch(e, p);
    }
}

static void move_record(struct engine *e, struct brec *b)
{
    size_t n = (size_t)b->txn_len + b->payload_len;
    struct slab *from = b->slab;
    struct slab *to = slab_for(&e->slabs, n);

    b->data = slab_put(to, b->data, n, NULL, 0);
    b->slab = to;
    slab_unref(&e->slabs, from, n);
}

/* Under the budget, the records a commit left behind move out of the slabs
 * it emptied in part (a forced close cuts through the slabs of its last
 * seconds), so the node holds about the budget's weight, not holes: each
 * hole would stay until the next commit, the moment the budget peaks. No
 * plan or action points at record bytes between a commit and the next
 * close, so the records may move. */
static void compact_slabs(struct engine *e)
{
    if (!e->slabs.is_tight) {
        return;
    }
    for (size_t i = 0; i < e->n_active; i++) {
        struct part *p = e->active[i];

        for (size_t j = 0; j < p->n_recs; j++) {
            if (slab_is_holey(&e->slabs, p->recs[j].slab)) {
                move_record(e, &p->recs[j]);
                e->stats.records_compacted++;
            }
        }
    }
}

static bool is_seek_slot_of(const struct engine *e, const struct part *p)
{
    for (size_t i = 0; i < e->cfg.fetch_concurrency; i++) {
        if (e->seeks[i].is_used && e->seeks[i].part == p) {
            return true;
        }
    }
    return false;
}

/* Partitions nothing moved in for prune_after_windows windows and two
 * passes (a page that names one without a change does not count), idle and
 * empty, caught up with no loss pending, are pruned: their position goes
 * dormant (see "Pruned partitions"). */
static bool is_prunable(const struct engine *e, const struct part *p)
{
    /* Windows alone do not make it stale, passes must too: a size-close
     * backfill commits many windows without a pass (the pass that moved
     * it ends with discoveries = last_seen_pass + 1). */
    bool is_stale = e->committed_k - p->last_seen_k >=
                        (int64_t)e->cfg.prune_after_windows &&
                    e->stats.discoveries - p->last_seen_pass >= 2;

    /* A later incarnation comes back as the first: with ranges a manifest
     * named for the first (engine_restore_lost()), it stays. */
    return is_stale && !is_active(p) && !p->is_fetching &&
           !is_seek_slot_of(e, p) && p->id != NULL && p->gap_from < 0 &&
           p->lost_floor == INT64_MAX && (p->gen == 0 || e->n_known == 0);
}

static void prune(struct engine *e)
{
    size_t kept = 0;

    for (size_t i = 0; i < e->n_parts; i++) {
        struct part *p = e->parts[i];

        if (!is_prunable(e, p) ||
            !dormant_add(&e->dormant, (struct slice){p->name, p->name_len},
                         (struct slice){p->id, p->id_len}, p->position)) {
            e->parts[kept++] = p;
            continue;
        }
        ASSERT(p->active_at == SIZE_MAX);
        free_part(e, p);
        e->stats.partitions_pruned++;
    }
    if (kept != e->n_parts) {
        e->n_parts = kept;
        table_rebuild(e, e->table.cap);
    }
}

void engine_on_committed(struct engine *e)
{
    int64_t k = e->plan.k;
    uint32_t every = e->cfg.checkpoint_every;
    /* a redo committed from its manifest may carry lost ranges too */
    bool had_lost = e->plan.n_lost > 0 || e->manifest_key != NULL;

    if (e->state != ENGINE_COMMIT) {
        return;
    }
    free_snapshot(e); /* prune() frees partitions */
    e->committed_k = k;
    e->committed_t_end = e->plan.t_end;
    e->t_prev = e->plan.t_end;
    e->t_filter = e->plan.t_end;
    e->is_t_prev_known = true;
    trim_slabs(e, e->is_plan_forced);
    drop_committed(e, e->plan.t_end);
    compact_slabs(e);
    free_plan(e);
    free_redo(e);
    e->stats.windows_committed++;
    e->state = ENGINE_FILLING;
    e->has_discovered_this_window = false;
    prune(e);
    /* A window that carried lost ranges is checkpointed whatever the
     * cadence: a restart then starts past them (never reported twice). A
     * window committed before this run discovered anything (a redo taken
     * from its manifest) gets its checkpoint once the positions are exact;
     * one still waiting for that when a later window commits is dropped. */
    e->is_checkpoint_deferred = false;
    if ((every != 0 && k % every == 0) || had_lost) {
        e->is_checkpoint_pending = e->has_discovered;
        e->is_checkpoint_deferred = !e->has_discovered;
        e->checkpoint_k = k;
        e->checkpoint_t_end = e->t_prev;
        e->last_checkpoint_k = k;
    }
    update_completeness(e);
}

/* ---- Positions (docs/design/window.md §10) ------------------------------ */

static void free_snapshot(struct engine *e)
{
    free(e->snap_parts);
    free(e->snap_dormant);
    free(e->snap_ids);
    e->snap_parts = NULL;
    e->snap_dormant = NULL;
    e->snap_ids = NULL;
    e->n_snap_parts = 0;
    e->n_snap_dormant = 0;
    e->cap_snap_ids = 0;
    e->has_snap = false;
}

/* Checkpoint order (docs/design/formats.md §4): name bytes, then offset,
 * then id. */
static int checkpoint_cmp(const struct engine_position *x,
                          const struct engine_position *y)
{
    int c = name_cmp(x->name.ptr, x->name.len, y->name.ptr, y->name.len);

    if (c != 0) {
        return c;
    }
    if (x->offset != y->offset) {
        return x->offset < y->offset ? -1 : 1;
    }
    return name_cmp(x->id.ptr, x->id.len, y->id.ptr, y->id.len);
}

static int checkpoint_qcmp(const void *a, const void *b)
{
    return checkpoint_cmp(a, b);
}

size_t engine_positions_snapshot(struct engine *e)
{
    free_snapshot(e);
    e->has_snap = true;
    /* The tracked partitions' positions are taken now: the plan a close
     * makes in the same call moves them on (the lost ranges it takes). */
    e->snap_parts = xmalloc((e->n_parts + 1) * sizeof(*e->snap_parts));
    for (size_t i = 0; i < e->n_parts; i++) {
        part_position(e->parts[i], ENGINE_MIN, ENGINE_MIN, &e->snap_parts[i]);
    }
    e->n_snap_parts = e->n_parts;
    if (e->n_snap_parts > 1) {
        qsort(e->snap_parts, e->n_snap_parts, sizeof(*e->snap_parts),
              checkpoint_qcmp);
    }
    /* Pruned partitions too: their positions are exact, and a restart
     * must know them (a trim while it was down is then judged). */
    e->snap_dormant = dormant_sorted(&e->dormant, &e->n_snap_dormant);
    return e->n_snap_parts + e->n_snap_dormant;
}

size_t engine_positions_read(struct engine *e,
                             struct engine_positions_cursor *c,
                             struct engine_position *out, size_t max)
{
    size_t n = 0;

    ASSERT(e->has_snap); /* read after the snapshot, before any answer */
    grow((void **)&e->snap_ids, &e->cap_snap_ids, max * DORMANT_ID_TEXT + 1, 1);
    while (n < max &&
           (c->part < e->n_snap_parts || c->dormant < e->n_snap_dormant)) {
        const struct engine_position *tp = &e->snap_parts[c->part];
        struct engine_position dp;
        bool has_t = c->part < e->n_snap_parts;
        bool has_d = c->dormant < e->n_snap_dormant;

        if (has_d) {
            dormant_get(&e->dormant, e->snap_dormant[c->dormant], &dp.name,
                        &dp.id, e->snap_ids + n * DORMANT_ID_TEXT, &dp.offset);
        }
        if (has_t && (!has_d || checkpoint_cmp(tp, &dp) <= 0)) {
            out[n++] = *tp;
            c->part++;
        } else {
            out[n++] = dp;
            c->dormant++;
        }
    }
    return n;
}

/* ---- Completeness (docs/design/window.md §10) --------------------------- */

static void update_completeness(struct engine *e)
{
    int64_t t;

    if (e->is_t_prev_known && e->t_prev > e->complete_through) {
        e->complete_through = e->t_prev;
    }
    if (e->state != ENGINE_FILLING || e->has_redo || e->total_buffered != 0 ||
        !e->has_complete_pass || !e->is_t_prev_known) {
        return;
    }
    t = min64(sat_sub(e->complete_pass_safe, e->cfg.guard_us), min_frontier(e));
    if (t > e->t_prev && t > e->complete_through) {
        e->complete_through = t;
    }
}

/* ---- Actions ------------------------------------------------------------- */

static struct engine_action *add_action(struct engine *e,
                                        enum engine_action_kind kind)
{
    struct engine_action *a = push_action(&e->acts, &e->n_acts, &e->cap_acts);

    a->kind = kind;
    return a;
}

static void emit_discover(struct engine *e)
{
    struct engine_action *a = add_action(e, ENGINE_ACT_DISCOVER);

    a->u.discover.has_since = !e->is_pass_full;
    a->u.discover.since = e->pass_since;
    a->u.discover.after = (struct slice){e->cursor, e->cursor_len};
    a->u.discover.limit = e->cfg.discovery_limit;
    e->is_page_out = true;
}

static void emit_closing(struct engine *e)
{
    struct engine_action *a;

    if (e->is_action_out) {
        return;
    }
    e->is_action_out = true;
    if (e->state == ENGINE_INTENT) {
        a = add_action(e, ENGINE_ACT_WRITE_INTENT);
        a->u.intent.k = e->plan.k;
        a->u.intent.t_start = e->plan.t_start;
        a->u.intent.t_end = e->plan.t_end;
        a->u.intent.format = str_slice(e->format);
        a->u.intent.compression = str_slice(e->compression);
        a->u.intent.layout = str_slice(e->layout);
        a->u.intent.writer = str_slice(e->writer);
        a->u.intent.plan = &e->plan;
    } else if (e->state == ENGINE_UPLOAD) {
        a = add_action(e, ENGINE_ACT_UPLOAD);
        a->u.upload = &e->plan;
    } else if (e->state == ENGINE_COMMIT) {
        a = add_action(e, ENGINE_ACT_COMMIT);
        a->u.commit = e->commit;
    }
}

static void emit_checkpoint(struct engine *e)
{
    size_t n = engine_positions_snapshot(e);
    struct engine_action *a = add_action(e, ENGINE_ACT_CHECKPOINT);

    a->u.checkpoint.k = e->checkpoint_k;
    a->u.checkpoint.t_end = e->checkpoint_t_end;
    a->u.checkpoint.n = n;
    e->is_checkpoint_pending = false;
}

/* A drain leaves nothing to close: checkpoint the positions at the commit
 * pointer (unless that k has one), so the next owner starts from exact
 * positions and judges a trim made meanwhile precisely (engine.h (5)). */
static void drain_checkpoint(struct engine *e)
{
    if (!e->has_discovered || e->last_checkpoint_k == e->committed_k ||
        e->has_redo) {
        return;
    }
    e->checkpoint_k = e->committed_k;
    e->checkpoint_t_end = e->committed_t_end;
    e->last_checkpoint_k = e->committed_k;
    emit_checkpoint(e);
}

static void fill_actions(struct engine *e)
{
    bool is_quiet;

    if (e->is_loss_checkpoint_due && e->has_discovered) {
        /* A loss was found: checkpoint the positions now (they stop before
         * it; exact for the commit pointer), so a restart before its window
         * commits finds it again, judged as precisely as now. */
        e->is_loss_checkpoint_due = false;
        e->is_checkpoint_pending = true;
        e->checkpoint_k = e->committed_k;
        e->checkpoint_t_end = e->committed_t_end;
        e->last_checkpoint_k = e->committed_k;
    }
    if (e->is_checkpoint_deferred && e->has_discovered &&
        e->has_complete_pass && e->checkpoint_k == e->committed_k &&
        min_frontier(e) >= e->checkpoint_t_end) {
        /* every partition is read past the window's end: the positions
         * split the lake at it exactly, as right after a commit */
        e->is_checkpoint_deferred = false;
        e->is_checkpoint_pending = true;
        e->last_checkpoint_k = e->checkpoint_k;
    }
    if (e->is_checkpoint_pending) {
        emit_checkpoint(e);
    }
    if (try_close(e)) {
        emit_closing(e);
        return;
    }
    if (e->is_draining) {
        drain_checkpoint(e);
        return;
    }
    if (!e->is_page_out && !e->is_pass_active &&
        (!e->has_discovered || !e->has_discovered_this_window)) {
        start_pass(e);
    }
    if (!e->is_page_out && e->is_pass_active) {
        emit_discover(e);
    }
    schedule_seeks(e);
    schedule_fetches(e);
    is_quiet = e->n_tail == 0 && !e->is_page_out && !e->is_pass_active &&
               e->n_calls_out == 0 && e->n_seeks_out == 0;
    if (is_quiet && !e->is_idle_armed) {
        add_action(e, ENGINE_ACT_IDLE)->u.idle_min_wait_ms =
            e->cfg.discovery_interval_ms;
        e->is_idle_armed = true;
    } else if (is_quiet) {
        start_pass(e);
        emit_discover(e);
    }
}

void engine_next_actions(struct engine *e, struct engine_actions *out)
{
    e->has_started = true;
    e->n_acts = 0;
    e->n_tail = 0;
    free_snapshot(e);
    if (e->state == ENGINE_FILLING) {
        fill_actions(e);
    } else if (e->state != ENGINE_FAILED) {
        emit_closing(e);
    }
    if (e->n_tail >
        0) { /* seeks and fetches go last (docs/design/window.md §11) */
        grow((void **)&e->acts, &e->cap_acts, e->n_acts + e->n_tail,
             sizeof(*e->acts));
        memcpy(e->acts + e->n_acts, e->tail, e->n_tail * sizeof(*e->tail));
        e->n_acts += e->n_tail;
    }
    update_completeness(e);
    out->v = e->acts;
    out->n = e->n_acts;
}

/* ---- Status -------------------------------------------------------------- */

enum engine_state engine_state(const struct engine *e)
{
    return e->state;
}

const char *engine_state_name(enum engine_state s)
{
    switch (s) {
    case ENGINE_FILLING:
        return "filling";
    case ENGINE_INTENT:
        return "intent";
    case ENGINE_UPLOAD:
        return "upload";
    case ENGINE_COMMIT:
        return "commit";
    case ENGINE_FAILED:
        return "failed";
    }
    return "unknown";
}

const char *engine_failure(const struct engine *e)
{
    return e->failure;
}

int64_t engine_closing_k(const struct engine *e)
{
    if (e->state == ENGINE_INTENT || e->state == ENGINE_UPLOAD ||
        e->state == ENGINE_COMMIT) {
        return e->plan.k;
    }
    return 0;
}

int64_t engine_committed_k(const struct engine *e)
{
    return e->committed_k;
}

int64_t engine_last_checkpoint_k(const struct engine *e)
{
    return e->last_checkpoint_k;
}

bool engine_t_prev(const struct engine *e, int64_t *t_prev)
{
    *t_prev = e->t_prev;
    return e->is_t_prev_known;
}

int64_t engine_complete_through(const struct engine *e)
{
    return e->complete_through;
}

int64_t engine_safe_time(const struct engine *e)
{
    return e->safe_time;
}

bool engine_lag(const struct engine *e, int64_t *lag_us)
{
    if (e->safe_time == ENGINE_MIN || e->complete_through == ENGINE_MIN) {
        return false;
    }
    *lag_us = max64(0, sat_sub(e->safe_time, e->complete_through));
    return true;
}

uint64_t engine_buffered_bytes(const struct engine *e)
{
    return e->total_buffered;
}

size_t engine_plan_read(const struct engine *e, struct engine_plan_cursor *c,
                        struct sink_record *out, size_t max)
{
    const struct engine_plan *pl = &e->plan;
    size_t n = 0;

    for (; n < max && c->part < e->plan_np; c->part++, c->rec = 0) {
        const struct part *p = e->plan_parts[c->part];
        while (n < max && c->rec < p->n_recs) {
            const struct brec *b = &p->recs[c->rec++];
            if (in_window(b, pl->t_start, pl->t_end)) {
                plan_record(p, b, &out[n++]);
            }
        }
        if (c->rec < p->n_recs) {
            break; /* out is full: go on in this partition next time */
        }
    }
    c->done += n;
    return n;
}

bool engine_is_tight(const struct engine *e)
{
    return e->slabs.is_tight;
}

size_t engine_spare_slabs(const struct engine *e)
{
    return e->slabs.n_spare;
}

uint64_t engine_slab_bytes(const struct engine *e)
{
    return e->slabs.bytes;
}

size_t engine_tracked_partitions(const struct engine *e)
{
    return e->n_parts;
}

size_t engine_dormant_partitions(const struct engine *e)
{
    return dormant_count(&e->dormant);
}

uint64_t engine_tracked_bytes(const struct engine *e)
{
    return e->parts_bytes + e->restored_bytes +
           (e->cap_parts + e->table.cap + e->cap_active) * sizeof(void *) +
           dormant_bytes(&e->dormant);
}

uint64_t engine_discovery_partitions(const struct engine *e)
{
    return e->discovery_partitions;
}

const struct engine_stats *engine_stats(const struct engine *e)
{
    return &e->stats;
}

bool engine_partition_position(const struct engine *e, struct slice name,
                               int64_t *offset, struct slice *id)
{
    const struct part *p = find_part(e, name);

    if (p == NULL) {
        return false;
    }
    *offset = p->position;
    *id = (struct slice){p->id == NULL ? "" : p->id, p->id_len};
    return true;
}
