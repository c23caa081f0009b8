# The daemon shell (agent/daemon) and the operator tool's daemon-side commands.
kvtier_gtest(unit_daemon unit
  SOURCES unit/control_protocol_test.cpp unit/telemetry_test.cpp unit/capabilities_test.cpp
          unit/event_loop_test.cpp unit/kv_size_test.cpp
  LIBS agent_daemon)

kvtier_gtest(privileged_daemon privileged
  SOURCES privileged/daemon_test.cpp privileged/kvtierd_test.cpp
  LIBS agent_daemon)
add_dependencies(privileged_daemon kvtierd kvtierctl)
