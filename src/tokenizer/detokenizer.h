// Incremental detokenizer: turns a stream of token ids into text pieces that
// are always whole UTF-8 characters. A character split over byte-fallback
// tokens is held back until complete and then emitted once; U+FFFD is never
// produced mid-stream. One per sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace tern {

class Detokenizer {
 public:
  Detokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tok_(tokenizer), skip_special_(skip_special_tokens) {}

  // Adds one token; returns the newly completed text (possibly empty).
  std::string push(int32_t id);
  // End of stream: returns any held-back bytes, invalid ones as U+FFFD.
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;  // bytes not yet emitted (an incomplete character)
};

}  // namespace tern
