#!/usr/bin/env bash
# Installs everything queen needs to build, test, fuzz, lint, benchmark and
# run its demo on a fresh Debian 12 machine. Idempotent: what is present is
# left alone, so `make check` and `make demo` can call it every time.
set -euo pipefail

APT_PKGS=(
  build-essential pkg-config clang libclang-rt-14-dev clang-format clang-tidy cppcheck
  libraft-dev liblz4-dev libuv1-dev liblmdb-dev lmdb-utils node-llhttp
  libcurl4-openssl-dev libssl-dev libzstd-dev zlib1g-dev libsnappy-dev
  zstd curl openssl
  python3 python3-boto3 python3-botocore python3-zstandard python3-pandas python3-pytest
  redis-server nats-server wrk hyperfine stress-ng faketime
  iproute2 iptables
  radosgw ceph-mon ceph-osd ceph-common
)
APT_NORECOMMENDS=(prometheus)
# Node.js: this image ships nodesource's nodejs (npm bundled); Debian's npm
# package conflicts with it, so Debian's nodejs+npm only where node is absent.
command -v node >/dev/null 2>&1 || APT_PKGS+=(nodejs npm)
NPM_MODS=(s3rver @duckdb/node-api hyparquet hyparquet-compressors nats)

# `setup.sh --list`: the Debian packages it installs, one a line (what
# scripts/fresh-machine.sh purges).
if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${APT_PKGS[@]}" "${APT_NORECOMMENDS[@]}"
  exit 0
fi

missing=()
for p in "${APT_PKGS[@]}" "${APT_NORECOMMENDS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  norec=()
  rec=()
  for p in "${missing[@]}"; do
    case " ${APT_NORECOMMENDS[*]} " in
      *" $p "*) norec+=("$p") ;;
      *) rec+=("$p") ;;
    esac
  done
  [ "${#rec[@]}" -eq 0 ] || $SUDO apt-get install -y -qq "${rec[@]}" >/dev/null
  [ "${#norec[@]}" -eq 0 ] || $SUDO apt-get install -y -qq --no-install-recommends "${norec[@]}" >/dev/null
  # Debian starts redis-server, nats-server and prometheus as services; tests
  # and benchmarks start their own.
  # Ceph: tests/bucket/rgw.py starts a private cell of its own; none of its
  # packaged units run without systemd, stop them where they do.
  for svc in redis-server nats-server prometheus ceph.target ceph-mon.target ceph-osd.target ceph-radosgw.target; do
    (command -v systemctl >/dev/null && $SUDO systemctl stop "$svc" 2>/dev/null) || true
    $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
fi

# npm packages live in tests/node_modules (not committed).
here="$(cd "$(dirname "$0")/.." && pwd)"
need_npm=0
for m in "${NPM_MODS[@]}"; do
  [ -d "$here/tests/node_modules/$m" ] || need_npm=1
done
if [ "$need_npm" -eq 1 ]; then
  echo "setup: installing npm packages into tests/node_modules"
  (cd "$here/tests" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi
echo "setup: ok"
