#!/bin/sh
# Why the NUMA scanner skips kvsim's pool VMA (sched_skip_vma_numa), with kvtierd (shipped config).
T=/sys/kernel/tracing
echo never > /sys/kernel/mm/transparent_hugepage/enabled
grep -q '^root:' /etc/group || echo 'root:x:0:' >> /etc/group
sed -e 's#^socket = .*#socket = "/tmp/k.sock"#' -e 's#^socket_group = .*#socket_group = "root"#' \
    -e 's#^comm = .*#comm = ["^kvsim$"]#' -e 's#^cmdline = .*#cmdline = []#' /kvtier/systemd/kvtier.toml > /tmp/k.toml
[ -n "$SCANMB" ] && echo $SCANMB > /sys/kernel/debug/sched/numa_balancing/scan_size_mb
[ -n "$SEDX" ] && sed -i "$SEDX" /tmp/k.toml
kvtierd --config /tmp/k.toml --foreground --socket /tmp/k.sock > /tmp/kd.log 2>&1 &
echo 1 > $T/events/sched/sched_skip_vma_numa/enable
cat $T/trace_pipe > /tmp/skip.txt &
tp=$!
kvsim --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --kv-budget 256MiB --time-scale 1 \
  --stats-interval 10 --cold-ages 10,30 --flush-tlb --duration 95 --read-nodes-every 1 >/tmp/kvsim.out 2>/tmp/kvsim.err &
kp=$!
sleep 2
pool=$(grep -m1 '"event":"start"' /tmp/kvsim.out | sed 's/.*"pool":\[\([0-9]*\),.*/\1/')
phex=$(printf '%X' $pool)
echo "pool $phex"
i=0
while [ $i -lt 90 ]; do
  echo "t=$i $(awk '/^(numa_pte_updates|numa_hint_faults|pgpromote_success) /{printf "%s=%s ", $1, $2}' /proc/vmstat) poolskips=$(grep -c "vm_start=$phex" /tmp/skip.txt) kvsim_cpu=$(awk '{print $14+$15}' /proc/$kp/stat)"
  sleep 3; i=$((i+3))
done
grep numa /proc/$kp/sched
kill $tp
echo "pool skip reasons:"; grep "vm_start=$phex" /tmp/skip.txt | grep -o 'reason=[a-z_]*' | sort | uniq -c
echo "kvsim skip reasons:"; grep "kvsim-" /tmp/skip.txt | grep -o 'reason=[a-z_]*' | sort | uniq -c
grep "kvsim-" /tmp/skip.txt | head -3
grep '"event":"stats"' /tmp/kvsim.out | tail -1 | cut -c1-300
kill $kp; kill %1
cat /proc/$(pidof kvtierd)/stat 2>/dev/null | awk '{print "kvtierd utime", $14, "stime", $15}'
