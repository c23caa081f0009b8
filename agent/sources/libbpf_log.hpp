#pragma once
// libbpf prints through a global callback; kvtier routes it into spdlog so BPF
// load failures (verifier logs included) land in the same log as everything else.

namespace kvtier::agent {

// Idempotent; every BpfSkeleton::open() calls it.
void install_libbpf_logger();

}  // namespace kvtier::agent
