// Collectives across the partitions of one launch (pmap / shard_map in JAX 0.10 are SPMD:
// one Execute, one partition per device). Partitions meet in the launch's Rendezvous.
#include <algorithm>

#include "kernels/element_ops.h"
#include "kernels/kernel.h"
#include "runtime/rendezvous.h"

namespace workshop {
namespace {

// The replica group (list of partition ids) containing `partition`; all partitions when
// `groups` is empty.
std::vector<int64_t> GroupOf(const std::vector<IntList>& groups, int partition,
                             int participants) {
  for (const IntList& group : groups) {
    if (std::find(group.begin(), group.end(), partition) != group.end()) return group;
  }
  std::vector<int64_t> all(participants);
  for (int p = 0; p < participants; ++p) all[p] = p;
  return all;
}

// Every partition publishes its operand; each then folds its group's operands, in group
// order (so all members compute bit-identical sums), into its own output; a final barrier
// keeps the operands alive until everyone has read them.
Status AllReduce(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const Tensor& out = ctx.outs[0];
  const std::string& body = ctx.instr.attr<std::string>("body");
  Rendezvous* rendezvous = ctx.launch.rendezvous;
  if (rendezvous == nullptr) {
    return Internal("workshop: all_reduce outside a launch at ", ctx.instr.loc);
  }
  const std::vector<int64_t> group = GroupOf(ctx.instr.attr<std::vector<IntList>>("groups"),
                                             ctx.launch.partition, rendezvous->participants());
  for (int64_t member : group) {
    if (member < 0 || member >= rendezvous->participants()) {
      return InvalidArgument("workshop: all_reduce replica group names partition ", member,
                             " of ", rendezvous->participants(), " at ", ctx.instr.loc);
    }
  }
  std::vector<const void*> operands;
  WORKSHOP_RETURN_IF_ERROR(rendezvous->Exchange(ctx.launch.partition, in.data, &operands));
  auto unsupported = [&] {
    return Unimplemented("workshop: all_reduce with body '", body, "' on ",
                         DTypeName(in.dtype), " is not supported at ", ctx.instr.loc);
  };
  Status status = DispatchReducer(
      body,
      [&](auto op) -> Status {
        using Op = decltype(op);
        return DispatchAll(
            in.dtype,
            [&](auto tag) -> Status {
              using T = decltype(tag);
              if constexpr (Op::template kSupports<T>) {
                T* dst = out.as<T>();
                const int64_t n = in.num_elements();
                const T* first = static_cast<const T*>(operands[group[0]]);
                std::copy(first, first + n, dst);
                for (size_t g = 1; g < group.size(); ++g) {
                  const T* src = static_cast<const T*>(operands[group[g]]);
                  for (int64_t i = 0; i < n; ++i) dst[i] = op(dst[i], src[i]);
                }
                return Status();
              } else {
                return unsupported();
              }
            },
            unsupported);
      },
      unsupported);
  // Always pass the second barrier, even on error, so no partition waits forever.
  Status barrier = rendezvous->Barrier(ctx.launch.partition);
  return status.ok() ? barrier : status;
}

WORKSHOP_REGISTER_KERNEL("all_reduce", AllReduce);

}  // namespace
}  // namespace workshop
