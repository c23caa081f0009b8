#!/usr/bin/env python3
"""Judges tests/vm/pinned_guest.sh's output (stdin), issue 34: kvtierd reports
the io_uring-registered 18 MiB as pinned (targets, kvtier_pinned_bytes,
explain, status), never asks move_pages for a page of it (no page move has the
status pinned, and the pages moved to node 1 are exactly the unpinned 14 MiB),
and moves the unpinned rest to node 1. Also prints, and holds to what the docs
say, where a buffer written on node 1 (by mbind, and under kvtierctl launch
--node 1) is once pinned."""
import json
import sys

import guest_output

MiB = 1 << 20
vals = guest_output.values(sys.stdin)


def need(key):
    return guest_output.need(vals, key, "check_pinned")


problems = []
kernel = need("KERNEL")
zones = need("NODE1_ZONES").split()
on_node1 = json.loads(need("ON_NODE1"))
before, after = on_node1["pin_nodes_before"], on_node1["pin_nodes_after"]
print(f"check_pinned: kernel {kernel}; node 1's zones with memory: {zones}; a 4 MiB buffer "
      f"written on node 1 (pages per node): {before} before the pin, {after} after")
if before != {"1": 1024}:
    problems.append(f"the buffer bound to node 1 was not all there before the pin: {before}")
# A long-term pin migrates pages out of ZONE_MOVABLE only (mm/gup.c): on a node
# without a movable zone they stay where they are (docs/gpu-servers.md).
movable = any(z.startswith("Movable:") for z in zones)
if not movable and after != before:
    problems.append(f"node 1 has no movable zone, yet the pin moved the buffer: {after}")

launched = json.loads(need("LAUNCHED"))
print(f"check_pinned: the same buffer under kvtierctl launch --node 1: "
      f"{launched['pin_nodes_before']} before the pin, {launched['pin_nodes_after']} after")
if launched["pin_nodes_before"] != {"1": 1024}:
    problems.append(f"kvtierctl launch --node 1 did not place the buffer on node 1: {launched}")
if not movable and launched["pin_nodes_after"] != {"1": 1024}:
    problems.append(f"the launched buffer left node 1 when pinned: {launched}")

hold = json.loads(need("HOLD"))
pinned = hold["pin_end"] - hold["pin_start"]
print(f"check_pinned: fdinfo {need('FDINFO_BUFS')!r}; VmPin {need('VMPIN')}; waited "
      f"{need('WAITED_S')} s for the unpinned part to reach node 1; {need('STEPS')} steps")
targets = json.loads(need("TARGETS"))
if len(targets) != 1:
    sys.exit(f"check_pinned: FAIL: kvtierctl targets should list kvtier_pin_hold alone: {targets}")
t = targets[0]
if abs(t["pinned_bytes"] - pinned) >= 4096:
    problems.append(f"targets: pinned_bytes {t['pinned_bytes']}, the registered buffer {pinned}")
if t["pinned_by"] != "io_uring registered buffers":
    problems.append(f"targets: pinned_by {t['pinned_by']!r}")
dump = json.loads(need("DUMP"))
tele = dump["telemetry"]
gauge = sum(s["value"] for s in tele.get("kvtier_pinned_bytes", {}).get("series", []))
node0 = [s for s in tele.get("kvtier_pinned_bytes", {}).get("series", [])
         if s["labels"] == {"group": "pinned", "node": "0"}]
if gauge != pinned or len(node0) != 1 or node0[0]["value"] != pinned:
    problems.append(f"kvtier_pinned_bytes: {tele.get('kvtier_pinned_bytes')}, want {pinned} on node 0")
moves = tele.get("kvtier_page_moves_total", {}).get("series", [])
by_status = {}
for s in moves:
    key = (s["labels"].get("node"), s["labels"].get("status"))
    by_status[key] = by_status.get(key, 0) + int(s["value"])
print(f"check_pinned: page moves by (node, status): {by_status}")
if any(status == "pinned" and n for (_, status), n in by_status.items()):
    problems.append("move_pages was asked for pinned pages")
moved1 = by_status.get(("1", "moved"), 0) - by_status.get(("0", "moved"), 0)
if moved1 * 4096 != 14 * MiB:
    problems.append(f"a net {moved1 * 4096} B moved to node 1, want exactly the unpinned 14 MiB")
def json_lines(text):
    """The JSON objects of kvtier_page_nodes' lines, joined into one."""
    out, pos, dec = [], 0, json.JSONDecoder()
    while pos < len(text):
        obj, pos = dec.raw_decode(text, pos)
        out.append(obj)
    return out


unpinned = json_lines(need("UNPINNED"))
on1 = sum(r["nodes"].get("1", 0) for r in unpinned)
if on1 != 14 * MiB:
    problems.append(f"{on1} B of the unpinned 14 MiB on node 1")
pinned_now = json.loads(need("PINNED"))
if pinned_now["nodes"] != {"0": pinned}:
    problems.append(f"the pinned range is not all on node 0: {pinned_now}")
runs = json.loads(need("EXPLAIN"))["ranges"]
said = [r for r in runs if r["why"] ==
        "long-term pinned (io_uring registered buffer): not movable; see docs/gpu-servers.md"]
if sum(r["end"] - r["start"] for r in said) != pinned:
    problems.append(f"explain: the pinned runs {said}")
if need("STATUS_PINNED") != "1":
    problems.append("kvtierctl status has no pinned line")

for p in problems:
    print(f"check_pinned: FAIL: {p}")
sys.exit(1 if problems else 0)
