/* The embedded control plane's routes (docs/design/control-plane.md): the
 * /api/cp/... table a second listener serves on QUEEN_PROXY_PORT, over the
 * rows of cp/registry.h.
 *
 * Invariants:
 *   (1) The token decides before anything else (the router's guard): no
 *       QUEEN_PROXY_CP_TOKEN answers every request 404; a missing or wrong
 *       x-queen-cp-token answers 401 "bad control-plane token". The tokens
 *       are compared as SHA-256 digests with CRYPTO_memcmp, so neither the
 *       content nor the length leaks through timing.
 *   (2) Every write is one KV batch of the proxy tenant through the
 *       in-process call (broker/kv.h kv_submit), so a follower forwards it to
 *       the leader and every node applies the same rows. A slug is claimed
 *       with a required putIfAbsent of its index row, a row is rewritten with
 *       a required expect of the version read, and a lost precondition
 *       re-runs the route from its reads (up to CP_TRIES times), so two
 *       racing calls never both win.
 *   (3) A refused call changes nothing: bodies are checked whole before the
 *       batch is built (api.h (1)).
 *   (4) No answer and no log line carries a secret: the S3 secretKey is
 *       sealed (base/aead.h) before it is written and never rendered.
 *   (5) Routes run on the loop thread and never block it: reads are this
 *       node's applied store, writes answer from kv_submit's callback.
 *
 * Errors answer {"error": <message>, "code": <code>} (http/resp.h). */
#ifndef QUEEN_API_CP_H
#define QUEEN_API_CP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/aead.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "cp/registry.h"
#include "store/kv.h"

struct api;
struct http_req;
struct kv_service;
struct router;

#define CP_TOKEN_HEADER  "x-queen-cp-token"
#define CP_TOKEN_MAX     256
#define CP_TRIES         4
#define CP_S3_CONFIG_MAX 32768 /* bytes of a tenant's sink settings */
#define CP_S3_SECRET_MAX 4096  /* bytes of its secretKey */

struct cp_api_config {
    const char *token;        /* QUEEN_PROXY_CP_TOKEN; "" = every route 404 */
    bool is_tenant_header;    /* QUEEN_PROXY_TENANT_HEADER */
    bool is_s3_embedded;      /* this node runs the S3 sink */
    const uint8_t *seal_key;  /* QUEEN_ENCRYPTION_KEY, AEAD_KEY_LEN bytes, or
                                 NULL when the node has none */
    bool is_crash_after_mark; /* QUEEN_CP_CRASH_AFTER_MARK (tests) */
};

struct cp_api {
    struct api *a;         /* borrowed: store, node, configure */
    struct kv_service *kv; /* borrowed */
    bool has_token;
    uint8_t token_digest[32];
    bool is_tenant_header;
    bool is_s3_embedded;
    bool has_seal_key;
    uint8_t seal_key[AEAD_KEY_LEN];
    bool is_crash_after_mark;
};

/* Fill c from cfg (copied; the key is copied and wiped by cp_api_free), set
 * r's guard and add every /api/cp route to r. Borrows a and kv (they outlive
 * the routes). 0 or ERR_INVALID from router_add. */
int cp_api_routes(struct cp_api *c, struct api *a, struct kv_service *kv,
                  const struct cp_api_config *cfg, struct router *r,
                  struct err *err);
/* Wipe the copied key. */
void cp_api_free(struct cp_api *c);

/* Pure: whether token (NULL = header absent) matches the digest. */
bool cp_token_ok(const struct cp_api *c, const char *token);

/* Pure: append the settings object of an s3 PUT body (every member but
 * secretKey and enabled, whitespace outside strings dropped) to out. The
 * body must be a parsed object (token 0). 0 or ERR_TOO_BIG from out. */
int cp_s3_config_doc(const struct json_doc *d, struct buf *out,
                     struct err *err);

/* ---- shared by cp.c and cp_s3.c ---- */

struct cp_call;
/* Runs (again) a route's reads and its one batch. */
typedef void (*cp_run_fn)(struct cp_call *c);
/* Answers a batch applied (ans->status 0) and may submit the next one. */
typedef void (*cp_done_fn)(struct cp_call *c, const struct kv_answer *ans);

struct cp_call {
    struct cp_api *cp;
    struct http_req *req;
    cp_run_fn run;
    cp_done_fn done;
    int tries;
    int step;
    struct cp_cluster cl;
    char slug[CP_SLUG_MAX + 1];
    char tenant_slug[CP_SLUG_MAX + 1];
    char id[CP_ID_LEN + 1];
    char tenant_id[CP_ID_LEN + 1];
    char broker_tenant[CP_ID_LEN + 1];
    size_t n_removed;
    struct buf out; /* what the answer renders: a row, a config */
    bool enabled;
    int64_t updated_at_us;
};

/* A call for req; run it with c->run(c). Free with cp_call_free(). */
struct cp_call *cp_call_new(struct cp_api *cp, struct http_req *req,
                            cp_run_fn run);
void cp_call_free(struct cp_call *c);
/* Submit ops as one batch of the proxy tenant; done runs on success, a lost
 * precondition re-runs c->run (409 conflict after CP_TRIES), a call error
 * answers. On a refused submit it answers and frees c. */
void cp_submit(struct cp_call *c, const struct kv_op *ops, size_t n,
               cp_done_fn done);
/* Answer the error envelope and free c. */
void cp_fail(struct cp_call *c, int status, const char *code, const char *fmt,
             ...) PRINTF(4, 5);
/* Answer a store or KV error (api_respond_err's mapping) and free c. */
void cp_fail_err(struct cp_call *c, const struct err *err);
/* Answer 200/201 with c->out as the body and free c. */
void cp_answer(struct cp_call *c, int status);
/* Find the cluster named by the route parameter param (its id or its
 * slug, checked whole before any lookup: never cut) into c->cl. False
 * after answering (400 invalid when it is neither, 404 cluster_unknown, or
 * a store error) and freeing c. */
bool cp_call_cluster(struct cp_call *c, const char *param);

/* KV ops of the proxy tenant's rows (every write is forever). */
struct kv_op cp_op_put(const char *ns, const char *key, const char *value);
struct kv_op cp_op_claim(const char *ns, const char *key, const char *value);
struct kv_op cp_op_del(const char *ns, const char *key);

/* The wall clock in µs. */
int64_t cp_now_us(void);

/* The s3 routes (cp_s3.c), added by cp_api_routes(). */
void cp_handle_s3_put(struct http_req *req, void *arg);
void cp_handle_s3_get(struct http_req *req, void *arg);
void cp_handle_s3_delete(struct http_req *req, void *arg);

#endif
