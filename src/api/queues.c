/* GET /api/v1/resources/queues (docs/design/http-api.md §8): every queue of the
 * tenant in name order, {"queues":[{"name":…,"partitions":n},…]}. The sink
 * lists queues with store_list_queues() directly; this is its HTTP face. The
 * `stats` query parameter is accepted and ignored. */
#include <string.h>

#include "api/api.h"
#include "api/tenant.h"
#include "http/server.h"

int api_queues_render(const struct store_queue_list *l, struct buf *out,
                      struct err *err)
{
    struct jw w;

    jw_init(&w, out);
    jw_obj_begin(&w);
    jw_key(&w, "queues");
    jw_arr_begin(&w);
    for (size_t i = 0; i < l->n; i++) {
        jw_obj_begin(&w);
        jw_key(&w, "name");
        jw_str(&w, l->queues[i].name.ptr, l->queues[i].name.len);
        jw_key(&w, "partitions");
        jw_u64(&w, l->queues[i].n_partitions);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    return jw_finish(&w, err);
}

void api_handle_queues(struct http_req *req, void *arg)
{
    struct api *a = arg;
    struct store_queue_list l;
    struct buf out;
    struct err err;
    uint8_t tenant[16];

    const char *code;

    if (api_tenant_gated(req, a, API_GATE_READ, tenant, &code, &err) != 0) {
        api_respond_tenant(a, req, code, &err);
        return;
    }
    memset(&l, 0, sizeof(l));
    buf_init(&out, BUF_UNLIMITED);
    if (store_list_queues(a->store, tenant, &l, &err) != 0 ||
        api_queues_render(&l, &out, &err) != 0) {
        buf_free(&out);
        api_respond_err(a, req, &err);
    } else {
        api_respond_json(a, req, 200, &out);
    }
    store_queue_list_free(&l);
}
