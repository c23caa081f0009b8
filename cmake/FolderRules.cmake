# The folder include rule (docs/architecture.md): which first-party folders the
# files of a folder may include, along the data flow sources -> heat -> plan ->
# move -> telemetry; the shell (agent/daemon) drives the loop (agent/loop), never
# the other way. kvtier_check_folder_rules() runs at the end of
# configuration and fails it when a file breaks the rule, as
# kvtier_check_policy_purity() does for policy's links and system headers.
# Folders not listed (agent/'s two programs, bench/, tests/) may include anything.
set(KVTIER_FOLDER_RULES
  "policy: policy"
  "agent/host: policy agent/host"
  "agent/sources: policy agent/host agent/sources bpf"
  "agent/movers: policy agent/host agent/movers"
  "agent/telemetry: policy agent/telemetry"
  "agent/loop: policy agent/host agent/sources agent/movers agent/telemetry agent/loop"
  "agent/daemon: policy agent/host agent/telemetry agent/loop agent/daemon"
  "agent/replay: policy agent/host agent/sources agent/movers agent/telemetry agent/loop agent/replay"
  "agent/ctl: policy agent/host agent/sources agent/loop agent/daemon agent/replay agent/ctl")

function(kvtier_check_folder_rules)
  foreach(rule IN LISTS KVTIER_FOLDER_RULES)
    string(REGEX MATCH "^([^:]+): (.*)$" _ "${rule}")
    set(folder ${CMAKE_MATCH_1})
    string(REPLACE " " ";" allowed "${CMAKE_MATCH_2}")
    file(GLOB_RECURSE srcs ${PROJECT_SOURCE_DIR}/${folder}/*.hpp ${PROJECT_SOURCE_DIR}/${folder}/*.cpp)
    foreach(src IN LISTS srcs)
      file(STRINGS ${src} lines REGEX "^#include \"(agent/[a-z_]+|policy|bpf)/")
      foreach(line IN LISTS lines)
        string(REGEX MATCH "^#include \"(agent/[a-z_]+|policy|bpf)/" _ "${line}")
        if(NOT CMAKE_MATCH_1 IN_LIST allowed)
          string(REPLACE ";" ", " names "${allowed}")
          message(FATAL_ERROR "${src}: '${line}': ${folder}/ may include only ${names} "
                              "(docs/architecture.md)")
        endif()
      endforeach()
    endforeach()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL kvtier_check_folder_rules)
