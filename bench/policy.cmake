# plan() time and memory for 4 Mi pages (16 GiB) in one target and spread over
# 64 targets, against a naive full sort in the same run.
find_package(benchmark REQUIRED)
add_executable(plan_bench ${CMAKE_CURRENT_SOURCE_DIR}/plan_bench.cpp)
target_link_libraries(plan_bench PRIVATE policy benchmark::benchmark kvtier_warnings)

# The recording's CPU cost and replay's speed on a real recording (docs/recording.md).
add_executable(recording_bench ${CMAKE_CURRENT_SOURCE_DIR}/recording_bench.cpp)
target_link_libraries(recording_bench PRIVATE agent_replay kvtier_warnings)
# Cuts a recording for a test fixture (tests/fixtures/recording/README.md).
add_executable(recording_cut ${CMAKE_CURRENT_SOURCE_DIR}/recording_cut.cpp)
target_link_libraries(recording_cut PRIVATE agent_recording kvtier_warnings)

# read_topology against refresh_node_memory (a promotion tick's read) on this
# host's real /sys and /proc.
add_executable(host_bench ${CMAKE_CURRENT_SOURCE_DIR}/host_bench.cpp)
target_link_libraries(host_bench PRIVATE agent_host benchmark::benchmark kvtier_warnings)

# The whole control-loop step at 16 GiB to 4 TiB of tracked memory, synthetic, and one real
# run on this host (bench/scale.sh, docs/benchmarks.md#scale).
find_package(CLI11 REQUIRED)
add_executable(kvtier_scale_bench
  ${CMAKE_CURRENT_SOURCE_DIR}/scale_bench.cpp ${CMAKE_CURRENT_SOURCE_DIR}/scale_measure.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/scale_synthetic.cpp ${CMAKE_CURRENT_SOURCE_DIR}/scale_real.cpp)
target_link_libraries(kvtier_scale_bench PRIVATE agent_loop CLI11::CLI11 kvtier_warnings)
