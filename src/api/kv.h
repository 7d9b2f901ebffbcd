/* The KV routes (docs/design/http-api.md §7): POST /api/v1/kv and the single-op
 * sugar GET | PUT | DELETE /api/v1/kv/:ns/ *key. A pure part parses a body into
 * struct kv_op (store/kv.h) and renders a struct kv_answer as JSON (unit
 * tested and fuzzed); the handlers validate with kv_validate() (the HTTP
 * edge's ceilings on), answer reads-only calls from a read transaction and
 * submit the rest through the in-process interface (broker/kv.h), so HTTP
 * and the sink share one path.
 *
 * Invariants:
 *   (1) A refused call changes nothing (api.h (1)): the whole body is
 *       parsed and validated before anything is proposed.
 *   (2) No HTTP call writes namespace queen-s3 (API_KV_RESERVED_NS), for
 *       any tenant: a call with one write there (put, putIfAbsent, delete,
 *       incr) is refused whole, 403 kv_reserved_namespace, so no client can
 *       move a sink's lease, intent or commit pointer (and with it the
 *       retention hold's floor). Reads of it still answer. Only
 *       QUEEN_KV_UNSAFE_SINK_WRITES=true (tests, repairs) lifts it.
 *   (3) No HTTP call writes namespace queen-cluster (store/format.h), for
 *       any tenant, switch or not: the cluster's storage format must only
 *       rise when every voter runs a build of it (broker/upgrade.h). */
#ifndef QUEEN_API_KV_H
#define QUEEN_API_KV_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "store/kv.h"

struct api;
struct router;
struct kv_service;

#define API_KV_PRECONDITION_MAX 4096 /* characters of the detail */

/* The namespace of the S3 sink's rows (leases, intents, commit pointers,
 * presence rows; docs/design/formats.md §5): only the sink inside the broker
 * writes it, through the in-process call (broker/kv.h). Over HTTP it is
 * read-only. */
#define API_KV_RESERVED_NS "queen-s3"

/* Which body the parser reads. */
enum api_kv_mode {
    API_KV_BATCH = 0, /* bare array or {"operations": [...]} */
    API_KV_PUT,       /* PUT /api/v1/kv/:ns/ *key */
    API_KV_DELETE     /* DELETE /api/v1/kv/:ns/ *key (body optional) */
};

struct api_kv {
    struct json_doc doc;
    size_t n;
    struct kv_op *ops;
    struct slice *keys; /* getMany keys of every op */
    struct buf arena;   /* unescaped strings; never reallocated */
    char reason[40];    /* the refusal's reason id */
};

/* Parse body (borrowed; must outlive k). For the single-op modes, ns and key
 * come from the path (borrowed). Returns 0, or ERR_INVALID / ERR_TOO_BIG
 * with k->reason set ("kv_bad_body", "kv_unknown_op", ...) and err->msg the
 * detail. Validation (kv_validate) is a separate step. Free k with
 * api_kv_free() in every case. */
int api_kv_parse(struct api_kv *k, int mode, struct slice body, struct slice ns,
                 struct slice key, struct err *err);
void api_kv_free(struct api_kv *k);

/* Refuse ops with a write in API_KV_RESERVED_NS, (2), unless sink_open
 * (QUEEN_KV_UNSAFE_SINK_WRITES), or in store/format.h's STORE_FORMAT_NS,
 * always (3). Returns 0, or ERR_FORBIDDEN with reason (cap 40)
 * "kv_reserved_namespace" and err->msg naming the first such op. Pure. */
int api_kv_check_reserved(const struct kv_op *ops, size_t n, bool sink_open,
                          char *reason, struct err *err);

/* Render an answer with status 0: {"results":[...]} (single false) or the
 * one element (single true). ERR_PRECONDITION renders the precondition
 * body. Appends to out. */
int api_kv_render(const struct kv_answer *a, bool single, struct buf *out,
                  struct err *err);

/* The error envelope {"error":…,"reason":…,"detail":…} for a status
 * (error: 400 kv_bad_request, 403 kv_forbidden, 413 payload_too_large, 503
 * kv_unavailable, else kv_internal). */
int api_kv_render_error(int status, const char *reason, const char *detail,
                        struct buf *out, struct err *err);

/* Add the KV routes to r. Borrows a and kv (they outlive the routes);
 * allocates the routes' context, freed by api_kv_routes_free(). */
int api_kv_routes(struct api *a, struct kv_service *kv, struct router *r,
                  struct err *err);
void api_kv_routes_free(void);

#endif
