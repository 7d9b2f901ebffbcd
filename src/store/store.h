/* The store: one LMDB environment per node holding queues, partitions,
 * records, dedup rows, KV rows and the raft apply position. The node loop
 * (raft/fsm) is the only writer; every read below runs in one short LMDB read
 * transaction and is safe from any thread (HTTP handlers, sink threads).
 *
 * Invariants (numbered so code can cite them):
 *   (1) meta.applied is written in the same write transaction as the effects
 *       of that raft entry, so after a crash exactly the missing entries are
 *       replayed.
 *   (2) A partition's offsets are gapless from logStart to lastOffset; offset
 *       o is stored iff logStart <= o <= lastOffset.
 *   (3) meta.safe_time = the greatest applied stamp; every record not yet
 *       applied will be stamped strictly above it.
 *   (4) Partition ids are assigned at apply time from a counter in meta, so
 *       every node gives the same partition the same id and uuid.
 *
 * Ownership: every answer struct owns its memory (one arena per answer); the
 * read transaction ends inside the call, so nothing in an answer points into
 * LMDB. Free answers with the matching *_free(). */
#ifndef QUEEN_STORE_STORE_H
#define QUEEN_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"

struct store;

/* 00000000-0000-0000-0000-000000000001 */
extern const uint8_t STORE_DEFAULT_TENANT[16];

#define STORE_MAP_SIZE_DEFAULT  ((uint64_t)64 << 30) /* 64 GiB, sparse */
#define STORE_FETCH_MAX_RECORDS 10000 /* docs/design/http-api.md §3 */
#define STORE_CHANGED_LIMIT_MAX 1000  /* docs/design/http-api.md §4 */
#define STORE_ANSWER_MAX        ((size_t)512 * 1024 * 1024) /* arena cap */
/* The weight of the records one store_fetch call returns, all entries
 * together: past it the remaining entries come back short or empty (their
 * highWatermark says more is there), so 1024 entries of 8 MiB neither
 * fail nor hold gigabytes. The call's first record goes in whatever it
 * weighs. */
#define STORE_FETCH_CALL_MAX ((uint64_t)64 * 1024 * 1024)

/* Open (creating the directory's files) the environment in dir, which must
 * exist. map_size 0 means STORE_MAP_SIZE_DEFAULT. Returns owned; close with
 * store_close(). ERR_IO with the failing call on error. */
int store_open(struct store **out, const char *dir, uint64_t map_size,
               struct err *err);
/* Close the environment. No reader or writer may be active. NULL is fine. */
void store_close(struct store *s);

/* The key store_fetch opens sealed payloads with (base/aead.h, reference
 * §1.10). Borrows nothing (the 32 bytes are copied). Call once, before the
 * first read and before any other thread uses s. */
void store_set_seal_key(struct store *s, const uint8_t key[32]);
/* The directory the store was opened on (borrowed, lives as long as s). */
const char *store_dir(const struct store *s);

/* Errors of one fetch or changed entry (not call errors). */
enum store_entry_error {
    STORE_ENTRY_OK = 0,
    STORE_UNKNOWN_TOPIC_OR_PARTITION,
    STORE_OFFSET_OUT_OF_RANGE,
    STORE_BAD_CURSOR
};
/* "UNKNOWN_TOPIC_OR_PARTITION", "OFFSET_OUT_OF_RANGE", "BAD_CURSOR", or NULL
 * for STORE_ENTRY_OK. */
const char *store_entry_error_name(int e);

/* ---- queue options ------------------------------------------------------
 * Stored as a versioned blob (schema.h); decoders accept older versions and
 * fill the new fields with defaults, so the CONFIGURE owner can extend it. */
struct store_queue_options {
    int32_t priority;
    int32_t lease_time;
    int32_t retry_limit;
    int32_t retry_delay;
    int32_t max_size;
    int32_t ttl;
    int32_t delayed_processing;
    int32_t window_buffer;
    int32_t retention_seconds;
    int32_t completed_retention_seconds;
    int32_t max_wait_time_seconds;
    int32_t min_pop_wait_time;
    int32_t dedup_window_seconds;
    int32_t retention_sink_hold_max_seconds; /* 0 = stored as 0, reads 604800 */
    bool dead_letter_queue;
    bool dlq_after_max_retries;
    bool retention_enabled;
    bool encryption_enabled;
    char namespace_[65]; /* NUL-terminated, <= 64 bytes */
    char task[65];
    char retention_sink_hold[65]; /* [A-Za-z0-9._-]{0,64} */
};

/* The options' integers and flags in their one order, shared by the
 * CONFIGURE command (raft/cmd.c) and the stored options row (store.c):
 * priority, lease_time, retry_limit, retry_delay, max_size, ttl,
 * delayed_processing, window_buffer, retention_seconds,
 * completed_retention_seconds, max_wait_time_seconds, min_pop_wait_time,
 * dedup_window_seconds, retention_sink_hold_max_seconds; flags bit 0
 * dead_letter_queue, 1 dlq_after_max_retries, 2 retention_enabled,
 * 3 encryption_enabled (STORE_OPTIONS_FLAGS: every known bit). */
#define STORE_OPTIONS_INTS  14
#define STORE_OPTIONS_FLAGS 0x0Fu
void store_options_ints(const struct store_queue_options *o,
                        int32_t v[STORE_OPTIONS_INTS]);
void store_options_set_ints(struct store_queue_options *o,
                            const int32_t v[STORE_OPTIONS_INTS]);
uint8_t store_options_flags(const struct store_queue_options *o);
void store_options_set_flags(struct store_queue_options *o, uint8_t f);

/* Defaults of a queue created implicitly by a push (docs/design/http-api.md §2:
 * lease 60 s, retention off, hold empty, hold ceiling stored as 0, dedup 3600).
 * */
void store_queue_options_implicit(struct store_queue_options *o);
/* Defaults of a configured queue (docs/design/http-api.md §5). */
void store_queue_options_configured(struct store_queue_options *o);

/* ---- fetch (docs/design/http-api.md §3) ---------------------------------- */

struct store_fetch_req {
    struct slice queue;     /* borrowed */
    struct slice partition; /* borrowed; the caller defaults it to "Default" */
    int64_t offset;         /* >= 0 (the caller refuses negative offsets) */
    uint64_t max_bytes;     /* the caller clamps it to 1..8 MiB */
    /* A sealed payload that does not open under the store's key comes back
     * as its envelope (false: POST /api/v1/fetch, docs/design/http-api.md
     * §3) or as a JSON string of the envelope's text (true: the sink, so
     * the lake holds text, never an envelope object; docs/s3-sink.md). */
    bool unopened_as_string;
};

struct store_record {
    int64_t offset;
    int64_t ts; /* stamp of the push that stored it, µs */
    uint8_t message_id[16];
    struct slice txn; /* "" when none */
    /* The stored bytes verbatim, or for a sealed payload (the binary form,
     * or an envelope in rows of older builds, docs/design/formats.md §11)
     * that opens under the store's key, the plaintext; len 0 = empty
     * (null). A sealed payload that does not open is returned as its
     * envelope, or as a JSON string of the envelope when the request asks
     * (unopened_as_string); store_fetch says why once a minute. */
    struct slice payload;
};

struct store_fetch_entry {
    int error;              /* enum store_entry_error */
    int64_t high_watermark; /* lastOffset + 1, 0 when empty */
    int64_t log_start;
    size_t n_records;
    struct store_record *records; /* into the answer's arena */
};

struct store_fetch_answer {
    size_t n_entries;
    struct store_fetch_entry *entries; /* in request order */
    struct buf arena; /* owns every slice above (but a pinned answer's) */
    /* A pinned answer's read (store_fetch_pinned): it stays open, so the
     * store's pages its slices point into stay put; NULL otherwise. */
    struct store *pinned_store;
    struct MDB_txn *pinned_txn;
};

/* Read every entry of one fetch in one read transaction. Borrows reqs;
 * fills ans (owned by the caller: free with store_fetch_answer_free(), also
 * after a failure). The per-entry rules are those of docs/design/http-api.md
 * §3; a call error (ERR_IO, ERR_TOO_BIG past STORE_ANSWER_MAX) fails the whole
 * call. Any thread. */
int store_fetch(struct store *s, const uint8_t tenant[16],
                const struct store_fetch_req *reqs, size_t n,
                struct store_fetch_answer *ans, struct err *err);
/* Like store_fetch, without copying what it reads: a plain payload and
 * the txn id point into the store's pages (an opened sealed payload is in
 * the arena), and the read transaction stays open until
 * store_fetch_answer_free(), which must come soon, before the calling
 * thread reads the store again: an open read keeps its pages from reuse,
 * and a snapshot restore waits for it. For a caller that copies the
 * records out at once (the sink, which buffers them in its own slabs):
 * the copy into the arena would be a second one. */
int store_fetch_pinned(struct store *s, const uint8_t tenant[16],
                       const struct store_fetch_req *reqs, size_t n,
                       struct store_fetch_answer *ans, struct err *err);
/* Frees ans and ends a pinned answer's read. */
void store_fetch_answer_free(struct store_fetch_answer *ans);

/* ---- partitions changed (docs/design/http-api.md §4) --------------------- */

struct store_changed_req {
    struct slice queue; /* borrowed */
    int64_t since;      /* INT64_MIN = null (no filter) */
    struct slice after; /* cursor, borrowed; len 0 = start */
    int limit;          /* the caller clamps to 1..1000 (0 = 1000) */
};

struct store_partition_info {
    struct slice name;   /* into the answer's arena */
    uint64_t id;         /* creation order (the cursor's pid) */
    uint8_t uuid[16];    /* the partition's UUID */
    int64_t last_offset; /* -1 if none */
    int64_t log_start;
    int64_t last_write_at; /* µs stamp of the last record, 0 if none */
    int64_t created_at;    /* µs stamp of the command that created it */
};

struct store_changed_entry {
    int error; /* STORE_ENTRY_OK, STORE_UNKNOWN_TOPIC_OR_PARTITION or
                  STORE_BAD_CURSOR */
    size_t n_partitions;
    struct store_partition_info *partitions;
    bool has_next; /* the page is full: next cursor is "p|<next_pid>" */
    uint64_t next_pid;
};

struct store_changed_answer {
    /* Read first, in the same transaction (docs/design/http-api.md §11). */
    int64_t safe_time;
    size_t n_entries;
    struct store_changed_entry *entries;
    struct buf arena;
};

int store_changed(struct store *s, const uint8_t tenant[16],
                  const struct store_changed_req *reqs, size_t n,
                  struct store_changed_answer *ans, struct err *err);
void store_changed_answer_free(struct store_changed_answer *ans);

/* ---- queues -------------------------------------------------------------- */

struct store_queue_info {
    struct slice name; /* into the list's arena */
    uint64_t id;
    uint8_t uuid[16];
    int64_t created_at;
    uint64_t n_partitions;
    struct store_queue_options options;
};

struct store_queue_list {
    size_t n;
    struct store_queue_info *queues; /* in name byte order */
    struct buf arena;
};

/* Every queue of tenant, in name byte order. Free with
 * store_queue_list_free(). Any thread. */
int store_list_queues(struct store *s, const uint8_t tenant[16],
                      struct store_queue_list *out, struct err *err);
void store_queue_list_free(struct store_queue_list *l);

/* One queue: 0, or ERR_NOT_FOUND. `info->name` is empty (the caller has
 * it). */
int store_get_queue(struct store *s, const uint8_t tenant[16],
                    struct slice name, struct store_queue_info *info,
                    struct err *err);

/* ---- retention planning (broker/retention.c) ---------------------------- */

/* Where retention may move partition pid's logStart: walks at most max_rows
 * append rows oldest first and sets *out to one past the end of the last
 * append stamped strictly below cutoff (µs), stopping at the first one that
 * is not; *out = -1 when the oldest append is not stale (or there is none).
 * Any thread. */
int store_stale_boundary(struct store *s, uint64_t pid, int64_t cutoff,
                         int max_rows, int64_t *out, struct err *err);

/* ---- meta -----------------------------------------------------------------
 */

/* This node's safeTime (docs/design/http-api.md §11): the greatest applied
 * stamp, µs; 0 before the first stamped entry. Any thread. */
int store_safe_time(struct store *s, int64_t *out, struct err *err);

struct store_stats {
    uint64_t applied_index; /* last raft index applied */
    int64_t safe_time;
    uint64_t map_size;   /* configured LMDB map size, bytes */
    uint64_t used_bytes; /* pages in use * page size */
    uint64_t n_queues;   /* over all tenants */
    uint64_t n_partitions;
    uint64_t n_records; /* stored (retained) records */
    uint64_t n_dedup_rows;
    /* Partition index rows partitions/changed has read since the open: a
     * `since` page reads the rows at or above it only. */
    uint64_t changed_rows_read;
};

int store_stats(struct store *s, struct store_stats *out, struct err *err);

/* The raft index of the last applied entry (meta), from the loop thread's
 * cache: cheap, any thread (atomic). */
uint64_t store_applied_index(const struct store *s);

#endif
