// Fork-join thread pool: the caller takes chunk 0, worker i takes chunk i+1.
// A job is published by bumping generation_ under mu_ (so a sleeping worker
// cannot miss it); workers spin on it for kSpin before they sleep, and count
// pending_ down when done; the caller spins on pending_, then sleeps.
#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tern {
namespace {

// How long a thread busy-waits before it sleeps: longer than the gaps
// between a decode step's calls, short enough not to burn a core when idle.
constexpr auto kSpin = std::chrono::microseconds(300);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until pred() holds or kSpin has passed; returns pred(). It yields
// the core now and then, so a thread it waits for that shares the core (more
// threads than cores) still gets to run.
template <typename Pred>
bool spin_until(const Pred& pred) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 255) == 255) {
      if (std::chrono::steady_clock::now() > deadline) return pred();
      std::this_thread::yield();
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  int workers = std::max(0, num_threads - 1);
  workers_.reserve(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::wait_for_job(uint64_t seen) {
  auto ready = [&] {
    return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
  };
  if (!spin_until(ready)) {
    std::unique_lock<std::mutex> lock(mu_);
    start_cv_.wait(lock, ready);
  }
  return !stop_.load(std::memory_order_acquire);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    if (!wait_for_job(seen)) return;
    seen = generation_.load(std::memory_order_acquire);
    const int64_t begin = (index + 1) * job_chunk_;
    const int64_t end = std::min(job_n_, begin + job_chunk_);
    if (begin < end) call_(fn_, begin, end);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller may be asleep on done_cv_: take mu_ so the notify cannot
      // fall between its check of pending_ and its wait.
      { std::lock_guard<std::mutex> lock(mu_); }
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t n, int64_t grain, Trampoline call, const void* fn) {
  if (n <= 0) return;
  int64_t threads = std::min<int64_t>(num_threads(), std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
  if (threads <= 1 || workers_.empty()) {
    call(fn, 0, n);
    return;
  }
  int64_t chunk = (n + num_threads() - 1) / num_threads();
  call_ = call;
  fn_ = fn;
  job_n_ = n;
  job_chunk_ = chunk;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  call(fn, 0, std::min(n, chunk));
  auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
}

int default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace tern
