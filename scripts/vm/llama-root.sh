#!/usr/bin/env bash
# Builds the llama-server guest layer and prints its path: a gzip'd newc cpio holding
#   /llama               a root with Debian forky's llama.cpp-tools (llama-server), libllama0,
#                        libggml0 and the forky libraries they run on (libc6, libstdc++6,
#                        libgcc-s1, libgomp1, libssl3t64 with zlib1g and libzstd1, which
#                        libcrypto needs though no Depends: says so), unpacked, not installed;
#   /llama/model.gguf    a llama-architecture model with random weights from a fixed seed,
#                        written here by scripts/vm/llama-model.py with forky's python3-gguf
#                        and bookworm's python3-numpy, both only unpacked.
# scripts/vm/run --layer FILE appends it to the busybox initramfs; the guest runs the server
# with `chroot /llama /usr/bin/llama-server ...` (its comm is llama-server), /proc and /dev
# mounted inside (tests/vm/llama_server_guest.sh). Bookworm and trixie have no llama.cpp.
#
# Forky is read through a private apt sources list, lists and cache under the VM cache
# ($KVTIER_BUILD_DIR/vm-cache/apt-forky): the host's apt configuration stays as it is.
# Cache: vm-cache/llama-root-<key>.cpio.gz, key = a hash of this script, the model writer
# and the mirror (the recipe), not of the archive's state: delete the file to pick up
# Debian's updates. Nothing is downloaded but Debian packages, and only when the layer is
# not cached. Mirror: KVTIER_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Usage: scripts/vm/llama-root.sh
set -euo pipefail

runtime=(llama.cpp-tools libllama0 libggml0 libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64 zlib1g libzstd1)
mirror=${KVTIER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
cache=$build/vm-cache
key=$({
  sha256sum "$0" "$here/llama-model.py" "$here/apt-private.sh"
  echo "$mirror"
} | sha256sum | cut -c1-16)
out=$cache/llama-root-$key.cpio.gz
if [[ -f $out ]]; then
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/llama-root.lock"
flock 9
if [[ -f $out ]]; then
  echo "$out"
  exit 0
fi
work=$(mktemp -d "$cache/llama-root.XXXXXX")
trap 'rm -rf "$work"' EXIT
# apt-get runs as _apt when it can; directories it may write to avoid a warning.
chmod 0777 "$work"
# shellcheck source=scripts/vm/apt-private.sh
. "$here/apt-private.sh"
if ! apt_private "$cache" forky "$mirror"; then
  echo "llama-root: apt-get update of forky failed (network? the keyring" \
    "/usr/share/keyrings/debian-archive-keyring.gpg must hold the keys forky is signed with)" >&2
  exit 1
fi
apt_forky=("${apt_private_opts[@]}")
mkdir -p "$work/debs/run" "$work/debs/py"
if ! (cd "$work/debs/run" && apt-get "${apt_forky[@]}" download -q "${runtime[@]}" >"$work/apt.log" 2>&1) ||
  ! (cd "$work/debs/py" && apt-get "${apt_forky[@]}" download -q python3-gguf >>"$work/apt.log" 2>&1) ||
  ! (cd "$work/debs/py" && apt-get download -q python3-numpy >>"$work/apt.log" 2>&1); then
  cat "$work/apt.log" >&2
  echo "llama-root: cannot download the packages (${runtime[*]} python3-gguf from forky," \
    "python3-numpy from the host's suites: apt-get update?)" >&2
  exit 1
fi

stage=$work/stage
root=$stage/llama
mkdir -p "$root"
for deb in "$work"/debs/run/*.deb; do dpkg-deb -x "$deb" "$root"; done
for deb in "$work"/debs/py/*.deb; do dpkg-deb -x "$deb" "$work/py"; done
# The merged-/usr links a Debian root has (the packages ship their files under usr/ only).
for d in bin sbin lib lib64; do
  [[ -e $root/$d ]] || ln -s "usr/$d" "$root/$d"
done
mkdir -p "$root/proc" "$root/dev" "$root/tmp" "$root/sys"
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" "$root/usr/include"
[[ -x $root/usr/bin/llama-server ]] || { echo "llama-root: llama.cpp-tools holds no usr/bin/llama-server" >&2; exit 1; }

PYTHONPATH=$work/py/usr/lib/python3/dist-packages python3 "$here/llama-model.py" "$root/model.gguf" >&2

(cd "$stage" && find . -mindepth 1 | cpio -o -H newc -R 0:0 --quiet | gzip -1) >"$work/layer.cpio.gz"
mv "$work/layer.cpio.gz" "$out"
echo "llama-root: $(du -sm "$root" | cut -f1) MiB root with $(
  dpkg-deb -f "$work"/debs/run/llama.cpp-tools_*.deb Version
) llama.cpp-tools and a $(du -m "$root/model.gguf" | cut -f1) MiB model -> $out" >&2
echo "$out"
