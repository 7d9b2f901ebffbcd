/* The raft node: libraft 0.15 with its libuv I/O and TCP transport on the
 * node loop, the fsm over the store, proposals with stamps, and a clean
 * close. A single node is a one-voter cluster; three nodes use the same path.
 *
 * Directories: cfg->dir/raft holds libraft's log and snapshots, cfg->dir/store
 * the LMDB environment (the caller opens the store on it: node_store_dir()).
 *
 * Stamps (docs/architecture.md §1, docs/design/http-api.md §12): node_propose()
 * writes into each command
 *   stamp = max(wall clock µs, last stamp proposed + 1, greatest applied
 *           stamp + 1)
 * so stamps strictly increase in log order. A node that becomes leader first
 * runs a barrier and refuses proposals (ERR_NOT_LEADER, "leader not ready")
 * until it completes, so it stamps above everything of earlier terms.
 *
 * Roles:
 *   FOLLOWER/CANDIDATE -> LEADER_PENDING   raft elected us (seen on a tick)
 *   LEADER_PENDING     -> LEADER           barrier applied
 *   LEADER*            -> FOLLOWER         lost leadership (pending proposals
 *                                          fail with ERR_NOT_LEADER)
 *   any                -> CLOSING          node_close()
 *
 * Threading: everything except node_propose_async() runs on the loop thread.
 * Callbacks always run on the loop thread. */
#ifndef QUEEN_RAFT_NODE_H
#define QUEEN_RAFT_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/err.h"
#include "raft/fsm.h"
#include "store/store.h"

#define NODE_MAX_PEERS 9

struct node_peer {
    uint64_t id;
    const char *raft_address; /* "127.0.0.1:9101" */
};

struct node_config {
    const char *dir;            /* QUEEN_RAFT_DIR; raft/ and store/ inside */
    uint64_t id;                /* this node's id, >= 1 */
    const char *raft_address;   /* this node's address as peers dial it */
    const char *listen_address; /* where to bind; NULL = raft_address */
    /* The shared secret raft peers prove (raft/transport.h); NULL or "" =
     * no peer can connect (a single node needs none). */
    const char *token;
    size_t n_peers; /* voters including this node; 0 = only self */
    struct node_peer peers[NODE_MAX_PEERS];
    unsigned election_timeout_ms;  /* 0 = 1000 */
    unsigned heartbeat_timeout_ms; /* 0 = 100 */
    /* libraft keeps every entry since the last snapshot in memory, and a
     * snapshot (a compact copy of the store) runs on the loop thread: with
     * pushes of 100 records (~13 KB entries) 32768 entries is ~430 MB of
     * log between snapshots; the default threshold (1024) would cost ~10x
     * throughput. */
    unsigned snapshot_threshold; /* 0 = log_memory_bytes of log */
    unsigned snapshot_trailing;  /* 0 = an eighth of that */
    /* The log kept in memory between snapshots when both thresholds are 0
     * (they then follow the mean entry size, 64..32768 and 16..4096
     * entries), and the emptied arena chunks kept for reuse (raft/arena.h);
     * 0 = 448 MiB. */
    uint64_t log_memory_bytes;
    /* Size of one raft log segment file; libraft preallocates it whole
     * (fallocate) and keeps three: the one being written and two ready. */
    size_t segment_bytes; /* 0 = 64 MiB */
    /* Apply handlers of the reserved command types (fsm_set_handler()),
     * registered before raft replays anything; NULL = unsupported. */
    fsm_apply_fn handlers[CMD_TYPE_COUNT];
    void *handler_args[CMD_TYPE_COUNT];
};

enum node_role {
    NODE_FOLLOWER = 0,
    NODE_CANDIDATE,
    NODE_LEADER_PENDING, /* elected, barrier not applied yet */
    NODE_LEADER,
    NODE_CLOSING,
    NODE_UNAVAILABLE
};

struct node;
struct raft;

/* Called once per proposal on the loop thread. status 0: res is the fsm's
 * result for the entry (borrowed: valid only during the call; copy what you
 * need). status != 0: res is NULL and err says why (ERR_NOT_LEADER when
 * leadership was lost before the entry applied, ERR_BUSY when the node
 * closes, ERR_IO on a raft I/O failure; ERR_FULL, or ERR_BUSY for an I/O
 * error, when storage failed (node.c (D4)): "not written" when libraft
 * could not append the entry, "logged but not acknowledged" when it waits
 * behind an entry the store cannot commit, and then applies once storage
 * recovers). */
typedef void (*node_applied_fn)(void *arg, int status,
                                const struct fsm_result *res,
                                const struct err *err);
typedef void (*node_closed_fn)(void *arg);
typedef void (*node_commit_fn)(void *arg);

/* Make the raft dir (cfg->dir/raft; the caller creates cfg->dir and opens
 * the store in node_store_dir()), bootstrap on first start (an existing dir
 * is fine), start raft on loop. Borrows loop, cfg (copied) and store (must
 * outlive the node). Returns owned; release with node_close(). ERR_FULL
 * when the raft dir's file system cannot hold the three preallocated
 * segments plus 16 MiB (the message says how much it needs). Ignores
 * SIGPIPE process-wide (libraft writes to sockets whose peer went away). */
int node_start(struct node **out, uv_loop_t *loop,
               const struct node_config *cfg, struct store *store,
               struct err *err);

/* "<dir>/store" into out (cap n). */
void node_store_dir(const char *dir, char *out, size_t n);

/* Propose one command (bytes from cmd_*_encode / cmd_begin+cmd_finish; type
 * must match the header). Copies the bytes into one raft entry and writes
 * the stamp into it. Loop thread only. Returns 0 and later calls cb exactly
 * once; or returns ERR_NOT_LEADER (not the leader, or leader not ready),
 * ERR_BUSY (closing), ERR_INVALID (not a command), ERR_FULL (the store is
 * within 64 MiB of its map size, or storage failed: node_storage_error()),
 * ERR_BUSY (storage failed with an I/O error other than space), ERR_IO; cb
 * is then never called. */
int node_propose(struct node *n, int type, const void *cmd, size_t len,
                 node_applied_fn cb, void *arg, struct err *err);

/* The same, from any thread: the bytes are copied into a locked queue and
 * proposed from the loop (uv_async). cb runs on the LOOP thread, with the
 * refusal as status when node_propose() would have refused. Returns 0, or
 * ERR_BUSY when the node is closing (cb not called) or the queue holds 4096
 * proposals already. */
int node_propose_async(struct node *n, int type, const void *cmd, size_t len,
                       node_applied_fn cb, void *arg, struct err *err);

/* Proposals of this node that are not committed yet (not written by a
 * quorum): what a batching proposer waits on before it proposes the next
 * batch. Loop thread. */
unsigned node_uncommitted(const struct node *n);

/* Call fn(arg) on the loop each time one of this node's proposals is
 * committed, before it applies (applies are deferred, see node.c): a batch
 * proposed then is written by libraft while the committed entry applies.
 * fn may propose. One hook per node; fn NULL removes it. */
void node_on_commit(struct node *n, node_commit_fn fn, void *arg);

/* A read barrier that also moves safeTime: proposes a CMD_NOOP (stamped
 * like any command) and calls cb once it applied on this node, so every
 * entry before it is applied too. Same refusals and threading as
 * node_propose(). */
int node_barrier(struct node *n, node_applied_fn cb, void *arg,
                 struct err *err);

/* Why writes are refused, when the store or the raft log failed to write
 * (ENOSPC, EIO; names the file and the errno's text), else NULL. Borrowed
 * until the next loop iteration. Loop thread. */
const char *node_storage_error(const struct node *n);

int node_role(const struct node *n);  /* enum node_role */
const char *node_role_name(int role); /* "leader", "follower", ... */
/* The leader's id and raft address as libraft knows it (0/NULL if none). */
void node_leader(const struct node *n, uint64_t *id, const char **address);
uint64_t node_applied_index(const struct node *n);
uint64_t node_term(const struct node *n);

/* One member of the raft configuration as this node knows it. */
struct node_member {
    uint64_t id;
    const char *raft_address; /* borrowed until the configuration changes */
    bool is_voter;
    /* On the leader only (has_progress): the highest index the member has
     * stored (replication progress; the leader's own: its last stored). */
    bool has_progress;
    uint64_t match_index;
};

/* Voters in the current configuration. Loop thread. */
unsigned node_voters(const struct node *n);

/* Copy up to cap members of the current configuration into out; returns
 * how many there are. Loop thread. */
size_t node_members(const struct node *n, struct node_member *out, size_t cap);

/* Called once per membership change, on the loop thread: status 0 when the
 * new configuration is committed, else the ERR_* with err. */
typedef void (*node_change_fn)(void *arg, int status, const struct err *err);

/* Runtime membership (the ready leader only; one change at a time). add:
 * the server id at raft_address joins as a spare, then is promoted to
 * voter once it caught up with the log (it must be running: a server that
 * never answers never gets promoted; the caller bounds the wait). remove:
 * id leaves the configuration (the leader may remove itself; it steps down
 * once the change committed). Returns 0 and later calls cb once; or
 * ERR_NOT_LEADER, ERR_BUSY ("a membership change is in progress", or
 * closing), ERR_INVALID (id 0, already a member, not a member, the last
 * voter). */
int node_member_add(struct node *n, uint64_t id, const char *raft_address,
                    node_change_fn cb, void *arg, struct err *err);
int node_member_remove(struct node *n, uint64_t id, node_change_fn cb,
                       void *arg, struct err *err);

/* Writes this follower sent to the leader, and writes the leader
 * proposed for its followers (node.c "Forwarded proposals"). */
void node_forward_counts(const struct node *n, uint64_t *forwarded,
                         uint64_t *served);
/* Connections the raft port refused (no token proof, garbage, a stall). */
uint64_t node_refused_connections(const struct node *n);
/* The highest index this node knows is committed: libraft's commit index,
 * the store's applied index, or the commit index the leader's last
 * AppendEntries named, whichever is highest. Only committed entries are
 * applied, but libraft's count starts low at a boot (the log's own idea,
 * before a leader says more), stays below a snapshot a follower installed
 * until the leader's next entries reach it, and on a follower never passes
 * its own last stored entry, so it hid how far behind the leader it was. */
uint64_t node_commit_index(const struct node *n);
int64_t node_safe_time(const struct node *n);
struct fsm *node_fsm(struct node *n);
/* The node's libraft instance, for tests that drive its io or read its
 * settings (test_node); nothing in the broker calls it. */
struct raft *node_raft(struct node *n);

/* Safe close: stops taking proposals (pending ones fail with ERR_BUSY),
 * waits for a barrier when leader (bounded), then ~200 ms, then raft_close,
 * raft_uv_close and the transport; cb(arg) runs on the loop when every handle
 * is closed and n is freed. The store is left open for the caller. */
void node_close(struct node *n, node_closed_fn cb, void *arg);

#endif
