#!/usr/bin/env bash
# deploy/prometheus with Debian's promtool: the rules (check and unit tests) and the scrape
# configs. Usage: prometheus_rules_test.sh DEPLOY_PROMETHEUS_DIR
set -euo pipefail
dir=$1
command -v promtool >/dev/null ||
  { echo "promtool not found: install Debian's prometheus package (scripts/setup.sh)"; exit 1; }
cd "$dir"
promtool check rules kvtier-rules.yml
promtool test rules kvtier-rules.test.yml
promtool check config scrape-config.yml
# Debian's build has no Kubernetes service discovery: the discovery block becomes a static
# target, the rest (job, relabelling) is checked as written.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed '/^    kubernetes_sd_configs:$/,/^    relabel_configs:$/c\
    static_configs:\
      - targets: ["127.0.0.1:9464"]\
    relabel_configs:' scrape-config-kubernetes.yml >"$tmp/k8s.yml"
grep -q '^ *kubernetes_sd_configs:' "$tmp/k8s.yml" && { echo "the discovery block was not replaced"; exit 1; }
grep -q '__meta_kubernetes_pod_node_name' "$tmp/k8s.yml" || { echo "the relabelling was lost"; exit 1; }
promtool check config "$tmp/k8s.yml"
