/* The broker process: boot, run, and the SIGTERM sequence (see broker.h for
 * the drawing).
 *
 * Everything runs on one libuv loop: raft, the fsm's LMDB writes, the HTTP
 * server and the handlers. The only ordering rule that matters at shutdown
 * is libraft's: raft_close() while writes are in flight aborts, so the HTTP
 * side is drained first (no new proposals), then node_close() runs its
 * barrier and delay before closing raft. */
#include "broker/broker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "api/api.h"
#include "api/auth.h"
#include "api/cp.h"
#include "api/kv.h"
#include "base/env.h"
#include "base/log.h"
#include "broker/dirlock.h"
#include "broker/kv.h"
#include "broker/retention.h"
#include "broker/upgrade.h"
#include "cp/registry.h"
#include "http/router.h"
#include "http/server.h"
#include "http/tls.h"
#include "raft/node.h"
#include "sink/host.h"
#include "store/kv.h"
#include "store/store.h"
#include "store/store_warm.h"

enum broker_state {
    BROKER_RUNNING,
    BROKER_DRAINING_HTTP,
    BROKER_CLOSING_RAFT,
    BROKER_DONE
};

struct broker {
    const struct config *cfg;
    uv_loop_t loop;
    struct store *store;
    struct node *node;
    struct router *router;
    struct http_server *http;
    /* The control plane (api/cp.h): its own router and listener on
     * QUEEN_PROXY_PORT when QUEEN_PROXY_EMBEDDED=true, else NULL. */
    struct router *cp_router;
    struct http_server *cp_http;
    struct cp_api cp;
    uv_timer_t cp_gate;       /* refreshes cp/registry.h's gate table */
    uint64_t cp_gate_full_ms; /* loop time of its last forced re-read */
    int n_http_open;          /* listeners not yet closed at shutdown */
    struct tls_ctx *tls;      /* QUEEN_TLS_CERT/KEY; NULL for plain HTTP */
    struct auth auth;         /* QUEEN_AUTH_TOKENS; n == 0 without */
    struct api api;
    struct kv_service *kv;
    uv_timer_t kv_sweep;     /* the leader's KV expiry sweep */
    struct upgrade *upgrade; /* broker/upgrade.h: the storage format gate */
    /* the leader's retention passes (broker/retention.h) */
    struct retention *retention;
    struct sink_host *sink; /* NULL unless QUEEN_S3_EMBEDDED=true */
    uv_timer_t sink_wait;   /* polls the sink's drain after the HTTP one */
    uv_signal_t sigterm;
    uv_signal_t sigint;
    uv_signal_t sigusr2;   /* QUEEN_TEST_HOLD_LOOP_MS (tests only) */
    uv_timer_t hold_timer; /* its second hold */
    enum broker_state state;
    int dir_lock; /* broker/dirlock.h; -1 until taken */
};

/* mkdir -p for the data directory. */
static int broker_mkdirs(const char *path, struct err *err)
{
    char tmp[CONFIG_PATH_MAX];
    size_t n = strlen(path);

    if (n >= sizeof(tmp)) {
        return err_set(err, ERR_INVALID, "path too long: %s", path);
    }
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0') {
            continue;
        }
        tmp[i] = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
            return err_set(err, ERR_IO, "mkdir %s: %s", tmp, strerror(errno));
        }
        tmp[i] = path[i];
    }
    return 0;
}

static void broker_on_node_closed(void *arg)
{
    struct broker *b = arg;

    b->node = NULL;
    b->state = BROKER_DONE;
    uv_close((uv_handle_t *)&b->kv_sweep, NULL);
    uv_close((uv_handle_t *)&b->cp_gate, NULL);
    retention_close(b->retention);
    b->retention = NULL;
    upgrade_close(b->upgrade);
    b->upgrade = NULL;
    uv_close((uv_handle_t *)&b->sink_wait, NULL);
    uv_close((uv_handle_t *)&b->sigterm, NULL);
    uv_close((uv_handle_t *)&b->sigint, NULL);
    uv_close((uv_handle_t *)&b->sigusr2, NULL);
    uv_close((uv_handle_t *)&b->hold_timer, NULL);
    log_info("broker", "stopped");
}

/* docs/design/protocol.md §1: after the listener drained, wait what is left of
 * the sink's grace (raft stays up: the drain's commits are KV writes). */
static void broker_on_sink_wait(uv_timer_t *t)
{
    struct broker *b = t->data;

    if (!sink_host_stopped(b->sink) && sink_host_grace_left_ms(b->sink) > 0) {
        return;
    }
    uv_timer_stop(t);
    /* every queue that did not drain is named, then the one warning */
    if (sink_host_undrained(b->sink) > 0 || !sink_host_stopped(b->sink)) {
        log_warn("shutdown",
                 "the in-process S3 sink did not stop inside its grace "
                 "window; the next owner of its queues redoes the open "
                 "windows from their intents");
    }
    b->state = BROKER_CLOSING_RAFT;
    kv_service_close(b->kv); /* a late sink call is refused from here on */
    node_close(b->node, broker_on_node_closed, b);
}

static void broker_on_http_closed(void *arg)
{
    struct broker *b = arg;

    if (--b->n_http_open > 0) {
        return; /* the other listener still drains */
    }
    b->http = NULL;
    b->cp_http = NULL;
    uv_timer_start(&b->sink_wait, broker_on_sink_wait, 0, 20);
}

static void broker_on_signal(uv_signal_t *h, int signum)
{
    struct broker *b = h->data;

    if (b->state != BROKER_RUNNING) {
        return;
    }
    log_info("broker", "signal %d: stopping", signum);
    b->state = BROKER_DRAINING_HTTP;
    /* The sink drains before the listener (docs/design/protocol.md §1). */
    sink_host_stop(b->sink);
    http_server_stop_accepting(b->http);
    if (b->cp_http != NULL) {
        http_server_stop_accepting(b->cp_http);
    }
    api_stop(&b->api);
    b->n_http_open = b->cp_http != NULL ? 2 : 1;
    if (b->cp_http != NULL) {
        http_server_close(b->cp_http, broker_on_http_closed, b);
    }
    http_server_close(b->http, broker_on_http_closed, b);
}

/* Can this process listen on QUEEN_RAFT_LISTEN? 0, or the errno of the
 * socket, bind (with SO_REUSEADDR, as libuv binds) or listen that failed. */
static int broker_try_listen(const char *hostport)
{
    char host[CONFIG_ADDR_MAX];
    int port = 0;
    struct sockaddr_storage ss;
    socklen_t len;
    int fd;
    int one = 1;
    int e = 0;

    memset(&ss, 0, sizeof(ss));
    if (!env_parse_hostport(hostport, host, sizeof(host), &port)) {
        return 0;
    }
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        len = sizeof(*v4);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        len = sizeof(*v6);
    } else {
        return 0;
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return errno;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (const struct sockaddr *)&ss, len) != 0 ||
        listen(fd, 1) != 0) {
        e = errno;
    }
    close(fd);
    return e;
}

/* libraft reports a raft address it cannot listen on as a bare "I/O
 * error": after raft_start failed (no listener of its own is open then),
 * try the same listen to name the setting, the address and the cause. */
static void broker_explain_raft_start(const struct config *cfg, struct err *err)
{
    const char *set = getenv("QUEEN_RAFT_LISTEN");
    int e;

    if (strncmp(err->msg, "raft_start:", 11) != 0) {
        return;
    }
    e = broker_try_listen(cfg->raft_listen);
    if (e == 0) {
        return;
    }
    err_set(err, ERR_IO, "raft: cannot listen on %s (QUEEN_RAFT_LISTEN%s): %s",
            cfg->raft_listen,
            set != NULL && set[0] != '\0'
                ? ""
                : " unset: 127.0.0.1 on QUEEN_PORT+1000",
            strerror(e));
}

static int broker_open_node(struct broker *b, struct err *err)
{
    char dir[CONFIG_PATH_MAX + 16];
    struct node_config nc;

    if (broker_mkdirs(b->cfg->raft_dir, err) != 0 ||
        dirlock_take(b->cfg->raft_dir, &b->dir_lock, err) != 0 ||
        dirlock_check_id(b->cfg->raft_dir, b->cfg->node_id, err) != 0) {
        return err->code;
    }
    node_store_dir(b->cfg->raft_dir, dir, sizeof(dir));
    if (broker_mkdirs(dir, err) != 0 ||
        store_open(&b->store, dir, 0, err) != 0) {
        return err->code;
    }
    if (b->cfg->enc_key_set) {
        store_set_seal_key(b->store, b->cfg->enc_key); /* reads open */
    }
    memset(&nc, 0, sizeof(nc));
    b->kv = kv_service_new(b->store);
    nc.handlers[CMD_KV] = kv_service_apply;
    nc.handler_args[CMD_KV] = b->kv;
    nc.handlers[CMD_CONFIGURE] = api_configure_apply;
    nc.handlers[CMD_RETENTION] = retention_apply;
    nc.dir = b->cfg->raft_dir;
    nc.id = b->cfg->node_id;
    nc.raft_address = b->cfg->raft_advertise;
    nc.listen_address = b->cfg->raft_listen;
    nc.token = b->cfg->raft_token;
    for (size_t i = 0; i < b->cfg->n_peers; i++) {
        nc.peers[i].id = b->cfg->peers[i].id;
        nc.peers[i].raft_address = b->cfg->peers[i].raft;
    }
    nc.n_peers = b->cfg->n_peers;
    nc.segment_bytes = (size_t)b->cfg->raft_segment_mb << 20;
    nc.election_timeout_ms = (unsigned)b->cfg->raft_election_timeout_ms;
    nc.snapshot_threshold = (unsigned)b->cfg->raft_snapshot_threshold;
    nc.snapshot_trailing = (unsigned)b->cfg->raft_snapshot_trailing;
    nc.log_memory_bytes = b->cfg->raft_log_memory_mb << 20;
    if (node_start(&b->node, &b->loop, &nc, b->store, err) != 0) {
        broker_explain_raft_start(b->cfg, err);
        return err->code;
    }
    kv_service_attach(b->kv, b->node);
    /* After node_start, so its check of the space the raft log needs sees
     * none taken by this run's warmer (store_warm.h (2)); what an earlier
     * run's allocated ahead (at most STORE_WARM_AHEAD + a step) is already
     * in data.mdb, as its store is. */
    if (!store_warm_start(b->store,
                          STORE_WARM_FREE + 4 * (uint64_t)nc.segment_bytes)) {
        log_warn("broker", "could not start the store's warmer thread; "
                           "commits fault their new pages in themselves");
    }
    return 0;
}

static void broker_on_swept(void *arg, int status, const struct fsm_result *res,
                            const struct err *err)
{
    UNUSED(arg);
    UNUSED(res);
    if (status != 0) {
        log_debug("broker", "kv sweep: %s", err->msg);
    }
}

/* docs/design/http-api.md §7: the leader sweeps expired KV rows in steps of at
 * most KV_SWEEP_MAX, as commands, so every node removes the same rows. */
static void broker_on_kv_sweep(uv_timer_t *t)
{
    struct broker *b = t->data;
    struct buf cmd;
    struct err err = {0};
    int64_t oldest = 0;
    struct timespec ts;

    if (b->state != BROKER_RUNNING || node_role(b->node) != NODE_LEADER ||
        store_kv_oldest_expiry(b->store, &oldest, &err) != 0 || oldest == 0) {
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    if (oldest > (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000) {
        return;
    }
    buf_init(&cmd, BUF_UNLIMITED);
    if (cmd_begin(&cmd, CMD_KV, STORE_DEFAULT_TENANT, &err) == 0 &&
        kv_cmd_encode_sweep(&cmd, KV_SWEEP_MAX, &err) == 0 &&
        cmd_finish(&cmd, 0, &err) == 0 &&
        node_propose(b->node, CMD_KV, cmd.data, cmd.len, broker_on_swept, NULL,
                     &err) != 0) {
        log_debug("broker", "kv sweep: %s", err.msg);
    }
    buf_free(&cmd);
}

/* The sink's KV call (sink/host.h): kv_call_batch() on this node. */
static int broker_sink_kv(void *arg, const struct kv_batch *batch,
                          int timeout_ms, struct kv_answer *out,
                          struct err *err)
{
    return kv_call_batch(arg, batch, timeout_ms, out, err);
}

static int broker_open_cp(struct broker *b, struct err *err);

static void broker_on_listener_gone(void *arg)
{
    UNUSED(arg);
}

static int broker_open_http(struct broker *b, struct err *err)
{
    struct http_config hc;
    struct sink_host_kv sink_kv = {broker_sink_kv, b->kv};

    b->router = router_new();
    api_init(&b->api, &b->loop, b->store, b->node);
    b->api.self_id = b->cfg->node_id;
    for (size_t i = 0; i < b->cfg->n_peers; i++) {
        api_peer_remember(&b->api, b->cfg->peers[i].id, b->cfg->peers[i].http);
    }
    b->api.is_tenancy_header = b->cfg->tenancy_header;
    b->api.has_seal_key = b->cfg->enc_key_set; /* pushes seal */
    memcpy(b->api.seal_key, b->cfg->enc_key, sizeof(b->api.seal_key));
    b->api.is_sink_kv_writable = b->cfg->kv_unsafe_sink_writes;
    if (b->cfg->kv_unsafe_sink_writes) {
        log_warn("broker",
                 "QUEEN_KV_UNSAFE_SINK_WRITES is on: HTTP clients may write "
                 "the S3 sink's KV namespace %s (leases, intents, commit "
                 "pointers); for tests and repairs only",
                 API_KV_RESERVED_NS);
    }
    api_long_poll_limits(&b->api, (size_t)b->cfg->max_long_polls_per_conn,
                         (size_t)b->cfg->max_long_polls);
    if (config_open_tls(b->cfg, &b->tls, err) != 0 ||
        config_open_auth(b->cfg, &b->auth, err) != 0) {
        return err->code;
    }
    if (b->auth.n > 0) {
        router_set_guard(b->router, api_auth_guard, &b->auth);
        router_set_head_guard(b->router, api_auth_head_check);
    }
    if (api_routes(&b->api, b->router, err) != 0 ||
        api_kv_routes(&b->api, b->kv, b->router, err) != 0 ||
        sink_host_boot(&b->sink, b->store, &sink_kv, &b->api, err) != 0) {
        return err->code;
    }
    memset(&hc, 0, sizeof(hc));
    hc.bind_addr = b->cfg->bind_addr;
    hc.tls = b->tls;
    hc.port = b->cfg->port;
    if (b->auth.n > 0) { /* the router's guard, before a body is read */
        hc.head_check = router_head_check;
        hc.head_check_arg = b->router;
        hc.idle_needs_let_in = true;
    }
    hc.max_body_bytes = (size_t)b->cfg->max_body_bytes;
    hc.max_held_bytes = (size_t)b->cfg->max_held_body_bytes;
    hc.max_connections = (size_t)b->cfg->max_connections;
    if (http_server_start(&b->http, &b->loop, &hc, router_dispatch, b->router,
                          err) != 0) {
        /* a listen that failed: name the settings behind the address */
        if (err->code == ERR_IO) {
            err_wrap(err, "QUEEN_BIND_ADDR=%s QUEEN_PORT=%d", hc.bind_addr,
                     hc.port);
        }
        return err->code;
    }
    if (broker_open_cp(b, err) != 0) {
        /* The broker's listener is up: close it, or the loop that runs
         * the node's close would never end; without api.server the sink
         * starts no thread (sink/host.h). */
        http_server_close(b->http, broker_on_listener_gone, NULL);
        b->http = NULL;
        return err->code;
    }
    b->api.server = b->http;
    return 0;
}

/* The control plane's listener (docs/design/control-plane.md): the same
 * bind address, loop and server code, its own router with only /api/cp
 * routes behind the token guard. */
static int broker_open_cp(struct broker *b, struct err *err)
{
    struct http_config hc;
    struct cp_api_config cc;
    bool has_key = b->cfg->enc_key_set; /* parsed by broker/config.c */
    int rc;

    if (b->cfg->proxy_spool_dir[0] != '\0') {
        log_warn("broker",
                 "QUEEN_PROXY_SPOOL_DIR is set but unused: the proxy's "
                 "client data plane is not built, only its control plane");
    }
    if (!b->cfg->proxy_embedded) {
        return 0;
    }
    memset(&cc, 0, sizeof(cc));
    cc.token = b->cfg->cp_token;
    cc.is_tenant_header = b->cfg->proxy_tenant_header;
    cc.is_s3_embedded = b->sink != NULL;
    cc.seal_key = has_key ? b->cfg->enc_key : NULL;
    cc.is_crash_after_mark = b->cfg->cp_crash_after_mark;
    b->cp_router = router_new();
    rc = cp_api_routes(&b->cp, &b->api, b->kv, &cc, b->cp_router, err);
    if (rc != 0) {
        return rc;
    }
    memset(&hc, 0, sizeof(hc));
    hc.bind_addr = b->cfg->bind_addr;
    hc.tls = b->tls;
    hc.port = b->cfg->proxy_port;
    hc.max_body_bytes = (size_t)b->cfg->max_body_bytes;
    hc.max_held_bytes = (size_t)b->cfg->max_held_body_bytes;
    hc.max_connections = (size_t)b->cfg->max_connections;
    hc.head_check = router_head_check; /* the token before a body is read */
    hc.head_check_arg = b->cp_router;
    hc.idle_needs_let_in = true;
    if (http_server_start(&b->cp_http, &b->loop, &hc, router_dispatch,
                          b->cp_router, err) != 0) {
        if (err->code == ERR_IO) {
            err_wrap(err, "QUEEN_BIND_ADDR=%s QUEEN_PROXY_PORT=%d",
                     hc.bind_addr, hc.port);
        }
        return err->code;
    }
    log_info("broker",
             "control plane listening on %s:%d, token %s, tenant header %s, "
             "S3 secrets %s",
             hc.bind_addr, http_server_port(b->cp_http),
             b->cfg->cp_token[0] != '\0' ? "set" : "unset (every route 404)",
             b->cfg->proxy_tenant_header ? "on" : "off",
             has_key ? "sealed with QUEEN_ENCRYPTION_KEY"
                     : "refused (no QUEEN_ENCRYPTION_KEY)");
    return 0;
}

/* cp/registry.h (2): re-read the gate table when a proxy-tenant batch was
 * applied; every 10 s regardless, for rows a snapshot install replaced. */
static void broker_on_cp_gate(uv_timer_t *t)
{
    struct broker *b = t->data;
    struct err err;
    uint64_t now = uv_now(t->loop);
    bool force = now - b->cp_gate_full_ms >= 10000;

    if (force) {
        b->cp_gate_full_ms = now;
    }
    if (cp_gate_refresh(b->store, force, &err) != 0) {
        log_warn("broker", "control plane gate: %s", err.msg);
    }
}

/* The hold tests (QUEEN_TEST_HOLD_LOOP_MS): the loop held as one long
 * callback holds it, with the sockets unread meanwhile. */
static void broker_hold_loop(struct broker *b, const char *where)
{
    uint64_t ms = b->cfg->test_hold_loop_ms;
    uint64_t until = uv_hrtime() + ms * 1000000;

    log_warn_kv("broker", "test: holding the event loop", {"ms", LOG_U64(ms)},
                {"in", where});
    for (uint64_t now = uv_hrtime(); now < until; now = uv_hrtime()) {
        uint64_t left = until - now;
        struct timespec ts = {0, (long)(left < 1000000 ? left : 1000000)};

        nanosleep(&ts, NULL);
    }
}

static void broker_on_hold_timer(uv_timer_t *t)
{
    broker_hold_loop(t->data, "timers");
}

/* SIGUSR2 holds the loop twice: here (the poll phase), and again in the
 * next timers phase right after the timers that came due meanwhile (raft's
 * tick among them: they were due first), before the loop reads a socket. */
static void broker_on_hold_signal(uv_signal_t *h, int signum)
{
    struct broker *b = h->data;

    UNUSED(signum);
    broker_hold_loop(b, "poll");
    uv_update_time(&b->loop);
    uv_timer_start(&b->hold_timer, broker_on_hold_timer, 0, 0);
}

static void broker_signals(struct broker *b)
{
    uv_signal_init(&b->loop, &b->sigterm);
    uv_signal_init(&b->loop, &b->sigint);
    b->sigterm.data = b;
    b->sigint.data = b;
    uv_signal_start(&b->sigterm, broker_on_signal, SIGTERM);
    uv_signal_start(&b->sigint, broker_on_signal, SIGINT);
    uv_signal_init(&b->loop, &b->sigusr2);
    b->sigusr2.data = b;
    uv_timer_init(&b->loop, &b->hold_timer);
    b->hold_timer.data = b;
    if (b->cfg->test_hold_loop_ms > 0) {
        uv_signal_start(&b->sigusr2, broker_on_hold_signal, SIGUSR2);
    }
    uv_timer_init(&b->loop, &b->sink_wait);
    b->sink_wait.data = b;
}

/* A failed boot after node_start: close the node, run the loop until it
 * is gone. */
static void broker_abort_node(struct broker *b)
{
    if (b->node != NULL) {
        kv_service_close(b->kv);
        node_close(b->node, NULL, NULL);
        b->node = NULL;
    }
    uv_run(&b->loop, UV_RUN_DEFAULT);
}

int broker_run(const struct config *cfg, struct err *err)
{
    struct broker b;
    int rc;

    memset(&b, 0, sizeof(b));
    b.cfg = cfg;
    b.dir_lock = -1;
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&b.loop);
    rc = broker_open_node(&b, err);
    if (rc == 0) {
        rc = broker_open_http(&b, err);
    }
    if (rc != 0) {
        broker_abort_node(&b);
        goto out_close;
    }
    broker_signals(&b);
    uv_timer_init(&b.loop, &b.kv_sweep);
    b.kv_sweep.data = &b;
    uv_timer_start(&b.kv_sweep, broker_on_kv_sweep, 1000, 1000);
    uv_timer_init(&b.loop, &b.cp_gate);
    b.cp_gate.data = &b;
    uv_timer_start(&b.cp_gate, broker_on_cp_gate, 0, CP_GATE_REFRESH_MS);
    b.retention = retention_start(&b.loop, b.store, b.node, 0);
    b.upgrade = upgrade_start(&b.loop, b.store, b.node, b.kv, cfg->node_id);
    log_info("broker",
             "queen %s listening on %s:%d over %s, raft %s, data %s, body "
             "limit %zu, tenancy header %s, bearer tokens %zu",
             API_VERSION, cfg->bind_addr, http_server_port(b.http),
             b.tls != NULL ? "https" : "http", cfg->raft_listen, cfg->raft_dir,
             (size_t)cfg->max_body_bytes, cfg->tenancy_header ? "on" : "off",
             b.auth.n);
    uv_run(&b.loop, UV_RUN_DEFAULT);
    ASSERT(b.state == BROKER_DONE);
out_close:
    if (b.router != NULL) {
        api_free(&b.api);
        router_free(b.router);
    }
    if (b.cp_router != NULL) {
        cp_api_free(&b.cp);
        router_free(b.cp_router);
    }
    cp_gate_clear();
    api_kv_routes_free();
    auth_free(&b.auth);
    tls_ctx_free(b.tls); /* the server, its only user, is gone */
    store_warm_stop(b.store);
    /* A sink past its grace may still be inside a store read or kv_call_batch:
     * leave what it borrows to the process exit. */
    if (sink_host_free(b.sink)) {
        kv_service_free(b.kv);
        store_close(b.store);
        dirlock_release(b.dir_lock); /* else the exit drops it */
    }
    uv_loop_close(&b.loop);
    return rc;
}
