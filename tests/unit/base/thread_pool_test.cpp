// ThreadPool: every index of [0, n) runs exactly once per call, whether the
// workers are spinning (calls back to back) or asleep (calls far apart), and
// the caller sees all the work done when parallel_for returns.
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tern {
namespace {

void expect_each_once(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<int> hits(static_cast<size_t>(n), 0);
  pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "n=" << n << " i=" << i;
}

TEST(ThreadPool, EveryIndexOnceBackToBack) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int call = 0; call < 500; ++call) expect_each_once(pool, 1 + call % 37, 1 + call % 3);
  }
}

TEST(ThreadPool, EveryIndexOnceAfterWorkersSleep) {
  ThreadPool pool(3);
  for (int call = 0; call < 5; ++call) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin: workers are asleep
    expect_each_once(pool, 1000, 1);
  }
}

TEST(ThreadPool, SmallWorkStaysOnTheCaller) {
  ThreadPool pool(4);
  const auto caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  pool.parallel_for(10, 100, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != caller) ++elsewhere;
  });
  EXPECT_EQ(elsewhere.load(), 0);
}

TEST(ThreadPool, WorkersShareLargeJobs) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  pool.parallel_for(2, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != caller) ++elsewhere;
  });
  EXPECT_EQ(elsewhere.load(), 1);
}

}  // namespace
}  // namespace tern
