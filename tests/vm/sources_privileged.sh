#!/usr/bin/env bash
# vm test: the privileged source tests (tests/privileged/sources_test.cpp) on
# the guest's 6.12 kernel, so every BPF program is shown to load, attach and
# count right on a kernel other than the one its vmlinux.h came from (CO-RE).
# NUMA balancing off: its hint faults would add pages to the samplers' exact page sets.
set -euo pipefail
src=${KVTIER_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
run=${KVTIER_VM_RUN:-$src/scripts/vm/run}
# DamonSource.CommitsNewRangesWithoutWaitingForTheKdamond plays DAMON's sysfs tree from the
# repository's fixtures (not in the guest) and tests kvtier's own threading, not the kernel: it
# runs on the host (ctest -L privileged); the guest's DAMON commits are vm.sources_damon's.
"$run" --timeout 300 -- sh -c 'echo 0 > /proc/sys/kernel/numa_balancing && exec privileged_sources --gtest_filter=-DamonSource.CommitsNewRangesWithoutWaitingForTheKdamond'
