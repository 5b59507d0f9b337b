// The weights of a model: a Hugging Face folder (model.safetensors, or the
// shards named by model.safetensors.index.json) or one GGUF file. Looks
// tensors up by name across shards. Owns the memory maps; views stay valid
// while it lives.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "formats/gguf.h"
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
  // A GGUF file: its tensors under their GGUF names ("blk.0.attn_q.weight"),
  // each shape in PyTorch order (GGUF's ne reversed: ne {in, out} is [out,
  // in]), so require() reads the same for both sources. The data stay in the
  // file's memory map. GgufFile::open's errors pass through; a tensor of a
  // type tern cannot compute with (the block-quantized ones) is kUnsupported,
  // naming the tensor and its type.
  static Result<Checkpoint> open_gguf(const std::string& path);
  // One safetensors file already parsed (SafetensorsFile::parse over bytes
  // the caller keeps alive while the checkpoint lives): a checkpoint held in
  // memory, as fuzzers and tests build them.
  static Result<Checkpoint> from_safetensors(SafetensorsFile file);

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
  // The GGUF file and its metadata when opened by open_gguf, else nullptr.
  const GgufFile* gguf() const { return gguf_.get(); }
  // Drops the resident pages of [p, p + n) where that range lies in one of
  // the checkpoint's file maps (MappedFile::release: later reads fault them
  // back in from the file); does nothing for any other memory.
  void release(const void* p, size_t n) const;

 private:
  struct Entry {
    const TensorView* view;  // owned by files_[file] or gguf_views_, whose addresses are stable
    size_t file;             // index into files_; kGgufEntry for a tensor of gguf_
  };
  static constexpr size_t kGgufEntry = static_cast<size_t>(-1);
  Status add_file(std::unique_ptr<SafetensorsFile> file);
  // A Q5_0 / Q5_1 tensor of gguf_ as F32 values owned by expanded_.
  Result<std::span<const uint8_t>> expand_q5(const GgufTensor& t);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<std::vector<TensorView>> gguf_views_;  // never resized once filled
  std::vector<std::unique_ptr<float[]>> expanded_;       // Q5_0 / Q5_1 tensors as F32 (their views point here)
  std::string source_;
  std::map<std::string, Entry, std::less<>> by_name_;
};

// True when `path` names a regular file that is GGUF: its name ends in
// ".gguf" or its first four bytes are the GGUF magic. How callers that take
// "a model folder or a .gguf file" tell the two apart.
bool is_gguf_file(const std::string& path);

}  // namespace tern
