#include "runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <cstring>

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

// RunPlan's donated results: for each, the parameter storage reserved for it. The
// reservation is no observer of the storage: anything written there before the result
// arrives is overwritten by it, so a reserved storage held by exactly one slot may still
// be updated in place (TakeOperand0) and one held only by its reservation is free for
// the result.
struct Reservation {
  int slot;                          // The result's slot.
  std::shared_ptr<Storage> storage;  // Null once the result is in it (or given up).
};
struct Reservations {
  std::vector<int> of_slot;  // Slot -> index into `list`, or -1. Empty: no donations.
  std::vector<Reservation> list;
  // Reservations whose result slot holds a value elsewhere (waiting for the parameter's
  // other holders to go): only these are looked at after each instruction.
  std::vector<int> pending;

  Reservation* For(int slot) {
    if (of_slot.empty() || of_slot[slot] < 0) return nullptr;
    Reservation& r = list[of_slot[slot]];
    return r.storage != nullptr ? &r : nullptr;
  }
  bool Holds(const Storage* storage) const {
    for (const Reservation& r : list) {
      if (r.storage.get() == storage) return true;
    }
    return false;
  }
};

// For a `reuses_operand0` kernel: operand 0's Storage, moved out of its slot, if the kernel
// may write output 0 into it; else null. That is the case when nobody can observe the
// write: the slot's last use is this instruction (`frees`, which never lists a result),
// the instruction does not read the slot again as another operand, and no other slot,
// region capture or PJRT buffer holds the Storage (a caller's parameter is held by its
// buffer unless donated: donation makes the reuse legal, as in XLA). A donated result's
// reservation does not count as a holder.
std::shared_ptr<Storage> TakeOperand0(const Instr& instr, const Plan& plan,
                                      const std::vector<int>& frees,
                                      std::vector<std::shared_ptr<Storage>>& values,
                                      const Reservations& reserved) {
  if (instr.ins.empty() || instr.outs.empty()) return nullptr;
  const int in = instr.ins[0];
  const SlotType& in_type = plan.slots[in];
  const SlotType& out_type = plan.slots[instr.outs[0]];
  std::shared_ptr<Storage>& storage = values[in];
  if (storage == nullptr || in_type.dtype != out_type.dtype || in_type.dims != out_type.dims ||
      static_cast<int64_t>(storage->size()) < out_type.byte_size() ||
      std::find(frees.begin(), frees.end(), in) == frees.end() ||
      std::find(instr.ins.begin() + 1, instr.ins.end(), in) != instr.ins.end()) {
    return nullptr;
  }
  const long owners = storage.use_count();
  if (owners != 1 && !(owners == 2 && reserved.Holds(storage.get()))) return nullptr;
  // use_count() is a relaxed load: order our writes after the reads of whoever dropped
  // the last other reference (its release decrement), as Arc::get_mut does.
  std::atomic_thread_fence(std::memory_order_acquire);
  return std::move(storage);
}

// For a `writes_over_operands` kernel: whether output slot `out` may be written into the
// reserved `storage`, i.e. every holder of it other than the reservation is an operand slot
// of the same dtype and shape that dies at this instruction.
bool OnlyDyingOperandsHold(const Instr& instr, const Plan& plan, const std::vector<int>& frees,
                           const std::vector<std::shared_ptr<Storage>>& values, int out,
                           const std::shared_ptr<Storage>& storage) {
  const SlotType& out_type = plan.slots[out];
  long holders = 0;
  for (size_t k = 0; k < instr.ins.size(); ++k) {
    const int in = instr.ins[k];
    if (values[in].get() != storage.get()) continue;
    if (std::find(instr.ins.begin(), instr.ins.begin() + k, in) != instr.ins.begin() + k) continue;
    const SlotType& in_type = plan.slots[in];
    if (in_type.dtype != out_type.dtype || in_type.dims != out_type.dims ||
        std::find(frees.begin(), frees.end(), in) == frees.end()) {
      return false;
    }
    ++holders;
  }
  return holders > 0 && storage.use_count() == 1 + holders;
}

// Moves reservation `r`'s storage into its result slot when the result is there and
// nobody else holds either: the result is copied in (see RunPlan). Returns whether `r`
// is settled. `at_end`: the plan is over, so the result's other holders (a slot returned
// twice, a caller's parameter) do not matter: the copy is the donated result's own.
bool TryPlace(Reservation& r, const Plan& plan, std::vector<std::shared_ptr<Storage>>& values,
              bool at_end) {
  std::shared_ptr<Storage>& value = values[r.slot];
  if (value == nullptr) return false;
  if (value.get() == r.storage.get()) {  // A donated parameter returned as it is.
    r.storage.reset();
    return true;
  }
  if (r.storage.use_count() != 1 || (!at_end && value.use_count() != 1)) return false;
  std::atomic_thread_fence(std::memory_order_acquire);  // As in TakeOperand0.
  std::memcpy(r.storage->data(), value->data(),
              static_cast<size_t>(plan.slots[r.slot].byte_size()));
  value = std::move(r.storage);
  return true;
}

// `arena`: the call's block for the plan's assigned temporaries (plan.arena_offset), or
// null (none assigned, or it could not be had: each then allocates on its own).
Status RunInstr(const Instr& instr, const Plan& plan, const std::vector<int>& frees,
                const LaunchContext& launch, std::vector<std::shared_ptr<Storage>>& values,
                Reservations& reserved, const std::shared_ptr<Storage>& arena) {
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
      instr.kernel->reuses_operand0 ? TakeOperand0(instr, plan, frees, values, reserved) : nullptr;
  for (int slot : instr.outs) {
    const SlotType& type = plan.slots[slot];
    std::shared_ptr<Storage> storage;
    Reservation* r = reserved.For(slot);
    if (reused != nullptr) {
      storage = std::move(reused);
      // Updated in place: if that was the reserved storage, the result is in it already.
      if (r != nullptr && r->storage.get() == storage.get()) r->storage.reset();
    } else if (r != nullptr && r->storage.use_count() == 1) {
      // The donated parameter is dead: the result is written straight into its storage.
      std::atomic_thread_fence(std::memory_order_acquire);  // As in TakeOperand0.
      storage = std::move(r->storage);
    } else if (r != nullptr && instr.kernel->writes_over_operands &&
               OnlyDyingOperandsHold(instr, plan, frees, values, slot, r->storage)) {
      // The donated parameter dies here: the kernel writes the result over it.
      std::atomic_thread_fence(std::memory_order_acquire);  // As in TakeOperand0.
      storage = std::move(r->storage);
    } else if (arena != nullptr && plan.arena_offset[slot] >= 0) {
      storage = Storage::Slice(arena, static_cast<size_t>(plan.arena_offset[slot]),
                               static_cast<size_t>(type.byte_size()));
    } else {
      storage = Storage::Allocate(type.byte_size());
    }
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
               std::vector<std::shared_ptr<Storage>>* results,
               const std::vector<DonatedResult>& donated) {
  std::vector<std::shared_ptr<Storage>> values(plan.slots.size());
  Reservations reserved;
  for (const DonatedResult& d : donated) {
    const int slot = plan.results[d.result];
    const std::shared_ptr<Storage>& storage = args[d.param];
    if (storage == nullptr || storage.use_count() != 1 ||
        static_cast<int64_t>(storage->size()) < plan.slots[slot].byte_size()) {
      continue;  // Someone else holds it (or it is too small): not ours to write.
    }
    if (reserved.of_slot.empty()) reserved.of_slot.assign(plan.slots.size(), -1);
    if (reserved.of_slot[slot] >= 0) continue;  // A slot returned twice: one donation.
    reserved.of_slot[slot] = static_cast<int>(reserved.list.size());
    reserved.list.push_back(Reservation{slot, storage});
  }
  for (size_t i = 0; i < plan.params.size(); ++i) values[plan.params[i]] = std::move(args[i]);
  // One block for every assigned temporary; released when the last slice of it goes
  // (a slice never outlives the call: assigned storages are neither results nor kept).
  std::shared_ptr<Storage> arena;
  if (plan.arena_bytes > 0 && plan.arena_offset.size() == plan.slots.size()) {
    arena = Storage::Allocate(static_cast<size_t>(plan.arena_bytes));
  }
  // A donated result that is a parameter slot is there from the start.
  for (size_t k = 0; k < reserved.list.size(); ++k) {
    if (values[reserved.list[k].slot] != nullptr) reserved.pending.push_back(static_cast<int>(k));
  }
  for (size_t i = 0; i < plan.instrs.size(); ++i) {
    const Instr& instr = plan.instrs[i];
    if (profiler::Active()) {  // One event per executed kernel (runtime/profiler.h).
      const int64_t start = profiler::NowNs();
      Status status = RunInstr(instr, plan, plan.frees[i], launch, values, reserved, arena);
      profiler::Record(profiler::CurrentDevice(), profiler::kKernelLine,
                       StrCat(instr.op, " @ ", instr.loc), start, profiler::NowNs());
      WORKSHOP_RETURN_IF_ERROR(status);
    } else {
      WORKSHOP_RETURN_IF_ERROR(
          RunInstr(instr, plan, plan.frees[i], launch, values, reserved, arena));
    }
    for (int slot : plan.frees[i]) values[slot].reset();
    if (reserved.list.empty()) continue;
    for (int slot : instr.outs) {
      if (reserved.For(slot) != nullptr) reserved.pending.push_back(reserved.of_slot[slot]);
    }
    // A result produced elsewhere goes into its donated storage as soon as both are free:
    // right after its producer when that was the parameter's last use, else at that use.
    std::vector<int>& pending = reserved.pending;
    for (size_t k = 0; k < pending.size();) {
      Reservation& r = reserved.list[pending[k]];
      if (r.storage == nullptr || TryPlace(r, plan, values, /*at_end=*/false)) {
        pending[k] = pending.back();
        pending.pop_back();
      } else {
        ++k;
      }
    }
  }
  for (Reservation& r : reserved.list) {
    if (r.storage != nullptr) TryPlace(r, plan, values, /*at_end=*/true);
  }
  results->clear();
  for (int slot : plan.results) results->push_back(values[slot]);
  return Status();
}

}  // namespace workshop
