#include "runtime/worker.h"

#include <pthread.h>

#include "runtime/float_mode.h"
#include "runtime/spin.h"

namespace workshop {

Worker::Worker(std::string name) : thread_([this] { Loop(); }) {
  // Shows up in gdb, perf and py-spy; Linux limits names to 15 characters.
  pthread_setname_np(thread_.native_handle(), name.substr(0, 15).c_str());
}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queued_.store(true, std::memory_order_relaxed);
  }
  cv_.notify_one();
  thread_.join();
}

void Worker::Schedule(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    queued_.store(true, std::memory_order_relaxed);
  }
  cv_.notify_one();
}

void Worker::Loop() {
  FlushSubnormalsOnThisThread();  // As XLA:CPU computes (see float_mode.h).
  for (;;) {
    SpinUntil([this] { return queued_.load(std::memory_order_relaxed); });
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !busy_ && (stopping_ || !queue_.empty()); });
      if (queue_.empty()) return;  // stopping_ and drained.
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(!queue_.empty() || stopping_, std::memory_order_relaxed);
      busy_ = true;
    }
    task();
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
}

bool Worker::TryClaim() {
  std::lock_guard<std::mutex> lock(mu_);
  if (busy_ || !queue_.empty()) return false;
  busy_ = true;
  return true;
}

void Worker::Release() {
  bool queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    queued = !queue_.empty() || stopping_;
  }
  if (queued) cv_.notify_one();  // Work queued while the claim was held.
}

}  // namespace workshop
