#!/bin/sh
# shellcheck disable=SC2015,SC2046,SC2086,SC1091,SC2154 # ok() always succeeds: "cond && ok || bad" is an if-else
# here; the byte ranges (START END pairs) are meant to split into words.
# Guest side of vm.llama_server (tests/vm/llama_server.sh): Debian's llama-server (the /llama
# root of scripts/vm/llama-root.sh, entered with chroot) with NP slots of CELLS cells, its
# KV buffer larger than node 0, and kvtierd from the project's build with the shipped
# config (systemd/kvtier.toml; only its socket group is root's, the guest has no kvtier
# group). Asserts, one "ok:" or "FAIL:" line each, exit 1 if any failed:
#   - the KV cache is larger than node 0 and an anonymous mapping holds it, and its layout
#     is the engine's (per layer K and V, one stream of CELLS rows per slot): a request to
#     one slot dirties (soft-dirty bits) only that slot's rows;
#   - the shipped selector finds llama-server (kvtierctl targets);
#   - every page of the idle slots' rows reaches node 1, moved there by kvtierd (its own
#     counters), while two clients keep slots 0 and 1 busy;
#   - fixed prompts at temperature 0, sent one at a time, give byte-identical completions
#     (text and token ids) before kvtierd ran and after it moved the slots' pages: the same
#     two-turn conversation on slot 3 (never used, demoted) as on slot 2 before, and a third
#     turn on slot 2 reusing its demoted cells, as before on slot 2;
#   - a restarted server (new pid) is picked up and the old pid dropped.
# Prints kvtierd's status, explain and the server's timings for the record. Nothing here
# waits for a fixed time: each wait polls a condition, with a limit that only ends a test
# whose condition never comes.
set -u
. /kvtier/tests/vm/llama_lib.sh
fails=0
ok() { echo "ok: $*"; }
bad() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
fatal() {
  bad "$*"
  echo "--- llama-server log (last 30 lines)"
  tail -n 30 /tmp/server.log
  [ -f /tmp/kvtierd.log ] && { echo "--- kvtierd log (last 30 lines)"; tail -n 30 /tmp/kvtierd.log; }
  exit 1
}

llama_mounts
# Transparent huge pages off: llama.cpp's buffer starts 4 KiB plus malloc's header past a
# 2 MiB boundary, so a huge page would straddle two slots' rows and the per-slot assertions
# below would mean nothing (see docs/llama-server.md).
echo never >/sys/kernel/mm/transparent_hugepage/enabled
# No demotion in reclaim (the kernel's default): only kvtierd moves pages to node 1 here.
echo false >/sys/kernel/mm/numa/demotion_enabled

node0=$(awk '/MemTotal/ {print $4 * 1024}' /sys/devices/system/node/node0/meminfo)
[ "$kv_bytes" -gt "$node0" ] && ok "KV cache $((kv_bytes >> 20)) MiB > node 0's $((node0 >> 20)) MiB" ||
  bad "KV cache $((kv_bytes >> 20)) MiB is not larger than node 0's $((node0 >> 20)) MiB"

# --- the server, its KV buffer and its layout
start_server --cache-ram 0 --metrics || fatal "llama-server (pid $spid) exited or not healthy within 600 s"
[ -n "$kv_map_start" ] &&
  ok "KV buffer: an anonymous mapping of $((kv_map_end - kv_map_start)) B for the $kv_bytes B cache (pid $spid)" ||
  fatal "no anonymous mapping of $kv_bytes + 4096 B (up to 2 MiB more) in /proc/$spid/maps"
pid1=$spid

# The layout, from soft-dirty bits: a request to slot 2 (A, the first turn of the integrity
# conversation below) dirties only slot 2's rows of the K and V tensors, and some of each.
printf 'Tiered memory keeps the hot part of a cache in DRAM.' >/tmp/p1
printf ' The cold part goes to CXL memory, and comes back when it is read.' >/tmp/p2
rc=0
find_layout 2 /tmp/p1 /tmp/a.json || rc=$?
[ $rc -ne 2 ] || fatal "request A to slot 2 failed"
[ $rc -eq 0 ] &&
  ok "layout: a request to slot 2 dirtied $ndirty pages of the buffer at 0x$kv_start, all in slot 2's rows of the $((LAYERS * 2)) K and V tensors, some in each" ||
  fatal "layout: the dirty pages of $(printf '0x%x-0x%x' "$kv_map_start" "$kv_map_end") fit slot 2's rows from neither end; the first: $(head -n 40 /tmp/dirty | while read -r a; do printf '%x ' "$a"; done)"

# The integrity conversation, before kvtierd runs: A (the request above, on a fresh slot),
# then B = A's prompt + A's letters and digits + p2 (reusing A's prompt cells), then C = B's
# prompt again (reusing B's), one at a time.
{ cat /tmp/p1; sed -n 's/.*"content":"\(.*\)","tokens".*/\1/p' /tmp/a.json | tr -cd 'A-Za-z0-9 '; cat /tmp/p2; } >/tmp/pb
ask 2 /tmp/pb 16 /tmp/b.json || fatal "request B failed"
ask 2 /tmp/pb 16 /tmp/c.json || fatal "request C failed"
echo "BEFORE_CACHE_N=$(field /tmp/c.json cache_n) (C reused slot 2's cells)"

# --- kvtierd with the shipped config, and two clients on slots 0 and 1
sed 's/^socket_group = .*/socket_group = "root"/' /kvtier/systemd/kvtier.toml >/tmp/kvtier.toml
kvtierd --check-config --config /tmp/kvtier.toml || fatal "the shipped config does not check"
kvtierd --config /tmp/kvtier.toml --foreground >/tmp/kvtierd.log 2>&1 &
kp=$!
idle=$(slot_ranges 4 $((NP - 1)))
idle0=$(on_node 0 $(slot_ranges 2 $((NP - 1))))
echo "IDLE_ON_NODE0_AT_START=$idle0 of $(span_bytes $(slot_ranges 2 $((NP - 1)))) B (slots 2..$((NP - 1)))"
targets_have() { kvtierctl targets --json 2>/dev/null | tr -d ' \n' | grep -Eq "\"pid\":$1[,}]"; }
wait_for 120 targets_have "$spid" && ok "the shipped selector finds llama-server (pid $spid in kvtierctl targets)" ||
  fatal "kvtierctl targets does not list llama-server (pid $spid): $(kvtierctl targets 2>&1)"
kvtierctl targets

client() {
  turn=0
  printf 'Conversation %s:' "$1" >/tmp/conv.$1
  while [ ! -f /tmp/stop ]; do
    printf ' turn %s asks about memory tiers and caches.' "$turn" >>/tmp/conv.$1
    ask "$1" /tmp/conv.$1 8 /tmp/out.$1 && echo "$1 $(field /tmp/out.$1 cache_n) $(field /tmp/out.$1 predicted_per_second)" >>/tmp/clients.log ||
      echo "$1 error" >>/tmp/clients.log
    turn=$((turn + 1))
  done
}
rm -f /tmp/stop
client 0 &
c0=$!
client 1 &
c1=$!
all_idle_on_1() { [ "$(on_node 0 $idle)" -eq 0 ] && [ "$(on_node 0 $(slot_ranges 2 3))" -eq 0 ]; }
t0=$(date +%s)
if wait_for 900 all_idle_on_1; then
  ok "every page of the idle slots' rows (2..$((NP - 1))) on node 1 after $(($(date +%s) - t0)) s"
else
  bad "idle slots' rows still on node 0: $(on_node 0 $idle) B (slots 4..), $(on_node 0 $(slot_ranges 2 3)) B (2, 3)"
fi
touch /tmp/stop
wait $c0 $c1
echo "CLIENT_REQUESTS=$(wc -l </tmp/clients.log) ERRORS=$(grep -c error /tmp/clients.log)"
kvtierctl status
kvtierctl explain "$spid" | head -n 30
status=$(kvtierctl status --json | tr -d ' \n')
echo "STATUS=$status"
demoted=$(echo "$status" | sed -n 's/.*"demoted_bytes":\([0-9]*\).*/\1/p' | head -n 1)
# Nothing else moves pages to node 1 here (no demotion in reclaim; NUMA balancing only
# promotes), so kvtierd moved at least every idle byte that was on node 0.
[ "${demoted:-0}" -ge "$idle0" ] && [ "${demoted:-0}" -gt 0 ] &&
  ok "kvtierd demoted $demoted B >= the $idle0 B of idle rows that were on node 0" ||
  bad "kvtierd demoted ${demoted:-none} B, less than the $idle0 B of idle rows that were on node 0"
echo "KV_BYTES_ON_NODE1=$(on_node 1 $((0x$kv_start)) $((0x$kv_start + kv_bytes)))"
echo "ACTIVE_SLOTS_0_1_ON_NODE0=$(on_node 0 $(slot_ranges 0 1)) ON_NODE1=$(on_node 1 $(slot_ranges 0 1))"

# --- the same conversation after kvtierd moved the pages, one request at a time
ask 3 /tmp/p1 16 /tmp/a2.json || fatal "request A' failed"
ask 3 /tmp/pb 16 /tmp/b2.json || fatal "request B' failed"
ask 2 /tmp/pb 16 /tmp/c2.json || fatal "request C'' failed"
for x in a b c; do
  [ -n "$(content /tmp/$x.json)" ] && [ "$(content /tmp/$x.json)" = "$(content /tmp/${x}2.json)" ] &&
    ok "completion $x identical after kvtier moved the pages ($(content /tmp/$x.json | cut -d'|' -f2 | tr ',' ' ' | wc -w) tokens)" ||
    bad "completion $x differs: before '$(content /tmp/$x.json)', after '$(content /tmp/${x}2.json)'"
done
echo "AFTER_CACHE_N=$(field /tmp/c2.json cache_n) (C'' reused slot 2's demoted cells)"

# --- the load generator (bench/loadgen), briefly: two Mooncake conversations of two or more
# turns from two clients, the server choosing the slots, the ground truth sampled each second
load_checks() {
  awk -v np="$NP" -v pages=$(((kv_bytes + 64 + 4095) / 4096 * 4096)) '
    function num(key,   m) { return match($0, "\"" key "\":-?[0-9.e+]+") ? substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 3) + 0 : "" }
    /"type":"request"/ { req++
      if ($0 ~ /"status":"ok"/) { ok++
        if (num("id_slot") < 0 || num("id_slot") >= np || num("tokens_cached") <= 0) bad_ok++
        if (num("turn") > 0 && num("cache_n") > 0) reused++ } }
    /"type":"metrics"/ && /llamacpp:prompt_tokens_total/ { metrics++ }
    /"type":"truth"/ { truth++; s = 0
      while (match($0, /"(0|1|other)":[0-9]+/)) { v = substr($0, RSTART, RLENGTH); sub(/.*:/, "", v); s += v; $0 = substr($0, RSTART + RLENGTH) }
      if (s != pages) bad_truth++ }
    /"type":"summary"/ { sreq = num("requests"); serr = num("errors") + num("timeouts") }
    END { printf "%d %d %d %d %d %d %d %d %d\n", req, ok, bad_ok, reused, metrics, truth, bad_truth, sreq, serr }' /tmp/load.jsonl
}
lt0=$(date +%s)
kvtier_llama_load --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --clients 2 --conversations 2 \
  --min-turns 2 --block-chars 1 --max-predict 4 --speed 100 --duration 20 --timeout 300 \
  --metrics-every 5 --pid "$spid" --kv-data $((0x$kv_start + 64)) --slots "$NP" --cells "$CELLS" \
  --out /tmp/load.jsonl 2>/tmp/load.err
lrc=$?
set -- $(load_checks)
echo "LOAD: exit $lrc in $(($(date +%s) - lt0)) s, $1 requests ($2 ok, $4 turns reusing cells), $5 metrics scrapes, $6 truth samples; $(tail -n 1 /tmp/load.jsonl)"
[ "$lrc" -eq 0 ] && [ "$1" -gt 0 ] && [ "$1" = "$8" ] && [ "$1" = "$2" ] && [ "$9" = 0 ] &&
  ok "load generator: $1 requests from 2 clients, every one answered and recorded (summary $8, errors $9)" ||
  bad "load generator: exit $lrc, $1 requests recorded, $2 ok, summary $8, errors+timeouts $9: $(grep -v '"type":"truth"' /tmp/load.jsonl | grep -v '"status":"ok"' | head -n 3) $(cat /tmp/load.err)"
[ "$2" -gt 0 ] && [ "$3" = 0 ] && [ "$4" -gt 0 ] &&
  ok "load generator: every answer names a slot in 0..$((NP - 1)) with cells, and $4 later turns reused their conversation's cells (cache_n > 0)" ||
  bad "load generator: $3 answers without a valid id_slot or tokens_cached, $4 later turns reused cells"
[ "$5" -gt 0 ] && ok "load generator: $5 /metrics scrapes with llamacpp:prompt_tokens_total" ||
  bad "load generator: no /metrics scrape with llamacpp:prompt_tokens_total"
[ "$6" -gt 0 ] && [ "$7" = 0 ] &&
  ok "ground truth: $6 samples, each accounting for every page of the buffer (active, idle, unused on node 0, 1 or neither)" ||
  bad "ground truth: $6 samples, $7 not adding up to the buffer's pages"

# --- restart: a new pid is picked up, the old one dropped
kill "$spid"
wait "$spid" 2>/dev/null
start_server --cache-ram 0 --metrics || fatal "the restarted llama-server (pid $spid) exited or not healthy within 600 s"
[ "$spid" != "$pid1" ] || fatal "the restarted server has the old pid $pid1"
restart_seen() { targets_have "$spid" && ! targets_have "$pid1"; }
wait_for 120 restart_seen && ok "the restarted llama-server (pid $spid) picked up, pid $pid1 dropped" ||
  bad "after the restart kvtierctl targets shows: $(kvtierctl targets 2>&1)"

kill -TERM "$kp"
rc=0
wait "$kp" || rc=$?
[ "$rc" -eq 0 ] && ok "kvtierd stopped cleanly" || bad "kvtierd exited $rc"
kill "$spid" 2>/dev/null
echo "--- kvtierd log (last 20 lines)"
tail -n 20 /tmp/kvtierd.log
echo "$fails failed"
[ "$fails" -eq 0 ]
