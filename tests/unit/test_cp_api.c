/* Unit tests of the control plane's pure pieces: the data plane's gate
 * (api/tenant.h (4), (5)), the token check (api/cp.h (1)) and the settings
 * object a PUT .../s3 stores (api/cp.h cp_s3_config_doc). */
#include "harness.h"

#include "api/cp.h"
#include "api/tenant.h"
#include "base/json.h"
#include "base/sha256.h"
#include "store/store.h"

static const uint8_t T[16] = {0x01, 0x90, 0xaa, 0, 0, 0, 0x70, 0,
                              0x80, 0,    0,    0, 0, 0, 0,    7};

TEST(the_gate_refuses_by_status_and_kind)
{
    const char *code = NULL;
    struct err err = {0};

    EXPECT_EQ_I64(
        api_tenant_gate_check(T, CP_ACTIVE, API_GATE_PUSH, &code, &err), 0);
    EXPECT_EQ_I64(
        api_tenant_gate_check(T, CP_PUSH_BLOCKED, API_GATE_READ, &code, &err),
        0);
    EXPECT_EQ_I64(
        api_tenant_gate_check(T, CP_PUSH_BLOCKED, API_GATE_PUSH, &code, &err),
        ERR_FORBIDDEN);
    EXPECT_STR_EQ(code, "tenant_push_blocked");
    EXPECT(strstr(err.msg, "push_blocked") != NULL);
    EXPECT(strstr(err.msg, "0190aa00-0000-7000-8000-000000000007") != NULL);
    code = NULL;
    EXPECT_EQ_I64(
        api_tenant_gate_check(T, CP_SUSPENDED, API_GATE_READ, &code, &err),
        ERR_FORBIDDEN);
    EXPECT_STR_EQ(code, "tenant_suspended");
    EXPECT(strstr(err.msg, "suspended") != NULL);
    code = NULL;
    EXPECT_EQ_I64(
        api_tenant_gate_check(T, CP_SUSPENDED, API_GATE_PUSH, &code, &err),
        ERR_FORBIDDEN);
    EXPECT_STR_EQ(code, "tenant_suspended");
}

TEST(no_call_acts_for_the_proxy_tenant_whatever_its_status)
{
    const char *code = NULL;
    struct err err = {0};

    EXPECT_EQ_I64(api_tenant_gate_check(CP_PROXY_TENANT, CP_ACTIVE,
                                        API_GATE_READ, &code, &err),
                  ERR_FORBIDDEN);
    EXPECT_STR_EQ(code, "control_plane_tenant");
    EXPECT_EQ_I64(api_tenant_gate_check(STORE_DEFAULT_TENANT, CP_ACTIVE,
                                        API_GATE_PUSH, &code, &err),
                  0);
}

TEST(the_token_matches_only_itself)
{
    struct cp_api c;
    const char *tok = "cp-token-0123456789";

    memset(&c, 0, sizeof(c));
    EXPECT(!cp_token_ok(&c, tok)); /* no token: nothing matches */
    EXPECT(!cp_token_ok(&c, ""));
    c.has_token = true;
    sha256(tok, strlen(tok), c.token_digest);
    EXPECT(cp_token_ok(&c, tok));
    EXPECT(!cp_token_ok(&c, NULL));
    EXPECT(!cp_token_ok(&c, ""));
    EXPECT(!cp_token_ok(&c, "cp-token-012345678"));
    EXPECT(!cp_token_ok(&c, "cp-token-01234567890"));
    EXPECT(!cp_token_ok(&c, "CP-token-0123456789"));
}

static void config_of(const char *body, const char *want)
{
    struct json_doc d = {0};
    struct buf out;
    struct err err = {0};

    buf_init(&out, BUF_UNLIMITED);
    EXPECT_EQ_I64(json_parse(&d, body, strlen(body), NULL, &err), 0);
    EXPECT_EQ_I64(cp_s3_config_doc(&d, &out, &err), 0);
    EXPECT_STR_EQ(out.data, want);
    json_doc_free(&d);
    buf_free(&out);
}

TEST(the_stored_settings_drop_the_secret_and_enabled_and_blanks)
{
    config_of("{\"secretKey\":\"s3cr3t\",\"bucket\":\"b\",\"enabled\":false}",
              "{\"bucket\":\"b\"}");
    config_of("{ \"queues\" : [ \"a\" , \"b c\" ] ,\n\t\"prefix\": \"x y\" }",
              "{\"queues\":[\"a\",\"b c\"],\"prefix\":\"x y\"}");
    /* Escaped quotes and backslashes keep the string open or closed as
     * they should. */
    config_of("{\"prefix\": \"a\\\" b\\\\\", \"sse\" : \"c d\"}",
              "{\"prefix\":\"a\\\" b\\\\\",\"sse\":\"c d\"}");
    config_of("{\"secretKey\":\"x\"}", "{}");
    config_of("{}", "{}");
}
