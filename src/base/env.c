/* Environment values as the settings read them (base/env.h). */
#include "base/env.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdint.h>
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

bool env_is_blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!isspace((unsigned char)p[i])) {
            return false;
        }
    }
    return true;
}

bool env_parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    if (s == NULL || *s == '\0') {
        return false;
    }
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9') {
            return false;
        }
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) {
            return false;
        }
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

bool env_is_ip_literal(const char *s)
{
    unsigned char tmp[16];

    return inet_pton(AF_INET, s, tmp) == 1 || inet_pton(AF_INET6, s, tmp) == 1;
}

bool env_parse_hostport(const char *s, char *host, size_t host_cap, int *port)
{
    const char *colon;
    const char *h = s;
    size_t hlen;
    uint64_t p;

    if (s == NULL || *s == '\0') {
        return false;
    }
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':') {
            return false;
        }
        h = s + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL || memchr(s, ':', (size_t)(colon - s)) != NULL) {
            return false; /* bare IPv6 needs brackets */
        }
        hlen = (size_t)(colon - s);
    }
    if (hlen == 0 || hlen >= host_cap || !env_parse_u64(colon + 1, &p) ||
        p < 1 || p > 65535) {
        return false;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    if (!env_is_ip_literal(host)) {
        return false;
    }
    *port = (int)p;
    return true;
}
