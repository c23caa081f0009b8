find_package(nlohmann_json REQUIRED)
# kvsim: unit tests of its logic, plus short real runs of the program (label unit too: they
# need no root and take a few seconds).
kvtier_gtest(unit_kvsim unit
  SOURCES unit/kvsim_trace_test.cpp unit/kvsim_model_test.cpp unit/kvsim_memory_test.cpp
          unit/kvsim_simulator_test.cpp unit/kvsim_run_test.cpp
  LIBS kvsim_core nlohmann_json::nlohmann_json)
add_dependencies(unit_kvsim kvsim)
target_compile_definitions(unit_kvsim PRIVATE
  KVTIER_KVSIM_BIN="$<TARGET_FILE:kvsim>"
  KVTIER_SHARED_TRACES="${PROJECT_SOURCE_DIR}/../shared/traces")
kvtier_vm_test(kvsim_guest kvsim_guest.sh)

# The benchmark harness: the residency probe's parsers (C++) and report.py's metrics (python).
kvtier_gtest(unit_bench_probe unit SOURCES unit/bench_probe_test.cpp LIBS bench_probe_core)
