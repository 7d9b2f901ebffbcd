/* Errors: a code from one table and a sentence with context. */
#include "base/err.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct err_row {
    const char *name;
    int status;
    const char *text;
};

static const struct err_row err_rows[] = {
#define ERR_ROW(name, status, text) {#name, status, text},
    ERR_TABLE(ERR_ROW)
#undef ERR_ROW
};

void assert_fail(const char *what, const char *file, int line)
{
    fprintf(stderr, "fatal: assertion failed: %s at %s:%d\n", what, file, line);
    abort();
}

int err_set(struct err *err, int code, const char *fmt, ...)
{
    va_list ap;

    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return code;
}

int err_wrap(struct err *err, const char *fmt, ...)
{
    char prefix[sizeof(err->msg)];
    size_t plen;
    size_t olen = strnlen(err->msg, sizeof(err->msg) - 1);
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    plen = n < 0 ? 0 : (size_t)n;
    if (plen > sizeof(prefix) - 1) {
        plen = sizeof(prefix) - 1;
    }
    /* "prefix: old", cut to fit: the old message moves right. */
    if (plen + 2 >= sizeof(err->msg)) {
        memcpy(err->msg, prefix, sizeof(err->msg) - 1);
        err->msg[sizeof(err->msg) - 1] = '\0';
        return err->code;
    }
    if (olen > sizeof(err->msg) - 1 - plen - 2) {
        olen = sizeof(err->msg) - 1 - plen - 2;
    }
    memmove(err->msg + plen + 2, err->msg, olen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen] = ':';
    err->msg[plen + 1] = ' ';
    err->msg[plen + 2 + olen] = '\0';
    return err->code;
}

static bool ends_path(char c)
{
    return c == '\0' || c == ' ' || c == ':' || c == ',' || c == ';' ||
           c == ')' || c == '\'' || c == '"';
}

void err_public(const char *msg, char *out, size_t cap)
{
    size_t at = 0;

    if (cap == 0) {
        return;
    }
    for (size_t i = 0; msg[i] != '\0' && at + 1 < cap;) {
        char prev = ' ';
        size_t end = i;
        size_t name = i;

        if (i > 0) {
            prev = msg[i - 1];
        }
        if (msg[i] != '/' || strchr(" (='\"", prev) == NULL ||
            ends_path(msg[i + 1])) {
            out[at++] = msg[i++];
            continue;
        }
        while (!ends_path(msg[end])) {
            if (msg[end] == '/' && !ends_path(msg[end + 1])) {
                name = end + 1;
            }
            end++;
        }
        at += (size_t)snprintf(out + at, cap - at, ".../%.*s",
                               (int)(end - name), msg + name);
        at = at < cap ? at : cap - 1;
        i = end;
    }
    out[at] = '\0';
}

void err_clear(struct err *err)
{
    err->code = ERR_OK;
    err->msg[0] = '\0';
}

static const struct err_row *err_row(int code)
{
    if (code < 0 || code >= ERR_COUNT) {
        return &err_rows[ERR_IO];
    }
    return &err_rows[code];
}

const char *err_name(int code)
{
    return err_row(code)->name;
}

const char *err_text(int code)
{
    return err_row(code)->text;
}

int err_http_status(int code)
{
    return err_row(code)->status;
}
