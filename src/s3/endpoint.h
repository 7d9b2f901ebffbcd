/* Where requests go: the endpoint (scheme://host[:port]), the bucket and the
 * addressing style, with the refusal messages of docs/design/formats.md §9 and
 * docs/design/config.md §5. Pure apart from s3_endpoint_from_env, which reads
 * the environment.
 *   path style:    Host host[:port],          object /<bucket>/<key>,
 *                  bucket path /<bucket>
 *   virtual host:  Host <bucket>.host[:port], object /<key>, bucket path /
 * Paths returned here are raw (not encoded): the signer encodes them once. */
#ifndef QUEEN_S3_ENDPOINT_H
#define QUEEN_S3_ENDPOINT_H

#include <stdbool.h>

#include "base/buf.h"
#include "base/err.h"

#define S3_ENDPOINT_MAX 256 /* host, authority and bucket lengths */

struct s3_endpoint {
    bool is_https;
    char host[S3_ENDPOINT_MAX];      /* without the port */
    char authority[S3_ENDPOINT_MAX]; /* host[:port] as written */
    int port;                        /* 0 when none was written */
    char bucket[S3_ENDPOINT_MAX];
    bool path_style;
};

/* Parse raw (trimmed) into ep's scheme, host and port. name is the setting's
 * name in messages ("QUEEN_S3_ENDPOINT" or "endpoint"), prefix_name the
 * prefix setting's ("QUEEN_S3_PREFIX" or "prefix"). Returns 0 or
 * ERR_INVALID with the sentence of docs/design/config.md §5. */
int s3_endpoint_parse(struct s3_endpoint *ep, const char *name, const char *raw,
                      const char *prefix_name, struct err *err);

/* Validate and set the bucket: one name, no slash, no space, not empty.
 * Returns 0 or ERR_INVALID with the sentence of docs/design/config.md §5. */
int s3_endpoint_set_bucket(struct s3_endpoint *ep, const char *name,
                           const char *bucket, const char *prefix_name,
                           struct err *err);

/* Read QUEEN_S3_ENDPOINT, QUEEN_S3_BUCKET (both required) and
 * QUEEN_S3_PATH_STYLE (boolean, default false) into ep. */
int s3_endpoint_from_env(struct s3_endpoint *ep, struct err *err);

/* Parse a boolean setting: true|1|yes|on, false|0|no|off (any case).
 * Returns 0 or ERR_INVALID "{name}={v} is not a boolean. ...". */
int s3_parse_bool(const char *name, const char *raw, bool *out,
                  struct err *err);

/* Append the Host header value / "scheme://host-as-addressed" / the raw
 * object path of key / the raw bucket path to b. Return 0 or ERR_TOO_BIG. */
int s3_endpoint_host(const struct s3_endpoint *ep, struct buf *b,
                     struct err *err);
int s3_endpoint_base_url(const struct s3_endpoint *ep, struct buf *b,
                         struct err *err);
int s3_endpoint_object_path(const struct s3_endpoint *ep, const char *key,
                            struct buf *b, struct err *err);
int s3_endpoint_bucket_path(const struct s3_endpoint *ep, struct buf *b,
                            struct err *err);

#endif
