#!/usr/bin/env python3
"""Judges tests/vm/daemon_guest.sh's output (stdin): kvtierd must have moved
the cold part of kvtier_hotset's buffer to node 1, kept the hot 8 MiB on
node 0, and stopped cleanly (exit 0, kdamond off, socket removed)."""
import json
import sys

vals = {}
for line in sys.stdin:
    key, sep, rest = line.strip().partition("=")
    if sep and key.isupper():
        vals[key] = rest

def need(key):
    if key not in vals:
        sys.exit(f"check_daemon: FAIL: no {key}= line in the guest's output")
    return vals[key]

def share(rec, node):
    total = sum(rec["nodes"].values())
    return rec["nodes"].get(str(node), 0) / total if total else 0.0

hot = json.loads(need("HOT"))
cold = [json.loads(need("COLD_LOW")), json.loads(need("COLD_HIGH"))]
targets = json.loads(need("TARGETS"))
hot_on_0 = share(hot, 0)
cold_bytes = sum(sum(c["nodes"].values()) for c in cold)
cold_on_1 = sum(c["nodes"].get("1", 0) for c in cold) / cold_bytes if cold_bytes else 0.0
print(f"check_daemon: hot 8 MiB on node 0: {hot_on_0:.1%}; cold 56 MiB on node 1: {cold_on_1:.1%}")
problems = []
if hot_on_0 < 0.95:
    problems.append(f"only {hot_on_0:.1%} of the hot set stayed on node 0 (want >= 95%)")
if cold_on_1 < 0.90:
    problems.append(f"only {cold_on_1:.1%} of the cold part reached node 1 (want >= 90%)")
if len(targets) != 1 or targets[0]["comm"] != "kvtier_hotset":
    problems.append(f"kvtierctl targets should list exactly kvtier_hotset: {targets}")
elif targets[0]["resident_bytes_per_node"].get("1", 0) < 0.9 * cold_bytes:
    problems.append("kvtierctl targets does not show the cold bytes on node 1")
elif targets[0]["tracked_bytes"] > 4 * (cold_bytes + sum(hot["nodes"].values())):
    # DAMON's regions span the gaps between mappings; only mappings are tracked.
    problems.append(f"kvtierctl targets tracks {targets[0]['tracked_bytes']} bytes, "
                    "far more than the process maps")
if need("KVTIERD_EXIT") != "0":
    problems.append(f"kvtierd exited {vals['KVTIERD_EXIT']} on SIGTERM")
if need("KDAMONDS_ON") != "0":
    problems.append("a kdamond is still on after kvtierd stopped")
if need("SOCKET_LEFT") != "no":
    problems.append("the control socket was left behind")
for p in problems:
    print(f"check_daemon: FAIL: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
