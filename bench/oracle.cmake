# The benchmark's oracle placer: kvtier_oracle places kvsim's blocks from kvsim's live ground
# truth (bench/kvsim/live_truth.hpp) with kvtier's own mover, within the kvtier mode's budget.
# bench_oracle_core holds its pure decision (oracle_plan) for the program and the unit tests.
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)

add_library(bench_oracle_core STATIC oracle/oracle_plan.cpp)
target_include_directories(bench_oracle_core PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(bench_oracle_core PUBLIC policy PRIVATE kvtier_warnings)

add_executable(kvtier_oracle oracle/oracle.cpp)
target_link_libraries(kvtier_oracle PRIVATE bench_oracle_core kvsim_core agent_movers CLI11::CLI11
                      nlohmann_json::nlohmann_json kvtier_warnings)
