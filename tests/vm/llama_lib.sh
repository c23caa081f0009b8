# shellcheck shell=sh
# shellcheck disable=SC2034,SC2046,SC2086 # sets variables for its callers; the byte ranges
# (START END pairs) are meant to split into words.
# Sourced by the guest scripts that run Debian's llama-server from the /llama root of
# scripts/vm/llama-root.sh (tests/vm/llama_server_guest.sh, scripts/lab/llama1.sh): the
# server, its KV buffer's layout, requests, and where its pages are.
NP=${KVTIER_LLAMA_NP:-12}
CELLS=${KVTIER_LLAMA_CELLS:-8192}
LAYERS=4 # the model of scripts/vm/llama-model.py: 4 layers, width 256, f16 K and V
ROW=512  # bytes of one cell's K (or V) row: 256 x 2
URL=http://127.0.0.1:8080
R=/llama
kv_bytes=$((LAYERS * 2 * NP * CELLS * ROW))
tensor=$((NP * CELLS * ROW))
stream=$((CELLS * ROW))

# wait_for SECONDS COMMAND...: polls COMMAND every half second.
wait_for() {
  end=$(($(date +%s) + $1))
  shift
  until "$@"; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.5
  done
}

# The loopback interface up (the guest boots with none; the server listens on 127.0.0.1), and
# /proc, /dev and a tmpfs /tmp inside the root.
llama_mounts() {
  ip link set lo up
  mount -t proc proc $R/proc
  mount --bind /dev $R/dev
  mount -t tmpfs tmpfs $R/tmp
}

# start_server [OPTIONS...]: llama-server with NP slots of CELLS cells and OPTIONS, waited for
# until healthy (returns 1 if it exits or is not healthy within 600 s); sets spid, and
# kv_map_start and kv_map_end (decimal) to the anonymous mapping that holds the KV buffer: its
# allocation is the cache's size + 4 KiB (malloc's header), and the kernel may have merged it
# with an adjacent anonymous mapping (in the guest, 128 KiB more); empty if there is none.
# kv_start (the buffer's first page, hex) is left to find_layout.
start_server() {
  chroot $R /usr/bin/llama-server -m /model.gguf -np "$NP" -c $((NP * CELLS)) -t 2 \
    --host 127.0.0.1 --port 8080 "$@" >>/tmp/server.log 2>&1 &
  spid=$!
  kv_start=
  kv_map_start=
  kv_map_end=
  wait_for 600 healthy_or_gone || return 1
  kill -0 "$spid" 2>/dev/null || return 1
  set -- $(awk -v lo=$((kv_bytes + 4096)) -v hi=$((kv_bytes + 4096 + 2097152)) '$2 == "rw-p" && $6 == "" {
      split($1, a, "-"); s = ("0x" a[1]) + 0; e = ("0x" a[2]) + 0
      if (e - s >= lo && e - s <= hi) printf "%.0f %.0f\n", s, e }' /proc/$spid/maps 2>/dev/null)
  kv_map_start=${1:-}
  kv_map_end=${2:-}
}
healthy_or_gone() { wget -q -O /dev/null "$URL/health" 2>/dev/null || ! kill -0 "$spid" 2>/dev/null; }

# ask SLOT PROMPT_FILE N_PREDICT OUT: one /completion at temperature 0 on slot SLOT, reusing
# what the slot holds of the prompt (cache_prompt); OUT gets the response.
ask() {
  prompt=$(sed 's/\\/\\\\/g; s/"/\\"/g' "$2" | tr '\n' ' ')
  printf '{"prompt":"%s","n_predict":%s,"temperature":0,"cache_prompt":true,"id_slot":%s,"return_tokens":true}' \
    "$prompt" "$3" "$1" >/tmp/req.$1
  wget -q -O "$4" --header 'Content-Type: application/json' --post-file /tmp/req.$1 "$URL/completion"
}
# The completion's text (JSON-escaped, as sent) and its token ids.
content() { sed -n 's/.*"content":"\(.*\)","tokens":\[\([0-9,]*\)\].*/\1|\2/p' "$1"; }
field() { sed -n "s/.*\"$2\":\\([0-9.]*\\).*/\\1/p" "$1" | head -n 1; }

# slot_ranges FIRST LAST: the page-aligned byte ranges of slots FIRST..LAST's rows, one
# START END pair per K or V tensor (the buffer's data starts within its first page).
slot_ranges() {
  t=0
  while [ $t -lt $((LAYERS * 2)) ]; do
    base=$((0x$kv_start + t * tensor))
    printf '%d %d ' $((base + $1 * stream + 4096)) $((base + ($2 + 1) * stream))
    t=$((t + 1))
  done
}
# on_node N START END ...: bytes of the ranges on node N (kvtier_page_nodes, one JSON line per
# range); -1 when the query fails, so that no wait takes a dead process for a placed one.
on_node() {
  node=$1
  shift
  q=$(kvtier_page_nodes "$spid" "$@") || { echo -1; return; }
  echo "$q" | sed -n "s/.*\"$node\":\([0-9]*\).*/\1/p" | awk '{s += $1} END {print s + 0}'
}
span_bytes() { echo "$@" | awk '{for (i = 1; i < NF; i += 2) s += $(i + 1) - $i} END {print s}'; }

# find_layout SLOT PROMPT_FILE OUT: the KV buffer's place in its mapping, from the pages the
# engine writes: soft-dirty bits cleared (/proc/PID/clear_refs), one request to SLOT (response
# in OUT), then every dirty page of the mapping read from /proc/PID/pagemap (bit 55). The
# buffer's allocation is at either end of the mapping (the other end is what the kernel merged
# with it); the right one has every dirty page of the allocation in SLOT's rows of the
# 2 x LAYERS tensors and some in each. Sets kv_start (hex), ndirty (dirty pages in the
# allocation); returns 1 if neither end fits, 2 if the request failed.
find_layout() {
  slot=$1
  echo 4 >/proc/$spid/clear_refs
  ask "$1" "$2" 16 "$3" || return 2
  dd if=/proc/$spid/pagemap iflag=skip_bytes,count_bytes bs=65536 skip=$((kv_map_start / 512)) \
    count=$(((kv_map_end - kv_map_start) / 512)) 2>/dev/null | od -An -v -tx8 |
    awk -v s0="$kv_map_start" '{for (i = 1; i <= NF; i++) {
        d = substr($i, 3, 1); if (d ~ /[89a-f]/) printf "%.0f\n", s0 + n * 4096; n++ } }' >/tmp/dirty
  for cand in "$kv_map_start" $((kv_map_end - kv_bytes - 4096)); do
    kv_start=$(printf '%x' "$cand")
    set -- $(slot_ranges "$slot" "$slot")
    fit=$(awk -v lo="$cand" -v hi=$((cand + kv_bytes + 4096)) -v r="$*" 'BEGIN {n = split(r, a, " ")}
      $1 >= lo && $1 < hi {dirty++; in_ = 0
        for (i = 1; i < n; i += 2) if ($1 >= a[i] - 4096 && $1 < a[i + 1] + 4096) {in_ = 1; hit[i] = 1}
        if (!in_) out++}
      END {for (i = 1; i < n; i += 2) if (!hit[i]) out++; print (out ? "no" : "yes"), dirty + 0}' /tmp/dirty)
    ndirty=${fit#* }
    [ "${fit% *}" = yes ] && return 0
  done
  kv_start=
  return 1
}
