/* Fuzz target: the QUEEN_AUTH_TOKENS file parser and the Authorization
 * check (api/auth.h). Any bytes must load or be refused with one of the
 * parser's fixed sentences ("line <n>: ..." or "no token: ..."), which quote
 * nothing from the file; a table that loads has at least one entry, and the
 * token of each line that loaded is found again by auth_check() through a
 * "Bearer" header. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every first field of 16+ token characters must check as AUTH_OK. */
static void check_each_token(const struct auth *a, const char *text,
                             size_t size)
{
    char hdr[AUTH_TOKEN_MAX + 16];
    const struct auth_entry *e;
    size_t i = 0;

    while (i < size) {
        const char *nl = memchr(text + i, '\n', size - i);
        size_t end = nl != NULL ? (size_t)(nl - text) : size;
        size_t s = i;
        size_t t;

        while (s < end &&
               (text[s] == ' ' || text[s] == '\t' || text[s] == '\r')) {
            s++;
        }
        t = s;
        while (t < end && text[t] != ' ' && text[t] != '\t' &&
               text[t] != '\r') {
            t++;
        }
        if (t > s && text[s] != '#') {
            memcpy(hdr, "Bearer ", 7);
            memcpy(hdr + 7, text + s, t - s);
            hdr[7 + t - s] = '\0';
            if (auth_check(a, hdr, &e) != AUTH_OK) {
                abort();
            }
        }
        i = end + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const struct auth_entry *e;
    struct auth a;
    struct err err = {0};
    char *hdr;

    if (auth_parse(&a, text, size, &err) == 0) {
        if (a.n == 0) {
            abort();
        }
        check_each_token(&a, text, size);
    } else if (a.n != 0 || (strncmp(err.msg, "line ", 5) != 0 &&
                            strncmp(err.msg, "no token", 8) != 0)) {
        abort();
    }
    /* The input as a header value, against whatever loaded. */
    hdr = malloc(size + 1);
    memcpy(hdr, data, size);
    hdr[size] = '\0';
    (void)auth_check(&a, hdr, &e);
    free(hdr);
    auth_free(&a);
    return 0;
}
