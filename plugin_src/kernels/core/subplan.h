// Running a kernel's sub-plans (regions of while, case, reduce and sort; see docs/plan.md
// "Regions and sub-plans").
#pragma once

#include <memory>
#include <vector>

#include "kernels/core/kernel.h"
#include "runtime/memory_stats.h"
#include "runtime/plan.h"

namespace workshop {

using StorageList = std::vector<std::shared_ptr<Storage>>;

// Runs `plan`, an attribute of ctx.instr, with `args` on ctx's launch. Checks that there is
// one argument per parameter holding at least the parameter's bytes, so a plan that
// disagrees with its kernel fails instead of reading out of bounds.
Status RunSubPlan(const KernelContext& ctx, const Plan& plan, StorageList args,
                  StorageList* results);

// The sub-plan attribute `name` of ctx.instr.
const Plan& SubPlan(const KernelContext& ctx, const std::string& name);

// The interpreted while loop (kernels/control_flow.cc): ins = initial values, captures;
// attrs cond and body. jit_loop.cc falls back to it.
Status RunWhile(KernelContext& ctx);

// A lane plan (compiler/lanes.py) resized to `lanes` lanes: every rank-1 slot holds one
// element per lane, rank-0 slots are the same for all lanes.
Plan WithLanes(const Plan& plan, int64_t lanes);

// Storage of `bytes` bytes, or RESOURCE_EXHAUSTED naming ctx's op.
Status AllocateFor(const KernelContext& ctx, int64_t bytes, std::shared_ptr<Storage>* out);

// A kernel's scratch (its std::vector temporaries) charged to the memory the running
// execution is attributed to (MemoryAttribution), so the device memory limit covers it as
// it covers buffers: a 1-D sort of n elements holds 48n bytes of scratch beside its 4n-byte
// f32 operand. Credited back when this object dies; nothing is charged outside an
// execution.
class ScratchCharge {
 public:
  ScratchCharge() = default;
  ~ScratchCharge();
  ScratchCharge(const ScratchCharge&) = delete;
  ScratchCharge& operator=(const ScratchCharge&) = delete;

  // Charges `bytes` more (a product of sizes, computed without overflow by the caller);
  // RESOURCE_EXHAUSTED naming ctx's op, the limit and the bytes in use when that would
  // pass the limit.
  Status Charge(const KernelContext& ctx, int64_t bytes);

 private:
  std::shared_ptr<MemoryStats> stats_;
  int64_t bytes_ = 0;
};

}  // namespace workshop
