/* Small macros every module uses: printf checking, always-on assertions,
 * container_of, array length, and the borrowed byte view `struct slice`. */
#ifndef QUEEN_BASE_COMMON_H
#define QUEEN_BASE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define PRINTF(m, n) __attribute__((format(printf, m, n)))
#define UNUSED(x)    ((void)(x))
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* Assertions stay on in release builds: a broker should stop with the file and
 * line rather than corrupt data. */
#define ASSERT(cond)                                \
    do {                                            \
        if (!(cond)) {                              \
            assert_fail(#cond, __FILE__, __LINE__); \
        }                                           \
    } while (0)

/* The GNU spelling rather than _Noreturn: cppcheck 2.10 ignores _Noreturn and
 * would then read every ASSERT as a branch that falls through. */
__attribute__((noreturn)) void assert_fail(const char *what, const char *file,
                                           int line);

/* A borrowed view of bytes; the owner outlives it. */
struct slice {
    const char *ptr;
    size_t len;
};

#define SLICE_LIT(s) ((struct slice){(s), sizeof(s) - 1})

#endif
