/* The long-poll registry: parked fetches (waiters), indexed by the
 * partitions they name, and their bounds per connection and per node.
 *
 * Pure bookkeeping: no loop, no store, no clock, no HTTP. fetch.c embeds a
 * struct longpoll_waiter in each parked fetch, parks it here, and re-reads
 * only the waiters this registry hands back as pending.
 *
 *   park --> PARKED --touch(partition it names) / touch_all--> PARKED+PENDING
 *   PENDING --next_pending--> PARKED (the caller re-reads it)
 *   PARKED, PENDING --unpark--> gone (the caller answered it)
 *
 * Invariants:
 *   (1) A parked waiter is linked once per entry it names into the list of
 *       that (tenant, queue, partition); a partition with no waiter has no
 *       node in the index. A touch costs one hash lookup plus one step per
 *       waiter of that partition: never a walk over every waiter.
 *   (2) A waiter is pending at most once (a push touching five partitions it
 *       names re-reads it once), and unpark removes it from the pending
 *       list, so a popped waiter is always parked.
 *   (4) A touch makes a waiter pending only when a re-read could answer it:
 *       its estimate (the weight of its last read, plus the weight appended
 *       since to the partitions of its entries that were not capped) has
 *       reached its minBytes. The estimate never falls short of what a
 *       re-read would weigh (an appended record lies past every parked
 *       entry's offset; an entry whose read stopped before the high
 *       watermark, at maxBytes or the record cap, reads the same records
 *       however many are appended), so no waiter misses its wake-up; a
 *       waiter that can never be satisfied costs a step per append, not a
 *       store read.
 *   (3) n_parked <= limits.per_node and, per connection, the parked count
 *       <= limits.per_conn: park refuses past either bound and changes
 *       nothing then.
 *
 * Memory: the index copies each distinct partition key once (freed with its
 * last waiter); a waiter owns one link per entry. */
#ifndef QUEEN_API_LONGPOLL_H
#define QUEEN_API_LONGPOLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "store/store.h"

#define LONGPOLL_DEF_PER_CONN 16
#define LONGPOLL_DEF_PER_NODE 10000

struct longpoll_limits {
    size_t per_conn; /* parked long polls per connection; 0 = default */
    size_t per_node; /* parked long polls on this node; 0 = default */
};

struct longpoll_part;
struct longpoll_conn;

struct longpoll_link {
    struct longpoll_waiter *w;
    struct longpoll_part *part;
    struct longpoll_link *prev;
    struct longpoll_link *next;
    bool is_capped; /* its last read stopped before the high watermark */
};

/* Embedded in the caller's waiter; zeroed before longpoll_park. */
struct longpoll_waiter {
    struct longpoll_conn *conn;
    struct longpoll_link *links; /* n_links, owned */
    size_t n_links;
    struct longpoll_waiter *pend_prev; /* (2) */
    struct longpoll_waiter *pend_next;
    uint64_t min_bytes; /* the fetch's minBytes */
    uint64_t weight;    /* the estimate of (4) */
    bool is_parked;
    bool is_pending;
};

struct longpoll {
    struct longpoll_limits lim;
    size_t n_parked;
    size_t n_conns; /* connections with a parked waiter */
    size_t n_parts; /* distinct partitions with a parked waiter */
    struct longpoll_part **parts;
    size_t n_part_buckets; /* power of two */
    struct longpoll_conn **conns;
    size_t n_conn_buckets; /* power of two */
    struct longpoll_waiter *pend_head;
    struct longpoll_waiter *pend_tail;
    uint64_t n_touched_waiters; /* waiters made pending by a touch, ever */
    uint64_t n_refused_conn;    /* parks refused by the connection bound */
    uint64_t n_refused_node;    /* parks refused by the node bound */
};

/* lim is copied (zeros take the defaults). */
void longpoll_init(struct longpoll *lp, const struct longpoll_limits *lim);
/* Frees the index; every waiter must have been unparked. */
void longpoll_free(struct longpoll *lp);

/* What a waiter waits for: the n entries reqs names, of tenant, to weigh
 * min_bytes. Borrowed for the call (the keys are copied). */
struct longpoll_want {
    const uint8_t *tenant; /* 16 bytes */
    const struct store_fetch_req *reqs;
    size_t n;
    uint64_t min_bytes;
};

/* Park w (zeroed) for connection conn (an identity only, never
 * dereferenced), waiting for want. Then call longpoll_seen with the read
 * that was not ready. Returns 0; or, changing nothing (3): ERR_LIMIT when
 * conn already has per_conn parked waiters (answer 429), ERR_BUSY when
 * the node has per_node (answer 503); err->msg names the bound and its
 * setting. */
int longpoll_park(struct longpoll *lp, struct longpoll_waiter *w,
                  const void *conn, const struct longpoll_want *want,
                  struct err *err);
/* A read of parked w (ans: one entry per link, in request order, none in
 * error) was not ready: restart the estimate of (4) from it. Borrows ans. */
void longpoll_seen(struct longpoll_waiter *w,
                   const struct store_fetch_answer *ans);
/* Remove w from the index, the pending list and its connection's count.
 * Does nothing when w is not parked. */
void longpoll_unpark(struct longpoll *lp, struct longpoll_waiter *w);

/* Records of weight (sum of max(1, payload length)) were appended to
 * (tenant, queue, partition): every waiter naming it adds weight to its
 * estimate (for each entry that is not capped) and becomes pending (once,
 * (2)) when the estimate reached its min_bytes (4). Returns how many
 * became pending by this call. */
size_t longpoll_touch(struct longpoll *lp, const uint8_t tenant[16],
                      struct slice queue, struct slice partition,
                      uint64_t weight);
/* Something changed that has no partition name (a retention trim of
 * tenant, or a snapshot restore: tenant NULL): every parked waiter (of
 * tenant) becomes pending, whatever its estimate. Returns how many did. */
size_t longpoll_touch_all(struct longpoll *lp, const uint8_t *tenant);
/* Pop the oldest pending waiter (still parked), or NULL. */
struct longpoll_waiter *longpoll_next_pending(struct longpoll *lp);

/* Parked waiters of connection conn (0 when none). */
size_t longpoll_conn_parked(const struct longpoll *lp, const void *conn);

#endif
