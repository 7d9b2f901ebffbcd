/* Unit tests for src/broker/config: defaults, each setting's parser, the
 * "<VAR>=<value>: why" refusal, and the derived raft address. */
#include "base/env.h"
#include "broker/config.h"

#include "base/log.h"
#include "harness.h"

struct fake_env {
    const char *names[16];
    const char *values[16];
    int n;
};

static const char *fake_get(void *ctx, const char *name)
{
    struct fake_env *e = ctx;

    for (int i = 0; i < e->n; i++) {
        if (strcmp(e->names[i], name) == 0) {
            return e->values[i];
        }
    }
    return NULL;
}

static void env_set(struct fake_env *e, const char *name, const char *value)
{
    e->names[e->n] = name;
    e->values[e->n] = value;
    e->n++;
}

/* Load with one variable set; returns the code, err filled. */
static int load_one(const char *name, const char *value, struct config *c,
                    struct err *err)
{
    struct fake_env e = {.n = 0};

    env_set(&e, name, value);
    return config_load(c, fake_get, &e, err);
}

TEST(empty_environment_gives_the_documented_defaults)
{
    struct fake_env e = {.n = 0};
    struct config c;
    struct err err;

    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT_EQ_I64(c.port, 6632);
    EXPECT_STR_EQ(c.bind_addr, "0.0.0.0");
    EXPECT_STR_EQ(c.raft_dir, "./queen-data");
    EXPECT_EQ_U64(c.node_id, 1);
    EXPECT_STR_EQ(c.raft_listen, "127.0.0.1:7632");
    EXPECT_EQ_U64(c.max_body_bytes, 64 * 1024 * 1024);
    EXPECT_EQ_U64(c.max_held_body_bytes, 64 * 1024 * 1024);
    EXPECT_EQ_I64(c.log_level, LOG_INFO);
    EXPECT(!c.tenancy_header);
    EXPECT_EQ_U64(c.max_long_polls, 10000);
    EXPECT_EQ_U64(c.max_long_polls_per_conn, 16);
    EXPECT_EQ_U64(c.raft_segment_mb, 64);
    EXPECT_EQ_U64(c.raft_log_memory_mb, 448);
    EXPECT_EQ_U64(c.raft_election_timeout_ms, 1000);
}

TEST(set_values_replace_defaults_and_raft_port_follows_http_port)
{
    struct fake_env e = {.n = 0};
    struct config c;
    struct err err;

    env_set(&e, "QUEEN_PORT", "7000");
    env_set(&e, "QUEEN_BIND_ADDR", "::1");
    env_set(&e, "QUEEN_RAFT_DIR", "/tmp/q");
    env_set(&e, "QUEEN_RAFT_NODE_ID", "3");
    env_set(&e, "QUEEN_MAX_BODY_BYTES", "2MiB");
    env_set(&e, "QUEEN_MAX_HELD_BODY_BYTES", "256M");
    env_set(&e, "QUEEN_LOG_LEVEL", "debug");
    env_set(&e, "QUEEN_MAX_LONG_POLLS", "500");
    env_set(&e, "QUEEN_MAX_LONG_POLLS_PER_CONN", "4");
    env_set(&e, "QUEEN_RAFT_SEGMENT_MB", "8");
    env_set(&e, "QUEEN_RAFT_LOG_MEMORY_MB", "64");
    env_set(&e, "QUEEN_RAFT_ELECTION_TIMEOUT_MS", "2500");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT_EQ_U64(c.raft_election_timeout_ms, 2500);
    EXPECT_EQ_U64(c.raft_segment_mb, 8);
    EXPECT_EQ_U64(c.raft_log_memory_mb, 64);
    EXPECT_EQ_U64(c.max_long_polls, 500);
    EXPECT_EQ_U64(c.max_long_polls_per_conn, 4);
    EXPECT_EQ_I64(c.port, 7000);
    EXPECT_STR_EQ(c.bind_addr, "::1");
    EXPECT_STR_EQ(c.raft_dir, "/tmp/q");
    EXPECT_EQ_U64(c.node_id, 3);
    EXPECT_STR_EQ(c.raft_listen, "127.0.0.1:8000");
    EXPECT_EQ_U64(c.max_body_bytes, 2 * 1024 * 1024);
    EXPECT_EQ_U64(c.max_held_body_bytes, (uint64_t)256 << 20);
    EXPECT_EQ_I64(c.log_level, LOG_DEBUG);
}

/* QUEEN_TEST_HOLD_LOOP_MS holds the loop at every SIGUSR2: refused
 * without QUEEN_TEST_MODE=true, taken with it, 0 by default. */
TEST(the_loop_hold_of_the_tests_needs_test_mode)
{
    struct fake_env e = {.n = 0};
    struct config c;
    struct err err;

    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT_EQ_U64(c.test_hold_loop_ms, 0);
    env_set(&e, "QUEEN_TEST_HOLD_LOOP_MS", "1500");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), ERR_INVALID);
    EXPECT(strstr(err.msg, "needs QUEEN_TEST_MODE=true") != NULL);
    env_set(&e, "QUEEN_TEST_MODE", "true");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT_EQ_U64(c.test_hold_loop_ms, 1500);
    e.values[0] = "60001"; /* the hold, set first */
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), ERR_INVALID);
    EXPECT(strstr(err.msg, "out of range 0..60000") != NULL);
}

TEST(explicit_raft_listen_is_kept)
{
    struct config c;
    struct err err;

    EXPECT_EQ_I64(load_one("QUEEN_RAFT_LISTEN", "[::1]:9001", &c, &err), 0);
    EXPECT_STR_EQ(c.raft_listen, "[::1]:9001");
}

TEST(bad_values_name_the_variable_and_the_value)
{
    static const struct {
        const char *name;
        const char *value;
        const char *msg;
    } cases[] = {
        {"QUEEN_PORT", "abc", "QUEEN_PORT=abc: not a decimal integer"},
        {"QUEEN_PORT", "0", "QUEEN_PORT=0: out of range 1..65535"},
        {"QUEEN_PORT", "65536", "QUEEN_PORT=65536: out of range 1..65535"},
        {"QUEEN_PORT", "-1", "QUEEN_PORT=-1: not a decimal integer"},
        {"QUEEN_PORT", "", "QUEEN_PORT=: not a decimal integer"},
        {"QUEEN_PORT", " 80", "QUEEN_PORT= 80: not a decimal integer"},
        {"QUEEN_BIND_ADDR", "localhost",
         "QUEEN_BIND_ADDR=localhost: not an IPv4 or IPv6 address literal"},
        {"QUEEN_RAFT_NODE_ID", "0",
         "QUEEN_RAFT_NODE_ID=0: out of range 1..18446744073709551615"},
        {"QUEEN_RAFT_NODE_ID", "99999999999999999999",
         "QUEEN_RAFT_NODE_ID=99999999999999999999: not a decimal integer"},
        {"QUEEN_RAFT_LISTEN", "127.0.0.1",
         "QUEEN_RAFT_LISTEN=127.0.0.1: not ip:port (an IP literal, "
         "[ipv6]:port, port 1..65535)"},
        {"QUEEN_RAFT_LISTEN", "::1:80",
         "QUEEN_RAFT_LISTEN=::1:80: not ip:port (an IP literal, "
         "[ipv6]:port, port 1..65535)"},
        {"QUEEN_MAX_BODY_BYTES", "12XB",
         "QUEEN_MAX_BODY_BYTES=12XB: not a byte size (digits, then "
         "optionally K, M or G, each times 1024, as KB or KiB too)"},
        {"QUEEN_MAX_BODY_BYTES", "10",
         "QUEEN_MAX_BODY_BYTES=10: out of range 1024..1073741824"},
        {"QUEEN_MAX_HELD_BODY_BYTES", "64K",
         "QUEEN_MAX_HELD_BODY_BYTES=64K: out of range "
         "1048576..68719476736"},
        {"QUEEN_RAFT_DIR", "", "QUEEN_RAFT_DIR=: must be 1 to 4095 bytes long"},
        {"QUEEN_RAFT_ELECTION_TIMEOUT_MS", "499",
         "QUEEN_RAFT_ELECTION_TIMEOUT_MS=499: out of range 500..10000"},
        {"QUEEN_RAFT_ELECTION_TIMEOUT_MS", "10001",
         "QUEEN_RAFT_ELECTION_TIMEOUT_MS=10001: out of range 500..10000"},
        {"QUEEN_MAX_LONG_POLLS", "0",
         "QUEEN_MAX_LONG_POLLS=0: out of range 1..1000000"},
        {"QUEEN_MAX_LONG_POLLS_PER_CONN", "257",
         "QUEEN_MAX_LONG_POLLS_PER_CONN=257: out of range 1..256"},
        {"QUEEN_RAFT_SEGMENT_MB", "0",
         "QUEEN_RAFT_SEGMENT_MB=0: out of range 1..1024"},
        {"QUEEN_RAFT_SEGMENT_MB", "1025",
         "QUEEN_RAFT_SEGMENT_MB=1025: out of range 1..1024"},
        {"QUEEN_RAFT_SEGMENT_MB", "8MiB",
         "QUEEN_RAFT_SEGMENT_MB=8MiB: not a decimal integer"},
        {"QUEEN_RAFT_LOG_MEMORY_MB", "8",
         "QUEEN_RAFT_LOG_MEMORY_MB=8: out of range 16..65536"},
        {"QUEEN_LOG_LEVEL", "loud",
         "QUEEN_LOG_LEVEL=loud: not one of error, warn, info, debug"},
        {"QUEEN_TENANCY_HEADER", "maybe",
         "QUEEN_TENANCY_HEADER=maybe: not a boolean (true or false; also "
         "1/0, yes/no, on/off)"},
        {"QUEEN_TENANCY_HEADER", "",
         "QUEEN_TENANCY_HEADER=: not a boolean (true or false; also 1/0, "
         "yes/no, on/off)"},
        {"QUEEN_TENANCY_HEADER", "truee",
         "QUEEN_TENANCY_HEADER=truee: not a boolean (true or false; also "
         "1/0, yes/no, on/off)"},
    };

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct config c;
        struct err err;

        c.port = 4242;
        EXPECT_EQ_I64(load_one(cases[i].name, cases[i].value, &c, &err),
                      ERR_INVALID);
        EXPECT_STR_EQ(err.msg, cases[i].msg);
        EXPECT_EQ_I64(c.port, 4242); /* (2) nothing changed */
    }
}

TEST(tenancy_header_reads_every_boolean_spelling)
{
    static const struct {
        const char *value;
        bool want;
    } cases[] = {{"true", true}, {"TRUE", true}, {"1", true},
                 {"yes", true},  {"On", true},   {"false", false},
                 {"0", false},   {"no", false},  {"OFF", false}};

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct config c;
        struct err err;

        c.tenancy_header = !cases[i].want;
        EXPECT_EQ_I64(
            load_one("QUEEN_TENANCY_HEADER", cases[i].value, &c, &err), 0);
        EXPECT(c.tenancy_header == cases[i].want);
    }
}

TEST(control_plane_settings_default_parse_and_refuse)
{
    struct fake_env e = {.n = 0};
    struct config c;
    struct err err;

    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT(!c.proxy_embedded);
    EXPECT_EQ_I64(c.proxy_port, 6711);
    EXPECT_STR_EQ(c.cp_token, "");
    EXPECT(c.proxy_tenant_header);
    EXPECT_STR_EQ(c.proxy_spool_dir, "");
    EXPECT(!c.kv_trusted_proxy);

    env_set(&e, "QUEEN_PROXY_EMBEDDED", "true");
    env_set(&e, "QUEEN_PROXY_PORT", "7711");
    env_set(&e, "QUEEN_PROXY_CP_TOKEN", "cp-secret-token-0123");
    env_set(&e, "QUEEN_PROXY_TENANT_HEADER", "off");
    env_set(&e, "QUEEN_KV_TRUSTED_PROXY", "1");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT(c.proxy_embedded);
    EXPECT_EQ_I64(c.proxy_port, 7711);
    EXPECT_STR_EQ(c.cp_token, "cp-secret-token-0123");
    EXPECT(!c.proxy_tenant_header);
    EXPECT(c.kv_trusted_proxy);

    EXPECT_EQ_I64(load_one("QUEEN_PROXY_EMBEDDED", "maybe", &c, &err),
                  ERR_INVALID);
    EXPECT(strstr(err.msg, "QUEEN_PROXY_EMBEDDED=maybe: not a boolean") ==
           err.msg);
    EXPECT_EQ_I64(load_one("QUEEN_PROXY_PORT", "0", &c, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_PROXY_PORT=0: out of range 1..65535");
    /* A token over the cap is refused without being echoed. */
    {
        char big[CONFIG_TOKEN_MAX + 8];

        memset(big, 'k', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        EXPECT_EQ_I64(load_one("QUEEN_PROXY_CP_TOKEN", big, &c, &err),
                      ERR_INVALID);
        EXPECT(strstr(err.msg, "QUEEN_PROXY_CP_TOKEN=<redacted>") == err.msg);
        EXPECT(strstr(err.msg, "kkkk") == NULL);
    }
    /* As short as a password guessed in a day: refused, not echoed. */
    EXPECT_EQ_I64(load_one("QUEEN_PROXY_CP_TOKEN", "abc123", &c, &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_PROXY_CP_TOKEN=<redacted>: shorter than 16 "
                           "bytes (it guards every tenant's buckets and keys)");
    /* A token no client can send whole in a header: refused, not echoed
     * (blanks alone, a newline, a byte past ASCII). */
    static const char *const unsendable[] = {
        "                ", "abcdefghijklmnop\nq", "abcdefgh ijklmnop",
        "abcdefghijklmnop\xc3\xa9"};
    for (size_t i = 0; i < ARRAY_LEN(unsendable); i++) {
        EXPECT_EQ_I64(load_one("QUEEN_PROXY_CP_TOKEN", unsendable[i], &c, &err),
                      ERR_INVALID);
        EXPECT(strstr(err.msg, "QUEEN_PROXY_CP_TOKEN=<redacted>: byte ") ==
               err.msg);
        EXPECT(strstr(err.msg, "abcdefgh") == NULL);
    }
    EXPECT_EQ_I64(
        load_one("QUEEN_PROXY_CP_TOKEN", "!~visible-ASCII-0123", &c, &err), 0);
    /* The control plane cannot share the broker's port. */
    e.n = 0;
    env_set(&e, "QUEEN_PROXY_EMBEDDED", "true");
    env_set(&e, "QUEEN_PROXY_PORT", "6632");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), ERR_INVALID);
    EXPECT(strstr(err.msg, "QUEEN_PROXY_PORT=6632: it is QUEEN_PORT too") ==
           err.msg);
}

TEST(http_port_too_high_for_the_derived_raft_port_is_refused)
{
    struct config c;
    struct err err;

    EXPECT_EQ_I64(load_one("QUEEN_PORT", "65000", &c, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_PORT=65000: the default raft port 66000 is "
                           "above 65535; set QUEEN_RAFT_LISTEN");
}

TEST(sizes_parse_with_binary_suffixes)
{
    uint64_t v = 0;

    EXPECT(config_parse_size("1024", &v));
    EXPECT_EQ_U64(v, 1024);
    EXPECT(config_parse_size("4k", &v));
    EXPECT_EQ_U64(v, 4096);
    EXPECT(config_parse_size("64MiB", &v));
    EXPECT_EQ_U64(v, 64u << 20);
    EXPECT(config_parse_size("1GB", &v));
    EXPECT_EQ_U64(v, 1u << 30);
    EXPECT(!config_parse_size("", &v));
    EXPECT(!config_parse_size("MiB", &v));
    EXPECT(!config_parse_size("1.5MiB", &v));
    EXPECT(!config_parse_size("99999999999999999999GiB", &v));
    EXPECT(!config_parse_size("18014398509481984GiB", &v));
}

TEST(hostport_accepts_ip_literals_only)
{
    char host[64];
    int port = 0;

    EXPECT(env_parse_hostport("10.0.0.1:7001", host, sizeof(host), &port));
    EXPECT_STR_EQ(host, "10.0.0.1");
    EXPECT_EQ_I64(port, 7001);
    EXPECT(env_parse_hostport("[::1]:80", host, sizeof(host), &port));
    EXPECT_STR_EQ(host, "::1");
    EXPECT(!env_parse_hostport("example.com:80", host, sizeof(host), &port));
    EXPECT(!env_parse_hostport("1.2.3.4:0", host, sizeof(host), &port));
    EXPECT(!env_parse_hostport("1.2.3.4:", host, sizeof(host), &port));
    EXPECT(!env_parse_hostport("[::1]80", host, sizeof(host), &port));
    EXPECT(!env_parse_hostport(":80", host, sizeof(host), &port));
}

TEST(tls_cert_and_key_go_together_and_set_but_empty_is_refused)
{
    struct fake_env e = {.n = 0};
    struct config c;
    struct err err;

    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT_STR_EQ(c.tls_cert, "");
    EXPECT_STR_EQ(c.tls_key, "");
    EXPECT_STR_EQ(c.auth_tokens, "");
    EXPECT_EQ_I64(load_one("QUEEN_TLS_CERT", "/etc/q/cert.pem", &c, &err),
                  ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_TLS_CERT=/etc/q/cert.pem: QUEEN_TLS_CERT "
                           "and QUEEN_TLS_KEY go together; set QUEEN_TLS_KEY "
                           "too, or neither");
    EXPECT_EQ_I64(load_one("QUEEN_TLS_KEY", "/etc/q/key.pem", &c, &err),
                  ERR_INVALID);
    EXPECT(strncmp(err.msg, "QUEEN_TLS_KEY=/etc/q/key.pem: ", 30) == 0);
    env_set(&e, "QUEEN_TLS_CERT", "/etc/q/cert.pem");
    env_set(&e, "QUEEN_TLS_KEY", "/etc/q/key.pem");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT_STR_EQ(c.tls_cert, "/etc/q/cert.pem");
    EXPECT_STR_EQ(c.tls_key, "/etc/q/key.pem");
    EXPECT_STR_EQ(c.auth_tokens, "");
    /* Set but empty (an unset shell variable in a unit file) would leave
     * the broker open: refused, not read as unset. */
    EXPECT_EQ_I64(load_one("QUEEN_AUTH_TOKENS", "", &c, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_AUTH_TOKENS=: set but empty; name its "
                           "file, or unset it to run without authentication");
    EXPECT_EQ_I64(load_one("QUEEN_TLS_CERT", "", &c, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_TLS_CERT=: set but empty; name its file, "
                           "or unset it to run without TLS");
    EXPECT_EQ_I64(load_one("QUEEN_TLS_KEY", "", &c, &err), ERR_INVALID);
}

TEST(a_peers_list_is_parsed_and_this_node_found_in_it)
{
    struct fake_env e = {.n = 0};
    struct config c;
    struct err err;

    env_set(&e, "QUEEN_PORT", "6102");
    env_set(&e, "QUEEN_RAFT_NODE_ID", "2");
    env_set(&e, "QUEEN_RAFT_TOKEN", "0123456789abcdef");
    env_set(&e, "QUEEN_RAFT_PEERS",
            " 1=10.0.0.1:7101/10.0.0.1:6101 ,2=10.0.0.2:7102/10.0.0.2:6102,"
            "3=[::1]:7103/[::1]:6103");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT_EQ_U64(c.n_peers, 3);
    EXPECT_EQ_U64(c.peers[0].id, 1);
    EXPECT_STR_EQ(c.peers[0].raft, "10.0.0.1:7101");
    EXPECT_STR_EQ(c.peers[0].http, "10.0.0.1:6101");
    EXPECT_STR_EQ(c.peers[2].raft, "[::1]:7103");
    /* Unset QUEEN_RAFT_LISTEN binds this node's listed raft address. */
    EXPECT_STR_EQ(c.raft_listen, "10.0.0.2:7102");
    EXPECT_STR_EQ(c.raft_advertise, "10.0.0.2:7102");
    EXPECT_STR_EQ(c.raft_token, "0123456789abcdef");
}

TEST(a_wildcard_listen_on_the_listed_port_is_kept_and_advertises_the_list)
{
    struct fake_env e = {.n = 0};
    struct config c;
    struct err err;

    env_set(&e, "QUEEN_PORT", "6101");
    env_set(&e, "QUEEN_RAFT_LISTEN", "0.0.0.0:7101");
    env_set(&e, "QUEEN_RAFT_TOKEN", "0123456789abcdef");
    env_set(&e, "QUEEN_RAFT_PEERS",
            "1=10.0.0.1:7101/10.0.0.1:6101,2=10.0.0.2:7102/10.0.0.2:6102");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT_STR_EQ(c.raft_listen, "0.0.0.0:7101");
    EXPECT_STR_EQ(c.raft_advertise, "10.0.0.1:7101");
}

TEST(a_single_node_advertises_its_listen_address_and_needs_no_token)
{
    struct fake_env e = {.n = 0};
    struct config c;
    struct err err;

    env_set(&e, "QUEEN_PORT", "6101");
    env_set(&e, "QUEEN_RAFT_PEERS", "1=127.0.0.1:7101/127.0.0.1:6101");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), 0);
    EXPECT_EQ_U64(c.n_peers, 1);
    EXPECT_STR_EQ(c.raft_advertise, "127.0.0.1:7101");
    EXPECT_EQ_I64(load_one("QUEEN_PORT", "6101", &c, &err), 0);
    EXPECT_EQ_U64(c.n_peers, 0);
    EXPECT_STR_EQ(c.raft_advertise, c.raft_listen);
}

TEST(bad_peers_lists_are_refused_with_what_is_wrong)
{
    static const struct {
        const char *peers;
        const char *why;
    } cases[] = {
        {"1=127.0.0.1:7101", "entry '1=127.0.0.1:7101' is not {id}="},
        {"1-127.0.0.1:7101/127.0.0.1:6101", "is not {id}="},
        {"x=127.0.0.1:7101/127.0.0.1:6101", "the id must be an integer"},
        {"0=127.0.0.1:7101/127.0.0.1:6101", "the id must be an integer >= 1"},
        {"1=localhost:7101/127.0.0.1:6101", "raft address 'localhost:7101'"},
        {"1=127.0.0.1:7101/127.0.0.1:0", "http address '127.0.0.1:0'"},
        {"1=127.0.0.1:7101/127.0.0.1:6101,", "entry 2 is empty"},
        {"1=127.0.0.1:7101/127.0.0.1:7101", "the same raft and http"},
        {"1=127.0.0.1:7101/127.0.0.1:6101,1=127.0.0.1:7102/127.0.0.1:6102",
         "id 1 is listed twice"},
        {"1=127.0.0.1:7101/127.0.0.1:6101,2=127.0.0.1:6101/127.0.0.1:6102",
         "ids 1 and 2 share an address"},
        {"2=127.0.0.1:7102/127.0.0.1:6102,3=127.0.0.1:7103/127.0.0.1:6103",
         "this node's id 1 (QUEEN_RAFT_NODE_ID) is not in the list"},
        {"1=127.0.0.1:7101/127.0.0.1:6999,2=127.0.0.1:7102/127.0.0.1:6102",
         "QUEEN_PORT=6101: this node's http address"},
    };

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct fake_env e = {.n = 0};
        struct config c;
        struct err err;

        env_set(&e, "QUEEN_PORT", "6101");
        env_set(&e, "QUEEN_RAFT_TOKEN", "0123456789abcdef");
        env_set(&e, "QUEEN_RAFT_PEERS", cases[i].peers);
        EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), ERR_INVALID);
        if (strstr(err.msg, cases[i].why) == NULL) {
            fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err.msg,
                    cases[i].why);
            EXPECT(false);
        }
        EXPECT(strstr(err.msg, "0123456789abcdef") == NULL);
    }
}

TEST(a_cluster_needs_a_token_of_16_bytes_and_it_is_never_echoed)
{
    struct fake_env e = {.n = 0};
    struct config c;
    struct err err;
    const char *two =
        "1=127.0.0.1:7101/127.0.0.1:6101,2=127.0.0.1:7102/127.0.0.1:6102";

    env_set(&e, "QUEEN_PORT", "6101");
    env_set(&e, "QUEEN_RAFT_PEERS", two);
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), ERR_INVALID);
    EXPECT(strstr(err.msg, "QUEEN_RAFT_TOKEN=(unset): a cluster of 2 peers") !=
           NULL);
    env_set(&e, "QUEEN_RAFT_TOKEN", "sekrit-short");
    EXPECT_EQ_I64(config_load(&c, fake_get, &e, &err), ERR_INVALID);
    EXPECT(strstr(err.msg, "shorter than 16 bytes") != NULL);
    EXPECT(strstr(err.msg, "sekrit") == NULL);
}

TEST(more_than_nine_peers_are_refused)
{
    char list[2048] = "";
    struct config_peer out[CONFIG_MAX_PEERS];
    struct err err;

    for (int i = 1; i <= 10; i++) {
        char one[64];

        snprintf(one, sizeof(one), "%s%d=127.0.0.1:%d/127.0.0.1:%d",
                 i > 1 ? "," : "", i, 7100 + i, 6100 + i);
        strcat(list, one);
    }
    EXPECT_EQ_I64(config_parse_peers(list, out, &err), -1);
    EXPECT(strstr(err.msg, "more than 9 peers") != NULL);
    *strrchr(list, ',') = '\0';
    EXPECT_EQ_I64(config_parse_peers(list, out, &err), 9);
}

TEST(snapshot_spacing_is_automatic_or_at_least_64_entries)
{
    struct config c;
    struct err err;

    EXPECT_EQ_I64(load_one("QUEEN_PORT", "6101", &c, &err), 0);
    EXPECT_EQ_U64(c.raft_snapshot_threshold, 0);
    EXPECT_EQ_I64(load_one("QUEEN_RAFT_SNAPSHOT_THRESHOLD", "1024", &c, &err),
                  0);
    EXPECT_EQ_U64(c.raft_snapshot_threshold, 1024);
    EXPECT_EQ_I64(load_one("QUEEN_RAFT_SNAPSHOT_THRESHOLD", "10", &c, &err),
                  ERR_INVALID);
    EXPECT(strstr(err.msg, "QUEEN_RAFT_SNAPSHOT_THRESHOLD=10: 0 (automatic) "
                           "or at least 64") != NULL);
}

/* docs/design/formats.md §11: 64 hex is a key; anything else leaves encryption
 * off and is never a refusal (the boot warns, config_warn_key). */
TEST(the_encryption_key_is_64_hex_or_off_never_refused)
{
    static const char *const bad[] = {
        "00",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f00",
        "zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
    };
    struct config c;
    struct err err;

    EXPECT_EQ_I64(load_one("QUEEN_PORT", "6632", &c, &err), 0);
    EXPECT(!c.enc_key_set && !c.enc_key_bad);
    EXPECT_EQ_I64(load_one("QUEEN_ENCRYPTION_KEY", "", &c, &err), 0);
    EXPECT(!c.enc_key_set && !c.enc_key_bad);
    EXPECT_EQ_I64(
        load_one("QUEEN_ENCRYPTION_KEY",
                 "000102030405060708090A0B0C0D0E0F101112131415161718191a1b1c1d"
                 "1e1f",
                 &c, &err),
        0);
    EXPECT(c.enc_key_set && !c.enc_key_bad);
    EXPECT_EQ_U64(c.enc_key[0], 0);
    EXPECT_EQ_U64(c.enc_key[10], 10);
    EXPECT_EQ_U64(c.enc_key[31], 31);
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        EXPECT_EQ_I64(load_one("QUEEN_ENCRYPTION_KEY", bad[i], &c, &err), 0);
        EXPECT(!c.enc_key_set && c.enc_key_bad);
        EXPECT_EQ_U64(c.enc_key[31], 0);
    }
    /* Trimmed: a key file's newline, a leading space; and a blank value
     * is unset, not malformed. */
    EXPECT_EQ_I64(
        load_one("QUEEN_ENCRYPTION_KEY",
                 " 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d"
                 "1e1f\n",
                 &c, &err),
        0);
    EXPECT(c.enc_key_set && !c.enc_key_bad);
    EXPECT_EQ_U64(c.enc_key[31], 31);
    EXPECT_EQ_I64(load_one("QUEEN_ENCRYPTION_KEY", " \t ", &c, &err), 0);
    EXPECT(!c.enc_key_set && !c.enc_key_bad);
}
