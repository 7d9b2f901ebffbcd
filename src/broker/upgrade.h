/* The rolling-upgrade gate (store/format.h; docs/operations.md, Upgrade):
 * raises the cluster's storage format once every voter runs a build that
 * applies it, so no node writes a log entry an older voter would misread.
 *
 * Every node writes its own row "node:<raft id>" = STORE_FORMAT_BUILD once
 * it runs; the leader, when every voter of its configuration has such a
 * row at that level, writes "format" = STORE_FORMAT_BUILD. An older build
 * writes no row, so while one votes the format stays where it is. Both are
 * CMD_KV writes, which every build applies alike. Timer driven (every
 * UPGRADE_TICK_MS until the format is reached), one write in flight at a
 * time.
 *
 * Threading: loop thread only. */
#ifndef QUEEN_BROKER_UPGRADE_H
#define QUEEN_BROKER_UPGRADE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct store;
struct node;
struct kv_service;

#define UPGRADE_TICK_MS 1000

/* What the gate sees at a tick. */
struct upgrade_view {
    int cluster;  /* the "format" row, 0 when absent */
    int self_row; /* this node's "node:<id>" row, 0 when absent */
    bool is_leader;
    size_t n_voters;
    const int *voter_rows; /* n_voters: each voter's row, 0 when absent */
};

enum upgrade_step {
    UPGRADE_DONE = 0, /* the format is this build's: nothing left */
    UPGRADE_IDLE,     /* wait: a voter has not said it runs this build */
    UPGRADE_ANNOUNCE, /* write this node's row */
    UPGRADE_RAISE     /* (leader) write the "format" row */
};

/* The step for v (pure). */
enum upgrade_step upgrade_next(const struct upgrade_view *v);

struct upgrade;

/* Start the gate's timer on loop. Borrows store, node and kv (they outlive
 * it until upgrade_close). */
struct upgrade *upgrade_start(uv_loop_t *loop, struct store *store,
                              struct node *node, struct kv_service *kv,
                              uint64_t self_id);
/* Stop and free (after the node closed: no write of it is still out). */
void upgrade_close(struct upgrade *u);

#endif
