/* The store's writer interface, for raft/fsm only (the node loop thread).
 * Readers use store.h. Every function here works inside one write
 * transaction that the fsm opens with store_wbegin() and ends with
 * store_wcommit() or store_wabort(); row layouts are in schema.h. */
#ifndef QUEEN_STORE_STORE_IMPL_H
#define QUEEN_STORE_STORE_IMPL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"
#include "base/err.h"
#include "store/schema.h"
#include "store/store.h"

struct store {
    MDB_env *env;
    MDB_dbi meta, queues, partitions, parts_by_id, records, appends, dedup,
        dedup_exp, kv, kv_expiry, parts_by_write;
    char *dir;
    uint64_t map_size;
    /* Readers hold it shared for one read txn; a snapshot restore holds it
     * exclusively while it swaps the environment. */
    pthread_rwlock_t swap_lock;
    _Atomic uint64_t applied; /* meta "applied" as last committed */
    /* The last transaction store_sync() saw on disk (UINT64_MAX: none yet
     * in this environment); a sync with nothing committed since is skipped. */
    _Atomic uint64_t synced_txn;
    _Atomic int64_t safe_time;
    /* Index rows partitions/changed has stepped over (store_stats()). */
    _Atomic uint64_t changed_rows;
    /* store/format.h: the cluster's level as last read; only rises. */
    _Atomic int format;
    /* Loop thread only: the meta counters as of the open write txn. */
    uint64_t next_queue;
    uint64_t next_part;
    int64_t last_clock;
    /* Test seam: fail the next n commits with MDB_MAP_FULL. */
    int fail_commits;
    /* QUEEN_ENCRYPTION_KEY, set once before the first read
     * (store_set_seal_key); store_fetch opens envelopes with it. */
    bool has_seal_key;
    uint8_t seal_key[32];
    /* store_warm.h: the thread warming the pages past the end, or NULL. */
    struct store_warm *warm;
    /* Bumped by each swap of env, under swap_lock held exclusively: how the
     * warmer knows the file it warmed is gone (the next env may get the
     * same address). */
    uint64_t env_gen;
};

/* A queue as the writer sees it. */
struct store_wqueue {
    uint64_t id;
    int32_t dedup_window_seconds;
    bool is_encrypted; /* its options' encryptionEnabled */
    bool created;      /* created by this call */
};

/* A partition as the writer sees it (the row, decoded). */
struct store_wpart {
    uint64_t queue_id;
    uint64_t id;
    uint8_t uuid[16];
    int64_t log_start;
    int64_t last_offset;
    int64_t last_write_at;
    int64_t created_at;
    bool created;
};

struct store_dedup_row {
    int64_t offset;
    uint64_t partition_id;
    int64_t stamp;
    uint8_t message_id[16];
};

/* One database's cursor for the length of one entry's write (store.c,
 * "Per-entry cursors"). max: a key at or above every key of the database
 * while has_max; set from MDB_LAST when the cursor opens, raised by every
 * insert through it. It only chooses MDB_APPEND (which LMDB checks), never
 * a lookup's answer. */
struct store_wcursor {
    MDB_cursor *c; /* NULL until first use; LMDB frees it at the txn's end */
    bool has_max;  /* false: the database was empty when the cursor opened */
    size_t max_len;
    uint8_t max[SCHEMA_KEY_MAX];
};

/* One entry's write: the store, its write transaction, and the tenant and
 * stamp of the command being applied. Build it with designated initializers
 * ({.s, .txn, .tenant, .stamp}: the cursors start zeroed) and drop it with
 * the transaction: its cursors belong to the transaction, which closes them
 * at commit or abort. Every write of records, dedup and dedup_exp in the
 * transaction goes through the functions below, which use the cursors. */
struct store_w {
    struct store *s;
    MDB_txn *txn;
    const uint8_t *tenant; /* 16 bytes */
    int64_t stamp;
    struct store_wcursor records, dedup, dedup_exp;
};

/* A record to append. Borrowed slices. */
struct store_wrecord {
    int64_t offset;
    const uint8_t *message_id; /* 16 bytes */
    struct slice txn;
    struct slice payload;
    bool sealed; /* payload is base/aead.h's binary form: flags bit 1 */
    /* not sealed, applied at store/format.h level 2 or above: flags bit 2,
     * so no read takes it for an envelope */
    bool plain;
};

int store_wbegin(struct store *s, MDB_txn **txn, struct err *err);
/* Write meta (applied, safe_time = max(old, stamp), last_clock, counters)
 * and commit; publishes applied and safe_time to readers. The txn is gone
 * after the call either way. ERR_FULL on MDB_MAP_FULL, else ERR_IO. */
int store_wcommit(struct store *s, MDB_txn *txn, uint64_t applied,
                  int64_t stamp, struct err *err);
void store_wabort(struct store *s, MDB_txn *txn);

/* Find or create (implicit options, created-at = w->stamp) the queue
 * w->tenant/name. */
int store_wqueue_get(struct store_w *w, struct slice name,
                     struct store_wqueue *q, struct err *err);
/* Create (created-at = w->stamp) or update the queue w->tenant/name with
 * options o (the CONFIGURE owner's writer). Fills q. Keeps the id, uuid,
 * created-at and partition count of an existing queue. */
int store_wqueue_put_options(struct store_w *w, struct slice name,
                             const struct store_queue_options *o,
                             struct store_wqueue *q, struct err *err);
/* Find or create the partition name of queue (queue_name, queue_id); bumps
 * the queue's partition count on create. */
int store_wpart_get(struct store_w *w, struct slice queue_name,
                    uint64_t queue_id, struct slice name, struct store_wpart *p,
                    struct err *err);
/* The partition row only: 0, ERR_NOT_FOUND (p zeroed but queue_id), or
 * ERR_IO. */
int store_wpart_find(struct store_w *w, uint64_t queue_id, struct slice name,
                     struct store_wpart *p, struct err *err);
/* Create partition name of queue (queue_name, p->queue_id): id, uuid,
 * created-at from w; bumps the queue's partition count. */
int store_wpart_create(struct store_w *w, struct slice queue_name,
                       struct slice name, struct store_wpart *p,
                       struct err *err);
int store_wpart_put(struct store_w *w, struct slice name,
                    const struct store_wpart *p, struct err *err);
/* Retention (the RETENTION owner's writer): move p's logStart up to
 * new_log_start (<= lastOffset + 1), deleting the records below it and the
 * append rows that end below it, then write p's row. new_log_start at or
 * below the current logStart changes nothing. */
int store_wtrim(struct store_w *w, struct slice name, struct store_wpart *p,
                int64_t new_log_start, struct err *err);
/* Put a record of partition pid with ts = w->stamp. */
int store_wrecord_put(struct store_w *w, uint64_t pid,
                      const struct store_wrecord *r, struct err *err);
/* The append row [base, end] of pid, stamped w->stamp. */
int store_wappend_put(struct store_w *w, uint64_t pid, int64_t base,
                      int64_t end, struct err *err);
/* The dedup key of txn in a queue (schema.h): the txn itself when short,
 * so time-ordered txns (UUIDv7 defaults) insert in order, else a hash. */
struct store_dedup_key {
    uint8_t bytes[SCHEMA_DEDUP_KEY_MAX];
    size_t len;
};
void store_dedup_key(uint64_t queue_id, struct slice txn,
                     struct store_dedup_key *k);
/* 0 found, ERR_NOT_FOUND, or ERR_IO. */
int store_wdedup_get(struct store_w *w, struct store_dedup_key *key,
                     struct store_dedup_row *row, struct err *err);
int store_wdedup_put(struct store_w *w, struct store_dedup_key *key,
                     const struct store_dedup_row *row, int32_t window_seconds,
                     struct err *err);
/* Delete up to max dedup rows whose expiry is below w->stamp. */
int store_wdedup_sweep(struct store_w *w, int max, struct err *err);

/* Snapshots: a compact copy of the environment at path; replace the
 * environment with the bytes of such a copy. */
int store_copy_compact(struct store *s, const char *path, struct err *err);
int store_replace(struct store *s, const void *data, size_t len,
                  struct err *err);

/* Decode a queue options blob (schema.h); false when malformed. */
bool store_options_decode(const uint8_t *p, size_t len,
                          struct store_queue_options *o);

/* True when fewer than `reserve` bytes of the map are left unused. */
bool store_is_full(struct store *s, uint64_t reserve);

/* Persist everything committed (mdb_env_sync force); nothing to do when
 * no transaction committed since the last sync that succeeded. Any thread. */
int store_sync(struct store *s, struct err *err);

#endif
