// Elementwise kernels: unary and binary arithmetic, compare, select, clamp,
// reduce_precision.
//
// Dtypes: pred, integers, f32, f64 and (where the op is defined on them) c64/c128; the
// compiler computes f16/bf16 math in f32 and converts around these kernels, so only the
// byte-moving select and the bit-level reduce_precision see 16-bit floats.
//
// StableHLO elementwise ops take operands of identical shape (broadcasting is an explicit
// broadcast_in_dim), so every kernel is one flat loop over the elements; with __restrict
// pointers and simple bodies GCC vectorizes them at -O3. Integer corner cases follow XLA's
// semantics rather than C++'s undefined behaviour: x / 0 = -1 (all bits set), x % 0 = x,
// INT_MIN / -1 = INT_MIN, and shifts by >= the bit width saturate.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "kernels/core/attr_check.h"
#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/elementwise/element_ops.h"
#include "kernels/math/complex_math.h"
#include "kernels/math/simd.h"
#include "kernels/math/tanh_f32.h"
#include "kernels/math/vector_math.h"

namespace workshop {
namespace {

// The flat loops of the hot unary and binary kernels, compiled twice: for the baseline
// x86-64 the plugin is built for (SSE2) and for AVX2, which doubles the lanes per
// instruction. The dynamic loader picks one per CPU (GCC target_clones: an ifunc), so the
// wheel stays portable. Operations the loop calls out of line (libm) stay baseline.
template <typename Op, typename T>
WORKSHOP_SIMD_CLONES void UnaryLoop(const T* __restrict in, T* __restrict out, int64_t n) {
  Op op;
  for (int64_t i = 0; i < n; ++i) out[i] = op(in[i]);
}

template <typename Op, typename T>
WORKSHOP_SIMD_CLONES void BinaryLoop(const T* __restrict a, const T* __restrict b,
                                     T* __restrict out, int64_t n) {
  Op op;
  for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
}

// One operand a single value (KernelDef::scalar_operands). It is passed by pointer and
// read once: a by-value T would change the clones' ABI for vector-sized T.
template <typename Op, typename T>
WORKSHOP_SIMD_CLONES void BinaryLoopScalarA(const T* a, const T* __restrict b, T* __restrict out,
                                            int64_t n) {
  Op op;
  const T value = *a;
  for (int64_t i = 0; i < n; ++i) out[i] = op(value, b[i]);
}

template <typename Op, typename T>
WORKSHOP_SIMD_CLONES void BinaryLoopScalarB(const T* __restrict a, const T* b, T* __restrict out,
                                            int64_t n) {
  Op op;
  const T value = *b;
  for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], value);
}

// The loops above when the output is one of the operands (a donated parameter written over:
// KernelDef::writes_over_operands, runtime/executor.cc): without __restrict, which would
// then be false. Element i is read before it is written, and nothing else reads it again.
// A one-element operand (`a_step`/`b_step` 0) is read once, before any write.
template <typename Op, typename T>
WORKSHOP_SIMD_CLONES void BinaryLoopInPlace(const T* a, int64_t a_step, const T* b, int64_t b_step,
                                            T* out, int64_t n) {
  Op op;
  if (a_step == 0) {
    const T value = *a;
    for (int64_t i = 0; i < n; ++i) out[i] = op(value, b[i]);
  } else if (b_step == 0) {
    const T value = *b;
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], value);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  }
}

// Complex products and quotients: XlaComplexMultiply and XlaComplexDivide contract as
// XLA:CPU's LLVM does, with std::fma, which baseline x86-64 (and the "avx2" clone above)
// has no instruction for: there each fma is a libm call (x * x + x on 512x512 c64 took
// 1.1 ms, XLA:CPU 0.065). The x86-64-v3 clone has the instruction; fma's bits either way,
// and their other products (of 0 or +-1 in the infinite cases) are exact, so contracting
// them changes nothing. Operand steps as BinaryLoopInPlace's (0: one element), no
// __restrict: the output may be an operand.
template <typename Op, typename T>
WORKSHOP_SIMD_CLONES_FMA void ComplexBinaryLoop(const T* a, int64_t a_step, const T* b,
                                                int64_t b_step, T* out, int64_t n) {
  Op op;
  if (a_step == 0) {
    const T value = *a;
    for (int64_t i = 0; i < n; ++i) out[i] = op(value, b[i * b_step]);
  } else if (b_step == 0) {
    const T value = *b;
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], value);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  }
}

// ---- Unary ops: `Supports<T>` says which dtypes, `operator()` computes one element. ----

// On the bits for f32 and f64: under the DAZ mode kernels run in, a subnormal compares
// equal to 0, so a comparison never finds one. (16-bit floats are compared after widening
// to f32, where their subnormals are normal numbers.)
template <typename T>
bool IsSubnormal(T x) {
  if constexpr (std::is_same_v<T, float>) {
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    return (bits & 0x7f800000u) == 0 && (bits & 0x007fffffu) != 0;
  } else if constexpr (std::is_same_v<T, double>) {
    const uint64_t bits = std::bit_cast<uint64_t>(x);
    return (bits & 0x7ff0000000000000ull) == 0 && (bits & 0x000fffffffffffffull) != 0;
  } else if constexpr (kIsFloat<T>) {
    return x != 0 && std::fabs(x) < std::numeric_limits<T>::min();
  } else {
    return false;
  }
}

template <typename T>
T TanOf(T x) {
  if constexpr (kIsComplex<T>) {
    return XlaComplexTan(x);
  } else {
    return IsSubnormal(x) ? x : std::tan(x);
  }
}

template <typename T>
T TanhOf(T x) {
  if constexpr (kIsComplex<T>) {
    return XlaComplexTanh(x);
  } else {
    return IsSubnormal(x) ? x : std::tanh(x);
  }
}

WORKSHOP_UNARY(Negate, "negate", static_cast<T>(-x))
WORKSHOP_UNARY(Floor, "floor", std::floor(x))
WORKSHOP_UNARY(Ceil, "ceil", std::ceil(x))
WORKSHOP_UNARY(RoundNearestAfz, "round_nearest_afz", std::round(x))
// nearbyint rounds half to even in the default floating-point environment.
WORKSHOP_UNARY(RoundNearestEven, "round_nearest_even", std::nearbyint(x))
WORKSHOP_UNARY(Sqrt, "sqrt", std::sqrt(x))
WORKSHOP_UNARY(Rsqrt, "rsqrt", T(1) / std::sqrt(x))
WORKSHOP_UNARY(Cbrt, "cbrt", std::cbrt(x))
WORKSHOP_UNARY(Exp, "exponential", std::exp(x))
WORKSHOP_UNARY(Log, "log", std::log(x))
WORKSHOP_UNARY(Logistic, "logistic", T(1) / (T(1) + std::exp(-x)))
// sin, tan and tanh are x for subnormal x (as on XLA:CPU); libm would flush them to 0
// under the workers' FTZ mode.
WORKSHOP_UNARY(Sine, "sine", IsSubnormal(x) ? x : std::sin(x))
WORKSHOP_UNARY(Cosine, "cosine", std::cos(x))
// Complex tan and tanh are XLA's expansions (complex_math.h): libstdc++'s differ at the
// edges of the plane (tan(inf + 0i) is (NaN, NaN) on XLA:CPU, (NaN, 0) in libm).
WORKSHOP_UNARY(Tan, "tan", TanOf(x))
WORKSHOP_UNARY(Tanh, "tanh", TanhOf(x))
WORKSHOP_UNARY(Popcnt, "popcnt",
               static_cast<T>(std::popcount(static_cast<std::make_unsigned_t<T>>(x))))
WORKSHOP_UNARY(CountLeadingZeros, "count_leading_zeros",
               static_cast<T>(std::countl_zero(static_cast<std::make_unsigned_t<T>>(x))))
#undef WORKSHOP_UNARY

// Real abs (complex abs changes the dtype: AbsKernel). fabs also clears the sign of -0.
// Its dtypes are the table's "abs" minus complex, which AbsKernel handles apart.
struct Abs {
  template <typename T>
  static constexpr bool kSupports = kIsNumeric<T> && optable::Supports<T>("abs");
  template <typename T>
  T operator()(T x) const {
    if constexpr (kIsFloat<T>) {
      return std::fabs(x);
    } else {
      return IsNegative(x) ? static_cast<T>(-x) : x;
    }
  }
};

// sign: -1, 0 or 1 for integers; for floats +-1, and +-0 and NaN unchanged; z / |z| for
// complex (0 for 0).
struct Sign {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("sign");
  template <typename T>
  T operator()(T x) const {
    if constexpr (kIsComplex<T>) {
      return x == T(0) ? x : x / std::abs(x);
    } else if constexpr (kIsFloat<T>) {
      // x == 0 also holds for subnormals (DAZ): they give a signed zero.
      return x != x ? x : std::copysign(x == T(0) ? T(0) : T(1), x);
    } else {
      return static_cast<T>((T(0) < x) - IsNegative(x));
    }
  }
};

// expm1 and log1p keep their precision near 0 for complex too:
//   exp(x + iy) - 1 = (expm1(x) cos y - 2 sin^2(y/2)) + i exp(x) sin y (XLA's, with its
//                     zero imaginary part for y == 0: complex_math.h)
//   log(1 + z)      = log|1 + z| + i atan2(y, 1 + x), with log|1 + z| = log1p(2x + x^2 + y^2)/2
// for small |z| (where |1 + z| would round to 1).
struct Expm1 {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("exponential_minus_one");
  template <typename T>
  T operator()(T z) const {
    if constexpr (kIsComplex<T>) {
      return XlaComplexExpm1(z);
    } else {
      return std::expm1(z);
    }
  }
};

struct Log1p {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("log_plus_one");
  template <typename T>
  T operator()(T z) const {
    if constexpr (kIsComplex<T>) {
      const auto x = z.real(), y = z.imag();
      const auto magnitude =
          std::abs(z) < 0.5 ? std::log1p(x * (2 + x) + y * y) / 2 : std::log(std::abs(T(1) + z));
      return T(magnitude, std::atan2(y, 1 + x));
    } else {
      return std::log1p(z);
    }
  }
};

// `not` is logical on pred and bitwise on integers.
struct Not {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("not");
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return !x;
    } else {
      return static_cast<T>(~x);
    }
  }
};

// Kernels run with the FPU flushing subnormals (FTZ/DAZ, set by the device worker, as on
// XLA:CPU), so arithmetic treats subnormal operands and results as zero like XLA:CPU. The
// rounding ops come from libm as integer bit manipulation, which the FPU mode doesn't
// reach: flush their operands explicitly (floor(-1e-40) is -0, not -1, on XLA:CPU).
// Transcendentals of subnormals are whatever libm gives under FTZ/DAZ; XLA:CPU is not
// consistent there either (its log(5e-39) is -inf or -103.97 depending on the program).
template <typename T>
T FlushSubnormal(T x) {
  return std::fabs(x) < std::numeric_limits<T>::min() ? std::copysign(T(0), x) : x;
}

template <typename Op>
constexpr bool kFlushesOperands =
    std::is_same_v<Op, Floor> || std::is_same_v<Op, Ceil> || std::is_same_v<Op, RoundNearestAfz> ||
    std::is_same_v<Op, RoundNearestEven>;

// The ops with a vector version (vector_math.h: libmvec's, or for f32 exp and logistic our
// exp_f32.h; f32 tanh has its own loop, tanh_f32.h, called below), and whether the op passes
// subnormal inputs through (sin, tanh: as XLA:CPU does, see above), which the vector code
// under DAZ would not. (tan stays scalar: libmvec's flushes tan(FLT_MIN).)
template <typename Op>
constexpr std::optional<VectorFn> kVectorFn =
    std::is_same_v<Op, Exp>        ? std::optional(VectorFn::kExp)
    : std::is_same_v<Op, Expm1>    ? std::optional(VectorFn::kExpm1)
    : std::is_same_v<Op, Log>      ? std::optional(VectorFn::kLog)
    : std::is_same_v<Op, Log1p>    ? std::optional(VectorFn::kLog1p)
    : std::is_same_v<Op, Logistic> ? std::optional(VectorFn::kLogistic)
    : std::is_same_v<Op, Sine>     ? std::optional(VectorFn::kSin)
    : std::is_same_v<Op, Cosine>   ? std::optional(VectorFn::kCos)
    : std::is_same_v<Op, Tanh>     ? std::optional(VectorFn::kTanh)
                                   : std::nullopt;
template <typename Op>
constexpr bool kKeepsSubnormals = std::is_same_v<Op, Sine> || std::is_same_v<Op, Tanh>;

// out[i] = in[i] where in[i] is subnormal (sin, tanh of a subnormal is itself, as on XLA:CPU).
template <typename T>
WORKSHOP_SIMD_CLONES void KeepSubnormals(const T* __restrict in, T* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = IsSubnormal(in[i]) ? in[i] : out[i];
}

template <typename Op>
Status Unary(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  return DispatchAllOrComplex(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        if constexpr (Op::template kSupports<T>) {
          const T* __restrict in = x.as<T>();
          T* __restrict out = ctx.outs[0].as<T>();
          const int64_t n = x.num_elements();
          Op op;
          if constexpr (kIsFloat<T> && kFlushesOperands<Op>) {
            for (int64_t i = 0; i < n; ++i) out[i] = op(FlushSubnormal(in[i]));
          } else if constexpr (std::is_same_v<Op, Tanh> && std::is_same_v<T, float>) {
            TanhF32(in, out, n);  // Keeps subnormals itself.
          } else if constexpr ((std::is_same_v<T, float> || std::is_same_v<T, double>) &&
                               kVectorFn<Op>.has_value()) {
            VectorMap(*kVectorFn<Op>, in, out, n);
            if constexpr (kKeepsSubnormals<Op>) KeepSubnormals(in, out, n);
          } else {
            UnaryLoop<Op>(in, out, n);
          }
          return Status();
        } else {
          return UnsupportedDType(ctx, x.dtype);
        }
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

// abs of a complex number is real: c64 -> f32, c128 -> f64.
Status AbsKernel(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  return DispatchComplex(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        using R = typename T::value_type;
        const T* __restrict in = x.as<T>();
        R* __restrict out = ctx.outs[0].as<R>();
        for (int64_t i = 0, n = x.num_elements(); i < n; ++i) out[i] = std::abs(in[i]);
        return Status();
      },
      [&] { return Unary<Abs>(ctx); });
}

// is_finite: float in, pred out.
Status IsFinite(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  return DispatchFloat(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        const T* __restrict in = x.as<T>();
        bool* __restrict out = ctx.outs[0].as<bool>();
        for (int64_t i = 0, n = x.num_elements(); i < n; ++i) out[i] = std::isfinite(in[i]);
        return Status();
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

// ---- Binary ops. ----

// Integer quotients of 8- to 32-bit integers go through double division, which x86 has as
// a vector instruction where integer division is scalar (20-40 cycles each): the loops stay
// branch-free and vectorize, 5-8x faster than one idiv per element. Exact: for |x| < 2^32
// the rounding error of x / y is at most 2^-21 / |y|, less than the 1 / |y| that
// separates a non-integer quotient from the integers around it, so truncation gives the
// integer quotient. The divisors 0 and -1 (the cases XLA defines apart) are replaced by 1
// before dividing and their results selected after, so no conversion overflows.
template <typename T>
constexpr bool kQuotientThroughDouble = kIsInt<T> && sizeof(T) <= 4;

// trunc(x / y) for y not 0 (and not -1 for signed T), computed in double.
template <typename T>
T TruncatedQuotient(T x, T y) {
  if constexpr (std::is_signed_v<T> || sizeof(T) < 4) {
    return static_cast<T>(static_cast<int32_t>(static_cast<double>(x) / static_cast<double>(y)));
  } else {
    // uint32 has no vector conversions with double before AVX-512: in, the bits under
    // 2^52's exponent; out, quotients from 2^31 shifted into int32's range (exactly: both
    // in [2^31, 2^32)) and the bit put back. Masks instead of selects, which GCC does not
    // vectorize here.
    auto to_double = [](uint32_t v) {
      return std::bit_cast<double>(uint64_t{0x4330000000000000} | v) - 4503599627370496.0;
    };
    const double q = to_double(x) / to_double(y);
    const uint32_t high = static_cast<uint32_t>(q >= 2147483648.0);
    const auto t = static_cast<int32_t>(q - 2147483648.0 * high);
    return static_cast<T>(static_cast<uint32_t>(t) | (high << 31));
  }
}

struct Divide {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("divide");
  template <typename T>
  T operator()(T x, T y) const {
    if constexpr (kQuotientThroughDouble<T> && std::is_unsigned_v<T>) {
      // Masks, not selects: the uint32 loop vectorizes only so.
      const T zero = static_cast<T>(0) - static_cast<T>(y == 0);
      return static_cast<T>(TruncatedQuotient(x, static_cast<T>(y | (y == 0))) | zero);
    } else if constexpr (kQuotientThroughDouble<T>) {
      using U = std::make_unsigned_t<T>;
      const bool zero = y == 0;
      bool minus_one = false;
      if constexpr (std::is_signed_v<T>) minus_one = y == static_cast<T>(-1);
      const T q = TruncatedQuotient(x, zero || minus_one ? T(1) : y);
      // x / -1 is -x modulo 2^bits: INT_MIN / -1 = INT_MIN.
      const T negated = static_cast<T>(static_cast<U>(0) - static_cast<U>(x));
      return zero ? static_cast<T>(-1) : minus_one ? negated : q;
    } else if constexpr (kIsInt<T>) {
      if (y == 0) return static_cast<T>(-1);
      if constexpr (std::is_signed_v<T>) {
        if (x == std::numeric_limits<T>::min() && y == -1) return x;
      }
    } else if constexpr (kIsComplex<T>) {
      return XlaComplexDivide(x, y);  // XLA's Smith's algorithm and limits.
    }
    return static_cast<T>(x / y);
  }
};

struct Remainder {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("remainder");
  template <typename T>
  T operator()(T x, T y) const {
    if constexpr (kQuotientThroughDouble<T> && std::is_unsigned_v<T>) {
      const T zero = static_cast<T>(0) - static_cast<T>(y == 0);
      const T d = static_cast<T>(y | (y == 0));
      const T r = static_cast<T>(x - static_cast<T>(TruncatedQuotient(x, d) * d));
      return static_cast<T>((r & static_cast<T>(~zero)) | (x & zero));
    } else if constexpr (kQuotientThroughDouble<T>) {
      using U = std::make_unsigned_t<T>;
      const bool zero = y == 0;
      bool minus_one = false;
      if constexpr (std::is_signed_v<T>) minus_one = y == static_cast<T>(-1);
      const T d = zero || minus_one ? T(1) : y;
      // x - trunc(x / y) * y, exact modulo 2^bits: C's truncated remainder.
      const T r = static_cast<T>(
          static_cast<U>(x) -
          static_cast<U>(static_cast<U>(TruncatedQuotient(x, d)) * static_cast<U>(d)));
      return zero ? x : minus_one ? T(0) : r;
    } else if constexpr (kIsInt<T>) {
      if (y == 0) return x;
      if constexpr (std::is_signed_v<T>) {
        if (y == -1) return 0;
      }
      return static_cast<T>(x % y);
    } else {
      return std::fmod(x, y);
    }
  }
};

// Integer power is exact modulo 2^bits (exponentiation by squaring over every exponent
// bit, as the StableHLO spec and its interpreter define it; XLA:CPU only looks at the low
// 6 exponent bits). Negative exponents: 1 for x == 1, +-1 by parity for x == -1, else 0.
// Complex 0^y is 1 for y == 0, 0 for real y > 0 and NaN otherwise, as in XLA.
struct Power {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("power");
  template <typename T>
  T operator()(T x, T y) const {
    if constexpr (kIsComplex<T>) {
      if (x == T(0)) {
        if (y == T(0)) return T(1);
        if (y.imag() == 0 && y.real() > 0) return T(0);
        return T(std::numeric_limits<typename T::value_type>::quiet_NaN(),
                 std::numeric_limits<typename T::value_type>::quiet_NaN());
      }
      return std::pow(x, y);
    } else if constexpr (kIsFloat<T>) {
      return std::pow(x, y);
    } else {
      if constexpr (std::is_signed_v<T>) {
        if (y < 0) return x == 1 ? T(1) : x == -1 ? ((y & 1) ? T(-1) : T(1)) : T(0);
      }
      using U = std::make_unsigned_t<T>;
      U base = static_cast<U>(x), result = 1;
      for (auto e = static_cast<U>(y); e != 0; e >>= 1) {
        if (e & 1) result = static_cast<U>(result * base);
        base = static_cast<U>(base * base);
      }
      return static_cast<T>(result);
    }
  }
};

struct ShiftLeft {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("shift_left");
  template <typename T>
  T operator()(T x, T y) const {
    using U = std::make_unsigned_t<T>;
    if (static_cast<U>(y) >= sizeof(T) * 8) return 0;
    return static_cast<T>(static_cast<U>(x) << static_cast<U>(y));
  }
};

struct ShiftRightLogical {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("shift_right_logical");
  template <typename T>
  T operator()(T x, T y) const {
    using U = std::make_unsigned_t<T>;
    if (static_cast<U>(y) >= sizeof(T) * 8) return 0;
    return static_cast<T>(static_cast<U>(x) >> static_cast<U>(y));
  }
};

struct ShiftRightArithmetic {
  template <typename T>
  static constexpr bool kSupports = optable::Supports<T>("shift_right_arithmetic");
  template <typename T>
  T operator()(T x, T y) const {
    using S = std::make_signed_t<T>;
    using U = std::make_unsigned_t<T>;
    const U shift = std::min<U>(static_cast<U>(y), sizeof(T) * 8 - 1);
    return static_cast<T>(static_cast<S>(x) >> shift);
  }
};

// x op y elementwise. Either operand may also be a single element against n in the
// other and in the result (scalar_operands: fusion.cc's scalar and per-row broadcasts).
template <typename Op>
Status Binary(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  const Tensor& y = ctx.ins[1];
  return DispatchAllOrComplex(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        if constexpr (Op::template kSupports<T>) {
          T* const out = ctx.outs[0].as<T>();
          const int64_t n = ctx.outs[0].num_elements();
          const bool x_full = x.num_elements() == n, y_full = y.num_elements() == n;
          constexpr bool kFused =
              kIsComplex<T> && (std::is_same_v<Op, Multiply> || std::is_same_v<Op, Divide>);
          if (kFused && (x_full || y_full) && (x_full || x.num_elements() == 1) &&
              (y_full || y.num_elements() == 1)) {
            ComplexBinaryLoop<Op>(x.as<T>(), x_full ? 1 : 0, y.as<T>(), y_full ? 1 : 0, out, n);
          } else if ((out == x.as<T>() || out == y.as<T>()) && (x_full || y_full) &&
                     (x_full || x.num_elements() == 1) && (y_full || y.num_elements() == 1)) {
            BinaryLoopInPlace<Op>(x.as<T>(), x_full ? 1 : 0, y.as<T>(), y_full ? 1 : 0, out, n);
          } else if (x_full && y_full) {
            BinaryLoop<Op>(x.as<T>(), y.as<T>(), out, n);
          } else if (y.num_elements() == 1 && x.num_elements() == n) {
            BinaryLoopScalarB<Op>(x.as<T>(), y.as<T>(), out, n);
          } else if (x.num_elements() == 1 && y.num_elements() == n) {
            BinaryLoopScalarA<Op>(x.as<T>(), y.as<T>(), out, n);
          } else {  // CheckOpTable refuses such plans when they are prepared
            return InvalidArgument("workshop: ", ctx.instr.op, " at ", ctx.instr.loc,
                                   ": operands of ", x.num_elements(), " and ", y.num_elements(),
                                   " elements for a result of ", n);
          }
          return Status();
        } else {
          return UnsupportedDType(ctx, x.dtype);
        }
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

// ---- compare: any dtype in, pred out. ----

template <typename T, typename Cmp>
WORKSHOP_SIMD_CLONES void CompareLoop(const T* __restrict a, const T* __restrict b,
                                      bool* __restrict out, int64_t n, Cmp cmp) {
  for (int64_t i = 0; i < n; ++i) out[i] = cmp(a[i], b[i]);
}

// TOTALORDER compares floats by the IEEE-754 totalOrder predicate: -NaN < -inf < ... <
// -0 < +0 < ... < +inf < +NaN. Mapping the bits to a signed integer that sorts the same
// way (flip the magnitude bits of negatives) turns it into an integer comparison.
template <typename T>
auto TotalOrderKey(T x) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  I bits = std::bit_cast<I>(x);
  return bits < 0 ? static_cast<I>(bits ^ std::numeric_limits<I>::max()) : bits;
}

Status Compare(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  const std::string& direction = ctx.instr.attr<std::string>("direction");
  const std::string& type = ctx.instr.attr<std::string>("compare_type");
  auto bad_direction = [&] {
    return InvalidArgument("workshop: comparison direction '", direction, "' on ",
                           DTypeName(x.dtype), " is not supported at ", ctx.instr.loc);
  };
  return DispatchAllOrComplex(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        const T* a = x.as<T>();
        const T* b = ctx.ins[1].as<T>();
        bool* out = ctx.outs[0].as<bool>();
        const int64_t n = x.num_elements();
        auto run = [&](auto key) -> Status {
          if (direction == "EQ") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) == key(q); });
          } else if (direction == "NE") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) != key(q); });
          } else if constexpr (kIsComplex<T>) {
            return bad_direction();  // Complex numbers are not ordered.
          } else if (direction == "LT") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) < key(q); });
          } else if (direction == "LE") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) <= key(q); });
          } else if (direction == "GT") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) > key(q); });
          } else if (direction == "GE") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) >= key(q); });
          } else {
            return bad_direction();
          }
          return Status();
        };
        if constexpr (kIsFloat<T>) {
          if (type == "TOTALORDER") return run([](T v) { return TotalOrderKey(v); });
        }
        return run([](T v) { return v; });
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

// ---- reduce_precision: rounds a float to `mantissa_bits` and the range of
// `exponent_bits`, as XLA does it, on the bits of the source type U (so f16/bf16 need no
// f32 detour): round the mantissa to nearest even; then values above the reduced range
// become +-inf and values at or below its smallest normal exponent become +-0 (the
// reduced format has no subnormals). A NaN stays the input NaN (rounding could otherwise
// carry its mantissa into the exponent), except that with no mantissa bits left there is
// no NaN to round to and it becomes inf, as the StableHLO interpreter specifies (XLA:CPU's
// constant folder agrees; its compiled kernels keep the NaN).

template <typename U>
void ReducePrecisionLoop(const U* __restrict in, U* __restrict out, int64_t n,
                         int src_mantissa_bits, int exponent_bits, int mantissa_bits) {
  constexpr int kBits = sizeof(U) * 8;
  const int src_exponent_bits = kBits - 1 - src_mantissa_bits;
  const U sign_mask = U(1) << (kBits - 1);
  const U exp_mask = static_cast<U>(((U(1) << src_exponent_bits) - 1) << src_mantissa_bits);
  const bool round_mantissa = mantissa_bits < src_mantissa_bits;
  const int dropped = round_mantissa ? src_mantissa_bits - mantissa_bits : 0;
  const U last_kept = U(1) << dropped;
  const U truncation_mask = static_cast<U>(~(last_kept - 1));
  const bool reduce_exponent = exponent_bits < src_exponent_bits;
  const U bias = (U(1) << (src_exponent_bits - 1)) - 1;
  const U reduced_bias = (U(1) << (std::max(exponent_bits, 1) - 1)) - 1;
  const U max_exponent = static_cast<U>((bias + reduced_bias) << src_mantissa_bits);
  const U min_exponent = static_cast<U>((bias - reduced_bias) << src_mantissa_bits);
  for (int64_t i = 0; i < n; ++i) {
    const U x = in[i];
    U r = x;
    if (round_mantissa) {
      const U bias_to_even = static_cast<U>((last_kept >> 1) - 1 + ((x >> dropped) & 1));
      r = static_cast<U>((r + bias_to_even) & truncation_mask);
    }
    if (reduce_exponent) {
      const U exponent = r & exp_mask;
      const U signed_zero = r & sign_mask;
      if (exponent > max_exponent) r = signed_zero | exp_mask;
      if (exponent <= min_exponent) r = signed_zero;
    }
    if ((x & ~sign_mask) > exp_mask) r = mantissa_bits > 0 ? x : (x & sign_mask) | exp_mask;
    out[i] = r;
  }
}

Status ReducePrecision(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  const int exponent_bits = static_cast<int>(ctx.instr.attr<int64_t>("exponent_bits"));
  const int mantissa_bits = static_cast<int>(ctx.instr.attr<int64_t>("mantissa_bits"));
  if (exponent_bits < 1 || mantissa_bits < 0) {
    return InvalidArgument("workshop: reduce_precision to ", exponent_bits, " exponent and ",
                           mantissa_bits, " mantissa bits at ", ctx.instr.loc);
  }
  auto run = [&](auto zero, int src_mantissa_bits) {
    using U = decltype(zero);
    ReducePrecisionLoop(x.as<U>(), ctx.outs[0].as<U>(), x.num_elements(), src_mantissa_bits,
                        exponent_bits, mantissa_bits);
    return Status();
  };
  switch (x.dtype) {
    case DType::kF16: return run(uint16_t{}, 10);
    case DType::kBF16: return run(uint16_t{}, 7);
    case DType::kF32: return run(uint32_t{}, 23);
    case DType::kF64: return run(uint64_t{}, 52);
    default: return UnsupportedDType(ctx, x.dtype);
  }
}

// ---- select(pred, on_true, on_false) and clamp(min, x, max); pred/min/max may be scalar.
// Operands are read by element width only, so one loop serves every dtype.

// Selects with a bit mask built from the pred byte, so the loop has no branch and no
// conditional load and GCC vectorizes it (as a ternary, it keeps a branch per element).
// T is an unsigned integer of the element width, or a 16-byte type selected by value.
// The pred bytes (0 or 1) are read as uint8_t: GCC does not vectorize the loop on bools.
template <typename T>
WORKSHOP_SIMD_CLONES void SelectLoop(const uint8_t* __restrict p, const T* __restrict on_true,
                                     const T* __restrict on_false, T* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_unsigned_v<T>) {
      const T mask = static_cast<T>(T(0) - T(p[i]));
      out[i] = static_cast<T>((on_true[i] & mask) | (on_false[i] & static_cast<T>(~mask)));
    } else {
      out[i] = p[i] ? on_true[i] : on_false[i];
    }
  }
}

template <typename T>
Status SelectKernel(const KernelContext& ctx) {
  const Tensor& pred = ctx.ins[0];
  const T* on_true = ctx.ins[1].as<T>();
  const T* on_false = ctx.ins[2].as<T>();
  T* out = ctx.outs[0].as<T>();
  const bool* p = pred.as<bool>();
  const int64_t n = ctx.outs[0].num_elements();
  if (pred.num_elements() == 1 && n != 1) {
    std::copy_n(p[0] ? on_true : on_false, n, out);
  } else {
    SelectLoop(reinterpret_cast<const uint8_t*>(p), on_true, on_false, out, n);
  }
  return Status();
}

Status Select(KernelContext& ctx) {
  switch (ByteWidth(ctx.outs[0].dtype)) {
    case 1: return SelectKernel<uint8_t>(ctx);
    case 2: return SelectKernel<uint16_t>(ctx);
    case 4: return SelectKernel<uint32_t>(ctx);
    case 8: return SelectKernel<uint64_t>(ctx);
    case 16: return SelectKernel<std::complex<double>>(ctx);  // Any 16-byte trivial type.
    default: return UnsupportedDType(ctx, ctx.outs[0].dtype);
  }
}

// min(max(lo, x), hi): the operand order decides between +0 and -0, as in XLA. lo and hi
// are either scalars (kScalarBounds) or full arrays.
template <bool kScalarBounds, typename T>
WORKSHOP_SIMD_CLONES void ClampLoop(const T* __restrict lo, const T* __restrict in,
                                    const T* __restrict hi, T* __restrict out, int64_t n) {
  Maximum max;
  Minimum min;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = kScalarBounds ? 0 : i;
    out[i] = min(max(lo[b], in[i]), hi[b]);
  }
}

Status Clamp(KernelContext& ctx) {
  const Tensor& x = ctx.ins[1];
  return DispatchNumeric(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        const T* lo = ctx.ins[0].as<T>();
        const T* in = x.as<T>();
        const T* hi = ctx.ins[2].as<T>();
        T* out = ctx.outs[0].as<T>();
        const int64_t n = x.num_elements();
        const bool lo_scalar = ctx.ins[0].num_elements() == 1;
        const bool hi_scalar = ctx.ins[2].num_elements() == 1;
        if (lo_scalar == hi_scalar) {
          (lo_scalar ? ClampLoop<true, T> : ClampLoop<false, T>)(lo, in, hi, out, n);
          return Status();
        }
        // Mixed: broadcast the scalar bound into a full one, a chunk at a time.
        constexpr int64_t kChunk = 1024;
        T bound[kChunk];
        std::fill(bound, bound + kChunk, lo_scalar ? lo[0] : hi[0]);
        for (int64_t i = 0; i < n; i += kChunk) {
          ClampLoop<false, T>(lo_scalar ? bound : lo + i, in + i, hi_scalar ? bound : hi + i,
                              out + i, std::min(kChunk, n - i));
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

WORKSHOP_REGISTER_KERNEL("negate", Unary<Negate>);
WORKSHOP_REGISTER_KERNEL("abs", AbsKernel);
WORKSHOP_REGISTER_KERNEL("sign", Unary<Sign>);
WORKSHOP_REGISTER_KERNEL("floor", Unary<Floor>);
WORKSHOP_REGISTER_KERNEL("ceil", Unary<Ceil>);
WORKSHOP_REGISTER_KERNEL("round_nearest_afz", Unary<RoundNearestAfz>);
WORKSHOP_REGISTER_KERNEL("round_nearest_even", Unary<RoundNearestEven>);
WORKSHOP_REGISTER_KERNEL("sqrt", Unary<Sqrt>);
WORKSHOP_REGISTER_KERNEL("rsqrt", Unary<Rsqrt>);
WORKSHOP_REGISTER_KERNEL("cbrt", Unary<Cbrt>);
WORKSHOP_REGISTER_KERNEL("exponential", Unary<Exp>);
WORKSHOP_REGISTER_KERNEL("exponential_minus_one", Unary<Expm1>);
WORKSHOP_REGISTER_KERNEL("log", Unary<Log>);
WORKSHOP_REGISTER_KERNEL("log_plus_one", Unary<Log1p>);
WORKSHOP_REGISTER_KERNEL("logistic", Unary<Logistic>);
WORKSHOP_REGISTER_KERNEL("sine", Unary<Sine>);
WORKSHOP_REGISTER_KERNEL("cosine", Unary<Cosine>);
WORKSHOP_REGISTER_KERNEL("tan", Unary<Tan>);
WORKSHOP_REGISTER_KERNEL("tanh", Unary<Tanh>);
WORKSHOP_REGISTER_KERNEL("popcnt", Unary<Popcnt>);
WORKSHOP_REGISTER_KERNEL("count_leading_zeros", Unary<CountLeadingZeros>);
WORKSHOP_REGISTER_KERNEL("not", Unary<Not>);
WORKSHOP_REGISTER_KERNEL("is_finite", IsFinite);
WORKSHOP_REGISTER_KERNEL("reduce_precision", ReducePrecision);

WORKSHOP_REGISTER_KERNEL("add", .fn = Binary<Add>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("subtract", .fn = Binary<Subtract>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("multiply", .fn = Binary<Multiply>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("divide", .fn = Binary<Divide>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("remainder", .fn = Binary<Remainder>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("power", .fn = Binary<Power>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("maximum", .fn = Binary<Maximum>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("minimum", .fn = Binary<Minimum>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("atan2", .fn = Binary<Atan2>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("and", .fn = Binary<And>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("or", .fn = Binary<Or>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("xor", .fn = Binary<Xor>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("shift_left", .fn = Binary<ShiftLeft>, .writes_over_operands = true,
                         .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("shift_right_logical", .fn = Binary<ShiftRightLogical>,
                         .writes_over_operands = true, .scalar_operands = true);
WORKSHOP_REGISTER_KERNEL("shift_right_arithmetic", .fn = Binary<ShiftRightArithmetic>,
                         .writes_over_operands = true, .scalar_operands = true);

WORKSHOP_REGISTER_KERNEL("compare", Compare);
// select(pred, on_true, on_false): the kernel writes results of the selected operands' type.
Status CheckSelect(const Plan& plan, const Instr& instr) {
  if (instr.ins.size() != 3) return Status();
  for (int out : instr.outs) {
    if (plan.slots[out].dtype != plan.slots[instr.ins[1]].dtype) {
      return AttrCheck(plan, instr)
          .Fail("result slot ", out, " is not of the selected operands' type");
    }
  }
  return Status();
}

WORKSHOP_REGISTER_KERNEL("select", .fn = Select, .check = CheckSelect);
WORKSHOP_REGISTER_KERNEL("clamp", Clamp);

}  // namespace
}  // namespace workshop
