/* A simulated broker for the window engine's tests (docs/design/scenarios.md
 * §1): push records with stamps, advance safeTime, and answer the engine's
 * actions with the broker's semantics (docs/design/http-api.md §3, §4):
 * creation-order paging with `p|<seq>` cursors, the since filter,
 * logStart/highWatermark, OFFSET_OUT_OF_RANGE, the first record always
 * delivered, maxBytes, retention trims, offsets that vanish inside a read, and
 * partitions deleted and created again (a new id, offsets from 0).
 *
 * It also keeps the books for the "exactly once" checker: every committed
 * plan's records, the windows' bounds, and safeTime at each close. */
#ifndef QUEEN_TESTS_ENGINE_SIM_H
#define QUEEN_TESTS_ENGINE_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "sink/engine.h"
#include "sink/seek.h"

/* Every helper is static; a test binary uses some of them. */
#define SIM_API static __attribute__((unused))

#define SIM_T0  1788480000000000LL /* 2026-09-04T00:00:00Z */
#define SIM_MS  1000LL
#define SIM_SEC 1000000LL
#define SIM_MIN (60 * SIM_SEC)
#define SIM_H   (3600 * SIM_SEC)

#define SIM_LONG_MAX 4096 /* longest payload; over 95 bytes, all 'x' */

struct sim_rec {
    int64_t ts;
    bool is_gone; /* vanished without moving logStart (an offset jump) */
    char txn[32];
    char payload[96]; /* short payloads: '"' 'x'... '"' */
    size_t payload_len;
};

/* The bytes of r's payload: its own when short, else a shared run of 'x'
 * (many records of kilobytes without as many kilobytes of sim). */
SIM_API const char *sim_payload(const struct sim_rec *r)
{
    static char x[SIM_LONG_MAX];

    if (r->payload_len < sizeof(r->payload)) {
        return r->payload;
    }
    if (x[0] != 'x') {
        memset(x, 'x', sizeof(x));
    }
    return x;
}

struct sim_part {
    char name[64];
    char id[48];
    uint64_t seq; /* creation order, the cursor's pid */
    bool is_deleted;
    int64_t log_start;
    int64_t last_write_at;
    struct sim_rec *recs; /* offset = index */
    size_t n;
    size_t cap;
};

/* One committed window as the books keep it. */
struct sim_window {
    int64_t k;
    int64_t t_start;
    int64_t t_end;
    int64_t safe_at_close;
    size_t n_records;
    size_t n_lost;
    uint64_t lost_records;
    size_t partitions;
    uint64_t bytes;
};

struct sim_fetch_out { /* a Fetch action not answered yet */
    uint64_t call_id;
    size_t n;
    struct engine_fetch_entry entries[1024];
    char names[1024][64];
};

struct sim {
    struct engine *e;
    struct engine_config cfg;
    struct sim_part *parts;
    size_t n_parts;
    size_t cap_parts;
    size_t *ht; /* name -> index + 1 of the latest incarnation */
    size_t ht_cap;
    uint64_t next_seq;
    int64_t max_stamp;
    int64_t clock;       /* the broker's "now of the last entry" */
    int64_t served_safe; /* the greatest safeTime a page carried */
    bool is_queue_unknown;
    int64_t idle_advance_us;      /* each Idle moves the clock by this much */
    size_t max_records_per_entry; /* 0 = the broker's 10000 */
    /* One-shot fetch error for the entry naming this partition. */
    char fail_partition[64];
    enum engine_answer_error fail_kind;
    int fail_times;
    bool is_holding_fetches; /* queue Fetch actions instead of answering */
    struct sim_fetch_out held[8];
    size_t n_held;
    bool is_dropping_idle; /* answer Idle by not sleeping (random mode) */
    uint64_t upload_bytes; /* bytes the "driver" reports; 0 = estimate */

    /* Books. */
    struct sim_window windows[4096];
    size_t n_windows;
    uint8_t **seen; /* per sim part, per offset: times committed */
    size_t *seen_len;
    size_t seen_cap;
    int64_t pending_close_safe;
    struct sink_record *last_plan; /* copy of the last uploaded plan */
    char (*last_plan_names)[64];
    size_t last_plan_n;
    struct engine_lost_range last_lost[64];
    char last_lost_names[64][64];
    size_t last_lost_n;
    int64_t last_plan_min_ts;
    int64_t last_plan_max_ts;
    size_t last_plan_partitions;
    int64_t last_plan_k;
    int64_t last_plan_t_start;
    int64_t last_plan_t_end;
    uint64_t intents;
    uint64_t uploads;
    uint64_t commits;
    uint64_t idles;
    uint64_t discovers;
    uint64_t fetch_calls;
    size_t max_entries_per_call;
    size_t max_calls_in_flight;
    size_t calls_in_flight;
    uint64_t seeks;
    uint64_t checkpoints;
    int64_t checkpoint_ks[64];
    struct engine_position cp_pos[256];
    char cp_names[256][64];
    char cp_ids[256][48];
    size_t cp_n;
    size_t cp_total;             /* positions the last checkpoint had */
    bool cp_in_order;            /* and whether they came in order */
    struct engine_position *pos; /* sim_positions()'s */
    uint64_t peak_buffered;
    int violations;      /* invariant breaches seen by the books */
    int64_t expect_from; /* records below this stamp need not ship */
    unsigned rng;
    /* Called with every plan at upload time, while it is valid. */
    void (*on_plan)(struct sim *s, const struct engine_plan *pl);
    struct sink_record *plan_buf; /* each upload's records, read back */
    size_t plan_buf_cap;
    /* The eager reference (what the engine's plan array held before the
     * engine read plans only lazily): each upload's records read in one
     * call into an array, which the piecewise read must equal record for
     * record, pointers included. On unless a test turns it off. */
    bool eager_plan;
    struct sink_record *eager_buf;
    size_t eager_buf_cap;
    uint64_t plan_hash; /* FNV-1a over every uploaded record, in order */
    int plan_hook_failures;
    struct engine_action pending[64]; /* random mode: answers held back */
    size_t n_pending;
};

SIM_API void sim_test_config(struct engine_config *c)
{
    engine_config_defaults(c);
    c->queue = "orders";
    c->start = ENGINE_START_EARLIEST;
    c->align = ENGINE_ALIGN_NONE;
    c->target_bytes = 100000;
    c->max_window_us = 2 * SIM_SEC;
    c->guard_us = 10 * SIM_MS;
    c->checkpoint_every = 2;
    c->fetch_entries_per_call = 8;
    c->fetch_concurrency = 2;
    c->discovery_limit = 4;
    c->full_sweep_every = 4;
    c->prune_after_windows = 3;
    c->discovery_interval_ms = 100;
    c->format = "jsonl";
    c->compression = "zstd";
    c->layout = "merged";
    c->writer = "queen-s3/test jsonl";
}

SIM_API void sim_init(struct sim *s, const struct engine_config *cfg)
{
    struct err err;

    memset(s, 0, sizeof(*s));
    s->cfg = *cfg;
    s->max_stamp = INT64_MIN;
    s->clock = 0;
    s->next_seq = 1;
    s->rng = 1;
    s->expect_from = INT64_MIN;
    s->eager_plan = true;
    s->e = engine_new(cfg, &err);
    if (s->e == NULL) {
        fprintf(stderr, "engine_new: %s\n", err.msg);
        abort();
    }
}

/* Forget which records were committed (a crash lost an upload). */
SIM_API void sim_forget_books(struct sim *s)
{
    for (size_t i = 0; i < s->seen_cap; i++) {
        free(s->seen[i]);
    }
    free(s->seen);
    free(s->seen_len);
    s->seen = NULL;
    s->seen_len = NULL;
    s->seen_cap = 0;
}

/* A new engine over the same broker, restored from what a driver read. */
SIM_API void sim_restart(struct sim *s, const struct engine_committed *c,
                         const struct engine_intent *in,
                         const struct engine_checkpoint *cp)
{
    struct err err;

    engine_free(s->e);
    s->e = engine_new(&s->cfg, &err);
    s->calls_in_flight = 0;
    s->n_held = 0;
    s->n_pending = 0;
    if (engine_restore(s->e, c, in, cp, &err) != 0) {
        fprintf(stderr, "sim: restore: %s\n", err.msg);
        abort();
    }
}

SIM_API void sim_free(struct sim *s)
{
    for (size_t i = 0; i < s->n_parts; i++) {
        free(s->parts[i].recs);
    }
    sim_forget_books(s);
    free(s->parts);
    free(s->ht);
    free(s->last_plan);
    free(s->last_plan_names);
    free(s->plan_buf);
    free(s->eager_buf);
    free(s->pos);
    engine_free(s->e);
}

SIM_API unsigned sim_rand(struct sim *s)
{
    s->rng = s->rng * 1103515245u + 12345u;
    return (s->rng >> 16) & 0x7fff;
}

/* safeTime = max(clock, greatest stamp), 0 initially
 * (docs/design/http-api.md §11). */
SIM_API int64_t sim_safe(const struct sim *s)
{
    int64_t m = s->max_stamp == INT64_MIN ? 0 : s->max_stamp;

    return s->clock > m ? s->clock : m;
}

SIM_API void sim_advance(struct sim *s, int64_t t)
{
    if (t > s->clock) {
        s->clock = t;
    }
}

SIM_API size_t sim_hash(const char *name, size_t len)
{
    size_t h = 1469598103934665603ULL;

    for (size_t i = 0; i < len; i++) {
        h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
    }
    return h;
}

/* The live partition of that name: the table maps a name to its latest
 * incarnation (index + 1; 0 = empty slot). */
SIM_API struct sim_part *sim_find(struct sim *s, const char *name, size_t len)
{
    size_t mask = s->ht_cap - 1;

    if (s->ht_cap == 0) {
        return NULL;
    }
    for (size_t i = sim_hash(name, len) & mask; s->ht[i] != 0;
         i = (i + 1) & mask) {
        struct sim_part *p = &s->parts[s->ht[i] - 1];

        if (strlen(p->name) == len && memcmp(p->name, name, len) == 0) {
            return p->is_deleted ? NULL : p;
        }
    }
    return NULL;
}

SIM_API void sim_index_slot(struct sim *s, size_t idx)
{
    const char *name = s->parts[idx].name;
    size_t mask = s->ht_cap - 1;
    size_t i;

    for (i = sim_hash(name, strlen(name)) & mask; s->ht[i] != 0;
         i = (i + 1) & mask) {
        if (strcmp(s->parts[s->ht[i] - 1].name, name) == 0) {
            break; /* a new incarnation replaces the old */
        }
    }
    s->ht[i] = idx + 1;
}

SIM_API void sim_index(struct sim *s, size_t idx)
{
    if (s->n_parts * 2 > s->ht_cap) {
        free(s->ht);
        s->ht_cap = s->ht_cap == 0 ? 1024 : s->ht_cap * 2;
        s->ht = xcalloc(s->ht_cap, sizeof(*s->ht));
        for (size_t j = 0; j < s->n_parts; j++) {
            if (j != idx) {
                sim_index_slot(s, j);
            }
        }
    }
    sim_index_slot(s, idx);
}

SIM_API struct sim_part *sim_create(struct sim *s, const char *name,
                                    int64_t stamp)
{
    struct sim_part *p;

    if (s->n_parts == s->cap_parts) {
        s->cap_parts = s->cap_parts == 0 ? 64 : s->cap_parts * 2;
        s->parts = xrealloc(s->parts, s->cap_parts * sizeof(*s->parts));
    }
    p = &s->parts[s->n_parts++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->seq = s->next_seq++;
    snprintf(p->id, sizeof(p->id), "00000000-0000-4000-8000-%012llx",
             (unsigned long long)p->seq);
    p->last_write_at = stamp;
    sim_index(s, s->n_parts - 1);
    return p;
}

/* One push group: n records of payload_len bytes on partition name, all
 * stamped ts (> every safeTime served, as the broker guarantees). */
SIM_API void sim_push(struct sim *s, const char *name, int n, int64_t ts,
                      size_t payload_len)
{
    struct sim_part *p = sim_find(s, name, strlen(name));

    if (ts <= s->served_safe || ts < s->clock) {
        fprintf(stderr, "sim: push at %lld not above a served safeTime %lld\n",
                (long long)ts, (long long)s->served_safe);
        abort();
    }
    if (p == NULL) {
        p = sim_create(s, name, ts);
    }
    for (int i = 0; i < n; i++) {
        struct sim_rec *r;

        if (p->n == p->cap) {
            p->cap = p->cap == 0 ? (size_t)n : p->cap * 2 + (size_t)n;
            p->recs = xrealloc(p->recs, p->cap * sizeof(*p->recs));
        }
        r = &p->recs[p->n];
        memset(r, 0, sizeof(*r));
        r->ts = ts;
        snprintf(r->txn, sizeof(r->txn), "t%zu-%zu", (size_t)(p - s->parts),
                 p->n);
        r->payload_len =
            payload_len < SIM_LONG_MAX ? payload_len : SIM_LONG_MAX;
        if (r->payload_len < sizeof(r->payload)) { /* else sim_payload() */
            memset(r->payload, 'x', r->payload_len);
        }
        if (r->payload_len >= 2 && r->payload_len < sizeof(r->payload)) {
            r->payload[0] = '"';
            r->payload[r->payload_len - 1] = '"';
        }
        p->n++;
    }
    p->last_write_at = ts;
    s->max_stamp = ts > s->max_stamp ? ts : s->max_stamp;
}

SIM_API void sim_trim(struct sim *s, const char *name, int64_t log_start)
{
    struct sim_part *p = sim_find(s, name, strlen(name));

    p->log_start = log_start;
}

SIM_API void sim_delete(struct sim *s, const char *name)
{
    struct sim_part *p = sim_find(s, name, strlen(name));

    p->is_deleted = true;
}

SIM_API int64_t sim_last_offset(const struct sim_part *p)
{
    return (int64_t)p->n - 1;
}

/* ---- Discovery -------------------------------------------------------- */

SIM_API bool sim_parse_cursor(struct slice c, uint64_t *after)
{
    char tmp[64];
    char *end = NULL;

    *after = 0;
    if (c.len == 0) {
        return true;
    }
    if (c.len < 3 || c.len >= sizeof(tmp) || memcmp(c.ptr, "p|", 2) != 0) {
        return false;
    }
    memcpy(tmp, c.ptr + 2, c.len - 2);
    tmp[c.len - 2] = '\0';
    *after = strtoull(tmp, &end, 10);
    return end != NULL && *end == '\0';
}

SIM_API void sim_answer_discover(struct sim *s, const struct engine_discover *d)
{
    struct engine_partition_info info[1000];
    struct engine_discovery_page pg;
    char next[32];
    uint64_t after;
    struct err err;

    memset(&pg, 0, sizeof(pg));
    pg.safe_time = sim_safe(s);
    s->served_safe =
        pg.safe_time > s->served_safe ? pg.safe_time : s->served_safe;
    pg.partitions = info;
    s->discovers++;
    if (s->is_queue_unknown) {
        pg.error = ENGINE_ANSWER_UNKNOWN;
    } else if (!sim_parse_cursor(d->after, &after)) {
        pg.error = ENGINE_ANSWER_OTHER;
        pg.error_text = SLICE_LIT("BAD_CURSOR");
    } else {
        for (size_t i = 0; i < s->n_parts && pg.n < d->limit; i++) {
            struct sim_part *p = &s->parts[i];
            struct engine_partition_info *in = &info[pg.n];

            if (p->is_deleted || p->seq <= after ||
                (d->has_since && p->last_write_at < d->since)) {
                continue;
            }
            in->name = (struct slice){p->name, strlen(p->name)};
            in->id = (struct slice){p->id, strlen(p->id)};
            in->last_offset = sim_last_offset(p);
            in->log_start = p->log_start;
            in->last_write_at = p->last_write_at;
            pg.n++;
            if (pg.n == d->limit) {
                pg.has_next = true;
                snprintf(next, sizeof(next), "p|%llu",
                         (unsigned long long)p->seq);
                pg.next = (struct slice){next, strlen(next)};
            }
        }
    }
    if (engine_on_discovery_page(s->e, &pg, &err) != 0) {
        fprintf(stderr, "sim: discovery page refused: %s\n", err.msg);
        s->violations++;
    }
}

/* ---- Fetch ------------------------------------------------------------- */

struct sim_fetch_buf {
    struct engine_fetch_result res[1024];
    struct engine_fetched_record recs[20000];
    size_t n_recs;
};

SIM_API void sim_fetch_entry(struct sim *s, const struct engine_fetch_entry *en,
                             struct engine_fetch_result *r,
                             struct sim_fetch_buf *fb)
{
    struct sim_part *p = sim_find(s, en->partition.ptr, en->partition.len);
    size_t limit = s->max_records_per_entry ? s->max_records_per_entry : 10000;
    uint64_t weight = 0;

    memset(r, 0, sizeof(*r));
    r->partition = en->partition;
    r->records = fb->recs + fb->n_recs;
    if (s->is_queue_unknown) {
        r->error = ENGINE_ANSWER_UNKNOWN;
        return;
    }
    if (p != NULL && s->fail_times > 0 &&
        strcmp(p->name, s->fail_partition) == 0) {
        s->fail_times--;
        r->error = s->fail_kind;
        r->error_text = SLICE_LIT("INTERNAL");
        r->high_watermark = (int64_t)p->n;
        r->log_start = p->log_start;
        return;
    }
    if (p == NULL) { /* never written: OOR 0/0 except at offset 0 */
        r->error = en->offset == 0 ? ENGINE_ANSWER_OK
                                   : ENGINE_ANSWER_OFFSET_OUT_OF_RANGE;
        return;
    }
    r->high_watermark = (int64_t)p->n;
    r->log_start = p->log_start;
    if (en->offset < p->log_start || en->offset > (int64_t)p->n) {
        r->error = ENGINE_ANSWER_OFFSET_OUT_OF_RANGE;
        return;
    }
    for (int64_t o = en->offset; o < (int64_t)p->n && r->n < limit; o++) {
        struct sim_rec *sr = &p->recs[o];
        struct engine_fetched_record *fr = &fb->recs[fb->n_recs];
        uint64_t w = sr->payload_len > 0 ? sr->payload_len : 1;

        if (sr->is_gone) {
            continue;
        }
        if (r->n > 0 && weight + w > en->max_bytes) {
            break;
        }
        weight += w;
        fr->offset = o;
        fr->ts = sr->ts;
        fr->txn = (struct slice){sr->txn, strlen(sr->txn)};
        fr->payload = (struct slice){sim_payload(sr), sr->payload_len};
        fb->n_recs++;
        r->n++;
        if (fb->n_recs == 20000) {
            break;
        }
    }
}

SIM_API void sim_answer_fetch(struct sim *s, uint64_t call_id,
                              const struct engine_fetch_entry *entries,
                              size_t n)
{
    static struct sim_fetch_buf fb;
    struct err err;

    fb.n_recs = 0;
    for (size_t i = 0; i < n; i++) {
        sim_fetch_entry(s, &entries[i], &fb.res[i], &fb);
    }
    if (s->calls_in_flight > 0) {
        s->calls_in_flight--;
    }
    if (engine_on_fetch(s->e, call_id, fb.res, n, &err) != 0) {
        fprintf(stderr, "sim: fetch answer refused: %s\n", err.msg);
        s->violations++;
    }
}

SIM_API void sim_hold_fetch(struct sim *s, const struct engine_fetch *f)
{
    struct sim_fetch_out *h = &s->held[s->n_held++];

    h->call_id = f->call_id;
    h->n = f->n;
    for (size_t i = 0; i < f->n; i++) {
        h->entries[i] = f->entries[i];
        snprintf(h->names[i], sizeof(h->names[i]), "%.*s",
                 (int)f->entries[i].partition.len, f->entries[i].partition.ptr);
        h->entries[i].partition =
            (struct slice){h->names[i], f->entries[i].partition.len};
    }
}

/* Answer held call i (and forget it). */
SIM_API void sim_release_fetch(struct sim *s, size_t i)
{
    static struct sim_fetch_out h;

    h = s->held[i];
    s->held[i] = s->held[--s->n_held];
    for (size_t j = 0; j < h.n; j++) {
        h.entries[j].partition.ptr = h.names[j];
    }
    for (size_t j = 0; j < s->n_held; j++) { /* re-point the moved one */
        for (size_t m = 0; m < s->held[j].n; m++) {
            s->held[j].entries[m].partition.ptr = s->held[j].names[m];
        }
    }
    sim_answer_fetch(s, h.call_id, h.entries, h.n);
}

/* ---- Seek ---------------------------------------------------------------- */

SIM_API void sim_answer_seek(struct sim *s, const struct engine_seek *sk)
{
    struct seek k;
    struct err err;
    int64_t off = 0;
    uint32_t mb = 0;
    enum seek_state st;
    struct sim_part *p = sim_find(s, sk->partition.ptr, sk->partition.len);

    s->seeks++;
    seek_init(&k, sk->partition, sk->t, sk->log_start, sk->last_offset, 1);
    while ((st = seek_next(&k, &off, &mb, &err)) == SEEK_PROBE) {
        struct seek_answer a;
        struct seek_probe_record pr;

        memset(&a, 0, sizeof(a));
        a.records = &pr;
        if (p == NULL) {
            a.error = SEEK_ANSWER_UNKNOWN;
        } else if (off < p->log_start || off > (int64_t)p->n) {
            a.error = SEEK_ANSWER_OFFSET_OUT_OF_RANGE;
        } else if (off < (int64_t)p->n) {
            pr.offset = off;
            pr.ts = p->recs[off].ts;
            a.n = 1;
        }
        if (p != NULL) {
            a.high_watermark = (int64_t)p->n;
            a.log_start = p->log_start;
        }
        seek_on_answer(&k, &a);
    }
    engine_on_seek_result(s->e, sk->seek_id, st == SEEK_FOUND, off);
}

/* ---- The commit sequence and the books ---------------------------------- */

SIM_API void sim_mark_seen(struct sim *s, const struct sink_record *r)
{
    size_t idx = 0;
    size_t off = 0;
    struct sim_part *p;

    if (sscanf(r->txn.ptr, "t%zu-%zu", &idx, &off) != 2 || idx >= s->n_parts ||
        (int64_t)off != r->offset) {
        s->violations++;
        return;
    }
    p = &s->parts[idx];
    if (s->seen_cap < s->n_parts) {
        s->seen = xrealloc(s->seen, s->n_parts * sizeof(*s->seen));
        s->seen_len = xrealloc(s->seen_len, s->n_parts * sizeof(size_t));
        for (size_t i = s->seen_cap; i < s->n_parts; i++) {
            s->seen[i] = NULL;
            s->seen_len[i] = 0;
        }
        s->seen_cap = s->n_parts;
    }
    if (off >= s->seen_len[idx]) {
        size_t n = p->n + 1;

        s->seen[idx] = xrealloc(s->seen[idx], n);
        memset(s->seen[idx] + s->seen_len[idx], 0, n - s->seen_len[idx]);
        s->seen_len[idx] = n;
    }
    s->seen[idx][off]++;
}

SIM_API void sim_copy_plan(struct sim *s, const struct engine_plan *pl)
{
    free(s->last_plan);
    free(s->last_plan_names);
    s->last_plan = xcalloc(pl->n_records + 1, sizeof(*s->last_plan));
    s->last_plan_names = xcalloc(pl->n_records + 1, 64);
    for (size_t i = 0; i < pl->n_records; i++) {
        s->last_plan[i] = pl->records[i];
        snprintf(s->last_plan_names[i], 64, "%.*s",
                 (int)pl->records[i].partition.len,
                 pl->records[i].partition.ptr);
        s->last_plan[i].partition = (struct slice){
            s->last_plan_names[i], strlen(s->last_plan_names[i])};
        s->last_plan[i].txn = (struct slice){NULL, 0};
        s->last_plan[i].payload = (struct slice){NULL, 0};
        if (i > 0 && pl->records[i].ts == pl->records[i - 1].ts &&
            pl->records[i].offset == pl->records[i - 1].offset &&
            strcmp(s->last_plan_names[i], s->last_plan_names[i - 1]) == 0) {
            s->violations++; /* the same record twice */
        }
    }
    s->last_plan_n = pl->n_records;
    s->last_lost_n = pl->n_lost < 64 ? pl->n_lost : 64;
    for (size_t i = 0; i < s->last_lost_n; i++) {
        s->last_lost[i] = pl->lost[i];
        snprintf(s->last_lost_names[i], 64, "%.*s",
                 (int)pl->lost[i].partition.len, pl->lost[i].partition.ptr);
        s->last_lost[i].partition = (struct slice){
            s->last_lost_names[i], strlen(s->last_lost_names[i])};
    }
    s->last_plan_min_ts = pl->min_ts;
    s->last_plan_max_ts = pl->max_ts;
    s->last_plan_partitions = pl->partitions;
    s->last_plan_k = pl->k;
    s->last_plan_t_start = pl->t_start;
    s->last_plan_t_end = pl->t_end;
}

static uint64_t sim_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 1099511628211ULL;
    }
    return h;
}

/* The eager reference: the whole plan in one engine_plan_read() call, as
 * the engine's own plan array once held it. NULL unless eager_plan. */
static const struct sink_record *sim_eager_records(struct sim *s,
                                                   const struct engine_plan *pl)
{
    struct engine_plan_cursor c = {0, 0, 0};

    if (!s->eager_plan) {
        return NULL;
    }
    if (s->eager_buf_cap < pl->n_records + 1) {
        s->eager_buf_cap = pl->n_records + 1;
        s->eager_buf =
            xrealloc(s->eager_buf, s->eager_buf_cap * sizeof(*s->eager_buf));
    }
    if (engine_plan_read(s->e, &c, s->eager_buf, pl->n_records) !=
        pl->n_records) {
        s->violations++;
    }
    return s->eager_buf;
}

/* The plan's records as engine_plan_read() gives them (in odd-sized
 * pieces, so its cursor crosses partitions mid-piece), checked against the
 * eager reference (unless turned off) and the plan's count, and hashed
 * into plan_hash. */
SIM_API const struct sink_record *sim_plan_records(struct sim *s,
                                                   const struct engine_plan *pl)
{
    struct engine_plan_cursor c = {0, 0, 0};
    const struct sink_record *eager = sim_eager_records(s, pl);
    size_t n = 0;
    size_t got;

    if (s->plan_buf_cap < pl->n_records + 8) {
        s->plan_buf_cap = pl->n_records + 8;
        s->plan_buf =
            xrealloc(s->plan_buf, s->plan_buf_cap * sizeof(*s->plan_buf));
    }
    while ((got = engine_plan_read(s->e, &c, s->plan_buf + n,
                                   n + 7 <= pl->n_records ? 7 : 8)) > 0) {
        n += got;
        if (n > pl->n_records) {
            break;
        }
    }
    if (n != pl->n_records) {
        s->violations++;
        return s->plan_buf;
    }
    for (size_t i = 0; i < n; i++) {
        const struct sink_record *r = &s->plan_buf[i];
        if (eager != NULL &&
            (r->offset != eager[i].offset || r->ts != eager[i].ts ||
             r->partition.ptr != eager[i].partition.ptr ||
             r->payload.ptr != eager[i].payload.ptr)) {
            s->violations++;
        }
        s->plan_hash =
            sim_fnv(s->plan_hash, r->partition.ptr, r->partition.len);
        s->plan_hash = sim_fnv(s->plan_hash, &r->offset, sizeof(r->offset));
        s->plan_hash = sim_fnv(s->plan_hash, &r->ts, sizeof(r->ts));
        s->plan_hash = sim_fnv(s->plan_hash, r->txn.ptr, r->txn.len);
        s->plan_hash = sim_fnv(s->plan_hash, r->payload.ptr, r->payload.len);
    }
    return s->plan_buf;
}

SIM_API void sim_on_upload(struct sim *s, const struct engine_plan *given)
{
    struct engine_plan copy = *given;
    const struct engine_plan *pl = &copy;

    copy.records = sim_plan_records(s, given);
    struct sim_window *w = &s->windows[s->n_windows];
    uint64_t lost = 0;

    s->uploads++;
    if (pl->t_end > sim_safe(s) - s->cfg.guard_us ||
        (pl->n_records == 0 && pl->n_lost == 0)) {
        s->violations++; /* engine.h (2), (6) */
    }
    for (size_t i = 0; i < pl->n_records; i++) {
        if (pl->records[i].ts < pl->t_start || pl->records[i].ts >= pl->t_end) {
            s->violations++; /* engine.h (1) */
        }
    }
    for (size_t i = 0; i < pl->n_lost; i++) {
        lost += (uint64_t)(pl->lost[i].to - pl->lost[i].from + 1);
    }
    w->k = pl->k;
    w->t_start = pl->t_start;
    w->t_end = pl->t_end;
    w->safe_at_close = sim_safe(s);
    w->n_records = pl->n_records;
    w->n_lost = pl->n_lost;
    w->lost_records = lost;
    w->partitions = pl->partitions;
    w->bytes = pl->bytes_estimate;
    sim_copy_plan(s, pl);
    if (s->on_plan != NULL) {
        s->on_plan(s, pl);
    }
    for (size_t i = 0; i < pl->n_records; i++) {
        sim_mark_seen(s, &pl->records[i]);
    }
    engine_on_uploaded(s->e, pl->n_records,
                       s->upload_bytes ? s->upload_bytes : pl->bytes_estimate);
}

/* Windows tile: the next starts where the last ended, or the stretch in
 * between held no record at all (an empty aligned stretch, stepped over). */
SIM_API bool sim_tiles(const struct sim *s, int64_t prev_end, int64_t start)
{
    if (start < prev_end) {
        return false;
    }
    for (size_t i = 0; i < s->n_parts; i++) {
        for (size_t o = 0; o < s->parts[i].n; o++) {
            int64_t ts = s->parts[i].recs[o].ts;

            if (ts >= prev_end && ts < start) {
                return false;
            }
        }
    }
    return true;
}

SIM_API void sim_on_commit(struct sim *s, const struct engine_commit *c)
{
    struct sim_window *w = &s->windows[s->n_windows];

    s->commits++;
    if (c->manifest_key.len == 0) {
        if (c->k != w->k || c->t_end != w->t_end) {
            s->violations++;
        }
    } else {
        w->k = c->k;
        w->t_end = c->t_end;
        w->t_start = INT64_MIN;
    }
    if (s->n_windows > 0 && w->t_start != INT64_MIN &&
        !sim_tiles(s, s->windows[s->n_windows - 1].t_end, w->t_start)) {
        s->violations++; /* windows tile */
    }
    if (s->n_windows + 1 < sizeof(s->windows) / sizeof(s->windows[0])) {
        s->n_windows++;
    }
    engine_on_committed(s->e);
}

SIM_API void sim_on_checkpoint(struct sim *s,
                               const struct engine_checkpoint_action *c)
{
    if (s->checkpoints < 64) {
        s->checkpoint_ks[s->checkpoints] = c->k;
    }
    s->checkpoints++;
    s->cp_n = 0;
    s->cp_total = 0;
    s->cp_in_order = true;
    /* read a few at a time, as the driver does */
    struct engine_positions_cursor cur = {0, 0};
    struct engine_position v[7];
    size_t n;
    char last[64] = "";
    while ((n = engine_positions_read(s->e, &cur, v, 7)) > 0) {
        for (size_t i = 0; i < n; i++, s->cp_total++) {
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)v[i].name.len,
                     v[i].name.ptr);
            s->cp_in_order &= s->cp_total == 0 || strcmp(last, name) <= 0;
            memcpy(last, name, sizeof(last));
            if (s->cp_n == 256) {
                continue;
            }
            size_t j = s->cp_n++;
            s->cp_pos[j] = v[i];
            memcpy(s->cp_names[j], name, sizeof(name));
            snprintf(s->cp_ids[j], 48, "%.*s", (int)v[i].id.len, v[i].id.ptr);
            s->cp_pos[j].name =
                (struct slice){s->cp_names[j], strlen(s->cp_names[j])};
            s->cp_pos[j].id =
                (struct slice){s->cp_ids[j], strlen(s->cp_ids[j])};
        }
    }
    if (s->cp_total != c->n) {
        s->violations++;
    }
}

/* The checkpoint positions now, all of them, in order (engine memory:
 * valid until the next call into the engine). */
SIM_API void sim_positions(struct sim *s, const struct engine_position **v,
                           size_t *n)
{
    struct engine_positions_cursor cur = {0, 0};
    size_t total = engine_positions_snapshot(s->e);

    free(s->pos);
    s->pos = calloc(total + 1, sizeof(*s->pos));
    *n = engine_positions_read(s->e, &cur, s->pos, total + 1);
    *v = s->pos;
}

/* ---- Driving ------------------------------------------------------------- */

SIM_API void sim_do(struct sim *s, const struct engine_action *a)
{
    switch (a->kind) {
    case ENGINE_ACT_DISCOVER:
        sim_answer_discover(s, &a->u.discover);
        break;
    case ENGINE_ACT_FETCH:
        s->fetch_calls++;
        s->calls_in_flight++;
        if (s->calls_in_flight > s->max_calls_in_flight) {
            s->max_calls_in_flight = s->calls_in_flight;
        }
        if (a->u.fetch.n > s->max_entries_per_call) {
            s->max_entries_per_call = a->u.fetch.n;
        }
        if (s->is_holding_fetches) {
            sim_hold_fetch(s, &a->u.fetch);
        } else {
            sim_answer_fetch(s, a->u.fetch.call_id, a->u.fetch.entries,
                             a->u.fetch.n);
        }
        break;
    case ENGINE_ACT_SEEK:
        sim_answer_seek(s, &a->u.seek);
        break;
    case ENGINE_ACT_WRITE_INTENT:
        s->intents++;
        if (a->u.intent.t_end > sim_safe(s) - s->cfg.guard_us) {
            s->violations++; /* engine.h (2) */
        }
        engine_on_intent_written(s->e);
        break;
    case ENGINE_ACT_UPLOAD:
        sim_on_upload(s, a->u.upload);
        break;
    case ENGINE_ACT_COMMIT:
        sim_on_commit(s, &a->u.commit);
        break;
    case ENGINE_ACT_CHECKPOINT:
        sim_on_checkpoint(s, &a->u.checkpoint);
        break;
    case ENGINE_ACT_IDLE:
        s->idles++;
        if (s->idle_advance_us > 0) {
            sim_advance(s, sim_safe(s) + s->idle_advance_us);
        }
        break;
    }
}

/* One tick: ask for actions and execute them all, in order. Returns the
 * number of actions. The actions array is copied first: answering one may
 * not touch the others' memory, but the engine may be called again. */
SIM_API size_t sim_tick(struct sim *s)
{
    struct engine_actions acts;
    struct engine_action v[64];
    size_t n;

    engine_next_actions(s->e, &acts);
    n = acts.n < 64 ? acts.n : 64;
    memcpy(v, acts.v, n * sizeof(v[0]));
    for (size_t i = 0; i < n; i++) {
        sim_do(s, &v[i]);
    }
    if (engine_buffered_bytes(s->e) > s->peak_buffered) {
        s->peak_buffered = engine_buffered_bytes(s->e);
    }
    return n;
}

/* A tick in random mode: reads (Discover, Fetch, Seek) are held and answered
 * in a random order, Idle is randomly ignored, the rest runs at once. */
SIM_API void sim_tick_random(struct sim *s)
{
    struct engine_actions acts;
    struct engine_action v[64];
    size_t n;

    engine_next_actions(s->e, &acts);
    n = acts.n < 64 ? acts.n : 64;
    memcpy(v, acts.v, n * sizeof(v[0]));
    for (size_t i = 0; i < n; i++) {
        enum engine_action_kind k = v[i].kind;

        if (k == ENGINE_ACT_DISCOVER || k == ENGINE_ACT_FETCH ||
            k == ENGINE_ACT_SEEK) {
            s->pending[s->n_pending++] = v[i];
        } else if (k != ENGINE_ACT_IDLE || sim_rand(s) % 2 == 0) {
            sim_do(s, &v[i]);
        }
    }
    while (s->n_pending > 0 && sim_rand(s) % 3 != 0) {
        size_t i = sim_rand(s) % s->n_pending;
        struct engine_action a = s->pending[i];

        s->pending[i] = s->pending[--s->n_pending];
        sim_do(s, &a);
    }
}

SIM_API void sim_run(struct sim *s, int ticks)
{
    for (int i = 0; i < ticks; i++) {
        sim_tick(s);
    }
}

/* Tick until the number of commits reaches want (or the tick budget ends). */
SIM_API bool sim_run_until_commits(struct sim *s, uint64_t want, int ticks)
{
    for (int i = 0; i < ticks && s->commits < want; i++) {
        sim_tick(s);
    }
    return s->commits >= want;
}

/* Exactly once: every pushed record that is still in its log (not trimmed,
 * not vanished) was committed once, and none more than once. Records of
 * deleted incarnations and trims count only when read. */
SIM_API bool sim_exactly_once(struct sim *s)
{
    bool ok = s->violations == 0;

    for (size_t i = 0; i < s->n_parts; i++) {
        const struct sim_part *p = &s->parts[i];

        for (size_t o = 0; o < p->n; o++) {
            uint8_t n =
                i < s->seen_cap && o < s->seen_len[i] ? s->seen[i][o] : 0;
            bool must = !p->is_deleted && !p->recs[o].is_gone &&
                        (int64_t)o >= p->log_start &&
                        p->recs[o].ts >= s->expect_from;

            if (n > 1 || (must && n != 1)) {
                fprintf(stderr, "  exactly once: %s offset %zu seen %u\n",
                        p->name, o, n);
                ok = false;
            }
        }
    }
    for (size_t w = 1; w < s->n_windows; w++) {
        if (s->windows[w].t_start != INT64_MIN &&
            !sim_tiles(s, s->windows[w - 1].t_end, s->windows[w].t_start)) {
            ok = false;
        }
    }
    return ok;
}

#endif
