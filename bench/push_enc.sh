#!/usr/bin/env bash
# bench/push_enc: the push rate of a queue with encryptionEnabled beside a
# plain queue of the same broker in the same run (bench/push.sh
# --encrypted: 500-byte JSON payloads, the same wrk load).
# Usage: bench/push_enc.sh [build-dir]
exec bash "$(dirname "$0")/push.sh" --encrypted "$@"
