// What a kernel's check hook (KernelDef::check) uses to check the attributes it indexes
// memory with against the instruction's operand and result shapes.
//
// Why: a serialized executable that passes its checksum (or was crafted, and resealed)
// must still not make a kernel read or write out of bounds (a flipped iota `dim` overflowed
// the heap in kernels/shape.cc). Attributes that only change values (strides of a window
// whose result shape absorbs them, constants) cannot be told from a different valid
// program; the checksum catches those when they come from corruption. Every failure is
// INVALID_ARGUMENT, as the kernels' own checks of the same attributes at run time, and
// reads "workshop: <op> at <loc>: <what>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/core/kernel.h"

namespace workshop {

class AttrCheck {
 public:
  AttrCheck(const Plan& plan, const Instr& instr) : plan(plan), instr(instr) {}

  // INVALID_ARGUMENT "workshop: <op> at <loc>: " followed by `parts`.
  template <typename... Parts>
  Status Fail(const Parts&... parts) const {
    return InvalidArgument("workshop: ", instr.op, " at ", instr.loc, ": ", parts...);
  }

  // The dims of operand / result k, or null where the instruction has fewer.
  const Dims* In(size_t k) const { return DimsOf(instr.ins, k); }
  const Dims* Out(size_t k) const { return DimsOf(instr.outs, k); }

  // Attribute `key` as an integer / integer list, or null (absent, or of another kind).
  const int64_t* Int(const char* key) const;
  const IntList* List(const char* key) const;

  // Integer attribute `key`, where present, is an axis of a rank-`dims->size()` array
  // (OK when `dims` is null).
  Status Axis(const char* key, const Dims* dims) const;
  // Every entry of list attribute `key`, where present, is an axis of `dims`.
  Status Axes(const char* key, const Dims* dims) const;
  // List attribute `key`, where present, has one entry per dimension of `dims`, each at
  // least `min`.
  Status PerDim(const char* key, const Dims* dims, int64_t min) const;

  const Plan& plan;
  const Instr& instr;

 private:
  const Dims* DimsOf(const std::vector<int>& slots, size_t k) const {
    return k < slots.size() ? &plan.slots[slots[k]].dims : nullptr;
  }
};

// The check hook of the ops that run a body plan through the body's own parameter and
// result slots (fusion, jit_fusion, horizontal_fusion: kernels/fusion.cc; jit_block:
// kernels/codegen/jit_loop.cc): the body reads operands and writes results sized by its
// own slots, so each instruction slot must have its body slot's dtype and element count
// (a resealed mutation of an outer slot made the interpreted fusion read past an
// operand; found under ASan).
Status CheckBodySlots(const Plan& plan, const Instr& instr);

}  // namespace workshop
