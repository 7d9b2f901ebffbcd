#!/usr/bin/env bash
# bench/push_tls: the push rate over HTTPS beside plain HTTP in the same run
# (bench/push.sh --tls: the same broker, payloads and wrk load).
# Usage: bench/push_tls.sh [build-dir]
exec bash "$(dirname "$0")/push.sh" --tls "$@"
