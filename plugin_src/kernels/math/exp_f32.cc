// f32 exp: range reduction to |r| <= ln2 / 2 and a degree-6 polynomial, as one plain loop
// that GCC vectorizes (4 lanes in the SSE2 clone, 8 with FMA in the x86-64-v3 one;
// kernels/math/simd.h). glibc's libmvec expf, used before, was ~27% of a softmax over rows of
// 1024; this loop is ~24 instructions per 8 floats and 1.4x faster (0.28 vs 0.40 ns per
// float on 1024 floats in L1).
//
//   k = round(x / ln2)                  adding 1.5 * 2^23 to x * log2(e) rounds it to an
//                                       integer, which lands in the low mantissa bits
//   r = (x - k ln2_hi) - k ln2_lo       ln2_hi has 16 significant bits: k ln2_hi is exact
//                                       for |k| < 256 and so is the first subtraction
//   p = 1 + (r + r^2 Q(r)) ~ e^r        Q of degree 4, in Estrin's form (a shorter chain of
//                                       dependent FMAs than Horner's), p in [0.70, 1.42]
//   e^x = 2^k p                         k added to p's exponent field in integer arithmetic
//
// Outside [kMinArg, kMaxArg] the arithmetic above is garbage (the exponent field wraps,
// k overflows, inf - inf is NaN) and per-lane masks answer instead, without branches:
//   x < kMinArg (~-87.34, incl. -inf)    +0: e^x rounds below the smallest normal float32;
//                                        FTZ would flush it, XLA:CPU returns 0 too
//   x > kMaxArg (~88.72, incl. +inf)     +inf: e^x rounds past the largest float32
//   NaN                                  NaN (x + inf)
// Subnormal inputs are 0 under DAZ or tiny without it: e^x = 1 either way.
//
// Constants and error: tools/fit_exp.py fits Q (minimax in result ulps, via weighted least
// squares with Lawson's reweighting, in float64), rounds it to float32 and replays this loop's
// float32 arithmetic (bit for bit, checked against both clones) over every float32 in
// [-100, 100] against float64 np.exp: max error 1.035 ulp with FMA, 1.009 ulp without, and
// +0 exactly where e^x rounds below the smallest normal float32. LogisticF32 adds two
// roundings: 2.481 ulp either way. tests/ops/test_elementwise_exp_f32.py checks 1.1 and 2.5 ulp on
// the running CPU.
#include "kernels/math/exp_f32.h"

#include <bit>

#include "kernels/math/simd.h"

namespace workshop {
namespace {

// From tools/fit_exp.py.
constexpr float kC6 = 0.00137803482f, kC5 = 0.00836891402f, kC4 = 0.0416690931f, kC3 = 0.166665182f,
                kC2 = 0.499999911f;
constexpr float kLog2e = 1.44269502f, kLn2Hi = 0.693145752f, kLn2Lo = 1.42860677e-06f;
constexpr float kMinArg = -87.3365402f, kMaxArg = 88.7228317f;
constexpr float kShifter = 0x1.8p23f;

// Lane masks and selects on the bits, in int32 (as in tanh_f32.cc), which GCC vectorizes.
constexpr int32_t Bits(float x) { return std::bit_cast<int32_t>(x); }
constexpr int32_t Mask(bool b) { return -static_cast<int32_t>(b); }
constexpr int32_t Select(int32_t mask, int32_t a, int32_t b) { return (a & mask) | (b & ~mask); }

// e^x for one lane; inlined into each clone's loop.
[[gnu::always_inline]] inline float Exp(float x) {
  const float shifted = x * kLog2e + kShifter;
  const float k = shifted - kShifter;
  const float r = (x - k * kLn2Hi) - k * kLn2Lo;
  const float r2 = r * r;
  const float q = (kC6 * r2 + (kC5 * r + kC4)) * r2 + (kC3 * r + kC2);
  const float p = (q * r2 + r) + 1.0f;
  // shifted's bits are those of 1.5 * 2^23 plus k, and the former's shift out: shifting
  // them by 23 leaves k << 23 (mod 2^32, in unsigned arithmetic).
  const uint32_t scaled = std::bit_cast<uint32_t>(p) + (std::bit_cast<uint32_t>(shifted) << 23);
  const int32_t y = static_cast<int32_t>(scaled) & ~Mask(x < kMinArg);
  return std::bit_cast<float>(Select(Mask(!(x <= kMaxArg)), Bits(x + __builtin_inff()), y));
}

}  // namespace

WORKSHOP_SIMD_CLONES_FMA void ExpF32(const float* __restrict in, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Exp(in[i]);
}

WORKSHOP_SIMD_CLONES_FMA void LogisticF32(const float* __restrict in, float* __restrict out,
                                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + Exp(-in[i]));
}

}  // namespace workshop
