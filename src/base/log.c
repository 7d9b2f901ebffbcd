/* Logging: one stderr line per event, as text (the default), logfmt or
 * JSON.
 *
 * A line is rendered whole into a local buffer and written with one
 * write(2), so lines from threads never mix. The renderer is the only place
 * that knows the formats: call sites hand it a message and {key, value}
 * pairs, never a pre-formatted "k=v" text, so a value with a space or a quote
 * cannot break a line (log.h (1)). */
#include "base/log.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"

#define LOG_KEY_MAX 64
/* Room kept back for what closes a cut line: a quote, ,"truncated":true, a
 * brace and the newline. */
#define LOG_RESERVE 32

int log_threshold = LOG_INFO;
static int log_format = LOG_FORMAT_TEXT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
/* The text format's levels: upper case, right-aligned in five columns. */
static const char *const level_marks[] = {"ERROR", " WARN", " INFO", "DEBUG"};
/* In enum log_format's order. */
static const char *const format_names[] = {"logfmt", "json", "text"};
static const char *const reserved_keys[] = {"ts", "level", "area", "msg"};

void log_set_level(int level)
{
    log_threshold = level;
}

int log_parse_level(const char *s)
{
    for (int i = 0; i < (int)ARRAY_LEN(level_names); i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

void log_set_format(int format)
{
    log_format = format == LOG_FORMAT_JSON || format == LOG_FORMAT_LOGFMT
                     ? format
                     : LOG_FORMAT_TEXT;
}

int log_get_format(void)
{
    return log_format;
}

int log_parse_format(const char *s)
{
    for (int i = 0; i < (int)ARRAY_LEN(format_names); i++) {
        if (strcasecmp(s, format_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

/* ---- the writer ---------------------------------------------------------- */

struct w {
    char *p;
    size_t n;
    size_t limit; /* cap - LOG_RESERVE */
    bool is_json;
    bool is_full; /* something did not fit: the rest is dropped */
};

/* Append n bytes whole, or nothing and mark the line full. */
static bool put(struct w *w, const char *s, size_t n)
{
    if (w->is_full || w->n + n > w->limit) {
        w->is_full = true;
        return false;
    }
    memcpy(w->p + w->n, s, n);
    w->n += n;
    return true;
}

static bool puts_(struct w *w, const char *s)
{
    return put(w, s, strlen(s));
}

bool log_value_needs_quotes(const char *s)
{
    if (*s == '\0') {
        return true;
    }
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p <= ' ' || *p == 0x7f || *p == '"' || *p == '=' || *p == '\\') {
            return true;
        }
    }
    return false;
}

/* One character of a value, escaped, into t (at least 8 bytes); returns its
 * length and sets *used to the input bytes it took. */
static size_t escape_one(const unsigned char *p, size_t left, char *t,
                         size_t *used)
{
    size_t n = json_utf8_len(p, left);

    *used = n == 0 ? 1 : n;
    if (n == 0) {
        memcpy(t, "\xEF\xBF\xBD", 4); /* U+FFFD, with its NUL */
        return 3;
    }
    if (n > 1) {
        memcpy(t, p, n);
        return n;
    }
    switch (*p) {
    case '"':
        return (size_t)snprintf(t, 8, "\\\"");
    case '\\':
        return (size_t)snprintf(t, 8, "\\\\");
    case '\n':
        return (size_t)snprintf(t, 8, "\\n");
    case '\r':
        return (size_t)snprintf(t, 8, "\\r");
    case '\t':
        return (size_t)snprintf(t, 8, "\\t");
    default:
        break;
    }
    if (*p < 0x20 || *p == 0x7f) {
        return (size_t)snprintf(t, 8, "\\u%04x", (unsigned)*p);
    }
    t[0] = (char)*p;
    return 1;
}

/* The characters of s, escaped; is_bare (the text format's message): a
 * quote or a backslash stays as it is, only what would break the line is
 * escaped. */
static void put_escaped(struct w *w, const char *s, bool is_bare)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t left = strlen(s);
    char t[8];
    size_t used;

    while (left > 0) {
        size_t k = 1;

        used = 1;
        if (is_bare && (*p == '"' || *p == '\\')) {
            t[0] = (char)*p;
        } else {
            k = escape_one(p, left, t, &used);
        }
        if (!put(w, t, k)) {
            break;
        }
        p += used;
        left -= used;
    }
}

/* A value: quoted in JSON always, in logfmt and text when
 * log_value_needs_quotes(). A value cut short still gets its closing quote
 * (from the reserve). */
static void put_value(struct w *w, const char *s)
{
    bool quoted = w->is_json || log_value_needs_quotes(s);

    if (quoted && !put(w, "\"", 1)) {
        return;
    }
    put_escaped(w, s, false);
    if (quoted) {
        w->p[w->n++] = '"';
    }
}

/* A key: [A-Za-z0-9_.-], other bytes '_', a reserved one prefixed. */
static void clean_key(const char *key, bool is_user, char *out)
{
    size_t n = 0;

    if (is_user) {
        for (size_t i = 0; i < ARRAY_LEN(reserved_keys); i++) {
            if (strcmp(key, reserved_keys[i]) == 0) {
                out[n++] = '_';
            }
        }
    }
    for (const char *p = key; *p != '\0' && n < LOG_KEY_MAX - 1; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
        if (!ok) {
            c = '_';
        }
        out[n++] = c;
    }
    if (n == 0) {
        out[n++] = '_';
    }
    out[n] = '\0';
}

/* key=value or "key":value, with the separator before it. A field starts
 * only with room for its key and a few bytes of its value. */
static void put_field(struct w *w, const char *key, const char *value,
                      bool is_user)
{
    char k[LOG_KEY_MAX + 8];
    char head[LOG_KEY_MAX + 16];
    int n;

    if (w->is_full) {
        return;
    }
    clean_key(key, is_user, k);
    if (w->is_json) {
        n = snprintf(head, sizeof(head), "%s\"%s\":", w->n > 1 ? "," : "", k);
    } else {
        n = snprintf(head, sizeof(head), "%s%s=", w->n > 0 ? " " : "", k);
    }
    if (w->n + (size_t)n + 10 > w->limit) {
        w->is_full = true;
        return;
    }
    put(w, head, (size_t)n);
    put_value(w, value != NULL ? value : "");
}

/* The end of a line, written into the reserve: the truncated mark of a cut
 * line, the brace, the newline. Returns the line's length. */
static size_t close_line(struct w *w)
{
    if (w->is_full) {
        const char *t = w->is_json ? ",\"truncated\":true" : " truncated=true";
        for (; *t != '\0'; t++) {
            w->p[w->n++] = *t;
        }
    }
    if (w->is_json) {
        w->p[w->n++] = '}';
    }
    w->p[w->n++] = '\n';
    return w->n;
}

size_t log_render(char *out, size_t cap, int format, const struct log_event *e)
{
    struct w w = {out, 0, cap - LOG_RESERVE, format == LOG_FORMAT_JSON, false};
    int lv = e->level < 0 ? 0 : e->level > LOG_DEBUG ? LOG_DEBUG : e->level;

    ASSERT(cap >= 64);
    out[0] = '\0'; /* written through w below */
    if (format == LOG_FORMAT_TEXT) {
        /* "<ts> <LEVEL> <area>: <msg>": the head, then fields as logfmt's */
        put_escaped(&w, e->ts, false);
        puts_(&w, " ");
        puts_(&w, level_marks[lv]);
        puts_(&w, " ");
        put_escaped(&w, e->module, false);
        puts_(&w, ": ");
        put_escaped(&w, e->msg, true);
    } else {
        if (w.is_json) {
            puts_(&w, "{");
        }
        put_field(&w, "ts", e->ts, false);
        put_field(&w, "level", level_names[lv], false);
        put_field(&w, "area", e->module, false);
        put_field(&w, "msg", e->msg, false);
    }
    for (const struct log_field *f = e->fields; f != NULL && f->key != NULL;
         f++) {
        put_field(&w, f->key, f->value, true);
    }
    return close_line(&w);
}

/* ---- the entry points ---------------------------------------------------- */

/* The field every line of this thread carries (log_context_set); key NULL:
 * none. */
static _Thread_local struct log_field log_context;

void log_context_set(const char *key, const char *value)
{
    log_context.key = value != NULL ? key : NULL;
    log_context.value = value;
}

const struct log_field *log_context_fields(const struct log_field *f,
                                           struct log_field *out)
{
    size_t n = 0;

    if (log_context.key == NULL) {
        return f;
    }
    for (; f != NULL && f[n].key != NULL; n++) {
        if (n == LOG_FIELDS_MAX || strcmp(f[n].key, log_context.key) == 0) {
            return f;
        }
    }
    if (n > 0) {
        memcpy(out, f, n * sizeof(*f));
    }
    out[n] = log_context;
    out[n + 1] = (struct log_field){NULL, NULL};
    return out;
}

static void log_emit(int level, const char *module, const char *msg,
                     const struct log_field *f)
{
    struct log_field all[LOG_FIELDS_MAX + 2];
    char line[LOG_LINE_MAX];
    char ts[80];
    struct timeval tv;
    struct tm tm;

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, (long)tv.tv_usec);
    struct log_event e = {ts, level, module, msg, log_context_fields(f, all)};
    size_t n = log_render(line, sizeof(line), log_format, &e);
    if (write(STDERR_FILENO, line, n) < 0) {
        /* nothing better to do with a failed log write */
    }
}

void log_write(int level, const char *module, const char *fmt, ...)
{
    char msg[LOG_LINE_MAX];
    va_list ap;

    if (level > log_threshold) {
        return; /* (4), for a direct call */
    }
    va_start(ap, fmt);
    if (vsnprintf(msg, sizeof(msg), fmt, ap) < 0) {
        msg[0] = '\0';
    }
    va_end(ap);
    log_emit(level, module, msg, NULL);
}

void log_fields(int level, const char *module, const char *msg,
                const struct log_field *f)
{
    if (level > log_threshold) {
        return; /* (4), for a direct call */
    }
    log_emit(level, module, msg, f);
}

const char *log_fmt(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (vsnprintf(buf, cap, fmt, ap) < 0) {
        buf[0] = '\0';
    }
    va_end(ap);
    return buf;
}

const char *log_i64(char *buf, size_t cap, int64_t v)
{
    snprintf(buf, cap, "%" PRId64, v);
    return buf;
}

const char *log_u64(char *buf, size_t cap, uint64_t v)
{
    snprintf(buf, cap, "%" PRIu64, v);
    return buf;
}
