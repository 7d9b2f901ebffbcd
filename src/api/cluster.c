/* The cluster's membership routes (docs/design/http-api.md §14), for
 * operators replacing a node:
 *
 *   GET    /api/v1/cluster/members       this node's view (as in /status)
 *   POST   /api/v1/cluster/members       {"id":4,"raft":"ip:port",
 *                                         "http":"ip:port"}: add a voter
 *   DELETE /api/v1/cluster/members/:id   remove one
 *
 * Changes run on the leader only (a follower answers 503 no_leader with the
 * leader's address) and one at a time (503 retry while another runs). An
 * add answers 200 once the new server caught up and votes; if that takes
 * longer than API_MEMBER_WAIT_MS the answer is 202 "joining" and the
 * promotion goes on. With bearer tokens, only a token bound to no tenant may
 * change membership (403). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/auth.h"
#include "base/env.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "http/server.h"
#include "raft/node.h"
#include "store/format.h"

#define API_MEMBER_WAIT_MS 30000

/* One membership call: answered once, freed when both the answer went out
 * and the node called back. */
struct member_call {
    struct api *api;
    struct http_req *req; /* NULL once answered */
    uv_timer_t timer;
    bool is_timer_open;
    bool is_node_done;
    uint64_t id;
    char raft[256];
    char http[256];
    bool is_add;
};

void api_cluster_block(const struct api *a, struct jw *w)
{
    struct node_member m[API_MAX_PEERS];
    size_t n = node_members(a->node, m, API_MAX_PEERS);
    uint64_t leader_id = 0;
    const char *leader_addr = NULL;

    node_leader(a->node, &leader_id, &leader_addr);
    jw_obj_begin(w);
    jw_key(w, "term");
    jw_u64(w, node_term(a->node));
    jw_key(w, "leaderId");
    jw_u64(w, leader_id);
    /* store/format.h: the level every voter runs; this build's once the
     * rolling-upgrade gate raised it */
    jw_key(w, "storageFormat");
    jw_u64(w, (uint64_t)store_format(a->store));
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
        jw_cstr(w, m[i].is_voter ? "voter" : "spare");
        jw_key(w, "self");
        jw_bool(w, m[i].id == a->self_id);
        jw_key(w, "leader");
        jw_bool(w, m[i].id == leader_id);
        if (m[i].has_progress) {
            jw_key(w, "matchIndex");
            jw_u64(w, m[i].match_index);
        }
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_obj_end(w);
}

void api_handle_members(struct http_req *req, void *arg)
{
    struct api *a = arg;
    struct buf out;
    struct jw w;
    struct err err;

    buf_init(&out, BUF_UNLIMITED);
    jw_init(&w, &out);
    api_cluster_block(a, &w);
    if (jw_finish(&w, &err) != 0) {
        buf_free(&out);
        api_respond_err(a, req, &err);
        return;
    }
    api_respond_json(a, req, 200, &out);
}

/* Only an operator's token: none bound to a tenant. */
static bool member_allowed(struct api *a, struct http_req *req)
{
    const struct auth_entry *e = req->principal;

    if (e != NULL && e->is_bound) {
        api_respond_error(a, req, 403, "forbidden",
                          "membership changes need a token bound to no "
                          "tenant");
        return false;
    }
    return true;
}

static void member_call_free(uv_handle_t *h)
{
    free(h->data);
}

/* Free c once it is answered and the node is done with it. */
static void member_call_release(struct member_call *c)
{
    if (c->req != NULL || !c->is_node_done) {
        return;
    }
    if (c->is_timer_open) {
        c->is_timer_open = false;
        uv_close((uv_handle_t *)&c->timer, member_call_free);
        return;
    }
    free(c);
}

static void member_answer(struct member_call *c, int status, const char *state)
{
    struct buf out;
    struct jw w;
    struct err err;

    buf_init(&out, BUF_UNLIMITED);
    jw_init(&w, &out);
    jw_obj_begin(&w);
    jw_key(&w, "id");
    jw_u64(&w, c->id);
    if (c->is_add) {
        jw_key(&w, "raft");
        jw_cstr(&w, c->raft);
        jw_key(&w, "http");
        jw_cstr(&w, c->http);
        jw_key(&w, "role");
        jw_cstr(&w, state);
    } else {
        jw_key(&w, "removed");
        jw_bool(&w, true);
    }
    jw_obj_end(&w);
    ASSERT(jw_finish(&w, &err) == 0);
    api_respond_json(c->api, c->req, status, &out);
    c->req = NULL;
}

static void member_timeout(uv_timer_t *t)
{
    struct member_call *c = t->data;

    if (c->req != NULL) {
        member_answer(c, 202, "joining");
    }
    member_call_release(c);
}

static void member_done(void *arg, int status, const struct err *err)
{
    struct member_call *c = arg;

    c->is_node_done = true;
    if (c->is_timer_open) {
        uv_timer_stop(&c->timer);
    }
    if (status == 0 && c->is_add) {
        api_peer_remember(c->api, c->id, c->http);
    }
    if (c->req != NULL) {
        if (status == 0) {
            member_answer(c, 200, "voter");
        } else {
            api_respond_err(c->api, c->req, err);
            c->req = NULL;
        }
    }
    member_call_release(c);
}

static struct member_call *member_call_new(struct api *a, struct http_req *req)
{
    struct member_call *c = xcalloc(1, sizeof(*c));

    c->api = a;
    c->req = req;
    return c;
}

/* The add's body: {"id": >= 1, "raft": "ip:port", "http": "ip:port"}. */
static int member_parse(struct member_call *c, struct slice body,
                        struct err *err)
{
    struct json_limits lim = {4, 2, 64};
    struct json_doc d;
    const char *keys[2] = {"raft", "http"};
    char *dst[2] = {c->raft, c->http};
    char host[256];
    int port;
    int i;

    if (json_parse(&d, body.ptr, body.len, &lim, err) != 0) {
        err->code = ERR_INVALID; /* err->msg is the scanner's sentence */
        return err_wrap(err, "bad member body");
    }
    if (json_type(&d, 0) != JSON_OBJECT) {
        json_doc_free(&d);
        return err_set(err, ERR_INVALID, "bad member body: not an object");
    }
    /* a key given twice names no one value, as on every other route */
    const char *all[3] = {"id", "raft", "http"};
    int vals[3];
    int dup = json_obj_pick(&d, 0, all, 3, vals);
    if (dup >= 0) {
        json_doc_free(&d);
        return err_set(err, ERR_INVALID,
                       "bad member body: duplicate key \"%s\"", all[dup]);
    }
    i = json_obj_get(&d, 0, "id");
    if (i < 0 || !json_get_u64(&d, i, &c->id) || c->id == 0) {
        json_doc_free(&d);
        return err_set(err, ERR_INVALID,
                       "bad member body: id must be an integer >= 1");
    }
    for (int k = 0; k < 2; k++) {
        struct buf s;

        buf_init(&s, 255);
        i = json_obj_get(&d, 0, keys[k]);
        if (i < 0 || json_type(&d, i) != JSON_STRING ||
            json_get_str(&d, i, &s, err) != 0 || s.len == 0 ||
            !env_parse_hostport(s.data, host, sizeof(host), &port)) {
            buf_free(&s);
            json_doc_free(&d);
            return err_set(err, ERR_INVALID,
                           "bad member body: %s must be \"ip:port\"", keys[k]);
        }
        memcpy(dst[k], s.data, s.len + 1);
        buf_free(&s);
    }
    json_doc_free(&d);
    if (strcmp(c->raft, c->http) == 0) {
        return err_set(err, ERR_INVALID,
                       "bad member body: raft and http are the same address");
    }
    return 0;
}

void api_handle_member_add(struct http_req *req, void *arg)
{
    struct api *a = arg;
    struct member_call *c;
    struct err err = {0};

    if (!member_allowed(a, req)) {
        return;
    }
    c = member_call_new(a, req);
    c->is_add = true;
    if (member_parse(c, req->body, &err) != 0 ||
        node_member_add(a->node, c->id, c->raft, member_done, c, &err) != 0) {
        api_respond_err(a, req, &err);
        free(c);
        return;
    }
    log_info_kv("api", "adding a member", {"member", LOG_U64(c->id)},
                {"raft", c->raft}, {"http", c->http});
    uv_timer_init(a->loop, &c->timer);
    c->timer.data = c;
    c->is_timer_open = true;
    uv_timer_start(&c->timer, member_timeout, API_MEMBER_WAIT_MS, 0);
}

void api_handle_member_remove(struct http_req *req, void *arg)
{
    struct api *a = arg;
    struct member_call *c;
    struct err err = {0};
    struct slice id;
    char tmp[24];

    if (!member_allowed(a, req)) {
        return;
    }
    c = member_call_new(a, req);
    http_req_param_slice(req, "id", &id);
    if (id.len == 0 || id.len >= sizeof(tmp)) {
        err_set(&err, ERR_INVALID, "bad member id");
    } else {
        memcpy(tmp, id.ptr, id.len);
        tmp[id.len] = '\0';
        /* a NUL decoded from the path (%00) would end the number early */
        if (memchr(tmp, '\0', id.len) != NULL || !env_parse_u64(tmp, &c->id) ||
            c->id == 0) {
            /* The id is decoded from the path: any byte can be in it. */
            char quote[sizeof(tmp)];

            err_set(&err, ERR_INVALID, "bad member id '%.*s'",
                    (int)json_msg_quote(quote, tmp, id.len, sizeof(quote)),
                    quote);
        }
    }
    if (err.code != 0 ||
        node_member_remove(a->node, c->id, member_done, c, &err) != 0) {
        api_respond_err(a, req, &err);
        free(c);
        return;
    }
    log_info_kv("api", "removing a member", {"member", LOG_U64(c->id)});
}
