/* s3tool: a command line over the S3 client for Python tests and the
 * benchmark. Settings come from the environment (QUEEN_S3_ENDPOINT,
 * QUEEN_S3_REGION, QUEEN_S3_BUCKET, QUEEN_S3_ACCESS_KEY, QUEEN_S3_SECRET_KEY,
 * QUEEN_S3_PATH_STYLE, QUEEN_S3_SSE, QUEEN_S3_SSE_KMS_KEY_ID,
 * QUEEN_S3_MULTIPART_THRESHOLD_MB) plus test knobs: S3TOOL_MAX_ATTEMPTS,
 * S3TOOL_PART_CONCURRENCY, S3TOOL_RANDOM (a fixed jitter draw in
 * [0, 1)) and S3TOOL_PUT_TRIES (a put that fails is made again on the same
 * client, up to that many times in all; default 1). Every command prints
 * one JSON line with the outcome, the waits between attempts and the
 * request counters, and exits 0 on success, 1 on failure, 2 on bad usage.
 *
 *   s3tool put KEY FILE [CONTENT_TYPE]     s3tool get KEY OUTFILE
 *   s3tool multipart-put KEY FILE          s3tool head KEY
 *   s3tool list PREFIX [START_AFTER [MAX]] s3tool list-all PREFIX
 *   s3tool put-many PREFIX FILE...
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/json.h"
#include "base/xalloc.h"
#include "s3/client.h"
#include "s3/transport_curl.h"

#define MAX_WAITS 64

struct tool {
    struct s3_config cfg;
    struct s3_curl *curl;
    struct s3_transport t;
    struct s3_clock clock;
    struct s3_client *c;
    pthread_mutex_t mu;
    uint64_t waits[MAX_WAITS];
    size_t n_waits;
    double fixed_random; /* < 0: real draws */
    int put_tries;       /* puts of one put command, at least 1 */
};

static int64_t tool_now(void *arg)
{
    UNUSED(arg);
    return (int64_t)time(NULL);
}

static void tool_sleep(void *arg, uint64_t ms)
{
    struct tool *t = arg;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    pthread_mutex_lock(&t->mu);
    if (t->n_waits < MAX_WAITS) {
        t->waits[t->n_waits++] = ms;
    }
    pthread_mutex_unlock(&t->mu);
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static double tool_random(void *arg)
{
    struct tool *t = arg;

    if (t->fixed_random >= 0) {
        return t->fixed_random;
    }
    return (double)arc4random() / 4294967296.0;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);

    return v != NULL && v[0] != '\0' ? v : dflt;
}

static int read_settings(struct tool *t, struct err *err)
{
    const char *sse = env_or("QUEEN_S3_SSE", "");

    s3_config_defaults(&t->cfg);
    if (s3_endpoint_from_env(&t->cfg.ep, err) != 0) {
        return err->code;
    }
    snprintf(t->cfg.region, sizeof(t->cfg.region), "%s",
             env_or("QUEEN_S3_REGION", "us-east-1"));
    snprintf(t->cfg.access_key, sizeof(t->cfg.access_key), "%s",
             env_or("QUEEN_S3_ACCESS_KEY", ""));
    snprintf(t->cfg.secret_key, sizeof(t->cfg.secret_key), "%s",
             env_or("QUEEN_S3_SECRET_KEY", ""));
    if (strcasecmp(sse, "aes256") == 0) {
        t->cfg.sse = S3_SSE_AES256;
    } else if (strcasecmp(sse, "aws:kms") == 0 || strcasecmp(sse, "kms") == 0) {
        t->cfg.sse = S3_SSE_KMS;
        snprintf(t->cfg.kms_key_id, sizeof(t->cfg.kms_key_id), "%s",
                 env_or("QUEEN_S3_SSE_KMS_KEY_ID", ""));
    }
    t->cfg.multipart_threshold =
        strtoull(env_or("QUEEN_S3_MULTIPART_THRESHOLD_MB", "64"), NULL, 10)
        << 20;
    t->cfg.max_attempts = atoi(env_or("S3TOOL_MAX_ATTEMPTS", "6"));
    t->cfg.part_concurrency = atoi(env_or("S3TOOL_PART_CONCURRENCY", "2"));
    t->fixed_random = atof(env_or("S3TOOL_RANDOM", "-1"));
    t->put_tries = atoi(env_or("S3TOOL_PUT_TRIES", "1"));
    if (t->put_tries < 1) {
        t->put_tries = 1;
    }
    return 0;
}

static void tool_open(struct tool *t)
{
    pthread_mutex_init(&t->mu, NULL);
    t->curl = s3_curl_new(getenv("QUEEN_S3_CA_FILE"));
    t->t = s3_curl_transport(t->curl);
    t->clock = (struct s3_clock){tool_now, tool_sleep, tool_random, t, NULL};
    t->c = s3_client_new(&t->cfg, &t->t, &t->clock);
}

static void tool_close(struct tool *t)
{
    s3_client_free(t->c);
    s3_curl_free(t->curl);
    pthread_mutex_destroy(&t->mu);
}

static char *read_file(const char *path, size_t *len, struct err *err)
{
    FILE *f = fopen(path, "rb");
    long n;
    char *p;

    if (f == NULL) {
        err_set(err, ERR_IO, "open %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        err_set(err, ERR_IO, "seek %s: %s", path, strerror(errno));
        return NULL;
    }
    p = xmalloc((size_t)n + 1);
    if (fread(p, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(p);
        err_set(err, ERR_IO, "read %s: short read", path);
        return NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return p;
}

static const char *kind_name(enum s3_fail k)
{
    static const char *const names[] = {"none", "transport", "status", "body",
                                        "integrity"};

    return (size_t)k < ARRAY_LEN(names) ? names[k] : "?";
}

/* Append the shared tail: status, waits, counters, error; then print. */
static int emit(struct tool *t, struct jw *w, struct buf *b,
                const struct s3_status *st, int rc, const struct err *err)
{
    struct s3_metric_row rows[64];
    size_t n = s3_metrics_rows(s3_client_metrics(t->c), rows, 64);
    struct err e2 = {0};

    jw_key(w, "ok");
    jw_bool(w, rc == 0);
    if (st != NULL) {
        jw_key(w, "status");
        jw_i64(w, st->status);
        jw_key(w, "kind");
        jw_cstr(w, kind_name(st->kind));
        jw_key(w, "retriable");
        jw_bool(w, st->is_retriable);
        jw_key(w, "attempts");
        jw_i64(w, st->attempts);
        jw_key(w, "s3_code");
        jw_cstr(w, st->code);
    }
    jw_key(w, "error");
    if (rc == 0) {
        jw_null(w);
    } else {
        jw_cstr(w, err->msg);
    }
    jw_key(w, "waits_ms");
    jw_arr_begin(w);
    for (size_t i = 0; i < t->n_waits; i++) {
        jw_u64(w, t->waits[i]);
    }
    jw_arr_end(w);
    jw_key(w, "requests");
    jw_arr_begin(w);
    for (size_t i = 0; i < n && i < 64; i++) {
        jw_obj_begin(w);
        jw_key(w, "op");
        jw_cstr(w, s3_op_name(rows[i].op));
        jw_key(w, "code");
        jw_i64(w, rows[i].code);
        jw_key(w, "count");
        jw_u64(w, rows[i].count);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_obj_end(w);
    if (jw_finish(w, &e2) != 0) {
        fprintf(stderr, "s3tool: %s\n", e2.msg);
        return 1;
    }
    printf("%s\n", b->data);
    return rc == 0 ? 0 : 1;
}

static int cmd_put(struct tool *t, struct jw *w, struct buf *b, int argc,
                   char **argv)
{
    struct s3_put_result r;
    struct err err = {0};
    size_t len = 0;
    char *body;
    int rc;
    double t0;

    if (argc < 4) {
        return 2;
    }
    body = read_file(argv[3], &len, &err);
    if (body == NULL) {
        fprintf(stderr, "s3tool: %s\n", err.msg);
        return 2;
    }
    if (strcmp(argv[1], "multipart-put") == 0) {
        t->cfg.multipart_threshold = 0;
        s3_client_free(t->c);
        t->c = s3_client_new(&t->cfg, &t->t, &t->clock);
    }
    struct s3_put p = {
        argv[2], body, len,  argc > 4 ? argv[4] : "application/octet-stream",
        NULL,    NULL, NULL, NULL,
        NULL};
    t0 = now_ms();
    rc = s3_client_put(t->c, &p, &r, &err);
    for (int i = 1; rc != 0 && i < t->put_tries; i++) {
        err = (struct err){0};
        rc = s3_client_put(t->c, &p, &r, &err);
    }
    jw_key(w, "elapsed_ms");
    jw_double(w, now_ms() - t0);
    jw_key(w, "key");
    jw_cstr(w, argv[2]);
    jw_key(w, "bytes");
    jw_u64(w, len);
    jw_key(w, "etag");
    jw_cstr(w, r.etag);
    jw_key(w, "multipart");
    jw_bool(w, r.is_multipart);
    jw_key(w, "parts");
    jw_i64(w, r.parts);
    free(body);
    return emit(t, w, b, &r.st, rc, &err);
}

static int write_file(const char *path, const struct buf *body, struct err *err)
{
    FILE *f = fopen(path, "wb");

    if (f == NULL) {
        return err_set(err, ERR_IO, "open %s: %s", path, strerror(errno));
    }
    if (body->len > 0 && fwrite(body->data, 1, body->len, f) != body->len) {
        fclose(f);
        return err_set(err, ERR_IO, "write %s", path);
    }
    return fclose(f) == 0 ? 0 : err_set(err, ERR_IO, "close %s", path);
}

static int cmd_get_head(struct tool *t, struct jw *w, struct buf *b, int argc,
                        char **argv)
{
    bool is_get = strcmp(argv[1], "get") == 0;
    struct s3_object_info info;
    struct s3_status st;
    struct err err = {0};
    struct buf body;
    int rc;

    if (argc < (is_get ? 4 : 3)) {
        return 2;
    }
    buf_init(&body, (size_t)1 << 31);
    rc = is_get ? s3_client_get(t->c, argv[2], &body, &info, &st, &err)
                : s3_client_head(t->c, argv[2], &info, &st, &err);
    if (rc == 0 && is_get && info.found) {
        rc = write_file(argv[3], &body, &err);
    }
    jw_key(w, "key");
    jw_cstr(w, argv[2]);
    jw_key(w, "found");
    jw_bool(w, info.found);
    jw_key(w, "size");
    jw_u64(w, info.size);
    jw_key(w, "etag");
    jw_cstr(w, info.etag);
    buf_free(&body);
    return emit(t, w, b, &st, rc, &err);
}

static int cmd_list(struct tool *t, struct jw *w, struct buf *b, int argc,
                    char **argv)
{
    struct s3xml_list l;
    struct s3_status st;
    struct err err = {0};
    int rc;

    if (argc < 3) {
        return 2;
    }
    if (strcmp(argv[1], "list-all") == 0) {
        rc = s3_client_list_all(t->c, argv[2], 1000000, &l, &st, &err);
    } else {
        struct s3_list_req q = {argv[2], argc > 3 ? argv[3] : NULL,
                                argc > 4 ? atoi(argv[4]) : 1000};
        rc = s3_client_list_page(t->c, &q, &l, &st, &err);
    }
    jw_key(w, "keys");
    jw_arr_begin(w);
    for (size_t i = 0; rc == 0 && i < l.n_keys; i++) {
        jw_cstr(w, l.keys[i]);
    }
    jw_arr_end(w);
    jw_key(w, "truncated");
    jw_bool(w, rc == 0 && l.is_truncated);
    if (rc == 0) {
        s3xml_list_free(&l);
    }
    return emit(t, w, b, &st, rc, &err);
}

static int cmd_put_many(struct tool *t, struct jw *w, struct buf *b, int argc,
                        char **argv)
{
    struct err err = {0};
    struct s3_put_result r;
    uint64_t total = 0;
    int rc = 0;
    int n = 0;
    double t0;
    double ms = 0;

    memset(&r, 0, sizeof(r));
    for (int i = 3; i < argc && rc == 0; i++) {
        size_t len = 0;
        char key[1024];
        const char *base = strrchr(argv[i], '/');
        char *body = read_file(argv[i], &len, &err);

        if (body == NULL) {
            rc = err.code;
            break;
        }
        snprintf(key, sizeof(key), "%s%s", argv[2],
                 base != NULL ? base + 1 : argv[i]);
        struct s3_put p = {key,  body, len,  "application/octet-stream",
                           NULL, NULL, NULL, NULL,
                           NULL};
        t0 = now_ms(); /* reading the file is not timed */
        rc = s3_client_put(t->c, &p, &r, &err);
        ms += now_ms() - t0;
        total += len;
        n++;
        free(body);
    }
    jw_key(w, "objects");
    jw_i64(w, n);
    jw_key(w, "bytes");
    jw_u64(w, total);
    jw_key(w, "seconds");
    jw_double(w, ms / 1000.0);
    jw_key(w, "mb_per_s");
    jw_double(w, ms > 0 ? (double)total / 1048576.0 / (ms / 1000.0) : 0.0);
    return emit(t, w, b, &r.st, rc, &err);
}

int main(int argc, char **argv)
{
    static struct tool t;
    struct err err = {0};
    struct buf b;
    struct jw w;
    int rc = 2;

    if (argc < 2) {
        fprintf(stderr, "usage: s3tool put|multipart-put|get|head|"
                        "list|list-all|put-many ...\n");
        return 2;
    }
    if (read_settings(&t, &err) != 0) {
        fprintf(stderr, "s3tool: %s\n", err.msg);
        return 2;
    }
    tool_open(&t);
    buf_init(&b, BUF_UNLIMITED);
    jw_init(&w, &b);
    jw_obj_begin(&w);
    jw_key(&w, "cmd");
    jw_cstr(&w, argv[1]);
    if (strcmp(argv[1], "put") == 0 || strcmp(argv[1], "multipart-put") == 0) {
        rc = cmd_put(&t, &w, &b, argc, argv);
    } else if (strcmp(argv[1], "get") == 0 || strcmp(argv[1], "head") == 0) {
        rc = cmd_get_head(&t, &w, &b, argc, argv);
    } else if (strncmp(argv[1], "list", 4) == 0) {
        rc = cmd_list(&t, &w, &b, argc, argv);
    } else if (strcmp(argv[1], "put-many") == 0) {
        rc = cmd_put_many(&t, &w, &b, argc, argv);
    }
    if (rc == 2) {
        fprintf(stderr, "s3tool: bad usage of %s\n", argv[1]);
    }
    buf_free(&b);
    tool_close(&t);
    return rc;
}
