#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "runtime/float_mode.h"
#include "runtime/spin.h"

namespace workshop {

ThreadPool& ThreadPool::Global() {
  // Never destroyed: detached helpers may still be parked in Loop() at process exit.
  static auto* pool = new ThreadPool(std::max(1u, std::thread::hardware_concurrency()) - 1);
  return *pool;
}

ThreadPool::ThreadPool(int helpers) {
  for (int i = 0; i < helpers; ++i) {
    threads_.emplace_back([this] { Loop(); });
    threads_.back().detach();
  }
}

void ThreadPool::Loop() {
  FlushSubnormalsOnThisThread();  // Kernels run in the device workers' mode (float_mode.h).
  for (;;) {
    SpinUntil([this] { return queued_.load(std::memory_order_relaxed) > 0; });
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty(); });
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  if (chunks <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  // Shared with helpers, which may dequeue their task after every chunk is already done.
  struct State {
    std::atomic<int64_t> next{0};
    int64_t chunks, chunk_size, n;
    const std::function<void(int64_t, int64_t)>* fn;
    std::atomic<int64_t> done{0};
    std::mutex mu;  // For sleeping on cv once polling `done` has run out.
    std::condition_variable cv;
  };
  auto state = std::make_shared<State>();
  state->chunks = chunks;
  state->chunk_size = (n + chunks - 1) / chunks;
  state->n = n;
  state->fn = &fn;
  auto work = [state] {
    for (int64_t c; (c = state->next.fetch_add(1)) < state->chunks;) {
      const int64_t begin = c * state->chunk_size;
      (*state->fn)(begin, std::min(state->n, begin + state->chunk_size));
      if (state->done.fetch_add(1, std::memory_order_acq_rel) + 1 == state->chunks) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->cv.notify_all();
      }
    }
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t i = 1; i < chunks; ++i) queue_.push_back(work);
    queued_.fetch_add(chunks - 1, std::memory_order_relaxed);
  }
  cv_.notify_all();
  work();
  auto all_done = [&] { return state->done.load(std::memory_order_acquire) == state->chunks; };
  if (SpinUntil(all_done)) return;
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, all_done);
}

}  // namespace workshop
