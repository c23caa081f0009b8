#!/usr/bin/env bash
# Prints kvtierd's seccomp profile: a container runtime's default profile with bpf(2) and
# perf_event_open(2) allowed outright. The defaults allow both only to CAP_SYS_ADMIN, which
# kvtierd does not hold in a container (it has CAP_BPF and CAP_PERFMON, as the kernel asks);
# under the plain default its samplers fail with EPERM (scripts/image-check.sh shows it).
# This is the systemd unit's SystemCallFilter=@system-service bpf perf_event_open, in a
# runtime's terms. Usage: scripts/seccomp-profile.sh [DEFAULT_PROFILE]
# (default /usr/share/containers/seccomp.json, Debian's containers-common: podman, CRI-O).
set -euo pipefail
base=${1:-/usr/share/containers/seccomp.json}
[[ -r $base ]] || { echo "seccomp-profile: cannot read $base (apt-get install golang-github-containers-common)" >&2; exit 1; }
jq '
  .syscalls |= map(.names -= ["bpf", "perf_event_open"] | select(.names | length > 0))
  | .syscalls += [{"names": ["bpf", "perf_event_open"], "action": "SCMP_ACT_ALLOW",
                   "comment": "kvtierd: its BPF samplers, with CAP_BPF and CAP_PERFMON"}]
' "$base"
