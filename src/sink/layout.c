/* Layout: every name the sink writes, in the bucket and in the KV store.
 * Each builder appends to a caller's buffer and, on failure, leaves it as it
 * was (the cap is the only way to fail). */
#include "sink/layout.h"

#include <stdio.h>
#include <string.h>

#include "base/isotime.h"
#include "base/pct.h"

const char *layout_kind_name(enum layout_kind k)
{
    return k == LAYOUT_MERGED ? "merged" : "per-partition";
}

bool layout_kind_parse(const char *s, enum layout_kind *out)
{
    if (strcmp(s, "merged") == 0) {
        *out = LAYOUT_MERGED;
    } else if (strcmp(s, "per-partition") == 0) {
        *out = LAYOUT_PER_PARTITION;
    } else {
        return false;
    }
    return true;
}

const char *layout_align_name(enum layout_align a)
{
    return a == LAYOUT_ALIGN_HOUR  ? "hour"
           : a == LAYOUT_ALIGN_DAY ? "day"
                                   : "none";
}

bool layout_align_parse(const char *s, enum layout_align *out)
{
    if (strcmp(s, "hour") == 0) {
        *out = LAYOUT_ALIGN_HOUR;
    } else if (strcmp(s, "day") == 0) {
        *out = LAYOUT_ALIGN_DAY;
    } else if (strcmp(s, "none") == 0) {
        *out = LAYOUT_ALIGN_NONE;
    } else {
        return false;
    }
    return true;
}

int64_t layout_align_unit(enum layout_align a)
{
    return a == LAYOUT_ALIGN_HOUR  ? ISOTIME_US_H
           : a == LAYOUT_ALIGN_DAY ? ISOTIME_US_D
                                   : 0;
}

int64_t layout_bucket_ts(int64_t t_start, bool has_records, int64_t min_ts,
                         int64_t t_end)
{
    if (t_start != ISOTIME_MIN) {
        return t_start;
    }
    return has_records ? min_ts : t_end;
}

/* Undo a failed build: the buffer is as it was. */
static int layout_fail(struct buf *out, size_t mark, struct err *err)
{
    out->len = mark;
    if (out->data != NULL) {
        out->data[mark] = '\0';
    }
    return err->code;
}

static int layout_pad(struct buf *out, int64_t v, int width, struct err *err)
{
    return buf_printf(out, err, "%0*lld", width, (long long)(v < 0 ? 0 : v));
}

/* "<prefix>/<mid>tenant=<esc>/queue=<esc>" */
static int layout_queue_dir(struct buf *out, const struct layout_queue *q,
                            const char *mid, struct err *err)
{
    const char *sep = q->prefix[0] == '\0' ? "" : "/";

    if (buf_printf(out, err, "%s%s%stenant=", q->prefix, sep, mid) != 0 ||
        pct_escape(out, q->tenant.ptr, q->tenant.len, err) != 0 ||
        buf_append_str(out, "/queue=", err) != 0 ||
        pct_escape(out, q->queue.ptr, q->queue.len, err) != 0) {
        return err->code;
    }
    return 0;
}

/* ".../dt=..[/hour=..]/w-<k>-<tStart>-<tEnd>" without the extension. */
static int layout_window_stem(struct buf *out, const struct layout_queue *q,
                              const struct layout_window *w, struct err *err)
{
    char dt[11];
    char hour[3];

    isotime_date_hour(w->bucket_ts, dt, hour);
    if (layout_queue_dir(out, q, "", err) != 0 ||
        buf_printf(out, err, "/dt=%s", dt) != 0) {
        return err->code;
    }
    if (w->align != LAYOUT_ALIGN_DAY &&
        buf_printf(out, err, "/hour=%s", hour) != 0) {
        return err->code;
    }
    if (buf_append_str(out, "/w-", err) != 0 ||
        layout_pad(out, w->k, 10, err) != 0 ||
        buf_append_byte(out, '-', err) != 0 ||
        layout_pad(out, w->t_start, 16, err) != 0 ||
        buf_append_byte(out, '-', err) != 0 ||
        layout_pad(out, w->t_end, 16, err) != 0) {
        return err->code;
    }
    return 0;
}

int layout_data_key(struct buf *out, const struct layout_queue *q,
                    const struct layout_window *w, struct err *err)
{
    size_t mark = out->len;

    if (layout_window_stem(out, q, w, err) != 0 ||
        buf_printf(out, err, ".%s", w->ext) != 0) {
        return layout_fail(out, mark, err);
    }
    return 0;
}

int layout_part_key(struct buf *out, const struct layout_queue *q,
                    const struct layout_window *w, struct slice part,
                    const int64_t first_last[2], struct err *err)
{
    size_t mark = out->len;

    if (layout_window_stem(out, q, w, err) != 0 ||
        buf_append_str(out, "-p-", err) != 0 ||
        pct_escape(out, part.ptr, part.len, err) != 0 ||
        buf_append_byte(out, '-', err) != 0 ||
        layout_pad(out, first_last[0], 12, err) != 0 ||
        buf_append_byte(out, '-', err) != 0 ||
        layout_pad(out, first_last[1], 12, err) != 0 ||
        buf_printf(out, err, ".%s", w->ext) != 0) {
        return layout_fail(out, mark, err);
    }
    return 0;
}

int layout_sidecar_root(struct buf *out, const struct layout_queue *q,
                        struct err *err)
{
    size_t mark = out->len;

    if (layout_queue_dir(out, q, LAYOUT_SIDECAR_DIR "/", err) != 0) {
        return layout_fail(out, mark, err);
    }
    return 0;
}

/* "<root>/<dir>/" then optionally "<k:10><suffix>". */
static int layout_sidecar(struct buf *out, const struct layout_queue *q,
                          const char *dir, const int64_t *k, const char *suffix,
                          struct err *err)
{
    size_t mark = out->len;

    if (layout_queue_dir(out, q, LAYOUT_SIDECAR_DIR "/", err) != 0 ||
        buf_printf(out, err, "/%s/", dir) != 0) {
        return layout_fail(out, mark, err);
    }
    if (k != NULL && (layout_pad(out, *k, 10, err) != 0 ||
                      buf_append_str(out, suffix, err) != 0)) {
        return layout_fail(out, mark, err);
    }
    return 0;
}

int layout_manifest_key(struct buf *out, const struct layout_queue *q,
                        int64_t k, struct err *err)
{
    return layout_sidecar(out, q, "windows", &k, ".json", err);
}

int layout_parts_key(struct buf *out, const struct layout_queue *q, int64_t k,
                     const char *sha256_hex, struct err *err)
{
    char suffix[32];

    snprintf(suffix, sizeof(suffix), "-%.16s.json", sha256_hex);
    return layout_sidecar(out, q, "intents", &k, suffix, err);
}

int layout_checkpoint_key(struct buf *out, const struct layout_queue *q,
                          int64_t k, struct err *err)
{
    return layout_sidecar(out, q, "checkpoint", &k, ".json.zst", err);
}

int layout_checkpoint_prefix(struct buf *out, const struct layout_queue *q,
                             struct err *err)
{
    return layout_sidecar(out, q, "checkpoint", NULL, "", err);
}

/* The digits between the last `dir` and a final `suffix`. */
static bool layout_parse_k(const char *key, size_t n, const char *dir,
                           const char *suffix, int64_t *k)
{
    size_t dl = strlen(dir);
    size_t sl = strlen(suffix);
    size_t start = SIZE_MAX;
    int64_t v = 0;

    for (size_t i = 0; i + dl <= n; i++) {
        if (memcmp(key + i, dir, dl) == 0) {
            start = i + dl;
        }
    }
    if (start == SIZE_MAX || n < start + sl + 1 ||
        memcmp(key + n - sl, suffix, sl) != 0) {
        return false;
    }
    for (size_t i = start; i < n - sl; i++) {
        if (key[i] < '0' || key[i] > '9' || v > (INT64_MAX - 9) / 10) {
            return false;
        }
        v = v * 10 + (key[i] - '0');
    }
    *k = v;
    return true;
}

bool layout_parse_checkpoint_k(const char *key, size_t n, int64_t *k)
{
    return layout_parse_k(key, n, "/checkpoint/", ".json.zst", k);
}

bool layout_parse_manifest_k(const char *key, size_t n, int64_t *k)
{
    return layout_parse_k(key, n, "/windows/", ".json", k);
}

int layout_kv_key(struct buf *out, const char *sink, struct slice queue,
                  enum layout_kv what, struct err *err)
{
    static const char *const names[] = {"lease", "intent", "committed",
                                        "start"};
    size_t mark = out->len;

    if (buf_printf(out, err, "s3:%s:", sink) != 0 ||
        pct_escape(out, queue.ptr, queue.len, err) != 0 ||
        buf_printf(out, err, ":%s", names[what]) != 0) {
        return layout_fail(out, mark, err);
    }
    return 0;
}

int layout_presence_prefix(struct buf *out, const char *sink, struct err *err)
{
    return buf_printf(out, err, "s3:%s:node=", sink);
}

int layout_presence_key(struct buf *out, const char *sink,
                        struct slice instance, struct err *err)
{
    size_t mark = out->len;

    if (layout_presence_prefix(out, sink, err) != 0 ||
        pct_escape(out, instance.ptr, instance.len, err) != 0) {
        return layout_fail(out, mark, err);
    }
    return 0;
}
