/* Faulting in fresh anonymous memory ahead of its use, on a helper thread:
 * on a VM whose host no longer backs freed memory, the first touch of a
 * 2 MiB huge page costs milliseconds (bench/touch), and the thread that
 * touches first pays them. */
#ifndef QUEEN_BASE_POPULATE_H
#define QUEEN_BASE_POPULATE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define POPULATE_HUGE ((size_t)2 << 20)

/* Fault in the POPULATE_HUGE bytes at `at` (writable, anonymous), one call
 * per huge page: a populate holds the process's mmap lock, and an mmap
 * elsewhere (malloc of a large block, LMDB) waits for it. false when the
 * kernel refused (ENOMEM under a memory limit, EINTR, a poisoned page):
 * nothing more is touched then, since touching would fault the same memory
 * the kernel just declined, into the OOM killer. Only a kernel without the
 * call (EINVAL) gets each page touched instead. */
static inline bool populate_huge(char *at)
{
    if (madvise(at, POPULATE_HUGE, MADV_POPULATE_WRITE) == 0) {
        return true;
    }
    if (errno != EINVAL) {
        return false;
    }
    for (size_t k = 0; k < POPULATE_HUGE; k += 4096) {
        at[k] = 0; /* an older kernel: touch each page */
    }
    return true;
}

#endif
