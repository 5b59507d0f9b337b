// How the CPU linear kernels share a matrix's output rows over the thread
// pool: units of `row_unit` rows (a multiple of the kernel's tile width, so
// only a thread's last tile is narrow), and no more threads than the work
// pays for. The pool's workers spin between a step's calls, so a chunk pays
// once it streams ~128 KB of bf16 weights: on a server core that reads only
// ~12 GB/s alone (Intel's; docs/benchmarks.md, the 16-core section) a
// decode step's small matrices need every thread to reach the socket's
// bandwidth.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/thread_pool.h"

namespace tern::cpu {

// Multiply-adds a second thread must get before waking it pays.
inline constexpr int64_t kMinMacsPerThread = int64_t{1} << 16;

// fn(first_row, end_row) over [0, rows) on the pool, for a product of
// `num_tokens` tokens through `cols` inputs per row.
template <typename Fn>
void split_rows(ThreadPool& pool, int64_t rows, int64_t cols, int64_t num_tokens, int64_t row_unit, const Fn& fn) {
  const int64_t units = (rows + row_unit - 1) / row_unit;
  const int64_t macs_per_unit = std::max<int64_t>(1, row_unit * cols * num_tokens);
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerThread / macs_per_unit);
  pool.parallel_for(units, grain,
                    [&](int64_t begin, int64_t end) { fn(begin * row_unit, std::min(end * row_unit, rows)); });
}

// Large steps: while a thread's share of the rows is wide (kMinRowsPerChunk
// a chunk) and the matrix is (kMinRowsForRowChunks rows or more), chunks are
// rows alone and cover every token; otherwise (a 1,024-row matrix on 16
// threads gets 16-row chunks, each streaming all the step's activations
// through the shared L3; on 2 threads a few 144-192-row chunks, the last
// ones unevenly shared, each streaming the activations from L3 once per
// 48-row group) chunks are rows x kTokenBlock tokens, so each chunk's block
// of activations stays in L2 over its rows. It costs a re-read of the
// chunk's weights per token block, which is why wide matrices keep chunks
// of rows (forced on 2 threads, the 6,144-row gate|up lost 8-20%). On 2
// threads at 512 tokens the token blocks took q|k|v 824-896 -> 908-912,
// o 808-887 -> 864-917, down 805-830 -> 924-944 GFLOP/s (tern_cpu_linear_bench,
// two alternating runs). The tokens per chunk for a step of num_tokens tokens.
inline constexpr int64_t kTokenBlock = 64;
inline constexpr int64_t kMinRowsPerChunk = 64;
inline constexpr int64_t kMinRowsForRowChunks = 2048;
inline int64_t tokens_per_chunk(int64_t rows, int64_t num_tokens, int threads) {
  const int64_t chunks = int64_t{threads} * ThreadPool::kChunksPerThread;
  if (num_tokens < 2 * kTokenBlock) return num_tokens;
  if (rows >= chunks * kMinRowsPerChunk && rows >= kMinRowsForRowChunks) return num_tokens;
  return kTokenBlock;
}

// fn(first_row, end_row, first_token, end_token) over [0, rows) x [0,
// num_tokens) on the pool, in blocks of token_block tokens: a chunk's rows
// lie in one token block.
template <typename Fn>
void split_rows_tokens(ThreadPool& pool, int64_t rows, int64_t cols, int64_t num_tokens, int64_t row_unit,
                       int64_t token_block, const Fn& fn) {
  const int64_t units = (rows + row_unit - 1) / row_unit;
  const int64_t blocks = (num_tokens + token_block - 1) / token_block;
  const int64_t macs_per_unit = std::max<int64_t>(1, row_unit * cols * std::min(token_block, num_tokens));
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerThread / macs_per_unit);
  pool.parallel_for(units * blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end;) {
      const int64_t block = i / units, u0 = i - block * units;
      const int64_t u1 = std::min(units, u0 + (end - i));
      fn(u0 * row_unit, std::min(u1 * row_unit, rows), block * token_block,
         std::min((block + 1) * token_block, num_tokens));
      i += u1 - u0;
    }
  });
}

}  // namespace tern::cpu
