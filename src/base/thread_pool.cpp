// Fork-join thread pool with chunks claimed from one ticket. The caller
// writes a job's parameters, then publishes its ticket (job id, chunk count,
// next chunk 0) under mu_, so a sleeping worker cannot miss it. Every thread
// claims chunks by a compare-and-swap of the ticket's next-chunk field and
// counts chunks_done_ up after each; the caller spins on chunks_done_ (then
// sleeps) until it reaches the chunk count. A claim succeeds only while its
// job's chunks are not all claimed, so the job's parameters a claiming thread
// read are that job's: the caller rewrites them only after every chunk is done.
#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "base/thread_name.h"

namespace tern {
namespace {

// How long a thread busy-waits before it sleeps: longer than the gaps
// between a decode step's calls, short enough not to burn a core when idle.
constexpr auto kSpin = std::chrono::microseconds(300);

constexpr int64_t kMaxChunks = 0xffff;

constexpr uint32_t ticket_job(uint64_t t) { return static_cast<uint32_t>(t >> 32); }
constexpr int64_t ticket_chunks(uint64_t t) { return static_cast<int64_t>((t >> 16) & 0xffff); }
constexpr int64_t ticket_next(uint64_t t) { return static_cast<int64_t>(t & 0xffff); }
constexpr uint64_t make_ticket(uint32_t job, int64_t chunks) {
  return (static_cast<uint64_t>(job) << 32) | (static_cast<uint64_t>(chunks) << 16);
}

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
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this, i] {
      name_this_thread("tern-cpu-" + std::to_string(i + 1));
      worker_loop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::wait_for_job(uint32_t seen_job, uint64_t& ticket) {
  auto ready = [&] {
    ticket = ticket_.load(std::memory_order_acquire);
    return stop_.load(std::memory_order_acquire) || ticket_job(ticket) != seen_job;
  };
  if (!spin_until(ready)) {
    std::unique_lock<std::mutex> lock(mu_);
    start_cv_.wait(lock, ready);
  }
  return !stop_.load(std::memory_order_acquire);
}

int64_t ThreadPool::run_chunks(uint64_t ticket, bool notify_caller) {
  const uint32_t job = ticket_job(ticket);
  int64_t ran = 0;
  for (;;) {
    if (ticket_job(ticket) != job || ticket_next(ticket) >= ticket_chunks(ticket)) return ran;
    // Read before the claim: valid when the claim succeeds (see the top).
    const Trampoline call = call_.load(std::memory_order_relaxed);
    const void* fn = fn_.load(std::memory_order_relaxed);
    const int64_t n = job_n_.load(std::memory_order_relaxed);
    const int64_t chunk = job_chunk_.load(std::memory_order_relaxed);
    const uint64_t claimed = ticket;
    if (!ticket_.compare_exchange_weak(ticket, claimed + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      continue;  // `ticket` now holds the current value
    }
    ticket = claimed + 1;
    const int64_t begin = ticket_next(claimed) * chunk;
    call(fn, begin, std::min(n, begin + chunk));
    ++ran;
    const int64_t chunks = ticket_chunks(claimed);
    if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks && notify_caller) {
      // The caller may be asleep on done_cv_: take mu_ so the notify cannot
      // fall between its check of chunks_done_ and its wait.
      { std::lock_guard<std::mutex> lock(mu_); }
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;  // the ticket's job at construction; the first job is 1
  for (;;) {
    uint64_t ticket = 0;
    if (!wait_for_job(seen, ticket)) return;
    seen = ticket_job(ticket);
    run_chunks(ticket, /*notify_caller=*/true);
  }
}

void ThreadPool::run(int64_t n, int64_t grain, Trampoline call, const void* fn) {
  if (n <= 0) return;
  const int64_t most = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  int64_t chunks = std::min({most, num_threads() * kChunksPerThread, kMaxChunks});
  if (chunks <= 1 || workers_.empty()) {
    call(fn, 0, n);
    return;
  }
  const int64_t chunk = (n + chunks - 1) / chunks;
  chunks = (n + chunk - 1) / chunk;  // none empty
  call_.store(call, std::memory_order_relaxed);
  fn_.store(fn, std::memory_order_relaxed);
  job_n_.store(n, std::memory_order_relaxed);
  job_chunk_.store(chunk, std::memory_order_relaxed);
  chunks_done_.store(0, std::memory_order_relaxed);
  const uint64_t ticket = make_ticket(ticket_job(ticket_.load(std::memory_order_relaxed)) + 1, chunks);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket_.store(ticket, std::memory_order_release);
  }
  start_cv_.notify_all();
  run_chunks(ticket, /*notify_caller=*/false);
  auto done = [&] { return chunks_done_.load(std::memory_order_acquire) == chunks; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
}

int count_physical_cores(const std::vector<int>& cpus, const std::string& sysfs_cpu_dir) {
  std::set<std::pair<long, long>> cores;
  for (int cpu : cpus) {
    const std::string dir = sysfs_cpu_dir + "/cpu" + std::to_string(cpu) + "/topology/";
    long package = -1, core = -1;
    std::ifstream package_file(dir + "physical_package_id"), core_file(dir + "core_id");
    if (!(package_file >> package) || !(core_file >> core)) return 0;
    cores.emplace(package, core);
  }
  return static_cast<int>(cores.size());
}

int default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return std::max(1u, std::thread::hardware_concurrency());
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  const int cores = count_physical_cores(cpus, "/sys/devices/system/cpu");
  return std::max(1, cores > 0 ? cores : static_cast<int>(cpus.size()));
}

}  // namespace tern
