/* Which QUEEN_* variables this build reads, and what it says about the
 * others (issue 14, issue 19 item 5). A setting the broker does not read is
 * never ignored in silence:
 *   (1) a name this build reads (the broker's table, the sink's) is fine;
 *   (2) a name of the product this build does not implement is refused when
 *       ignoring it would be unsafe (QUEEN_RAFT_PEERS: nodes meant to be one
 *       cluster would each become a cluster of their own and write the same
 *       queues), and named in a warning otherwise;
 *   (3) any other QUEEN_* name is named in a warning, with the closest name
 *       this build reads when one is within two edits (a typo):
 *       "QUEEN_S3_EMBEDED: unknown; did you mean QUEEN_S3_EMBEDDED?",
 *       or else the one that differs from it in the last word alone (a
 *       unit left off or changed: QUEEN_RAFT_LOG_MEMORY, ..._MB);
 *   (4) the sink's QUEEN_S3_* settings while QUEEN_S3_EMBEDDED is not true
 *       get one warning naming them;
 *   (5) QUEEN_STRICT_CONFIG=true turns the warnings of (2)-(4) into
 *       refusals.
 * Pure: the environment comes as an envp array and warnings go to a
 * callback. Values never appear in a message (they may be secrets). */
#ifndef QUEEN_BROKER_ENVCHECK_H
#define QUEEN_BROKER_ENVCHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

typedef void (*envcheck_warn_fn)(void *ctx, const char *msg);

/* Walk envp (NAME=value strings, NULL-terminated). Calls warn once per
 * variable of (2) or (3) it tolerates and once for (4). Returns 0, or
 * ERR_INVALID with err naming the first variable it refuses. */
int envcheck_run(const char *const *envp, envcheck_warn_fn warn, void *ctx,
                 struct err *err);

/* Whether this build reads the variable name (len bytes). */
bool envcheck_is_known(const char *name, size_t len);

#endif
