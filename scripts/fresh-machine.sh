#!/usr/bin/env bash
# Proves the README's two commands work on their first run on a machine that
# has none of the project's packages: purges every Debian package that
# scripts/setup.sh installs (and what they alone pulled in), makes a fresh
# clone of HEAD, and runs `make demo` and then CI's `.ci/run` (`make check`,
# then `make check-cluster`) in it, once each. Exits 0 only if both pass.
# Not part of `make check`: it uninstalls things.
#
# Kept, although setup.sh lists them: the packages the machine's own tools
# stand on (the compilers, python3, curl, openssl, nodejs, iproute2,
# iptables), which a fresh Debian 12
# image of this kind already ships. Purging them would take apt's and the
# shell's own tools with them; setup.sh installs them when they are missing.
# Usage: scripts/fresh-machine.sh [clone-dir]   (default /tmp/queen-fresh)
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest=${1:-/tmp/queen-fresh}
KEEP=" build-essential pkg-config clang clang-format clang-tidy cppcheck python3 curl openssl zstd libssl-dev zlib1g-dev nodejs npm iproute2 iptables "
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

purge=()
for p in $("$here/scripts/setup.sh" --list); do
  case "$KEEP" in *" $p "*) continue ;; esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' && purge+=("$p")
done
if [ "${#purge[@]}" -gt 0 ]; then
  echo "fresh-machine: purging ${purge[*]}"
  $SUDO apt-get purge -y -qq "${purge[@]}" >/dev/null || { echo "fresh-machine: purge failed"; exit 1; }
  $SUDO apt-get autoremove --purge -y -qq >/dev/null || true
fi
left=()
for p in "${purge[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' && left+=("$p")
done
[ "${#left[@]}" -eq 0 ] || { echo "fresh-machine: still installed: ${left[*]}"; exit 1; }
rm -rf "$here/tests/node_modules"

rm -rf "$dest"
git clone -q "$here" "$dest" || { echo "fresh-machine: clone failed"; exit 1; }
echo "fresh-machine: clone of $(git -C "$dest" rev-parse --short HEAD) in $dest"
cd "$dest" || exit 1
make demo > fresh-demo.log 2>&1; demo=$?
tail -40 fresh-demo.log
echo "fresh-machine: make demo exited $demo (log: $dest/fresh-demo.log)"
.ci/run > fresh-check.log 2>&1; check=$?
tail -5 fresh-check.log
echo "fresh-machine: .ci/run (make check, make check-cluster) exited $check (log: $dest/fresh-check.log)"
[ "$demo" -eq 0 ] && [ "$check" -eq 0 ]
