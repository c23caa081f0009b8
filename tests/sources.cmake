kvtier_gtest(privileged_sources privileged
  SOURCES privileged/sources_test.cpp
  LIBS agent_sources)
target_include_directories(privileged_sources PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
