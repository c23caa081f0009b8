#!/usr/bin/env bash
# Installs every Debian package kvtier needs (skipped when all are present),
# then configures and builds into ${KVTIER_BUILD_DIR:-build}.
# Usage: scripts/setup.sh [--no-build | --target TARGET]
#   --no-build       the packages only;
#   --target TARGET  build only TARGET (scripts/demo.sh: kvtier_demo_programs, what the demo runs).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
build_it=1
target=()
case ${1:-} in
  "") ;;
  --no-build) build_it=0 ;;
  --target) target=(--target "${2:?setup: --target needs a CMake target, e.g. kvtier_demo_programs}") ;;
  *) echo "setup: unknown argument '$1' (use --no-build or --target TARGET)" >&2; exit 2 ;;
esac

packages=(
  # toolchain and checks
  build-essential cmake ninja-build pkg-config clang clang-19 clang-format clang-tidy-19 llvm
  # libFuzzer and the sanitizer runtimes for clang-19 (scripts/fuzz.sh, scripts/sanitize.sh)
  libclang-rt-19-dev
  # BPF
  libbpf-dev bpftool libelf-dev zlib1g-dev linux-libc-dev
  # libraries
  libnuma-dev libspdlog-dev libfmt-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libsystemd-dev prometheus-cpp-dev liburing-dev libre2-dev
  # tests and benchmarks
  googletest libgtest-dev libgmock-dev libbenchmark-dev python3 python3-matplotlib
  # deploy/ (tests/deploy.cmake): promtool and a Prometheus server for the rules and the scrape
  # test; inotify-tools and jq for the config reloader
  prometheus inotify-tools jq
  # the tiered-memory guest
  qemu-system-x86 busybox-static cpio xz-utils kmod ndctl daxctl
  # the Debian package (cpack, dpkg-shlibdeps) and the systemd guest's Debian root
  dpkg-dev mmdebstrap
)

# node and npm run the Kubernetes manifests' schema check (tests/deploy/kubernetes): Debian's
# unless some node is installed already (a node from elsewhere conflicts with Debian's npm).
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all ${#packages[@]} packages present"
fi

((build_it)) || exit 0
# Prefix /usr: what a Debian package installs to (scripts/package.sh needs it).
cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
cmake --build "$build" -j "$(nproc)" "${target[@]}"
