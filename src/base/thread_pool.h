// A fixed pool of worker threads for data-parallel loops (CPU kernels).
// parallel_for splits [0, n) into contiguous chunks, runs them on the
// workers and the calling thread, and returns when all are done. One caller
// at a time (the engine thread); not reentrant.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
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
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// Threads to use when the user gives none: the cores this process may run on.
int default_thread_count();

}  // namespace tern
