// Dtype dispatch: calls a generic lambda with a value of the C++ type that holds `dtype`.
//
//   return DispatchNumeric(t, [&](auto tag) { using T = decltype(tag); ... });
//
// Each family returns `fallback()` (usually UnsupportedDType) for dtypes outside it.
#pragma once

#include <complex>
#include <cstdint>

#include "kernels/math/half.h"
#include "runtime/dtype.h"

namespace workshop {

#define WORKSHOP_CASE(code, type) \
  case DType::code: return fn(type{});

// Signed and unsigned integers.
template <typename Fn, typename Fallback>
auto DispatchInt(DType t, Fn&& fn, Fallback&& fallback) {
  switch (t) {
    WORKSHOP_CASE(kS8, int8_t)
    WORKSHOP_CASE(kS16, int16_t)
    WORKSHOP_CASE(kS32, int32_t)
    WORKSHOP_CASE(kS64, int64_t)
    WORKSHOP_CASE(kU8, uint8_t)
    WORKSHOP_CASE(kU16, uint16_t)
    WORKSHOP_CASE(kU32, uint32_t)
    WORKSHOP_CASE(kU64, uint64_t)
    default: return fallback();
  }
}

template <typename Fn, typename Fallback>
auto DispatchFloat(DType t, Fn&& fn, Fallback&& fallback) {
  switch (t) {
    WORKSHOP_CASE(kF32, float)
    WORKSHOP_CASE(kF64, double)
    default: return fallback();
  }
}

// Integers and floats (no pred).
template <typename Fn, typename Fallback>
auto DispatchNumeric(DType t, Fn&& fn, Fallback&& fallback) {
  if (t == DType::kF32 || t == DType::kF64) return DispatchFloat(t, fn, fallback);
  return DispatchInt(t, fn, fallback);
}

// pred and the real numeric types (f16/bf16 and complex have their own dispatchers).
template <typename Fn, typename Fallback>
auto DispatchAll(DType t, Fn&& fn, Fallback&& fallback) {
  if (t == DType::kPred) return fn(bool{});
  return DispatchNumeric(t, fn, fallback);
}

// c64 and c128 as std::complex.
template <typename Fn, typename Fallback>
auto DispatchComplex(DType t, Fn&& fn, Fallback&& fallback) {
  switch (t) {
    WORKSHOP_CASE(kC64, std::complex<float>)
    WORKSHOP_CASE(kC128, std::complex<double>)
    default: return fallback();
  }
}

// f16 and bf16 as storage-only types (kernels/math/half.h): only convert uses them, since the
// compiler computes their math in f32.
template <typename Fn, typename Fallback>
auto DispatchHalf(DType t, Fn&& fn, Fallback&& fallback) {
  switch (t) {
    WORKSHOP_CASE(kF16, Float16)
    WORKSHOP_CASE(kBF16, BFloat16)
    default: return fallback();
  }
}

// DispatchAll plus complex: for kernels whose element functors may take complex values.
template <typename Fn, typename Fallback>
auto DispatchAllOrComplex(DType t, Fn&& fn, Fallback&& fallback) {
  return DispatchAll(t, fn, [&] { return DispatchComplex(t, fn, fallback); });
}

// Every dtype buffers hold.
template <typename Fn, typename Fallback>
auto DispatchEvery(DType t, Fn&& fn, Fallback&& fallback) {
  return DispatchAllOrComplex(t, fn, [&] { return DispatchHalf(t, fn, fallback); });
}

#undef WORKSHOP_CASE

// f32, f64, c64 and c128 (as std::complex): LAPACK's dtypes, and those of the special
// functions that have complex versions.
template <typename Fn, typename Fallback>
auto DispatchFloatOrComplex(DType t, Fn&& fn, Fallback&& fallback) {
  return DispatchComplex(t, fn, [&] { return DispatchFloat(t, fn, fallback); });
}

// A 16-byte element (c128) for kernels that only move bytes.
struct Bytes16 {
  char bytes[16];
};

// For kernels that move elements without looking at them (gather, pad, ...): calls `fn`
// with an unsigned integer tag (or Bytes16) of `byte_width` bytes, so one instantiation
// serves every dtype of that width (pred/s8/u8, s16/f16/bf16, s32/f32, s64/f64/c64, c128).
template <typename Fn, typename Fallback>
auto DispatchByteWidth(int64_t byte_width, Fn&& fn, Fallback&& fallback) {
  switch (byte_width) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    case 8: return fn(uint64_t{});
    case 16: return fn(Bytes16{});
    default: return fallback();
  }
}

}  // namespace workshop
