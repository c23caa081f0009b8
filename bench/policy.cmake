# plan() time and memory for 4 Mi pages (16 GiB) in one target and spread over
# 64 targets, against a naive full sort in the same run.
find_package(benchmark REQUIRED)
add_executable(plan_bench ${CMAKE_CURRENT_SOURCE_DIR}/plan_bench.cpp)
target_link_libraries(plan_bench PRIVATE policy benchmark::benchmark kvtier_warnings)
