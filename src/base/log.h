/* Logging: one stderr line per event, as text (the default), logfmt or
 * JSON.
 *
 *   text:   <UTC ISO-µs> <LEVEL> <module>: <text> k=v ...
 *           (the level upper case, right-aligned in five columns: the line
 *           the product page prints, "ERROR boot: FATAL: ...", and what the
 *           reference's log regexes read, "window committed queue=... k=")
 *   logfmt: ts=<UTC ISO-µs> level=info area=<module> msg="<text>" k=v ...
 *   json:   {"ts":"…","level":"info","area":"…","msg":"…","k":"v",…}
 *
 * (1) Every line is valid in its format, whatever the bytes of the message
 *     and the values: text and logfmt quote a value that is empty or holds a
 *     space,
 *     `"`, `=`, `\` or a control byte, and escapes `"`, `\`, `\n`, `\r`,
 *     `\t` and other control bytes (`\u00XX`); JSON escapes the same way.
 *     Bytes that are not UTF-8 become U+FFFD.
 * (2) The first four fields are always ts, level, area, msg, in that order
 *     (text: the message bare, its control bytes escaped as in a value);
 *     call-site fields follow in the order given, their values as strings.
 *     A field key is [A-Za-z0-9_.-]; other bytes become `_`, and a key that
 *     would repeat ts, level, area or msg gets a `_` prefix.
 * (3) A line longer than LOG_LINE_MAX is cut at a character boundary, its
 *     quotes and braces closed, and ends with truncated=true.
 * (4) The level is checked before any formatting: by the log_* macros
 *     before their arguments are evaluated, and by log_write() and
 *     log_fields() themselves when called directly.
 *
 * QUEEN_LOG_LEVEL (error, warn, info, debug) sets the threshold; the default
 * is info. QUEEN_LOG_FORMAT (text, logfmt, json) sets the format. */
#ifndef QUEEN_BASE_LOG_H
#define QUEEN_BASE_LOG_H

#include <stdbool.h>

#include "base/common.h"

enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };
enum log_format { LOG_FORMAT_LOGFMT = 0, LOG_FORMAT_JSON, LOG_FORMAT_TEXT };

#define LOG_LINE_MAX   8192
#define LOG_FIELDS_MAX 64  /* call-site fields that still get the context */
#define LOG_VALUE_MAX  256 /* a LOG_FMT value, NUL included */

/* One call-site field; both borrowed for the call. A NULL value is "". */
struct log_field {
    const char *key;
    const char *value;
};

extern int log_threshold;

void log_set_level(int level);
/* Parse "error|warn|info|debug"; returns -1 when unknown. */
int log_parse_level(const char *s);
void log_set_format(int format);
/* The format lines are written in (enum log_format). */
int log_get_format(void);
/* Parse "logfmt|json" (any case); returns -1 when unknown. */
int log_parse_format(const char *s);

/* A line whose msg is the formatted text and that has no other field. */
void log_write(int level, const char *module, const char *fmt, ...)
    PRINTF(3, 4);
/* A line with fields; f ends with a {NULL, NULL} entry. */
void log_fields(int level, const char *module, const char *msg,
                const struct log_field *f);

/* (5) A thread may name one context field (key and value borrowed until
 * the next call; a NULL key or value clears it): every line it logs carries it
 * after the call-site fields, unless one of them has the same key or there are
 * more than LOG_FIELDS_MAX. The sink sets its tenant so while a thread works
 * for a control-plane tenant's sink. */
void log_context_set(const char *key, const char *value);
/* The fields a line of this thread carries: f with the context field after
 * its own, in out (LOG_FIELDS_MAX + 2 entries), or f itself (no context, a
 * field of f has its key, or f has more than LOG_FIELDS_MAX). */
const struct log_field *log_context_fields(const struct log_field *f,
                                           struct log_field *out);

/* One event: its time text, level, module, message and fields (ending with
 * {NULL, NULL}; NULL for none), all borrowed. */
struct log_event {
    const char *ts;
    int level;
    const char *module;
    const char *msg;
    const struct log_field *fields;
};

/* Render one line into out (cap bytes, at least 64); returns its length,
 * newline included, no NUL. Pure: the unit tests call it. */
size_t log_render(char *out, size_t cap, int format, const struct log_event *e);

/* Value helpers for fields: each formats into the buffer it is given and
 * returns it. The LOG_* macros below give them a compound literal that lives
 * until the end of the log statement. */
const char *log_fmt(char *buf, size_t cap, const char *fmt, ...) PRINTF(3, 4);
const char *log_i64(char *buf, size_t cap, int64_t v);
/* Whether logfmt and the text format quote the value s: empty, or holding a
 * space, '"', '=', '\\' or a control byte. */
bool log_value_needs_quotes(const char *s);
const char *log_u64(char *buf, size_t cap, uint64_t v);

#define LOG_FMT(...) \
    log_fmt((char[LOG_VALUE_MAX]){0}, LOG_VALUE_MAX, __VA_ARGS__)
#define LOG_I64(v)  log_i64((char[24]){0}, 24, (int64_t)(v))
#define LOG_U64(v)  log_u64((char[24]){0}, 24, (uint64_t)(v))
#define LOG_BOOL(v) ((v) ? "true" : "false")

#define log_at(level, module, ...)                     \
    do {                                               \
        if ((level) <= log_threshold) {                \
            log_write((level), (module), __VA_ARGS__); \
        }                                              \
    } while (0)
#define log_error(module, ...) log_at(LOG_ERROR, module, __VA_ARGS__)
#define log_warn(module, ...)  log_at(LOG_WARN, module, __VA_ARGS__)
#define log_info(module, ...)  log_at(LOG_INFO, module, __VA_ARGS__)
#define log_debug(module, ...) log_at(LOG_DEBUG, module, __VA_ARGS__)

/* log_info_kv("queen-s3", "window committed", {"queue", q}, {"k", LOG_I64(k)}):
 * the message is plain text, the fields are {key, value} pairs. */
#define log_at_kv(level, module, msg, ...)                                     \
    do {                                                                       \
        if ((level) <= log_threshold) {                                        \
            log_fields((level), (module), (msg),                               \
                       (const struct log_field[]){__VA_ARGS__, {NULL, NULL}}); \
        }                                                                      \
    } while (0)
#define log_error_kv(module, msg, ...) \
    log_at_kv(LOG_ERROR, module, msg, __VA_ARGS__)
#define log_warn_kv(module, msg, ...) \
    log_at_kv(LOG_WARN, module, msg, __VA_ARGS__)
#define log_info_kv(module, msg, ...) \
    log_at_kv(LOG_INFO, module, msg, __VA_ARGS__)
#define log_debug_kv(module, msg, ...) \
    log_at_kv(LOG_DEBUG, module, msg, __VA_ARGS__)

#endif
