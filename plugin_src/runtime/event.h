// Event: a one-shot completion signal carrying a Status.
//
// Producers (device workers, transfers) call Set() once; consumers wait or register
// callbacks. Callbacks registered after completion run immediately on the caller's thread;
// otherwise they run on the thread that calls Set(), outside the lock, so a callback may
// destroy the last handle to the event or register further callbacks without deadlock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/status.h"

namespace workshop {

class Event {
 public:
  using Callback = std::function<void(const Status&)>;

  static std::shared_ptr<Event> Create() { return std::make_shared<Event>(); }
  // An event created complete. Successful ones are all the same immutable object (Set is
  // ignored once ready), so handing one out costs a reference count, not an allocation.
  static std::shared_ptr<Event> Ready(Status status = Status());

  // Completes the event. A second call is ignored (the first status wins).
  void Set(Status status);
  bool IsReady() const;
  // Blocks until ready; returns the event's status.
  Status Await() const;
  // The status once ready (no copy); only valid after IsReady() returned true.
  const Status& status() const { return status_; }
  // Runs `callback(status)` once the event is ready.
  void OnReady(Callback callback);

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  // Written under mu_; read without it (acquire) by the fast paths of a ready event, which
  // is how most events are seen: status_ never changes once ready_ is true.
  std::atomic<bool> ready_{false};
  Status status_;
  std::vector<Callback> callbacks_;
};

using EventRef = std::shared_ptr<Event>;

}  // namespace workshop
