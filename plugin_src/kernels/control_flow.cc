// Control flow: while and case (also `if`, as a case on a pred), running sub-plans.
//
// Both kernels manage their outputs: values flow between the enclosing plan and the
// regions as shared Storages, never copied. Storages are immutable once produced as far
// as anyone holding them can tell (kernels write fresh outputs, or update an operand in
// place only when they hold its last reference: executor.cc), so a loop-carried value the
// body passes through unchanged, or a branch returning its operand, simply hands on the
// same Storage.
//
// Operands are the op's own followed by the values the regions capture (compiler
// `Lowering.lower_regions`); every region takes (its block arguments..., captures...).
#include <string>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/subplan.h"
#include "kernels/elementwise/element_ops.h"

namespace workshop {
namespace {

// while: ins = initial values (one per output), captures. Attrs: cond (-> pred[]), body.
// Partitions of an SPMD launch run the same program on their own data; a loop whose trip
// count differs between partitions and that contains a collective is the program's error,
// and shows as a collective mismatch.
Status While(KernelContext& ctx) {
  const Plan& cond = SubPlan(ctx, "cond");
  const Plan& body = SubPlan(ctx, "body");
  const size_t n = ctx.instr.outs.size();
  if (ctx.in_storage.size() < n) throw PlanError("fewer operands than results");
  StorageList values(ctx.in_storage.begin(), ctx.in_storage.begin() + n);
  const StorageList captures(ctx.in_storage.begin() + n, ctx.in_storage.end());
  auto with_captures = [&](StorageList args) {
    args.insert(args.end(), captures.begin(), captures.end());
    return args;
  };
  StorageList pred;
  for (;;) {
    WORKSHOP_RETURN_IF_ERROR(RunSubPlan(ctx, cond, with_captures(values), &pred));
    if (pred.size() != 1 || pred[0] == nullptr || pred[0]->size() < 1) {
      throw PlanError("the condition must return one pred[]");
    }
    if (!*static_cast<const bool*>(pred[0]->data())) break;
    // Moving the values in lets the body release each one at its last use.
    WORKSHOP_RETURN_IF_ERROR(RunSubPlan(ctx, body, with_captures(std::move(values)), &values));
    if (values.size() != n) throw PlanError("the body must return one value per result");
  }
  ctx.out_storage = std::move(values);
  return Status();
}

// case: ins = index (s32[], or pred[] for `if`), captures. Attrs: branches (count N),
// branch_<i>. An index outside [0, N) runs branch N-1, as StableHLO specifies.
Status Case(KernelContext& ctx) {
  if (ctx.ins.empty()) throw PlanError("case needs an index operand");
  const Tensor& index = ctx.ins[0];
  const int64_t branches = ctx.instr.attr<int64_t>("branches");
  int64_t i = 0;
  Status status = DispatchAll(
      index.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, bool> || kIsInt<T>) {
          const T value = *index.as<T>();
          i = (IsNegative(value) || static_cast<uint64_t>(value) >= static_cast<uint64_t>(branches))
                  ? branches - 1
                  : static_cast<int64_t>(value);
          return Status();
        } else {
          return UnsupportedDType(ctx, index.dtype);
        }
      },
      [&] { return UnsupportedDType(ctx, index.dtype); });
  WORKSHOP_RETURN_IF_ERROR(status);
  const Plan& branch = SubPlan(ctx, "branch_" + std::to_string(i));
  StorageList args(ctx.in_storage.begin() + 1, ctx.in_storage.end());
  return RunSubPlan(ctx, branch, std::move(args), &ctx.out_storage);
}

WORKSHOP_REGISTER_KERNEL("while", While, /*aliases_operand=*/false, /*manages_outputs=*/true);
WORKSHOP_REGISTER_KERNEL("case", Case, /*aliases_operand=*/false, /*manages_outputs=*/true);

}  // namespace

Status RunWhile(KernelContext& ctx) { return While(ctx); }

}  // namespace workshop
