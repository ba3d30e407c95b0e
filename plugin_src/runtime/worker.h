// Worker: one thread running closures in FIFO order. Each Device owns one, which is what
// makes execution asynchronous (Execute enqueues and returns) and ordered per device. An
// idle worker polls for its next closure before it sleeps (runtime/spin.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace workshop {

class Worker {
 public:
  explicit Worker(std::string name);
  // Runs every closure already scheduled, then joins the thread.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void Schedule(std::function<void()> task);
  // Running work on the calling thread instead of the worker's, for small programs: the
  // hand-off to the worker thread and the wake-up back dominate their latency.
  // TryClaim() marks the idle worker busy (false: it is busy or has work queued); the
  // caller then runs its work (under ScopedFlushSubnormals) and calls Release(). Work
  // scheduled meanwhile waits, so per-device order is kept; Release wakes the worker
  // thread only if there is some: an unconditional wake-up costs the worker a futex round
  // trip and a context switch per call.
  bool TryClaim();
  void Release();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  bool busy_ = false;                // A task is running, on the worker or inline.
  std::atomic<bool> queued_{false};  // !queue_.empty() || stopping_, polled without mu_.
  std::thread thread_;               // Last: started after the state above exists.
};

}  // namespace workshop
