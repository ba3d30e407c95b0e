#include "runtime/executable.h"

#include <algorithm>

#include "runtime/client.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/rendezvous.h"

namespace workshop {
namespace {

// One argument as the partition will see it: contents taken now when they exist (so a
// later Delete cannot pull them away), or the buffer to read once it is ready.
struct Argument {
  std::shared_ptr<Buffer> buffer;
  std::shared_ptr<Storage> storage;
  bool donated = false;
};

Status CheckArgument(const Program& program, size_t device, size_t index,
                     const Buffer& buffer) {
  const SlotType& want = program.plan.slots[program.plan.params[index]];
  if (buffer.dtype() != want.dtype || buffer.dims() != want.dims) {
    return InvalidArgument("workshop: ", program.name, " argument ", index, " on device row ",
                           device, " is ", ShapeString(buffer.dtype(), buffer.dims()),
                           ", the program expects ", ShapeString(want.dtype, want.dims));
  }
  if (buffer.IsDeleted()) {
    return InvalidArgument("workshop: ", program.name, " argument ", index,
                           " was deleted or donated before this call");
  }
  return Status();
}

// Runs one partition on its device's worker thread.
void RunPartition(const Program& program, int partition, std::vector<Argument> args,
                  std::vector<std::shared_ptr<Buffer>> outputs, EventRef done,
                  std::shared_ptr<Rendezvous> rendezvous) {
  Status status;
  std::vector<std::shared_ptr<Storage>> storages;
  for (Argument& arg : args) {
    if (arg.storage == nullptr) {
      status = arg.buffer->ready()->Await();
      if (!status.ok()) break;
      arg.storage = arg.donated ? arg.buffer->TakeDonated() : arg.buffer->storage();
      if (arg.storage == nullptr) {
        status = InvalidArgument("workshop: an argument of ", program.name,
                                 " was deleted before the execution ran");
        break;
      }
    }
    storages.push_back(std::move(arg.storage));
  }
  args.clear();  // Do not hold inputs past their last use inside the plan.
  std::vector<std::shared_ptr<Storage>> results;
  if (status.ok()) {
    status = RunPlan(program.plan, LaunchContext{partition, rendezvous.get()},
                     std::move(storages), &results);
  }
  if (status.ok()) {
    rendezvous->Leave(partition);
  } else {
    rendezvous->Abort(status);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (status.ok()) outputs[i]->SetStorage(results[i]);
    outputs[i]->ready()->Set(status);
  }
  done->Set(status);
}

}  // namespace

Status LoadedExecutable::Execute(
    const std::vector<std::vector<std::shared_ptr<Buffer>>>& args,
    std::vector<std::vector<std::shared_ptr<Buffer>>>* outputs, std::vector<EventRef>* done) {
  const Plan& plan = program_->plan;
  if (args.size() != devices_.size()) {
    return InvalidArgument("workshop: ", program_->name, " runs on ", devices_.size(),
                           " devices but was given ", args.size(), " argument lists");
  }
  // Validate everything before donating anything, so a rejected call changes nothing.
  for (size_t d = 0; d < args.size(); ++d) {
    if (args[d].size() != plan.params.size()) {
      return InvalidArgument("workshop: ", program_->name, " takes ", plan.params.size(),
                             " arguments, got ", args[d].size());
    }
    for (size_t i = 0; i < args[d].size(); ++i) {
      WORKSHOP_RETURN_IF_ERROR(CheckArgument(*program_, d, i, *args[d][i]));
    }
    for (const auto& [param, result] : program_->donations) {
      const Buffer* donated = args[d][param].get();
      const bool repeated = std::count_if(args[d].begin(), args[d].end(), [&](const auto& b) {
                              return b.get() == donated;
                            }) > 1;
      if (repeated) {
        return InvalidArgument("workshop: ", program_->name, " argument ", param,
                               " is donated but also passed as another argument; a donated "
                               "buffer can be used only once per call");
      }
    }
  }

  const int partitions = static_cast<int>(devices_.size());
  auto rendezvous = std::make_shared<Rendezvous>(partitions);
  outputs->assign(partitions, {});
  done->assign(partitions, nullptr);
  std::vector<std::function<void()>> tasks;
  for (int p = 0; p < partitions; ++p) {
    std::vector<Argument> partition_args;
    for (const auto& buffer : args[p]) partition_args.push_back({buffer, nullptr, false});
    for (const auto& [param, result] : program_->donations) {
      partition_args[param].donated = true;
    }
    for (Argument& arg : partition_args) {
      arg.storage = arg.donated ? arg.buffer->Donate() : arg.buffer->storage();
      if (arg.storage != nullptr) arg.buffer.reset();
    }
    for (int r : plan.results) {
      const SlotType& type = plan.slots[r];
      (*outputs)[p].push_back(std::make_shared<Buffer>(
          type.dtype, type.dims, devices_[p]->memory(), Event::Create()));
    }
    (*done)[p] = Event::Create();
    tasks.push_back([program = program_, p, partition_args = std::move(partition_args),
                     outs = (*outputs)[p], event = (*done)[p], rendezvous]() mutable {
      RunPartition(*program, p, std::move(partition_args), std::move(outs), std::move(event),
                   std::move(rendezvous));
    });
  }
  client_->Launch(devices_, std::move(tasks));
  return Status();
}

}  // namespace workshop
