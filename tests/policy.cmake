# The pure policy library: config schema, units, heat model, planner.
kvtier_gtest(unit_policy unit
  SOURCES unit/units_test.cpp unit/config_test.cpp unit/heat_test.cpp
          unit/planner_test.cpp unit/planner_property_test.cpp unit/rules_test.cpp
          unit/config_hardening_test.cpp
          unit/cold_age_tuner_test.cpp unit/pinned_map_test.cpp unit/coaccess_test.cpp
  LIBS policy)
target_compile_definitions(unit_policy PRIVATE KVTIER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# kvtierctl config check, end to end: the shipped config passes (against this
# repository's fixture topology), a broken one fails with exit 1 and one line
# per problem.
add_test(NAME unit.kvtierctl_config_check_default
  COMMAND kvtierctl --root ${KVTIER_FIXTURES}/topology/host config check
          ${PROJECT_SOURCE_DIR}/systemd/kvtier.toml)
add_test(NAME unit.kvtierctl_config_check_bad
  COMMAND sh -c "out=$(\"$0\" --root \"$1\" config check \"$2\" 2>&1); rc=$?; echo \"$out\"; \
[ $rc -eq 1 ] && [ $(echo \"$out\" | grep -c '^.*bad.toml:[0-9]*: ') -eq 7 ] && \
echo \"$out\" | grep -q 'bad.toml:10: group\\[0\\].demotion_node: node 3 does not exist'"
          $<TARGET_FILE:kvtierctl> ${KVTIER_FIXTURES}/topology/host
          ${KVTIER_FIXTURES}/config/bad.toml)
set_tests_properties(unit.kvtierctl_config_check_default unit.kvtierctl_config_check_bad
  PROPERTIES LABELS unit)

# The planner over captured guest topologies and the shipped config (links the
# agent's topology reader, so it is a binary of its own: unit_policy stays pure).
kvtier_gtest(unit_policy_fixture unit
  SOURCES unit/planner_fixture_test.cpp
  LIBS policy agent_host)
target_compile_definitions(unit_policy_fixture PRIVATE KVTIER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
