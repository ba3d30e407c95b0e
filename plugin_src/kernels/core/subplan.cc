#include "kernels/core/subplan.h"

#include "runtime/executor.h"

namespace workshop {

Status RunSubPlan(const KernelContext& ctx, const Plan& plan, StorageList args,
                  StorageList* results) {
  if (args.size() != plan.params.size()) {
    return Internal("workshop: '", ctx.instr.op, "' at ", ctx.instr.loc, " passes ", args.size(),
                    " values to a region of ", plan.params.size(), " parameters");
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const SlotType& type = plan.slots[plan.params[i]];
    if (args[i] == nullptr || static_cast<int64_t>(args[i]->size()) < type.byte_size()) {
      return Internal("workshop: '", ctx.instr.op, "' at ", ctx.instr.loc,
                      " passes a too small buffer for region parameter ", i, " (",
                      ShapeString(type.dtype, type.dims), ")");
    }
  }
  return RunPlan(plan, ctx.launch, std::move(args), results);
}

const Plan& SubPlan(const KernelContext& ctx, const std::string& name) {
  const auto& plan = ctx.instr.attr<std::shared_ptr<const Plan>>(name);
  if (plan == nullptr) throw PlanError("null sub-plan '" + name + "'");
  return *plan;
}

Plan WithLanes(const Plan& plan, int64_t lanes) {
  Plan resized = plan;
  for (SlotType& slot : resized.slots) {
    if (slot.dims.size() == 1) slot.dims[0] = lanes;
  }
  // The assignment was made for the plan's own sizes.
  resized.arena_offset.clear();
  resized.arena_bytes = 0;
  return resized;
}

Status AllocateFor(const KernelContext& ctx, int64_t bytes, std::shared_ptr<Storage>* out) {
  *out = Storage::Allocate(static_cast<size_t>(bytes));
  if (*out == nullptr) {
    return ResourceExhausted("workshop: out of memory allocating ", bytes, " bytes for '",
                             ctx.instr.op, "' at ", ctx.instr.loc);
  }
  return Status();
}

ScratchCharge::~ScratchCharge() {
  if (stats_ != nullptr) stats_->Freed(bytes_);
}

Status ScratchCharge::Charge(const KernelContext& ctx, int64_t bytes) {
  const MemoryStatsRef& stats = MemoryAttribution::Current();
  if (stats == nullptr || bytes <= 0) return Status();
  if (!stats->Reserve(bytes)) {
    return ResourceExhausted("workshop: '", ctx.instr.op, "' at ", ctx.instr.loc, " needs ", bytes,
                             " bytes of scratch, past the device memory limit ",
                             stats->bytes_limit(), " (", stats->bytes_in_use(), " bytes in use)");
  }
  if (stats_ == nullptr) stats_ = stats;
  if (stats_ == stats) {
    bytes_ += bytes;
  } else {
    stats->Freed(bytes);  // One memory per charge object; an execution has one.
  }
  return Status();
}

}  // namespace workshop
