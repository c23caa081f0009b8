#include "bench/loadgen/conversation.hpp"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/kvsim/trace.hpp"

namespace kvtier::bench::loadgen {
namespace {

constexpr std::uint32_t kBlockTokens = 512;  // a Mooncake hash id names 512 tokens

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31U);
}

std::uint32_t predict_tokens(const Request& r, const ConversationOptions& o) {
  const std::uint32_t scale = std::max<std::uint32_t>(1, o.output_scale);
  const std::uint32_t n = (r.output_tokens + scale - 1) / scale;
  return std::clamp<std::uint32_t>(n, 1, std::max<std::uint32_t>(1, o.max_predict));
}

// Azure requests share nothing: their blocks get ids above any Mooncake id, one run per line.
std::vector<std::uint64_t> private_blocks(const Request& r) {
  const std::uint32_t n =
      std::max<std::uint32_t>(1, (r.input_tokens + kBlockTokens - 1) / kBlockTokens);
  std::vector<std::uint64_t> ids;
  ids.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    ids.push_back((std::uint64_t{1} << 62U) | (std::uint64_t{r.line} << 20U) | i);
  }
  return ids;
}

}  // namespace

std::vector<Conversation> conversations_from_trace(const Trace& trace,
                                                   const ConversationOptions& options) {
  std::vector<Conversation> all;
  std::map<std::uint64_t, std::size_t> by_first_block;  // Mooncake: hash_ids[0] -> conversation
  std::map<std::uint64_t, std::vector<std::uint64_t>> last_blocks;
  for (const Request& r : trace.requests) {
    const bool shared = !r.hash_ids.empty();
    const std::vector<std::uint64_t> blocks = shared ? r.hash_ids : private_blocks(r);
    Turn turn{.at_s = r.arrival_s,
              .new_blocks = {},
              .n_predict = predict_tokens(r, options),
              .line = r.line};
    auto it = shared ? by_first_block.find(blocks.front()) : by_first_block.end();
    if (it == by_first_block.end()) {
      const std::uint64_t id = shared ? blocks.front() : r.line;
      turn.new_blocks = blocks;
      all.push_back(Conversation{.id = id, .turns = {turn}});
      if (shared) {
        by_first_block[id] = all.size() - 1;
        last_blocks[id] = blocks;
      }
      continue;
    }
    Conversation& conv = all[it->second];
    const std::vector<std::uint64_t>& prev = last_blocks[conv.id];
    const auto mismatch = std::mismatch(prev.begin(), prev.end(), blocks.begin(), blocks.end());
    turn.new_blocks.assign(mismatch.second, blocks.end());
    conv.turns.push_back(turn);
    last_blocks[conv.id] = blocks;
  }
  std::vector<Conversation> kept;
  for (Conversation& c : all) {
    if (c.turns.size() < options.min_turns || c.turns.front().at_s < options.from_s) {
      continue;
    }
    kept.push_back(std::move(c));
    if (options.max_conversations != 0 && kept.size() == options.max_conversations) {
      break;
    }
  }
  return kept;  // `all` is in order of first arrival, and so is `kept`
}

std::string block_text(std::uint64_t id, std::size_t chars) {
  std::uint64_t state = id;
  std::string text;
  text.reserve(chars);
  while (text.size() < chars) {
    const std::uint64_t r = splitmix64(state);
    // About one space in six: word-like runs of letters.
    text.push_back(r % 6 == 0 ? ' ' : static_cast<char>('a' + (r >> 8U) % 26));
  }
  return text;
}

std::string printable(const std::string& completion) {
  std::string out;
  for (const char c : completion) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || c == ' ') {
      out.push_back(c);
    }
  }
  return out;
}

std::string next_prompt(const std::string& previous_prompt, const std::string& previous_completion,
                        const Turn& turn, std::size_t block_chars) {
  std::string prompt = previous_prompt + printable(previous_completion);
  for (const std::uint64_t id : turn.new_blocks) {
    prompt += block_text(id, block_chars);
  }
  return prompt;
}

}  // namespace kvtier::bench::loadgen
