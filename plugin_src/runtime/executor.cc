#include "runtime/executor.h"

#include <algorithm>
#include <atomic>

#include "runtime/profiler.h"

namespace workshop {
namespace {

Status CallKernel(const Instr& instr, KernelContext& ctx) {
  try {
    return instr.kernel->fn(ctx);
  } catch (const PlanError& e) {
    return InvalidArgument("workshop: malformed plan for '", instr.op, "' at ", instr.loc, ": ",
                           e.what());
  }
}

// Operand and output lists of the kernel being called, reused from call to call so that
// running a small plan allocates no vectors. A kernel that runs a sub-plan (while, fusion)
// re-enters RunInstr while its own lists are checked out: the nested call finds the
// scratch moved-from (empty, no capacity) and allocates, which is correct, just not free.
struct TensorScratch {
  std::vector<Tensor> ins, outs;
};
thread_local TensorScratch scratch;

// Checks the scratch lists out into `ctx` and back in when done.
class ScratchLease {
 public:
  explicit ScratchLease(KernelContext& ctx) : ctx_(ctx) {
    ctx.ins = std::move(scratch.ins);
    ctx.outs = std::move(scratch.outs);
    ctx.ins.clear();
    ctx.outs.clear();
  }
  ~ScratchLease() {
    scratch.ins = std::move(ctx_.ins);
    scratch.outs = std::move(ctx_.outs);
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

 private:
  KernelContext& ctx_;
};

// For a `reuses_operand0` kernel: operand 0's Storage, moved out of its slot, if the kernel
// may write output 0 into it; else null. That is the case when nobody can observe the
// write: the slot's last use is this instruction (`frees`, which never lists a result),
// the instruction does not read the slot again as another operand, and no other slot,
// region capture or PJRT buffer holds the Storage (a caller's parameter is held by its
// buffer unless donated: donation makes the reuse legal, as in XLA).
std::shared_ptr<Storage> TakeOperand0(const Instr& instr, const Plan& plan,
                                      const std::vector<int>& frees,
                                      std::vector<std::shared_ptr<Storage>>& values) {
  if (instr.ins.empty() || instr.outs.empty()) return nullptr;
  const int in = instr.ins[0];
  const SlotType& in_type = plan.slots[in];
  const SlotType& out_type = plan.slots[instr.outs[0]];
  std::shared_ptr<Storage>& storage = values[in];
  if (storage == nullptr || storage.use_count() != 1 || in_type.dtype != out_type.dtype ||
      in_type.dims != out_type.dims ||
      static_cast<int64_t>(storage->size()) < out_type.byte_size() ||
      std::find(frees.begin(), frees.end(), in) == frees.end() ||
      std::find(instr.ins.begin() + 1, instr.ins.end(), in) != instr.ins.end()) {
    return nullptr;
  }
  // use_count() is a relaxed load: order our writes after the reads of whoever dropped
  // the last other reference (its release decrement), as Arc::get_mut does.
  std::atomic_thread_fence(std::memory_order_acquire);
  return std::move(storage);
}

Status RunInstr(const Instr& instr, const Plan& plan, const std::vector<int>& frees,
                const LaunchContext& launch, std::vector<std::shared_ptr<Storage>>& values) {
  KernelContext ctx{instr, {}, {}, launch, {}, {}};
  ScratchLease lease(ctx);
  ctx.ins.reserve(instr.ins.size());
  for (int slot : instr.ins) {
    const SlotType& type = plan.slots[slot];
    ctx.ins.push_back(Tensor{type.dtype, &type.dims, values[slot]->data()});
  }
  if (instr.kernel->aliases_operand) {
    values[instr.outs[0]] = values[instr.ins[0]];
    return Status();
  }
  if (instr.kernel->manages_outputs) {
    for (int slot : instr.ins) ctx.in_storage.push_back(values[slot]);
    WORKSHOP_RETURN_IF_ERROR(CallKernel(instr, ctx));
    if (ctx.out_storage.size() != instr.outs.size()) {
      return Internal("workshop: '", instr.op, "' at ", instr.loc, " produced ",
                      ctx.out_storage.size(), " outputs, expected ", instr.outs.size());
    }
    for (size_t i = 0; i < instr.outs.size(); ++i) {
      // Later kernels trust the slot's shape: a short buffer would be read out of bounds.
      const SlotType& type = plan.slots[instr.outs[i]];
      std::shared_ptr<Storage>& storage = ctx.out_storage[i];
      if (storage == nullptr || static_cast<int64_t>(storage->size()) < type.byte_size()) {
        return Internal("workshop: '", instr.op, "' at ", instr.loc, " produced a too small ",
                        "buffer for output ", i, " (", ShapeString(type.dtype, type.dims), ")");
      }
      values[instr.outs[i]] = std::move(storage);
    }
    return Status();
  }
  ctx.outs.reserve(instr.outs.size());
  // Becomes output 0 (the first iteration moves it out; later outputs allocate).
  std::shared_ptr<Storage> reused =
      instr.kernel->reuses_operand0 ? TakeOperand0(instr, plan, frees, values) : nullptr;
  for (int slot : instr.outs) {
    const SlotType& type = plan.slots[slot];
    std::shared_ptr<Storage> storage =
        reused != nullptr ? std::move(reused) : Storage::Allocate(type.byte_size());
    if (storage == nullptr) {
      const MemoryStatsRef& stats = MemoryAttribution::Current();
      const int64_t limit = stats != nullptr ? stats->bytes_limit() : 0;
      return ResourceExhausted("workshop: out of memory allocating ",
                               ShapeString(type.dtype, type.dims), " for '", instr.op, "' at ",
                               instr.loc,
                               limit > 0 ? StrCat(" (device memory limit ", limit, " bytes, ",
                                                  stats->bytes_in_use(), " in use)")
                                         : std::string());
    }
    ctx.outs.push_back(Tensor{type.dtype, &type.dims, storage->data()});
    values[slot] = std::move(storage);
  }
  return CallKernel(instr, ctx);
}

}  // namespace

Status RunPlan(const Plan& plan, const LaunchContext& launch,
               std::vector<std::shared_ptr<Storage>> args,
               std::vector<std::shared_ptr<Storage>>* results) {
  std::vector<std::shared_ptr<Storage>> values(plan.slots.size());
  for (size_t i = 0; i < plan.params.size(); ++i) values[plan.params[i]] = std::move(args[i]);
  for (size_t i = 0; i < plan.instrs.size(); ++i) {
    if (profiler::Active()) {  // One event per executed kernel (runtime/profiler.h).
      const Instr& instr = plan.instrs[i];
      const int64_t start = profiler::NowNs();
      Status status = RunInstr(instr, plan, plan.frees[i], launch, values);
      profiler::Record(profiler::CurrentDevice(), profiler::kKernelLine,
                       StrCat(instr.op, " @ ", instr.loc), start, profiler::NowNs());
      WORKSHOP_RETURN_IF_ERROR(status);
    } else {
      WORKSHOP_RETURN_IF_ERROR(RunInstr(plan.instrs[i], plan, plan.frees[i], launch, values));
    }
    for (int slot : plan.frees[i]) values[slot].reset();
  }
  results->clear();
  for (int slot : plan.results) results->push_back(values[slot]);
  return Status();
}

}  // namespace workshop
