/* The raft node: libraft 0.15 with its libuv I/O and TCP transport on the
 * node loop, the fsm over the store, proposals with stamps, and a clean
 * close.
 *
 * libraft 0.15 traps this file handles (docs/design/dependencies.md §1):
 *   - raft_close() with disk writes in flight aborts inside libraft: close
 *     runs a barrier first (when leader), then waits CLOSE_DELAY_MS on a
 *     timer, and only then calls raft_close();
 *   - SIGPIPE kills the process when a peer goes away: ignored at start;
 *   - a multi-buffer raft_apply calls back after the FIRST entry: we never
 *     pass more than one buffer;
 *   - entry buffers come from raft_malloc (our arena, raft/arena.h, is
 *     installed as its heap) and belong to raft once
 *     raft_apply returned 0;
 *   - the default snapshot threshold costs ~10x throughput: we set a high one;
 *   - RAFT_CANTBOOTSTRAP on an existing data dir is the normal restart.
 *
 * Leadership: libraft 0.15 has no state-change callback, so a 10 ms tick
 * (and every proposal) looks at raft_state(). A node that finds itself leader
 * in a term it has not made ready issues a barrier; proposals are refused
 * until the barrier applied, so a new leader stamps above every entry of the
 * earlier terms (it has applied them all by then). */
#include "raft/node.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <raft/uv.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "raft/arena.h"
#include "raft/cmd.h"
#include "raft/forward.h"
#include "raft/raft_trash.h"
#include "raft/snapshot.h"
#include "raft/transport.h"
#include "store/store_impl.h"

#define TICK_MS      10
#define HELD_WARN_MS 10000
/* A gap between two check phases of the loop up to this long is time raft
 * sees pass; the rest of a longer gap, a hold, is kept from its clock
 * (io_time_held_out). The heartbeat timeout: a loop slower than that still
 * sends a heartbeat every turn, as without the wrapper. */
#define HOLD_FREE_MS     100
#define CLOSE_DELAY_MS   200
#define CLOSE_BARRIER_MS 2000
#define ASYNC_MAX        4096
#define FULL_RESERVE     ((uint64_t)64 << 20)
#define REAP_ROUNDS_MAX  2000 /* 1 ms rounds */
/* While a snapshot's worker still reads the store. */
#define REAP_ROUNDS_SNAP 120000
/* How long a leader waits for a follower to answer an InstallSnapshot
 * before it sends it again (libraft's default: 30 s): at least this, plus
 * three times the last full dump ("Full snapshots for followers"). */
#define INSTALL_TIMEOUT_MS     10000
#define INSTALL_TIMEOUT_MAX_MS 600000
#define SNAP_GET_MAX           16 /* snapshot_get calls waiting for a dump */
/* A forwarded write waits at most this long for the leader's answer, and
 * then as long again for this node's own apply of the entry. */
#define FWD_TIMEOUT_MS     10000
#define FWD_MAX            4096 /* forwarded writes in flight */
#define RETRY_TICKS        100 /* a stalled apply is retried about once a second */
#define RAFT_SEGMENT_BYTES ((size_t)64 << 20)
/* libraft keeps the segment being written and a pool of two prepared ones,
 * each of the full segment size (fallocate). */
#define RAFT_SEGMENTS_LIVE 3
/* What the store needs on disk besides the log to boot and take writes. */
#define STORE_BOOT_BYTES ((uint64_t)16 << 20)
/* Default snapshot spacing in BYTES of log (libraft counts entries and keeps
 * every entry since the last snapshot in memory, on every node): 32768
 * entries of a 100-record push (~13 KB) as measured, and an eighth of it
 * trailing. Group commit makes entries larger, so the entry thresholds
 * follow the mean size of the entries this node stores, proposed or
 * received (snap_tune()), to keep the memory bounded
 * (QUEEN_RAFT_LOG_MEMORY_MB). */
#define SNAP_LOG_BYTES     ((uint64_t)448 << 20)
#define SNAP_THRESHOLD_MIN 64
#define SNAP_THRESHOLD_MAX 32768
#define SNAP_TRAILING_MIN  16
#define SNAP_TRAILING_MAX  4096

struct proposal {
    struct raft_apply req;
    struct node *node;
    node_applied_fn cb;
    void *arg;
    struct proposal *next_failed; /* (P1) */
    int failed_status;
};

/* A committed entry handed to the fsm by libraft, applied later (see
 * "Deferred apply" below). */
struct deferred {
    struct deferred *next;
    uint64_t index;
    const void *base; /* raft's entry bytes, borrowed until applied */
    size_t len;
    unsigned gen;          /* check generation it was queued in */
    bool is_applied;       /* applied by a drain, answer not yet delivered */
    struct fsm_result res; /* the saved result when is_applied (items owned) */
    bool has_res;          /* false: the entry was skipped by fsm (1) */
    struct proposal *prop; /* whose callback gets the result, or NULL */
};

/* A write this follower forwarded to the leader ("Forwarded proposals"). */
struct fwd_wait {
    struct fwd_wait *next;
    uint64_t id;      /* on the forward channel */
    uint64_t hold;    /* commit index when created: (F1) */
    uint64_t index;   /* the entry's index once the leader answered */
    int64_t deadline; /* ms, monotonic */
    void *bytes;      /* the command, until sent */
    size_t len;
    int type;
    bool is_sent;
    node_applied_fn cb;
    void *arg;
};

/* A follower's forward connection as the leader serves it. */
struct fwd_peer {
    struct fwd_peer *next;
    struct node *node;
    struct fwd_conn *conn; /* NULL once closed */
    unsigned pending;      /* proposals not answered yet */
};

struct fwd_req {
    struct fwd_peer *peer;
    uint64_t id;
};

struct async_item {
    struct async_item *next;
    int type;
    void *bytes;
    size_t len;
    node_applied_fn cb;
    void *arg;
};

struct node {
    uv_loop_t *loop;
    struct raft raft;
    struct raft_io io;
    struct raft_uv_transport transport;
    struct raft_fsm rfsm;
    struct fsm *fsm;
    struct store *store;
    uint64_t id;
    char *address;
    char *raft_dir;
    int64_t last_stamp;      /* greatest stamp proposed by this node */
    uint64_t ready_term;     /* term whose barrier applied; 0 = none */
    uint64_t led_term;       /* the term this node leads, ready; 0 = none */
    uint64_t tick_ms;        /* uv_now() at the last tick, 0 before the first */
    uint64_t held_warned_ms; /* uv_now() when check_tick_gap last warned */
    bool barrier_pending;
    struct raft_barrier barrier;
    uint64_t barrier_term;
    bool closing;
    int open_handles; /* our own uv handles not yet closed */
    uv_timer_t tick;
    uv_timer_t close_timer;
    uv_async_t async;
    pthread_mutex_t mu; /* guards the async queue */
    struct async_item *q_head;
    struct async_item *q_tail;
    size_t q_len;
    bool q_closed;
    struct raft_barrier close_barrier;
    int reap_rounds;
    unsigned ticks;
    bool sync_pending;
    uv_work_t sync_work;
    uv_check_t apply_check; /* applies deferred entries */
    /* raft's clock less the time the loop was held (io_time_held_out) */
    uv_check_t hold_check;  /* measures the loop's holds */
    uint64_t hold_mark_ms;  /* uv_hrtime() ms at the last check, 0 = none */
    uint64_t held_out_ms;   /* loop time kept from raft's clock */
    raft_time raft_time_ms; /* the last time raft was told */
    uv_idle_t apply_idle;   /* keeps poll from blocking while some wait */
    struct deferred *d_head;
    struct deferred *d_tail;
    unsigned check_gen;
    bool is_stalled; /* (D3) */
    /* (D4) storage failure: why, where it came from, since when. */
    int storage_code;     /* 0 = none, else ERR_FULL or ERR_BUSY */
    bool is_storage_raft; /* the raft log failed (else the store) */
    /* An append failed while this node followed: libraft 0.15 keeps those
     * entries in its in-memory log and never writes them again, so only a
     * restart (which reloads the log from disk) brings it back in step. */
    bool is_log_diverged;
    bool is_restart_asked; /* storage_reason says "restart this node" */
    /* A leader whose storage fails hands its leadership on (storage_fail) */
    struct raft_transfer transfer;
    bool is_transferring;
    char storage_reason[256];
    char storage_logged[256]; /* the last reason logged at ERROR */
    int64_t storage_since_us;
    size_t segment_bytes;
    atomic_bool is_sync_failed; /* the last store sync failed (worker) */
    unsigned n_uncommitted;     /* our proposals not yet at apply_cb */
    node_commit_fn commit_fn;
    void *commit_arg;
    /* (P1) proposals libraft failed, answered from the tick */
    struct proposal *failed_head;
    struct proposal *failed_tail;
    int (*fsm_apply)(struct raft_fsm *fsm, const struct raft_buffer *buf,
                     void **result);
    int (*fsm_snapshot)(struct raft_fsm *fsm, struct raft_buffer *bufs[],
                        unsigned *n_bufs);
    int (*fsm_restore)(struct raft_fsm *fsm, struct raft_buffer *buf);
    bool is_snap_auto;       /* thresholds follow the mean entry size */
    uint64_t snap_log_bytes; /* the log kept between snapshots */
    uint64_t mean_entry;     /* moving mean of stored entry bytes */
    unsigned snap_threshold; /* as last set on raft */
    /* io->close wrapper state (see io_close_once). */
    void (*uv_io_close)(struct raft_io *io, void (*cb)(struct raft_io *io));
    void (*raft_io_close_cb)(struct raft_io *io);
    bool io_closed;
    /* io->append wrapper state (see io_append_watched). */
    int (*uv_io_append)(struct raft_io *io, struct raft_io_append *req,
                        const struct raft_entry entries[], unsigned n,
                        raft_io_append_cb cb);
    /* io->start wrapper state (see io_start_watched): libraft's receive
     * callback, and the greatest commit index a leader's AppendEntries
     * named (read by /health from the HTTP thread). */
    int (*uv_io_start)(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick,
                       raft_io_recv_cb recv);
    raft_io_recv_cb raft_recv;
    _Atomic uint64_t leader_commit;
    /* io->snapshot_get wrapper state (see io_snapshot_get_full). */
    int (*uv_io_snapshot_get)(struct raft_io *io,
                              struct raft_io_snapshot_get *req,
                              raft_io_snapshot_get_cb cb);
    struct snap_get *sg_head; /* loaded markers waiting for a dump */
    unsigned sg_n;
    struct snap *sg_dump; /* the full dump running, or NULL */
    int64_t sg_began_ms;
    uv_work_t sg_work;
    node_closed_fn closed_cb;
    void *closed_arg;
    bool has_token; /* peers can connect: forwarding works */
    /* Forwarded proposals: as the follower that sends them ... */
    struct fwd_wait *fw_head;
    struct fwd_wait *fw_tail;
    unsigned fw_n;
    uint64_t fw_next_id;
    struct fwd_conn *fw_conn; /* to fw_leader, once dialled */
    uint64_t fw_leader;       /* 0 = no connection, none being dialled */
    int64_t fw_leaderless_at; /* mono ms raft first named no leader while
                                 connected to fw_leader; 0: it names one */
    bool is_fw_dialing;
    bool is_fw_held; /* the deferred queue waits for an answer (F1) */
    /* ... and as the leader that serves them. */
    struct fwd_peer *fw_peers;
    struct member_change *member_waits; /* promotions waiting to retry */
    struct raft_barrier fw_nudge;       /* (F4) */
    bool is_fw_nudging;
    bool is_fw_nudge_due;
    uint64_t fw_forwarded; /* counters for /metrics */
    uint64_t fw_served;
};

static int64_t wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void node_store_dir(const char *dir, char *out, size_t n)
{
    snprintf(out, n, "%s/store", dir);
}

const char *node_role_name(int role)
{
    switch (role) {
    case NODE_FOLLOWER:
        return "follower";
    case NODE_CANDIDATE:
        return "candidate";
    case NODE_LEADER_PENDING:
        return "leader-pending";
    case NODE_LEADER:
        return "leader";
    case NODE_CLOSING:
        return "closing";
    default:
        return "unavailable";
    }
}

/* libraft's getters take a non-const raft; ours promise not to change n. */
static struct raft *raft_of(const struct node *n)
{
    union {
        const struct raft *c;
        struct raft *m;
    } u = {&n->raft};

    return u.m;
}

int node_role(const struct node *n)
{
    struct raft *r = raft_of(n);

    if (n->closing) {
        return NODE_CLOSING;
    }
    switch (raft_state(r)) {
    case RAFT_FOLLOWER:
        return NODE_FOLLOWER;
    case RAFT_CANDIDATE:
        return NODE_CANDIDATE;
    case RAFT_LEADER:
        return n->ready_term == r->current_term ? NODE_LEADER
                                                : NODE_LEADER_PENDING;
    default:
        return NODE_UNAVAILABLE;
    }
}

void node_leader(const struct node *n, uint64_t *id, const char **address)
{
    raft_id lid = 0;

    raft_leader(raft_of(n), &lid, address);
    *id = lid;
}

uint64_t node_applied_index(const struct node *n)
{
    return store_applied_index(n->store);
}

uint64_t node_term(const struct node *n)
{
    return n->raft.current_term;
}

unsigned node_voters(const struct node *n)
{
    unsigned v = 0;

    for (unsigned i = 0; i < n->raft.configuration.n; i++) {
        v += n->raft.configuration.servers[i].role == RAFT_VOTER;
    }
    return v;
}

/* The reverse of raft/snapshot.h (4): a store that applied entries its
 * raft log does not hold. A follower killed while it installed the
 * leader's dump is left so (the new store, the old log) and catches up by
 * itself: the leader sends the dump again. A node that is its own only
 * voter has no one to send it: its raft directory was lost or is older
 * than the store, and it would answer every new entry "applied before
 * this proposal" while it looked healthy, so it cannot start. */
static int store_ahead(struct node *n, struct store *store, struct err *err)
{
    uint64_t applied = store_applied_index(store);
    uint64_t last = (uint64_t)raft_last_index(&n->raft);

    if (applied <= last) {
        return 0;
    }
    if (node_voters(n) > 1) {
        log_warn("node",
                 "store %s is ahead of the raft log (applied %" PRIu64
                 " > last index %" PRIu64 "): waiting for the leader's "
                 "snapshot",
                 store_dir(store), applied, last);
        return 0;
    }
    return err_set(err, ERR_PRECONDITION,
                   "store %s is ahead of the raft log (applied %" PRIu64
                   " > last index %" PRIu64 "; the raft directory lost or "
                   "older): restore the data directory whole from one "
                   "backup, or wipe it to rejoin a cluster",
                   store_dir(store), applied, last);
}

size_t node_members(const struct node *n, struct node_member *out, size_t cap)
{
    const struct raft_configuration *c = &n->raft.configuration;

    bool is_leader =
        n->raft.state == RAFT_LEADER && n->raft.leader_state.progress != NULL;

    for (unsigned i = 0; i < c->n && i < cap; i++) {
        out[i].id = c->servers[i].id;
        out[i].raft_address = c->servers[i].address;
        out[i].is_voter = c->servers[i].role == RAFT_VOTER;
        out[i].has_progress = is_leader;
        if (!is_leader) {
            continue;
        }
        if (c->servers[i].id == n->id) {
            out[i].match_index = n->raft.last_stored;
        } else {
            out[i].match_index = n->raft.leader_state.progress[i].match_index;
        }
    }
    return c->n;
}

void node_forward_counts(const struct node *n, uint64_t *forwarded,
                         uint64_t *served)
{
    *forwarded = n->fw_forwarded;
    *served = n->fw_served;
}

uint64_t node_refused_connections(const struct node *n)
{
    uint64_t refused = 0;

    rtransport_stats(&n->transport, NULL, &refused);
    return refused;
}

struct raft *node_raft(struct node *n)
{
    return &n->raft;
}

uint64_t node_commit_index(const struct node *n)
{
    uint64_t c = n->raft.commit_index;
    uint64_t applied = node_applied_index(n);
    uint64_t leader = atomic_load(&n->leader_commit);

    c = c > applied ? c : applied;
    return c > leader ? c : leader;
}

int64_t node_safe_time(const struct node *n)
{
    return fsm_greatest_stamp(n->fsm);
}

struct fsm *node_fsm(struct node *n)
{
    return n->fsm;
}

static int deferred_drain(struct node *n);
static void deferred_start(struct node *n);
static uint64_t fwd_hold_bound(const struct node *n);
static void fwd_deliver(struct node *n, uint64_t index,
                        const struct fsm_result *res);
static void fwd_tick(struct node *n);
static void failed_drain(struct node *n);
static void fwd_connect(struct node *n);
static int forward_propose(struct node *n, int type, const void *cmd,
                           size_t len, node_applied_fn cb, void *arg,
                           struct err *err);
static int deferred_run(struct node *n, bool is_all);
static void deferred_retry(struct node *n);
static void deferred_abandon(struct node *n);

/* ---- storage failure -----------------------------------------------------
 *
 *   (D4) When the store cannot commit an entry (ENOSPC, EIO, its map full) or
 *        libraft cannot write its log, the node logs the reason at ERROR once
 *        (again only when the reason changes), answers within a tick every
 *        proposal whose entry waits behind the stalled one (the entry is in
 *        the log and is stored once the store recovers, but it is not
 *        acknowledged), and refuses new proposals at once: ERR_FULL when
 *        space ran out, ERR_BUSY for any other storage error. Writes are
 *        taken again when the stalled entry applies (the store; retried
 *        each second, (D3)) or when the raft directory has a segment's
 *        worth of free space (the log). Nothing is skipped. */

static bool is_store_failing(const struct node *n)
{
    return n->storage_code != 0 && !n->is_storage_raft;
}

static void storage_answer_parked(struct node *n);

static void transfer_done(struct raft_transfer *req)
{
    struct node *n = req->data;
    raft_id lid = 0;
    const char *addr = NULL;

    n->is_transferring = false;
    raft_leader(&n->raft, &lid, &addr);
    if (lid != 0 && lid != n->id) {
        log_info("node", "leadership handed on to node %" PRIu64,
                 (uint64_t)lid);
    }
}

static unsigned voters(const struct node *n)
{
    unsigned v = 0;

    for (unsigned i = 0; i < n->raft.configuration.n; i++) {
        v += n->raft.configuration.servers[i].role == RAFT_VOTER;
    }
    return v;
}

/* A leader whose storage fails refuses every write of the cluster, while
 * the other voters could take them: it hands its leadership to one of
 * them (libraft picks the voter; tried again at the next failure, about a
 * second later, if this one did not take). Loop thread. */
static void step_down(struct node *n)
{
    if (n->is_transferring || raft_state(&n->raft) != RAFT_LEADER ||
        voters(n) < 2) {
        return;
    }
    n->transfer.data = n;
    if (raft_transfer(&n->raft, &n->transfer, 0, transfer_done) == 0) {
        n->is_transferring = true;
        n->led_term = 0; /* its end is said here, not as a step-down */
        log_warn("node", "this leader cannot store: handing the leadership "
                         "to another voter");
    }
}

static void storage_fail(struct node *n, const struct err *e, bool is_raft)
{
    /* Told once: the same message again, or any failure of the raft log
     * while it is failing already (a follower's libraft retries each
     * resend in a segment of a new name, so the words change). */
    bool is_repeat = strcmp(e->msg, n->storage_logged) == 0 ||
                     (is_raft && n->storage_code != 0 && n->is_storage_raft);

    if (!is_repeat) {
        log_error("node",
                  "%s; writes are refused until it recovers (retried every "
                  "second)",
                  e->msg);
        snprintf(n->storage_logged, sizeof(n->storage_logged), "%s", e->msg);
    } else {
        log_debug("node", "still failing: %s", e->msg);
    }
    if (n->storage_code == 0) {
        n->storage_since_us = wall_us();
    }
    n->storage_code = e->code == ERR_FULL ? ERR_FULL : ERR_BUSY;
    n->is_storage_raft = is_raft;
    n->is_restart_asked = false; /* a new reason (the probe sets it after) */
    /* The reason goes to clients (507 answers, /health): without the
     * node's directories, which the log line above names. */
    err_public(e->msg, n->storage_reason, sizeof(n->storage_reason));
    step_down(n);
}

static void storage_clear(struct node *n, const char *how)
{
    log_info("node", "storage recovered after %.1f s: %s",
             (double)(wall_us() - n->storage_since_us) / 1e6, how);
    n->storage_code = 0;
    n->storage_reason[0] = '\0';
    n->storage_logged[0] = '\0';
}

/* The refusal of a proposal while storage fails (D4). */
static int storage_refusal(const struct node *n, struct err *err)
{
    return err_set(err, n->storage_code,
                   "insufficient storage, nothing written: %s",
                   n->storage_reason);
}

const char *node_storage_error(const struct node *n)
{
    return n->storage_code != 0 ? n->storage_reason : NULL;
}

/* A failed raft write: RAFT_IOERR / RAFT_NOSPACE with libraft's message msg
 * (it names the file), told as ENOSPC when the raft directory is out of
 * space. Fills err; returns true when it is a storage failure. */
static bool raft_storage_error(struct node *n, int status, const char *msg,
                               struct err *err)
{
    struct statvfs vfs;
    bool is_full = status == RAFT_NOSPACE;

    if (status != RAFT_IOERR && status != RAFT_NOSPACE) {
        return false;
    }
    if (statvfs(n->raft_dir, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < n->segment_bytes) {
        is_full = true;
    }
    err_set(err, is_full ? ERR_FULL : ERR_IO, "raft log %s: %s%s", n->raft_dir,
            msg[0] != '\0' ? msg : raft_strerror(status),
            is_full && strstr(msg, strerror(ENOSPC)) == NULL
                ? " (No space left on device)"
                : "");
    return true;
}

/* Each second while the log failed: take writes again once a segment fits. */
static void storage_probe_raft(struct node *n)
{
    struct statvfs vfs;
    struct err err = {0};

    if (n->storage_code == 0 || !n->is_storage_raft ||
        statvfs(n->raft_dir, &vfs) != 0 ||
        (uint64_t)vfs.f_bavail * vfs.f_frsize < n->segment_bytes) {
        return;
    }
    if (!n->is_log_diverged) {
        storage_clear(n, "the raft directory has room for a segment again");
        return;
    }
    /* Room again, but the entries that failed are not on disk and libraft
     * will not write them: stay unhealthy, saying what to do, rather than
     * serve a log that lags the cluster's for as long as the node runs. */
    if (!n->is_restart_asked) {
        err_set(&err, ERR_BUSY,
                "raft log %s: a write failed while this node followed and "
                "libraft keeps the entries it could not write only in memory: "
                "restart this node (the raft directory has room again)",
                n->raft_dir);
        storage_fail(n, &err, true);
        n->is_restart_asked = true;
        log_error("node", "%s", err.msg);
    }
}

/* ---- leadership ----------------------------------------------------------
 */

static void barrier_cb(struct raft_barrier *req, int status)
{
    struct node *n = req->data;

    n->barrier_pending = false;
    /* (D2): stamps of this term must exceed every applied one. */
    if (status == 0 && raft_state(&n->raft) == RAFT_LEADER &&
        n->raft.current_term == n->barrier_term && deferred_drain(n) == 0) {
        n->ready_term = n->barrier_term;
        n->led_term = n->ready_term;
        log_info("node", "leader ready in term %" PRIu64 " at index %" PRIu64,
                 n->ready_term, store_applied_index(n->store));
    }
}

/* Become ready if raft made us leader in a term we have not readied; say
 * at warn when this node stops leading (nothing else tells an operator
 * why every write answered 503 for a moment). */
static void check_leadership(struct node *n)
{
    int rc;

    if (n->led_term != 0 && !n->closing &&
        (raft_state(&n->raft) != RAFT_LEADER ||
         n->raft.current_term != n->led_term)) {
        log_warn_kv("node",
                    "no longer the leader: a leader steps down when no "
                    "majority answered it within the election timeout, or "
                    "when it sees a newer term",
                    {"term", LOG_U64(n->led_term)},
                    {"now_term", LOG_U64(n->raft.current_term)},
                    {"role", node_role_name(node_role(n))});
        n->led_term = 0;
    }
    if (n->closing || n->barrier_pending ||
        raft_state(&n->raft) != RAFT_LEADER ||
        n->ready_term == n->raft.current_term) {
        return;
    }
    n->barrier.data = n;
    n->barrier_term = n->raft.current_term;
    rc = raft_barrier(&n->raft, &n->barrier, barrier_cb);
    if (rc == 0) {
        n->barrier_pending = true;
    } else {
        log_warn("node", "raft_barrier: %s", raft_strerror(rc));
    }
}

static void sync_work_cb(uv_work_t *w)
{
    struct node *n = w->data;
    struct err err = {0};
    bool is_failed = store_sync(n->store, &err) != 0;

    /* Logged when it starts and stops failing, not every 100 ms. */
    if (atomic_exchange(&n->is_sync_failed, is_failed) == is_failed) {
        return;
    }
    if (is_failed) {
        log_error("node", "store sync: %s", err.msg);
    } else {
        log_info("node", "store sync works again");
    }
}

static void sync_done_cb(uv_work_t *w, int status)
{
    struct node *n = w->data;

    UNUSED(status);
    n->sync_pending = false;
}

/* When the fsm fails an entry (the store could not commit), libraft stops
 * applying and retries only when the commit index moves again. A leader
 * that sees committed entries left unapplied appends a barrier about once a
 * second, which moves it (and, replicated, the followers'). An entry is
 * never skipped: a store that stays full keeps the node stalled, loudly. */
static void retry_barrier_cb(struct raft_barrier *req, int status)
{
    UNUSED(status);
    free(req);
}

static void retry_stalled_apply(struct node *n)
{
    struct raft_barrier *req;

    if (n->closing || raft_state(&n->raft) != RAFT_LEADER ||
        n->raft.commit_index <= n->raft.last_applied) {
        return;
    }
    /* One small request a second while stalled; each is freed when it
     * applies or raft closes. */
    req = xcalloc(1, sizeof(*req));
    if (raft_barrier(&n->raft, req, retry_barrier_cb) != 0) {
        free(req);
        return;
    }
    log_warn("node", "apply stalled at %" PRIu64 " of %" PRIu64 ": retrying",
             (uint64_t)n->raft.last_applied, (uint64_t)n->raft.commit_index);
}

/* A tick that came a good part of the election timeout late: the loop was
 * held by other work, and raft's heartbeats and answers waited behind it
 * (a leader that misses its majority for the whole timeout steps down).
 * Said at most every HELD_WARN_MS. */
static void check_tick_gap(struct node *n)
{
    uint64_t now = uv_now(n->loop);
    uint64_t gap = n->tick_ms != 0 ? now - n->tick_ms : 0;
    unsigned timeout = n->raft.election_timeout;

    n->tick_ms = now;
    if (gap > TICK_MS + timeout / 2 && !n->closing &&
        (n->held_warned_ms == 0 || now - n->held_warned_ms >= HELD_WARN_MS)) {
        n->held_warned_ms = now;
        log_warn_kv("node",
                    "the event loop was held by other work: heartbeats and "
                    "replication waited behind it",
                    {"held_ms", LOG_U64(gap - TICK_MS)},
                    {"election_timeout_ms", LOG_U64(timeout)});
    }
}

static void tick_cb(uv_timer_t *t)
{
    struct node *n = container_of(t, struct node, tick);

    check_tick_gap(n);
    failed_drain(n); /* (P1) */
    check_leadership(n);
    fwd_tick(n);
    if (is_store_failing(n)) {
        storage_answer_parked(n);
    }
    if (++n->ticks % RETRY_TICKS == 0) {
        retry_stalled_apply(n);
        deferred_retry(n);
        storage_probe_raft(n);
    }
    /* The store is synced on every tick, one sync at a time: a sync flushes
     * every page dirtied since the last one, and the raft log's writes
     * queue behind it on the disk, so the longest sync is the floor of a
     * push's p99. Measured under pushes of event JSON at ~230k records/s:
     * every 1 s a sync took ~50 ms (p99 > 100 ms), every 100 ms 21 ms (push
     * p99 25 ms), every 10 ms 3 ms at the median and 8 at the 99th (push
     * p99 13-15 ms), at the same records/s and CPU per record (bench/push).
     * store_sync skips it when nothing committed, so an idle node does not
     * sync. */
    if (!n->sync_pending) {
        n->sync_work.data = n;
        if (uv_queue_work(n->loop, &n->sync_work, sync_work_cb, sync_done_cb) ==
            0) {
            n->sync_pending = true;
        }
    }
}

/* ---- proposals -----------------------------------------------------------
 */

static int raft_err(int rv, struct err *err, const char *what)
{
    switch (rv) {
    case RAFT_NOTLEADER:
    case RAFT_LEADERSHIPLOST:
        return err_set(err, ERR_NOT_LEADER, "%s: %s", what, raft_strerror(rv));
    case RAFT_SHUTDOWN:
    case RAFT_CANCELED:
        return err_set(err, ERR_BUSY, "%s: %s", what, raft_strerror(rv));
    default:
        return err_set(err, ERR_IO, "%s: %s", what, raft_strerror(rv));
    }
}

/* Call p back with its entry's result (NULL: the store already held the
 * entry) or raft's failure status, and free it. */
static void proposal_finish(struct proposal *p, int status,
                            const struct fsm_result *res)
{
    struct err err = {0};

    if (status == 0 && res != NULL) {
        p->cb(p->arg, 0, res, NULL);
    } else {
        if (status == 0) {
            err_set(&err, ERR_IO, "entry was applied before this proposal");
        } else if (raft_storage_error(p->node, status,
                                      raft_errmsg(&p->node->raft), &err)) {
            /* The failed append itself told it first (io_append_watched),
             * in libraft's words without its "io: " prefix: once. */
            if (p->node->storage_code == 0 || !p->node->is_storage_raft) {
                storage_fail(p->node, &err, true);
            }
            err_set(&err, p->node->storage_code,
                    "insufficient storage, not written: %s",
                    p->node->storage_reason);
        } else {
            raft_err(status, &err, "apply");
        }
        p->cb(p->arg, err.code, NULL, &err);
    }
    free(p);
}

/* (P1) libraft fails the requests in flight from inside its own state
 * change (convertClear, when a leader steps down), while its leader state
 * is half torn down: a callback that proposed again there (a push queue
 * flushing its next batch) made raft_apply replicate through freed
 * progress and crashed. So a failed proposal is only queued here and
 * answered from the tick (or at close), outside libraft's stack. */
static void failed_queue(struct node *n, struct proposal *p, int status)
{
    p->failed_status = status;
    p->next_failed = NULL;
    if (n->failed_tail != NULL) {
        n->failed_tail->next_failed = p;
    } else {
        n->failed_head = p;
    }
    n->failed_tail = p;
}

/* Answer the queued failures, then let the batching proposer go on. */
static void failed_drain(struct node *n)
{
    struct proposal *p = n->failed_head;

    if (p == NULL) {
        return;
    }
    n->failed_head = n->failed_tail = NULL;
    while (p != NULL) {
        struct proposal *next = p->next_failed;

        proposal_finish(p, p->failed_status, NULL);
        p = next;
    }
    if (n->commit_fn != NULL && !n->closing) {
        n->commit_fn(n->commit_arg);
    }
}

/* libraft calls this right after the fsm's apply of the proposal's entry:
 * a deferred entry (the queue's tail) gets the proposal parked on it. */
static void apply_cb(struct raft_apply *req, int status, void *result)
{
    struct proposal *p = req->data;
    struct node *n = p->node;

    ASSERT(n->n_uncommitted > 0);
    n->n_uncommitted--;
    if (status != 0) {
        failed_queue(n, p, status); /* (P1) */
        return;
    }
    if (result != NULL && result == (void *)n->d_tail) {
        ASSERT(n->d_tail->index == req->index); /* (D1) */
        n->d_tail->prop = p;
        if (is_store_failing(n)) {
            storage_answer_parked(n); /* (D4) */
        }
    } else {
        proposal_finish(p, status, result);
    }
    if (n->commit_fn != NULL) {
        n->commit_fn(n->commit_arg); /* may propose: libraft writes it next */
    }
}

/* ---- deferred apply ------------------------------------------------------
 *
 * libraft 0.15 applies a committed entry inside the callback of the disk
 * write that stored it, and starts the next write (of every entry proposed
 * meanwhile) only after that callback returns. Applied in place, the LMDB
 * transaction, the answers it triggers and the next proposal ran while the
 * disk sat idle, and the next write ran while the loop sat idle. So the
 * fsm's apply only queues the entry here (its bytes stay in libraft's
 * in-memory log until a snapshot, which drains this queue first), and a
 * check handle applies it one loop iteration later: after the next poll,
 * which is where libraft hands the next write to its thread pool (its
 * RWF_NOWAIT attempt on the O_DIRECT segment fails with EAGAIN, and that
 * poll sees it). The store write, the answers and the next proposal then
 * overlap the disk write.
 *
 *   (D1) Entries are applied in log order, each once; a proposal's callback
 *        runs with its own entry's result, after every earlier entry's.
 *   (D2) What needs the store to be current drains the queue first: a
 *        snapshot taken or restored, the barrier that makes a leader ready
 *        (its stamps must exceed every applied one), start (after raft's
 *        replay) and close. A drain inside libraft's call stack applies but
 *        does not call back (a callback may propose): the results are saved
 *        and the check delivers them, in order.
 *   (D3) An entry the store cannot commit stays at the head and is retried
 *        about once a second (tick); nothing behind it applies. Once the
 *        node closes and the queue is empty, entries apply in place again.
 */

static void deferred_idle_cb(uv_idle_t *h)
{
    UNUSED(h);
}

static void deferred_check_cb(uv_check_t *h);

static void deferred_start(struct node *n)
{
    if (!n->is_stalled && !uv_is_active((uv_handle_t *)&n->apply_check)) {
        uv_idle_start(&n->apply_idle, deferred_idle_cb);
        uv_check_start(&n->apply_check, deferred_check_cb);
    }
}

static void deferred_stop(struct node *n)
{
    uv_idle_stop(&n->apply_idle);
    uv_check_stop(&n->apply_check);
}

/* Apply d to the store; *res is the fsm's result (borrowed until the next
 * apply; NULL when the store held the entry already). Returns 0 or an ERR_*
 * (nothing changed, d stays queued). */
static int deferred_apply(struct node *n, struct deferred *d,
                          const struct fsm_result **res, struct err *err)
{
    if (fsm_apply_entry(n->fsm, d->index, d->base, d->len, res, err) != 0) {
        storage_fail(n, err, false); /* (D4) */
        return err->code;
    }
    if (is_store_failing(n)) {
        char how[64];

        snprintf(how, sizeof(how), "entry %" PRIu64 " applied", d->index);
        storage_clear(n, how);
    }
    d->base = NULL;
    d->has_res = *res != NULL;
    return 0;
}

/* (D4): answer the proposals parked on entries that wait behind the stalled
 * one; their entries stay queued and apply once the store recovers. */
static void storage_answer_parked(struct node *n)
{
    for (struct deferred *d = n->d_head; d != NULL; d = d->next) {
        struct proposal *p = d->prop;
        struct err err;

        if (p == NULL || d->is_applied) {
            continue;
        }
        d->prop = NULL;
        err_set(&err, n->storage_code,
                "insufficient storage, entry %" PRIu64
                " logged but not acknowledged (stored once storage "
                "recovers): %s",
                d->index, n->storage_reason);
        p->cb(p->arg, err.code, NULL, &err);
        free(p);
    }
}

static void deferred_free(struct deferred *d)
{
    free(d->res.items);
    free(d);
}

static struct deferred *deferred_pop(struct node *n)
{
    struct deferred *d = n->d_head;

    n->d_head = d->next;
    if (n->d_head == NULL) {
        n->d_tail = NULL;
    }
    return d;
}

/* Apply (unless a drain did) and deliver the queued entries: those queued
 * before this check generation, or all of them when is_all. Returns 0, or
 * an ERR_* when the head failed (D3). */
static int deferred_run(struct node *n, bool is_all)
{
    struct err err = {0};
    struct deferred *d;

    n->is_fw_held = false;
    while ((d = n->d_head) != NULL && (is_all || d->gen != n->check_gen)) {
        const struct fsm_result *res = &d->res;

        if (d->index > fwd_hold_bound(n)) {
            n->is_fw_held = true; /* (F1): an answer restarts the queue */
            return 0;
        }
        if (!d->is_applied && deferred_apply(n, d, &res, &err) != 0) {
            return err.code;
        }
        deferred_pop(n);
        if (d->prop != NULL) {
            proposal_finish(d->prop, 0, d->has_res ? res : NULL);
        }
        if (n->fw_head != NULL) {
            fwd_deliver(n, d->index, d->has_res ? res : NULL);
        }
        deferred_free(d);
    }
    return 0;
}

/* (D2) inside libraft's call stack: apply every queued entry, saving the
 * results for the check to deliver. Returns 0 or an ERR_*. */
static int deferred_drain(struct node *n)
{
    struct err err = {0};

    for (struct deferred *d = n->d_head; d != NULL; d = d->next) {
        const struct fsm_result *res;

        if (d->is_applied) {
            continue;
        }
        if (deferred_apply(n, d, &res, &err) != 0) {
            return err.code;
        }
        if (res != NULL) {
            d->res = *res;
            d->res.items = NULL;
            if (res->n_items > 0) {
                d->res.items =
                    xmemdup(res->items, res->n_items * sizeof(*res->items));
            }
        }
        d->is_applied = true;
    }
    return 0;
}

static void deferred_check_cb(uv_check_t *h)
{
    struct node *n = container_of(h, struct node, apply_check);

    if (deferred_run(n, false) != 0) {
        n->is_stalled = true; /* (D3): the tick retries */
        deferred_stop(n);
    } else if (n->d_head == NULL || n->is_fw_held) {
        deferred_stop(n);
    }
    n->check_gen++;
}

/* (D3) from the tick: try a stalled head again. */
static void deferred_retry(struct node *n)
{
    if (n->is_stalled) {
        n->is_stalled = false;
        deferred_start(n);
    }
}

/* Fail the proposals still parked on entries that will never apply here
 * (the node is gone, or its start failed); free the queue. */
static void deferred_abandon(struct node *n)
{
    while (n->d_head != NULL) {
        struct deferred *d = deferred_pop(n);

        if (d->prop != NULL) {
            proposal_finish(d->prop, RAFT_SHUTDOWN, NULL);
        }
        deferred_free(d);
    }
}

/* raft_fsm.apply: queue the entry (its index is libraft's last_applied + 1,
 * as fsm.c reads it) and hand libraft the queue node as the result, which
 * apply_cb recognises. */
static int node_fsm_apply(struct raft_fsm *rf, const struct raft_buffer *buf,
                          void **result)
{
    struct node *n = container_of(rf, struct node, rfsm);
    struct deferred *d;

    if (n->closing && n->d_head == NULL) {
        return n->fsm_apply(rf, buf, result);
    }
    d = xcalloc(1, sizeof(*d));
    d->index = n->raft.last_applied + 1;
    d->base = buf->base;
    d->len = buf->len;
    d->gen = n->check_gen;
    if (n->d_tail != NULL) {
        n->d_tail->next = d;
    } else {
        n->d_head = d;
    }
    n->d_tail = d;
    deferred_start(n);
    *result = d;
    return 0;
}

static int node_fsm_snapshot(struct raft_fsm *rf, struct raft_buffer *bufs[],
                             unsigned *n_bufs)
{
    struct node *n = container_of(rf, struct node, rfsm);

    if (deferred_drain(n) != 0) {
        return RAFT_BUSY; /* libraft tries again later */
    }
    return n->fsm_snapshot(rf, bufs, n_bufs);
}

static int node_fsm_restore(struct raft_fsm *rf, struct raft_buffer *buf)
{
    struct node *n = container_of(rf, struct node, rfsm);

    if (deferred_drain(n) != 0) {
        return RAFT_IOERR;
    }
    return n->fsm_restore(rf, buf);
}

static int64_t next_stamp(struct node *n)
{
    int64_t s = wall_us();
    int64_t applied = fsm_greatest_stamp(n->fsm);

    if (s <= n->last_stamp) {
        s = n->last_stamp + 1;
    }
    if (s <= applied) {
        s = applied + 1;
    }
    n->last_stamp = s;
    return s;
}

/* Keep about snap_log_bytes of log between snapshots whatever the entry
 * size (only when the config left the thresholds at their defaults). On
 * the loop thread, for each command entry this node stores: a follower's
 * log is as large as its leader's. */
static void snap_tune(struct node *n, size_t len)
{
    uint64_t t;

    if (!n->is_snap_auto) {
        return;
    }
    n->mean_entry = n->mean_entry == 0 ? len : (n->mean_entry * 63 + len) / 64;
    t = n->snap_log_bytes / (n->mean_entry + 1);
    t = t < SNAP_THRESHOLD_MIN   ? SNAP_THRESHOLD_MIN
        : t > SNAP_THRESHOLD_MAX ? SNAP_THRESHOLD_MAX
                                 : t;
    /* Move in steps of an eighth, not on every proposal. */
    if (t * 8 < (uint64_t)n->snap_threshold * 7 ||
        t * 8 > (uint64_t)n->snap_threshold * 9) {
        uint64_t trail = n->snap_log_bytes / 8 / (n->mean_entry + 1);

        trail = trail < SNAP_TRAILING_MIN   ? SNAP_TRAILING_MIN
                : trail > SNAP_TRAILING_MAX ? SNAP_TRAILING_MAX
                                            : trail;
        n->snap_threshold = (unsigned)t;
        raft_set_snapshot_threshold(&n->raft, (unsigned)t);
        raft_set_snapshot_trailing(&n->raft, (unsigned)trail);
    }
}

/* What any node checks before it proposes or forwards a command. */
static int check_command(struct node *n, int type, const void *cmd, size_t len,
                         struct err *err)
{
    struct cmd_header h;

    if (n->closing) {
        return err_set(err, ERR_BUSY, "node is closing");
    }
    if (n->storage_code != 0) {
        return storage_refusal(n, err); /* (D4) */
    }
    if (cmd_decode_header(cmd, len, &h, err) != 0) {
        err->code = ERR_INVALID;
        return err_wrap(err, "not a command");
    }
    if (h.type != type) {
        return err_set(err, ERR_INVALID, "command type %d is not %d", h.type,
                       type);
    }
    return 0;
}

static int check_proposal(struct node *n, int type, const void *cmd, size_t len,
                          struct err *err)
{
    if (check_command(n, type, cmd, len, err) != 0) {
        return err->code;
    }
    check_leadership(n);
    if (raft_state(&n->raft) != RAFT_LEADER) {
        return err_set(err, ERR_NOT_LEADER, "not the leader");
    }
    if (n->ready_term != n->raft.current_term) {
        return err_set(err, ERR_NOT_LEADER, "leader not ready");
    }
    if (store_is_full(n->store, FULL_RESERVE + len)) {
        return err_set(err, ERR_FULL,
                       "store is within %" PRIu64 " MiB of its map size",
                       FULL_RESERVE >> 20);
    }
    return 0;
}

/* Propose on this node, which must be the ready leader (F3). Seven
 * parameters: node_propose()'s. */
// NOLINTNEXTLINE(readability-function-size)
static int propose_local(struct node *n, int type, const void *cmd, size_t len,
                         node_applied_fn cb, void *arg, struct err *err)
{
    struct raft_buffer buf;
    struct proposal *p;
    int rv;

    if (check_proposal(n, type, cmd, len, err) != 0) {
        return err->code;
    }
    /* libraft 0.15's segment loader expects 8-byte aligned entries; an
     * unpadded one corrupts the batch that follows it on disk. */
    buf.len = (len + 7) & ~(size_t)7;
    buf.base = arena_alloc(buf.len); /* raft frees it with raft_free */
    if (buf.base == NULL) {
        return err_set(err, ERR_BUSY, "arena_alloc %zu B failed", buf.len);
    }
    memcpy(buf.base, cmd, len);
    memset((char *)buf.base + len, 0, buf.len - len);
    cmd_set_stamp(buf.base, next_stamp(n));
    p = xcalloc(1, sizeof(*p));
    p->req.data = p;
    p->node = n;
    p->cb = cb;
    p->arg = arg;
    n->n_uncommitted++; /* before: apply_cb must never find it at 0 */
    rv = raft_apply(&n->raft, &p->req, &buf, 1, apply_cb);
    if (rv != 0) {
        n->n_uncommitted--;
        raft_free(buf.base);
        free(p);
        return raft_err(rv, err, "raft_apply");
    }
    return 0;
}

/* Seven parameters: the signature was published before the limit was
 * checked and the API handlers call it. */
// NOLINTNEXTLINE(readability-function-size)
int node_propose(struct node *n, int type, const void *cmd, size_t len,
                 node_applied_fn cb, void *arg, struct err *err)
{
    check_leadership(n);
    if (raft_state(&n->raft) == RAFT_FOLLOWER && !n->closing) {
        if (check_command(n, type, cmd, len, err) != 0) {
            return err->code;
        }
        return forward_propose(n, type, cmd, len, cb, arg, err);
    }
    return propose_local(n, type, cmd, len, cb, arg, err);
}

unsigned node_uncommitted(const struct node *n)
{
    return n->n_uncommitted;
}

void node_on_commit(struct node *n, node_commit_fn fn, void *arg)
{
    n->commit_fn = fn;
    n->commit_arg = arg;
}

int node_barrier(struct node *n, node_applied_fn cb, void *arg, struct err *err)
{
    uint8_t cmd[CMD_HEADER_LEN] = {CMD_MAGIC, CMD_VERSION, CMD_NOOP, 0};

    /* The header of an empty NOOP: body length 0, stamp set on propose. */
    memcpy(cmd + 16, STORE_DEFAULT_TENANT, 16);
    return node_propose(n, CMD_NOOP, cmd, sizeof(cmd), cb, arg, err);
}

/* ---- forwarded proposals -------------------------------------------------
 *
 * A follower takes writes too: node_propose() on a follower sends the
 * command to the leader over the forward channel (raft/forward.h), the
 * leader proposes it as its own (propose_local: stamped by the leader) and
 * answers once it applied the entry, with its index. The follower then
 * answers its caller from its OWN apply of that index, so the caller gets
 * the same result (apply is deterministic) and reads its write on the node
 * it asked.
 *
 *   (F1) The answer (the index) can arrive after the follower learned that
 *        the entry committed. So while a forwarded write has no index yet,
 *        the deferred queue delivers no entry above the commit index the
 *        follower knew when it sent it (the leader appends the write above
 *        every committed entry): the entry waits for its waiter, never the
 *        other way round. The wait is bounded by FWD_TIMEOUT_MS.
 *   (F2) A forwarded write is answered once: with its entry's result at
 *        this node's apply; with the leader's refusal; or with a 503-class
 *        error when the connection to the leader is lost, the leader
 *        changes, or no answer or apply came in time. Only the first one
 *        says the write is in the log; the others never claim it is not
 *        (it may have committed), they ask the caller to retry.
 *   (F3) The leader never forwards: a forwarded command is proposed
 *        locally or refused (ERR_NOT_LEADER), so a write travels one hop.
 *   (F4) A follower learns that an entry committed from the leader's next
 *        append or heartbeat (libraft sends one per heartbeat timeout when
 *        idle): a forwarded write alone would wait up to two heartbeats
 *        for its own apply. So once the leader answered a forwarded write
 *        it appends a barrier (an entry the fsm never sees), whose append
 *        carries the new commit index at once; one barrier at a time, and
 *        one more after it when writes were answered meanwhile.
 */

static void fwd_stream_free(uv_handle_t *h)
{
    free(h);
}

static int64_t mono_ms(void)
{
    return (int64_t)(uv_hrtime() / 1000000);
}

/* (F1): the greatest index the deferred queue may deliver now. */
static uint64_t fwd_hold_bound(const struct node *n)
{
    uint64_t bound = UINT64_MAX;

    for (const struct fwd_wait *w = n->fw_head; w != NULL; w = w->next) {
        if (w->index == 0 && w->hold < bound) {
            bound = w->hold;
        }
    }
    return bound;
}

static void fwd_unlink(struct node *n, struct fwd_wait *w)
{
    struct fwd_wait **pp = &n->fw_head;
    struct fwd_wait *prev = NULL;

    while (*pp != w) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    *pp = w->next;
    if (n->fw_tail == w) {
        n->fw_tail = prev;
    }
    n->fw_n--;
}

/* Take w out and answer it (F2): res for a delivered entry, else code/msg.
 * A waiter without an index still counts as uncommitted for the batching
 * proposer (node_uncommitted). */
static void fwd_finish(struct node *n, struct fwd_wait *w, int code,
                       const struct fsm_result *res, const char *msg)
{
    struct err err = {0};
    bool was_uncommitted = w->index == 0;

    fwd_unlink(n, w);
    if (was_uncommitted) {
        ASSERT(n->n_uncommitted > 0);
        n->n_uncommitted--;
    }
    if (code == 0 && res != NULL) {
        w->cb(w->arg, 0, res, NULL);
    } else {
        err_set(&err, code != 0 ? code : ERR_IO, "%s", msg);
        w->cb(w->arg, err.code, NULL, &err);
    }
    free(w->bytes);
    free(w);
    if (was_uncommitted && n->commit_fn != NULL && !n->closing) {
        n->commit_fn(n->commit_arg);
    }
    if (n->is_fw_held && n->d_head != NULL) {
        n->is_fw_held = false;
        deferred_start(n);
    }
}

enum fwd_which {
    FWD_ALL,        /* every waiter */
    FWD_UNANSWERED, /* those without an index */
    FWD_SENT,       /* those sent and without an index */
};

/* Answer every waiter of the kind with code and msg. */
static void fwd_fail(struct node *n, enum fwd_which which, int code,
                     const char *msg)
{
    struct fwd_wait *w = n->fw_head;

    while (w != NULL) {
        struct fwd_wait *next = w->next;

        if (which == FWD_ALL ||
            (w->index == 0 && (which == FWD_UNANSWERED || w->is_sent))) {
            fwd_finish(n, w, code, NULL, msg);
        }
        w = next;
    }
}

/* The deferred queue delivers entry index with res (NULL: the store held
 * it already): answer the waiters of that index, and those of an earlier
 * index this node never delivered (it restored a snapshot past them). */
static void fwd_deliver(struct node *n, uint64_t index,
                        const struct fsm_result *res)
{
    struct fwd_wait *w = n->fw_head;

    while (w != NULL) {
        struct fwd_wait *next = w->next;

        if (w->index == index) {
            fwd_finish(n, w, res != NULL ? 0 : ERR_BUSY, res,
                       "the forwarded entry was applied before its answer");
        } else if (w->index != 0 && w->index < index) {
            fwd_finish(n, w, ERR_BUSY, NULL,
                       "the forwarded entry was applied from a snapshot; "
                       "its result is unknown: retry");
        }
        w = next;
    }
}

static void fwd_send_pending(struct node *n)
{
    for (struct fwd_wait *w = n->fw_head; w != NULL && n->fw_conn != NULL;
         w = w->next) {
        struct fwd_frame f = {0};
        struct err err;

        if (w->is_sent) {
            continue;
        }
        f.op = FWD_OP_PROPOSE;
        f.id = w->id;
        f.type = w->type;
        f.cmd = w->bytes;
        f.cmd_len = w->len;
        if (fwd_conn_send(n->fw_conn, &f, &err) != 0) {
            return; /* the connection closes: its callback fails them */
        }
        w->is_sent = true;
        free(w->bytes);
        w->bytes = NULL;
        n->fw_forwarded++;
    }
}

static void fwd_client_frame(void *arg, struct fwd_conn *c,
                             const struct fwd_frame *f)
{
    struct node *n = arg;
    char msg[FWD_MSG_MAX + 1];

    if (f->op != FWD_OP_REPLY) {
        fwd_conn_close(c);
        return;
    }
    for (struct fwd_wait *w = n->fw_head; w != NULL; w = w->next) {
        if (w->id != f->id || !w->is_sent || w->index != 0) {
            continue;
        }
        if (f->code != 0 || f->index == 0) {
            snprintf(msg, sizeof(msg), "leader: %.*s", (int)f->msg_len, f->msg);
            fwd_finish(n, w, f->code != 0 ? f->code : ERR_IO, NULL, msg);
            return;
        }
        w->index = f->index;
        w->deadline = mono_ms() + FWD_TIMEOUT_MS;
        ASSERT(n->n_uncommitted > 0);
        n->n_uncommitted--;
        if (n->commit_fn != NULL && !n->closing) {
            n->commit_fn(n->commit_arg);
        }
        if (store_applied_index(n->store) >= w->index &&
            (n->d_head == NULL || n->d_head->index > w->index)) {
            fwd_finish(n, w, ERR_BUSY, NULL,
                       "the forwarded entry was applied before its answer; "
                       "its result is unknown: retry");
            return;
        }
        if (n->is_fw_held && n->d_head != NULL) {
            n->is_fw_held = false;
            deferred_start(n);
        }
        return;
    }
}

static void fwd_client_closed(void *arg, struct fwd_conn *c, int status)
{
    struct node *n = arg;
    char msg[160];

    if (n->fw_conn != c) {
        return;
    }
    n->fw_conn = NULL;
    n->fw_leader = 0;
    n->fw_leaderless_at = 0;
    snprintf(msg, sizeof(msg),
             "the connection to the leader closed before it answered (%s)",
             status != 0 ? uv_strerror(status) : "closed");
    fwd_fail(n, FWD_SENT, ERR_NOT_LEADER, msg);
    if (n->fw_head != NULL && !n->closing) {
        fwd_connect(n); /* the writes not sent yet go to the new leader */
    }
}

static void fwd_dialed(void *arg, uv_stream_t *stream, int status)
{
    struct node *n = arg;
    char msg[200];

    n->is_fw_dialing = false;
    if (status != 0 || n->closing) {
        if (stream != NULL) {
            uv_close((uv_handle_t *)stream, fwd_stream_free);
        }
        n->fw_leader = 0;
        snprintf(msg, sizeof(msg), "cannot reach the leader: %s",
                 status != 0 ? rtransport_strerror(status) : "node is closing");
        fwd_fail(n, FWD_UNANSWERED, ERR_NOT_LEADER, msg);
        return;
    }
    n->fw_conn = fwd_conn_new(stream, fwd_client_frame, fwd_client_closed, n);
    n->fw_leaderless_at = 0;
    fwd_send_pending(n);
}

/* Start dialling leader lid at laddr. Returns 0, or the dial's error. */
static int fwd_dial(struct node *n, uint64_t lid, const char *laddr,
                    struct err *err)
{
    struct rtransport_peer to = {lid, laddr};

    if (rtransport_dial(&n->transport, &to, RTRANSPORT_KIND_FORWARD, fwd_dialed,
                        n, err) != 0) {
        err->code = ERR_NOT_LEADER;
        return err_wrap(err, "cannot reach the leader");
    }
    n->fw_leader = lid;
    n->is_fw_dialing = true;
    return 0;
}

/* From a callback: dial the leader this node knows for the waiters not
 * sent yet; without one, they fail (F2). */
static void fwd_connect(struct node *n)
{
    struct err err = {0};
    raft_id lid = 0;
    const char *laddr = NULL;

    raft_leader(&n->raft, &lid, &laddr);
    if (lid == 0 || laddr == NULL || lid == n->id) {
        fwd_fail(n, FWD_UNANSWERED, ERR_NOT_LEADER, "no leader");
    } else if (fwd_dial(n, lid, laddr, &err) != 0) {
        fwd_fail(n, FWD_UNANSWERED, ERR_NOT_LEADER, err.msg);
    }
}

/* Close the connection to a leader that is no longer the leader (its
 * waiters without an answer fail through the closed callback): once raft
 * names another, or has named none for two election timeouts. Not at once
 * when it names none: a loop held past the election timeout runs raft's
 * timer before it reads the leader's heartbeats, so raft names no leader
 * until its pre-vote meets the same one again, and closing then failed
 * writes the leader was about to commit (a 503 for a write that landed). */
static void fwd_check_leader(struct node *n, uint64_t lid)
{
    int64_t now;

    if (n->fw_leader == 0 || n->fw_conn == NULL || n->fw_leader == lid) {
        n->fw_leaderless_at = 0;
        return;
    }
    now = mono_ms();
    if (lid == 0 && n->fw_leaderless_at == 0) {
        n->fw_leaderless_at = now;
    }
    if (lid != 0 ||
        now - n->fw_leaderless_at >= 2 * (int64_t)n->raft.election_timeout) {
        n->fw_leaderless_at = 0;
        fwd_conn_close(n->fw_conn);
    }
}

/* node_propose()'s seven parameters. */
// NOLINTNEXTLINE(readability-function-size)
static int forward_propose(struct node *n, int type, const void *cmd,
                           size_t len, node_applied_fn cb, void *arg,
                           struct err *err)
{
    struct fwd_wait *w;
    raft_id lid = 0;
    const char *laddr = NULL;

    raft_leader(&n->raft, &lid, &laddr);
    if (lid == 0 || laddr == NULL) {
        return err_set(err, ERR_NOT_LEADER, "no leader");
    }
    if (lid == n->id) {
        return err_set(err, ERR_NOT_LEADER, "leader not ready");
    }
    if (!n->has_token) {
        return err_set(err, ERR_NOT_LEADER, "not the leader");
    }
    if (n->fw_n >= FWD_MAX) {
        return err_set(err, ERR_BUSY, "%u forwarded writes in flight", n->fw_n);
    }
    fwd_check_leader(n, lid);
    /* Dial before the waiter exists: a refusal is this call's error, and
     * cb is never called before node_propose() returns. */
    if (n->fw_conn == NULL && !n->is_fw_dialing &&
        fwd_dial(n, lid, laddr, err) != 0) {
        return err->code;
    }
    w = xcalloc(1, sizeof(*w));
    w->id = ++n->fw_next_id;
    w->hold = n->raft.commit_index;
    w->deadline = mono_ms() + FWD_TIMEOUT_MS;
    w->bytes = xmemdup(cmd, len);
    w->len = len;
    w->type = type;
    w->cb = cb;
    w->arg = arg;
    if (n->fw_tail != NULL) {
        n->fw_tail->next = w;
    } else {
        n->fw_head = w;
    }
    n->fw_tail = w;
    n->fw_n++;
    n->n_uncommitted++;
    if (n->fw_conn != NULL && n->fw_leader == lid) {
        fwd_send_pending(n);
    } /* else: the dial's or the closing connection's callback sends it */
    return 0;
}

/* From the tick: the leader changed, answers or applies that are late. */
static void fwd_tick(struct node *n)
{
    raft_id lid = 0;
    const char *laddr = NULL;
    int64_t now = mono_ms();
    struct fwd_wait *w = n->fw_head;

    if (w == NULL) {
        n->fw_leaderless_at = 0;
        return;
    }
    raft_leader(&n->raft, &lid, &laddr);
    fwd_check_leader(n, lid);
    while (w != NULL) {
        struct fwd_wait *next = w->next;

        if (now > w->deadline) {
            fwd_finish(n, w, ERR_TIMEOUT, NULL,
                       w->index == 0
                           ? "the leader did not answer a forwarded write in "
                             "time"
                           : "a forwarded write committed but did not apply "
                             "here in time");
        } else if (w->index != 0 && store_applied_index(n->store) >= w->index &&
                   (n->d_head == NULL || n->d_head->index > w->index)) {
            fwd_finish(n, w, ERR_BUSY, NULL,
                       "the forwarded entry was applied from a snapshot; its "
                       "result is unknown: retry");
        }
        w = next;
    }
}

/* ---- the leader's side -------------------------------------------------- */

static void fwd_nudge(struct node *n);

static void fwd_nudge_cb(struct raft_barrier *req, int status)
{
    struct node *n = req->data;

    n->is_fw_nudging = false;
    if (status == 0 && n->is_fw_nudge_due) {
        fwd_nudge(n);
    }
}

/* (F4): tell the followers the commit index now. */
static void fwd_nudge(struct node *n)
{
    if (n->closing || raft_state(&n->raft) != RAFT_LEADER) {
        return;
    }
    if (n->is_fw_nudging) {
        n->is_fw_nudge_due = true;
        return;
    }
    n->is_fw_nudge_due = false;
    n->fw_nudge.data = n;
    if (raft_barrier(&n->raft, &n->fw_nudge, fwd_nudge_cb) == 0) {
        n->is_fw_nudging = true;
    }
}

static void fwd_peer_release(struct fwd_peer *p)
{
    struct node *n = p->node;

    if (p->conn != NULL || p->pending > 0) {
        return;
    }
    for (struct fwd_peer **pp = &n->fw_peers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    free(p);
}

static void fwd_reply(struct fwd_peer *p, uint64_t id, int code, uint64_t index,
                      const char *msg)
{
    struct fwd_frame f = {0};
    struct err err;

    if (p->conn == NULL) {
        return;
    }
    f.op = FWD_OP_REPLY;
    f.id = id;
    f.code = code;
    f.index = index;
    f.msg = msg;
    f.msg_len = msg != NULL ? strlen(msg) : 0;
    (void)fwd_conn_send(p->conn, &f, &err); /* a failure closes it */
}

static int propose_local(struct node *n, int type, const void *cmd, size_t len,
                         node_applied_fn cb, void *arg, struct err *err);

static void fwd_served(void *arg, int status, const struct fsm_result *res,
                       const struct err *err)
{
    struct fwd_req *r = arg;
    struct fwd_peer *p = r->peer;

    if (status == 0 && res != NULL) {
        fwd_reply(p, r->id, 0, res->index, NULL);
        fwd_nudge(p->node);
    } else {
        fwd_reply(p, r->id, status != 0 ? status : ERR_IO, 0,
                  err != NULL ? err->msg : "the entry left no result");
    }
    p->pending--;
    fwd_peer_release(p);
    free(r);
}

static void fwd_server_frame(void *arg, struct fwd_conn *c,
                             const struct fwd_frame *f)
{
    struct fwd_peer *p = arg;
    struct node *n = p->node;
    struct fwd_req *r;
    struct err err = {0};

    if (f->op != FWD_OP_PROPOSE) {
        fwd_conn_close(c);
        return;
    }
    r = xcalloc(1, sizeof(*r));
    r->peer = p;
    r->id = f->id;
    p->pending++;
    n->fw_served++;
    if (propose_local(n, f->type, f->cmd, f->cmd_len, fwd_served, r, &err) !=
        0) {
        fwd_served(r, err.code, NULL, &err);
    }
}

static void fwd_server_closed(void *arg, struct fwd_conn *c, int status)
{
    struct fwd_peer *p = arg;

    UNUSED(c);
    UNUSED(status);
    p->conn = NULL;
    fwd_peer_release(p);
}

static void fwd_accept(void *arg, uint64_t peer_id, uv_stream_t *stream)
{
    struct node *n = arg;
    struct fwd_peer *p;

    UNUSED(peer_id);
    if (n->closing) {
        uv_close((uv_handle_t *)stream, fwd_stream_free);
        return;
    }
    p = xcalloc(1, sizeof(*p));
    p->node = n;
    p->next = n->fw_peers;
    n->fw_peers = p;
    p->conn = fwd_conn_new(stream, fwd_server_frame, fwd_server_closed, p);
}

/* At close: fail what waits and close every forward connection. */
static void fwd_close_all(struct node *n)
{
    fwd_fail(n, FWD_ALL, ERR_BUSY, "node is closing");
    if (n->fw_conn != NULL) {
        fwd_conn_close(n->fw_conn);
    }
    for (struct fwd_peer *p = n->fw_peers; p != NULL; p = p->next) {
        if (p->conn != NULL) {
            fwd_conn_close(p->conn);
        }
    }
}

/* ---- membership --------------------------------------------------------
 */

struct member_change {
    struct raft_change req;
    struct node *node;
    uint64_t id;
    bool is_add;         /* an add: the promotion to voter comes next */
    bool is_promoting;   /* the request running (or waited for) is it */
    uint64_t give_up_ms; /* uv_now past which a failed promotion is final */
    uv_timer_t retry;    /* the wait before the next try (adds only) */
    bool has_retry;
    struct member_change *next_wait; /* in node->member_waits */
    node_change_fn cb;
    void *arg;
};

/* A new member that has not caught up yet is promoted again and again
 * (libraft gives up on a catch-up after its rounds, ~5 s): a store of a
 * few GiB, or a node started a little after the add, takes longer. The
 * HTTP caller gets 202 "joining" after 30 s meanwhile. */
#define MEMBER_PROMOTE_RETRY_MS   1000
#define MEMBER_PROMOTE_GIVE_UP_MS ((uint64_t)5 * 60 * 1000)

static int change_err(int rv, struct err *err, const char *what)
{
    if (rv == RAFT_CANTCHANGE) {
        return err_set(err, ERR_BUSY, "%s: a membership change is in progress",
                       what);
    }
    if (rv == RAFT_NOTLEADER || rv == RAFT_LEADERSHIPLOST) {
        return err_set(err, ERR_NOT_LEADER, "%s: %s", what, raft_strerror(rv));
    }
    if (rv == RAFT_BADID || rv == RAFT_DUPLICATEID ||
        rv == RAFT_DUPLICATEADDRESS || rv == RAFT_BADROLE) {
        return err_set(err, ERR_INVALID, "%s: %s", what, raft_strerror(rv));
    }
    return raft_err(rv, err, what);
}

static void member_free(uv_handle_t *h)
{
    free(h->data);
}

/* The change's answer to its caller, then m goes. */
static void member_finish(struct member_change *m, int status)
{
    struct err err = {0};

    if (status != 0) {
        change_err(status, &err, "membership");
    }
    if (status != 0 && m->is_promoting && status != RAFT_SHUTDOWN) {
        log_error_kv("node",
                     "a new member was not promoted to voter: it stays a "
                     "spare (POST it again to retry, or DELETE it)",
                     {"member", LOG_U64(m->id)}, {"error", err.msg});
    }
    if (status != 0) {
        m->cb(m->arg, err.code, &err);
    } else {
        log_info_kv("node", "membership changed", {"member", LOG_U64(m->id)});
        m->cb(m->arg, 0, NULL);
    }
    if (m->has_retry) {
        uv_close((uv_handle_t *)&m->retry, member_free);
    } else {
        free(m);
    }
}

static void member_changed(struct raft_change *req, int status);

/* Whether m's id is in the configuration as a spare or standby still. */
static bool member_is_spare(const struct node *n, uint64_t id)
{
    for (unsigned i = 0; i < n->raft.configuration.n; i++) {
        const struct raft_server *sv = &n->raft.configuration.servers[i];

        if (sv->id == id) {
            return sv->role != RAFT_VOTER;
        }
    }
    return false;
}

/* A promotion that failed for a reason time may mend (the new node is
 * not reachable yet, or did not catch up in libraft's rounds; another
 * change runs) while this node still leads and the member is a spare. */
static bool member_may_retry(const struct member_change *m, int status)
{
    struct node *n = m->node;

    return m->has_retry && m->is_promoting && !n->closing &&
           (status == RAFT_NOCONNECTION || status == RAFT_CANTCHANGE) &&
           raft_state(&n->raft) == RAFT_LEADER && member_is_spare(n, m->id) &&
           uv_now(n->loop) < m->give_up_ms;
}

static void member_promote(struct member_change *m);
static void member_retry_due(uv_timer_t *t);

/* m waits MEMBER_PROMOTE_RETRY_MS in node->member_waits, then promotes. */
static void member_wait(struct member_change *m)
{
    m->next_wait = m->node->member_waits;
    m->node->member_waits = m;
    uv_timer_start(&m->retry, member_retry_due, MEMBER_PROMOTE_RETRY_MS, 0);
}

/* The promotion of id waiting to retry, or NULL. */
static struct member_change *member_waiting(const struct node *n, uint64_t id)
{
    struct member_change *m = n->member_waits;

    while (m != NULL && m->id != id) {
        m = m->next_wait;
    }
    return m;
}

/* m leaves node->member_waits, its timer stopped. */
static void member_unwait(struct member_change *m)
{
    struct member_change **pp = &m->node->member_waits;

    while (*pp != m) {
        pp = &(*pp)->next_wait;
    }
    *pp = m->next_wait;
    uv_timer_stop(&m->retry);
}

static void member_retry_due(uv_timer_t *t)
{
    struct member_change *m = t->data;
    struct node *n = m->node;

    member_unwait(m);
    if (n->closing) {
        member_finish(m, RAFT_SHUTDOWN);
        return;
    }
    member_promote(m);
}

static void member_promote(struct member_change *m)
{
    struct node *n = m->node;
    int rv;

    m->is_promoting = true;
    rv = raft_assign(&n->raft, &m->req, m->id, RAFT_VOTER, member_changed);
    if (rv == 0) {
        return;
    }
    if (member_may_retry(m, rv)) {
        member_wait(m);
        return;
    }
    member_finish(m, rv);
}

static void member_changed(struct raft_change *req, int status)
{
    struct member_change *m = req->data;
    struct node *n = m->node;

    if (status == 0 && m->is_add && !n->closing) {
        m->is_add = false; /* now promote the caught-up spare */
        member_promote(m);
        return;
    }
    if (status != 0 && member_may_retry(m, status)) {
        log_info_kv("node",
                    "the new member is not caught up yet; promoting "
                    "it again",
                    {"member", LOG_U64(m->id)},
                    {"reason", raft_strerror(status)});
        member_wait(m);
        return;
    }
    member_finish(m, status);
}

/* A removal of a member whose promotion waits to retry: the promotion
 * ends (its caller told the member was removed), and the removal goes on. */
static void member_wait_cancel(struct node *n, uint64_t id)
{
    struct member_change *m = member_waiting(n, id);
    struct err err;

    if (m == NULL) {
        return;
    }
    member_unwait(m);
    err_set(&err, ERR_INVALID,
            "membership: id %" PRIu64 " was removed before it caught up", id);
    m->cb(m->arg, err.code, &err);
    uv_close((uv_handle_t *)&m->retry, member_free);
}

/* At close: the promotions waiting to retry fail. */
static void member_waits_fail(struct node *n)
{
    struct member_change *m = n->member_waits;

    n->member_waits = NULL;
    while (m != NULL) {
        struct member_change *next = m->next_wait;

        uv_timer_stop(&m->retry);
        member_finish(m, RAFT_SHUTDOWN);
        m = next;
    }
}

static int member_check(struct node *n, uint64_t id, struct err *err)
{
    if (n->closing) {
        return err_set(err, ERR_BUSY, "node is closing");
    }
    check_leadership(n);
    if (raft_state(&n->raft) != RAFT_LEADER ||
        n->ready_term != n->raft.current_term) {
        return err_set(err, ERR_NOT_LEADER,
                       "membership changes run on the leader");
    }
    if (id == 0) {
        return err_set(err, ERR_INVALID, "member id 0: ids are >= 1");
    }
    return 0;
}

int node_member_add(struct node *n, uint64_t id, const char *raft_address,
                    node_change_fn cb, void *arg, struct err *err)
{
    struct member_change *m;
    int rv;

    if (member_check(n, id, err) != 0) {
        return err->code;
    }
    const struct raft_server *same = NULL;

    for (unsigned i = 0; i < n->raft.configuration.n; i++) {
        const struct raft_server *sv = &n->raft.configuration.servers[i];

        same = sv->id == id ? sv : same;
    }
    if (same != NULL && (same->role == RAFT_VOTER ||
                         strcmp(same->address, raft_address) != 0)) {
        return err_set(err, ERR_INVALID, "id %" PRIu64 " is a member already%s",
                       id,
                       same->role == RAFT_VOTER
                           ? ""
                           : " (a spare at another raft address: DELETE it "
                             "first)");
    }
    if (member_waiting(n, id) != NULL) {
        return err_set(err, ERR_BUSY,
                       "add: a membership change is in progress (id "
                       "%" PRIu64 " is being promoted)",
                       id);
    }
    m = xcalloc(1, sizeof(*m));
    m->req.data = m;
    m->node = n;
    m->id = id;
    m->is_add = same == NULL; /* a spare left by an add: promote it again */
    m->give_up_ms = uv_now(n->loop) + MEMBER_PROMOTE_GIVE_UP_MS;
    m->cb = cb;
    m->arg = arg;
    uv_timer_init(n->loop, &m->retry);
    m->retry.data = m;
    m->has_retry = true;
    if (same != NULL) {
        m->is_promoting = true;
        rv = raft_assign(&n->raft, &m->req, id, RAFT_VOTER, member_changed);
    } else {
        rv = raft_add(&n->raft, &m->req, id, raft_address, member_changed);
    }
    if (rv != 0) {
        uv_close((uv_handle_t *)&m->retry, member_free);
        return change_err(rv, err, "add");
    }
    return 0;
}

int node_member_remove(struct node *n, uint64_t id, node_change_fn cb,
                       void *arg, struct err *err)
{
    struct member_change *m;
    unsigned voters = 0;
    bool is_member = false;
    bool is_voter = false;
    int rv;

    if (member_check(n, id, err) != 0) {
        return err->code;
    }
    for (unsigned i = 0; i < n->raft.configuration.n; i++) {
        const struct raft_server *sv = &n->raft.configuration.servers[i];

        voters += sv->role == RAFT_VOTER;
        is_member |= sv->id == id;
        is_voter |= sv->id == id && sv->role == RAFT_VOTER;
    }
    if (!is_member) {
        return err_set(err, ERR_INVALID, "id %" PRIu64 " is not a member", id);
    }
    /* a spare or standby (an add that never caught up) goes at any time */
    if (is_voter && voters <= 1) {
        return err_set(err, ERR_INVALID, "id %" PRIu64 " is the last voter",
                       id);
    }
    m = xcalloc(1, sizeof(*m));
    member_wait_cancel(n, id);
    m->req.data = m;
    m->node = n;
    m->id = id;
    m->cb = cb;
    m->arg = arg;
    rv = raft_remove(&n->raft, &m->req, id, member_changed);
    if (rv != 0) {
        free(m);
        return change_err(rv, err, "remove");
    }
    return 0;
}

/* ---- proposals from other threads ----------------------------------------
 */

static void async_cb(uv_async_t *a)
{
    struct node *n = container_of(a, struct node, async);
    struct async_item *it;

    pthread_mutex_lock(&n->mu);
    it = n->q_head;
    n->q_head = n->q_tail = NULL;
    n->q_len = 0;
    pthread_mutex_unlock(&n->mu);
    while (it != NULL) {
        struct async_item *next = it->next;
        struct err err = {0};

        if (node_propose(n, it->type, it->bytes, it->len, it->cb, it->arg,
                         &err) != 0) {
            it->cb(it->arg, err.code, NULL, &err);
        }
        free(it->bytes);
        free(it);
        it = next;
    }
}

// NOLINTNEXTLINE(readability-function-size)
int node_propose_async(struct node *n, int type, const void *cmd, size_t len,
                       node_applied_fn cb, void *arg, struct err *err)
{
    struct async_item *it = xcalloc(1, sizeof(*it));

    it->type = type;
    it->bytes = xmemdup(cmd, len);
    it->len = len;
    it->cb = cb;
    it->arg = arg;
    pthread_mutex_lock(&n->mu);
    if (n->q_closed || n->q_len >= ASYNC_MAX) {
        bool closed = n->q_closed;

        pthread_mutex_unlock(&n->mu);
        free(it->bytes);
        free(it);
        return err_set(err, ERR_BUSY, "%s",
                       closed ? "node is closing" : "proposal queue is full");
    }
    if (n->q_tail != NULL) {
        n->q_tail->next = it;
    } else {
        n->q_head = it;
    }
    n->q_tail = it;
    n->q_len++;
    uv_async_send(&n->async);
    pthread_mutex_unlock(&n->mu);
    return 0;
}

static void io_closed_once(struct raft_io *io)
{
    struct node *n = container_of(io, struct node, io);

    if (n->io_closed) {
        log_debug("node", "ignored a repeated raft_io close callback");
        return;
    }
    n->io_closed = true;
    n->raft_io_close_cb(io);
}

/* Every message libraft receives passes here first: an AppendEntries of
 * the current term or later names the leader's commit index, which a
 * follower's own commit index (libraft's min of that and its last stored
 * entry) hides while it catches up. node_commit_index() reports it, so a
 * follower far behind reads as settling on /health from the first message
 * of its leader, not healthy with a commit index of 1. */
static void io_recv_watched(struct raft_io *io, struct raft_message *m)
{
    struct node *n = container_of(io, struct node, io);

    if (m->type == RAFT_IO_APPEND_ENTRIES &&
        m->append_entries.term >= n->raft.current_term &&
        m->append_entries.leader_commit > atomic_load(&n->leader_commit)) {
        atomic_store(&n->leader_commit, m->append_entries.leader_commit);
    }
    n->raft_recv(io, m);
}

/* Raft's clock skips the loop's holds. libuv runs the timers that came due
 * before it reads the sockets, so after one callback held the loop (a large
 * body, a slow disk) raft's tick came before the answers and heartbeats
 * that waited behind the hold: a leader found no follower's answer since
 * its last contact check and stepped down (most often between two holds in
 * a row), and a follower stood for election against the leader it was
 * about to hear. Each check phase (after the poll that read the sockets)
 * measures the gap since the one before; past HOLD_FREE_MS it is a hold,
 * kept from raft's clock, so raft's next tick sees the held time as not
 * passed and the waiting messages are read before any timeout is judged.
 * Raft's safety never rests on time; a node held for good is still left
 * by its peers, whose clocks run. */
static void hold_check_cb(uv_check_t *h)
{
    struct node *n = h->data;
    uint64_t now = uv_hrtime() / 1000000;

    if (n->hold_mark_ms != 0 && now - n->hold_mark_ms > HOLD_FREE_MS) {
        n->held_out_ms += now - n->hold_mark_ms - HOLD_FREE_MS;
    }
    n->hold_mark_ms = now;
}

/* Raft's clock: the monotonic clock less the holds counted so far, and
 * less the part of the turn in progress already past HOLD_FREE_MS (a hold
 * the check has not counted yet: raft asks the time inside the poll that
 * follows one, before the check phase), so the clock stands during a hold
 * and goes on from there once the check counted it. */
static raft_time io_time_held_out(struct raft_io *io)
{
    struct node *n = container_of(io, struct node, io);
    uint64_t now = uv_hrtime() / 1000000;
    uint64_t out = n->held_out_ms;
    raft_time t;

    if (n->hold_mark_ms != 0 && now - n->hold_mark_ms > HOLD_FREE_MS) {
        out += now - n->hold_mark_ms - HOLD_FREE_MS;
    }
    t = now > out ? now - out : 0;
    if (t < n->raft_time_ms) {
        t = n->raft_time_ms; /* never backwards */
    }
    n->raft_time_ms = t;
    return t;
}

static int io_start_watched(struct raft_io *io, unsigned msecs,
                            raft_io_tick_cb tick, raft_io_recv_cb recv)
{
    struct node *n = container_of(io, struct node, io);

    n->raft_recv = recv;
    return n->uv_io_start(io, msecs, tick, io_recv_watched);
}

static void io_close_once(struct raft_io *io, void (*cb)(struct raft_io *))
{
    struct node *n = container_of(io, struct node, io);

    n->raft_io_close_cb = cb;
    n->uv_io_close(io, io_closed_once);
}

/* io->append, watched: what every append of the log came to, whatever this
 * node's role. A leader learns of a failed write from the proposal it
 * fails; a follower's failed append fails no proposal of its own (libraft
 * answers the leader with a rejection), so without this its /health said
 * healthy while its log could not take an entry. Either way a storage
 * failure is storage_fail()'s: /health unhealthy with the reason, writes
 * through this node refused (D4), and the probe each second clears it once
 * a segment fits again; on a follower it stays and asks for a restart
 * (is_log_diverged, storage_probe_raft). */
struct io_append {
    struct raft_io_append req; /* what raft_uv gets */
    struct raft_io_append *orig;
    raft_io_append_cb orig_cb;
    struct node *n;
};

static void io_append_done(struct raft_io_append *req, int status)
{
    struct io_append *a = container_of(req, struct io_append, req);
    struct raft_io_append *orig = a->orig;
    raft_io_append_cb cb = a->orig_cb;
    struct node *n = a->n;
    struct err err = {0};

    free(a);
    if (status != 0 && !n->closing &&
        raft_storage_error(n, status, n->io.errmsg, &err)) {
        storage_fail(n, &err, true);
        n->is_log_diverged |= raft_state(&n->raft) != RAFT_LEADER;
    }
    cb(orig, status);
}

static int io_append_watched(struct raft_io *io, struct raft_io_append *req,
                             const struct raft_entry entries[], unsigned cnt,
                             raft_io_append_cb cb)
{
    struct node *n = container_of(io, struct node, io);
    struct io_append *a = xcalloc(1, sizeof(*a));
    struct err err = {0};
    int rv;

    for (unsigned i = 0; i < cnt; i++) {
        if (entries[i].type == RAFT_COMMAND) {
            snap_tune(n, entries[i].buf.len);
        }
    }
    a->req.data = req->data;
    a->orig = req;
    a->orig_cb = cb;
    a->n = n;
    rv = n->uv_io_append(io, &a->req, entries, cnt, io_append_done);
    if (rv != 0) {
        free(a);
        if (raft_storage_error(n, rv, io->errmsg, &err)) {
            storage_fail(n, &err, true);
        }
    }
    return rv;
}

/* ---- Full snapshots for followers ---------------------------------------
 *
 * The fsm's snapshots are markers (raft/snapshot.h): libraft's file names
 * the index the store holds, not the state. A follower whose log is behind
 * the leader's first entry needs the state, and libraft sends it whatever
 * io->snapshot_get loads. So io->snapshot_get is wrapped: a snapshot that
 * is not a marker (an older node's full one, or the one this node received
 * by InstallSnapshot) passes as it is; for a marker at X the wrapper dumps
 * the store as it is now (state Y >= X: the store only moves forward on a
 * leader) and gives libraft the same snapshot (index, term, configuration)
 * with the dump as its one buffer. The follower restores Y, libraft sets
 * its last applied to X, and fsm.h (1) skips the entries X+1..Y it then
 * receives.
 *
 *   (G1) One dump at a time: begin on the loop thread (store_snap_begin,
 *        swap_lock shared), run on a libuv worker (which waits for the
 *        dump's nice-5 thread), end on the loop thread. Loads that arrive
 *        while it runs wait (at most SNAP_GET_MAX) and share it when its Y
 *        is at or past their marker; the others get the next dump, which
 *        begins at or past them (one past the store when a dump begins
 *        fails instead: it cannot happen on a leader, whose markers come
 *        from its own store).
 *   (G2) Ownership (libraft 0.15, replication.c): the loaded snapshot,
 *        its bufs array and bytes come from raft_malloc, and libraft's
 *        callback frees them all (raft_free) once sent or dropped; given a
 *        non-zero status it frees only its own request. So the wrapper
 *        frees a snapshot it fails itself (snap_destroy), and the dump's
 *        frame (malloc'd) replaces bufs[0] after the marker's bytes are
 *        raft_free'd (raft_free passes blocks the arena did not cut to
 *        libc). A frame shared by several loads is copied for all but the
 *        last.
 *   (G3) A node that closes waits for a running dump (it is counted in
 *        snapshot_open_count(), and its work request keeps the reap
 *        waiting); its waiting loads are failed with RAFT_CANCELED.
 *   (G4) libraft resends a snapshot whose answer took longer than the
 *        install timeout, and a resend meets a marker again: the timeout
 *        grows with the last dump's time so a slow dump is not thrown away
 *        and started again for ever. */
struct snap_get {
    struct raft_io_snapshot_get req; /* what raft_uv gets */
    struct raft_io_snapshot_get *orig;
    raft_io_snapshot_get_cb orig_cb;
    struct node *n;
    struct raft_snapshot *snapshot; /* loaded, waiting for a dump */
    uint64_t marker;                /* the marker's index */
    struct snap_get *next;
};

/* What libraft's snapshotClose + raft_free do to a loaded snapshot. */
static void snap_destroy(struct raft_snapshot *s)
{
    raft_configuration_close(&s->configuration);
    for (unsigned i = 0; i < s->n_bufs; i++) {
        raft_free(s->bufs[i].base);
    }
    raft_free(s->bufs);
    raft_free(s);
}

/* Hand sg's snapshot to libraft (status 0) or fail it; frees sg. */
static void snap_get_done(struct snap_get *sg, int status)
{
    struct raft_io_snapshot_get *orig = sg->orig;
    raft_io_snapshot_get_cb cb = sg->orig_cb;
    struct raft_snapshot *s = sg->snapshot;

    sg->n->sg_n--;
    free(sg);
    if (status != 0) {
        snap_destroy(s);
        s = NULL;
    }
    cb(orig, s, status);
}

static void snap_dump_work(uv_work_t *w)
{
    struct node *n = container_of(w, struct node, sg_work);

    snapshot_dump_run(n->sg_dump);
}

static void snap_dump_after(uv_work_t *w, int status);
static void snap_get_fail_all(struct node *n, int status);

/* Fail the waiting loads whose marker is past the store's index y: the
 * store never goes back, so no dump would ever cover them (a leader's
 * markers come from its own store: this does not happen). */
static void snap_get_fail_past(struct node *n, uint64_t y)
{
    struct snap_get **at = &n->sg_head;

    while (*at != NULL) {
        struct snap_get *sg = *at;

        if (sg->marker <= y) {
            at = &sg->next;
            continue;
        }
        *at = sg->next;
        log_error("node",
                  "snapshot marker at %" PRIu64 " is past the store (%" PRIu64
                  "): no full snapshot for the follower",
                  sg->marker, y);
        snap_get_done(sg, RAFT_IOERR);
    }
}

/* (G1): start a dump for the waiting loads, unless one runs. */
static void snap_dump_kick(struct node *n)
{
    struct err err = {0};

    if (n->sg_dump != NULL || n->sg_head == NULL) {
        return;
    }
    if (n->closing) {
        snap_get_fail_all(n, RAFT_CANCELED);
        return;
    }
    if (snapshot_dump_begin(n->store, &n->sg_dump, &err) != 0) {
        log_error("node", "full snapshot for a follower: %s", err.msg);
        n->sg_dump = NULL;
        snap_get_fail_all(n, RAFT_IOERR);
        return;
    }
    n->sg_began_ms = mono_ms();
    snap_get_fail_past(n, snapshot_dump_index(n->sg_dump));
    log_info("node",
             "full snapshot for a follower: dumping the store at %" PRIu64,
             snapshot_dump_index(n->sg_dump));
    n->sg_work.data = n;
    if (uv_queue_work(n->loop, &n->sg_work, snap_dump_work, snap_dump_after) !=
        0) {
        uint8_t *p = NULL;
        size_t len = 0;

        (void)snapshot_dump_end(n->sg_dump, &p, &len, &err); /* not run */
        n->sg_dump = NULL;
        free(p);
        snap_get_fail_all(n, RAFT_IOERR);
    }
}

/* (G4) */
static void snap_install_timeout(struct node *n, uint64_t dump_ms)
{
    uint64_t t = INSTALL_TIMEOUT_MS + 3 * dump_ms;

    raft_set_install_snapshot_timeout(
        &n->raft,
        (unsigned)(t < INSTALL_TIMEOUT_MAX_MS ? t : INSTALL_TIMEOUT_MAX_MS));
}

/* Hand the frame to every waiting load its state covers (G2). */
static void snap_dump_serve(struct node *n, uint64_t y, uint8_t *p, size_t len)
{
    struct snap_get **at = &n->sg_head;
    struct snap_get *last = NULL;

    for (struct snap_get *sg = n->sg_head; sg != NULL; sg = sg->next) {
        last = sg->marker <= y ? sg : last;
    }
    if (last == NULL) {
        free(p);
        return;
    }
    while (*at != NULL) {
        struct snap_get *sg = *at;
        uint8_t *q;

        if (sg->marker > y) {
            at = &sg->next;
            continue;
        }
        *at = sg->next;
        q = sg == last ? p : malloc(len);
        if (q == NULL) {
            snap_get_done(sg, RAFT_NOMEM);
            continue;
        }
        if (q != p) {
            memcpy(q, p, len);
        }
        raft_free(sg->snapshot->bufs[0].base);
        sg->snapshot->bufs[0].base = q;
        sg->snapshot->bufs[0].len = len;
        snap_get_done(sg, 0);
    }
}

/* Fail every waiting load (the node closes, or the dump failed). */
static void snap_get_fail_all(struct node *n, int status)
{
    while (n->sg_head != NULL) {
        struct snap_get *sg = n->sg_head;

        n->sg_head = sg->next;
        snap_get_done(sg, status);
    }
}

static void snap_dump_after(uv_work_t *w, int status)
{
    struct node *n = container_of(w, struct node, sg_work);
    uint64_t y = snapshot_dump_index(n->sg_dump);
    struct err err = {0};
    uint8_t *p = NULL;
    size_t len = 0;
    int rc;

    UNUSED(status);
    rc = snapshot_dump_end(n->sg_dump, &p, &len, &err);
    n->sg_dump = NULL;
    if (rc != 0) {
        log_error("node", "full snapshot for a follower: %s", err.msg);
    }
    if (rc != 0 || p == NULL || n->closing) {
        free(p);
        snap_get_fail_all(n, n->closing ? RAFT_CANCELED : RAFT_IOERR);
        return;
    }
    snap_install_timeout(n, (uint64_t)(mono_ms() - n->sg_began_ms));
    snap_dump_serve(n, y, p, len);
    /* Loads whose marker is past y get the next dump: a new work request
     * from this callback, not a recursion. */
    snap_dump_kick(n);
}

static void snap_get_loaded(struct raft_io_snapshot_get *req,
                            struct raft_snapshot *s, int status)
{
    struct snap_get *sg = container_of(req, struct snap_get, req);
    struct node *n = sg->n;
    struct err err = {0};

    sg->snapshot = s;
    if (status != 0 || s == NULL || s->n_bufs != 1 ||
        !snapshot_is_marker(s->bufs[0].base, s->bufs[0].len)) {
        raft_io_snapshot_get_cb cb = sg->orig_cb;
        struct raft_io_snapshot_get *orig = sg->orig;

        n->sg_n--;
        free(sg);
        cb(orig, s, status); /* not a marker: as it is */
        return;
    }
    if (snapshot_marker_index(s->bufs[0].base, s->bufs[0].len, &sg->marker,
                              &err) != 0) {
        log_error("node", "snapshot %" PRIu64 ": %s", (uint64_t)s->index,
                  err.msg);
        snap_get_done(sg, RAFT_CORRUPT);
        return;
    }
    if (n->closing) {
        snap_get_done(sg, RAFT_CANCELED);
        return;
    }
    sg->next = n->sg_head;
    n->sg_head = sg;
    snap_dump_kick(n);
}

static int io_snapshot_get_full(struct raft_io *io,
                                struct raft_io_snapshot_get *req,
                                raft_io_snapshot_get_cb cb)
{
    struct node *n = container_of(io, struct node, io);
    struct snap_get *sg;
    int rv;

    if (n->sg_n >= SNAP_GET_MAX) {
        return RAFT_BUSY;
    }
    sg = xcalloc(1, sizeof(*sg));
    sg->req.data = req->data;
    sg->orig = req;
    sg->orig_cb = cb;
    sg->n = n;
    n->sg_n++;
    rv = n->uv_io_snapshot_get(io, &sg->req, snap_get_loaded);
    if (rv != 0) {
        n->sg_n--;
        free(sg);
    }
    return rv;
}

/* ---- start ---------------------------------------------------------------
 */

static int bootstrap(struct node *n, const struct node_config *cfg,
                     struct err *err)
{
    struct raft_configuration c;
    int rv = 0;

    raft_configuration_init(&c);
    if (cfg->n_peers == 0) {
        rv = raft_configuration_add(&c, cfg->id, cfg->raft_address, RAFT_VOTER);
    }
    for (size_t i = 0; i < cfg->n_peers && rv == 0; i++) {
        rv = raft_configuration_add(&c, cfg->peers[i].id,
                                    cfg->peers[i].raft_address, RAFT_VOTER);
    }
    if (rv == 0) {
        rv = raft_bootstrap(&n->raft, &c);
    }
    raft_configuration_close(&c);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) {
        return err_set(err, ERR_IO, "raft_bootstrap: %s", raft_strerror(rv));
    }
    return 0;
}

/* The configured sizes, 0 taken as their defaults. */
static uint64_t log_bytes_of(const struct node_config *cfg)
{
    return cfg->log_memory_bytes != 0 ? cfg->log_memory_bytes : SNAP_LOG_BYTES;
}

static size_t segment_bytes_of(const struct node_config *cfg)
{
    return cfg->segment_bytes != 0 ? cfg->segment_bytes : RAFT_SEGMENT_BYTES;
}

static void tune(struct node *n, const struct node_config *cfg)
{
    raft_set_election_timeout(
        &n->raft, cfg->election_timeout_ms ? cfg->election_timeout_ms : 1000);
    raft_set_heartbeat_timeout(
        &n->raft, cfg->heartbeat_timeout_ms ? cfg->heartbeat_timeout_ms : 100);
    n->is_snap_auto =
        cfg->snapshot_threshold == 0 && cfg->snapshot_trailing == 0;
    n->snap_log_bytes = log_bytes_of(cfg);
    n->snap_threshold =
        cfg->snapshot_threshold ? cfg->snapshot_threshold : SNAP_THRESHOLD_MAX;
    raft_set_snapshot_threshold(&n->raft, n->snap_threshold);
    raft_set_snapshot_trailing(&n->raft, cfg->snapshot_trailing
                                             ? cfg->snapshot_trailing
                                             : SNAP_TRAILING_MAX);
    raft_set_pre_vote(&n->raft, true);
    /* A follower taking its own snapshot (async since fsm version 3: the
     * worker's dump and the put) ignores the leader's InstallSnapshot
     * without a reply, and the leader retries only after this timeout
     * (libraft's default: 30 s). */
    raft_set_install_snapshot_timeout(&n->raft, INSTALL_TIMEOUT_MS);
    raft_uv_set_connect_retry_delay(&n->io, 100);
    /* libraft prepares each segment file (fallocate + fsync) on the disk the
     * log's writes wait for: at 8 MiB that was every ~40 pushed entries. */
    n->segment_bytes = segment_bytes_of(cfg);
    raft_uv_set_segment_size(&n->io, n->segment_bytes);
}

/* Bytes of the open segments left in dir (libraft turns them into closed
 * segments at start and cuts off their unused tail). */
static uint64_t open_segment_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    uint64_t sum = 0;

    if (d == NULL) {
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st;

        if (strncmp(e->d_name, "open-", 5) == 0 &&
            fstatat(dirfd(d), e->d_name, &st, 0) == 0) {
            sum += (uint64_t)st.st_blocks * 512;
        }
    }
    closedir(d);
    return sum;
}

/* A data directory too small for the preallocated segments never becomes
 * leader and says nothing (libraft's segment preparation fails in its thread
 * pool): refuse it at boot with what is needed. */
static int check_space(struct node *n, const char *dir, struct err *err)
{
    uint64_t need =
        RAFT_SEGMENTS_LIVE * (uint64_t)n->segment_bytes + STORE_BOOT_BYTES;
    uint64_t have;
    struct statvfs vfs;

    if (statvfs(n->raft_dir, &vfs) != 0) {
        return err_set(err, ERR_IO, "statvfs %s: %s", n->raft_dir,
                       strerror(errno));
    }
    have =
        (uint64_t)vfs.f_bavail * vfs.f_frsize + open_segment_bytes(n->raft_dir);
    if (have >= need) {
        return 0;
    }
    return err_set(
        err, ERR_FULL,
        "QUEEN_RAFT_DIR=%s: %" PRIu64 " MiB free, %" PRIu64
        " MiB needed: the raft log preallocates %d segments of "
        "%zu MiB (QUEEN_RAFT_SEGMENT_MB) and the store needs %" PRIu64 " MiB",
        dir, have >> 20, (need + (1 << 20) - 1) >> 20, RAFT_SEGMENTS_LIVE,
        n->segment_bytes >> 20, STORE_BOOT_BYTES >> 20);
}

static int init_io(struct node *n, const struct node_config *cfg,
                   struct err *err)
{
    char dir[4096];
    int rv;

    snprintf(dir, sizeof(dir), "%s/raft", cfg->dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        return err_set(err, ERR_IO, "QUEEN_RAFT_DIR=%.200s: mkdir %s: %s",
                       cfg->dir, dir, strerror(errno));
    }
    /* libraft names neither the path nor the cause of these ("raft_init:
     * unknown error", "I/O error"): say them here, before it looks. */
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        return err_set(err, ERR_IO,
                       "QUEEN_RAFT_DIR=%.200s: %s is not a directory (the raft "
                       "log lives there)",
                       cfg->dir, dir);
    }
    if (access(dir, R_OK | W_OK | X_OK) != 0) {
        return err_set(err, ERR_IO,
                       "QUEEN_RAFT_DIR=%.200s: %s is not writable by this "
                       "process (uid %ld): %s",
                       cfg->dir, dir, (long)getuid(), strerror(errno));
    }
    n->raft_dir = xstrdup(dir);
    int swept = raft_trash_sweep(dir);
    if (swept > 0) {
        log_info("node", "removed %d log file(s) a crash left half removed",
                 swept);
    }
    struct rtransport_config tc = {
        .listen_address = cfg->listen_address != NULL ? cfg->listen_address
                                                      : cfg->raft_address,
        .token = cfg->token != NULL ? cfg->token : "",
    };
    if (rtransport_init(&n->transport, n->loop, &tc, err) != 0) {
        return err->code;
    }
    n->has_token = tc.token[0] != '\0';
    rtransport_set_channel(&n->transport, RTRANSPORT_KIND_FORWARD, fwd_accept,
                           n);
    rv = raft_uv_init(&n->io, n->loop, n->raft_dir, &n->transport);
    if (rv != 0) {
        rtransport_free(&n->transport);
        return err_set(err, ERR_IO, "raft_uv_init %s: %s", dir,
                       raft_strerror(rv));
    }
    /* libraft 0.15's raft_uv implements async_work but says version 1, and
     * raft_init refuses an fsm with snapshot_async (raft/snapshot.h) unless
     * the io says 2. */
    n->io.version = 2;
    /* Snapshots arrive as LZ4 frames already (raft/snapshot.c); libraft's
     * loader still inflates every frame, whichever build wrote it. */
    (void)raft_uv_set_snapshot_compression(&n->io, false);
    n->uv_io_close = n->io.close;
    n->io.close = io_close_once;
    n->uv_io_append = n->io.append;
    n->io.append = io_append_watched;
    n->uv_io_snapshot_get = n->io.snapshot_get;
    n->io.snapshot_get = io_snapshot_get_full;
    n->uv_io_start = n->io.start;
    n->io.start = io_start_watched;
    n->io.time = io_time_held_out;
    return 0;
}

static void free_node(struct node *n)
{
    while (n->fw_peers != NULL) {
        struct fwd_peer *p = n->fw_peers;

        n->fw_peers = p->next;
        free(p);
    }
    fsm_free(n->fsm);
    pthread_mutex_destroy(&n->mu);
    free(n->address);
    free(n->raft_dir);
    free(n);
}

static void handle_closed(uv_handle_t *h);
static void raft_closed_cb(struct raft *r);
static void drain_async(struct node *n);

static void init_handles(struct node *n)
{
    uv_timer_init(n->loop, &n->tick);
    uv_timer_init(n->loop, &n->close_timer);
    uv_async_init(n->loop, &n->async, async_cb);
    uv_check_init(n->loop, &n->apply_check);
    uv_idle_init(n->loop, &n->apply_idle);
    uv_check_init(n->loop, &n->hold_check);
    uv_unref((uv_handle_t *)&n->hold_check); /* keeps no loop alive */
    n->hold_check.data = n;
    n->tick.data = n;
    n->close_timer.data = n;
    n->async.data = n;
    n->apply_check.data = n;
    n->apply_idle.data = n;
    n->open_handles = 6;
}

/* Undo a start that failed after init_io: the close machinery frees n once
 * libraft is done with it. */
static void fail_start(struct node *n, bool raft_inited)
{
    n->closing = true;
    drain_async(n);
    failed_drain(n);
    deferred_abandon(n);
    if (raft_inited) {
        raft_close(&n->raft, raft_closed_cb);
        return;
    }
    raft_uv_close(&n->io);
    rtransport_free(&n->transport);
    uv_close((uv_handle_t *)&n->tick, handle_closed);
    uv_close((uv_handle_t *)&n->close_timer, handle_closed);
    uv_close((uv_handle_t *)&n->async, handle_closed);
    uv_close((uv_handle_t *)&n->apply_check, handle_closed);
    uv_close((uv_handle_t *)&n->apply_idle, handle_closed);
    uv_close((uv_handle_t *)&n->hold_check, handle_closed);
}

/* Put the deferred apply (and its drains) between libraft and the fsm. */
static void wrap_fsm(struct node *n)
{
    n->fsm_apply = n->rfsm.apply;
    n->fsm_snapshot = n->rfsm.snapshot;
    n->fsm_restore = n->rfsm.restore;
    n->rfsm.apply = node_fsm_apply;
    n->rfsm.snapshot = node_fsm_snapshot;
    n->rfsm.restore = node_fsm_restore;
}

/* The membership the log holds (read back by raft_start) against this
 * node's own settings: the others call the address the log names, and a
 * node the log does not name is never asked to vote. Either one left a
 * node campaigning alone with nothing in its log but "candidate", so
 * each is said once at the start. Nothing to say before the first
 * configuration (a node added to a cluster starts with an empty log). A
 * removed member's log often ends before its removal (the leader stops
 * sending to it), so the second case is only said when the log has it. */
static void warn_membership(const struct node *n)
{
    const struct raft_configuration *c = &n->raft.configuration;
    const struct raft_server *me = NULL;

    if (c->n == 0) {
        return;
    }
    for (unsigned i = 0; i < c->n && me == NULL; i++) {
        me = c->servers[i].id == n->id ? &c->servers[i] : NULL;
    }
    if (me != NULL && strcmp(me->address, n->address) != 0) {
        log_error("node",
                  "this node's raft address in the membership its log holds "
                  "is %s, not %s (QUEEN_RAFT_PEERS/QUEEN_RAFT_LISTEN): the "
                  "other members call %s. An address is changed by removing "
                  "the member and adding it again (docs/operations.md), or by "
                  "putting the old one back",
                  me->address, n->address, me->address);
    }
    if (me != NULL) {
        return;
    }
    log_error("node",
              "node %" PRIu64 " is not in the membership its log holds (it "
              "was removed): no member asks it to vote or sends it the log. "
              "To rejoin, empty its QUEEN_RAFT_DIR and add it again (POST "
              "/api/v1/cluster/members)",
              n->id);
}

int node_start(struct node **out, uv_loop_t *loop,
               const struct node_config *cfg, struct store *store,
               struct err *err)
{
    struct node *n = xcalloc(1, sizeof(*n));
    int rv;

    signal(SIGPIPE, SIG_IGN);
    arena_install();
    arena_set_spares(log_bytes_of(cfg));
    arena_prefault(true);
    n->loop = loop;
    n->store = store;
    n->id = cfg->id;
    n->address = xstrdup(cfg->raft_address);
    pthread_mutex_init(&n->mu, NULL);
    if (init_io(n, cfg, err) != 0) {
        free_node(n);
        return err->code;
    }
    init_handles(n);
    n->fsm = fsm_new(store, &n->rfsm);
    wrap_fsm(n);
    for (int t = CMD_PUSH + 1; t < CMD_TYPE_COUNT; t++) {
        if (cfg->handlers[t] != NULL) {
            fsm_set_handler(n->fsm, t, cfg->handlers[t], cfg->handler_args[t]);
        }
    }
    rv = raft_init(&n->raft, &n->io, &n->rfsm, cfg->id, n->address);
    if (rv != 0) {
        /* On a full disk libraft's first write (its probe of the
         * directory) fails as "unknown error": the space check says what
         * it is, as it does on a boot that got past raft_init. */
        n->segment_bytes = segment_bytes_of(cfg);
        if (check_space(n, cfg->dir, err) == 0) {
            err_set(err, ERR_IO, "raft_init: %s", raft_strerror(rv));
        }
        fail_start(n, false);
        return err->code;
    }
    fsm_attach_raft(n->fsm, &n->raft);
    tune(n, cfg);
    /* Before bootstrap: on a full disk its first write would fail first. */
    if (check_space(n, cfg->dir, err) != 0 || bootstrap(n, cfg, err) != 0) {
        fail_start(n, true);
        return err->code;
    }
    rv = raft_start(&n->raft);
    if (rv != 0 && fsm_restore_error(n->fsm) != NULL) {
        *err = *fsm_restore_error(n->fsm); /* raft/snapshot.h (4) */
        fail_start(n, true);
        return err->code;
    }
    if (rv != 0) {
        err_set(err, ERR_IO, "raft_start: %s: %s", raft_strerror(rv),
                raft_errmsg(&n->raft));
        fail_start(n, true);
        return err->code;
    }
    if (store_ahead(n, store, err) != 0) {
        fail_start(n, true);
        return err->code;
    }
    uv_timer_start(&n->tick, tick_cb, TICK_MS, TICK_MS);
    uv_check_start(&n->hold_check, hold_check_cb);
    if (deferred_run(n, true) != 0) { /* (D2): raft's replay */
        n->is_stalled = true;
        deferred_stop(n);
    }
    n->last_stamp = fsm_greatest_stamp(n->fsm);
    check_leadership(n);
    log_info("node",
             "started id=%" PRIu64 " address=%s dir=%s applied=%" PRIu64, n->id,
             n->address, cfg->dir, store_applied_index(store));
    warn_membership(n);
    *out = n;
    return 0;
}

/* ---- close ---------------------------------------------------------------
 */

static void handle_closed(uv_handle_t *h)
{
    struct node *n = h->data;

    if (--n->open_handles == 0) {
        node_closed_fn cb = n->closed_cb;
        void *arg = n->closed_arg;

        free_node(n);
        if (cb != NULL) {
            cb(arg);
        }
    }
}

static void count_closing(uv_handle_t *h, void *arg)
{
    if (uv_is_closing(h)) {
        (*(int *)arg)++;
    }
}

/* libraft 0.15 fires raft_close's callback while some of its own handles
 * are still closing or thread-pool work is pending, and when those finish it
 * fires its io close callback AGAIN (a double free, or a segfault once
 * raft_uv is freed). So io->close is wrapped to pass the first call only
 * (io_close_once), and nothing is freed until no handle of the loop is
 * closing and no request is active (bounded by REAP_ROUNDS_MAX), and no
 * snapshot is between begin and finalize (bounded by REAP_ROUNDS_SNAP). */
static void reap_cb(uv_timer_t *t)
{
    struct node *n = container_of(t, struct node, close_timer);
    struct err err = {0};
    int closing = 0;

    uv_walk(n->loop, count_closing, &closing);
    ++n->reap_rounds;
    if ((closing > 0 || n->loop->active_reqs.count > 0) &&
        n->reap_rounds < REAP_ROUNDS_MAX) {
        return;
    }
    /* A snapshot's worker still reads the store (and its finalize still
     * runs on this loop): freeing now would be a use after free. */
    if (snapshot_open_count() > 0 && n->reap_rounds < REAP_ROUNDS_SNAP) {
        return;
    }
    uv_timer_stop(t);
    failed_drain(n); /* (P1): libraft is closed */
    deferred_abandon(n);
    raft_uv_close(&n->io);
    rtransport_free(&n->transport);
    if (store_sync(n->store, &err) != 0) {
        log_warn("node", "store sync at close: %s", err.msg);
    }
    uv_close((uv_handle_t *)&n->tick, handle_closed);
    uv_close((uv_handle_t *)&n->close_timer, handle_closed);
    uv_close((uv_handle_t *)&n->async, handle_closed);
    uv_close((uv_handle_t *)&n->apply_check, handle_closed);
    uv_close((uv_handle_t *)&n->apply_idle, handle_closed);
    uv_close((uv_handle_t *)&n->hold_check, handle_closed);
}

static void raft_closed_cb(struct raft *r)
{
    struct node *n = container_of(r, struct node, raft);

    uv_timer_start(&n->close_timer, reap_cb, 1, 1);
}

static void close_delay_cb(uv_timer_t *t)
{
    struct node *n = container_of(t, struct node, close_timer);

    uv_timer_stop(t);
    /* (D2): raft_close frees the entries still queued. */
    if (deferred_run(n, true) != 0) {
        deferred_abandon(n);
    }
    raft_close(&n->raft, raft_closed_cb);
}

static void close_barrier_cb(struct raft_barrier *req, int status)
{
    struct node *n = req->data;

    UNUSED(status);
    if (uv_is_active((uv_handle_t *)&n->close_timer)) {
        uv_timer_stop(&n->close_timer);
        uv_timer_start(&n->close_timer, close_delay_cb, CLOSE_DELAY_MS, 0);
    }
}

/* Fail the proposals still queued from other threads. */
static void drain_async(struct node *n)
{
    struct async_item *it;

    pthread_mutex_lock(&n->mu);
    n->q_closed = true;
    it = n->q_head;
    n->q_head = n->q_tail = NULL;
    n->q_len = 0;
    pthread_mutex_unlock(&n->mu);
    while (it != NULL) {
        struct async_item *next = it->next;
        struct err err;

        err_set(&err, ERR_BUSY, "node is closing");
        it->cb(it->arg, ERR_BUSY, NULL, &err);
        free(it->bytes);
        free(it);
        it = next;
    }
}

void node_close(struct node *n, node_closed_fn cb, void *arg)
{
    ASSERT(!n->closing);
    n->closing = true;
    n->closed_cb = cb;
    n->closed_arg = arg;
    uv_timer_stop(&n->tick);
    /* without the tick the loop may turn only every heartbeat: no holds
     * are measured, and raft's clock runs on from the last one counted */
    uv_check_stop(&n->hold_check);
    n->hold_mark_ms = 0;
    drain_async(n);
    fwd_close_all(n);
    member_waits_fail(n);
    /* libraft aborts when closed with writes in flight: let a barrier
     * flush them (bounded, in case leadership is gone), then wait. */
    n->close_barrier.data = n;
    if (raft_state(&n->raft) == RAFT_LEADER &&
        raft_barrier(&n->raft, &n->close_barrier, close_barrier_cb) == 0) {
        uv_timer_start(&n->close_timer, close_delay_cb, CLOSE_BARRIER_MS, 0);
    } else {
        uv_timer_start(&n->close_timer, close_delay_cb, CLOSE_DELAY_MS, 0);
    }
}
