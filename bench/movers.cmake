# Mover throughput vs one raw move_pages call, per-page calls and memcpy; run
# in the tiered guest: scripts/vm/run -- kvtier_mover_bench [MiB] [reps]
add_executable(kvtier_mover_bench ${CMAKE_CURRENT_SOURCE_DIR}/mover_bench.cpp)
target_link_libraries(kvtier_mover_bench PRIVATE agent_movers kvtier_warnings)
