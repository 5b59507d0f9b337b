// A fixed pool of worker threads for data-parallel loops (CPU kernels).
// parallel_for splits [0, n) into contiguous chunks, a few per thread, which
// the workers and the calling thread claim one at a time until none is left,
// and returns when all are done. A thread that the OS takes off its core
// mid-job (another process, the server's I/O) leaves its unclaimed chunks to
// the others, and one that wakes after the last chunk was claimed is not
// waited for. One caller at a time (the engine thread); not reentrant. A
// decode step makes about a hundred calls of a few hundred microseconds
// each, so workers spin for a while after a job before they sleep, and the
// caller spins for the last chunks: a wake-up through the kernel would cost
// as much as the work. parallel_for does not allocate.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
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

  // fn(begin, end) over chunks of [0, n), every index in exactly one chunk;
  // all but the last chunk are at least `grain` long, and a job of fewer
  // than two grains runs on the caller alone. fn is borrowed for the call.
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, const Fn& fn) {
    run(n, grain, [](const void* f, int64_t begin, int64_t end) { (*static_cast<const Fn*>(f))(begin, end); }, &fn);
  }

  // Chunks per thread a job is cut into, when its grain allows.
  static constexpr int64_t kChunksPerThread = 4;

 private:
  using Trampoline = void (*)(const void* fn, int64_t begin, int64_t end);

  void run(int64_t n, int64_t grain, Trampoline call, const void* fn);
  void worker_loop();
  // Claims and runs chunks of the job that `ticket` was read from until none
  // is left; the count of chunks this thread ran.
  int64_t run_chunks(uint64_t ticket, bool notify_caller);
  // Waits until the ticket names a job other than `seen_job` (true) or the
  // pool stops (false); the new ticket in `ticket`.
  bool wait_for_job(uint32_t seen_job, uint64_t& ticket);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // The job, written by the caller before it publishes the job's ticket, and
  // not again until every chunk of it is done (atomics only so that a late
  // worker's look at them, which its failed claim then discards, is no race).
  std::atomic<Trampoline> call_{nullptr};
  std::atomic<const void*> fn_{nullptr};
  std::atomic<int64_t> job_n_{0};
  std::atomic<int64_t> job_chunk_{0};
  // job id (32 bits) | chunk count (16) | next chunk to claim (16).
  alignas(64) std::atomic<uint64_t> ticket_{0};
  alignas(64) std::atomic<int64_t> chunks_done_{0};
  std::atomic<bool> stop_{false};
};

// Threads to use when the user gives none: the physical cores among the
// CPUs this process may run on (a core's second hardware thread shares its
// vector units, which the kernels keep busy), or the CPUs where the topology
// cannot be read.
int default_thread_count();

// The distinct (physical_package_id, core_id) pairs of `cpus` under a sysfs
// CPU folder (/sys/devices/system/cpu: cpuN/topology/...); 0 when any of
// them cannot be read.
int count_physical_cores(const std::vector<int>& cpus, const std::string& sysfs_cpu_dir);

}  // namespace tern
