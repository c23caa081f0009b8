#!/usr/bin/env bash
# In the HMAT guest, `kvtierctl nodes --json` must show node 1 as what the
# kernel made it: CPU-less, in a lower memory tier than node 0, 250 ns read
# latency from HMAT, and node 0's demotion target.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

json=$(vm_run -- kvtierctl nodes --json) || exit $?
python3 - "$json" <<'PY' || fail "kvtierctl nodes --json in the HMAT guest: see the lines above"
import json, sys
nodes = {n["node"]: n for n in json.loads(sys.argv[1])["nodes"]}
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)
check(sorted(nodes) == [0, 1], f"nodes {sorted(nodes)}, want [0, 1]")
n0, n1 = nodes.get(0, {}), nodes.get(1, {})
check(n0.get("cpus") == [0, 1], f"node 0 cpus {n0.get('cpus')}, want [0, 1]")
check(n1.get("cpu_less") is True and n1.get("cpus") == [], f"node 1 not CPU-less: {n1.get('cpus')}")
t0, t1 = n0.get("memory_tier"), n1.get("memory_tier")
check(isinstance(t0, int) and isinstance(t1, int) and t1 > t0,
      f"node 1 tier {t1} is not below node 0 tier {t0}")
check((n1.get("access") or {}).get("read_latency_ns") == 250,
      f"node 1 read latency {(n1.get('access') or {}).get('read_latency_ns')}, want 250")
check((n0.get("access") or {}).get("read_latency_ns") == 80,
      f"node 0 read latency {(n0.get('access') or {}).get('read_latency_ns')}, want 80")
check(n1.get("demotion_target") is True, "node 1 is not a demotion target")
check(n0.get("demotion_target") is False, "node 0 is a demotion target")
check(n0.get("demotes_to") == 1, f"node 0 demotes_to {n0.get('demotes_to')}, want 1")
for p in problems:
    print("nodes_hmat:", p, file=sys.stderr)
if problems:
    sys.exit(1)
print(f"nodes_hmat: ok: node 1 CPU-less, tier {t1} below {t0}, 250 ns, node 0 demotes to 1")
PY
