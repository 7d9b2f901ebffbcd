/* libraft's kernel AIO contexts, made and destroyed off the loop thread.
 *
 * libraft 0.15 gives each open log segment a writer with an AIO context of
 * its own: io_setup when the segment starts taking entries, io_destroy when
 * it is closed, both on the loop thread. io_destroy waits for an RCU grace
 * period: 40-50 ms on this VM, measured with perf trace under push load, in
 * which the loop serves nothing. With 64 MiB segments that is a stall every
 * 0.5 s at 120 MB/s of log, and the push p99 at any rate was that stall.
 * The Makefile links libraft statically with UvOsIoSetup and UvOsIoDestroy
 * weakened (as it does byteCrc32), so these definitions are the ones
 * libraft calls:
 *   (1) UvOsIoDestroy(ctx) hands ctx to a thread of this module, which
 *       destroys it; it returns 0 at once. Nothing of libraft touches a
 *       context after destroying it, and the kernel keeps a context's files
 *       and pending writes alive until io_destroy, so the order of every
 *       write and close libraft makes is unchanged. When the thread cannot
 *       be started or its queue is full, the context is destroyed in place.
 *   (2) UvOsIoSetup(nr, ctxp) hands over a spare context of nr events that
 *       the thread made ahead, and asks for the next; without a spare of
 *       that size it calls io_setup in place. Contexts belong to the
 *       process, not to a thread, so one made on the thread serves any.
 *   (3) Both return 0 or a negative errno, as libraft's own do. */
#ifndef QUEEN_RAFT_AIO_H
#define QUEEN_RAFT_AIO_H

#include <linux/aio_abi.h>
#include <stdint.h>

/* The names libraft calls (their prototypes are internal to libraft). */
int UvOsIoSetup(unsigned nr, aio_context_t *ctxp);
int UvOsIoDestroy(aio_context_t ctx);

struct raft_aio_stats {
    uint64_t setups;      /* UvOsIoSetup calls that succeeded */
    uint64_t spares_used; /* of them, answered with a spare */
    uint64_t destroys;    /* UvOsIoDestroy calls */
    uint64_t destroyed;   /* contexts destroyed, by the thread or in place */
    uint64_t in_place;    /* destroyed in place (no thread, queue full) */
    unsigned spare_nr;    /* events of the spare made ahead; 0: none */
    unsigned want_nr;     /* events of the spare wanted; 0: none */
};

void raft_aio_get_stats(struct raft_aio_stats *out);

#endif
