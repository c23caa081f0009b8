# Movers: unit tests (fake move_pages, fixture sysfs trees), privileged tests on
# this host's single node, and guest tests with a real second node.
kvtier_gtest(unit_movers unit
  SOURCES unit/move_pages_mover_test.cpp unit/residency_test.cpp unit/damos_mover_test.cpp
  LIBS agent_movers)

kvtier_gtest(privileged_movers privileged
  SOURCES privileged/movers_test.cpp
  LIBS agent_movers)

# Guest-side program for the vm tests (runs in the guest via scripts/vm/run).
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
add_executable(kvtier_mover_vmtest vm/mover_vmtest.cpp)
target_link_libraries(kvtier_mover_vmtest PRIVATE agent_movers PkgConfig::URING Threads::Threads
                      kvtier_warnings)
# A process with an io_uring-registered (long-term pinned) buffer, for vm.pinned.
add_executable(kvtier_pin_hold vm/pin_hold.cpp)
target_link_libraries(kvtier_pin_hold PRIVATE PkgConfig::URING kvtier_warnings)
kvtier_vm_test(movers_integrity movers_integrity.sh)
kvtier_vm_test(movers_full movers_full.sh)
kvtier_vm_test(movers_damos movers_damos.sh)
