// kvtierctl kv-size: how big a KV cache is, and where it would sit on this host.

#include <fmt/format.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "agent/ctl/command.hpp"
#include "agent/host/topology_reader.hpp"
#include "policy/kv_size.hpp"
#include "policy/topology.hpp"

namespace kvtier::agent::ctl {
namespace {

using nlohmann::json;
using policy::human_bytes;

struct KvSizeArgs {
  std::string model;
  std::optional<std::uint64_t> layers, kv_heads, head_dim;
  std::string tokens;
  std::string batch = "1";
  std::string dtype = "fp16";
  std::string dram_budget;
  bool list = false;
  bool json_out = false;
};

void list_models() {
  fmt::print("{:<16} {:>6} {:>8} {:>8} {:>12}  {}\n", "MODEL", "LAYERS", "KV_HEADS", "HEAD_DIM",
             "FP16/TOKEN", "NOTE");
  for (const auto& p : policy::kv_presets()) {
    const auto per = policy::kv_bytes_per_token(p, policy::KvDtype::kFp16);
    fmt::print("{:<16} {:>6} {:>8} {:>8} {:>12}  {}\n", p.name, p.layers, p.kv_heads, p.head_dim,
               per ? human_bytes(*per) : "?", p.note);
  }
}

// Where the cache would sit: DRAM nodes (with CPUs) up to the budget, then
// the demotion targets' free memory. Empty when the host has no target.
std::optional<json> host_split(const Globals& g, std::uint64_t total,
                               const std::string& budget_text, std::string& note) {
  auto topo = read_topology(g.paths());
  if (!topo) {
    note = "cannot read the topology: " + topo.error().message;
    return std::nullopt;
  }
  std::uint64_t dram_free = 0;
  std::uint64_t cxl_free = 0;
  json dram_nodes = json::array();
  json cxl_nodes = json::array();
  for (const auto& role : policy::classify_nodes(*topo)) {
    const auto* n = topo->find(role.node);
    if (n == nullptr || !n->has_memory()) continue;
    if (role.demotion_target) {
      cxl_free += n->mem_free_bytes;
      cxl_nodes.push_back(n->id);
    } else if (n->has_cpus()) {
      dram_free += n->mem_free_bytes;
      dram_nodes.push_back(n->id);
    }
  }
  if (cxl_nodes.empty()) {
    note = "this host has no demotion target node: the whole cache stays in DRAM";
    return std::nullopt;
  }
  std::uint64_t budget = dram_free;
  if (!budget_text.empty()) {
    auto b = policy::parse_bytes(budget_text);
    if (!b) {
      note = "--dram-budget: " + b.error().message;
      return std::nullopt;
    }
    budget = *b;
  }
  const auto split = policy::split_kv(total, budget, cxl_free);
  return json{{"dram_nodes", dram_nodes},
              {"cxl_nodes", cxl_nodes},
              {"dram_budget_bytes", budget},
              {"dram_budget_from", budget_text.empty() ? "free DRAM" : "--dram-budget"},
              {"cxl_free_bytes", cxl_free},
              {"dram_bytes", split.dram_bytes},
              {"cxl_bytes", split.cxl_bytes},
              {"unplaced_bytes", split.unplaced_bytes}};
}

std::string ids(const json& list) {
  std::string out;
  for (const auto& id : list) out += (out.empty() ? "" : ",") + std::to_string(id.get<int>());
  return out;
}

// How the KV cache splits between this host's DRAM and CXL nodes (host_split()).
void print_split(const json& s) {
  fmt::print("on this host (DRAM budget {} from {}, CXL free {}):\n",
             human_bytes(s["dram_budget_bytes"].get<std::uint64_t>()),
             s["dram_budget_from"].get<std::string>(),
             human_bytes(s["cxl_free_bytes"].get<std::uint64_t>()));
  fmt::print("  {:<20} {}\n", "DRAM (node " + ids(s["dram_nodes"]) + ")",
             human_bytes(s["dram_bytes"].get<std::uint64_t>()));
  fmt::print("  {:<20} {}\n", "CXL (node " + ids(s["cxl_nodes"]) + ")",
             human_bytes(s["cxl_bytes"].get<std::uint64_t>()));
  if (const auto over = s["unplaced_bytes"].get<std::uint64_t>(); over > 0) {
    fmt::print("  {:<20} {}\n", "does not fit", human_bytes(over));
  }
}

int run_kv_size(const Globals& g, const KvSizeArgs& a) {
  if (a.list) {
    list_models();
    return kExitOk;
  }
  policy::KvShape shape;
  if (!a.model.empty()) {
    const auto* p = policy::find_kv_preset(a.model);
    if (p == nullptr) {
      std::cerr << "kvtierctl kv-size: unknown model \"" << a.model
                << "\" (kvtierctl kv-size --list-models shows the presets)\n";
      return kExitUsage;
    }
    shape = *p;
  }
  if (a.layers) shape.layers = *a.layers;
  if (a.kv_heads) shape.kv_heads = *a.kv_heads;
  if (a.head_dim) shape.head_dim = *a.head_dim;
  if (shape.layers == 0 || shape.kv_heads == 0 || shape.head_dim == 0) {
    std::cerr << "kvtierctl kv-size: give --model, or --layers, --kv-heads and --head-dim\n";
    return kExitUsage;
  }
  auto dtype = policy::parse_kv_dtype(a.dtype);
  auto tokens = policy::parse_count(a.tokens);
  auto batch = policy::parse_count(a.batch);
  for (const auto* r : {&tokens, &batch}) {
    if (!*r) {
      std::cerr << "kvtierctl kv-size: " << (r == &tokens ? "--tokens: " : "--batch: ")
                << r->error().message << '\n';
      return kExitUsage;
    }
  }
  if (!dtype) {
    std::cerr << "kvtierctl kv-size: --dtype: " << dtype.error().message << '\n';
    return kExitUsage;
  }
  auto per_token = policy::kv_bytes_per_token(shape, *dtype);
  auto total = policy::kv_cache_bytes(shape, *dtype, *tokens, *batch);
  if (!per_token || !total) {
    std::cerr << "kvtierctl kv-size: "
              << (per_token ? total.error().message : per_token.error().message) << '\n';
    return kExitFailed;
  }
  std::string note;
  const auto split = host_split(g, *total, a.dram_budget, note);

  if (a.json_out) {
    json out{{"model", a.model.empty() ? json(nullptr) : json(a.model)},
             {"layers", shape.layers},
             {"kv_heads", shape.kv_heads},
             {"head_dim", shape.head_dim},
             {"dtype", policy::kv_dtype_name(*dtype)},
             {"bytes_per_element", policy::kv_dtype_bytes(*dtype)},
             {"tokens", *tokens},
             {"batch", *batch},
             {"bytes_per_token", *per_token},
             {"total_bytes", *total},
             {"split", split ? *split : json(nullptr)}};
    if (!note.empty()) out["note"] = note;
    std::cout << out.dump(2) << '\n';
    return kExitOk;
  }
  const auto eb = policy::kv_dtype_bytes(*dtype);
  fmt::print("{:<10} {}{} layers, {} KV heads x {}, {}\n", "shape",
             a.model.empty() ? "" : a.model + ": ", shape.layers, shape.kv_heads, shape.head_dim,
             policy::kv_dtype_name(*dtype));
  fmt::print("{:<10} {} (2 x {} x {} x {} x {} B)\n", "per token", human_bytes(*per_token),
             shape.layers, shape.kv_heads, shape.head_dim, eb);
  fmt::print("{:<10} {} ({} bytes) for {} tokens x batch {}\n", "KV cache", human_bytes(*total),
             *total, *tokens, *batch);
  if (split) {
    print_split(*split);
  } else {
    fmt::print("{}\n", note);
  }
  return kExitOk;
}

}  // namespace

void add_kv_size_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<KvSizeArgs>();
  auto* cmd = app.add_subcommand(
      "kv-size",
      "KV-cache size: 2 x layers x kv_heads x head_dim x tokens x batch x bytes per element, "
      "and how it splits between this host's DRAM and CXL nodes");
  cmd->add_option("--model", a->model, "A preset shape (--list-models shows them)")
      ->option_text("NAME");
  cmd->add_option("--layers", a->layers, "Transformer layers (overrides the preset)")
      ->option_text("N");
  cmd->add_option("--kv-heads", a->kv_heads, "Key/value heads per layer (overrides the preset)")
      ->option_text("N");
  cmd->add_option("--head-dim", a->head_dim, "Dimension of one head (overrides the preset)")
      ->option_text("N");
  cmd->add_option("--tokens", a->tokens, "Tokens per sequence; K, M suffixes are x1024")
      ->option_text("N");
  cmd->add_option("--batch", a->batch, "Sequences held at once")
      ->option_text("N")
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "Element type: fp16, bf16, fp8 or fp32")
      ->option_text("TYPE")
      ->capture_default_str();
  cmd->add_option("--dram-budget", a->dram_budget,
                  "DRAM the cache may use (e.g. 64G); default: the DRAM nodes' free memory")
      ->option_text("SIZE");
  cmd->add_flag("--list-models", a->list, "List the preset shapes and exit");
  cmd->add_flag("--json", a->json_out, "Print JSON");
  cmd->callback([&g, a] {
    if (!a->list && a->tokens.empty()) {
      std::cerr << "kvtierctl kv-size: --tokens is required (e.g. --tokens 64K)\n";
      g.exit_code = kExitUsage;
      return;
    }
    g.exit_code = run_kv_size(g, *a);
  });
}

}  // namespace kvtier::agent::ctl
