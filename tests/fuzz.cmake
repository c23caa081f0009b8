# libFuzzer targets, built when configured with -DKVTIER_FUZZ=ON (clang only;
# scripts/sanitize.sh does it). Each runs for a short fixed time as ctest test
# fuzz.NAME (label fuzz); scripts/fuzz.sh runs them for longer and prints the
# executions and crashes. Seeds are named in scripts/fuzz.sh.
if(NOT KVTIER_FUZZ)
  return()
endif()
set(KVTIER_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz target runs under ctest")
add_custom_target(kvtier_fuzzers)

# kvtier_fuzz(NAME LIBS ...): tests/fuzz/NAME_fuzz.cpp as fuzz_NAME.
function(kvtier_fuzz name)
  cmake_parse_arguments(ARG "" "" "LIBS" ${ARGN})
  add_executable(fuzz_${name} fuzz/${name}_fuzz.cpp)
  target_link_libraries(fuzz_${name} PRIVATE ${ARG_LIBS} kvtier_warnings)
  target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  add_dependencies(kvtier_fuzzers fuzz_${name})
  add_test(NAME fuzz.${name}
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/fuzz.sh --seconds ${KVTIER_FUZZ_SECONDS} ${name})
  math(EXPR timeout "${KVTIER_FUZZ_SECONDS} + 120")
  set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT ${timeout}
    ENVIRONMENT "KVTIER_FUZZ_BUILD_DIR=${PROJECT_BINARY_DIR}")
endfunction()

kvtier_fuzz(config LIBS policy)
kvtier_fuzz(control LIBS agent_control)
kvtier_fuzz(host_text LIBS agent_host bench_probe_core)
kvtier_fuzz(kvsim_trace LIBS kvsim_core)
