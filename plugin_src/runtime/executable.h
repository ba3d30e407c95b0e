// LoadedExecutable: a compiled Program bound to the client's devices.
#pragma once

#include <memory>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/plan.h"

namespace workshop {

class Client;
class Device;

class LoadedExecutable {
 public:
  LoadedExecutable(Client* client, Program program, std::vector<Device*> devices)
      : client_(client),
        program_(std::make_shared<const Program>(std::move(program))),
        devices_(std::move(devices)) {}

  const Program& program() const { return *program_; }
  // The devices the partitions run on, in partition order (= Execute's argument rows).
  const std::vector<Device*>& devices() const { return devices_; }
  size_t num_outputs() const { return program_->plan.results.size(); }

  // Launches the program: `args[d]` are the parameters of the partition that runs on
  // devices()[d]. Validates the arguments (count, dtype, shape, deleted, donation), creates
  // the output buffers and one completion event per device, queues the partitions on their
  // devices' workers and returns without waiting. Errors found while running surface through
  // the events and the outputs' ready events.
  Status Execute(const std::vector<std::vector<std::shared_ptr<Buffer>>>& args,
                 std::vector<std::vector<std::shared_ptr<Buffer>>>* outputs,
                 std::vector<EventRef>* done);

 private:
  Client* const client_;
  // Shared with queued partitions, which may outlive this object.
  const std::shared_ptr<const Program> program_;
  const std::vector<Device*> devices_;
};

}  // namespace workshop
