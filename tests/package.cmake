# The Debian package (cmake/Packaging.cmake): its contents and metadata (label package, no
# root), and its install and service under real systemd in the guest (label vm; the Debian
# root is built once and cached, scripts/rootfs.sh). Both build the .deb into build/package/.
add_test(NAME package.deb_contents COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/package/deb_contents.sh)
set_tests_properties(package.deb_contents PROPERTIES
  LABELS package TIMEOUT 600 RESOURCE_LOCK kvtier_package
  ENVIRONMENT "KVTIER_BUILD_DIR=${PROJECT_BINARY_DIR}")
kvtier_vm_test(systemd_service systemd_guest.sh)
set_tests_properties(vm.systemd_service PROPERTIES TIMEOUT 2400
  RESOURCE_LOCK kvtier_package)
