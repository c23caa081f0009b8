#!/usr/bin/env bash
# Runs kvtier's image (scripts/image.sh) on this host the way deploy/kubernetes runs it: host
# PID namespace, all capabilities dropped but BPF, PERFMON, SYS_PTRACE and SYS_NICE, a
# read-only root, DAMON's sysfs and tracefs from the host, the config and the socket directory
# as volumes. Checks that kvtierctl status answers inside, that kvtierd finds a process of the
# host, that the config reloader container reloads kvtierd when the mounted config is swapped
# the way the kubelet swaps a ConfigMap, and that SIGTERM through tini stops kvtierd cleanly.
# Seccomp: the runtime's default profile refuses bpf(2) without CAP_SYS_ADMIN (shown first),
# so kvtierd runs under scripts/seccomp-profile.sh's profile, as the DaemonSet does.
# Prints the start time (podman run to the first answer of kvtierctl status).
# Usage: scripts/image-check.sh   (root; env KVTIER_IMAGE, default localhost/kvtier:dev)
set -euo pipefail
image=${KVTIER_IMAGE:-localhost/kvtier:dev}
name=kvtier-check-$$
fail() { echo "image-check: FAIL: $*"; exit 1; }

podman image exists "$image" || fail "no image $image (scripts/image.sh builds it)"
# crun refuses hosts with cgroup v1 and v2 mounted side by side ("hybrid"); runc runs there.
runtime=()
if [[ -d /sys/fs/cgroup/unified ]] && command -v runc >/dev/null; then runtime=(--runtime runc); fi
# Podman raises RLIMIT_NOFILE/NPROC to its defaults, which fails without CAP_SYS_RESOURCE
# (a session in a container): ask for no more than this shell has.
ulimits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=1024:1024")

tmp=$(mktemp -d)
target_pid=
cleanup() {
  podman rm -f "$name" "$name-reloader" >/dev/null 2>&1 || true
  [[ -n $target_pid ]] && kill "$target_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# A process of the host for kvtierd to find, named so nothing else matches.
cp /bin/sleep "$tmp/kvtier-canary"
"$tmp/kvtier-canary" 600 &
target_pid=$!

# The ConfigMap's layout: kvtier.toml -> ..data/kvtier.toml, ..data -> ..<timestamp>.
config() {
  cat <<EOF
[daemon]
interval = "$1"
[telemetry]
socket_group = "root"
[tiering]
numa_balancing = "keep"
promote_threshold = "keep"
scan_period_min = "keep"
scan_period_max = "keep"
[[group]]
name = "canary"
[group.select]
comm = ["^kvtier-canary\$"]
EOF
}
swap_config() {  # $1: version name, $2: content
  mkdir "$tmp/etc/..$1"
  printf '%s\n' "$2" >"$tmp/etc/..$1/kvtier.toml"
  ln -sfn "..$1" "$tmp/etc/..data_tmp"
  mv -T "$tmp/etc/..data_tmp" "$tmp/etc/..data"
}
mkdir -p "$tmp/etc" "$tmp/run"
swap_config v1 "$(config 2s)"
ln -s ..data/kvtier.toml "$tmp/etc/kvtier.toml"

common=("${runtime[@]}" "${ulimits[@]}" --pid=host --cap-drop=all --read-only
  --security-opt=no-new-privileges -v "$tmp/etc:/etc/kvtier:ro" -v "$tmp/run:/run/kvtier")
kvtierd=(--cap-add=CAP_BPF,CAP_PERFMON,CAP_SYS_PTRACE,CAP_SYS_NICE
  -v /sys/kernel/mm/damon:/sys/kernel/mm/damon:rw -v /sys/kernel/tracing:/sys/kernel/tracing:ro)
"$(dirname "$0")/seccomp-profile.sh" >"$tmp/seccomp.json"

# Under the runtime's default seccomp profile the samplers cannot load.
podman run -d --name "$name" "${common[@]}" "${kvtierd[@]}" "$image" --config /etc/kvtier/kvtier.toml >/dev/null
for _ in $(seq 100); do
  podman logs "$name" 2>&1 | grep -q "control loop\|source .* started" && break
  sleep 0.2
done
if podman logs "$name" 2>&1 | grep -q "Operation not permitted"; then
  echo "image-check: under the default seccomp profile: $(podman logs "$name" 2>&1 | grep -m1 'control loop')"
else
  echo "image-check: note: the default seccomp profile let the samplers load here"
fi
podman rm -f "$name" >/dev/null
rm -f "$tmp/run/kvtierd.sock"

t0=$(date +%s%N)
podman run -d --name "$name" "${common[@]}" "${kvtierd[@]}" \
  --security-opt "seccomp=$tmp/seccomp.json" \
  "$image" --config /etc/kvtier/kvtier.toml >/dev/null ||
  fail "podman run $image (see the error above)"
ctl=(podman exec "$name" kvtierctl --socket /run/kvtier/kvtierd.sock)
for _ in $(seq 600); do
  "${ctl[@]}" status >/dev/null 2>&1 && break
  podman container exists "$name" && [[ $(podman inspect -f '{{.State.Running}}' "$name") == true ]] ||
    { podman logs "$name"; fail "kvtierd exited"; }
  sleep 0.1
done
t1=$(date +%s%N)
"${ctl[@]}" status || { podman logs "$name"; fail "kvtierctl status does not answer inside"; }
# A step has run with the sources started: nothing refused.
for _ in $(seq 100); do
  [[ $("${ctl[@]}" status --json | jq '.loop.steps') -ge 2 ]] && break
  sleep 0.2
done
if podman logs "$name" 2>&1 | grep -q "Operation not permitted"; then
  podman logs "$name"; fail "the kernel refused kvtierd something under its own seccomp profile"
fi
podman logs "$name" 2>&1 | grep -E "hotness sources|source .* started" | sed 's/^/image-check: /' 
echo "image-check: kvtierctl status answered $(((t1 - t0) / 1000000)) ms after podman run"

# The canary: found in the host's PID namespace.
for _ in $(seq 100); do
  "${ctl[@]}" targets --json | jq -e --argjson p "$target_pid" 'any(.[]?; .pid == $p)' >/dev/null 2>&1 && break
  sleep 0.2
done
"${ctl[@]}" targets || true
"${ctl[@]}" targets --json | jq -e --argjson p "$target_pid" 'any(.[]?; .pid == $p)' >/dev/null ||
  { "${ctl[@]}" targets --json; fail "kvtierd did not find the host process $target_pid"; }
echo "image-check: kvtierd found the host's process $target_pid (kvtier-canary)"
podman exec "$name" cat /proc/self/status | grep -E '^Cap(Eff|Bnd)' | sed 's/^/image-check: exec /'

# The config reloader beside it, as the DaemonSet's second container.
podman run -d --name "$name-reloader" "${common[@]}" -e KVTIER_SOCKET=/run/kvtier/kvtierd.sock \
  --entrypoint /usr/bin/tini "$image" -s -- kvtier-config-reloader /etc/kvtier >/dev/null
sleep 2
swap_config v2 "$(config 3s)"
for _ in $(seq 100); do
  podman logs "$name" 2>&1 | grep -q "configuration reloaded" && break
  sleep 0.2
done
podman logs "$name-reloader"
podman logs "$name" 2>&1 | grep -q "configuration reloaded" ||
  { podman logs "$name"; fail "swapping the mounted config did not reload kvtierd"; }
echo "image-check: a swapped config (..data) reloaded kvtierd without a restart"

# SIGTERM through tini.
podman stop -t 30 "$name" >/dev/null
code=$(podman inspect -f '{{.State.ExitCode}}' "$name")
podman logs "$name" 2>&1 | tail -3
[[ $code == 0 ]] || fail "kvtierd exited $code on podman stop"
podman logs "$name" 2>&1 | grep -q "SIGTERM: stopping" || fail "kvtierd did not log SIGTERM"
echo "image-check: podman stop: SIGTERM forwarded by tini, kvtierd exited 0"
echo "image-check: OK"
