/* The product's version: one for the whole binary, shown by `queen
 * --version`, the broker's and the sink's boot lines, /health, /status and
 * queen_build_info.
 *   (1) This is the only product version. The sink's lake format carries a
 *       version of its own, SINK_VERSION (sink/config.h): the writer strings
 *       of manifests and intents ("queen-s3/2.0.0 jsonl+zstd") and the
 *       status block's s3 "version" are fixed by the reference, and a redo
 *       compares writer strings, so they do not follow this one. */
#ifndef QUEEN_BASE_VERSION_H
#define QUEEN_BASE_VERSION_H

#define QUEEN_VERSION "0.1.0"

#endif
