#!/usr/bin/env python3
"""Judges tests/vm/shared_pool_guest.sh's output (stdin), issue 37: two processes, a and b,
map one 64 MiB memfd pool; b wrote it, a (the lower pid) maps only its hot part and the last
8 MiB. kvtierd must track the pool once, through its owner a (as its log says in one line),
account exactly for every byte it put on node 1, move the cold pages only b maps (found
through b) and those both map (MPOL_MF_MOVE_ALL: no permission failure), keep both hot parts
on node 0 (b's only by b's reads: the merged evidence), and leave every byte as written."""
import json
import sys

MiB = 1 << 20
vals = {}
verified = []
for line in sys.stdin:
    line = line.strip()
    if line.startswith("VERIFIED "):
        verified.append(line.split()[1:])
        continue
    key, sep, rest = line.partition("=")
    if sep and key.isupper():
        vals.setdefault(key, []).append(rest)

def need(key):
    if key not in vals:
        sys.exit(f"check_shared_pool: FAIL: no {key}= line in the guest's output")
    return vals[key][0]

def share(rec, node):
    total = sum(rec["nodes"].values())
    return rec["nodes"].get(str(node), 0) / total if total else 0.0

problems = []
pa, pb = (int(p) for p in need("PIDS").split())
owner, other = min(pa, pb), max(pa, pb)
hot_a, hot_a_via_a, hot_b = (json.loads(need(k)) for k in ("HOT_A", "HOT_A_VIA_A", "HOT_B"))
cold = [json.loads(need(k)) for k in ("COLD_1", "COLD_2", "COLD_3")]
shared_cold = json.loads(need("SHARED_COLD_VIA_A"))
cold_bytes = sum(sum(c["nodes"].values()) for c in cold)
cold_on_1 = sum(c["nodes"].get("1", 0) for c in cold) / cold_bytes if cold_bytes else 0.0
print(f"check_shared_pool: hot 4 MiB of a on node 0: {share(hot_a, 0):.1%}; hot 4 MiB of b on "
      f"node 0: {share(hot_b, 0):.1%}; cold 56 MiB on node 1: {cold_on_1:.1%}; the 8 MiB both map "
      f"on node 1: {share(shared_cold, 1):.1%}; waited {need('WAITED_ROUNDS')} rounds of 2 s")

# One owner, said in one line of the log.
logs = vals.get("POOL_LOG", [])
want = (f"tracked through target {owner} at", f"1 other mapping(s) by target(s) {other}")
if not logs or "/memfd:kv-pool" not in logs[0] or not all(w in logs[0] for w in want):
    problems.append(f"the log should say the pool is tracked through {owner}, mapped by {other} "
                    f"too: {logs}")
targets = {t["pid"]: t for t in json.loads(need("TARGETS"))}
if set(targets) != {pa, pb}:
    problems.append(f"kvtierctl targets should list exactly {pa} and {pb}: {sorted(targets)}")
else:
    # b is a fork of a: the same private mappings; the pool is tracked by the owner alone.
    diff = targets[owner]["tracked_bytes"] - targets[other]["tracked_bytes"]
    if diff != 64 * MiB:
        problems.append(f"the owner tracks {diff} bytes more than the other, not the 64 MiB pool")
    if targets[other]["moved_bytes"] != 0 and targets[other]["tracked_bytes"] == 0:
        problems.append(f"pages moved through {other}, which tracks nothing")
    if not targets[owner]["moved_bytes"] > 0:
        problems.append("nothing moved through the pool's owner")

# kvtier's own accounting, exactly (paused; NUMA balancing off, so every page on node 1 is one
# kvtierd moved there): net bytes moved to node 1 = what kvtierctl targets shows there.
dump = json.loads(need("DUMP"))
def series(name):
    return dump["telemetry"].get(name, {}).get("series", [])
def moved_bytes(node):
    return sum(int(s["value"]) for s in series("kvtier_moved_bytes_total")
               if s["labels"].get("node") == str(node))
net_on1 = moved_bytes(1) - moved_bytes(0)
targets_on1 = sum(t["resident_bytes_per_node"].get("1", 0) for t in targets.values())
pool_on1 = sum(r["nodes"].get("1", 0) for r in [hot_a, hot_b] + cold)
print(f"check_shared_pool: on node 1: kvtierd moved a net {net_on1} B, kvtierctl targets "
      f"{targets_on1} B, the pool {pool_on1} B; {need('STEPS_AFTER_PAUSE')} steps after the pause")
if need("STEPS_AFTER_PAUSE") == "0":
    problems.append("kvtierd ran no step after the pause")
if net_on1 != targets_on1:
    problems.append(f"kvtierd moved a net {net_on1} B to node 1, kvtierctl targets shows {targets_on1} B")
if not 0 < pool_on1 <= targets_on1:
    problems.append(f"{pool_on1} B of the pool on node 1, {targets_on1} B for the targets")
# a sees the same pages as b: its view of its hot part is b's.
if hot_a_via_a["nodes"] != hot_a["nodes"]:
    problems.append(f"a's hot part through a {hot_a_via_a['nodes']} differs from through b "
                    f"{hot_a['nodes']}")
denied = sum(int(s["value"]) for s in series("kvtier_page_moves_total")
             if s["labels"].get("status") == "permission")
if denied:
    problems.append(f"{denied} pages refused with a permission error (MPOL_MF_MOVE_ALL not used?)")

# Placement rests on what DAMON sees under TCG: gates far below the measured runs
# (docs/development.md, "What the tests assert").
# b's hot part stays on node 0 only because b's reads count for the owner's pages: without the
# merge none of it stays (the owner never reads it), so half of it is a safe line between the two.
# Measured over 6 runs: hot a 93.2-100%, hot b 95.6-98.5%, cold 98.2-99.8%, shared cold 100%.
if share(hot_a, 0) < 0.50:
    problems.append(f"only {share(hot_a, 0):.1%} of a's hot part stayed on node 0 (want >= 50%)")
if share(hot_b, 0) < 0.50:
    problems.append(f"only {share(hot_b, 0):.1%} of b's hot part stayed on node 0 (want >= 50%: "
                    "are b's reads merged into the owner's heat?)")
if cold_on_1 < 0.80:
    problems.append(f"only {cold_on_1:.1%} of the cold part reached node 1 (want >= 80%)")
if share(shared_cold, 1) < 0.80:
    problems.append(f"only {share(shared_cold, 1):.1%} of the cold pages both map reached node 1")

# No byte of the pool changed, in either process.
if need("WORKLOAD_EXIT") != "0":
    problems.append(f"the workload exited {vals['WORKLOAD_EXIT'][0]}")
if sorted(verified) != [["a", str(64 * MiB), "0"], ["b", str(64 * MiB), "0"]]:
    problems.append(f"the pool's bytes: {verified} (want 0 bad bytes of {64 * MiB} in a and b)")
else:
    print(f"check_shared_pool: {64 * MiB} bytes verified in each process, 0 differ")
if need("KVTIERD_EXIT") != "0":
    problems.append(f"kvtierd exited {vals['KVTIERD_EXIT'][0]} on SIGTERM")
for p in problems:
    print(f"check_shared_pool: FAIL: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
