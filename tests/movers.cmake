# Movers: unit tests (fake move_pages, fixture sysfs trees), privileged tests on
# this host's single node, and guest tests with a real second node.
kvtier_gtest(unit_movers unit
  SOURCES unit/move_pages_mover_test.cpp unit/residency_test.cpp unit/damos_mover_test.cpp
  LIBS agent_movers)

kvtier_gtest(privileged_movers privileged
  SOURCES privileged/movers_test.cpp
  LIBS agent_movers)
