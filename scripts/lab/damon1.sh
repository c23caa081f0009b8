#!/bin/sh
# kvtierd (shipped config) + kvsim for 40 s; then kvtierd's log and DAMON's sysfs state.
echo never > /sys/kernel/mm/transparent_hugepage/enabled
grep -q '^root:' /etc/group || echo 'root:x:0:' >> /etc/group
sed -e 's#^socket = .*#socket = "/tmp/k.sock"#' -e 's#^socket_group = .*#socket_group = "root"#' \
    -e 's#^comm = .*#comm = ["^kvsim$"]#' -e 's#^cmdline = .*#cmdline = []#' /kvtier/systemd/kvtier.toml > /tmp/k.toml
kvtierd --config /tmp/k.toml --foreground --socket /tmp/k.sock --log-level debug > /tmp/kd.log 2>&1 &
kvsim --trace /kvtier/traces/mooncake_synthetic_trace.jsonl --kv-budget 256MiB --time-scale 1 \
  --stats-interval 10 --flush-tlb --duration 60 >/tmp/kvsim.out 2>/tmp/kvsim.err &
sleep 40
d=/sys/kernel/mm/damon/admin/kdamonds/0
cat $d/state $d/pid; c=$d/contexts/0
cat $c/operations; cat $c/monitoring_attrs/intervals/*; cat $c/monitoring_attrs/nr_regions/*
cat $c/targets/nr_targets; cat $c/targets/0/regions/nr_regions
grep -v "debug.*step" /tmp/kd.log | head -40
grep "samples.*regions" /tmp/kd.log | tail -5
kill %1 %2
