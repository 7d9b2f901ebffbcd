/* See envcheck.h. */
#include "broker/envcheck.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/common.h"
#include "sink/config.h"

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
    "QUEEN_RAFT_PEERS",
    "QUEEN_RAFT_LOG_MEMORY_MB",
    "QUEEN_RAFT_SNAPSHOT_THRESHOLD",
    "QUEEN_RAFT_SNAPSHOT_TRAILING",
    "QUEEN_RAFT_TOKEN",
    "QUEEN_RAFT_SEGMENT_MB",
    "QUEEN_RAFT_ELECTION_TIMEOUT_MS",
    "QUEEN_MAX_BODY_BYTES",
    "QUEEN_MAX_HELD_BODY_BYTES",
    "QUEEN_MAX_CONNECTIONS",
    "QUEEN_MAX_LONG_POLLS",
    "QUEEN_MAX_LONG_POLLS_PER_CONN",
    "QUEEN_LOG_LEVEL",
    "QUEEN_LOG_FORMAT",
    "QUEEN_TENANCY_HEADER",
    "QUEEN_KV_UNSAFE_SINK_WRITES",
    "QUEEN_PROXY_EMBEDDED",
    "QUEEN_PROXY_PORT",
    "QUEEN_PROXY_CP_TOKEN",
    "QUEEN_PROXY_TENANT_HEADER",
    "QUEEN_PROXY_SPOOL_DIR",
    "QUEEN_KV_TRUSTED_PROXY",
    "QUEEN_CP_CRASH_AFTER_MARK",
    "QUEEN_TEST_HOLD_LOOP_MS",
    "QUEEN_TLS_CERT",
    "QUEEN_TLS_KEY",
    "QUEEN_AUTH_TOKENS",
    "QUEEN_ENCRYPTION_KEY",
    "QUEEN_TEST_MODE",
    "QUEEN_STRICT_CONFIG",
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
    "QUEEN_S3_CA_FILE",
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
    {"QUEEN_RAFT_CLIENT_OFFLOAD", false, "not built"},
    {"QUEEN_RAFT_ENTRY_MAX_BYTES", false, "not built"},
    {"QUEEN_RAFT_REPLICATOR", false, "not built"},
    {"QUEEN_KV_MAX_KEYS_PER_CALL", false, "the limit is fixed"},
    {"QUEEN_KV_MAX_OPS_PER_CALL", false, "the limit is fixed"},
    {"QUEEN_KV_MAX_VALUE_BYTES", false, "the limit is fixed"},
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

/* The known name that name[0..len) spells in another case, or NULL. */
static const char *known_in_other_case(const char *name, size_t len)
{
    for (size_t i = 0; i < ARRAY_LEN(known); i++) {
        if (strlen(known[i]) == len && strncasecmp(known[i], name, len) == 0) {
            return known[i];
        }
    }
    return NULL;
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

/* The length of name[0..len) without its last word ("_MB"), or 0 when
 * that would leave "QUEEN_" and one word or less. */
static size_t stem_len(const char *name, size_t len)
{
    size_t words = 0;
    size_t last = 0;

    for (size_t i = 6; i < len; i++) {
        if (name[i] == '_') {
            words++;
            last = i;
        }
    }
    return words >= 1 && last > 6 ? last : 0;
}

/* The one setting that name differs from in its last word alone: a unit
 * left off (QUEEN_RAFT_LOG_MEMORY for QUEEN_RAFT_LOG_MEMORY_MB), one word
 * too many (QUEEN_PORT_NUMBER), or another unit (QUEEN_S3_SAFE_GUARD_SECONDS
 * for QUEEN_S3_SAFE_GUARD_MS); NULL when none, or more than one, does. */
static const char *same_stem(const char *name, size_t len)
{
    const char *found = NULL;
    size_t s = stem_len(name, len);

    for (size_t i = 0; i < ARRAY_LEN(known); i++) {
        const char *k = known[i];
        size_t klen = strlen(k);
        size_t ks = stem_len(k, klen);
        bool is_shorter = ks == len && memcmp(k, name, len) == 0;
        bool is_longer = s != 0 && s == klen && memcmp(k, name, s) == 0;
        bool is_other = s != 0 && ks == s && memcmp(k, name, s) == 0 &&
                        stem_len(name, s) != 0;

        if (is_shorter || is_longer || is_other) {
            if (found != NULL) {
                return NULL;
            }
            found = k;
        }
    }
    return found;
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
    return best != NULL ? best : same_stem(name, len);
}

/* Boolean name of envp into *on (false when unset or blank). A value that
 * is not a boolean is refused as the broker's own booleans are
 * (broker/config.c), not read as false: QUEEN_STRICT_CONFIG=maybe would
 * otherwise turn strict mode off without a word. */
static int env_bool(const char *const *envp, const char *name, bool *on,
                    struct err *err)
{
    size_t n = strlen(name);

    *on = false;
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++) {
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') {
            char t[64];

            if (sink_env_bool(envp[i] + n + 1, on, t, sizeof(t)) == 0) {
                return 0;
            }
            return err_set(err, ERR_INVALID,
                           "%s=%.60s: not a boolean (true or false; also 1/0, "
                           "yes/no, on/off)",
                           name, t);
        }
    }
    return 0;
}

/* One complaint: a warning, or with QUEEN_STRICT_CONFIG=true the refusal. */
static int complain(bool strict, const char *msg, envcheck_warn_fn warn,
                    void *ctx, struct err *err)
{
    if (strict) {
        return err_set(err, ERR_INVALID, "%s (QUEEN_STRICT_CONFIG=true)", msg);
    }
    warn(ctx, msg);
    return 0;
}

/* The sink's own settings while QUEEN_S3_EMBEDDED is not true: one line
 * naming them (as many as fit). */
static int sink_off_settings(const char *const *envp, bool strict,
                             envcheck_warn_fn warn, void *ctx, struct err *err)
{
    char msg[512];
    size_t at;
    size_t n = 0;

    at = (size_t)snprintf(msg, sizeof(msg),
                          "QUEEN_S3_EMBEDDED is not true: the S3 sink is off "
                          "and ignores");
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++) {
        const char *eq = strchr(envp[i], '=');
        size_t len = eq == NULL ? strlen(envp[i]) : (size_t)(eq - envp[i]);

        if (len <= 9 || memcmp(envp[i], "QUEEN_S3_", 9) != 0 ||
            name_is("QUEEN_S3_EMBEDDED", envp[i], len) ||
            !envcheck_is_known(envp[i], len)) {
            continue;
        }
        if (at + len + 8 < sizeof(msg)) {
            at += (size_t)snprintf(msg + at, sizeof(msg) - at, "%s %.*s",
                                   n == 0 ? "" : ",", (int)len, envp[i]);
        } else if (at + 6 < sizeof(msg)) {
            at += (size_t)snprintf(msg + at, sizeof(msg) - at, ", ...");
        }
        n++;
    }
    return n == 0 ? 0 : complain(strict, msg, warn, ctx, err);
}

int envcheck_run(const char *const *envp, envcheck_warn_fn warn, void *ctx,
                 struct err *err)
{
    bool strict = false;
    bool is_on = false;
    struct err ignored;
    char msg[512];

    if (env_bool(envp, "QUEEN_STRICT_CONFIG", &strict, err) != 0 ||
        env_bool(envp, "QUEEN_TEST_MODE", &is_on, err) != 0) {
        return err->code;
    }

    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++) {
        const char *v = envp[i];
        const char *eq = strchr(v, '=');
        size_t len = eq == NULL ? strlen(v) : (size_t)(eq - v);
        int shown = (int)(len > 120 ? 120 : len);
        const struct unsupported *u = NULL;
        const char *near;

        if (len < 6 || strncasecmp(v, "QUEEN_", 6) != 0 ||
            envcheck_is_known(v, len)) {
            continue;
        }
        if ((near = known_in_other_case(v, len)) != NULL) {
            /* queen_auth_tokens would leave authentication off unseen */
            snprintf(msg, sizeof(msg),
                     "%.*s: unknown; names are upper case: did you mean %s?",
                     shown, v, near);
            if (complain(strict, msg, warn, ctx, err) != 0) {
                return err->code;
            }
            continue;
        }
        if (memcmp(v, "QUEEN_", 6) != 0) {
            continue; /* another program's queen_* */
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
                     "%s: not supported by this build, ignored (%s)", u->name,
                     u->why);
        } else if ((near = closest(v, len)) != NULL) {
            snprintf(msg, sizeof(msg), "%.*s: unknown; did you mean %s?", shown,
                     v, near);
        } else {
            snprintf(msg, sizeof(msg),
                     "%.*s: unknown (queen --help-config lists every "
                     "setting)",
                     shown, v);
        }
        if (complain(strict, msg, warn, ctx, err) != 0) {
            return err->code;
        }
    }
    /* Not a boolean: the sink's own check refuses it, with its sentence. */
    if (env_bool(envp, "QUEEN_S3_EMBEDDED", &is_on, &ignored) != 0 || !is_on) {
        return sink_off_settings(envp, strict, warn, ctx, err);
    }
    return 0;
}
