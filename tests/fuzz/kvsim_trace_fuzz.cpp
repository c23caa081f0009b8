// libFuzzer target: bench/kvsim's trace readers (Mooncake JSONL, Azure CSV and
// its timestamps), on the same bytes. Seeds: tests/fixtures/kvsim.

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "bench/kvsim/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    std::istringstream in(text);
    (void)kvtier::bench::parse_mooncake(in, "fuzz.jsonl");
  }
  {
    std::istringstream in(text);
    (void)kvtier::bench::parse_azure(in, "fuzz.csv");
  }
  (void)kvtier::bench::parse_azure_timestamp(text);
  return 0;
}
