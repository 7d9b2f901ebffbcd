/* See envcheck.h. */
#include "broker/envcheck.h"

#include <stdio.h>
#include <string.h>

#include "base/common.h"

#define ENVCHECK_NAME_MAX 128
#define ENVCHECK_TYPO     2 /* edits */

/* Every QUEEN_* variable read anywhere in src/ (tests/integration/
 * test_envcheck.py keeps this list and the sources in step). */
static const char *const known[] = {
    "QUEEN_PORT",
    "QUEEN_BIND_ADDR",
    "QUEEN_RAFT_DIR",
    "QUEEN_RAFT_NODE_ID",
    "QUEEN_RAFT_LISTEN",
    "QUEEN_MAX_BODY_BYTES",
    "QUEEN_MAX_LONG_POLLS",
    "QUEEN_MAX_LONG_POLLS_PER_CONN",
    "QUEEN_LOG_LEVEL",
    "QUEEN_TENANCY_HEADER",
    "QUEEN_KV_UNSAFE_SINK_WRITES",
    "QUEEN_TEST_MODE",
    "QUEEN_S3_EMBEDDED",
    "QUEEN_S3_QUEUES",
    "QUEEN_S3_PARTITIONS",
    "QUEEN_S3_ENDPOINT",
    "QUEEN_S3_REGION",
    "QUEEN_S3_BUCKET",
    "QUEEN_S3_PREFIX",
    "QUEEN_S3_ACCESS_KEY",
    "QUEEN_S3_SECRET_KEY",
    "QUEEN_S3_PATH_STYLE",
    "QUEEN_S3_SSE",
    "QUEEN_S3_SSE_KMS_KEY_ID",
    "QUEEN_S3_FORMAT",
    "QUEEN_S3_COMPRESSION",
    "QUEEN_S3_PARQUET_CODEC",
    "QUEEN_S3_LAYOUT",
    "QUEEN_S3_ALIGN",
    "QUEEN_S3_START",
    "QUEEN_S3_TARGET_MB",
    "QUEEN_S3_MAX_WINDOW_MS",
    "QUEEN_S3_SINK",
    "QUEEN_S3_CHECKPOINT_EVERY",
    "QUEEN_S3_MEMORY_MB",
    "QUEEN_S3_FETCH_CONCURRENCY",
    "QUEEN_S3_DISCOVERY_INTERVAL_MS",
    "QUEEN_S3_SAFE_GUARD_MS",
    "QUEEN_S3_LEASE_TTL_MS",
    "QUEEN_S3_MULTIPART_THRESHOLD_MB",
    "QUEEN_S3_INSTANCE",
    "QUEEN_S3_CRASH_AT",
    "QUEEN_S3_THREADS",
    "QUEEN_S3_SHUTDOWN_GRACE_MS",
    "QUEEN_S3_LISTEN",     /* read to warn that it is ignored */
    "QUEEN_S3_LOG_FORMAT", /* likewise */
};

/* Settings of the product this build does not implement. */
struct unsupported {
    const char *name;
    bool refuse;
    const char *why;
};

static const struct unsupported unsupported[] = {
    {"QUEEN_RAFT_PEERS", true,
     "this build runs a single node and cannot join a cluster; nodes started "
     "with one peers list would each become a cluster of their own and "
     "write the same queues twice. Unset it to run one node"},
    {"QUEEN_ENCRYPTION_KEY", true,
     "payload encryption at rest is not built; queues would be stored in "
     "clear. Unset it to store payloads unencrypted"},
    {"QUEEN_RAFT_TOKEN", false, "raft peers are not built"},
    {"QUEEN_RAFT_CLIENT_OFFLOAD", false, "not built"},
    {"QUEEN_RAFT_ENTRY_MAX_BYTES", false, "not built"},
    {"QUEEN_RAFT_REPLICATOR", false, "not built"},
    {"QUEEN_PROXY_EMBEDDED", false, "the control plane is not built"},
    {"QUEEN_PROXY_PORT", false, "the control plane is not built"},
    {"QUEEN_PROXY_CP_TOKEN", false, "the control plane is not built"},
    {"QUEEN_PROXY_SPOOL_DIR", false, "the control plane is not built"},
    {"QUEEN_PROXY_TENANT_HEADER", false, "the control plane is not built"},
    {"QUEEN_KV_MAX_KEYS_PER_CALL", false, "the limit is fixed"},
    {"QUEEN_KV_MAX_OPS_PER_CALL", false, "the limit is fixed"},
    {"QUEEN_KV_MAX_VALUE_BYTES", false, "the limit is fixed"},
    {"QUEEN_KV_TRUSTED_PROXY", false, "not built"},
};

static bool name_is(const char *a, const char *name, size_t len)
{
    return strlen(a) == len && memcmp(a, name, len) == 0;
}

bool envcheck_is_known(const char *name, size_t len)
{
    for (size_t i = 0; i < ARRAY_LEN(known); i++) {
        if (name_is(known[i], name, len)) {
            return true;
        }
    }
    return false;
}

/* Edit distance of a[0..n) and b, capped: ENVCHECK_TYPO + 1 means "more". */
static size_t distance(const char *a, size_t n, const char *b)
{
    size_t m = strlen(b);
    size_t row[ENVCHECK_NAME_MAX + 1];

    if (n > ENVCHECK_NAME_MAX || m > ENVCHECK_NAME_MAX ||
        (n > m ? n - m : m - n) > ENVCHECK_TYPO) {
        return ENVCHECK_TYPO + 1;
    }
    for (size_t j = 0; j <= m; j++) {
        row[j] = j;
    }
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] == b[j - 1] ? 0 : 1);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

static const char *closest(const char *name, size_t len)
{
    const char *best = NULL;
    size_t best_d = ENVCHECK_TYPO + 1;

    for (size_t i = 0; i < ARRAY_LEN(known); i++) {
        size_t d = distance(name, len, known[i]);
        if (d < best_d) {
            best_d = d;
            best = known[i];
        }
    }
    return best;
}

int envcheck_run(const char *const *envp, envcheck_warn_fn warn, void *ctx,
                 struct err *err)
{
    char msg[512];

    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++) {
        const char *v = envp[i];
        const char *eq = strchr(v, '=');
        size_t len = eq == NULL ? strlen(v) : (size_t)(eq - v);
        const struct unsupported *u = NULL;
        const char *near;

        if (len < 6 || memcmp(v, "QUEEN_", 6) != 0 ||
            envcheck_is_known(v, len)) {
            continue;
        }
        for (size_t j = 0; j < ARRAY_LEN(unsupported); j++) {
            if (name_is(unsupported[j].name, v, len)) {
                u = &unsupported[j];
            }
        }
        if (u != NULL && u->refuse) {
            return err_set(err, ERR_INVALID, "%s is set, but %s", u->name,
                           u->why);
        }
        if (u != NULL) {
            snprintf(msg, sizeof(msg),
                     "%s is not supported by this build and is ignored (%s)",
                     u->name, u->why);
        } else if ((near = closest(v, len)) != NULL) {
            snprintf(msg, sizeof(msg),
                     "%.*s is not a setting of queen and is ignored; did you "
                     "mean %s?",
                     (int)(len > 120 ? 120 : len), v, near);
        } else {
            snprintf(msg, sizeof(msg),
                     "%.*s is not a setting of queen and is ignored "
                     "(build/queen --help-config lists the broker's)",
                     (int)(len > 120 ? 120 : len), v);
        }
        warn(ctx, msg);
    }
    return 0;
}
