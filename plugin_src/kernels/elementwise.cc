// Elementwise kernels: unary and binary arithmetic, compare, select, clamp.
//
// StableHLO elementwise ops take operands of identical shape (broadcasting is an explicit
// broadcast_in_dim), so every kernel is one flat loop over the elements; with __restrict
// pointers and simple bodies GCC vectorizes them at -O3. Integer corner cases follow XLA's
// semantics rather than C++'s undefined behaviour: x / 0 = -1 (all bits set), x % 0 = x,
// INT_MIN / -1 = INT_MIN, and shifts by >= the bit width saturate.
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/dispatch.h"
#include "kernels/element_ops.h"
#include "kernels/kernel.h"

namespace workshop {
namespace {

// ---- Unary ops: `Supports<T>` says which dtypes, `operator()` computes one element. ----

#define WORKSHOP_UNARY(Name, Predicate, expr)        \
  struct Name {                                      \
    template <typename T>                            \
    static constexpr bool kSupports = Predicate<T>;  \
    template <typename T>                            \
    T operator()(T x) const {                        \
      return expr;                                   \
    }                                                \
  };

WORKSHOP_UNARY(Negate, kIsNumeric, static_cast<T>(-x))
WORKSHOP_UNARY(Abs, kIsNumeric, IsNegative(x) ? static_cast<T>(-x) : x)
WORKSHOP_UNARY(Sign, kIsNumeric,
               x != x ? x : static_cast<T>((T(0) < x) - IsNegative(x)))
WORKSHOP_UNARY(Floor, kIsFloat, std::floor(x))
WORKSHOP_UNARY(Ceil, kIsFloat, std::ceil(x))
WORKSHOP_UNARY(RoundNearestAfz, kIsFloat, std::round(x))
// nearbyint rounds half to even in the default floating-point environment.
WORKSHOP_UNARY(RoundNearestEven, kIsFloat, std::nearbyint(x))
WORKSHOP_UNARY(Sqrt, kIsFloat, std::sqrt(x))
WORKSHOP_UNARY(Rsqrt, kIsFloat, T(1) / std::sqrt(x))
WORKSHOP_UNARY(Cbrt, kIsFloat, std::cbrt(x))
WORKSHOP_UNARY(Exp, kIsFloat, std::exp(x))
WORKSHOP_UNARY(Expm1, kIsFloat, std::expm1(x))
WORKSHOP_UNARY(Log, kIsFloat, std::log(x))
WORKSHOP_UNARY(Log1p, kIsFloat, std::log1p(x))
WORKSHOP_UNARY(Logistic, kIsFloat, T(1) / (T(1) + std::exp(-x)))
WORKSHOP_UNARY(Sine, kIsFloat, std::sin(x))
WORKSHOP_UNARY(Cosine, kIsFloat, std::cos(x))
WORKSHOP_UNARY(Tan, kIsFloat, std::tan(x))
WORKSHOP_UNARY(Tanh, kIsFloat, std::tanh(x))
WORKSHOP_UNARY(Popcnt, kIsInt,
               static_cast<T>(std::popcount(static_cast<std::make_unsigned_t<T>>(x))))
WORKSHOP_UNARY(CountLeadingZeros, kIsInt,
               static_cast<T>(std::countl_zero(static_cast<std::make_unsigned_t<T>>(x))))
#undef WORKSHOP_UNARY

// `not` is logical on pred and bitwise on integers.
struct Not {
  template <typename T>
  static constexpr bool kSupports = kIsInt<T> || std::is_same_v<T, bool>;
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return !x;
    } else {
      return static_cast<T>(~x);
    }
  }
};

template <typename Op>
Status Unary(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  return DispatchAll(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        if constexpr (Op::template kSupports<T>) {
          const T* __restrict in = x.as<T>();
          T* __restrict out = ctx.outs[0].as<T>();
          const int64_t n = x.num_elements();
          Op op;
          for (int64_t i = 0; i < n; ++i) out[i] = op(in[i]);
          return Status();
        } else {
          return UnsupportedDType(ctx, x.dtype);
        }
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
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


struct Divide {
  template <typename T>
  static constexpr bool kSupports = kIsNumeric<T>;
  template <typename T>
  T operator()(T x, T y) const {
    if constexpr (kIsInt<T>) {
      if (y == 0) return static_cast<T>(-1);
      if constexpr (std::is_signed_v<T>) {
        if (x == std::numeric_limits<T>::min() && y == -1) return x;
      }
    }
    return static_cast<T>(x / y);
  }
};

struct Remainder {
  template <typename T>
  static constexpr bool kSupports = kIsNumeric<T>;
  template <typename T>
  T operator()(T x, T y) const {
    if constexpr (kIsInt<T>) {
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

struct Power {
  template <typename T>
  static constexpr bool kSupports = kIsNumeric<T>;
  template <typename T>
  T operator()(T x, T y) const {
    if constexpr (kIsFloat<T>) {
      return std::pow(x, y);
    } else {
      // Exponentiation by squaring; negative exponents follow XLA: 1 for x == 1, -1 or 1
      // for x == -1 by parity, 0 otherwise.
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
  static constexpr bool kSupports = kIsInt<T>;
  template <typename T>
  T operator()(T x, T y) const {
    using U = std::make_unsigned_t<T>;
    if (static_cast<U>(y) >= sizeof(T) * 8) return 0;
    return static_cast<T>(static_cast<U>(x) << static_cast<U>(y));
  }
};

struct ShiftRightLogical {
  template <typename T>
  static constexpr bool kSupports = kIsInt<T>;
  template <typename T>
  T operator()(T x, T y) const {
    using U = std::make_unsigned_t<T>;
    if (static_cast<U>(y) >= sizeof(T) * 8) return 0;
    return static_cast<T>(static_cast<U>(x) >> static_cast<U>(y));
  }
};

struct ShiftRightArithmetic {
  template <typename T>
  static constexpr bool kSupports = kIsInt<T>;
  template <typename T>
  T operator()(T x, T y) const {
    using S = std::make_signed_t<T>;
    using U = std::make_unsigned_t<T>;
    const U shift = std::min<U>(static_cast<U>(y), sizeof(T) * 8 - 1);
    return static_cast<T>(static_cast<S>(x) >> shift);
  }
};

template <typename Op>
Status Binary(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  return DispatchAll(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        if constexpr (Op::template kSupports<T>) {
          const T* __restrict a = x.as<T>();
          const T* __restrict b = ctx.ins[1].as<T>();
          T* __restrict out = ctx.outs[0].as<T>();
          const int64_t n = x.num_elements();
          Op op;
          for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
          return Status();
        } else {
          return UnsupportedDType(ctx, x.dtype);
        }
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

// ---- compare: any dtype in, pred out. ----

template <typename T, typename Cmp>
void CompareLoop(const T* __restrict a, const T* __restrict b, bool* __restrict out,
                 int64_t n, Cmp cmp) {
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
  return DispatchAll(
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
          } else if (direction == "LT") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) < key(q); });
          } else if (direction == "LE") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) <= key(q); });
          } else if (direction == "GT") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) > key(q); });
          } else if (direction == "GE") {
            CompareLoop(a, b, out, n, [&](T p, T q) { return key(p) >= key(q); });
          } else {
            return InvalidArgument("workshop: unknown comparison direction '", direction,
                                   "' at ", ctx.instr.loc);
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

// ---- select(pred, on_true, on_false) and clamp(min, x, max); pred/min/max may be scalar.
// Operands are read by element width only, so one loop serves every dtype.

template <typename T>
Status SelectLoop(const KernelContext& ctx) {
  const Tensor& pred = ctx.ins[0];
  const T* on_true = ctx.ins[1].as<T>();
  const T* on_false = ctx.ins[2].as<T>();
  T* out = ctx.outs[0].as<T>();
  const bool* p = pred.as<bool>();
  const int64_t n = ctx.outs[0].num_elements();
  if (pred.num_elements() == 1 && n != 1) {
    const T* src = p[0] ? on_true : on_false;
    for (int64_t i = 0; i < n; ++i) out[i] = src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = p[i] ? on_true[i] : on_false[i];
  }
  return Status();
}

Status Select(KernelContext& ctx) {
  switch (ByteWidth(ctx.outs[0].dtype)) {
    case 1: return SelectLoop<uint8_t>(ctx);
    case 2: return SelectLoop<uint16_t>(ctx);
    case 4: return SelectLoop<uint32_t>(ctx);
    case 8: return SelectLoop<uint64_t>(ctx);
    default: return UnsupportedDType(ctx, ctx.outs[0].dtype);
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
        const int64_t lo_step = ctx.ins[0].num_elements() == 1 ? 0 : 1;
        const int64_t hi_step = ctx.ins[2].num_elements() == 1 ? 0 : 1;
        Maximum max;
        Minimum min;
        for (int64_t i = 0, n = x.num_elements(); i < n; ++i) {
          out[i] = min(max(in[i], lo[i * lo_step]), hi[i * hi_step]);
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

WORKSHOP_REGISTER_KERNEL("negate", Unary<Negate>);
WORKSHOP_REGISTER_KERNEL("abs", Unary<Abs>);
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

WORKSHOP_REGISTER_KERNEL("add", Binary<Add>);
WORKSHOP_REGISTER_KERNEL("subtract", Binary<Subtract>);
WORKSHOP_REGISTER_KERNEL("multiply", Binary<Multiply>);
WORKSHOP_REGISTER_KERNEL("divide", Binary<Divide>);
WORKSHOP_REGISTER_KERNEL("remainder", Binary<Remainder>);
WORKSHOP_REGISTER_KERNEL("power", Binary<Power>);
WORKSHOP_REGISTER_KERNEL("maximum", Binary<Maximum>);
WORKSHOP_REGISTER_KERNEL("minimum", Binary<Minimum>);
WORKSHOP_REGISTER_KERNEL("atan2", Binary<Atan2>);
WORKSHOP_REGISTER_KERNEL("and", Binary<And>);
WORKSHOP_REGISTER_KERNEL("or", Binary<Or>);
WORKSHOP_REGISTER_KERNEL("xor", Binary<Xor>);
WORKSHOP_REGISTER_KERNEL("shift_left", Binary<ShiftLeft>);
WORKSHOP_REGISTER_KERNEL("shift_right_logical", Binary<ShiftRightLogical>);
WORKSHOP_REGISTER_KERNEL("shift_right_arithmetic", Binary<ShiftRightArithmetic>);

WORKSHOP_REGISTER_KERNEL("compare", Compare);
WORKSHOP_REGISTER_KERNEL("select", Select);
WORKSHOP_REGISTER_KERNEL("clamp", Clamp);

}  // namespace
}  // namespace workshop
