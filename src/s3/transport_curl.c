/* The libcurl transport behind the S3 client's seam.
 *
 * One easy handle per request in flight, drawn from a pool of idle handles
 * under a mutex, so threads never share a handle and kept-alive
 * connections are reused. A body goes out through a read callback over
 * the caller's memory (CURLOPT_UPLOAD).
 *
 * curl would add its own "Expect: 100-continue" to every request with a
 * body; we send an empty "Expect:" to suppress it. The project's rule against
 * empty header removals guards curl's own SigV4 signer, which signs removed
 * headers; we sign ourselves, over the headers we list, so nothing we remove
 * is signed. Waiting for "100 Continue" costs a round trip per PUT (measured
 * against the test bucket, 16 MiB PUTs: about 250-300 ms with it, about 50 ms
 * without), and S3 answers a refused PUT after the body as well. */
#include "s3/transport_curl.h"

#include <ctype.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/xalloc.h"
#include "s3/retry.h"

#define POOL_MAX 16

struct s3_curl {
    char *ca_file; /* NULL = the system's authorities */
    pthread_mutex_t mu;
    CURL *idle[POOL_MAX];
    size_t n_idle;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
    ASSERT(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
}

struct s3_curl *s3_curl_new(const char *ca_file)
{
    struct s3_curl *tc = xcalloc(1, sizeof(*tc));

    tc->ca_file =
        ca_file != NULL && ca_file[0] != '\0' ? xstrdup(ca_file) : NULL;
    pthread_once(&global_once, global_init);
    pthread_mutex_init(&tc->mu, NULL);
    return tc;
}

void s3_curl_free(struct s3_curl *tc)
{
    if (tc == NULL) {
        return;
    }
    for (size_t i = 0; i < tc->n_idle; i++) {
        curl_easy_cleanup(tc->idle[i]);
    }
    pthread_mutex_destroy(&tc->mu);
    free(tc->ca_file);
    free(tc);
}

static CURL *take(struct s3_curl *tc)
{
    CURL *h = NULL;

    pthread_mutex_lock(&tc->mu);
    if (tc->n_idle > 0) {
        h = tc->idle[--tc->n_idle];
    }
    pthread_mutex_unlock(&tc->mu);
    if (h == NULL) {
        h = curl_easy_init();
        ASSERT(h != NULL);
    } else {
        curl_easy_reset(h); /* keeps the connection cache */
    }
    return h;
}

static void give_back(struct s3_curl *tc, CURL *h)
{
    pthread_mutex_lock(&tc->mu);
    if (tc->n_idle < POOL_MAX) {
        tc->idle[tc->n_idle++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&tc->mu);
    if (h != NULL) {
        curl_easy_cleanup(h);
    }
}

struct xfer {
    const char *body;
    size_t len;
    size_t off;
    struct s3_http_answer *ans;
    bool too_big;
    const struct s3_http_request *req;
    bool is_cut;
    bool has_answer; /* an answer's status line came */
};

/* curl asks this about once a second even while nothing moves, so a
 * request the client cuts (client.h invariant (5)) ends within that. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
    struct xfer *x = arg;

    UNUSED(dltotal);
    UNUSED(dlnow);
    UNUSED(ultotal);
    UNUSED(ulnow);
    if (x->req->is_cut != NULL && x->req->is_cut(x->req->cut_arg)) {
        x->is_cut = true;
        return 1; /* CURLE_ABORTED_BY_CALLBACK */
    }
    return 0;
}

static size_t on_read(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t want = size * n;
    size_t left = x->len - x->off;

    if (want > left) {
        want = left;
    }
    if (want > 0) {
        memcpy(p, x->body + x->off, want);
        x->off += want;
    }
    return want;
}

static size_t on_write(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    struct err err = {0};

    if (buf_append(x->ans->body, p, size * n, &err) != 0) {
        x->too_big = true;
        return 0; /* aborts the transfer */
    }
    return size * n;
}

/* Is line "Name: value"? Then the trimmed value span. */
static bool header_value(const char *line, size_t n, const char *name,
                         const char **v, size_t *vl)
{
    size_t nl = strlen(name);

    if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':') {
        return false;
    }
    line += nl + 1;
    n -= nl + 1;
    while (n > 0 && (*line == ' ' || *line == '\t')) {
        line++;
        n--;
    }
    while (n > 0 &&
           (line[n - 1] == '\r' || line[n - 1] == '\n' || line[n - 1] == ' ')) {
        n--;
    }
    *v = line;
    *vl = n;
    return true;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    struct s3_http_answer *a = x->ans;
    size_t len = size * n;
    const char *v;
    size_t vl;

    if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) { /* a new answer (after 100) */
        x->has_answer = true;
        a->etag[0] = '\0';
        a->content_length = -1;
        a->retry_after_ms = -1;
        a->region[0] = '\0';
    } else if (header_value(p, len, "ETag", &v, &vl)) {
        if (vl >= sizeof(a->etag)) {
            vl = sizeof(a->etag) - 1;
        }
        memcpy(a->etag, v, vl);
        a->etag[vl] = '\0';
    } else if (header_value(p, len, "Content-Length", &v, &vl)) {
        char tmp[32];
        snprintf(tmp, sizeof(tmp), "%.*s", (int)(vl < 31 ? vl : 31), v);
        a->content_length = strtoll(tmp, NULL, 10);
    } else if (header_value(p, len, "Retry-After", &v, &vl)) {
        a->retry_after_ms = s3_retry_parse_retry_after(v, vl);
    } else if (header_value(p, len, "x-amz-bucket-region", &v, &vl)) {
        /* a region name only: it is quoted into status and logs */
        size_t k = 0;

        while (k < vl && k + 1 < sizeof(a->region) &&
               (isalnum((unsigned char)v[k]) || v[k] == '-')) {
            a->region[k] = v[k];
            k++;
        }
        a->region[k == vl ? k : 0] = '\0';
    }
    return len;
}

static void set_method(CURL *h, const struct s3_http_request *req,
                       struct xfer *x)
{
    if (req->is_head) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        return;
    }
    if (strcmp(req->method, "PUT") == 0 || strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, x);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)x->len);
        curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024L);
    }
    if (strcmp(req->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    }
}

/* The length of url's scheme://host[:port], which names the endpoint
 * (endpoint.c refuses a user or password in it). */
static int origin_len(const char *url)
{
    const char *host = strstr(url, "://");
    size_t n = host != NULL ? (size_t)(host - url) + 3 : 0;

    n += strcspn(url + n, "/?#");
    return n > 512 ? 512 : (int)n;
}

static int finish(CURL *h, CURLcode rc, const char *errbuf,
                  const struct s3_http_request *req, const struct xfer *x,
                  struct err *err)
{
    long status = 0;

    if (x->too_big) {
        return err_set(err, ERR_TOO_BIG,
                       "%s answer body is over its cap of %zu bytes",
                       req->method, x->ans->body->max);
    }
    if (x->is_cut) {
        return err_set(err, ERR_TIMEOUT,
                       "%s cut: the process is stopping and its shutdown "
                       "grace is used up",
                       req->method);
    }
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        curl_off_t connected = 0;

        /* no connection was made in time (an endpoint that drops the
         * packets): nothing was sent, as for a refused one */
        x->ans->is_unreached = curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T,
                                                 &connected) == CURLE_OK &&
                               connected == 0;
        /* connected, and not a byte of an answer since: a peer that is no
         * HTTP server, or one that hangs; named, as curl's text is not */
        x->ans->is_silent = !x->ans->is_unreached && !x->has_answer;
        return err_set(err, ERR_TIMEOUT, "%s: %s%.*s%s%s",
                       curl_easy_strerror(rc),
                       x->ans->is_silent ? "no answer from " : "",
                       x->ans->is_silent ? origin_len(req->url) : 0, req->url,
                       x->ans->is_silent ? ": " : "",
                       errbuf[0] != '\0' ? errbuf : "timed out");
    }
    if (rc != CURLE_OK) {
        x->ans->is_unresolved = rc == CURLE_COULDNT_RESOLVE_HOST;
        /* a certificate no trusted authority signed (or a CA file that
         * does not load): the handshake ended before anything was sent */
        x->ans->is_untrusted = rc == CURLE_PEER_FAILED_VERIFICATION ||
                               rc == CURLE_SSL_CACERT_BADFILE;
        /* ...or a handshake that failed (https:// to a plain HTTP port
         * answers "wrong version number") */
        x->ans->is_unreached = x->ans->is_unresolved || x->ans->is_untrusted ||
                               rc == CURLE_COULDNT_RESOLVE_PROXY ||
                               rc == CURLE_COULDNT_CONNECT ||
                               rc == CURLE_SSL_CONNECT_ERROR;
        return err_set(err, ERR_IO, "%s: %s", curl_easy_strerror(rc),
                       errbuf[0] != '\0' ? errbuf : "no detail");
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    x->ans->status = (int)status;
    return 0;
}

static int curl_perform(void *arg, const struct s3_http_request *req,
                        struct s3_http_answer *ans, struct err *err)
{
    struct s3_curl *tc = arg;
    struct xfer x = {
        .body = req->body, .len = req->body_len, .ans = ans, .req = req};
    struct curl_slist *hl = NULL;
    char errbuf[CURL_ERROR_SIZE] = "";
    CURL *h = take(tc);
    CURLcode rc;
    int ret;

    buf_reset(ans->body);
    for (size_t i = 0; i < req->n_headers; i++) {
        struct curl_slist *t = curl_slist_append(hl, req->headers[i]);
        ASSERT(t != NULL);
        hl = t;
    }
    if (req->body_len > 0) {
        struct curl_slist *t = curl_slist_append(hl, "Expect:");
        ASSERT(t != NULL);
        hl = t;
    }
    curl_easy_setopt(h, CURLOPT_URL, req->url);
    if (req->is_fresh_connection) { /* libcurl retries a request once on a
                                       reused connection that closed unanswered
                                       (s3_http_request) */
        curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
    }
    if (tc->ca_file != NULL) {
        curl_easy_setopt(h, CURLOPT_CAINFO, tc->ca_file);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, req->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, req->timeout_ms);
    if (req->stall_ms > 0) { /* under 1 byte a second for that long */
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                         (req->stall_ms + 999) / 1000);
    }
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    /* behind a proxy (https_proxy), its "200 Connection established" is
     * not an answer of the bucket's: a silent bucket stays silent */
    curl_easy_setopt(h, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    set_method(h, req, &x);
    rc = curl_easy_perform(h);
    ret = finish(h, rc, errbuf, req, &x, err);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hl);
    give_back(tc, h);
    return ret;
}

struct s3_transport s3_curl_transport(struct s3_curl *tc)
{
    struct s3_transport t = {curl_perform, tc};

    return t;
}
