#include "runtime/plan.h"

#include "kernels/kernel.h"

namespace workshop {
namespace {

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
    if (!IsSupported(slot.dtype)) {
      return Internal("workshop: plan of ", name, " has a slot of unsupported type ",
                      DTypeName(slot.dtype));
    }
    for (int64_t d : slot.dims) {
      if (d < 0) return Internal("workshop: plan of ", name, " has a negative dimension");
    }
  }
  if (plan.frees.size() != plan.instrs.size()) {
    return Internal("workshop: plan of ", name, " has ", plan.frees.size(), " free lists for ",
                    plan.instrs.size(), " instructions");
  }
  // Every slot read is a parameter or written by an earlier instruction: a compiler bug
  // that drops a producer is an error here, not a read of unset memory at run time.
  std::vector<bool> written(num_slots, false);
  for (int s : plan.params) written[s] = true;
  for (size_t i = 0; i < plan.instrs.size(); ++i) {
    const Instr& instr = plan.instrs[i];
    for (const std::vector<int>* slots : {&instr.ins, &instr.outs, &plan.frees[i]}) {
      for (int s : *slots) {
        if (bad_slot(s)) return Internal("workshop: '", instr.op, "' at ", instr.loc,
                                         " refers to slot ", s, " of ", num_slots);
      }
    }
    for (int s : instr.ins) {
      if (!written[s]) return Internal("workshop: '", instr.op, "' at ", instr.loc,
                                       " reads slot ", s, " before anything writes it");
    }
    for (int s : instr.outs) written[s] = true;
  }
  for (int s : plan.results) {
    if (!written[s]) return Internal("workshop: plan of ", name, " never writes result slot ", s);
  }
  return Status();
}

Status BindKernels(Plan& plan) {
  for (Instr& instr : plan.instrs) {
    instr.kernel = FindKernel(instr.op);
    if (instr.kernel == nullptr) {
      return Unimplemented("workshop: no kernel for op 'stablehlo.", instr.op, "' at ",
                           instr.loc);
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
    return Internal("workshop: ", p.name, " has memory kinds for ",
                    p.parameter_memory_kinds.size(), " parameters and ",
                    p.output_memory_kinds.size(), " results, expected ", params, " and ",
                    results);
  }
  bool shape_ok = p.num_replicas >= 1 && p.num_partitions >= 1 &&
                  p.device_assignment.size() == static_cast<size_t>(p.num_replicas);
  for (const auto& replica : p.device_assignment) {
    shape_ok = shape_ok && replica.size() == static_cast<size_t>(p.num_partitions);
  }
  if (!shape_ok) {
    return Internal("workshop: ", p.name, " has a device assignment that is not ",
                    p.num_replicas, " replicas x ", p.num_partitions, " partitions");
  }
  return PreparePlan(p.plan, p.name);
}

}  // namespace workshop
