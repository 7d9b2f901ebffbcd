/* POST /api/v1/configure (docs/design/http-api.md §5): set a queue's options,
 * creating the queue when it does not exist.
 *
 * The handler runs a read barrier (linearizable: every earlier configure
 * has applied), reads the queue's current options, merges the request onto
 * them (merge) or onto the configured defaults (replace), and proposes the
 * WHOLE result as one CMD_CONFIGURE command. Apply only stores what the
 * command carries, so every node stores the same bytes, and a refused
 * request never reaches the log: the previous configuration stays (api.h
 * (1)).
 *
 * Typing (every rule is an integration test):
 *   integers: JSON integers that fit an i32, else "{k} must be an integer";
 *   booleans: JSON booleans, else "{k} must be a boolean";
 *   strings:  JSON strings of at most 64 bytes, else "{k} must be a string
 *             of at most 64 bytes" (docs/design/http-api.md §5 does not word
 *             this one);
 *   null:     the option's configured default;
 *   minPopWaitTime is clamped to 0..60000 and dedupWindowSeconds floored at
 *   0; retentionSinkHold must match [A-Za-z0-9._-]{0,64} and
 *   retentionSinkHoldMaxSeconds must lie in 60..31536000, else the call is
 *   refused (they govern deletion). */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/tenant.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "http/server.h"
#include "raft/node.h"
#include "store/store_impl.h"

#define CONF_HOLD_MAX_LO 60
#define CONF_HOLD_MAX_HI 31536000
#define CONF_MIN_POP_MAX 60000
#define CONF_STR_MAX     64
#define CONF_QUOTE_MAX   100 /* bytes of a bad mode quoted in the refusal */

enum conf_kind { CONF_INT, CONF_BOOL, CONF_STR };

struct conf_opt {
    const char *key;
    int kind; /* enum conf_kind */
    size_t off;
};

#define OPT(k, kind, f)                                  \
    {                                                    \
        k, kind, offsetof(struct store_queue_options, f) \
    }

/* In the typing order of docs/design/http-api.md §5 (the first bad option is
 * reported). */
static const struct conf_opt conf_opts[] = {
    OPT("priority", CONF_INT, priority),
    OPT("leaseTime", CONF_INT, lease_time),
    OPT("retryLimit", CONF_INT, retry_limit),
    OPT("retryDelay", CONF_INT, retry_delay),
    OPT("maxSize", CONF_INT, max_size),
    OPT("ttl", CONF_INT, ttl),
    OPT("delayedProcessing", CONF_INT, delayed_processing),
    OPT("windowBuffer", CONF_INT, window_buffer),
    OPT("retentionSeconds", CONF_INT, retention_seconds),
    OPT("completedRetentionSeconds", CONF_INT, completed_retention_seconds),
    OPT("maxWaitTimeSeconds", CONF_INT, max_wait_time_seconds),
    OPT("minPopWaitTime", CONF_INT, min_pop_wait_time),
    OPT("dedupWindowSeconds", CONF_INT, dedup_window_seconds),
    OPT("retentionSinkHoldMaxSeconds", CONF_INT,
        retention_sink_hold_max_seconds),
    OPT("deadLetterQueue", CONF_BOOL, dead_letter_queue),
    OPT("dlqAfterMaxRetries", CONF_BOOL, dlq_after_max_retries),
    OPT("retentionEnabled", CONF_BOOL, retention_enabled),
    OPT("encryptionEnabled", CONF_BOOL, encryption_enabled),
    OPT("namespace", CONF_STR, namespace_),
    OPT("task", CONF_STR, task),
    OPT("retentionSinkHold", CONF_STR, retention_sink_hold),
};

/* The fields this route reads appear once each: a repeated one would leave
 * a reader guessing which value counts, so the call is refused (json.h
 * (5)). The root holds queue, mode, options, namespace and task, and every
 * option when options is not an object; an options object holds every
 * option. Other members are ignored, repeated or not. */
static int conf_no_dups(const struct api_configure *c, struct err *err)
{
    static const char *const top[] = {"queue", "mode", "options", "namespace",
                                      "task"};
    const char *keys[ARRAY_LEN(conf_opts)];
    int vals[ARRAY_LEN(conf_opts)];
    int opts;
    int dup;

    for (size_t i = 0; i < ARRAY_LEN(conf_opts); i++) {
        keys[i] = conf_opts[i].key;
    }
    dup = json_obj_pick(&c->doc, 0, top, (int)ARRAY_LEN(top), vals);
    if (dup >= 0) {
        return err_set(err, ERR_INVALID,
                       "bad configure body: duplicate key \"%s\"", top[dup]);
    }
    opts = json_type(&c->doc, vals[2]) == JSON_OBJECT ? vals[2] : 0;
    dup = json_obj_pick(&c->doc, opts, keys, (int)ARRAY_LEN(keys), vals);
    if (dup >= 0) {
        return err_set(err, ERR_INVALID,
                       "bad configure body: %sduplicate key \"%s\"",
                       opts != 0 ? "options: " : "", keys[dup]);
    }
    return 0;
}

int api_configure_parse(struct api_configure *c, const char *body, size_t len,
                        const char **code, struct err *err)
{
    struct json_limits lim = {16, 2, API_READ_MAX_TOKENS};
    int q;
    int mode;

    memset(c, 0, sizeof(*c));
    buf_init(&c->arena, BUF_UNLIMITED); /* the body bounds the name */
    *code = "bad_body";
    if (json_parse(&c->doc, body, len, &lim, err) != 0) {
        if (err->code == ERR_TOO_BIG) {
            return err->code;
        }
        err->code = ERR_INVALID; /* err->msg is the scanner's sentence */
        return err_wrap(err, "bad configure body");
    }
    if (json_type(&c->doc, 0) != JSON_OBJECT) {
        return err_set(err, ERR_INVALID,
                       "bad configure body: not a JSON object");
    }
    if (conf_no_dups(c, err) != 0) {
        return err->code;
    }
    *code = "bad_request";
    q = json_obj_get(&c->doc, 0, "queue");
    if (json_type(&c->doc, q) != JSON_STRING ||
        json_get_str(&c->doc, q, &c->arena, err) != 0 || c->arena.len == 0) {
        return err_set(err, ERR_INVALID, "queue is required");
    }
    c->queue.ptr = c->arena.data;
    c->queue.len = c->arena.len;
    if (api_check_name(c->queue, err, "queue") != 0) {
        *code = err->code == ERR_TOO_BIG ? "too_large" : "bad_request";
        return err->code;
    }
    mode = json_obj_get(&c->doc, 0, "mode");
    if (mode >= 0 && !json_str_eq(&c->doc, mode, "merge")) {
        struct slice v = json_span(&c->doc, mode);
        char quote[CONF_QUOTE_MAX];

        if (!json_str_eq(&c->doc, mode, "replace")) {
            *code = NULL;
            /* Cut at a whole UTF-8 sequence: the answer stays JSON. */
            return err_set(
                err, ERR_INVALID,
                "mode must be \"merge\" or \"replace\", got %.*s",
                (int)json_msg_quote(quote, v.ptr, v.len, sizeof(quote)), quote);
        }
        c->is_replace = true;
    }
    c->opts = json_obj_get(&c->doc, 0, "options");
    if (json_type(&c->doc, c->opts) != JSON_OBJECT) {
        c->opts = 0; /* the root's other keys are the options */
    }
    return 0;
}

void api_configure_free(struct api_configure *c)
{
    json_doc_free(&c->doc);
    buf_free(&c->arena);
}

/* The token of option key: in the options object, or (namespace and task
 * only) a top-level string when the options lack it. -1 when absent. */
static int conf_token(const struct api_configure *c, const char *key)
{
    int t = json_obj_get(&c->doc, c->opts, key);
    int top;

    if (t >= 0 || c->opts == 0 ||
        (strcmp(key, "namespace") != 0 && strcmp(key, "task") != 0)) {
        return t;
    }
    top = json_obj_get(&c->doc, 0, key);
    return json_type(&c->doc, top) == JSON_STRING ? top : -1;
}

static bool conf_hold_ok(const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;

        if (!(ch >= 'A' && ch <= 'Z') && !(ch >= 'a' && ch <= 'z') &&
            !(ch >= '0' && ch <= '9') && ch != '.' && ch != '_' && ch != '-') {
            return false;
        }
    }
    return true;
}

static int conf_str(const struct api_configure *c, const struct conf_opt *op,
                    int t, char *dst, struct err *err)
{
    struct buf b;
    bool ok;

    buf_init(&b, CONF_STR_MAX);
    ok = json_type(&c->doc, t) == JSON_STRING &&
         json_get_str(&c->doc, t, &b, err) == 0 &&
         (b.len == 0 || memchr(b.data, '\0', b.len) == NULL);
    if (ok) {
        memcpy(dst, b.len > 0 ? b.data : "", b.len);
        dst[b.len] = '\0';
    }
    buf_free(&b);
    if (ok &&
        (strcmp(op->key, "retentionSinkHold") != 0 || conf_hold_ok(dst))) {
        return 0;
    }
    if (strcmp(op->key, "retentionSinkHold") == 0) {
        return err_set(err, ERR_INVALID,
                       "retentionSinkHold must match [A-Za-z0-9._-]{0,64}");
    }
    return err_set(err, ERR_INVALID,
                   "%s must be a string of at most %d bytes, without NUL",
                   op->key, CONF_STR_MAX);
}

/* Set one option from token t onto o. */
static int conf_one(const struct api_configure *c, const struct conf_opt *op,
                    int t, struct store_queue_options *o, struct err *err)
{
    char *field = (char *)o + op->off;
    int64_t v;
    bool bv;

    switch (op->kind) {
    case CONF_INT:
        if (!json_get_i64(&c->doc, t, &v) || v < INT32_MIN || v > INT32_MAX) {
            return err_set(err, ERR_INVALID, "%s must be an integer", op->key);
        }
        memcpy(field, &(int32_t){(int32_t)v}, sizeof(int32_t));
        return 0;
    case CONF_BOOL:
        if (!json_get_bool(&c->doc, t, &bv)) {
            return err_set(err, ERR_INVALID, "%s must be a boolean", op->key);
        }
        memcpy(field, &bv, sizeof(bool));
        return 0;
    default:
        return conf_str(c, op, t, field, err);
    }
}

int api_configure_merge(const struct api_configure *c,
                        struct store_queue_options *o, struct err *err)
{
    struct store_queue_options n = *o;
    struct store_queue_options def;

    store_queue_options_configured(&def);
    if (n.retention_sink_hold_max_seconds == 0) {
        n.retention_sink_hold_max_seconds = def.retention_sink_hold_max_seconds;
    }
    for (size_t i = 0; i < ARRAY_LEN(conf_opts); i++) {
        const struct conf_opt *op = &conf_opts[i];
        int t = conf_token(c, op->key);
        size_t size = op->kind == CONF_INT    ? sizeof(int32_t)
                      : op->kind == CONF_BOOL ? sizeof(bool)
                                              : CONF_STR_MAX + 1;

        if (t < 0) {
            continue;
        }
        if (json_is_null(&c->doc, t)) {
            memcpy((char *)&n + op->off, (const char *)&def + op->off, size);
        } else if (conf_one(c, op, t, &n, err) != 0) {
            return err->code;
        }
    }
    if (n.min_pop_wait_time < 0 || n.min_pop_wait_time > CONF_MIN_POP_MAX) {
        n.min_pop_wait_time = n.min_pop_wait_time < 0 ? 0 : CONF_MIN_POP_MAX;
    }
    if (n.dedup_window_seconds < 0) {
        n.dedup_window_seconds = 0;
    }
    if (n.retention_sink_hold_max_seconds < CONF_HOLD_MAX_LO ||
        n.retention_sink_hold_max_seconds > CONF_HOLD_MAX_HI) {
        return err_set(err, ERR_INVALID,
                       "retentionSinkHoldMaxSeconds must be between %d and %d",
                       CONF_HOLD_MAX_LO, CONF_HOLD_MAX_HI);
    }
    *o = n;
    return 0;
}

/* The answer's option keys, in the order of docs/design/http-api.md §5;
 * maxQueueSize repeats maxSize. */
static const char *const conf_answer_order[] = {
    "priority",
    "leaseTime",
    "retryLimit",
    "retryDelay",
    "maxSize",
    "maxQueueSize",
    "ttl",
    "deadLetterQueue",
    "dlqAfterMaxRetries",
    "delayedProcessing",
    "windowBuffer",
    "retentionSeconds",
    "completedRetentionSeconds",
    "retentionEnabled",
    "encryptionEnabled",
    "maxWaitTimeSeconds",
    "minPopWaitTime",
    "dedupWindowSeconds",
    "retentionSinkHold",
    "retentionSinkHoldMaxSeconds",
};

static void conf_render_one(struct jw *w, const char *key,
                            const struct store_queue_options *o)
{
    const char *name = strcmp(key, "maxQueueSize") == 0 ? "maxSize" : key;
    const struct conf_opt *op = NULL;
    const char *field;
    int32_t v;
    bool b;

    for (size_t i = 0; i < ARRAY_LEN(conf_opts) && op == NULL; i++) {
        op = strcmp(conf_opts[i].key, name) == 0 ? &conf_opts[i] : NULL;
    }
    ASSERT(op != NULL);
    field = (const char *)o + op->off;
    jw_key(w, key);
    if (op->kind == CONF_INT) {
        memcpy(&v, field, sizeof(v));
        jw_i64(w, v);
    } else if (op->kind == CONF_BOOL) {
        memcpy(&b, field, sizeof(b));
        jw_bool(w, b);
    } else {
        jw_cstr(w, field);
    }
}

int api_configure_render(struct slice queue, const uint8_t uuid[16],
                         const struct store_queue_options *o, struct buf *out,
                         struct err *err)
{
    char id[37];
    struct jw w;

    uuid7_format(uuid, id);
    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "configured");
    jw_bool(&w, true);
    jw_key(&w, "queueId");
    jw_cstr(&w, id);
    jw_key(&w, "partitionId");
    jw_null(&w);
    jw_key(&w, "queue");
    jw_str(&w, queue.ptr, queue.len);
    jw_key(&w, "namespace");
    jw_cstr(&w, o->namespace_);
    jw_key(&w, "task");
    jw_cstr(&w, o->task);
    jw_key(&w, "storage");
    jw_cstr(&w, "segments");
    jw_key(&w, "options");
    jw_obj_begin(&w);
    for (size_t i = 0; i < ARRAY_LEN(conf_answer_order); i++) {
        conf_render_one(&w, conf_answer_order[i], o);
    }
    jw_obj_end(&w);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

/* ---- apply (loop thread, inside the fsm's write transaction) ---------- */

int api_configure_apply(void *arg, struct store *s, MDB_txn *txn,
                        const struct cmd_header *h, struct fsm_result *res,
                        struct err *err)
{
    struct store_w w = {
        .s = s, .txn = txn, .tenant = h->tenant, .stamp = h->stamp};
    struct store_queue_options o;
    struct store_wqueue q;
    struct slice name;
    struct err derr;

    UNUSED(arg);
    if (cmd_configure_decode(h->body, &name, &o, &derr) != 0) {
        res->code = derr.code;
        snprintf(res->msg, sizeof(res->msg), "%.150s", derr.msg);
        return 0;
    }
    return store_wqueue_put_options(&w, name, &o, &q, err);
}

/* ---- the handler -------------------------------------------------------- */

struct configure_op {
    struct api *a;
    struct http_req *req;
    struct api_configure c;
    struct store_queue_options o;
    uint8_t tenant[16];
};

static void configure_done(struct configure_op *op)
{
    api_configure_free(&op->c);
    free(op);
}

static void configure_applied(void *arg, int status,
                              const struct fsm_result *res,
                              const struct err *perr)
{
    struct configure_op *op = arg;
    struct store_queue_info info;
    struct buf out;
    struct err err;

    if (status != 0) {
        api_respond_err(op->a, op->req, perr);
    } else if (res->code != 0) {
        err_set(&err, ERR_IO, "configure: %s", res->msg);
        api_respond_err(op->a, op->req, &err);
    } else if (store_get_queue(op->a->store, op->tenant, op->c.queue, &info,
                               &err) != 0) {
        api_respond_err(op->a, op->req, &err);
    } else {
        buf_init(&out, BUF_UNLIMITED);
        if (api_configure_render(op->c.queue, info.uuid, &info.options, &out,
                                 &err) != 0) {
            buf_free(&out);
            api_respond_err(op->a, op->req, &err);
        } else {
            api_respond_json(op->a, op->req, 200, &out);
        }
    }
    configure_done(op);
}

/* After the barrier: read, merge, propose. */
static void configure_read(void *arg, int status, const struct fsm_result *res,
                           const struct err *perr)
{
    struct configure_op *op = arg;
    struct store_queue_info info;
    struct buf cmd;
    struct err err;
    int rc;

    UNUSED(res);
    if (status != 0) {
        api_respond_err(op->a, op->req, perr);
        configure_done(op);
        return;
    }
    rc = store_get_queue(op->a->store, op->tenant, op->c.queue, &info, &err);
    if (rc != 0 && rc != ERR_NOT_FOUND) {
        api_respond_err(op->a, op->req, &err);
        configure_done(op);
        return;
    }
    if (rc == 0 && !op->c.is_replace) {
        op->o = info.options;
    } else {
        store_queue_options_configured(&op->o);
    }
    if (api_configure_merge(&op->c, &op->o, &err) != 0) {
        api_respond_error(op->a, op->req, 400, "bad_request", err.msg);
        configure_done(op);
        return;
    }
    buf_init(&cmd, BUF_UNLIMITED);
    rc = cmd_configure_encode(&cmd, op->tenant, op->c.queue, &op->o, &err);
    if (rc == 0) {
        rc = node_propose(op->a->node, CMD_CONFIGURE, cmd.data, cmd.len,
                          configure_applied, op, &err);
    }
    buf_free(&cmd);
    if (rc != 0) {
        api_respond_err(op->a, op->req, &err);
        configure_done(op);
    }
}

void api_handle_configure(struct http_req *req, void *arg)
{
    struct api *a = arg;
    const char *code = NULL;
    struct err err;
    uint8_t tenant[16];

    if (api_tenant_gated(req, a, API_GATE_READ, tenant, &code, &err) != 0) {
        api_respond_tenant(a, req, code, &err);
        return;
    }
    api_configure_for(a, req, tenant);
}

void api_configure_for(struct api *a, struct http_req *req,
                       const uint8_t tenant[16])
{
    struct configure_op *op = xcalloc(1, sizeof(*op));
    const char *code = NULL;
    struct err err;

    op->a = a;
    op->req = req;
    memcpy(op->tenant, tenant, 16);
    if (api_configure_parse(&op->c, req->body.ptr, req->body.len, &code,
                            &err) != 0) {
        api_respond_error(a, req, err.code == ERR_TOO_BIG ? 413 : 400, code,
                          err.msg);
        configure_done(op);
        return;
    }
    if (node_barrier(a->node, configure_read, op, &err) != 0) {
        api_respond_err(a, req, &err);
        configure_done(op);
    }
}
