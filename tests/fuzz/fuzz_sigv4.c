/* Fuzz target for the SigV4 signer: arbitrary bytes become a path, query
 * pairs and header values (split on NUL bytes). Signing must never crash
 * or read out of bounds, and signing the same request twice gives the same
 * canonical request, URI and signature. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "s3/sigv4.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FIELDS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *x = malloc(size + 1);
    const char *f[FIELDS];
    size_t n = 0;
    struct sigv4_out a;
    struct sigv4_out b;
    struct err err = {0};
    int ra;
    int rb;
    static const struct sigv4_key key = {"AKID", "secret", "us-east-1", "s3"};

    if (x == NULL) {
        return 0;
    }
    memcpy(x, data, size);
    x[size] = '\0';
    /* Fields: path, q1 name, q1 value, q2 name, q2 value, header name,
     * header value, method; missing ones are empty. */
    f[n++] = x;
    for (size_t i = 0; i < size && n < FIELDS; i++) {
        if (x[i] == '\0') {
            f[n++] = x + i + 1;
        }
    }
    while (n < FIELDS) {
        f[n++] = "";
    }
    struct sigv4_kv q[] = {{f[1], f[2]}, {f[3], f[4]}};
    struct sigv4_kv h[] = {{"host", "127.0.0.1:9000"},
                           {"x-amz-date", "20261129T120000Z"},
                           {"x-amz-content-sha256", SIGV4_EMPTY_SHA256},
                           {f[5][0] != '\0' ? f[5] : "x-extra", f[6]}};
    struct sigv4_request r = {f[7][0] != '\0' ? f[7] : "GET", f[0], q, 2, h, 4};
    sigv4_out_init(&a);
    sigv4_out_init(&b);
    ra = sigv4_sign(&r, &key, &a, &err);
    rb = sigv4_sign(&r, &key, &b, &err);
    if (ra != rb ||
        (ra == 0 && (strcmp(a.canonical.data, b.canonical.data) != 0 ||
                     strcmp(a.uri.data, b.uri.data) != 0 ||
                     strcmp(a.signature, b.signature) != 0))) {
        abort(); /* signing is a pure function of the request */
    }
    sigv4_out_free(&a);
    sigv4_out_free(&b);
    free(x);
    return 0;
}
