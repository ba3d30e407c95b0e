#include "runtime/plan.h"

#include <limits>

#include "kernels/core/kernel.h"
#include "runtime/buffer_assignment.h"

namespace workshop {
namespace {

// The attributes kernels index memory with, checked against the operand and result
// shapes: a blob that passes its checksum (or was crafted) must still not make a kernel
// read or write out of bounds (a flipped iota `dim` overflowed the heap in
// kernels/shape.cc). Attributes that only change values (strides of a window whose
// result shape absorbs them, constants) cannot be told from a different valid program;
// the checksum catches those when they come from corruption.
Status CheckAttributes(const Plan& plan, const Instr& instr) {
  // INVALID_ARGUMENT, as the kernels' own checks of the same attributes at run time.
  auto fail = [&](const auto&... parts) {
    return InvalidArgument("workshop: ", instr.op, " at ", instr.loc, ": ", parts...);
  };
  auto dims_of = [&](const std::vector<int>& slots, size_t k) -> const Dims* {
    return k < slots.size() ? &plan.slots[slots[k]].dims : nullptr;
  };
  const Dims* in0 = dims_of(instr.ins, 0);
  const Dims* out0 = dims_of(instr.outs, 0);
  auto int_attr = [&](const char* key) -> const int64_t* {
    auto it = instr.attrs.find(key);
    return it == instr.attrs.end() ? nullptr : std::get_if<int64_t>(&it->second);
  };
  auto list_attr = [&](const char* key) -> const IntList* {
    auto it = instr.attrs.find(key);
    return it == instr.attrs.end() ? nullptr : std::get_if<IntList>(&it->second);
  };
  // An axis attribute of `dims`' rank.
  auto axis = [&](const char* key, const Dims* dims) -> Status {
    const int64_t* v = int_attr(key);
    if (v == nullptr || dims == nullptr) return Status();
    if (*v < 0 || *v >= static_cast<int64_t>(dims->size())) {
      return fail("attribute '", key, "' = ", *v, " is not an axis of a rank-", dims->size(),
                  " array");
    }
    return Status();
  };
  auto axes = [&](const char* key, const Dims* dims) -> Status {
    const IntList* v = list_attr(key);
    if (v == nullptr || dims == nullptr) return Status();
    for (int64_t a : *v) {
      if (a < 0 || a >= static_cast<int64_t>(dims->size())) {
        return fail("attribute '", key, "' holds ", a, ", not an axis of a rank-", dims->size(),
                    " array");
      }
    }
    return Status();
  };
  // One entry per dimension of `dims`, each at least `min`.
  auto per_dim = [&](const char* key, const Dims* dims, int64_t min) -> Status {
    const IntList* v = list_attr(key);
    if (v == nullptr || dims == nullptr) return Status();
    if (v->size() != dims->size()) {
      return fail("attribute '", key, "' has ", v->size(), " entries for a rank-", dims->size(),
                  " array");
    }
    for (int64_t x : *v) {
      if (x < min) return fail("attribute '", key, "' holds ", x, " (at least ", min, ")");
    }
    return Status();
  };
  const std::string& op = instr.op;
  // Ops whose results have one operand's element type (optable.py `same_type`): kernels
  // size their writes by the operand's type, so a result slot of a narrower type (a
  // flipped f32 -> f16 corrupted the heap) must be refused here.
  if (const int data = SameTypeOperand(op); data >= 0) {
    if (static_cast<size_t>(data) < instr.ins.size()) {
      const DType type = plan.slots[instr.ins[data]].dtype;
      for (int out : instr.outs) {
        if (plan.slots[out].dtype != type) {
          return fail("result slot ", out, " is ", DTypeName(plan.slots[out].dtype),
                      ", not the operand's ", DTypeName(type));
        }
      }
    }
  }
  if (op == "select" && instr.ins.size() == 3) {
    for (int out : instr.outs) {
      if (plan.slots[out].dtype != plan.slots[instr.ins[1]].dtype) {
        return fail("result slot ", out, " is not of the selected operands' type");
      }
    }
  }
  // A fusion's body reads its operands and writes its results through its own parameter
  // and result slots, sized by the body: the instruction's slots must be the same types
  // (a resealed mutation of an outer slot made the interpreted fusion read past an
  // operand; found under ASan).
  if (op == "fusion" || op == "jit_fusion" || op == "horizontal_fusion" || op == "jit_block") {
    auto it = instr.attrs.find("body");
    const auto* body =
        it == instr.attrs.end() ? nullptr : std::get_if<std::shared_ptr<const Plan>>(&it->second);
    if (body == nullptr || *body == nullptr) return fail("no body");
    const Plan& b = **body;
    if (b.params.size() != instr.ins.size() || b.results.size() != instr.outs.size()) {
      return fail("a body of ", b.params.size(), " parameters and ", b.results.size(),
                  " results for ", instr.ins.size(), " operands and ", instr.outs.size(),
                  " results");
    }
    auto same = [&](int outer, int inner) {
      if (inner < 0 || inner >= static_cast<int>(b.slots.size())) return false;
      const SlotType &x = plan.slots[outer], &y = b.slots[inner];
      return x.dtype == y.dtype && NumElements(x.dims) == NumElements(y.dims);
    };
    for (size_t i = 0; i < instr.ins.size(); ++i) {
      if (!same(instr.ins[i], b.params[i])) {
        return fail("operand ", i, " is not of its body's parameter type");
      }
    }
    for (size_t i = 0; i < instr.outs.size(); ++i) {
      if (!same(instr.outs[i], b.results[i])) {
        return fail("result ", i, " is not of its body's result type");
      }
    }
    return Status();
  }
  // dot_general: the kernel views each operand as [batch, free, contract] by these axes
  // (kernels/dot/dot.cc) and writes batch x lhs free x rhs free elements.
  if (op == "dot_general" && instr.ins.size() == 2 && out0 != nullptr) {
    const Dims* in1 = dims_of(instr.ins, 1);
    const IntList *lb = list_attr("lhs_batch"), *lc = list_attr("lhs_contract"),
                  *rb = list_attr("rhs_batch"), *rc = list_attr("rhs_contract");
    if (lb == nullptr || lc == nullptr || rb == nullptr || rc == nullptr) {
      return fail("dimension numbers missing");
    }
    if (lb->size() != rb->size() || lc->size() != rc->size()) {
      return fail("batch or contracting dimensions differ in number between the operands");
    }
    // Each operand's batch and contracting axes: in range, none twice; returns the
    // product of its free dims, or -1.
    auto free_size = [&](const Dims& dims, const IntList& batch, const IntList& contract) {
      std::vector<bool> used(dims.size(), false);
      for (const IntList* list : {&batch, &contract}) {
        for (int64_t a : *list) {
          if (a < 0 || a >= static_cast<int64_t>(dims.size()) || used[a]) return int64_t{-1};
          used[a] = true;
        }
      }
      int64_t n = 1;
      for (size_t d = 0; d < dims.size(); ++d) {
        if (!used[d]) n *= dims[d];
      }
      return n;
    };
    const int64_t lhs_free = free_size(*in0, *lb, *lc), rhs_free = free_size(*in1, *rb, *rc);
    if (lhs_free < 0 || rhs_free < 0) {
      return fail("a dimension number is not an axis of its operand, or repeats");
    }
    int64_t batch = 1;
    for (size_t i = 0; i < lb->size(); ++i) {
      if ((*in0)[(*lb)[i]] != (*in1)[(*rb)[i]]) return fail("batch dimension ", i, " differs");
      batch *= (*in0)[(*lb)[i]];
    }
    for (size_t i = 0; i < lc->size(); ++i) {
      if ((*in0)[(*lc)[i]] != (*in1)[(*rc)[i]]) {
        return fail("contracting dimension ", i, " differs");
      }
    }
    // In 128 bits: each factor fits int64 (CheckedByteSize accepted its slot), the
    // product of factors from two operands need not.
    const __int128 want = static_cast<__int128>(batch) * lhs_free * rhs_free;
    if (static_cast<__int128>(NumElements(*out0)) != want) {
      return fail("the result has ", NumElements(*out0),
                  " elements, not batch x lhs free x rhs free");
    }
    return Status();
  }
  if (op == "iota") return axis("dim", out0);
  if (op == "concatenate" || op == "all_gather" || op == "reduce_scatter" || op == "sort" ||
      op == "sort_general") {
    return axis("dim", in0);
  }
  if (op == "all_to_all") {
    WORKSHOP_RETURN_IF_ERROR(axis("split_dim", in0));
    return axis("concat_dim", in0);
  }
  if (op == "reverse") return axes("dims", in0);
  // Reductions: each result holds the operand's kept dimensions. The reduce kernel sizes
  // its walk by the operand and `dims` and its writes by the result's type (a resealed
  // flip of dims [2, 3] to [2, 2] wrote 8 times past a 12-element result: heap
  // corruption, fuzzer seed 101, k=868).
  if ((op == "reduce" || op == "argmax" || op == "argmin" || op == "reduce_general") &&
      in0 != nullptr) {
    const IntList* dims = list_attr("dims");
    if (dims == nullptr) return fail("attribute 'dims' missing");
    std::vector<bool> reduced(in0->size(), false);
    for (int64_t a : *dims) {
      if (a < 0 || a >= static_cast<int64_t>(in0->size()) || reduced[a]) {
        return fail("attribute 'dims' holds ", a, ", not a distinct axis of a rank-", in0->size(),
                    " array");
      }
      reduced[a] = true;
    }
    // Not a factor of the operand's checked size when a reduced dimension is 0.
    int64_t kept = 1;
    for (size_t d = 0; d < in0->size(); ++d) {
      if (!reduced[d] && __builtin_mul_overflow(kept, (*in0)[d], &kept)) {
        return fail("the kept dimensions of the operand overflow int64");
      }
    }
    for (int out : instr.outs) {
      if (NumElements(plan.slots[out].dims) != kept) {
        return fail("result slot ", out, " has ", NumElements(plan.slots[out].dims),
                    " elements; the reduction keeps ", kept);
      }
    }
    if (op == "reduce") {  // reduce(x, init): one result of x's type, a scalar init.
      if (instr.ins.size() != 2 || instr.outs.size() != 1) {
        return fail("takes (operand, init) and gives one result");
      }
      const DType type = plan.slots[instr.ins[0]].dtype;
      if (plan.slots[instr.ins[1]].dtype != type || plan.slots[instr.outs[0]].dtype != type ||
          NumElements(plan.slots[instr.ins[1]].dims) != 1) {
        return fail("init and result must be ", DTypeName(type),
                    " like the operand, init a "
                    "scalar");
      }
    }
    return Status();
  }
  if (op == "transpose" && in0 != nullptr && out0 != nullptr) {
    const IntList* perm = list_attr("perm");
    if (perm == nullptr) return Status();
    std::vector<bool> seen(in0->size(), false);
    if (perm->size() != in0->size() || out0->size() != in0->size()) {
      return fail("attribute 'perm' has ", perm->size(), " entries for rank ", in0->size());
    }
    for (size_t d = 0; d < perm->size(); ++d) {
      const int64_t p = (*perm)[d];
      if (p < 0 || p >= static_cast<int64_t>(in0->size()) || seen[p] || (*out0)[d] != (*in0)[p]) {
        return fail("attribute 'perm' is not a permutation from ", ShapeString(DType::kF32, *in0),
                    " to ", ShapeString(DType::kF32, *out0));
      }
      seen[p] = true;
    }
    return Status();
  }
  if (op == "broadcast_in_dim" && in0 != nullptr && out0 != nullptr) {
    const IntList* dims = list_attr("dims");
    if (dims == nullptr) return Status();
    if (dims->size() != in0->size()) {
      return fail("attribute 'dims' has ", dims->size(), " entries for rank ", in0->size());
    }
    for (size_t i = 0; i < dims->size(); ++i) {
      const int64_t d = (*dims)[i];
      if (d < 0 || d >= static_cast<int64_t>(out0->size()) ||
          ((*in0)[i] != 1 && (*in0)[i] != (*out0)[d])) {
        return fail("attribute 'dims' does not map the operand's dimensions into the result's");
      }
    }
    return Status();
  }
  if (op == "slice" && in0 != nullptr && out0 != nullptr) {
    const IntList *start = list_attr("start"), *limit = list_attr("limit"),
                  *stride = list_attr("stride");
    if (start == nullptr || limit == nullptr || stride == nullptr) return Status();
    const size_t rank = in0->size();
    if (start->size() != rank || limit->size() != rank || stride->size() != rank ||
        out0->size() != rank) {
      return fail("start/limit/stride do not have one entry per dimension");
    }
    for (size_t d = 0; d < rank; ++d) {
      const int64_t b = (*start)[d], e = (*limit)[d], k = (*stride)[d];
      if (b < 0 || b > e || e > (*in0)[d] || k < 1 || (*out0)[d] != (e - b + k - 1) / k) {
        return fail("start/limit/stride of dimension ", d, " do not slice ", (*in0)[d],
                    " elements into ", (*out0)[d]);
      }
    }
    return Status();
  }
  if (op == "reduce_window") {
    for (const char* key : {"window", "strides", "base_dilation", "window_dilation"}) {
      WORKSHOP_RETURN_IF_ERROR(per_dim(key, in0, 1));
    }
    return per_dim("pad_lo", in0, std::numeric_limits<int64_t>::min() / 4);
  }
  if (op == "select_and_scatter") {
    WORKSHOP_RETURN_IF_ERROR(per_dim("window", in0, 1));
    WORKSHOP_RETURN_IF_ERROR(per_dim("strides", in0, 1));
    return per_dim("pad_lo", in0, std::numeric_limits<int64_t>::min() / 4);
  }
  if (op == "pad" && in0 != nullptr && out0 != nullptr) {
    const IntList *src = list_attr("src_start"), *dst = list_attr("dst_start"),
                  *step = list_attr("dst_step"), *counts = list_attr("counts");
    if (src == nullptr || dst == nullptr || step == nullptr || counts == nullptr) {
      return Status();
    }
    const size_t rank = in0->size();
    if (src->size() != rank || dst->size() != rank || step->size() != rank ||
        counts->size() != rank || out0->size() != rank) {
      return fail("pad attributes do not have one entry per dimension");
    }
    for (size_t d = 0; d < rank; ++d) {
      const int64_t n = (*counts)[d];
      if (n < 0) return fail("attribute 'counts' holds ", n);
      if (n == 0) continue;
      const __int128 last_src = static_cast<__int128>((*src)[d]) + n - 1;
      const __int128 last_dst =
          static_cast<__int128>((*dst)[d]) + static_cast<__int128>(n - 1) * (*step)[d];
      if ((*src)[d] < 0 || last_src >= (*in0)[d] || (*dst)[d] < 0 || (*step)[d] < 1 ||
          last_dst >= (*out0)[d]) {
        return fail("pad window of dimension ", d, " is out of bounds of its operand or result");
      }
    }
    return Status();
  }
  return Status();
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
