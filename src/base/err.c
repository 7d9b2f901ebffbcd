/* Errors: a code from one table and a sentence with context. */
#include "base/err.h"

#include <stdarg.h>
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
