/* The S3 client: operations, multipart, retries and counters over a
 * transport seam.
 *
 * Every operation is described as a `struct call` (verb, key or bucket,
 * query, extra signed headers, body and its hash, and an optional check of
 * a 2xx answer) and handed to run(), the one retry loop: sign with the
 * clock's time, perform, count (op, status), classify, and either return or
 * wait and go again. A check failure inside the loop (an UploadId or part
 * ETag missing from a truncated answer) is retried like any other retriable
 * outcome (docs/design/protocol.md §7).
 *
 * Integrity rests on what the service checks before it stores a byte: the
 * signed x-amz-content-sha256 of every request and the Content-MD5 of a
 * single PUT. A single PUT's ETag is not compared with the body's MD5: under
 * SSE-KMS or SSE-C (asked for, or the bucket's default) AWS answers an
 * opaque 32-hex ETag that is no MD5, and a check would retry it forever.
 *
 * A CompleteMultipartUpload whose answer was lost after the service acted
 * on it is retried and then answers 404 NoSuchUpload. On that answer to a
 * retry the client HEADs the key and takes the object as completed when its
 * size is the body's and its ETag is the multipart ETag of our parts
 * (md5 of the part MD5s, "-N"; only "-N" where the part ETags are opaque).
 *
 * Multipart upload as a drawing (invariant (3) of client.h):
 *
 *     CREATE --UploadId--> PARTS --all ETags--> COMPLETE --200 ok--> done
 *        |                   |                     |
 *        +-> fail            +------ failure ------+--> ABORT -> fail
 *
 *   CREATE -> PARTS      multipart_put() after create_upload()
 *   PARTS -> COMPLETE    upload_parts(): part 1 alone, then
 *                        part_concurrency workers take part numbers in
 *                        order until all are in or one failed
 *   any -> ABORT         abort_upload(): one DELETE ?uploadId=, best effort
 */
#include "s3/client.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/log.h"
#include "base/sha256.h"
#include "base/xalloc.h"
#include "http/resp.h"
#include "s3/sigv4.h"

#define S3_MAX_LIST_ANSWER (8u << 20)

struct s3_client {
    struct s3_config cfg;
    struct s3_transport t;
    struct s3_clock clock;
    bool is_real_clock; /* waits end early at a stop */
    struct s3_metrics metrics;
    /* invariant (5): set once by s3_client_stop; waits sleep on cv */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic bool is_stopping;
    _Atomic int64_t deadline_ms;
    _Atomic bool has_answered; /* an attempt got an HTTP answer (2) */
    /* Keys whose CreateMultipartUpload may have left an upload that no put
     * of ours completed or aborted (its answer was lost, and the put did
     * not land): the next put of the key that lands lists and aborts what
     * is left there. Under mu; owned strings, oldest first. */
    char *orphan_keys[S3_MAX_ORPHAN_KEYS];
    int n_orphan_keys;
};

struct call;
/* Check a 2xx answer; returns S3_FAIL_NONE or the failure, with err set. */
typedef enum s3_fail (*check_fn)(struct call *k, struct err *err);

struct call {
    enum s3_op op;
    const char *method;
    const char *key; /* NULL: a bucket request */
    const struct sigv4_kv *query;
    size_t n_query;
    struct sigv4_kv extra[S3_MAX_HEADERS]; /* signed, beyond the three */
    size_t n_extra;
    const void *body;
    size_t body_len;
    char body_sha256[65];
    bool is_head;
    bool absent_ok;         /* 404 answers "absent", not an error */
    bool may_fail_in_200;   /* a 2xx may carry an <Error> document */
    bool is_not_idempotent; /* s3_http_request.is_fresh_connection */
    int max_attempts;
    check_fn check;
    void *check_arg;
    struct buf *answer; /* where the answer body goes */
    struct s3_http_answer ans;
    const struct s3_put *gate; /* asked before every attempt; NULL = none */
};

/* ---- the real clock -------------------------------------------------- */

static int64_t real_now_s(void *arg)
{
    UNUSED(arg);
    return (int64_t)time(NULL);
}

static void real_sleep_ms(void *arg, uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    UNUSED(arg);
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static double real_random(void *arg)
{
    UNUSED(arg);
    return (double)arc4random() / 4294967296.0;
}

static int64_t real_mono_ms(void *arg)
{
    struct timespec ts;

    UNUSED(arg);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const struct s3_clock real_clock = {real_now_s, real_sleep_ms,
                                           real_random, NULL, real_mono_ms};

void s3_config_defaults(struct s3_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->multipart_threshold = S3_MULTIPART_THRESHOLD;
    cfg->part_size = S3_PART_SIZE;
    cfg->part_concurrency = S3_PART_CONCURRENCY;
    cfg->max_attempts = S3_RETRY_ATTEMPTS;
    cfg->connect_timeout_ms = S3_CONNECT_TIMEOUT_MS;
    cfg->request_timeout_ms = S3_REQUEST_TIMEOUT_MS;
    cfg->log_area = "s3";
}

struct s3_client *s3_client_new(const struct s3_config *cfg,
                                const struct s3_transport *t,
                                const struct s3_clock *clock)
{
    struct s3_client *c = xcalloc(1, sizeof(*c));

    c->cfg = *cfg;
    if (c->cfg.max_attempts < 1) {
        c->cfg.max_attempts = 1;
    }
    if (c->cfg.part_size == 0) {
        c->cfg.part_size = S3_PART_SIZE;
    }
    if (c->cfg.part_concurrency < 1) {
        c->cfg.part_concurrency = 1;
    }
    if (c->cfg.part_concurrency > S3_MAX_PART_CONCURRENCY) {
        c->cfg.part_concurrency = S3_MAX_PART_CONCURRENCY;
    }
    if (c->cfg.log_area == NULL) {
        c->cfg.log_area = "s3";
    }
    c->t = *t;
    c->clock = clock != NULL ? *clock : real_clock;
    if (c->clock.mono_ms == NULL) {
        c->clock.mono_ms = real_mono_ms;
    }
    c->is_real_clock = clock == NULL;
    s3_metrics_init(&c->metrics);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void s3_client_stop(struct s3_client *c, int64_t deadline_ms)
{
    pthread_mutex_lock(&c->mu);
    if (!atomic_load(&c->is_stopping)) {
        atomic_store(&c->deadline_ms, deadline_ms);
        atomic_store(&c->is_stopping, true);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Invariant (5): past the stop's deadline. */
static bool client_is_cut(void *arg)
{
    struct s3_client *c = arg;

    return atomic_load(&c->is_stopping) &&
           c->clock.mono_ms(c->clock.arg) >= atomic_load(&c->deadline_ms);
}

/* Wait ms before a retry; the real clock's wait ends at a stop. */
static void client_wait(struct s3_client *c, uint64_t ms)
{
    if (!c->is_real_clock) {
        c->clock.sleep_ms(c->clock.arg, ms);
        return;
    }
    int64_t until = real_mono_ms(NULL) + (int64_t)ms;
    struct timespec ts = {(time_t)(until / 1000),
                          (long)(until % 1000) * 1000000L};
    pthread_mutex_lock(&c->mu);
    while (!atomic_load(&c->is_stopping) && real_mono_ms(NULL) < until) {
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
}

void s3_client_free(struct s3_client *c)
{
    if (c == NULL) {
        return;
    }
    s3_metrics_free(&c->metrics);
    for (int i = 0; i < c->n_orphan_keys; i++) {
        free(c->orphan_keys[i]);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    memset(c->cfg.secret_key, 0, sizeof(c->cfg.secret_key));
    free(c);
}

struct s3_metrics *s3_client_metrics(struct s3_client *c)
{
    return &c->metrics;
}

/* ---- one attempt ------------------------------------------------------ */

static void call_init(struct call *k, enum s3_op op, const char *method,
                      const char *key, int max_attempts)
{
    memset(k, 0, sizeof(*k));
    k->op = op;
    k->method = method;
    k->key = key;
    k->max_attempts = max_attempts;
    strcpy(k->body_sha256, SIGV4_EMPTY_SHA256);
}

static void add_extra(struct call *k, const char *name, const char *value)
{
    ASSERT(k->n_extra < S3_MAX_HEADERS);
    k->extra[k->n_extra].name = name;
    k->extra[k->n_extra].value = value;
    k->n_extra++;
}

/* Invariant (5): a request sent while stopping ends by the deadline. */
static void client_cap_timeouts(struct s3_client *c,
                                struct s3_http_request *req)
{
    if (!atomic_load(&c->is_stopping)) {
        return;
    }
    int64_t left =
        atomic_load(&c->deadline_ms) - c->clock.mono_ms(c->clock.arg);
    left = left < 1 ? 1 : left;
    if (req->timeout_ms <= 0 || req->timeout_ms > left) {
        req->timeout_ms = (long)left;
    }
    if (req->connect_timeout_ms <= 0 || req->connect_timeout_ms > left) {
        req->connect_timeout_ms = (long)left;
    }
}

/* Sign and send once. Fills k->ans; returns the transport's code. */
static int send_once(struct s3_client *c, struct call *k, const char *path,
                     const char *host, const char *base, struct err *err)
{
    struct sigv4_kv h[S3_MAX_HEADERS + 3];
    const char *lines[S3_MAX_HEADERS + 4];
    struct buf lb;
    struct buf url;
    struct sigv4_out o;
    char date[17];
    size_t nh = 0;
    int rc;
    struct sigv4_key sk = {c->cfg.access_key, c->cfg.secret_key, c->cfg.region,
                           "s3"};

    sigv4_amz_date(c->clock.now_s(c->clock.arg), date);
    h[nh++] = (struct sigv4_kv){"host", host};
    h[nh++] = (struct sigv4_kv){"x-amz-date", date};
    h[nh++] = (struct sigv4_kv){"x-amz-content-sha256", k->body_sha256};
    for (size_t i = 0; i < k->n_extra; i++) {
        h[nh++] = k->extra[i];
    }
    struct sigv4_request r = {k->method, path, k->query, k->n_query, h, nh};
    sigv4_out_init(&o);
    buf_init(&lb, (size_t)64 * 1024);
    buf_init(&url, SIGV4_MAX_CANONICAL);
    rc = sigv4_sign(&r, &sk, &o, err);
    if (rc == 0) {
        rc = buf_printf(&url, err, "%s%s", base, o.uri.data);
    }
    /* Header lines in one buffer, split by NULs once it stops growing. */
    for (size_t i = 0; i < nh && rc == 0; i++) {
        rc = buf_printf(&lb, err, "%s%s: %s", i == 0 ? "" : "\n",
                        i == 0 ? "Host" : h[i].name, h[i].value);
    }
    if (rc == 0) {
        rc = buf_printf(&lb, err, "\nAuthorization: %s", o.authorization.data);
    }
    if (rc == 0) {
        size_t n = 0;
        lines[n++] = lb.data;
        for (size_t i = 0; i < lb.len; i++) {
            if (lb.data[i] == '\n') {
                lb.data[i] = '\0';
                lines[n++] = lb.data + i + 1;
            }
        }
        struct s3_http_request req = {k->method,
                                      url.data,
                                      lines,
                                      n,
                                      k->body,
                                      k->body_len,
                                      k->is_head,
                                      c->cfg.connect_timeout_ms,
                                      c->cfg.request_timeout_ms,
                                      client_is_cut,
                                      c,
                                      c->cfg.stall_timeout_ms,
                                      k->is_not_idempotent};
        client_cap_timeouts(c, &req);
        rc = c->t.perform(c->t.arg, &req, &k->ans, err);
    }
    sigv4_out_free(&o);
    buf_free(&lb);
    buf_free(&url);
    return rc;
}

static const char *key_or_bucket(const struct s3_client *c,
                                 const struct call *k)
{
    return k->key != NULL ? k->key : c->cfg.ep.bucket;
}

/* The reason phrase of a status (http/resp.h's table), "" for one it does
 * not name. */
static const char *status_reason(int status)
{
    const char *r = resp_reason(status);

    return strcmp(r, "Unknown") == 0 ? "" : r;
}

/* The first S3_BODY_QUOTE bytes of an answer body that is no S3 error
 * document (a proxy's HTML page, plain text), fit for one log line:
 * control bytes become spaces, surrounding blanks go, and a cut never
 * splits a UTF-8 sequence. */
#define S3_BODY_QUOTE 200

static void quote_body(const char *b, size_t n, char out[S3_BODY_QUOTE + 1])
{
    size_t o = 0;

    while (n > 0 && (unsigned char)*b <= ' ') {
        b++;
        n--;
    }
    for (size_t i = 0; i < n && o < S3_BODY_QUOTE; i++) {
        unsigned char ch = (unsigned char)b[i];
        char c = b[i];
        if (ch < 0x20 || ch == 0x7f) {
            c = ' ';
        }
        out[o++] = c;
    }
    if (o == S3_BODY_QUOTE && o < n) {
        /* back off a sequence the cut split (continuation bytes 10xxxxxx) */
        size_t j = o;
        while (j > 0 && ((unsigned char)out[j - 1] & 0xC0) == 0x80) {
            j--;
        }
        if (j > 0 && ((unsigned char)out[j - 1] & 0x80) != 0) {
            o = j - 1;
        }
    }
    while (o > 0 && out[o - 1] == ' ') {
        o--;
    }
    out[o] = '\0';
}

/* Turn a non-2xx answer into a status failure with the S3 code; without
 * one (a HEAD has no body; a proxy answers HTML), the status's reason
 * phrase and what the body said. */
static enum s3_fail status_failure(struct call *k, struct s3_status *st,
                                   struct err *err)
{
    struct buf code;
    struct buf msg;
    const char *b = k->answer->data == NULL ? "" : k->answer->data;
    const char *reason = status_reason(k->ans.status);
    char quoted[S3_BODY_QUOTE + 1];

    buf_init(&code, 256);
    buf_init(&msg, 1024);
    if (s3xml_error(b, k->answer->len, &code, &msg) && code.len > 0) {
        snprintf(st->code, sizeof(st->code), "%s", code.data);
        bool has_msg = msg.data != NULL && msg.data[0] != '\0';
        err_set(err, ERR_REMOTE, "status %d: %s%s%.180s", k->ans.status,
                code.data, has_msg ? ": " : "", has_msg ? msg.data : "");
    } else {
        quote_body(b, k->answer->len, quoted);
        err_set(err, ERR_REMOTE, "status %d%s%s%s%s", k->ans.status,
                reason[0] != '\0' ? " " : "", reason,
                quoted[0] != '\0' ? ": " : "", quoted);
    }
    buf_free(&code);
    buf_free(&msg);
    return S3_FAIL_STATUS;
}

/* One attempt: send, count, classify. Returns the failure kind; 404 with
 * absent_ok and success both return S3_FAIL_NONE. */
static enum s3_fail attempt(struct s3_client *c, struct call *k,
                            const char *const where[3], struct s3_status *st,
                            struct err *err)
{
    int rc;

    k->ans.status = 0;
    k->ans.body = k->answer;
    k->ans.etag[0] = '\0';
    k->ans.content_length = -1;
    k->ans.retry_after_ms = -1;
    k->ans.region[0] = '\0';
    k->ans.is_unresolved = false;
    k->ans.is_unreached = false;
    k->ans.is_untrusted = false;
    k->ans.is_silent = false;
    rc = send_once(c, k, where[0], where[1], where[2], err);
    if (rc == 0) {
        atomic_store(&c->has_answered, true);
    }
    s3_metrics_add(&c->metrics, k->op, rc == 0 ? k->ans.status : 0);
    st->attempts++;
    st->status = rc == 0 ? k->ans.status : 0;
    st->retry_after_ms = k->ans.retry_after_ms;
    st->code[0] = '\0';
    snprintf(st->region, sizeof(st->region), "%s",
             rc == 0 ? k->ans.region : "");
    st->is_unresolved = rc != 0 && k->ans.is_unresolved;
    st->is_unreached = rc != 0 && k->ans.is_unreached;
    st->is_silent = rc != 0 && k->ans.is_silent;
    st->is_untrusted = rc != 0 && k->ans.is_untrusted;
    if (rc == ERR_TOO_BIG || rc == ERR_INVALID) {
        return S3_FAIL_BODY; /* not retried: see run() */
    }
    if (rc != 0) {
        char msg[sizeof(err->msg)];
        snprintf(msg, sizeof(msg), "%s", err->msg);
        err_set(err, rc, "transport: %.200s", msg);
        return S3_FAIL_TRANSPORT;
    }
    if (k->ans.status == 404 && k->absent_ok) {
        return S3_FAIL_NONE;
    }
    if (k->ans.status < 200 || k->ans.status > 299 ||
        (k->may_fail_in_200 && k->answer->data != NULL &&
         s3xml_error(k->answer->data, k->answer->len, NULL, NULL))) {
        return status_failure(k, st, err);
    }
    return k->check != NULL ? k->check(k, err) : S3_FAIL_NONE;
}

/* Fill where[] = raw path, Host, base URL into the three buffers. */
static int locate(const struct s3_client *c, const struct call *k,
                  struct buf b[3], struct err *err)
{
    int rc = k->key != NULL
                 ? s3_endpoint_object_path(&c->cfg.ep, k->key, &b[0], err)
                 : s3_endpoint_bucket_path(&c->cfg.ep, &b[0], err);

    if (rc == 0) {
        rc = s3_endpoint_host(&c->cfg.ep, &b[1], err);
    }
    if (rc == 0) {
        rc = s3_endpoint_base_url(&c->cfg.ep, &b[2], err);
    }
    return rc;
}

static void log_retry(const struct s3_client *c, const struct call *k,
                      const char *what, int a, const struct err *err,
                      uint64_t wait)
{
    log_warn(c->cfg.log_area,
             "%s %s: attempt %d of %d: %s; retrying in %" PRIu64 " ms",
             k->method, what, a, k->max_attempts, err->msg, wait);
}

/* Invariant (2): an endpoint that never answered and cannot be reached, or
 * is reached and stays silent, is taken as a wrong one, when the caller
 * asked for that. */
static bool is_unreached_final(struct s3_client *c, const struct s3_status *st)
{
    return c->cfg.is_unreached_final && (st->is_unreached || st->is_silent) &&
           !atomic_load(&c->has_answered);
}

/* The retry loop (invariants (1) and (2) of client.h). */
static int run(struct s3_client *c, struct call *k, struct s3_status *st,
               struct err *err)
{
    struct buf b[3];
    const char *where[3];
    bool is_retrying = false;
    int rc = 0;

    memset(st, 0, sizeof(*st));
    for (int i = 0; i < 3; i++) {
        buf_init(&b[i], 8192);
    }
    if (locate(c, k, b, err) != 0) {
        rc = err_set(err, ERR_INVALID, "%s: key too long", k->method);
        goto out_free;
    }
    for (int i = 0; i < 3; i++) {
        where[i] = b[i].data;
    }
    for (int a = 1;; a++) {
        if (k->gate != NULL && k->gate->may_send != NULL &&
            k->gate->may_send(k->gate->gate_arg, err) != 0) {
            st->kind = S3_FAIL_TRANSPORT; /* nothing sent: status 0 */
            st->is_retriable = false;
            rc = err->code;
            break;
        }
        if (client_is_cut(c)) { /* invariant (5) */
            st->kind = S3_FAIL_TRANSPORT;
            st->status = 0;
            st->is_retriable = true;
            rc = err_set(err, ERR_TIMEOUT,
                         "%s %s: not sent: the process is stopping and its "
                         "shutdown grace is used up",
                         k->method, key_or_bucket(c, k));
            break;
        }
        enum s3_fail kind = attempt(c, k, where, st, err);

        st->kind = kind;
        if (kind == S3_FAIL_NONE) {
            break;
        }
        st->is_retriable = s3_retry_is_retriable(kind, st->status, st->code) &&
                           err->code != ERR_TOO_BIG &&
                           err->code != ERR_INVALID &&
                           !is_unreached_final(c, st);
        if (!st->is_retriable || a >= k->max_attempts ||
            atomic_load(&c->is_stopping)) {
            rc = err->code;
            break;
        }
        uint64_t wait = s3_retry_wait_ms(a, st->retry_after_ms,
                                         c->clock.random(c->clock.arg));
        log_retry(c, k, key_or_bucket(c, k), a, err, wait);
        if (!is_retrying && c->cfg.on_retrying != NULL) {
            is_retrying = true;
            c->cfg.on_retrying(c->cfg.on_retrying_arg, true);
        }
        client_wait(c, wait);
        if (atomic_load(&c->is_stopping)) {
            rc = err->code; /* the stop came during the wait */
            break;
        }
    }
out_free:
    for (int i = 0; i < 3; i++) {
        buf_free(&b[i]);
    }
    if (is_retrying) {
        c->cfg.on_retrying(c->cfg.on_retrying_arg, false);
    }
    return rc;
}

/* ---- single PUT ------------------------------------------------------- */

static void add_sse(const struct s3_client *c, struct call *k)
{
    if (c->cfg.sse == S3_SSE_AES256) {
        add_extra(k, "x-amz-server-side-encryption", "AES256");
    } else if (c->cfg.sse == S3_SSE_KMS) {
        add_extra(k, "x-amz-server-side-encryption", "aws:kms");
        if (c->cfg.kms_key_id[0] != '\0') {
            add_extra(k, "x-amz-server-side-encryption-aws-kms-key-id",
                      c->cfg.kms_key_id);
        }
    }
}

static void strip_quotes(const char *in, char *out, size_t cap)
{
    size_t n = strlen(in);

    if (n >= 2 && in[0] == '"' && in[n - 1] == '"') {
        in++;
        n -= 2;
    }
    snprintf(out, cap, "%.*s", (int)n, in);
}

static bool is_md5_shaped(const char *e)
{
    size_t n = strlen(e);

    if (n != 32) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = e[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
              (ch >= 'A' && ch <= 'F'))) {
            return false;
        }
    }
    return true;
}

static int single_put(struct s3_client *c, const struct s3_put *p,
                      struct s3_put_result *r, struct err *err)
{
    struct call k;
    struct buf md5_b64;
    struct buf answer;
    uint8_t d[32];
    int rc;

    call_init(&k, S3_OP_PUT, "PUT", p->key, c->cfg.max_attempts);
    if (p->sha256_hex != NULL && strlen(p->sha256_hex) == 64) {
        memcpy(k.body_sha256, p->sha256_hex, 65);
    } else {
        sha256(p->body, p->len, d);
        hex_lower(d, 32, k.body_sha256);
    }
    md5(p->body, p->len, d);
    buf_init(&md5_b64, 64);
    buf_init(&answer, S3_MAX_ANSWER);
    (void)base64_encode(d, 16, &md5_b64, err);
    add_extra(&k, "content-type", p->content_type);
    add_extra(&k, "content-md5", md5_b64.data);
    add_sse(c, &k);
    k.body = p->body;
    k.body_len = p->len;
    k.answer = &answer;
    k.gate = p;
    rc = run(c, &k, &r->st, err);
    if (rc == 0) {
        strip_quotes(k.ans.etag, r->etag, sizeof(r->etag));
    }
    buf_free(&md5_b64);
    buf_free(&answer);
    return rc;
}

/* ---- multipart -------------------------------------------------------- */

struct upload {
    const struct s3_put *p;
    char upload_id[1024];
    char **etags; /* one per part, quotes stripped */
    int n_parts;
    struct buf answer;
};

static enum s3_fail check_create(struct call *k, struct err *err)
{
    struct upload *u = k->check_arg;
    struct buf v;
    struct err e2 = {0};
    int rc;

    buf_init(&v, sizeof(u->upload_id) - 1);
    rc = s3xml_find(u->answer.data, u->answer.len, "UploadId", &v, &e2);
    if (rc != 0 || v.len == 0) {
        buf_free(&v);
        err_set(err, ERR_CORRUPT,
                "body: CreateMultipartUpload for %.150s answered no UploadId",
                k->key);
        return S3_FAIL_BODY;
    }
    snprintf(u->upload_id, sizeof(u->upload_id), "%s", v.data);
    buf_free(&v);
    return S3_FAIL_NONE;
}

static int create_upload(struct s3_client *c, struct upload *u,
                         struct s3_status *st, struct err *err)
{
    struct call k;
    struct sigv4_kv q[] = {{"uploads", ""}};

    call_init(&k, S3_OP_MULTIPART_CREATE, "POST", u->p->key,
              c->cfg.max_attempts);
    k.query = q;
    k.n_query = 1;
    add_extra(&k, "content-type", u->p->content_type);
    add_sse(c, &k);
    k.check = check_create;
    k.check_arg = u;
    k.is_not_idempotent = true;
    k.answer = &u->answer;
    k.gate = u->p;
    return run(c, &k, st, err);
}

struct part_check {
    int n;
    const char *key;
};

static enum s3_fail check_part(struct call *k, struct err *err)
{
    const struct part_check *pc = k->check_arg;

    if (k->ans.etag[0] == '\0') {
        err_set(err, ERR_CORRUPT, "body: part %d of %.150s answered no ETag",
                pc->n, pc->key);
        return S3_FAIL_BODY;
    }
    return S3_FAIL_NONE;
}

static int upload_part(struct s3_client *c, struct upload *u, int i,
                       struct s3_status *st, struct err *err)
{
    struct call k;
    char num[16];
    uint8_t d[32];
    uint64_t off = (uint64_t)i * c->cfg.part_size;
    uint64_t n =
        u->p->len - off < c->cfg.part_size ? u->p->len - off : c->cfg.part_size;
    struct part_check pc = {i + 1, u->p->key};
    struct buf answer;
    int rc;

    snprintf(num, sizeof(num), "%d", i + 1);
    struct sigv4_kv q[] = {{"partNumber", num}, {"uploadId", u->upload_id}};
    call_init(&k, S3_OP_MULTIPART_PART, "PUT", u->p->key, c->cfg.max_attempts);
    k.query = q;
    k.n_query = 2;
    k.body = (const char *)u->p->body + off;
    k.body_len = (size_t)n;
    sha256(k.body, k.body_len, d);
    hex_lower(d, 32, k.body_sha256);
    k.check = check_part;
    k.check_arg = &pc;
    buf_init(&answer, S3_MAX_ANSWER);
    k.answer = &answer;
    k.gate = u->p;
    rc = run(c, &k, st, err);
    buf_free(&answer);
    if (rc != 0) {
        return err_wrap(err, "part %d", i + 1);
    }
    u->etags[i] = xmalloc(256); /* each part owns its slot: no lock */
    strip_quotes(k.ans.etag, u->etags[i], 256);
    return 0;
}

/* Parts in flight at once: workers take the next part number under the
 * lock; the first failure stops new parts from starting and is the error
 * returned (invariant (3)). */
struct part_pool {
    struct s3_client *c;
    struct upload *u;
    pthread_mutex_t mu;
    int next;
    int rc;
    struct err err;
    struct s3_status st;
};

static void *part_worker(void *arg)
{
    struct part_pool *pp = arg;
    const struct s3_put *p = pp->u->p;

    for (;;) {
        struct s3_status st;
        struct err err = {0};
        int i;
        int rc;

        pthread_mutex_lock(&pp->mu);
        i = pp->rc == 0 && pp->next < pp->u->n_parts ? pp->next++ : -1;
        pthread_mutex_unlock(&pp->mu);
        if (i < 0) {
            return NULL;
        }
        if (i > 0 && p->between_parts != NULL) {
            p->between_parts(p->hook_arg, i);
        }
        rc = upload_part(pp->c, pp->u, i, &st, &err);
        pthread_mutex_lock(&pp->mu);
        if (rc != 0 && pp->rc == 0) {
            pp->rc = rc;
            pp->err = err;
        }
        if (rc != 0 || pp->rc == 0) {
            pp->st = st;
        }
        pthread_mutex_unlock(&pp->mu);
    }
}

static int upload_parts(struct s3_client *c, struct upload *u,
                        struct s3_status *st, struct err *err)
{
    struct part_pool pp = {c, u, PTHREAD_MUTEX_INITIALIZER, 1, 0, {0}, {0}};
    pthread_t th[S3_MAX_PART_CONCURRENCY];
    int rest = u->n_parts - 1;
    int n = c->cfg.part_concurrency < rest ? c->cfg.part_concurrency : rest;
    int started = 0;

    /* Part 1 goes up alone, so the hook before part 2 always finds exactly
     * one part stored (the mid_upload crash point, docs/design/protocol.md
     * §6.5). */
    if (upload_part(c, u, 0, st, err) != 0) {
        pthread_mutex_destroy(&pp.mu);
        return err->code;
    }
    pp.st = *st;
    for (int i = 1; i < n; i++) { /* this thread is worker 0 */
        if (pthread_create(&th[started], NULL, part_worker, &pp) == 0) {
            started++;
        }
    }
    part_worker(&pp);
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
    }
    pthread_mutex_destroy(&pp.mu);
    *st = pp.st;
    if (pp.rc != 0) {
        *err = pp.err;
    }
    return pp.rc;
}

static int append_xml_text(struct buf *b, const char *s, struct err *err)
{
    for (; *s != '\0'; s++) {
        int rc = *s == '&'   ? buf_append_str(b, "&amp;", err)
                 : *s == '<' ? buf_append_str(b, "&lt;", err)
                 : *s == '>' ? buf_append_str(b, "&gt;", err)
                             : buf_append_byte(b, *s, err);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static int complete_body(const struct upload *u, struct buf *x, struct err *err)
{
    int rc = buf_append_str(x, "<CompleteMultipartUpload>", err);

    for (int i = 0; i < u->n_parts && rc == 0; i++) {
        rc = buf_printf(x, err, "<Part><PartNumber>%d</PartNumber><ETag>\"",
                        i + 1);
        if (rc == 0) {
            rc = append_xml_text(x, u->etags[i], err);
        }
        if (rc == 0) {
            rc = buf_append_str(x, "\"</ETag></Part>", err);
        }
    }
    if (rc == 0) {
        rc = buf_append_str(x, "</CompleteMultipartUpload>", err);
    }
    return rc;
}

/* The final ETag's "-N" must count our parts; no suffix is not checked. */
static int check_final_etag(const struct upload *u, const char *etag,
                            struct s3_status *st, struct err *err)
{
    const char *dash = strrchr(etag, '-');
    char *end;
    long n;

    if (dash == NULL || dash[1] == '\0') {
        return 0;
    }
    n = strtol(dash + 1, &end, 10);
    if (*end != '\0' || n == u->n_parts) {
        return 0;
    }
    st->kind = S3_FAIL_INTEGRITY;
    st->is_retriable = true;
    return err_set(err, ERR_CORRUPT,
                   "integrity: %.120s: the service completed ETag %s for %d "
                   "parts",
                   u->p->key, etag, u->n_parts);
}

/* The 16 bytes of a part ETag that is_md5_shaped() accepted (32 hex digits,
 * either case), into out. */
static void md5_hex_decode(const char *e, uint8_t out[16])
{
    for (size_t j = 0; j < 16; j++) {
        int hi = hex_digit(e[2 * j]);
        int lo = hex_digit(e[2 * j + 1]);

        out[j] = (uint8_t)(hi * 16 + lo);
    }
}

/* The multipart ETag S3 gives parts with these ETags: hex(md5(the parts'
 * binary MD5s)) "-N", into out; false when a part ETag is not an MD5. */
static bool multipart_etag(const struct upload *u, char *out, size_t cap)
{
    uint8_t *all = xmalloc((size_t)u->n_parts * 16);
    uint8_t d[16];
    char hex[33];

    for (int i = 0; i < u->n_parts; i++) {
        if (!is_md5_shaped(u->etags[i])) {
            free(all);
            return false;
        }
        md5_hex_decode(u->etags[i], all + (size_t)i * 16);
    }
    md5(all, (size_t)u->n_parts * 16, d);
    free(all);
    hex_lower(d, 16, hex);
    snprintf(out, cap, "%s-%d", hex, u->n_parts);
    return true;
}

/* Whether what HEAD found at u's key is our object: our size, and our
 * multipart ETag (only its "-N" where the part ETags are opaque). */
static bool head_is_ours(const struct upload *u,
                         const struct s3_object_info *info)
{
    char want[64];
    char suffix[16];
    bool exact;
    size_t n = strlen(info->etag);
    size_t ns;

    if (!info->found || info->size != (uint64_t)u->p->len) {
        return false; /* before the ETag's md5 of every part's md5 */
    }
    exact = multipart_etag(u, want, sizeof(want));
    ns = (size_t)snprintf(suffix, sizeof(suffix), "-%d", u->n_parts);
    return exact ? strcasecmp(info->etag, want) == 0
                 : n > ns && strcmp(info->etag + n - ns, suffix) == 0;
}

/* After a retried Complete answered 404 NoSuchUpload: did an earlier attempt
 * complete it? HEAD the key; 0 with r->etag set when the object there has
 * our size and our multipart ETag, else the 404's error stays. */
static int complete_landed(struct s3_client *c, const struct upload *u,
                           struct s3_put_result *r, struct err *err)
{
    struct s3_object_info info;
    struct s3_status st;
    struct err e2 = {0};

    if (s3_client_head(c, u->p->key, &info, &st, &e2) != 0 ||
        !head_is_ours(u, &info)) {
        return err->code;
    }
    log_info(c->cfg.log_area,
             "CompleteMultipartUpload %s: the retry found no upload and the "
             "object complete (%zu bytes, ETag %s): an earlier attempt's "
             "answer was lost",
             u->p->key, u->p->len, info.etag);
    snprintf(r->etag, sizeof(r->etag), "%s", info.etag);
    r->st.kind = S3_FAIL_NONE;
    r->st.is_retriable = false;
    r->st.status = 200;
    r->st.code[0] = '\0';
    err->code = 0;
    err->msg[0] = '\0';
    return 0;
}

/* A Complete that answered 200 with no ETag (Ceph RGW 16.2 sends an empty
 * <ETag>): the final ETag check would have nothing to hold, so HEAD the key
 * and want our object there. A HEAD that fails fails the upload with its
 * status (retried as any failure, the same bytes to the same key); another
 * object there is an integrity failure, retried. */
static int complete_check_head(struct s3_client *c, const struct upload *u,
                               struct s3_put_result *r, struct err *err)
{
    struct s3_object_info info;

    if (s3_client_head(c, u->p->key, &info, &r->st, err) != 0) {
        return err->code;
    }
    if (!head_is_ours(u, &info)) {
        r->st.kind = S3_FAIL_INTEGRITY;
        r->st.is_retriable = true;
        return err_set(err, ERR_CORRUPT,
                       "integrity: %.120s: CompleteMultipartUpload answered no "
                       "ETag and HEAD finds %s (%" PRIu64
                       " bytes, ETag %.80s), "
                       "not our %d parts of %zu bytes",
                       u->p->key, info.found ? "an object" : "nothing",
                       info.size, info.etag, u->n_parts, u->p->len);
    }
    snprintf(r->etag, sizeof(r->etag), "%s", info.etag);
    return 0;
}

static int complete_upload(struct s3_client *c, struct upload *u,
                           struct s3_put_result *r, struct err *err)
{
    struct call k;
    struct sigv4_kv q[] = {{"uploadId", u->upload_id}};
    struct buf x;
    struct buf v;
    uint8_t d[32];
    int rc;

    buf_init(&x, BUF_UNLIMITED);
    buf_init(&v, S3XML_MAX_VALUE * 4);
    rc = complete_body(u, &x, err);
    call_init(&k, S3_OP_MULTIPART_COMPLETE, "POST", u->p->key,
              c->cfg.max_attempts);
    k.query = q;
    k.n_query = 1;
    add_extra(&k, "content-type", "application/xml");
    k.body = x.data;
    k.body_len = x.len;
    k.may_fail_in_200 = true;
    sha256(x.data, x.len, d);
    hex_lower(d, 32, k.body_sha256);
    k.answer = &u->answer;
    k.gate = u->p;
    if (rc == 0) {
        rc = run(c, &k, &r->st, err);
        if (rc != 0 && r->st.status == 404 && r->st.attempts > 1 &&
            strcmp(r->st.code, "NoSuchUpload") == 0) {
            buf_free(&x);
            buf_free(&v);
            return complete_landed(c, u, r, err);
        }
    }
    if (rc == 0) {
        if (s3xml_find(u->answer.data, u->answer.len, "ETag", &v, err) != 0) {
            buf_reset(&v);
        }
        s3xml_unquote(&v);
        snprintf(r->etag, sizeof(r->etag), "%s", v.data == NULL ? "" : v.data);
        rc = r->etag[0] == '\0' ? complete_check_head(c, u, r, err)
                                : check_final_etag(u, r->etag, &r->st, err);
    }
    buf_free(&x);
    buf_free(&v);
    return rc;
}

static void abort_upload(struct s3_client *c, struct upload *u)
{
    struct call k;
    struct sigv4_kv q[] = {{"uploadId", u->upload_id}};
    struct s3_status st;
    struct err err = {0};

    call_init(&k, S3_OP_MULTIPART_ABORT, "DELETE", u->p->key, 1);
    k.query = q;
    k.n_query = 1;
    k.absent_ok = true;
    k.answer = &u->answer;
    if (run(c, &k, &st, &err) != 0) {
        log_warn(c->cfg.log_area, "AbortMultipartUpload key=%s upload=%s: %s",
                 u->p->key, u->upload_id, err.msg);
    }
}

/* Whether a Create may have made an upload whose id never reached us: an
 * attempt was retried (an earlier one failed after it was sent), or the
 * one attempt sent failed in a way that leaves its outcome unknown (no
 * answer or a silent one, an answer we could not read, a 5xx), not before
 * it reached the server. A 4xx made none, nor did an attempt never sent
 * (a closed gate, the stop's deadline). */
static bool create_may_have_left(int rc, const struct s3_status *st)
{
    if (st->attempts > 1) {
        return true;
    }
    return rc != 0 && st->attempts == 1 && !st->is_unreached &&
           !st->is_unresolved &&
           (st->status == 0 || st->status >= 500 || st->kind == S3_FAIL_BODY);
}

/* Remove key from the orphan keys; whether it was there. */
static bool orphans_take(struct s3_client *c, const char *key)
{
    bool found = false;

    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_orphan_keys; i++) {
        if (strcmp(c->orphan_keys[i], key) == 0) {
            free(c->orphan_keys[i]);
            memmove(&c->orphan_keys[i], &c->orphan_keys[i + 1],
                    (size_t)(c->n_orphan_keys - i - 1) *
                        sizeof(c->orphan_keys[0]));
            c->n_orphan_keys--;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

/* Remember key for the next put of it that lands. At the bound the oldest
 * key is forgotten: its uploads are left to the redo's listing and the
 * bucket's lifecycle rule (s3-sink.md), and the log says so. */
static void orphans_note(struct s3_client *c, const char *key)
{
    char *dropped = NULL;

    pthread_mutex_lock(&c->mu);
    if (c->n_orphan_keys == S3_MAX_ORPHAN_KEYS) {
        dropped = c->orphan_keys[0];
        memmove(&c->orphan_keys[0], &c->orphan_keys[1],
                (size_t)(S3_MAX_ORPHAN_KEYS - 1) * sizeof(c->orphan_keys[0]));
        c->n_orphan_keys--;
    }
    c->orphan_keys[c->n_orphan_keys++] = xstrdup(key);
    pthread_mutex_unlock(&c->mu);
    if (dropped != NULL) {
        log_warn(c->cfg.log_area,
                 "%s: a lost CreateMultipartUpload answer may have left an "
                 "upload there; too many keys wait for a landed put, so it "
                 "is left to the bucket's lifecycle rule",
                 dropped);
        free(dropped);
    }
}

/* A Create whose answer was lost may have made an upload: once a put of the
 * key lands, abort whatever upload is left at the key, so that no parts
 * stay billed. Only while the put's gate still lets it write: a writer that
 * lost its lease leaves the key to the next one, whose upload is no orphan
 * (the next owner's redo and the lifecycle rule of s3-sink.md take what is
 * left). Best effort: a failed listing is logged and keeps the key marked. */
static void abort_orphans(struct s3_client *c, const struct s3_put *p)
{
    struct err e2 = {0};
    int n = 0;

    if (p->may_send != NULL && p->may_send(p->gate_arg, &e2) != 0) {
        return;
    }
    if (s3_client_abort_uploads(c, p->key, &n, &e2) != 0) {
        log_warn(c->cfg.log_area,
                 "%s: could not list the multipart uploads a "
                 "CreateMultipartUpload whose answer was lost may have "
                 "left (the next put of the key that lands lists them "
                 "again): %s",
                 p->key, e2.msg);
        orphans_note(c, p->key);
    } else if (n > 0) {
        log_info(c->cfg.log_area,
                 "%s: aborted %d multipart upload(s) a CreateMultipartUpload "
                 "whose answer was lost left",
                 p->key, n);
    }
}

static int multipart_put(struct s3_client *c, const struct s3_put *p,
                         struct s3_put_result *r, struct err *err)
{
    struct upload u;
    int rc;

    memset(&u, 0, sizeof(u));
    u.p = p;
    u.n_parts = (int)((p->len + c->cfg.part_size - 1) / c->cfg.part_size);
    if (u.n_parts > 10000) {
        return err_set(err, ERR_TOO_BIG, "%s: %zu bytes need %d parts", p->key,
                       p->len, u.n_parts);
    }
    u.etags = xcalloc((size_t)u.n_parts, sizeof(*u.etags));
    buf_init(&u.answer, S3_MAX_ANSWER);
    r->is_multipart = true;
    r->parts = u.n_parts;
    /* a key an earlier put left uncertain is cleaned by this one when it
     * lands, and noted again when it does not */
    bool has_orphans = orphans_take(c, p->key);
    rc = create_upload(c, &u, &r->st, err);
    has_orphans = has_orphans || create_may_have_left(rc, &r->st);
    if (rc == 0) {
        rc = upload_parts(c, &u, &r->st, err);
    }
    if (rc == 0) {
        rc = complete_upload(c, &u, r, err);
    }
    if (rc != 0 && u.upload_id[0] != '\0') {
        abort_upload(c, &u);
    }
    if (has_orphans && rc == 0) {
        abort_orphans(c, p);
    } else if (has_orphans) {
        orphans_note(c, p->key);
    }
    for (int i = 0; i < u.n_parts; i++) {
        free(u.etags[i]);
    }
    free(u.etags);
    buf_free(&u.answer);
    return rc;
}

int s3_client_put(struct s3_client *c, const struct s3_put *p,
                  struct s3_put_result *r, struct err *err)
{
    memset(r, 0, sizeof(*r));
    if (p->key == NULL || p->key[0] == '\0' || p->content_type == NULL ||
        (p->body == NULL && p->len > 0)) {
        return err_set(err, ERR_INVALID,
                       "PUT: a key, a content type and a "
                       "body are required");
    }
    if (strpbrk(p->content_type, "\r\n") != NULL) {
        return err_set(err, ERR_INVALID,
                       "PUT %s: the content type holds a line break", p->key);
    }
    if ((uint64_t)p->len > c->cfg.multipart_threshold) {
        return multipart_put(c, p, r, err);
    }
    r->parts = 1;
    int rc = single_put(c, p, r, err);
    /* a key whose multipart put lost a Create answer, put whole now */
    if (rc == 0 && orphans_take(c, p->key)) {
        abort_orphans(c, p);
    }
    return rc;
}

/* ---- HEAD, GET -------------------------------------------------------- */

static void fill_info(const struct call *k, struct s3_object_info *info)
{
    info->found = k->ans.status != 404;
    info->size =
        k->ans.content_length < 0 ? 0 : (uint64_t)k->ans.content_length;
    strip_quotes(k->ans.etag, info->etag, sizeof(info->etag));
}

/* A HEAD of key in at most attempts tries. */
static int head_tries(struct s3_client *c, const char *key, int attempts,
                      struct s3_object_info *info, struct s3_status *st,
                      struct err *err)
{
    struct call k;
    struct buf answer;
    int rc;

    memset(info, 0, sizeof(*info));
    call_init(&k, S3_OP_HEAD, "HEAD", key, attempts);
    buf_init(&answer, S3_MAX_ANSWER);
    k.is_head = true;
    k.absent_ok = true;
    k.answer = &answer;
    rc = run(c, &k, st, err);
    if (rc == 0) {
        fill_info(&k, info);
    }
    buf_free(&answer);
    return rc;
}

int s3_client_head(struct s3_client *c, const char *key,
                   struct s3_object_info *info, struct s3_status *st,
                   struct err *err)
{
    return head_tries(c, key, c->cfg.max_attempts, info, st, err);
}

int s3_client_head_once(struct s3_client *c, const char *key,
                        struct s3_object_info *info, struct s3_status *st,
                        struct err *err)
{
    return head_tries(c, key, 1, info, st, err);
}

int s3_client_get(struct s3_client *c, const char *key, struct buf *body,
                  struct s3_object_info *info, struct s3_status *st,
                  struct err *err)
{
    struct call k;
    int rc;

    memset(info, 0, sizeof(*info));
    call_init(&k, S3_OP_GET, "GET", key, c->cfg.max_attempts);
    k.absent_ok = true;
    k.answer = body;
    rc = run(c, &k, st, err);
    if (rc == 0) {
        fill_info(&k, info);
        info->size = info->found ? body->len : 0;
    }
    if (rc != 0 || !info->found) {
        buf_reset(body); /* it may hold an error document */
    }
    return rc;
}

/* ---- stranded multipart uploads ----------------------------------------- */

static enum s3_fail check_uploads(struct call *k, struct err *err)
{
    const char *end = "</ListMultipartUploadsResult>";

    if (k->answer->data == NULL ||
        memmem(k->answer->data, k->answer->len, end, strlen(end)) == NULL) {
        err_set(err, ERR_CORRUPT,
                "body: ListMultipartUploads answer is truncated");
        return S3_FAIL_BODY;
    }
    return S3_FAIL_NONE;
}

/* DELETE key?uploadId=id, once; 404 (gone already) counts as done. */
static int abort_one(struct s3_client *c, const char *key, const char *id,
                     struct err *err)
{
    struct call k;
    struct sigv4_kv q[] = {{"uploadId", id}};
    struct s3_status st;
    struct buf answer;
    int rc;

    call_init(&k, S3_OP_MULTIPART_ABORT, "DELETE", key, c->cfg.max_attempts);
    buf_init(&answer, S3_MAX_ANSWER);
    k.query = q;
    k.n_query = 1;
    k.absent_ok = true;
    k.answer = &answer;
    rc = run(c, &k, &st, err);
    buf_free(&answer);
    return rc;
}

/* One <Upload> element (el, n bytes) of a ListMultipartUploads answer: abort
 * the upload when its Key is exactly key, using v and id as scratch. True when
 * it was aborted; a failed abort is logged here and is false. */
static bool abort_listed(struct s3_client *c, const char *key, const char *el,
                         size_t n, struct buf *v, struct buf *id)
{
    struct err e2 = {0};

    if (s3xml_find(el, n, "Key", v, &e2) != 0 || v->data == NULL ||
        strcmp(v->data, key) != 0 ||
        s3xml_find(el, n, "UploadId", id, &e2) != 0 || id->len == 0) {
        return false;
    }
    if (abort_one(c, key, id->data, &e2) != 0) {
        log_warn(c->cfg.log_area, "AbortMultipartUpload key=%s upload=%s: %s",
                 key, id->data, e2.msg);
        return false;
    }
    return true;
}

int s3_client_abort_uploads(struct s3_client *c, const char *key,
                            int *n_aborted, struct err *err)
{
    struct call k;
    struct sigv4_kv q[] = {{"prefix", key}, {"uploads", ""}};
    struct s3_status st;
    struct buf answer;
    struct buf v;
    struct buf id;
    const char *open = "<Upload>";
    const char *close = "</Upload>";
    int rc;

    *n_aborted = 0;
    call_init(&k, S3_OP_LIST, "GET", NULL, c->cfg.max_attempts);
    buf_init(&answer, S3_MAX_LIST_ANSWER);
    buf_init(&v, S3XML_MAX_VALUE * 4);
    buf_init(&id, S3XML_MAX_VALUE * 4);
    k.query = q;
    k.n_query = 2;
    k.check = check_uploads;
    k.answer = &answer;
    rc = run(c, &k, &st, err);
    for (size_t pos = 0; rc == 0 && answer.data != NULL;) {
        const char *a =
            memmem(answer.data + pos, answer.len - pos, open, strlen(open));
        const char *b = a == NULL
                            ? NULL
                            : memmem(a, answer.len - (size_t)(a - answer.data),
                                     close, strlen(close));

        if (b == NULL) {
            break;
        }
        pos = (size_t)(b - answer.data) + strlen(close);
        if (abort_listed(c, key, a, (size_t)(b - a), &v, &id)) {
            (*n_aborted)++;
        }
    }
    buf_free(&answer);
    buf_free(&v);
    buf_free(&id);
    return rc;
}

/* ---- LIST ------------------------------------------------------------- */

static enum s3_fail check_list(struct call *k, struct err *err)
{
    const char *end = "</ListBucketResult>";

    if (k->answer->data == NULL ||
        memmem(k->answer->data, k->answer->len, end, strlen(end)) == NULL) {
        err_set(err, ERR_CORRUPT, "body: ListObjectsV2 answer is truncated");
        return S3_FAIL_BODY;
    }
    return S3_FAIL_NONE;
}

int s3_client_list_page(struct s3_client *c, const struct s3_list_req *q,
                        struct s3xml_list *page, struct s3_status *st,
                        struct err *err)
{
    struct call k;
    struct buf answer;
    char mk[16];
    struct sigv4_kv query[4];
    size_t nq = 0;
    int max = q->max_keys < 1 ? 1 : (q->max_keys > 1000 ? 1000 : q->max_keys);
    int rc;

    memset(page, 0, sizeof(*page));
    snprintf(mk, sizeof(mk), "%d", max);
    query[nq++] = (struct sigv4_kv){"list-type", "2"};
    query[nq++] = (struct sigv4_kv){"prefix", q->prefix ? q->prefix : ""};
    query[nq++] = (struct sigv4_kv){"max-keys", mk};
    if (q->start_after != NULL && q->start_after[0] != '\0') {
        query[nq++] = (struct sigv4_kv){"start-after", q->start_after};
    }
    call_init(&k, S3_OP_LIST, "GET", NULL, c->cfg.max_attempts);
    buf_init(&answer, S3_MAX_LIST_ANSWER);
    k.query = query;
    k.n_query = nq;
    k.check = check_list;
    k.answer = &answer;
    rc = run(c, &k, st, err);
    if (rc == 0) {
        rc = s3xml_parse_list(answer.data, answer.len, page, err);
    }
    buf_free(&answer);
    if (rc == 0 && page->n_keys > 0 && q->start_after != NULL &&
        q->start_after[0] != '\0' &&
        strcmp(page->keys[page->n_keys - 1], q->start_after) <= 0) {
        s3xml_list_free(page);
        rc = err_set(err, ERR_CORRUPT,
                     "LIST %s: the bucket answered a page that does not move "
                     "past start-after (it ignores start-after)",
                     q->prefix != NULL ? q->prefix : "");
    }
    return rc;
}

int s3_client_list_all(struct s3_client *c, const char *prefix, size_t max_keys,
                       struct s3xml_list *all, struct s3_status *st,
                       struct err *err)
{
    struct s3_list_req q = {prefix, NULL, 1000};
    struct s3xml_list page;
    size_t cap = 0;
    int rc;

    memset(all, 0, sizeof(*all));
    do {
        rc = s3_client_list_page(c, &q, &page, st, err);
        if (rc != 0) {
            break;
        }
        if (all->n_keys + page.n_keys > max_keys) {
            s3xml_list_free(&page);
            rc = err_set(err, ERR_TOO_BIG, "LIST %s: more than %zu keys",
                         prefix, max_keys);
            break;
        }
        for (size_t i = 0; i < page.n_keys; i++) {
            if (all->n_keys == cap) {
                cap = cap == 0 ? 1024 : cap * 2;
                all->keys = xrealloc(all->keys, cap * sizeof(*all->keys));
            }
            all->keys[all->n_keys++] = page.keys[i]; /* moved */
        }
        /* start-after paging: the next page starts after the last key. */
        q.start_after = all->n_keys > 0 ? all->keys[all->n_keys - 1] : NULL;
        all->is_truncated = page.is_truncated && page.n_keys > 0;
        free(page.keys);
    } while (all->is_truncated);
    if (rc != 0) {
        s3xml_list_free(all);
    }
    return rc;
}
