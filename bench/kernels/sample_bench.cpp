// tern_sample_bench: the device sampler (cuda::sample_rows) alone, in
// microseconds a launch, for batches of rows of a full vocabulary. Two kinds
// of row: "flat", logits of spread 0.64 as a randomly initialised model of
// the real shapes gives (tools/make_random_model.py, what the GPU serving
// benchmarks run), and "peaked", a trained model's shape (a few tokens far
// above a long tail). Modes: greedy, default (temperature 0.8, top-p 0.8:
// the model's generation_config, what a request that names nothing gets),
// topk (temperature 0.8, top-k 50, top-p 0.8) and minp (min-p 0.05). Each
// launch draws with fresh keys; the time is the mean over --iters launches
// on one stream, measured with CUDA events.
// Usage: tern_sample_bench [--vocab 103424] [--rows 1,8,64,256] [--iters 200] [--modes greedy,default,topk,minp]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernels.h"
#include "comma_list.h"

namespace {

namespace cuda = tern::cuda;

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "tern_sample_bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// `rows` rows of `vocab` logits of the named kind, each row its own draw.
std::vector<float> make_rows(const std::string& kind, int64_t vocab, int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(static_cast<size_t>(vocab) * static_cast<size_t>(rows));
  if (kind == "flat") {
    std::normal_distribution<float> d(0.0f, 0.64f);
    for (float& v : out) v = d(rng);
    return out;
  }
  std::normal_distribution<float> tail(-4.0f, 2.5f);
  std::uniform_real_distribution<float> top(6.0f, 12.0f);
  std::uniform_int_distribution<int64_t> id(0, vocab - 1);
  for (float& v : out) v = tail(rng);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < 20; ++j) out[static_cast<size_t>(r * vocab + id(rng))] = top(rng);
  }
  return out;
}

cuda::SampleRow mode_row(const std::string& mode) {
  cuda::SampleRow r;
  if (mode == "greedy") {
    r.greedy = 1;
  } else if (mode == "default") {
    r.temperature = 0.8f;
    r.top_p = 0.8f;
  } else if (mode == "topk") {
    r.temperature = 0.8f;
    r.top_k = 50;
    r.top_p = 0.8f;
  } else if (mode == "minp") {
    r.min_p = 0.05f;
  } else {
    std::fprintf(stderr, "tern_sample_bench: unknown mode '%s' (greedy, default, topk, minp)\n", mode.c_str());
    std::exit(2);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t vocab = 103424;
  std::string rows_arg = "1,8,64,256", modes_arg = "greedy,default,topk,minp";
  int iters = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--vocab" && has) {
      vocab = std::atoll(argv[++i]);
    } else if (a == "--rows" && has) {
      rows_arg = argv[++i];
    } else if (a == "--iters" && has) {
      iters = std::atoi(argv[++i]);
    } else if (a == "--modes" && has) {
      modes_arg = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: tern_sample_bench [--vocab 103424] [--rows 1,8,64,256] [--iters 200] "
                   "[--modes greedy,default,topk,minp]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  if (vocab < 1 || iters < 1) {
    std::fprintf(stderr, "tern_sample_bench: --vocab and --iters must be positive\n");
    return 2;
  }
  std::vector<int> row_counts;
  for (const std::string& s : tern::bench::comma_list(rows_arg)) {
    const int n = std::atoi(s.c_str());
    if (n < 1) {
      std::fprintf(stderr, "tern_sample_bench: --rows takes positive counts, not '%s'\n", s.c_str());
      return 2;
    }
    row_counts.push_back(n);
  }
  const std::vector<std::string> modes = tern::bench::comma_list(modes_arg);
  for (const std::string& mode : modes) mode_row(mode);  // an unknown mode exits here, before any GPU work
  int max_rows = 1;
  for (int n : row_counts) max_rows = n > max_rows ? n : max_rows;

  float* d_logits = nullptr;
  cuda::SampleRow* d_rows = nullptr;
  cuda::LogitOp* d_ops = nullptr;
  uint64_t* d_keys = nullptr;
  constexpr int kKeySets = 16;  // launches cycle through this many sets of keys
  if (!check(cudaMalloc(reinterpret_cast<void**>(&d_logits), sizeof(float) * static_cast<size_t>(vocab) * max_rows), "cudaMalloc") ||
      !check(cudaMalloc(reinterpret_cast<void**>(&d_rows), sizeof(cuda::SampleRow) * max_rows * kKeySets), "cudaMalloc") ||
      !check(cudaMalloc(reinterpret_cast<void**>(&d_ops), sizeof(cuda::LogitOp)), "cudaMalloc") ||
      !check(cudaMalloc(reinterpret_cast<void**>(&d_keys), sizeof(uint64_t) * max_rows), "cudaMalloc")) {
    return 1;
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::printf("%-7s %-8s %5s %10s %12s\n", "logits", "mode", "rows", "us/launch", "us/row");
  for (const std::string kind : {"flat", "peaked"}) {
    const std::vector<float> logits = make_rows(kind, vocab, max_rows, 7);
    if (!check(cudaMemcpy(d_logits, logits.data(), sizeof(float) * logits.size(), cudaMemcpyHostToDevice), "copy")) {
      return 1;
    }
    for (const std::string& mode : modes) {
      for (int n : row_counts) {
        std::vector<cuda::SampleRow> rows;
        for (int k = 0; k < kKeySets; ++k) {
          for (int i = 0; i < n; ++i) {
            cuda::SampleRow r = mode_row(mode);
            r.row = i;
            r.pick = i;
            r.key = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(k * 4099 + i + 1);
            rows.push_back(r);
          }
        }
        if (!check(cudaMemcpy(d_rows, rows.data(), sizeof(cuda::SampleRow) * rows.size(), cudaMemcpyHostToDevice),
                   "copy")) {
          return 1;
        }
        for (int w = 0; w < 5; ++w) cuda::sample_rows(d_logits, vocab, d_rows, n, d_ops, d_keys, nullptr);
        cudaEventRecord(start);
        for (int it = 0; it < iters; ++it) {
          cuda::sample_rows(d_logits, vocab, d_rows + static_cast<size_t>(it % kKeySets) * n, n, d_ops, d_keys,
                            nullptr);
        }
        cudaEventRecord(stop);
        if (!check(cudaEventSynchronize(stop), "sample_rows")) return 1;
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        const double us = 1000.0 * ms / iters;
        std::printf("%-7s %-8s %5d %10.1f %12.2f\n", kind.c_str(), mode.c_str(), n, us, us / n);
      }
    }
  }
  cudaFree(d_logits);
  cudaFree(d_rows);
  cudaFree(d_ops);
  cudaFree(d_keys);
  return 0;
}
