#!/usr/bin/env bash
# Builds kvtier's Debian package from the build dir (CPack's DEB generator, cmake/Packaging.cmake)
# into $KVTIER_BUILD_DIR/package/ and prints the .deb's path. The build dir must be configured
# with -DCMAKE_INSTALL_PREFIX=/usr (scripts/setup.sh does) and built.
# Usage: scripts/package.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
build=$(cd "$build" && pwd)
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [[ $prefix != /usr ]]; then
  echo "package: $build is configured with CMAKE_INSTALL_PREFIX=${prefix:-?}; a Debian package" \
    "installs to /usr: reconfigure with -DCMAKE_INSTALL_PREFIX=/usr and rebuild" >&2
  exit 1
fi
out=$build/package
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
rm -f "$out"/*.deb
if ! cpack --config "$build/CPackConfig.cmake" -B "$out" >"$out/cpack.log" 2>&1; then
  cat "$out/cpack.log" >&2
  echo "package: cpack failed" >&2
  exit 1
fi
rm -rf "$out/_CPack_Packages"
deb=$(find "$out" -maxdepth 1 -name 'kvtier_*.deb' | head -n 1)
[[ -n $deb ]] || { echo "package: cpack made no kvtier_*.deb (log: $out/cpack.log)" >&2; exit 1; }
echo "$deb"
