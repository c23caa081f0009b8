# Overhead of the hotness sources on a busy workload (run as root).
add_executable(kvtier_bench_sources sources_bench.cpp)
target_link_libraries(kvtier_bench_sources PRIVATE agent_sources kvtier_warnings)

# DAMON against the size it tracks: kdamond's CPU, the regions, kvtierd's DAMON-side cost
# (bench/damon_scale.sh runs it in the guest; run as root).
add_executable(kvtier_damon_scale damon_scale.cpp)
target_link_libraries(kvtier_damon_scale PRIVATE agent_sources policy kvtier_warnings)
