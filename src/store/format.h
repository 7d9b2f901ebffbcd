/* The cluster's storage format (docs/design/formats.md §12): which forms of
 * the replicated log and the store every voter can apply, so that a node
 * only writes a form once no voter would misread it (a rolling upgrade).
 *
 * Levels:
 *   1 (STORE_FORMAT_ENVELOPE): an encrypted queue's payload travels and is
 *     stored as the JSON envelope (base/aead.h); what every build reads.
 *   2 (STORE_FORMAT_SEALED_BINARY): it travels with raft/cmd.h's
 *     CMD_PAYLOAD_SEALED mark in the binary form and is stored with the
 *     record flag SCHEMA_RECORD_SEALED; every other payload applied from
 *     then on is stored with SCHEMA_RECORD_PLAIN, so it is never taken for
 *     an envelope.
 *
 * The level lives in the replicated KV, tenant STORE_DEFAULT_TENANT,
 * namespace STORE_FORMAT_NS (written only inside the broker: api/kv.c
 * refuses HTTP writes to it):
 *   key "node:<raft id>" = the level that node's build supports, written by
 *     the node itself once it runs (broker/format.c);
 *   key "format" = the cluster's level, written once by a leader that read
 *     a node row at that level for every voter of its configuration.
 * Since a node proposes a level-2 entry only after it applied the "format"
 * row, that row precedes the entry in the log, and it was written only
 * when every voter then ran a build that applies level 2.
 *
 * Invariants:
 *   (1) The level only rises: store_format() never goes down while the
 *       process runs, and the rows are written with putIfAbsent or a
 *       greater value.
 *   (2) The fsm reads the row inside each push entry's write transaction
 *       (store_format_read with its txn), so every node marks a row plain or
 *       not alike.
 *
 * Threading: store_format any thread; store_format_read with txn on the
 * loop thread, without one from any thread. */
#ifndef QUEEN_STORE_FORMAT_H
#define QUEEN_STORE_FORMAT_H

#include <lmdb.h>

#include "base/err.h"
#include "store/store.h"

#define STORE_FORMAT_NS          "queen-cluster"
#define STORE_FORMAT_KEY         "format"
#define STORE_FORMAT_NODE_PREFIX "node:"

enum store_format_level {
    STORE_FORMAT_ENVELOPE = 1,
    STORE_FORMAT_SEALED_BINARY = 2,
    /* What this build reads and writes. */
    STORE_FORMAT_BUILD = STORE_FORMAT_SEALED_BINARY
};

/* The cluster's level as last read by this process (0 before any read;
 * store_open reads it once). */
int store_format(const struct store *s);

/* The level in row key of STORE_FORMAT_NS (a node's row or "format"), read
 * in txn (NULL: a read txn of its own) into *level: 0 when absent or not a
 * positive int. 0 or ERR_IO. */
int store_format_row(struct store *s, MDB_txn *txn, const char *key, int *level,
                     struct err *err);

/* Read the "format" row (store_format_row) and raise store_format() to
 * it. */
int store_format_read(struct store *s, MDB_txn *txn, int *level,
                      struct err *err);

#endif
