// tern_kv_read_bench: how fast a decode step's K/V reads can go, by layout,
// with no attention math. At batch 256 the decode attention streams its K/V
// at ~59% of HBM bandwidth (bench/kernels/NOTES.md); this times the same
// bytes read the same way (a block per sequence and kv head, 4 warps taking
// 16-key chunks in turn, 16-byte loads, every block's keys in a shuffled
// pool of 16-token blocks) in two layouts:
//   slots  the pool as tern keeps it: [slot][kv head][head_dim] per plane, so
//          a head's row is head_dim * 2 bytes and its 16 keys in a block are
//          a row apart (kv_dim * 2 bytes);
//   heads  [block][kv head][16][head_dim]: a head's 16 keys contiguous.
// with 1 or 2 chunks in flight per warp, and with as many blocks per SM as
// fit or two (the decode attention's occupancy at 208 registers), held there
// by unused shared memory. Each line: microseconds a pass (CUDA events over
// --reps passes, each over the next of 4 pool copies, as each layer has its
// own planes, so a pass finds little of its K/V in L2) and the bytes' rate.
// Usage: tern_kv_read_bench [--seqs 256] [--ctx 330] [--kv-heads 2] [--head-dim 128] [--reps 50]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kBlockTokens = 16;  // keys per pool block, and per warp chunk
constexpr int kWarps = 4;
constexpr int kLoads = 8;  // 16-byte loads per lane per chunk and plane: 16 keys of 16 units (head_dim 128)

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tern_kv_read_bench: %s\n", what.c_str());
  std::exit(1);
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

struct Params {
  const uint4* k = nullptr;
  const uint4* v = nullptr;
  const int32_t* tables = nullptr;  // [seq][blocks_per_seq]
  int blocks_per_seq = 0, ctx = 0, kv_heads = 0, units = 0;  // units: 16-byte units in a head's row
  bool heads_layout = false;
  uint32_t* out = nullptr;
};

// The 16-byte unit u of key `key`'s row for kv head h, in either layout.
__device__ __forceinline__ int64_t unit_of(const Params& p, const int32_t* table, int key, int h, int u) {
  const int64_t block = table[key / kBlockTokens];
  const int off = key % kBlockTokens;
  if (p.heads_layout) return ((block * p.kv_heads + h) * kBlockTokens + off) * p.units + u;
  return ((block * kBlockTokens + off) * p.kv_heads + h) * p.units + u;
}

// Warp w reads chunks w, w + 4, ... of its sequence's keys for head blockIdx.y, Depth chunks' loads
// issued before any is used; the words are folded into one value so no load is dead.
template <int Depth>
__global__ void __launch_bounds__(32 * kWarps) read_kernel(Params p) {
  const int seq = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int32_t* table = p.tables + static_cast<int64_t>(seq) * p.blocks_per_seq;
  const int per_chunk = kBlockTokens * p.units;  // units in a chunk's K (or V)
  uint32_t acc = 0;
  for (int base = warp * kBlockTokens; base < p.ctx; base += Depth * kWarps * kBlockTokens) {
    uint4 kr[Depth][kLoads], vr[Depth][kLoads];  // a lane's units of each chunk: 16 keys x 16 units / 32 lanes at hd 128
#pragma unroll
    for (int d = 0; d < Depth; ++d) {
      const int chunk = base + d * kWarps * kBlockTokens;
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int n = lane + 32 * i;  // the chunk's unit n: key n / units, unit n % units
        const bool in = chunk < p.ctx && n < per_chunk;
        const int key = min(chunk + n / p.units, p.ctx - 1);
        const int u = n % p.units;
        const int64_t at = in ? unit_of(p, table, key, h, u) : 0;
        kr[d][i] = in ? p.k[at] : make_uint4(0, 0, 0, 0);
        vr[d][i] = in ? p.v[at] : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int d = 0; d < Depth; ++d) {
#pragma unroll
      for (int i = 0; i < kLoads; ++i) acc ^= kr[d][i].x ^ kr[d][i].w ^ vr[d][i].y ^ vr[d][i].z;
    }
  }
  if (acc == 0x9e3779b9u) p.out[blockIdx.x] = acc;  // never in practice; keeps the loads
}

int positive(const char* flag, const std::string& v) {
  const int n = std::atoi(v.c_str());
  if (n <= 0) die(std::string(flag) + " takes a positive integer, got '" + v + "'");
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int seqs = 256, ctx = 330, kv_heads = 2, head_dim = 128, reps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("tern_kv_read_bench [--seqs 256] [--ctx 330] [--kv-heads 2] [--head-dim 128] [--reps 50]\n");
      return 0;
    }
    if (i + 1 >= argc) die("missing value after " + a);
    const std::string v = argv[++i];
    if (a == "--seqs") seqs = positive("--seqs", v);
    else if (a == "--ctx") ctx = positive("--ctx", v);
    else if (a == "--kv-heads") kv_heads = positive("--kv-heads", v);
    else if (a == "--head-dim") head_dim = positive("--head-dim", v);
    else if (a == "--reps") reps = positive("--reps", v);
    else die("unknown argument '" + a + "' (--help)");
  }
  if (head_dim % 16 != 0 || head_dim > 128) die("--head-dim must be a multiple of 16 up to 128");
  const int units = head_dim * 2 / 16;  // bf16 rows
  const int blocks_per_seq = (ctx + kBlockTokens - 1) / kBlockTokens;
  const int64_t num_blocks = static_cast<int64_t>(seqs) * blocks_per_seq;
  const int64_t plane_units = num_blocks * kBlockTokens * kv_heads * units;

  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(ids.begin(), ids.end(), rng);  // sequences' blocks scattered over the pool, as after churn

  uint4 *k = nullptr, *v = nullptr;
  int32_t* tables = nullptr;
  uint32_t* out = nullptr;
  constexpr int kCopies = 4;
  check(cudaMalloc(&k, kCopies * plane_units * sizeof(uint4)), "cudaMalloc K");
  check(cudaMalloc(&v, kCopies * plane_units * sizeof(uint4)), "cudaMalloc V");
  check(cudaMalloc(&tables, ids.size() * sizeof(int32_t)), "cudaMalloc tables");
  check(cudaMalloc(&out, seqs * sizeof(uint32_t)), "cudaMalloc out");
  check(cudaMemset(k, 1, kCopies * plane_units * sizeof(uint4)), "memset K");
  check(cudaMemset(v, 2, kCopies * plane_units * sizeof(uint4)), "memset V");
  check(cudaMemcpy(tables, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "tables");

  // The bytes a pass reads: every sequence's ctx keys, K and V, of every kv head.
  const double bytes = 2.0 * seqs * ctx * kv_heads * head_dim * 2;
  std::printf("tern_kv_read_bench: %d sequences x %d keys, %d kv heads of %d (bf16): %.1f MB a pass, pool %.0f MB a plane\n",
              seqs, ctx, kv_heads, head_dim, bytes / 1e6, plane_units * 16.0 / 1e6);
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  int smem_per_sm = 0;
  check(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0), "attribute");
  // Two blocks per SM: each asks for a bit more than a third of the SM's shared memory.
  const int two_per_sm = smem_per_sm / 3 + 1024;
  check(cudaFuncSetAttribute(read_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, two_per_sm), "smem");
  check(cudaFuncSetAttribute(read_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, two_per_sm), "smem");
  for (const bool heads : {false, true}) {
    for (const bool two : {false, true}) {
      for (const int depth : {1, 2}) {
        const dim3 grid(static_cast<unsigned>(seqs), static_cast<unsigned>(kv_heads));
        const size_t smem = two ? static_cast<size_t>(two_per_sm) : 0;
        const auto launch = [&](int pass) {
          const int64_t at = (pass % kCopies) * plane_units;
          const Params p{k + at, v + at, tables, blocks_per_seq, ctx, kv_heads, units, heads, out};
          if (depth == 1) read_kernel<1><<<grid, 32 * kWarps, smem>>>(p);
          else read_kernel<2><<<grid, 32 * kWarps, smem>>>(p);
        };
        for (int i = 0; i < kCopies; ++i) launch(i);
        check(cudaEventRecord(start), "record");
        for (int i = 0; i < reps; ++i) launch(i);
        check(cudaEventRecord(stop), "record");
        check(cudaEventSynchronize(stop), "sync");
        check(cudaGetLastError(), "launch");
        float ms = 0.0f;
        check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
        const double us = 1000.0 * ms / reps;
        std::printf("%-6s %-8s depth %d: %8.2f us a pass, %7.1f GB/s\n", heads ? "heads" : "slots",
                    two ? "2 per SM" : "as many", depth, us, bytes / (us * 1e3));
      }
    }
  }
  return 0;
}
