/* A cluster's own bucket (api/cp.h, docs/design/control-plane.md §5): PUT, GET
 * and DELETE /api/cp/clusters/:id/s3 over the px.s3sinks row of the cluster.
 *
 * A PUT is checked in this order, each refusal changing nothing: the node
 * runs the sink (404 s3_unavailable), the cluster exists (404
 * cluster_unknown), it is a tenant's own (409 system_tenant), it is not
 * being deleted (409 deleting), the body is an object with a string
 * secretKey of at most 4 KiB and a boolean enabled when given, the settings
 * fit in 32 KiB, a secret is given or already stored, and the sink's own
 * validation (sink_config_from_doc) accepts the settings (400 invalid with
 * its sentence); then the secret is sealed under QUEEN_ENCRYPTION_KEY (409
 * encryption_required without one). The row is written with a required
 * expect of the version read, so a racing PUT or DELETE makes it re-run.
 *
 * The secret is copied out of the body only to validate and seal it, and
 * wiped right after; no answer renders it and no line logs it. */
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/cp.h"
#include "base/env.h"
#include "base/isotime.h"
#include "base/json.h"
#include "base/uuid7.h"
#include "http/server.h"
#include "sink/config.h"
#include "store/store.h"

/* What a stored row says (cp_s3_row_read). */
struct cp_s3_row {
    bool found;
    uint64_t version;
    bool enabled;
    bool has_secret;
    int64_t updated_at_us;
    struct buf config; /* the config object, verbatim */
    struct buf sealed; /* secret_key_sealed, unescaped */
};

static void cp_s3_row_free(struct cp_s3_row *r)
{
    buf_free(&r->config);
    buf_free(&r->sealed);
}

/* Read the cluster's row into r (r->found false when there is none). */
static int cp_s3_row_read(struct store *s, const char *cluster_id,
                          struct cp_s3_row *r, struct err *err)
{
    char key[CP_ID_LEN + 2];
    struct buf raw;
    struct json_doc d = {0};
    int rc;
    int i;

    memset(r, 0, sizeof(*r));
    buf_init(&r->config, BUF_UNLIMITED);
    buf_init(&r->sealed, BUF_UNLIMITED);
    buf_init(&raw, BUF_UNLIMITED);
    snprintf(key, sizeof(key), "#%s", cluster_id);
    rc = cp_row_get(s, CP_NS_S3SINKS, key, &raw, &r->version, err);
    r->found = r->version != 0;
    if (rc == 0 && r->found) {
        rc = json_parse(&d, raw.data, raw.len, NULL, err);
    }
    if (rc == 0 && r->found) {
        struct slice cfg = json_span(&d, json_obj_get(&d, 0, "config"));

        r->enabled = true;
        (void)json_get_bool(&d, json_obj_get(&d, 0, "enabled"), &r->enabled);
        (void)json_get_i64(&d, json_obj_get(&d, 0, "updated_at_us"),
                           &r->updated_at_us);
        i = json_obj_get(&d, 0, "secret_key_sealed");
        if (i >= 0 && json_type(&d, i) == JSON_STRING) {
            rc = json_get_str(&d, i, &r->sealed, err);
        }
        r->has_secret = r->sealed.len > 0;
        if (rc == 0 && cfg.len > 0) {
            rc = buf_append(&r->config, cfg.ptr, cfg.len, err);
        }
    }
    json_doc_free(&d);
    buf_free(&raw);
    return rc;
}

int cp_s3_config_doc(const struct json_doc *d, struct buf *out, struct err *err)
{
    bool is_first = true;
    int rc = buf_append_byte(out, '{', err);

    for (int k = json_child(d, 0); rc == 0 && k >= 0; k = json_next(d, k)) {
        struct slice ks = json_span(d, k);
        struct slice vs = json_span(d, k + 1);

        if (json_str_eq(d, k, "secretKey") || json_str_eq(d, k, "enabled")) {
            continue;
        }
        if (!is_first) {
            rc = buf_append_byte(out, ',', err);
        }
        is_first = false;
        if (rc == 0) {
            rc = buf_append(out, ks.ptr, ks.len, err);
        }
        if (rc == 0) {
            rc = buf_append_byte(out, ':', err);
        }
        if (rc == 0) {
            rc = json_compact(out, vs.ptr, vs.len, err);
        }
    }
    return rc == 0 ? buf_append_byte(out, '}', err) : rc;
}

/* The answer of PUT and GET: exactly cluster, tenant, enabled, config,
 * secretKeySet, updatedAt. */
static void cp_s3_render(struct cp_call *c, const char *config, size_t len,
                         bool has_secret)
{
    char bt[37];
    char at[32];
    struct buf out;
    struct jw w;
    struct err err;

    uuid7_format(c->cl.broker_tenant, bt);
    isotime_format_us(c->updated_at_us, at);
    buf_init(&out, BUF_UNLIMITED);
    jw_init(&w, &out);
    jw_obj_begin(&w);
    jw_key(&w, "cluster");
    jw_cstr(&w, c->cl.slug);
    jw_key(&w, "tenant");
    jw_cstr(&w, bt);
    jw_key(&w, "enabled");
    jw_bool(&w, c->enabled);
    jw_key(&w, "config");
    jw_raw(&w, config, len);
    jw_key(&w, "secretKeySet");
    jw_bool(&w, has_secret);
    jw_key(&w, "updatedAt");
    jw_cstr(&w, at);
    jw_obj_end(&w);
    ASSERT(jw_finish(&w, &err) == 0);
    buf_free(&c->out);
    c->out = out;
}

/* The checks every s3 route shares: the sink runs here and the cluster
 * exists. False after answering. */
static bool cp_s3_cluster(struct cp_call *c)
{
    if (!c->cp->is_s3_embedded) {
        cp_fail(c, 404, "s3_unavailable",
                "this node does not run the S3 sink (QUEEN_S3_EMBEDDED is not "
                "true); ask a node that does");
        return false;
    }
    return cp_call_cluster(c, "id");
}

/* ---- PUT ---- */

struct cp_s3_put {
    struct json_doc doc;
    struct buf config;
    struct buf secret; /* wiped before it is freed */
    bool has_secret;
    struct cp_s3_row old;
    struct buf row;
};

static void cp_s3_put_free(struct cp_s3_put *p)
{
    json_doc_free(&p->doc);
    buf_free(&p->config);
    if (p->secret.data != NULL) {
        OPENSSL_cleanse(p->secret.data, p->secret.cap);
    }
    buf_free(&p->secret);
    cp_s3_row_free(&p->old);
    buf_free(&p->row);
}

/* The first setting, secretKey or enabled the body gives twice, or NULL.
 * A repeated one is refused rather than stored: the stored document would
 * be read first-wins (sink/config.h), so which of two buckets the sink
 * writes to would be a guess (json.h (5)). Other members are refused by
 * the sink's validation anyway. */
static const char *cp_s3_dup(const struct json_doc *d)
{
    size_t n;
    const char *const *fields = sink_config_doc_fields(&n);
    const char *keys[32];
    int v[ARRAY_LEN(keys)];
    int dup;

    ASSERT(n + 2 <= ARRAY_LEN(keys));
    memcpy(keys, fields, n * sizeof(*keys));
    keys[n] = "secretKey";
    keys[n + 1] = "enabled";
    dup = json_obj_pick(d, 0, keys, (int)n + 2, v);
    return dup >= 0 ? keys[dup] : NULL;
}

/* The body: an object; secretKey a string of at most 4 KiB (null or blank:
 * none given); enabled a boolean; the rest the settings, at most 32 KiB; none
 * of them twice. False after answering 400. */
static bool cp_s3_put_body(struct cp_call *c, struct cp_s3_put *p)
{
    struct err err;
    const char *dup;
    int sk;
    int en;

    if (json_parse(&p->doc, c->req->body.ptr, c->req->body.len, NULL, &err) !=
        0) {
        cp_fail(c, 400, "invalid",
                "the body must be a JSON object of the sink's settings, with "
                "secretKey and enabled beside them");
        return false;
    }
    if (json_type(&p->doc, 0) != JSON_OBJECT) {
        char why[128];

        sink_config_not_object(json_type(&p->doc, 0), why, sizeof(why));
        cp_fail(c, 400, "invalid", "%s", why);
        return false;
    }
    dup = cp_s3_dup(&p->doc);
    if (dup != NULL) {
        cp_fail(c, 400, "invalid", "duplicate key \"%s\"", dup);
        return false;
    }
    sk = json_obj_get(&p->doc, 0, "secretKey");
    en = json_obj_get(&p->doc, 0, "enabled");
    c->enabled = true;
    if (en >= 0 && !json_get_bool(&p->doc, en, &c->enabled)) {
        cp_fail(c, 400, "invalid", "enabled must be true or false");
        return false;
    }
    /* null, or a blank string (empty or whitespace, as the page's own
     * example sends), is no secret: the stored one is kept, or the first
     * PUT is told that it needs one */
    if (sk >= 0 && json_is_null(&p->doc, sk)) {
        sk = -1;
    }
    if (sk >= 0 &&
        (json_type(&p->doc, sk) != JSON_STRING ||
         json_get_str(&p->doc, sk, &p->secret, &err) != 0 ||
         (p->secret.len > 0 && memchr(p->secret.data, 0, p->secret.len)))) {
        cp_fail(c, 400, "invalid",
                "secretKey must be a non-empty string of at most %d bytes",
                CP_S3_SECRET_MAX);
        return false;
    }
    if (sk >= 0 && env_is_blank(p->secret.data, p->secret.len)) {
        if (p->secret.len > 0) {
            OPENSSL_cleanse(p->secret.data, p->secret.len);
        }
        buf_reset(&p->secret);
        sk = -1;
    }
    p->has_secret = sk >= 0;
    if (cp_s3_config_doc(&p->doc, &p->config, &err) != 0 ||
        p->config.len > CP_S3_CONFIG_MAX) {
        cp_fail(c, 400, "invalid",
                "the sink's settings are more than %d bytes (32 KiB)",
                CP_S3_CONFIG_MAX);
        return false;
    }
    return true;
}

/* The sink's own validation, with the new secret or a stand-in for the
 * stored one. False after answering 400 with its sentence. */
static bool cp_s3_put_validate(struct cp_call *c, struct cp_s3_put *p)
{
    struct sink_config sc;
    struct buf msg;
    struct err err;
    char bt[37];
    int rc;

    uuid7_format(c->cl.broker_tenant, bt);
    buf_init(&msg, BUF_UNLIMITED);
    rc = sink_config_from_doc(
        &sc, bt, (struct slice){p->config.data, p->config.len},
        p->has_secret ? p->secret.data : "stored-secret", &msg, &err);
    if (rc == 0) {
        sink_config_free(&sc);
        buf_free(&msg);
        return true;
    }
    cp_fail(c, 400, "invalid", "%s", msg.len > 0 ? msg.data : err.msg);
    buf_free(&msg);
    return false;
}

static void cp_s3_put_done(struct cp_call *c, const struct kv_answer *ans)
{
    UNUSED(ans);
    cp_answer(c, 200);
}

/* Build the row and submit it. */
static void cp_s3_put_write(struct cp_call *c, struct cp_s3_put *p)
{
    char bt[37];
    char key[CP_ID_LEN + 2];
    struct buf sealed;
    struct jw w;
    struct err err;
    struct kv_op op;

    buf_init(&sealed, BUF_UNLIMITED);
    if (p->has_secret &&
        aead_seal(c->cp->seal_key, (const uint8_t *)p->secret.data,
                  p->secret.len, &sealed, &err) != 0) {
        buf_free(&sealed);
        cp_fail(c, 500, "seal_failed", "sealing the S3 secret failed");
        return;
    }
    if (!p->has_secret) {
        buf_append(&sealed, p->old.sealed.data, p->old.sealed.len, &err);
    }
    c->updated_at_us = cp_now_us();
    if (p->old.found && c->updated_at_us <= p->old.updated_at_us) {
        c->updated_at_us = p->old.updated_at_us + 1; /* every write moves it */
    }
    uuid7_format(c->cl.broker_tenant, bt);
    buf_init(&p->row, BUF_UNLIMITED);
    jw_init(&w, &p->row);
    jw_obj_begin(&w);
    jw_key(&w, "cluster_id");
    jw_cstr(&w, c->cl.id);
    jw_key(&w, "broker_tenant");
    jw_cstr(&w, bt);
    jw_key(&w, "enabled");
    jw_bool(&w, c->enabled);
    jw_key(&w, "config");
    jw_raw(&w, p->config.data, p->config.len);
    jw_key(&w, "secret_key_sealed");
    jw_str(&w, sealed.data != NULL ? sealed.data : "", sealed.len);
    jw_key(&w, "updated_at_us");
    jw_i64(&w, c->updated_at_us);
    jw_obj_end(&w);
    buf_free(&sealed);
    ASSERT(jw_finish(&w, &err) == 0);
    cp_s3_render(c, p->config.data, p->config.len, true);
    snprintf(key, sizeof(key), "#%s", c->cl.id);
    if (p->old.found) {
        op = cp_op_put(CP_NS_S3SINKS, key, p->row.data);
        op.has_expect = true;
        op.expect = p->old.version;
        op.required = true;
    } else {
        op = cp_op_claim(CP_NS_S3SINKS, key, p->row.data);
    }
    cp_submit(c, &op, 1, cp_s3_put_done);
}

/* 409 system_tenant for a cluster that cannot have a sink of its own, on
 * every method of the route (the page's table does not limit it to PUT):
 * true when answered. */
static bool cp_s3_system_refused(struct cp_call *c)
{
    if (c->cp->is_tenant_header &&
        memcmp(c->cl.broker_tenant, STORE_DEFAULT_TENANT, 16) != 0 &&
        memcmp(c->cl.broker_tenant, CP_PROXY_TENANT, 16) != 0) {
        return false;
    }
    cp_fail(c, 409, "system_tenant",
            "cluster %s runs as the broker's default tenant or the "
            "proxy's own (or QUEEN_PROXY_TENANT_HEADER is off): its "
            "queues are the environment sink's, not a bucket of its own",
            c->cl.slug);
    return true;
}

static void cp_run_s3_put(struct cp_call *c)
{
    struct cp_s3_put p;
    struct err err;
    bool is_same;

    memset(&p, 0, sizeof(p));
    buf_init(&p.config, BUF_UNLIMITED);
    buf_init(&p.secret, CP_S3_SECRET_MAX);
    /* One allocation: no copy of the secret is left behind by a realloc. */
    (void)buf_reserve(&p.secret, CP_S3_SECRET_MAX, &err);
    buf_init(&p.row, BUF_UNLIMITED);
    if (!cp_s3_cluster(c) || cp_s3_system_refused(c)) {
        goto out;
    }
    if (c->cl.deleting) {
        cp_fail(c, 409, "deleting", "cluster %s or its tenant is being deleted",
                c->cl.slug);
        goto out;
    }
    if (!cp_s3_put_body(c, &p)) {
        goto out;
    }
    if (cp_s3_row_read(c->cp->a->store, c->cl.id, &p.old, &err) != 0) {
        cp_fail_err(c, &err);
        goto out;
    }
    if (!p.has_secret && !p.old.has_secret) {
        cp_fail(c, 400, "invalid",
                "secretKey is required the first time a cluster's sink is "
                "set (later PUTs may leave it out to keep the stored one)");
        goto out;
    }
    if (!cp_s3_put_validate(c, &p)) {
        goto out;
    }
    if (p.has_secret && !c->cp->has_seal_key) {
        cp_fail(c, 409, "encryption_required",
                "this cell has no QUEEN_ENCRYPTION_KEY: a tenant's S3 secret "
                "is never stored in clear; set the same key on every node "
                "first");
        goto out;
    }
    /* Without a new secret, the same settings write nothing (a write would
     * move updatedAt and rebuild the sink on every node). */
    is_same = !p.has_secret && p.old.enabled == c->enabled &&
              p.old.config.len == p.config.len &&
              memcmp(p.old.config.data, p.config.data, p.config.len) == 0;
    if (is_same) {
        c->updated_at_us = p.old.updated_at_us;
        cp_s3_render(c, p.config.data, p.config.len, true);
        cp_answer(c, 200);
        goto out;
    }
    cp_s3_put_write(c, &p);
out:
    cp_s3_put_free(&p);
}

void cp_handle_s3_put(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, cp_run_s3_put);

    c->run(c);
}

/* ---- GET and DELETE ---- */

void cp_handle_s3_get(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, NULL);
    struct cp_s3_row r;
    struct err err;

    if (!cp_s3_cluster(c) || cp_s3_system_refused(c)) {
        return;
    }
    if (cp_s3_row_read(c->cp->a->store, c->cl.id, &r, &err) != 0) {
        cp_s3_row_free(&r);
        cp_fail_err(c, &err);
        return;
    }
    if (!r.found) {
        cp_s3_row_free(&r);
        cp_fail(c, 404, "s3_unset", "cluster %s has no S3 sink", c->cl.slug);
        return;
    }
    c->enabled = r.enabled;
    c->updated_at_us = r.updated_at_us;
    cp_s3_render(c, r.config.len > 0 ? r.config.data : "{}",
                 r.config.len > 0 ? r.config.len : 2, r.has_secret);
    cp_s3_row_free(&r);
    cp_answer(c, 200);
}

static void cp_s3_deleted(struct cp_call *c, const struct kv_answer *ans)
{
    struct jw w;
    struct err err;

    buf_reset(&c->out);
    jw_init(&w, &c->out);
    jw_obj_begin(&w);
    jw_key(&w, "cluster");
    jw_cstr(&w, c->cl.slug);
    jw_key(&w, "removed");
    jw_bool(&w, ans->n_results == 1 && ans->results[0].applied);
    jw_obj_end(&w);
    ASSERT(jw_finish(&w, &err) == 0);
    cp_answer(c, 200);
}

static void cp_run_s3_delete(struct cp_call *c)
{
    char key[CP_ID_LEN + 2];
    struct kv_op op;

    if (!cp_s3_cluster(c) || cp_s3_system_refused(c)) {
        return;
    }
    snprintf(key, sizeof(key), "#%s", c->cl.id);
    op = cp_op_del(CP_NS_S3SINKS, key);
    cp_submit(c, &op, 1, cp_s3_deleted);
}

void cp_handle_s3_delete(struct http_req *req, void *arg)
{
    struct cp_call *c = cp_call_new(arg, req, cp_run_s3_delete);

    c->run(c);
}
