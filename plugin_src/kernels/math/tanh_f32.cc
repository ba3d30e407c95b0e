// f32 tanh: an odd rational approximation with argument halving, as one plain loop that GCC
// vectorizes (4 lanes in the SSE2 clone, 8 with FMA in the x86-64-v3 one; kernels/math/simd.h).
// It replaces glibc's libmvec tanhf (45% of jax.nn.gelu's time): 0.42 ns per element on a
// 1024-float block in L1 against libmvec's 0.70 (AVX2, one core of the dev box).
//
// For a = |x|:
//   a < 2^-12         tanh(x) rounds to x (x^3/3 is below half an ulp): return x, which
//                     also keeps -0 and subnormals (as XLA:CPU does) whatever FTZ/DAZ say
//   a >= kSaturate    (~9.011, 1 - tanh(a) <= 2^-25): tanh(x) rounds to +-1; so do +-inf
//   NaN               returned as is
//   otherwise, with w = a below 1 and w = a / 2 from 1 on (exact: one less in the exponent),
//     u = w + w^3 D(w^2) / Q(w^2)        ~ tanh(w), D and Q quadratics, Q(0) = 1
//     tanh(a) = u                        for a < 1
//     tanh(a) = 2u / (1 + u^2)           for a >= 1 (tanh(2w) = 2 tanh w / (1 + tanh^2 w))
//   and the sign of x goes back on.
// Both forms damp the float32 rounding errors rather than add them up: the correction term
// w^3 D/Q is at most 0.31 u for w < 1, and the doubling shrinks a relative error e of u to
// e (1 - u^2) / (1 + u^2). A single rational x P(x^2) / Q(x^2) over [0, 9] evaluated in
// float32 is ~5 ulp off near 1, where each of its roundings can cost an ulp of the result.
//
// Constants and error: tools/fit_tanh.py fits D / Q to (tanh(w) / w - 1) / w^2 over
// w in [0, kSaturate / 2] (weighted minimax via Loeb's linearized least squares with
// Lawson's reweighting, in float64), rounds them to float32, and replays this loop's float32
// arithmetic over every float32 in [2^-12, 18] against float64 np.tanh: max error 1.72 ulp
// with FMA, 1.91 ulp without. tests/ops/test_elementwise_tanh_f32.py checks 2 ulp on the running
// CPU.
#include "kernels/math/tanh_f32.h"

#include <bit>

#include "kernels/math/simd.h"

namespace workshop {
namespace {

// From tools/fit_tanh.py (D_DEG = Q_DEG = 2, SPLIT = 1.0).
constexpr float kD2 = -4.50547395e-06f, kD1 = -0.0156174693f, kD0 = -0.333333135f;
constexpr float kQ2 = 0.0168519672f, kQ1 = 0.446850002f;
constexpr float kSaturate = 9.01091385f;

// Lane masks and selects on the bits, in int32: GCC vectorizes these without the branches a
// float ?: keeps (it may not speculate the division of the other arm under -ftrapping-math),
// and the magnitude compares are signed integer compares (non-negative floats order as their
// bits do).
constexpr int32_t Bits(float x) { return std::bit_cast<int32_t>(x); }
constexpr int32_t Mask(bool b) { return -static_cast<int32_t>(b); }
constexpr int32_t Select(int32_t mask, int32_t a, int32_t b) { return (a & mask) | (b & ~mask); }

}  // namespace

WORKSHOP_SIMD_CLONES_FMA void TanhF32(const float* __restrict in, float* __restrict out,
                                      int64_t n) {
  constexpr int32_t kSign = INT32_MIN, kExponentOne = 1 << 23;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t bits = std::bit_cast<int32_t>(in[i]);
    const int32_t mag = bits & ~kSign;
    const int32_t large = Mask(mag >= Bits(1.0f));
    const float w = std::bit_cast<float>(mag - (large & kExponentOne));
    const float s = w * w;
    const float r = ((kD2 * s + kD1) * s + kD0) / ((kQ2 * s + kQ1) * s + 1.0f);
    const float u = (w * s) * r + w;
    const float doubled = (u + u) / (u * u + 1.0f);
    int32_t y = Select(large, Bits(doubled), Bits(u));
    y = Select(Mask(mag >= Bits(kSaturate)), Bits(1.0f), y) | (bits & kSign);
    const int32_t keep = Mask(mag < Bits(0x1p-12f) || mag > Bits(__builtin_inff()));
    out[i] = std::bit_cast<float>(Select(keep, bits, y));
  }
}

}  // namespace workshop
