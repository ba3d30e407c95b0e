// fusion: a run of elementwise kernels executed block by block (compiler/fusion.py).
//
// The body is an ordinary sub-plan whose kernels are all elementwise over N elements, or
// broadcasts of one-element operands. Rather than run each kernel over all N elements
// (N-element intermediates, one pass over memory per kernel), we cut [0, N) into blocks of
// kBlock elements and run the whole body on each block: operands and results are viewed at
// the block's offset, intermediates live in small per-thread buffers that stay in L1/L2.
// Blocks are independent, so they are spread over the thread pool.
#include <mutex>

#include "kernels/kernel.h"
#include "kernels/subplan.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

// 2048 elements: an f64 intermediate is 16 KiB, so a body's few intermediates fit in L2
// and the block is long enough for the per-kernel dispatch to vanish against the loop.
constexpr int64_t kBlock = 2048;

enum class Role { kOperand, kResult, kTemporary };

Status Fusion(KernelContext& ctx) {
  const Plan& body = SubPlan(ctx, "body");
  const int64_t n = ctx.outs[0].num_elements();
  const size_t num_slots = body.slots.size();
  std::vector<Role> role(num_slots, Role::kTemporary);
  std::vector<void*> base(num_slots, nullptr);  // Operand/result data; null: temporary.
  for (size_t i = 0; i < body.params.size(); ++i) {
    role[body.params[i]] = Role::kOperand;
    base[body.params[i]] = ctx.ins[i].data;
  }
  for (size_t i = 0; i < body.results.size(); ++i) {
    role[body.results[i]] = Role::kResult;
    base[body.results[i]] = ctx.outs[i].data;
  }
  std::vector<bool> tiled(num_slots);
  for (size_t s = 0; s < num_slots; ++s) tiled[s] = NumElements(body.slots[s].dims) == n;

  std::mutex error_mu;
  Status error;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  ThreadPool::Global().ParallelFor(
      blocks, std::max<int64_t>(1, kParallelGrain / kBlock), [&](int64_t first, int64_t end) {
        // This chunk's block-sized intermediates.
        std::vector<std::shared_ptr<Storage>> temporaries(num_slots);
        for (size_t s = 0; s < num_slots; ++s) {
          if (role[s] == Role::kTemporary) {
            const SlotType& type = body.slots[s];
            temporaries[s] = Storage::Allocate(kBlock * ByteWidth(type.dtype));
            if (temporaries[s] == nullptr) {
              std::lock_guard<std::mutex> lock(error_mu);
              error = ResourceExhausted("workshop: out of memory in ", ctx.instr.loc);
              return;
            }
          }
        }
        Dims block_dims(1);
        auto view = [&](int slot, int64_t offset) {
          const SlotType& type = body.slots[slot];
          if (!tiled[slot]) return Tensor{type.dtype, &type.dims, base[slot]};
          char* data = role[slot] == Role::kTemporary
                           ? static_cast<char*>(temporaries[slot]->data())
                           : static_cast<char*>(base[slot]) + offset * ByteWidth(type.dtype);
          return Tensor{type.dtype, &block_dims, data};
        };
        for (int64_t block = first; block < end; ++block) {
          const int64_t offset = block * kBlock;
          block_dims[0] = std::min(kBlock, n - offset);
          for (const Instr& instr : body.instrs) {
            KernelContext inner{instr, {}, {}, ctx.launch, {}, {}};
            for (int s : instr.ins) inner.ins.push_back(view(s, offset));
            for (int s : instr.outs) inner.outs.push_back(view(s, offset));
            Status status = instr.kernel->fn(inner);
            if (!status.ok()) {
              std::lock_guard<std::mutex> lock(error_mu);
              if (error.ok()) error = status;
              return;
            }
          }
        }
      });
  return error;
}

WORKSHOP_REGISTER_KERNEL("fusion", Fusion);

}  // namespace
}  // namespace workshop
