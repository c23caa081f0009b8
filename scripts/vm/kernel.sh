#!/usr/bin/env bash
# Fetches the guest kernel (Debian's 6.12 image: NUMA, HMAT, DAMON, BTF, CXL
# as modules) into the VM cache without installing anything on the host, and
# prints the directory that holds vmlinuz and lib/modules/<version>/.
# Only the modules the guest may load (CXL, nvdimm, dax and what they depend
# on) are kept, decompressed and indexed with depmod, so busybox modprobe
# and libkmod (ndctl, daxctl) both find them.
# Usage: scripts/vm/kernel.sh            (cache: $KVTIER_BUILD_DIR/vm-cache)
set -euo pipefail

# The one pin. `apt-cache depends linux-image-6.12-amd64` names the current one.
KVTIER_GUEST_KERNEL=${KVTIER_GUEST_KERNEL:-6.12.117+deb12-amd64}

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
cache=$build/vm-cache
dest=$cache/kernel-$KVTIER_GUEST_KERNEL
# Module directories the guest's --cxl setup needs; dependencies are added.
module_dirs=(drivers/cxl drivers/nvdimm drivers/dax)

if [[ -f $dest/.complete ]]; then
  echo "$dest"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/kernel.lock"
flock 9
if [[ -f $dest/.complete ]]; then
  echo "$dest"
  exit 0
fi

work=$(mktemp -d "$cache/kernel-fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
pkg=linux-image-$KVTIER_GUEST_KERNEL
echo "vm: downloading $pkg (once; cached in $dest)" >&2
# apt-get download runs as _apt when it can; a private dir it may write to avoids a warning.
chmod 0777 "$work"
if ! (cd "$work" && apt-get download -q "$pkg" >"$work/apt.log" 2>&1); then
  cat "$work/apt.log" >&2
  current=$(apt-cache depends linux-image-6.12-amd64 2>/dev/null | awk '/Depends:/ {print $2; exit}')
  echo "vm: cannot download $pkg; the meta-package now depends on '${current:-unknown}'." \
    "Run 'apt-get update', or set KVTIER_GUEST_KERNEL in scripts/vm/kernel.sh to that version" >&2
  exit 1
fi
deb=$(find "$work" -maxdepth 1 -name "${pkg}_*.deb" | head -n 1)
dpkg -x "$deb" "$work/x"
rm -f "$deb"

moddir=lib/modules/$KVTIER_GUEST_KERNEL
src=$work/x/$moddir
stage=$work/out
mkdir -p "$stage/$moddir"
cp "$work/x/boot/vmlinuz-$KVTIER_GUEST_KERNEL" "$work/x/boot/config-$KVTIER_GUEST_KERNEL" "$stage/"
cp "$src"/modules.order "$src"/modules.builtin "$src"/modules.builtin.modinfo "$stage/$moddir/"

# Dependency closure over `modinfo -F depends`, starting from module_dirs.
declare -A wanted=()
queue=()
for d in "${module_dirs[@]}"; do
  while IFS= read -r f; do queue+=("$f"); done < <(find "$src/kernel/$d" -name '*.ko*')
done
while ((${#queue[@]})); do
  f=${queue[0]}
  queue=("${queue[@]:1}")
  [[ -n ${wanted[$f]:-} ]] && continue
  wanted[$f]=1
  deps=$(modinfo -F depends "$f")
  for m in ${deps//,/ }; do
    dep=$(find "$src/kernel" \( -name "$m.ko*" -o -name "${m//_/-}.ko*" \) | head -n 1)
    if [[ -z $dep ]]; then
      echo "vm: module $m (needed by $(basename "$f")) not found in $pkg" >&2
      exit 1
    fi
    queue+=("$dep")
  done
done
for f in "${!wanted[@]}"; do
  rel=${f#"$src"/}
  mkdir -p "$stage/$moddir/$(dirname "$rel")"
  case $f in
    *.xz) xz -dc "$f" >"$stage/$moddir/${rel%.xz}" ;;
    *) cp "$f" "$stage/$moddir/$rel" ;;
  esac
done
depmod -b "$stage" "$KVTIER_GUEST_KERNEL"

rm -rf "$dest"
mv "$stage" "$dest"
touch "$dest/.complete"
echo "vm: kernel $KVTIER_GUEST_KERNEL ready with ${#wanted[@]} modules" >&2
echo "$dest"
