#!/usr/bin/env bash
# The initramfs pieces of scripts/vm/run --systemd.
#   systemd-initrd.sh ROOTFS_TAR
#       prints the path of a gzip'd newc cpio of the root in ROOTFS_TAR (scripts/rootfs.sh),
#       cached next to it (rootfs-<key>.cpio.gz): the kernel unpacks it into its tmpfs root
#       and the run's layer adds /init, so systemd runs as PID 1 from there.
#   systemd-initrd.sh --layer DIR [--bin FILE]... [--file FILE]...
#       fills DIR (which holds kvtier/run.conf) with what one run adds on top:
#         /init -> /sbin/init (systemd), kvtier-vm.service (runs scripts/vm/systemd-run once
#         multi-user.target is reached), the timers that would start apt or a backup masked;
#         /kvtier/scripts, /kvtier/tests, /kvtier/traces (the repository's bench/traces);
#         /kvtier/bin/NAME for each --bin
#         (a wrapper that runs it with /kvtier/lib, where the libraries ldd lists go, apart
#         from the root's own); /kvtier/files/ for each --file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

if [[ ${1:-} != --layer ]]; then
  tar=$(cd "$(dirname "${1:?usage: systemd-initrd.sh ROOTFS_TAR | --layer DIR ...}")" && pwd)/$(basename "$1")
  out=${tar%.tar}.cpio.gz
  if [[ -f $out && $out -nt $tar ]]; then
    echo "$out"
    exit 0
  fi
  exec 9>"$out.lock"
  flock 9
  if [[ -f $out && $out -nt $tar ]]; then
    echo "$out"
    exit 0
  fi
  stage=$(mktemp -d "${tar%.tar}.stage.XXXXXX")
  trap 'rm -rf "$stage" "$out.tmp"' EXIT
  # Root owns the entries and device nodes are kept: extract as root.
  tar -xpf "$tar" -C "$stage" --numeric-owner
  (cd "$stage" && find . -mindepth 1 | cpio -o -H newc --quiet | gzip -1) >"$out.tmp"
  mv "$out.tmp" "$out"
  echo "$out"
  exit 0
fi

layer=${2:?--layer needs a directory}
shift 2
mkdir -p "$layer/kvtier/bin" "$layer/kvtier/lib" "$layer/kvtier/files" \
  "$layer/etc/systemd/system/multi-user.target.wants"
ln -s sbin/init "$layer/init"
cat >"$layer/etc/systemd/system/kvtier-vm.service" <<'UNIT'
[Unit]
Description=kvtier test command (scripts/vm/run --systemd)
After=multi-user.target

[Service]
Type=exec
ExecStart=/kvtier/scripts/vm/systemd-run
StandardInput=null
StandardOutput=journal+console
StandardError=journal+console
UNIT
ln -s ../kvtier-vm.service "$layer/etc/systemd/system/multi-user.target.wants/kvtier-vm.service"
for unit in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer; do
  ln -s /dev/null "$layer/etc/systemd/system/$unit"
done
cp -r "$top/scripts" "$top/tests" "$layer/kvtier/"
cp -r "$top/bench/traces" "$layer/kvtier/traces"
while (($#)); do
  case $1 in
    --bin)
      f=$2
      name=$(basename "$f")
      mkdir -p "$layer/kvtier/libexec"
      cp "$f" "$layer/kvtier/libexec/$name"
      strip --strip-debug "$layer/kvtier/libexec/$name" 2>/dev/null || true
      # Every library but the C library's own (the root's glibc is the loader's).
      ldd "$f" | awk '$3 ~ /^\// {print $3}' | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
        while read -r lib; do cp -L "$lib" "$layer/kvtier/lib/"; done
      printf '#!/bin/sh\nLD_LIBRARY_PATH=/kvtier/lib exec /kvtier/libexec/%s "$@"\n' "$name" >"$layer/kvtier/bin/$name"
      chmod 0755 "$layer/kvtier/bin/$name"
      ;;
    --file) cp "$2" "$layer/kvtier/files/" ;;
    *) echo "systemd-initrd: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
