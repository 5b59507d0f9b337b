// The items of a comma-separated command-line list ("1,8,64" or
// "graphs,eager"), empty items dropped: the microbenchmarks' list arguments.
#pragma once

#include <string>
#include <vector>

namespace tern::bench {

inline std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace tern::bench
