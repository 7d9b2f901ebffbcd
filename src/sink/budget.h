/* The node-wide memory budget (docs/design/window.md §12): one per node, shared
 * by every queue of every sink. Thread-safe (a mutex), pure (no clock).
 *   (1) limit = max(1, bytes given at creation).
 *   (2) A report sets the queue's weight and answers "over" iff the total
 *       > limit, this queue's bytes > 0 and no queue holds more than it
 *       (ties count as largest): that queue force-closes its window.
 *   (3) A stopped queue's key is forgotten, so its weight leaves the total. */
#ifndef QUEEN_SINK_BUDGET_H
#define QUEEN_SINK_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

struct budget;

/* Returns owned; free with budget_free(). limit_bytes 0 counts as 1. */
struct budget *budget_new(uint64_t limit_bytes);
void budget_free(struct budget *b);

/* Set key's (copied) buffered weight; returns whether this queue is over. */
bool budget_report(struct budget *b, const char *key, uint64_t bytes);
void budget_forget(struct budget *b, const char *key);
uint64_t budget_total(struct budget *b); /* queen_s3_buffer_bytes */
uint64_t budget_limit(const struct budget *b);

/* Append the key esc(tenant) + "/" + esc(queue) to out. */
int budget_key(struct buf *out, const char *tenant, const char *queue,
               struct err *err);

#endif
