// 16-bit floats as storage types: f16 (IEEE binary16) and bf16 (bfloat16).
//
// Kernels never do arithmetic on them: the compiler lowers math on f16/bf16 as
// convert -> f32 kernel -> convert (as XLA:CPU does), so only `convert` (and byte-moving
// kernels) touch these types. The conversions are branch-free bit manipulation so the
// convert loops vectorize, and they reproduce XLA:CPU bit for bit:
//   * f32 -> f16/bf16 rounds to nearest even, overflows to inf, keeps subnormals;
//   * NaN -> f16 keeps the sign and the top payload bits and sets the quiet bit;
//     NaN -> bf16 becomes the canonical quiet NaN with the sign kept;
//   * f16 -> f32 is exact (a NaN is quieted), bf16 -> f32 is exact (bits << 16).
// Everything else goes through f32 (e.g. f64 -> f16 rounds twice, as XLA does).
#pragma once

#include <bit>
#include <cstdint>

namespace workshop {

struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float ToFloat(BFloat16 h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16);
}

inline BFloat16 ToBFloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
  // Adding 0x7fff plus the lowest kept bit rounds the dropped half to nearest even; a
  // carry into the exponent is the correct round-up, up to inf.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = ((x >> 16) & 0x8000u) | 0x7fc0u;
  return BFloat16{static_cast<uint16_t>(nan ? quiet_nan : rounded)};
}

inline float ToFloat(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t magnitude = h.bits & 0x7fffu;
  const uint32_t exponent = magnitude >> 10;
  // Normal: rebias the exponent (15 -> 127) and widen the mantissa (10 -> 23 bits).
  const uint32_t normal = (magnitude << 13) + ((127 - 15) << 23);
  // Subnormal: magnitude * 2^-24, exact in f32 (at most 11 significant bits).
  const float subnormal = static_cast<float>(magnitude) * 0x1p-24f;
  // inf/NaN: all-ones exponent, payload shifted up; NaNs come out quiet.
  const uint32_t special =
      0x7f800000u | (magnitude & 0x3ffu) << 13 | ((magnitude & 0x3ffu) != 0 ? 0x400000u : 0u);
  const uint32_t bits = exponent == 0    ? std::bit_cast<uint32_t>(subnormal)
                        : exponent == 31 ? special
                                         : normal;
  return std::bit_cast<float>(sign | bits);
}

inline Float16 ToFloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  // Normal f16 range: rebias and round the 13 dropped bits to nearest even; a carry into
  // the exponent is the correct round-up.
  const uint32_t normal =
      (magnitude - ((127 - 15) << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  // Below 2^-14 the result is a subnormal (or zero): adding 0.5 makes the FPU do the
  // rounding, leaving the f16 mantissa in the low bits of the sum.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + 0.5f) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((magnitude >> 13) & 0x3ffu);
  // 65520 = 0x477ff000 and above round to inf.
  const uint32_t bits = magnitude > 0x7f800000u    ? nan
                        : magnitude >= 0x477ff000u ? 0x7c00u
                        : magnitude < 0x38800000u  ? subnormal
                                                   : normal;
  return Float16{static_cast<uint16_t>(sign | bits)};
}

// n values of `in` converted as ToFloat / ToFloat16 / ToBFloat16 do, with F16C or AVX2
// where the CPU has them (half.cc): the convert kernel's f16/bf16 <-> f32 loops.
void HalfToFloat(const Float16* in, float* out, int64_t n);
void FloatToHalf(const float* in, Float16* out, int64_t n);
void BFloat16ToFloat(const BFloat16* in, float* out, int64_t n);
void FloatToBFloat16(const float* in, BFloat16* out, int64_t n);

}  // namespace workshop
