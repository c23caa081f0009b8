#!/usr/bin/env python3
"""Judges tests/vm/topology_guest.sh's output (stdin), issue 37 part 2: with
an idle 16 MiB buffer on the CXL node, its memory blocks offlined (all but one,
then all) and onlined again under a running kvtierd. Asserted exactly: the
buffer's pages are all on node 0 or the CXL node at every point, none lost; once
all blocks are offline every page is on node 0 and kvtierd reports the node
gone (status, its JSON, kvtier_demotion_targets 0, one log line) within a few
of its steps of the offline (exactly the next one in the unit test) and moves no
byte over five steps; once onlined, it is a demotion target again (one log line)
and the whole buffer goes back there, with no restart; no byte of the buffer
changed."""
import json
import sys

import guest_output

MiB = 1 << 20
BUF = 16 * MiB
vals = guest_output.values(sys.stdin)


def need(key):
    return guest_output.need(vals, key, "check_topology")


problems = []
cxl = need("CXL_NODE")


def nodes(key):
    r = json.loads(need(key))
    return {k: v for k, v in r["nodes"].items() if v}, r.get("not_present", 0)


print(f"check_topology: CXL node {cxl}, blocks {need('BLOCKS')}; 32 MiB written and read there "
      f"in {vals.get('FILL32_ON_CXL_S')} s; the buffer reached it in {need('DEMOTED_WAIT_S')} s")
if need("TARGETS_START") != cxl:
    problems.append(f"kvtierd's demotion targets at start: {need('TARGETS_START')!r}, want {cxl}")

part, gone_part = nodes("PART_NODES")
print(f"check_topology: all blocks but the last offline ({need('PART_STATES')}): the buffer "
      f"{part}, node {cxl} MemTotal {need('PART_MEMTOTAL')} kB; back on node {cxl} in "
      f"{need('PART_REDEMOTED_WAIT_S')} s")
# kvtierd demotes again at once: a page it is migrating reads as not present (a migration
# entry; 1.2 MiB in one run). Every byte is checked at the end.
if sum(part.values()) + gone_part != BUF or set(part) - {"0", cxl}:
    problems.append(f"after the partial offline the buffer is {part} (not present {gone_part})")
if need("TARGETS_PART") != cxl:
    problems.append(f"node {cxl} with one block online is no demotion target: {need('TARGETS_PART')!r}")
if int(need("PART_REDEMOTED_WAIT_S")) >= 600:
    problems.append(f"kvtierd did not demote the buffer to what was left of node {cxl}")

all_nodes, _ = nodes("ALL_NODES")
gone_nodes, _ = nodes("GONE_NODES")
print(f"check_topology: all blocks offline ({need('ALL_STATES')}), node {cxl} MemTotal "
      f"{need('ALL_MEMTOTAL')} kB: the buffer {all_nodes}; kvtierd's steps at the offline, "
      f"after it, when it reported it: {need('STEPS_OFFLINE')}")
offline_refused = "online" in need("ALL_STATES").split()[-1]
if offline_refused:
    print(f"check_topology: the kernel refused to offline the last block: {need('ALL_STATES')}")
else:
    if need("ALL_MEMTOTAL") != "0":
        problems.append(f"every block offline, yet node {cxl} has {need('ALL_MEMTOTAL')} kB")
    if all_nodes != {"0": BUF} or gone_nodes != {"0": BUF}:
        problems.append(f"node {cxl} offline, the buffer is {all_nodes}, then {gone_nodes}: "
                        "want all 16 MiB on node 0")
    s_off, s_done, s_seen = map(int, need("STEPS_OFFLINE").split())
    # The step after the offline sees it (asserted exactly in unit_controller's
    # ANodeWhoseMemoryGoesOfflineGetsNothingUntilItIsBack); here the steps are read by polling
    # kvtierctl, which lags under load: 1, 1 and 2 steps in three runs, gated at 5.
    if s_seen - s_done > 5:
        problems.append(f"kvtierd reported node {cxl} gone {s_seen - s_done} steps after the offline")
    moved = need("MOVED_WHILE_GONE").split()
    print(f"check_topology: moved bytes while the node was gone: {moved[0]} -> {moved[1]} over "
          f"{moved[3]} steps")
    if moved[0] != moved[1]:
        problems.append(f"kvtierd moved bytes while node {cxl} was gone: {moved[0]} -> {moved[1]}")
    if int(moved[3]) < 5:
        problems.append(f"kvtierd ran only {moved[3]} steps while node {cxl} was gone")
    st = json.loads(need("GONE_STATUS"))
    topo = st.get("loop", st).get("topology") if isinstance(st, dict) else None
    lost = [t["node"] for t in (topo or {}).get("lost_targets", [])]
    if not topo or topo.get("demotion_targets") != [] or lost != [int(cxl)]:
        problems.append(f"status --json topology while node {cxl} was gone: {topo}")
    if need("GONE_STATUS_TEXT") != "1":
        problems.append(f"kvtierctl status has {need('GONE_STATUS_TEXT')} lines saying node {cxl} "
                        "is no longer a demotion target, want 1")
    tele = json.loads(need("GONE_DUMP"))["telemetry"]
    series = tele.get("kvtier_demotion_targets", {}).get("series", [])
    if [s["value"] for s in series] != [0]:
        problems.append(f"kvtier_demotion_targets while node {cxl} was gone: {series}")
    if need("LOG_LOST") != "1":
        problems.append(f"{need('LOG_LOST')} log lines say node {cxl} is no longer a demotion "
                        "target, want 1")
    if need("LOG_BACK") != "1":
        problems.append(f"{need('LOG_BACK')} log lines say node {cxl} is a demotion target "
                        "again, want 1")

online, _ = nodes("ONLINE_NODES")
print(f"check_topology: onlined again: the buffer back on node {cxl} in "
      f"{need('ONLINE_REDEMOTED_WAIT_S')} s: {online}")
if online != {cxl: BUF}:
    problems.append(f"node {cxl} onlined again, the buffer is {online}: want all on node {cxl}")
ost = json.loads(need("ONLINE_STATUS"))
otopo = ost.get("loop", ost).get("topology", {})
if otopo.get("demotion_targets") != [int(cxl)] or otopo.get("lost_targets") != []:
    problems.append(f"status --json topology once onlined: {otopo}")
if vals.get("KVTIERD_ALIVE") != "1":
    problems.append("kvtierd was not running at the end")
if need("KVTIERD_STATUS") != "0":
    problems.append(f"kvtierd exited {need('KVTIERD_STATUS')} on SIGTERM")
fill = json.loads(need("FILL"))
print(f"check_topology: {fill['checked_bytes']} bytes checked, {fill['corrupted_bytes']} corrupted; "
      f"log lines: {need('LOG_PART')} memory changes, {need('LOG_LOST')} lost, {need('LOG_BACK')} back")
if need("FILL_STATUS") != "0" or fill["corrupted_bytes"] != 0 or fill["checked_bytes"] != BUF:
    problems.append(f"the buffer's check: status {need('FILL_STATUS')}, {fill}")

for p in problems:
    print(f"check_topology: FAIL: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print("check_topology: ok")
