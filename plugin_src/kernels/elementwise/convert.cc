// convert (element type conversion, any dtype to any dtype) and bitcast_convert.
//
// convert follows XLA:CPU, which is the reference the tests compare against:
//   * float -> integer truncates toward zero, saturates out of range and maps NaN to 0
//     (C++'s cast would be undefined behaviour);
//   * anything -> pred is `x != 0`;
//   * complex -> real (and pred) takes the real part; real -> complex has a zero
//     imaginary part;
//   * f16/bf16 are reached through f32 both ways (so f64 -> f16 rounds twice, as XLA's
//     does); kernels/math/half.h has the bit-exact rounding;
//   * f8/f4 types (kernels/math/minifloat.h) are decoded exactly (to f32, or f64 for f64 and
//     c128) and rounded from f32 (f16, bf16, c64, and integers, as XLA: they round twice)
//     or from f64 (f64, c128) or from the decoded value of another minifloat; -> pred
//     tests the bits.
// bitcast_convert reinterprets row-major bytes: the compiler checked the shapes, so the
// output aliases the operand.
#include <bit>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/elementwise/element_ops.h"
#include "kernels/math/minifloat.h"

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

// A minifloat's 256 values as f32 and f64 bits (exact), built once per format.
struct MiniTables {
  uint32_t f32[256];
  uint64_t f64[256];
};

const MiniTables& TablesOf(DType t) {
  static const auto* tables = [] {
    auto* all = new MiniTables[32];
    for (int code = 0; code < 32; ++code) {
      const minifloat::Format* f = minifloat::FormatOf(static_cast<DType>(code));
      if (f == nullptr) continue;
      const int count = 1 << (f->ebits + f->mbits + (minifloat::HasSign(*f) ? 1 : 0));
      for (int b = 0; b < 256; ++b) {
        const minifloat::Unpacked u = minifloat::Decode(*f, b < count ? b : 0);
        all[code].f32[b] = static_cast<uint32_t>(minifloat::Encode(minifloat::kF32, u));
        all[code].f64[b] = minifloat::Encode(minifloat::kF64, u);
      }
    }
    return all;
  }();
  return tables[static_cast<int>(t)];
}

// XLA:CPU turns a NaN from a 16- or 8-bit float into 0x7F in f8E5M2 and 0x8 in f4E2M1FN,
// whatever its sign (from f32/f64 it keeps ml_dtypes' sign rules).
inline uint8_t NarrowNan(DType to, uint32_t f32_bits, uint8_t converted) {
  if ((f32_bits & 0x7fffffffu) <= 0x7f800000u) return converted;
  if (to == DType::kF8E5M2) return 0x7F;
  if (to == DType::kF4E2M1FN) return 0x8;
  return converted;
}

// convert where the operand or the result is a minifloat.
template <typename Unsupported>
Status ConvertMinifloat(const Tensor& in, const Tensor& out, Unsupported unsupported) {
  const minifloat::Format* from = minifloat::FormatOf(in.dtype);
  const minifloat::Format* to = minifloat::FormatOf(out.dtype);
  const int64_t n = in.num_elements();
  if (from != nullptr) {
    const MiniTables& table = TablesOf(in.dtype);
    const uint8_t* src = in.as<uint8_t>();
    if (to != nullptr) {
      uint8_t* dst = out.as<uint8_t>();
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = NarrowNan(out.dtype, table.f32[src[i]],
                           static_cast<uint8_t>(minifloat::Encode(
                               *to, minifloat::Decode(minifloat::kF32, table.f32[src[i]]))));
      }
      return Status();
    }
    if (out.dtype == DType::kPred) {
      bool* dst = out.as<bool>();
      for (int64_t i = 0; i < n; ++i) dst[i] = (table.f32[src[i]] & 0x7fffffffu) != 0;
      return Status();
    }
    const bool wide = out.dtype == DType::kF64 || out.dtype == DType::kC128;
    return DispatchEvery(
        out.dtype,
        [&](auto to_tag) -> Status {
          using To = decltype(to_tag);
          To* __restrict dst = out.as<To>();
          for (int64_t i = 0; i < n; ++i) {
            if (wide) {
              dst[i] = ConvertElement<To>(std::bit_cast<double>(table.f64[src[i]]));
            } else {
              dst[i] = ConvertElement<To>(std::bit_cast<float>(table.f32[src[i]]));
            }
          }
          return Status();
        },
        unsupported);
  }
  uint8_t* dst = out.as<uint8_t>();
  return DispatchEvery(
      in.dtype,
      [&](auto from_tag) -> Status {
        using From = decltype(from_tag);
        const From* __restrict src = in.as<From>();
        for (int64_t i = 0; i < n; ++i) {
          if constexpr (!std::is_same_v<From, double> &&
                        !std::is_same_v<From, std::complex<double>>) {  // As XLA: via f32.
            float x;
            if constexpr (kIsHalf<From>) {
              x = ToFloat(src[i]);
            } else {
              x = ConvertElement<float>(src[i]);
            }
            const uint8_t r = static_cast<uint8_t>(minifloat::Encode(
                *to, minifloat::Decode(minifloat::kF32, std::bit_cast<uint32_t>(x))));
            dst[i] = kIsHalf<From> || out.dtype == DType::kF4E2M1FN
                         ? NarrowNan(out.dtype, std::bit_cast<uint32_t>(x), r)
                         : r;
          } else {
            const double x = ConvertElement<double>(src[i]);
            const uint8_t r = static_cast<uint8_t>(minifloat::Encode(
                *to, minifloat::Decode(minifloat::kF64, std::bit_cast<uint64_t>(x))));
            dst[i] = std::isnan(x) && out.dtype == DType::kF4E2M1FN ? 0x8 : r;
          }
        }
        return Status();
      },
      unsupported);
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
  if (minifloat::FormatOf(in.dtype) != nullptr || minifloat::FormatOf(out.dtype) != nullptr) {
    return ConvertMinifloat(in, out, unsupported);
  }
  // What every f16 op of a fusion runs twice: vector instructions where the CPU has them.
  if (in.dtype == DType::kF16 && out.dtype == DType::kF32) {
    HalfToFloat(in.as<Float16>(), out.as<float>(), in.num_elements());
    return Status();
  }
  if (in.dtype == DType::kF32 && out.dtype == DType::kF16) {
    FloatToHalf(in.as<float>(), out.as<Float16>(), in.num_elements());
    return Status();
  }
  if (in.dtype == DType::kBF16 && out.dtype == DType::kF32) {
    BFloat16ToFloat(in.as<BFloat16>(), out.as<float>(), in.num_elements());
    return Status();
  }
  if (in.dtype == DType::kF32 && out.dtype == DType::kBF16) {
    FloatToBFloat16(in.as<float>(), out.as<BFloat16>(), in.num_elements());
    return Status();
  }
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
