// Arrays of f16 and bf16 to f32 and back (half.h): f16 with the F16C instructions where the
// CPU has them, bf16 in an AVX2 clone (simd.h).
//
// The plugin is built for baseline x86-64 (simd.h), where the bit manipulation of ToFloat
// and ToFloat16 vectorizes poorly (SSE2 has no variable blend): a 512x512 f16 -> f32
// convert took 257 us where XLA:CPU takes 43 (2-core VM), and every f16 op in an
// interpreted fusion is a convert, the f32 kernel and a convert back. VCVTPH2PS and
// VCVTPS2PH (round to nearest even) give the same bits as the scalar functions, including
// under the workers' flush-to-zero and denormals-are-zero mode (MXCSR.DAZ also zeroes an
// f32 subnormal operand of VCVTPS2PH, as it zeroes ToFloat16's addition; f16 subnormals
// convert exactly to f32 normals either way) and for NaNs (quieted, top payload bits
// kept): test_convert_16bit_exhaustive (tests/ops/test_elementwise_dtypes.py) compares all
// 65536 f16 values and the f32 values around each of them with XLA:CPU, bit for bit.
#include <cstdint>

#include "kernels/math/half.h"
#include "kernels/math/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define WORKSHOP_F16C 1
#endif

namespace workshop {
namespace {

#if WORKSHOP_F16C
bool HasF16c() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}

__attribute__((target("avx,f16c"))) int64_t HalfToFloatF16c(const Float16* in, float* out,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  return i;
}

__attribute__((target("avx,f16c"))) int64_t FloatToHalfF16c(const float* in, Float16* out,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  return i;
}
#endif

}  // namespace

// bf16 has no instruction with ToBFloat16's bits (AVX512-BF16's VCVTNEPS2BF16 flushes
// subnormals, which XLA:CPU keeps), but its integer rounding vectorizes 8 wide in the AVX2
// clone (f32 -> bf16 of 512x512: 102 us in the SSE2 build, XLA:CPU 71; 2-core VM).
WORKSHOP_SIMD_CLONES void FloatToBFloat16(const float* __restrict in, BFloat16* __restrict out,
                                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToBFloat16(in[i]);
}

WORKSHOP_SIMD_CLONES void BFloat16ToFloat(const BFloat16* __restrict in, float* __restrict out,
                                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToFloat(in[i]);
}

void HalfToFloat(const Float16* in, float* out, int64_t n) {
  int64_t i = 0;
#if WORKSHOP_F16C
  if (HasF16c()) i = HalfToFloatF16c(in, out, n);
#endif
  for (; i < n; ++i) out[i] = ToFloat(in[i]);
}

void FloatToHalf(const float* in, Float16* out, int64_t n) {
  int64_t i = 0;
#if WORKSHOP_F16C
  if (HasF16c()) i = FloatToHalfF16c(in, out, n);
#endif
  for (; i < n; ++i) out[i] = ToFloat16(in[i]);
}

}  // namespace workshop
