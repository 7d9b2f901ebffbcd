/* `queen lake verify` and `queen lake restore` (docs/lake.md): offline
 * tools over a bucket the sink wrote, run from the broker's binary.
 *   (1) verify reads the bucket only (LIST, GET) and, with --broker, the
 *       broker's log (POST /api/v1/fetch, /api/v1/partitions/changed); it
 *       never writes. Exit 0: the lake is exact; 1: a violation, each named
 *       with its window k and key; 2: it could not run.
 *   (2) restore pushes the lake's records back (POST /api/v1/push) with
 *       their partition names, transactionIds and payload bytes; the
 *       broker's dedup on transactionId makes a second run, or a run after
 *       an interruption, add nothing. Exit 0 done, 2 could not run.
 *   (3) Credentials come from QUEEN_S3_ACCESS_KEY / QUEEN_S3_SECRET_KEY or
 *       flags and are never printed. */
#ifndef QUEEN_LAKE_LAKE_H
#define QUEEN_LAKE_LAKE_H

/* argv[0] is "lake" (the broker's argv[1]). Returns the exit code. */
int lake_main(int argc, char **argv);

#endif
