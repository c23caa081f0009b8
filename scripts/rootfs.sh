#!/usr/bin/env bash
# Builds a minimal Debian 12 (bookworm) root filesystem from Debian's packages, with systemd as
# init, caches it, and prints the path of the cached tar (uncompressed, root-owned entries,
# device nodes included; `docker import FILE`, `tar -xpf FILE -C DIR` as root, or
# scripts/vm/run --systemd, which boots it).
#
# Usage: scripts/rootfs.sh [--include PKG[,PKG...]] [--offline PKG[,PKG...]]
#   --include: extra packages installed in the root (repeatable).
#   --offline: packages NOT installed, but downloaded with everything they need that the root
#              lacks into /var/local/debs, a local apt repository that is the root's only apt
#              source (lists updated): `apt-get install ./some.deb` that depends on them then
#              works inside the root without a network, as it would against the mirror.
#              Without --offline the root's apt sources are the mirror's.
# The root: mmdebstrap --variant=minbase plus systemd, systemd-sysv, dbus and udev; no kernel,
# no bootloader; /usr/share/{doc,man,info,locale} are left out by a dpkg path-exclude that
# stays in the root (/etc/dpkg/dpkg.cfg.d/99mmdebstrap), so packages installed later do not
# get them either; root has no password.
#
# Mirror: KVTIER_DEBIAN_MIRROR (default http://deb.debian.org/debian) and
# KVTIER_DEBIAN_SECURITY (default http://deb.debian.org/debian-security); bookworm,
# bookworm-updates and bookworm-security, main.
# Cache: KVTIER_ROOTFS_CACHE (default $KVTIER_BUILD_DIR/vm-cache, KVTIER_BUILD_DIR defaulting
# to <repo>/build): rootfs-<key>.tar, key = a hash of this script and its arguments and the
# mirrors (the recipe), not of the archive's state: delete the file to pick up Debian's
# updates. Needs root (mmdebstrap's root mode) and mmdebstrap, dpkg-dev.
set -euo pipefail

include=(systemd systemd-sysv dbus udev)
offline=()
while (($#)); do
  case $1 in
    --include) IFS=, read -r -a more <<<"${2:?--include needs packages}"; include+=("${more[@]}"); shift ;;
    --offline) IFS=, read -r -a more <<<"${2:?--offline needs packages}"; offline+=("${more[@]}"); shift ;;
    -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "rootfs: unknown argument '$1' (--include PKGS, --offline PKGS)" >&2; exit 2 ;;
  esac
  shift
done
for p in "${include[@]}" "${offline[@]}"; do
  [[ $p =~ ^[a-z0-9][a-z0-9.+-]+$ ]] || { echo "rootfs: '$p' is not a Debian package name" >&2; exit 2; }
done
mirror=${KVTIER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${KVTIER_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
cache=${KVTIER_ROOTFS_CACHE:-$build/vm-cache}

mapfile -t include < <(printf '%s\n' "${include[@]}" | sort -u)
mapfile -t offline < <(printf '%s\n' "${offline[@]}" | sed '/^$/d' | sort -u)
key=$({
  sha256sum <"$0"
  echo "include ${include[*]}"
  echo "offline ${offline[*]}"
  echo "$mirror $security"
} | sha256sum | cut -c1-16)
out=$cache/rootfs-$key.tar
if [[ -f $out ]]; then
  echo "$out"
  exit 0
fi
for tool in mmdebstrap dpkg-scanpackages; do
  command -v "$tool" >/dev/null || { echo "rootfs: $tool is missing (apt-get install mmdebstrap dpkg-dev)" >&2; exit 1; }
done
[[ $(id -u) -eq 0 ]] || { echo "rootfs: needs root (mmdebstrap's root mode)" >&2; exit 1; }

mkdir -p "$cache"
exec 9>"$cache/rootfs.lock"
flock 9
if [[ -f $out ]]; then
  echo "$out"
  exit 0
fi
tmp=$(mktemp "$cache/rootfs-build.XXXXXX.tar")
log=$cache/rootfs-$key.log
trap 'rm -f "$tmp"' EXIT

hooks=(--customize-hook='rm -f "$1/etc/resolv.conf"; echo kvtier-guest >"$1/etc/hostname"'
  --customize-hook='passwd --root "$1" -d root >/dev/null')
if ((${#offline[@]})); then
  # Download what the packages need (against what the root has), make it a flat repository,
  # and point apt at it alone.
  # (mmdebstrap's own downloads, of what is installed, are dropped first.)
  hooks+=(--skip=cleanup/apt/lists
    --customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb'
    --customize-hook="APT_CONFIG=\$MMDEBSTRAP_APT_CONFIG apt-get --yes -q --no-install-recommends --download-only install ${offline[*]}"
    --customize-hook='mkdir -p "$1/var/local/debs" && mv "$1"/var/cache/apt/archives/*.deb "$1/var/local/debs/"'
    --customize-hook='cd "$1/var/local/debs" && dpkg-scanpackages -m . /dev/null 2>/dev/null >Packages'
    --customize-hook='rm -f "$1"/etc/apt/sources.list.d/*; echo "deb [trusted=yes] file:/var/local/debs ./" >"$1/etc/apt/sources.list"'
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/*; chroot "$1" apt-get -q update')
fi
echo "rootfs: building a Debian 12 root (${include[*]}${offline:+; offline: ${offline[*]}}) into $out; log: $log" >&2
start=$(date +%s)
if ! mmdebstrap --mode=root --variant=minbase --format=tar \
  --include="$(IFS=,; echo "${include[*]}")" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  "${hooks[@]}" \
  bookworm "$tmp" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "rootfs: mmdebstrap failed (log: $log); is $mirror reachable?" >&2
  exit 1
fi
chmod 0644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "rootfs: built in $(($(date +%s) - start)) s, $(du -m "$out" | cut -f1) MiB" >&2
echo "$out"
