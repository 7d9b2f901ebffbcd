/* Fuzz target: the KV request parser (POST /api/v1/kv bodies and the
 * single-key PUT/DELETE bodies) and the CMD_KV body codec. Any bytes must
 * parse or be refused with a reason and no crash; a batch that parses and
 * validates must encode to a CMD_KV body that decodes back to the same ops,
 * and any CMD_KV body bytes must decode or be refused; a write into the
 * sink's namespace is refused 403 with its reason. The first byte picks the
 * mode. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/kv.h"
#include "base/buf.h"
#include "store/kv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same_slice(struct slice a, struct slice b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void round_trip(const struct kv_op *ops, size_t n)
{
    struct buf b;
    struct kv_cmd c;
    struct err err = {0};

    buf_init(&b, BUF_UNLIMITED);
    if (kv_cmd_encode(&b, ops, n, &err) != 0 ||
        kv_cmd_decode((struct slice){b.data, b.len}, &c, &err) != 0 ||
        c.n != n) {
        abort();
    }
    for (size_t i = 0; i < n; i++) {
        if (c.ops[i].op != ops[i].op || !same_slice(c.ops[i].ns, ops[i].ns) ||
            !same_slice(c.ops[i].key, ops[i].key) ||
            !same_slice(c.ops[i].value, ops[i].value) ||
            c.ops[i].n_keys != ops[i].n_keys ||
            c.ops[i].expect != ops[i].expect ||
            c.ops[i].required != ops[i].required) {
            abort();
        }
    }
    kv_cmd_free(&c);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct api_kv k;
    struct kv_cmd c;
    struct err err = {0};
    char reason[40];
    int mode;

    if (size == 0) {
        return 0;
    }
    mode = data[0] % 4;
    if (mode == 3) {
        kv_cmd_decode((struct slice){(const char *)data + 1, size - 1}, &c,
                      &err);
        kv_cmd_free(&c);
        return 0;
    }
    if (api_kv_parse(&k, mode, (struct slice){(const char *)data + 1, size - 1},
                     (struct slice){"ns", 2}, (struct slice){"key", 3},
                     &err) == 0) {
        if (kv_validate(k.ops, k.n, true, reason, &err) == 0) {
            round_trip(k.ops, k.n);
            if (api_kv_check_reserved(k.ops, k.n, false, reason, &err) != 0 &&
                (err.code != ERR_FORBIDDEN ||
                 strcmp(reason, "kv_reserved_namespace") != 0)) {
                abort(); /* a reserved namespace: 403 with its reason */
            }
        } else if (reason[0] == '\0') {
            abort(); /* every refusal names its reason */
        }
    } else if (k.reason[0] == '\0') {
        abort();
    }
    api_kv_free(&k);
    return 0;
}
