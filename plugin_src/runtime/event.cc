#include "runtime/event.h"

namespace workshop {

std::shared_ptr<Event> Event::Ready(Status status) {
  static const std::shared_ptr<Event>* const ok = [] {
    auto* event = new std::shared_ptr<Event>(Create());  // Never destroyed: used at exit.
    (*event)->Set(Status());
    return event;
  }();
  if (status.ok()) return *ok;
  auto event = Create();
  event->Set(std::move(status));
  return event;
}

void Event::Set(Status status) {
  std::vector<Callback> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_.load(std::memory_order_relaxed)) return;
    status_ = std::move(status);
    ready_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  // status_ is immutable once ready_, so reading it unlocked here is safe.
  for (Callback& callback : callbacks) callback(status_);
}

bool Event::IsReady() const { return ready_.load(std::memory_order_acquire); }

Status Event::Await() const {
  if (!IsReady()) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return ready_.load(std::memory_order_relaxed); });
  }
  return status_;
}

void Event::OnReady(Callback callback) {
  if (!IsReady()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready_.load(std::memory_order_relaxed)) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(status_);
}

}  // namespace workshop
