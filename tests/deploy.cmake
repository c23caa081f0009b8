# deploy/: the Prometheus rules, the Grafana dashboard and the Kubernetes manifests, each
# checked by the real tool (Debian's promtool; kubernetes-models' schema validation).
add_test(NAME unit.prometheus_rules
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/prometheus_rules_test.sh
          ${PROJECT_SOURCE_DIR}/deploy/prometheus)
set_tests_properties(unit.prometheus_rules PROPERTIES LABELS unit)

# A real kvtierd scraped by a real Prometheus on loopback, with the rules loaded.
add_test(NAME privileged.prometheus_scrape
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/privileged/prometheus_scrape_test.py
          ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(privileged.prometheus_scrape PROPERTIES
  LABELS privileged SKIP_RETURN_CODE 77 TIMEOUT 300)

# Every PromQL expression of deploy/grafana parses (promtool) and names exported series.
add_test(NAME unit.grafana_dashboard
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/deploy/grafana_dashboard_test.py ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.grafana_dashboard PROPERTIES LABELS unit)

# deploy/kubernetes against the Kubernetes API schema (kubernetes-models, from npm; offline
# once installed into the build tree).
add_test(NAME unit.kubernetes_manifests
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/kubernetes_manifests_test.sh
          ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.kubernetes_manifests PROPERTIES LABELS unit TIMEOUT 300)

# The ConfigMap reloader (deploy/kubernetes) with a real kvtierd: reload without restart.
add_test(NAME privileged.config_reloader
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/privileged/config_reloader_test.sh
          ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(privileged.config_reloader PROPERTIES
  LABELS privileged SKIP_RETURN_CODE 77 TIMEOUT 120)
