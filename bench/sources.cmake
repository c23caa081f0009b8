# Overhead of the hotness sources on a busy workload (run as root).
add_executable(kvtier_bench_sources sources_bench.cpp)
target_link_libraries(kvtier_bench_sources PRIVATE agent_sources kvtier_warnings)
