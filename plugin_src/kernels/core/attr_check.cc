#include "kernels/core/attr_check.h"

#include <memory>
#include <variant>

namespace workshop {

const int64_t* AttrCheck::Int(const char* key) const {
  auto it = instr.attrs.find(key);
  return it == instr.attrs.end() ? nullptr : std::get_if<int64_t>(&it->second);
}

const IntList* AttrCheck::List(const char* key) const {
  auto it = instr.attrs.find(key);
  return it == instr.attrs.end() ? nullptr : std::get_if<IntList>(&it->second);
}

Status AttrCheck::Axis(const char* key, const Dims* dims) const {
  const int64_t* v = Int(key);
  if (v == nullptr || dims == nullptr) return Status();
  if (*v < 0 || *v >= static_cast<int64_t>(dims->size())) {
    return Fail("attribute '", key, "' = ", *v, " is not an axis of a rank-", dims->size(),
                " array");
  }
  return Status();
}

Status AttrCheck::Axes(const char* key, const Dims* dims) const {
  const IntList* v = List(key);
  if (v == nullptr || dims == nullptr) return Status();
  for (int64_t a : *v) {
    if (a < 0 || a >= static_cast<int64_t>(dims->size())) {
      return Fail("attribute '", key, "' holds ", a, ", not an axis of a rank-", dims->size(),
                  " array");
    }
  }
  return Status();
}

Status AttrCheck::PerDim(const char* key, const Dims* dims, int64_t min) const {
  const IntList* v = List(key);
  if (v == nullptr || dims == nullptr) return Status();
  if (v->size() != dims->size()) {
    return Fail("attribute '", key, "' has ", v->size(), " entries for a rank-", dims->size(),
                " array");
  }
  for (int64_t x : *v) {
    if (x < min) return Fail("attribute '", key, "' holds ", x, " (at least ", min, ")");
  }
  return Status();
}

Status CheckBodySlots(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  auto it = instr.attrs.find("body");
  const auto* body =
      it == instr.attrs.end() ? nullptr : std::get_if<std::shared_ptr<const Plan>>(&it->second);
  if (body == nullptr || *body == nullptr) return c.Fail("no body");
  const Plan& b = **body;
  if (b.params.size() != instr.ins.size() || b.results.size() != instr.outs.size()) {
    return c.Fail("a body of ", b.params.size(), " parameters and ", b.results.size(),
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
      return c.Fail("operand ", i, " is not of its body's parameter type");
    }
  }
  for (size_t i = 0; i < instr.outs.size(); ++i) {
    if (!same(instr.outs[i], b.results[i])) {
      return c.Fail("result ", i, " is not of its body's result type");
    }
  }
  return Status();
}

}  // namespace workshop
