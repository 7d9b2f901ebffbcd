#!/usr/bin/env bash
# Replays every fuzz corpus (tests/fuzz/corpus/NAME/*) through the plain
# replay binary of that target: a crash or sanitizer report fails the run.
set -u
build=$1; shift
p=0; f=0
for n in "$@"; do
  dir=tests/fuzz/corpus/$n
  mkdir -p "$dir"
  if out=$("$build/tests/replay_$n" "$dir" 2>&1); then
    p=$((p+1)); echo "replay: $n: $(printf '%s' "$out" | tail -1)"
  else
    f=$((f+1)); printf '%s\n' "$out" | tail -30; echo "replay: $n FAILED"
  fi
done
mkdir -p build/results
echo "replay $p $f" >> build/results/summary
echo "replay: $p passed, $f failed"
[ "$f" -eq 0 ]
