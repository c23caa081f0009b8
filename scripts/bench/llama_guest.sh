#!/bin/sh
# shellcheck disable=SC1091,SC2046,SC2086,SC2154 # llama_lib.sh sets the layout's variables.
# Guest side of scripts/bench.sh --workload llama-server: one mode against Debian's
# llama-server (the /llama root of scripts/vm/llama-root.sh) driven by kvtier_llama_load.
# Usage: sh llama_guest.sh MODE DURATION
#   MODE  none    no tiering
#         kernel  numa_balancing=2 + demotion_enabled (the kernel's own tiering)
#         kvtier  kvtierd with the shipped config (systemd/kvtier.toml; only its socket group
#                 is root's, the guest has no kvtier group); KVTIER_SED='SCRIPT' edits it
#                 further (sed -e SCRIPT) for experiments, e.g. 's/^kind = .*/kind = "dry-run"/'
#                 (kvtierctl config check must accept the result); KVTIER_NICE=N runs kvtierd
#                 at nice N
# The server runs as vm.llama_server's (12 slots of 8 Ki cells, 384 MiB of KV), with --metrics
# and its RAM prompt cache at its default. The clients replay bench/traces' Mooncake
# conversations (LOAD_* below) for DURATION s; kvtier_llama_load samples the KV buffer's
# ground truth each second. Then fixed prompts at temperature 0, one at a time (integrity).
# Output on stdout, JSON lines: kvtier_llama_load's ("type": request, metrics, truth, summary,
# integrity) and this script's {"type":"bench","event":...} (layout, cpu, kvtierd, error).
set -u
mode=${1:?mode}
duration=${2:?duration}
LOAD_CLIENTS=${LOAD_CLIENTS:-0} # 0: one per conversation, each turn sent when due (open loop)
LOAD_CONVERSATIONS=${LOAD_CONVERSATIONS:-16}
LOAD_SPEED=${LOAD_SPEED:-4}
LOAD_BLOCK_CHARS=${LOAD_BLOCK_CHARS:-1}
LOAD_MAX_PREDICT=${LOAD_MAX_PREDICT:-8}
LOAD_INTEGRITY=${LOAD_INTEGRITY:-4}
LOAD_SERVER_OPTS=${LOAD_SERVER_OPTS:-} # more llama-server options, such as --cache-ram 0
COLD_AGE_S=${COLD_AGE_S:-10}
. /kvtier/tests/vm/llama_lib.sh

emit() { echo "{\"type\":\"bench\",\"mode\":\"$mode\",$1}"; }
die() {
  emit "\"event\":\"error\",\"what\":\"$1\""
  tail -n 5 /tmp/server.log >&2
  exit 1
}
# utime + stime of a process, in clock ticks.
ticks() { awk '{print $14 + $15}' /proc/$1/stat 2>/dev/null || echo 0; }

llama_mounts
echo never >/sys/kernel/mm/transparent_hugepage/enabled
echo 0 >/proc/sys/kernel/numa_balancing
echo false >/sys/kernel/mm/numa/demotion_enabled
start_server --metrics $LOAD_SERVER_OPTS || die "llama-server exited or not healthy within 600 s"
[ -n "$kv_map_start" ] || die "no anonymous mapping holds the KV buffer"
printf 'Where is the buffer?' >/tmp/p0
find_layout $((NP - 1)) /tmp/p0 /tmp/l.json || die "the KV buffer's layout not found (find_layout $?)"
emit "\"event\":\"layout\",\"kv_bytes\":$kv_bytes,\"kv_data\":$((0x$kv_start + 64)),\"slots\":$NP,\"cells\":$CELLS,\"node0_kib\":$(awk '/MemTotal/ {print $4}' /sys/devices/system/node/node0/meminfo),\"pid\":$spid"

case $mode in
  none) ;;
  kernel)
    echo 2 >/proc/sys/kernel/numa_balancing
    echo true >/sys/kernel/mm/numa/demotion_enabled
    ;;
  kvtier)
    sed -e 's/^socket_group = .*/socket_group = "root"/' -e "${KVTIER_SED:-}" /kvtier/systemd/kvtier.toml >/tmp/kvtier.toml
    kvtierctl config check /tmp/kvtier.toml >&2 || die "the edited config does not check (KVTIER_SED='${KVTIER_SED:-}')"
    # busybox has renice, not nice: the shell renices itself and becomes kvtierd, whose threads
    # inherit the nice value.
    sh -c 'renice -n "$1" -p $$ >/dev/null && exec kvtierd --config /tmp/kvtier.toml --foreground' sh "${KVTIER_NICE:-0}" >/tmp/kvtierd.log 2>&1 &
    kp=$!
    ;;
  *) die "unknown mode '$mode' (none, kernel, kvtier)" ;;
esac
kt0=0
[ "$mode" = kvtier ] && kt0=$(ticks "$kp")
st0=$(ticks "$spid")
watch=
[ "$mode" = kvtier ] && watch="--watch-pid $kp"
kvtier_llama_load --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --clients "$LOAD_CLIENTS" \
  --conversations "$LOAD_CONVERSATIONS" --min-turns 2 --speed "$LOAD_SPEED" \
  --block-chars "$LOAD_BLOCK_CHARS" --max-predict "$LOAD_MAX_PREDICT" --duration "$duration" \
  --timeout 600 --pid "$spid" --kv-data $((0x$kv_start + 64)) --slots "$NP" --cells "$CELLS" \
  --cold-age "$COLD_AGE_S" $watch || emit "\"event\":\"error\",\"what\":\"kvtier_llama_load exited $?\""
st1=$(ticks "$spid")
# The whole process by node (numa_maps): what is not the KV buffer (the truth's bytes) is the
# heap with the RAM prompt cache's copies, the model and the libraries.
emit "\"event\":\"numa_maps\",$(awk '{for (i = 2; i <= NF; i++) if ($i ~ /^N[0-9]+=/) {split(substr($i, 2), a, "="); b[a[1]] += a[2] * 4096}}
  END {printf "\"node0_bytes\":%d,\"node1_bytes\":%d", b[0], b[1]}' /proc/$spid/numa_maps)"
restarts=0
if [ "$mode" = kvtier ]; then
  # One line (kvtierctl prints it over many), ended by a newline.
  echo "{\"type\":\"bench\",\"mode\":\"kvtier\",\"event\":\"kvtierd\",\"status\":$(kvtierctl status --json | tr -d '\n')}"
  kill -0 "$kp" 2>/dev/null || restarts=1
fi
# kvtierd's nice value as the kernel has it at the end (field 19 of its stat; KVTIER_NICE).
knice=null
[ "$mode" = kvtier ] && knice=$(awk '{print $19}' /proc/$kp/stat 2>/dev/null || echo null)
emit "\"event\":\"cpu\",\"clk_tck\":$(getconf CLK_TCK 2>/dev/null || echo 100),\"server_ticks\":$((st1 - st0)),\"kvtierd_ticks\":$([ "$mode" = kvtier ] && echo $(($(ticks "$kp") - kt0)) || echo 0),\"kvtierd_gone\":$restarts,\"kvtierd_nice\":$knice"
# Integrity: fixed prompts after the pages moved, one at a time, at temperature 0.
kvtier_llama_load --integrity "$LOAD_INTEGRITY" --timeout 600
[ "$mode" = kvtier ] && kill -TERM "$kp" && wait "$kp"
kill "$spid"
exit 0
