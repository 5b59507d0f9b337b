// A fixed pool of worker threads for data-parallel loops (CPU kernels).
// parallel_for splits [0, n) into contiguous chunks, runs them on the
// workers and the calling thread, and returns when all are done. One caller
// at a time (the engine thread); not reentrant. A decode step makes about a
// hundred calls of a few hundred microseconds each, so workers spin for a
// while after a job before they sleep, and the caller spins for their
// chunks: a wake-up through the kernel would cost as much as the work.
// parallel_for does not allocate.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace tern {

class ThreadPool {
 public:
  // `num_threads` counts the caller: 1 means no workers, work runs inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over chunks of [0, n); chunks are at least `grain` long.
  // fn is borrowed for the call.
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, const Fn& fn) {
    run(n, grain, [](const void* f, int64_t begin, int64_t end) { (*static_cast<const Fn*>(f))(begin, end); }, &fn);
  }

 private:
  using Trampoline = void (*)(const void* fn, int64_t begin, int64_t end);

  void run(int64_t n, int64_t grain, Trampoline call, const void* fn);
  void worker_loop(int index);
  // Waits until the generation moves past `seen` (true) or the pool stops (false).
  bool wait_for_job(uint64_t seen);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // The job, written by the caller before it publishes a new generation.
  Trampoline call_ = nullptr;
  const void* fn_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// Threads to use when the user gives none: the cores this process may run on.
int default_thread_count();

}  // namespace tern
