/* Documents the sink writes and reads back (docs/design/formats.md §3-§5).
 *
 * Encoding goes through the JSON writer (base/json.h), so key order is the
 * order of the calls below and nothing is pretty-printed. Decoding parses
 * with the strict scanner, then copies each string it keeps into the
 * caller's arena. The arena is reserved once, up front, for the input's
 * length plus the arrays, and never grows afterwards, so slices taken early
 * stay valid: an unescaped string plus its NUL is always shorter than its
 * quoted JSON text. */
#include "sink/docs.h"

#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "base/isotime.h"
#include "base/json.h"
#include "base/xalloc.h"

#define DOCS_MAX_DEPTH 16

/* ---- decoding helpers ---- */

struct dd {
    const struct json_doc *d;
    struct buf *arena;
    const char *what; /* "manifest", "checkpoint: bad JSON", ... */
    struct err *err;
};

/* Parse text as a JSON object. The caller then reserves the arena
 * (dd_reserve) once it knows how many array elements it needs. */
static int dd_open(struct dd *x, struct json_doc *d, const char *p, size_t n)
{
    struct json_limits lim = {DOCS_MAX_DEPTH, DOCS_MAX_DEPTH, 0};

    if (json_parse(d, p, n, &lim, x->err) != 0) {
        err_wrap(x->err, "%s", x->what);
        x->err->code = ERR_CORRUPT;
        return ERR_CORRUPT;
    }
    if (json_type(d, 0) != JSON_OBJECT) {
        json_doc_free(d);
        return err_set(x->err, ERR_CORRUPT, "%s: not a JSON object", x->what);
    }
    x->d = d;
    return 0;
}

static int dd_bad(struct dd *x, const char *key)
{
    return err_set(x->err, ERR_CORRUPT, "%s: missing or bad \"%s\"", x->what,
                   key);
}

/* Copy string token i into the arena, NUL-terminated. */
static int dd_copy_str(struct dd *x, int i, struct slice *out)
{
    size_t start = x->arena->len;
    char *before = x->arena->data;
    int rc = json_get_str(x->d, i, x->arena, x->err);

    if (rc == 0) {
        rc = buf_append_byte(x->arena, '\0', x->err);
    }
    if (rc != 0) {
        return rc;
    }
    ASSERT(before == NULL || before == x->arena->data); /* reserved */
    out->ptr = x->arena->data + start;
    out->len = x->arena->len - start - 1;
    return 0;
}

static int dd_str(struct dd *x, int obj, const char *key, struct slice *out)
{
    int i = json_obj_get(x->d, obj, key);

    if (json_type(x->d, i) != JSON_STRING) {
        return dd_bad(x, key);
    }
    return dd_copy_str(x, i, out);
}

static int dd_i64(struct dd *x, int obj, const char *key, int64_t *out)
{
    if (!json_get_i64(x->d, json_obj_get(x->d, obj, key), out)) {
        return dd_bad(x, key);
    }
    return 0;
}

static int dd_u64(struct dd *x, int obj, const char *key, uint64_t *out)
{
    if (!json_get_u64(x->d, json_obj_get(x->d, obj, key), out)) {
        return dd_bad(x, key);
    }
    return 0;
}

/* Carve an array of n elements of size sz from the reserved arena. */
static void *dd_array(struct dd *x, size_t n, size_t sz)
{
    size_t pad = (8 - x->arena->len % 8) % 8;
    char *p;

    ASSERT(x->arena->data != NULL); /* dd_reserve ran */
    ASSERT(x->arena->len + pad + n * sz < x->arena->cap);
    p = x->arena->data + x->arena->len + pad;
    x->arena->len += pad + n * sz;
    memset(p, 0, n * sz);
    return p;
}

/* Reserve the arena for a document of n bytes plus `arrays` bytes. */
static int dd_reserve(struct dd *x, size_t n, size_t arrays)
{
    if (buf_reserve(x->arena, n + arrays + 16, x->err) != 0) {
        return err_wrap(x->err, "%s", x->what);
    }
    if (x->arena->len == 0) {
        x->arena->data[0] = '\0';
    }
    return 0;
}

/* ---- positions (manifest and checkpoint) ---- */

/* "positions": [[name, offset(, id)], ...] in the order given. */
static void docs_write_positions(struct jw *w, const struct docs_position *v,
                                 size_t n)
{
    jw_key(w, "positions");
    jw_arr_begin(w);
    for (size_t i = 0; i < n; i++) {
        jw_arr_begin(w);
        jw_str(w, v[i].name.ptr, v[i].name.len);
        jw_i64(w, v[i].offset);
        if (v[i].id.len > 0) {
            jw_str(w, v[i].id.ptr, v[i].id.len);
        }
        jw_arr_end(w);
    }
    jw_arr_end(w);
}

static int docs_read_position(struct dd *x, int e, struct docs_position *pos);

/* ---- manifest ---- */

static void docs_write_object(struct jw *w, const struct docs_object *o)
{
    jw_obj_begin(w);
    jw_key(w, "key");
    jw_str(w, o->key.ptr, o->key.len);
    jw_key(w, "bytes");
    jw_u64(w, o->bytes);
    jw_key(w, "records");
    jw_u64(w, o->records);
    jw_key(w, "sha256");
    jw_cstr(w, o->sha256);
    if (o->has_partition) {
        jw_key(w, "partition");
        jw_str(w, o->partition.ptr, o->partition.len);
        jw_key(w, "firstOffset");
        jw_i64(w, o->first_offset);
        jw_key(w, "lastOffset");
        jw_i64(w, o->last_offset);
    }
    jw_obj_end(w);
}

static void docs_write_lost(struct jw *w, const struct docs_manifest *m)
{
    jw_key(w, "lost");
    jw_arr_begin(w);
    for (size_t i = 0; i < m->n_lost; i++) {
        jw_obj_begin(w);
        jw_key(w, "partition");
        jw_str(w, m->lost[i].partition.ptr, m->lost[i].partition.len);
        jw_key(w, "from");
        jw_i64(w, m->lost[i].from);
        jw_key(w, "to");
        jw_i64(w, m->lost[i].to);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

static void jw_slice(struct jw *w, const char *key, struct slice s)
{
    jw_key(w, key);
    jw_str(w, s.ptr, s.len);
}

int docs_manifest_encode(struct buf *out, const struct docs_manifest *m,
                         struct err *err)
{
    struct jw w;
    char iso[32];

    isotime_format_us(m->committed_at_ms * ISOTIME_US_MS, iso);
    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_slice(&w, "sink", m->sink);
    jw_slice(&w, "tenant", m->tenant);
    jw_slice(&w, "queue", m->queue);
    jw_key(&w, "k");
    jw_i64(&w, m->k);
    jw_key(&w, "tStart");
    jw_i64(&w, m->t_start);
    jw_key(&w, "tEnd");
    jw_i64(&w, m->t_end);
    jw_slice(&w, "format", m->format);
    jw_slice(&w, "compression", m->compression);
    jw_slice(&w, "layout", m->layout);
    jw_key(&w, "objects");
    jw_arr_begin(&w);
    for (size_t i = 0; i < m->n_objects; i++) {
        docs_write_object(&w, &m->objects[i]);
    }
    jw_arr_end(&w);
    jw_key(&w, "records");
    jw_u64(&w, m->records);
    jw_key(&w, "bytes");
    jw_u64(&w, m->bytes);
    jw_key(&w, "partitions");
    jw_u64(&w, m->partitions);
    if (m->has_ts) {
        jw_key(&w, "minTs");
        jw_i64(&w, m->min_ts);
        jw_key(&w, "maxTs");
        jw_i64(&w, m->max_ts);
    }
    docs_write_lost(&w, m);
    jw_slice(&w, "writer", m->writer);
    jw_key(&w, "committedAt");
    jw_cstr(&w, iso);
    if (m->has_positions) {
        docs_write_positions(&w, m->positions, m->n_positions);
    }
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

static int docs_read_object(struct dd *x, int i, struct docs_object *o)
{
    struct slice sha = {"", 0};

    if (json_type(x->d, i) != JSON_OBJECT) {
        return dd_bad(x, "objects");
    }
    if (dd_str(x, i, "key", &o->key) != 0 ||
        dd_u64(x, i, "bytes", &o->bytes) != 0 ||
        dd_u64(x, i, "records", &o->records) != 0 ||
        dd_str(x, i, "sha256", &sha) != 0) {
        return x->err->code;
    }
    if (sha.len >= sizeof(o->sha256)) {
        return dd_bad(x, "sha256");
    }
    memcpy(o->sha256, sha.ptr, sha.len + 1);
    if (json_obj_get(x->d, i, "partition") >= 0) {
        o->has_partition = true;
        if (dd_str(x, i, "partition", &o->partition) != 0 ||
            dd_i64(x, i, "firstOffset", &o->first_offset) != 0 ||
            dd_i64(x, i, "lastOffset", &o->last_offset) != 0) {
            return x->err->code;
        }
    }
    return 0;
}

static int docs_read_lost(struct dd *x, int i, struct docs_lost *l)
{
    if (json_type(x->d, i) != JSON_OBJECT) {
        return dd_bad(x, "lost");
    }
    if (dd_str(x, i, "partition", &l->partition) != 0 ||
        dd_i64(x, i, "from", &l->from) != 0 ||
        dd_i64(x, i, "to", &l->to) != 0) {
        return x->err->code;
    }
    return 0;
}

/* objects (required), lost and positions (optional) arrays. */
static int docs_read_arrays(struct dd *x, struct docs_manifest *m, int oa,
                            int la, int pa)
{
    struct docs_object *objs;
    struct docs_lost *lost;
    struct docs_position *pos;
    size_t i = 0;

    objs = dd_array(x, m->n_objects, sizeof(*objs));
    lost = dd_array(x, m->n_lost, sizeof(*lost));
    pos = dd_array(x, m->n_positions, sizeof(*pos));
    for (int e = json_child(x->d, pa); e >= 0; e = json_next(x->d, e)) {
        if (docs_read_position(x, e, &pos[i++]) != 0) {
            return x->err->code;
        }
    }
    i = 0;
    for (int e = json_child(x->d, oa); e >= 0; e = json_next(x->d, e)) {
        if (docs_read_object(x, e, &objs[i++]) != 0) {
            return x->err->code;
        }
    }
    i = 0;
    for (int e = json_child(x->d, la); e >= 0; e = json_next(x->d, e)) {
        if (docs_read_lost(x, e, &lost[i++]) != 0) {
            return x->err->code;
        }
    }
    m->objects = objs;
    m->lost = lost;
    m->positions = pos;
    return 0;
}

static int docs_read_manifest_scalars(struct dd *x, struct docs_manifest *m)
{
    int t = json_obj_get(x->d, 0, "tenant");
    int ca = json_obj_get(x->d, 0, "committedAt");
    int64_t us;

    m->tenant.ptr = "";
    if (t >= 0 && dd_str(x, 0, "tenant", &m->tenant) != 0) {
        return x->err->code;
    }
    if (dd_str(x, 0, "sink", &m->sink) != 0 ||
        dd_str(x, 0, "queue", &m->queue) != 0 ||
        dd_i64(x, 0, "k", &m->k) != 0 ||
        dd_i64(x, 0, "tStart", &m->t_start) != 0 ||
        dd_i64(x, 0, "tEnd", &m->t_end) != 0 ||
        dd_str(x, 0, "format", &m->format) != 0 ||
        dd_str(x, 0, "compression", &m->compression) != 0 ||
        dd_str(x, 0, "layout", &m->layout) != 0 ||
        dd_u64(x, 0, "records", &m->records) != 0 ||
        dd_u64(x, 0, "bytes", &m->bytes) != 0 ||
        dd_u64(x, 0, "partitions", &m->partitions) != 0 ||
        dd_str(x, 0, "writer", &m->writer) != 0) {
        return x->err->code;
    }
    m->has_ts = json_obj_get(x->d, 0, "minTs") >= 0;
    if (m->has_ts && (dd_i64(x, 0, "minTs", &m->min_ts) != 0 ||
                      dd_i64(x, 0, "maxTs", &m->max_ts) != 0)) {
        return x->err->code;
    }
    if (ca >= 0) {
        struct slice s = json_span(x->d, ca);
        if (json_type(x->d, ca) != JSON_STRING ||
            !isotime_parse_us(s.ptr + 1, s.len - 2, &us)) {
            return dd_bad(x, "committedAt");
        }
        m->committed_at_ms = us / ISOTIME_US_MS;
    }
    return 0;
}

int docs_manifest_decode(const char *p, size_t n, struct docs_manifest *m,
                         struct buf *arena, struct err *err)
{
    struct json_doc d;
    struct dd x = {.d = &d, .arena = arena, .what = "manifest"};
    int oa;
    int la;
    int pa;
    int rc;

    memset(m, 0, sizeof(*m));
    x.err = err;
    if (dd_open(&x, &d, p, n) != 0) {
        return err->code;
    }
    oa = json_obj_get(&d, 0, "objects");
    la = json_obj_get(&d, 0, "lost");
    pa = json_obj_get(&d, 0, "positions");
    if (json_type(&d, oa) != JSON_ARRAY) {
        rc = dd_bad(&x, "objects");
        goto out_free;
    }
    if ((la >= 0 && json_type(&d, la) != JSON_ARRAY) ||
        (pa >= 0 && json_type(&d, pa) != JSON_ARRAY)) {
        rc = dd_bad(&x, la >= 0 && json_type(&d, la) != JSON_ARRAY
                            ? "lost"
                            : "positions");
        goto out_free;
    }
    m->n_objects = d.toks[oa].count;
    m->n_lost = la >= 0 ? d.toks[la].count : 0;
    m->has_positions = pa >= 0;
    m->n_positions = pa >= 0 ? d.toks[pa].count : 0;
    rc = dd_reserve(&x, n,
                    m->n_objects * sizeof(struct docs_object) +
                        m->n_lost * sizeof(struct docs_lost) +
                        m->n_positions * sizeof(struct docs_position) + 24);
    if (rc == 0) {
        rc = docs_read_manifest_scalars(&x, m);
    }
    if (rc == 0) {
        rc = docs_read_arrays(&x, m, oa, la, pa);
    }
out_free:
    json_doc_free(&d);
    return rc;
}

static bool slice_eq(struct slice a, struct slice b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

bool docs_manifest_matches(const struct docs_manifest *m,
                           const struct docs_intent *in, struct slice sink,
                           struct slice tenant, struct slice queue)
{
    return m->k == in->k && m->t_start == in->t_start &&
           m->t_end == in->t_end && slice_eq(m->format, in->format) &&
           slice_eq(m->compression, in->compression) &&
           slice_eq(m->layout, in->layout) && slice_eq(m->writer, in->writer) &&
           slice_eq(m->sink, sink) && slice_eq(m->tenant, tenant) &&
           slice_eq(m->queue, queue);
}

/* ---- checkpoint ---- */

static int docs_pos_cmp(const void *a, const void *b)
{
    const struct docs_position *x = a;
    const struct docs_position *y = b;
    size_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int c = n == 0 ? 0 : memcmp(x->name.ptr, y->name.ptr, n);

    if (c != 0) {
        return c;
    }
    if (x->name.len != y->name.len) {
        return x->name.len < y->name.len ? -1 : 1;
    }
    if (x->offset != y->offset) {
        return x->offset < y->offset ? -1 : 1;
    }
    n = x->id.len < y->id.len ? x->id.len : y->id.len;
    c = n == 0 ? 0 : memcmp(x->id.ptr, y->id.ptr, n);
    if (c != 0) {
        return c;
    }
    return (x->id.len > y->id.len) - (x->id.len < y->id.len);
}

/* Positions given as one array: the source docs_checkpoint_encode()
 * streams from. */
struct docs_array_source {
    const struct docs_position *v;
    size_t n;
    size_t at;
};

static void docs_array_rewind(void *ctx)
{
    ((struct docs_array_source *)ctx)->at = 0;
}

static size_t docs_array_read(void *ctx, struct docs_position *out, size_t max)
{
    struct docs_array_source *a = ctx;
    size_t n = a->n - a->at < max ? a->n - a->at : max;

    memcpy(out, a->v + a->at, n * sizeof(*out));
    a->at += n;
    return n;
}

int docs_checkpoint_encode(struct buf *out, const struct docs_checkpoint *cp,
                           struct err *err)
{
    /* Positions already in order (the engine's are) are streamed as they
     * are; others are sorted in a copy (the caller's are borrowed and
     * const). */
    struct docs_array_source a = {cp->positions, cp->n, 0};
    struct docs_position_source src = {&a, docs_array_rewind, docs_array_read};
    struct docs_position *sorted = NULL;
    int rc;

    for (size_t i = 1; i < cp->n; i++) {
        if (docs_pos_cmp(&cp->positions[i - 1], &cp->positions[i]) > 0) {
            sorted = xmalloc(cp->n * sizeof(*sorted));
            memcpy(sorted, cp->positions, cp->n * sizeof(*sorted));
            qsort(sorted, cp->n, sizeof(*sorted), docs_pos_cmp);
            a.v = sorted;
            break;
        }
    }
    rc = docs_checkpoint_encode_stream(out, cp->k, cp->t_end, &src, err);
    free(sorted);
    return rc;
}

/* ---- the streaming encoder ---- */

#define DOCS_STREAM_BATCH 256 /* positions read at a time */
#define DOCS_STREAM_CHUNK \
    ((size_t)64 * 1024) /* JSON bytes handed on at a time */

/* One pass over the source: JSON made a chunk at a time and handed to
 * zstd (cc), or only counted (cc NULL). */
struct docs_pass {
    ZSTD_CCtx *cc;
    struct buf *out;
    struct buf js;
    struct jw w;
    uint64_t json_len;
    uint64_t json_hash; /* FNV-1a of the JSON: the two reads must agree */
    struct docs_position last; /* the previous position, copied */
    struct buf last_bytes;     /* its name and id */
    bool has_last;
};

/* Hand js to zstd (end: finish the frame) or count it; js is emptied. */
static int docs_pass_flush(struct docs_pass *p, bool end, struct err *err)
{
    ZSTD_inBuffer in = {p->js.data, p->js.len, 0};
    ZSTD_EndDirective mode = end ? ZSTD_e_end : ZSTD_e_continue;
    size_t left = 1;

    p->json_len += p->js.len;
    for (size_t i = 0; i < p->js.len; i++) {
        p->json_hash =
            (p->json_hash ^ (unsigned char)p->js.data[i]) * 0x100000001b3ULL;
    }
    while (p->cc != NULL && (in.pos < in.size || (end && left != 0))) {
        size_t room = ZSTD_CStreamOutSize();
        ZSTD_outBuffer o;
        int rc = buf_reserve(p->out, room, err);

        if (rc != 0) {
            return rc;
        }
        o = (ZSTD_outBuffer){p->out->data + p->out->len, room, 0};
        left = ZSTD_compressStream2(p->cc, &o, &in, mode);
        if (ZSTD_isError(left)) {
            return err_set(err, ERR_INVALID, "checkpoint: zstd: %s",
                           ZSTD_getErrorName(left));
        }
        p->out->len += o.pos;
        p->out->data[p->out->len] = '\0';
    }
    buf_reset(&p->js);
    return 0;
}

/* Remember pos to check the next one's order against (the source's
 * slices may not outlive its next read). */
static void docs_pass_keep(struct docs_pass *p, const struct docs_position *pos)
{
    struct err e2;

    buf_reset(&p->last_bytes);
    buf_append(&p->last_bytes, pos->name.ptr, pos->name.len, &e2);
    buf_append(&p->last_bytes, pos->id.ptr, pos->id.len, &e2);
    p->last.name = (struct slice){p->last_bytes.data, pos->name.len};
    p->last.id =
        (struct slice){p->last_bytes.data + pos->name.len, pos->id.len};
    p->last.offset = pos->offset;
    p->has_last = true;
}

static int docs_pass_positions(struct docs_pass *p,
                               const struct docs_position_source *src,
                               struct err *err)
{
    struct docs_position v[DOCS_STREAM_BATCH];
    size_t n;
    int rc = 0;

    src->rewind(src->ctx);
    while (rc == 0 && (n = src->read(src->ctx, v, ARRAY_LEN(v))) > 0) {
        for (size_t i = 0; i < n; i++) {
            const struct docs_position *prev =
                i > 0 ? &v[i - 1] : (p->has_last ? &p->last : NULL);
            if (prev != NULL && docs_pos_cmp(prev, &v[i]) > 0) {
                return err_set(err, ERR_INVALID,
                               "checkpoint: positions out of order at "
                               "\"%.*s\"",
                               (int)(v[i].name.len > 200 ? 200 : v[i].name.len),
                               v[i].name.ptr);
            }
            jw_arr_begin(&p->w);
            jw_str(&p->w, v[i].name.ptr, v[i].name.len);
            jw_i64(&p->w, v[i].offset);
            if (v[i].id.len > 0) {
                jw_str(&p->w, v[i].id.ptr, v[i].id.len);
            }
            jw_arr_end(&p->w);
        }
        docs_pass_keep(p, &v[n - 1]);
        if (p->js.len >= DOCS_STREAM_CHUNK) {
            rc = docs_pass_flush(p, false, err);
        }
    }
    return rc;
}

/* One pass: the whole object, compressed into p->out or only counted. */
static int docs_pass_run(struct docs_pass *p, int64_t k, int64_t t_end,
                         const struct docs_position_source *src,
                         struct err *err)
{
    int rc;

    jw_init(&p->w, &p->js);
    jw_obj_begin(&p->w);
    jw_key(&p->w, "k");
    jw_i64(&p->w, k);
    jw_key(&p->w, "tEnd");
    jw_i64(&p->w, t_end);
    jw_key(&p->w, "positions");
    jw_arr_begin(&p->w);
    rc = docs_pass_positions(p, src, err);
    if (rc != 0) {
        return rc;
    }
    jw_arr_end(&p->w);
    jw_obj_end(&p->w);
    rc = jw_finish(&p->w, err);
    return rc != 0 ? rc : docs_pass_flush(p, true, err);
}

static void docs_pass_init(struct docs_pass *p, struct buf *out)
{
    memset(p, 0, sizeof(*p));
    p->out = out;
    p->json_hash = 0xcbf29ce484222325ULL;
    buf_init(&p->js, BUF_UNLIMITED);
    buf_init(&p->last_bytes, BUF_UNLIMITED);
}

static void docs_pass_free(struct docs_pass *p)
{
    buf_free(&p->js);
    buf_free(&p->last_bytes);
    if (p->cc != NULL) {
        ZSTD_freeCCtx(p->cc);
    }
}

int docs_checkpoint_encode_stream(struct buf *out, int64_t k, int64_t t_end,
                                  const struct docs_position_source *src,
                                  struct err *err)
{
    struct docs_pass p;
    size_t at = out->len;
    uint64_t len;
    uint64_t hash;
    int rc;

    docs_pass_init(&p, out);
    rc = docs_pass_run(&p, k, t_end, src, err);
    len = p.json_len;
    hash = p.json_hash;
    docs_pass_free(&p);
    if (rc == 0 && len > DOCS_CHECKPOINT_MAX_DECODED) {
        /* the decoder would refuse it: not written, an older one serves */
        rc = err_set(err, ERR_TOO_BIG,
                     "checkpoint: %llu bytes of JSON, over the %zu a "
                     "checkpoint may decode to",
                     (unsigned long long)len, DOCS_CHECKPOINT_MAX_DECODED);
    }
    if (rc != 0) {
        return rc;
    }
    /* The size in the frame header, as a one-shot compression of the
     * whole JSON writes it: the same frame while the JSON fits zstd's
     * window (2 MiB at level 3); past it the blocks may differ by a few
     * bytes (the stream's window wraps), the JSON they decode to not. */
    /* The frame's room at once: grown by doubling, its old copies could
     * stay in the allocator's heap; one mapping of the bound costs only
     * the pages the frame touches. */
    rc = buf_reserve(out, ZSTD_compressBound(len), err);
    if (rc != 0) {
        return rc;
    }
    docs_pass_init(&p, out);
    p.cc = ZSTD_createCCtx();
    ASSERT(p.cc != NULL);
    ZSTD_CCtx_setParameter(p.cc, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setPledgedSrcSize(p.cc, len);
    rc = docs_pass_run(&p, k, t_end, src, err);
    if (rc == 0 && (p.json_len != len || p.json_hash != hash)) {
        rc = err_set(err, ERR_INVALID,
                     "checkpoint: the positions changed between two reads");
    }
    docs_pass_free(&p);
    if (rc != 0) {
        out->len = at; /* nothing written */
        if (out->data != NULL) {
            out->data[at] = '\0';
        }
    }
    return rc;
}

bool docs_checkpoint_due(int64_t k, int64_t every)
{
    return every > 0 && k > 0 && k % every == 0;
}

/* Decompress one zstd frame into js (capped). */
static int docs_unzstd(const void *p, size_t n, struct buf *js, struct err *err)
{
    unsigned long long size =
        n == 0 ? ZSTD_CONTENTSIZE_ERROR : ZSTD_getFrameContentSize(p, n);
    ZSTD_DCtx *dc;
    ZSTD_inBuffer in = {p, n, 0};
    size_t left = 1;
    int rc = 0;

    if (size == ZSTD_CONTENTSIZE_ERROR) {
        return err_set(err, ERR_CORRUPT,
                       "checkpoint: not a zstd frame: bad magic number or "
                       "truncated header");
    }
    if (size != ZSTD_CONTENTSIZE_UNKNOWN &&
        size > DOCS_CHECKPOINT_MAX_DECODED) {
        return err_set(err, ERR_CORRUPT,
                       "checkpoint: decodes to more than %zu bytes; refusing",
                       DOCS_CHECKPOINT_MAX_DECODED);
    }
    dc = ZSTD_createDCtx();
    ASSERT(dc != NULL);
    while (rc == 0 && left != 0) {
        ZSTD_outBuffer out;
        size_t room = js->max - js->len < 131072 ? js->max - js->len : 131072;
        if (room == 0) {
            rc = err_set(err, ERR_CORRUPT,
                         "checkpoint: decodes to more than %zu bytes; refusing",
                         DOCS_CHECKPOINT_MAX_DECODED);
            break;
        }
        buf_reserve(js, room, err); /* within max: cannot fail */
        out.dst = js->data + js->len;
        out.size = room;
        out.pos = 0;
        left = ZSTD_decompressStream(dc, &out, &in);
        js->len += out.pos;
        js->data[js->len] = '\0';
        if (ZSTD_isError(left)) {
            rc = err_set(err, ERR_CORRUPT, "checkpoint: zstd decode: %s",
                         ZSTD_getErrorName(left));
        } else if (left != 0 && in.pos == in.size && out.pos < out.size) {
            rc = err_set(err, ERR_CORRUPT,
                         "checkpoint: zstd decode: truncated frame");
        }
    }
    if (rc == 0 && in.pos != in.size) {
        rc = err_set(err, ERR_CORRUPT,
                     "checkpoint: zstd decode: data after the frame");
    }
    ZSTD_freeDCtx(dc);
    return rc;
}

/* [name, offset (, id|null) (, extra...)] */
static int docs_read_position(struct dd *x, int e, struct docs_position *pos)
{
    int name = json_child(x->d, e);
    int off = json_next(x->d, name);
    int id = json_next(x->d, off);

    if (json_type(x->d, e) != JSON_ARRAY || x->d->toks[e].count < 2) {
        return err_set(x->err, ERR_CORRUPT,
                       "%s: a position is not an array of at least 2 elements",
                       x->what);
    }
    if (json_type(x->d, name) != JSON_STRING) {
        return dd_bad(x, "positions[][0]");
    }
    if (!json_get_i64(x->d, off, &pos->offset)) {
        return dd_bad(x, "positions[][1]");
    }
    if (dd_copy_str(x, name, &pos->name) != 0) {
        return x->err->code;
    }
    pos->id.ptr = "";
    if (id >= 0 && json_type(x->d, id) == JSON_STRING) {
        return dd_copy_str(x, id, &pos->id);
    }
    if (id >= 0 && json_type(x->d, id) != JSON_NULL) {
        return dd_bad(x, "positions[][2]");
    }
    return 0;
}

static int docs_read_checkpoint(struct dd *x, size_t n,
                                struct docs_checkpoint *cp)
{
    int pa = json_obj_get(x->d, 0, "positions");
    struct docs_position *v;
    size_t i = 0;

    if (dd_i64(x, 0, "k", &cp->k) != 0 ||
        dd_i64(x, 0, "tEnd", &cp->t_end) != 0) {
        return x->err->code;
    }
    if (json_type(x->d, pa) != JSON_ARRAY) {
        return dd_bad(x, "positions");
    }
    cp->n = x->d->toks[pa].count;
    if (dd_reserve(x, n, cp->n * sizeof(*v)) != 0) {
        return x->err->code;
    }
    v = dd_array(x, cp->n, sizeof(*v));
    for (int e = json_child(x->d, pa); e >= 0; e = json_next(x->d, e)) {
        if (docs_read_position(x, e, &v[i++]) != 0) {
            return x->err->code;
        }
    }
    cp->positions = v;
    return 0;
}

int docs_checkpoint_decode(const void *p, size_t n, struct docs_checkpoint *cp,
                           struct buf *arena, struct err *err)
{
    struct json_doc d;
    struct dd x = {.d = &d, .arena = arena, .what = "checkpoint: bad JSON"};
    struct buf js;
    int rc;

    memset(cp, 0, sizeof(*cp));
    x.err = err;
    buf_init(&js, DOCS_CHECKPOINT_MAX_DECODED);
    rc = docs_unzstd(p, n, &js, err);
    if (rc == 0) {
        rc = dd_open(&x, &d, js.data ? js.data : "", js.len);
        if (rc == 0) {
            rc = docs_read_checkpoint(&x, js.len, cp);
            json_doc_free(&d);
        }
    }
    buf_free(&js);
    return rc;
}

/* ---- KV documents ---- */

static void docs_write_parts(struct jw *w, const struct docs_intent *in)
{
    jw_key(w, "parts");
    jw_arr_begin(w);
    for (size_t i = 0; i < in->n_parts; i++) {
        jw_arr_begin(w);
        jw_str(w, in->parts[i].partition.ptr, in->parts[i].partition.len);
        jw_i64(w, in->parts[i].first);
        jw_i64(w, in->parts[i].last);
        jw_arr_end(w);
    }
    jw_arr_end(w);
}

int docs_intent_encode(struct buf *out, const struct docs_intent *in,
                       struct err *err)
{
    struct jw w;

    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "k");
    jw_i64(&w, in->k);
    jw_key(&w, "tStart");
    jw_i64(&w, in->t_start);
    jw_key(&w, "tEnd");
    jw_i64(&w, in->t_end);
    jw_slice(&w, "format", in->format);
    jw_slice(&w, "compression", in->compression);
    jw_slice(&w, "layout", in->layout);
    jw_slice(&w, "writer", in->writer);
    if (in->has_align) {
        jw_slice(&w, "align", in->align);
    }
    if (in->has_prefix) {
        jw_slice(&w, "prefix", in->prefix);
    }
    if (in->has_libraries) {
        jw_slice(&w, "libraries", in->libraries);
    }
    if (in->has_records) {
        jw_key(&w, "records");
        jw_i64(&w, in->records);
    }
    if (in->has_parts) {
        docs_write_parts(&w, in);
    } else if (in->has_parts_key) {
        jw_slice(&w, "partsKey", in->parts_key);
        jw_slice(&w, "partsSha256", in->parts_sha256);
    }
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

int docs_parts_encode(struct buf *out, const struct docs_intent *in,
                      struct err *err)
{
    struct jw w;

    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "k");
    jw_i64(&w, in->k);
    docs_write_parts(&w, in);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

/* One [partition, first, last] of an intent's parts. */
static int docs_read_part(struct dd *x, int e, struct docs_intent_part *p)
{
    int a = json_child(x->d, e);
    int b = a >= 0 ? json_next(x->d, a) : -1;
    int c = b >= 0 ? json_next(x->d, b) : -1;

    if (json_type(x->d, e) != JSON_ARRAY || x->d->toks[e].count != 3 ||
        json_type(x->d, a) != JSON_STRING ||
        !json_get_i64(x->d, b, &p->first) || !json_get_i64(x->d, c, &p->last) ||
        p->first > p->last) {
        return dd_bad(x, "parts");
    }
    return dd_copy_str(x, a, &p->partition);
}

/* The optional fields: a key that is absent leaves has_* false; one that is
 * there must be well formed. */
static int docs_read_intent_parts(struct dd *x, int pa, struct docs_intent *in);

static int docs_read_intent_pins(struct dd *x, struct docs_intent *in)
{
    int pa = json_obj_get(x->d, 0, "parts");

    in->has_align = json_obj_get(x->d, 0, "align") >= 0;
    in->has_prefix = json_obj_get(x->d, 0, "prefix") >= 0;
    in->has_libraries = json_obj_get(x->d, 0, "libraries") >= 0;
    in->has_parts_key = json_obj_get(x->d, 0, "partsKey") >= 0;
    in->has_records = json_obj_get(x->d, 0, "records") >= 0;
    if (in->has_records &&
        (dd_i64(x, 0, "records", &in->records) != 0 || in->records < 0)) {
        return in->records < 0 ? dd_bad(x, "records") : x->err->code;
    }
    if ((in->has_align && dd_str(x, 0, "align", &in->align) != 0) ||
        (in->has_prefix && dd_str(x, 0, "prefix", &in->prefix) != 0) ||
        (in->has_libraries && dd_str(x, 0, "libraries", &in->libraries) != 0)) {
        return x->err->code;
    }
    if (in->has_parts_key &&
        (pa >= 0 || dd_str(x, 0, "partsKey", &in->parts_key) != 0 ||
         dd_str(x, 0, "partsSha256", &in->parts_sha256) != 0 ||
         in->parts_sha256.len != 64)) {
        return dd_bad(x, "partsKey");
    }
    return pa < 0 ? 0 : docs_read_intent_parts(x, pa, in);
}

static int docs_read_intent_parts(struct dd *x, int pa, struct docs_intent *in)
{
    struct docs_intent_part *v;
    size_t i = 0;

    if (json_type(x->d, pa) != JSON_ARRAY) {
        return dd_bad(x, "parts");
    }
    in->has_parts = true;
    in->n_parts = x->d->toks[pa].count;
    v = dd_array(x, in->n_parts, sizeof(*v));
    for (int e = json_child(x->d, pa); e >= 0; e = json_next(x->d, e)) {
        if (docs_read_part(x, e, &v[i++]) != 0) {
            return x->err->code;
        }
    }
    in->parts = v;
    return 0;
}

int docs_intent_decode(const char *p, size_t n, struct docs_intent *in,
                       struct buf *arena, struct err *err)
{
    struct json_doc d;
    struct dd x = {.d = &d, .arena = arena, .what = "intent"};
    int rc;

    memset(in, 0, sizeof(*in));
    x.err = err;
    if (dd_open(&x, &d, p, n) != 0) {
        return err->code;
    }
    int pa = json_obj_get(&d, 0, "parts");
    size_t np = json_type(&d, pa) == JSON_ARRAY ? d.toks[pa].count : 0;
    rc = dd_reserve(&x, n, np * sizeof(struct docs_intent_part) + 16);
    if (rc == 0 && (dd_i64(&x, 0, "k", &in->k) != 0 ||
                    dd_i64(&x, 0, "tStart", &in->t_start) != 0 ||
                    dd_i64(&x, 0, "tEnd", &in->t_end) != 0 ||
                    dd_str(&x, 0, "format", &in->format) != 0 ||
                    dd_str(&x, 0, "compression", &in->compression) != 0 ||
                    dd_str(&x, 0, "layout", &in->layout) != 0 ||
                    dd_str(&x, 0, "writer", &in->writer) != 0 ||
                    docs_read_intent_pins(&x, in) != 0)) {
        rc = err->code;
    }
    json_doc_free(&d);
    return rc;
}

int docs_parts_decode(const char *p, size_t n, struct docs_intent *in,
                      struct buf *arena, struct err *err)
{
    struct json_doc d;
    struct dd x = {.d = &d, .arena = arena, .what = "intent parts"};
    int rc;

    x.err = err;
    if (dd_open(&x, &d, p, n) != 0) {
        return err->code;
    }
    int pa = json_obj_get(&d, 0, "parts");
    size_t np = json_type(&d, pa) == JSON_ARRAY ? d.toks[pa].count : 0;
    rc = dd_reserve(&x, n, np * sizeof(struct docs_intent_part) + 16);
    if (rc == 0 && dd_i64(&x, 0, "k", &in->k) != 0) {
        rc = err->code;
    } else if (rc == 0 && json_type(&d, pa) != JSON_ARRAY) {
        rc = dd_bad(&x, "parts");
    } else if (rc == 0) {
        rc = docs_read_intent_parts(&x, pa, in);
    }
    json_doc_free(&d);
    return rc;
}

int docs_committed_encode(struct buf *out, const struct docs_committed *c,
                          struct err *err)
{
    struct jw w;
    char iso[32];

    isotime_format_us(c->t_end, iso);
    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "k");
    jw_i64(&w, c->k);
    jw_key(&w, "tEnd");
    jw_cstr(&w, iso);
    jw_slice(&w, "manifest", c->manifest);
    jw_key(&w, "records");
    jw_u64(&w, c->records);
    jw_key(&w, "bytes");
    jw_u64(&w, c->bytes);
    jw_key(&w, "committedAtMs");
    jw_i64(&w, c->committed_at_ms);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

/* A stamp at key: an ISO-us string (2.0.0) or integer us (1.5.0). */
static int docs_read_time(struct dd *x, const char *key, int64_t *t)
{
    int i = json_obj_get(x->d, 0, key);
    struct slice s = json_span(x->d, i);

    if (json_type(x->d, i) == JSON_STRING && !x->d->toks[i].has_escapes &&
        isotime_parse_us(s.ptr + 1, s.len - 2, t)) {
        return 0;
    }
    if (json_get_i64(x->d, i, t)) {
        return 0;
    }
    return dd_bad(x, key);
}

int docs_committed_decode(const char *p, size_t n, struct docs_committed *c,
                          struct buf *arena, struct err *err)
{
    struct json_doc d;
    struct dd x = {.d = &d, .arena = arena, .what = "committed"};
    int rc;

    memset(c, 0, sizeof(*c));
    x.err = err;
    if (dd_open(&x, &d, p, n) != 0) {
        return err->code;
    }
    rc = dd_reserve(&x, n, 0);
    if (rc == 0 && (dd_i64(&x, 0, "k", &c->k) != 0 ||
                    docs_read_time(&x, "tEnd", &c->t_end) != 0 ||
                    dd_str(&x, 0, "manifest", &c->manifest) != 0 ||
                    dd_u64(&x, 0, "records", &c->records) != 0 ||
                    dd_u64(&x, 0, "bytes", &c->bytes) != 0)) {
        rc = err->code;
    }
    /* committedAtMs is informational: tolerated when absent. */
    if (rc == 0 && json_obj_get(&d, 0, "committedAtMs") >= 0 &&
        dd_i64(&x, 0, "committedAtMs", &c->committed_at_ms) != 0) {
        rc = err->code;
    }
    json_doc_free(&d);
    return rc;
}

int docs_start_encode(struct buf *out, int64_t t_start, struct err *err)
{
    struct jw w;
    char iso[32];

    isotime_format_us(t_start, iso);
    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "tStart");
    jw_cstr(&w, iso);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

int docs_start_decode(const char *p, size_t n, int64_t *t_start,
                      struct err *err)
{
    struct json_doc d;
    struct dd x = {.d = &d, .what = "start"};
    int rc;

    x.err = err;
    if (dd_open(&x, &d, p, n) != 0) {
        return err->code;
    }
    rc = docs_read_time(&x, "tStart", t_start) != 0 ? err->code : 0;
    json_doc_free(&d);
    return rc;
}

int docs_lease_encode(struct buf *out, const struct docs_lease *l,
                      struct err *err)
{
    struct jw w;

    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_slice(&w, "instance", l->instance);
    jw_slice(&w, "incarnation", l->incarnation);
    jw_key(&w, "sinceMs");
    jw_i64(&w, l->since_ms);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

int docs_lease_decode(const char *p, size_t n, struct docs_lease *l,
                      struct buf *arena, struct err *err)
{
    struct json_doc d;
    struct dd x = {.d = &d, .arena = arena, .what = "lease"};
    int rc;

    memset(l, 0, sizeof(*l));
    x.err = err;
    if (dd_open(&x, &d, p, n) != 0) {
        return err->code;
    }
    rc = dd_reserve(&x, n, 0);
    if (rc == 0 && (dd_str(&x, 0, "instance", &l->instance) != 0 ||
                    dd_str(&x, 0, "incarnation", &l->incarnation) != 0 ||
                    dd_i64(&x, 0, "sinceMs", &l->since_ms) != 0)) {
        rc = err->code;
    }
    json_doc_free(&d);
    return rc;
}
