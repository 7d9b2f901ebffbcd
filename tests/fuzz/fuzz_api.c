/* Fuzz target: the API body parsers (push, fetch, partitions/changed). The
 * first byte picks the parser, the rest is the body. Any bytes must parse or
 * be refused without a crash; a push that parses must encode into a command
 * whose payloads are the body's exact bytes (api.h (2)), and every answer
 * rendered from a parsed body must be valid JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_mint(void *ctx, uint8_t id[16])
{
    unsigned *n = ctx;

    memset(id, 0, 16);
    memcpy(id, n, sizeof(*n));
    (*n)++;
}

static void check_json(const struct buf *b)
{
    struct err err;

    if (json_validate(b->data, b->len, JSON_MAX_DEPTH_DEFAULT + 8, &err) != 0) {
        abort();
    }
}

static void fuzz_push(const char *body, size_t len)
{
    struct api_push p;
    struct err err;
    struct buf cmd;
    struct buf out;
    unsigned n = 0;

    if (api_push_parse(&p, body, len, &err) == 0 && p.n > 0) {
        struct fsm_item_result *items = calloc(p.n, sizeof(*items));
        struct fsm_result res;
        struct cmd_header h;
        struct cmd_push_iter it;
        struct cmd_push_item item;

        api_push_mint(&p, fuzz_mint, &n);
        buf_init(&cmd, BUF_UNLIMITED);
        if (cmd_push_encode(&cmd, STORE_DEFAULT_TENANT, p.items, p.n, &err) ==
                0 &&
            cmd_decode_header(cmd.data, cmd.len, &h, &err) == 0 &&
            cmd_push_iter_init(&it, h.body, &err) == 0) {
            for (size_t i = 0; cmd_push_next(&it, &item, &err) == 1; i++) {
                if (item.payload.len != p.items[i].payload.len ||
                    memcmp(item.payload.ptr, p.items[i].payload.ptr,
                           item.payload.len) != 0) {
                    abort();
                }
            }
        }
        buf_free(&cmd);
        memset(&res, 0, sizeof(res));
        res.n_items = p.n;
        res.items = items;
        buf_init(&out, BUF_UNLIMITED);
        if (api_push_render(&p, &res, &out, &err) == 0) {
            check_json(&out);
        }
        buf_free(&out);
        free(items);
    }
    api_push_free(&p);
}

static void fuzz_fetch(const char *body, size_t len)
{
    struct api_fetch f;
    const char *code;
    struct err err;

    if (api_fetch_parse(&f, body, len, &code, &err) == 0) {
        struct store_fetch_entry *e = calloc(f.n + 1, sizeof(*e));
        struct store_fetch_answer ans;
        struct buf out;

        memset(&ans, 0, sizeof(ans));
        ans.n_entries = f.n;
        ans.entries = e;
        for (size_t i = 0; i < f.n; i++) {
            e[i].error = (int)(i % 3);
        }
        buf_init(&out, BUF_UNLIMITED);
        if (api_fetch_render(&f, &ans, &out, &err) == 0) {
            struct buf again;

            check_json(&out);
            /* A parked waiter's compacted fetch renders the same bytes. */
            api_fetch_compact(&f);
            buf_init(&again, BUF_UNLIMITED);
            if (api_fetch_render(&f, &ans, &again, &err) != 0 ||
                again.len != out.len ||
                memcmp(again.data, out.data, out.len) != 0) {
                abort();
            }
            buf_free(&again);
        }
        buf_free(&out);
        free(e);
    }
    api_fetch_free(&f);
}

static void fuzz_changed(const char *body, size_t len)
{
    struct api_changed c;
    const char *code;
    struct err err;

    if (api_changed_parse(&c, body, len, &code, &err) == 0) {
        struct store_changed_entry *e = calloc(c.n + 1, sizeof(*e));
        struct store_changed_answer ans;
        struct buf out;

        memset(&ans, 0, sizeof(ans));
        ans.n_entries = c.n;
        ans.entries = e;
        for (size_t i = 0; i < c.n; i++) {
            e[i].error = (int)(i % 2) * STORE_BAD_CURSOR;
            e[i].has_next = i % 2 == 0;
        }
        buf_init(&out, BUF_UNLIMITED);
        if (api_changed_render(&c, &ans, &out, &err) == 0) {
            check_json(&out);
        }
        buf_free(&out);
        free(e);
    }
    api_changed_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data + 1;

    if (size == 0) {
        return 0;
    }
    switch (data[0] % 3) {
    case 0:
        fuzz_push(body, size - 1);
        break;
    case 1:
        fuzz_fetch(body, size - 1);
        break;
    default:
        fuzz_changed(body, size - 1);
        break;
    }
    return 0;
}
