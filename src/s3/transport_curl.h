/* The libcurl transport behind the S3 client's seam. libcurl is a plain
 * HTTP transport here: the client signs, and curl sends exactly the URL and
 * headers it is given (never CURLOPT_AWS_SIGV4, never an empty "Header:"
 * removal; docs/design/dependencies.md §4).
 *   (1) Thread-safe: each perform takes an easy handle from a small locked
 *       pool (keeping its connections alive) and gives it back after.
 *   (2) Bodies are read from the caller's memory, never copied whole. */
#ifndef QUEEN_S3_TRANSPORT_CURL_H
#define QUEEN_S3_TRANSPORT_CURL_H

#include "s3/client.h"

struct s3_curl;

/* Returns owned: free with s3_curl_free after every client using it.
 * ca_file: a PEM file of the certificate authorities an https endpoint's
 * certificate is checked against instead of the system's (QUEEN_S3_CA_FILE),
 * copied; NULL or "" = the system's. */
struct s3_curl *s3_curl_new(const char *ca_file);
void s3_curl_free(struct s3_curl *tc);
/* The seam for s3_client_new; borrows tc. */
struct s3_transport s3_curl_transport(struct s3_curl *tc);

#endif
