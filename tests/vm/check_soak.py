#!/usr/bin/env python3
"""Judges tests/vm/soak_guest.sh's output (stdin), issue 37 part 3: kvsim under kvtierd with
faults injected at random (seeded). Asserted exactly: every kvsim run ended with no corrupted
byte (it verifies what it reads, and its whole pool when it stops); the kernel's knobs, the
BPF programs loaded and the kdamonds on are what they were before kvtierd first started;
kvtierd started once more than it was SIGKILLed, the supervisor saw each end; one 'reload
rejected' per bad reload, one 'no longer a demotion target' and one 'demotion target again'
per node offline and online; each time the CXL node was filled, kvtierd stopped its plan at
the node's fill limit or met ENOMEM within 120 s, left an idle buffer off the node, and moved
all of it there once the node was freed, no byte of it changed; kvtierd answered after each burst of idle clients and runs at
the end. Printed: the faults by kind, the bytes verified, the scrapes, kvtierd's RSS over time;
its RSS at the end is held to at most twice that at the start (a leak, not noise)."""
import collections
import json
import sys

lines = sys.stdin.read().splitlines()
vals = {}
faults = []
rss = []
gone_lines = []
for line in lines:
    key, sep, rest = line.strip().partition("=")
    if not sep or not key.isupper():
        continue
    if key == "FAULT":
        faults.append(rest.split())
    elif key == "LOG_TARGET_GONE":
        gone_lines.append(rest.split())
    elif key == "RSS_KB":
        rss.append(rest)
    else:
        vals[key] = rest


def need(key):
    if key not in vals:
        sys.exit(f"check_soak: FAIL: no {key}= line in the guest's output")
    return vals[key]


problems = []
cxl = need("CXL_NODE")
kinds = collections.Counter(f[0] for f in faults)
print(f"check_soak: seed {need('SEED')}, {need('MINUTES')} minutes, CXL node {cxl}; faults "
      f"injected: {dict(sorted(kinds.items()))} ({len(faults)} in all)")

ends = [json.loads(e) for e in need("KVSIM_ENDS").split()]
verified = sum(e["verified_bytes"] for e in ends)
corrupted = sum(e["corrupted_bytes"] for e in ends)
print(f"check_soak: {len(ends)} kvsim runs, {verified} bytes verified "
      f"({verified / 2**30:.2f} GiB), {corrupted} corrupted, "
      f"{sum(e['steps'] for e in ends)} decode steps")
if corrupted or any(e["result"] != "ok" for e in ends):
    problems.append(f"kvsim found corrupted bytes: {[e for e in ends if e['result'] != 'ok']}")
if len(ends) != kinds["target_restart"] + 1:
    problems.append(f"{len(ends)} kvsim end events, want {kinds['target_restart'] + 1}")
if verified == 0:
    problems.append("kvsim verified no byte")

for what in ("KNOBS", "BPF", "KDAMONDS"):
    before, after = need(f"{what}_BEFORE"), need(f"{what}_AFTER")
    print(f"check_soak: {what.lower()} before kvtierd: {before}; after: {after}")
    if before != after:
        problems.append(f"{what.lower()} not as before kvtierd: {before!r} -> {after!r}")

kills = kinds["kill"]
if int(need("LOG_STARTS")) != kills + 1:
    problems.append(f"kvtierd logged {need('LOG_STARTS')} starts for {kills} SIGKILLs, want {kills + 1}")
if int(need("SUPERVISOR")) != kills + 1:
    problems.append(f"the supervisor saw kvtierd end {need('SUPERVISOR')} times, want {kills + 1}")
if int(need("LOG_RELOAD_REJECTED")) != kinds["reload"]:
    problems.append(f"{need('LOG_RELOAD_REJECTED')} 'reload rejected' lines for {kinds['reload']} "
                    "bad reloads")
offline = [f for f in faults if f[0] == "node_offline"]
full_off = [f for f in offline if set(f[1:f.index("|")]) == {"offline"}]
for f in offline:
    seen_gone, seen_back = f[-2], f[-1]
    print(f"check_soak: node {cxl} offline: blocks {' '.join(f[1:f.index('|')])}; kvtierd saw it "
          f"gone in {seen_gone} s and back in {seen_back} s")
    if f in full_off and "never" in (seen_gone, seen_back):
        problems.append(f"kvtierd did not report node {cxl} gone and back within 120 s: {f}")
if int(need("LOG_TOPOLOGY_LOST")) != len(full_off) or int(need("LOG_TOPOLOGY_BACK")) != len(full_off):
    problems.append(f"{need('LOG_TOPOLOGY_LOST')} lost and {need('LOG_TOPOLOGY_BACK')} back "
                    f"topology lines for {len(full_off)} full offlines")
for f in faults:
    if f[0] == "node_full":
        # FAULT=node_full FREE_KB LEFT_KB FILL_S HOW SEEN_S HELD_BYTES BACK_S NO_MEMORY FULL_LINES
        #   CHECKED CORRUPTED [THERE_BYTES: on the node when the wait for BACK_S ended]
        free_kb, left_kb, fill_s, how, seen_s, held, back_s, nomem, full, checked, bad = f[1:12]
        there = f[12] if len(f) > 12 else "?"
        print(f"check_soak: node {cxl} full: {free_kb} kB filled in {fill_s} s, {left_kb} kB "
              f"left free; kvtierd: {how} after {seen_s} s ({nomem} no_memory pages, {full} "
              f"'is full' lines), the buffer's bytes there meanwhile {held}; freed, all of it "
              f"there in {back_s} s ({there} bytes there then); {checked} bytes checked, {bad} "
              "corrupted")
        if how == "never":
            problems.append(f"node {cxl} filled, and kvtierd neither stopped its plan at the "
                            f"node's fill limit nor met ENOMEM within 120 s: {f}")
        if int(held) >= 16 << 20:
            problems.append(f"the whole buffer went to the full node {cxl}: {f}")
        if back_s == "never":
            problems.append(f"node {cxl} freed, and the buffer did not all reach it within the wait: {f}")
        if bad != "0" or checked in ("-", "0"):
            problems.append(f"the buffer demoted to the full node was not verified clean: {f}")
    if f[0] == "idle_clients" and f[-1] != "1":
        problems.append(f"kvtierctl status failed after 64 idle clients: {f}")
    if f[0] == "idle_clients" and f[-2] != "1":
        problems.append(f"kvtierctl status got no answer while 64 idle clients held the socket: "
                        f"{f}")
# A restarted target: kvtierd saw the old pid go exactly once (one 'is gone' line).
if len(gone_lines) != kinds["target_restart"] or any(n != "1" for _, n in gone_lines):
    problems.append(f"'target PID (kvsim) is gone' lines per restarted pid: {gone_lines}, want "
                    f"one for each of {kinds['target_restart']} restarts")
# kvtierd plans no demotion to a node its last read found full (the fill limit), so a move
# meets ENOMEM only when the node filled between that read and the move: printed.
print(f"check_soak: 'node {cxl} is full' lines (ENOMEM met by a move): {need('LOG_NODE_FULL')}")
if kinds["idle_clients"] and int(need("LOG_ROOT_ROOM")) == 0:
    problems.append("64 idle clients, and kvtierd never logged closing one to make room for root")

ok, failed = need("SCRAPES").split()
print(f"check_soak: Prometheus scrapes every 100 ms: {ok} ok, {failed} failed (kvtierd down "
      f"between a SIGKILL and its restart); the last error: {vals.get('SCRAPE_LAST_ERROR')!r}")
if int(ok) == 0:
    problems.append("no Prometheus scrape succeeded")
status = json.loads(need("STATUS_END") or "{}")
if not status:
    problems.append(f"kvtierctl status --json got no answer at the end in "
                    f"{vals.get('STATUS_END_TRIES')} tries")
elif status.get("loop", {}).get("topology", {}).get("demotion_targets") != [int(cxl)]:
    problems.append(f"kvtierd at the end: {status.get('loop', {}).get('topology')}")
start_kb, end_kb = int(need("RSS_START_KB")), int(need("RSS_END_KB"))
print(f"check_soak: kvtierd RSS: start {start_kb} kB, end {end_kb} kB; over time (uptime s, kB): "
      f"{'; '.join(rss)}")
if end_kb > 2 * start_kb:
    problems.append(f"kvtierd's RSS grew from {start_kb} to {end_kb} kB")
print(f"check_soak: kvtierd error lines: {need('LOG_ERRORS')}")

for p in problems:
    print(f"check_soak: FAIL: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print("check_soak: ok")
