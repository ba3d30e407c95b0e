// ThreadPool: the process-wide helper threads that split large kernels.
//
// Each device has its own worker thread, but a single big elementwise op or reduction
// should use every core. ParallelFor cuts [0, n) into chunks; the calling thread works on
// chunks too and returns once all are done, so a kernel stays a synchronous call. The pool
// has one helper per extra hardware thread and is shared by all devices: when several
// devices run big kernels at once their chunks interleave in one queue, which shares the
// cores instead of oversubscribing them. Idle helpers, and a caller waiting for their
// chunks, poll before they sleep (runtime/spin.h).
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

}  // namespace workshop
