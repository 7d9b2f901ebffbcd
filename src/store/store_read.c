/* The store's reads: fetch by offset (docs/design/http-api.md §3), partitions
 * changed (docs/design/http-api.md §4), queue listing, safeTime and stats.
 * Plain C answers, no JSON: the HTTP handlers and the sink threads call the
 * same functions, so what a client sees and what the sink sees cannot drift
 * apart.
 *
 * Each call runs in one read transaction under swap_lock (shared) and copies
 * what it returns into the answer's arena before the transaction ends. The
 * arena may move while it grows, so the build keeps arena OFFSETS beside the
 * answer (struct build) and turns them into pointers once it is final.
 *
 * Fetch arenas are recycled: store_fetch_answer_free() keeps one arena of
 * up to FETCH_SPARE_MAX bytes per thread, and the thread's next fetch
 * starts in it. A sink thread reads megabytes per call, and on a VM the
 * first touch of a fresh page costs several times the copy into it. The
 * spare keeps resident only the pages its last answer used (spare_trim):
 * a thread reading small answers does not pin a large reserve. The spare
 * goes when its thread exits. The arrays an answer's items are built in
 * before they move into the arena are kept per thread the same way
 * (struct build_spare).
 *
 * Sealed payloads (docs/design/formats.md §11) are opened here, in the one read
 * both POST /api/v1/fetch and the sink use, so neither ever sees a sealed
 * payload it could read in clear: with the store's key set, a row flagged
 * sealed (binary form), or an unflagged payload that is an envelope (rows of
 * older builds), is decrypted into the arena. One that does not open
 * (another key, altered bytes) is returned as its envelope (built from the
 * binary form, or as stored) and logged once a minute; the read does not
 * fail, so one bad record cannot stop a queue's reader. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/aead.h"
#include "base/json.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/xalloc.h"
#include "store/schema.h"
#include "store/store.h"
#include "store/store_impl.h"

#define FETCH_RESERVE_MAX ((size_t)16 * 1024 * 1024)
#define HUGE_PAGE         ((size_t)2 * 1024 * 1024)
#define PAGE              ((size_t)4096)
#define CACHE_LINE        ((size_t)64)
#define FETCH_SPARE_MIN   ((size_t)256 * 1024)
#define FETCH_SPARE_MAX   ((size_t)32 * 1024 * 1024)

/* The thread's spare arena (a struct buf with its allocation), or NULL. */
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

static void spare_destroy(void *p)
{
    struct buf *b = p;

    buf_free(b);
    free(b);
}

static void spare_key_init(void)
{
    ASSERT(pthread_key_create(&spare_key, spare_destroy) == 0);
}

/* Start arena a in the thread's spare allocation when it has one. */
static void spare_take(struct buf *a)
{
    struct buf *b;

    pthread_once(&spare_once, spare_key_init);
    b = pthread_getspecific(spare_key);
    if (b == NULL) {
        return;
    }
    ASSERT(pthread_setspecific(spare_key, NULL) == 0);
    a->data = b->data;
    a->cap = b->cap;
    a->data[0] = '\0';
    free(b);
}

/* Give the pages of a's allocation past what this answer used (rounded up
 * to a huge page) back to the kernel: the reserve is sized for what the
 * entries may return, and one large answer would otherwise keep megabytes
 * resident in an idle spare. The next answer that needs them faults them
 * in again, so a thread reading large answers keeps its pages. */
static void spare_trim(struct buf *a)
{
    size_t at = (uintptr_t)a->data % HUGE_PAGE;
    size_t page_at = (uintptr_t)a->data % PAGE;
    /* Offsets from data: the first huge page boundary at or past len, the
     * last page boundary at or below cap. */
    size_t lo = (a->len + at + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE - at;
    size_t hi = (a->cap + page_at) / PAGE * PAGE - page_at;

    if (hi > lo) {
        (void)madvise(a->data + lo, hi - lo, MADV_DONTNEED); /* advice only */
    }
}

/* Keep a's allocation as the thread's spare; false when it is not wanted
 * (too small, too large, or a spare is kept already). */
static bool spare_keep(struct buf *a)
{
    struct buf *b;

    if (a->cap < FETCH_SPARE_MIN || a->cap > FETCH_SPARE_MAX) {
        return false;
    }
    pthread_once(&spare_once, spare_key_init);
    if (pthread_getspecific(spare_key) != NULL) {
        return false;
    }
    spare_trim(a);
    b = xmalloc(sizeof(*b));
    *b = *a;
    b->len = 0;
    ASSERT(pthread_setspecific(spare_key, b) == 0);
    buf_init(a, a->max);
    return true;
}

const char *store_entry_error_name(int e)
{
    switch (e) {
    case STORE_UNKNOWN_TOPIC_OR_PARTITION:
        return "UNKNOWN_TOPIC_OR_PARTITION";
    case STORE_OFFSET_OUT_OF_RANGE:
        return "OFFSET_OUT_OF_RANGE";
    case STORE_BAD_CURSOR:
        return "BAD_CURSOR";
    default:
        return NULL;
    }
}

static int read_begin(struct store *s, MDB_txn **txn, struct err *err)
{
    int rc;

    pthread_rwlock_rdlock(&s->swap_lock);
    rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
    if (rc != 0) {
        pthread_rwlock_unlock(&s->swap_lock);
        return err_set(err, ERR_IO, "mdb_txn_begin read: %s", mdb_strerror(rc));
    }
    return 0;
}

static void read_end(struct store *s, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap_lock);
}

/* An answer under construction: items (records, partitions or queues) of
 * item_size bytes, each with up to two arena offsets, and per entry the
 * index of its first item. */
struct build {
    struct buf *arena;
    char *items;
    size_t item_size;
    size_t n_items;
    size_t cap_items;
    size_t items_bytes; /* allocated: cap_items * item_size or more */
    size_t *offs;       /* 2 per item */
    size_t offs_len;    /* allocated entries: 2 * cap_items or more */
    size_t *first;      /* per entry */
};

/* The item and offset arrays of the thread's last build, kept for its next
 * one (at most BUILD_SPARE_MAX bytes of items): a sink thread builds
 * thousands of records per read, and on a VM fresh pages for them cost
 * more than the copying does. Gone when the thread exits. */
#define BUILD_SPARE_MAX ((size_t)4 * 1024 * 1024)

struct build_spare {
    char *items;
    size_t items_bytes;
    size_t *offs;
    size_t offs_len;
};

static pthread_key_t build_key;
static pthread_once_t build_once = PTHREAD_ONCE_INIT;

static void build_spare_destroy(void *p)
{
    struct build_spare *sp = p;

    free(sp->items);
    free(sp->offs);
    free(sp);
}

static void build_key_init(void)
{
    ASSERT(pthread_key_create(&build_key, build_spare_destroy) == 0);
}

static void build_init(struct build *b, struct buf *arena, size_t item_size,
                       size_t n_entries)
{
    struct build_spare *sp;

    memset(b, 0, sizeof(*b));
    b->arena = arena;
    b->item_size = item_size;
    b->first = xcalloc(n_entries > 0 ? n_entries : 1, sizeof(*b->first));
    pthread_once(&build_once, build_key_init);
    sp = pthread_getspecific(build_key);
    if (sp != NULL) {
        ASSERT(pthread_setspecific(build_key, NULL) == 0);
        b->items = sp->items;
        b->items_bytes = sp->items_bytes;
        b->offs = sp->offs;
        b->offs_len = sp->offs_len;
        b->cap_items = b->items_bytes / item_size;
        if (b->cap_items > b->offs_len / 2) {
            b->cap_items = b->offs_len / 2;
        }
        free(sp);
    }
}

static void build_free(struct build *b)
{
    struct build_spare *sp;

    free(b->first);
    if (b->items_bytes > BUILD_SPARE_MAX ||
        pthread_getspecific(build_key) != NULL) {
        free(b->items);
        free(b->offs);
        return;
    }
    sp = xmalloc(sizeof(*sp));
    *sp = (struct build_spare){b->items, b->items_bytes, b->offs, b->offs_len};
    ASSERT(pthread_setspecific(build_key, sp) == 0);
}

/* A new zeroed item; its arena offsets are filled by build_bytes(). */
static void *build_item(struct build *b)
{
    void *it;

    if (b->n_items == b->cap_items) {
        b->cap_items = b->cap_items ? b->cap_items * 2 : 64;
        b->items_bytes = b->cap_items * b->item_size;
        b->offs_len = b->cap_items * 2;
        b->items = xrealloc(b->items, b->items_bytes);
        b->offs = xrealloc(b->offs, b->offs_len * sizeof(*b->offs));
    }
    it = b->items + b->n_items * b->item_size;
    memset(it, 0, b->item_size);
    b->offs[2 * b->n_items] = 0;
    b->offs[2 * b->n_items + 1] = 0;
    b->n_items++;
    return it;
}

/* An offset that is none: the field's slice points into the store's pages
 * already (a pinned read, build_pin). */
#define BUILD_PINNED SIZE_MAX

/* Field k (0 or 1) of the last item, *field, borrows n bytes at p from the
 * store's pages: a pinned read keeps its transaction open. */
static void build_pin(struct build *b, int k, struct slice *field,
                      const void *p, size_t n)
{
    b->offs[2 * (b->n_items - 1) + (size_t)k] = BUILD_PINNED;
    field->ptr = p;
    field->len = n;
}

/* Copy bytes into the arena as field k (0 or 1) of the last item. */
static int build_bytes(struct build *b, int k, const void *p, size_t n,
                       struct err *err)
{
    b->offs[2 * (b->n_items - 1) + (size_t)k] = b->arena->len;
    if (n == 0) {
        return 0;
    }
    return buf_append(b->arena, p, n, err);
}

/* Move the items into the arena (8-aligned); returns their address. */
static char *build_finish(struct build *b, struct err *err)
{
    static const uint8_t zeros[8];
    size_t pad = (8 - b->arena->len % 8) % 8;
    size_t base;

    if (b->n_items == 0) {
        return NULL;
    }
    if (buf_append(b->arena, zeros, pad, err) != 0) {
        return NULL;
    }
    base = b->arena->len;
    if (buf_append(b->arena, b->items, b->n_items * b->item_size, err) != 0) {
        return NULL;
    }
    return b->arena->data + base;
}

static struct slice arena_slice(const struct build *b, size_t i, int k,
                                size_t len)
{
    struct slice s = {b->arena->data + b->offs[2 * i + (size_t)k], len};

    return s;
}

/* The context of one read call. */
struct rd {
    struct store *s;
    MDB_txn *txn;
    const uint8_t *tenant;
    struct build b;
    bool is_pinned; /* store_fetch_pinned: bytes stay in the store's pages */
    /* the fetched queue's encryptionEnabled now: an unflagged row of a
     * queue without it is never taken for an envelope (add_payload) */
    bool is_encrypted;
    uint64_t weight; /* of every record taken so far by this call */
};

/* Find a queue row of the tenant: 0, ERR_NOT_FOUND or ERR_IO. */
static int find_queue(struct rd *r, struct slice name, MDB_val *d,
                      struct err *err)
{
    uint8_t kb[16 + SCHEMA_NAME_MAX];
    MDB_val k = {16 + name.len, kb};
    int rc;

    if (name.len == 0 || name.len > SCHEMA_NAME_MAX) {
        return ERR_NOT_FOUND;
    }
    memcpy(kb, r->tenant, 16);
    memcpy(kb + 16, name.ptr, name.len);
    rc = mdb_get(r->txn, r->s->queues, &k, d);
    if (rc == MDB_NOTFOUND) {
        return ERR_NOT_FOUND;
    }
    if (rc != 0 || d->mv_size < SCHEMA_QUEUE_FIXED) {
        err_set(err, ERR_IO, "get queue: %s",
                rc != 0 ? mdb_strerror(rc) : "short row");
        return ERR_IO;
    }
    return 0;
}

static int find_part(struct rd *r, uint64_t qid, struct slice name,
                     struct store_wpart *p, struct err *err)
{
    uint8_t kb[8 + SCHEMA_NAME_MAX];
    MDB_val k = {8 + name.len, kb};
    MDB_val d;
    const uint8_t *v;
    int rc;

    if (name.len == 0 || name.len > SCHEMA_NAME_MAX) {
        return ERR_NOT_FOUND;
    }
    be64_put(kb, qid);
    memcpy(kb + 8, name.ptr, name.len);
    rc = mdb_get(r->txn, r->s->partitions, &k, &d);
    if (rc == MDB_NOTFOUND) {
        return ERR_NOT_FOUND;
    }
    if (rc != 0 || d.mv_size != SCHEMA_PART_VALUE_LEN) {
        err_set(err, ERR_IO, "get partition: %s",
                rc != 0 ? mdb_strerror(rc) : "bad row size");
        return ERR_IO;
    }
    v = d.mv_data;
    p->queue_id = qid;
    p->id = be64_get(v);
    memcpy(p->uuid, v + 8, 16);
    p->log_start = (int64_t)be64_get(v + 24);
    p->last_offset = (int64_t)be64_get(v + 32);
    p->last_write_at = (int64_t)be64_get(v + 40);
    p->created_at = (int64_t)be64_get(v + 48);
    return 0;
}

/* ---- fetch ---------------------------------------------------------------
 */

/* The txn length of a record value, or SIZE_MAX when malformed. */
static size_t record_txn_len(const MDB_val *d)
{
    const uint8_t *v = d->mv_data;
    size_t tl;

    if (d->mv_size < SCHEMA_RECORD_FIXED) {
        return SIZE_MAX;
    }
    tl = (size_t)v[25] << 8 | v[26];
    return tl > d->mv_size - SCHEMA_RECORD_FIXED ? SIZE_MAX : tl;
}

#define SEAL_WARN_EVERY_MS 60000

static _Atomic int64_t seal_warned_ms = INT64_MIN / 2;
static _Atomic uint64_t seal_unopened;

/* A sealed payload did not open: warn at most once a minute, with how many
 * did not since the last warning. Any thread. */
static void seal_warn(const struct err *why)
{
    struct timespec ts;
    int64_t now;
    int64_t last = atomic_load(&seal_warned_ms);
    uint64_t n;

    atomic_fetch_add(&seal_unopened, 1);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (now - last < SEAL_WARN_EVERY_MS ||
        !atomic_compare_exchange_strong(&seal_warned_ms, &last, now)) {
        return;
    }
    n = atomic_exchange(&seal_unopened, 0);
    log_warn_kv("store",
                "sealed payload does not open with this node's "
                "QUEEN_ENCRYPTION_KEY; returned as its envelope",
                {"why", why->msg}, {"records", LOG_U64(n)});
}

/* The envelope e[0..n) that did not open, into the arena: as it is, or as
 * a JSON string of it (q->unopened_as_string). */
static int add_unopened(struct build *b, const struct store_fetch_req *q,
                        const uint8_t *e, size_t n, struct err *err)
{
    return q->unopened_as_string
               ? json_escape(b->arena, (const char *)e, n, err)
               : buf_append(b->arena, e, n, err);
}

/* A payload sealed in the binary form that did not open: its envelope
 * (aead_envelope), the same text a build that stored envelopes returned. */
static int add_unopened_raw(struct build *b, const struct store_fetch_req *q,
                            const uint8_t *p, size_t n, struct err *err)
{
    struct buf env;
    int rc;

    if (!q->unopened_as_string) {
        return aead_envelope(p, n, b->arena, err);
    }
    buf_init(&env, BUF_UNLIMITED);
    rc = aead_envelope(p, n, &env, err);
    if (rc == 0) {
        rc = add_unopened(b, q, (const uint8_t *)env.data, env.len, err);
    }
    buf_free(&env);
    return rc;
}

/* A row flagged sealed whose bytes are too short to be the binary form (a
 * damaged store: the encoder and the decoder refuse such payloads): its
 * bytes as a JSON string of their base64, so the read goes on and the
 * damage is visible, with a warning. */
static int add_damaged(struct build *b, const uint8_t *p, size_t n,
                       struct err *err)
{
    if (buf_append_byte(b->arena, '"', err) != 0 ||
        base64_encode(p, n, b->arena, err) != 0 ||
        buf_append_byte(b->arena, '"', err) != 0) {
        return err->code;
    }
    log_warn_kv("store",
                "a record flagged sealed is too short to be sealed; "
                "returned as a JSON string of its base64",
                {"bytes", LOG_U64(n)});
    return 0;
}

/* The payload of record row d (txn length tl) as field 1 of the last item:
 * its plaintext when it is sealed, in the binary form or (rows of older
 * builds) as an envelope, and opens under the store's key; sealed but not
 * opening, its envelope as it is or as a JSON string
 * (q->unopened_as_string); anything else, its bytes. A row flagged plain
 * (store/format.h level 2) is never taken for an envelope, nor is an
 * unflagged row of a queue that is not encrypted: only an encrypted
 * queue's payloads were ever stored as envelopes, and a plain queue's
 * payload that merely looks like one (pushed before a new cluster raised
 * its format) is the producer's text. *len is what the arena got. */
static int add_payload(struct rd *r, const struct store_fetch_req *q,
                       const MDB_val *d, size_t tl, struct slice *out,
                       struct err *err)
{
    struct build *b = &r->b;
    const struct store *s = r->s;
    const uint8_t *v = d->mv_data;
    const uint8_t *p = v + SCHEMA_RECORD_FIXED + tl;
    size_t n = d->mv_size - SCHEMA_RECORD_FIXED - tl;
    size_t at = b->arena->len;
    bool raw = (v[24] & SCHEMA_RECORD_SEALED) != 0;
    bool plain = (v[24] & SCHEMA_RECORD_PLAIN) != 0;
    int rc;

    if (!raw && (plain || !r->is_encrypted || !aead_is_envelope(p, n))) {
        if (r->is_pinned) {
            build_pin(b, 1, out, p, n);
            return 0;
        }
        out->len = n;
        return build_bytes(b, 1, p, n, err);
    }
    b->offs[2 * (b->n_items - 1) + 1] = at;
    if (raw && n < AEAD_SEALED_OVERHEAD) {
        rc = add_damaged(b, p, n, err);
    } else if (!s->has_seal_key) {
        rc = err_set(err, ERR_FORBIDDEN, "no key on this node");
    } else {
        rc = raw ? aead_open_raw(s->seal_key, p, n, b->arena, err)
                 : aead_open(s->seal_key, p, n, b->arena, err);
    }
    if (rc == ERR_FORBIDDEN || rc == ERR_IO) {
        seal_warn(err);
        rc = raw ? add_unopened_raw(b, q, p, n, err)
                 : add_unopened(b, q, p, n, err);
    } else if (rc == ERR_INVALID) { /* shaped like one, but not an envelope */
        rc = buf_append(b->arena, p, n, err);
    }
    out->len = b->arena->len - at;
    return rc;
}

static int add_record(struct rd *r, const struct store_fetch_req *q,
                      const MDB_val *k, const MDB_val *d, size_t tl,
                      struct err *err)
{
    const uint8_t *v = d->mv_data;
    struct store_record *rec = build_item(&r->b);

    rec->offset = (int64_t)be64_get((const uint8_t *)k->mv_data + 8);
    rec->ts = (int64_t)be64_get(v);
    memcpy(rec->message_id, v + 8, 16);
    if (r->is_pinned) {
        build_pin(&r->b, 0, &rec->txn, v + SCHEMA_RECORD_FIXED, tl);
    } else {
        rec->txn.len = tl;
        if (build_bytes(&r->b, 0, v + SCHEMA_RECORD_FIXED, tl, err) != 0) {
            return err->code;
        }
    }
    return add_payload(r, q, d, tl, &rec->payload, err);
}

/* Every cache line of the PAGE bytes around at, asked for at once when at
 * is in another page than *last (which becomes it). A walk meets the next
 * nodes of a leaf page right after its first, and a pinned read's copier
 * reads their values soon after: one burst of prefetches overlaps what
 * would be a miss per line met in turn. */
static void prefetch_page(const void *at, const char **last)
{
    const char *page = (const char *)at - ((uintptr_t)at & (PAGE - 1));

    if (page == *last) {
        return;
    }
    *last = page;
    for (size_t i = 0; i < PAGE; i += CACHE_LINE) {
        __builtin_prefetch(page + i, 0, 3);
    }
}

/* Walk records of pid from q->offset: the first always, then while the
 * running weight stays <= max_bytes, at most STORE_FETCH_MAX_RECORDS.
 * A store_fetch call (not a pinned one: the sink bounds its own reads)
 * also stops once its records weigh STORE_FETCH_CALL_MAX together; only
 * the call's first record goes in whatever it weighs. Offsets missing
 * inside the walk (retention racing us) are stepped over silently. */
static int walk_records(struct rd *r, uint64_t pid,
                        const struct store_fetch_req *q, size_t *count,
                        struct err *err)
{
    uint8_t kb[16];
    MDB_val k = {16, kb};
    MDB_val d;
    MDB_cursor *c;
    uint64_t weight = 0;
    const char *page = NULL;
    int rc = mdb_cursor_open(r->txn, r->s->records, &c);

    if (rc != 0) {
        return err_set(err, ERR_IO, "cursor records: %s", mdb_strerror(rc));
    }
    be64_put(kb, pid);
    be64_put(kb + 8, (uint64_t)q->offset);
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    while (rc == 0 && *count < STORE_FETCH_MAX_RECORDS) {
        size_t tl = record_txn_len(&d);
        uint64_t w;

        if (k.mv_size != 16 || be64_get(k.mv_data) != pid) {
            break;
        }
        prefetch_page(k.mv_data, &page);
        if (tl == SIZE_MAX) {
            mdb_cursor_close(c);
            return err_set(err, ERR_CORRUPT, "record row of %zu B", d.mv_size);
        }
        w = d.mv_size - SCHEMA_RECORD_FIXED - tl;
        w = w > 1 ? w : 1;
        if (*count > 0 && weight + w > q->max_bytes) {
            break;
        }
        if (!r->is_pinned && r->weight > 0 &&
            r->weight + w > STORE_FETCH_CALL_MAX) {
            break;
        }
        weight += w;
        r->weight += w;
        if (add_record(r, q, &k, &d, tl, err) != 0) {
            mdb_cursor_close(c);
            return err->code;
        }
        (*count)++;
        rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "walk records: %s", mdb_strerror(rc));
    }
    return 0;
}

/* A queue row's encryptionEnabled: 0, or ERR_CORRUPT. */
static int queue_encrypted(const MDB_val *d, bool *out, struct err *err)
{
    struct store_queue_options o;

    if (d->mv_size < SCHEMA_QUEUE_FIXED ||
        !store_options_decode((const uint8_t *)d->mv_data + SCHEMA_QUEUE_FIXED,
                              d->mv_size - SCHEMA_QUEUE_FIXED, &o)) {
        return err_set(err, ERR_CORRUPT, "queue row of %zu B is malformed",
                       d->mv_size);
    }
    *out = o.encryption_enabled;
    return 0;
}

static int fetch_entry(struct rd *r, const struct store_fetch_req *q,
                       struct store_fetch_entry *e, struct err *err)
{
    struct store_wpart p;
    MDB_val qd;
    int rc = find_queue(r, q->queue, &qd, err);

    memset(e, 0, sizeof(*e));
    if (rc == ERR_NOT_FOUND) {
        e->error = STORE_UNKNOWN_TOPIC_OR_PARTITION;
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    rc = queue_encrypted(&qd, &r->is_encrypted, err);
    if (rc != 0) {
        return rc;
    }
    rc = find_part(r, be64_get(qd.mv_data), q->partition, &p, err);
    if (rc == ERR_NOT_FOUND) {
        e->error = q->offset == 0 ? STORE_ENTRY_OK : STORE_OFFSET_OUT_OF_RANGE;
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    e->high_watermark = p.last_offset + 1;
    e->log_start = p.log_start;
    if (q->offset < p.log_start || q->offset > e->high_watermark) {
        e->error = STORE_OFFSET_OUT_OF_RANGE;
        return 0;
    }
    if (q->offset == e->high_watermark) {
        return 0;
    }
    return walk_records(r, p.id, q, &e->n_records, err);
}

/* Point every entry at its records in the arena. */
static int fetch_finish(struct store_fetch_answer *ans, struct build *b,
                        struct err *err)
{
    struct store_record *all =
        (struct store_record *)(void *)build_finish(b, err);

    if (all == NULL && b->n_items > 0) {
        return err->code;
    }
    for (size_t i = 0; i < b->n_items; i++) {
        if (b->offs[2 * i] != BUILD_PINNED) {
            all[i].txn = arena_slice(b, i, 0, all[i].txn.len);
        }
        if (b->offs[2 * i + 1] != BUILD_PINNED) {
            all[i].payload = arena_slice(b, i, 1, all[i].payload.len);
        }
    }
    for (size_t i = 0; i < ans->n_entries; i++) {
        struct store_fetch_entry *e = &ans->entries[i];

        e->records = e->n_records == 0 ? NULL : all + b->first[i];
    }
    return 0;
}

/* The arena an answer probably needs: what the entries ask for, plus a half
 * for txn ids and the record array, at most FETCH_RESERVE_MAX. Growing from
 * nothing by doubling would copy the answer about once more. */
static size_t fetch_reserve(const struct store_fetch_req *reqs, size_t n)
{
    uint64_t sum = 0;

    for (size_t i = 0; i < n && sum < FETCH_RESERVE_MAX; i++) {
        sum += reqs[i].max_bytes;
    }
    sum += sum / 2;
    return sum < FETCH_RESERVE_MAX ? (size_t)sum : FETCH_RESERVE_MAX;
}

/* Reserve n bytes; a fresh allocation of megabytes asks for huge pages,
 * so filling it faults once per 2 MiB rather than per 4 KiB. */
static int reserve_arena(struct buf *a, size_t n, struct err *err)
{
    char *before = a->data;
    size_t cap = a->cap;

    if (buf_reserve(a, n, err) != 0) {
        return err->code;
    }
#ifdef MADV_HUGEPAGE
    if (a->data != before || a->cap != cap) {
        size_t at = (uintptr_t)a->data % HUGE_PAGE;
        size_t lo = at == 0 ? 0 : HUGE_PAGE - at; /* first aligned byte */
        size_t hi = (a->cap + at) / HUGE_PAGE * HUGE_PAGE - at;
        if (a->cap + at >= HUGE_PAGE && hi > lo) {
            (void)madvise(a->data + lo, hi - lo, MADV_HUGEPAGE); /* a hint */
        }
    }
#endif
    return 0;
}

/* store_fetch and store_fetch_pinned: r names the store, the tenant and
 * whether the read is pinned. */
static int fetch(struct rd *r, const struct store_fetch_req *reqs, size_t n,
                 struct store_fetch_answer *ans, struct err *err)
{
    struct store *s = r->s;
    int rc = 0;

    memset(ans, 0, sizeof(*ans));
    buf_init(&ans->arena, STORE_ANSWER_MAX);
    ans->entries = xcalloc(n > 0 ? n : 1, sizeof(*ans->entries));
    ans->n_entries = n;
    spare_take(&ans->arena);
    if (reserve_arena(&ans->arena, fetch_reserve(reqs, n), err) != 0 ||
        read_begin(s, &r->txn, err) != 0) {
        return err->code;
    }
    build_init(&r->b, &ans->arena, sizeof(struct store_record), n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        r->b.first[i] = r->b.n_items;
        rc = fetch_entry(r, &reqs[i], &ans->entries[i], err);
    }
    if (rc == 0) {
        rc = fetch_finish(ans, &r->b, err);
    }
    build_free(&r->b);
    if (rc == 0 && r->is_pinned) {
        ans->pinned_store = s;
        ans->pinned_txn = r->txn;
    } else {
        read_end(s, r->txn);
    }
    if (rc != 0) {
        memset(ans->entries, 0, n * sizeof(*ans->entries));
    }
    return rc;
}

int store_fetch(struct store *s, const uint8_t tenant[16],
                const struct store_fetch_req *reqs, size_t n,
                struct store_fetch_answer *ans, struct err *err)
{
    struct rd r = {s, NULL, tenant, {0}, false, false, 0};

    return fetch(&r, reqs, n, ans, err);
}

int store_fetch_pinned(struct store *s, const uint8_t tenant[16],
                       const struct store_fetch_req *reqs, size_t n,
                       struct store_fetch_answer *ans, struct err *err)
{
    struct rd r = {s, NULL, tenant, {0}, true, false, 0};

    return fetch(&r, reqs, n, ans, err);
}

void store_fetch_answer_free(struct store_fetch_answer *ans)
{
    if (ans->pinned_txn != NULL) {
        read_end(ans->pinned_store, ans->pinned_txn);
    }
    free(ans->entries);
    if (!spare_keep(&ans->arena)) {
        buf_free(&ans->arena);
    }
    memset(ans, 0, sizeof(*ans));
}

/* ---- partitions changed ---------------------------------------------------
 */

/* "" -> 0 (start); "p|<decimal>" -> that pid; anything else false. */
static bool parse_cursor(struct slice c, uint64_t *pid)
{
    uint64_t v = 0;

    *pid = 0;
    if (c.len == 0) {
        return true;
    }
    if (c.len < 3 || c.ptr[0] != 'p' || c.ptr[1] != '|' || c.len > 22) {
        return false;
    }
    for (size_t i = 2; i < c.len; i++) {
        unsigned dgt = (unsigned char)c.ptr[i] - '0';

        if (dgt > 9 || v > (UINT64_MAX - dgt) / 10) {
            return false;
        }
        v = v * 10 + dgt;
    }
    *pid = v;
    return true;
}

static int add_part(struct build *b, const struct store_wpart *p,
                    const MDB_val *name, struct err *err)
{
    struct store_partition_info *i = build_item(b);

    i->id = p->id;
    memcpy(i->uuid, p->uuid, 16);
    i->last_offset = p->last_offset;
    i->log_start = p->log_start;
    i->last_write_at = p->last_write_at;
    i->created_at = p->created_at;
    i->name.len = name->mv_size;
    return build_bytes(b, 0, name->mv_data, name->mv_size, err);
}

/* Consider the partition a parts_by_id row names; 1 when it was added. */
static int changed_one(struct rd *r, uint64_t qid, const MDB_val *name,
                       const struct store_changed_req *q, struct err *err)
{
    struct store_wpart p;
    struct slice n = {name->mv_data, name->mv_size};
    int rc = find_part(r, qid, n, &p, err);

    if (rc == ERR_NOT_FOUND) {
        return 0; /* being deleted: skipped */
    }
    if (rc != 0) {
        return -rc;
    }
    if (q->since != INT64_MIN && p.last_write_at < q->since) {
        return 0;
    }
    if (add_part(&r->b, &p, name, err) != 0) {
        return -err->code;
    }
    return 1;
}

static int changed_walk(struct rd *r, uint64_t qid, uint64_t after,
                        const struct store_changed_req *q,
                        struct store_changed_entry *e, struct err *err)
{
    size_t limit = q->limit <= 0 || q->limit > STORE_CHANGED_LIMIT_MAX
                       ? STORE_CHANGED_LIMIT_MAX
                       : (size_t)q->limit;
    uint8_t kb[16];
    MDB_val k = {16, kb};
    MDB_val d;
    MDB_cursor *c;
    int rc;

    if (after == UINT64_MAX) {
        return 0;
    }
    rc = mdb_cursor_open(r->txn, r->s->parts_by_id, &c);
    if (rc != 0) {
        return err_set(err, ERR_IO, "cursor parts_by_id: %s", mdb_strerror(rc));
    }
    be64_put(kb, qid);
    be64_put(kb + 8, after + 1);
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    while (rc == 0 && e->n_partitions < limit && k.mv_size == 16 &&
           be64_get(k.mv_data) == qid) {
        int added = changed_one(r, qid, &d, q, err);

        atomic_fetch_add(&r->s->changed_rows, 1);
        if (added < 0) {
            mdb_cursor_close(c);
            return -added;
        }
        if (added == 1) {
            e->n_partitions++;
            e->next_pid = be64_get((const uint8_t *)k.mv_data + 8);
        }
        rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "walk partitions: %s", mdb_strerror(rc));
    }
    e->has_next = e->n_partitions >= limit;
    return 0;
}

struct changed_hit {
    uint64_t pid;
    MDB_val name; /* into the read txn's pages */
};

static int hit_cmp(const void *a, const void *b)
{
    const struct changed_hit *x = a;
    const struct changed_hit *y = b;

    return x->pid < y->pid ? -1 : (x->pid > y->pid ? 1 : 0);
}

/* A page with a `since`: the parts_by_write rows at or above it (so the
 * cost follows what changed, not the queue's size), those past the cursor
 * taken in creation order as changed_walk() would. */
static int changed_since(struct rd *r, uint64_t qid, uint64_t after,
                         const struct store_changed_req *q,
                         struct store_changed_entry *e, struct err *err)
{
    size_t limit = q->limit <= 0 || q->limit > STORE_CHANGED_LIMIT_MAX
                       ? STORE_CHANGED_LIMIT_MAX
                       : (size_t)q->limit;
    uint8_t kb[24];
    MDB_val k = {24, kb};
    MDB_val d;
    MDB_cursor *c;
    struct changed_hit *v = NULL;
    size_t n = 0;
    size_t cap = 0;
    uint64_t steps = 0;
    int rc;

    if (after == UINT64_MAX) {
        return 0;
    }
    rc = mdb_cursor_open(r->txn, r->s->parts_by_write, &c);
    if (rc != 0) {
        return err_set(err, ERR_IO, "cursor parts_by_write: %s",
                       mdb_strerror(rc));
    }
    be64_put(kb, qid);
    be64_put(kb + 8, (uint64_t)q->since ^ (1ULL << 63));
    be64_put(kb + 16, 0);
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    while (rc == 0 && k.mv_size == 24 && be64_get(k.mv_data) == qid) {
        uint64_t pid = be64_get((const uint8_t *)k.mv_data + 16);

        steps++;
        if (pid > after) {
            if (n == cap) {
                cap = cap == 0 ? 64 : cap * 2;
                v = xrealloc(v, cap * sizeof(*v));
            }
            v[n].pid = pid;
            v[n].name = d;
            n++;
        }
        rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    atomic_fetch_add(&r->s->changed_rows, steps);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        free(v);
        return err_set(err, ERR_IO, "walk parts_by_write: %s",
                       mdb_strerror(rc));
    }
    if (n > 1) {
        qsort(v, n, sizeof(*v), hit_cmp);
    }
    for (size_t i = 0; i < n && e->n_partitions < limit; i++) {
        int added = changed_one(r, qid, &v[i].name, q, err);

        if (added < 0) {
            free(v);
            return -added;
        }
        if (added == 1) {
            e->n_partitions++;
            e->next_pid = v[i].pid;
        }
    }
    free(v);
    e->has_next = e->n_partitions >= limit;
    return 0;
}

static int changed_entry(struct rd *r, const struct store_changed_req *q,
                         struct store_changed_entry *e, struct err *err)
{
    MDB_val qd;
    uint64_t after;
    int rc = find_queue(r, q->queue, &qd, err);

    memset(e, 0, sizeof(*e));
    if (rc == ERR_NOT_FOUND) {
        e->error = STORE_UNKNOWN_TOPIC_OR_PARTITION;
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    if (!parse_cursor(q->after, &after)) {
        e->error = STORE_BAD_CURSOR;
        return 0;
    }
    if (q->since != INT64_MIN) {
        return changed_since(r, be64_get(qd.mv_data), after, q, e, err);
    }
    return changed_walk(r, be64_get(qd.mv_data), after, q, e, err);
}

static int meta_i64(struct store *s, MDB_txn *txn, const char *name,
                    int64_t *out)
{
    char kb[32];
    size_t n = strlen(name);
    MDB_val k = {n, kb};
    MDB_val d;
    int rc;

    ASSERT(n < sizeof(kb));
    memcpy(kb, name, n + 1);
    rc = mdb_get(txn, s->meta, &k, &d);
    *out = 0;
    if (rc == 0 && d.mv_size == 8) {
        *out = (int64_t)be64_get(d.mv_data);
    }
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int changed_finish(struct store_changed_answer *ans, struct build *b,
                          struct err *err)
{
    struct store_partition_info *all =
        (struct store_partition_info *)(void *)build_finish(b, err);

    if (all == NULL && b->n_items > 0) {
        return err->code;
    }
    for (size_t i = 0; i < b->n_items; i++) {
        all[i].name = arena_slice(b, i, 0, all[i].name.len);
    }
    for (size_t i = 0; i < ans->n_entries; i++) {
        struct store_changed_entry *e = &ans->entries[i];

        e->partitions = e->n_partitions == 0 ? NULL : all + b->first[i];
    }
    return 0;
}

int store_changed(struct store *s, const uint8_t tenant[16],
                  const struct store_changed_req *reqs, size_t n,
                  struct store_changed_answer *ans, struct err *err)
{
    struct rd r = {s, NULL, tenant, {0}, false, false, 0};
    int rc;

    memset(ans, 0, sizeof(*ans));
    buf_init(&ans->arena, STORE_ANSWER_MAX);
    ans->entries = xcalloc(n > 0 ? n : 1, sizeof(*ans->entries));
    ans->n_entries = n;
    if (read_begin(s, &r.txn, err) != 0) {
        return err->code;
    }
    build_init(&r.b, &ans->arena, sizeof(struct store_partition_info), n);
    rc = meta_i64(s, r.txn, "safe_time", &ans->safe_time);
    if (rc != 0) {
        rc = err_set(err, ERR_IO, "get safe_time: %s", mdb_strerror(rc));
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        r.b.first[i] = r.b.n_items;
        rc = changed_entry(&r, &reqs[i], &ans->entries[i], err);
    }
    read_end(s, r.txn);
    if (rc == 0) {
        rc = changed_finish(ans, &r.b, err);
    }
    build_free(&r.b);
    if (rc != 0) {
        memset(ans->entries, 0, n * sizeof(*ans->entries));
    }
    return rc;
}

void store_changed_answer_free(struct store_changed_answer *ans)
{
    free(ans->entries);
    buf_free(&ans->arena);
    memset(ans, 0, sizeof(*ans));
}

/* ---- queues, safe time, stats --------------------------------------------
 */

static int queue_info(const MDB_val *d, struct store_queue_info *q,
                      struct err *err)
{
    const uint8_t *v = d->mv_data;

    if (d->mv_size < SCHEMA_QUEUE_FIXED ||
        !store_options_decode(v + SCHEMA_QUEUE_FIXED,
                              d->mv_size - SCHEMA_QUEUE_FIXED, &q->options)) {
        return err_set(err, ERR_CORRUPT, "queue row of %zu B is malformed",
                       d->mv_size);
    }
    q->id = be64_get(v);
    q->created_at = (int64_t)be64_get(v + 8);
    memcpy(q->uuid, v + 16, 16);
    q->n_partitions = be64_get(v + 32);
    return 0;
}

static int list_walk(struct rd *r, struct err *err)
{
    uint8_t kb[16];
    MDB_val k = {16, kb};
    MDB_val d;
    MDB_cursor *c;
    int rc = mdb_cursor_open(r->txn, r->s->queues, &c);

    if (rc != 0) {
        return err_set(err, ERR_IO, "cursor queues: %s", mdb_strerror(rc));
    }
    memcpy(kb, r->tenant, 16);
    rc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
    while (rc == 0 && k.mv_size > 16 && memcmp(k.mv_data, r->tenant, 16) == 0) {
        struct store_queue_info *q = build_item(&r->b);

        q->name.len = k.mv_size - 16;
        if (queue_info(&d, q, err) != 0 ||
            build_bytes(&r->b, 0, (const uint8_t *)k.mv_data + 16, q->name.len,
                        err) != 0) {
            mdb_cursor_close(c);
            return err->code;
        }
        rc = mdb_cursor_get(c, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(c);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return err_set(err, ERR_IO, "walk queues: %s", mdb_strerror(rc));
    }
    return 0;
}

int store_list_queues(struct store *s, const uint8_t tenant[16],
                      struct store_queue_list *out, struct err *err)
{
    struct rd r = {s, NULL, tenant, {0}, false, false, 0};
    int rc;

    memset(out, 0, sizeof(*out));
    buf_init(&out->arena, STORE_ANSWER_MAX);
    if (read_begin(s, &r.txn, err) != 0) {
        return err->code;
    }
    build_init(&r.b, &out->arena, sizeof(struct store_queue_info), 1);
    rc = list_walk(&r, err);
    read_end(s, r.txn);
    /* The items array becomes the answer's (freed with it). */
    out->queues = (struct store_queue_info *)(void *)r.b.items;
    out->n = rc == 0 ? r.b.n_items : 0;
    for (size_t i = 0; i < out->n; i++) {
        out->queues[i].name = arena_slice(&r.b, i, 0, out->queues[i].name.len);
    }
    r.b.items = NULL;
    r.b.items_bytes = 0;
    build_free(&r.b);
    return rc;
}

void store_queue_list_free(struct store_queue_list *l)
{
    free(l->queues);
    buf_free(&l->arena);
    memset(l, 0, sizeof(*l));
}

int store_get_queue(struct store *s, const uint8_t tenant[16],
                    struct slice name, struct store_queue_info *info,
                    struct err *err)
{
    struct rd r = {s, NULL, tenant, {0}, false, false, 0};
    MDB_val d;
    int rc;

    memset(info, 0, sizeof(*info));
    if (read_begin(s, &r.txn, err) != 0) {
        return err->code;
    }
    rc = find_queue(&r, name, &d, err);
    if (rc == ERR_NOT_FOUND) {
        rc = err_set(err, ERR_NOT_FOUND, "queue %.*s not found",
                     (int)(name.len > 100 ? 100 : name.len), name.ptr);
    } else if (rc == 0) {
        rc = queue_info(&d, info, err);
    }
    read_end(s, r.txn);
    return rc;
}

int store_safe_time(struct store *s, int64_t *out, struct err *err)
{
    MDB_txn *txn;
    int rc;

    if (read_begin(s, &txn, err) != 0) {
        return err->code;
    }
    rc = meta_i64(s, txn, "safe_time", out);
    read_end(s, txn);
    if (rc != 0) {
        return err_set(err, ERR_IO, "get safe_time: %s", mdb_strerror(rc));
    }
    return 0;
}

int store_stats(struct store *s, struct store_stats *out, struct err *err)
{
    MDB_txn *txn;
    MDB_stat st;
    MDB_envinfo info;
    int rc;

    memset(out, 0, sizeof(*out));
    if (read_begin(s, &txn, err) != 0) {
        return err->code;
    }
    rc = meta_i64(s, txn, "safe_time", &out->safe_time);
    out->applied_index = store_applied_index(s);
    mdb_env_info(s->env, &info);
    mdb_env_stat(s->env, &st);
    out->map_size = info.me_mapsize;
    out->used_bytes = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
    if (rc == 0 && (rc = mdb_stat(txn, s->queues, &st)) == 0) {
        out->n_queues = st.ms_entries;
    }
    if (rc == 0 && (rc = mdb_stat(txn, s->partitions, &st)) == 0) {
        out->n_partitions = st.ms_entries;
    }
    if (rc == 0 && (rc = mdb_stat(txn, s->records, &st)) == 0) {
        out->n_records = st.ms_entries;
    }
    if (rc == 0 && (rc = mdb_stat(txn, s->dedup, &st)) == 0) {
        out->n_dedup_rows = st.ms_entries;
    }
    out->changed_rows_read = atomic_load(&s->changed_rows);
    read_end(s, txn);
    if (rc != 0) {
        return err_set(err, ERR_IO, "store stats: %s", mdb_strerror(rc));
    }
    return 0;
}
