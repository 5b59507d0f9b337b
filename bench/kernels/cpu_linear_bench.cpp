// Microbenchmark of the CPU linear layers at ERNIE-4.5-0.3B's shapes:
// reference cpu::linear against linear_fast (exact and, where the CPU has
// AVX512_BF16, bf16 activations), for T = 1 (decode) and T = 512 (prefill),
// on 1 and 2 threads, for bf16 weights and the quantized types (Q8_0, Q4_0,
// Q4_K, Q5_K, Q6_K: GB/s counts the quantized bytes; "packed" is the same
// matrix repacked as the optimized kernel set reads it; for bf16 with
// AVX512_BF16, "fast-bf16x" rounds x to bf16 and "panels" also reads the
// 16-row panels --cpu-kernels fast repacks the matrix into). Also measures the
// machine's read bandwidth (STREAM-style sum over 1 GiB) so decode can be
// read as a share of it. Weights are cycled over copies totalling >= 512 MiB
// so decode reads DRAM, as a real model does, not a last-level cache holding
// one matrix. Quantized matrices repeat 64 quantized rows (the values do not
// change the speed; quantizing the lm head would take longer than the run).
//
//   tern_cpu_linear_bench [--threads 1,2] [--tokens 1,512] [--isa avx512|avx2]
//                         [--dtypes bf16,q8_0,q4_0,q4_k,q5_k,q6_k]
//                         [--seconds 0.5] [--all] [--cpu-clock] [--bandwidth-only]
// --all: also the slow reference runs. --cpu-clock: time by the process's CPU
// time divided by the thread count instead of wall time, for A/B comparisons
// on a machine shared with other jobs (idle waits are then not counted).
// --bandwidth-only: just the read bandwidth at each thread count, one
// "threads N: read bandwidth X GB/s" line each (bench/serving/baselines reads it).
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/linear_kernels.h"
#include "linear_shapes.h"
#include "backend/cpu/quant_pack.h"
#include "backend/cpu/quant_reference.h"
#include "backend/cpu/reference_kernels.h"
#include "base/bf16.h"
#include "base/thread_pool.h"

namespace {

using tern::ThreadPool;
using namespace tern::cpu;
using Clock = std::chrono::steady_clock;

using tern::bench::LayerShape;
using tern::bench::parse_int_list;
constexpr const auto& kShapes = tern::bench::kLayerShapes;

struct NamedDtype {
  const char* name;
  tern::DType dtype;
};
const NamedDtype kDtypes[] = {
    {"bf16", tern::DType::kBF16}, {"q8_0", tern::DType::kQ8_0}, {"q4_0", tern::DType::kQ4_0},
    {"q4_k", tern::DType::kQ4_K}, {"q5_k", tern::DType::kQ5_K}, {"q6_k", tern::DType::kQ6_K},
};

std::vector<NamedDtype> parse_dtypes(const char* s) {
  std::vector<NamedDtype> v;
  std::string list = s;
  for (size_t pos = 0; pos <= list.size();) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(pos, end - pos);
    for (const NamedDtype& d : kDtypes) {
      if (item == d.name) v.push_back(d);
    }
    pos = end + 1;
  }
  return v;
}

// `copies` matrices of [out, in] weights of `dtype` back to back, as bytes.
std::vector<uint8_t> make_weights(tern::DType dtype, int64_t out, int64_t in, int copies, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t row_bytes = tern::cpu::row_bytes(dtype, in);
  std::vector<uint8_t> w(static_cast<size_t>(row_bytes * out * copies));
  if (dtype == tern::DType::kBF16) {
    auto* h = reinterpret_cast<uint16_t*>(w.data());
    for (size_t i = 0; i < w.size() / 2; ++i) h[i] = tern::f32_to_bf16(dist(rng) * 0.05f);
    return w;
  }
  const int64_t distinct = std::min<int64_t>(out, 64);
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t r = 0; r < distinct; ++r) {
    for (auto& v : row) v = dist(rng) * 0.05f;
    tern::cpu::quantize_row(dtype, row.data(), in, w.data() + r * row_bytes);
  }
  for (int64_t r = distinct; r < out * copies; ++r) {
    std::memcpy(w.data() + r * row_bytes, w.data() + (r % distinct) * row_bytes, static_cast<size_t>(row_bytes));
  }
  return w;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The sum of v[0, n) read as kStreams interleaved sequential streams, 32
// bytes per load where the CPU has AVX2 (as the matrix kernels load), as a
// matrix kernel reads several weight rows at once: one narrow stream leaves
// the core's memory parallelism idle and reads well below the machine's rate.
constexpr int kStreams = 8;

uint64_t sum_streams_scalar(const uint64_t* v, int64_t n) {
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) total += v[i];
  return total;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) uint64_t sum_streams_avx2(const uint64_t* v, int64_t n) {
  const int64_t len = n / kStreams / 4 * 4;
  __m256i a[kStreams];
  for (auto& x : a) x = _mm256_setzero_si256();
  for (int64_t i = 0; i < len; i += 4) {
    for (int s = 0; s < kStreams; ++s) {
      a[s] = _mm256_add_epi64(a[s], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + s * len + i)));
    }
  }
  uint64_t lanes[4], total = sum_streams_scalar(v + kStreams * len, n - kStreams * len);
  for (auto& x : a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), x);
    total += lanes[0] + lanes[1] + lanes[2] + lanes[3];
  }
  return total;
}
#endif

uint64_t sum_streams(const uint64_t* v, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) return sum_streams_avx2(v, n);
#endif
  return sum_streams_scalar(v, n);
}

// Best-of-5 read bandwidth in GB/s of `threads` threads summing 1 GiB
// in kStreams interleaved streams per thread.
double read_bandwidth(ThreadPool& pool) {
  const size_t n = (size_t{1} << 30) / sizeof(uint64_t);
  std::vector<uint64_t> data(n);
  pool.parallel_for(static_cast<int64_t>(n), 1 << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) data[i] = static_cast<uint64_t>(i);
  });
  std::vector<uint64_t> sums(64);
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    pool.parallel_for(static_cast<int64_t>(n), 1 << 20, [&](int64_t b, int64_t e) {
      sums[static_cast<size_t>(b / (1 << 20)) % sums.size()] += sum_streams(data.data() + b, e - b);
    });
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / seconds_since(t0) / 1e9);
  }
  if (sums[0] == 42) std::printf(" ");  // keeps the sums live
  return best;
}

struct Timing {
  double seconds_per_call;
};

// Median time per call of fn(copy) over >= 3 calls and >= `budget` seconds;
// CPU time per thread when cpu_threads > 0.
template <class Fn>
Timing time_calls(int copies, double budget, int cpu_threads, Fn fn) {
  fn(0);  // warm-up (scratch growth, page faults)
  std::vector<double> times;
  auto start = Clock::now();
  for (int i = 0; times.size() < 3 || seconds_since(start) < budget; ++i) {
    auto t0 = Clock::now();
    const double c0 = process_cpu_seconds();
    fn(i % copies);
    times.push_back(cpu_threads > 0 ? (process_cpu_seconds() - c0) / cpu_threads : seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads_list = {1, 2};
  std::vector<int> tokens_list = {1, 512};
  double budget = 0.5;
  bool all = false;
  bool cpu_clock = false;
  std::vector<NamedDtype> dtypes = {kDtypes[0]};
  bool bandwidth_only = false;
  CpuIsa isa = best_cpu_isa();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads_list = parse_int_list(argv[++i]);
    } else if (a == "--tokens" && i + 1 < argc) {
      tokens_list = parse_int_list(argv[++i]);
    } else if (a == "--dtypes" && i + 1 < argc) {
      dtypes = parse_dtypes(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      budget = std::atof(argv[++i]);
    } else if (a == "--isa" && i + 1 < argc) {
      std::string v = argv[++i];
      isa = v == "avx512" ? CpuIsa::kAvx512 : v == "avx2" ? CpuIsa::kAvx2 : CpuIsa::kPortable;
    } else if (a == "--all") {
      all = true;
    } else if (a == "--cpu-clock") {
      cpu_clock = true;
    } else if (a == "--bandwidth-only") {
      bandwidth_only = true;
    } else {
      std::fprintf(stderr, "usage: %s [--threads 1,2] [--tokens 1,512] [--isa avx512|avx2|portable] "
                   "[--dtypes bf16,q8_0,q4_0,q4_k,q5_k,q6_k] [--seconds S] [--all] [--cpu-clock] "
                   "[--bandwidth-only]\n", argv[0]);
      return 2;
    }
  }
  if (bandwidth_only) {
    for (int threads : threads_list) {
      ThreadPool pool(threads);
      std::printf("threads %d: read bandwidth %.1f GB/s\n", threads, read_bandwidth(pool));
    }
    return 0;
  }
  const bool bf16_dot = isa == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16");
  std::printf("best isa %d, using %d (0 portable, 1 avx2, 2 avx512), avx512bf16 %s\n",
              static_cast<int>(best_cpu_isa()), static_cast<int>(std::min(isa, best_cpu_isa())),
              bf16_dot ? "yes" : "no");

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int threads : threads_list) {
    ThreadPool pool(threads);
    const int cpu_threads = cpu_clock ? threads : 0;
    std::printf("\nthreads %d: read bandwidth %.1f GB/s\n", threads, read_bandwidth(pool));
    std::printf("%-8s %-5s %5s %-10s %10s %9s %8s %8s\n", "layer", "dtype", "T", "kernel", "ms/call", "GFLOP/s",
                "GB/s", "speedup");
    for (const LayerShape& s : kShapes) {
      for (const NamedDtype& d : dtypes) {
        const int64_t matrix_elems = s.in * s.out;
        const int64_t matrix_bytes = row_bytes(d.dtype, s.in) * s.out;
        const int copies = static_cast<int>(std::max<int64_t>(1, (int64_t{512} << 20) / matrix_bytes));
        const std::vector<uint8_t> w = make_weights(d.dtype, s.out, s.in, copies, rng);
        std::vector<std::unique_ptr<PackedWeight>> packed;
        for (int tokens : tokens_list) {
          std::vector<float> x(static_cast<size_t>(tokens * s.in));
          for (auto& v : x) v = dist(rng);
          std::vector<float> y(static_cast<size_t>(tokens * s.out));
          const double flops = 2.0 * static_cast<double>(tokens) * static_cast<double>(matrix_elems);
          auto matrix = [&](int copy) { return WeightMatrix{d.dtype, w.data() + copy * matrix_bytes, s.out, s.in}; };
          double ref_seconds = 0.0;
          auto report = [&](const char* kernel, Timing t) {
            double speedup = ref_seconds > 0 ? ref_seconds / t.seconds_per_call : 0.0;
            std::printf("%-8s %-5s %5d %-10s %10.3f %9.1f %8.1f %8s\n", s.name, d.name, tokens, kernel,
                        t.seconds_per_call * 1e3, flops / t.seconds_per_call / 1e9,
                        static_cast<double>(matrix_bytes) / t.seconds_per_call / 1e9,
                        speedup > 0 ? (std::to_string(speedup).substr(0, 5) + "x").c_str() : "-");
            std::fflush(stdout);
          };
          if (all || flops < 2e10) {
            Timing ref = time_calls(copies, budget, cpu_threads,
                                    [&](int c) { linear(pool, x.data(), tokens, matrix(c), y.data()); });
            ref_seconds = ref.seconds_per_call;
            report("reference", ref);
          }
          LinearOptions exact{.max_isa = isa, .activations = Activations::kExact};
          report("fast", time_calls(copies, budget, cpu_threads,
                                    [&](int c) { linear_fast(pool, x.data(), tokens, matrix(c), y.data(), exact); }));
          if (is_quantized_weight_dtype(d.dtype) && best_cpu_isa() >= CpuIsa::kAvx2 && isa >= CpuIsa::kAvx2) {
            // What the optimized kernel set reads: each copy repacked (quant_pack.h).
            if (packed.size() != static_cast<size_t>(copies)) {
              packed.clear();
              for (int c = 0; c < copies; ++c) packed.push_back(pack_weight(matrix(c)));
            }
            report("packed", time_calls(copies, budget, cpu_threads, [&](int c) {
                     WeightMatrix m = matrix(c);
                     m.packed = packed[static_cast<size_t>(c)].get();
                     linear_fast(pool, x.data(), tokens, m, y.data(), exact);
                   }));
          }
          if (bf16_dot && d.dtype == tern::DType::kBF16) {
            LinearOptions rounded{.max_isa = isa, .activations = Activations::kBf16};
            report("fast-bf16x", time_calls(copies, budget, cpu_threads, [&](int c) {
                     linear_fast(pool, x.data(), tokens, matrix(c), y.data(), rounded);
                   }));
            // What --cpu-kernels fast reads: each copy in 16-row panels (pack_bf16_panels).
            if (packed.size() != static_cast<size_t>(copies)) {
              packed.clear();
              for (int c = 0; c < copies; ++c) packed.push_back(pack_bf16_panels(matrix(c)));
            }
            report("panels", time_calls(copies, budget, cpu_threads, [&](int c) {
                     WeightMatrix m = matrix(c);
                     m.packed = packed[static_cast<size_t>(c)].get();
                     linear_fast(pool, x.data(), tokens, m, y.data(), rounded);
                   }));
          }
        }
      }
    }
  }
  return 0;
}
