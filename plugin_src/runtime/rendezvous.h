// Rendezvous: where the partitions of one launch meet for a collective.
//
// Every partition runs the same SPMD program, so every partition reaches every collective,
// in the same order. Exchange() publishes a pointer and returns everyone's; the two slot
// sets alternate so a partition that races ahead into the next Exchange cannot overwrite
// pointers a slower one is still copying. A partition that fails calls Abort(), which wakes
// and fails everyone instead of leaving them waiting forever; one that finishes calls
// Leave(), which fails whoever still waits for it.
#pragma once

#include <condition_variable>
#include <mutex>
#include <vector>

#include "runtime/status.h"

namespace workshop {

class Rendezvous {
 public:
  explicit Rendezvous(int participants)
      : participants_(participants), slots_{std::vector<const void*>(participants),
                                           std::vector<const void*>(participants)} {}

  int participants() const { return participants_; }

  // Blocks until all participants have called Exchange; `all` receives their pointers,
  // indexed by participant.
  Status Exchange(int participant, const void* mine, std::vector<const void*>* all);
  // Exchange without data.
  Status Barrier(int participant) { return Exchange(participant, nullptr, nullptr); }
  void Abort(const Status& status);
  // `participant` finished the program. No exchange can complete after that, so whoever
  // waits in one, or arrives later, fails instead of waiting forever (a collective under
  // control flow that not every participant took).
  void Leave(int participant);

 private:
  Status LeftError(int participant) const;  // Needs mu_ held.

  const int participants_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<const void*> slots_[2];
  int arrived_ = 0;
  uint64_t generation_ = 0;
  Status aborted_;
  int left_ = -1;  // A participant that left, or -1.
};

}  // namespace workshop
