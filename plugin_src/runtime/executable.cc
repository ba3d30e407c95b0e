#include "runtime/executable.h"

#include <Python.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>

#include "kernels/core/kernel.h"
#include "runtime/client.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/float_mode.h"
#include "runtime/host_callback_scope.h"
#include "runtime/profiler.h"
#include "runtime/rendezvous.h"

namespace workshop {
namespace {

// One argument as the partition will see it: contents taken now when they exist (so a
// later Delete cannot pull them away), or the buffer to read once it is ready.
struct Argument {
  std::shared_ptr<Buffer> buffer;
  std::shared_ptr<Storage> storage;
  bool donated = false;
  MinorToMajor layout;  // Of `storage` (the buffer's); empty: row-major.
};

// `storage` (a `type` array in `from`) in layout `to`: itself when the two agree, else a
// new block charged to this thread's memory attribution. Null when out of memory.
std::shared_ptr<Storage> InLayout(std::shared_ptr<Storage> storage, const SlotType& type,
                                  const MinorToMajor& from, const MinorToMajor& to) {
  if (IsRowMajor(from) ? IsRowMajor(to) : from == to) return storage;
  std::shared_ptr<Storage> converted = Storage::Allocate(type.byte_size());
  if (converted == nullptr) return nullptr;
  Relayout(converted->data(), to, storage->data(), from, type.dtype, type.dims);
  return converted;
}

// Bytes of scratch a generated loop with values in memory holds while it runs (attr
// `scratch`, kernels/codegen/jit_loop.cc), plus the most that any loop nested in it
// holds at once.
int64_t LoopScratchBytes(const Instr& instr) {
  constexpr int64_t kMost = int64_t{1} << 50;  // a validated size is far below; no overflow
  int64_t nested = 0;
  for (const auto& [name, value] : instr.attrs) {
    const auto* sub = std::get_if<std::shared_ptr<const Plan>>(&value);
    if (sub == nullptr || *sub == nullptr) continue;
    for (const Instr& inner : (*sub)->instrs) nested = std::max(nested, LoopScratchBytes(inner));
  }
  int64_t own = 0;
  if (instr.op == "jit_loop") {
    if (auto it = instr.attrs.find("scratch"); it != instr.attrs.end()) {
      if (const auto* bytes = std::get_if<int64_t>(&it->second)) {
        own = std::clamp<int64_t>(*bytes, 0, kMost);
      }
    }
  }
  return std::min(own + nested, kMost);
}

// A generated loop (kernels/codegen/jit_loop.cc) whose trip count is not static or whose element
// operations (attribute `work`, compiler/codegen) could hold the caller for more than
// about a millisecond. The rest (a scalar fori_loop of up to ~300,000 steps) run inline
// like any small program: handing them to the worker cost 50-70 us against their 20-50 us.
bool IsLongLoop(const Instr& instr) {
  if (instr.op != "jit_loop") return false;
  constexpr int64_t kInlineLoopWork = 1'000'000;
  auto it = instr.attrs.find("work");
  const int64_t* work = it == instr.attrs.end() ? nullptr : std::get_if<int64_t>(&it->second);
  return work == nullptr || *work < 0 || *work > kInlineLoopWork;
}

// A program worth running on the caller's thread rather than handing to the device's
// worker, which costs two thread wake-ups (on a loaded 2-core VM a 256x256 f32 transpose
// took 16 us inline and 67 us through the worker, measured): one without loops that has
// either little data, so the caller is not held for long, or next to no arithmetic (under
// 1000 flops and transcendentals in the cost analysis: transposes, slices, concatenates).
// The second is XLA:CPU's rule (`cheap_computation_` in its PJRT client); it holds the
// caller for as long as the copy takes, as there.
bool RunsQuickly(const Program& program) {
  const Plan& plan = program.plan;
  if (std::any_of(plan.instrs.begin(), plan.instrs.end(),
                  [](const Instr& i) { return i.op == "while" || IsLongLoop(i); })) {
    return false;
  }
  constexpr int64_t kSmallBytes = 256 * 1024;
  int64_t bytes = 0;
  for (const SlotType& slot : plan.slots) bytes += slot.byte_size();
  if (bytes <= kSmallBytes) return true;
  constexpr double kFewFlops = 1000;
  double flops = 0;
  for (const auto& [name, value] : program.cost_analysis) {
    if (name == "flops" || name == "transcendentals") flops += value;
  }
  return !program.cost_analysis.empty() && flops < kFewFlops;
}

// Whether `plan` or any of its sub-plans (loop bodies, branches) calls a host callback.
bool CallsHostCallbacks(const Plan& plan) {
  for (const Instr& instr : plan.instrs) {
    if (instr.op == "host_callback") return true;
    for (const auto& [name, attr] : instr.attrs) {
      const auto* sub = std::get_if<std::shared_ptr<const Plan>>(&attr);
      if (sub != nullptr && *sub != nullptr && CallsHostCallbacks(**sub)) return true;
    }
  }
  return false;
}

// Waits for every event of a launch; the first error among them. jaxlib releases the GIL
// around PJRT_LoadedExecutable_Execute, so the callbacks running on the device workers can
// take it; a caller that holds it anyway (another embedding of the plugin) would wait for
// workers that wait for it, so it is released for the wait.
Status AwaitLaunch(const std::vector<EventRef>& events) {
  PyThreadState* saved = nullptr;
  if (Py_IsInitialized() && PyGILState_Check()) saved = PyEval_SaveThread();
  Status first;
  for (const EventRef& event : events) {
    Status status = event->Await();
    if (first.ok() && !status.ok()) first = std::move(status);
  }
  if (saved != nullptr) PyEval_RestoreThread(saved);
  return first;
}

Status CheckArgument(const Program& program, size_t device, size_t index, const Buffer& buffer) {
  const SlotType& want = program.plan.slots[program.plan.params[index]];
  // A token parameter is an empty pred slot; JAX passes back the token buffers the
  // programs return (kTokenDType, no dims): both hold no bytes.
  const bool token = buffer.dtype() == kTokenDType && buffer.dims().empty() &&
                     want.dtype == DType::kPred && want.dims == Dims{0};
  if (!token && (buffer.dtype() != want.dtype || buffer.dims() != want.dims)) {
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

// Runs partition `partition` of `program` with `args`, waiting for inputs that are not
// produced yet. Everything it allocates counts against the device's default memory.
Status RunPartitionPlan(const Program& program, int partition, Device* device,
                        std::vector<Argument> args, Rendezvous* rendezvous,
                        std::vector<std::shared_ptr<Storage>>* results) {
  MemoryAttribution attribution(device->memory()->stats());
  std::vector<std::shared_ptr<Storage>> storages;
  storages.reserve(args.size());
  for (Argument& arg : args) {
    if (arg.storage == nullptr) {
      WORKSHOP_RETURN_IF_ERROR(arg.buffer->ready()->Await());
      arg.storage = arg.donated ? arg.buffer->TakeDonated() : arg.buffer->storage();
      if (arg.storage == nullptr) {
        return InvalidArgument("workshop: an argument of ", program.name,
                               " was deleted before the execution ran");
      }
    }
    // Kernels read row-major: an argument in another layout (the program's, or whatever
    // the caller's buffer has) is transposed on the way in. A donated one is then released
    // here rather than reused by the plan.
    const SlotType& type = program.plan.slots[program.plan.params[storages.size()]];
    std::shared_ptr<Storage> row_major = InLayout(std::move(arg.storage), type, arg.layout, {});
    if (row_major == nullptr) {
      return ResourceExhausted("workshop: out of memory converting an argument of ", program.name,
                               " (", ShapeString(type.dtype, type.dims), ", layout ",
                               LayoutString(arg.layout, type.dims.size()), ") to row-major");
    }
    storages.push_back(std::move(row_major));
  }
  args.clear();  // Do not hold inputs past their last use inside the plan.
  // Aliased pairs whose result is laid out as the plan computes it (row-major) and lives in
  // the same memory: the result is written into the donated storage (RunPlan). A storage
  // the caller did not donate is held by its buffer too, which RunPlan checks.
  std::vector<DonatedResult> donated;
  for (const auto& [param, result] : program.donations) {
    const Plan& plan = program.plan;
    if (IsRowMajor(program.output_layouts[result]) &&
        program.parameter_memory_kinds[param] == program.output_memory_kinds[result] &&
        plan.slots[plan.params[param]].byte_size() ==
            plan.slots[plan.results[result]].byte_size()) {
      donated.push_back(DonatedResult{param, result});
    }
  }
  profiler::DeviceScope profiled_device(device->id());
  const int64_t start = profiler::Active() ? profiler::NowNs() : 0;
  Status status = RunPlan(program.plan, LaunchContext{partition, rendezvous}, std::move(storages),
                          results, donated);
  // Results the program lays out otherwise than row-major are transposed on the way out.
  for (size_t i = 0; status.ok() && i < results->size(); ++i) {
    const MinorToMajor& layout = program.output_layouts[i];
    if (IsRowMajor(layout)) continue;
    const SlotType& type = program.plan.slots[program.plan.results[i]];
    (*results)[i] = InLayout(std::move((*results)[i]), type, {}, layout);
    if ((*results)[i] == nullptr) {
      status = ResourceExhausted("workshop: out of memory laying out result ", i, " of ",
                                 program.name, " (", ShapeString(type.dtype, type.dims), ") as ",
                                 LayoutString(layout, type.dims.size()));
    }
  }
  // Each result gets storage of its own, as on XLA:CPU (its copy insertion copies a
  // parameter or a buffer that appears twice in the output): a result that is a caller's
  // (undonated) argument, a reshape of one, or another result is still referenced from
  // elsewhere, and is copied. jax.jit(lambda x: x)(x) and jnp.array(x, copy=True) then
  // return a fresh buffer that outlives x.delete(), and writes into one result (donation,
  // DLPack) reach no other array. A donated argument is held by nobody else and is returned
  // as it is, an alias as XLA allows. use_count() can only fall concurrently (a caller
  // deleting its argument), which at worst copies when it need not.
  for (size_t i = 0; status.ok() && i < results->size(); ++i) {
    std::shared_ptr<Storage>& result = (*results)[i];
    const SlotType& type = program.plan.slots[program.plan.results[i]];
    const size_t bytes = static_cast<size_t>(type.byte_size());
    if (result == nullptr || result.use_count() == 1 || bytes == 0) continue;
    std::shared_ptr<Storage> copy = Storage::Allocate(bytes);
    if (copy == nullptr) {
      status = ResourceExhausted("workshop: out of memory copying result ", i, " of ", program.name,
                                 " (", ShapeString(type.dtype, type.dims),
                                 "), which aliases an argument or another result");
      break;
    }
    std::memcpy(copy->data(), result->data(), bytes);
    result = std::move(copy);
  }
  if (start != 0) {
    profiler::Record(device->id(), profiler::kProgramLine, program.name, start, profiler::NowNs());
  }
  return status;
}

// Partitions with host callbacks queued on device workers and not finished yet, in every
// client, by launch number: what WorkshopWaitForPrograms waits for (those launched before
// it was called; daemon threads may go on launching).
struct InFlight {
  std::mutex mu;
  std::condition_variable idle;
  uint64_t next = 0;
  std::multiset<uint64_t> running;
};
InFlight& Pending() {
  static auto* pending = new InFlight();  // Never destroyed: workers may outlive statics.
  return *pending;
}

// Runs one partition on its device's worker thread and completes its outputs and event.
void RunPartition(const Program& program, int partition, Device* device, std::vector<Argument> args,
                  std::vector<std::shared_ptr<Buffer>> outputs, EventRef done,
                  std::shared_ptr<Rendezvous> rendezvous) {
  std::vector<std::shared_ptr<Storage>> results;
  Status status =
      RunPartitionPlan(program, partition, device, std::move(args), rendezvous.get(), &results);
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

void FinishPending(uint64_t launch) {
  std::lock_guard<std::mutex> lock(Pending().mu);
  Pending().running.erase(Pending().running.find(launch));
  Pending().idle.notify_all();
}

}  // namespace

LoadedExecutable::LoadedExecutable(Client* client, std::shared_ptr<const Program> program,
                                   std::vector<Device*> devices)
    : client_(client), program_(std::move(program)) {
  num_participants_ = static_cast<int>(devices.size());
  std::vector<int> process_of;
  for (int p = 0; p < num_participants_; ++p) {
    process_of.push_back(devices[p]->process_index());
    if (devices[p]->addressable()) {
      devices_.push_back(devices[p]);
      participants_.push_back(p);
    }
  }
  if (static_cast<int>(devices_.size()) != num_participants_) {
    cross_process_ = std::make_shared<CrossProcess>();
    cross_process_->group = client_->group();
    cross_process_->process_of = std::move(process_of);
    // FNV-1a of the module text: the fingerprint also hashes the compile options, which
    // name the process (ExecutableBuildOptions.process_index), and std::hash need not agree
    // between processes.
    uint64_t hash = 1469598103934665603ull;
    for (char c : program_->text) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    fingerprint_hash_ = hash;
  }
  const Plan& plan = program_->plan;
  donate_.assign(plan.params.size(), false);
  for (const auto& [param, result] : program_->donations) donate_[param] = true;
  for (size_t i = 0; i < plan.results.size(); ++i) {
    output_kinds_.push_back(
        ParseMemoryKind(program_->output_memory_kinds[i]).value_or(MemoryKind::kDevice));
  }
  calls_host_callbacks_ = CallsHostCallbacks(plan);
  // A program with host callbacks is waited for anyway (Execute), so running it here
  // rather than on the worker only saves the hand-off.
  may_run_inline_ = num_participants_ == 1 && (calls_host_callbacks_ || RunsQuickly(*program_));
}

Status LoadedExecutable::Execute(const std::vector<std::vector<std::shared_ptr<Buffer>>>& args,
                                 const std::vector<int64_t>& non_donatable,
                                 std::vector<std::vector<std::shared_ptr<Buffer>>>* outputs,
                                 std::vector<EventRef>* done) {
  const Plan& plan = program_->plan;
  if (IsDeleted()) {
    return FailedPrecondition("workshop: ", program_->name,
                              " was deleted "
                              "(PJRT_LoadedExecutable_Delete) and cannot run");
  }
  std::vector<bool> masked;  // donate_ minus `non_donatable`, only when there are any.
  if (!non_donatable.empty()) {
    masked = donate_;
    for (int64_t index : non_donatable) {
      if (index < 0 || index >= static_cast<int64_t>(masked.size())) {
        return InvalidArgument("workshop: ", program_->name, " has ", masked.size(),
                               " parameters; non-donatable input index ", index,
                               " is not one of them");
      }
      masked[index] = false;
    }
  }
  const std::vector<bool>& donate = non_donatable.empty() ? donate_ : masked;
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
      // As on XLA:CPU: row d runs on devices_[d] and reads only buffers there (a buffer of
      // another client, whose runtime may be gone, is on none of ours).
      if (args[d][i]->device() != devices_[d]) {
        return InvalidArgument(
            "workshop: ", program_->name, " argument ", i, " on device row ", d, " is on ",
            Device::DebugString(args[d][i]->device()->id()),
            args[d][i]->device()->client() == devices_[d]->client() ? "" : " of another client",
            "; that row runs on ", Device::DebugString(devices_[d]->id()));
      }
    }
    for (size_t param = 0; param < donate.size(); ++param) {
      if (!donate[param]) continue;
      const Buffer* donated = args[d][param].get();
      const bool repeated = std::count_if(args[d].begin(), args[d].end(),
                                          [&](const auto& b) { return b.get() == donated; }) > 1;
      if (repeated) {
        return InvalidArgument("workshop: ", program_->name, " argument ", param,
                               " is donated but also passed as another argument; a donated "
                               "buffer can be used only once per call");
      }
    }
  }

  // Take the inputs now (donation marks them deleted at once), or the buffers to read
  // once they are ready.
  const int partitions = static_cast<int>(devices_.size());
  std::vector<std::vector<Argument>> partition_args(partitions);
  bool inputs_ready = true;
  for (int p = 0; p < partitions; ++p) {
    partition_args[p].reserve(args[p].size());
    for (size_t param = 0; param < args[p].size(); ++param) {
      Argument arg{args[p][param], nullptr, donate[param], args[p][param]->layout()};
      arg.storage = arg.donated ? arg.buffer->Donate() : arg.buffer->storage();
      if (arg.storage != nullptr) arg.buffer.reset();
      inputs_ready = inputs_ready && arg.storage != nullptr;
      partition_args[p].push_back(std::move(arg));
    }
  }
  outputs->assign(partitions, {});
  done->assign(partitions, nullptr);

  // Inline: run now on this thread, then create the outputs already complete. A
  // one-partition launch has nobody to meet in a collective, so its rendezvous needs no
  // sharing and no Leave/Abort. Launched from inside a host callback it runs here even if
  // the device is busy (host_callback_scope.h): the device's worker or claim belongs to
  // the program waiting in that callback.
  const bool nested = num_participants_ == 1 && InsideHostCallback();
  bool claimed = false;
  if (inputs_ready &&
      ((may_run_inline_ && (claimed = devices_[0]->worker().TryClaim())) || nested)) {
    Worker& worker = devices_[0]->worker();
    std::vector<std::shared_ptr<Storage>> results;
    Status status;
    {
      // Released even if the run throws, or the device would never run queued work again.
      struct Claim {
        Worker& worker;
        bool held;
        ~Claim() {
          if (held) worker.Release();
        }
      } claim{worker, claimed};
      ScopedFlushSubnormals mode;  // As on the worker thread (float_mode.h).
      Rendezvous rendezvous(1);
      status = RunPartitionPlan(*program_, 0, devices_[0], std::move(partition_args[0]),
                                &rendezvous, &results);
    }
    // A failed inline run is Execute's error, as on XLA:CPU (its inline path returns the
    // run's status): jaxlib raises it at the call. Completion events carrying it instead
    // would become JAX's runtime token for a program with host callbacks, which re-raises
    // the old error at every later jax.effects_barrier() (and at exit).
    if (!status.ok()) return status;
    EventRef event = Event::Ready(status);
    (*outputs)[0].reserve(plan.results.size());
    for (size_t i = 0; i < plan.results.size(); ++i) {
      const SlotType& type = plan.slots[plan.results[i]];
      (*outputs)[0].push_back(
          std::make_shared<Buffer>(type.dtype, type.dims, devices_[0]->memory(output_kinds_[i]),
                                   event, std::move(results[i]), program_->output_layouts[i]));
    }
    (*done)[0] = std::move(event);
    return Status();
  }

  std::shared_ptr<Rendezvous> rendezvous;
  if (cross_process_ == nullptr) {
    rendezvous = std::make_shared<Rendezvous>(partitions);
  } else {
    // Every process counts its launches of this program alike (SPMD), so the key names
    // the same launch everywhere.
    auto launch = std::make_shared<CrossProcess>(*cross_process_);
    launch->launch_key = fingerprint_hash_ + 0x9e3779b97f4a7c15ull * launches_.fetch_add(1);
    rendezvous = std::make_shared<Rendezvous>(num_participants_, participants_, std::move(launch));
  }
  std::vector<std::function<void()>> tasks;
  tasks.reserve(partitions);
  // Launch number for WorkshopWaitForPrograms; no number: it need not wait for this one.
  std::optional<uint64_t> launch;
  if (calls_host_callbacks_) {
    std::lock_guard<std::mutex> lock(Pending().mu);
    launch = Pending().next++;
    for (int p = 0; p < partitions; ++p) Pending().running.insert(*launch);
  }
  for (int p = 0; p < partitions; ++p) {
    for (size_t i = 0; i < plan.results.size(); ++i) {
      const SlotType& type = plan.slots[plan.results[i]];
      (*outputs)[p].push_back(
          std::make_shared<Buffer>(type.dtype, type.dims, devices_[p]->memory(output_kinds_[i]),
                                   Event::Create(), program_->output_layouts[i]));
    }
    (*done)[p] = Event::Create();
    tasks.push_back([program = program_, p = participants_[p], device = devices_[p],
                     args = std::move(partition_args[p]), outs = (*outputs)[p], event = (*done)[p],
                     rendezvous, launch]() mutable {
      RunPartition(*program, p, device, std::move(args), std::move(outs), std::move(event),
                   std::move(rendezvous));
      // This may be the program's last reference (the interpreter exiting dropped the
      // executable): free it before WorkshopWaitForPrograms can report nothing running, so
      // its host callbacks' Python references are not released on this thread after
      // finalization began (PyGILState_Ensure then ends the thread with pthread_exit inside
      // a destructor: "terminate called without an active exception").
      program.reset();
      if (launch) FinishPending(*launch);
    });
  }
  client_->Launch(devices_, std::move(tasks));
  // A program with host callbacks has run them all, on every device, when Execute
  // returns, as on XLA:CPU (jaxlib's IFRT layer executes such programs synchronously there,
  // ExecutionMode::kSynchronous, which the C API does not pass on): output a callback
  // prints inside a loop lands where the caller expects it (redirect_stdout, capsys), not
  // in whatever runs next. Programs without callbacks stay asynchronous. Launched from
  // inside a callback it is not waited for: its device's worker may be the one suspended
  // in that callback (a single-device launch ran inline above). A failed run is Execute's
  // error, as for an inline run.
  if (calls_host_callbacks_ && !InsideHostCallback()) {
    Status status = AwaitLaunch(*done);
    if (!status.ok()) {
      outputs->clear();
      done->clear();
      return status;
    }
  }
  return Status();
}

CompiledMemoryStats ComputeMemoryStats(const Program& program) {
  const Plan& plan = program.plan;
  CompiledMemoryStats stats;
  auto on_host = [](const std::string& kind) { return kind == "pinned_host"; };
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const int64_t bytes = plan.slots[plan.params[i]].byte_size();
    (on_host(program.parameter_memory_kinds[i]) ? stats.host_argument_bytes
                                                : stats.argument_bytes) += bytes;
  }
  for (size_t i = 0; i < plan.results.size(); ++i) {
    const int64_t bytes = plan.slots[plan.results[i]].byte_size();
    (on_host(program.output_memory_kinds[i]) ? stats.host_output_bytes : stats.output_bytes) +=
        bytes;
  }
  for (const auto& [param, result] : program.donations) {
    const int64_t bytes = plan.slots[plan.params[param]].byte_size();
    (on_host(program.parameter_memory_kinds[param]) ? stats.host_alias_bytes : stats.alias_bytes) +=
        bytes;
  }

  // Which storage each slot names: its own, or (for kernels that alias their operand,
  // like reshape) its operand's. Slots are defined once, so one pass finds them all.
  std::vector<int> owner(plan.slots.size());
  for (size_t s = 0; s < owner.size(); ++s) owner[s] = static_cast<int>(s);
  for (const Instr& instr : plan.instrs) {
    if (instr.kernel != nullptr && instr.kernel->aliases_operand) {
      owner[instr.outs[0]] = owner[instr.ins[0]];
    }
  }
  // Parameters' and results' storages are not temporaries; those in the arena (buffer
  // assignment) are counted as the arena, live for the whole call.
  std::vector<bool> temporary(plan.slots.size(), true);
  for (int s : plan.params) temporary[owner[s]] = false;
  for (int s : plan.results) temporary[owner[s]] = false;
  for (size_t s = 0; s < plan.arena_offset.size(); ++s) {
    if (plan.arena_offset[s] >= 0) temporary[s] = false;
  }
  // Nor are constants: their bytes are the executable's, made once (kernels/shape.cc), as
  // XLA's constant allocations are not temporaries either.
  for (const Instr& instr : plan.instrs) {
    if (instr.op == "constant") temporary[instr.outs[0]] = false;
  }

  // Replay: a storage is live from its definition until every slot naming it is freed.
  std::vector<int> names(plan.slots.size(), 0);
  int64_t live = 0;
  for (size_t i = 0; i < plan.instrs.size(); ++i) {
    for (int out : plan.instrs[i].outs) {
      const int o = owner[out];
      if (names[o]++ == 0 && o == out && temporary[o]) live += plan.slots[o].byte_size();
    }
    stats.temp_bytes = std::max(stats.temp_bytes, live + LoopScratchBytes(plan.instrs[i]));
    for (int s : plan.frees[i]) {
      const int o = owner[s];
      if (names[o] > 0 && --names[o] == 0 && temporary[o]) live -= plan.slots[o].byte_size();
    }
  }
  stats.temp_bytes += plan.arena_bytes;
  // The row-major copies of arguments in another layout, and of results laid out otherwise
  // (RunPartitionPlan), counted as live for the whole run: an upper bound.
  for (size_t i = 0; i < plan.params.size(); ++i) {
    if (!IsRowMajor(program.parameter_layouts[i])) {
      stats.temp_bytes += plan.slots[plan.params[i]].byte_size();
    }
  }
  for (size_t i = 0; i < plan.results.size(); ++i) {
    if (!IsRowMajor(program.output_layouts[i])) {
      stats.temp_bytes += plan.slots[plan.results[i]].byte_size();
    }
  }
  stats.peak_bytes =
      stats.argument_bytes + stats.output_bytes + stats.temp_bytes - stats.alias_bytes;
  return stats;
}

}  // namespace workshop

// Waits until no partition is queued or running on any device worker, at most `timeout_s`
// seconds; returns how many are left. jax_plugins.workshop.extensions.callbacks calls it (ctypes,
// which releases the GIL) from an atexit handler: a host callback still running when the
// interpreter finalizes is ended by CPython inside pybind11's GIL guard, which aborts the
// process ("PyThreadState_Get: ... the GIL is released"), and jax.effects_barrier() does
// not wait for every such program (pmap's C++ dispatch keeps no runtime tokens).
//
// Only programs with host callbacks count (the others never need Python), and only those
// launched before the call: threads that go on launching (daemon threads) do not hold the
// exit up. XLA:CPU exits without waiting.
extern "C" __attribute__((visibility("default"))) int64_t
WorkshopWaitForPrograms(double timeout_s) {
  auto& pending = workshop::Pending();
  std::unique_lock<std::mutex> lock(pending.mu);
  const uint64_t before = pending.next;
  pending.idle.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    return pending.running.empty() || *pending.running.begin() >= before;
  });
  return static_cast<int64_t>(
      std::distance(pending.running.begin(), pending.running.lower_bound(before)));
}
