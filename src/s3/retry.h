/* When an S3 request is tried again, and how long to wait first
 * (docs/design/protocol.md §7). Pure: the random draw is an argument u in [0,
 * 1).
 *   (1) Retriable outcomes: a transport failure (status 0), a body or
 *       integrity failure, HTTP 408, 429 and >= 500, and a 2xx or 400
 *       whose error <Code> names a passing condition (InternalError,
 *       SlowDown, ServiceUnavailable, RequestTimeout and the throttling
 *       codes): the 200 carrying an error document that AWS documents for
 *       CompleteMultipartUpload, S3's 400 RequestTimeout. Every other
 *       status (403, 400, 404 on PUT, a 200 carrying another code) is
 *       final.
 *   (2) Client wait before attempt a+1 after attempt a (a >= 1):
 *       step = min(1000 ms * 2^(a-1), 60 s);
 *       wait = min(max(uniform[step/10, step], Retry-After), 60 s).
 *   (3) Driver backoff for its n-th retry (n >= 1): min(1000 ms *
 *       2^min(n-1, 20), 60 s) * uniform[0.75, 1.25); a Retry-After given by
 *       the error is used exactly instead, up to 60 s. */
#ifndef QUEEN_S3_RETRY_H
#define QUEEN_S3_RETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define S3_RETRY_ATTEMPTS 6 /* first attempt included */
#define S3_RETRY_BASE_MS  1000
#define S3_RETRY_CAP_MS   60000

/* Why an attempt failed. */
enum s3_fail {
    S3_FAIL_NONE = 0,
    S3_FAIL_TRANSPORT, /* no HTTP answer: status 0 */
    S3_FAIL_STATUS,    /* an HTTP status that is not success */
    S3_FAIL_BODY,      /* an answer we could not read */
    S3_FAIL_INTEGRITY, /* an ETag that does not match what we sent */
};

/* Invariant (1). code: the answer's S3 <Code>, "" or NULL when none. */
bool s3_retry_is_retriable(enum s3_fail kind, int status, const char *code);

/* Invariant (2): the wait in ms after attempt `attempt` failed;
 * retry_after_ms < 0 means none was given. */
uint64_t s3_retry_wait_ms(int attempt, int64_t retry_after_ms, double u);

/* Invariant (3): the driver's wait before try n+1; a Retry-After is taken
 * as given up to S3_RETRY_CAP_MS. */
uint64_t s3_retry_driver_backoff_ms(int n, int64_t retry_after_ms, double u);

/* Parse a Retry-After header value of whole seconds into ms; -1 when
 * absent, empty or not an integer (HTTP dates are not honoured). */
int64_t s3_retry_parse_retry_after(const char *v, size_t n);

#endif
