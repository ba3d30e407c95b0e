// 8-bit (and 4-bit) floats as storage types: f8E5M2, f8E4M3FN, f8E4M3B11FNUZ, f8E5M2FNUZ,
// f8E4M3FNUZ, f8E4M3, f8E3M4, f8E8M0FNU and f4E2M1FN, one element per byte.
//
// As for f16/bf16 (half.h), kernels never compute on them: the compiler lowers math on
// them as convert -> f32 kernel -> convert (optable.IN_F32), so only `convert` reads their
// values. The conversions follow ml_dtypes, which XLA:CPU matches bit for bit:
//   * to a minifloat: one round to nearest even from the f32/f64 value (f8E8M0FNU rounds
//     ties up), subnormals kept; overflow is inf on the IEEE types (E5M2, E4M3, E3M4),
//     NaN on the FN/FNUZ/E8M0 types, the largest finite on f4E2M1FN (which has no NaN or
//     inf); FNUZ types have no -0 (0x80 is their NaN); f8E8M0FNU (unsigned powers of two,
//     no zero) makes zero and negatives NaN;
//   * NaN -> the type's quiet NaN with the sign kept where the type has a sign;
//   * from a minifloat: exact; a NaN becomes the quiet NaN with the sign kept (FNUZ NaN is
//     +NaN, as on XLA:CPU, where ml_dtypes gives -NaN).
//   * XLA:CPU quirks kept (convert.cc): a NaN from a 16- or 8-bit float becomes 0x7F in
//     f8E5M2 and 0x8 in f4E2M1FN, whatever its sign.
// Everything works on bits (no float arithmetic), so the worker's flush-to-zero modes
// cannot touch the f32 subnormal 2^-127 that f8E8M0FNU holds.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace workshop::minifloat {

enum class Kind {
  kIeee,   // inf = all-ones exponent, NaN = all-ones exponent with a nonzero mantissa
  kFn,     // no inf; NaN = all bits but the sign set
  kFnuz,   // no inf, no -0; NaN = the sign bit alone
  kE8M0,   // no sign, no mantissa, no zero; NaN = 0xFF; ties round up
  kNoNan,  // no inf, no NaN: overflow saturates (f4E2M1FN)
};

struct Format {
  int ebits;
  int mbits;
  int bias;
  Kind kind;
};

inline constexpr Format kF32{8, 23, 127, Kind::kIeee};
inline constexpr Format kF64{11, 52, 1023, Kind::kIeee};

// The format of a minifloat dtype; null for every other dtype.
inline const Format* FormatOf(DType t) {
  static constexpr Format kE5M2{5, 2, 15, Kind::kIeee}, kE4M3FN{4, 3, 7, Kind::kFn},
      kE4M3B11FNUZ{4, 3, 11, Kind::kFnuz}, kE5M2FNUZ{5, 2, 16, Kind::kFnuz},
      kE4M3FNUZ{4, 3, 8, Kind::kFnuz}, kE4M3{4, 3, 7, Kind::kIeee}, kE3M4{3, 4, 3, Kind::kIeee},
      kE8M0FNU{8, 0, 127, Kind::kE8M0}, kE2M1FN{2, 1, 1, Kind::kNoNan};
  switch (t) {
    case DType::kF8E5M2: return &kE5M2;
    case DType::kF8E4M3FN: return &kE4M3FN;
    case DType::kF8E4M3B11FNUZ: return &kE4M3B11FNUZ;
    case DType::kF8E5M2FNUZ: return &kE5M2FNUZ;
    case DType::kF8E4M3FNUZ: return &kE4M3FNUZ;
    case DType::kF8E4M3: return &kE4M3;
    case DType::kF8E3M4: return &kE3M4;
    case DType::kF8E8M0FNU: return &kE8M0FNU;
    case DType::kF4E2M1FN: return &kE2M1FN;
    default: return nullptr;
  }
}

// A value as sign, class and sig * 2^(exp - frac) with bit `frac` of sig set.
struct Unpacked {
  bool neg = false, nan = false, inf = false, zero = false;
  int exp = 0;
  uint64_t sig = 0;
  int frac = 0;
};

inline bool HasSign(const Format& f) { return f.kind != Kind::kE8M0; }
inline uint64_t SignBit(const Format& f) {
  return HasSign(f) ? uint64_t{1} << (f.ebits + f.mbits) : 0;
}

inline Unpacked Decode(const Format& f, uint64_t bits) {
  Unpacked u;
  const uint64_t sign = SignBit(f), emask = (uint64_t{1} << f.ebits) - 1,
                 mmask = (uint64_t{1} << f.mbits) - 1;
  u.neg = (bits & sign) != 0;
  const uint64_t e = (bits >> f.mbits) & emask, m = bits & mmask;
  switch (f.kind) {
    case Kind::kIeee:
      if (e == emask) {
        (m != 0 ? u.nan : u.inf) = true;
        return u;
      }
      break;
    case Kind::kFn:
      if ((bits & ~sign) == (sign - 1)) u.nan = true;
      break;
    case Kind::kFnuz:
      if (bits == sign) u.nan = true, u.neg = false;  // XLA:CPU reads it as +NaN.
      break;
    case Kind::kE8M0:
      if (bits == 0xFF) {
        u.nan = true;
      } else {
        u.exp = static_cast<int>(e) - f.bias, u.sig = 1, u.frac = 0;
      }
      return u;
    case Kind::kNoNan: break;
  }
  if (u.nan) return u;
  if (e == 0 && m == 0) {
    u.zero = true;
    return u;
  }
  u.frac = f.mbits;
  if (e != 0) {
    u.exp = static_cast<int>(e) - f.bias;
    u.sig = m | (uint64_t{1} << f.mbits);
  } else {
    u.exp = 1 - f.bias;
    u.sig = m;
    while (!(u.sig >> u.frac & 1)) u.sig <<= 1, --u.exp;
  }
  return u;
}

inline uint64_t Encode(const Format& f, const Unpacked& u) {
  const uint64_t sign_bit = SignBit(f), sign = u.neg ? sign_bit : 0,
                 emask = (uint64_t{1} << f.ebits) - 1, mmask = (uint64_t{1} << f.mbits) - 1;
  uint64_t nan = 0, max_finite = 0;
  switch (f.kind) {
    case Kind::kIeee:
      nan = (emask << f.mbits) | (uint64_t{1} << (f.mbits - 1)) | sign;
      max_finite = ((emask - 1) << f.mbits) | mmask;
      break;
    case Kind::kFn:
      nan = (sign_bit - 1) | sign;
      max_finite = sign_bit - 2;
      break;
    case Kind::kFnuz:
      nan = sign_bit;
      max_finite = sign_bit - 1;
      break;
    case Kind::kE8M0:
      nan = 0xFF;
      max_finite = 0xFE;
      break;
    case Kind::kNoNan:
      nan = u.neg ? 0 : sign_bit;  // What ml_dtypes (and XLA:CPU) give.
      max_finite = sign_bit - 1;
      break;
  }
  auto overflow = [&]() -> uint64_t {
    if (f.kind == Kind::kIeee) return (emask << f.mbits) | sign;
    if (f.kind == Kind::kNoNan) return max_finite | sign;
    return nan;
  };
  if (u.nan) return nan;
  if (f.kind == Kind::kE8M0 && (u.neg || u.zero)) return nan;
  if (u.inf) return overflow();
  if (u.zero) return f.kind == Kind::kFnuz ? 0 : sign;
  // Normals are sig * 2^(e - mbits); below emin the quantum stays 2^(emin - mbits).
  const int emin = f.kind == Kind::kE8M0 ? -f.bias : 1 - f.bias;
  int e = u.exp > emin ? u.exp : emin;
  const int64_t shift = static_cast<int64_t>(u.frac) - f.mbits + (e - u.exp);
  uint64_t r;
  if (shift >= 62) {
    r = 0;
  } else if (shift <= 0) {  // Widening: exact.
    r = u.sig << -shift;
  } else {
    r = u.sig >> shift;
    const uint64_t rem = u.sig & ((uint64_t{1} << shift) - 1), half = uint64_t{1} << (shift - 1);
    if (f.kind == Kind::kE8M0 ? rem >= half : (rem > half || (rem == half && (r & 1)))) ++r;
  }
  if (f.kind == Kind::kE8M0) {
    if (r == 0) return 0;  // Below the smallest value, 2^-127.
    if (r >= 2) ++e;
    const int64_t biased = static_cast<int64_t>(e) + f.bias;
    return biased > static_cast<int64_t>(max_finite) ? nan : static_cast<uint64_t>(biased);
  }
  if (r >> (f.mbits + 1)) r >>= 1, ++e;
  if (r == 0) return f.kind == Kind::kFnuz ? 0 : sign;
  const int64_t biased = (r >> f.mbits) ? static_cast<int64_t>(e) + f.bias : 0;
  if (biased > static_cast<int64_t>(emask)) return overflow();
  const uint64_t bits = (static_cast<uint64_t>(biased) << f.mbits) | (r & mmask);
  if (bits > max_finite) return overflow();
  return bits | sign;
}

}  // namespace workshop::minifloat
