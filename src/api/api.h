/* The HTTP API routes (docs/design/http-api.md): thin JSON wrappers over the
 * store's plain C reads (store_fetch, store_changed, store_list_queues) and
 * the raft node's proposals. The sink calls the same store functions
 * in-process, so what a client and the sink see cannot drift apart.
 *
 * Each route family has one file: push.c, fetch.c, changed.c, queues.c,
 * health.c, status.c, metrics.c (and kv.c, api/kv.h); tenant.c says whose
 * data a call touches (api/tenant.h). A route splits into a pure part (parse
 * the body into store requests, render a store answer as JSON; unit tested
 * and fuzzed) and a handler that runs the I/O on the loop thread.
 *
 * Invariants:
 *   (1) A refused request changes nothing: bodies are parsed and checked in
 *       full before any command is proposed.
 *   (2) Payloads are the producer's bytes: the push parser hands the JSON
 *       span to the command, fetch splices the stored bytes back verbatim.
 *   (3) Every long-poll waiter is answered exactly once: by a re-read after
 *       an apply changed a partition it names, by its deadline, when its
 *       peer went away, or by api_stop() at shutdown.
 *   (4) Long polls cannot starve the loop: a change re-reads only the
 *       waiters of the changed partitions (api/longpoll.h), their number is
 *       bounded per connection (429) and per node (503), and a parked fetch
 *       keeps its entries only, not the request body.
 *
 * Threading: everything runs on the node loop thread. */
#ifndef QUEEN_API_API_H
#define QUEEN_API_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "api/longpoll.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "base/uuid7.h"
#include "base/version.h"
#include "raft/cmd.h"
#include "raft/fsm.h"
#include "store/store.h"

struct http_req;
struct http_server;
struct router;
struct node;
struct metrics;

#define API_VERSION            QUEEN_VERSION /* base/version.h */
#define API_MAX_ENTRIES        1024 /* docs/design/http-api.md §3, §4 */
#define API_FETCH_MAX_BYTES    ((uint64_t)8 << 20)
#define API_FETCH_DEF_BYTES    ((uint64_t)1 << 20)
#define API_FETCH_MAX_WAIT_MS  30000
#define API_LONG_POLL_SLICE_MS 1000 /* check deadline and peer this often */
#define API_WAKE_BATCH         256  /* re-reads per loop turn */
/* Token caps of the body scans (20 bytes a token): bodies are scanned to
 * depth 3 only (payloads are spans), so these bound memory, not payloads. */
#define API_PUSH_MAX_TOKENS 4000000
#define API_READ_MAX_TOKENS 1000000

/* ---- shared parsing ---- */

struct api_range {
    int64_t def; /* absent or null */
    int64_t lo;
    int64_t hi;
};

/* Read the optional integer member key of object obj, clamped to [lo, hi];
 * an integer beyond 64 bits clamps by its sign. Returns false when the
 * member is present but not an integer. */
bool api_json_int(const struct json_doc *d, int obj, const char *key,
                  const struct api_range *r, int64_t *out);

/* A queue or partition name a request gives (docs/design/http-api.md §1),
 * checked the same way by every route that takes one. Returns 0;
 * ERR_TOO_BIG over CMD_NAME_MAX bytes ("<where>: name of N bytes is over
 * the 447-byte limit", 413 too_large); any bytes are a name's, control
 * bytes and NUL included (formats.md §1, §6). where (printf-style, printed
 * only for a name refused: push checks two names per item) names the
 * field, e.g. "items[2].queue"; the name's own bytes are never quoted. */
int api_check_name(struct slice name, struct err *err, const char *where, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- push (docs/design/http-api.md §2) ----------------------------------- */

/* Mint one message id (16 bytes). The receiver uses a UUIDv7 generator;
 * tests pass a counter. */
typedef void (*api_mint_fn)(void *ctx, uint8_t id[16]);

struct api_push {
    struct json_doc doc;
    size_t n;
    struct cmd_push_item *items; /* slices into the body or arena */
    bool *has_txn;               /* per item: the producer gave one */
    char (*id_text)[37];         /* per item: the minted id, formatted */
    struct buf arena;            /* unescaped names; never reallocated */
    struct buf sealed; /* sealed payloads (api_push_seal); never moves */
};

/* Parse a push body (borrowed; must outlive p) into items, check names
 * (api_check_name), and default partitions to "Default". Returns 0;
 * ERR_INVALID with err->msg "bad push body: <why>" (answer 400 bad_body);
 * ERR_TOO_BIG when a name is over CMD_NAME_MAX bytes, a transactionId over
 * CMD_TXN_MAX, there are more than CMD_PUSH_MAX_ITEMS items, or the body
 * needs more than API_PUSH_MAX_TOKENS tokens (413 too_large). Free p with
 * api_push_free() in every case. */
int api_push_parse(struct api_push *p, const char *body, size_t len,
                   struct err *err);
/* Give every item a message id, and the id's text as txn where the producer
 * gave none. */
void api_push_mint(struct api_push *p, api_mint_fn mint, void *ctx);
/* docs/design/formats.md §11: seal the payload of every item i with seal[i]
 * under key, before anything is proposed, so the raft log, snapshots and
 * LMDB hold only ciphertext: in base/aead.h's binary form (and its
 * `sealed` set) when binary, which a node asks for once the cluster's
 * format allows it (store/format.h), else as the JSON envelope every build
 * reads. A sealed item's payload then points into p->sealed, reserved in
 * one piece first so it never moves. Returns how many items could not be
 * sealed: those keep their plaintext (a push never fails for this). */
size_t api_push_seal(struct api_push *p, const bool *seal,
                     const uint8_t key[32], bool binary);
/* Render the 201 array for the applied command's result (res->n_items ==
 * p->n). Appends to out. */
int api_push_render(const struct api_push *p, const struct fsm_result *res,
                    struct buf *out, struct err *err);
/* Sum of payload bytes of the items res says were queued. */
uint64_t api_push_queued_bytes(const struct api_push *p,
                               const struct fsm_result *res);
void api_push_free(struct api_push *p);

/* ---- fetch (docs/design/http-api.md §3) ---------------------------------- */

struct api_fetch {
    struct json_doc doc;
    size_t n;
    struct store_fetch_req *reqs; /* partition names into body or arena */
    struct buf arena;
    int64_t max_wait_ms; /* 0..API_FETCH_MAX_WAIT_MS */
    uint64_t min_bytes;  /* default 1 */
};

/* Parse a fetch body (borrowed). An absent, null or empty partition reads
 * "Default", as push writes it. Returns 0, or ERR_INVALID with *code set:
 * "bad_body" (err->msg "bad fetch body: <why>": an empty queue or a field
 * read twice in its object (json_obj_pick) among them), or NULL for the
 * envelopes without a code ("too many entries", "offset must be
 * non-negative"); or ERR_TOO_BIG past API_READ_MAX_TOKENS or for a name
 * over CMD_NAME_MAX bytes (413, push's sentence: api_check_name). Free
 * with api_fetch_free() in every case. */
int api_fetch_parse(struct api_fetch *f, const char *body, size_t len,
                    const char **code, struct err *err);
/* {"entries":[…]} for ans, in request order. */
int api_fetch_render(const struct api_fetch *f,
                     const struct store_fetch_answer *ans, struct buf *out,
                     struct err *err);
/* The answer's weight for minBytes: sum of max(1, payload length). */
uint64_t api_fetch_weight(const struct store_fetch_answer *ans);
/* Whether a long poll should answer now: an entry error, or weight >=
 * min_bytes. */
bool api_fetch_is_ready(const struct api_fetch *f,
                        const struct store_fetch_answer *ans);
/* Keep only what a re-read and the answer need: copy the entries' names
 * into a new arena sized for them, and free the token array and the old
 * arena, so f no longer borrows the body (which the caller may free). */
void api_fetch_compact(struct api_fetch *f);
void api_fetch_free(struct api_fetch *f);

/* ---- partitions changed (docs/design/http-api.md §4) --------------------- */

struct api_changed {
    struct json_doc doc;
    size_t n;
    struct store_changed_req *reqs;
    struct buf arena;
};

/* Same conventions as api_fetch_parse (names, empty queues and repeated
 * fields too): "bad_body", or NULL for "too many entries" and "bad body:
 * entry <i>: since is not a timestamp: <v>". */
int api_changed_parse(struct api_changed *c, const char *body, size_t len,
                      const char **code, struct err *err);
int api_changed_render(const struct api_changed *c,
                       const struct store_changed_answer *ans, struct buf *out,
                       struct err *err);
void api_changed_free(struct api_changed *c);

/* ---- queues (docs/design/http-api.md §8) ---- */

/* {"queues":[{"name":…,"partitions":n},…]} in the list's order. */
int api_queues_render(const struct store_queue_list *l, struct buf *out,
                      struct err *err);

/* ---- configure (docs/design/http-api.md §5) ------------------------------ */

struct api_configure {
    struct json_doc doc;
    struct slice queue; /* unescaped, into arena */
    bool is_replace;    /* mode "replace" (default merge) */
    int opts;           /* token of the options object, 0 = the root */
    struct buf arena;
};

/* Parse a configure body (borrowed). Returns 0, or ERR_INVALID with *code
 * "bad_body" (unparsable: "bad configure body: <why>"), "bad_request"
 * ("queue is required") or
 * NULL ("mode must be \"merge\" or \"replace\", got <v>"); ERR_TOO_BIG
 * (413, "too_large") for a queue name over CMD_NAME_MAX bytes or too many
 * tokens. Free with api_configure_free() in every case. */
int api_configure_parse(struct api_configure *c, const char *body, size_t len,
                        const char **code, struct err *err);
/* Apply the request's options onto o (the starting configuration: the
 * stored one for merge, the configured defaults for replace or a new
 * queue). A stored hold ceiling of 0 reads as 604800. Returns 0, or
 * ERR_INVALID with the message of docs/design/http-api.md §5 and o unchanged.
 * */
int api_configure_merge(const struct api_configure *c,
                        struct store_queue_options *o, struct err *err);
/* The 200 answer of docs/design/http-api.md §5. Appends to out. */
int api_configure_render(struct slice queue, const uint8_t uuid[16],
                         const struct store_queue_options *o, struct buf *out,
                         struct err *err);
void api_configure_free(struct api_configure *c);
/* The CMD_CONFIGURE apply handler (fsm_apply_fn; arg unused): stores the
 * command's options for its queue, creating the queue. */
int api_configure_apply(void *arg, struct store *s, MDB_txn *txn,
                        const struct cmd_header *h, struct fsm_result *res,
                        struct err *err);

/* ---- the runtime ------------------------------------------------------- */

/* Appends a JSON member (",\"s3\":{…}") to /status, or Prometheus lines to
 * /metrics/prometheus: the sink's hooks. */
typedef int (*api_extra_fn)(void *arg, struct buf *out, struct err *err);
/* The /status hook: tenant NULL shows every sink; else (the canonical text
 * of the tenant a bearer token is bound to) that tenant's sinks only. */
typedef int (*api_status_fn)(void *arg, const char *tenant, struct buf *out,
                             struct err *err);

struct api_waiter; /* a long-poll fetch (fetch.c) */

/* A cluster member's HTTP address (QUEEN_RAFT_PEERS, or a member added
 * through this node), for the leader hint of a 503 and the members of
 * /status. */
#define API_MAX_PEERS 9
struct api_peer {
    uint64_t id;
    char http[256];
};

struct api {
    uv_loop_t *loop;
    struct store *store;
    struct node *node;
    struct http_server *server; /* for its metrics; may be NULL */
    struct router *router;      /* for its metrics; may be NULL */
    struct metrics *metrics;
    struct uuid7_gen gen;
    struct api_waiter *waiters; /* doubly linked: every parked fetch */
    struct longpoll lp;         /* their index and bounds (api/longpoll.h) */
    uv_timer_t wake_timer;      /* drains lp's pending waiters */
    bool has_wake_timer;
    uint64_t n_rereads; /* re-reads of parked waiters after a change */
    bool is_stopping;
    bool is_tenancy_header;   /* QUEEN_TENANCY_HEADER (api/tenant.h) */
    bool is_sink_kv_writable; /* QUEEN_KV_UNSAFE_SINK_WRITES (api/kv.h (2)) */
    api_status_fn status_extra;
    void *status_extra_arg;
    api_extra_fn metrics_extra;
    void *metrics_extra_arg;
    /* QUEEN_ENCRYPTION_KEY (broker/config.h): pushes to a queue with
     * encryptionEnabled are sealed with it; without it they are stored
     * plaintext with a warning at most once a minute. Secret. */
    bool has_seal_key;
    uint8_t seal_key[32];
    int64_t seal_warned_ms;  /* monotonic ms of the last such warning */
    uint64_t seal_plaintext; /* records stored plaintext since then */
    uint64_t self_id;        /* QUEEN_RAFT_NODE_ID */
    size_t n_peers;          /* 0: a single node */
    struct api_peer peers[API_MAX_PEERS];
};

/* The HTTP address of raft member id (QUEEN_RAFT_PEERS, or a member added
 * through this node), or NULL. */
const char *api_peer_http(const struct api *a, uint64_t id);
/* Remember (or update) member id's HTTP address; ignored past
 * API_MAX_PEERS. */
void api_peer_remember(struct api *a, uint64_t id, const char *http);

/* ---- cluster membership (api/cluster.c) ---------------------------------- */

/* Write the "cluster" value: term, leaderId and the members as this node
 * knows them. */
void api_cluster_block(const struct api *a, struct jw *w);
void api_handle_members(struct http_req *req, void *arg);
void api_handle_member_add(struct http_req *req, void *arg);
void api_handle_member_remove(struct http_req *req, void *arg);

/* Borrows loop, store and node (they outlive a). With a node, registers
 * api_changed as its fsm's change hook (raft/fsm.h), so an append applied
 * on this node, proposed here or not, wakes the waiters of its partitions.
 * The long-poll bounds take their defaults (api_long_poll_limits). */
void api_init(struct api *a, uv_loop_t *loop, struct store *store,
              struct node *node);
/* Set the long-poll bounds (QUEEN_MAX_LONG_POLLS_PER_CONN,
 * QUEEN_MAX_LONG_POLLS; 0 = default); before the first fetch. */
void api_long_poll_limits(struct api *a, size_t per_conn, size_t per_node);
/* Answer every waiter now and refuse new long polls (SIGTERM). */
void api_stop(struct api *a);
/* Unregisters the hook and closes the wake timer: run the loop once after
 * it before freeing a. */
void api_free(struct api *a);

/* The fsm change hook (fsm_change_fn; arg is the struct api): the waiters
 * naming (tenant, queue, partition) that the appended weight may satisfy
 * (api/longpoll.h (4)), or every waiter of tenant when queue is NULL (of
 * every tenant when tenant is NULL too), are re-read on the loop's next
 * turn, at most API_WAKE_BATCH a turn. */
void api_changed(void *arg, const uint8_t *tenant, const struct slice *queue,
                 const struct slice *partition, uint64_t weight);

/* Route handlers (http_handler_fn); arg is the struct api. */
void api_handle_push(struct http_req *req, void *arg);
void api_handle_fetch(struct http_req *req, void *arg);
void api_handle_changed(struct http_req *req, void *arg);
void api_handle_queues(struct http_req *req, void *arg);
void api_handle_health(struct http_req *req, void *arg);
void api_handle_status(struct http_req *req, void *arg);
void api_handle_stats_refresh(struct http_req *req, void *arg);
void api_handle_metrics(struct http_req *req, void *arg);
void api_handle_configure(struct http_req *req, void *arg);
/* POST /api/v1/configure's work for a tenant already decided (the control
 * plane's POST /api/cp/clusters/:id/configure): parse req's body, merge,
 * propose, answer req. Borrows req until it answers. */
void api_configure_for(struct api *a, struct http_req *req,
                       const uint8_t tenant[16]);

/* Add every route above to r, with a as their arg. */
int api_routes(struct api *a, struct router *r, struct err *err);

/* Answer with the envelope; code NULL gives {"error": msg} alone. */
void api_respond_error(struct api *a, struct http_req *req, int status,
                       const char *code, const char *msg);
/* Answer with a JSON body (taken). */
void api_respond_json(struct api *a, struct http_req *req, int status,
                      struct buf *body);
/* Map an ERR_* from a proposal or a read to a status and answer. */
void api_respond_err(struct api *a, struct http_req *req,
                     const struct err *err);

#endif
