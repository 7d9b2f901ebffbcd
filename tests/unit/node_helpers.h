/* Test helpers shared by test_node.c, test_snapshot.c and the node tools
 * (node_smoke, snapshot_bench): a monotonic clock, a free 127.0.0.1 port,
 * and a real single-voter libraft node on a libuv loop in a temp dir. */
#ifndef QUEEN_TESTS_NODE_HELPERS_H
#define QUEEN_TESTS_NODE_HELPERS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "raft/node.h"
#include "store/store.h"

/* Seconds on the monotonic clock. */
static inline double nh_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A port on 127.0.0.1 that was free a moment ago (the kernel's pick);
 * exits when no socket can be bound. */
static inline int nh_free_port(void)
{
    struct sockaddr_in a;
    socklen_t n = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &n) != 0) {
        perror("bind");
        exit(1);
    }
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* One node, its store and the loop it runs on. The caller owns it. */
struct node_rig {
    uv_loop_t loop;
    char dir[64];
    char store_dir[128];
    char address[32];
    struct store *store;
    struct node *node;
    bool closed;
};

/* Zero r, make its temp dir from tmpl ("/tmp/queen-x-XXXXXX"), pick a free
 * address and init its loop; exits when mkdtemp fails. */
static inline void nh_setup(struct node_rig *r, const char *tmpl)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->dir, sizeof(r->dir), "%s", tmpl);
    if (mkdtemp(r->dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(r->address, sizeof(r->address), "127.0.0.1:%d", nh_free_port());
    uv_loop_init(&r->loop);
}

/* Open the store (map_size bytes) in the node's store dir and start the node
 * as voter 1 of one with cfg's other settings; exits on failure. */
static inline void nh_start(struct node_rig *r, struct node_config *cfg,
                            uint64_t map_size)
{
    struct err err = {0};

    cfg->dir = r->dir;
    cfg->id = 1;
    cfg->raft_address = r->address;
    node_store_dir(r->dir, r->store_dir, sizeof(r->store_dir));
    mkdir(r->store_dir, 0755);
    if (store_open(&r->store, r->store_dir, map_size, &err) != 0 ||
        node_start(&r->node, &r->loop, cfg, r->store, &err) != 0) {
        fprintf(stderr, "start: %s\n", err.msg);
        exit(1);
    }
    r->closed = false;
}

/* Run loop until pred(arg) holds (true) or secs pass (false), pausing
 * pause_us between turns. */
static inline bool nh_run_until(uv_loop_t *loop, bool (*pred)(void *),
                                void *arg, double secs, unsigned pause_us)
{
    double end = nh_now_s() + secs;

    while (!pred(arg)) {
        if (nh_now_s() > end) {
            return false;
        }
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(pause_us);
    }
    return true;
}

static inline void nh_on_closed(void *arg)
{
    ((struct node_rig *)arg)->closed = true;
}

static inline bool nh_is_closed(void *arg)
{
    return ((struct node_rig *)arg)->closed;
}

/* Close the node, wait up to secs for it, and close the store; true when
 * the node closed in time. */
static inline bool nh_stop(struct node_rig *r, double secs)
{
    node_close(r->node, nh_on_closed, r);
    bool ok = nh_run_until(&r->loop, nh_is_closed, r, secs, 500);
    store_close(r->store);
    return ok;
}

#endif
