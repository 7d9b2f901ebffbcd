/* http_echo: a tiny server on the real HTTP stack, driven by
 * tests/integration/test_http.py.
 *
 *   http_echo [--port N] [--max-body BYTES] [--max-header BYTES]
 *             [--idle-ms MS] [--first-head-ms MS] [--max-conns N]
 *             [--max-held BYTES]
 *
 * Prints "listening <port>" on stdout once bound (port 0 picks a free one).
 * Routes:
 *   POST /echo            the body back, Content-Type application/octet-stream
 *   GET  /delay/:ms       "delay <ms>" after a uv timer of ms milliseconds
 *   GET  /kv/:ns/ *key    {"ns":<ns>,"key":<key>} (decoded; no space)
 *   GET  /inflight        the number of /delay requests not yet answered
 *   GET  /metrics         the router's and the server's Prometheus lines
 * SIGTERM or SIGINT: stop accepting, answer what is in flight, exit 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/json.h"
#include "base/xalloc.h"
#include "http/resp.h"
#include "http/router.h"
#include "http/server.h"

struct echo {
    uv_loop_t *loop;
    struct http_server *srv;
    struct router *router;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    int inflight;
};

struct delay {
    uv_timer_t timer;
    struct http_req *req;
    struct echo *e;
};

/* Zero copy: the request's body buffer becomes the answer's. */
static void on_echo(struct http_req *req, void *arg)
{
    struct buf body;
    size_t len;
    char *p;

    UNUSED(arg);
    http_req_take_body(req, &body);
    p = buf_steal(&body, &len);
    http_respond_take(req, 200, "application/octet-stream", p, len, NULL);
}

static void delay_closed(uv_handle_t *h)
{
    free(container_of(h, struct delay, timer));
}

static void delay_fire(uv_timer_t *t)
{
    struct delay *d = container_of(t, struct delay, timer);
    char body[64];
    int n =
        snprintf(body, sizeof(body), "delay %s", http_req_param(d->req, "ms"));

    d->e->inflight--;
    http_respond(d->req, 200, "text/plain", body, (size_t)n);
    uv_close((uv_handle_t *)t, delay_closed);
}

static void on_delay(struct http_req *req, void *arg)
{
    struct echo *e = arg;
    struct delay *d = xcalloc(1, sizeof(*d));

    d->req = req;
    d->e = e;
    e->inflight++;
    uv_timer_init(e->loop, &d->timer);
    uv_timer_start(&d->timer, delay_fire,
                   strtoull(http_req_param(req, "ms"), NULL, 10), 0);
}

static void on_kv(struct http_req *req, void *arg)
{
    struct buf b;
    struct jw w;
    struct slice ns;
    struct slice key;
    struct err err;

    UNUSED(arg);
    http_req_param_slice(req, "ns", &ns);
    http_req_param_slice(req, "key", &key);
    buf_init(&b, BUF_UNLIMITED);
    jw_init(&w, &b);
    jw_obj_begin(&w);
    jw_key(&w, "ns");
    jw_str(&w, ns.ptr, ns.len);
    jw_key(&w, "key");
    jw_str(&w, key.ptr, key.len);
    jw_obj_end(&w);
    jw_finish(&w, &err);
    http_respond_json(req, 200, &b);
}

static void on_inflight(struct http_req *req, void *arg)
{
    struct echo *e = arg;
    char body[32];
    int n = snprintf(body, sizeof(body), "%d", e->inflight);

    http_respond(req, 200, "text/plain", body, (size_t)n);
}

static void on_metrics(struct http_req *req, void *arg)
{
    struct echo *e = arg;
    struct buf b;
    struct err err;

    buf_init(&b, BUF_UNLIMITED);
    router_metrics(e->router, &b, &err);
    http_server_metrics(e->srv, &b, &err);
    http_respond(req, 200, "text/plain; version=0.0.4", b.data, b.len);
    buf_free(&b);
}

static void on_closed(void *arg)
{
    struct echo *e = arg;

    e->srv = NULL;
    uv_close((uv_handle_t *)&e->sigterm, NULL);
    uv_close((uv_handle_t *)&e->sigint, NULL);
    fprintf(stderr, "http_echo: closed\n");
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct echo *e = s->data;

    UNUSED(signum);
    if (e->srv != NULL) {
        uv_signal_stop(&e->sigterm);
        uv_signal_stop(&e->sigint);
        http_server_close(e->srv, on_closed, e);
    }
}

static int add_routes(struct echo *e, struct err *err)
{
    struct router *r = e->router;

    if (router_add(r, HTTP_METHOD_POST, "/echo", on_echo, e, err) ||
        router_add(r, HTTP_METHOD_GET, "/delay/:ms", on_delay, e, err) ||
        router_add(r, HTTP_METHOD_GET, "/kv/:ns/*key", on_kv, e, err) ||
        router_add(r, HTTP_METHOD_GET, "/inflight", on_inflight, e, err) ||
        router_add(r, HTTP_METHOD_GET, "/metrics", on_metrics, e, err)) {
        return err->code;
    }
    return 0;
}

static void parse_args(int argc, char **argv, struct http_config *cfg)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        unsigned long long v = strtoull(argv[i + 1], NULL, 10);

        if (strcmp(argv[i], "--port") == 0) {
            cfg->port = (int)v;
        } else if (strcmp(argv[i], "--max-body") == 0) {
            cfg->max_body_bytes = (size_t)v;
        } else if (strcmp(argv[i], "--max-conns") == 0) {
            cfg->max_connections = (size_t)v;
        } else if (strcmp(argv[i], "--idle-ms") == 0) {
            cfg->idle_timeout_ms = v;
        } else if (strcmp(argv[i], "--first-head-ms") == 0) {
            cfg->first_head_ms = v;
        } else if (strcmp(argv[i], "--max-held") == 0) {
            cfg->max_held_bytes = (size_t)v;
        } else if (strcmp(argv[i], "--max-header") == 0) {
            cfg->max_header_bytes = (size_t)v;
        } else {
            fprintf(stderr, "http_echo: unknown option %s\n", argv[i]);
            exit(2);
        }
    }
}

int main(int argc, char **argv)
{
    struct http_config cfg = {.bind_addr = "127.0.0.1"};
    struct echo e = {0};
    struct err err;

    parse_args(argc, argv, &cfg);
    e.loop = uv_default_loop();
    e.router = router_new();
    if (add_routes(&e, &err) != 0 ||
        http_server_start(&e.srv, e.loop, &cfg, router_dispatch, e.router,
                          &err) != 0) {
        fprintf(stderr, "http_echo: %s\n", err.msg);
        return 1;
    }
    uv_signal_init(e.loop, &e.sigterm);
    uv_signal_init(e.loop, &e.sigint);
    e.sigterm.data = e.sigint.data = &e;
    uv_signal_start(&e.sigterm, on_signal, SIGTERM);
    uv_signal_start(&e.sigint, on_signal, SIGINT);
    printf("listening %d\n", http_server_port(e.srv));
    fflush(stdout);
    uv_run(e.loop, UV_RUN_DEFAULT);
    router_free(e.router);
    uv_loop_close(e.loop);
    return 0;
}
