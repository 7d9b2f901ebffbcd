#!/usr/bin/env bash
# Runs each unit-test binary given as an argument, adds up their closing
# "N passed, N failed" lines into tests/.results/, and fails if any binary
# failed or printed no closing line.
set -u
mkdir -p build/results
p=0; f=0; bad=0
for t in "$@"; do
  out=$("$t" 2>&1); rc=$?
  line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ -z "$line" ]; then
    printf '%s\n' "$out" | tail -20
    echo "unit: $t printed no closing line (rc=$rc)"; bad=1; f=$((f+1)); continue
  fi
  tp=${line%% passed*}; tf=${line#*, }; tf=${tf%% failed*}
  p=$((p+tp)); f=$((f+tf))
  if [ "$rc" -ne 0 ] || [ "$tf" -ne 0 ]; then
    # what failed first (the tail may not reach it), then the tail
    printf '%s\n' "$out" | grep -E '^FAIL |^  [^ ]+:[0-9]+: ' | head -20
    printf '%s\n' "$out" | grep -v '^[0-9]* passed' | tail -40
    echo "unit: $(basename "$t"): $line (rc=$rc)"; bad=1
  else
    echo "unit: $(basename "$t"): $line"
  fi
done
echo "unit $p $f" >> build/results/summary
echo "unit: $p passed, $f failed"
exit $bad
