/* Environment values as the settings read them (base/env.h). */
#include "base/env.h"

#include <ctype.h>
#include <string.h>

bool env_trim(const char *raw, char *out, size_t cap)
{
    size_t n;

    if (raw == NULL) {
        return false;
    }
    while (isspace((unsigned char)*raw)) {
        raw++;
    }
    n = strlen(raw);
    while (n > 0 && isspace((unsigned char)raw[n - 1])) {
        n--;
    }
    if (n == 0) {
        return false;
    }
    if (n >= cap) {
        n = cap - 1;
    }
    memcpy(out, raw, n);
    out[n] = '\0';
    return true;
}
