#include <unordered_map>

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

Status UnsupportedDType(const KernelContext& ctx, DType dtype) {
  return Unimplemented("workshop: op '", ctx.instr.op, "' has no kernel for dtype ",
                       DTypeName(dtype), " at ", ctx.instr.loc);
}

}  // namespace workshop
