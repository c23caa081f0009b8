#!/usr/bin/env python3
"""Judges tests/vm/kernel_refuses_guest.sh's output (stdin), issue 37 part 4. Asserted
exactly: with another user's kdamond on before kvtierd started, kvtierd logged one 'source
damon refused by the kernel: DAMON busy' line, status has the degraded line and damon in
refused_sources, the damon source is not among those running and others are; the idle
16 MiB buffer is all on node 1 (kvtierd tiered with the other sources); the other user's
kdamond is on with the same pid after kvtierd stopped (exit 0); the buffer's bytes are
unchanged. With lockdown=confidentiality (where the guest kernel has the lockdown LSM):
one lockdown line per refused source in the log, damon in refused_sources with the
lockdown reason, the process watcher's reason in the targets line, kvtierd stepping and
exiting 0. Printed: the seconds the buffer took, the sources that ran."""
import json
import sys

import guest_output

vals = guest_output.values(sys.stdin)


def need(key):
    return guest_output.need(vals, key, "check_kernel_refuses")


problems = []
other = need("OTHER_KDAMOND").split()
if other[0] != "on":
    sys.exit(f"check_kernel_refuses: FAIL: the hand-started kdamond is not on: {other}")
status = json.loads(need("BUSY_STATUS"))
loop = status["loop"]
running = [s["name"] for s in loop["sources"]]
refused = loop.get("refused_sources", [])
print(f"check_kernel_refuses: DAMON busy (kdamond pid {other[1]}): sources running {running}, "
      f"refused {refused}; the buffer on node 1 in {need('DEMOTED_WAIT_S')} s")
if not any(r["source"] == "damon" and r["why"].startswith("DAMON busy: all 1 kdamonds are on")
           for r in refused):
    problems.append(f"damon not in refused_sources as busy: {refused}")
if not any("source damon refused by the kernel: DAMON busy" in d for d in loop["degraded"]):
    problems.append(f"no degraded line for DAMON busy: {loop['degraded']}")
if "damon" in running or not running:
    problems.append(f"sources running with DAMON busy: {running}")
if need("BUSY_LOG") != "1":
    problems.append(f"{need('BUSY_LOG')} 'DAMON busy' log lines, want 1")
if int(need("ON_NODE1")) != 16 << 20:
    problems.append(f"the idle buffer: {need('ON_NODE1')} bytes on node 1, want {16 << 20}")
if need("BUSY_KVTIERD_EXIT") != "0":
    problems.append(f"kvtierd exited {need('BUSY_KVTIERD_EXIT')}")
if need("OTHER_KDAMOND_AFTER").split() != other:
    problems.append(f"the other user's kdamond: {other} before, {need('OTHER_KDAMOND_AFTER')} "
                    "after kvtierd")

lock = need("LOCKDOWN")
if lock.startswith("unavailable"):
    print(f"check_kernel_refuses: lockdown not tested: {lock}")
else:
    st = json.loads(need("LOCKDOWN_STATUS"))
    lp = st["loop"]
    refused = lp.get("refused_sources", [])
    print(f"check_kernel_refuses: lockdown ({lock}): sources running "
          f"{[s['name'] + (' failed: ' + s['error'] if s.get('error') else '') for s in lp['sources']]}, "
          f"refused {[r['source'] for r in refused]}; targets found by {lp['discovery']['how']}; "
          f"{need('LOCKDOWN_STEPS')} steps; {need('LOCKDOWN_LOG')} lockdown log lines")
    if not any(r["source"] == "damon" and "kernel lockdown is confidentiality" in r["why"]
               for r in refused):
        problems.append(f"damon not refused for the lockdown: {refused}")
    if "kernel lockdown is confidentiality" not in lp["discovery"]["how"]:
        problems.append(f"the process watcher's reason: {lp['discovery']['how']}")
    if int(need("LOCKDOWN_LOG")) != len(refused):
        problems.append(f"{need('LOCKDOWN_LOG')} lockdown log lines for {len(refused)} refused "
                        "sources")
    if int(need("LOCKDOWN_STEPS") or 0) < 3:
        problems.append(f"kvtierd under lockdown made {need('LOCKDOWN_STEPS')} steps")
    if need("LOCKDOWN_KVTIERD_EXIT") != "0":
        problems.append(f"kvtierd under lockdown exited {need('LOCKDOWN_KVTIERD_EXIT')}")

fill = json.loads(need("FILL_CHECK"))
if fill.get("corrupted_bytes") != 0 or fill.get("checked_bytes") != 16 << 20:
    problems.append(f"the buffer's bytes: {fill}")
for p in problems:
    print(f"check_kernel_refuses: FAIL: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print("check_kernel_refuses: ok")
