/* broker/envcheck: unknown and unsupported QUEEN_* variables are named at
 * boot, never ignored in silence (issue 14, issue 19 item 5). */
#include <string.h>

#include "broker/envcheck.h"
#include "harness.h"

struct seen {
    char msgs[8][512];
    int n;
};

static void collect(void *ctx, const char *msg)
{
    struct seen *s = ctx;

    if (s->n < 8) {
        snprintf(s->msgs[s->n], sizeof(s->msgs[0]), "%s", msg);
    }
    s->n++;
}

TEST(known_and_foreign_variables_pass_in_silence)
{
    const char *env[] = {"PATH=/bin",
                         "QUEEN_PORT=1",
                         "QUEEN_S3_EMBEDDED=true",
                         "QUEEN_S3_SECRET_KEY=s3cr3t",
                         "QUEENX=1",
                         "HOME=/",
                         NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(env, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 0);
}

TEST(a_typo_is_named_with_the_setting_it_misses)
{
    const char *env[] = {"QUEEN_S3_EMBEDED=true", "QUEEN_S3_FORMATT=parquet",
                         "QUEEN_LOGLEVEL=debug", NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(env, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 3);
    EXPECT_STR_EQ(s.msgs[0],
                  "QUEEN_S3_EMBEDED: unknown; did you mean QUEEN_S3_EMBEDDED?");
    EXPECT(strstr(s.msgs[1], "did you mean QUEEN_S3_FORMAT?") != NULL);
    EXPECT(strstr(s.msgs[2], "did you mean QUEEN_LOG_LEVEL?") != NULL);
    EXPECT(strstr(s.msgs[1], "parquet") == NULL); /* never the value */
}

TEST(a_name_that_differs_in_its_last_word_alone_is_named_with_the_setting)
{
    /* a unit left off, a word too many, another unit: each more than two
     * edits from the setting it misses */
    const char *env[] = {"QUEEN_RAFT_LOG_MEMORY=512", "QUEEN_PORT_NUMBER=1",
                         "QUEEN_S3_SAFE_GUARD_SECONDS=2", "QUEEN_S3_CA=x",
                         NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(env, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 4);
    EXPECT_STR_EQ(s.msgs[0], "QUEEN_RAFT_LOG_MEMORY: unknown; did you mean "
                             "QUEEN_RAFT_LOG_MEMORY_MB?");
    EXPECT(strstr(s.msgs[1], "did you mean QUEEN_PORT?") != NULL);
    EXPECT(strstr(s.msgs[2], "did you mean QUEEN_S3_SAFE_GUARD_MS?") != NULL);
    EXPECT(strstr(s.msgs[3], "did you mean QUEEN_S3_CA_FILE?") != NULL);
}

TEST(a_last_word_shared_by_several_settings_gets_no_guess)
{
    /* QUEEN_S3_FOO shares "QUEEN_S3" with every sink setting, and
     * QUEEN_MAX_LONG_POLLS_PER is both QUEEN_MAX_LONG_POLLS and a word of
     * QUEEN_MAX_LONG_POLLS_PER_CONN: a guess would be a coin toss */
    const char *env[] = {"QUEEN_S3_FOOBARBAZ=1", "QUEEN_MAX_LONG_POLLS_PER=1",
                         NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(env, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 2);
    EXPECT(strstr(s.msgs[0], "did you mean") == NULL);
    EXPECT(strstr(s.msgs[1], "did you mean") == NULL);
}

TEST(an_unknown_name_far_from_every_setting_is_named_without_a_guess)
{
    const char *env[] = {"QUEEN_SOMETHING_ELSE_ENTIRELY=1", NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(env, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 1);
    EXPECT(strncmp(s.msgs[0], "QUEEN_SOMETHING_ELSE_ENTIRELY: unknown (", 40) ==
           0);
    EXPECT(strstr(s.msgs[0], "did you mean") == NULL);
}

TEST(the_encryption_key_and_the_cluster_settings_are_read)
{
    const char *key[] = {"QUEEN_ENCRYPTION_KEY=00112233", NULL};
    const char *peers[] = {"QUEEN_RAFT_PEERS=1=127.0.0.1:1/127.0.0.1:2",
                           "QUEEN_RAFT_TOKEN=0123456789abcdef", NULL};
    struct seen s = {0};
    struct err err;

    /* broker/config.c reads the key and warns when it is malformed. */
    EXPECT_EQ_I64(envcheck_run(key, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 0);
    EXPECT(envcheck_is_known("QUEEN_ENCRYPTION_KEY", 20));
    /* The cluster settings are read now (broker/config.c checks them). */
    EXPECT_EQ_I64(envcheck_run(peers, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 0);
}

TEST(other_settings_of_the_product_not_built_here_warn)
{
    const char *env[] = {"QUEEN_RAFT_REPLICATOR=true",
                         "QUEEN_KV_MAX_VALUE_BYTES=t0k", NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(env, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 2);
    EXPECT(strstr(s.msgs[0], "QUEEN_RAFT_REPLICATOR: not supported by this "
                             "build, ignored") != NULL);
    EXPECT(strstr(s.msgs[1], "t0k") == NULL);
}

TEST(the_control_plane_settings_are_read_now)
{
    const char *env[] = {"QUEEN_PROXY_EMBEDDED=true",
                         "QUEEN_PROXY_CP_TOKEN=t0k",
                         "QUEEN_PROXY_PORT=6711",
                         "QUEEN_PROXY_TENANT_HEADER=true",
                         "QUEEN_PROXY_SPOOL_DIR=/tmp/spool",
                         "QUEEN_KV_TRUSTED_PROXY=1",
                         NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(env, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 0);
}

TEST(every_known_name_is_known_and_prefixes_are_not)
{
    EXPECT(envcheck_is_known("QUEEN_S3_THREADS", 16));
    EXPECT(!envcheck_is_known("QUEEN_S3_THREAD", 15));
    EXPECT(!envcheck_is_known("QUEEN_S3_THREADSX", 17));
}

TEST(the_sink_settings_while_the_sink_is_off_get_one_warning)
{
    const char *env[] = {"QUEEN_S3_BUCKET=lake", "QUEEN_PORT=1",
                         "QUEEN_S3_QUEUES=orders", "QUEEN_S3_EMBEDDED=false",
                         NULL};
    const char *none[] = {"QUEEN_S3_EMBEDDED=false", NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(env, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 1);
    EXPECT_STR_EQ(s.msgs[0], "QUEEN_S3_EMBEDDED is not true: the S3 sink is "
                             "off and ignores QUEEN_S3_BUCKET, "
                             "QUEEN_S3_QUEUES");
    s.n = 0;
    EXPECT_EQ_I64(envcheck_run(none, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 0);
}

TEST(strict_config_refuses_what_would_only_warn)
{
    const char *typo[] = {"QUEEN_STRICT_CONFIG=true", "QUEEN_S3_EMBEDED=1",
                          NULL};
    const char *off[] = {"QUEEN_S3_BUCKET=lake", "QUEEN_STRICT_CONFIG=on",
                         NULL};
    const char *clean[] = {"QUEEN_STRICT_CONFIG=true", "QUEEN_PORT=1", NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(typo, collect, &s, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_S3_EMBEDED: unknown; did you mean "
                           "QUEEN_S3_EMBEDDED? (QUEEN_STRICT_CONFIG=true)");
    EXPECT_EQ_I64(envcheck_run(off, collect, &s, &err), ERR_INVALID);
    EXPECT(strstr(err.msg, "ignores QUEEN_S3_BUCKET") != NULL);
    EXPECT_EQ_I64(envcheck_run(clean, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 0);
}

/* QUEEN_STRICT_CONFIG and QUEEN_TEST_MODE are booleans like the broker's
 * others: a value that is none is refused, not read as false (strict mode
 * would be off without a word); blank is unset. */
TEST(strict_config_and_test_mode_refuse_what_is_not_a_boolean)
{
    const char *maybe[] = {"QUEEN_STRICT_CONFIG=maybe", "QUEEN_S3_EMBEDED=1",
                           NULL};
    const char *tru[] = {"QUEEN_TEST_MODE=tru", NULL};
    const char *blank[] = {"QUEEN_STRICT_CONFIG= ", "QUEEN_TEST_MODE=", NULL};
    const char *yes[] = {"QUEEN_STRICT_CONFIG=Yes", "QUEEN_S3_EMBEDED=1", NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(maybe, collect, &s, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_STRICT_CONFIG=maybe: not a boolean (true "
                           "or false; also 1/0, yes/no, on/off)");
    EXPECT_EQ_I64(envcheck_run(tru, collect, &s, &err), ERR_INVALID);
    EXPECT_STR_EQ(err.msg, "QUEEN_TEST_MODE=tru: not a boolean (true or "
                           "false; also 1/0, yes/no, on/off)");
    EXPECT_EQ_I64(envcheck_run(blank, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 0);
    EXPECT_EQ_I64(envcheck_run(yes, collect, &s, &err), ERR_INVALID);
    EXPECT(strstr(err.msg, "(QUEEN_STRICT_CONFIG=true)") != NULL);
}

TEST(a_known_name_in_another_case_is_named_and_other_lowercase_passes)
{
    /* queen_auth_tokens is not read: authentication would stay off. */
    const char *env[] = {"queen_auth_tokens=/etc/q/tokens", "Queen_Port=1",
                         "queen_home=/opt/queen", "QUEEN_PORT=1", NULL};
    const char *strict[] = {"QUEEN_STRICT_CONFIG=true",
                            "queen_auth_tokens=/etc/q/tokens", NULL};
    struct seen s = {0};
    struct err err;

    EXPECT_EQ_I64(envcheck_run(env, collect, &s, &err), 0);
    EXPECT_EQ_I64(s.n, 2);
    EXPECT_STR_EQ(s.msgs[0], "queen_auth_tokens: unknown; names are upper "
                             "case: did you mean QUEEN_AUTH_TOKENS?");
    EXPECT_STR_EQ(s.msgs[1], "Queen_Port: unknown; names are upper case: did "
                             "you mean QUEEN_PORT?");
    EXPECT(strstr(s.msgs[0], "/etc/q") == NULL); /* never the value */
    EXPECT_EQ_I64(envcheck_run(strict, collect, &s, &err), ERR_INVALID);
    EXPECT(strstr(err.msg, "did you mean QUEEN_AUTH_TOKENS?") != NULL);
}
