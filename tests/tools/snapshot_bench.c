/* snapshot_bench: how long a raft snapshot of a big store blocks the loop
 * thread, the legacy way (fsm version 1: mdb_env_copyfd2(MDB_CP_COMPACT) +
 * fsync + read back, all on the loop) beside the async way (raft/snapshot.h:
 * a read txn on the loop, the dump on a worker), on the same store in one
 * run, and what the node itself runs: the fsm's snapshot (the read txn, on
 * the loop) and its snapshot_async (since markers, raft/snapshot.h: a store
 * sync and a 20-byte marker, on a worker), whose worker CPU is the cost a
 * node pays per snapshot; "async" is the full dump a leader still makes for
 * a follower's InstallSnapshot.
 *
 *   snapshot_bench [--mb N] [--runs N] [--dir DIR]
 *
 * Fills a store of about N MB (default 300) through the real fsm, then for
 * each of `runs` rounds times both paths: wall and CPU seconds of what runs
 * on the loop thread, and of the worker's dump. Prints medians, the ratio,
 * and the load average (the machine is shared: figures are noisy). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "base/log.h"
#include "raft/snapshot.h"
#include "store/store_impl.h"
#include "store/store_snapshot.h"
#include "unit/node_helpers.h"
#include "unit/push_helpers.h"

#define MAX_RUNS 15

static double thread_cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Record j's payload: clickstream-like JSON of ~450-650 bytes (repeated
 * keys, enums, ids from pools, prices, a stamp moving forward), which
 * compresses about as event JSON does, not a run of one byte. */
static int event_payload(char *out, size_t cap, uint64_t j)
{
    static const char *const kinds[] = {"view", "click", "add_to_cart",
                                        "purchase", "search"};
    static const char *const devs[] = {"ios", "android", "web", "tv"};
    uint64_t x = j * 6364136223846793005ULL + 1442695040888963407ULL;
    int n;

    x ^= x >> 29;
    n = snprintf(
        out, cap,
        "{\"event\":\"%s\",\"user\":\"u-%06llu\",\"session\":"
        "\"s-%08llx\",\"device\":{\"os\":\"%s\",\"version\":\"%d.%d\"},"
        "\"ts\":\"2026-12-03T01:%02d:%02d.%03dZ\",\"items\":[",
        kinds[x % 5], (unsigned long long)(x >> 8) % 200000,
        (unsigned long long)(x >> 20) & 0xffffffffULL, devs[(x >> 3) % 4],
        (int)(x >> 40) % 20, (int)(x >> 45) % 10, (int)(j / 60000) % 60,
        (int)(j / 1000) % 60, (int)(j % 1000));
    for (int i = 0; i < 1 + (int)((x >> 50) % 4); i++) {
        n += snprintf(out + n, cap - (size_t)n,
                      "%s{\"sku\":\"sku-%05d\",\"qty\":%d,\"price\":%d.%02d,"
                      "\"category\":\"cat-%d\"}",
                      i ? "," : "", (int)((x >> (i * 7)) % 30000),
                      1 + (int)(x >> (i + 11)) % 5, (int)(x >> (i + 17)) % 500,
                      (int)(x >> (i + 23)) % 100, (int)(x >> (i + 31)) % 40);
    }
    n += snprintf(out + n, cap - (size_t)n,
                  "],\"referrer\":\"https://shop.example.com/c/%d\","
                  "\"campaign\":null,\"consent\":true}",
                  (int)(x >> 33) % 500);
    return n;
}

static void fill(struct env *e, int mb)
{
    static char payloads[100][1024];
    struct pitem items[100];
    char txns[100][32];
    uint64_t bytes = 0;
    uint64_t j = 0;

    for (int k = 0; bytes < (uint64_t)mb * 1000 * 1000; k++) {
        for (int i = 0; i < 100; i++, j++) {
            snprintf(txns[i], sizeof(txns[i]), "t%d-%d", k, i);
            bytes +=
                (uint64_t)event_payload(payloads[i], sizeof(payloads[i]), j);
            items[i] = (struct pitem){"big", i % 2 ? "p1" : "p0", txns[i],
                                      payloads[i]};
        }
        if (env_push(e, 1760000000000000LL + k, items, 100) == NULL) {
            fprintf(stderr, "fill: apply failed\n");
            exit(1);
        }
    }
}

/* The legacy path: sync + compact copy + fsync + read back, all blocking. */
static void legacy(struct store *s, double *wall, double *cpu)
{
    char path[256];
    struct err err = {0};
    struct stat st;
    double w0 = nh_now_s();
    double c0 = thread_cpu_s();
    FILE *f;
    char *b;

    snprintf(path, sizeof(path), "%s/bench.mdb.tmp", store_dir(s));
    if (store_copy_compact(s, path, &err) != 0 || stat(path, &st) != 0) {
        fprintf(stderr, "copy: %s\n", err.msg);
        exit(1);
    }
    b = malloc((size_t)st.st_size + 16);
    f = fopen(path, "rb");
    if (b == NULL || f == NULL ||
        fread(b + 16, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        fprintf(stderr, "read back failed\n");
        exit(1);
    }
    fclose(f);
    unlink(path);
    *wall = nh_now_s() - w0;
    *cpu = thread_cpu_s() - c0;
    free(b);
}

struct dump_arg {
    struct store_snap *sn;
    double wall;
    double cpu;
    size_t len;
};

static void *dump_main(void *p)
{
    struct dump_arg *a = p;
    struct err err = {0};
    uint8_t *out = NULL;
    double w0 = nh_now_s();
    double c0 = thread_cpu_s();

    if (store_snap_dump(a->sn, realloc, &out, &a->len, &err) != 0) {
        fprintf(stderr, "dump: %s\n", err.msg);
        exit(1);
    }
    a->wall = nh_now_s() - w0;
    a->cpu = thread_cpu_s() - c0;
    free(out);
    return NULL;
}

/* The async path: begin and end on this (the loop) thread, dump on another.
 * loop_* is what this thread spends; dump_* what the worker spends. */
static void async_path(struct store *s, double *loop_wall, double *loop_cpu,
                       struct dump_arg *d)
{
    struct err err = {0};
    double w0 = nh_now_s();
    double c0 = thread_cpu_s();
    double w1;
    double c1;
    pthread_t th;

    if (store_snap_begin(s, &d->sn, &err) != 0) {
        fprintf(stderr, "begin: %s\n", err.msg);
        exit(1);
    }
    w1 = nh_now_s() - w0;
    c1 = thread_cpu_s() - c0;
    pthread_create(&th, NULL, dump_main, d);
    pthread_join(th, NULL);
    w0 = nh_now_s();
    c0 = thread_cpu_s();
    store_snap_end(d->sn);
    *loop_wall = w1 + nh_now_s() - w0;
    *loop_cpu = c1 + thread_cpu_s() - c0;
}

struct node_arg {
    struct raft_fsm *rf;
    struct raft_buffer *bufs;
    unsigned n;
    double wall;
    double cpu;
};

/* CPU seconds of the whole process: snapshot_async hands the dump to a
 * thread of its own (nice 5) and waits for it. */
static double process_cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void *node_main(void *p)
{
    struct node_arg *a = p;
    double w0 = nh_now_s();
    double c0 = process_cpu_s();

    if (a->rf->snapshot_async(a->rf, &a->bufs, &a->n) != 0) {
        fprintf(stderr, "snapshot_async failed\n");
        exit(1);
    }
    a->wall = nh_now_s() - w0;
    a->cpu = process_cpu_s() - c0;
    return NULL;
}

/* The node's path: snapshot on this thread, snapshot_async (the store sync
 * and the marker) on a worker, finalize here. Returns the marker's size. */
static size_t node_path(struct env *e, struct node_arg *a)
{
    pthread_t th;
    size_t len;

    a->rf = &e->rfsm;
    if (a->rf->snapshot(a->rf, &a->bufs, &a->n) != 0) {
        fprintf(stderr, "snapshot failed\n");
        exit(1);
    }
    pthread_create(&th, NULL, node_main, a);
    pthread_join(th, NULL);
    len = a->bufs[0].len;
    a->rf->snapshot_finalize(a->rf, &a->bufs, &a->n);
    return len;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    struct env e = {0};
    int mb = 300;
    int runs = 3;
    double lw[MAX_RUNS] = {0};
    double lc[MAX_RUNS] = {0};
    double aw[MAX_RUNS] = {0};
    double ac[MAX_RUNS] = {0};
    double dw[MAX_RUNS] = {0};
    double dc[MAX_RUNS] = {0};
    double nw[MAX_RUNS] = {0};
    double nc[MAX_RUNS] = {0};
    size_t frame = 0;
    double load[3] = {0};
    size_t bytes = 0;
    double t0;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--mb") == 0) {
            mb = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--runs") == 0) {
            runs = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--dir") == 0) {
            snprintf(e.dir, sizeof(e.dir), "%s", argv[i + 1]);
        }
    }
    runs = runs < 1 ? 1 : runs > MAX_RUNS ? MAX_RUNS : runs;
    setvbuf(stdout, NULL, _IOLBF, 0);
    log_set_level(LOG_WARN);
    env_open(&e);
    t0 = nh_now_s();
    fill(&e, mb);
    printf("filled %d MB in %.1f s (%" PRIu64 " entries)\n", mb,
           nh_now_s() - t0, store_applied_index(e.store));
    for (int r = 0; r < runs; r++) {
        struct dump_arg d = {0};
        struct err err = {0};

        store_sync(e.store, &err);
        legacy(e.store, &lw[r], &lc[r]);
        store_sync(e.store, &err);
        async_path(e.store, &aw[r], &ac[r], &d);
        dw[r] = d.wall;
        dc[r] = d.cpu;
        bytes = d.len;
        struct node_arg na = {0};

        frame = node_path(&e, &na);
        nw[r] = na.wall;
        nc[r] = na.cpu;
        printf("run %d: legacy loop %.3f s wall %.3f s cpu | async loop "
               "%.6f s wall %.6f s cpu, worker %.3f s wall %.3f s cpu\n",
               r, lw[r], lc[r], aw[r], ac[r], dw[r], dc[r]);
        printf("run %d: node's snapshot_async (LZ4) %.3f s wall %.3f s cpu\n",
               r, nw[r], nc[r]);
    }
    getloadavg(load, 3);
    printf("store %d MB, snapshot %zu B, %d runs, load average %.2f %.2f "
           "%.2f\n",
           mb, bytes, runs, load[0], load[1], load[2]);
    printf("loop thread blocked (median): legacy %.3f s (%.3f cpu-s), async "
           "%.6f s (%.6f cpu-s): %.0fx less\n",
           median(lw, runs), median(lc, runs), median(aw, runs),
           median(ac, runs), median(lw, runs) / median(aw, runs));
    printf("worker (median): %.3f s wall, %.3f cpu-s; legacy total %.3f "
           "cpu-s\n",
           median(dw, runs), median(dc, runs), median(lc, runs));
    printf("node's snapshot_async, dump into LZ4 (median): %.3f s wall, %.3f "
           "cpu-s, "
           "frame %zu B (%.2f:1)\n",
           median(nw, runs), median(nc, runs), frame,
           frame ? (double)bytes / (double)frame : 0.0);
    env_close(&e);
    return 0;
}
