#!/bin/sh
# shellcheck disable=SC1091,SC2046,SC2086,SC2154 # the lib sets NP, spid, kv_start...; ranges split.
# What kvtier does with llama-server's KV buffer (issue 38's churn), with kvtierd on the shipped
# config. About every 15 s: kvtierd's demoted/promoted/mis-demoted bytes and effective cold age, and
# where the rows of three groups of slots are: the busy ones (SLOTS), the idle ones between
# them (a batch over slots 0 and 5 reads streams 0..5: llama.cpp's get_k/get_v view the streams
# from the batch's lowest to its highest slot, the first n_kv rows of each, n_kv padded to 256
# cells with flash attention) and the idle ones above. Then kvtierctl explain and the CPU time.
# Knobs (environment): SLOTS (default "0 5"), CONVS conversations per busy slot, taken in turn
# (default 1; more than 1 makes the server save and restore slot states, --cache-ram), THP
# (the guest's transparent_hugepage setting, default always, Debian's), OPTS (more
# llama-server options), SECONDS_RUN (default 120).
# Run: scripts/vm/run --layer "$(scripts/vm/llama-root.sh)" --mem0 352 --timeout 1200 -- \
#        env SLOTS="0 5" sh /kvtier/scripts/lab/llama1.sh
. /kvtier/tests/vm/llama_lib.sh
SLOTS=${SLOTS:-0 5}
CONVS=${CONVS:-1}
SECONDS_RUN=${SECONDS_RUN:-120}
echo "${THP:-always}" >/sys/kernel/mm/transparent_hugepage/enabled
llama_mounts
start_server ${OPTS:-} || { tail -n 20 /tmp/server.log; exit 1; }
lo=$(echo $SLOTS | tr ' ' '\n' | sort -n | head -n 1)
hi=$(echo $SLOTS | tr ' ' '\n' | sort -n | tail -n 1)
printf 'Where is the buffer?' >/tmp/p0
# With huge pages the soft-dirty bits are per 2 MiB page and find the buffer from neither end:
# take the end that holds it in the guest at 4 KiB pages (the mapping's low end in every run here).
find_layout "$lo" /tmp/p0 /tmp/o0 || kv_start=$(printf '%x' "$kv_map_start")
echo "llama-server pid $spid, mapping $(printf '%x-%x' $kv_map_start $kv_map_end), KV buffer at 0x$kv_start, THP $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
echo "AnonHugePages of the KV mapping: $(awk -v s="$(printf '%x' "$kv_map_start")" '$1 ~ "^0*" s "-" {f = 1} f && /^AnonHugePages/ {print $2 " kB"; exit}' /proc/$spid/smaps)"
sed 's/^socket_group = .*/socket_group = "root"/' /kvtier/systemd/kvtier.toml >/tmp/kvtier.toml
kvtierd --config /tmp/kvtier.toml --foreground >/tmp/kvtierd.log 2>&1 &
kp=$!

client() {
  c=0
  while [ $c -lt "$CONVS" ]; do
    printf 'Conversation %s.%s:' "$1" $c >/tmp/conv.$1.$c
    c=$((c + 1))
  done
  turn=0
  while [ ! -f /tmp/stop ]; do
    c=$((turn % CONVS))
    printf ' turn %s asks about memory tiers and caches.' "$turn" >>/tmp/conv.$1.$c
    if ask "$1" /tmp/conv.$1.$c 8 /tmp/out.$1; then
      echo "$1 $(field /tmp/out.$1 cache_n) $(field /tmp/out.$1 prompt_ms) $(field /tmp/out.$1 predicted_per_second)" >>/tmp/clients.log
    else
      echo "$1 error" >>/tmp/clients.log
    fi
    turn=$((turn + 1))
  done
}
cpids=
for s in $SLOTS; do
  client $s &
  cpids="$cpids $!"
done

mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
group() { echo "$(mib $(on_node 0 $(slot_ranges $1 $2)))/$(mib $(on_node 1 $(slot_ranges $1 $2)))"; }
t0=$(date +%s)
while [ $(($(date +%s) - t0)) -lt "$SECONDS_RUN" ]; do
  fb=$(kvtierctl status --json 2>/dev/null | tr -d ' \n')
  get() { echo "$fb" | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" | head -n 1; }
  between=-
  [ $((hi - lo)) -gt 1 ] && between=$(group $((lo + 1)) $((hi - 1)))
  above=-
  [ "$hi" -lt $((NP - 1)) ] && above=$(group $((hi + 1)) $((NP - 1)))
  echo "t=$(($(date +%s) - t0)) demoted=$(mib $(get demoted_bytes)) promoted=$(mib $(get promoted_bytes))" \
    "kernel_promoted=$(mib $(get kernel_promoted_bytes)) misdemoted=$(mib $(get misdemoted_bytes))" \
    "ratio=$(get misdemotion_ratio) cold_age=$(get effective_cold_age_s)s" \
    "MiB on node0/node1: busy($SLOTS)=$(for s in $SLOTS; do printf '%s ' "$(group $s $s)"; done)" \
    "between=$between above=$above requests=$({ wc -l </tmp/clients.log; } 2>/dev/null)"
  sleep 10
done
touch /tmp/stop
kvtierctl status
kvtierctl explain "$spid" | awk 'NR <= 2 || $2 !~ /^4KiB$/' | head -n 40
wait $cpids
echo "the server's mappings of 1 MiB or more on a node (numa_maps, MiB on node 0/node 1):"
awk '{n0 = 0; n1 = 0; for (i = 3; i <= NF; i++) {if ($i ~ /^N0=/) n0 = substr($i, 4); if ($i ~ /^N1=/) n1 = substr($i, 4)}
  if (n0 + n1 >= 256) printf "  %s %s %.1f/%.1f\n", $1, ($3 ~ /^(heap|anon=)/ ? $3 : $3), n0 / 256, n1 / 256}' /proc/$spid/numa_maps
echo "CPU s: kvtierd $(awk '{print ($14 + $15) / 100}' /proc/$kp/stat), llama-server $(awk '{print ($14 + $15) / 100}' /proc/$spid/stat)"
echo "requests $(wc -l </tmp/clients.log), errors $(grep -c error /tmp/clients.log)"
awk '$2 != "error" {n++; c += $2; p += $3; d += $4} END {if (n) printf "mean cache_n %.0f, prompt_ms %.0f, decode tok/s %.2f\n", c / n, p / n, d / n}' /tmp/clients.log
kill "$kp" "$spid"
