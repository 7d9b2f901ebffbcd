/* sink/dormant: the packed table of pruned partitions (issue 13 item 8):
 * what goes in comes out exactly, a removed or swept entry is gone and
 * the rest stay found, growth and compaction keep every entry, the
 * checkpoint order is by name, and a million-partition queue's entries
 * cost tens of bytes each. */
#include "sink/dormant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static struct slice cs(const char *s)
{
    return (struct slice){s, strlen(s)};
}

/* The i-th partition of a synthetic queue: "p%07u", and a v4-like UUID. */
static void nth(size_t i, char name[16], char id[40])
{
    snprintf(name, 16, "p%07zu", i);
    snprintf(id, 40, "%08zx-%04zx-4%03zx-8%03zx-%012zx",
             (i * 2654435761u) & 0xffffffffu, i & 0xffff, (i >> 4) & 0xfff,
             (i >> 8) & 0xfff, (i * 0x9e3779b9u + 7) & 0xffffffffffffu);
}

static bool has_at(const struct dormant *t, const char *name, const char *id,
                   int64_t want)
{
    uint32_t r = dormant_find(t, cs(name), cs(id));
    struct slice n;
    struct slice i;
    char buf[DORMANT_ID_TEXT];
    int64_t pos = -1;

    if (r == 0) {
        return false;
    }
    dormant_get(t, r, &n, &i, buf, &pos);
    return n.len == strlen(name) && memcmp(n.ptr, name, n.len) == 0 &&
           i.len == strlen(id) && memcmp(i.ptr, id, i.len) == 0 &&
           pos == want && dormant_position(t, r) == want;
}

TEST(an_entry_comes_back_exactly_as_it_went_in)
{
    struct dormant t;
    char longname[301];

    memset(longname, 'n', 300);
    longname[300] = '\0';
    dormant_init(&t);
    EXPECT(dormant_add(&t, cs("a"), cs("0192a4b8-7c1d-7e2f-8a3b-4c5d6e7f8091"),
                       0));
    /* not canonical lowercase: kept raw, comes back as given */
    EXPECT(dormant_add(&t, cs("b"), cs("0192A4B8-7C1D-7E2F-8A3B-4C5D6E7F8091"),
                       1));
    EXPECT(dormant_add(&t, cs("c"), cs("not-a-uuid"), (int64_t)1 << 62));
    EXPECT(dormant_add(&t, cs(longname), cs("x"), 300)); /* 2-byte length */
    EXPECT(dormant_add(&t, cs(""), cs(""), 5));
    EXPECT(has_at(&t, "a", "0192a4b8-7c1d-7e2f-8a3b-4c5d6e7f8091", 0));
    EXPECT(has_at(&t, "b", "0192A4B8-7C1D-7E2F-8A3B-4C5D6E7F8091", 1));
    EXPECT(has_at(&t, "c", "not-a-uuid", (int64_t)1 << 62));
    EXPECT(has_at(&t, longname, "x", 300));
    EXPECT(has_at(&t, "", "", 5));
    EXPECT_EQ_U64(dormant_count(&t), 5);
    dormant_check_invariants(&t);
    dormant_free(&t);
}

TEST(the_key_is_the_name_and_the_id_exactly)
{
    struct dormant t;
    const char *id = "0192a4b8-7c1d-7e2f-8a3b-4c5d6e7f8091";
    const char *other = "0192a4b8-7c1d-7e2f-8a3b-4c5d6e7f8092";

    dormant_init(&t);
    EXPECT(dormant_find(&t, cs("a"), cs(id)) == 0); /* empty */
    EXPECT(dormant_add(&t, cs("a"), cs(id), 7));
    EXPECT(!dormant_add(&t, cs("a"), cs(id), 9)); /* there already */
    EXPECT(has_at(&t, "a", id, 7));
    EXPECT(dormant_find(&t, cs("a"), cs(other)) == 0); /* a new incarnation */
    EXPECT(dormant_find(&t, cs("ab"), cs(id)) == 0);
    EXPECT(dormant_find(&t, cs("a"),
                        cs("0192A4B8-7C1D-7E2F-8A3B-4C5D6E7F8091")) == 0);
    EXPECT(dormant_add(&t, cs("a"), cs(other), 1)); /* both kept */
    EXPECT(has_at(&t, "a", id, 7));
    EXPECT(has_at(&t, "a", other, 1));
    dormant_free(&t);
}

TEST(what_cannot_be_kept_is_refused_and_changes_nothing)
{
    struct dormant t;
    char big[DORMANT_NAME_MAX + 2];
    char bigid[DORMANT_ID_MAX + 2];

    memset(big, 'n', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memset(bigid, 'i', sizeof(bigid) - 1);
    bigid[sizeof(bigid) - 1] = '\0';
    dormant_init(&t);
    EXPECT(!dormant_add(&t, cs(big), cs("x"), 1));
    EXPECT(!dormant_add(&t, cs("a"), cs(bigid), 1));
    EXPECT_EQ_U64(dormant_count(&t), 0);
    big[DORMANT_NAME_MAX] = '\0'; /* at the limit: kept */
    EXPECT(dormant_add(&t, cs(big), cs("x"), 1));
    EXPECT(has_at(&t, big, "x", 1));
    dormant_free(&t);
}

/* Removing from the middle of probe runs keeps every other entry found
 * (the run is shifted back), and what removal leaves is reclaimed. */
TEST(removed_entries_are_gone_and_the_rest_stay_found_through_growth)
{
    struct dormant t;
    char name[16];
    char id[40];
    const size_t n = 50000;
    uint64_t full;

    dormant_init(&t);
    for (size_t i = 0; i < n; i++) {
        nth(i, name, id);
        EXPECT(dormant_add(&t, cs(name), cs(id), (int64_t)i));
    }
    dormant_check_invariants(&t);
    full = dormant_bytes(&t);
    for (size_t i = 0; i < n; i += 3) { /* a third, spread out */
        nth(i, name, id);
        uint32_t r = dormant_find(&t, cs(name), cs(id));
        EXPECT(r != 0);
        if (r != 0) {
            dormant_remove(&t, r);
        }
    }
    dormant_check_invariants(&t);
    EXPECT_EQ_U64(dormant_count(&t), n - (n + 2) / 3);
    for (size_t i = 0; i < n; i++) {
        nth(i, name, id);
        if (i % 3 == 0) {
            EXPECT(dormant_find(&t, cs(name), cs(id)) == 0);
        } else if (!has_at(&t, name, id, (int64_t)i)) {
            HARNESS_FAIL("entry %zu lost", i);
            break;
        }
    }
    /* revived, then pruned again at a later position: found there */
    nth(3, name, id);
    EXPECT(dormant_add(&t, cs(name), cs(id), 1000003));
    EXPECT(has_at(&t, name, id, 1000003));
    EXPECT(dormant_bytes(&t) <= full);
    dormant_free(&t);
}

TEST(a_full_sweep_drops_what_it_did_not_name)
{
    struct dormant t;
    char name[16];
    char id[40];

    dormant_init(&t);
    for (size_t i = 0; i < 1000; i++) {
        nth(i, name, id);
        EXPECT(dormant_add(&t, cs(name), cs(id), (int64_t)i + 1));
    }
    dormant_unmark_all(&t);
    for (size_t i = 0; i < 1000; i += 2) {
        nth(i, name, id);
        dormant_mark(&t, dormant_find(&t, cs(name), cs(id)));
    }
    nth(1001, name, id); /* added during the sweep: kept */
    EXPECT(dormant_add(&t, cs(name), cs(id), 5));
    EXPECT_EQ_U64(dormant_drop_unmarked(&t), 500);
    EXPECT_EQ_U64(dormant_count(&t), 501);
    dormant_check_invariants(&t);
    for (size_t i = 0; i < 1000; i++) {
        nth(i, name, id);
        EXPECT((i % 2 == 0) == has_at(&t, name, id, (int64_t)i + 1));
    }
    nth(1001, name, id);
    EXPECT(has_at(&t, name, id, 5));
    dormant_free(&t);
}

TEST(the_checkpoint_order_is_by_name_then_position_then_id)
{
    struct dormant t;
    const char *names[] = {"b", "a", "ab", "", "a", "b\xff", "a"};
    const char *ids[] = {
        "1", "2", "3", "4", "0", "5", "0192a4b8-7c1d-7e2f-8a3b-4c5d6e7f8091"};
    const int64_t pos[] = {1, 9, 1, 1, 9, 1, 2};
    /* "", "a"@2, "a"@9 id "0", "a"@9 id "2", "ab", "b", "b\xff" */
    const size_t want[] = {3, 6, 4, 1, 2, 0, 5};
    uint32_t *v;
    size_t n;

    dormant_init(&t);
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        EXPECT(dormant_add(&t, cs(names[i]), cs(ids[i]), pos[i]));
    }
    v = dormant_sorted(&t, &n);
    EXPECT_EQ_U64(n, ARRAY_LEN(names));
    for (size_t i = 0; i < n && i < ARRAY_LEN(want); i++) {
        struct slice nm;
        struct slice id;
        char buf[DORMANT_ID_TEXT];
        int64_t p;

        dormant_get(&t, v[i], &nm, &id, buf, &p);
        EXPECT_MEM_EQ(nm.ptr, nm.len, names[want[i]], strlen(names[want[i]]));
        EXPECT_MEM_EQ(id.ptr, id.len, ids[want[i]], strlen(ids[want[i]]));
        EXPECT_EQ_I64(p, pos[want[i]]);
    }
    free(v);
    dormant_free(&t);
}

/* The figure issue 13 item 8 rests on: a million partitions with short
 * names and UUIDs cost ~30-40 bytes each, index included. */
TEST(a_million_dormant_partitions_cost_under_44_bytes_each)
{
    struct dormant t;
    char name[16];
    char id[40];
    const size_t n = 1000000;

    dormant_init(&t);
    for (size_t i = 0; i < n; i++) {
        nth(i, name, id);
        if (!dormant_add(&t, cs(name), cs(id), 1)) {
            HARNESS_FAIL("add %zu refused", i);
            break;
        }
    }
    EXPECT_EQ_U64(dormant_count(&t), n);
    EXPECT(dormant_bytes(&t) < 44 * n);
    printf("  %zu dormant partitions: %.1f bytes each\n", n,
           (double)dormant_bytes(&t) / (double)n);
    nth(n / 2, name, id);
    EXPECT(has_at(&t, name, id, 1));
    dormant_free(&t);
}
