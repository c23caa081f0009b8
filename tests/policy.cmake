# The pure policy library: config schema, units, heat model, planner.
kvtier_gtest(unit_policy unit
  SOURCES unit/units_test.cpp unit/config_test.cpp unit/heat_test.cpp
          unit/planner_test.cpp unit/planner_property_test.cpp
  LIBS policy)
target_compile_definitions(unit_policy PRIVATE KVTIER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
