// ThreadPool: every index of [0, n) runs exactly once per call, whether the
// workers are spinning (calls back to back) or asleep (calls far apart), and
// the caller sees all the work done when parallel_for returns; chunks are
// claimed, so a stalled thread's share goes to the others.
#include "base/thread_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "base/thread_name.h"

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
  // Each of the two chunks waits until both have started: only a second
  // thread can start the other one.
  ThreadPool pool(2);
  std::atomic<int> started{0};
  std::mutex mu;
  std::vector<std::thread::id> ids;
  pool.parallel_for(2, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.push_back(std::this_thread::get_id());
    }
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
}

TEST(ThreadPool, ChunksAreAtLeastTheGrainButTheLast) {
  ThreadPool pool(3);
  for (int64_t n : {5, 17, 100, 1000, 4099}) {
    for (int64_t grain : {1, 2, 3, 7, 64}) {
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> chunks;
      pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
        std::lock_guard<std::mutex> lock(mu);
        chunks.emplace_back(begin, end);
      });
      std::sort(chunks.begin(), chunks.end());
      ASSERT_FALSE(chunks.empty());
      EXPECT_EQ(chunks.front().first, 0);
      EXPECT_EQ(chunks.back().second, n);
      for (size_t i = 0; i + 1 < chunks.size(); ++i) {
        EXPECT_EQ(chunks[i].second, chunks[i + 1].first);
        EXPECT_GE(chunks[i].second - chunks[i].first, grain) << "n=" << n << " grain=" << grain;
      }
      EXPECT_LE(static_cast<int64_t>(chunks.size()), 3 * ThreadPool::kChunksPerThread);
    }
  }
}

TEST(ThreadPool, AStalledThreadsChunksGoToTheOthers) {
  // The first chunk a worker claims stalls it (as the OS taking it off its
  // core would); the caller runs every chunk left meanwhile.
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  for (int call = 0; call < 3; ++call) {
    std::atomic<int> on_caller{0}, on_worker{0};
    pool.parallel_for(8, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() == caller) {
        ++on_caller;
        return;
      }
      if (on_worker.fetch_add(1) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    });
    EXPECT_EQ(on_caller.load() + on_worker.load(), 8);
    EXPECT_LE(on_worker.load(), 1) << "call " << call;
  }
}

// A fake sysfs CPU folder: cpu0/1 and cpu2/3 are each one core's two
// hardware threads, cpu4 a core of the second package with the same core_id.
TEST(ThreadPool, PhysicalCoresCountEachCoreOnce) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("tern_sysfs_" + std::to_string(::getpid()));
  const int package[] = {0, 0, 0, 0, 1}, core[] = {0, 0, 1, 1, 0};
  for (int cpu = 0; cpu < 5; ++cpu) {
    const auto dir = root / ("cpu" + std::to_string(cpu)) / "topology";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "physical_package_id") << package[cpu] << "\n";
    std::ofstream(dir / "core_id") << core[cpu] << "\n";
  }
  EXPECT_EQ(count_physical_cores({0, 1, 2, 3, 4}, root.string()), 3);
  EXPECT_EQ(count_physical_cores({0, 1}, root.string()), 1);
  EXPECT_EQ(count_physical_cores({1, 2}, root.string()), 2);
  EXPECT_EQ(count_physical_cores({0, 4}, root.string()), 2);
  EXPECT_EQ(count_physical_cores({0, 7}, root.string()), 0) << "an unreadable CPU: no count";
  std::filesystem::remove_all(root);
  EXPECT_GE(default_thread_count(), 1);
}

#if defined(__linux__)
std::string thread_comm(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

// The workers carry their names (top -H, perf, gdb); Linux keeps 15 bytes of a name.
TEST(ThreadPool, WorkersAreNamedAndNamesAreCutAt15Bytes) {
  ThreadPool pool(3);
  std::set<std::string> names;
  // A worker names itself as it starts, which may be after the constructor returns.
  for (int tries = 0; tries < 200 && !(names.count("tern-cpu-1") && names.count("tern-cpu-2")); ++tries) {
    if (tries > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    names.clear();
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
      names.insert(thread_comm(static_cast<pid_t>(std::stol(entry.path().filename().string()))));
    }
  }
  EXPECT_TRUE(names.count("tern-cpu-1") == 1 && names.count("tern-cpu-2") == 1) << names.size();
  std::string seen;
  std::thread t([&] {
    name_this_thread("tern-a-very-long-thread-name");
    seen = thread_comm(static_cast<pid_t>(::gettid()));
  });
  t.join();
  EXPECT_EQ(seen, "tern-a-very-lon");
}
#endif

}  // namespace
}  // namespace tern
