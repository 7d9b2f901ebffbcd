/* The broker glue of the embedded S3 sink (see host.h).
 *
 * The in-process seam is thin on purpose: the store's reads are plain C
 * calls safe from any thread, and the broker's KV call (struct sink_host_kv:
 * kv_call_batch(), passed in at boot) blocks the sink's thread until the
 * batch is applied on the loop, so the sink sees the same answers the HTTP
 * routes give without any JSON. */
#include "sink/host.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "api/api.h"
#include "api/tenant.h"
#include "base/aead.h"
#include "base/buf.h"
#include "base/env.h"
#include "base/json.h"
#include "base/log.h"
#include "base/uuid7.h"
#include "base/version.h"
#include "base/xalloc.h"
#include "cp/registry.h"
#include "s3/client.h"
#include "s3/transport_curl.h"
#include "sink/config.h"
#include "sink/obs.h"
#include "sink/reconcile.h"
#include "sink/sink.h"
#include "sink/status.h"
#include "store/kv.h"
#include "store/store.h"

/* One control-plane tenant's unit: its sink and S3 client, or the error
 * that kept it from being built. Allocated one by one: its sink borrows
 * cfg and tenant_text. */
/* An S3 client and what it runs on. */
struct host_client {
    struct s3_curl *curl;
    struct s3_transport transport;
    struct s3_client *s3;
};

struct tunit {
    uint8_t tenant[16];
    char tenant_text[37];
    char cluster[CP_ID_LEN + 1];
    int64_t fingerprint; /* the row's updated_at_us */
    enum reconcile_unit_state state;
    char error[STATUS_ERROR_MAX + 1];
    /* the error last logged, and for which fingerprint: a retry that
     * fails the same way is not logged again */
    char logged_error[STATUS_ERROR_MAX + 1];
    int64_t logged_fingerprint;
    bool has_cfg;
    struct sink_config cfg;
    struct host_client c;
    struct sink *sink;
};

struct sink_host {
    struct store *store;
    struct sink_host_kv kv;
    struct sink_config cfg;
    struct sink_node_config node;
    char tenant_text[37];
    struct sink_broker broker;
    struct sink_pool *pool;
    bool has_env; /* the environment configures the default tenant's sink */
    struct host_client c;
    struct sink *sink; /* the environment's, or NULL */
    struct api *api;
    uv_timer_t start_timer; /* starts the sink once the loop runs */
    bool is_started;
    /* The manager (docs/design/protocol.md §1, "Tenant sinks"): a thread of
     * its own reads the control plane's rows every HOST_CP_PERIOD_MS. */
    bool has_cp; /* QUEEN_PROXY_EMBEDDED=true */
    bool has_key;
    uint8_t key[AEAD_KEY_LEN];
    pthread_t manager;
    bool has_manager;
    struct obs_sampler read_warn;
    /* under mu: the units, the read error, the stop */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct tunit **units;
    size_t n_units;
    char cp_error[STATUS_ERROR_MAX + 1];
    bool is_stopping;
    /* The first stop's time (0 before), read by the sink's threads too:
     * the KV seam refuses calls once the grace is (nearly) used up. */
    _Atomic int64_t stop_ms;
};

#define HOST_CP_PERIOD_MS 5000
#define HOST_CP_POLL_MS   200 /* how often drains are looked at */
#define HOST_CP_WARN_MS   60000
#define HOST_CP_PAGE      1000
#define HOST_SECRET_ROOM  8192 /* a sealed secret is at most 4 KiB */
#define HOST_SECRET_ERROR                                                   \
    "the S3 secret cannot be opened on this node: QUEEN_ENCRYPTION_KEY is " \
    "unset or differs from the key of the node that sealed it (every node " \
    "needs the same key)"

/* How long before the grace ends the KV seam closes: past the grace the
 * broker closes raft, and a call submitted then would reach a freed node. */
#define HOST_KV_CLOSE_MARGIN_MS 200

static int64_t host_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the in-process seam --------------------------------------------- */

static int host_changed(void *arg, const uint8_t tenant[16],
                        const struct store_changed_req *reqs, size_t n,
                        struct store_changed_answer *ans, struct err *err)
{
    struct sink_host *h = arg;

    return store_changed(h->store, tenant, reqs, n, ans, err);
}

static int host_fetch(void *arg, const uint8_t tenant[16],
                      const struct store_fetch_req *reqs, size_t n,
                      struct store_fetch_answer *ans, struct err *err)
{
    struct sink_host *h = arg;

    /* The driver merges the answer into the engine's slabs and frees it
     * at once: the records need not be copied out of the store first. */
    return store_fetch_pinned(h->store, tenant, reqs, n, ans, err);
}

/* The seam's signature (sink/driver.h) has seven parameters. */
/* NOLINTNEXTLINE(readability-function-size) */
static int host_kv(void *arg, const uint8_t tenant[16], const struct kv_op *ops,
                   size_t n, int timeout_ms, struct kv_answer *out,
                   struct err *err)
{
    struct sink_host *h = arg;
    struct kv_batch b = {tenant, ops, n};
    int64_t stop = atomic_load(&h->stop_ms);

    /* Past the grace the broker goes on to close raft while a drain cut
     * short may still refresh or commit: such a call must not be
     * submitted to a node being freed. The next owner redoes the window. */
    if (stop != 0 &&
        host_now_ms() - stop >=
            (int64_t)h->node.shutdown_grace_ms - HOST_KV_CLOSE_MARGIN_MS) {
        memset(out, 0, sizeof(*out));
        return err_set(err, ERR_BUSY,
                       "the broker is shutting down: its grace is used up");
    }
    return h->kv.call_batch(h->kv.arg, &b, timeout_ms, out, err);
}

static int host_list_queues(void *arg, const uint8_t tenant[16],
                            struct store_queue_list *out, struct err *err)
{
    struct sink_host *h = arg;

    return store_list_queues(h->store, tenant, out, err);
}

static int host_safe_time(void *arg, int64_t *out_us)
{
    struct sink_host *h = arg;
    struct err err;

    return store_safe_time(h->store, out_us, &err);
}

/* ---- hooks --------------------------------------------------------------- */

static int by_tenant(const void *a, const void *b)
{
    const struct tunit *const *x = a;
    const struct tunit *const *y = b;

    return memcmp((*x)->tenant, (*y)->tenant, 16);
}

/* Under h->mu: the host keys of u's entry. */
static void host_unit_keys(const struct tunit *u, struct status_sink *ss)
{
    memset(ss, 0, sizeof(*ss));
    ss->tenant = u->tenant_text;
    ss->source = "cp";
    ss->cluster = u->cluster;
    if (u->state == UNIT_ERROR) {
        ss->host_only = true;
        ss->phase = "error";
        ss->error = u->error;
    }
}

static int host_status(void *arg, const char *tenant, struct buf *out,
                       struct err *err)
{
    struct sink_host *h = arg;
    struct status_node node;
    int rc;

    if (buf_append_str(out, ",\"s3\":", err) != 0) {
        return err->code;
    }
    pthread_mutex_lock(&h->mu);
    size_t n = h->n_units + 1;
    struct status_sink *ss = xcalloc(n, sizeof(*ss));
    struct sink **sinks = xcalloc(n, sizeof(struct sink *));
    size_t k = 0;

    /* tenant: only its sinks (api_status_fn), and the environment sink's
     * report is the block's own only when it is that tenant's. */
    bool has_env =
        h->has_env && (tenant == NULL || strcmp(tenant, h->tenant_text) == 0);

    memset(&node, 0, sizeof(node));
    node.phase = h->is_stopping   ? "stopped"
                 : !h->is_started ? "starting"
                 : has_env        ? NULL /* the environment sink's */
                                  : "running";
    node.threads = h->node.threads;
    /* The stages count every tenant's records: a bound token's view has
     * none of them, as it has no /metrics. */
    node.stages = tenant == NULL ? obs_stages(sink_pool_obs(h->pool)) : NULL;
    node.control_plane_error =
        h->cp_error[0] != '\0' && tenant == NULL ? h->cp_error : NULL;
    if (has_env) {
        ss[k].tenant = h->tenant_text;
        ss[k].source = "env";
        sinks[k++] = h->sink;
    }
    for (size_t i = 0; i < h->n_units; i++) {
        if (tenant != NULL && strcmp(tenant, h->units[i]->tenant_text) != 0) {
            continue;
        }
        host_unit_keys(h->units[i], &ss[k]);
        sinks[k++] =
            h->units[i]->state == UNIT_ERROR ? NULL : h->units[i]->sink;
    }
    struct sink_entries e = {sinks, ss, k};
    rc = sink_pool_status_render(h->pool, &e, &node, out, err);
    pthread_mutex_unlock(&h->mu);
    free(sinks);
    free(ss);
    return rc;
}

static int host_metrics(void *arg, struct buf *out, struct err *err)
{
    struct sink_host *h = arg;
    int rc;

    pthread_mutex_lock(&h->mu);
    struct sink **sinks = xcalloc(h->n_units + 1, sizeof(struct sink *));
    size_t k = 0;

    if (h->has_env) {
        sinks[k++] = h->sink;
    }
    for (size_t i = 0; i < h->n_units; i++) {
        if (h->units[i]->sink != NULL) {
            sinks[k++] = h->units[i]->sink;
        }
    }
    rc = sink_pool_metrics(h->pool, sinks, k, out, err);
    pthread_mutex_unlock(&h->mu);
    free(sinks);
    return rc;
}

/* ---- boot ---------------------------------------------------------------- */

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);

    n = n < cap - 1 ? n : cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The S3 client of c; names are how errors name the settings. The secret
 * is copied into the client only: the config's copy is zeroed. */
static int host_s3_client(const struct sink_node_config *node,
                          struct sink_config *c, const char *names[3],
                          struct host_client *out, struct err *err)
{
    struct s3_config sc;

    s3_config_defaults(&sc);
    sc.log_area = "queen-s3"; /* the sink logs under its target */
    if (s3_endpoint_parse(&sc.ep, names[0], c->endpoint, names[2], err) != 0 ||
        s3_endpoint_set_bucket(&sc.ep, names[1], c->bucket, names[2], err) !=
            0) {
        return err->code;
    }
    sc.ep.path_style = c->path_style;
    /* the config refused anything longer (config.h), so nothing is cut */
    _Static_assert(sizeof(sc.region) == SINK_REGION_MAX + 1, "region");
    _Static_assert(sizeof(sc.access_key) == SINK_ACCESS_KEY_MAX + 1, "key");
    copy_str(sc.region, sizeof(sc.region), c->region);
    copy_str(sc.access_key, sizeof(sc.access_key), c->access_key);
    copy_str(sc.secret_key, sizeof(sc.secret_key), c->secret_key);
    explicit_bzero(c->secret_key, sizeof(c->secret_key));
    sc.sse = c->sse == SINK_SSE_KMS      ? S3_SSE_KMS
             : c->sse == SINK_SSE_AES256 ? S3_SSE_AES256
                                         : S3_SSE_NONE;
    copy_str(sc.kms_key_id, sizeof(sc.kms_key_id), c->sse_kms_key_id);
    sc.multipart_threshold = node->multipart_threshold_bytes;
    sc.on_retrying = sink_s3_retrying;
    out->curl = s3_curl_new(node->ca_file);
    out->transport = s3_curl_transport(out->curl);
    out->s3 = s3_client_new(&sc, &out->transport, NULL);
    explicit_bzero(sc.secret_key, sizeof(sc.secret_key));
    return 0;
}

/* The boot line in the text format: one line, or (msg: a control-plane
 * tenant's sink) msg with the cluster and the line as field `config`. */
static void host_boot_text(const struct sink_config *c,
                           const struct sink_node_config *n, const char *tenant,
                           const char *msg, const char *cluster)
{
    struct err err = {0};
    struct buf line;

    buf_init(&line, BUF_UNLIMITED);
    if (sink_config_boot_line(c, n, tenant, &line, &err) != 0) {
        buf_free(&line);
        return;
    }
    if (msg == NULL) {
        log_info("queen-s3", "%s", line.data);
    } else {
        log_info_kv("queen-s3", msg, {"cluster", cluster},
                    {"config", line.data});
    }
    buf_free(&line);
}

/* Log a sink's boot line (docs/design/config.md §6). In the text format it
 * is one line, "queen-s3 <version> tenant=… …"; in logfmt and JSON its
 * settings are fields a log pipeline reads by name, under msg "queen-s3
 * <version>", or under msg with the cluster and the version first. */
static void host_boot_log(const struct sink_config *c,
                          const struct sink_node_config *n, const char *tenant,
                          const char *msg, const char *cluster)
{
    struct err err = {0};
    struct sink_boot b;
    struct log_field f[SINK_BOOT_FIELDS + 3];
    size_t k = 0;

    if (log_get_format() == LOG_FORMAT_TEXT) {
        host_boot_text(c, n, tenant, msg, cluster);
        return;
    }
    if (sink_config_boot(c, n, tenant, &b, &err) != 0) {
        return;
    }
    if (msg != NULL) {
        f[k++] = (struct log_field){"cluster", cluster};
        f[k++] = (struct log_field){"version", QUEEN_VERSION};
    }
    memcpy(f + k, b.f, (b.n + 1) * sizeof(f[0]));
    log_fields(LOG_INFO, "queen-s3", msg != NULL ? msg : b.head, f);
    sink_boot_free(&b);
}

static void host_boot_logs(struct sink_host *h)
{
    struct buf line;

    buf_init(&line, BUF_UNLIMITED);
    sink_config_ignored_warning(&h->node, &line);
    if (line.len > 0) {
        log_warn("queen-s3", "%s", line.data);
    }
    if (h->node.crash_at != 0) {
        log_warn("queen-s3", "QUEEN_S3_CRASH_AT is set: this node aborts at "
                             "that point of the commit sequence");
    }
    buf_free(&line);
    if (h->has_env) {
        host_boot_log(&h->cfg, &h->node, h->tenant_text, NULL, NULL);
    }
}

/* Read as the boot's checks read it (sink_env_bool): a value they took as
 * true must start the sink. */
static bool env_true(const char *name)
{
    char shown[16];
    bool on = false;

    return sink_env_bool(getenv(name), &on, shown, sizeof(shown)) == 0 && on;
}

static void host_on_timer_closed(uv_handle_t *t)
{
    UNUSED(t);
}

static void *host_manager(void *arg);

static void host_manager_start(struct sink_host *h)
{
    int rc = pthread_create(&h->manager, NULL, host_manager, h);

    if (rc != 0) {
        log_error("queen-s3",
                  "cannot start the control plane's sink manager: %s",
                  strerror(rc));
        return;
    }
    pthread_setname_np(h->manager, "queen-s3-cp");
    h->has_manager = true;
}

/* The first turn of the loop: the broker listens by now (api->server is
 * set), or its boot failed and the loop only runs to close the node; then
 * the sink never starts, so a failed boot leaves no thread and no claim. */
static void host_on_start(uv_timer_t *t)
{
    struct sink_host *h = t->data;
    struct err err = {0};

    uv_close((uv_handle_t *)t, host_on_timer_closed);
    if (h->api->server == NULL || h->is_stopping) {
        return;
    }
    h->is_started = true;
    if (sink_pool_start(h->pool, &err) != 0 ||
        (h->has_env && sink_start(h->sink, &err) != 0)) {
        log_error("queen-s3", "cannot start the S3 sink's threads: %s",
                  err.msg);
        return;
    }
    if (h->has_cp) {
        host_manager_start(h);
    }
}

static void host_key(struct sink_host *h)
{
    char v[80]; /* longer than a key, so a longer value stays wrong */

    /* Trimmed as the broker's settings are (broker/config.c). */
    h->has_key = env_trim(getenv("QUEEN_ENCRYPTION_KEY"), v, sizeof(v)) &&
                 aead_key_parse(v, h->key);
    explicit_bzero(v, sizeof(v));
}

int sink_host_boot(struct sink_host **out, struct store *store,
                   const struct sink_host_kv *kv, struct api *api,
                   struct err *err)
{
    static const char *names[3] = {"QUEEN_S3_ENDPOINT", "QUEEN_S3_BUCKET",
                                   "QUEEN_S3_PREFIX"};
    struct sink_host *h;
    struct sink_params p;

    *out = NULL;
    if (!env_true("QUEEN_S3_EMBEDDED")) {
        return 0;
    }
    h = xcalloc(1, sizeof(*h));
    if (sink_config_from_env(&h->cfg, &h->node, err) != 0) {
        log_error("boot", "FATAL: %s", h->node.fatal);
        exit(2);
    }
    h->has_env = h->cfg.is_set;
    h->has_cp = env_true("QUEEN_PROXY_EMBEDDED");
    if (h->has_env &&
        host_s3_client(&h->node, &h->cfg, names, &h->c, err) != 0) {
        log_error("boot", "FATAL: QUEEN_S3_EMBEDDED=true: %s", err->msg);
        exit(2);
    }
    log_info("queen-s3", "starting the S3 sink in-process");
    h->store = store;
    h->kv = *kv;
    host_key(h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    obs_sampler_init(&h->read_warn, HOST_CP_WARN_MS);
    uuid7_format(STORE_DEFAULT_TENANT, h->tenant_text);
    h->broker = (struct sink_broker){
        host_changed, host_fetch, host_kv, host_list_queues, h, host_safe_time};
    host_boot_logs(h);
    h->pool = sink_pool_new(&h->node);
    if (h->has_env) {
        memset(&p, 0, sizeof(p));
        p.cfg = &h->cfg;
        p.node = &h->node;
        memcpy(p.tenant, STORE_DEFAULT_TENANT, 16);
        p.tenant_text = h->tenant_text;
        p.broker = &h->broker;
        p.s3 = h->c.s3;
        p.pool = h->pool;
        h->sink = sink_new(&p);
    }
    h->api = api;
    *out = h;
    api->status_extra = host_status;
    api->status_extra_arg = h;
    api->metrics_extra = host_metrics;
    api->metrics_extra_arg = h;
    uv_timer_init(api->loop, &h->start_timer);
    h->start_timer.data = h;
    uv_timer_start(&h->start_timer, host_on_start, 0, 0);
    return 0;
}

/* ---- the manager ----------------------------------------------------------
 */

/* One px.s3sinks row as read, with what building its sink needs. */
struct host_row {
    struct reconcile_row r;
    char *config;        /* the "config" object's JSON text */
    char *secret_sealed; /* the envelope's text, or NULL */
};

static void host_rows_free(struct host_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(rows[i].config);
        free(rows[i].secret_sealed);
    }
    free(rows);
}

static char *json_text(const struct json_doc *d, int i, int type)
{
    if (i < 0 || json_type(d, i) != type) {
        return NULL;
    }
    struct slice sp = json_span(d, i);
    return xstrndup(sp.ptr, sp.len);
}

/* Parse one row's value; false when it is not a row this code can read
 * (it is then left out, as if absent). */
static bool host_row_parse(struct slice v, struct host_row *out)
{
    struct json_doc d;
    struct err err = {0};
    struct buf s;
    bool ok = false;

    memset(out, 0, sizeof(*out));
    if (json_parse(&d, v.ptr, v.len, NULL, &err) != 0) {
        return false;
    }
    buf_init(&s, 64);
    int id = json_obj_get(&d, 0, "cluster_id");
    int bt = json_obj_get(&d, 0, "broker_tenant");
    int en = json_obj_get(&d, 0, "enabled");
    int up = json_obj_get(&d, 0, "updated_at_us");
    if (json_get_str(&d, id, &s, &err) == 0 && s.len <= CP_ID_LEN) {
        memcpy(out->r.cluster_id, s.data, s.len);
        buf_reset(&s);
        ok = json_get_str(&d, bt, &s, &err) == 0 &&
             api_tenant_parse(s.data, out->r.broker_tenant) &&
             json_get_bool(&d, en, &out->r.enabled) &&
             json_get_i64(&d, up, &out->r.updated_at_us);
    }
    buf_free(&s);
    if (ok) {
        out->config = json_text(&d, json_obj_get(&d, 0, "config"), JSON_OBJECT);
        int sk = json_obj_get(&d, 0, "secret_key_sealed");
        if (sk >= 0 && json_type(&d, sk) == JSON_STRING) {
            struct buf t;
            buf_init(&t, BUF_UNLIMITED);
            if (json_get_str(&d, sk, &t, &err) == 0) {
                out->secret_sealed = xstrndup(t.data, t.len);
            }
            buf_free(&t);
        } else {
            out->secret_sealed = json_text(&d, sk, JSON_OBJECT);
        }
        ok = out->config != NULL;
        if (!ok) {
            free(out->secret_sealed);
        }
    }
    json_doc_free(&d);
    return ok;
}

/* Every px.s3sinks row, as the proxy tenant, from this node's store, in
 * pages of HOST_CP_PAGE. */
static int host_read_rows(struct sink_host *h, struct host_row **out,
                          size_t *n_out, struct err *err)
{
    struct buf after;
    struct host_row *rows = NULL;
    size_t n = 0;
    int rc = 0;

    buf_init(&after, BUF_UNLIMITED);
    for (;;) {
        struct kv_op op;
        struct kv_answer ans;
        struct timespec ts;

        memset(&op, 0, sizeof(op));
        op.op = KV_GET_PREFIX;
        op.ns = SLICE_LIT(CP_NS_S3SINKS);
        op.prefix = SLICE_LIT("#");
        op.after = buf_slice(&after);
        op.limit = HOST_CP_PAGE;
        struct kv_batch b = {CP_PROXY_TENANT, &op, 1};
        clock_gettime(CLOCK_REALTIME, &ts);
        memset(&ans, 0, sizeof(ans));
        rc = store_kv_read(h->store, &b,
                           (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000,
                           &ans, err);
        if (rc == 0 && ans.status != 0) {
            rc = err_set(err, ans.status, "%s", ans.msg);
        }
        if (rc != 0) {
            kv_answer_free(&ans);
            break;
        }
        const struct kv_result *r = &ans.results[0];
        for (size_t i = 0; i < r->n_rows; i++) {
            rows = xrealloc(rows, (n + 1) * sizeof(*rows));
            if (host_row_parse(r->rows[i].value, &rows[n])) {
                n++;
            }
        }
        bool more = r->has_next_after && r->n_rows > 0;
        buf_reset(&after);
        if (more) {
            buf_append(&after, r->next_after.ptr, r->next_after.len, err);
        }
        kv_answer_free(&ans);
        if (!more) {
            break;
        }
    }
    buf_free(&after);
    if (rc != 0) {
        host_rows_free(rows, n);
        return rc;
    }
    *out = rows;
    *n_out = n;
    return 0;
}

static void tunit_free(struct tunit *u)
{
    if (u == NULL) {
        return;
    }
    sink_free(u->sink); /* drops its tenant's series */
    s3_client_free(u->c.s3);
    s3_curl_free(u->c.curl);
    if (u->has_cfg) {
        explicit_bzero(u->cfg.secret_key, sizeof(u->cfg.secret_key));
        sink_config_free(&u->cfg);
    }
    free(u);
}

/* Build u's sink from row r: open the secret, load the document, make
 * the client and the sink. 0, or an error in u->error. */
static int host_build(struct sink_host *h, struct tunit *u,
                      const struct host_row *r)
{
    static const char *names[3] = {"endpoint", "bucket", "prefix"};
    struct buf secret;
    struct buf msg;
    struct err err = {0};
    int rc = -1;

    buf_init(&secret, BUF_UNLIMITED);
    buf_init(&msg, BUF_UNLIMITED);
    /* room for any secret at once: a buffer that grew would leave copies
     * of it behind in freed memory */
    buf_reserve(&secret, HOST_SECRET_ROOM, &err);
    if (!h->has_key || r->secret_sealed == NULL ||
        aead_open(h->key, (const uint8_t *)r->secret_sealed,
                  strlen(r->secret_sealed), &secret, &err) != 0) {
        snprintf(u->error, sizeof(u->error), "%s", HOST_SECRET_ERROR);
    } else if (buf_append(&secret, "", 1, &err) != 0 ||
               sink_config_from_doc(
                   &u->cfg, u->tenant_text,
                   (struct slice){r->config, strlen(r->config)}, secret.data,
                   &msg, &err) != 0) {
        snprintf(u->error, sizeof(u->error), "%s",
                 msg.len > 0 ? msg.data : err.msg);
    } else {
        u->has_cfg = true;
        rc = host_s3_client(&h->node, &u->cfg, names, &u->c, &err);
        if (rc != 0) {
            snprintf(u->error, sizeof(u->error), "%s", err.msg);
        }
    }
    if (secret.data != NULL) {
        explicit_bzero(secret.data, secret.cap);
    }
    buf_free(&secret);
    buf_free(&msg);
    if (rc == 0) {
        struct sink_params p;

        memset(&p, 0, sizeof(p));
        p.cfg = &u->cfg;
        p.node = &h->node;
        memcpy(p.tenant, u->tenant, 16);
        p.tenant_text = u->tenant_text;
        p.broker = &h->broker;
        p.s3 = u->c.s3;
        p.pool = h->pool;
        p.metrics_tenant = u->tenant_text;
        u->sink = sink_new(&p);
    }
    return rc;
}

/* A unit fresh for row r (no sink yet). */
static struct tunit *tunit_new(const struct host_row *r)
{
    struct tunit *u = xcalloc(1, sizeof(*u));

    memcpy(u->tenant, r->r.broker_tenant, 16);
    uuid7_format(u->tenant, u->tenant_text);
    snprintf(u->cluster, sizeof(u->cluster), "%s", r->r.cluster_id);
    u->logged_fingerprint = -1;
    return u;
}

/* Under h->mu: unit u out of the list (the caller frees it). */
static void host_unit_remove(struct sink_host *h, const struct tunit *u)
{
    for (size_t i = 0; i < h->n_units; i++) {
        if (h->units[i] == u) {
            memmove(&h->units[i], &h->units[i + 1],
                    (h->n_units - i - 1) * sizeof(struct tunit *));
            h->n_units--;
            return;
        }
    }
}

/* The boot line of docs/design/config.md §6 for a control-plane sink
 * (never the secret), with its cluster. */
static void host_unit_boot_line(const struct sink_host *h,
                                const struct tunit *u)
{
    host_boot_log(&u->cfg, &h->node, u->tenant_text,
                  "started the control plane's sink for a tenant", u->cluster);
}

/* The error of u is logged once per row and sentence. */
static void host_unit_error_log(struct tunit *u)
{
    if (u->logged_fingerprint == u->fingerprint &&
        strcmp(u->logged_error, u->error) == 0) {
        return;
    }
    log_error_kv("queen-s3",
                 "the control plane's sink for this tenant cannot be started",
                 {"tenant", u->tenant_text}, {"cluster", u->cluster},
                 {"error", u->error});
    memcpy(u->logged_error, u->error, sizeof(u->logged_error));
    u->logged_fingerprint = u->fingerprint;
}

/* Start (or retry) the tenant of row r: old is its unit in error, or NULL. */
static void host_start(struct sink_host *h, const struct host_row *r,
                       struct tunit *old)
{
    struct tunit *u = tunit_new(r);
    struct err err = {0};

    u->fingerprint = r->r.updated_at_us;
    if (old != NULL) { /* what was logged carries over */
        memcpy(u->logged_error, old->logged_error, sizeof(u->logged_error));
        u->logged_fingerprint = old->logged_fingerprint;
    }
    if (host_build(h, u, r) != 0) {
        u->state = UNIT_ERROR;
        host_unit_error_log(u);
    }
    pthread_mutex_lock(&h->mu);
    if (h->is_stopping) {
        pthread_mutex_unlock(&h->mu);
        tunit_free(u);
        return;
    }
    if (old != NULL) {
        host_unit_remove(h, old);
    }
    if (u->state == UNIT_RUNNING && sink_start(u->sink, &err) != 0) {
        log_error("queen-s3", "cannot start a tenant's S3 sink: %s", err.msg);
    }
    if (u->state == UNIT_RUNNING) {
        host_unit_boot_line(h, u);
    }
    h->units = xrealloc(h->units, (h->n_units + 1) * sizeof(struct tunit *));
    h->units[h->n_units++] = u;
    qsort(h->units, h->n_units, sizeof(struct tunit *), by_tenant);
    pthread_mutex_unlock(&h->mu);
    tunit_free(old);
}

/* Drain u (its entry and series go once the drain is over). */
static void host_drain(struct sink_host *h, struct tunit *u, const char *why)
{
    pthread_mutex_lock(&h->mu);
    u->state = UNIT_DRAINING;
    pthread_mutex_unlock(&h->mu);
    log_info_kv("queen-s3", why, {"tenant", u->tenant_text},
                {"cluster", u->cluster});
    sink_stop(u->sink);
}

static void host_apply(struct sink_host *h, const struct host_row *rows,
                       struct tunit **units, const struct reconcile_action *a)
{
    struct tunit *u = a->unit == SIZE_MAX ? NULL : units[a->unit];

    switch (a->kind) {
    case RECONCILE_START:
        if (rows != NULL) {
            host_start(h, &rows[a->row], u);
        }
        break;
    case RECONCILE_REBUILD:
        if (u == NULL) {
            break;
        }
        host_drain(h, u,
                   "the control plane's sink row changed: draining the "
                   "tenant's sink to rebuild it");
        break;
    case RECONCILE_STOP:
        if (u == NULL) {
            break;
        }
        host_drain(h, u,
                   "the control plane's sink row is gone, disabled or "
                   "suspended: stopping the tenant's sink");
        break;
    case RECONCILE_DROP:
        pthread_mutex_lock(&h->mu);
        host_unit_remove(h, u);
        pthread_mutex_unlock(&h->mu);
        tunit_free(u);
        break;
    }
}

static int64_t host_mono_ms(void)
{
    return host_now_ms();
}

/* A failed read: keep what runs, say so (the warning at most once a
 * minute), and show it in controlPlane.error. */
static void host_read_failed(struct sink_host *h, const char *why)
{
    uint64_t suppressed = 0;

    if (obs_sampler_tick(&h->read_warn, host_mono_ms(), &suppressed)) {
        log_warn_kv("queen-s3",
                    "cannot read the control plane's S3 sink rows; the running "
                    "sinks are kept",
                    {"error", why}, {"suppressed", LOG_U64(suppressed)});
    }
    pthread_mutex_lock(&h->mu);
    snprintf(h->cp_error, sizeof(h->cp_error), "%s", why);
    pthread_mutex_unlock(&h->mu);
}

/* One round: read the rows and the clusters, decide, act. */
static void host_round(struct sink_host *h)
{
    struct host_row *rows = NULL;
    size_t n_rows = 0;
    struct cp_cluster *clusters = NULL;
    size_t n_clusters = 0;
    struct err err = {0};

    if (host_read_rows(h, &rows, &n_rows, &err) != 0 ||
        cp_cluster_list(h->store, &clusters, &n_clusters, &err) != 0) {
        host_read_failed(h, err.msg);
        host_rows_free(rows, n_rows);
        free(clusters);
        return;
    }
    struct reconcile_row *rr = xcalloc(n_rows + 1, sizeof(*rr));
    for (size_t i = 0; i < n_rows; i++) {
        rr[i] = rows[i].r;
    }
    pthread_mutex_lock(&h->mu);
    h->cp_error[0] = '\0';
    size_t n_units = h->n_units;
    struct tunit **units = xcalloc(n_units + 1, sizeof(struct tunit *));
    struct reconcile_unit *ru = xcalloc(n_units + 1, sizeof(*ru));
    for (size_t i = 0; i < n_units; i++) {
        units[i] = h->units[i];
        memcpy(ru[i].tenant, units[i]->tenant, 16);
        ru[i].fingerprint = units[i]->fingerprint;
        ru[i].state = units[i]->state;
    }
    pthread_mutex_unlock(&h->mu);
    struct reconcile_action *acts =
        xcalloc(n_rows + n_units + 1, sizeof(*acts));
    struct reconcile_in in = {rr, n_rows, clusters, n_clusters, ru, n_units};
    size_t n_acts = reconcile(&in, acts);
    for (size_t i = 0; i < n_acts; i++) {
        host_apply(h, rows, units, &acts[i]);
    }
    free(acts);
    free(ru);
    free(units);
    free(rr);
    free(clusters);
    host_rows_free(rows, n_rows);
}

/* Under h->mu, which it may drop: free the units whose drain is over.
 * True when one was. */
static bool host_reap(struct sink_host *h)
{
    bool any = false;

    for (size_t i = 0; i < h->n_units;) {
        struct tunit *u = h->units[i];

        if (u->state != UNIT_DRAINING || !sink_stopped(u->sink)) {
            i++;
            continue;
        }
        host_unit_remove(h, u);
        pthread_mutex_unlock(&h->mu);
        log_info_kv("queen-s3", "the tenant's sink has drained; dropped it",
                    {"tenant", u->tenant_text});
        tunit_free(u);
        pthread_mutex_lock(&h->mu);
        any = true;
    }
    return any;
}

static void *host_manager(void *arg)
{
    struct sink_host *h = arg;
    int64_t next_read = 0;

    pthread_mutex_lock(&h->mu);
    while (!h->is_stopping) {
        bool reaped = host_reap(h);
        int64_t now = host_mono_ms();

        if (h->is_stopping) {
            break;
        }
        if (now >= next_read || reaped) {
            pthread_mutex_unlock(&h->mu);
            host_round(h);
            pthread_mutex_lock(&h->mu);
            next_read = now + HOST_CP_PERIOD_MS;
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = (int64_t)ts.tv_nsec + (int64_t)HOST_CP_POLL_MS * 1000000;
        ts.tv_sec += (time_t)(ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- the stop --------------------------------------------------------------
 */

void sink_host_stop(struct sink_host *h)
{
    if (h == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    if (h->is_stopping) {
        pthread_mutex_unlock(&h->mu);
        return;
    }
    h->is_stopping = true;
    atomic_store(&h->stop_ms, host_now_ms());
    pthread_cond_broadcast(&h->cv);
    for (size_t i = 0; i < h->n_units; i++) {
        if (h->units[i]->sink != NULL) {
            sink_stop(h->units[i]->sink);
        }
    }
    pthread_mutex_unlock(&h->mu);
    if (h->has_env) {
        sink_stop(h->sink);
    }
}

bool sink_host_stopped(struct sink_host *h)
{
    if (h == NULL) {
        return true;
    }
    bool stopped = !h->has_env || sink_stopped(h->sink);

    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->n_units && stopped; i++) {
        stopped = h->units[i]->sink == NULL || sink_stopped(h->units[i]->sink);
    }
    pthread_mutex_unlock(&h->mu);
    return stopped;
}

int64_t sink_host_grace_left_ms(struct sink_host *h)
{
    int64_t left;

    if (h == NULL || !h->is_stopping) {
        return 0;
    }
    left = (int64_t)h->node.shutdown_grace_ms -
           (host_now_ms() - atomic_load(&h->stop_ms));
    return left > 0 ? left : 0;
}

size_t sink_host_undrained(struct sink_host *h)
{
    if (h == NULL || !h->is_started) {
        return 0;
    }
    size_t n = h->has_env ? sink_undrained(h->sink) : 0;

    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->n_units; i++) {
        if (h->units[i]->sink != NULL) {
            n += sink_undrained(h->units[i]->sink);
        }
    }
    pthread_mutex_unlock(&h->mu);
    return n;
}

bool sink_host_free(struct sink_host *h)
{
    if (h == NULL) {
        return true;
    }
    if (h->has_manager) { /* it ends at the stop, after its round */
        pthread_mutex_lock(&h->mu);
        h->is_stopping = true;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->manager, NULL);
        h->has_manager = false;
    }
    if (h->has_env && !h->is_started) {
        sink_stop(h->sink); /* no thread ever ran: stopped at once */
    }
    if (!sink_host_stopped(h)) {
        return false;
    }
    for (size_t i = 0; i < h->n_units; i++) {
        tunit_free(h->units[i]);
    }
    free(h->units);
    sink_free(h->sink);
    sink_pool_free(h->pool);
    s3_client_free(h->c.s3);
    s3_curl_free(h->c.curl);
    sink_config_free(&h->cfg);
    obs_sampler_destroy(&h->read_warn);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    explicit_bzero(h->key, sizeof(h->key));
    free(h);
    return true;
}
