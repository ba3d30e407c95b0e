// Rendezvous: where the partitions of one launch meet for a collective.
//
// Every partition runs the same SPMD program, so every partition reaches every collective,
// in the same order. Exchange() publishes a pointer and returns everyone's; the two slot
// sets alternate so a partition that races ahead into the next Exchange cannot overwrite
// pointers a slower one is still copying. A partition that fails calls Abort(), which wakes
// and fails everyone instead of leaving them waiting forever; one that finishes calls
// Leave(), which fails whoever still waits for it.
//
// A launch that spans processes (jax.distributed) has participants in every process; each
// process's Rendezvous meets only its own (`local`), and the collective kernels exchange
// operands with the other processes through `cross_process` (kernels/collectives.cc).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/status.h"

namespace workshop {

class ProcessGroup;

// What a launch over several processes knows of its participants.
struct CrossProcess {
  ProcessGroup* group;
  std::vector<int> process_of;  // [participant]: the process whose device runs it.
  // The same number in every process for the same launch (program fingerprint and the
  // executable's launch count), from which each collective's message tag is derived.
  uint64_t launch_key;
};

class Rendezvous {
 public:
  // Every participant is in this process.
  explicit Rendezvous(int participants) : Rendezvous(participants, {}, nullptr) {}
  // Only `local` (ascending participant ids) are in this process.
  Rendezvous(int participants, std::vector<int> local,
             std::shared_ptr<const CrossProcess> cross_process);

  // All participants, in every process.
  int participants() const { return participants_; }
  const CrossProcess* cross_process() const { return cross_process_.get(); }
  // The local participant that talks to the other processes, and the number of its next
  // exchange (only it calls NextStep, in program order).
  int leader() const { return local_.empty() ? 0 : local_.front(); }
  uint64_t NextStep() { return step_++; }

  // Blocks until all (local) participants have called Exchange; `all` receives their
  // pointers, indexed by participant (null for other processes' participants).
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
  const std::vector<int> local_;  // Empty: every participant is local.
  const int arriving_;            // Participants that call Exchange here.
  const std::shared_ptr<const CrossProcess> cross_process_;
  uint64_t step_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<const void*> slots_[2];
  int arrived_ = 0;
  uint64_t generation_ = 0;
  Status aborted_;
  int left_ = -1;  // A participant that left, or -1.
};

}  // namespace workshop
