/* Fuzz target for base/aead's reading side: arbitrary bytes must never
 * crash or leak; aead_open succeeds only on what aead_is_envelope accepts,
 * aead_open_raw refuses as invalid exactly what is shorter than iv and tag,
 * under a fixed key they almost never verify, and on failure leave the
 * output as it was. The input is also sealed in both forms and opened
 * again, and the binary form's envelope opens too, so the round trips are
 * exercised on every length. */
#include <stdlib.h>
#include <string.h>

#include "base/aead.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t key[AEAD_KEY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct buf out;
    struct buf env;
    struct buf raw;
    struct err err;
    bool is_env = aead_is_envelope(data, size);
    int rc;

    buf_init(&out, BUF_UNLIMITED);
    ASSERT(buf_append(&out, "x", 1, &err) == 0);
    rc = aead_open(key, data, size, &out, &err);
    ASSERT(rc == 0 || rc == ERR_INVALID || rc == ERR_FORBIDDEN);
    ASSERT(rc == ERR_INVALID || is_env);
    if (rc != 0) {
        ASSERT(out.len == 1 && out.data[0] == 'x' && out.data[1] == '\0');
    }
    rc = aead_open_raw(key, data, size, &out, &err);
    ASSERT(rc == 0 || rc == ERR_INVALID || rc == ERR_FORBIDDEN);
    ASSERT((rc == ERR_INVALID) == (size < AEAD_SEALED_OVERHEAD));
    if (rc != 0) {
        ASSERT(out.len == 1 && out.data[0] == 'x' && out.data[1] == '\0');
    }
    buf_init(&raw, BUF_UNLIMITED);
    ASSERT(aead_seal_raw(key, data, size, &raw, &err) == 0);
    ASSERT(raw.len == size + AEAD_SEALED_OVERHEAD);
    buf_reset(&out);
    ASSERT(aead_open_raw(key, (const uint8_t *)raw.data, raw.len, &out, &err) ==
           0);
    ASSERT(out.len == size && (size == 0 || memcmp(out.data, data, size) == 0));
    buf_init(&env, BUF_UNLIMITED);
    ASSERT(aead_envelope((const uint8_t *)raw.data, raw.len, &env, &err) == 0);
    buf_reset(&out);
    ASSERT(aead_open(key, (const uint8_t *)env.data, env.len, &out, &err) == 0);
    ASSERT(out.len == size && (size == 0 || memcmp(out.data, data, size) == 0));
    buf_free(&raw);
    buf_reset(&env);
    ASSERT(aead_seal(key, data, size, &env, &err) == 0);
    ASSERT(aead_is_envelope((const uint8_t *)env.data, env.len));
    buf_reset(&out);
    ASSERT(aead_open(key, (const uint8_t *)env.data, env.len, &out, &err) == 0);
    ASSERT(out.len == size && (size == 0 || memcmp(out.data, data, size) == 0));
    buf_free(&env);
    buf_free(&out);
    return 0;
}
