/* The broker glue of the embedded S3 sink (see host.h).
 *
 * The in-process seam is thin on purpose: the store's reads are plain C
 * calls safe from any thread, and the broker's KV call (struct sink_host_kv:
 * kv_call_batch(), passed in at boot) blocks the sink's thread until the
 * batch is applied on the loop, so the sink sees the same answers the HTTP
 * routes give without any JSON. */
#include "sink/host.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "api/api.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/uuid7.h"
#include "base/xalloc.h"
#include "s3/client.h"
#include "s3/transport_curl.h"
#include "sink/config.h"
#include "sink/sink.h"
#include "store/kv.h"
#include "store/store.h"

struct sink_host {
    struct store *store;
    struct sink_host_kv kv;
    struct sink_config cfg;
    struct sink_node_config node;
    char tenant_text[37];
    struct sink_broker broker;
    struct s3_curl *curl;
    struct s3_transport transport;
    struct s3_client *s3;
    struct sink *sink;
    struct api *api;
    uv_timer_t start_timer; /* starts the sink once the loop runs */
    bool is_started;
    bool is_stopping;
    /* The first stop's time (0 before), read by the sink's threads too:
     * the KV seam refuses calls once the grace is (nearly) used up. */
    _Atomic int64_t stop_ms;
};

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

    return store_fetch(h->store, tenant, reqs, n, ans, err);
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

static int host_status(void *arg, struct buf *out, struct err *err)
{
    struct sink_host *h = arg;
    struct status_node node;
    struct status_sink ss;

    if (buf_append_str(out, ",\"s3\":", err) != 0) {
        return err->code;
    }
    memset(&node, 0, sizeof(node));
    node.phase = h->is_stopping ? "stopped" : NULL; /* else the sink's */
    node.threads = h->node.threads;
    memset(&ss, 0, sizeof(ss));
    ss.tenant = h->tenant_text;
    ss.source = "env";
    return sink_status_render(h->sink, &node, &ss, out, err);
}

static int host_metrics(void *arg, struct buf *out, struct err *err)
{
    struct sink_host *h = arg;

    return sink_metrics(h->sink, out, err);
}

/* ---- boot ---------------------------------------------------------------- */

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);

    n = n < cap - 1 ? n : cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int host_s3(struct sink_host *h, struct err *err)
{
    const struct sink_config *c = &h->cfg;
    struct s3_config sc;

    s3_config_defaults(&sc);
    if (s3_endpoint_parse(&sc.ep, "QUEEN_S3_ENDPOINT", c->endpoint,
                          "QUEEN_S3_PREFIX", err) != 0 ||
        s3_endpoint_set_bucket(&sc.ep, "QUEEN_S3_BUCKET", c->bucket,
                               "QUEEN_S3_PREFIX", err) != 0) {
        return err->code;
    }
    sc.ep.path_style = c->path_style;
    copy_str(sc.region, sizeof(sc.region), c->region);
    copy_str(sc.access_key, sizeof(sc.access_key), c->access_key);
    copy_str(sc.secret_key, sizeof(sc.secret_key), c->secret_key);
    sc.sse = c->sse == SINK_SSE_KMS      ? S3_SSE_KMS
             : c->sse == SINK_SSE_AES256 ? S3_SSE_AES256
                                         : S3_SSE_NONE;
    copy_str(sc.kms_key_id, sizeof(sc.kms_key_id), c->sse_kms_key_id);
    sc.multipart_threshold = h->node.multipart_threshold_bytes;
    h->curl = s3_curl_new();
    h->transport = s3_curl_transport(h->curl);
    h->s3 = s3_client_new(&sc, &h->transport, NULL);
    return 0;
}

static void host_boot_logs(struct sink_host *h)
{
    struct buf line;
    struct err err = {0};

    buf_init(&line, BUF_UNLIMITED);
    sink_config_ignored_warning(&h->node, &line);
    if (line.len > 0) {
        log_warn("queen-s3", "%s", line.data);
    }
    if (h->node.crash_at != 0) {
        log_warn("queen-s3", "QUEEN_S3_CRASH_AT is set: this node aborts at "
                             "that point of the commit sequence");
    }
    buf_reset(&line);
    if (sink_config_boot_line(&h->cfg, &h->node, h->tenant_text, &line, &err) ==
        0) {
        log_info("queen-s3", "%s", line.data);
    }
    buf_free(&line);
}

static bool host_enabled(void)
{
    const char *v = getenv("QUEEN_S3_EMBEDDED");
    bool on = false;

    return v != NULL && sink_parse_bool(v, &on) && on;
}

static void host_on_timer_closed(uv_handle_t *t)
{
    UNUSED(t);
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
    if (sink_start(h->sink, &err) != 0) {
        log_error("queen-s3", "cannot start the S3 sink's threads: %s",
                  err.msg);
    }
}

int sink_host_boot(struct sink_host **out, struct store *store,
                   const struct sink_host_kv *kv, struct api *api,
                   struct err *err)
{
    struct sink_host *h;
    struct sink_params p;

    *out = NULL;
    if (!host_enabled()) {
        return 0;
    }
    h = xcalloc(1, sizeof(*h));
    if (sink_config_from_env(&h->cfg, &h->node, err) != 0) {
        log_error("boot", "FATAL: %s", h->node.fatal);
        exit(2);
    }
    if (host_s3(h, err) != 0) {
        log_error("boot", "FATAL: QUEEN_S3_EMBEDDED=true: %s", err->msg);
        exit(2);
    }
    log_info("queen-s3", "starting the S3 sink in-process");
    h->store = store;
    h->kv = *kv;
    uuid7_format(STORE_DEFAULT_TENANT, h->tenant_text);
    h->broker = (struct sink_broker){
        host_changed, host_fetch, host_kv, host_list_queues, h, host_safe_time};
    host_boot_logs(h);
    memset(&p, 0, sizeof(p));
    p.cfg = &h->cfg;
    p.node = &h->node;
    memcpy(p.tenant, STORE_DEFAULT_TENANT, 16);
    p.tenant_text = h->tenant_text;
    p.broker = &h->broker;
    p.s3 = h->s3;
    h->sink = sink_new(&p);
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

void sink_host_stop(struct sink_host *h)
{
    if (h == NULL || h->is_stopping) {
        return;
    }
    h->is_stopping = true;
    atomic_store(&h->stop_ms, host_now_ms());
    sink_stop(h->sink);
}

bool sink_host_stopped(struct sink_host *h)
{
    return h == NULL || sink_stopped(h->sink);
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
    return h == NULL || !h->is_started ? 0 : sink_undrained(h->sink);
}

bool sink_host_free(struct sink_host *h)
{
    if (h == NULL) {
        return true;
    }
    if (!h->is_started) {
        sink_stop(h->sink); /* no thread ever ran: stopped at once */
    }
    if (!sink_stopped(h->sink)) {
        return false;
    }
    sink_free(h->sink);
    s3_client_free(h->s3);
    s3_curl_free(h->curl);
    sink_config_free(&h->cfg);
    free(h);
    return true;
}
