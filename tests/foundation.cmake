kvtier_vm_test(nodes_hmat nodes_hmat.sh)
kvtier_vm_test(nodes_cxl nodes_cxl.sh)
kvtier_vm_test(runner_selftest runner_selftest.sh)
