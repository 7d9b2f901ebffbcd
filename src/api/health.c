/* GET /health (docs/design/http-api.md §8): 200 "healthy" while this node has a
 * leader (itself included) and has applied what it knows is committed, else 503
 * "settling"; 503 "unhealthy" with a "reason" while the store or the raft log
 * cannot write (node_storage_error). It never looks at the sink. The raft
 * block carries role, term, the leader (its id, and its HTTP address when
 * QUEEN_RAFT_PEERS names it, else null), applied and commit
 * (test/s3sink/run.py reads them). */
#include "api/api.h"
#include "http/server.h"
#include "raft/node.h"

/* A follower this far behind the commit index is still settling. */
#define HEALTH_READY_LAG 1000

void api_handle_health(struct http_req *req, void *arg)
{
    struct api *a = arg;
    int role = node_role(a->node);
    uint64_t applied = node_applied_index(a->node);
    uint64_t commit = node_commit_index(a->node);
    uint64_t leader_id = 0;
    const char *leader_addr = NULL;
    const char *storage = node_storage_error(a->node);
    bool is_ready;
    struct buf out;
    struct jw w;
    struct err err;

    node_leader(a->node, &leader_id, &leader_addr);
    is_ready =
        !a->is_stopping &&
        (role == NODE_LEADER || (role == NODE_FOLLOWER && leader_id != 0)) &&
        applied + HEALTH_READY_LAG >= commit;
    buf_init(&out, BUF_UNLIMITED);
    jw_init(&w, &out);
    jw_obj_begin(&w);
    jw_key(&w, "status");
    if (storage != NULL) {
        is_ready = false;
        jw_cstr(&w, "unhealthy");
        jw_key(&w, "reason");
        jw_cstr(&w, storage);
    } else {
        jw_cstr(&w, is_ready ? "healthy" : "settling");
    }
    jw_key(&w, "engine");
    jw_cstr(&w, "raft");
    jw_key(&w, "version");
    jw_cstr(&w, API_VERSION);
    jw_key(&w, "raft");
    jw_obj_begin(&w);
    jw_key(&w, "role");
    jw_cstr(&w, node_role_name(role));
    jw_key(&w, "term");
    jw_u64(&w, node_term(a->node));
    jw_key(&w, "leader");
    if (leader_id != 0 && api_peer_http(a, leader_id) != NULL) {
        jw_cstr(&w, api_peer_http(a, leader_id));
    } else {
        jw_null(&w);
    }
    jw_key(&w, "applied");
    jw_u64(&w, applied);
    jw_key(&w, "commit");
    jw_u64(&w, commit);
    jw_key(&w, "leaderId");
    jw_u64(&w, leader_id);
    jw_obj_end(&w);
    jw_obj_end(&w);
    if (jw_finish(&w, &err) != 0) {
        buf_free(&out);
        api_respond_err(a, req, &err);
        return;
    }
    api_respond_json(a, req, is_ready ? 200 : 503, &out);
}
