# The load generator for a real inference server (issue 38): kvtier_llama_load replays a
# trace's conversations against llama-server in the guest and records the clients' figures
# and the KV buffer's ground truth. loadgen_core holds its pure logic for the unit tests.
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)

add_library(loadgen_core STATIC loadgen/conversation.cpp loadgen/http.cpp loadgen/truth.cpp
  loadgen/procstat.cpp)
target_include_directories(loadgen_core PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(loadgen_core
  PUBLIC kvsim_core policy
  PRIVATE bench_probe_core
  PRIVATE nlohmann_json::nlohmann_json kvtier_warnings)

add_executable(kvtier_llama_load loadgen/main.cpp)
target_link_libraries(kvtier_llama_load PRIVATE loadgen_core agent_host CLI11::CLI11
                      nlohmann_json::nlohmann_json kvtier_warnings)
target_compile_definitions(kvtier_llama_load PRIVATE
  KVTIER_LOADGEN_DEFAULT_TRACE="/kvtier/traces/mooncake_synthetic_trace.jsonl")
