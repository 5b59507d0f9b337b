// The weights of a Hugging Face model folder: model.safetensors, or the
// shards named by model.safetensors.index.json. Looks tensors up by name
// across shards. Owns the memory maps; views stay valid while it lives.
#pragma once

#include <functional>
#include <map>
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
  // kNotFound when the folder or both files are absent, or when the index
  // maps a tensor to a shard that lacks it; kParse for a malformed index, a
  // shard name that leaves the folder, or one tensor in two shards; shard
  // parse errors pass through unchanged (they name the shard file).
  static Result<Checkpoint> open(const std::string& dir);

  // nullptr when absent.
  const TensorView* find(std::string_view name) const;
  // The tensor, checked for the expected shape; the error names the file,
  // the tensor and the expected and found shapes. kNotFound when absent,
  // kInvalidArgument when the shape differs.
  Result<const TensorView*> require(std::string_view name, const std::vector<int64_t>& shape) const;
  // Which file holds `name` (for messages); empty when no file does.
  std::string file_of(std::string_view name) const;
  size_t num_tensors() const;
  // All tensor names, sorted (to report tensors a model did not use).
  std::vector<std::string> tensor_names() const;
  // model.safetensors or the index file: what "missing" errors name.
  const std::string& source() const { return source_; }

 private:
  struct Entry {
    const TensorView* view;  // owned by files_[file], whose address is stable
    size_t file;
  };
  Status add_file(std::unique_ptr<SafetensorsFile> file);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::string source_;
  std::map<std::string, Entry, std::less<>> by_name_;
};

}  // namespace tern
