# kvsim: the KV-cache workload simulator. kvsim_core holds its logic (traces, shapes, the
# allocator, the prefix cache, the scheduler, patterns, ground truth) for the program and tests.
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)

add_library(kvsim_core STATIC
  kvsim/model_shape.cpp
  kvsim/trace.cpp
  kvsim/block_allocator.cpp
  kvsim/prefix_cache.cpp
  kvsim/pattern.cpp
  kvsim/kv_pool.cpp
  kvsim/ground_truth.cpp
  kvsim/live_truth.cpp
  kvsim/simulator.cpp)
target_include_directories(kvsim_core PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvsim_core
  PUBLIC policy fmt::fmt
  PRIVATE nlohmann_json::nlohmann_json kvtier_warnings)

# The program along its jobs: the command line (options), the process and the kernel (process),
# what it writes (output), one run (run).
add_executable(kvsim kvsim/main.cpp kvsim/options.cpp kvsim/process.cpp kvsim/output.cpp
               kvsim/run.cpp)
target_link_libraries(kvsim PRIVATE kvsim_core agent_recording CLI11::CLI11
                      nlohmann_json::nlohmann_json kvtier_warnings)
# Without --trace, kvsim plays the Mooncake trace the repository ships.
target_compile_definitions(kvsim PRIVATE
  KVTIER_KVSIM_DEFAULT_TRACE="${PROJECT_SOURCE_DIR}/bench/traces/mooncake_synthetic_trace.jsonl")
