#include <string>
#include <unordered_map>

#include "generated/op_table.h"
#include "kernels/core/kernel.h"

namespace workshop {
namespace {

// A function-local static, so registrations from other translation units' static
// initializers find it constructed whatever the initialization order.
std::unordered_map<std::string, KernelDef>& Registry() {
  static auto* registry = new std::unordered_map<std::string, KernelDef>();
  return *registry;
}

// Elementwise kernels read as many elements of each operand as the result has. The
// exceptions they implement: StableHLO's select takes a scalar predicate and clamp scalar
// bounds, and a scalar_operands kernel takes one of its two operands as one element
// (fusion.cc's broadcasts). A deserialized plan whose operand is smaller otherwise made
// a kernel read past it (an add in a while body, found by the resealed fuzzer under ASan).
Status CheckElementCounts(const Instr& instr, const std::vector<SlotType>& slots) {
  if (instr.outs.empty()) return Status();
  const int64_t n = NumElements(slots[instr.outs[0]].dims);
  for (int out : instr.outs) {
    if (NumElements(slots[out].dims) != n) {
      return InvalidArgument("workshop: '", instr.op, "' at ", instr.loc,
                             " has results of different sizes");
    }
  }
  int scalars = 0;
  for (size_t i = 0; i < instr.ins.size(); ++i) {
    const int64_t count = NumElements(slots[instr.ins[i]].dims);
    if (count == n) continue;
    const bool may_be_scalar = (instr.op == "select" && i == 0) ||
                               (instr.op == "clamp" && i != 1) ||
                               (instr.kernel != nullptr && instr.kernel->scalar_operands &&
                                instr.ins.size() == 2 && ++scalars == 1);
    if (count != 1 || !may_be_scalar) {
      return InvalidArgument("workshop: '", instr.op, "' at ", instr.loc, ": operand ", i, " has ",
                             count, " elements for a result of ", n);
    }
  }
  return Status();
}

}  // namespace

const KernelDef* FindKernel(const std::string& op) {
  auto it = Registry().find(op);
  return it == Registry().end() ? nullptr : &it->second;
}

KernelRegistration::KernelRegistration(const char* op, KernelDef def) {
  Registry().emplace(op, def);
}

Status CheckOpTable(const Instr& instr, const std::vector<SlotType>& slots) {
  const optable::OpInfo* info = optable::Find(instr.op);
  if (info == nullptr) {
    return Internal("workshop: kernel '", instr.op, "' at ", instr.loc,
                    " is missing from optable.py");
  }
  if (info->elementwise) WORKSHOP_RETURN_IF_ERROR(CheckElementCounts(instr, slots));
  if (info->typed_by == optable::TypedBy::kAny) return Status();
  const std::vector<int>& side = info->typed_by == optable::TypedBy::kIn ? instr.ins : instr.outs;
  if (static_cast<size_t>(info->typed_index) >= side.size()) {
    return Internal("workshop: '", instr.op, "' at ", instr.loc, " has no ",
                    info->typed_by == optable::TypedBy::kIn ? "operand " : "result ",
                    info->typed_index);
  }
  const DType dtype = slots[side[info->typed_index]].dtype;
  if (!((info->dtypes >> static_cast<int>(dtype)) & 1u)) {
    return Unimplemented("workshop: op '", instr.op, "' has no kernel for dtype ", DTypeName(dtype),
                         " at ", instr.loc);
  }
  return Status();
}

int SameTypeOperand(const std::string& op) {
  const optable::OpInfo* info = optable::Find(op);
  return info == nullptr ? -1 : info->same_type;
}

Status UnsupportedDType(const KernelContext& ctx, DType dtype) {
  return Unimplemented("workshop: op '", ctx.instr.op, "' has no kernel for dtype ",
                       DTypeName(dtype), " at ", ctx.instr.loc);
}

}  // namespace workshop

// For tests (ctypes): the table this build was generated from, what registered, and which
// registered kernels check their attributes when a plan is prepared.
extern "C" __attribute__((visibility("default"))) const char* WorkshopOpTableFingerprint() {
  return workshop::optable::kFingerprint;
}

extern "C" __attribute__((visibility("default"))) const char* WorkshopKernelNames() {
  static const std::string* names = [] {
    auto* s = new std::string();
    for (const auto& [name, def] : workshop::Registry()) *s += name + " ";
    return s;
  }();
  return names->c_str();
}

// The kernels with a check hook (KernelDef::check), for tests/hostile/test_attr_checks.py.
extern "C" __attribute__((visibility("default"))) const char* WorkshopCheckedKernelNames() {
  static const std::string* names = [] {
    auto* s = new std::string();
    for (const auto& [name, def] : workshop::Registry()) {
      if (def.check != nullptr) *s += name + " ";
    }
    return s;
  }();
  return names->c_str();
}
