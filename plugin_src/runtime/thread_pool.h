// ThreadPool: the process-wide helper threads that split large kernels.
//
// Each device has its own worker thread, but a single big elementwise op or reduction
// should use every core. ParallelFor cuts [0, n) into chunks; the calling thread works on
// chunks too and returns once all are done, so a kernel stays a synchronous call. The pool
// has one helper per extra core this process may run on (HostParallelism: the affinity
// mask, as `taskset` or a container sets it, not the machine's core count) and is shared by
// all devices: when several devices run big kernels at once their chunks interleave in one
// queue, which shares the cores instead of oversubscribing them. A ParallelFor wakes only
// as many helpers as it has chunks for. Idle helpers, and a caller waiting for their
// chunks, poll before they sleep, unless polling is seen to take the core from another
// thread (runtime/spin.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace workshop {

class ThreadPool {
 public:
  static ThreadPool& Global();

  // Calls fn(begin, end) on disjoint ranges covering [0, n), each at least `grain` long
  // (except possibly the last), possibly concurrently. Returns when all calls are done.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  int num_threads() const { return static_cast<int>(threads_.size()) + 1; }

  // The cost model for a kernel's part count: how many threads should share `work` units
  // (element operations, kernels' `work` per element weighted) when one part needs at
  // least `min_part_work` of them to pay for its hand-off: 1 below that, every thread for
  // large kernels, never more parts than threads.
  int64_t PartsFor(int64_t work, int64_t min_part_work) const;

 private:
  explicit ThreadPool(int helpers);
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> queued_{0};  // queue_.size(), for helpers polling without mu_.
};

// Elements below which splitting costs more than it saves (a chunk hand-off is a few µs;
// 64K floats take about that long to stream).
constexpr int64_t kParallelGrain = 64 * 1024;

// Element operations one part of a fused kernel carries at least (PartsFor). Measured on
// the 2-core VM: the interpreter runs about 0.085 ns per element operation (x * 2 + 1 on
// 2^20 f32: 2M operations in 170 µs of CPU), so 512K of them take about 45 µs, twice the
// 21-31 µs it takes to wake a sleeping helper (spin.h); XLA:CPU's parallel task
// assignment asks for 100K cycles (50 µs at 2 GHz) per part of a compute-bound loop. A
// part of less spends much of itself on the hand-off, and many such parts (an optimizer
// update over 100 parameter arrays: hundreds of kernels of 1K-60K elements) spend the
// program waiting on helpers instead of running it.
constexpr int64_t kMinPartWork = 512 * 1024;

// The CPUs this process may run on: its affinity mask (sched_getaffinity), bounded by a
// cgroup v2 CPU quota (cpu.max) when one is set; WORKSHOP_NUM_THREADS overrides both. At
// least 1.
int HostParallelism();

}  // namespace workshop
