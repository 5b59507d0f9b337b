// The weights of a Hugging Face model folder: model.safetensors, or the
// shards named by model.safetensors.index.json. Looks tensors up by name
// across shards. Owns the memory maps; views stay valid while it lives.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "formats/safetensors.h"

namespace tern {

class Checkpoint {
 public:
  // `dir` holds model.safetensors or model.safetensors.index.json (+ shards).
  static Result<Checkpoint> open(const std::string& dir);

  // nullptr when absent.
  const TensorView* find(std::string_view name) const;
  // The tensor, checked for the expected shape; the error names the file,
  // the tensor and the expected and found shapes.
  Result<const TensorView*> require(std::string_view name, const std::vector<int64_t>& shape) const;
  // Which file holds `name` (for messages).
  std::string file_of(std::string_view name) const;
  size_t num_tensors() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace tern
