/* The lease of one queue (docs/design/protocol.md §3): a KV row in namespace
 * queen-s3, key s3:<sink>:<esc queue>:lease, value {"instance","incarnation",
 * "sinceMs"} with a TTL of max(1, ttl_ms / 1000) seconds.
 *   (1) The handle holds the version of the row it last wrote (0 = not
 *       held) and a sticky lost flag: once lost, never held again.
 *   (2) Every intent and commit-pointer write goes out as one batch with the
 *       fence op at index 0 (a required put expecting the current version),
 *       so a node whose lease was taken over cannot move a pointer.
 *   (3) Fences are serialised by the handle's lock, so the refresher and
 *       the driver never race each other's version. A fence that loses to
 *       a row carrying this handle's own incarnation (an earlier call of
 *       ours landed after its caller gave up) adopts that row's version and
 *       resends once: only this handle writes its incarnation, and only at
 *       a version it wrote, so nobody came in between. Any other row loses.
 *   (4) The fence keeps pointers safe; the age check keeps objects from a
 *       stale owner out of the bucket. The handle remembers when its last
 *       renewal that landed was sent (acquire, takeover, fence or heartbeat;
 *       sent, not answered: the row's TTL runs from a moment after that).
 *       Every PUT of a window's objects, parts, Complete, manifest and
 *       checkpoint first asks lease_check_age(): a lease renewed TTL -
 *       margin ago or longer is lost here and then (sticky, as a lost
 *       fence), the PUT is not sent and the driver stops Fenced, so this
 *       node never writes while another may already own the queue.
 *
 *   FREE --lease_acquire: putIfAbsent applied--------------> HELD
 *   FREE --lease_acquire: our instance, another incarnation-> HELD (takeover)
 *   HELD --lease_fenced / lease_refresh: fence lost---------> LOST (sticky)
 *   HELD --lease_fenced / lease_refresh: row absent---------> LOST (expired)
 *   HELD --lease_check_age: renewed >= TTL - margin ago------> LOST (sticky)
 *   HELD --lease_release: delete if ours--------------------> FREE
 *
 * Thread-safe: the driver's thread and the host's refresher may share one
 * handle. */
#ifndef QUEEN_SINK_LEASE_H
#define QUEEN_SINK_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "base/err.h"
#include "sink/driver.h"

#define LEASE_NS              "queen-s3"
#define LEASE_RELEASE_BUDGET  10000 /* ms */
#define LEASE_RELEASE_STEP_MS 100
#define LEASE_RELEASE_MAX_MS  1000

/* The clock of the blocking loops (release); NULL fields mean the real
 * CLOCK_MONOTONIC and nanosleep. */
struct lease_clock {
    int64_t (*now_ms)(void *arg);
    void (*sleep_ms)(void *arg, int64_t ms);
    void *arg;
};

struct lease_config {
    const char *sink;     /* borrowed, outlives the handle */
    const char *queue;    /* borrowed */
    const char *instance; /* this node's name; borrowed */
    uint8_t tenant[16];
    int64_t ttl_ms;
    /* Fills n random bytes (the incarnation); NULL = getrandom(). */
    void (*random_bytes)(void *arg, uint8_t *out, size_t n);
    void *random_arg;
    struct lease_clock clock;
};

/* TTL in seconds: max(1, ttl_ms / 1000). */
int64_t lease_ttl_seconds(int64_t ttl_ms);
/* Refresh interval: max(100, ttl_seconds * 1000 / 3) ms. */
int64_t lease_refresh_interval_ms(int64_t ttl_ms);
/* The margin a PUT keeps below the TTL (invariant 4): max(1 s, TTL / 5),
 * but at most TTL / 2; TTL = ttl_seconds * 1000 ms. 30 s -> 6 s (a PUT
 * needs a renewal younger than 24 s), 3 s -> 1 s, 1 s -> 500 ms. */
int64_t lease_margin_ms(int64_t ttl_ms);

struct lease;

/* Borrows cfg's strings and b. Returns owned (free with lease_free()), or
 * NULL with ERR_INVALID / ERR_TOO_BIG when the key cannot be built. */
struct lease *lease_new(const struct lease_config *cfg,
                        const struct sink_broker *b, struct err *err);
void lease_free(struct lease *l);

/* The 16 lowercase hex digits of this handle (NUL-terminated). */
const char *lease_incarnation(const struct lease *l);
/* The KV key (NUL-terminated). */
const char *lease_key(const struct lease *l);
uint64_t lease_version(struct lease *l);
/* The sticky lost flag; never waits, even while a fence is in flight. */
bool lease_lost(struct lease *l);
/* Why the lease was lost (the first reason), as a sentence for the fence
 * message: another instance holds it, it aged out here (lease_check_age),
 * its row was gone at a renewal (it expired: nobody holds it), or the
 * broker refused its renewal for good. Only TAKEN says another instance
 * holds the queue. */
enum lease_lost_why {
    LEASE_LOST_NONE = 0,
    LEASE_LOST_TAKEN,
    LEASE_LOST_AGE,
    LEASE_LOST_REFUSED,
    LEASE_LOST_EXPIRED
};
const char *lease_lost_reason(struct lease *l);
enum lease_lost_why lease_lost_cause(struct lease *l);
/* A fenced batch whose call failed may still have landed: adopt version v
 * of a row that carries this handle's incarnation. Ignored once lost. */
void lease_adopt_version(struct lease *l, uint64_t v);
void lease_mark_lost(struct lease *l);

enum lease_holder_kind { LEASE_FREE, LEASE_MINE, LEASE_OTHER };

/* Who holds the row: FREE, MINE (this instance, any incarnation) or OTHER
 * with the holder's instance ("unknown" for an unparsable row) copied into
 * other (cap bytes). Returns 0 or the KV call error. */
int lease_holder(struct lease *l, enum lease_holder_kind *kind, char *other,
                 size_t cap, struct err *err);

/* Claim the lease at wall_ms (sinceMs). *taken true: held (version kept);
 * false: holder names the winner (cap bytes). Returns 0 or a KV call
 * error. */
int lease_acquire(struct lease *l, int64_t wall_ms, bool *taken, char *holder,
                  size_t cap, struct err *err);

/* Send [fence, ops...] as one batch (resent once after adopting our own
 * row's newer version, invariant 3). Borrows ops. On status 0 the fence's
 * new version is kept (an unapplied fence or version 0 marks the lease
 * lost and returns ERR_PRECONDITION); a precondition at index 0 marks the
 * lease lost. Returns 0 or ERR_PRECONDITION with *out filled (free with
 * kv_answer_free(); results index-aligned with [fence, ops...]), or a call
 * error with *out empty. ERR_PRECONDITION also when the lease is already
 * lost or not held (nothing sent). */
int lease_fenced(struct lease *l, const struct kv_op *ops, size_t n,
                 struct kv_answer *out, struct err *err);

/* Invariant 4, before every PUT: 0 when the last renewal that landed was
 * sent less than TTL - margin ago on the handle's clock; otherwise the
 * lease is marked lost and ERR_PRECONDITION names the age, the TTL and the
 * margin. ERR_PRECONDITION also when already lost. Never waits: any
 * thread, while a fence is in flight. */
int lease_check_age(struct lease *l, struct err *err);
/* lease_check_age() as the S3 client's may_send gate (arg: the lease). */
int lease_may_send(void *arg, struct err *err);

/* Send [fence] alone (the refresher's heartbeat). 0; a retriable call
 * error (the caller warns "lease refresh failed; retrying on the next
 * tick"); or ERR_PRECONDITION / a non-retriable error: the lease is marked
 * lost, and lease_lost_cause() says how (the caller logs "lease lost:
 * another instance owns this queue" only for LEASE_LOST_TAKEN; a row found
 * absent is "lease expired"). Logs nothing itself. */
int lease_refresh(struct lease *l, struct err *err);

/* Give the row back if held: version := 0, then delete-if-ours within
 * LEASE_RELEASE_BUDGET ms, retrying every 100 ms doubling to 1 s. Returns
 * 0, or ERR_TIMEOUT when it gave up (warned; the row expires). */
int lease_release(struct lease *l);

/* The delete-if-ours loop shared with presence rows: get key; absent or
 * another incarnation -> done; else delete(expect = its version). what
 * names the row in the logs ("lease", "presence row"). */
int lease_delete_if_ours(const struct sink_broker *b, const uint8_t tenant[16],
                         const char *key, const char *incarnation,
                         const char *what, const struct lease_clock *clock);

/* Fill *op with the put of key=value for batches: ttl_seconds 0 = forever;
 * expect NULL = unconditional. Borrows key and value. */
void lease_put_op(struct kv_op *op, const char *key, struct slice value,
                  int64_t ttl_seconds, const uint64_t *expect, bool required);

/* 16 lowercase hex digits from 8 random bytes into out[17]. */
void lease_new_incarnation(void (*random_bytes)(void *, uint8_t *, size_t),
                           void *arg, char out[17]);

#endif
