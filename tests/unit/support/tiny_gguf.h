// GGUF copies of the tiny test models, made at test time the way `tern
// convert` makes them (tokenizer keys + model), in a temporary folder removed
// with the object; and a rewriter that copies a GGUF with edits, for tests of
// what the loader refuses. Header-only; needs tern_model and tern_tokenizer.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "model/ernie4_5/gguf_convert.h"
#include "model/model_config.h"
#include "support/temp_dir.h"
#include "tokenizer/gguf_vocab.h"

namespace tern::test {

using TempDir = testing::TempDir;

// `tern convert --model dir --outfile out --outtype type`, as a function.
inline Status convert_folder(const std::string& dir, ernie45::OutType type, const std::string& out) {
  TERN_ASSIGN_OR_RETURN(std::string text, read_text_file(dir + "/config.json"));
  TERN_ASSIGN_OR_RETURN(ModelConfig config, parse_model_config(text, dir + "/config.json"));
  TERN_ASSIGN_OR_RETURN(std::vector<GgufKeyValue> vocab, gguf_vocab_from_hf(dir, config.vocab_size));
  TERN_ASSIGN_OR_RETURN(ernie45::GgufConversion done, ernie45::convert_to_gguf(dir, type, vocab, out));
  (void)done;
  return Status::ok();
}

// Edits applied while copying a GGUF: each key/value and tensor passes
// through, may be changed, or dropped (return false); `extra` adds at the end.
struct GgufEdits {
  std::function<bool(GgufKeyValue&)> key = [](GgufKeyValue&) { return true; };
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  std::function<bool(Tensor&)> tensor = [](Tensor&) { return true; };
  std::vector<GgufKeyValue> extra_keys;
  std::vector<Tensor> extra_tensors;
};

inline Status rewrite_gguf(const std::string& from, const std::string& to, const GgufEdits& edits) {
  TERN_ASSIGN_OR_RETURN(GgufFile src, GgufFile::open(from));
  GgufWriter w;
  for (GgufKeyValue kv : src.metadata()) {
    if (edits.key(kv)) TERN_RETURN_IF_ERROR(w.add(kv.key, kv.value));
  }
  for (const GgufKeyValue& kv : edits.extra_keys) TERN_RETURN_IF_ERROR(w.add(kv.key, kv.value));
  std::vector<GgufEdits::Tensor> tensors;
  for (const GgufTensor& t : src.tensors()) {
    GgufEdits::Tensor e{t.name, t.type, t.dims, std::vector<uint8_t>(t.data.begin(), t.data.end())};
    if (edits.tensor(e)) tensors.push_back(std::move(e));
  }
  for (const GgufEdits::Tensor& e : edits.extra_tensors) tensors.push_back(e);
  for (const GgufEdits::Tensor& e : tensors) TERN_RETURN_IF_ERROR(w.add_tensor(e.name, e.type, e.dims, e.data));
  return w.write_file(to);
}

}  // namespace tern::test
