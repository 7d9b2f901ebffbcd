/* GET /status and POST /api/v1/stats/refresh (docs/design/http-api.md §8):
 * {"status":"ok","engine":"raft",…} with "cluster": this node's view of the
 * raft members (id, raft and http addresses, voter or not, which one is this
 * node and which the leader). When the embedded sink runs, its hook
 * (api->status_extra) appends the "s3" member; without the sink the block is
 * absent. */
#include "api/api.h"
#include "api/auth.h"
#include "base/uuid7.h"
#include "http/server.h"
#include "raft/node.h"

void api_handle_status(struct http_req *req, void *arg)
{
    struct api *a = arg;
    struct buf out;
    struct jw w;
    struct err err;
    int rc;

    buf_init(&out, BUF_UNLIMITED);
    jw_init(&w, &out);
    jw_obj_begin(&w);
    jw_key(&w, "status");
    jw_cstr(&w, "ok");
    jw_key(&w, "engine");
    jw_cstr(&w, "raft");
    jw_key(&w, "version");
    jw_cstr(&w, API_VERSION);
    jw_key(&w, "role");
    jw_cstr(&w, node_role_name(node_role(a->node)));
    jw_key(&w, "cluster");
    api_cluster_block(a, &w);
    rc = jw_finish(&w, &err);
    /* The writer is done with the object's members; the hook appends its
     * own ",\"s3\":{…}" before the closing brace. */
    if (rc == 0 && a->status_extra != NULL) {
        const struct auth_entry *e = req->principal;
        char tenant[37];

        /* A token bound to a tenant sees that tenant's sinks only: another
         * tenant's bucket, queues and counts are not its business. */
        if (e != NULL && e->is_bound) {
            uuid7_format(e->tenant, tenant);
        }
        rc = a->status_extra(a->status_extra_arg,
                             e != NULL && e->is_bound ? tenant : NULL, &out,
                             &err);
    }
    if (rc == 0) {
        rc = buf_append_byte(&out, '}', &err);
    }
    if (rc != 0) {
        buf_free(&out);
        api_respond_err(a, req, &err);
        return;
    }
    api_respond_json(a, req, 200, &out);
}

/* POST /api/v1/stats/refresh (docs/design/http-api.md §8): the product
 * refreshes cached queue statistics here; the raft engine computes them on
 * read, so there is nothing to refresh, and the answer says so. */
void api_handle_stats_refresh(struct http_req *req, void *arg)
{
    static const char body[] =
        "{\"success\":true,\"refreshed\":false,\"engine\":\"raft\"}";
    struct buf out;
    struct err err;

    buf_init(&out, BUF_UNLIMITED);
    ASSERT(buf_append(&out, body, sizeof(body) - 1, &err) == 0);
    api_respond_json(arg, req, 200, &out);
}
