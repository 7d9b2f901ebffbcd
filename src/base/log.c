/* Logging: one stderr line per event. A line is formatted whole into a local
 * buffer and written with one write(2), so lines from threads never mix. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int log_threshold = LOG_INFO;

static const char *const log_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void log_set_level(int level)
{
    log_threshold = level;
}

int log_parse_level(const char *s)
{
    for (int i = 0; i < (int)ARRAY_LEN(log_names); i++) {
        if (strcasecmp(s, log_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

void log_write(int level, const char *module, const char *fmt, ...)
{
    char line[4096];
    struct timeval tv;
    struct tm tm;
    size_t n;
    int k;
    va_list ap;

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    k = snprintf(line, sizeof(line),
                 "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ %s %s: ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                 tm.tm_min, tm.tm_sec, (long)tv.tv_usec,
                 log_names[level < 0   ? 0
                           : level > 3 ? 3
                                       : level],
                 module);
    n = k < 0 ? 0 : (size_t)k;
    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (k > 0) {
        n += (size_t)k;
    }
    if (n > sizeof(line) - 2) {
        n = sizeof(line) - 2;
    }
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, n) < 0) {
        /* nothing better to do with a failed log write */
    }
}
