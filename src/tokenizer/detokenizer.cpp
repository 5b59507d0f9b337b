// Incremental detokenization: bytes of each token are appended to a pending
// buffer and only whole UTF-8 characters leave it, so a character split over
// byte-fallback tokens is emitted once, complete.
#include "tokenizer/detokenizer.h"

#include "base/utf8.h"

namespace tern {

std::string Detokenizer::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += tok_.token_bytes(id);
  size_t complete = utf8_complete_prefix(pending_);
  if (complete == 0) return {};
  // The complete prefix can still hold bytes that can never become valid
  // (a stray continuation byte): those become U+FFFD now rather than later.
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string Detokenizer::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace tern
