#!/usr/bin/env bash
# Fetches a guest kernel into the VM cache without installing anything on the host, and prints
# the directory that holds vmlinuz-<version>, config-<version> and lib/modules/<version>/.
#   6.12 (default): Debian 12's linux-image-6.12 (NUMA, HMAT, DAMON, BTF, CXL as modules), from
#        the suites the host's apt already uses (bookworm-security);
#   7.3: Debian 13's backported 7.3 (DAMOS migrate_hot/cold on vaddr, quota goals on node
#        memory), from trixie-backports through a private apt sources list, state and cache
#        under the VM cache: the host's apt configuration stays as it is.
# Only the modules the guest may load (CXL, nvdimm, dax and what they depend on) are kept,
# decompressed and indexed with depmod, so busybox modprobe and libkmod (ndctl, daxctl) both
# find them.
# Usage: scripts/vm/kernel.sh [6.12|7.3]      (cache: $KVTIER_BUILD_DIR/vm-cache)
set -euo pipefail

series=${1:-6.12}
# The pins. For 6.12 `apt-cache depends linux-image-6.12-amd64` names the current one; for 7.3
# `apt-cache policy 'linux-binary-7.3*'` with the private lists below.
case $series in
  6.12)
    version=${KVTIER_GUEST_KERNEL:-6.12.117+deb12-amd64}
    packages=("linux-image-$version")
    suite=
    ;;
  7.3)
    version=${KVTIER_GUEST_KERNEL_73:-7.3.4+deb13-amd64}
    # vmlinuz, the modules, and the config with modules.order/builtin.
    packages=("linux-binary-$version" "linux-modules-$version" "linux-base-$version")
    suite=trixie-backports
    ;;
  *)
    echo "vm: unknown kernel '$series'; use 6.12 or 7.3" >&2
    exit 2
    ;;
esac

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
cache=$build/vm-cache
dest=$cache/kernel-$version
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
# apt-get runs as _apt when it can; directories it may write to avoid a warning.
chmod 0777 "$work"
apt_opts=()
if [[ -n $suite ]]; then
  # shellcheck source=scripts/vm/apt-private.sh
  . "$(dirname "$0")/apt-private.sh"
  if ! apt_private "$cache" "$suite" http://deb.debian.org/debian; then
    echo "vm: apt-get update of $suite failed (network? the Debian archive keyring" \
      "/usr/share/keyrings/debian-archive-keyring.gpg must hold Debian 13's keys:" \
      "apt-get install debian-archive-keyring)" >&2
    exit 1
  fi
  apt_opts=("${apt_private_opts[@]}")
fi
echo "vm: downloading ${packages[*]} (once; cached in $dest)" >&2
if ! (cd "$work" && apt-get "${apt_opts[@]}" download -q "${packages[@]}" >"$work/apt.log" 2>&1); then
  cat "$work/apt.log" >&2
  if [[ -z $suite ]]; then
    current=$(apt-cache depends linux-image-6.12-amd64 2>/dev/null | awk '/Depends:/ {print $2; exit}')
    echo "vm: cannot download ${packages[*]}; the meta-package now depends on '${current:-unknown}'." \
      "Run 'apt-get update', or set KVTIER_GUEST_KERNEL in scripts/vm/kernel.sh to that version" >&2
  else
    current=$(apt-cache "${apt_opts[@]}" pkgnames linux-binary-7.3 2>/dev/null | sort -V | tail -n 1)
    echo "vm: cannot download ${packages[*]} from $suite; it now serves '${current:-nothing of 7.3}'." \
      "Set KVTIER_GUEST_KERNEL_73 (or the pin in scripts/vm/kernel.sh) to its version" >&2
  fi
  exit 1
fi
for deb in "$work"/*.deb; do
  dpkg -x "$deb" "$work/x"
  rm -f "$deb"
done

# Debian 12 ships /boot/vmlinuz-V and /lib/modules/V; Debian 13 /usr/lib/modules/V/{vmlinuz,config}.
moddir=lib/modules/$version
src=$work/x/$moddir
[[ -d $src ]] || src=$work/x/usr/$moddir
vmlinuz=$work/x/boot/vmlinuz-$version
[[ -f $vmlinuz ]] || vmlinuz=$src/vmlinuz
config=$work/x/boot/config-$version
[[ -f $config ]] || config=$src/config
for f in "$vmlinuz" "$config" "$src/modules.order"; do
  [[ -f $f ]] || { echo "vm: ${packages[*]} hold no $(basename "$f") where expected ($f)" >&2; exit 1; }
done
stage=$work/out
mkdir -p "$stage/$moddir"
cp "$vmlinuz" "$stage/vmlinuz-$version"
cp "$config" "$stage/config-$version"
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
      echo "vm: module $m (needed by $(basename "$f")) not found in ${packages[*]}" >&2
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
depmod -b "$stage" "$version"

rm -rf "$dest"
mv "$stage" "$dest"
touch "$dest/.complete"
echo "vm: kernel $version ready with ${#wanted[@]} modules" >&2
echo "$dest"
