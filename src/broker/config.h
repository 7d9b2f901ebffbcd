/* Boot settings: one table of environment variables drives parsing, defaults,
 * range checks and --help-config. Pure: the environment is read through a
 * getenv-like callback, so tests pass a table instead of touching environ.
 *   (1) A loaded config is complete: every field holds either the variable's
 *       value or its default, and raft_listen is always "host:port".
 *   (2) A bad value changes nothing the caller can see except err: the error
 *       message starts with "<VAR>=<value>: " (the value is "<redacted>" for
 *       a secret), so main prints the one FATAL line and exits 2. */
#ifndef QUEEN_BROKER_CONFIG_H
#define QUEEN_BROKER_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

#define CONFIG_ADDR_MAX  256
#define CONFIG_PATH_MAX  4096
#define CONFIG_MAX_PEERS 9 /* raft/node.h NODE_MAX_PEERS */
#define CONFIG_TOKEN_MIN 16
#define CONFIG_TOKEN_MAX 256

/* One member of QUEEN_RAFT_PEERS: "{id}={raft ip:port}/{http ip:port}". */
struct config_peer {
    uint64_t id;
    char raft[CONFIG_ADDR_MAX]; /* as written, "ip:port" or "[ip6]:port" */
    char http[CONFIG_ADDR_MAX];
};

struct config {
    int port;                          /* QUEEN_PORT, HTTP listen port */
    char bind_addr[CONFIG_ADDR_MAX];   /* QUEEN_BIND_ADDR, an IP literal */
    char raft_dir[CONFIG_PATH_MAX];    /* QUEEN_RAFT_DIR */
    uint64_t node_id;                  /* QUEEN_RAFT_NODE_ID, >= 1 */
    char raft_listen[CONFIG_ADDR_MAX]; /* QUEEN_RAFT_LISTEN, "host:port" */
    /* This node's raft address as its peers dial it: its QUEEN_RAFT_PEERS
     * entry, else raft_listen. */
    char raft_advertise[CONFIG_ADDR_MAX];
    uint64_t raft_segment_mb;          /* QUEEN_RAFT_SEGMENT_MB */
    uint64_t raft_election_timeout_ms; /* QUEEN_RAFT_ELECTION_TIMEOUT_MS */
    uint64_t raft_log_memory_mb;       /* the log between snapshots */
    uint64_t raft_snapshot_threshold;  /* 0 = automatic */
    uint64_t raft_snapshot_trailing;   /* 0 = automatic */
    /* QUEEN_RAFT_PEERS: every voter of the cluster, this node included;
     * n_peers 0 = a single node (the list was unset). */
    size_t n_peers;
    struct config_peer peers[CONFIG_MAX_PEERS];
    char raft_token[CONFIG_TOKEN_MAX + 1]; /* QUEEN_RAFT_TOKEN, secret */
    uint64_t max_body_bytes;               /* QUEEN_MAX_BODY_BYTES */
    uint64_t max_held_body_bytes;          /* QUEEN_MAX_HELD_BODY_BYTES */
    uint64_t max_connections;              /* QUEEN_MAX_CONNECTIONS */
    uint64_t max_long_polls;               /* QUEEN_MAX_LONG_POLLS */
    uint64_t max_long_polls_per_conn;      /* QUEEN_MAX_LONG_POLLS_PER_CONN */
    int log_level;                         /* QUEEN_LOG_LEVEL, enum log_level */
    int log_format;             /* QUEEN_LOG_FORMAT, enum log_format */
    bool tenancy_header;        /* QUEEN_TENANCY_HEADER */
    bool kv_unsafe_sink_writes; /* QUEEN_KV_UNSAFE_SINK_WRITES */
    /* The embedded control plane (docs/design/control-plane.md). */
    bool proxy_embedded;                   /* QUEEN_PROXY_EMBEDDED */
    int proxy_port;                        /* QUEEN_PROXY_PORT */
    char cp_token[CONFIG_TOKEN_MAX + 1];   /* QUEEN_PROXY_CP_TOKEN, secret;
                                              "" = every cp route 404 */
    bool proxy_tenant_header;              /* QUEEN_PROXY_TENANT_HEADER */
    char proxy_spool_dir[CONFIG_PATH_MAX]; /* QUEEN_PROXY_SPOOL_DIR: read,
                                              not used (no proxy data plane) */
    bool kv_trusted_proxy; /* QUEEN_KV_TRUSTED_PROXY: read, no effect */
    /* QUEEN_CP_CRASH_AFTER_MARK (tests, with QUEEN_TEST_MODE=true only):
     * abort once a control-plane DELETE's "deleting" mark applied. */
    bool cp_crash_after_mark;
    /* QUEEN_TEST_HOLD_LOOP_MS (tests, with QUEEN_TEST_MODE=true only): on
     * SIGUSR2 the loop is held this many ms; 0 = SIGUSR2 not caught. */
    uint64_t test_hold_loop_ms;
    char tls_cert[CONFIG_PATH_MAX];    /* QUEEN_TLS_CERT, "" = plain HTTP */
    char tls_key[CONFIG_PATH_MAX];     /* QUEEN_TLS_KEY, set with tls_cert */
    char auth_tokens[CONFIG_PATH_MAX]; /* QUEEN_AUTH_TOKENS, "" = no auth */
    /* QUEEN_ENCRYPTION_KEY (docs/design/formats.md §11): enc_key holds the 32
     * bytes when enc_key_set; enc_key_bad when it is set but not 64 hex (boot
     * warns, config_warn_key; encryption is then off). Secret: never
     * logged, never in /status. Readers: the push path (api->seal_key),
     * the store's reads (store_set_seal_key) and whoever opens sealed
     * control-plane secrets. */
    bool enc_key_set;
    bool enc_key_bad;
    uint8_t enc_key[32]; /* AEAD_KEY_LEN */
};

struct tls_ctx;
struct auth;

/* Returns the variable's value or NULL when unset. Borrowed. */
typedef const char *(*config_getenv_fn)(void *ctx, const char *name);

/* Fill c from the variables get returns, defaults for the unset ones. Returns
 * 0, or ERR_INVALID with err->msg "<VAR>=<value>: <why>". */
int config_load(struct config *c, config_getenv_fn get, void *ctx,
                struct err *err);

/* config_load over the process environment, then the files the settings
 * name are read as the broker will read them (config_open_tls,
 * config_open_auth), so a bad file is a bad setting (2). */
int config_load_env(struct config *c, struct err *err);

/* The TLS context of QUEEN_TLS_CERT and QUEEN_TLS_KEY: *out is NULL when
 * they are unset. Returns 0, or the error of http/tls.h tls_ctx_new() with
 * err->msg "QUEEN_TLS_<CERT|KEY>=<path>: <why>". */
int config_open_tls(const struct config *c, struct tls_ctx **out,
                    struct err *err);

/* The token table of QUEEN_AUTH_TOKENS (api/auth.h); out->n is 0 when it is
 * unset. Returns 0, or the error of auth_load_file() with err->msg
 * "QUEEN_AUTH_TOKENS=<path>: <why>" (never a token). */
int config_open_auth(const struct config *c, struct auth *out, struct err *err);

/* The one boot warning of a QUEEN_ENCRYPTION_KEY that is set but is not 64
 * hex characters: names the variable, never its value. Nothing otherwise. */
void config_warn_key(const struct config *c);

/* Print one line per setting (name, default, help) to f: the broker's table,
 * the variables envcheck reads, then the sink's (sink_config_var()). */
void config_help(FILE *f);

/* Parse a byte size: digits with an optional binary suffix K, KiB, M, MiB,
 * G, GiB (case-insensitive; KB/MB/GB read as binary too). Returns false on
 * anything else or on overflow. */
bool config_parse_size(const char *s, uint64_t *out);

/* Parse a QUEEN_RAFT_PEERS value into out[] (at most CONFIG_MAX_PEERS):
 * comma-separated "{id}={raft ip:port}/{http ip:port}", spaces around
 * entries ignored. Returns the count, or -1 with err->msg saying what is
 * wrong (which entry, and why: malformed, id 0, duplicate id or address,
 * too many). Checks the list alone; config_load() then checks it against
 * this node's id, QUEEN_RAFT_LISTEN, QUEEN_PORT and QUEEN_RAFT_TOKEN. */
int config_parse_peers(const char *s, struct config_peer *out, struct err *err);

#endif
