/* touch_bench: what this machine charges for memory a process touches for
 * the first time, the cost under the sink's store read (LMDB's map) and
 * under its slabs (anonymous memory), each beside its peer in the same run.
 *
 *   touch_bench [--mb N] [--runs N] [--dir DIR]
 *
 * Writes a file of N MB (default 256) in DIR (default /tmp), then for each
 * of `runs` rounds:
 *   - file: a fresh read-only MAP_SHARED mapping of it, one byte read per
 *     4 KiB page (the first touch), then again (the second), beside pread()
 *     of the same bytes into one warm 1 MiB buffer (the peer);
 *   - anon: a fresh anonymous mapping written once per 4 KiB page, with
 *     4 KiB pages and with MADV_HUGEPAGE, beside the same writes into
 *     memory already touched (the peer).
 * Prints the median ns per 4 KiB of each and the ratios. A machine whose
 * page tables are shadowed by its hypervisor shows a first touch many times
 * its peer; bare metal and nested paging show a small multiple. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_RUNS  15
#define PAGE      ((size_t)4096)
#define HUGE      ((size_t)2 * 1024 * 1024)
#define READ_UNIT ((size_t)1024 * 1024)

enum fig {
    F_MAP_FIRST,
    F_MAP_SECOND,
    F_PREAD,
    F_ANON_4K,
    F_ANON_HUGE,
    F_ANON_WARM,
    F_N
};

static const char *const fig_names[F_N] = {"file mmap, first touch",
                                           "file mmap, second touch",
                                           "file pread (peer)",
                                           "anon 4 KiB pages, first touch",
                                           "anon huge pages, first touch",
                                           "anon, touched before (peer)"};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;

    return x < y ? -1 : x > y ? 1 : 0;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

/* A file of n bytes of varied data at path, written like a copy is. */
static void write_file(const char *path, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *b = malloc(READ_UNIT);

    if (fd < 0 || b == NULL) {
        die("touch_bench: file");
    }
    for (size_t i = 0; i < READ_UNIT; i++) {
        b[i] = (char)(i * 131 + (i >> 9));
    }
    for (size_t at = 0; at < n; at += READ_UNIT) {
        if (write(fd, b, READ_UNIT) != (ssize_t)READ_UNIT) {
            die("touch_bench: write");
        }
    }
    free(b);
    if (fsync(fd) != 0 || close(fd) != 0) {
        die("touch_bench: fsync");
    }
}

/* Seconds to read one byte of every page of p[0..n); *sum keeps it. */
static double read_pages(const volatile char *p, size_t n, unsigned *sum)
{
    double t0 = now_s();

    for (size_t i = 0; i < n; i += PAGE) {
        *sum += (unsigned char)p[i];
    }
    return now_s() - t0;
}

static double write_pages(volatile char *p, size_t n, char v)
{
    double t0 = now_s();

    for (size_t i = 0; i < n; i += PAGE) {
        p[i] = v;
    }
    return now_s() - t0;
}

static void file_round(const char *path, size_t n, double *out, unsigned *sum)
{
    int fd = open(path, O_RDONLY);
    char *m;
    char *b = malloc(READ_UNIT);
    double t0;

    if (fd < 0 || b == NULL) {
        die("touch_bench: open");
    }
    m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        die("touch_bench: mmap");
    }
    out[F_MAP_FIRST] = read_pages(m, n, sum);
    out[F_MAP_SECOND] = read_pages(m, n, sum);
    munmap(m, n);
    memset(b, 0, READ_UNIT);
    t0 = now_s();
    for (size_t at = 0; at < n; at += READ_UNIT) {
        if (pread(fd, b, READ_UNIT, (off_t)at) != (ssize_t)READ_UNIT) {
            die("touch_bench: pread");
        }
        *sum += (unsigned char)b[at % READ_UNIT];
    }
    out[F_PREAD] = now_s() - t0;
    free(b);
    close(fd);
}

/* A fresh anonymous mapping of n bytes aligned to HUGE, asking for huge
 * pages or not; *base and *len are what to unmap. */
static char *anon_map(size_t n, int huge, char **base, size_t *len)
{
    *len = n + HUGE;
    *base = mmap(NULL, *len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (*base == MAP_FAILED) {
        die("touch_bench: mmap anon");
    }
    char *p = *base + (HUGE - (size_t)((uintptr_t)*base % HUGE)) % HUGE;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)huge;
#endif
    return p;
}

static void anon_round(size_t n, double *out)
{
    char *base;
    size_t len;
    char *p = anon_map(n, 0, &base, &len);

    out[F_ANON_4K] = write_pages(p, n, 1);
    out[F_ANON_WARM] = write_pages(p, n, 2);
    munmap(base, len);
    p = anon_map(n, 1, &base, &len);
    out[F_ANON_HUGE] = write_pages(p, n, 1);
    munmap(base, len);
}

int main(int argc, char **argv)
{
    size_t mb = 256;
    int runs = 5;
    const char *dir = "/tmp";
    char path[4096];
    double fig[F_N][MAX_RUNS];
    unsigned sum = 0;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--mb") == 0) {
            mb = (size_t)strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--runs") == 0) {
            runs = (int)strtol(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--dir") == 0) {
            dir = argv[i + 1];
        }
    }
    if (mb < 2 || runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "touch_bench: --mb >= 2, --runs 1..%d\n", MAX_RUNS);
        return 2;
    }
    size_t n = mb * 1024 * 1024;
    snprintf(path, sizeof(path), "%s/touch_bench.%ld", dir, (long)getpid());
    write_file(path, n);
    for (int r = 0; r < runs; r++) {
        double one[F_N];

        file_round(path, n, one, &sum);
        anon_round(n, one);
        for (int f = 0; f < F_N; f++) {
            fig[f][r] = one[f] * (double)PAGE / (double)n * 1e9;
        }
    }
    unlink(path);
    double med[F_N];
    printf("touch_bench: %zu MB, median of %d run(s), ns per 4 KiB page\n", mb,
           runs);
    for (int f = 0; f < F_N; f++) {
        med[f] = median(fig[f], runs);
        printf("  %-30s %9.0f\n", fig_names[f], med[f]);
    }
    printf("file mmap first touch / pread: %.1f x; anon 4 KiB first touch / "
           "touched before: %.0f x; huge pages / touched before: %.1f x\n",
           med[F_MAP_FIRST] / (med[F_PREAD] > 0 ? med[F_PREAD] : 1e-9),
           med[F_ANON_4K] / (med[F_ANON_WARM] > 0 ? med[F_ANON_WARM] : 1e-9),
           med[F_ANON_HUGE] / (med[F_ANON_WARM] > 0 ? med[F_ANON_WARM] : 1e-9));
    double load[3];
    if (getloadavg(load, 3) == 3) {
        printf("load average: %.2f %.2f %.2f (checksum %u)\n", load[0], load[1],
               load[2], sum);
    }
    return 0;
}
