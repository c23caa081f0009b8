# shellcheck shell=bash
# Sourced by the vm test scripts (bash). ctest sets KVTIER_VM_RUN,
# KVTIER_BUILD_DIR and KVTIER_SOURCE_DIR; run by hand, they default to this
# checkout's scripts/vm/run and build/.
KVTIER_SOURCE_DIR=${KVTIER_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
KVTIER_VM_RUN=${KVTIER_VM_RUN:-$KVTIER_SOURCE_DIR/scripts/vm/run}
KVTIER_BUILD_DIR=${KVTIER_BUILD_DIR:-$KVTIER_SOURCE_DIR/build}
export KVTIER_SOURCE_DIR KVTIER_VM_RUN KVTIER_BUILD_DIR
test_name=$(basename "$0" .sh)

fail() {
  echo "$test_name: FAIL: $*" >&2
  exit 1
}

# vm_run [RUN OPTIONS] -- COMMAND...: scripts/vm/run, with one line that
# tells a broken guest (exit 124, 125, 126: no verdict on the code under
# test) from a command that failed in a working guest. Returns run's status.
vm_run() {
  local rc=0
  "$KVTIER_VM_RUN" "$@" || rc=$?
  case $rc in
    0) ;;
    124) echo "$test_name: GUEST TIMED OUT (exit 124): no verdict on the code under test" >&2 ;;
    125) echo "$test_name: GUEST FAILED TO BOOT (exit 125): no verdict on the code under test" >&2 ;;
    126) echo "$test_name: CXL SETUP FAILED in the guest (exit 126): no verdict on the code under test" >&2 ;;
    *) echo "$test_name: the command failed in the guest (exit $rc)" >&2 ;;
  esac
  return $rc
}
