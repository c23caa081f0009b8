#!/usr/bin/env bash
# vm.systemd_service: kvtier's Debian package under real systemd. Builds the package
# (scripts/package.sh), a Debian 12 root with systemd and, in a local apt repository, the
# package's dependencies and bpftool (scripts/rootfs.sh, cached), boots it in the tiered-memory guest
# with systemd as PID 1 (scripts/vm/run --systemd), and runs tests/vm/systemd_service.sh
# there (its header lists the assertions). A guest that does not boot is reported as such
# (GUEST FAILED TO BOOT / TIMED OUT), apart from a failed assertion.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

t0=$(date +%s)
deb=$("$KVTIER_SOURCE_DIR/scripts/package.sh") || fail "cannot build the package"
# The package's dependencies, without versions or alternatives: the root gets them as a local
# repository, and apt checks the versions when it installs the package there.
deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/[[:space:]]//g' | sed '/^$/d' | paste -sd, -)
t1=$(date +%s)
# bpftool comes from there too, installed after kvtier: the root kvtier goes into is clean.
rootfs=$("$KVTIER_SOURCE_DIR/scripts/rootfs.sh" --offline "$deps,bpftool") ||
  fail "cannot build the Debian root (scripts/rootfs.sh)"
t2=$(date +%s)
echo "$test_name: package $(basename "$deb") $((t1 - t0)) s; root $(basename "$rootfs") $((t2 - t1)) s"
vm_run --systemd "$rootfs" --mem0 1536 --bin "$KVTIER_BUILD_DIR/bench/kvsim" --file "$deb" --timeout 1200 \
  -- /kvtier/tests/vm/systemd_service.sh || exit $?
echo "$test_name: guest $(($(date +%s) - t2)) s"
