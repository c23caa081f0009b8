#pragma once
// The load generator's conversations (bench/loadgen): a shipped trace's requests grouped into
// conversations whose prompts grow turn by turn, as a chat client sends them to
// llama-server's /completion.
//   Mooncake: the requests that share their first prefix block (hash id) are the turns of one
//     conversation, in arrival order; each turn adds the blocks past the prefix it shares with
//     the previous turn.
//   Azure: lengths only, so each request is a conversation of one turn whose blocks no other
//     request shares.
// A block of 512 trace tokens becomes block_chars characters of text derived from its hash id
// alone (the model's tokenizer is byte-level: one character, one token), so equal blocks are
// equal text and the server's prefix reuse sees the trace's sharing at a scale the guest serves.

#include <cstdint>
#include <string>
#include <vector>

#include "bench/kvsim/trace.hpp"

namespace kvtier::bench::loadgen {

struct Turn {
  double at_s = 0;                        // trace time since the trace's first request
  std::vector<std::uint64_t> new_blocks;  // the hash ids this turn adds to the conversation
  std::uint32_t n_predict = 1;            // tokens asked for
  std::uint32_t line = 0;                 // the trace line, for the record
};

struct Conversation {
  std::uint64_t id = 0;  // the first block's hash id (Mooncake) or the trace line (Azure)
  std::vector<Turn> turns;
};

struct ConversationOptions {
  std::size_t max_conversations = 64;  // the first ones by start time; 0: all
  std::size_t min_turns = 1;           // conversations with fewer turns are left out
  std::uint32_t output_scale = 8;      // trace output tokens per predicted token
  std::uint32_t max_predict = 16;      // cap on n_predict
  double from_s = 0;                   // only conversations starting at or after this trace time
};

// Conversations ordered by their first turn's time.
std::vector<Conversation> conversations_from_trace(const Trace& trace,
                                                   const ConversationOptions& options);

// The text of one block: `chars` lower-case letters and spaces, a function of the id alone.
std::string block_text(std::uint64_t id, std::size_t chars);

// What a client appends of a completion to the conversation: its letters, digits and spaces
// (the random model's bytes need not be valid UTF-8 or printable).
std::string printable(const std::string& completion);

// The prompt of the next turn: the conversation so far (the previous prompt and the previous
// completion's printable part) followed by the turn's new blocks.
std::string next_prompt(const std::string& previous_prompt, const std::string& previous_completion,
                        const Turn& turn, std::size_t block_chars);

}  // namespace kvtier::bench::loadgen
