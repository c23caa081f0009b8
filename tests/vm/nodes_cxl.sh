#!/usr/bin/env bash
# In the CXL guest (an emulated type-3 expander onlined as system RAM through
# pmem region -> devdax -> kmem), `kvtierctl nodes --json` must find the new
# node as the one CPU-less demotion target, below node 0's tier.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

json=$(vm_run --cxl -- kvtierctl nodes --json) || exit $?
python3 - "$json" <<'PY' || fail "kvtierctl nodes --json in the CXL guest: see the lines above"
import json, sys
nodes = {n["node"]: n for n in json.loads(sys.argv[1])["nodes"]}
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)
targets = [n for n in nodes.values() if n.get("demotion_target")]
check(len(targets) == 1, f"{len(targets)} demotion targets, want 1: {sorted(nodes)}")
n0 = nodes.get(0, {})
check(bool(n0.get("cpus")), "node 0 has no CPUs")
if targets:
    t = targets[0]
    check(t.get("cpu_less") is True and t.get("cpus") == [], f"node {t['node']} has CPUs")
    check(t.get("mem_total_bytes", 0) > 256 << 20,
          f"node {t['node']} has {t.get('mem_total_bytes')} bytes, want > 256 MiB")
    check(isinstance(t.get("memory_tier"), int) and isinstance(n0.get("memory_tier"), int)
          and t["memory_tier"] > n0["memory_tier"],
          f"node {t['node']} tier {t.get('memory_tier')} not below node 0 tier {n0.get('memory_tier')}")
    check(n0.get("demotes_to") == t["node"], f"node 0 demotes_to {n0.get('demotes_to')}, want {t['node']}")
for p in problems:
    print("nodes_cxl:", p, file=sys.stderr)
if problems:
    sys.exit(1)
t = targets[0]
print(f"nodes_cxl: ok: CXL memory is node {t['node']}, {t['mem_total_bytes'] >> 20} MiB, "
      f"tier {t['memory_tier']}, node 0 demotes to it")
PY
