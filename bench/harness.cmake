# The benchmark harness's guest-side tools: kvtier_residency_probe samples where a process's
# pages live (scripts/bench.sh runs it beside kvsim in the guest; bench/report.py reads it).
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)

add_library(bench_probe_core STATIC probe/proc_text.cpp)
target_include_directories(bench_probe_core PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(bench_probe_core PUBLIC policy fmt::fmt PRIVATE kvtier_warnings)

add_executable(kvtier_residency_probe probe/residency_probe.cpp)
target_link_libraries(kvtier_residency_probe PRIVATE bench_probe_core CLI11::CLI11
                      nlohmann_json::nlohmann_json kvtier_warnings)
