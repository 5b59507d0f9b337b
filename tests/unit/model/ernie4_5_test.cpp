// Ernie45Model on tiny random checkpoints written here (config.json plus a
// hand-built safetensors file): against an independent double-precision
// re-implementation of the whole forward pass (no KV cache), KV-cached
// decoding against a full prefill, weight dtypes and layouts, and the errors
// a user sees for broken checkpoints and bad requests.
#include "model/ernie4_5/ernie4_5_model.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/bf16.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

struct Spec {
  int64_t vocab = 101, hidden = 64, inter = 80, layers = 2, heads = 4, kv_heads = 2, head_dim = 24;
  double theta = 10000.0, eps = 1e-5;
  bool tie = true;
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> values;  // exactly representable in the dtype written
  DType dtype = DType::kBF16;
};
using Tensors = std::map<std::string, Tensor>;

std::string layer(int64_t l, const std::string& suffix) { return "model.layers." + std::to_string(l) + "." + suffix; }

double round_to(DType dt, float v) {
  if (dt == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  if (dt == DType::kF16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// Random weights of ERNIE's shape; scales keep activations O(1) so softmax
// and SiLU are exercised away from their linear regions.
Tensors make_tensors(const Spec& s, DType matrix_dtype, DType norm_dtype, uint32_t seed, bool with_lm_head) {
  std::mt19937 rng(seed);
  Tensors t;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi, DType dt) {
    std::uniform_real_distribution<float> d(lo, hi);
    Tensor& x = t[name];
    x.shape = shape;
    x.dtype = dt;
    int64_t n = 1;
    for (int64_t dim : shape) n *= dim;
    x.values.resize(static_cast<size_t>(n));
    for (auto& v : x.values) {
      do {
        v = round_to(dt, d(rng));
      } while (v == 0.0);
    }
  };
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    float a = 1.7f / std::sqrt(static_cast<float>(cols));
    add(name, {rows, cols}, -a, a, matrix_dtype);
  };
  add("model.embed_tokens.weight", {s.vocab, s.hidden}, -1.0f, 1.0f, matrix_dtype);
  for (int64_t l = 0; l < s.layers; ++l) {
    add(layer(l, "input_layernorm.weight"), {s.hidden}, 0.5f, 1.5f, norm_dtype);
    mat(layer(l, "self_attn.q_proj.weight"), s.q_dim(), s.hidden);
    mat(layer(l, "self_attn.k_proj.weight"), s.kv_dim(), s.hidden);
    mat(layer(l, "self_attn.v_proj.weight"), s.kv_dim(), s.hidden);
    mat(layer(l, "self_attn.o_proj.weight"), s.hidden, s.q_dim());
    add(layer(l, "post_attention_layernorm.weight"), {s.hidden}, 0.5f, 1.5f, norm_dtype);
    mat(layer(l, "mlp.gate_proj.weight"), s.inter, s.hidden);
    mat(layer(l, "mlp.up_proj.weight"), s.inter, s.hidden);
    mat(layer(l, "mlp.down_proj.weight"), s.hidden, s.inter);
  }
  add("model.norm.weight", {s.hidden}, 0.5f, 1.5f, norm_dtype);
  if (with_lm_head) mat("lm_head.weight", s.vocab, s.hidden);
  return t;
}

std::string config_json(const Spec& s) {
  return std::string("{\"architectures\": [\"Ernie4_5ForCausalLM\"], \"model_type\": \"ernie4_5\"") +
         ", \"vocab_size\": " + std::to_string(s.vocab) + ", \"hidden_size\": " + std::to_string(s.hidden) +
         ", \"intermediate_size\": " + std::to_string(s.inter) +
         ", \"num_hidden_layers\": " + std::to_string(s.layers) +
         ", \"num_attention_heads\": " + std::to_string(s.heads) +
         ", \"num_key_value_heads\": " + std::to_string(s.kv_heads) +
         ", \"head_dim\": " + std::to_string(s.head_dim) + ", \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05" +
         ", \"rope_theta\": " + std::to_string(s.theta) + ", \"max_position_embeddings\": 4096" +
         ", \"use_bias\": false, \"tie_word_embeddings\": " + (s.tie ? "true" : "false") +
         ", \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": 0}";
}

// The raw safetensors layout: u64 LE header length, JSON header, data. With
// `misalign` the data region starts at an odd offset, so no 2- or 4-byte
// tensor is aligned in the memory map.
std::string safetensors_bytes(const Tensors& tensors, bool misalign) {
  std::string header = "{", data;
  for (const auto& [name, t] : tensors) {
    const size_t begin = data.size();
    for (double v : t.values) {
      if (t.dtype == DType::kF32) {
        float f = static_cast<float>(v);
        data.append(reinterpret_cast<const char*>(&f), 4);
      } else if (t.dtype == DType::kI32) {
        int32_t i = static_cast<int32_t>(v * 100);
        data.append(reinterpret_cast<const char*>(&i), 4);
      } else {
        uint16_t h = t.dtype == DType::kBF16 ? f32_to_bf16(static_cast<float>(v)) : f32_to_f16(static_cast<float>(v));
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"" + std::string(dtype_name(t.dtype)) + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += "}";
  const size_t target = misalign ? 1 : 0;
  while (header.size() % 8 != target) header += ' ';
  uint64_t len = header.size();
  std::string out(reinterpret_cast<const char*>(&len), 8);
  return out + header + data;
}

class TempModelDir {
 public:
  TempModelDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("tern_ernie_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempModelDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream f(path_ / name, std::ios::binary);
    f << bytes;
  }

 private:
  fs::path path_;
};

void write_model(const TempModelDir& dir, const Spec& s, const Tensors& t, bool misalign = false) {
  dir.write("config.json", config_json(s));
  dir.write("model.safetensors", safetensors_bytes(t, misalign));
}

// ---- Independent double-precision forward: no cache, everything recomputed.

using Mat = std::vector<std::vector<double>>;  // [tokens][features]

Mat matmul_t(const Mat& x, const Tensor& w) {  // x . W^T
  const int64_t rows = w.shape[0], cols = w.shape[1];
  Mat y(x.size(), std::vector<double>(static_cast<size_t>(rows)));
  for (size_t t = 0; t < x.size(); ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += x[t][size_t(c)] * w.values[size_t(r * cols + c)];
      y[t][size_t(r)] = acc;
    }
  }
  return y;
}

Mat rms(const Mat& x, const Tensor& w, double eps) {
  Mat y = x;
  for (auto& row : y) {
    double ss = 0;
    for (double v : row) ss += v * v;
    double inv = 1.0 / std::sqrt(ss / double(row.size()) + eps);
    for (size_t j = 0; j < row.size(); ++j) row[j] = row[j] * inv * w.values[j];
  }
  return y;
}

void rope(Mat& x, int64_t heads, int64_t head_dim, double theta) {
  for (size_t p = 0; p < x.size(); ++p) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < head_dim / 2; ++i) {
        double angle = double(p) * std::pow(theta, -2.0 * double(i) / double(head_dim));
        double& a = x[p][size_t(h * head_dim + 2 * i)];
        double& b = x[p][size_t(h * head_dim + 2 * i + 1)];
        double na = a * std::cos(angle) - b * std::sin(angle);
        double nb = b * std::cos(angle) + a * std::sin(angle);
        a = na;
        b = nb;
      }
    }
  }
}

Mat reference_logits(const Spec& s, const Tensors& w, const std::vector<int32_t>& ids) {
  const size_t n = ids.size();
  const Tensor& embed = w.at("model.embed_tokens.weight");
  Mat x(n, std::vector<double>(size_t(s.hidden)));
  for (size_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < s.hidden; ++j) x[t][size_t(j)] = embed.values[size_t(ids[t] * s.hidden + j)];
  }
  for (int64_t l = 0; l < s.layers; ++l) {
    Mat h = rms(x, w.at(layer(l, "input_layernorm.weight")), s.eps);
    Mat q = matmul_t(h, w.at(layer(l, "self_attn.q_proj.weight")));
    Mat k = matmul_t(h, w.at(layer(l, "self_attn.k_proj.weight")));
    Mat v = matmul_t(h, w.at(layer(l, "self_attn.v_proj.weight")));
    rope(q, s.heads, s.head_dim, s.theta);
    rope(k, s.kv_heads, s.head_dim, s.theta);
    Mat a(n, std::vector<double>(size_t(s.q_dim())));
    for (size_t t = 0; t < n; ++t) {
      for (int64_t hd = 0; hd < s.heads; ++hd) {
        const int64_t kvh = hd / (s.heads / s.kv_heads);
        std::vector<double> p(t + 1);
        double mx = -1e300, sum = 0;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t e = 0; e < s.head_dim; ++e) {
            d += q[t][size_t(hd * s.head_dim + e)] * k[j][size_t(kvh * s.head_dim + e)];
          }
          p[j] = d / std::sqrt(double(s.head_dim));
          mx = std::max(mx, p[j]);
        }
        for (double& pj : p) sum += (pj = std::exp(pj - mx));
        for (int64_t e = 0; e < s.head_dim; ++e) {
          double acc = 0;
          for (size_t j = 0; j <= t; ++j) acc += p[j] / sum * v[j][size_t(kvh * s.head_dim + e)];
          a[t][size_t(hd * s.head_dim + e)] = acc;
        }
      }
    }
    Mat o = matmul_t(a, w.at(layer(l, "self_attn.o_proj.weight")));
    for (size_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < s.hidden; ++j) x[t][size_t(j)] += o[t][size_t(j)];
    h = rms(x, w.at(layer(l, "post_attention_layernorm.weight")), s.eps);
    Mat g = matmul_t(h, w.at(layer(l, "mlp.gate_proj.weight")));
    Mat u = matmul_t(h, w.at(layer(l, "mlp.up_proj.weight")));
    for (size_t t = 0; t < n; ++t)
      for (size_t j = 0; j < g[t].size(); ++j) g[t][j] = g[t][j] / (1.0 + std::exp(-g[t][j])) * u[t][j];
    Mat d = matmul_t(g, w.at(layer(l, "mlp.down_proj.weight")));
    for (size_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < s.hidden; ++j) x[t][size_t(j)] += d[t][size_t(j)];
  }
  Mat h = rms(x, w.at("model.norm.weight"), s.eps);
  return matmul_t(h, s.tie ? embed : w.at("lm_head.weight"));
}

// max |got - ref| / max |ref| over one row of logits.
double relative_error(const float* got, const std::vector<double>& ref) {
  double err = 0, mag = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - ref[i]));
    mag = std::max(mag, std::fabs(ref[i]));
  }
  return err / mag;
}

std::vector<int32_t> random_ids(const Spec& s, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, int32_t(s.vocab - 1));
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = d(rng);
  ids[0] = 0;
  ids[n - 1] = int32_t(s.vocab - 1);  // both ends of the table
  return ids;
}

std::unique_ptr<Ernie45Model> load_or_die(const TempModelDir& dir, int threads = 2) {
  auto model = Ernie45Model::load(dir.path(), threads);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? std::move(model).value() : nullptr;
}

// Every row of forward_all against the double reference, and the last-token
// forward against the last row.
void expect_matches_reference(const Spec& s, const Tensors& t, bool misalign = false) {
  TempModelDir dir;
  write_model(dir, s, t, misalign);
  auto model = load_or_die(dir);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> ids = random_ids(s, 11, 5);
  Mat ref = reference_logits(s, t, ids);
  KvCache cache = model->make_cache(32);
  std::vector<float> all(ids.size() * size_t(s.vocab));
  ASSERT_TRUE(model->forward_all(ids, cache, all).is_ok());
  EXPECT_EQ(cache.length(), int64_t(ids.size()));
  for (size_t t_i = 0; t_i < ids.size(); ++t_i) {
    EXPECT_LT(relative_error(all.data() + t_i * size_t(s.vocab), ref[t_i]), 1e-4) << "token " << t_i;
  }
  KvCache cache2 = model->make_cache(32);
  std::vector<float> last(size_t(s.vocab));
  ASSERT_TRUE(model->forward(ids, cache2, last).is_ok());
  EXPECT_EQ(0, std::memcmp(last.data(), all.data() + (ids.size() - 1) * size_t(s.vocab), last.size() * 4));
}

TEST(Ernie45Model, MatchesDoubleReferenceBf16) {
  Spec s;
  expect_matches_reference(s, make_tensors(s, DType::kBF16, DType::kBF16, 1, false));
}

TEST(Ernie45Model, MatchesDoubleReferenceGqa8F16WithF32Norms) {
  Spec s;
  s.heads = 8;
  s.kv_heads = 1;
  s.head_dim = 16;
  s.theta = 500000.0;
  expect_matches_reference(s, make_tensors(s, DType::kF16, DType::kF32, 2, false));
}

TEST(Ernie45Model, MatchesDoubleReferenceF32UntiedHead) {
  Spec s;
  s.tie = false;
  s.layers = 3;
  s.kv_heads = 4;  // plain multi-head attention
  expect_matches_reference(s, make_tensors(s, DType::kF32, DType::kF32, 3, true));
}

TEST(Ernie45Model, MisalignedTensorDataIsCopiedAndStillCorrect) {
  Spec s;
  expect_matches_reference(s, make_tensors(s, DType::kBF16, DType::kBF16, 4, false), /*misalign=*/true);
}

TEST(Ernie45Model, TiedModelIgnoresLmHeadLikeHf) {
  Spec s;  // tie_word_embeddings=true but the file also has an lm_head
  expect_matches_reference(s, make_tensors(s, DType::kBF16, DType::kBF16, 5, true));
}

TEST(Ernie45Model, CachedDecodeMatchesFullPrefill) {
  Spec s;
  Tensors t = make_tensors(s, DType::kBF16, DType::kBF16, 6, false);
  TempModelDir dir;
  write_model(dir, s, t);
  auto model = load_or_die(dir);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> ids = random_ids(s, 14, 7);
  const size_t vocab = size_t(s.vocab);
  KvCache full_cache = model->make_cache(14);
  std::vector<float> full(ids.size() * vocab);
  ASSERT_TRUE(model->forward_all(ids, full_cache, full).is_ok());

  // Prefill 5, then chunks of 1, 3, 1, ...: the kernels are built so every
  // row's arithmetic is the same however tokens are grouped, so the logits
  // must agree to the bit (the contract only needs 1e-4).
  KvCache cache = model->make_cache(14);
  std::vector<float> logits(vocab);
  const size_t chunks[] = {5, 1, 3, 1, 1, 2, 1};
  size_t done = 0;
  for (size_t chunk : chunks) {
    std::span<const int32_t> part(ids.data() + done, chunk);
    ASSERT_TRUE(model->forward(part, cache, logits).is_ok());
    done += chunk;
    ASSERT_EQ(cache.length(), int64_t(done));
    const float* expected = full.data() + (done - 1) * vocab;
    std::vector<double> ref(expected, expected + vocab);
    EXPECT_LT(relative_error(logits.data(), ref), 1e-4) << "after " << done;
    EXPECT_EQ(0, std::memcmp(logits.data(), expected, vocab * 4)) << "after " << done;
  }
  ASSERT_EQ(done, ids.size());

  // Rolling the cache back and re-running the tail recomputes the same logits.
  ASSERT_TRUE(cache.set_length(6).is_ok());
  std::span<const int32_t> tail(ids.data() + 6, ids.size() - 6);
  ASSERT_TRUE(model->forward(tail, cache, logits).is_ok());
  EXPECT_EQ(0, std::memcmp(logits.data(), full.data() + (ids.size() - 1) * vocab, vocab * 4));
}

// The forward pass calls the kernel set it was loaded with, for every op: a
// set that counts its linear calls and scales the LM head's output shows up
// in both the count and the logits.
std::atomic<int> counted_linears{0};
void counting_linear(ThreadPool& pool, const float* x, int64_t n, const cpu::WeightMatrix& w, float* y) {
  ++counted_linears;
  cpu::linear(pool, x, n, w, y);
  for (int64_t i = 0; i < n * w.rows; ++i) y[i] *= 2.0f;
}

TEST(Ernie45Model, ForwardRunsOnTheKernelSetItWasLoadedWith) {
  Spec s;
  s.layers = 1;
  Tensors t = make_tensors(s, DType::kBF16, DType::kBF16, 3, false);
  TempModelDir dir;
  write_model(dir, s, t);
  auto reference = load_or_die(dir);
  ASSERT_NE(reference, nullptr);
  EXPECT_STREQ(reference->kernels().name, "reference");
  cpu::KernelSet doubled = cpu::reference_kernel_set();
  doubled.name = "doubling";
  doubled.linear = counting_linear;
  auto model = Ernie45Model::load(dir.path(), 1, doubled);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();

  const std::vector<int32_t> ids = random_ids(s, 1, 3);
  std::vector<float> want(size_t(s.vocab)), got(size_t(s.vocab));
  KvCache a = reference->make_cache(4), b = model.value()->make_cache(4);
  ASSERT_TRUE(reference->forward(ids, a, want).is_ok());
  counted_linears = 0;
  ASSERT_TRUE(model.value()->forward(ids, b, got).is_ok());
  EXPECT_EQ(counted_linears.load(), 7 * s.layers + 1);  // q, k, v, o, gate, up, down per layer; the LM head
  // One token attends to itself only: the attention returns v, so the doubled
  // projections change the logits, and never to what the reference gives.
  bool differs = false;
  for (size_t i = 0; i < got.size(); ++i) differs = differs || got[i] != want[i];
  EXPECT_TRUE(differs);
}

TEST(Ernie45Model, BadRequestsFailCleanlyAndLeaveTheCacheAlone) {
  Spec s;
  TempModelDir dir;
  write_model(dir, s, make_tensors(s, DType::kBF16, DType::kBF16, 8, false));
  auto model = load_or_die(dir);
  ASSERT_NE(model, nullptr);
  KvCache cache = model->make_cache(8);
  std::vector<float> logits(size_t(s.vocab));
  const std::vector<int32_t> ok = {3, 4, 5};
  ASSERT_TRUE(model->forward(ok, cache, logits).is_ok());

  const std::vector<int32_t> negative = {1, -1};
  Status st = model->forward(negative, cache, logits);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token id -1 at index 1"), std::string::npos) << st.to_string();
  const std::vector<int32_t> too_big = {int32_t(s.vocab)};
  EXPECT_EQ(model->forward(too_big, cache, logits).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(model->forward({}, cache, logits).code(), ErrorCode::kInvalidArgument);
  std::vector<float> small(logits.size() - 1);
  EXPECT_EQ(model->forward(ok, cache, small).code(), ErrorCode::kInvalidArgument);
  std::vector<float> all_wrong(logits.size());  // forward_all needs 3 rows
  EXPECT_EQ(model->forward_all(ok, cache, all_wrong).code(), ErrorCode::kInvalidArgument);
  KvCache other(s.layers + 1, s.kv_dim(), 8);
  EXPECT_EQ(model->forward(ok, other, logits).code(), ErrorCode::kInvalidArgument);

  const std::vector<int32_t> six = {1, 2, 3, 4, 5, 6};  // 3 cached + 6 > 8
  st = model->forward(six, cache, logits);
  EXPECT_EQ(st.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(st.message().find("capacity 8"), std::string::npos) << st.to_string();
  EXPECT_EQ(cache.length(), 3);

  // The failures above changed nothing: the next token matches a clean run.
  const std::vector<int32_t> next = {9};
  ASSERT_TRUE(model->forward(next, cache, logits).is_ok());
  KvCache clean = model->make_cache(8);
  std::vector<float> expected(logits.size());
  const std::vector<int32_t> together = {3, 4, 5, 9};
  ASSERT_TRUE(model->forward(together, clean, expected).is_ok());
  EXPECT_EQ(0, std::memcmp(logits.data(), expected.data(), logits.size() * 4));
}

// Loads a checkpoint broken by `mutate` and returns the load error.
Status load_error(const std::function<void(Spec&, Tensors&)>& mutate) {
  Spec s;
  Tensors t = make_tensors(s, DType::kBF16, DType::kBF16, 9, false);
  mutate(s, t);
  TempModelDir dir;
  write_model(dir, s, t);
  auto model = Ernie45Model::load(dir.path(), 1);
  return model.is_ok() ? Status::ok() : model.status();
}

TEST(Ernie45Model, BrokenCheckpointsGiveErrorsNamingTheTensor) {
  const std::string k1 = layer(1, "self_attn.k_proj.weight");
  Status missing = load_error([&](Spec&, Tensors& t) { t.erase(k1); });
  EXPECT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find(k1), std::string::npos) << missing.to_string();

  const std::string q0 = layer(0, "self_attn.q_proj.weight");
  Status shape = load_error([&](Spec& s, Tensors& t) {
    t[q0].shape = {s.q_dim(), s.hidden + 1};  // HF [out, in] with one column too many
    t[q0].values.resize(size_t(s.q_dim() * (s.hidden + 1)), 0.5);
  });
  EXPECT_FALSE(shape.is_ok());
  EXPECT_NE(shape.message().find(q0), std::string::npos) << shape.to_string();

  Status transposed = load_error([&](Spec& s, Tensors& t) { t[q0].shape = {s.hidden, s.q_dim()}; });
  EXPECT_FALSE(transposed.is_ok());
  EXPECT_NE(transposed.message().find(q0), std::string::npos) << transposed.to_string();

  const std::string norm = "model.norm.weight";
  Status dtype = load_error([&](Spec&, Tensors& t) { t[norm].dtype = DType::kI32; });
  EXPECT_EQ(dtype.code(), ErrorCode::kUnsupported) << dtype.to_string();
  EXPECT_NE(dtype.message().find(norm), std::string::npos) << dtype.to_string();
  EXPECT_NE(dtype.message().find("I32"), std::string::npos) << dtype.to_string();

  Status no_head = load_error([&](Spec& s, Tensors&) { s.tie = false; });
  EXPECT_FALSE(no_head.is_ok());
  EXPECT_NE(no_head.message().find("lm_head.weight"), std::string::npos) << no_head.to_string();

  Status bad_gqa = load_error([&](Spec& s, Tensors&) { s.kv_heads = 3; });
  EXPECT_FALSE(bad_gqa.is_ok()) << "4 query heads cannot share 3 kv heads";
}

TEST(KvCache, RowsAndLimits) {
  KvCache cache(3, 8, 5);
  EXPECT_EQ(cache.capacity(), 5);
  EXPECT_EQ(cache.length(), 0);
  EXPECT_TRUE(cache.check_room(5).is_ok());
  EXPECT_EQ(cache.check_room(6).code(), ErrorCode::kResourceExhausted);
  cache.key(2, 4)[7] = 1.5f;
  cache.value(1, 3)[0] = -2.5f;
  EXPECT_EQ(cache.key_rows(2).row(4)[7], 1.5f);
  EXPECT_EQ(cache.value_rows(1).row(3)[0], -2.5f);
  // K and V of different layers never share memory.
  EXPECT_NE(cache.key(1, 0), cache.value(1, 0));
  EXPECT_EQ(cache.key(0, 4) + 8, cache.value(0, 0));
  EXPECT_EQ(cache.set_length(6).code(), ErrorCode::kOutOfRange);
  EXPECT_TRUE(cache.set_length(4).is_ok());
  EXPECT_EQ(cache.check_room(2).code(), ErrorCode::kResourceExhausted);
  KvCache moved = std::move(cache);  // row tables follow the buffer
  EXPECT_EQ(moved.key_rows(2).row(4)[7], 1.5f);
  moved.clear();
  EXPECT_EQ(moved.length(), 0);
}

}  // namespace
}  // namespace tern
