#include "runtime/plan.h"

#include "kernels/core/kernel.h"
#include "runtime/buffer_assignment.h"

namespace workshop {
namespace {

// The checks of an instruction's attributes and slot types against its operand and result
// shapes that need no data: those every op shares here, then the op's own
// (KernelDef::check, beside its kernel: kernels/core/attr_check.h says why). A blob that
// passes its checksum (or was crafted) must still not make a kernel read or write out of
// bounds.
Status CheckAttributes(const Plan& plan, const Instr& instr) {
  // Ops whose results have one operand's element type (optable.py `same_type`): kernels
  // size their writes by the operand's type, so a result slot of a narrower type (a
  // flipped f32 -> f16 corrupted the heap) must be refused here.
  if (const int data = SameTypeOperand(instr.op); data >= 0) {
    if (static_cast<size_t>(data) < instr.ins.size()) {
      const DType type = plan.slots[instr.ins[data]].dtype;
      for (int out : instr.outs) {
        if (plan.slots[out].dtype != type) {
          // INVALID_ARGUMENT, as the kernels' own checks of the same slots at run time.
          return InvalidArgument("workshop: ", instr.op, " at ", instr.loc, ": result slot ", out,
                                 " is ", DTypeName(plan.slots[out].dtype), ", not the operand's ",
                                 DTypeName(type));
        }
      }
    }
  }
  // An op without a kernel fails in BindKernels, after the whole plan is validated.
  const KernelDef* kernel = FindKernel(instr.op);
  if (kernel == nullptr || kernel->check == nullptr) return Status();
  return kernel->check(plan, instr);
}

Status Validate(const Plan& plan, const std::string& name) {
  const int num_slots = static_cast<int>(plan.slots.size());
  auto bad_slot = [&](int s) { return s < 0 || s >= num_slots; };
  for (int s : plan.params) {
    if (bad_slot(s)) return Internal("workshop: plan of ", name, " has a bad parameter slot");
  }
  for (int s : plan.results) {
    if (bad_slot(s)) return Internal("workshop: plan of ", name, " has a bad result slot");
  }
  for (const SlotType& slot : plan.slots) {
    // A token result (PJRT_Buffer_Type_TOKEN, no dims, no bytes: compiler/lowering.py
    // _token_results) is the one slot of a type without a width.
    const bool token = slot.dtype == kTokenDType && slot.dims.empty();
    if (!IsSupported(slot.dtype) && !token) {
      return Internal("workshop: plan of ", name, " has a slot of unsupported type ",
                      DTypeName(slot.dtype));
    }
    for (int64_t d : slot.dims) {
      if (d < 0) return Internal("workshop: plan of ", name, " has a negative dimension");
    }
    int64_t bytes = 0;
    if (!CheckedByteSize(slot.dtype, slot.dims, &bytes)) {
      return Internal("workshop: plan of ", name, " has a slot ",
                      ShapeString(slot.dtype, slot.dims), " whose size overflows int64");
    }
  }
  if (plan.frees.size() != plan.instrs.size()) {
    return Internal("workshop: plan of ", name, " has ", plan.frees.size(), " free lists for ",
                    plan.instrs.size(), " instructions");
  }
  // Every slot read holds a value when it is read: it is a parameter or written by an
  // earlier instruction, and not released since (frees). A compiler bug that drops a
  // producer, or a corrupt free list, is an error here, not a read of unset or released
  // storage at run time (a flipped free list was a null Storage dereference in executor.cc).
  std::vector<bool> live(num_slots, false);
  for (int s : plan.params) live[s] = true;
  for (size_t i = 0; i < plan.instrs.size(); ++i) {
    const Instr& instr = plan.instrs[i];
    for (const std::vector<int>* slots : {&instr.ins, &instr.outs, &plan.frees[i]}) {
      for (int s : *slots) {
        if (bad_slot(s))
          return Internal("workshop: '", instr.op, "' at ", instr.loc, " refers to slot ", s,
                          " of ", num_slots);
      }
    }
    for (int s : instr.ins) {
      if (!live[s])
        return Internal("workshop: '", instr.op, "' at ", instr.loc, " reads slot ", s,
                        " before anything writes it (or after "
                        "it was freed)");
    }
    for (int s : instr.outs) live[s] = true;
    WORKSHOP_RETURN_IF_ERROR(CheckAttributes(plan, instr));
    for (int s : plan.frees[i]) {
      if (!live[s])
        return Internal("workshop: '", instr.op, "' at ", instr.loc, " frees slot ", s,
                        ", which holds no value");
      live[s] = false;
    }
  }
  for (int s : plan.results) {
    if (!live[s]) {
      return Internal("workshop: plan of ", name, " never writes result slot ", s,
                      " (or frees it)");
    }
  }
  return Status();
}

Status BindKernels(Plan& plan) {
  for (Instr& instr : plan.instrs) {
    instr.kernel = FindKernel(instr.op);
    if (instr.kernel == nullptr) {
      return Unimplemented("workshop: no kernel for op 'stablehlo.", instr.op, "' at ", instr.loc);
    }
    WORKSHOP_RETURN_IF_ERROR(CheckOpTable(instr, plan.slots));
    if (instr.kernel->aliases_operand && (instr.ins.empty() || instr.outs.size() != 1)) {
      return Internal("workshop: '", instr.op, "' at ", instr.loc, " must have one operand");
    }
  }
  return Status();
}

}  // namespace

Status PreparePlan(Plan& plan, const std::string& name) {
  WORKSHOP_RETURN_IF_ERROR(Validate(plan, name));
  WORKSHOP_RETURN_IF_ERROR(BindKernels(plan));
  for (Instr& instr : plan.instrs) {
    for (auto& [key, attr] : instr.attrs) {
      if (auto* sub = std::get_if<std::shared_ptr<const Plan>>(&attr)) {
        auto copy = std::make_shared<Plan>(**sub);
        WORKSHOP_RETURN_IF_ERROR(PreparePlan(*copy, name));
        attr = std::shared_ptr<const Plan>(std::move(copy));
      }
    }
    if (instr.kernel->prepare == nullptr) continue;
    try {
      WORKSHOP_RETURN_IF_ERROR(instr.kernel->prepare(instr));
    } catch (const PlanError& e) {
      return InvalidArgument("workshop: ", instr.op, " at ", instr.loc, ": ", e.what());
    }
  }
  AssignBuffers(plan);
  return Status();
}

Status PrepareProgram(Program& p) {
  const size_t params = p.plan.params.size(), results = p.plan.results.size();
  for (const auto& [param, result] : p.donations) {
    if (param < 0 || static_cast<size_t>(param) >= params || result < 0 ||
        static_cast<size_t>(result) >= results) {
      return Internal("workshop: ", p.name, " donates parameter ", param, " to result ", result,
                      " but has ", params, " parameters and ", results, " results");
    }
  }
  if (p.parameter_memory_kinds.empty()) p.parameter_memory_kinds.assign(params, "device");
  if (p.output_memory_kinds.empty()) p.output_memory_kinds.assign(results, "device");
  if (p.parameter_memory_kinds.size() != params || p.output_memory_kinds.size() != results) {
    return Internal("workshop: ", p.name, " has memory kinds for ", p.parameter_memory_kinds.size(),
                    " parameters and ", p.output_memory_kinds.size(), " results, expected ", params,
                    " and ", results);
  }
  if (p.parameter_layouts.empty()) p.parameter_layouts.assign(params, {});
  if (p.output_layouts.empty()) p.output_layouts.assign(results, {});
  if (p.parameter_layouts.size() != params || p.output_layouts.size() != results) {
    return Internal("workshop: ", p.name, " has layouts for ", p.parameter_layouts.size(),
                    " parameters and ", p.output_layouts.size(), " results, expected ", params,
                    " and ", results);
  }
  for (int side = 0; side < 2; ++side) {
    const std::vector<MinorToMajor>& layouts = side == 0 ? p.parameter_layouts : p.output_layouts;
    const std::vector<int>& slots = side == 0 ? p.plan.params : p.plan.results;
    for (size_t i = 0; i < layouts.size(); ++i) {
      const MinorToMajor& layout = layouts[i];
      if (layout.empty()) continue;
      const int slot = slots[i];
      const size_t rank = slot >= 0 && static_cast<size_t>(slot) < p.plan.slots.size()
                              ? p.plan.slots[slot].dims.size()
                              : 0;
      std::vector<bool> seen(rank, false);
      bool ok = layout.size() == rank;
      for (int64_t dim : layout) {
        ok = ok && dim >= 0 && static_cast<size_t>(dim) < rank && !seen[dim];
        if (ok) seen[dim] = true;
      }
      if (!ok) {
        return Internal("workshop: ", p.name, " gives ", side == 0 ? "parameter " : "result ", i,
                        " a layout that is not a permutation of its ", rank, " dims");
      }
    }
  }
  bool shape_ok = p.num_replicas >= 1 && p.num_partitions >= 1 &&
                  p.device_assignment.size() == static_cast<size_t>(p.num_replicas);
  for (const auto& replica : p.device_assignment) {
    shape_ok = shape_ok && replica.size() == static_cast<size_t>(p.num_partitions);
  }
  if (!shape_ok) {
    return Internal("workshop: ", p.name, " has a device assignment that is not ", p.num_replicas,
                    " replicas x ", p.num_partitions, " partitions");
  }
  return PreparePlan(p.plan, p.name);
}

}  // namespace workshop
