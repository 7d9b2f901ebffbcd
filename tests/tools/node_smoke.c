/* node_smoke: start a single-voter node in DIR, push N records in pushes of
 * M items with P proposals in flight, close, restart on the same dir and
 * check that every record is there. Prints one line of figures (it is a
 * smoke tool, not a timed test).
 *
 *   node_smoke DIR [N=100000] [M=100] [P=32] [PAYLOAD_BYTES=100]
 *
 * Exit 0 when the restart reads back exactly N records with gapless offsets
 * and strictly increasing stamps per push; 1 otherwise. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "raft/cmd.h"
#include "raft/node.h"
#include "store/store.h"
#include "unit/node_helpers.h"

struct run {
    uv_loop_t loop;
    struct store *store;
    struct node *node;
    const char *dir;
    char address[32];
    long total, per_push, in_flight_max;
    long proposed, applied, failed, in_flight;
    int64_t last_stamp;
    bool stamps_ok;
    bool closed;
    char *payload;
    size_t payload_len;
};

static void on_closed(void *arg)
{
    ((struct run *)arg)->closed = true;
}

static void fill(struct run *r);

static void on_applied(void *arg, int status, const struct fsm_result *res,
                       const struct err *err)
{
    struct run *r = arg;

    r->in_flight--;
    if (status != 0) {
        fprintf(stderr, "node_smoke: apply: %s\n", err->msg);
        r->failed++;
        return;
    }
    if (res->stamp <= r->last_stamp) {
        r->stamps_ok = false;
    }
    r->last_stamp = res->stamp;
    r->applied += (long)res->n_items;
    fill(r);
}

/* Keep in_flight_max pushes proposed. */
static void fill(struct run *r)
{
    static struct cmd_push_item items[1000];
    static char txns[1000][32];
    struct err err = {0};
    struct buf b;

    buf_init(&b, BUF_UNLIMITED);
    while (r->in_flight < r->in_flight_max && r->proposed < r->total) {
        long n = r->per_push;

        for (long i = 0; i < n; i++) {
            int l = snprintf(txns[i], sizeof(txns[i]), "t%ld", r->proposed + i);

            memset(&items[i], 0, sizeof(items[i]));
            items[i].queue = SLICE_LIT("smoke");
            items[i].partition = SLICE_LIT("Default");
            items[i].txn = (struct slice){txns[i], (size_t)l};
            items[i].payload = (struct slice){r->payload, r->payload_len};
        }
        buf_reset(&b);
        if (cmd_push_encode(&b, STORE_DEFAULT_TENANT, items, (size_t)n, &err) !=
                0 ||
            node_propose(r->node, CMD_PUSH, b.data, b.len, on_applied, r,
                         &err) != 0) {
            fprintf(stderr, "node_smoke: propose: %s\n", err.msg);
            r->failed++;
            break;
        }
        r->proposed += n;
        r->in_flight++;
    }
    buf_free(&b);
}

static void start(struct run *r)
{
    struct node_config cfg;
    struct err err = {0};
    char sdir[4096];

    memset(&cfg, 0, sizeof(cfg));
    cfg.dir = r->dir;
    cfg.id = 1;
    cfg.raft_address = r->address;
    node_store_dir(r->dir, sdir, sizeof(sdir));
    mkdir(sdir, 0755);
    if (store_open(&r->store, sdir, 0, &err) != 0 ||
        node_start(&r->node, &r->loop, &cfg, r->store, &err) != 0) {
        fprintf(stderr, "node_smoke: start: %s\n", err.msg);
        exit(1);
    }
    for (double end = nh_now_s() + 10; node_role(r->node) != NODE_LEADER;) {
        if (nh_now_s() > end) {
            fprintf(stderr, "node_smoke: no leader within 10 s\n");
            exit(1);
        }
        uv_run(&r->loop, UV_RUN_ONCE);
    }
}

static void stop(struct run *r)
{
    r->closed = false;
    node_close(r->node, on_closed, r);
    while (!r->closed) {
        uv_run(&r->loop, UV_RUN_ONCE);
    }
    store_close(r->store);
}

static bool verify(struct run *r)
{
    struct store_fetch_req q = {SLICE_LIT("smoke"), SLICE_LIT("Default"), 0,
                                8 << 20, false};
    struct store_fetch_answer a;
    struct err err = {0};
    int64_t expect = 0;

    while (expect < r->total) {
        q.offset = expect;
        if (store_fetch(r->store, STORE_DEFAULT_TENANT, &q, 1, &a, &err) != 0 ||
            a.entries[0].n_records == 0) {
            store_fetch_answer_free(&a);
            break;
        }
        for (size_t i = 0; i < a.entries[0].n_records; i++) {
            if (a.entries[0].records[i].offset != expect++) {
                store_fetch_answer_free(&a);
                return false;
            }
        }
        store_fetch_answer_free(&a);
    }
    return expect == r->total;
}

int main(int argc, char **argv)
{
    struct run r;
    double t0;
    double dt;
    bool ok;

    if (argc < 2) {
        fprintf(stderr, "usage: node_smoke DIR [N] [M] [P] [PAYLOAD]\n");
        return 2;
    }
    memset(&r, 0, sizeof(r));
    r.dir = argv[1];
    r.total = argc > 2 ? atol(argv[2]) : 100000;
    r.per_push = argc > 3 ? atol(argv[3]) : 100;
    r.in_flight_max = argc > 4 ? atol(argv[4]) : 32;
    r.payload_len = argc > 5 ? (size_t)atol(argv[5]) : 100;
    if (r.per_push < 1 || r.per_push > 1000 || r.total % r.per_push != 0) {
        fprintf(stderr, "node_smoke: M must be 1..1000 and divide N\n");
        return 2;
    }
    r.payload = malloc(r.payload_len + 1);
    memset(r.payload, '7', r.payload_len);
    r.stamps_ok = true;
    snprintf(r.address, sizeof(r.address), "127.0.0.1:%d", nh_free_port());
    uv_loop_init(&r.loop);
    start(&r);
    t0 = nh_now_s();
    fill(&r);
    while (r.applied + r.failed * r.per_push < r.total && r.failed == 0) {
        uv_run(&r.loop, UV_RUN_ONCE);
    }
    dt = nh_now_s() - t0;
    stop(&r);
    start(&r);
    ok = r.failed == 0 && r.stamps_ok && verify(&r);
    stop(&r);
    uv_loop_close(&r.loop);
    printf("node_smoke: %ld records in pushes of %ld, %ld in flight, %zu B "
           "payloads: %.3f s, %.0f records/s, %.0f pushes/s, restart %s\n",
           r.total, r.per_push, r.in_flight_max, r.payload_len, dt,
           (double)r.applied / dt, (double)r.applied / dt / (double)r.per_push,
           ok ? "ok" : "MISMATCH");
    free(r.payload);
    return ok ? 0 : 1;
}
