/* One process per data directory (issue 19 item 1). Two brokers on one
 * QUEEN_RAFT_DIR would both append to the raft log and corrupt it, so the
 * boot takes an exclusive flock(2) on the directory itself and keeps it for
 * the life of the process (the kernel drops it at any exit, kill -9
 * included). <dir>/queen.lock holds the holder's PID, for the refusal's
 * message only: deleting it changes nothing. */
#ifndef QUEEN_BROKER_DIRLOCK_H
#define QUEEN_BROKER_DIRLOCK_H

#include <stdint.h>

#include "base/err.h"

#define DIRLOCK_FILE    "queen.lock"
#define DIRLOCK_ID_FILE "node-id"

/* Take the lock of dir (which exists). Returns 0 with *fd held open
 * (close-on-exec), or ERR_BUSY "QUEEN_RAFT_DIR=<dir>: in use by another
 * queen process (pid N); ..." when another process holds it, or ERR_IO. */
int dirlock_take(const char *dir, int *fd, struct err *err);

/* The directory's owner: <dir>/node-id holds the QUEEN_RAFT_NODE_ID of
 * the node that made it, written at its first boot. A raft log and its
 * votes belong to one member, so a directory found holding another id is
 * refused (ERR_INVALID "QUEEN_RAFT_DIR=<dir> holds node N's data, and
 * this node is QUEEN_RAFT_NODE_ID=M; ..."), unless raft never wrote its
 * term and vote there (a first boot that stopped early); a directory
 * without the file (empty, or made before it existed) gets it. Call with the
 * lock held. 0, ERR_INVALID, or ERR_IO. */
int dirlock_check_id(const char *dir, uint64_t id, struct err *err);

/* Release (close) a lock taken by dirlock_take; fd < 0 is a no-op. */
void dirlock_release(int fd);

#endif
