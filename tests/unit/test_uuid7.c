/* Tests of the UUIDv7-like id layout and sequence rule (docs/design/http-api.md
 * §13). */
#include "base/uuid7.h"

#include <pthread.h>
#include <stdio.h>

#include "harness.h"

static const uint8_t rnd[8] = {0xff, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77};

TEST(bit_layout_is_pinned)
{
    struct uuid7_gen g = UUID7_GEN_INIT;
    uint8_t id[16];
    char s[37];

    uuid7_make(&g, 0x0123456789abull, rnd, id);
    uuid7_format(id, s);
    EXPECT_STR_EQ(s, "01234567-89ab-7000-bf11-223344556677");
    EXPECT_EQ_U64(id[6] >> 4, 7);
    EXPECT_EQ_U64(id[8] >> 6, 2);
}

TEST(every_byte_value_formats_as_two_lowercase_digits_in_place)
{
    uint8_t id[16];
    char s[37];
    char want[37];

    for (int v = 0; v < 256; v++) {
        for (int i = 0; i < 16; i++) {
            id[i] = (uint8_t)(v + 37 * i); /* each position sees each value */
        }
        uuid7_format(id, s);
        snprintf(want, sizeof(want),
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                 "%02x%02x%02x%02x%02x%02x",
                 id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8],
                 id[9], id[10], id[11], id[12], id[13], id[14], id[15]);
        EXPECT_STR_EQ(s, want);
    }
}

TEST(sequence_counts_within_one_millisecond)
{
    struct uuid7_gen g = UUID7_GEN_INIT;
    uint8_t id[16];
    char s[37];

    uuid7_make(&g, 0x01a1007b855dull, rnd, id);
    uuid7_make(&g, 0x01a1007b855dull, rnd, id);
    uuid7_format(id, s);
    EXPECT_STR_EQ(s, "01a1007b-855d-7001-bf11-223344556677");
    uuid7_make(&g, 0x01a1007b855dull, rnd, id);
    uuid7_format(id, s);
    EXPECT_STR_EQ(s, "01a1007b-855d-7002-bf11-223344556677");
    for (int i = 0; i < 0x100; i++) {
        uuid7_make(&g, 0x01a1007b855dull, rnd, id);
    }
    EXPECT_EQ_U64(id[6], 0x71);
    EXPECT_EQ_U64(id[7], 0x02);
}

TEST(sequence_resets_on_a_new_millisecond)
{
    struct uuid7_gen g = UUID7_GEN_INIT;
    uint8_t id[16];

    uuid7_make(&g, 1000, rnd, id);
    uuid7_make(&g, 1000, rnd, id);
    uuid7_make(&g, 1001, rnd, id);
    EXPECT_EQ_U64(id[5], 0xe9);
    EXPECT_EQ_U64(id[6], 0x70);
    EXPECT_EQ_U64(id[7], 0x00);
}

TEST(backwards_clock_reuses_the_last_millisecond)
{
    struct uuid7_gen g = UUID7_GEN_INIT;
    uint8_t id[16];

    uuid7_make(&g, 5000, rnd, id);
    uuid7_make(&g, 4000, rnd, id);
    EXPECT_EQ_U64((uint64_t)id[4] << 8 | id[5], 5000);
    EXPECT_EQ_U64(id[7], 1);
    uuid7_make(&g, 5001, rnd, id);
    EXPECT_EQ_U64((uint64_t)id[4] << 8 | id[5], 5001);
    EXPECT_EQ_U64(id[7], 0);
}

TEST(sequence_wraps_in_twelve_bits)
{
    struct uuid7_gen g = UUID7_GEN_INIT;
    uint8_t id[16];

    for (int i = 0; i <= 0x1000; i++) {
        uuid7_make(&g, 7, rnd, id);
    }
    EXPECT_EQ_U64(id[6], 0x70);
    EXPECT_EQ_U64(id[7], 0x00);
}

#define THREADS 4
#define PER     500
static char ids[THREADS * PER][37];

static void *mint(void *arg)
{
    int t = *(int *)arg;

    for (int i = 0; i < PER; i++) {
        uuid7_next(ids[t * PER + i]);
    }
    return NULL;
}

static int cmp_id(const void *a, const void *b)
{
    return strcmp(a, b);
}

TEST(next_is_unique_across_threads_and_well_formed)
{
    pthread_t th[THREADS];
    int arg[THREADS];

    for (int t = 0; t < THREADS; t++) {
        arg[t] = t;
        pthread_create(&th[t], NULL, mint, &arg[t]);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
    }
    qsort(ids, THREADS * PER, 37, cmp_id);
    for (int i = 0; i < THREADS * PER; i++) {
        EXPECT_EQ_U64(strlen(ids[i]), 36);
        EXPECT(ids[i][14] == '7');
        EXPECT(strchr("89ab", ids[i][19]) != NULL);
        if (i > 0 && strcmp(ids[i - 1], ids[i]) == 0) {
            HARNESS_FAIL("duplicate id %s", ids[i]);
        }
    }
}
