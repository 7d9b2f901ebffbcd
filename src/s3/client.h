/* The S3 client: PutObject (single or multipart), GetObject, HeadObject,
 * ListObjectsV2 and DeleteObject over a transport seam, with our own SigV4,
 * per-request retries and per-(op, status) counters (docs/design/protocol.md §7
 * and docs/design/formats.md §9).
 *   (1) Every attempt is signed afresh with the clock's time and counted in
 *       the metrics as (op, HTTP status), 0 when no answer came.
 *   (2) Retriable outcomes (retry.h) are tried up to max_attempts times,
 *       waiting s3_retry_wait_ms between; other outcomes return at once.
 *       With is_unreached_final, an attempt that reached no endpoint (the
 *       host did not resolve, the connection was refused or timed out, or
 *       the TLS handshake refused the endpoint's certificate),
 *       or that connected but got no answer before stall_timeout_ms, before
 *       any attempt of this client got an answer is final too.
 *   (3) A body above multipart_threshold goes up as a multipart upload of
 *       part_size slices, part_concurrency of them in flight; any failure
 *       after CreateMultipartUpload aborts the upload (one DELETE, best
 *       effort) and returns the first error.
 *   (4) A body is hashed once per request (SHA-256, and MD5 for a single
 *       PUT) and is never copied: the transport sends the caller's bytes.
 *   (5) After s3_client_stop() no call waits for a retry of its own: a
 *       retriable failure returns at once to the caller, whose loop knows
 *       what is worth finishing, and a wait between attempts in progress
 *       ends at once. From the stop's deadline on, no request is sent
 *       (ERR_TIMEOUT, retriable, nothing sent), and a transfer still
 *       running is cut (the transport asks is_cut while it waits).
 * Thread-safe: one client may serve many threads at once (the transport
 * must be thread-safe too; transport_curl is). */
#ifndef QUEEN_S3_CLIENT_H
#define QUEEN_S3_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "s3/endpoint.h"
#include "s3/metrics.h"
#include "s3/retry.h"
#include "s3/sigv4.h"
#include "s3/xml.h"

#define S3_MULTIPART_THRESHOLD  (64ull << 20)
#define S3_PART_SIZE            (16ull << 20)
#define S3_PART_CONCURRENCY     2 /* parts of one upload in flight */
#define S3_MAX_PART_CONCURRENCY 16
#define S3_CONNECT_TIMEOUT_MS   5000L
#define S3_REQUEST_TIMEOUT_MS   120000L
#define S3_MAX_ANSWER           (1u << 20) /* non-GET answer bodies */
#define S3_MAX_HEADERS          16
#define S3_MAX_ORPHAN_KEYS      64 /* client.c: keys a lost Create marks */

/* One HTTP exchange as the transport sees it. */
struct s3_http_request {
    const char *method;
    const char *url;            /* scheme://host + the signed uri */
    const char *const *headers; /* "Name: value" lines, Host included */
    size_t n_headers;
    const void *body; /* borrowed, may be NULL */
    size_t body_len;
    bool is_head; /* no answer body will come */
    long connect_timeout_ms;
    long timeout_ms;
    /* Asked while the transfer runs (about once a second, and on every
     * progress): true cuts it (ERR_TIMEOUT). NULL = never cut. */
    bool (*is_cut)(void *arg);
    void *cut_arg;
    /* No byte sent or received for this long ends the transfer
     * (ERR_TIMEOUT), however long timeout_ms is. 0 = no such limit. */
    long stall_ms;
    /* Not idempotent (CreateMultipartUpload): sent on a new connection, so
     * that the transport never resends it unseen when a kept-alive one
     * turns out closed. Every resend is then an attempt the client counts
     * and knows of. */
    bool is_fresh_connection;
};

struct s3_http_answer {
    int status;             /* HTTP status; 0 when the transport failed */
    struct buf *body;       /* reset by the transport; its max is the cap */
    char etag[256];         /* ETag header as sent, "" when absent */
    int64_t content_length; /* -1 when absent */
    int64_t retry_after_ms; /* Retry-After in ms, -1 when absent */
    char region[32];    /* x-amz-bucket-region (letters, digits, '-'), or "" */
    bool is_unresolved; /* a transport failure: the host name did not
                           resolve (DNS), so nothing was sent */
    bool is_unreached;  /* a transport failure before a connection was
                           made (is_unresolved, or the connection was
                           refused or not made in time): nothing was
                           sent */
    bool is_silent;     /* a timeout after the connection was made and
                           before any byte of an answer came */
    bool is_untrusted;  /* the TLS handshake refused the endpoint's
                           certificate (also is_unreached: nothing was
                           sent) */
};

/* Perform req. Returns 0 when an HTTP answer arrived (any status), else
 * ERR_IO / ERR_TIMEOUT (transport failure: status 0) or ERR_TOO_BIG (the
 * answer body passed its cap), with a sentence in err. */
typedef int (*s3_perform_fn)(void *arg, const struct s3_http_request *req,
                             struct s3_http_answer *ans, struct err *err);

struct s3_transport {
    s3_perform_fn perform;
    void *arg;
};

/* The clock seam: wall time for x-amz-date, sleeping between attempts and
 * the jitter draw. NULL to s3_client_new means the real ones, whose wait
 * before a retry ends early at s3_client_stop(). */
struct s3_clock {
    int64_t (*now_s)(void *arg);              /* Unix seconds */
    void (*sleep_ms)(void *arg, uint64_t ms); /* wait before a retry */
    double (*random)(void *arg);              /* uniform in [0, 1) */
    void *arg;
    /* CLOCK_MONOTONIC in ms, the clock of s3_client_stop's deadline; NULL:
     * the real one. */
    int64_t (*mono_ms)(void *arg);
};

enum s3_sse { S3_SSE_NONE = 0, S3_SSE_AES256, S3_SSE_KMS };

struct s3_config {
    struct s3_endpoint ep;
    char region[64];
    char access_key[128];
    char secret_key[SIGV4_SECRET_MAX + 1]; /* never logged */
    enum s3_sse sse;
    char kms_key_id[256]; /* only with S3_SSE_KMS; may be empty */
    uint64_t multipart_threshold;
    uint64_t part_size;
    int part_concurrency; /* 1..S3_MAX_PART_CONCURRENCY */
    int max_attempts;
    long connect_timeout_ms;
    long request_timeout_ms;
    /* A request that sends and receives nothing for this long fails as a
     * timeout (retriable), so a peer that accepts the connection and never
     * answers costs this, not request_timeout_ms. 0 (the default, the
     * sink's): no such limit. */
    long stall_timeout_ms;
    /* Invariant (2): until the endpoint first answers, an attempt that
     * cannot reach it is not retried. For an offline tool, where that is a
     * wrong endpoint the user should hear about at once; the broker's sink
     * leaves it false and waits for a bucket that is down. */
    bool is_unreached_final;
    /* The area of the client's log lines (a string literal; "s3" by
     * default): the broker's sink logs under its own, "queen-s3". */
    const char *log_area;
    /* Called on the calling thread with true before a call's first wait to
     * retry, and with false when that call returns: in between the thread
     * may be held by the whole retry ladder. NULL: none. */
    void (*on_retrying)(void *arg, bool is_retrying);
    void *on_retrying_arg;
};

/* Fill the defaults above (everything else zero/empty). */
void s3_config_defaults(struct s3_config *cfg);

/* The outcome of the last request of a call (a multipart upload makes
 * several), for the caller's decisions. */
struct s3_status {
    int status;             /* last HTTP status, 0 for transport */
    enum s3_fail kind;      /* S3_FAIL_NONE on success */
    bool is_retriable;      /* retry.h invariant (1) */
    int64_t retry_after_ms; /* from the last answer, -1 when none */
    int attempts;           /* attempts of that request */
    char code[64];          /* S3 <Code> of an error answer, or "" */
    char region[32];        /* the last answer's x-amz-bucket-region, or "" */
    bool is_unresolved;     /* the last attempt's host name did not resolve */
    bool is_unreached;      /* the last attempt made no connection */
    bool is_silent;         /* it connected, then no answer came */
    bool is_untrusted;      /* its certificate was refused */
};

struct s3_client;

/* Copies cfg; borrows t and clock (NULL: the real clock), which must
 * outlive the client. Returns owned: free with s3_client_free. */
struct s3_client *s3_client_new(const struct s3_config *cfg,
                                const struct s3_transport *t,
                                const struct s3_clock *clock);
void s3_client_free(struct s3_client *c);
/* The process is stopping (invariant (5)): from now on no call retries by
 * itself, and from deadline_ms (the clock's mono_ms) on nothing is sent and
 * transfers in flight are cut. Any thread; the first call's deadline holds. */
void s3_client_stop(struct s3_client *c, int64_t deadline_ms);
/* The client's counters (owned by the client). */
struct s3_metrics *s3_client_metrics(struct s3_client *c);

/* A PutObject. between_parts (optional) is called before every part after
 * the first with that part's index (the number of parts before it): a crash
 * test stops there. Part 1 is always stored before the first call; with
 * part_concurrency > 1 later calls may come from several threads at once. */
struct s3_put {
    const char *key;
    const void *body; /* borrowed; never copied */
    size_t len;
    const char *content_type;
    void (*between_parts)(void *arg, int part_done);
    void *hook_arg;
    /* The body's SHA-256 as 64 lowercase hex digits when the caller has it
     * already (the manifest needs it too), or NULL: a single PUT then skips
     * its own pass over the body. Borrowed. */
    const char *sha256_hex;
    /* Asked right before every request of this upload is sent (each attempt
     * of the single PUT, of CreateMultipartUpload, of every part and of the
     * Complete), from whichever thread sends it: nonzero (with err set)
     * stops the upload there, nothing more of it is sent, and that error is
     * returned, never retried. The sink's lease age check (lease.h). NULL =
     * always send. */
    int (*may_send)(void *arg, struct err *err);
    void *gate_arg;
};

struct s3_put_result {
    char etag[256]; /* quotes stripped */
    bool is_multipart;
    int parts;
    struct s3_status st;
};

/* Upload p. Returns 0, or ERR_REMOTE (status), ERR_IO/ERR_TIMEOUT
 * (transport), ERR_CORRUPT (body or integrity), ERR_INVALID; r->st says
 * more. */
int s3_client_put(struct s3_client *c, const struct s3_put *p,
                  struct s3_put_result *r, struct err *err);

struct s3_object_info {
    bool found; /* false: 404, which is not an error */
    uint64_t size;
    char etag[256]; /* quotes stripped */
};

int s3_client_head(struct s3_client *c, const char *key,
                   struct s3_object_info *info, struct s3_status *st,
                   struct err *err);
/* The same in one attempt, never retried (a probe, whose caller tries
 * again on its own schedule and must say at once that it failed). */
int s3_client_head_once(struct s3_client *c, const char *key,
                        struct s3_object_info *info, struct s3_status *st,
                        struct err *err);
/* GET key into body (reset first); body->max caps the object size
 * (ERR_TOO_BIG past it, not retried). */
int s3_client_get(struct s3_client *c, const char *key, struct buf *body,
                  struct s3_object_info *info, struct s3_status *st,
                  struct err *err);

/* Abort every multipart upload in progress whose key is exactly key: one
 * ListMultipartUploads (GET ?uploads&prefix=key), then one
 * AbortMultipartUpload per upload found. A crashed attempt leaves its
 * upload behind, and the redo that writes the same key completes another,
 * so without this the parts would stay billed forever. *n_aborted counts
 * the aborts that succeeded. Returns 0, or the list's error. */
int s3_client_abort_uploads(struct s3_client *c, const char *key,
                            int *n_aborted, struct err *err);

struct s3_list_req {
    const char *prefix;
    const char *start_after; /* NULL or "" for the first page */
    int max_keys;            /* clamped to 1..1000 */
};

/* One ListObjectsV2 page into page (owned: s3xml_list_free). A page
 * that has keys but does not move past start_after (its last key sorts at
 * or before it: a store that ignores start-after) is ERR_CORRUPT, so a
 * caller paging on it can never loop on the same keys. */
int s3_client_list_page(struct s3_client *c, const struct s3_list_req *q,
                        struct s3xml_list *page, struct s3_status *st,
                        struct err *err);
/* Every key under prefix, paging with start-after; more than max_keys is
 * ERR_TOO_BIG. all is owned: s3xml_list_free. */
int s3_client_list_all(struct s3_client *c, const char *prefix, size_t max_keys,
                       struct s3xml_list *all, struct s3_status *st,
                       struct err *err);

#endif
