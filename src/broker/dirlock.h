/* One process per data directory (issue 19 item 1). Two brokers on one
 * QUEEN_RAFT_DIR would both append to the raft log and corrupt it, so the
 * boot takes an exclusive flock(2) on <dir>/queen.lock and keeps it for the
 * life of the process (the kernel drops it at any exit, kill -9 included).
 * The file holds the holder's PID, for the refusal's message only: the lock,
 * not the file's presence, decides. */
#ifndef QUEEN_BROKER_DIRLOCK_H
#define QUEEN_BROKER_DIRLOCK_H

#include "base/err.h"

#define DIRLOCK_FILE "queen.lock"

/* Take the lock of dir (which exists). Returns 0 with *fd held open
 * (close-on-exec), or ERR_BUSY "QUEEN_RAFT_DIR=<dir>: in use by another
 * queen process (pid N); ..." when another process holds it, or ERR_IO. */
int dirlock_take(const char *dir, int *fd, struct err *err);

/* Release (close) a lock taken by dirlock_take; fd < 0 is a no-op. */
void dirlock_release(int fd);

#endif
