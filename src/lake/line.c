/* One JSONL line of the lake read back (docs/design/formats.md §6).
 *
 * The envelope is scanned by hand (it has a fixed shape), its two strings
 * are unescaped with the JSON reader, and then the line is rebuilt with the
 * sink's writer and compared: whatever the writer would not have written is
 * refused, so the reader never has to know every spelling rule itself. */
#include "lake/line.h"

#include <string.h>

#include "base/isotime.h"
#include "base/json.h"
#include "sink/jsonl.h"

#define LINE_TS_LEN 27 /* 2026-09-04T10:03:41.918204Z */

static int line_bad(struct err *err, const char *what)
{
    return err_set(err, ERR_CORRUPT,
                   "not the envelope "
                   "{\"partition\",\"offset\",\"transactionId\",\"ts\","
                   "\"payload\"}: %s",
                   what);
}

static bool line_lit(const char *p, size_t n, size_t *at, const char *lit)
{
    size_t k = strlen(lit);

    if (n - *at < k || memcmp(p + *at, lit, k) != 0) {
        return false;
    }
    *at += k;
    return true;
}

/* A JSON string starting at p[*at] ('"'): its span, unescaped into out
 * (appended, NUL-terminated). */
/* A string read from the line: where its unescaped bytes sit in scratch,
 * and whether the line spells it as the writer copies it (as is). */
struct line_str {
    size_t at;
    size_t len;
    bool is_plain;
};

static int line_string(const char *p, size_t n, size_t *at, struct buf *out,
                       struct line_str *span, struct err *err)
{
    size_t i = *at + 1;
    struct json_doc d = {0};
    int rc;

    if (*at >= n || p[*at] != '"') {
        return line_bad(err, "a string is expected");
    }
    bool is_plain = true; /* printable ASCII, no escape: copied as is */
    const char *q = *at + 1 < n ? memchr(p + *at + 1, '"', n - *at - 1) : NULL;
    unsigned bad = 0;

    /* the common string: up to the next quote, no byte outside printable
     * ASCII and no backslash (one branch-free pass) */
    for (const char *c = p + i; q != NULL && c < q; c++) {
        unsigned char b = (unsigned char)*c;

        bad |=
            (unsigned)(b < 0x20) | (unsigned)(b > 0x7e) | (unsigned)(b == '\\');
    }
    if (q != NULL && bad == 0) {
        i = (size_t)(q - p);
    } else {
        while (i < n && p[i] != '"') {
            unsigned char c = (unsigned char)p[i];

            is_plain = is_plain && c >= 0x20 && c < 0x7f && c != '\\';
            i += c == '\\' ? 2 : 1;
        }
    }
    if (i >= n) {
        return line_bad(err, "a string does not end");
    }
    span->is_plain = is_plain;
    if (is_plain) {
        span->at = out->len;
        span->len = i - *at - 1;
        if (buf_append(out, p + *at + 1, span->len, err) != 0 ||
            buf_append_byte(out, '\0', err) != 0) {
            return err->code;
        }
        *at = i + 1;
        return 0;
    }
    rc = json_parse(&d, p + *at, i + 1 - *at, NULL, err);
    if (rc == 0) {
        span->at = out->len;
        rc = json_get_str(&d, 0, out, err);
        span->len = out->len - span->at;
        if (rc == 0) {
            rc = buf_append_byte(out, '\0', err);
        }
    }
    json_doc_free(&d);
    if (rc != 0) {
        return line_bad(err, "bad JSON string");
    }
    *at = i + 1;
    return 0;
}

/* ts at p (LINE_TS_LEN bytes and the closing quote) into *ts; *exact when
 * the writer spells *ts with these very bytes (proven through the memo or
 * by formatting it). false when it is not ISO with 6 digits at all. */
static bool line_ts(const char *p, int64_t *ts, struct lake_line_memo *memo,
                    bool *exact)
{
    char again[32];
    int64_t us = 0;

    *exact = false;
    if (p[LINE_TS_LEN] != '"') {
        return false;
    }
    if (memo != NULL && memo->is_set && memcmp(p, memo->sec, 20) == 0 &&
        p[LINE_TS_LEN - 1] == 'Z') {
        bool is_digits = true;

        for (size_t i = 20; i < LINE_TS_LEN - 1; i++) {
            is_digits = is_digits && p[i] >= '0' && p[i] <= '9';
            us = us * 10 + (p[i] - '0');
        }
        if (is_digits) {
            *ts = memo->sec_us + us;
            *exact = true;
            return true;
        }
    }
    if (!isotime_parse_us(p, LINE_TS_LEN, ts)) {
        return false;
    }
    isotime_format_us(*ts, again);
    *exact = memcmp(again, p, LINE_TS_LEN) == 0 && again[LINE_TS_LEN] == '\0';
    if (*exact && memo != NULL && *ts >= 0) {
        memcpy(memo->sec, p, 20);
        memo->sec_us = *ts - *ts % 1000000;
        memo->is_set = true;
    }
    return true;
}

/* The offset at p[*at]: up to 19 digits after an optional '-'. *canon
 * when the writer prints the value with these bytes (under 19 digits, no
 * leading zero, no "-0"). false when there is no digit. */
static bool line_offset(const char *p, size_t n, size_t *at, int64_t *off,
                        bool *canon)
{
    bool is_neg = false;
    size_t digits = 0;
    size_t first;

    *off = 0;
    if (*at < n && p[*at] == '-') {
        is_neg = true;
        (*at)++;
    }
    first = *at;
    while (*at < n && p[*at] >= '0' && p[*at] <= '9' && digits < 19) {
        *off = *off * 10 + (p[*at] - '0');
        (*at)++;
        digits++;
    }
    if (is_neg) {
        *off = -*off;
    }
    *canon = digits > 0 && digits < 19 &&
             (p[first] != '0' || (digits == 1 && !is_neg));
    return digits > 0;
}

int lake_line_parse(const char *p, size_t n, struct sink_record *r,
                    struct buf *scratch, struct err *err)
{
    return lake_line_read(p, n, r, scratch, NULL, err);
}

int lake_line_read(const char *p, size_t n, struct sink_record *r,
                   struct buf *scratch, struct lake_line_memo *memo,
                   struct err *err)
{
    size_t at = 0;
    struct line_str ps = {0, 0, false};
    struct line_str tx = {0, 0, false};
    int64_t off = 0;
    bool off_canon = false;
    bool ts_exact = false;
    int rc;

    buf_reset(scratch);
    if (!line_lit(p, n, &at, "{\"partition\":") ||
        line_string(p, n, &at, scratch, &ps, err) != 0) {
        return line_bad(err, "no partition");
    }
    if (!line_lit(p, n, &at, ",\"offset\":")) {
        return line_bad(err, "no offset");
    }
    if (!line_offset(p, n, &at, &off, &off_canon)) {
        return line_bad(err, "offset is not an integer");
    }
    if (!line_lit(p, n, &at, ",\"transactionId\":") ||
        line_string(p, n, &at, scratch, &tx, err) != 0) {
        return line_bad(err, "no transactionId");
    }
    if (!line_lit(p, n, &at, ",\"ts\":\"") || n - at < LINE_TS_LEN + 1) {
        return line_bad(err, "no ts");
    }
    if (!line_ts(p + at, &r->ts, memo, &ts_exact)) {
        return err_set(err, ERR_CORRUPT, "ts %.*s is not ISO with 6 digits",
                       (int)LINE_TS_LEN, p + at);
    }
    at += LINE_TS_LEN + 1;
    if (!line_lit(p, n, &at, ",\"payload\":") || n - at < 2 ||
        p[n - 1] != '}') {
        return line_bad(err, "no payload");
    }
    if (buf_reserve(scratch, 6 * at + 64, err) != 0) {
        return err->code;
    }
    r->partition = (struct slice){scratch->data + ps.at, ps.len};
    r->offset = off;
    r->txn = (struct slice){scratch->data + tx.at, tx.len};
    r->payload = (struct slice){p + at, n - 1 - at};
    if (json_validate_line(r->payload.ptr, r->payload.len,
                           JSON_MAX_DEPTH_DEFAULT, err) != 0) {
        return err_set(err, ERR_CORRUPT, "payload is not JSON");
    }
    /* (1) in place: printable ASCII without '\\' is what the writer copies
     * as is, line_offset and line_ts proved the rest; the keys and
     * punctuation were matched literally on the way. */
    if (ps.is_plain && tx.is_plain && off_canon && ts_exact) {
        return 0;
    }
    /* (1): the writer's bytes for this record must be the line's. The
     * payload is the line's own (checked above), so only the envelope is
     * rebuilt, into scratch after the strings (room reserved before the
     * slices were taken: an escape writes at most 6 bytes per byte); the
     * writer's line for an empty payload ends "null}\n". */
    {
        struct sink_record head = *r;
        size_t from = scratch->len;

        head.payload = (struct slice){NULL, 0};
        rc = jsonl_line(scratch, &head, err);
        if (rc != 0 || scratch->len - from != at + 6 ||
            memcmp(scratch->data + from, p, at) != 0) {
            return err_set(err, ERR_CORRUPT, "envelope is not byte-exact");
        }
    }
    return 0;
}
