#include <string>
#include <unordered_map>

#include "generated/op_table.h"
#include "kernels/kernel.h"

namespace workshop {
namespace {

// A function-local static, so registrations from other translation units' static
// initializers find it constructed whatever the initialization order.
std::unordered_map<std::string, KernelDef>& Registry() {
  static auto* registry = new std::unordered_map<std::string, KernelDef>();
  return *registry;
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
  if (info->typed_by == optable::TypedBy::kAny) return Status();
  const std::vector<int>& side = info->typed_by == optable::TypedBy::kIn ? instr.ins : instr.outs;
  if (static_cast<size_t>(info->typed_index) >= side.size()) {
    return Internal("workshop: '", instr.op, "' at ", instr.loc, " has no ",
                    info->typed_by == optable::TypedBy::kIn ? "operand " : "result ",
                    info->typed_index);
  }
  const DType dtype = slots[side[info->typed_index]].dtype;
  if (!((info->dtypes >> static_cast<int>(dtype)) & 1u)) {
    return Unimplemented("workshop: op '", instr.op, "' has no kernel for dtype ",
                         DTypeName(dtype), " at ", instr.loc);
  }
  return Status();
}

Status UnsupportedDType(const KernelContext& ctx, DType dtype) {
  return Unimplemented("workshop: op '", ctx.instr.op, "' has no kernel for dtype ",
                       DTypeName(dtype), " at ", ctx.instr.loc);
}

}  // namespace workshop

// For tests (ctypes): the table this build was generated from, and what registered.
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
