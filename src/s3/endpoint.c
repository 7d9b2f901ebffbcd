/* Where requests go: endpoint, bucket and addressing style.
 *
 * The endpoint is scheme://host[:port] and nothing else: a path would move
 * every object under a prefix the layout does not know about, so it is
 * refused with a pointer to the prefix setting, and so is user:password@
 * (without echoing it). An IPv6 literal is taken in
 * brackets, as in a URL ([fd00::7]:9000), and kept with them: the Host
 * header and the URL both carry it so. */
#include "s3/endpoint.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/env.h"

#define ENDPOINT_WHAT                                                     \
    "the S3 API base URL, e.g. https://s3.eu-central-1.amazonaws.com or " \
    "http://gw:7070"

static bool parse_port(const char *s, int *port)
{
    long v = 0;

    if (*s == '\0') {
        return false;
    }
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9' || v > 65535) {
            return false;
        }
        v = v * 10 + (*s - '0');
    }
    if (v < 1 || v > 65535) {
        return false;
    }
    *port = (int)v;
    return true;
}

static int split_authority(struct s3_endpoint *ep, const char *name,
                           const char *raw, const char *auth, struct err *err)
{
    const char *colon = strrchr(auth, ':');
    size_t hl;

    if (auth[0] == '[') { /* an IPv6 literal: its colons are not a port's */
        const char *close = strchr(auth, ']');

        if (close == NULL || (close[1] != '\0' && close[1] != ':')) {
            return err_set(err, ERR_INVALID,
                           "%s=%s has a bracketed host that does not close",
                           name, raw);
        }
        colon = close[1] == ':' ? close + 1 : NULL;
    }
    hl = colon == NULL ? strlen(auth) : (size_t)(colon - auth);
    if (hl == 0 || (auth[0] == '[' && hl == 2)) {
        return err_set(err, ERR_INVALID, "%s=%s has no host", name, raw);
    }
    if (hl >= sizeof(ep->host) || strlen(auth) >= sizeof(ep->authority)) {
        return err_set(err, ERR_INVALID, "%s=%s has a host that is too long",
                       name, raw);
    }
    bool is_v6 = auth[0] == '[';
    for (size_t i = is_v6 ? 1 : 0; i < (is_v6 ? hl - 1 : hl); i++) {
        unsigned char ch = (unsigned char)auth[i];
        bool ok = ch < 0x80 &&
                  (is_v6 ? isxdigit(ch) || ch == ':' || ch == '.'
                         : isalnum(ch) || ch == '-' || ch == '.' || ch == '_');
        if (!ok) { /* found at boot, not at the first request */
            return err_set(err, ERR_INVALID,
                           "%s=%s has a host with a byte no host name holds "
                           "(at byte %zu): a name is letters, digits, '-', "
                           "'.' and '_', an IPv6 literal hex digits and ':' "
                           "in brackets",
                           name, raw, i + 1);
        }
    }
    ep->port = 0;
    if (colon != NULL && !parse_port(colon + 1, &ep->port)) {
        return err_set(err, ERR_INVALID, "%s=%s has a port that is not one",
                       name, raw);
    }
    memcpy(ep->host, auth, hl);
    ep->host[hl] = '\0';
    memcpy(ep->authority, auth, strlen(auth) + 1); /* fits: checked above */
    return 0;
}

int s3_endpoint_parse(struct s3_endpoint *ep, const char *name, const char *raw,
                      const char *prefix_name, struct err *err)
{
    char auth[S3_ENDPOINT_MAX * 2];
    const char *rest;
    size_t n;

    /* user:password@host: the password would travel in every URL and be
     * shown wherever the endpoint is (the boot line, status, the control
     * plane's answers), so the value is refused without being echoed */
    if (strchr(raw, '@') != NULL) {
        return err_set(err, ERR_INVALID,
                       "%s has an '@' in it (user:password@host?); it is not "
                       "printed, as it may hold a secret. The endpoint is "
                       "scheme://host[:port] only, and the keys have settings "
                       "of their own",
                       name);
    }
    if (strncasecmp(raw, "http://", 7) == 0) {
        ep->is_https = false;
        rest = raw + 7;
    } else if (strncasecmp(raw, "https://", 8) == 0) {
        ep->is_https = true;
        rest = raw + 8;
    } else {
        return err_set(err, ERR_INVALID,
                       "%s=%s has no scheme: it starts with http:// or "
                       "https://",
                       name, raw);
    }
    n = strlen(rest);
    if (n > 0 && rest[n - 1] == '/') {
        n--; /* one trailing slash is tolerated */
    }
    if (n == 0 || rest[0] == '/') {
        return err_set(err, ERR_INVALID, "%s=%s has no host", name, raw);
    }
    if (memchr(rest, '/', n) != NULL || memchr(rest, '?', n) != NULL ||
        memchr(rest, '#', n) != NULL) {
        return err_set(err, ERR_INVALID,
                       "%s=%s carries a path. The endpoint is "
                       "scheme://host[:port] only; a prefix inside the bucket "
                       "is %s",
                       name, raw, prefix_name);
    }
    if (n >= sizeof(auth)) {
        return err_set(err, ERR_INVALID, "%s=%s has a host that is too long",
                       name, raw);
    }
    memcpy(auth, rest, n);
    auth[n] = '\0';
    return split_authority(ep, name, raw, auth, err);
}

int s3_endpoint_set_bucket(struct s3_endpoint *ep, const char *name,
                           const char *bucket, const char *prefix_name,
                           struct err *err)
{
    size_t n = strlen(bucket);
    bool ok = n > 0;

    if (n >= sizeof(ep->bucket)) {
        return err_set(err, ERR_INVALID,
                       "%s=%.64s... is not a bucket name: it is %zu bytes, "
                       "and a bucket name is at most %zu",
                       name, bucket, n, sizeof(ep->bucket) - 1);
    }

    for (size_t i = 0; ok && i < n; i++) {
        unsigned char c = (unsigned char)bucket[i];

        ok = c != '/' && !isspace(c);
    }
    if (!ok) {
        return err_set(err, ERR_INVALID,
                       "%s=%s is not a bucket name: it is one name, with no "
                       "slash and no space. A prefix inside the bucket is %s",
                       name, bucket, prefix_name);
    }
    memcpy(ep->bucket, bucket, n + 1);
    return 0;
}

int s3_parse_bool(const char *name, const char *raw, bool *out, struct err *err)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    char low[32];
    size_t n = strlen(raw);

    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        if (strcasecmp(raw, yes[i]) == 0 || strcasecmp(raw, no[i]) == 0) {
            *out = strcasecmp(raw, yes[i]) == 0;
            return 0;
        }
    }
    if (n >= sizeof(low)) {
        n = sizeof(low) - 1;
    }
    for (size_t i = 0; i < n; i++) {
        low[i] = (char)tolower((unsigned char)raw[i]);
    }
    low[n] = '\0';
    return err_set(err, ERR_INVALID,
                   "%s=%s is not a boolean. It is `true` or `false`", name,
                   low);
}

/* The trimmed value of an environment variable, NULL when blank or unset. */
static const char *env_value(const char *name, char *out, size_t cap)
{
    return env_trim(getenv(name), out, cap) ? out : NULL;
}

int s3_endpoint_from_env(struct s3_endpoint *ep, struct err *err)
{
    char v[1024];
    const char *s;

    memset(ep, 0, sizeof(*ep));
    s = env_value("QUEEN_S3_ENDPOINT", v, sizeof(v));
    if (s == NULL) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_S3_ENDPOINT is not set: it is " ENDPOINT_WHAT);
    }
    if (s3_endpoint_parse(ep, "QUEEN_S3_ENDPOINT", s, "QUEEN_S3_PREFIX", err) !=
        0) {
        return err->code;
    }
    s = env_value("QUEEN_S3_BUCKET", v, sizeof(v));
    if (s == NULL) {
        return err_set(err, ERR_INVALID,
                       "QUEEN_S3_BUCKET is not set: it is the destination "
                       "bucket");
    }
    if (s3_endpoint_set_bucket(ep, "QUEEN_S3_BUCKET", s, "QUEEN_S3_PREFIX",
                               err) != 0) {
        return err->code;
    }
    s = env_value("QUEEN_S3_PATH_STYLE", v, sizeof(v));
    ep->path_style = false;
    if (s != NULL &&
        s3_parse_bool("QUEEN_S3_PATH_STYLE", s, &ep->path_style, err) != 0) {
        return err->code;
    }
    return 0;
}

int s3_endpoint_host(const struct s3_endpoint *ep, struct buf *b,
                     struct err *err)
{
    if (ep->path_style) {
        return buf_append_str(b, ep->authority, err);
    }
    return buf_printf(b, err, "%s.%s", ep->bucket, ep->authority);
}

int s3_endpoint_base_url(const struct s3_endpoint *ep, struct buf *b,
                         struct err *err)
{
    if (buf_append_str(b, ep->is_https ? "https://" : "http://", err) != 0) {
        return err->code;
    }
    return s3_endpoint_host(ep, b, err);
}

int s3_endpoint_object_path(const struct s3_endpoint *ep, const char *key,
                            struct buf *b, struct err *err)
{
    if (ep->path_style) {
        return buf_printf(b, err, "/%s/%s", ep->bucket, key);
    }
    return buf_printf(b, err, "/%s", key);
}

int s3_endpoint_bucket_path(const struct s3_endpoint *ep, struct buf *b,
                            struct err *err)
{
    if (ep->path_style) {
        return buf_printf(b, err, "/%s", ep->bucket);
    }
    return buf_append_str(b, "/", err);
}
