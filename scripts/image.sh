#!/usr/bin/env bash
# Builds kvtier's container image from Debian packages, nothing pulled from a registry:
#  1. a Debian 12 root filesystem made by mmdebstrap from this host's apt sources: the
#     essential packages, kvtierd's runtime libraries, tini (PID 1), and inotify-tools and jq
#     for the config reloader (deploy/kubernetes); /usr merged by mmdebstrap's hook, so the
#     usrmerge package and the perl it needs stay out;
#  2. kvtier's install tree (`cmake --install` of $KVTIER_BUILD_DIR into /usr) and the
#     config reloader copied in;
#  3. imported with `podman import`: tini as the entrypoint, kvtierd its child.
# With --check it then runs the image on this host (scripts/image-check.sh).
# Usage: scripts/image.sh [--check]
# Env: KVTIER_BUILD_DIR (default build), KVTIER_IMAGE (default localhost/kvtier:dev),
#      KVTIER_IMAGE_SUITE (default bookworm).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
image=${KVTIER_IMAGE:-localhost/kvtier:dev}
suite=${KVTIER_IMAGE_SUITE:-bookworm}

for tool in mmdebstrap podman; do
  command -v "$tool" >/dev/null ||
    { echo "image: $tool not found (apt-get install mmdebstrap podman runc)"; exit 1; }
done
[[ -x $build/agent/kvtierd ]] ||
  { echo "image: no kvtierd in $build/agent (build first: scripts/setup.sh)"; exit 1; }

# kvtierd's and kvtierctl's shared libraries, by the Debian package that ships each one
# (the build links against this host's -dev packages of the same suite).
libs=$(ldd "$build/agent/kvtierd" "$build/agent/kvtierctl" | awk '/=> \//{print $3}' | sort -u |
  while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2>/dev/null | cut -d: -f1; done |
  sort -u | paste -sd, -)
[[ -n $libs ]] || { echo "image: cannot tell kvtierd's library packages (dpkg -S)"; exit 1; }

sources=()
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
  [[ -s $f ]] && sources+=("$f")
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/tree
DESTDIR=$tree cmake --install "$build" --prefix /usr --strip >/dev/null
install -D -m 0755 "$top/deploy/kubernetes/kvtier-config-reloader" "$tree/usr/bin/kvtier-config-reloader"
# The image carries the binaries and the default config, not the docs.
rm -rf "$tree/usr/share/doc" "$tree/usr/share/man" "$tree/usr/lib/systemd"

start=$(date +%s)
echo "image: root filesystem ($suite: essential, tini, inotify-tools, jq, $libs)"
mmdebstrap --quiet --variant=essential \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --include="tini,inotify-tools,jq,$libs" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook="tar -C '$tree' -c . | tar -C \"\$1\" -x --no-same-owner" \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
  --customize-hook='mkdir -p "$1"/run/kvtier' \
  "$suite" "$work/rootfs.tar" "${sources[@]}"

podman rmi -f "$image" >/dev/null 2>&1 || true
podman import --quiet \
  --change 'ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/usr/sbin/kvtierd"]' \
  --change 'CMD ["--config", "/etc/kvtier/kvtier.toml"]' \
  --change 'STOPSIGNAL SIGTERM' \
  --change "LABEL org.opencontainers.image.title=kvtier org.opencontainers.image.version=$("$build/agent/kvtierd" --version | awk '{print $2}')" \
  "$work/rootfs.tar" "$image" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "image: $image, $((size / 1024 / 1024)) MiB, built in $(($(date +%s) - start)) s"

[[ ${1:-} == --check ]] && exec "$top/scripts/image-check.sh"
exit 0
