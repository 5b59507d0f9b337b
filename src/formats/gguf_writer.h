// Writer of GGUF version 3 files, little-endian: metadata of every type and
// tensors at aligned offsets, laid out as llama.cpp and the `gguf` Python
// package lay them out (same order, zero padding after the tensor infos and
// after every tensor), so what it writes loads in both. Used by tests now and
// by `tern convert`.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/gguf_types.h"
#include "formats/gguf_value.h"

namespace tern {

// Builds one file. Each add_* checks its input against the limits the reader
// enforces (gguf.h), so whatever serialize() produces, GgufFile::parse()
// accepts. Not thread-safe; tensor bytes are borrowed: the caller keeps them
// alive until serialize() or write_file() returns.
class GgufWriter {
 public:
  // Appends a key/value (kept in call order). kInvalidArgument for an empty,
  // over-long or repeated key, a string or array past the reader's limits,
  // or a "general.alignment" that is not a u32 power of two <= 2^20 (that key
  // sets the alignment the tensors are written with; 32 without it).
  Status add(std::string key, GgufValue value);

  // Appends a tensor (kept in call order). `dims` are in GGUF order, ne[0]
  // (the innermost dimension) first. kInvalidArgument for an empty, over-long
  // (> 63 bytes) or repeated name, more than 4 dims, a negative dim, ne[0]
  // not a whole number of `type`'s blocks, or `data` not the size that
  // dims and type need.
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims, std::span<const uint8_t> data);

  uint64_t alignment() const { return alignment_; }

  // The whole file in memory (tests, small files).
  std::string serialize() const;
  // Streams the file to `path` through `path.tmp` and a rename, so a failed
  // write never leaves a truncated model under the final name.
  Status write_file(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::span<const uint8_t> data;
  };

  // Everything before the data section, padding included.
  std::string header() const;
  // Calls `sink` with the header, then each tensor's bytes and padding.
  bool emit(const std::function<bool(std::span<const uint8_t>)>& sink) const;

  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::set<std::string, std::less<>> keys_;
  std::vector<Tensor> tensors_;
  std::set<std::string, std::less<>> names_;
};

}  // namespace tern
