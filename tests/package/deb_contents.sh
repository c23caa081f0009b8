#!/usr/bin/env bash
# package.deb_contents: builds kvtier's .deb (scripts/package.sh) and checks what an operator's
# dpkg will see: its metadata (dpkg-deb -f), its files in their FHS places (dpkg-deb -c), the
# config as a conffile, the maintainer scripts, and that the unit, the sysusers.d snippet and
# the config it carries are the repository's. Installing it on a clean Debian 12 is
# vm.systemd_service.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
export KVTIER_BUILD_DIR=${KVTIER_BUILD_DIR:-$top/build}
fails=0
bad() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
deb=$("$top/scripts/package.sh") || { echo "FAIL: scripts/package.sh" >&2; exit 1; }
echo "package: $deb ($(du -k "$deb" | cut -f1) KiB)"
field() { dpkg-deb -f "$deb" "$1"; }
[[ $(field Package) == kvtier ]] || bad "Package: $(field Package)"
[[ $(field Architecture) == amd64 ]] || bad "Architecture: $(field Architecture)"
[[ $(field Version) =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || bad "Version: $(field Version)"
depends=$(field Depends)
echo "Depends: $depends" >&2
# The shared libraries kvtierd and kvtierctl load (dpkg-shlibdeps), and the maintainer
# scripts' tools.
for want in libc6 'libstdc\+\+6' libbpf1 libnuma1 libsystemd0 'libspdlog[0-9.]+-fmt[0-9]+' 'libfmt[0-9]+' \
  'libre2-[0-9]+' 'libtomlplusplus[0-9]+' 'libprometheus-cpp-pull[0-9.]+' init-system-helpers passwd procps; do
  grep -Eq "(^|, )$want( |,|$)" <<<"$depends" || bad "Depends lacks $want"
done
grep -q -- '-dev\b' <<<"$depends" && bad "Depends names a -dev package"
# replay --png's matplotlib is suggested, never required.
grep -q python3 <<<"$depends" && bad "Depends names python3 ($depends): matplotlib is only suggested"
[[ $(field Suggests) == *python3-matplotlib* ]] || bad "Suggests lacks python3-matplotlib: $(field Suggests)"

contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for want in ./usr/sbin/kvtierd ./usr/bin/kvtierctl ./usr/lib/systemd/system/kvtierd.service \
  ./usr/lib/sysusers.d/kvtier.conf ./etc/kvtier/kvtier.toml ./usr/share/man/man8/kvtierd.8 \
  ./usr/share/man/man8/kvtierctl.8 ./usr/share/doc/kvtier/install.md ./usr/share/doc/kvtier/operate.md \
  ./usr/share/kvtier/replay_plot.py; do
  grep -qx -- "$want" <<<"$contents" || bad "the package lacks $want"
done
# Nothing of the build but the two programs: no tests, benchmarks, simulator, nothing in /usr/local.
extra=$(grep -E '^\./usr/(s?bin|libexec)/.' <<<"$contents" | grep -Ev '^\./usr/(sbin/kvtierd|bin/kvtierctl)$' || true)
[[ -z $extra ]] || bad "unexpected programs in the package: $extra"
grep -q '^\./usr/local' <<<"$contents" && bad "the package installs under /usr/local"

ctrl=$(mktemp -d)
trap 'rm -rf "$ctrl"' EXIT
dpkg-deb -e "$deb" "$ctrl/DEBIAN"
[[ $(cat "$ctrl/DEBIAN/conffiles" 2>/dev/null) == /etc/kvtier/kvtier.toml ]] ||
  bad "conffiles: '$(cat "$ctrl/DEBIAN/conffiles" 2>/dev/null)' (want /etc/kvtier/kvtier.toml)"
for script in postinst prerm postrm; do
  [[ -x $ctrl/DEBIAN/$script ]] || bad "no executable $script"
  sh -n "$ctrl/DEBIAN/$script" || bad "$script: sh -n fails"
done
grep -q 'systemd-sysusers.*kvtier.conf' "$ctrl/DEBIAN/postinst" || bad "postinst does not run systemd-sysusers"
grep -q 'daemon-reload' "$ctrl/DEBIAN/postinst" || bad "postinst does not daemon-reload"
grep -v '^[[:space:]]*#' "$ctrl/DEBIAN/postinst" | grep -Eq 'deb-systemd-invoke (start|restart)|systemctl (start|enable)' &&
  bad "postinst starts or enables kvtierd on install"

dpkg-deb -x "$deb" "$ctrl/root"
cmp -s "$ctrl/root/usr/lib/systemd/system/kvtierd.service" "$top/systemd/kvtierd.service" ||
  bad "the packaged unit differs from systemd/kvtierd.service (paths not /usr?)"
cmp -s "$ctrl/root/etc/kvtier/kvtier.toml" "$top/systemd/kvtier.toml" || bad "the packaged config differs from systemd/kvtier.toml"
cmp -s "$ctrl/root/usr/lib/sysusers.d/kvtier.conf" "$top/systemd/kvtier.sysusers" || bad "the packaged sysusers.d snippet differs"
# The packaged kvtierd accepts the packaged config (its socket group, which the postinst
# creates, made root's here), and its compiled-in default is /etc's.
sed 's/^socket_group = "kvtier"/socket_group = "root"/' "$ctrl/root/etc/kvtier/kvtier.toml" >"$ctrl/check.toml"
out=$("$ctrl/root/usr/sbin/kvtierd" --check-config --config "$ctrl/check.toml" 2>&1) ||
  bad "packaged kvtierd --check-config on the packaged config: $out"
rodata=$(strings "$ctrl/root/usr/sbin/kvtierd")
grep -qx /etc/kvtier/kvtier.toml <<<"$rodata" ||
  bad "the packaged kvtierd's default --config is not /etc/kvtier/kvtier.toml"
sections=$(readelf -S "$ctrl/root/usr/sbin/kvtierd")
grep -q '\.debug_info' <<<"$sections" && bad "kvtierd carries debug info (not stripped)"
if ((fails)); then
  echo "package.deb_contents: $fails failure(s)" >&2
  exit 1
fi
echo "package.deb_contents: ok"
