// Microbenchmark of the CPU attention at ERNIE-4.5-0.3B's shapes (16 query
// heads, 2 kv heads, head_dim 128): attention_batch_fast, and with --all the
// reference attention_batch, for one sequence's prefill of T tokens from
// position 0 (each token attends to the rows before it) and for one decode
// token after T cached rows, over an fp32 or fp8 cache. Prints milliseconds
// per call (one layer's attention): the best of --rounds rounds, each the
// mean of calls over about --seconds.
//
//   tern_cpu_attention_bench [--threads 1,2] [--tokens 512] [--cache f32,fp8]
//                            [--seconds 0.3] [--rounds 5] [--all] [--cpu-clock]
// --cpu-clock: time by the process's CPU time divided by the thread count
// instead of wall time, for A/B comparisons on a machine shared with other
// jobs (time the threads do not run is then not counted).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/attention_fast.h"
#include "backend/cpu/reference_kernels.h"
#include "base/fp8_e4m3.h"
#include "base/thread_pool.h"
#include "comma_list.h"

namespace {

using tern::ThreadPool;
using namespace tern::cpu;

double now_s(bool cpu_clock, int threads) {
  if (cpu_clock) {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec)) / threads;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int64_t tokens = 512;
  std::vector<std::string> caches = {"f32", "fp8"};
  double seconds = 0.3;
  int rounds = 5;
  bool all = false, cpu_clock = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--threads" && has_value) {
      threads.clear();
      for (const std::string& t : tern::bench::comma_list(argv[++i])) threads.push_back(std::atoi(t.c_str()));
    } else if (a == "--tokens" && has_value) {
      tokens = std::atoll(argv[++i]);
    } else if (a == "--cache" && has_value) {
      caches = tern::bench::comma_list(argv[++i]);
    } else if (a == "--seconds" && has_value) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--rounds" && has_value) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--all") {
      all = true;
    } else if (a == "--cpu-clock") {
      cpu_clock = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--threads 1,2] [--tokens 512] [--cache f32,fp8] [--seconds 0.3] [--rounds 5] "
                   "[--all] [--cpu-clock]\n",
                   argv[0]);
      return 2;
    }
  }
  if (tokens < 1 || rounds < 1) return 2;

  const AttentionShape shape{16, 2, 128};
  const int64_t q_dim = shape.num_heads * shape.head_dim, kv_dim = shape.num_kv_heads * shape.head_dim;
  const int64_t rows = tokens + 1;  // the decode token's own row after the prompt's
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(tokens * q_dim)), out(q.size());
  std::vector<float> k(static_cast<size_t>(rows * kv_dim)), v(k.size());
  for (float& x : q) x = d(rng);
  std::vector<uint8_t> k8(k.size()), v8(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k8[i] = tern::f32_to_fp8_e4m3(d(rng));
    v8[i] = tern::f32_to_fp8_e4m3(d(rng));
    k[i] = tern::fp8_e4m3_to_f32(k8[i]);
    v[i] = tern::fp8_e4m3_to_f32(v8[i]);
  }
  const float* k_block[1] = {k.data()};
  const float* v_block[1] = {v.data()};
  const uint8_t* k8_block[1] = {k8.data()};
  const uint8_t* v8_block[1] = {v8.data()};
  std::vector<int64_t> prefill_positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) prefill_positions[static_cast<size_t>(t)] = t;
  const std::vector<int64_t> decode_positions = {tokens};

  using AttentionFn = void (*)(ThreadPool&, const float*, std::span<const int64_t>, std::span<const AttentionSequence>,
                               const AttentionShape&, float*);
  std::vector<std::pair<const char*, AttentionFn>> kernels = {{"fast", &attention_batch_fast}};
  if (all) kernels.push_back({"reference", &attention_batch});

  std::printf("attention %lld/%lld heads x %lld, %s time, best of %d rounds, ms per call\n",
              static_cast<long long>(shape.num_heads), static_cast<long long>(shape.num_kv_heads),
              static_cast<long long>(shape.head_dim), cpu_clock ? "process CPU" : "wall", rounds);
  for (const std::string& cache : caches) {
    const bool fp8 = cache == "fp8";
    const KvRowTable kt =
        fp8 ? KvRowTable{{}, rows, kv_dim, k8_block, 1.0f, {}} : KvRowTable{k_block, rows, kv_dim, {}, 1.0f, {}};
    const KvRowTable vt =
        fp8 ? KvRowTable{{}, rows, kv_dim, v8_block, 1.0f, {}} : KvRowTable{v_block, rows, kv_dim, {}, 1.0f, {}};
    for (int n : threads) {
      ThreadPool pool(n);
      for (const auto& [name, fn] : kernels) {
        for (const bool decode : {false, true}) {
          const AttentionSequence seq{0, decode ? 1 : tokens, kt, vt};
          const std::span<const int64_t> positions = decode ? decode_positions : prefill_positions;
          const auto call = [&] {
            fn(pool, q.data(), positions, std::span<const AttentionSequence>(&seq, 1), shape, out.data());
          };
          call();  // warm-up: scratch, caches
          double best = 1e30;
          for (int r = 0; r < rounds; ++r) {
            int64_t calls = 0;
            const double start = now_s(cpu_clock, n);
            double elapsed = 0;
            do {
              call();
              ++calls;
              elapsed = now_s(cpu_clock, n) - start;
            } while (elapsed < seconds);
            best = std::min(best, elapsed / static_cast<double>(calls));
          }
          char test[64];
          std::snprintf(test, sizeof(test), decode ? "decode@%lld" : "prefill%lld", static_cast<long long>(tokens));
          std::printf("%-4s cache, %d thread%s, %-9s %-12s %9.3f\n", cache.c_str(), n, n == 1 ? " " : "s", name, test,
                      1e3 * best);
        }
      }
    }
  }
  return 0;
}
