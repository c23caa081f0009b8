#!/usr/bin/env bash
# Regenerates the pinned bpf/vmlinux/<arch>/vmlinux.h from a kernel's BTF.
# The BPF programs are CO-RE: the header only has to hold the types they use,
# and libbpf relocates field offsets against the running kernel at load time.
# Usage: scripts/gen-vmlinux.sh [BTF_FILE]   (default /sys/kernel/btf/vmlinux)
set -euo pipefail
btf=${1:-/sys/kernel/btf/vmlinux}
arch=$(uname -m)
case "$arch" in
  x86_64) dir=x86 ;;
  aarch64) dir=arm64 ;;
  *) echo "gen-vmlinux: no BPF arch mapping for $arch" >&2; exit 1 ;;
esac
top=$(cd "$(dirname "$0")/.." && pwd)
out="$top/bpf/vmlinux/$dir/vmlinux.h"
mkdir -p "$(dirname "$out")"
bpftool btf dump file "$btf" format c > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out from $btf ($(wc -l < "$out") lines)"
