// LoadedExecutable: a compiled Program bound to the client's devices.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/device.h"
#include "runtime/plan.h"
#include "runtime/rendezvous.h"

namespace workshop {

class Client;
class Device;

// PJRT_Executable_GetCompiledMemoryStats, per device, from the plan alone:
//  * argument/output: bytes of the parameters/results in "device" memory (host_*: in
//    "pinned_host");
//  * alias: bytes of donated parameters (their storage is released to the execution);
//  * temp: the peak of live intermediates when running the plan in order (instructions
//    that alias their operand, like reshape, allocate nothing; the insides of sub-plans,
//    e.g. while bodies, are not counted);
//  * peak: argument + output + temp - alias.
// No code is generated, so the code sizes are 0.
struct CompiledMemoryStats {
  int64_t argument_bytes = 0, output_bytes = 0, alias_bytes = 0, temp_bytes = 0;
  int64_t host_argument_bytes = 0, host_output_bytes = 0, host_alias_bytes = 0;
  int64_t peak_bytes = 0;
};
CompiledMemoryStats ComputeMemoryStats(const Program& program);

class LoadedExecutable {
 public:
  // `devices`: the device of every participant (replica-major), in every process.
  LoadedExecutable(Client* client, std::shared_ptr<const Program> program,
                   std::vector<Device*> devices);

  const Program& program() const { return *program_; }
  const std::shared_ptr<const Program>& shared_program() const { return program_; }
  // The devices of this process the partitions run on, in partition order (= Execute's
  // argument rows). With several processes, the others' participants are not here.
  const std::vector<Device*>& devices() const { return devices_; }
  size_t num_outputs() const { return program_->plan.results.size(); }

  // PJRT_LoadedExecutable_Delete: later Executes fail; running ones finish (they hold
  // their own reference to the program).
  void Delete() { deleted_.store(true); }
  bool IsDeleted() const { return deleted_.load(); }

  // Launches the program: `args[d]` are the parameters of the partition that runs on
  // devices()[d]. Validates the arguments (count, dtype, shape, deleted, donation), creates
  // the output buffers (in the memory each result's kind names) and one completion event
  // per device, queues the partitions on their devices' workers and returns without
  // waiting. Parameters in `non_donatable` are never donated, whatever the program says.
  // Errors found while running surface through the events and the outputs' ready events.
  // A small single-device program whose inputs are ready runs on the calling thread if
  // the device is idle; its outputs and event are then complete on return, and an error
  // of that run is Execute's own (as on XLA:CPU), not the events'. A program that calls
  // host callbacks is run to completion on every device before Execute returns (outside
  // a host callback), as XLA:CPU runs it synchronously; its errors are Execute's too.
  Status Execute(const std::vector<std::vector<std::shared_ptr<Buffer>>>& args,
                 const std::vector<int64_t>& non_donatable,
                 std::vector<std::vector<std::shared_ptr<Buffer>>>* outputs,
                 std::vector<EventRef>* done);

 private:
  Client* const client_;
  // Shared with queued partitions, which may outlive this object.
  const std::shared_ptr<const Program> program_;
  std::vector<Device*> devices_;
  std::vector<int> participants_;  // [d]: the participant devices_[d] runs (global index).
  int num_participants_ = 0;
  // Set when other processes run some participants (collectives go through MPI).
  std::shared_ptr<CrossProcess> cross_process_;
  uint64_t fingerprint_hash_ = 0;
  std::atomic<uint64_t> launches_{0};
  // Derived once from the program, so Execute does not redo it per call.
  std::vector<bool> donate_;              // [param]: the program donates it.
  std::vector<MemoryKind> output_kinds_;  // [result]
  bool calls_host_callbacks_ = false;     // Execute returns once the program ran.
  bool may_run_inline_ = false;  // One device; no loops, little data or arithmetic, or callbacks.
  std::atomic<bool> deleted_{false};
};

}  // namespace workshop
