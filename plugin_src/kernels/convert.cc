// convert (element type conversion, any dtype to any dtype) and bitcast_convert.
//
// convert follows XLA:CPU, which is the reference the tests compare against:
//   * float -> integer truncates toward zero, saturates out of range and maps NaN to 0
//     (C++'s cast would be undefined behaviour);
//   * anything -> pred is `x != 0`;
//   * complex -> real (and pred) takes the real part; real -> complex has a zero
//     imaginary part;
//   * f16/bf16 are reached through f32 both ways (so f64 -> f16 rounds twice, as XLA's
//     does); kernels/half.h has the bit-exact rounding.
// bitcast_convert reinterprets row-major bytes: the compiler checked the shapes, so the
// output aliases the operand.
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/dispatch.h"
#include "kernels/element_ops.h"
#include "kernels/kernel.h"

namespace workshop {
namespace {

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <typename To>
To FromFloat(float x) {
  if constexpr (std::is_same_v<To, Float16>) {
    return ToFloat16(x);
  } else {
    return ToBFloat16(x);
  }
}

template <typename To, typename From>
To ConvertElement(From x) {
  if constexpr (kIsHalf<From> && std::is_same_v<To, bool>) {
    // On the bits: subnormal bf16 values are f32 subnormals, which the worker's
    // denormals-are-zero mode would compare equal to 0 (XLA:CPU keeps them true).
    return (x.bits & 0x7fffu) != 0;
  } else if constexpr (kIsHalf<From>) {
    return ConvertElement<To>(ToFloat(x));
  } else if constexpr (kIsHalf<To>) {
    return FromFloat<To>(ConvertElement<float>(x));
  } else if constexpr (kIsComplex<From>) {
    if constexpr (kIsComplex<To>) {
      return To(static_cast<typename To::value_type>(x.real()),
                static_cast<typename To::value_type>(x.imag()));
    } else {
      return ConvertElement<To>(x.real());
    }
  } else if constexpr (kIsComplex<To>) {
    return To(ConvertElement<typename To::value_type>(x), 0);
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (std::isnan(x)) return 0;
    if (x <= static_cast<From>(std::numeric_limits<To>::min())) {
      return std::numeric_limits<To>::min();
    }
    if (x >= static_cast<From>(std::numeric_limits<To>::max())) {
      return std::numeric_limits<To>::max();
    }
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

Status Convert(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const Tensor& out = ctx.outs[0];
  if (in.dtype == out.dtype) {
    std::memcpy(out.data, in.data, in.num_elements() * ByteWidth(in.dtype));
    return Status();
  }
  auto unsupported = [&] {
    return Unimplemented("workshop: convert from ", DTypeName(in.dtype), " to ",
                         DTypeName(out.dtype), " is not supported at ", ctx.instr.loc);
  };
  return DispatchEvery(
      in.dtype,
      [&](auto from_tag) -> Status {
        using From = decltype(from_tag);
        return DispatchEvery(
            out.dtype,
            [&](auto to_tag) -> Status {
              using To = decltype(to_tag);
              const From* __restrict src = in.as<From>();
              To* __restrict dst = out.as<To>();
              for (int64_t i = 0, n = in.num_elements(); i < n; ++i) {
                dst[i] = ConvertElement<To>(src[i]);
              }
              return Status();
            },
            unsupported);
      },
      unsupported);
}

// Only runs if the executor could not alias (it always can today): same bytes.
Status BitcastConvert(KernelContext& ctx) {
  std::memcpy(ctx.outs[0].data, ctx.ins[0].data,
              ctx.outs[0].num_elements() * ByteWidth(ctx.outs[0].dtype));
  return Status();
}

WORKSHOP_REGISTER_KERNEL("convert", Convert);
WORKSHOP_REGISTER_KERNEL("bitcast_convert", BitcastConvert, /*aliases_operand=*/true);

}  // namespace
}  // namespace workshop
