/* queen: the broker's entry point. Boot reads the environment, opens the
 * store and the raft log, and runs the node loop until SIGTERM.
 *
 * `queen --version`, `--help` and `--help-config` print and exit 0; `queen
 * lake verify|restore ...` runs the offline lake tools (src/lake/lake.h);
 * any other argument prints the usage on stderr and exits 2.
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
#include "base/version.h"
#include "broker/broker.h"
#include "broker/config.h"
#include "broker/envcheck.h"
#include "lake/lake.h"

static void boot_warn(void *ctx, const char *msg)
{
    UNUSED(ctx);
    log_warn("boot", "%s", msg);
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [--version | --help | --help-config]\n"
            "       %s lake verify|restore ... (docs/lake.md)\n"
            "\n"
            "queen %s: a message broker with an embedded S3 sink. With no\n"
            "argument it runs the broker until SIGTERM; every setting is a\n"
            "QUEEN_* environment variable.\n"
            "\n"
            "  --version      print the version and exit\n"
            "  --help, -h     print this text and exit\n"
            "  --help-config  list every QUEEN_* variable with its default\n"
            "                 and exit\n",
            argv0, argv0, QUEEN_VERSION);
}

/* Flags: one at most. Returns the exit code, or -1 to run the broker. */
static int flags(int argc, char **argv)
{
    const char *a = argc == 2 ? argv[1] : NULL;

    if (argc == 1) {
        return -1;
    }
    if (a != NULL && strcmp(a, "--version") == 0) {
        printf("queen %s\n", QUEEN_VERSION);
        return 0;
    }
    if (a != NULL && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
        usage(stdout, argv[0]);
        return 0;
    }
    if (a != NULL && strcmp(a, "--help-config") == 0) {
        config_help(stdout);
        return 0;
    }
    usage(stderr, argv[0]);
    return 2;
}

int main(int argc, char **argv)
{
    struct config cfg;
    struct err err;
    int rc;

    if (argc >= 2 && strcmp(argv[1], "lake") == 0) {
        return lake_main(argc - 1, argv + 1); /* docs/lake.md */
    }
    rc = flags(argc, argv);
    if (rc >= 0) {
        return fflush(stdout) == 0 ? rc : 1;
    }
    signal(SIGPIPE, SIG_IGN);
    if (config_load_env(&cfg, &err) != 0) {
        log_error("boot", "FATAL: %s", err.msg);
        return 2;
    }
    log_set_level(cfg.log_level);
    config_warn_key(&cfg);
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
