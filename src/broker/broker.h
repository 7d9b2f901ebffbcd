/* The broker process: wires the node loop, the store, the raft node, the
 * HTTP server and the API routes, and runs them until SIGTERM or SIGINT.
 *
 * Boot: mkdir QUEEN_RAFT_DIR -> store_open(<dir>/store) -> node_start
 * (raft in <dir>/raft) -> routes -> http_server_start -> uv_run.
 *
 * Shutdown (SIGTERM/SIGINT), each step started by the previous one's
 * completion:
 *   RUNNING --signal--> DRAINING_HTTP   broker_on_signal(): stop accepting,
 *                                        answer long polls (api_stop), let
 *                                        busy connections finish their
 *                                        requests (pushes wait for apply)
 *   DRAINING_HTTP --last conn--> CLOSING_RAFT   broker_on_http_closed():
 *                                        node_close (barrier, delay, close)
 *   CLOSING_RAFT --node closed--> DONE  broker_on_node_closed(): close the
 *                                        signal handles; uv_run returns
 * Then the store is closed and broker_run() returns 0 (exit 0). */
#ifndef QUEEN_BROKER_BROKER_H
#define QUEEN_BROKER_BROKER_H

#include "base/err.h"
#include "broker/config.h"

/* Run the broker with cfg until a clean shutdown. Returns 0, or an ERR_*
 * with err->msg naming the failing step when the boot fails (nothing is
 * left running then). Blocks; installs SIGTERM/SIGINT handlers and ignores
 * SIGPIPE. */
int broker_run(const struct config *cfg, struct err *err);

#endif
