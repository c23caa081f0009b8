#!/usr/bin/env bash
# The soak (issue 37): kvsim under kvtierd in the CXL guest for MINUTES (default 30), with a
# fault injected every 10 to 30 s at random from SEED (default: from the clock; printed):
# kvtierd SIGKILLed and restarted by a supervisor loop, kvsim restarted (new pid), the CXL
# node's memory offlined and onlined, the CXL node filled, a bad config reloaded and then
# the good one, 64 idle control-socket clients; a Prometheus scrape every 100 ms. Then it
# asserts no corrupted byte, the kernel's knobs, BPF programs and kdamonds as before, one
# log line per fault, and kvtierd's RSS not grown (tests/vm/check_soak.py).
# Usage: scripts/soak.sh [--minutes N] [--seed S]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
minutes=30
seed=$(($(date +%s) % 100000))
while (($#)); do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "usage: scripts/soak.sh [--minutes N] [--seed S]" >&2; exit 2 ;;
  esac
done
[[ $minutes =~ ^[0-9]+$ && $seed =~ ^[0-9]+$ ]] || { echo "soak: --minutes and --seed take whole numbers" >&2; exit 2; }
echo "soak: seed $seed, $minutes minutes (again: scripts/soak.sh --minutes $minutes --seed $seed)"
export KVTIER_BUILD_DIR=${KVTIER_BUILD_DIR:-$top/build}
# Debian's kernel zeroes every page it allocates (CONFIG_INIT_ON_ALLOC_DEFAULT_ON); on the
# emulated CXL node that is a write at QEMU's MMIO speed, so the node_full fault's fill of
# the node's ~350 MiB did not end in 300 s. init_on_alloc=0 leaves the zeroing to where the
# kernel needs it (a page mapped to a process is still cleared): the fill takes no write.
export KVTIER_VM_APPEND="${KVTIER_VM_APPEND:+$KVTIER_VM_APPEND }init_on_alloc=0"
rc=0
out=$("$top/scripts/vm/run" --cxl --timeout $((minutes * 60 + 600)) -- \
  sh /kvtier/tests/vm/soak_guest.sh "$minutes" "$seed") || rc=$?
if ((rc)); then
  printf '%s\n' "$out"
  echo "soak: the guest failed (exit $rc; 124, 125, 126: the guest, not the code under test)" >&2
  exit "$rc"
fi
printf '%s\n' "$out" | python3 "$top/tests/vm/check_soak.py"
