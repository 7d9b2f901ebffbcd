/* Fuzz target: the sink's configuration (sink/config.h). The input is lines;
 * each line's first byte picks a variable from the table below and the rest
 * of the line is its value; an input starting with '{' is a tenant
 * document instead. Any values must load or be refused without a
 * crash; a refusal fills n->fatal with the prefixed message and err->msg
 * with its start; a load's boot line never shows the secret key. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = {
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
    "QUEEN_S3_THREADS",
    "QUEEN_S3_SHUTDOWN_GRACE_MS",
    "QUEEN_S3_CHECKPOINT_EVERY",
    "QUEEN_S3_MEMORY_MB",
    "QUEEN_S3_FETCH_CONCURRENCY",
    "QUEEN_S3_DISCOVERY_INTERVAL_MS",
    "QUEEN_S3_SAFE_GUARD_MS",
    "QUEEN_S3_LEASE_TTL_MS",
    "QUEEN_S3_MULTIPART_THRESHOLD_MB",
    "QUEEN_S3_INSTANCE",
    "QUEEN_S3_CRASH_AT",
    "QUEEN_RAFT_NODE_ID",
    "HOSTNAME",
    "QUEEN_S3_LISTEN",
};

#define N_NAMES (sizeof(names) / sizeof(names[0]))

struct vars {
    char *value[N_NAMES];
};

static const char *fuzz_get(void *ctx, const char *name)
{
    struct vars *v = ctx;

    for (size_t i = 0; i < N_NAMES; i++) {
        if (strcmp(names[i], name) == 0) {
            return v->value[i];
        }
    }
    return NULL;
}

static void split(struct vars *v, const uint8_t *data, size_t size)
{
    size_t i = 0;

    while (i < size) {
        size_t j = i;
        while (j < size && data[j] != '\n') {
            j++;
        }
        if (j > i) {
            size_t k = data[i] % N_NAMES;
            free(v->value[k]);
            v->value[k] = malloc(j - i);
            memcpy(v->value[k], data + i + 1, j - i - 1);
            v->value[k][j - i - 1] = '\0';
        }
        i = j + 1;
    }
}

/* The boot line must not depend on the secret: render it twice, the second
 * time with the secret replaced, and compare. */
static void check(const struct sink_config *c, const struct sink_node_config *n)
{
    struct sink_config other = *c;
    struct buf a, b;
    struct err err;

    snprintf(other.secret_key, sizeof(other.secret_key), "%s",
             c->secret_key[0] == 'x' ? "y" : "x");
    buf_init(&a, BUF_UNLIMITED);
    buf_init(&b, BUF_UNLIMITED);
    if (sink_config_boot_line(c, n, "default", &a, &err) != 0 ||
        sink_config_boot_line(&other, n, "default", &b, &err) != 0 ||
        a.len != b.len || memcmp(a.data, b.data, a.len) != 0) {
        abort();
    }
    if (c->is_set &&
        (c->target_mb < 1 || c->target_mb > 5120 || c->max_window_ms < 100 ||
         c->prefix[0] == '\0' || (!c->all_queues && c->n_queues == 0))) {
        abort();
    }
    if (n->threads < 1 || n->threads > 64) {
        abort();
    }
    buf_free(&a);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vars v = {{NULL}};
    struct sink_env env = {
        .get = fuzz_get, .ctx = &v, .cores = 4, .system_hostname = "fuzz"};
    struct sink_config c;
    struct sink_node_config n;
    struct err err;

    if (size > 0 && data[0] == '{') {
        struct buf msg;

        buf_init(&msg, BUF_UNLIMITED);
        if (sink_config_from_doc(&c, "t",
                                 (struct slice){(const char *)data, size},
                                 "sekrit", &msg, &err) == 0) {
            sink_config_free(&c);
        } else if (err.code != ERR_INVALID || msg.data == NULL ||
                   strncmp(msg.data, err.msg, strlen(err.msg)) != 0) {
            abort();
        }
        buf_free(&msg);
        return 0;
    }
    split(&v, data, size);
    if (sink_config_load(&c, &n, &env, &err) == 0) {
        check(&c, &n);
        sink_config_free(&c);
    } else {
        const char *pfx = "QUEEN_S3_EMBEDDED=true: ";
        if (err.code != ERR_INVALID ||
            strncmp(n.fatal, pfx, strlen(pfx)) != 0 ||
            strncmp(n.fatal + strlen(pfx), err.msg, strlen(err.msg)) != 0) {
            abort();
        }
    }
    for (size_t i = 0; i < N_NAMES; i++) {
        free(v.value[i]);
    }
    return 0;
}
