/* api/auth: the QUEEN_AUTH_TOKENS file, the constant-time compare and the
 * Authorization check (issue 19 item 9); api/tenant: a bound token's
 * tenant. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "api/auth.h"
#include "api/tenant.h"
#include "base/sha256.h"
#include "harness.h"

#define TOK_A  "alice-0123456789abcdef"
#define TOK_B  "bob.0123456789_~+/=="
#define TEN_A  "0000000a-0000-4000-8000-00000000000a"
#define TEN_B  "0000000b-0000-4000-8000-00000000000b"
#define HDR_A  "Bearer " TOK_A
#define HDR_B  "Bearer " TOK_B
#define NO_TOK "nobody-0123456789abcdef"

static int parse(struct auth *a, const char *text, struct err *err)
{
    return auth_parse(a, text, strlen(text), err);
}

/* The entry whose token is tok, or NULL. */
static const struct auth_entry *entry_of(const struct auth *a, const char *tok)
{
    uint8_t d[32];

    sha256(tok, strlen(tok), d);
    for (size_t i = 0; i < a->n; i++) {
        if (memcmp(a->entries[i].digest, d, 32) == 0) {
            return &a->entries[i];
        }
    }
    return NULL;
}

TEST(a_file_of_bound_and_unbound_tokens_loads_with_comments_and_blanks)
{
    const char *text = "# operators\n"
                       "\n" TOK_A " " TEN_A "\r\n"
                       "   \t\n"
                       "\t" TOK_B "\t# the batch job\n"
                       "  # indented comment";
    struct auth a;
    struct err err;
    const struct auth_entry *e;
    uint8_t ten[16];

    EXPECT_EQ_I64(parse(&a, text, &err), 0);
    EXPECT_EQ_U64(a.n, 2);
    e = entry_of(&a, TOK_A);
    EXPECT(e != NULL && e->is_bound);
    EXPECT(api_tenant_parse(TEN_A, ten));
    EXPECT(e != NULL && memcmp(e->tenant, ten, 16) == 0);
    e = entry_of(&a, TOK_B);
    EXPECT(e != NULL && !e->is_bound);
    auth_free(&a);
}

TEST(the_table_keeps_digests_never_the_tokens)
{
    struct auth a;
    struct err err;

    EXPECT_EQ_I64(parse(&a, TOK_A "\n", &err), 0);
    EXPECT(memmem(a.entries, a.n * sizeof(*a.entries), TOK_A, strlen(TOK_A)) ==
           NULL);
    auth_free(&a);
}

/* Each bad file: the line named, the token never quoted, nothing kept. */
TEST(a_bad_file_is_refused_naming_the_line_and_never_the_token)
{
    static const struct {
        const char *text;
        const char *msg;
    } cases[] = {
        {"# x\n" TOK_A "\nshort-token\n",
         "line 3: a token is 16 to 256 characters"},
        {TOK_A "!\n", "line 1: a token is 16"},
        {"\n" TOK_A " " TEN_A " extra\n", "line 2: more than two fields"},
        {TOK_A " not-a-uuid\n", "line 1: the tenant is not a UUID"},
        {TOK_A " " TEN_A "ff\n", "line 1: the tenant is not a UUID"},
        {TOK_A "\n" TOK_B "\n" TOK_A " " TEN_B "\n",
         "line 3: the same token as line 1"},
        {"", "no token"},
        {"# only a comment\n\n", "no token"},
    };
    struct auth a;
    struct err err;

    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        EXPECT_EQ_I64(parse(&a, cases[i].text, &err), ERR_INVALID);
        EXPECT(strstr(err.msg, cases[i].msg) != NULL);
        EXPECT(strstr(err.msg, TOK_A) == NULL);
        EXPECT(strstr(err.msg, "short-token") == NULL);
        EXPECT_EQ_U64(a.n, 0);
        auth_free(&a);
    }
}

TEST(a_token_of_the_longest_length_loads_and_one_byte_more_does_not)
{
    char line[AUTH_TOKEN_MAX + 3];
    struct auth a;
    struct err err;

    memset(line, 'x', AUTH_TOKEN_MAX);
    line[AUTH_TOKEN_MAX] = '\0';
    EXPECT_EQ_I64(parse(&a, line, &err), 0);
    auth_free(&a);
    line[AUTH_TOKEN_MAX] = 'x';
    line[AUTH_TOKEN_MAX + 1] = '\0';
    EXPECT_EQ_I64(parse(&a, line, &err), ERR_INVALID);
    auth_free(&a);
}

TEST(a_nul_byte_in_the_file_is_refused)
{
    const char text[] = TOK_A "\0zzzz\n";
    struct auth a;
    struct err err;

    EXPECT_EQ_I64(auth_parse(&a, text, sizeof(text) - 1, &err), ERR_INVALID);
    auth_free(&a);
}

TEST(the_compare_tells_equal_from_every_single_byte_difference)
{
    uint8_t x[32];
    uint8_t y[32];

    for (int i = 0; i < 32; i++) {
        x[i] = (uint8_t)(i * 7 + 1);
    }
    memcpy(y, x, sizeof(x));
    EXPECT(auth_equal(x, y, sizeof(x)));
    EXPECT(auth_equal(x, y, 0));
    for (int i = 0; i < 32; i++) {
        for (int bit = 0; bit < 8; bit++) {
            y[i] ^= (uint8_t)(1u << bit);
            EXPECT(!auth_equal(x, y, sizeof(x)));
            y[i] ^= (uint8_t)(1u << bit);
        }
    }
}

TEST(the_check_finds_each_token_and_refuses_anything_else)
{
    struct auth a;
    struct err err;
    const struct auth_entry *e = NULL;

    EXPECT_EQ_I64(parse(&a, TOK_A " " TEN_A "\n" TOK_B "\n", &err), 0);
    EXPECT_EQ_I64(auth_check(&a, NULL, &e), AUTH_MISSING);
    EXPECT_EQ_I64(auth_check(&a, HDR_A, &e), AUTH_OK);
    EXPECT(e == entry_of(&a, TOK_A));
    EXPECT_EQ_I64(auth_check(&a, "bearer   " TOK_B "  ", &e), AUTH_OK);
    EXPECT(e == entry_of(&a, TOK_B));
    EXPECT_EQ_I64(auth_check(&a, "Bearer " NO_TOK, &e), AUTH_BAD);
    EXPECT_EQ_I64(auth_check(&a, "Bearer " TOK_A "x", &e), AUTH_BAD);
    EXPECT_EQ_I64(auth_check(&a, "Bearer alice-0123456789abcde", &e), AUTH_BAD);
    EXPECT_EQ_I64(auth_check(&a, "Bearer " TOK_A " " TOK_B, &e), AUTH_BAD);
    EXPECT_EQ_I64(auth_check(&a, "Basic " TOK_A, &e), AUTH_BAD);
    EXPECT_EQ_I64(auth_check(&a, "Bearer" TOK_A, &e), AUTH_BAD);
    EXPECT_EQ_I64(auth_check(&a, "Bearer ", &e), AUTH_BAD);
    EXPECT_EQ_I64(auth_check(&a, TOK_A, &e), AUTH_BAD);
    EXPECT_EQ_I64(auth_check(&a, "", &e), AUTH_BAD);
    auth_free(&a);
}

TEST(the_file_is_read_from_disk_and_a_missing_one_names_the_reason)
{
    char path[] = "/tmp/queen-test-auth-XXXXXX";
    int fd = mkstemp(path);
    struct auth a;
    struct err err;
    FILE *f;

    ASSERT(fd >= 0);
    f = fdopen(fd, "w");
    fputs(TOK_A "\n", f);
    fclose(f);
    EXPECT_EQ_I64(auth_load_file(&a, path, &err), 0);
    EXPECT_EQ_U64(a.n, 1);
    auth_free(&a);
    unlink(path);
    EXPECT_EQ_I64(auth_load_file(&a, path, &err), ERR_IO);
    EXPECT_STR_EQ(err.msg, "cannot read: No such file or directory");
    auth_free(&a);
}

TEST(a_bound_token_acts_for_its_tenant_and_refuses_another)
{
    uint8_t a[16];
    uint8_t out[16];
    struct err err;

    EXPECT(api_tenant_parse(TEN_A, a));
    memset(out, 0, sizeof(out));
    EXPECT_EQ_I64(api_tenant_bound(a, NULL, out, &err), 0);
    EXPECT(memcmp(out, a, 16) == 0);
    memset(out, 0, sizeof(out));
    EXPECT_EQ_I64(
        api_tenant_bound(a, "0000000A-0000-4000-8000-00000000000A", out, &err),
        0);
    EXPECT(memcmp(out, a, 16) == 0);
    memset(out, 0, sizeof(out));
    EXPECT_EQ_I64(api_tenant_bound(a, TEN_B, out, &err), ERR_FORBIDDEN);
    EXPECT(strstr(err.msg, TEN_A " only") != NULL);
    EXPECT(strstr(err.msg, "names " TEN_B) != NULL);
    EXPECT_EQ_I64(api_tenant_bound(a, "nope", out, &err), ERR_INVALID);
    EXPECT(out[0] == 0 && out[15] == 0);
}
