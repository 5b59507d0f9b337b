// Opens a Hugging Face model folder's weights, single-file or sharded, and
// indexes every tensor by name. The index file is untrusted like the shards:
// shard names may not leave the folder, and each shard is opened once. A GGUF
// file is the other source: its tensors become TensorViews in PyTorch order.
#include "formats/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <system_error>

#include "base/checked_math.h"
#include "formats/gguf_q5.h"

namespace tern {
namespace {

using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// A shard name is a plain file name inside the model folder; anything that
// could point elsewhere ("../x", "/etc/x", "a/b") is refused.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
         name.find("..") == std::string::npos && name.find('\0') == std::string::npos;
}

bool is_regular_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

}  // namespace

Status Checkpoint::add_file(std::unique_ptr<SafetensorsFile> file) {
  const size_t index = files_.size();
  for (const TensorView& t : file->tensors()) {
    auto [it, inserted] = by_name_.emplace(t.name, Entry{&t, index});
    if (!inserted) {
      return parse_error(file->name() + ": tensor '" + t.name + "' is also in " + files_[it->second.file]->name());
    }
  }
  files_.push_back(std::move(file));
  return Status::ok();
}

Result<Checkpoint> Checkpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found(dir + ": model folder does not exist");

  Checkpoint ckpt;
  const std::string single = (fs::path(dir) / kSingleFile).string();
  if (is_regular_file(single)) {
    TERN_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(single));
    ckpt.source_ = single;
    TERN_RETURN_IF_ERROR(ckpt.add_file(std::make_unique<SafetensorsFile>(std::move(file))));
    return ckpt;
  }

  const std::string index_path = (fs::path(dir) / kIndexFile).string();
  if (!is_regular_file(index_path)) {
    return not_found(dir + ": no " + kSingleFile + " or " + kIndexFile + " in this folder");
  }
  ckpt.source_ = index_path;
  TERN_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) return parse_error(index_path + ": not valid JSON");
  if (!index.is_object()) return parse_error(index_path + ": expected a JSON object, found " + index.type_name());
  auto map = index.find("weight_map");
  if (map == index.end()) return parse_error(index_path + ": weight_map is missing");
  if (!map->is_object()) {
    return parse_error(index_path + ": weight_map is " + map->type_name() + ", expected an object {tensor: shard}");
  }
  if (map->empty()) return parse_error(index_path + ": weight_map lists no tensors");

  // Open each distinct shard once, in the order first named.
  std::map<std::string, size_t> shard_file;  // shard name -> index in files_
  for (auto it = map->begin(); it != map->end(); ++it) {
    const auto* shard = it.value().get_ptr<const json::string_t*>();
    if (shard == nullptr) {
      return parse_error(index_path + ": tensor '" + it.key() + "' maps to " + it.value().type_name() +
                         ", expected a shard file name");
    }
    if (!is_plain_file_name(*shard)) {
      return parse_error(index_path + ": tensor '" + it.key() + "' maps to shard '" + *shard +
                         "', which is not a plain file name in the model folder");
    }
    if (shard_file.count(*shard) != 0) continue;
    const std::string shard_path = (fs::path(dir) / *shard).string();
    if (!is_regular_file(shard_path)) {
      return not_found(index_path + ": shard '" + *shard + "' (holding tensor '" + it.key() + "') does not exist");
    }
    TERN_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(shard_path));
    shard_file[*shard] = ckpt.files_.size();
    TERN_RETURN_IF_ERROR(ckpt.add_file(std::make_unique<SafetensorsFile>(std::move(file))));
  }

  // The index and the shards must agree, or a loader would read the wrong bytes.
  for (auto it = map->begin(); it != map->end(); ++it) {
    const std::string& shard = *it.value().get_ptr<const json::string_t*>();
    auto found = ckpt.by_name_.find(it.key());
    if (found == ckpt.by_name_.end() || found->second.file != shard_file[shard]) {
      return not_found(index_path + ": tensor '" + it.key() + "' is mapped to shard '" + shard +
                       "', which does not contain it");
    }
  }
  return ckpt;
}

Result<Checkpoint> Checkpoint::from_safetensors(SafetensorsFile file) {
  Checkpoint ckpt;
  ckpt.source_ = file.name();
  TERN_RETURN_IF_ERROR(ckpt.add_file(std::make_unique<SafetensorsFile>(std::move(file))));
  return ckpt;
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second.view;
}

Result<const TensorView*> Checkpoint::require(std::string_view name, const std::vector<int64_t>& shape) const {
  const TensorView* t = find(name);
  if (t == nullptr) return not_found(source_ + ": tensor '" + std::string(name) + "' is missing");
  if (t->shape != shape) {
    return invalid_argument(file_of(name) + ": tensor '" + std::string(name) + "' has shape " + t->shape_string() +
                            ", expected " + format_shape(shape));
  }
  return t;
}

Result<Checkpoint> Checkpoint::open_gguf(const std::string& path) {
  TERN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  Checkpoint ckpt;
  ckpt.gguf_ = std::make_unique<GgufFile>(std::move(file));
  ckpt.source_ = path;
  const std::vector<GgufTensor>& tensors = ckpt.gguf_->tensors();
  ckpt.gguf_views_ = std::make_unique<std::vector<TensorView>>();
  ckpt.gguf_views_->reserve(tensors.size());
  for (const GgufTensor& t : tensors) {
    std::optional<DType> dtype = is_q5_type(t.type) ? DType::kF32 : ggml_type_to_dtype(t.type);
    if (!dtype) {
      return unsupported(path + ": tensor '" + t.name + "' has type " + std::string(ggml_type_name(t.type)) +
                         "; tern reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K GGUF tensors, and "
                         "Q5_0 and Q5_1 expanded to F32");
    }
    TensorView v;
    v.name = t.name;
    v.dtype = *dtype;
    v.shape.assign(t.dims.rbegin(), t.dims.rend());
    v.data = t.data;
    if (is_q5_type(t.type)) {
      TERN_ASSIGN_OR_RETURN(v.data, ckpt.expand_q5(t));
    }
    ckpt.gguf_views_->push_back(std::move(v));
  }
  // The reader refuses duplicate names, so every insertion succeeds.
  for (const TensorView& v : *ckpt.gguf_views_) ckpt.by_name_.emplace(v.name, Entry{&v, kGgufEntry});
  return ckpt;
}

// The reader checked that the data holds whole blocks of the tensor's shape.
Result<std::span<const uint8_t>> Checkpoint::expand_q5(const GgufTensor& t) {
  const uint64_t n = t.num_elements();
  const auto bytes = checked_mul(n, sizeof(float));
  if (!bytes || t.dims.empty() || t.dims[0] <= 0) {
    return out_of_range(gguf_->name() + ": tensor '" + t.name + "' is too large to expand to F32");
  }
  auto values = std::make_unique<float[]>(n);
  const auto ncols = static_cast<uint64_t>(t.dims[0]);
  const uint64_t row_bytes = t.data.size() / (n / ncols);
  for (uint64_t r = 0; r < n / ncols; ++r) {
    dequantize_q5_row(t.type, t.data.data() + r * row_bytes, static_cast<int64_t>(ncols), values.get() + r * ncols);
  }
  expanded_.push_back(std::move(values));
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(expanded_.back().get()), *bytes);
}

std::string Checkpoint::file_of(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::string();
  return it->second.file == kGgufEntry ? gguf_->name() : files_[it->second.file]->name();
}

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return true;
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[4] = {};
  if (!in.read(reinterpret_cast<char*>(magic), 4)) return false;
  const uint32_t word = uint32_t{magic[0]} | uint32_t{magic[1]} << 8 | uint32_t{magic[2]} << 16 | uint32_t{magic[3]} << 24;
  return word == kGgufMagic;
}

size_t Checkpoint::num_tensors() const { return by_name_.size(); }

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(by_name_.size());
  for (const auto& [name, entry] : by_name_) names.push_back(name);
  return names;
}

void Checkpoint::release(const void* p, size_t n) const {
  if (gguf_ != nullptr && gguf_->mapping().contains(p, n)) {
    gguf_->mapping().release(p, n);
    return;
  }
  for (const auto& f : files_) {
    if (f->mapping().contains(p, n)) {
      f->mapping().release(p, n);
      return;
    }
  }
}

}  // namespace tern
