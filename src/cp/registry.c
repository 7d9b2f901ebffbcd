/* The control plane's rows (cp/registry.h): tenants and clusters of an
 * embedded-proxy cell, read from this node's applied KV rows under the
 * proxy's own tenant, and the in-memory gate table the data plane asks on
 * every push and read.
 *
 * Reads are plain store_kv_read() batches at the wall clock, one read
 * transaction each; a concurrent write may land between the cluster row and
 * its tenant row, which only ever shows the newer tenant status.
 *
 * The gate table holds the broker tenants whose merged status is not
 * active, sorted by tenant bytes for a binary search. It is rebuilt on the
 * loop by cp_gate_refresh() when the KV apply handler said a proxy-tenant
 * batch was applied (cp_gate_touch()), so a push costs a lock and, for a
 * gated cell, a search of a handful of entries; never a store read. */
#include "cp/registry.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/json.h"
#include "base/xalloc.h"
#include "store/kv.h"

const uint8_t CP_PROXY_TENANT[16] = {0, 0, 0, 0, 0, 0, 0,    0,
                                     0, 0, 0, 0, 0, 0, 0xff, 0xfe};

#define CP_PAGE 1000 /* getPrefix page: the store's most */

enum cp_status cp_cluster_merged(const struct cp_cluster *c)
{
    return c->status > c->tenant_status ? c->status : c->tenant_status;
}

const char *cp_status_name(enum cp_status s)
{
    switch (s) {
    case CP_PUSH_BLOCKED:
        return "push_blocked";
    case CP_SUSPENDED:
        return "suspended";
    case CP_ACTIVE:
    default:
        return "active";
    }
}

bool cp_status_parse(const char *s, enum cp_status *out)
{
    static const enum cp_status all[] = {CP_ACTIVE, CP_PUSH_BLOCKED,
                                         CP_SUSPENDED};

    for (size_t i = 0; i < ARRAY_LEN(all); i++) {
        if (strcmp(s, cp_status_name(all[i])) == 0) {
            *out = all[i];
            return true;
        }
    }
    return false;
}

bool cp_slug_valid(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > CP_SLUG_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        bool is_ok = (s[i] >= 'a' && s[i] <= 'z') ||
                     (s[i] >= '0' && s[i] <= '9') || s[i] == '-';
        if (!is_ok) {
            return false;
        }
    }
    return true;
}

static int64_t cp_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static bool cp_hex(char c, int *v)
{
    if (c >= '0' && c <= '9') {
        *v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
        *v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
        *v = c - 'A' + 10;
    } else {
        return false;
    }
    return true;
}

/* Canonical 8-4-4-4-12 UUID text into 16 bytes. */
static bool cp_uuid_parse(const char *s, size_t n, uint8_t out[16])
{
    size_t k = 0;

    if (n != CP_ID_LEN) {
        return false;
    }
    for (size_t i = 0; i < CP_ID_LEN; i++) {
        int hi;
        int lo;

        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') {
                return false;
            }
            continue;
        }
        if (!cp_hex(s[i], &hi) || !cp_hex(s[i + 1], &lo)) {
            return false;
        }
        out[k++] = (uint8_t)(hi << 4 | lo);
        i++;
    }
    return true;
}

bool cp_id_valid(const char *s)
{
    uint8_t raw[16];

    return cp_uuid_parse(s, strlen(s), raw);
}

/* ---- reading rows ---- */

int cp_row_get(struct store *s, const char *ns, const char *key,
               struct buf *val, uint64_t *version, struct err *err)
{
    struct kv_op o = {0};
    struct kv_batch b = {CP_PROXY_TENANT, &o, 1};
    struct kv_answer a;
    int rc;

    o.op = KV_GET;
    o.ns = (struct slice){ns, strlen(ns)};
    o.key = (struct slice){key, strlen(key)};
    memset(&a, 0, sizeof(a));
    *version = 0;
    buf_reset(val);
    rc = store_kv_read(s, &b, cp_now_us(), &a, err);
    if (rc == 0 && a.status != 0) {
        rc = err_set(err, a.status, "%s", a.msg);
    }
    if (rc == 0 && a.results[0].found) {
        *version = a.results[0].version;
        rc = buf_append(val, a.results[0].value.ptr, a.results[0].value.len,
                        err);
    }
    kv_answer_free(&a);
    return rc;
}

/* String member key of obj into out[cap] (NUL-terminated). False when
 * absent, not a string or too long. */
static bool cp_str(const struct json_doc *d, int obj, const char *key,
                   char *out, size_t cap)
{
    int i = json_obj_get(d, obj, key);
    struct buf b;
    struct err err;
    bool is_ok;

    if (i < 0 || json_type(d, i) != JSON_STRING) {
        return false;
    }
    buf_init(&b, cap - 1);
    is_ok = json_get_str(d, i, &b, &err) == 0 && b.len < cap;
    if (is_ok) {
        memcpy(out, b.data != NULL ? b.data : "", b.len);
        out[b.len] = '\0';
    }
    buf_free(&b);
    return is_ok;
}

/* status and deleting of a row object; a missing or unknown status reads
 * as active, a missing flag as false. */
static void cp_flags(const struct json_doc *d, enum cp_status *st,
                     bool *deleting)
{
    char text[16];

    *st = CP_ACTIVE;
    *deleting = false;
    if (cp_str(d, 0, "status", text, sizeof(text))) {
        (void)cp_status_parse(text, st);
    }
    (void)json_get_bool(d, json_obj_get(d, 0, "deleting"), deleting);
}

struct cp_trow {
    char id[CP_ID_LEN + 1];
    char slug[CP_SLUG_MAX + 1];
    enum cp_status status;
    bool deleting;
};

static int cp_parse_tenant(struct slice v, struct cp_trow *t, struct err *err)
{
    struct json_doc d = {0};
    int rc = json_parse(&d, v.ptr, v.len, NULL, err);

    memset(t, 0, sizeof(*t));
    if (rc == 0 && (json_type(&d, 0) != JSON_OBJECT ||
                    !cp_str(&d, 0, "id", t->id, sizeof(t->id)) ||
                    !cp_str(&d, 0, "slug", t->slug, sizeof(t->slug)))) {
        rc = err_set(err, ERR_CORRUPT,
                     "a " CP_NS_TENANTS " row lacks its id "
                     "or slug");
    }
    if (rc == 0) {
        cp_flags(&d, &t->status, &t->deleting);
    }
    json_doc_free(&d);
    return rc;
}

static int cp_parse_cluster(struct slice v, struct cp_cluster *c,
                            struct err *err)
{
    struct json_doc d = {0};
    char bt[CP_ID_LEN + 1];
    int rc = json_parse(&d, v.ptr, v.len, NULL, err);

    memset(c, 0, sizeof(*c));
    if (rc == 0 &&
        (json_type(&d, 0) != JSON_OBJECT ||
         !cp_str(&d, 0, "id", c->id, sizeof(c->id)) ||
         !cp_str(&d, 0, "slug", c->slug, sizeof(c->slug)) ||
         !cp_str(&d, 0, "tenant_id", c->tenant_id, sizeof(c->tenant_id)) ||
         !cp_str(&d, 0, "broker_tenant", bt, sizeof(bt)) ||
         !cp_uuid_parse(bt, strlen(bt), c->broker_tenant))) {
        rc = err_set(err, ERR_CORRUPT,
                     "a " CP_NS_CLUSTERS " row lacks its "
                     "id, slug, tenant_id or broker_tenant");
    }
    if (rc == 0) {
        cp_flags(&d, &c->status, &c->deleting);
    }
    json_doc_free(&d);
    return rc;
}

/* Fill the tenant half of c from its tenant row. A cluster whose tenant
 * row is gone reads as deleting (its tenant is being removed). */
static void cp_join(struct cp_cluster *c, const struct cp_trow *t)
{
    if (t == NULL) {
        c->tenant_slug[0] = '\0';
        c->tenant_status = CP_ACTIVE;
        c->deleting = true;
        return;
    }
    snprintf(c->tenant_slug, sizeof(c->tenant_slug), "%s", t->slug);
    c->tenant_status = t->status;
    c->deleting = c->deleting || t->deleting;
}

static int cp_find_by_id(struct store *s, const char *id,
                         struct cp_cluster *out, struct buf *val,
                         struct err *err)
{
    char key[CP_ID_LEN + 2];
    bool found;
    uint64_t ver;
    struct cp_trow t;

    snprintf(key, sizeof(key), "#%s", id);
    if (cp_row_get(s, CP_NS_CLUSTERS, key, val, &ver, err) != 0) {
        return err->code;
    }
    found = ver != 0;
    if (!found) {
        return err_set(err, ERR_NOT_FOUND, "no cluster %s", id);
    }
    if (cp_parse_cluster((struct slice){val->data, val->len}, out, err) != 0) {
        return err->code;
    }
    snprintf(key, sizeof(key), "#%s", out->tenant_id);
    if (cp_row_get(s, CP_NS_TENANTS, key, val, &ver, err) != 0) {
        return err->code;
    }
    found = ver != 0;
    if (!found) {
        cp_join(out, NULL);
        return 0;
    }
    if (cp_parse_tenant((struct slice){val->data, val->len}, &t, err) != 0) {
        return err->code;
    }
    cp_join(out, &t);
    return 0;
}

int cp_cluster_find(struct store *s, const char *id_or_slug,
                    struct cp_cluster *out, struct err *err)
{
    uint8_t raw[16];
    char key[CP_SLUG_MAX + 8];
    char id[CP_ID_LEN + 1];
    struct buf val;
    struct json_doc d = {0};
    bool found;
    uint64_t ver;
    int rc;

    buf_init(&val, BUF_UNLIMITED);
    if (cp_uuid_parse(id_or_slug, strlen(id_or_slug), raw)) {
        for (size_t i = 0; i <= CP_ID_LEN; i++) {
            char ch = id_or_slug[i];
            id[i] = (char)tolower((unsigned char)ch);
        }
        rc = cp_find_by_id(s, id, out, &val, err);
        if (rc != ERR_NOT_FOUND) {
            goto out;
        }
    }
    if (!cp_slug_valid(id_or_slug)) {
        rc = err_set(err, ERR_NOT_FOUND, "no cluster %.80s", id_or_slug);
        goto out;
    }
    snprintf(key, sizeof(key), "slug:%s", id_or_slug);
    rc = cp_row_get(s, CP_NS_CLUSTERS, key, &val, &ver, err);
    found = ver != 0;
    if (rc == 0 && !found) {
        rc = err_set(err, ERR_NOT_FOUND, "no cluster %s", id_or_slug);
    }
    if (rc == 0) {
        rc = json_parse(&d, val.data, val.len, NULL, err);
    }
    if (rc == 0 && !cp_str(&d, 0, "id", id, sizeof(id))) {
        rc = err_set(err, ERR_CORRUPT,
                     "cluster slug %s: its index row has no id", id_or_slug);
    }
    if (rc == 0) {
        rc = cp_find_by_id(s, id, out, &val, err);
    }
out:
    json_doc_free(&d);
    buf_free(&val);
    return rc;
}

int cp_row_scan(struct store *s, const char *ns, cp_row_fn fn, void *arg,
                struct err *err)
{
    struct buf after;
    int rc = 0;
    bool more = true;

    buf_init(&after, BUF_UNLIMITED);
    while (rc == 0 && more) {
        struct kv_op o = {0};
        struct kv_batch b = {CP_PROXY_TENANT, &o, 1};
        struct kv_answer a;
        const struct kv_result *r;

        o.op = KV_GET_PREFIX;
        o.ns = (struct slice){ns, strlen(ns)};
        o.prefix = (struct slice){"#", 1};
        o.key = (struct slice){"", 0};
        o.after = (struct slice){after.len > 0 ? after.data : "", after.len};
        o.limit = CP_PAGE;
        memset(&a, 0, sizeof(a));
        rc = store_kv_read(s, &b, cp_now_us(), &a, err);
        if (rc == 0 && a.status != 0) {
            rc = err_set(err, a.status, "%s", a.msg);
        }
        if (rc != 0) {
            kv_answer_free(&a);
            break;
        }
        r = &a.results[0];
        for (size_t i = 0; rc == 0 && i < r->n_rows; i++) {
            rc = fn(arg, r->rows[i].value, err);
        }
        more = r->truncated && r->has_next_after;
        buf_reset(&after);
        if (rc == 0 && more) {
            rc = buf_append(&after, r->next_after.ptr, r->next_after.len, err);
        }
        kv_answer_free(&a);
    }
    buf_free(&after);
    return rc;
}

struct cp_lists {
    struct cp_trow *t;
    size_t nt;
    size_t capt;
    struct cp_cluster *c;
    size_t nc;
    size_t capc;
};

static int cp_add_tenant(void *arg, struct slice v, struct err *err)
{
    struct cp_lists *l = arg;

    if (l->nt == l->capt) {
        l->capt = l->capt == 0 ? 16 : l->capt * 2;
        l->t = xrealloc(l->t, l->capt * sizeof(*l->t));
    }
    if (cp_parse_tenant(v, &l->t[l->nt], err) != 0) {
        return err->code;
    }
    l->nt++;
    return 0;
}

static int cp_add_cluster(void *arg, struct slice v, struct err *err)
{
    struct cp_lists *l = arg;

    if (l->nc == l->capc) {
        l->capc = l->capc == 0 ? 16 : l->capc * 2;
        l->c = xrealloc(l->c, l->capc * sizeof(*l->c));
    }
    if (cp_parse_cluster(v, &l->c[l->nc], err) != 0) {
        return err->code;
    }
    l->nc++;
    return 0;
}

static int cp_trow_cmp(const void *a, const void *b)
{
    return strcmp(((const struct cp_trow *)a)->id,
                  ((const struct cp_trow *)b)->id);
}

int cp_cluster_list(struct store *s, struct cp_cluster **out, size_t *n,
                    struct err *err)
{
    struct cp_lists l = {0};
    int rc = cp_row_scan(s, CP_NS_TENANTS, cp_add_tenant, &l, err);

    if (rc == 0) {
        rc = cp_row_scan(s, CP_NS_CLUSTERS, cp_add_cluster, &l, err);
    }
    if (rc != 0) {
        free(l.t);
        free(l.c);
        *out = NULL;
        *n = 0;
        return rc;
    }
    if (l.nt > 1) {
        qsort(l.t, l.nt, sizeof(*l.t), cp_trow_cmp);
    }
    for (size_t i = 0; i < l.nc; i++) {
        struct cp_trow key = {0};
        const struct cp_trow *t = NULL;

        snprintf(key.id, sizeof(key.id), "%s", l.c[i].tenant_id);
        if (l.nt > 0) {
            t = bsearch(&key, l.t, l.nt, sizeof(*l.t), cp_trow_cmp);
        }
        cp_join(&l.c[i], t);
    }
    free(l.t);
    *out = l.c;
    *n = l.nc;
    return 0;
}

/* ---- the gate table ---- */

struct cp_gate_ent {
    uint8_t tenant[16];
    enum cp_status status;
};

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cp_gate_ent *gate_tab; /* under gate_mu, sorted by tenant */
static size_t gate_n;                /* under gate_mu */
static atomic_size_t gate_n_fast;    /* gate_n, read without the lock */
static atomic_bool gate_stale = true;

static int cp_gate_cmp(const void *a, const void *b)
{
    return memcmp(((const struct cp_gate_ent *)a)->tenant,
                  ((const struct cp_gate_ent *)b)->tenant, 16);
}

enum cp_status cp_tenant_gate(const uint8_t tenant[16])
{
    struct cp_gate_ent key = {0};
    const struct cp_gate_ent *e;
    enum cp_status st = CP_ACTIVE;

    if (atomic_load_explicit(&gate_n_fast, memory_order_relaxed) == 0) {
        return CP_ACTIVE;
    }
    memcpy(key.tenant, tenant, 16);
    pthread_mutex_lock(&gate_mu);
    if (gate_n > 0) {
        e = bsearch(&key, gate_tab, gate_n, sizeof(*gate_tab), cp_gate_cmp);
        if (e != NULL) {
            st = e->status;
        }
    }
    pthread_mutex_unlock(&gate_mu);
    return st;
}

void cp_gate_touch(const uint8_t tenant[16])
{
    if (tenant != NULL && memcmp(tenant, CP_PROXY_TENANT, 16) == 0) {
        atomic_store(&gate_stale, true);
    }
}

/* Install tab[0..n) (taken) as the table. */
static void cp_gate_install(struct cp_gate_ent *tab, size_t n)
{
    struct cp_gate_ent *old;

    if (n > 1) {
        qsort(tab, n, sizeof(*tab), cp_gate_cmp);
    }
    pthread_mutex_lock(&gate_mu);
    old = gate_tab;
    gate_tab = tab;
    gate_n = n;
    atomic_store(&gate_n_fast, n);
    pthread_mutex_unlock(&gate_mu);
    free(old);
}

int cp_gate_refresh(struct store *s, bool force, struct err *err)
{
    struct cp_cluster *c;
    struct cp_gate_ent *tab;
    size_t n;
    size_t k = 0;

    if (!force && !atomic_exchange(&gate_stale, false)) {
        return 0;
    }
    if (cp_cluster_list(s, &c, &n, err) != 0) {
        atomic_store(&gate_stale, true);
        return err->code;
    }
    tab = xcalloc(n + 1, sizeof(*tab));
    for (size_t i = 0; i < n; i++) {
        enum cp_status st = cp_cluster_merged(&c[i]);

        if (st != CP_ACTIVE) {
            memcpy(tab[k].tenant, c[i].broker_tenant, 16);
            tab[k].status = st;
            k++;
        }
    }
    free(c);
    cp_gate_install(tab, k);
    return 0;
}

void cp_gate_clear(void)
{
    cp_gate_install(NULL, 0);
    atomic_store(&gate_stale, true);
}
