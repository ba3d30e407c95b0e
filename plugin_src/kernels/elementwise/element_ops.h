// Element functors shared by the elementwise, reduce and collective kernels: each computes
// one element, for the C++ element types the op table lists (`kSupports<T>`, optable.h).
#pragma once

#include <cmath>
#include <complex>
#include <string>
#include <type_traits>

#include "kernels/core/dispatch.h"
#include "kernels/core/optable.h"
#include "kernels/math/complex_math.h"

namespace workshop {

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;
template <typename T>
constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T>
constexpr bool kIsNumeric = kIsFloat<T> || kIsInt<T>;
template <typename T>
constexpr bool kIsComplex = false;
template <typename F>
constexpr bool kIsComplex<std::complex<F>> = true;
template <typename T>
constexpr bool kIsFloatOrComplex = kIsFloat<T> || kIsComplex<T>;

// `x < 0` without GCC's "always false" warning for unsigned T.
template <typename T>
constexpr bool IsNegative(T x) {
  if constexpr (std::is_unsigned_v<T>) {
    return false;
  } else {
    return x < T(0);
  }
}

// x >= y; complex numbers in XLA's lexicographic order (real part, then imaginary).
template <typename T>
constexpr bool OrderedGE(T x, T y) {
  if constexpr (kIsComplex<T>) {
    return x.real() > y.real() || (x.real() == y.real() && x.imag() >= y.imag());
  } else {
    return x >= y;
  }
}

// atan2(y, x); for complex, XLA's -i * log((x + i y) / sqrt(x^2 + y^2)).
template <typename T>
T Atan2Of(T y, T x) {
  if constexpr (kIsComplex<T>) {
    const T i(0, 1);
    return -i * std::log((x + i * y) / std::sqrt(x * x + y * y));
  } else {
    return std::atan2(y, x);
  }
}

// The functor of a unary op of the op table (`op`, its kernel name) computing `expr` of
// `x`: elementwise.cc and chlo.cc define theirs with it and #undef it after.
#define WORKSHOP_UNARY(Name, op, expr)                          \
  struct Name {                                                 \
    template <typename T>                                       \
    static constexpr bool kSupports = optable::Supports<T>(op); \
    template <typename T>                                       \
    T operator()(T x) const {                                   \
      return expr;                                              \
    }                                                           \
  };

#define WORKSHOP_BINARY(Name, op, expr)                         \
  struct Name {                                                 \
    template <typename T>                                       \
    static constexpr bool kSupports = optable::Supports<T>(op); \
    template <typename T>                                       \
    T operator()(T x, T y) const {                              \
      return expr;                                              \
    }                                                           \
  };

template <typename T>
constexpr bool kIsNumericOrPred = kIsNumeric<T> || std::is_same_v<T, bool>;
template <typename T>
constexpr bool kIsIntOrPred = kIsInt<T> || std::is_same_v<T, bool>;
template <typename T>
constexpr bool kIsArithmetic = kIsNumericOrPred<T> || kIsComplex<T>;
template <typename T>
constexpr bool kIsNumericOrComplex = kIsNumeric<T> || kIsComplex<T>;

template <typename T>
T MultiplyOf(T x, T y) {
  if constexpr (kIsComplex<T>) {
    return XlaComplexMultiply(x, y);
  } else {
    return static_cast<T>(x * y);
  }
}

WORKSHOP_BINARY(Add, "add", static_cast<T>(x + y))
WORKSHOP_BINARY(Subtract, "subtract", static_cast<T>(x - y))
// Complex products as XLA:CPU: the schoolbook formula (complex_math.h).
WORKSHOP_BINARY(Multiply, "multiply", MultiplyOf(x, y))
// NaN in either operand propagates, as the StableHLO spec requires; of two equal values
// (+0 and -0) the first is returned, as XLA:CPU does.
WORKSHOP_BINARY(Maximum, "maximum", (OrderedGE(x, y) || x != x) ? x : y)
WORKSHOP_BINARY(Minimum, "minimum", (OrderedGE(y, x) || x != x) ? x : y)
WORKSHOP_BINARY(And, "and", static_cast<T>(x& y))
WORKSHOP_BINARY(Or, "or", static_cast<T>(x | y))
WORKSHOP_BINARY(Xor, "xor", static_cast<T>(x ^ y))
WORKSHOP_BINARY(Atan2, "atan2", Atan2Of(x, y))
#undef WORKSHOP_BINARY

// Calls `fn(Op{})` for the functor named by a reduction body ("add", "maximum", ...), the
// bodies the compiler recognises in reduce and all_reduce; `fallback()` otherwise.
template <typename Fn, typename Fallback>
auto DispatchReducer(const std::string& body, Fn&& fn, Fallback&& fallback) {
  if (body == "add") return fn(Add{});
  if (body == "multiply") return fn(Multiply{});
  if (body == "maximum") return fn(Maximum{});
  if (body == "minimum") return fn(Minimum{});
  if (body == "and") return fn(And{});
  if (body == "or") return fn(Or{});
  return fallback();
}

}  // namespace workshop
