#!/usr/bin/env bash
# Style and static checks, both part of the test command:
#   clang-format (the checked-in .clang-format) must leave every C/C++ file as it is;
#   clang-tidy-19 (the checked-in .clang-tidy) must report nothing for first-party code.
# Usage: scripts/lint.sh [--format-only]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_BUILD_DIR:-$top/build}
cd "$top"

mapfile -t files < <(git ls-files --cached --others --exclude-standard \
  '*.cpp' '*.hpp' '*.h' '*.c' | grep -v '^bpf/vmlinux/' || true)
bad=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "lint: clang-format would change: ${bad[*]} (run: clang-format -i FILE)" >&2
  exit 1
fi
echo "lint: clang-format clean (${#files[@]} files)"
[[ ${1:-} == --format-only ]] && exit 0

[[ -f $build/compile_commands.json ]] || { echo "lint: $build/compile_commands.json missing; run scripts/setup.sh" >&2; exit 1; }
mapfile -t tus < <(printf '%s\n' "${files[@]}" | grep -E '^(agent|policy|bench)/.*\.cpp$' || true)
out=$(mktemp)
if ! run-clang-tidy-19 -quiet -p "$build" -j "$(nproc)" "${tus[@]/#/$top/}" >"$out" 2>&1; then
  grep -E 'warning:|error:' "$out" | sort -u | head -50 >&2
  echo "lint: clang-tidy found problems (full log: $out)" >&2
  exit 1
fi
rm -f "$out"
echo "lint: clang-tidy clean (${#tus[@]} translation units)"
