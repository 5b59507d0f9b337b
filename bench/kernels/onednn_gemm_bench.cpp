// tern_onednn_bench: oneDNN's bf16 matrix product at the model's linear
// shapes, beside tern's own CPU kernels in the same process, so the two can
// be compared on one machine (docs/benchmarks.md, "oneDNN"). oneDNN gets its
// best case: weights reordered once into the layout its primitive asks for
// (format_tag::any, as tern repacks at load), bf16 activations (as tern's fast
// set rounds them), fp32 outputs, one primitive per shape created before the
// timing. tern: linear_fast over bf16 panels (the fast kernel set's prefill
// and decode path), on a ThreadPool of the same size.
// Built only where CMake finds oneDNN (Debian: apt-get install libdnnl-dev).
// Usage: tern_onednn_bench [--threads 2] [--tokens 1,8,512] [--seconds 0.5]
// oneDNN takes its threads from OMP_NUM_THREADS (set it to --threads).
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernel_set.h"
#include "backend/cpu/linear_kernels.h"
#include "linear_shapes.h"
#include "backend/cpu/quant_pack.h"
#include "backend/cpu/reference_kernels.h"
#include "base/bf16.h"
#include "base/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

using tern::bench::LayerShape;
using tern::bench::parse_int_list;
constexpr const auto& kShapes = tern::bench::kLayerShapes;

// Mean seconds per call of fn over at least `seconds` (after one warm-up call).
template <typename Fn>
double time_calls(double seconds, Fn&& fn) {
  fn();
  int64_t calls = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds || calls < 3) {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return elapsed / static_cast<double>(calls);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::vector<int> tokens = {1, 8, 512};
  double seconds = 0.5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--tokens" && i + 1 < argc) {
      tokens = parse_int_list(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--tokens 1,8,512] [--seconds S]\n", argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (threads < 1 || tokens.empty() || seconds <= 0) {
    std::fprintf(stderr, "tern_onednn_bench: --threads, --tokens and --seconds must be positive\n");
    return 2;
  }
  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::printf("oneDNN %d.%d.%d, OMP_NUM_THREADS=%s; tern ThreadPool of %d\n", dnnl_version()->major,
              dnnl_version()->minor, dnnl_version()->patch, omp != nullptr ? omp : "(unset)", threads);
  std::printf("%-8s %6s %12s %12s %10s %10s %8s\n", "layer", "tokens", "onednn ms", "tern ms", "onednn GF/s",
              "tern GF/s", "tern/dnn");

  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  tern::ThreadPool pool(threads);
  const tern::cpu::KernelSet& fast = tern::cpu::fast_kernel_set();
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.02f);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;

  for (const LayerShape& s : kShapes) {
    const int64_t K = s.in, N = s.out;
    std::vector<uint16_t> w_bf16(static_cast<size_t>(N * K));  // [N, K], as a checkpoint stores it
    for (uint16_t& x : w_bf16) x = tern::f32_to_bf16(d(rng));

    // tern: the fast set's weights (bf16 panels, packed here as at load).
    tern::cpu::WeightMatrix w;
    w.dtype = tern::DType::kBF16;
    w.rows = N;
    w.cols = K;
    w.data = w_bf16.data();
    const std::unique_ptr<tern::cpu::PackedWeight> panels = fast.pack(w);
    tern::cpu::WeightMatrix packed = w;
    packed.packed = panels.get();

    // oneDNN: weights as a [K, N] bf16 matrix read from the [N, K] buffer (format ba), reordered once.
    const dnnl::memory::dims wdims = {K, N};
    dnnl::memory w_user({wdims, dt::bf16, tag::ba}, eng, w_bf16.data());

    for (const int T : tokens) {
      std::vector<float> x(static_cast<size_t>(T * K));
      for (float& v : x) v = d(rng) * 50.0f;
      std::vector<uint16_t> x_bf16(x.size());
      for (size_t i = 0; i < x.size(); ++i) x_bf16[i] = tern::f32_to_bf16(x[i]);
      std::vector<float> y_dnn(static_cast<size_t>(T * N)), y_tern(y_dnn.size());

      const dnnl::memory::desc src_md({T, K}, dt::bf16, tag::ab);
      const dnnl::memory::desc wei_any({K, N}, dt::bf16, tag::any);
      const dnnl::memory::desc dst_md({T, N}, dt::f32, tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_any, dst_md), eng);  // oneDNN 2.x
      dnnl::memory w_prim(pd.weights_desc(), eng);
      dnnl::reorder(w_user, w_prim).execute(strm, w_user, w_prim);
      strm.wait();
      dnnl::memory src(src_md, eng, x_bf16.data()), dst(dst_md, eng, y_dnn.data());
      const dnnl::matmul mm(pd);
      const double dnn_s = time_calls(seconds, [&] {
        mm.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w_prim}, {DNNL_ARG_DST, dst}});
        strm.wait();
      });
      const double tern_s = time_calls(seconds, [&] { fast.linear(pool, x.data(), T, packed, y_tern.data()); });

      // Both compute the same products of bf16 values: a gross mismatch means a layout mistake.
      double worst = 0, scale = 0;
      for (size_t i = 0; i < y_dnn.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(y_dnn[i] - y_tern[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(y_dnn[i])));
      }
      if (worst > 1e-2 * std::max(1.0, scale)) {
        std::fprintf(stderr, "tern_onednn_bench: %s at %d tokens: outputs differ by %g (largest %g)\n", s.name, T,
                     worst, scale);
        return 1;
      }
      const double flops = 2.0 * static_cast<double>(T) * static_cast<double>(K) * static_cast<double>(N);
      std::printf("%-8s %6d %12.3f %12.3f %10.1f %10.1f %7.2fx\n", s.name, T, dnn_s * 1e3, tern_s * 1e3,
                  flops / dnn_s / 1e9, flops / tern_s / 1e9, dnn_s / tern_s);
    }
  }
  return 0;
}
