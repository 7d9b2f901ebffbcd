/* GET /status (docs/design/http-api.md §8): {"status":"ok","engine":"raft",…}
 * with "cluster": this node's view of the raft members (id, raft and http
 * addresses, voter or not, which one is this node and which the leader).
 * When the embedded sink runs, its hook (api->status_extra) appends the "s3"
 * member; without the sink the block is absent. */
#include "api/api.h"
#include "http/server.h"
#include "raft/node.h"

static void status_cluster(const struct api *a, struct jw *w)
{
    struct node_member m[API_MAX_PEERS];
    size_t n = node_members(a->node, m, API_MAX_PEERS);
    uint64_t leader_id = 0;
    const char *leader_addr = NULL;

    node_leader(a->node, &leader_id, &leader_addr);
    jw_key(w, "cluster");
    jw_obj_begin(w);
    jw_key(w, "term");
    jw_u64(w, node_term(a->node));
    jw_key(w, "leaderId");
    jw_u64(w, leader_id);
    jw_key(w, "members");
    jw_arr_begin(w);
    for (size_t i = 0; i < n && i < API_MAX_PEERS; i++) {
        const char *http = api_peer_http(a, m[i].id);

        jw_obj_begin(w);
        jw_key(w, "id");
        jw_u64(w, m[i].id);
        jw_key(w, "raft");
        jw_cstr(w, m[i].raft_address);
        jw_key(w, "http");
        if (http != NULL) {
            jw_cstr(w, http);
        } else {
            jw_null(w);
        }
        jw_key(w, "role");
        jw_cstr(w, m[i].is_voter ? "voter" : "standby");
        jw_key(w, "self");
        jw_bool(w, m[i].id == a->self_id);
        jw_key(w, "leader");
        jw_bool(w, m[i].id == leader_id);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_obj_end(w);
}

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
    status_cluster(a, &w);
    rc = jw_finish(&w, &err);
    /* The writer is done with the object's members; the hook appends its
     * own ",\"s3\":{…}" before the closing brace. */
    if (rc == 0 && a->status_extra != NULL) {
        rc = a->status_extra(a->status_extra_arg, &out, &err);
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
