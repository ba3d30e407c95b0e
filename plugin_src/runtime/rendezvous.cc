#include "runtime/rendezvous.h"

namespace workshop {

Rendezvous::Rendezvous(int participants, std::vector<int> local,
                       std::shared_ptr<const CrossProcess> cross_process)
    : participants_(participants),
      local_(std::move(local)),
      arriving_(local_.empty() ? participants : static_cast<int>(local_.size())),
      cross_process_(std::move(cross_process)),
      slots_{std::vector<const void*>(participants), std::vector<const void*>(participants)} {}

Status Rendezvous::Exchange(int participant, const void* mine, std::vector<const void*>* all) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  if (left_ >= 0) return LeftError(participant);
  const uint64_t generation = generation_;
  std::vector<const void*>& slots = slots_[generation % 2];
  slots[participant] = mine;
  if (++arrived_ == arriving_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return generation_ != generation || !aborted_.ok() || left_ >= 0; });
    if (generation_ == generation) return aborted_.ok() ? LeftError(participant) : aborted_;
  }
  if (all != nullptr) *all = slots;
  return Status();
}

void Rendezvous::Leave(int participant) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (left_ < 0) left_ = participant;
  }
  cv_.notify_all();
}

Status Rendezvous::LeftError(int participant) const {
  return FailedPrecondition("participant ", left_, " finished the program while participant ",
                            participant,
                            " waits for it in a collective; every device must "
                            "run the same collectives in the same order");
}

void Rendezvous::Abort(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.ok()) {
      aborted_ = Status(status.code(),
                        "a collective was abandoned because another "
                        "partition failed: " +
                            status.message());
    }
  }
  cv_.notify_all();
}

}  // namespace workshop
