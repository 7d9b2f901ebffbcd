/* Placement (docs/design/protocol.md §4): how the nodes of a cluster share the
 * queues of a sink without talking to each other. Every node writes a presence
 * row (s3:<sink>:node=<esc instance>, TTL) and counts the rows: N nodes. A node
 * aims at fair_share = ceil(Q / N) of the Q queues; it paces its claims, and
 * when it has held more than its share for a full TTL it gives back the
 * queue with the least buffered bytes (ties by name), one at a time.
 * Pure: time, jitter and the KV answers are arguments; the host runs these
 * on a timer.
 *
 * Give-back states (decide):
 *   IDLE --over share for a full TTL--> GIVING (drain one queue)
 *   GIVING --released, another holds it----------> IDLE
 *   GIVING --released, nobody took it after a TTL-> IDLE
 *   any --held <= share--------------------------> IDLE (over mark cleared,
 *                                                  a give-back in flight
 *                                                  is followed to its end) */
#ifndef QUEEN_SINK_PLACEMENT_H
#define QUEEN_SINK_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/common.h"
#include "base/err.h"
#include "sink/driver.h"
#include "store/kv.h"

#define PLACEMENT_CLAIM_STEP_MS 1000
#define PLACEMENT_JITTER_MS     200 /* jitter is uniform in [0, 200) */
#define PLACEMENT_PREFIX_LIMIT  1000

/* ceil(queues / max(nodes, 1)). (6,3)=2, (7,3)=3, (6,0)=6, (0,3)=0. */
uint32_t placement_fair_share(uint32_t queues, uint32_t nodes);
/* held >= share */
bool placement_at_or_above(uint32_t held, uint32_t share);
/* The rebalancer's period: max(100, ttl_ms / 3). */
int64_t placement_period_ms(int64_t ttl_ms);

/* When a free queue may be claimed (wait_turn). */
struct placement_claim {
    int64_t task_start_ms;
    int64_t jitter_ms; /* in [0, 200) */
    uint32_t before;   /* queues this node runs or is claiming already */
    int64_t ttl_ms;
    bool gave_back; /* this node gave this queue back recently */
    int64_t gave_back_at_ms;
    bool at_or_above; /* held >= share */
};

/* paced = start + jitter + min(1 s * before, ttl / 2); with a recent
 * give-back: max(paced, gave_back_at + 2 ttl); at or above share: paced +
 * ttl; else paced. */
int64_t placement_claim_due(const struct placement_claim *c);
/* How long to sleep before re-checking: min(due - now, ttl / 3), >= 0. */
int64_t placement_claim_sleep_ms(int64_t due, int64_t now, int64_t ttl_ms);
/* Wait while another node holds the queue: (ttl if at or above share, else
 * ttl / 3) + jitter. */
int64_t placement_held_wait_ms(int64_t ttl_ms, bool at_or_above,
                               int64_t jitter_ms);
/* Delay before retrying a failed claim (docs/design/protocol.md §7): not
 * retriable -> ttl; retry_after_ms >= 0 -> min(it, ttl); else min(1 s <<
 * (failures - 1) (shift <= 16) + jitter, ttl). */
int64_t placement_claim_retry_ms(int failures, bool is_retriable,
                                 int64_t retry_after_ms, int64_t jitter_ms,
                                 int64_t ttl_ms);

/* ---- presence beat ------------------------------------------------------ */

/* The beat's batch: [put(key, doc, ttl) unconditional, getPrefix(prefix,
 * 1000, after)]. Borrows every string; ops[2] filled. */
void placement_beat_ops(struct kv_op ops[2], struct slice key, struct slice doc,
                        int64_t ttl_seconds, struct slice prefix,
                        struct slice after);
/* Count the rows of a getPrefix result into *rows and whether own_key was
 * among them; *more tells the caller to page on with the result's
 * next_after. */
void placement_beat_count(const struct kv_result *r, struct slice own_key,
                          uint32_t *rows, bool *saw_own, bool *more);
/* N = rows + (saw_own ? 0 : 1); always >= 1. */
uint32_t placement_nodes(uint32_t rows, bool saw_own);

/* This node's presence row. Borrowed strings. */
struct placement_presence {
    const char *sink;
    const char *instance;
    const char *incarnation; /* 16 hex digits, fresh per process */
    int64_t since_ms;        /* creation wall ms */
    int64_t ttl_ms;
    uint8_t tenant[16];
};

/* The beat's I/O, through the broker seam only: put the presence row and
 * count the rows under the prefix, paging while truncated. *nodes = N >= 1.
 * Returns 0, or the KV call's error (the host warns at most once per 30 s
 * and retries). */
int placement_beat(const struct sink_broker *b,
                   const struct placement_presence *p, uint32_t *nodes,
                   struct err *err);

/* ---- give-back decision ----------------------------------------------- */

struct placement_held {
    struct slice name;
    uint64_t buffered;
};

/* The held queue with the least buffered bytes, ties by name bytes
 * ascending; -1 when n == 0. (b,10),(a,30),(c,10) -> b; (z,0),(y,0) -> y. */
ptrdiff_t placement_pick(const struct placement_held *v, size_t n);

struct placement_state {
    bool is_over; /* over share since over_since_ms */
    int64_t over_since_ms;
    bool is_giving;              /* a give-back in flight */
    char giving[KV_KEY_MAX + 1]; /* its queue: a name whose KV keys fit
                                    KV_KEY_MAX fits here whole */
    bool is_released;            /* its lease has been given back */
    int64_t released_at_ms;
};

enum placement_verdict {
    PLACEMENT_NOTHING,
    PLACEMENT_WAIT,        /* a give-back in flight */
    PLACEMENT_TAKEN_OVER,  /* "the queue given back is held by another node" */
    PLACEMENT_NOBODY_TOOK, /* "no node took the queue given back within a
                              TTL; moving on" */
    PLACEMENT_GIVE_BACK,   /* drain the queue named in st->giving */
};

struct placement_input {
    int64_t now_ms;
    int64_t ttl_ms;
    uint32_t share;
    const struct placement_held *held;
    size_t n_held;
    bool giving_held_by_other; /* the given-back queue's holder is another
                                  node (only read once released) */
};

/* One decide() after a beat. Updates st. */
enum placement_verdict placement_decide(struct placement_state *st,
                                        const struct placement_input *in);
/* The host tells the state the give-back's lease was released. */
void placement_on_released(struct placement_state *st, int64_t now_ms);

#endif
