/* The process's own resource figures from /proc/self, for the process_*
 * families of /metrics (Prometheus's standard process metrics).
 *   (1) procstat_parse_stat() is pure: it reads the text of
 *       /proc/<pid>/stat, whose second field (the command name, in
 *       parentheses) may hold spaces and parentheses of its own, so fields
 *       are counted from the last ')'.
 *   (2) procstat_read() fills every field or fails: a figure it could not
 *       read is an error naming the file, never a zero that looks real. */
#ifndef QUEEN_BASE_PROCSTAT_H
#define QUEEN_BASE_PROCSTAT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

/* The fields of /proc/<pid>/stat the metrics use (proc(5) numbering). */
struct procstat_raw {
    uint64_t utime_ticks;     /* (14) user CPU, clock ticks */
    uint64_t stime_ticks;     /* (15) system CPU, clock ticks */
    uint64_t starttime_ticks; /* (22) start, ticks after boot */
    uint64_t vsize_bytes;     /* (23) virtual memory size */
    uint64_t rss_pages;       /* (24) resident set, pages */
};

struct procstat {
    double cpu_seconds;        /* user + system */
    double start_time_seconds; /* since the Unix epoch */
    uint64_t resident_bytes;
    uint64_t virtual_bytes;
    uint64_t open_fds; /* entries of /proc/self/fd */
    uint64_t max_fds;  /* RLIMIT_NOFILE, soft */
};

/* Parse the text of /proc/<pid>/stat. Returns false when it is not that
 * file's shape. */
bool procstat_parse_stat(const char *text, struct procstat_raw *out);

/* Parse the "btime <seconds>" line of /proc/stat. */
bool procstat_parse_btime(const char *text, uint64_t *out);

/* Read this process's figures. Returns 0, or ERR_IO naming the file. */
int procstat_read(struct procstat *out, struct err *err);

#endif
