#!/usr/bin/env bash
# bench/push: the broker's push rate and tail beside Redis Streams in the
# same run, on the corpora of bench/corpus.py; bench/push.py says what it
# measures and how.
# Usage: bench/push.sh [--tls|--encrypted] [build-dir]   (make bench runs
# each via scripts/bench.sh). QUEEN_BIN overrides the binary (to compare
# two builds with one script).
exec /usr/bin/python3 "$(dirname "$0")/push.py" "$@"
