/* When an S3 request is tried again, and how long to wait first. Pure.
 *
 * The client retries inside one call (6 attempts, jittered, Retry-After as a
 * floor) so a brief 503 never reaches the sink; the driver then retries
 * whole operations with its own backoff, where Retry-After is exact. */
#include "s3/retry.h"

#include <string.h>

#include "base/common.h"

/* Error codes that name a passing condition: retried in a 2xx (the error
 * document of a Complete) or a 400 (S3's RequestTimeout). */
static bool code_is_passing(const char *code)
{
    static const char *const passing[] = {
        "InternalError",        "ServiceUnavailable", "SlowDown",
        "RequestTimeout",       "Throttling",         "ThrottlingException",
        "RequestLimitExceeded", "RequestThrottled",   "PriorRequestNotComplete",
    };

    for (size_t i = 0; code != NULL && i < ARRAY_LEN(passing); i++) {
        if (strcmp(code, passing[i]) == 0) {
            return true;
        }
    }
    return false;
}

bool s3_retry_is_retriable(enum s3_fail kind, int status, const char *code)
{
    switch (kind) {
    case S3_FAIL_TRANSPORT:
    case S3_FAIL_BODY:
    case S3_FAIL_INTEGRITY:
        return true;
    case S3_FAIL_STATUS:
        return status == 408 || status == 429 || status >= 500 ||
               ((status < 300 || status == 400) && code_is_passing(code));
    case S3_FAIL_NONE:
        break;
    }
    return false;
}

static uint64_t step_ms(int attempt, int max_shift)
{
    int shift = attempt < 1 ? 0 : attempt - 1;

    if (shift > max_shift) {
        shift = max_shift;
    }
    if (shift >= 6) { /* 1000 * 2^6 > 60000 already */
        return S3_RETRY_CAP_MS;
    }
    uint64_t s = (uint64_t)S3_RETRY_BASE_MS << shift;
    return s > S3_RETRY_CAP_MS ? S3_RETRY_CAP_MS : s;
}

static double clamp_unit(double u)
{
    if (!(u >= 0.0)) { /* also NaN */
        return 0.0;
    }
    return u >= 1.0 ? 0.999999 : u;
}

uint64_t s3_retry_wait_ms(int attempt, int64_t retry_after_ms, double u)
{
    uint64_t step = step_ms(attempt, 30);
    uint64_t lo = step / 10;
    uint64_t w = lo + (uint64_t)(clamp_unit(u) * (double)(step - lo));

    if (retry_after_ms >= 0 && (uint64_t)retry_after_ms > w) {
        w = (uint64_t)retry_after_ms;
    }
    return w > S3_RETRY_CAP_MS ? S3_RETRY_CAP_MS : w;
}

uint64_t s3_retry_driver_backoff_ms(int n, int64_t retry_after_ms, double u)
{
    if (retry_after_ms >= 0) {
        return (uint64_t)retry_after_ms < S3_RETRY_CAP_MS
                   ? (uint64_t)retry_after_ms
                   : S3_RETRY_CAP_MS;
    }
    return (uint64_t)((double)step_ms(n, 20) * (0.75 + 0.5 * clamp_unit(u)));
}

int64_t s3_retry_parse_retry_after(const char *v, size_t n)
{
    int64_t s = 0;
    size_t i = 0;

    while (i < n && (v[i] == ' ' || v[i] == '\t')) {
        i++;
    }
    while (n > i && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r' ||
                     v[n - 1] == '\n')) {
        n--;
    }
    if (i == n || n - i > 9) {
        return -1;
    }
    for (; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') {
            return -1;
        }
        s = s * 10 + (v[i] - '0');
    }
    return s * 1000;
}
