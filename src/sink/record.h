/* One record as the sink sees it: what a read of a partition returned. All
 * fields are borrowed from the read's answer, which outlives the record. */
#ifndef QUEEN_SINK_RECORD_H
#define QUEEN_SINK_RECORD_H

#include <stdint.h>

#include "base/common.h"

struct sink_record {
    struct slice partition; /* partition name, UTF-8 */
    int64_t offset;         /* offset in its partition, from 0 */
    struct slice txn;       /* transactionId, "" when none */
    int64_t ts;             /* stamp of the push, µs since the epoch (UTC) */
    struct slice payload;   /* the stored JSON text; len 0 = empty (null) */
};

#endif
