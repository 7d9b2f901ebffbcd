/* openloop: an open-loop HTTP/1.1 load generator for bench/push.
 *
 * wrk keeps each connection busy (a closed loop): when the server stalls,
 * wrk stops sending, and the stall shows as one slow request instead of
 * the queue of requests a client at a fixed rate would have waited in. A
 * goal stated at a rate ("p99 <= 20 ms at 200k records/s") needs requests
 * sent on a schedule: request k is due at t0 + k / rate, whatever came
 * back, and its latency is counted from when it was due (so time spent
 * waiting for a free connection counts, as it would for a real client).
 *
 * Usage: openloop PORT PATH BODYFILE REQS_PER_S SECONDS CONNS HISTFILE
 * POSTs BODYFILE (Content-Type: application/json) to 127.0.0.1:PORT PATH
 * on CONNS keep-alive connections. Prints one line: "requests N seconds S
 * non2xx K behind B" (B: requests not yet sent, for want of an idle
 * connection, when the schedule ended), and writes HISTFILE as "latency-us
 * count" lines. Exits 2 on a usage or connection error.
 *
 * PATH "resp:N" speaks Redis's protocol instead (bench/push's Redis peer on
 * the same schedule): BODYFILE is sent as it is, N pipelined commands, and
 * a request is answered once N replies have come back; K then counts the
 * requests with an error reply. Replies are simple strings, errors,
 * integers or bulk strings (what XADD answers). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define OL_IN_CAP  65536
#define OL_MAX_CON 256
#define OL_HEAD                               \
    "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" \
    "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n"

struct ol_conn {
    int fd;
    bool is_busy;
    size_t sent;    /* bytes of the request written so far */
    int64_t due_ns; /* when the request in flight was due */
    size_t in_len;  /* bytes of the answer read so far */
    char in[OL_IN_CAP];
};

struct ol {
    char *req; /* the whole request: head and body */
    size_t req_len;
    struct ol_conn *conns;
    int n_conns;
    int ep;
    int resp_replies; /* > 0: Redis's protocol, replies per request */
    int64_t *lat_us;  /* one per answered request */
    size_t n_lat;
    size_t cap_lat;
    uint64_t non2xx;
};

static int64_t ol_now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static _Noreturn void ol_die(const char *what)
{
    fprintf(stderr, "openloop: %s: %s\n", what, strerror(errno));
    exit(2);
}

static int ol_connect(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port)};
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0) {
        ol_die("socket");
    }
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        ol_die("connect");
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
        ol_die("fcntl");
    }
    return fd;
}

/* Write what is left of c's request; 0, or -1 when the peer is gone. */
static int ol_flush(struct ol *o, struct ol_conn *c)
{
    while (c->sent < o->req_len) {
        ssize_t k = write(c->fd, o->req + c->sent, o->req_len - c->sent);

        if (k < 0) {
            return errno == EAGAIN ? 0 : -1;
        }
        c->sent += (size_t)k;
    }
    return 0;
}

static void ol_watch(struct ol *o, int i, bool want_out)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0),
                             .data.u32 = (uint32_t)i};

    if (epoll_ctl(o->ep, EPOLL_CTL_MOD, o->conns[i].fd, &ev) != 0) {
        ol_die("epoll_ctl");
    }
}

static void ol_send(struct ol *o, int i, int64_t due_ns)
{
    struct ol_conn *c = &o->conns[i];

    c->is_busy = true;
    c->sent = 0;
    c->due_ns = due_ns;
    if (ol_flush(o, c) != 0) {
        ol_die("write");
    }
    if (c->sent < o->req_len) {
        ol_watch(o, i, true);
    }
}

/* The length of a whole answer at the start of in[0..n), or 0 when more
 * is to come; *status is its status code. */
static size_t ol_answer(const char *in, size_t n, int *status)
{
    const char *end = memmem(in, n, "\r\n\r\n", 4);
    size_t head;
    size_t body = 0;

    if (end == NULL) {
        return 0;
    }
    head = (size_t)(end - in) + 4;
    *status = n > 12 ? (int)strtol(in + 9, NULL, 10) : 0;
    for (const char *p = in; p < end;) {
        const char *eol = memmem(p, (size_t)(end - p) + 2, "\r\n", 2);

        if (eol - p > 15 && strncasecmp(p, "Content-Length:", 15) == 0) {
            body = (size_t)strtoull(p + 15, NULL, 10);
        }
        p = eol + 2;
    }
    return n >= head + body ? head + body : 0;
}

/* The length of resp_replies whole replies at the start of in[0..n), or 0
 * when more is to come; *status is 500 when one of them is an error. */
static size_t ol_answer_resp(const char *in, size_t n, int replies, int *status)
{
    size_t at = 0;

    *status = 200;
    for (int r = 0; r < replies; r++) {
        const char *eol = at < n ? memmem(in + at, n - at, "\r\n", 2) : NULL;
        size_t next;

        if (eol == NULL) {
            return 0;
        }
        next = (size_t)(eol - in) + 2;
        if (in[at] == '$') {
            long len = strtol(in + at + 1, NULL, 10);
            next += len >= 0 ? (size_t)len + 2 : 0;
        } else if (in[at] == '-') {
            *status = 500;
        } else if (in[at] != '+' && in[at] != ':') {
            errno = EPROTO;
            ol_die("a reply that is not a string, an error or an integer");
        }
        if (next > n) {
            return 0;
        }
        at = next;
    }
    return at;
}

static void ol_record(struct ol *o, int64_t lat_ns)
{
    if (o->n_lat == o->cap_lat) {
        o->cap_lat = o->cap_lat ? o->cap_lat * 2 : 4096;
        o->lat_us = realloc(o->lat_us, o->cap_lat * sizeof(*o->lat_us));
        if (o->lat_us == NULL) {
            ol_die("realloc");
        }
    }
    o->lat_us[o->n_lat++] = lat_ns / 1000;
}

/* Read what c's peer sent; true when its answer is complete. */
static bool ol_read(struct ol *o, struct ol_conn *c)
{
    for (;;) {
        ssize_t k = read(c->fd, c->in + c->in_len, OL_IN_CAP - c->in_len);
        int status = 0;
        size_t len;

        if (k == 0 || (k < 0 && errno != EAGAIN)) {
            ol_die("the server closed a connection");
        }
        if (k < 0) {
            return false;
        }
        c->in_len += (size_t)k;
        len = o->resp_replies > 0
                  ? ol_answer_resp(c->in, c->in_len, o->resp_replies, &status)
                  : ol_answer(c->in, c->in_len, &status);
        if (len > 0) {
            ol_record(o, ol_now() - c->due_ns);
            o->non2xx += status < 200 || status > 299;
            memmove(c->in, c->in + len, c->in_len - len);
            c->in_len -= len;
            return true;
        }
        if (c->in_len == OL_IN_CAP) {
            errno = EMSGSIZE;
            ol_die("an answer over 64 KiB");
        }
    }
}

static char *ol_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *b;
    long n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        ol_die(path);
    }
    b = malloc((size_t)n + 1);
    if (b == NULL || fread(b, 1, (size_t)n, f) != (size_t)n) {
        ol_die(path);
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static int ol_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a;
    int64_t y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static void ol_write_hist(struct ol *o, const char *path)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        ol_die(path);
    }
    qsort(o->lat_us, o->n_lat, sizeof(*o->lat_us), ol_cmp);
    for (size_t i = 0; i < o->n_lat;) {
        size_t j = i;

        while (j < o->n_lat && o->lat_us[j] == o->lat_us[i]) {
            j++;
        }
        fprintf(f, "%lld %zu\n", (long long)o->lat_us[i], j - i);
        i = j;
    }
    fclose(f);
}

/* A number argument: false unless all of text is one, above 0. */
static bool ol_num(const char *text, double *out)
{
    char *end = NULL;

    errno = 0;
    *out = strtod(text, &end);
    return errno == 0 && end != text && *end == '\0' && *out > 0;
}

/* The request: head and body in one buffer. */
static void ol_request(struct ol *o, const char *path, const char *body_file)
{
    size_t body_len;
    char *body = ol_slurp(body_file, &body_len);
    int head_len = snprintf(NULL, 0, OL_HEAD, path, body_len);

    if (o->resp_replies > 0) { /* Redis: the commands as they are */
        o->req = body;
        o->req_len = body_len;
        return;
    }
    o->req = malloc((size_t)head_len + body_len + 1);
    if (head_len < 0 || o->req == NULL) {
        ol_die("malloc");
    }
    snprintf(o->req, (size_t)head_len + 1, OL_HEAD, path, body_len);
    memcpy(o->req + head_len, body, body_len);
    o->req_len = (size_t)head_len + body_len;
    free(body);
}

static void ol_open(struct ol *o, int port)
{
    o->ep = epoll_create1(0);
    o->conns = calloc((size_t)o->n_conns, sizeof(*o->conns));
    if (o->ep < 0 || o->conns == NULL) {
        ol_die("setup");
    }
    for (int i = 0; i < o->n_conns; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};

        o->conns[i].fd = ol_connect(port);
        if (epoll_ctl(o->ep, EPOLL_CTL_ADD, o->conns[i].fd, &ev) != 0) {
            ol_die("epoll_ctl");
        }
    }
}

/* One event of connection i: the rest of its request written, its
 * answer read. Returns 1 when an answer completed. */
static int ol_event(struct ol *o, const struct epoll_event *ev)
{
    int i = (int)ev->data.u32;
    struct ol_conn *c = &o->conns[i];

    if ((ev->events & EPOLLOUT) != 0 && c->sent < o->req_len) {
        if (ol_flush(o, c) != 0) {
            ol_die("write");
        }
        if (c->sent == o->req_len) {
            ol_watch(o, i, false);
        }
    }
    if ((ev->events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 && c->is_busy &&
        ol_read(o, c)) {
        c->is_busy = false;
        return 1;
    }
    return 0;
}

/* The schedule: total requests, one each gap_ns from now. Returns how
 * many were still unsent when the schedule ended. */
static uint64_t ol_run(struct ol *o, uint64_t total, int64_t gap_ns)
{
    int64_t t0 = ol_now();
    int64_t end = t0 + (int64_t)total * gap_ns;
    uint64_t next = 0; /* the next request to send */
    uint64_t done = 0;
    uint64_t behind = UINT64_MAX;

    while (done < total) {
        struct epoll_event evs[OL_MAX_CON];
        struct timespec ts;
        int64_t now = ol_now();
        int64_t wait_ns;
        bool is_all_busy;
        int n;

        /* every request due by now goes out on an idle connection */
        for (int i = 0; i < o->n_conns && next < total; i++) {
            if (!o->conns[i].is_busy && t0 + (int64_t)next * gap_ns <= now) {
                ol_send(o, i, t0 + (int64_t)next * gap_ns);
                next++;
            }
        }
        if (now >= end && behind == UINT64_MAX) {
            behind = total - next;
        }
        is_all_busy = next - done >= (uint64_t)o->n_conns;
        wait_ns = is_all_busy || next == total
                      ? 100000000
                      : t0 + (int64_t)next * gap_ns - now;
        wait_ns = wait_ns < 0 ? 0 : wait_ns;
        ts.tv_sec = wait_ns / 1000000000;
        ts.tv_nsec = wait_ns % 1000000000;
        n = epoll_pwait2(o->ep, evs, OL_MAX_CON, &ts, NULL);
        if (n < 0 && errno != EINTR) {
            ol_die("epoll_wait");
        }
        for (int e = 0; e < n; e++) {
            done += (uint64_t)ol_event(o, &evs[e]);
        }
        if (ol_now() > end + 30 * (int64_t)1000000000) {
            fprintf(stderr,
                    "openloop: %llu answers missing 30 s after the "
                    "schedule ended\n",
                    (unsigned long long)(total - done));
            exit(2);
        }
    }
    return behind == UINT64_MAX ? 0 : behind;
}

int main(int argc, char **argv)
{
    struct ol o = {0};
    double port;
    double rate;
    double secs;
    double conns;
    int64_t t0;
    uint64_t behind;

    if (argc != 8 || !ol_num(argv[1], &port) || port > 65535 ||
        !ol_num(argv[4], &rate) || !ol_num(argv[5], &secs) ||
        !ol_num(argv[6], &conns) || conns > OL_MAX_CON) {
        fprintf(stderr, "usage: openloop PORT PATH BODYFILE REQS_PER_S "
                        "SECONDS CONNS HISTFILE\n");
        return 2;
    }
    o.n_conns = (int)conns;
    if (strncmp(argv[2], "resp:", 5) == 0) {
        double replies;

        if (!ol_num(argv[2] + 5, &replies) || replies > 1e6 ||
            replies != (double)(int)replies) {
            fprintf(stderr, "openloop: resp:N wants a count of replies\n");
            return 2;
        }
        o.resp_replies = (int)replies;
    }
    ol_request(&o, argv[2], argv[3]);
    ol_open(&o, (int)port);
    t0 = ol_now();
    behind = ol_run(&o, (uint64_t)(secs * rate), (int64_t)(1e9 / rate));
    printf("requests %zu seconds %.3f non2xx %llu behind %llu\n", o.n_lat,
           (double)(ol_now() - t0) / 1e9, (unsigned long long)o.non2xx,
           (unsigned long long)behind);
    ol_write_hist(&o, argv[7]);
    for (int i = 0; i < o.n_conns; i++) {
        close(o.conns[i].fd);
    }
    close(o.ep);
    free(o.conns);
    free(o.lat_us);
    free(o.req);
    return 0;
}
