#!/usr/bin/env bash
# Builds the guest's initramfs (gzip'd newc cpio) and prints its path:
#   /init                    scripts/vm/init
#   /bin                     busybox-static and its applet links
#   /usr/bin                 cxl, ndctl, daxctl (the host's, with their libraries)
#   /lib/modules/<version>   the CXL/nvdimm/dax modules from scripts/vm/kernel.sh
#   /kvtier/bin              every ELF executable under the build dir (debug info
#                            stripped), plus every library `ldd` lists
#   /kvtier/scripts, /kvtier/tests, /kvtier/systemd, /kvtier/traces (the repository's bench/traces)
# KVTIER_VM_BINS="NAME ...": only the build's executables of these names go to /kvtier/bin
# (the benchmark sets it: the initramfs lives in the guest's RAM, node 0 first, so every test
# binary of a full build would take node 0 memory the workload's figures depend on).
# The archive is cached under a key made of the inputs' names, sizes and
# modification times and the content of scripts/vm/, so an unchanged tree
# costs one `find`, and any rebuilt binary gives a new archive.
# Usage: scripts/vm/initramfs.sh KERNEL_DIR
set -euo pipefail

kernel_dir=$(cd "${1:?usage: initramfs.sh KERNEL_DIR (from scripts/vm/kernel.sh)}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
build=$(cd "$build" && pwd)
cache=$build/vm-cache
traces=$top/bench/traces
host_tools=(/usr/bin/cxl /usr/bin/ndctl /usr/bin/daxctl)
busybox=/bin/busybox

# Executables built by the project: anything executable outside CMake's own
# scratch and the VM cache; the ELF check comes later, when building.
build_executables() {
  find "$build" \( -path "$build/CMakeFiles" -o -path "$build/vm-cache" -o -name CMakeFiles \) -prune \
    -o -type f -perm -u+x -print | sort | only_wanted
}
only_wanted() {
  if [[ -z ${KVTIER_VM_BINS:-} ]]; then
    cat
    return
  fi
  local f
  while IFS= read -r f; do
    [[ " $KVTIER_VM_BINS " == *" $(basename "$f") "* ]] && echo "$f"
  done
  return 0
}

inputs_key() {
  {
    sha256sum "$top"/scripts/vm/*
    echo "bins: ${KVTIER_VM_BINS:-all}"
    echo "$kernel_dir"
    build_executables | xargs -r stat -L -c '%n %s %Y'
    find "$top/scripts" "$top/tests" "$top/systemd" "$traces" -printf '%p %s %T@\n' | sort
    stat -L -c '%n %s %Y' "$busybox" "${host_tools[@]}"
  } | sha256sum | cut -c1-16
}

key=$(inputs_key)
out=$cache/initramfs-$key.cpio.gz
if [[ -f $out ]]; then
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/initramfs.lock"
flock 9
if [[ -f $out ]]; then
  echo "$out"
  exit 0
fi

stage=$(mktemp -d "$cache/initramfs-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
cd "$stage"
# The host's merged /usr layout, so that every path ldd prints exists as is.
mkdir -p bin sbin usr/bin usr/sbin usr/lib/modules usr/lib64 etc proc sys dev tmp run root mnt \
  kvtier/bin
ln -s usr/lib lib
ln -s usr/lib64 lib64

install -m 0755 "$top/scripts/vm/init" init
cp "$busybox" bin/busybox
for applet in $(bin/busybox --list); do
  [[ -e bin/$applet ]] || ln -s busybox "bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\n' >etc/passwd
printf 'root:x:0:\n' >etc/group
mknod -m 600 dev/console c 5 1 2>/dev/null || true

version=$(basename "$(find "$kernel_dir/lib/modules" -mindepth 1 -maxdepth 1 -type d)")
cp -a "$kernel_dir/lib/modules/$version" lib/modules/

is_elf() { [[ $(od -An -c -N4 "$1" | tr -d ' ') == '177ELF' ]]; }

# ELF files whose libraries must come along.
needs_libs=("${host_tools[@]}")
cp "${host_tools[@]}" usr/bin/
declare -A seen=()
while IFS= read -r f; do
  is_elf "$f" || continue
  name=$(basename "$f")
  if [[ -n ${seen[$name]:-} ]]; then
    echo "vm: two executables named $name (${seen[$name]} and $f); keeping the first" >&2
    continue
  fi
  seen[$name]=$f
  objcopy --strip-debug "$f" "kvtier/bin/$name"
  needs_libs+=("$f")
done < <(build_executables)

# Every library ldd lists (absolute paths), and the dynamic loader itself.
libs=$(for f in "${needs_libs[@]}"; do ldd "$f" 2>/dev/null || true; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
for lib in $libs; do
  mkdir -p ".$(dirname "$lib")"
  cp -L "$lib" ".$lib"
done
ldconfig -r . 2>/dev/null || true

cp -a "$top/scripts" kvtier/scripts
cp -a "$top/tests" kvtier/tests
cp -a "$top/systemd" kvtier/systemd
cp -a "$traces" kvtier/traces

tmp=$cache/initramfs-$key.tmp
find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -1 >"$tmp"
mv "$tmp" "$out"
# Older archives go, but not the previous one: a run may be copying it now.
find "$cache" -maxdepth 1 -name 'initramfs-*.cpio.gz' -printf '%T@ %p\n' | sort -rn |
  tail -n +3 | cut -d' ' -f2- | xargs -r rm -f
echo "$out"
