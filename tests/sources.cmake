kvtier_gtest(unit_sources unit
  SOURCES unit/source_probes_test.cpp unit/damon_sysfs_test.cpp unit/bpf_events_test.cpp
          unit/source_registry_test.cpp unit/idle_page_test.cpp unit/soft_dirty_test.cpp
          unit/ctl_sources_test.cpp unit/damon_sizing_test.cpp unit/latest_job_thread_test.cpp
  LIBS agent_sources)
add_dependencies(unit_sources kvtierctl)

kvtier_gtest(privileged_sources privileged
  SOURCES privileged/sources_test.cpp
  LIBS agent_sources)

# Guest-side material for the vm tests: a workload with a known hot set and a
# runner that prints what one source saw.
add_executable(kvtier_hotset vm/hotset.cpp)
target_link_libraries(kvtier_hotset PRIVATE Threads::Threads kvtier_warnings)
add_executable(kvtier_source_run vm/source_run.cpp)
target_link_libraries(kvtier_source_run PRIVATE agent_sources kvtier_warnings)
kvtier_vm_test(sources_damon sources_damon.sh)
kvtier_vm_test(sources_hints sources_hints.sh)
kvtier_vm_test(sources_privileged sources_privileged.sh)
kvtier_vm_test(damon_at_size damon_at_size.sh)
