#!/usr/bin/env bash
# deploy/kubernetes against the Kubernetes API schema, offline (tests/deploy/kubernetes/
# validate.mjs), with two broken copies that must be rejected.
# Usage: kubernetes_manifests_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
here=$src/tests/deploy/kubernetes
command -v npm >/dev/null && command -v node >/dev/null ||
  { echo "node and npm not found: scripts/setup.sh installs Debian's nodejs and npm"; exit 1; }
work=$build/k8s-validate
mkdir -p "$work"
# The packages once per lock file (npm's registry, ~15 s).
if ! cmp -s "$here/package-lock.json" "$work/package-lock.json" || [[ ! -d $work/node_modules ]]; then
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
fi
cp "$here/validate.mjs" "$work/"
node "$work/validate.mjs" "$src/deploy/kubernetes"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A port given by name where the schema wants a number.
mkdir "$tmp/type" && cp "$src"/deploy/kubernetes/*.yaml "$tmp/type/"
sed -i 's/containerPort: 9464/containerPort: metrics/' "$tmp/type/daemonset.yaml"
out=$(node "$work/validate.mjs" "$tmp/type" --expect-invalid)
grep -q 'containerPort must be integer' <<<"$out" || { echo "$out"; echo "a string port was not rejected"; exit 1; }
# A privileged container.
mkdir "$tmp/priv" && cp "$src"/deploy/kubernetes/*.yaml "$tmp/priv/"
sed -i 's/privileged: false/privileged: true/' "$tmp/priv/daemonset.yaml"
out=$(node "$work/validate.mjs" "$tmp/priv" --expect-invalid)
grep -q 'FAIL: kvtierd: not privileged' <<<"$out" || { echo "$out"; echo "privileged: true was not rejected"; exit 1; }
echo "two broken copies rejected"
