"""Constants and the readers of a run's files: the guest's JSON lines, kvsim's truth CSV."""

import json

PAGE = 4096
MIB = 1 << 20
MODE_TITLES = {
    "none": "no tiering",
    "kernel": "kernel tiering (NUMA balancing 2 + demotion)",
    "damos": "DAMOS migrate_cold/hot alone",
    "damos-goal": "DAMOS vaddr migrate_hot/cold + node 0 memory goal",
    "oracle": "oracle (placement from kvsim's ground truth)",
    "kvtier": "kvtier",
}
DRAM_NODE = "0"
CXL_NODE = "1"


def read_events(path):
    """JSON lines of one mode's guest output; other lines (noise) are skipped."""
    events = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def pick(events, src, event):
    return [e for e in events if e.get("src") == src and e.get("event") == event]


def first(events, src, event):
    found = pick(events, src, event)
    return found[0] if found else None
