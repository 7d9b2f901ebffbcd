/* The rolling-upgrade gate (broker/upgrade.h). */
#include "broker/upgrade.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "broker/kv.h"
#include "raft/node.h"
#include "store/format.h"
#include "store/kv.h" /* struct kv_op */

/* Voters read per tick; a configuration has at most a handful. */
#define UPGRADE_VOTERS_MAX 16

struct upgrade {
    uv_timer_t timer;
    struct store *store;
    struct node *node;
    struct kv_service *kv;
    uint64_t self_id;
    bool in_flight; /* one KV write out: its callback clears it */
    bool closing;
    bool closed; /* the timer handle is closed: free with the last write */
    /* The key of the last write logged at info: a write retried every
     * tick (a full disk refuses it) is logged once, then at debug. */
    char logged[48];
};

enum upgrade_step upgrade_next(const struct upgrade_view *v)
{
    if (v->cluster >= STORE_FORMAT_BUILD) {
        return UPGRADE_DONE;
    }
    if (v->self_row < STORE_FORMAT_BUILD) {
        return UPGRADE_ANNOUNCE;
    }
    if (!v->is_leader || v->n_voters == 0) {
        return UPGRADE_IDLE;
    }
    for (size_t i = 0; i < v->n_voters; i++) {
        if (v->voter_rows[i] < STORE_FORMAT_BUILD) {
            return UPGRADE_IDLE;
        }
    }
    return UPGRADE_RAISE;
}

static void upgrade_node_key(char *out, size_t n, uint64_t id)
{
    snprintf(out, n, STORE_FORMAT_NODE_PREFIX "%" PRIu64, id);
}

/* The row of key as a level (0 absent, not one, or unreadable). */
static int upgrade_row(struct upgrade *u, const char *key)
{
    int level;
    struct err err;

    if (store_format_row(u->store, NULL, key, &level, &err) != 0) {
        log_debug("upgrade", "read %s: %s", key, err.msg);
    }
    return level;
}

static void upgrade_on_done(void *arg, const struct kv_answer *ans)
{
    struct upgrade *u = arg;

    u->in_flight = false;
    if (u->closed) {
        free(u);
        return;
    }
    if (ans->status != 0) {
        log_debug("upgrade", "format write: %s", ans->msg);
    }
}

static void upgrade_write(struct upgrade *u, const char *key, const char *why)
{
    char value[16];
    struct kv_op op = {0};
    struct kv_batch b = {STORE_DEFAULT_TENANT, &op, 1};
    struct err err;

    snprintf(value, sizeof(value), "%d", (int)STORE_FORMAT_BUILD);
    op.op = KV_PUT;
    op.ns = SLICE_LIT(STORE_FORMAT_NS);
    op.key = (struct slice){key, strlen(key)};
    op.value = (struct slice){value, strlen(value)};
    op.forever = true;
    op.required = true;
    if (kv_submit(u->kv, &b, upgrade_on_done, u, &err) != 0) {
        log_debug("upgrade", "format write: %s", err.msg);
        return;
    }
    u->in_flight = true;
    if (strcmp(u->logged, key) == 0) {
        log_debug("upgrade", "%s: %s again", why, key);
        return;
    }
    snprintf(u->logged, sizeof(u->logged), "%s", key);
    log_info_kv("upgrade", why, {"key", key},
                {"format", LOG_U64((uint64_t)STORE_FORMAT_BUILD)});
}

static void upgrade_on_tick(uv_timer_t *t)
{
    struct upgrade *u = t->data;
    struct node_member m[UPGRADE_VOTERS_MAX];
    int rows[UPGRADE_VOTERS_MAX];
    char key[48];
    struct upgrade_view v = {0};
    struct err err;
    size_t n = 0;

    if (u->closing || u->in_flight) {
        return;
    }
    if (store_format_read(u->store, NULL, &v.cluster, &err) != 0) {
        log_debug("upgrade", "read format: %s", err.msg);
        return;
    }
    upgrade_node_key(key, sizeof(key), u->self_id);
    v.self_row = upgrade_row(u, key);
    v.is_leader = node_role(u->node) == NODE_LEADER;
    if (v.is_leader) {
        size_t all = node_members(u->node, m, UPGRADE_VOTERS_MAX);

        for (size_t i = 0; i < all && i < UPGRADE_VOTERS_MAX; i++) {
            char vk[48];

            if (!m[i].is_voter) {
                continue;
            }
            upgrade_node_key(vk, sizeof(vk), m[i].id);
            rows[n++] = upgrade_row(u, vk);
        }
        /* a configuration past the cap is never raised (IDLE) */
        v.n_voters = all <= UPGRADE_VOTERS_MAX ? n : 0;
    }
    v.voter_rows = rows;
    switch (upgrade_next(&v)) {
    case UPGRADE_DONE:
        uv_timer_stop(&u->timer);
        log_info_kv("upgrade", "the cluster's storage format is this build's",
                    {"format", LOG_U64((uint64_t)v.cluster)});
        return;
    case UPGRADE_ANNOUNCE:
        upgrade_write(u, key, "this node runs a build of the storage format");
        return;
    case UPGRADE_RAISE:
        upgrade_write(u, STORE_FORMAT_KEY,
                      "every voter runs a build of the storage format; "
                      "raising the cluster's");
        return;
    case UPGRADE_IDLE:
        return;
    }
}

struct upgrade *upgrade_start(uv_loop_t *loop, struct store *store,
                              struct node *node, struct kv_service *kv,
                              uint64_t self_id)
{
    struct upgrade *u = xcalloc(1, sizeof(*u));

    u->store = store;
    u->node = node;
    u->kv = kv;
    u->self_id = self_id;
    uv_timer_init(loop, &u->timer);
    u->timer.data = u;
    uv_timer_start(&u->timer, upgrade_on_tick, UPGRADE_TICK_MS / 5,
                   UPGRADE_TICK_MS);
    return u;
}

static void upgrade_on_closed(uv_handle_t *h)
{
    struct upgrade *u = h->data;

    u->closed = true;
    if (!u->in_flight) {
        free(u);
    }
}

void upgrade_close(struct upgrade *u)
{
    if (u == NULL) {
        return;
    }
    u->closing = true;
    uv_timer_stop(&u->timer);
    uv_close((uv_handle_t *)&u->timer, upgrade_on_closed);
}
