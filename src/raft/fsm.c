/* The state machine: applies raft commands (raft/cmd.h) to the store, takes
 * and restores snapshots.
 *
 * Why it is shaped like this: libraft hands us one entry at a time and passes
 * the `result` pointer we return to the proposer's raft_apply callback, right
 * after our apply returns, on the same thread. On followers there is no
 * proposer and libraft simply drops the pointer. So the result lives in the
 * fsm and is overwritten by the next apply: no per-entry allocation, nothing
 * to leak on followers.
 *
 * Persistent FSM: the store survives restarts, raft does not know that and
 * replays entries since its last snapshot (on a follower, only once it hears
 * the commit index). Entries at or below meta.applied are skipped (1); every
 * effect commits with the new applied index in one transaction (2).
 *
 * Snapshots (fsm version 3, raft/snapshot.h) are markers: the store, synced
 * past the marker's index, is the state; a full dump in the format of
 * store/store_snapshot.h is made only for a follower (node.c). Full ones
 * and the legacy "QSNAP001" (a compact LMDB copy) still restore. A restore
 * whose applied index is at or below the store's own is skipped: the store
 * is already ahead, and raft's replay after it is skipped by (1); a marker
 * past the store fails (the store lost state the log no longer has). */
#include "raft/fsm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/aead.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "raft/snapshot.h"
#include "store/format.h"
#include "store/schema.h"
#include "store/store_impl.h"

#define SWEEP_PER_ENTRY 64

/* A partition touched by the command being applied. */
struct touched {
    struct slice queue; /* into the entry */
    struct slice name;  /* into the entry */
    struct store_wpart part;
    int32_t dedup_window_seconds;
    bool is_encrypted; /* the queue's encryptionEnabled as applied */
    int64_t first_new; /* first offset appended by this command, -1 none */
    uint64_t weight;   /* of the records appended: sum of max(1, payload) */
};

struct fsm {
    struct store *store;
    struct fsm_result result;
    size_t cap_items;
    struct cmd_push_item *items; /* the command's items, slices borrowed */
    uint32_t *slots;             /* intra-request table: item index + 1 */
    size_t cap_slots;
    struct touched *touched;
    size_t n_touched;
    size_t cap_touched;
    fsm_apply_fn handlers[CMD_TYPE_COUNT];
    void *handler_args[CMD_TYPE_COUNT];
    struct raft *raft; /* for the index of the entry being applied */
    fsm_change_fn on_change;
    void *on_change_arg;
    /* The push entry being applied was applied at store/format.h level 2
     * or above: its unsealed records are flagged plain (is_plain()). */
    bool mark_plain;
    struct err restore_err; /* the last failed restore, code 0 if none */
};

/* Eight bytes a step (byte order does not matter: the table is in memory
 * only and equality decides). The shift folds the high bits, which the
 * multiply fills, back into the low ones the slot mask keeps. */
static uint64_t hash_bytes(uint64_t h, const char *p, size_t n)
{
    size_t i = 0;
    uint64_t v;

    for (; i + 8 <= n; i += 8) {
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 32;
    }
    v = 0;
    if (n > i) {
        memcpy(&v, p + i, n - i);
    }
    h = (h ^ v ^ (uint64_t)n << 56) * 0x9e3779b97f4a7c15ULL;
    return h ^ h >> 29;
}

static bool slice_eq(struct slice a, struct slice b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void ensure_capacity(struct fsm *f, uint32_t n)
{
    size_t slots = 16;

    if (n > f->cap_items) {
        f->items = xrealloc(f->items, n * sizeof(*f->items));
        f->result.items =
            xrealloc(f->result.items, n * sizeof(*f->result.items));
        f->cap_items = n;
    }
    while (slots < (size_t)n * 2) {
        slots *= 2;
    }
    if (slots > f->cap_slots) {
        f->slots = xrealloc(f->slots, slots * sizeof(*f->slots));
        f->cap_slots = slots;
    }
    memset(f->slots, 0, f->cap_slots * sizeof(*f->slots));
    f->n_touched = 0;
}

/* The earlier item with the same (queue, partition, txn), or -1; registers i
 * when there is none. Items with an empty txn never collapse. */
static long intra_leader(struct fsm *f, uint32_t i)
{
    const struct cmd_push_item *it = &f->items[i];
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t mask = f->cap_slots - 1;
    size_t at;

    if (it->txn.len == 0) {
        return -1;
    }
    h = hash_bytes(h, it->queue.ptr, it->queue.len);
    h = hash_bytes(h, it->partition.ptr, it->partition.len);
    h = hash_bytes(h, it->txn.ptr, it->txn.len);
    for (at = h & mask; f->slots[at] != 0; at = (at + 1) & mask) {
        const struct cmd_push_item *o = &f->items[f->slots[at] - 1];

        if (slice_eq(o->queue, it->queue) &&
            slice_eq(o->partition, it->partition) &&
            slice_eq(o->txn, it->txn)) {
            return (long)f->slots[at] - 1;
        }
    }
    f->slots[at] = i + 1;
    return -1;
}

static struct touched *touch(struct fsm *f, struct store_w *w,
                             const struct cmd_push_item *it, struct err *err)
{
    struct store_wqueue q;
    struct touched *t;
    int rc;

    for (size_t i = f->n_touched; i > 0; i--) {
        t = &f->touched[i - 1];
        if (slice_eq(t->name, it->partition) && slice_eq(t->queue, it->queue)) {
            return t;
        }
    }
    if (f->n_touched == f->cap_touched) {
        f->cap_touched = f->cap_touched ? f->cap_touched * 2 : 16;
        f->touched = xrealloc(f->touched, f->cap_touched * sizeof(*t));
    }
    t = &f->touched[f->n_touched];
    /* A partition is created by its first record, not by a duplicate. */
    if (store_wqueue_get(w, it->queue, &q, err) != 0) {
        return NULL;
    }
    rc = store_wpart_find(w, q.id, it->partition, &t->part, err);
    if (rc != 0 && rc != ERR_NOT_FOUND) {
        return NULL;
    }
    t->queue = it->queue;
    t->name = it->partition;
    t->dedup_window_seconds = q.dedup_window_seconds;
    t->is_encrypted = q.is_encrypted;
    t->first_new = -1;
    t->weight = 0;
    f->n_touched++;
    return t;
}

/* 1 when txn is stored in t's queue within its dedup window (row filled),
 * 0 when not, or an ERR_*. */
static int stored_duplicate(struct store_w *w, const struct touched *t,
                            struct store_dedup_key *key,
                            struct store_dedup_row *row, struct err *err)
{
    int rc = store_wdedup_get(w, key, row, err);

    if (rc == ERR_NOT_FOUND) {
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    return row->stamp >= w->stamp - (int64_t)t->dedup_window_seconds * 1000000
               ? 1
               : 0;
}

/* Whether item it, unsealed, is stored flagged plain (never opened as an
 * envelope). At level 2 and above it is, but for the JSON envelope of an
 * encrypted queue: its receiver sealed it in that form because it had not
 * applied the "format" row yet when the entry was proposed (every node
 * receiving pushes runs a build of level 2, but its view of the cluster's
 * level trails the log). Flagged plain, that record would be read back as
 * ciphertext for good; unflagged, readers open it as they open the rows of
 * level 1 (the tag decides). Decided from the queue's options and the
 * bytes, so every node decides alike. */
static bool is_plain(const struct fsm *f, const struct touched *t,
                     const struct cmd_push_item *it)
{
    return !it->sealed && f->mark_plain &&
           !(t->is_encrypted &&
             aead_is_envelope((const uint8_t *)it->payload.ptr,
                              it->payload.len));
}

/* Apply item i: a stored duplicate, or a new record. */
static int push_item(struct fsm *f, struct store_w *w, uint32_t i,
                     struct err *err)
{
    const struct cmd_push_item *it = &f->items[i];
    struct fsm_item_result *r = &f->result.items[i];
    struct store_dedup_row row = {0};
    struct store_dedup_key key;
    struct store_wrecord rec;
    struct touched *t = touch(f, w, it, err);
    int rc = 0;

    if (t == NULL) {
        return err->code;
    }
    if (it->txn.len > 0) {
        store_dedup_key(t->part.queue_id, it->txn, &key);
        rc = stored_duplicate(w, t, &key, &row, err);
    }
    if (rc == 1) {
        r->status = FSM_ITEM_DUPLICATE;
        r->offset = row.offset;
        memcpy(r->message_id, row.message_id, 16);
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    if (t->part.id == 0 &&
        store_wpart_create(w, t->queue, t->name, &t->part, err) != 0) {
        return err->code;
    }
    r->status = FSM_ITEM_QUEUED;
    r->offset = t->part.last_offset + 1;
    memcpy(r->message_id, it->message_id, 16);
    rec =
        (struct store_wrecord){r->offset,   it->message_id, it->txn,
                               it->payload, it->sealed,     is_plain(f, t, it)};
    if (store_wrecord_put(w, t->part.id, &rec, err) != 0) {
        return err->code;
    }
    if (t->first_new < 0) {
        t->first_new = r->offset;
    }
    t->weight += it->payload.len > 1 ? it->payload.len : 1;
    t->part.last_offset = r->offset;
    t->part.last_write_at = w->stamp;
    if (it->txn.len == 0) {
        return 0;
    }
    row = (struct store_dedup_row){r->offset, t->part.id, w->stamp, {0}};
    memcpy(row.message_id, it->message_id, 16);
    return store_wdedup_put(w, &key, &row, t->dedup_window_seconds, err);
}

static int push_finish(struct fsm *f, struct store_w *w, struct err *err)
{
    for (size_t i = 0; i < f->n_touched; i++) {
        struct touched *t = &f->touched[i];

        if (t->part.id == 0 || (t->first_new < 0 && !t->part.created)) {
            continue;
        }
        if (store_wpart_put(w, t->name, &t->part, err) != 0) {
            return err->code;
        }
        if (t->first_new >= 0 &&
            store_wappend_put(w, t->part.id, t->first_new, t->part.last_offset,
                              err) != 0) {
            return err->code;
        }
    }
    return store_wdedup_sweep(w, SWEEP_PER_ENTRY, err);
}

static int apply_push(struct fsm *f, MDB_txn *txn, const struct cmd_header *h,
                      struct err *err)
{
    struct store_w w = {
        .s = f->store, .txn = txn, .tenant = h->tenant, .stamp = h->stamp};
    struct cmd_push_iter it;
    uint32_t n = 0;
    int level;
    int rc = cmd_push_iter_init(&it, h->body, err);

    /* One walk decodes and checks every item before anything is written
     * (a second, checking only, was ~2% of push's CPU). */
    if (rc == 0) {
        ensure_capacity(f, it.count);
        while ((rc = cmd_push_next(&it, &f->items[n], err)) == 1) {
            n++;
        }
    }
    if (rc != 0) {
        f->result.code = ERR_CORRUPT;
        snprintf(f->result.msg, sizeof(f->result.msg), "%.159s", err->msg);
        return 0; /* (3): a no-op every node agrees on */
    }
    /* store/format.h (2): read in this txn, so every node marks alike */
    if (store_format_read(f->store, txn, &level, err) != 0) {
        return err->code;
    }
    f->mark_plain = level >= STORE_FORMAT_SEALED_BINARY;
    f->result.n_items = n;
    for (uint32_t i = 0; i < n; i++) {
        long lead = intra_leader(f, i);
        struct fsm_item_result *r = &f->result.items[i];

        if (lead >= 0) {
            *r = f->result.items[lead];
            if (r->status != FSM_ITEM_ERROR) {
                r->status = FSM_ITEM_DUPLICATE;
            }
            continue;
        }
        if ((rc = push_item(f, &w, i, err)) != 0) {
            return rc;
        }
    }
    return push_finish(f, &w, err);
}

static int apply_cmd(struct fsm *f, MDB_txn *txn, const void *p, size_t len,
                     int64_t *stamp, struct err *err)
{
    struct cmd_header h;
    struct err derr = {0};

    if (cmd_decode_header(p, len, &h, &derr) != 0) {
        f->result.code = ERR_CORRUPT;
        snprintf(f->result.msg, sizeof(f->result.msg), "%.159s", derr.msg);
        log_warn("fsm", "entry %" PRIu64 " is not a command: %s",
                 f->result.index, derr.msg);
        return 0; /* (3) */
    }
    f->result.type = h.type;
    f->result.stamp = h.stamp;
    *stamp = h.stamp;
    switch (h.type) {
    case CMD_NOOP:
        return 0;
    case CMD_PUSH:
        return apply_push(f, txn, &h, err);
    default:
        if (f->handlers[h.type] != NULL) {
            return f->handlers[h.type](f->handler_args[h.type], f->store, txn,
                                       &h, &f->result, err);
        }
        f->result.code = ERR_INVALID;
        snprintf(f->result.msg, sizeof(f->result.msg),
                 "unsupported command type %s", cmd_type_name(h.type));
        return 0;
    }
}

/* The change hook, after the entry committed: the partitions the push
 * appended to (touched, with first_new set), or the tenant of a retention
 * entry. p is the entry (the touched slices point into it). */
static void fsm_notify(struct fsm *f, const void *p, size_t len)
{
    struct cmd_header h;
    struct err err;

    if (f->on_change == NULL ||
        (f->result.type != CMD_PUSH && f->result.type != CMD_RETENTION) ||
        f->result.code != 0 || cmd_decode_header(p, len, &h, &err) != 0) {
        return;
    }
    if (h.type == CMD_RETENTION) {
        f->on_change(f->on_change_arg, h.tenant, NULL, NULL, 0);
        return;
    }
    for (size_t i = 0; i < f->n_touched; i++) {
        const struct touched *t = &f->touched[i];

        if (t->first_new >= 0) {
            f->on_change(f->on_change_arg, h.tenant, &t->queue, &t->name,
                         t->weight);
        }
    }
}

int fsm_apply_entry(struct fsm *f, uint64_t index, const void *p, size_t len,
                    const struct fsm_result **res, struct err *err)
{
    MDB_txn *txn;
    int64_t stamp = 0;
    uint64_t next_queue = f->store->next_queue;
    uint64_t next_part = f->store->next_part;

    *res = NULL;
    if (index <= store_applied_index(f->store)) {
        return 0; /* (1) */
    }
    memset(&f->result, 0, offsetof(struct fsm_result, items));
    f->result.index = index;
    f->result.type = -1;
    if (store_wbegin(f->store, &txn, err) != 0) {
        return err->code;
    }
    if (apply_cmd(f, txn, p, len, &stamp, err) != 0) {
        store_wabort(f->store, txn);
        goto out_restore;
    }
    if (store_wcommit(f->store, txn, index, stamp, err) != 0) {
        goto out_restore;
    }
    *res = &f->result;
    fsm_notify(f, p, len);
    return 0;
out_restore:
    /* The counters moved for rows that were rolled back. */
    f->store->next_queue = next_queue;
    f->store->next_part = next_part;
    return err_wrap(err, "apply entry %" PRIu64, index);
}

static int fsm_raft_apply(struct raft_fsm *rf, const struct raft_buffer *buf,
                          void **result)
{
    struct fsm *f = rf->data;
    const struct fsm_result *res;
    struct err err = {0};
    /* libraft does not pass the index; it applies entry last_applied + 1
     * and advances last_applied after we return (barriers and
     * configuration entries advance it without reaching us). */
    uint64_t index = f->raft != NULL ? f->raft->last_applied + 1
                                     : store_applied_index(f->store) + 1;

    if (fsm_apply_entry(f, index, buf->base, buf->len, &res, &err) != 0) {
        log_error("fsm", "%s", err.msg);
        *result = NULL;
        return RAFT_IOERR;
    }
    *result = res != NULL ? &f->result : NULL;
    return 0;
}

/* Take a snapshot on the calling thread (tests; raft uses the async path). */
int fsm_snapshot_take(struct fsm *f, struct raft_buffer *b, struct err *err)
{
    return snapshot_take(f->store, b, err);
}

/* Restore from snapshot bytes; skipped when the store is already at or past
 * the snapshot's index. */
int fsm_snapshot_restore(struct fsm *f, const void *p, size_t len,
                         struct err *err)
{
    return snapshot_restore(f->store, p, len, err);
}

/* Loop thread: pin the state; snapshot.c does the rest off the loop. */
static int fsm_raft_snapshot(struct raft_fsm *rf, struct raft_buffer *bufs[],
                             unsigned *n_bufs)
{
    struct fsm *f = rf->data;

    return snapshot_begin(f->store, bufs, n_bufs);
}

static int fsm_raft_restore(struct raft_fsm *rf, struct raft_buffer *buf)
{
    struct fsm *f = rf->data;
    struct err err = {0};

    if (fsm_snapshot_restore(f, buf->base, buf->len, &err) == 0) {
        raft_free(buf->base); /* ours on success */
        if (f->on_change != NULL) {
            f->on_change(f->on_change_arg, NULL, NULL, NULL, 0);
        }
        return 0;
    }
    f->restore_err = err;
    /* A store behind a marker is the node's to report: at boot it is the
     * one line the node refuses to start with (node_start). */
    if (err.code != ERR_PRECONDITION) {
        log_error("fsm", "restore: %s", err.msg);
    }
    return RAFT_IOERR;
}

struct fsm *fsm_new(struct store *store, struct raft_fsm *out)
{
    struct fsm *f = xcalloc(1, sizeof(*f));

    f->store = store;
    memset(out, 0, sizeof(*out));
    out->version = 3;
    out->data = f;
    out->apply = fsm_raft_apply;
    out->snapshot = fsm_raft_snapshot;
    out->restore = fsm_raft_restore;
    out->snapshot_finalize = snapshot_raft_finalize;
    out->snapshot_async = snapshot_raft_async;
    return f;
}

void fsm_free(struct fsm *f)
{
    if (f == NULL) {
        return;
    }
    free(f->items);
    free(f->result.items);
    free(f->slots);
    free(f->touched);
    free(f);
}

void fsm_set_handler(struct fsm *f, int type, fsm_apply_fn fn, void *arg)
{
    ASSERT(type > CMD_PUSH && type < CMD_TYPE_COUNT);
    if (type > CMD_PUSH && type < CMD_TYPE_COUNT) {
        f->handlers[type] = fn;
        f->handler_args[type] = arg;
    }
}

void fsm_on_change(struct fsm *f, fsm_change_fn fn, void *arg)
{
    f->on_change = fn;
    f->on_change_arg = arg;
}

const struct err *fsm_restore_error(const struct fsm *f)
{
    return f->restore_err.code != 0 ? &f->restore_err : NULL;
}

void fsm_attach_raft(struct fsm *f, struct raft *r)
{
    f->raft = r;
}

int64_t fsm_greatest_stamp(const struct fsm *f)
{
    return atomic_load(&f->store->safe_time);
}
