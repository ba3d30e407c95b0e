// Reading index operands (dynamic_slice starts, gather/scatter indices) of any integer dtype.
//
// Values widen to int64 saturating, so that a u64 index above INT64_MAX still compares
// greater than every limit: clamping and bounds checks then never see a wrapped value.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"

namespace workshop {

template <typename I>
int64_t IndexValue(I v) {
  static_assert(std::is_integral_v<I> && !std::is_same_v<I, bool>);
  if constexpr (std::is_unsigned_v<I> && sizeof(I) == sizeof(int64_t)) {
    constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
    return v > kMax ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(v);
  } else {
    return static_cast<int64_t>(v);
  }
}

// `v` clamped into [0, limit] (limit >= 0).
inline int64_t ClampIndex(int64_t v, int64_t limit) { return v < 0 ? 0 : (v > limit ? limit : v); }

// The value of a scalar integer tensor; INVALID_ARGUMENT naming `what` if `t` is not one.
inline Status ReadScalarIndex(const KernelContext& ctx, const Tensor& t, const char* what,
                              int64_t* value) {
  if (t.num_elements() != 1) {
    return InvalidArgument("workshop: ", ctx.instr.op, " expects a scalar ", what, ", got ",
                           ShapeString(t.dtype, *t.dims), " at ", ctx.instr.loc);
  }
  return DispatchInt(
      t.dtype,
      [&](auto tag) -> Status {
        *value = IndexValue(*t.as<decltype(tag)>());
        return Status();
      },
      [&] {
        return InvalidArgument("workshop: ", ctx.instr.op, " expects an integer ", what, ", got ",
                               DTypeName(t.dtype), " at ", ctx.instr.loc);
      });
}

}  // namespace workshop
