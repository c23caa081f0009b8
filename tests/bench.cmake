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
  KVTIER_TRACES="${PROJECT_SOURCE_DIR}/bench/traces")
kvtier_vm_test(kvsim_guest kvsim_guest.sh)

# The oracle: kvsim's live truth file and the oracle's decision.
kvtier_gtest(unit_bench_oracle unit SOURCES unit/bench_oracle_test.cpp
  LIBS bench_oracle_core kvsim_core)
add_dependencies(unit_bench_oracle kvsim kvtier_oracle)
target_compile_definitions(unit_bench_oracle PRIVATE
  KVTIER_KVSIM_BIN="$<TARGET_FILE:kvsim>" KVTIER_ORACLE_BIN="$<TARGET_FILE:kvtier_oracle>")

# The benchmark harness: the residency probe's parsers (C++) and report.py's metrics (python).
kvtier_gtest(unit_bench_probe unit SOURCES unit/bench_probe_test.cpp LIBS bench_probe_core)
add_test(NAME unit.bench_report
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/unit/bench_report_test.py)
set_tests_properties(unit.bench_report PROPERTIES LABELS unit)
# The benchmark harness end to end in the guest (short): no tiering, DAMOS and the oracle on
# 6.12, damos-goal on 7.3 (four guests: more time than the other vm tests).
kvtier_vm_test(bench_smoke bench_smoke.sh)
set_tests_properties(vm.bench_smoke PROPERTIES TIMEOUT 1800)

# The demo's sh readers of kvsim's and the probe's lines against a recorded kvsim output.
add_test(NAME unit.demo_lines COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/demo_lines_test.sh)
set_tests_properties(unit.demo_lines PROPERTIES LABELS unit)

# The scale benchmark's short version (bench/scale.sh --short): the whole control-loop step over
# 16 GiB of synthetic KV cache, 3 steps; it fails when the loop's mechanics disagree with the
# generator (tracked bytes, bytes per node, moves in the steady state).
add_test(NAME unit.bench_scale_short COMMAND ${PROJECT_SOURCE_DIR}/bench/scale.sh --short)
# The sanitizer build (scripts/sanitize.sh) builds kvtier_test_programs only: the test needs its program.
add_dependencies(kvtier_test_programs kvtier_scale_bench)
set_tests_properties(unit.bench_scale_short PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT KVTIER_BUILD_DIR=${CMAKE_BINARY_DIR})

# The llama-server load generator's logic: trace to conversations, requests, responses, metrics
# and the KV buffer's ground truth (the program runs in vm.llama_server).
kvtier_gtest(unit_bench_loadgen unit SOURCES unit/bench_loadgen_test.cpp
  LIBS loadgen_core kvsim_core nlohmann_json::nlohmann_json)
add_test(NAME unit.bench_llama_report
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/unit/bench_llama_report_test.py)
set_tests_properties(unit.bench_llama_report PROPERTIES LABELS unit)
