/* The unit-test harness: one binary per module, each test a function
 * registered by TEST(name). The binary runs every test (or those whose name
 * contains argv[1]), prints one line per failure with both values, and ends
 * with the line "N passed, N failed"; it exits non-zero on any failure. */
#ifndef QUEEN_TESTS_HARNESS_H
#define QUEEN_TESTS_HARNESS_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long a test waits for something another thread, process or timer is
 * to do: generous for a loaded 2-core machine (make stress-unit), where a
 * thing that takes milliseconds when idle can take seconds. Tests poll the
 * real condition up to this deadline; they never sleep and then assert. */
#define HARNESS_WAIT_MS 60000
#define HARNESS_WAIT_S  60

/* CLOCK_MONOTONIC in milliseconds, for deadlines. */
static inline int64_t harness_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct harness_test {
    const char *name;
    void (*fn)(void);
};

#define HARNESS_MAX_TESTS 1024
static struct harness_test harness_tests[HARNESS_MAX_TESTS];
static int harness_ntests;
static int harness_failed_now; /* failures inside the running test */

#define TEST(tname)                                                    \
    static void test_##tname(void);                                    \
    __attribute__((constructor)) static void harness_reg_##tname(void) \
    {                                                                  \
        if (harness_ntests < HARNESS_MAX_TESTS) {                      \
            harness_tests[harness_ntests].name = #tname;               \
            harness_tests[harness_ntests].fn = test_##tname;           \
            harness_ntests++;                                          \
        }                                                              \
    }                                                                  \
    static void test_##tname(void)

#define HARNESS_FAIL(...)                                 \
    do {                                                  \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                     \
        fputc('\n', stderr);                              \
        harness_failed_now++;                             \
    } while (0)

#define EXPECT(cond)                            \
    do {                                        \
        if (!(cond)) {                          \
            HARNESS_FAIL("expected %s", #cond); \
        }                                       \
    } while (0)

#define EXPECT_EQ_U64(a, b)                                                    \
    do {                                                                       \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                       \
        if (a_ != b_) {                                                        \
            HARNESS_FAIL("%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, a_, b_); \
        }                                                                      \
    } while (0)

#define EXPECT_EQ_I64(a, b)                                                    \
    do {                                                                       \
        int64_t a_ = (int64_t)(a), b_ = (int64_t)(b);                          \
        if (a_ != b_) {                                                        \
            HARNESS_FAIL("%s == %s: %" PRId64 " != %" PRId64, #a, #b, a_, b_); \
        }                                                                      \
    } while (0)

#define EXPECT_STR_EQ(a, b)                                       \
    do {                                                          \
        const char *a_ = (a), *b_ = (b);                          \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {    \
            HARNESS_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b,    \
                         a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
        }                                                         \
    } while (0)

#define EXPECT_MEM_EQ(a, alen, b, blen)                                        \
    do {                                                                       \
        size_t al_ = (size_t)(alen), bl_ = (size_t)(blen);                     \
        if (al_ != bl_ || memcmp((a), (b), al_) != 0) {                        \
            HARNESS_FAIL("%s == %s: \"%.*s\" (%zu) != \"%.*s\" (%zu)", #a, #b, \
                         (int)(al_ > 200 ? 200 : al_), (const char *)(a), al_, \
                         (int)(bl_ > 200 ? 200 : bl_), (const char *)(b),      \
                         bl_);                                                 \
        }                                                                      \
    } while (0)

#ifndef HARNESS_NO_MAIN
int main(int argc, char **argv)
{
    int passed = 0;
    int failed = 0;

    for (int i = 0; i < harness_ntests; i++) {
        if (argc > 1 && strstr(harness_tests[i].name, argv[1]) == NULL) {
            continue;
        }
        harness_failed_now = 0;
        harness_tests[i].fn();
        if (harness_failed_now != 0) {
            fprintf(stderr, "FAIL %s\n", harness_tests[i].name);
            failed++;
        } else {
            passed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
#endif

#endif
