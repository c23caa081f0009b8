kvtier_gtest(unit_sources unit
  SOURCES unit/source_probes_test.cpp unit/damon_sysfs_test.cpp unit/bpf_events_test.cpp
          unit/source_registry_test.cpp
  LIBS agent_sources)
target_include_directories(unit_sources PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})

kvtier_gtest(privileged_sources privileged
  SOURCES privileged/sources_test.cpp
  LIBS agent_sources)
target_include_directories(privileged_sources PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
