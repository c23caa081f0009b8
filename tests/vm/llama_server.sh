#!/usr/bin/env bash
# vm.llama_server: kvtier beside a real inference server. Builds (once, cached by recipe) the
# /llama layer of scripts/vm/llama-root.sh: Debian forky's llama-server and a random-weight
# llama model written at build time (no model download), boots the tiered-memory guest with
# node 0 (352 MiB) smaller than the server's 384 MiB KV cache (12 slots of 8 Ki cells), and
# runs tests/vm/llama_server_guest.sh there (its header lists the assertions: the shipped
# selector finds llama-server, the idle slots' pages reach node 1, completions at
# temperature 0 byte-identical before and after kvtier moved the pages, a restarted server
# picked up). A guest that does not boot is reported as such (GUEST FAILED TO BOOT / TIMED
# OUT), apart from a failed assertion.
set -euo pipefail
# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

t0=$(date +%s)
layer=$("$KVTIER_SOURCE_DIR/scripts/vm/llama-root.sh") || fail "cannot build the llama-server layer (scripts/vm/llama-root.sh)"
t1=$(date +%s)
echo "$test_name: layer $(basename "$layer") $((t1 - t0)) s"
vm_run --layer "$layer" --mem0 352 --timeout 1500 -- sh /kvtier/tests/vm/llama_server_guest.sh || exit $?
echo "$test_name: guest $(($(date +%s) - t1)) s"
