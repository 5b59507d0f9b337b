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

}  // namespace tern::cpu
