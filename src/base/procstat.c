/* The process's own resource figures from /proc/self, for the process_*
 * families of /metrics.
 *
 * CPU time and the start time are in clock ticks (sysconf(_SC_CLK_TCK));
 * the start is counted from boot, so the boot time of /proc/stat turns it
 * into seconds since the epoch. The open descriptors are counted by
 * listing /proc/self/fd (the listing's own descriptor included, as every
 * exporter counts it). */
#include "base/procstat.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define PROCSTAT_TEXT_MAX 8192

bool procstat_parse_stat(const char *text, struct procstat_raw *out)
{
    const char *p = strrchr(text, ')');
    uint64_t v[25] = {0}; /* v[i] is field i (proc(5) numbering) */
    int field = 3;

    if (p == NULL || p[1] != ' ') {
        return false;
    }
    p += 2;
    /* Field 3 is the one-letter state; 4.. are integers. */
    if (*p == '\0' || p[1] != ' ') {
        return false;
    }
    p += 2;
    for (field = 4; field <= 24; field++) {
        char *end;
        long long n;

        errno = 0;
        n = strtoll(p, &end, 10);
        if (end == p || errno != 0 ||
            (*end != ' ' && *end != '\n' && *end != '\0')) {
            return false;
        }
        v[field] = n < 0 ? 0 : (uint64_t)n; /* rss can read -1 briefly */
        p = *end == '\0' ? end : end + 1;
    }
    out->utime_ticks = v[14];
    out->stime_ticks = v[15];
    out->starttime_ticks = v[22];
    out->vsize_bytes = v[23];
    out->rss_pages = v[24];
    return true;
}

bool procstat_parse_btime(const char *text, uint64_t *out)
{
    const char *p = text;

    while (p != NULL && *p != '\0') {
        if (strncmp(p, "btime ", 6) == 0) {
            char *end;
            unsigned long long n = strtoull(p + 6, &end, 10);
            if (end == p + 6) {
                return false;
            }
            *out = (uint64_t)n;
            return true;
        }
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    return false;
}

/* The whole of a small /proc file into buf (NUL-terminated). */
static int read_text(const char *path, char *buf, size_t cap, struct err *err)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (f == NULL) {
        return err_set(err, ERR_IO, "open %s: %s", path, strerror(errno));
    }
    n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    if (ferror(f)) {
        fclose(f);
        return err_set(err, ERR_IO, "read %s: %s", path, strerror(errno));
    }
    fclose(f);
    return 0;
}

/* /proc/stat line by line: its intr line alone can outgrow any fixed
 * buffer on a machine with many interrupts. */
static int read_btime(uint64_t *out, struct err *err)
{
    FILE *f = fopen("/proc/stat", "r");
    char *line = NULL;
    size_t cap = 0;
    bool found = false;

    if (f == NULL) {
        return err_set(err, ERR_IO, "open /proc/stat: %s", strerror(errno));
    }
    while (!found && getline(&line, &cap, f) > 0) {
        found = procstat_parse_btime(line, out);
    }
    free(line);
    fclose(f);
    return found ? 0 : err_set(err, ERR_IO, "/proc/stat: no btime line");
}

static int count_fds(uint64_t *out, struct err *err)
{
    DIR *d = opendir("/proc/self/fd");
    const struct dirent *e;
    uint64_t n = 0;

    if (d == NULL) {
        return err_set(err, ERR_IO, "open /proc/self/fd: %s", strerror(errno));
    }
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    *out = n;
    return 0;
}

int procstat_read(struct procstat *out, struct err *err)
{
    char text[PROCSTAT_TEXT_MAX];
    struct procstat_raw raw = {0};
    struct rlimit lim;
    uint64_t btime = 0;
    long tck = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);

    if (tck <= 0 || page <= 0) {
        return err_set(err, ERR_IO, "sysconf: no clock tick or page size");
    }
    if (read_text("/proc/self/stat", text, sizeof(text), err) != 0) {
        return err->code;
    }
    if (!procstat_parse_stat(text, &raw)) {
        return err_set(err, ERR_IO, "/proc/self/stat: unexpected shape");
    }
    if (read_btime(&btime, err) != 0) {
        return err->code;
    }
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
        return err_set(err, ERR_IO, "getrlimit(RLIMIT_NOFILE): %s",
                       strerror(errno));
    }
    if (count_fds(&out->open_fds, err) != 0) {
        return err->code;
    }
    out->cpu_seconds =
        (double)(raw.utime_ticks + raw.stime_ticks) / (double)tck;
    out->start_time_seconds =
        (double)btime + (double)raw.starttime_ticks / (double)tck;
    out->resident_bytes = raw.rss_pages * (uint64_t)page;
    out->virtual_bytes = raw.vsize_bytes;
    out->max_fds =
        lim.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)lim.rlim_cur;
    return 0;
}
