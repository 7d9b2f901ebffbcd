/* Boot settings: one table of environment variables drives parsing, defaults,
 * range checks and --help-config.
 *
 * Each row names a variable, its type, its default as text (parsed by the
 * same code as a user's value, so a default can never be out of range), the
 * field it fills, and a range. Cross-field rules (the raft address defaults
 * to 127.0.0.1 on QUEEN_PORT+1000) live in config_validate(). Every refusal is
 * one sentence naming the variable and its value; main turns it into the
 * FATAL line. */
#include "broker/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/auth.h"
#include "base/aead.h"
#include "base/env.h"
#include "base/log.h"
#include "http/tls.h"
#include "sink/config.h"

enum cfg_type {
    CFG_PORT,     /* int 1..65535 */
    CFG_U64,      /* decimal integer in [min, max] */
    CFG_SIZE,     /* byte size with optional suffix, in [min, max] */
    CFG_PATH,     /* non-empty string */
    CFG_FILE,     /* a path, or empty for none */
    CFG_IP,       /* IPv4 or IPv6 literal */
    CFG_HOSTPORT, /* "ip:port" or "[ip6]:port"; empty = derived */
    CFG_LOGLEVEL, /* error | warn | info | debug */
    CFG_LOGFMT,   /* text | logfmt | json */
    CFG_BOOL,     /* true|1|yes|on or false|0|no|off, any case */
    CFG_PEERS,    /* QUEEN_RAFT_PEERS (config_parse_peers); empty = none */
    CFG_SECRET,   /* a string up to max bytes; empty = none; never echoed */
    CFG_KEY,      /* QUEEN_ENCRYPTION_KEY: 64 hex, else unset with a warning;
                     never refused, never echoed */
};

struct cfg_row {
    const char *name;
    const char *def;
    const char *help;
    size_t off;
    uint64_t min;
    uint64_t max;
    enum cfg_type type;
    bool is_secret;
};

/* One row: name, type, default, field, min, max, secret, help. */
#define ROW(n, t, d, o, lo, hi, sec, h)                                \
    {                                                                  \
        .name = (n), .def = (d), .help = (h), .off = (o), .min = (lo), \
        .max = (hi), .type = (t), .is_secret = (sec)                   \
    }

#define OFF(f) offsetof(struct config, f)
#define KIB    ((uint64_t)1024)
#define MIB    (1024 * KIB)
#define GIB    (1024 * MIB)

static const struct cfg_row cfg_rows[] = {
    ROW("QUEEN_PORT", CFG_PORT, "6632", OFF(port), 1, 65535, false,
        "HTTP listen port"),
    ROW("QUEEN_BIND_ADDR", CFG_IP, "0.0.0.0", OFF(bind_addr), 0, 0, false,
        "HTTP listen address (an IPv4 or IPv6 literal)"),
    ROW("QUEEN_RAFT_DIR", CFG_PATH, "./queen-data", OFF(raft_dir), 1,
        CONFIG_PATH_MAX - 1, false,
        "data directory: raft log and LMDB store (created if missing)"),
    ROW("QUEEN_RAFT_NODE_ID", CFG_U64, "1", OFF(node_id), 1, UINT64_MAX, false,
        "this node's raft id"),
    ROW("QUEEN_RAFT_LISTEN", CFG_HOSTPORT, "", OFF(raft_listen), 0, 0, false,
        "raft address ip:port (default 127.0.0.1 on QUEEN_PORT+1000)"),
    ROW("QUEEN_RAFT_PEERS", CFG_PEERS, "", OFF(n_peers), 0, 0, false,
        "every voter of the cluster, this node included, the same list on "
        "each node: {id}={raft ip:port}/{http ip:port},... (unset: a single "
        "node)"),
    ROW("QUEEN_RAFT_TOKEN", CFG_SECRET, "", OFF(raft_token), 0,
        CONFIG_TOKEN_MAX, true,
        "shared secret the raft peers prove to each other (16 to 256 bytes; "
        "required with more than one peer)"),
    ROW("QUEEN_RAFT_LOG_MEMORY_MB", CFG_U64, "448", OFF(raft_log_memory_mb), 16,
        65536, false,
        "raft log kept in memory between snapshots, in MiB (16..65536), on "
        "every node (an eighth more stays behind a snapshot for slow "
        "followers); the heap holds about 1.2 x this under a steady push "
        "load"),
    ROW("QUEEN_RAFT_SNAPSHOT_THRESHOLD", CFG_U64, "0",
        OFF(raft_snapshot_threshold), 0, 1048576, false,
        "raft entries between snapshots (0: follow the mean entry size, "
        "QUEEN_RAFT_LOG_MEMORY_MB of log, 64 to 32768 entries)"),
    ROW("QUEEN_RAFT_SNAPSHOT_TRAILING", CFG_U64, "0",
        OFF(raft_snapshot_trailing), 0, 1048576, false,
        "raft entries kept behind a snapshot for slow followers (0: follow "
        "the mean entry size, an eighth of QUEEN_RAFT_LOG_MEMORY_MB)"),
    ROW("QUEEN_RAFT_SEGMENT_MB", CFG_U64, "64", OFF(raft_segment_mb), 1, 1024,
        false,
        "raft log segment size in MiB; three are preallocated, so the data "
        "directory needs 3 x this plus 16 MiB free to boot"),
    ROW("QUEEN_RAFT_ELECTION_TIMEOUT_MS", CFG_U64, "1000",
        OFF(raft_election_timeout_ms), 500, 10000, false,
        "how long a follower hears nothing from the leader before it stands "
        "for election, in ms (500..10000; each wait is drawn between this "
        "and twice this; heartbeats go every 100 ms); a leader that hears "
        "from no majority for as long steps down. Normally the same on "
        "every node; raise it where a loaded machine holds a node's loop "
        "this long, and keep QUEEN_S3_LEASE_TTL_MS above the failover "
        "(operations.md)"),
    ROW("QUEEN_MAX_BODY_BYTES", CFG_SIZE, "64MiB", OFF(max_body_bytes), KIB,
        GIB, false, "largest HTTP request body accepted (413 above it)"),
    ROW("QUEEN_MAX_HELD_BODY_BYTES", CFG_SIZE, "64MiB",
        OFF(max_held_body_bytes), MIB, 64 * GIB, false,
        "request bodies each HTTP port holds at once, from a request's head "
        "to its answer; past it a new body waits, unread, for room (one "
        "body alone always fits)"),
    ROW("QUEEN_MAX_CONNECTIONS", CFG_U64, "4096", OFF(max_connections), 16,
        1000000, false,
        "HTTP connections open at once on each port; at the limit a new one "
        "closes the connection idle the longest, or is closed itself when "
        "every one has a request in flight"),
    ROW("QUEEN_MAX_LONG_POLLS", CFG_U64, "10000", OFF(max_long_polls), 1,
        1000000, false,
        "long-poll fetches parked on this node at once (503 past it)"),
    ROW("QUEEN_MAX_LONG_POLLS_PER_CONN", CFG_U64, "16",
        OFF(max_long_polls_per_conn), 1, 256, false,
        "long-poll fetches parked on one connection at once (429 past it)"),
    ROW("QUEEN_LOG_LEVEL", CFG_LOGLEVEL, "info", OFF(log_level), 0, 0, false,
        "error, warn, info or debug"),
    ROW("QUEEN_LOG_FORMAT", CFG_LOGFMT, "text", OFF(log_format), 0, 0, false,
        "text (<ts> <LEVEL> <area>: <message> key=value ...), logfmt "
        "(key=value, quoted where needed) or json (one object a line)"),
    ROW("QUEEN_TENANCY_HEADER", CFG_BOOL, "false", OFF(tenancy_header), 0, 0,
        false,
        "take each call's tenant from the x-queen-tenant header (only behind "
        "a trusted proxy)"),
    ROW("QUEEN_KV_UNSAFE_SINK_WRITES", CFG_BOOL, "false",
        OFF(kv_unsafe_sink_writes), 0, 0, false,
        "let HTTP clients write the S3 sink's KV namespace queen-s3 (its "
        "leases and commit pointers): tests and repairs only"),
    ROW("QUEEN_PROXY_EMBEDDED", CFG_BOOL, "false", OFF(proxy_embedded), 0, 0,
        false,
        "serve the control plane (/api/cp/...) on QUEEN_PROXY_PORT; the "
        "proxy's client data plane is not built"),
    ROW("QUEEN_PROXY_PORT", CFG_PORT, "6711", OFF(proxy_port), 1, 65535, false,
        "control-plane listen port (on QUEEN_BIND_ADDR)"),
    ROW("QUEEN_PROXY_CP_TOKEN", CFG_SECRET, "", OFF(cp_token), 0,
        CONFIG_TOKEN_MAX, true,
        "the control plane's token, sent as x-queen-cp-token, 16 to 256 "
        "bytes (unset: every control-plane route answers 404)"),
    ROW("QUEEN_PROXY_TENANT_HEADER", CFG_BOOL, "true", OFF(proxy_tenant_header),
        0, 0, false,
        "clusters reach the broker under their own tenant (false: the "
        "per-cluster S3 routes answer 409 system_tenant)"),
    ROW("QUEEN_PROXY_SPOOL_DIR", CFG_FILE, "", OFF(proxy_spool_dir), 0,
        CONFIG_PATH_MAX - 1, false,
        "the proxy's spool directory: accepted and unused (the proxy's "
        "client data plane is not built; a warning says so)"),
    ROW("QUEEN_KV_TRUSTED_PROXY", CFG_BOOL, "false", OFF(kv_trusted_proxy), 0,
        0, false,
        "accepted for compatibility; no effect (a KV call's tenant follows "
        "QUEEN_TENANCY_HEADER like every route)"),
    ROW("QUEEN_CP_CRASH_AFTER_MARK", CFG_BOOL, "false",
        OFF(cp_crash_after_mark), 0, 0, false,
        "crash tests only (needs QUEEN_TEST_MODE=true): abort once a "
        "control-plane DELETE marked its rows deleting, before it removes "
        "them"),
    ROW("QUEEN_TEST_HOLD_LOOP_MS", CFG_U64, "0", OFF(test_hold_loop_ms), 0,
        60000, false,
        "hold tests only (needs QUEEN_TEST_MODE=true): on SIGUSR2 the node's "
        "event loop is held this many ms, twice in a row (0: SIGUSR2 is not "
        "caught)"),
    ROW("QUEEN_TLS_CERT", CFG_FILE, "", OFF(tls_cert), 0, CONFIG_PATH_MAX - 1,
        false,
        "PEM certificate chain: serve HTTPS (with QUEEN_TLS_KEY; unset: "
        "plain HTTP)"),
    ROW("QUEEN_TLS_KEY", CFG_FILE, "", OFF(tls_key), 0, CONFIG_PATH_MAX - 1,
        false, "PEM private key of QUEEN_TLS_CERT, unencrypted"),
    ROW("QUEEN_ENCRYPTION_KEY", CFG_KEY, "", OFF(enc_key_set), 0, 0, true,
        "64 hex characters (32 bytes): seals the payloads of queues with "
        "encryptionEnabled and control-plane S3 secrets with AES-256-GCM; the "
        "same on every node (unset or malformed: a warning, and those queues "
        "store plaintext)"),
    ROW("QUEEN_AUTH_TOKENS", CFG_FILE, "", OFF(auth_tokens), 0,
        CONFIG_PATH_MAX - 1, false,
        "file of bearer tokens, one a line, each optionally followed by the "
        "tenant UUID it acts for; every route but /health then needs one "
        "(unset: no authentication)"),
};

static uint64_t size_unit(const char *u)
{
    static const struct {
        const char *name;
        uint64_t mul;
    } units[] = {{"", 1},      {"b", 1},    {"k", KIB},  {"kb", KIB},
                 {"kib", KIB}, {"m", MIB},  {"mb", MIB}, {"mib", MIB},
                 {"g", GIB},   {"gb", GIB}, {"gib", GIB}};

    for (size_t i = 0; i < ARRAY_LEN(units); i++) {
        if (strcasecmp(u, units[i].name) == 0) {
            return units[i].mul;
        }
    }
    return 0;
}

bool config_parse_size(const char *s, uint64_t *out)
{
    char digits[32];
    size_t n = 0;
    uint64_t v;
    uint64_t mul;

    if (s == NULL) {
        return false;
    }
    while (s[n] >= '0' && s[n] <= '9') {
        n++;
    }
    if (n == 0 || n >= sizeof(digits)) {
        return false;
    }
    memcpy(digits, s, n);
    digits[n] = '\0';
    mul = size_unit(s + n);
    if (mul == 0 || !env_parse_u64(digits, &v) || v > UINT64_MAX / mul) {
        return false;
    }
    *out = v * mul;
    return true;
}

static int set_str(const struct cfg_row *r, char *dst, size_t cap,
                   const char *v, struct err *err)
{
    size_t n = strlen(v);
    size_t max = cap - 1;

    if (r->max != 0 && r->max < max) {
        max = (size_t)r->max;
    }
    if (n == 0 || n > max) {
        return err_set(err, ERR_INVALID, "must be 1 to %zu bytes long", max);
    }
    memcpy(dst, v, n + 1);
    return 0;
}

static int set_number(const struct cfg_row *r, void *field, const char *v,
                      struct err *err)
{
    uint64_t n;
    bool ok =
        r->type == CFG_SIZE ? config_parse_size(v, &n) : env_parse_u64(v, &n);

    if (!ok) {
        return err_set(err, ERR_INVALID,
                       r->type == CFG_SIZE
                           ? "not a byte size (digits, then optionally K, "
                             "M or G, each times 1024, as KB or KiB too)"
                           : "not a decimal integer");
    }
    if (n < r->min || n > r->max) {
        return err_set(err, ERR_INVALID, "out of range %" PRIu64 "..%" PRIu64,
                       r->min, r->max);
    }
    if (r->type == CFG_PORT) {
        *(int *)field = (int)n;
    } else {
        *(uint64_t *)field = n;
    }
    return 0;
}

/* One "{id}={raft}/{http}" entry of len bytes at e into *p. */
static int parse_peer(const char *e, size_t len, struct config_peer *p,
                      struct err *err)
{
    char tmp[2 * CONFIG_ADDR_MAX + 32];
    char host[CONFIG_ADDR_MAX];
    char *eq;
    char *slash;
    int port;

    if (len >= sizeof(tmp)) {
        return err_set(err, ERR_INVALID, "entry '%.40s...' is too long", e);
    }
    memcpy(tmp, e, len);
    tmp[len] = '\0';
    eq = strchr(tmp, '=');
    slash = eq != NULL ? strchr(eq, '/') : NULL;
    if (eq == NULL || slash == NULL) {
        return err_set(err, ERR_INVALID,
                       "entry '%s' is not {id}={raft ip:port}/{http ip:port}",
                       tmp);
    }
    *eq = '\0';
    *slash = '\0';
    if (!env_parse_u64(tmp, &p->id) || p->id == 0) {
        return err_set(err, ERR_INVALID,
                       "entry '%s=%s/%s': the id must be an integer >= 1", tmp,
                       eq + 1, slash + 1);
    }
    if (!env_parse_hostport(eq + 1, host, sizeof(host), &port)) {
        return err_set(err, ERR_INVALID,
                       "entry for id %" PRIu64
                       ": raft address '%s' is not ip:port",
                       p->id, eq + 1);
    }
    if (!env_parse_hostport(slash + 1, host, sizeof(host), &port)) {
        return err_set(err, ERR_INVALID,
                       "entry for id %" PRIu64
                       ": http address '%s' is not ip:port",
                       p->id, slash + 1);
    }
    snprintf(p->raft, sizeof(p->raft), "%s", eq + 1);
    snprintf(p->http, sizeof(p->http), "%s", slash + 1);
    return 0;
}

/* 0, or ERR_INVALID when entry n clashes with itself or an earlier one. */
static int peer_clash(const struct config_peer *out, int n, struct err *err)
{
    const struct config_peer *p = &out[n];

    if (strcmp(p->raft, p->http) == 0) {
        return err_set(err, ERR_INVALID,
                       "id %" PRIu64 " has the same raft and http address",
                       p->id);
    }
    for (int i = 0; i < n; i++) {
        const struct config_peer *q = &out[i];

        if (q->id == p->id) {
            return err_set(err, ERR_INVALID, "id %" PRIu64 " is listed twice",
                           p->id);
        }
        if (strcmp(q->raft, p->raft) == 0 || strcmp(q->http, p->http) == 0 ||
            strcmp(q->raft, p->http) == 0 || strcmp(q->http, p->raft) == 0) {
            return err_set(err, ERR_INVALID,
                           "ids %" PRIu64 " and %" PRIu64 " share an address",
                           q->id, p->id);
        }
    }
    return 0;
}

int config_parse_peers(const char *s, struct config_peer *out, struct err *err)
{
    int n = 0;
    const char *e = s;

    for (;;) {
        const char *end = strchr(e, ',');
        size_t len = end != NULL ? (size_t)(end - e) : strlen(e);

        while (len > 0 && (*e == ' ' || *e == '\t')) {
            e++;
            len--;
        }
        while (len > 0 && (e[len - 1] == ' ' || e[len - 1] == '\t')) {
            len--;
        }
        if (len == 0) {
            err_set(err, ERR_INVALID, "entry %d is empty", n + 1);
            return -1;
        }
        if (n == CONFIG_MAX_PEERS) {
            err_set(err, ERR_INVALID, "more than %d peers", CONFIG_MAX_PEERS);
            return -1;
        }
        if (parse_peer(e, len, &out[n], err) != 0 ||
            peer_clash(out, n, err) != 0) {
            return -1;
        }
        n++;
        if (end == NULL) {
            return n;
        }
        e = end + 1;
    }
}

/* QUEEN_ENCRYPTION_KEY (docs/design/formats.md §11): a bad key disables
 * encryption, never the boot (config_warn_key says so). */
static void set_key(struct config *c, const char *raw)
{
    char v[80]; /* longer than a key, so a longer value stays wrong */
    bool is_given = env_trim(raw, v, sizeof(v));

    /* docs/design/config.md §1: trimmed (a key file's trailing newline is
     * not a malformed key), and blank is unset. */
    c->enc_key_set = is_given && aead_key_parse(v, c->enc_key);
    c->enc_key_bad = is_given && !c->enc_key_set;
    explicit_bzero(v, sizeof(v));
    if (!c->enc_key_set) {
        memset(c->enc_key, 0, sizeof(c->enc_key));
    }
}

/* Parse v into the row's field; on failure err->msg says why (no name). */
static int cfg_apply(const struct cfg_row *r, struct config *c, const char *v,
                     struct err *err)
{
    char *field = (char *)c + r->off;
    char host[CONFIG_ADDR_MAX];
    int port;

    switch (r->type) {
    case CFG_PORT:
    case CFG_U64:
    case CFG_SIZE:
        return set_number(r, field, v, err);
    case CFG_PATH:
        return set_str(r, field, CONFIG_PATH_MAX, v, err);
    case CFG_FILE:
        if (*v == '\0') {
            *field = '\0';
            return 0;
        }
        return set_str(r, field, CONFIG_PATH_MAX, v, err);
    case CFG_IP:
        if (!env_is_ip_literal(v)) {
            return err_set(err, ERR_INVALID,
                           "not an IPv4 or IPv6 address literal");
        }
        return set_str(r, field, CONFIG_ADDR_MAX, v, err);
    case CFG_HOSTPORT:
        if (*v == '\0') {
            *field = '\0';
            return 0;
        }
        if (!env_parse_hostport(v, host, sizeof(host), &port)) {
            return err_set(err, ERR_INVALID,
                           "not ip:port (an IP literal, [ipv6]:port, port "
                           "1..65535)");
        }
        return set_str(r, field, CONFIG_ADDR_MAX, v, err);
    case CFG_LOGLEVEL:
        port = log_parse_level(v);
        if (port < 0) {
            return err_set(err, ERR_INVALID,
                           "not one of error, warn, info, debug");
        }
        *(int *)field = port;
        return 0;
    case CFG_LOGFMT:
        port = log_parse_format(v);
        if (port < 0) {
            return err_set(err, ERR_INVALID, "not one of text, logfmt, json");
        }
        *(int *)field = port;
        return 0;
    case CFG_PEERS: {
        int n = *v == '\0' ? 0 : config_parse_peers(v, c->peers, err);

        if (n < 0) {
            return ERR_INVALID;
        }
        c->n_peers = (size_t)n;
        return 0;
    }
    case CFG_SECRET:
        if (strlen(v) > r->max) {
            return err_set(err, ERR_INVALID, "longer than %" PRIu64 " bytes",
                           r->max);
        }
        snprintf(field, (size_t)r->max + 1, "%s", v);
        return 0;
    case CFG_KEY:
        set_key(c, v);
        return 0;
    case CFG_BOOL:
        if (!sink_parse_bool(v, (bool *)field)) {
            return err_set(err, ERR_INVALID,
                           "not a boolean (true or false; also 1/0, yes/no, "
                           "on/off)");
        }
        return 0;
    }
    return err_set(err, ERR_INVALID, "unknown setting type");
}

static bool is_wildcard(const char *host)
{
    return strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0;
}

/* QUEEN_RAFT_PEERS against this node: its id is listed, QUEEN_RAFT_LISTEN
 * (when set) binds the listed raft port, QUEEN_PORT is the listed http
 * port, and a cluster has a token. Fills raft_advertise. */
static int config_validate_peers(struct config *c, const char *raw,
                                 struct err *err)
{
    const struct config_peer *self = NULL;
    char host[CONFIG_ADDR_MAX];
    char lhost[CONFIG_ADDR_MAX];
    int port;
    int lport;

    for (size_t i = 0; i < c->n_peers; i++) {
        if (c->peers[i].id == c->node_id) {
            self = &c->peers[i];
        }
    }
    if (self == NULL) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_RAFT_PEERS=%.200s: this node's id %" PRIu64
                       " (QUEEN_RAFT_NODE_ID) is not in the list",
                       raw, c->node_id);
    }
    ASSERT(env_parse_hostport(self->raft, host, sizeof(host), &port));
    if (c->raft_listen[0] != '\0') {
        ASSERT(
            env_parse_hostport(c->raft_listen, lhost, sizeof(lhost), &lport));
        if (lport != port ||
            (strcmp(lhost, host) != 0 && !is_wildcard(lhost))) {
            return err_set(err, ERR_INVALID,
                           "QUEEN_RAFT_LISTEN=%s: this node's raft address in "
                           "QUEEN_RAFT_PEERS is %s; listen on it, or on "
                           "0.0.0.0 or [::] with its port",
                           c->raft_listen, self->raft);
        }
    } else {
        snprintf(c->raft_listen, sizeof(c->raft_listen), "%s", self->raft);
    }
    snprintf(c->raft_advertise, sizeof(c->raft_advertise), "%s", self->raft);
    ASSERT(env_parse_hostport(self->http, host, sizeof(host), &port));
    if (port != c->port) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_PORT=%d: this node's http address in "
                       "QUEEN_RAFT_PEERS is %s, on another port",
                       c->port, self->http);
    }
    if (c->n_peers > 1 && strlen(c->raft_token) < CONFIG_TOKEN_MIN) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_RAFT_TOKEN=%s: a cluster of %zu peers needs a "
                       "shared token of at least %d bytes on every node",
                       c->raft_token[0] != '\0' ? "<redacted>" : "(unset)",
                       c->n_peers, CONFIG_TOKEN_MIN);
    }
    return 0;
}

/* Cross-field rules. */
static int config_validate(struct config *c, const char *peers_raw,
                           struct err *err)
{
    if (c->raft_snapshot_threshold != 0 && c->raft_snapshot_threshold < 64) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_RAFT_SNAPSHOT_THRESHOLD=%" PRIu64
                       ": 0 (automatic) or at least 64",
                       c->raft_snapshot_threshold);
    }
    if (c->raft_token[0] != '\0' && strlen(c->raft_token) < CONFIG_TOKEN_MIN) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_RAFT_TOKEN=<redacted>: shorter than %d bytes",
                       CONFIG_TOKEN_MIN);
    }
    if (c->cp_token[0] != '\0' && strlen(c->cp_token) < CONFIG_TOKEN_MIN) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_PROXY_CP_TOKEN=<redacted>: shorter than %d "
                       "bytes (it guards every tenant's buckets and keys)",
                       CONFIG_TOKEN_MIN);
    }
    for (const char *t = c->cp_token; *t != '\0'; t++) {
        unsigned char b = (unsigned char)*t;
        if (b < 0x21 || b > 0x7E) { /* what a header value carries whole */
            return err_set(err, ERR_INVALID,
                           "QUEEN_PROXY_CP_TOKEN=<redacted>: byte %zu is a "
                           "blank, a control character or not ASCII, which "
                           "no client sends whole in a header; the token is "
                           "visible ASCII",
                           (size_t)(t - c->cp_token) + 1);
        }
    }
    if (c->n_peers > 0 && config_validate_peers(c, peers_raw, err) != 0) {
        return err->code;
    }
    if ((c->tls_cert[0] == '\0') != (c->tls_key[0] == '\0')) {
        return err_set(
            err, ERR_INVALID,
            "%s=%.120s: QUEEN_TLS_CERT and QUEEN_TLS_KEY go "
            "together; set %s too, or neither",
            c->tls_cert[0] != '\0' ? "QUEEN_TLS_CERT" : "QUEEN_TLS_KEY",
            c->tls_cert[0] != '\0' ? c->tls_cert : c->tls_key,
            c->tls_cert[0] != '\0' ? "QUEEN_TLS_KEY" : "QUEEN_TLS_CERT");
    }
    if (c->proxy_embedded && c->proxy_port == c->port) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_PROXY_PORT=%d: it is QUEEN_PORT too; the "
                       "control plane needs a port of its own",
                       c->proxy_port);
    }
    if (c->raft_listen[0] == '\0') {
        if (c->port + 1000 > 65535) {
            return err_set(err, ERR_INVALID,
                           "QUEEN_PORT=%d: the default raft port %d is above "
                           "65535; set QUEEN_RAFT_LISTEN",
                           c->port, c->port + 1000);
        }
        snprintf(c->raft_listen, sizeof(c->raft_listen), "127.0.0.1:%d",
                 c->port + 1000);
    }
    if (c->raft_advertise[0] == '\0') {
        snprintf(c->raft_advertise, sizeof(c->raft_advertise), "%s",
                 c->raft_listen);
    }
    return 0;
}

int config_load(struct config *c, config_getenv_fn get, void *ctx,
                struct err *err)
{
    struct config tmp;

    memset(&tmp, 0, sizeof(tmp));
    for (size_t i = 0; i < ARRAY_LEN(cfg_rows); i++) {
        const struct cfg_row *r = &cfg_rows[i];
        const char *v = get(ctx, r->name);

        ASSERT(cfg_apply(r, &tmp, r->def, err) == 0);
        if (v == NULL) {
            continue;
        }
        if (cfg_apply(r, &tmp, v, err) != 0) {
            return err_wrap(err, "%s=%.120s", r->name,
                            r->is_secret ? "<redacted>" : v);
        }
    }
    /* Set but empty, the settings that turn authentication and TLS on
     * would quietly leave them off: an unset shell variable in a unit file
     * must not open the broker. Unset means off; set means a file. */
    static const char *const security_files[] = {
        "QUEEN_AUTH_TOKENS", "QUEEN_TLS_CERT", "QUEEN_TLS_KEY"};
    for (size_t i = 0; i < ARRAY_LEN(security_files); i++) {
        const char *v = get(ctx, security_files[i]);
        if (v != NULL && *v == '\0') {
            return err_set(err, ERR_INVALID,
                           "%s=: set but empty; name its file, or unset it "
                           "to run without %s",
                           security_files[i],
                           i == 0 ? "authentication" : "TLS");
        }
    }
    const char *peers_raw = get(ctx, "QUEEN_RAFT_PEERS");
    if (config_validate(&tmp, peers_raw != NULL ? peers_raw : "", err) != 0) {
        return err->code;
    }
    const char *test_mode = get(ctx, "QUEEN_TEST_MODE");
    bool is_test = false;
    if (tmp.cp_crash_after_mark &&
        (test_mode == NULL || !sink_parse_bool(test_mode, &is_test) ||
         !is_test)) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_CP_CRASH_AFTER_MARK=true aborts this node at "
                       "every control-plane DELETE; it is for the crash "
                       "tests only and needs QUEEN_TEST_MODE=true beside it");
    }
    if (tmp.test_hold_loop_ms > 0 &&
        (test_mode == NULL || !sink_parse_bool(test_mode, &is_test) ||
         !is_test)) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_TEST_HOLD_LOOP_MS holds this node's event loop "
                       "at every SIGUSR2; it is for the hold tests only and "
                       "needs QUEEN_TEST_MODE=true beside it");
    }
    *c = tmp;
    explicit_bzero(&tmp, sizeof(tmp)); /* the encryption key */
    return 0;
}

static const char *env_get(void *ctx, const char *name)
{
    UNUSED(ctx);
    return getenv(name);
}

/* With QUEEN_S3_EMBEDDED=true the sink's settings are checked at boot too.
 * Their messages can outgrow struct err, so the whole FATAL line is printed
 * here and the process exits 2 as main would. */
static int sink_preflight(struct err *err)
{
    struct sink_config sc;
    struct sink_node_config sn;
    bool on = false;
    char t[64];

    if (sink_env_bool(getenv("QUEEN_S3_EMBEDDED"), &on, t, sizeof(t)) != 0) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_S3_EMBEDDED=%s is not a boolean. It is `true` "
                       "or `false`",
                       t);
    }
    if (!on) {
        return 0;
    }
    if (sink_config_from_env(&sc, &sn, err) != 0) {
        log_error("boot", "FATAL: %s", sn.fatal);
        exit(2);
    }
    sink_config_free(&sc); /* the host reads it again and warns */
    return 0;
}

int config_open_tls(const struct config *c, struct tls_ctx **out,
                    struct err *err)
{
    enum tls_file bad;

    *out = NULL;
    if (c->tls_cert[0] == '\0') {
        return 0;
    }
    if (tls_ctx_new(out, c->tls_cert, c->tls_key, &bad, err) != 0) {
        return bad == TLS_FILE_CERT
                   ? err_wrap(err, "QUEEN_TLS_CERT=%.120s", c->tls_cert)
                   : err_wrap(err, "QUEEN_TLS_KEY=%.120s", c->tls_key);
    }
    return 0;
}

int config_open_auth(const struct config *c, struct auth *out, struct err *err)
{
    memset(out, 0, sizeof(*out));
    if (c->auth_tokens[0] == '\0') {
        return 0;
    }
    if (auth_load_file(out, c->auth_tokens, err) != 0) {
        return err_wrap(err, "QUEEN_AUTH_TOKENS=%.120s", c->auth_tokens);
    }
    return 0;
}

/* The files are read as the broker will read them, then let go: the
 * broker opens them again after the boot checks. */
static int files_preflight(const struct config *c, struct err *err)
{
    struct tls_ctx *tls;
    struct auth auth;

    if (config_open_tls(c, &tls, err) != 0) {
        return ERR_INVALID;
    }
    tls_ctx_free(tls);
    if (config_open_auth(c, &auth, err) != 0) {
        return ERR_INVALID;
    }
    auth_free(&auth);
    return 0;
}

int config_load_env(struct config *c, struct err *err)
{
    const char *f = getenv("QUEEN_LOG_FORMAT");

    /* A valid format applies before any other setting is read, so a refusal
     * of one of them is already in it; an invalid one is refused below. */
    if (f != NULL && log_parse_format(f) >= 0) {
        log_set_format(log_parse_format(f));
    }
    if (config_load(c, env_get, NULL, err) != 0 ||
        files_preflight(c, err) != 0) {
        return err->code;
    }
    log_set_format(c->log_format);
    return sink_preflight(err);
}

/* Variables the table above does not parse: read by envcheck.c. */
static const struct {
    const char *name;
    const char *def;
    const char *help;
} other_rows[] = {
    {"QUEEN_STRICT_CONFIG", "false",
     "refuse to boot on an unknown QUEEN_* variable, or on QUEEN_S3_* "
     "settings while the sink is off, instead of warning"},
};

static void help_row(FILE *f, const char *name, const char *def,
                     const char *help)
{
    fprintf(f, "%-31s default %-14s %s\n", name,
            def[0] != '\0' ? def : "(derived)", help);
}

void config_warn_key(const struct config *c)
{
    if (c->enc_key_bad) {
        log_warn("boot", "QUEEN_ENCRYPTION_KEY is not 64 hex characters: "
                         "payload encryption is disabled and queues with "
                         "encryptionEnabled store plaintext");
    }
}

void config_help(FILE *f)
{
    const struct sink_config_var *v;

    fprintf(f, "# the broker\n");
    for (size_t i = 0; i < ARRAY_LEN(cfg_rows); i++) {
        help_row(f, cfg_rows[i].name, cfg_rows[i].def, cfg_rows[i].help);
    }
    for (size_t i = 0; i < ARRAY_LEN(other_rows); i++) {
        help_row(f, other_rows[i].name, other_rows[i].def, other_rows[i].help);
    }
    fprintf(f, "\n# the embedded S3 sink (read when QUEEN_S3_EMBEDDED=true; "
               "docs/s3-sink.md)\n");
    for (size_t i = 0; (v = sink_config_var(i)) != NULL; i++) {
        help_row(f, v->name, v->def, v->help);
    }
}
