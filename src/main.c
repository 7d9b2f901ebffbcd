/* queen: the broker's entry point. Boot reads the environment, opens the
 * store and the raft log, and runs the node loop until SIGTERM.
 *
 * Exit codes: 0 after a clean shutdown, 2 for a bad setting (one line
 * "ERROR boot: FATAL: <VAR>=<value>: <why>"), 1 when the boot fails later
 * (a port in use, an unwritable directory; one line "ERROR boot: FATAL:
 * <why>", with no sink thread left running: the sink starts only once the
 * broker listens). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h> /* environ */

#include "base/common.h"
#include "base/log.h"
#include "broker/broker.h"
#include "broker/config.h"
#include "broker/envcheck.h"

static void boot_warn(void *ctx, const char *msg)
{
    UNUSED(ctx);
    log_warn("boot", "%s", msg);
}

int main(int argc, char **argv)
{
    struct config cfg;
    struct err err;

    if (argc == 2 && strcmp(argv[1], "--help-config") == 0) {
        config_help(stdout);
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: %s [--help-config]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (config_load_env(&cfg, &err) != 0) {
        log_error("boot", "FATAL: %s", err.msg);
        return 2;
    }
    log_set_level(cfg.log_level);
    if (envcheck_run((const char *const *)environ, boot_warn, NULL, &err) !=
        0) {
        log_error("boot", "FATAL: %s", err.msg);
        return 2;
    }
    if (broker_run(&cfg, &err) != 0) {
        log_error("boot", "FATAL: %s", err.msg);
        return 1;
    }
    return 0;
}
