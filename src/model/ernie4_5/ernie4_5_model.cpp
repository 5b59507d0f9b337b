// ERNIE 4.5 dense decoder on the reference kernels. The forward pass is
// written out layer by layer as in MODEL.md so it can be read against HF's
// modeling_ernie4_5.py; every step is fp32.
#include "model/ernie4_5/ernie4_5_model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

#include "backend/cpu/fp8_quant.h"
#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/quant_pack.h"
#include "backend/cpu/quant_reference.h"
#include "base/checked_math.h"
#include "base/mapped_file.h"
#include "formats/gguf_q5.h"
#include "formats/gguf_types.h"
#include "formats/int4_weights.h"
#include "model/ernie4_5/gguf_names.h"

namespace tern {
namespace {

Status check_config(const ModelConfig& c, const std::string& source) {
  auto bad = [&](const std::string& what) { return invalid_argument(source + ": " + what); };
  if (c.vocab_size <= 0 || c.vocab_size > std::numeric_limits<int32_t>::max()) return bad("vocab_size out of range");
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_layers <= 0) return bad("non-positive model size");
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return bad("num_attention_heads must be a positive multiple of num_key_value_heads");
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) return bad("head_dim must be positive and even (rotary pairs)");
  if (c.use_bias) return unsupported(source + ": use_bias=true is not supported");
  if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0)) return bad("rms_norm_eps and rope_theta must be positive");
  return Status::ok();
}

void add_in_place(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// Adds the time since the last lap to a ForwardProfile bucket.
class Lap {
 public:
  Lap() : last_(std::chrono::steady_clock::now()) {}
  void operator()(double& bucket) {
    const auto now = std::chrono::steady_clock::now();
    bucket += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_;
};

}  // namespace

Ernie45Model::Ernie45Model(ModelConfig config, Checkpoint checkpoint, int num_threads, const cpu::KernelSet& kernels)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      kernels_(&kernels),
      pool_(num_threads > 0 ? num_threads : default_thread_count()) {}

Result<std::unique_ptr<Ernie45Model>> Ernie45Model::load(const std::string& path, int num_threads,
                                                         const cpu::KernelSet& kernels) {
  ModelConfig config;
  Checkpoint checkpoint;
  std::optional<Int4Config> int4;
  if (is_gguf_file(path)) {
    TERN_ASSIGN_OR_RETURN(checkpoint, Checkpoint::open_gguf(path));
    TERN_ASSIGN_OR_RETURN(config, ernie45::config_from_gguf(*checkpoint.gguf()));
    TERN_RETURN_IF_ERROR(check_config(config, path));
  } else {
    const std::string config_path = path + "/config.json";
    TERN_ASSIGN_OR_RETURN(std::string config_text, read_text_file(config_path));
    TERN_ASSIGN_OR_RETURN(config, parse_model_config(config_text, config_path));
    TERN_RETURN_IF_ERROR(check_config(config, config_path));
    TERN_ASSIGN_OR_RETURN(int4, parse_int4_config(config_text, config_path));
    TERN_ASSIGN_OR_RETURN(checkpoint, Checkpoint::open(path));
  }
  std::unique_ptr<Ernie45Model> model(
      new Ernie45Model(std::move(config), std::move(checkpoint), num_threads, kernels));
  model->int4_ = int4;
  TERN_RETURN_IF_ERROR(model->bind_weights());
  if (model->checkpoint_.gguf() != nullptr) TERN_RETURN_IF_ERROR(model->check_all_tensors_used());
  model->pack_weights();
  model->inv_freq_ = cpu::rope_inv_freq(model->config_.head_dim, model->config_.rope_theta);
  return model;
}

std::string Ernie45Model::weight_name(ernie45::Weight w, int64_t layer) const {
  return checkpoint_.gguf() != nullptr ? ernie45::gguf_weight_name(w, layer) : ernie45::hf_weight_name(w, layer);
}

Status Ernie45Model::check_all_tensors_used() const {
  for (const std::string& name : checkpoint_.tensor_names()) {
    if (std::find(bound_.begin(), bound_.end(), name) == bound_.end()) {
      return unsupported(checkpoint_.source() + ": tensor '" + name + "' is not part of a dense ERNIE 4.5 model " +
                         "without biases (llama.cpp would refuse the file too)");
    }
  }
  return Status::ok();
}

Result<const void*> Ernie45Model::tensor_data(const std::string& name, const std::vector<int64_t>& shape,
                                              DType* dtype, bool matrix) {
  TERN_ASSIGN_OR_RETURN(const TensorView* t, checkpoint_.require(name, shape));
  bound_.push_back(name);
  const std::string where = checkpoint_.file_of(name) + ": tensor " + name;
  const bool quantized = cpu::is_quantized_weight_dtype(t->dtype);
  if (!cpu::is_weight_dtype(t->dtype) && !(matrix && quantized)) {
    return unsupported(where + " has dtype " + std::string(dtype_name(t->dtype)) + "; expected BF16, F16 or F32" +
                       (matrix ? " or one of Q8_0, Q4_0, Q4_K, Q5_K, Q6_K" : " (norm weights are never quantized)"));
  }
  // A quantized row is whole blocks: cols a multiple of the block size, and
  // its fp16 scales read as 2-byte values.
  size_t align = 0;
  std::optional<uint64_t> bytes;
  if (quantized) {
    const int64_t cols = shape.back(), block = dtype_block_size(t->dtype);
    if (cols % block != 0) {
      return parse_error(where + ": " + std::string(dtype_name(t->dtype)) + " rows of " + std::to_string(cols) +
                         " values are not whole blocks of " + std::to_string(block));
    }
    bytes = checked_mul(static_cast<uint64_t>(shape.front()), static_cast<uint64_t>(cpu::row_bytes(t->dtype, cols)));
    align = 2;
  } else {
    align = cpu::weight_element_size(t->dtype);
    bytes = checked_mul(t->num_elements(), align);
  }
  if (!bytes || *bytes != t->data.size()) {
    return parse_error(where + " holds " + std::to_string(t->data.size()) + " bytes, not what " + t->shape_string() +
                       " of " + std::string(dtype_name(t->dtype)) + " takes");
  }
  *dtype = t->dtype;
  if (reinterpret_cast<uintptr_t>(t->data.data()) % align == 0) return static_cast<const void*>(t->data.data());
  // safetensors only promises byte offsets; reading a misaligned uint16/float is UB.
  auto copy = std::make_unique<uint64_t[]>((t->data.size() + 7) / 8);
  std::memcpy(copy.get(), t->data.data(), t->data.size());
  owned_.push_back(std::move(copy));
  return static_cast<const void*>(owned_.back().get());
}

Result<bool> Ernie45Model::is_int4_matrix(const std::string& name) const {
  constexpr std::string_view kSuffix = ".weight";
  if (checkpoint_.gguf() != nullptr || !name.ends_with(kSuffix)) return false;
  const std::string_view prefix(name.data(), name.size() - kSuffix.size());
  if (int4_) {
    const std::string marker = int4_marker_tensor(int4_->scheme, prefix);
    if (checkpoint_.find(marker) == nullptr) return false;  // a layer left in float (modules_to_not_convert, ignore)
    if (checkpoint_.find(name) != nullptr) {
      return invalid_argument(checkpoint_.source() + ": holds both '" + name + "' and '" + marker +
                              "'; a layer is either float or int4");
    }
    return true;
  }
  if (checkpoint_.find(name) != nullptr) return false;
  for (Int4Scheme scheme : {Int4Scheme::kAwqGemm, Int4Scheme::kCompressedTensors}) {
    const std::string marker = int4_marker_tensor(scheme, prefix);
    if (checkpoint_.find(marker) != nullptr) {
      return unsupported(checkpoint_.source() + ": tensor '" + name + "' is missing; '" + marker +
                         "' is there, an int4 layer, but config.json has no quantization_config to say how it "
                         "is packed");
    }
  }
  return false;
}

Result<cpu::WeightMatrix> Ernie45Model::int4_matrix(const std::string& name, int64_t rows, int64_t cols) {
  const std::string prefix = name.substr(0, name.size() - std::string_view(".weight").size());
  TERN_ASSIGN_OR_RETURN(Int4Layer layer, load_int4_linear(checkpoint_, *int4_, prefix, rows, cols, &bound_));
  int4_data_.push_back(std::move(layer.data));
  ++num_int4_matrices_;
  int4_as_q4_0_ += layer.dtype == DType::kQ4_0;
  int4_as_q8_0_ += layer.dtype == DType::kQ8_0;
  cpu::WeightMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.dtype = layer.dtype;
  m.data = int4_data_.back().data();
  return m;
}

std::string Ernie45Model::int4_storage() const {
  std::string out;
  for (auto [count, what] : {std::pair{int4_as_q4_0_, "Q4_0"}, {int4_as_q8_0_, "Q8_0"},
                             {num_int4_matrices_ - int4_as_q4_0_ - int4_as_q8_0_, "bf16"}}) {
    if (count > 0) out += (out.empty() ? "" : ", ") + std::to_string(count) + " " + what;
  }
  return out;
}

Result<cpu::WeightMatrix> Ernie45Model::matrix(const std::string& name, int64_t rows, int64_t cols) {
  TERN_ASSIGN_OR_RETURN(bool int4, is_int4_matrix(name));
  if (int4) return int4_matrix(name, rows, cols);
  cpu::WeightMatrix m;
  m.rows = rows;
  m.cols = cols;
  TERN_ASSIGN_OR_RETURN(m.data, tensor_data(name, {rows, cols}, &m.dtype, /*matrix=*/true));
  return m;
}

Result<cpu::WeightVector> Ernie45Model::vector(const std::string& name, int64_t size) {
  cpu::WeightVector v;
  v.size = size;
  TERN_ASSIGN_OR_RETURN(v.data, tensor_data(name, {size}, &v.dtype, /*matrix=*/false));
  return v;
}

namespace {
// A layer's seven matrices and the weights they are, in file order.
template <class Layer>
std::array<std::pair<cpu::WeightMatrix*, ernie45::Weight>, 7> layer_matrices(Layer& w) {
  using ernie45::Weight;
  return {{{&w.q, Weight::kAttnQ},
           {&w.k, Weight::kAttnK},
           {&w.v, Weight::kAttnV},
           {&w.o, Weight::kAttnOutput},
           {&w.gate, Weight::kFfnGate},
           {&w.up, Weight::kFfnUp},
           {&w.down, Weight::kFfnDown}}};
}
}  // namespace

Status Ernie45Model::quantize(QuantMix mix) {
  // The matrices under their GGUF names in file order, as plan_quant_types reads a file.
  std::vector<cpu::WeightMatrix*> matrices;
  std::vector<GgufTensor> named;
  auto add = [&](cpu::WeightMatrix* m, const std::string& name) {
    GgufTensor t;
    t.name = name;
    std::optional<GgmlType> type = dtype_to_ggml_type(m->dtype);
    if (!type) return unsupported("cannot requantize " + name + " of dtype " + std::string(dtype_name(m->dtype)));
    t.type = *type;
    t.dims = {m->cols, m->rows};
    named.push_back(std::move(t));
    matrices.push_back(m);
    return Status::ok();
  };
  const bool tied = config_.tie_word_embeddings;
  TERN_RETURN_IF_ERROR(add(&embed_, ernie45::gguf_weight_name(ernie45::Weight::kTokenEmbedding)));
  if (!tied) TERN_RETURN_IF_ERROR(add(&lm_head_, ernie45::gguf_weight_name(ernie45::Weight::kOutput)));
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerWeights& w = layers_[l];
    const auto i = static_cast<int64_t>(l);
    for (auto [m, kind] : layer_matrices(w)) {
      TERN_RETURN_IF_ERROR(add(m, ernie45::gguf_weight_name(kind, i)));
    }
  }
  const std::vector<GgmlType> types = plan_quant_types(mix, named);
  std::vector<float> row;
  for (size_t i = 0; i < matrices.size(); ++i) {
    cpu::WeightMatrix& m = *matrices[i];
    // llama-quantize's Q5_0 / Q5_1 fallbacks (rows that do not split into
    // 256-value blocks): tern has no kernels for them, Q8_0 keeps more bits.
    std::optional<DType> to = is_q5_type(types[i]) ? DType::kQ8_0 : ggml_type_to_dtype(types[i]);
    if (!to || *to == m.dtype) continue;
    if (!cpu::is_quantized_weight_dtype(*to)) continue;  // a fallback to a float type: keep the original
    const int64_t row_bytes = cpu::row_bytes(*to, m.cols);
    auto bytes = checked_mul(static_cast<uint64_t>(m.rows), static_cast<uint64_t>(row_bytes));
    if (!bytes) return out_of_range(named[i].name + " is too large to quantize");
    auto owned = std::make_unique<uint64_t[]>((*bytes + 7) / 8);
    auto* out = reinterpret_cast<uint8_t*>(owned.get());
    row.resize(static_cast<size_t>(m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
      cpu::weight_row_to_f32(m, r, row.data());
      cpu::quantize_row(*to, row.data(), m.cols, out + r * row_bytes);
    }
    // Nothing reads the source again: its file pages go back (MappedFile::release).
    const int64_t source_row = cpu::row_bytes(m.dtype, m.cols);
    if (source_row > 0) checkpoint_.release(m.data, static_cast<size_t>(source_row * m.rows));
    m.dtype = *to;
    m.data = owned.get();
    owned_.push_back(std::move(owned));
  }
  if (tied) lm_head_ = embed_;
  pack_weights();
  return Status::ok();
}

Status Ernie45Model::requantize_fp8(cpu::WeightMatrix& m, const std::string& name) {
  TERN_ASSIGN_OR_RETURN(const cpu::Fp8Matrix q, cpu::quantize_fp8_matrix(m, name));
  auto owned = std::make_unique<uint64_t[]>((static_cast<size_t>(q.rows * q.cols) + 1) / 2);
  auto* out = reinterpret_cast<float*>(owned.get());
  for (int64_t r = 0; r < q.rows; ++r) {
    cpu::dequantize_fp8_row(q.values.data() + r * q.cols, q.scales[static_cast<size_t>(r)], q.cols, out + r * q.cols);
  }
  m.dtype = DType::kF32;
  m.data = owned.get();
  owned_.push_back(std::move(owned));
  return Status::ok();
}

Status Ernie45Model::quantize_fp8(bool lm_head) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerWeights& w = layers_[l];
    const auto i = static_cast<int64_t>(l);
    for (auto [m, kind] : layer_matrices(w)) TERN_RETURN_IF_ERROR(requantize_fp8(*m, weight_name(kind, i)));
  }
  if (lm_head) return quantize_lm_head_fp8();
  pack_weights();
  return Status::ok();
}

Status Ernie45Model::quantize_lm_head_fp8() {
  const bool tied = config_.tie_word_embeddings;
  const ernie45::Weight head = tied ? ernie45::Weight::kTokenEmbedding : ernie45::Weight::kOutput;
  TERN_RETURN_IF_ERROR(requantize_fp8(lm_head_, weight_name(head)));  // a tied head gets rows of its own
  pack_weights();
  return Status::ok();
}

int64_t Ernie45Model::drop_packed_sources() {
  if (cpu::best_cpu_isa() < cpu::CpuIsa::kAvx2) return 0;  // the packed quantized kernels need AVX2
  int64_t freed = 0;
  auto drop = [&](cpu::WeightMatrix& m) {
    if (!cpu::is_quantized_weight_dtype(m.dtype) || m.packed == nullptr || m.packed->dtype != m.dtype) return;
    auto it = std::find_if(owned_.begin(), owned_.end(), [&](const auto& o) { return o.get() == m.data; });
    if (it == owned_.end()) return;  // file pages: pack_weights gave them back already
    freed += cpu::row_bytes(m.dtype, m.cols) * m.rows;
    it->reset();
    m.data = nullptr;
  };
  for (LayerWeights& w : layers_) {
    for (auto [m, kind] : layer_matrices(w)) drop(*m);
  }
  if (!config_.tie_word_embeddings) drop(lm_head_);  // a tied table's rows serve the lookups
  std::erase_if(owned_, [](const auto& o) { return o == nullptr; });
  return freed;
}

void Ernie45Model::pack_weights() {
  packed_.clear();
  auto pack = [&](cpu::WeightMatrix& m) {
    m.packed = nullptr;
    if (kernels_->pack == nullptr) return;
    std::unique_ptr<cpu::PackedWeight> p = kernels_->pack(m);
    if (p == nullptr) return;
    m.packed = p.get();
    packed_.push_back(std::move(p));
  };
  // A matrix that has a packed copy is read from it alone: its file pages
  // go back (they fault in again, unchanged, if anything reads them: a GPU
  // upload, the FP8 quantizer), so the copy does not double the process's
  // memory.
  auto release = [&](const cpu::WeightMatrix& m) {
    const int64_t row = cpu::row_bytes(m.dtype, m.cols);
    if (m.packed != nullptr && row > 0) checkpoint_.release(m.data, static_cast<size_t>(row * m.rows));
  };
  // The embedding table is only looked up (from `data`) unless it is also
  // the head; a tied table keeps its pages unless lookups read its panel
  // copy (the fast set's), as they read no other packed form. A tied head
  // with rows of its own (quantize_fp8(true)) is packed as an untied one.
  embed_.packed = nullptr;
  if (config_.tie_word_embeddings && lm_head_.data == embed_.data) {
    pack(embed_);
    lm_head_ = embed_;
    if (cpu::is_bf16_panels(embed_.packed)) release(embed_);
  } else {
    pack(lm_head_);
    release(lm_head_);
  }
  for (LayerWeights& w : layers_) {
    for (cpu::WeightMatrix* m : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down}) {
      pack(*m);
      release(*m);
    }
  }
}

// Shapes are PyTorch's [out, in] for both sources (a GGUF's ne {in, out}
// arrives reversed from Checkpoint), and no GGUF weight needs un-permuting
// (gguf_names.h says why), so one binding serves both.
Status Ernie45Model::bind_weights() {
  using ernie45::Weight;
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  TERN_ASSIGN_OR_RETURN(embed_, matrix(weight_name(Weight::kTokenEmbedding), c.vocab_size, hidden));
  TERN_ASSIGN_OR_RETURN(final_norm_, vector(weight_name(Weight::kOutputNorm), hidden));
  // As HF (and vLLM): a tied model's head is the embedding even if the file
  // also carries an lm_head.weight; an untied one must carry it.
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
    // A GGUF is tied exactly when it has no output.weight, so nothing is left over.
  } else {
    const std::string head = weight_name(Weight::kOutput);
    TERN_ASSIGN_OR_RETURN(bool int4_head, is_int4_matrix(head));
    if (checkpoint_.find(head) == nullptr && !int4_head) {
      return not_found(checkpoint_.source() + ": " + head +
                       " is missing but config.json has tie_word_embeddings=false");
    }
    TERN_ASSIGN_OR_RETURN(lm_head_, matrix(head, c.vocab_size, hidden));
  }
  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerWeights& w = layers_[static_cast<size_t>(l)];
    TERN_ASSIGN_OR_RETURN(w.input_norm, vector(weight_name(Weight::kAttnNorm, l), hidden));
    TERN_ASSIGN_OR_RETURN(w.q, matrix(weight_name(Weight::kAttnQ, l), c.q_dim(), hidden));
    TERN_ASSIGN_OR_RETURN(w.k, matrix(weight_name(Weight::kAttnK, l), c.kv_dim(), hidden));
    TERN_ASSIGN_OR_RETURN(w.v, matrix(weight_name(Weight::kAttnV, l), c.kv_dim(), hidden));
    TERN_ASSIGN_OR_RETURN(w.o, matrix(weight_name(Weight::kAttnOutput, l), hidden, c.q_dim()));
    TERN_ASSIGN_OR_RETURN(w.post_attention_norm, vector(weight_name(Weight::kFfnNorm, l), hidden));
    TERN_ASSIGN_OR_RETURN(w.gate, matrix(weight_name(Weight::kFfnGate, l), inter, hidden));
    TERN_ASSIGN_OR_RETURN(w.up, matrix(weight_name(Weight::kFfnUp, l), inter, hidden));
    TERN_ASSIGN_OR_RETURN(w.down, matrix(weight_name(Weight::kFfnDown, l), hidden, inter));
  }
  return Status::ok();
}

KvCache Ernie45Model::make_cache(int64_t capacity) const {
  return KvCache(config_.num_layers, config_.kv_dim(), capacity);
}

PagedKvPool Ernie45Model::make_pool(int64_t num_blocks, int64_t block_size, KvCacheDType dtype) const {
  return PagedKvPool(config_.num_layers, config_.kv_dim(), num_blocks, block_size, dtype);
}

// ---- Where a step's K/V live. The layer code writes the new rows and reads
// row tables through this, so one forward pass serves both stores.

class Ernie45Model::KvAccess {
 public:
  virtual ~KvAccess() = default;
  // Writes the step's new K and V rows of `layer`: row r of k and v
  // ([T, kv_dim]) belongs to token r of the step.
  virtual void store(int64_t layer, const float* k, const float* v) = 0;
  // Points the K/V row tables of every sequence in `seqs` at `layer`.
  virtual void bind(int64_t layer, std::span<cpu::AttentionSequence> seqs) = 0;
};

// One sequence continuing a KvCache at cache.length().
class Ernie45Model::CacheKv final : public Ernie45Model::KvAccess {
 public:
  CacheKv(KvCache& cache, int64_t num_tokens) : cache_(cache), start_(cache.length()), num_tokens_(num_tokens) {}

  void store(int64_t layer, const float* k, const float* v) override {
    const int64_t kv_dim = cache_.kv_dim();
    for (int64_t i = 0; i < num_tokens_; ++i) {
      std::copy_n(k + i * kv_dim, kv_dim, cache_.key(layer, start_ + i));
      std::copy_n(v + i * kv_dim, kv_dim, cache_.value(layer, start_ + i));
    }
  }
  void bind(int64_t layer, std::span<cpu::AttentionSequence> seqs) override {
    seqs[0].k = cache_.key_rows(layer);
    seqs[0].v = cache_.value_rows(layer);
  }

 private:
  KvCache& cache_;
  int64_t start_, num_tokens_;
};

namespace {

// Block-table entries that cover positions [0, start_pos + n) of a chunk.
int64_t blocks_used(const SequenceChunk& chunk, int64_t block_size) {
  const int64_t end = chunk.start_pos + static_cast<int64_t>(chunk.tokens.size());
  return (end + block_size - 1) / block_size;
}

}  // namespace

// The chunks of a batch, each under its block table in a PagedKvPool.
// `block_ptrs` (an fp32 pool), `block_ptrs8` (fp8) or `block_ptrs16` (bf16) holds room for 2 * the
// chunks' blocks_used(): the K then V block pointers of each chunk, rebuilt
// per layer.
class Ernie45Model::PoolKv final : public Ernie45Model::KvAccess {
 public:
  PoolKv(std::span<const SequenceChunk> batch, PagedKvPool& pool, std::span<const float*> block_ptrs,
         std::span<const uint8_t*> block_ptrs8, std::span<const uint16_t*> block_ptrs16)
      : batch_(batch), pool_(pool), block_ptrs_(block_ptrs), block_ptrs8_(block_ptrs8), block_ptrs16_(block_ptrs16) {}

  void store(int64_t layer, const float* k, const float* v) override {
    const int64_t kv_dim = pool_.kv_dim();
    int64_t row = 0;
    for (const SequenceChunk& chunk : batch_) {
      for (size_t i = 0; i < chunk.tokens.size(); ++i, ++row) {
        const int64_t pos = chunk.start_pos + static_cast<int64_t>(i);
        pool_.store(layer, chunk.block_table, pos, k + row * kv_dim, v + row * kv_dim);
      }
    }
  }
  void bind(int64_t layer, std::span<cpu::AttentionSequence> seqs) override {
    size_t used = 0;
    for (size_t i = 0; i < batch_.size(); ++i) {
      const auto n = static_cast<size_t>(blocks_used(batch_[i], pool_.block_size()));
      const auto table = batch_[i].block_table.first(n);
      if (pool_.is_fp8()) {
        seqs[i].k = pool_.key_rows(layer, table, block_ptrs8_.subspan(used, n));
        seqs[i].v = pool_.value_rows(layer, table, block_ptrs8_.subspan(used + n, n));
      } else if (pool_.is_bf16()) {
        seqs[i].k = pool_.key_rows(layer, table, block_ptrs16_.subspan(used, n));
        seqs[i].v = pool_.value_rows(layer, table, block_ptrs16_.subspan(used + n, n));
      } else {
        seqs[i].k = pool_.key_rows(layer, table, block_ptrs_.subspan(used, n));
        seqs[i].v = pool_.value_rows(layer, table, block_ptrs_.subspan(used + n, n));
      }
      used += 2 * n;
    }
  }

 private:
  std::span<const SequenceChunk> batch_;
  PagedKvPool& pool_;
  std::span<const float*> block_ptrs_;
  std::span<const uint8_t*> block_ptrs8_;
  std::span<const uint16_t*> block_ptrs16_;
};

// ---- Entry points: validate, plan the step, run it.

Status Ernie45Model::forward(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits) {
  return run_cache(tokens, cache, logits, /*all_logits=*/false);
}

Status Ernie45Model::forward_all(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits) {
  return run_cache(tokens, cache, logits, /*all_logits=*/true);
}

Status Ernie45Model::run_cache(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits,
                               bool all_logits) {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = c.vocab_size;

  // Validate everything before touching the cache.
  if (n == 0) return invalid_argument("forward: no tokens");
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = tokens[static_cast<size_t>(i)];
    if (id < 0 || id >= vocab) {
      return invalid_argument("token id " + std::to_string(id) + " at index " + std::to_string(i) +
                              " outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  if (cache.num_layers() != c.num_layers || cache.kv_dim() != c.kv_dim()) {
    return invalid_argument("KV cache shaped for " + std::to_string(cache.num_layers()) + " layers x " +
                            std::to_string(cache.kv_dim()) + " does not match the model (" +
                            std::to_string(c.num_layers) + " x " + std::to_string(c.kv_dim()) + ")");
  }
  const int64_t out_rows = all_logits ? n : 1;
  if (static_cast<int64_t>(logits.size()) != out_rows * vocab) {
    return invalid_argument("logits buffer holds " + std::to_string(logits.size()) + " floats; expected " +
                            std::to_string(out_rows * vocab));
  }
  TERN_RETURN_IF_ERROR(cache.check_room(n));

  const int64_t start = cache.length();
  tokens_.assign(tokens.begin(), tokens.end());
  positions_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions_[static_cast<size_t>(i)] = start + i;
  seqs_.assign(1, cpu::AttentionSequence{0, n, {}, {}});
  logit_rows_.resize(static_cast<size_t>(out_rows));
  for (int64_t i = 0; i < out_rows; ++i) logit_rows_[static_cast<size_t>(i)] = n - out_rows + i;

  CacheKv kv(cache, n);
  run_step(kv, logits);
  return cache.set_length(start + n);
}

Status Ernie45Model::forward_batch(std::span<const SequenceChunk> batch, PagedKvPool& pool,
                                   std::span<float> logits) {
  TERN_RETURN_IF_ERROR(check_batch(batch, pool, logits));
  tokens_.clear();
  positions_.clear();
  seqs_.clear();
  logit_rows_.clear();
  int64_t num_blocks = 0;
  for (const SequenceChunk& chunk : batch) {
    const auto first = static_cast<int64_t>(tokens_.size());
    const auto n = static_cast<int64_t>(chunk.tokens.size());
    tokens_.insert(tokens_.end(), chunk.tokens.begin(), chunk.tokens.end());
    for (int64_t i = 0; i < n; ++i) positions_.push_back(chunk.start_pos + i);
    seqs_.push_back(cpu::AttentionSequence{first, n, {}, {}});
    if (chunk.all_logits) {
      for (int64_t i = 0; i < n; ++i) logit_rows_.push_back(first + i);
    } else if (chunk.want_logits) {
      logit_rows_.push_back(first + n - 1);
    }
    num_blocks += blocks_used(chunk, pool.block_size());
  }
  if (pool.is_fp8()) {
    block_ptrs8_.resize(static_cast<size_t>(2 * num_blocks));
  } else if (pool.is_bf16()) {
    block_ptrs16_.resize(static_cast<size_t>(2 * num_blocks));
  } else {
    block_ptrs_.resize(static_cast<size_t>(2 * num_blocks));
  }

  PoolKv kv(batch, pool, block_ptrs_, block_ptrs8_, block_ptrs16_);
  run_step(kv, logits);
  return Status::ok();
}

Status Ernie45Model::check_batch(std::span<const SequenceChunk> batch, const PagedKvPool& pool,
                                 std::span<float> logits) {
  const ModelConfig& c = config_;
  if (pool.num_layers() != c.num_layers || pool.kv_dim() != c.kv_dim()) {
    return invalid_argument("KV pool shaped for " + std::to_string(pool.num_layers()) + " layers x " +
                            std::to_string(pool.kv_dim()) + " does not match the model (" +
                            std::to_string(c.num_layers) + " x " + std::to_string(c.kv_dim()) + ")");
  }
  if (batch.empty()) return invalid_argument("forward_batch: empty batch");
  auto bad = [](size_t chunk, const std::string& what) {
    return invalid_argument("forward_batch: chunk " + std::to_string(chunk) + ": " + what);
  };
  const int64_t block_size = pool.block_size();
  int64_t num_want = 0;
  slots_.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceChunk& chunk = batch[i];
    const auto n = static_cast<int64_t>(chunk.tokens.size());
    if (n == 0) return bad(i, "no tokens");
    for (int64_t t = 0; t < n; ++t) {
      const int32_t id = chunk.tokens[static_cast<size_t>(t)];
      if (id < 0 || id >= c.vocab_size) {
        return bad(i, "token id " + std::to_string(id) + " at index " + std::to_string(t) +
                          " outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
      }
    }
    if (chunk.start_pos < 0 || chunk.start_pos > std::numeric_limits<int64_t>::max() - n) {
      return bad(i, "start_pos " + std::to_string(chunk.start_pos) + " out of range");
    }
    const int64_t end = chunk.start_pos + n;
    Status table = pool.check_block_table(chunk.block_table, end);
    if (!table.is_ok()) return bad(i, table.message());
    for (int64_t pos = chunk.start_pos; pos < end; ++pos) {
      const int64_t block = chunk.block_table[static_cast<size_t>(pos / block_size)];
      slots_.push_back(block * block_size + pos % block_size);
    }
    num_want += chunk.all_logits ? n : chunk.want_logits ? 1 : 0;
  }
  if (static_cast<int64_t>(logits.size()) != num_want * c.vocab_size) {
    return invalid_argument("forward_batch: logits buffer holds " + std::to_string(logits.size()) +
                            " floats; expected " + std::to_string(num_want) + " x " + std::to_string(c.vocab_size));
  }
  // Two writers of one slot would race, and the result would depend on the order.
  std::sort(slots_.begin(), slots_.end());
  auto dup = std::adjacent_find(slots_.begin(), slots_.end());
  if (dup != slots_.end()) {
    return invalid_argument("forward_batch: pool slot " + std::to_string(*dup % block_size) + " of block " +
                            std::to_string(*dup / block_size) + " is written twice in one step");
  }
  return Status::ok();
}

// ---- The forward pass over the planned step.

void Ernie45Model::run_step(KvAccess& kv, std::span<float> logits) {
  const ModelConfig& c = config_;
  const auto n = static_cast<int64_t>(tokens_.size());
  auto size = [n](std::vector<float>& v, int64_t width) { v.resize(static_cast<size_t>(n * width)); };
  size(x_, c.hidden_size);
  size(h_, c.hidden_size);
  size(q_, c.q_dim());
  size(k_, c.kv_dim());
  size(v_, c.kv_dim());
  size(attn_, c.q_dim());
  size(gate_, c.intermediate_size);
  size(up_, c.intermediate_size);
  size(out_, c.hidden_size);

  Lap lap;
  kernels_->embedding_lookup(embed_, tokens_, x_.data());
  lap(profile_.other_s);
  for (int64_t l = 0; l < c.num_layers; ++l) run_layer(l, kv);
  lap = Lap();
  compute_logits(logits);
  lap(profile_.lm_head_s);
  ++profile_.calls;
}

// Several projections of one input: one kernel call where the set fuses them.
void Ernie45Model::project(const float* x, int64_t n, std::initializer_list<const cpu::WeightMatrix*> ws,
                           std::initializer_list<float*> ys) {
  if (kernels_->linear_many != nullptr) {
    kernels_->linear_many(pool_, x, n, std::span<const cpu::WeightMatrix* const>(ws.begin(), ws.size()),
                          std::span<float* const>(ys.begin(), ys.size()));
    return;
  }
  float* const* y = ys.begin();
  for (const cpu::WeightMatrix* w : ws) kernels_->linear(pool_, x, n, *w, *y++);
}

// Floats of row-wise work a second thread must get before waking it pays.
constexpr int64_t kMinRowWorkPerThread = int64_t{1} << 15;

template <typename Fn>
void Ernie45Model::by_tokens(int64_t n, int64_t width, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, kMinRowWorkPerThread / std::max<int64_t>(1, width));
  pool_.parallel_for(n, grain, [&](int64_t begin, int64_t end) { fn(begin, end - begin); });
}

// set_fp8_activations: rows of `width` floats rounded to their e4m3 form
// with per-row scales, in place (a row with a non-finite value is left as
// it is).
void Ernie45Model::round_rows_to_fp8(float* x, int64_t n, int64_t width) {
  if (!fp8_activations_) return;
  by_tokens(n, width, [&](int64_t t, int64_t m) {
    std::vector<uint8_t> codes(static_cast<size_t>(width));
    for (int64_t r = t; r < t + m; ++r) {
      float scale = 0;
      if (cpu::quantize_fp8_row(x + r * width, width, codes.data(), &scale).is_ok()) {
        cpu::dequantize_fp8_row(codes.data(), scale, width, x + r * width);
      }
    }
  });
}

// One decoder layer over all tokens of the step: the linear layers see every
// token at once; attention runs per sequence over its own K/V.
void Ernie45Model::run_layer(int64_t layer, KvAccess& kv) {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_[static_cast<size_t>(layer)];
  const auto n = static_cast<int64_t>(tokens_.size());
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* x = x_.data();
  float* h = h_.data();
  float* out = out_.data();

  ForwardProfile& prof = profile_;
  Lap lap;

  const int64_t H = c.hidden_size, I = c.intermediate_size, Q = c.q_dim(), KV = c.kv_dim();
  const std::span<const int64_t> positions(positions_);

  // Attention block.
  by_tokens(n, H, [&](int64_t t, int64_t m) { kernels_->rmsnorm(x + t * H, m, w.input_norm, eps, h + t * H); });
  round_rows_to_fp8(h, n, H);
  lap(prof.other_s);
  project(h, n, {&w.q, &w.k, &w.v}, {q_.data(), k_.data(), v_.data()});
  lap(prof.linear_s);
  by_tokens(n, Q + KV, [&](int64_t t, int64_t m) {
    kernels_->rope_interleaved(q_.data() + t * Q, m, c.num_heads, c.head_dim, positions.subspan(t, m), inv_freq_);
    kernels_->rope_interleaved(k_.data() + t * KV, m, c.num_kv_heads, c.head_dim, positions.subspan(t, m), inv_freq_);
  });
  lap(prof.other_s);
  kv.store(layer, k_.data(), v_.data());
  kv.bind(layer, seqs_);
  const cpu::AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim};
  kernels_->attention_batch(pool_, q_.data(), positions_, seqs_, shape, attn_.data());
  round_rows_to_fp8(attn_.data(), n, Q);
  lap(prof.attention_s);
  kernels_->linear(pool_, attn_.data(), n, w.o, out);
  lap(prof.linear_s);

  // MLP block.
  by_tokens(n, H, [&](int64_t t, int64_t m) {
    add_in_place(x + t * H, out + t * H, m * H);
    kernels_->rmsnorm(x + t * H, m, w.post_attention_norm, eps, h + t * H);
  });
  round_rows_to_fp8(h, n, H);
  lap(prof.other_s);
  project(h, n, {&w.gate, &w.up}, {gate_.data(), up_.data()});
  lap(prof.linear_s);
  float* gate = gate_.data();
  const float* up = up_.data();
  by_tokens(n, I, [&](int64_t t, int64_t m) { kernels_->silu_mul(gate + t * I, up + t * I, m * I, gate + t * I); });
  round_rows_to_fp8(gate, n, I);
  lap(prof.other_s);
  kernels_->linear(pool_, gate, n, w.down, out);
  lap(prof.linear_s);
  by_tokens(n, H, [&](int64_t t, int64_t m) { add_in_place(x + t * H, out + t * H, m * H); });
  lap(prof.other_s);
}

// Only the rows whose logits are wanted go through the final norm and head.
void Ernie45Model::compute_logits(std::span<float> logits) {
  const int64_t hidden = config_.hidden_size;
  const auto rows = static_cast<int64_t>(logit_rows_.size());
  if (rows == 0) return;
  float* h = h_.data();
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(x_.data() + logit_rows_[static_cast<size_t>(i)] * hidden, hidden, h + i * hidden);
  }
  kernels_->rmsnorm(h, rows, final_norm_, static_cast<float>(config_.rms_norm_eps), h);
  kernels_->linear(pool_, h, rows, lm_head_, logits.data());
}

}  // namespace tern
