# The daemon shell (agent/daemon) and the operator tool's daemon-side commands.
kvtier_gtest(unit_daemon unit
  SOURCES unit/control_protocol_test.cpp unit/telemetry_test.cpp unit/capabilities_test.cpp
          unit/event_loop_test.cpp unit/kv_size_test.cpp unit/log_limiter_test.cpp
          unit/ctl_status_test.cpp
  LIBS agent_daemon agent_ctl)

kvtier_gtest(privileged_daemon privileged
  SOURCES privileged/daemon_test.cpp privileged/kvtierd_test.cpp privileged/kvtierd_loop_test.cpp
          privileged/hardening_test.cpp privileged/stress_test.cpp
  LIBS agent_daemon agent_sources)
add_dependencies(privileged_daemon kvtierd kvtierctl)
target_compile_definitions(privileged_daemon PRIVATE KVTIER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# The whole daemon in the guest: kvtierd, started from its config, demotes the
# cold part of a real process to node 1 and keeps its hot part on node 0.
add_executable(kvtier_page_nodes vm/page_nodes.cpp)
target_link_libraries(kvtier_page_nodes PRIVATE agent_movers kvtier_warnings)
kvtier_vm_test(daemon_demotes daemon_demotes.sh)
# kvtierd beside Debian's llama-server (a forky root and a random-weight model, built once and
# cached by scripts/vm/llama-root.sh): the selector, the idle slots' pages on node 1,
# completions unchanged, a restart picked up. TCG decodes a few tokens a second: a long limit.
kvtier_vm_test(llama_server llama_server.sh)
set_tests_properties(vm.llama_server PROPERTIES TIMEOUT 1800)
# Issue 34: kvtierd against a process with an io_uring-registered buffer.
kvtier_vm_test(pinned pinned.sh)

# The control loop, step by step over a fixture /proc + /sys tree, with a
# scripted source, a scripted page-node query and a recording mover.
kvtier_gtest(unit_controller unit
  SOURCES unit/controller_test.cpp unit/replay_truth_test.cpp unit/shared_pools_test.cpp
    unit/loop_parts_test.cpp
  LIBS agent_loop agent_replay)

# kvtierctl replay end to end on the guest recording: every step makes the recorded plan.
add_test(NAME unit.kvtierctl_replay_guest_recording
  COMMAND kvtierctl replay --config ${KVTIER_FIXTURES}/recording/bench-guest.toml
          ${KVTIER_FIXTURES}/recording/bench-guest.kvtrec)
set_tests_properties(unit.kvtierctl_replay_guest_recording PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "new: exact: all 12 steps made the recorded plan")

# kvtierctl replay with kvsim's ground truth from the guest: the truth figures.
add_test(NAME unit.kvtierctl_replay_guest_truth
  COMMAND kvtierctl replay --config ${KVTIER_FIXTURES}/recording/guest-truth.toml --steps
          --truth ${KVTIER_FIXTURES}/recording/guest-truth.kvsim.kvtrec
          ${KVTIER_FIXTURES}/recording/guest-truth.kvtrec)
set_tests_properties(unit.kvtierctl_replay_guest_truth PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "Ground truth: 23 windows of kvsim's reads")
# --png without a python3 to draw with: one clear line, after the table.
add_test(NAME unit.kvtierctl_replay_png_without_python
  COMMAND ${CMAKE_COMMAND} -E env PATH=/nonexistent $<TARGET_FILE:kvtierctl> replay
          --config ${KVTIER_FIXTURES}/recording/guest-truth.toml
          --png ${PROJECT_BINARY_DIR}/replay-test.png ${KVTIER_FIXTURES}/recording/guest-truth.kvtrec)
set_tests_properties(unit.kvtierctl_replay_png_without_python PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "kvtierctl replay --png: cannot run python3 \\(No such file or directory\\); install python3 and python3-matplotlib")

# Issue 37: a KV pool in one memfd that two processes map and read; kvtierd
# tiers it through one owner with every sharer's evidence, and no byte changes.
add_executable(kvtier_shared_pool vm/shared_pool.cpp)
target_link_libraries(kvtier_shared_pool PRIVATE kvtier_warnings)
kvtier_vm_test(shared_pool shared_pool.sh)

# Issue 37: the topology at run time, in the CXL guest: the CXL node's memory blocks offlined
# (part, then all) and onlined again under a running kvtierd, a buffer's bytes checked at the
# end (kvtier_fill_check); then, in the same boot, the soak's short version (150 s of faults).
add_executable(kvtier_fill_check vm/fill_check.cpp)
target_link_libraries(kvtier_fill_check PRIVATE kvtier_warnings)
kvtier_vm_test(topology topology.sh)
set_tests_properties(vm.topology PROPERTIES TIMEOUT 1500)
# scripts/soak.sh's guest helper: idle control-socket clients, the BPF programs loaded,
# a Prometheus scrape every 100 ms.
add_executable(kvtier_soak_probe vm/soak_probe.cpp)
target_link_libraries(kvtier_soak_probe PRIVATE kvtier_warnings)
