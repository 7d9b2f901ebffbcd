/* Sink configuration: the environment sink's settings and the node-wide
 * knobs (docs/design/protocol.md §1 and docs/design/config.md §1-§6). Pure: the
 * environment is read through a getenv-like seam and the core count and system
 * hostname are arguments, so unit tests pass a table.
 *   (1) A loaded config is complete: every field holds the variable's value
 *       or its default; sizes are in bytes (MiB x 1,048,576) beside the MiB
 *       figure the boot line prints.
 *   (2) The first error wins, in the parse order of docs/design/config.md §3
 *       (after the preflight of docs/design/protocol.md §1 and the node knobs
 *       of docs/design/config.md §4); the message is the template of
 *       docs/design/config.md §5 word for word. A failed load leaves nothing to
 *       free.
 *   (3) The secret key is kept in secret_key and never printed: the boot
 *       line shows sse=aws:kms(...<last 4 chars of the key id>) at most.
 *
 * Error messages can be longer than struct err's 256 bytes (the
 * QUEEN_S3_PARTITIONS refusal is ~500), so the whole text is also kept in
 * sink_node_config.fatal as "QUEEN_S3_EMBEDDED=true: <message>": the boot
 * path prints that field. */
#ifndef QUEEN_SINK_CONFIG_H
#define QUEEN_SINK_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "parquet/parquet.h"
#include "sink/engine.h"
#include "sink/jsonl.h"
#include "sink/layout.h"

/* The lake format's version, fixed by the reference: writer strings
 * ("queen-s3/2.0.0 jsonl+zstd") and the status block's s3 "version". Not the
 * product's version (base/version.h), which the boot line shows. */
#define SINK_VERSION    "2.0.0"
#define SINK_NAME_MAX   64
#define SINK_STR_MAX    512
#define SINK_SECRET_MAX 4096 /* bytes: the control plane's secretKey cap */
/* bytes: what the S3 client signs with (struct s3_config's buffers) */
#define SINK_REGION_MAX     63
#define SINK_ACCESS_KEY_MAX 127
#define SINK_FATAL_MAX      1536
#define SINK_MIB            ((uint64_t)1048576)
/* The longest escaped instance name (with its /node-<id>) a presence key
 * s3:{sink}:node={esc(instance)} (docs/design/protocol.md §4, namespace
 * "queen-s3", a TTL row) holds for every sink. The store's key is 16-byte
 * tenant + 1 + namespace + key within LMDB's 511 bytes (a TTL row's expiry
 * index hashes a key too long for it, store/schema.h kv_expiry): the key is at
 * most 511 - 17 - 8 = 486 bytes, less "s3:" (3), a 64-byte sink name and
 * ":node=" (6): 413. */
#define SINK_INSTANCE_ESC_MAX (511 - 17 - 8 - 3 - SINK_NAME_MAX - 6)

enum sink_format { SINK_FORMAT_JSONL, SINK_FORMAT_PARQUET };
enum sink_sse { SINK_SSE_OFF, SINK_SSE_AES256, SINK_SSE_KMS };

/* One tenant's sink (docs/design/config.md §3). From the environment it is the
 * default tenant's sink; is_set is false when no per-tenant variable is set at
 * all (then there is no environment sink, which is not an error). */
struct sink_config {
    bool is_set;
    char sink[SINK_NAME_MAX + 1]; /* QUEEN_S3_SINK, "default" */
    bool all_queues;              /* QUEEN_S3_QUEUES == "*" */
    char **queues;                /* owned; n_queues names in given order */
    size_t n_queues;
    char endpoint[SINK_STR_MAX];          /* scheme://host[:port], no slash */
    char region[SINK_STR_MAX];            /* QUEEN_S3_REGION */
    char bucket[SINK_STR_MAX];            /* QUEEN_S3_BUCKET */
    char prefix[SINK_STR_MAX];            /* outer slashes trimmed, "queen" */
    char access_key[SINK_STR_MAX];        /* QUEEN_S3_ACCESS_KEY */
    char secret_key[SINK_SECRET_MAX + 1]; /* never logged or shown */
    bool path_style;                      /* QUEEN_S3_PATH_STYLE, false */
    enum sink_sse sse;                    /* QUEEN_S3_SSE, off */
    char sse_kms_key_id[SINK_STR_MAX];    /* "" unless sse == SINK_SSE_KMS */
    enum sink_format format;              /* jsonl */
    enum jsonl_codec compression;         /* zstd; JSONL only */
    enum parquet_codec parquet_codec;     /* zstd; Parquet only */
    enum layout_kind layout;              /* merged */
    enum layout_align align;              /* hour */
    enum engine_start start;              /* latest */
    uint64_t target_mb;                   /* 128, 1..=5120 */
    uint64_t target_bytes;                /* target_mb x MiB */
    uint64_t max_window_ms;               /* 300000, 100..=86400000 */
};

/* Node-wide settings (docs/design/protocol.md §1 and docs/design/config.md
 * §2, §4): environment only. */
struct sink_node_config {
    uint32_t threads;               /* QUEEN_S3_THREADS or clamp(cores/4,1,2) */
    uint64_t shutdown_grace_ms;     /* 30000, 100..=3600000 */
    uint64_t checkpoint_every;      /* 20, 1..=100000 */
    uint64_t memory_mb;             /* 512, 1..=1048576 */
    uint64_t memory_bytes;          /* memory_mb x MiB */
    uint64_t fetch_concurrency;     /* 4, 1..=256 */
    uint64_t discovery_interval_ms; /* 2000, 10..=3600000 */
    uint64_t safe_guard_ms;         /* 5000, 0..=3600000 */
    uint64_t lease_ttl_ms;          /* 30000, 1000..=3600000 */
    uint64_t multipart_threshold_mb;    /* 64, 5..=5120 */
    uint64_t multipart_threshold_bytes; /* x MiB */
    /* QUEEN_S3_CA_FILE: a readable PEM file of certificate authorities
     * for https endpoints, "" = the system's */
    char ca_file[SINK_STR_MAX];
    char node_id[32]; /* QUEEN_RAFT_NODE_ID or "1" */
    /* 3.1's rule; escaped, at most SINK_INSTANCE_ESC_MAX bytes */
    char instance[SINK_STR_MAX];
    int crash_at; /* enum driver_crash (sink/driver.h), 0 = never */
    /* "QUEEN_S3_LISTEN, QUEEN_S3_LOG_FORMAT" as far as set; "" if none. */
    char ignored[64];
    /* On failure: "QUEEN_S3_EMBEDDED=true: <message>", whole. */
    char fatal[SINK_FATAL_MAX];
};

/* Returns the variable's value or NULL when unset. Borrowed. */
typedef const char *(*sink_getenv_fn)(void *ctx, const char *name);

struct sink_env {
    sink_getenv_fn get;
    void *ctx;
    long cores;                  /* online CPUs, for the threads default */
    const char *system_hostname; /* gethostname(); NULL or "" if none */
};

/* Fill c and n from env. Returns 0, or ERR_INVALID with err->msg the
 * message of docs/design/config.md §5 (cut to fit) and n->fatal the whole
 * prefixed line. On success free c with sink_config_free(); on failure nothing
 * is held. */
int sink_config_load(struct sink_config *c, struct sink_node_config *n,
                     const struct sink_env *env, struct err *err);

/* sink_config_load over the process environment, sysconf and
 * gethostname(). The one boot hook: the broker calls it when
 * QUEEN_S3_EMBEDDED=true, prints "FATAL: " + n->fatal and exits on failure,
 * and logs the warning for n->ignored. */
int sink_config_from_env(struct sink_config *c, struct sink_node_config *n,
                         struct err *err);

/* A control-plane tenant's sink from its JSON document (docs/design/config.md
 * §5): the fields of docs/design/config.md §3 under their document names,
 * typed as docs/design/config.md §5 says, with the secret key passed beside the
 * document (never inside it). Node-wide fields, secretKey and unknown fields
 * are refused. Returns 0, or ERR_INVALID with err->msg the message (cut to fit)
 * and, when msg is not NULL, the whole message appended to msg. Free c with
 * sink_config_free(). */
int sink_config_from_doc(struct sink_config *c, const char *tenant,
                         struct slice doc, const char *secret, struct buf *msg,
                         struct err *err);
/* The field names of that document, *n of them (static storage). A
 * stored document is read first-wins; the control plane's PUT refuses a
 * repeated field before storing one (docs/design/control-plane.md §2). */
const char *const *sink_config_doc_fields(size_t *n);
/* The refusal of a document that is not a JSON object, type being its
 * json_type: "a tenant's sink is a JSON object of its settings, not null"
 * (a boolean, a number, a string, a list), into out. */
void sink_config_not_object(int type, char *out, size_t cap);

void sink_config_free(struct sink_config *c);

/* The one warning for ignored variables, or "" when none is set. */
void sink_config_ignored_warning(const struct sink_node_config *n,
                                 struct buf *out);

/* The boot line of docs/design/config.md §6 (never the secret) as a header
 * ("queen-s3 <version>") and its fields in the line's order, for the
 * structured log formats. f ends with {NULL, NULL}; its values live in
 * vals until sink_boot_free(). */
#define SINK_BOOT_FIELDS 32
struct sink_boot {
    char head[48];
    struct log_field f[SINK_BOOT_FIELDS + 1];
    size_t off[SINK_BOOT_FIELDS]; /* each value's offset in vals */
    size_t n;
    struct buf vals;
};
int sink_config_boot(const struct sink_config *c,
                     const struct sink_node_config *n, const char *tenant,
                     struct sink_boot *b, struct err *err);
void sink_boot_free(struct sink_boot *b);

/* Append the boot line of docs/design/config.md §6 (never the secret) as
 * one text: the header, then " key=value" per field. tenant as printed. */
int sink_config_boot_line(const struct sink_config *c,
                          const struct sink_node_config *n, const char *tenant,
                          struct buf *out, struct err *err);

/* Names as the boot line and the status block print them. */
const char *sink_format_name(enum sink_format f);
const char *sink_sse_name(enum sink_sse s);
/* The compression column: the JSONL codec, or the Parquet codec. */
const char *sink_config_compression_name(const struct sink_config *c);

/* One environment variable of the sink for `queen --help-config`: its
 * name, its default as text (a value the variable accepts, or "(required)",
 * "(unset)", "(derived)", "(ignored)") and one line on what it does. A
 * unit test loads each concrete default and checks it changes nothing. */
struct sink_config_var {
    const char *name;
    const char *def;
    const char *help;
};

/* The i-th variable the sink reads (the environment sink's, then the
 * node-wide ones), or NULL past the last. Borrowed, static. */
const struct sink_config_var *sink_config_var(size_t i);

/* Parse a boolean of docs/design/config.md §1 (true|1|yes|on, false|0|no|off;
 * any case). */
bool sink_parse_bool(const char *s, bool *out);

/* A sink variable's boolean as docs/design/config.md §1 reads every value:
 * trimmed of spaces, tabs, CR and LF at both ends, blank counting as unset.
 * shown (cap bytes) gets the trimmed value lowercased, for a message.
 * Returns 0 with *out set (false when blank or v is NULL), or -1 when it is
 * not a boolean. */
int sink_env_bool(const char *v, bool *out, char *shown, size_t cap);

#endif
