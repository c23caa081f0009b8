// libFuzzer target: what a control-socket client sends, through the daemon's
// own line splitter, request parser and argument checks. Seeds:
// tests/fuzz/seeds/control.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/daemon/control_protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  kvtier::agent::LineReader in(kvtier::agent::kMaxRequestBytes);
  // In two chunks, as two reads would bring it.
  const std::size_t half = size / 2;
  if (in.append(bytes.substr(0, half)) && in.append(bytes.substr(half))) {
    while (auto line = in.next_line()) {
      auto req = kvtier::agent::parse_request(*line);
      if (!req) continue;
      (void)kvtier::agent::integer_arg(req->args, "pid", std::nullopt, 1, 4194304);
      (void)kvtier::agent::integer_arg(req->args, "bins", 64, 1, 4096);
      // The reply path: anything a handler echoes must encode.
      (void)kvtier::agent::parse_response(kvtier::agent::encode_ok(req->args));
    }
  }
  (void)kvtier::agent::parse_response(bytes);
  return 0;
}
