#!/bin/sh
# unit.demo_lines: the demo's sh readers (scripts/demo-lines.sh) give, for every line of a recorded
# kvsim output (tests/fixtures/demo/kvsim.out, from the benchmark guest) and for a probe sample,
# the very counters a JSON parser reads there, so the demo's 15-second lines and its last line
# (bench/report.py, from the same counters) cannot disagree after a change of kvsim's format.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/scripts/demo-lines.sh"
fixture=$top/tests/fixtures/demo/kvsim.out
fails=0
n=0
grep '"event":"stats"' "$fixture" > /tmp/demo_lines.$$
while IFS= read -r line; do
  n=$((n + 1))
  got=$(printf '%s\n' "$line" | read_counters)
  want=$(printf '%s\n' "$line" | python3 -c 'import json, sys
r = json.loads(sys.stdin.read())["read_nodes"]
print(r["sampled_read_bytes"], r["by_node"].get("0", 0))')
  if [ "$got" != "$want" ]; then
    echo "stats line $n: read_counters says '$got', the JSON '$want'"
    fails=$((fails + 1))
  fi
done < /tmp/demo_lines.$$
rm -f /tmp/demo_lines.$$
[ "$n" -ge 5 ] || { echo "the fixture has $n stats lines (want >= 5)"; exit 1; }
sample='{"event":"sample","i":3,"bytes_by_node":{"0":176160768,"1":92274688},"status_pages":{"-14":2},"free_kib_by_node":{"0":1024,"1":2048}}'
got=$(printf '%s\n' "$sample" | pool_counters)
[ "$got" = "176160768 92274688" ] || { echo "pool_counters says '$got'"; fails=$((fails + 1)); }
got=$(printf '%s\n' '{"event":"sample","bytes_by_node":{"1":4096}}' | pool_counters)
[ "$got" = "0 4096" ] || { echo "pool_counters without node 0 says '$got'"; fails=$((fails + 1)); }
echo "demo_lines: $n stats lines and 2 samples checked, $fails wrong"
[ "$fails" -eq 0 ]
