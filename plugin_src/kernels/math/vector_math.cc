#include "kernels/math/vector_math.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/math/exp_f32.h"

// The table below holds pointers to AVX2 functions in code built for baseline x86-64; GCC
// warns that __m256 values change the calling convention without AVX. They are only called
// from the target("avx2") functions, after the CPU check.
#pragma GCC diagnostic ignored "-Wpsabi"

// Two widths of the x86-64 vector-function ABI: "b" (SSE: 4 floats / 2 doubles, always
// present on x86-64) and "d" (AVX2: 8 floats / 4 doubles). Both are glibc ifuncs that pick
// an implementation for the running CPU; we pick the width.
extern "C" {
__m128 _ZGVbN4v_expm1f(__m128);
__m128 _ZGVbN4v_log1pf(__m128);
__m128 _ZGVbN4v_tanhf(__m128);
__m128d _ZGVbN2v_exp(__m128d);
__m128d _ZGVbN2v_expm1(__m128d);
__m128d _ZGVbN2v_log(__m128d);
__m128d _ZGVbN2v_log1p(__m128d);
__m128d _ZGVbN2v_tanh(__m128d);
__m128d _ZGVbN2v_sin(__m128d);
__m128d _ZGVbN2v_cos(__m128d);
__m256 _ZGVdN8v_expm1f(__m256);
__m256 _ZGVdN8v_log1pf(__m256);
__m256 _ZGVdN8v_tanhf(__m256);
__m256d _ZGVdN4v_exp(__m256d);
__m256d _ZGVdN4v_expm1(__m256d);
__m256d _ZGVdN4v_log(__m256d);
__m256d _ZGVdN4v_log1p(__m256d);
__m256d _ZGVdN4v_tanh(__m256d);
__m256d _ZGVdN4v_sin(__m256d);
__m256d _ZGVdN4v_cos(__m256d);
}

namespace workshop {
namespace {

// libmvec's AVX2 entry points need AVX2 (and FMA, which every AVX2 CPU but one early VIA
// part has; glibc's own AVX2 selection asks for both).
bool UseAvx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
}

// f64 exp(x), with the lanes whose result rounds to +0 answered here. libmvec computes a
// vector with any lane outside its fast range (results that overflow or are subnormal) by
// calling scalar exp for those lanes, many times slower; a masked softmax exps rows of
// -1.8e308. Below this bound e^x is under half the smallest subnormal (2^-1075), so it
// rounds to +0. NaN compares false and stays NaN; -inf gives 0.
constexpr double kExpZeroD = -746.0;
__m128d ExpD2(__m128d x) {
  const __m128d zero = _mm_cmplt_pd(x, _mm_set1_pd(kExpZeroD));
  return _mm_andnot_pd(zero, _ZGVbN2v_exp(_mm_andnot_pd(zero, x)));
}
__attribute__((target("avx2"))) __m256d ExpD4(__m256d x) {
  const __m256d zero = _mm256_cmp_pd(x, _mm256_set1_pd(kExpZeroD), _CMP_LT_OQ);
  return _mm256_andnot_pd(zero, _ZGVdN4v_exp(_mm256_andnot_pd(zero, x)));
}

// f64 logistic(x) = 1 / (1 + exp(-x)), on top of exp.
__m128d LogisticD2(__m128d x) {
  const __m128d one = _mm_set1_pd(1.0);
  return _mm_div_pd(one, _mm_add_pd(one, ExpD2(_mm_sub_pd(_mm_setzero_pd(), x))));
}
__attribute__((target("avx2"))) __m256d LogisticD4(__m256d x) {
  const __m256d one = _mm256_set1_pd(1.0);
  return _mm256_div_pd(one, _mm256_add_pd(one, ExpD4(_mm256_sub_pd(_mm256_setzero_pd(), x))));
}

// f32 sin and cos through libmvec's f64 entry points. Its f32 ones are up to 1.9 ulp off the
// correctly rounded result, XLA:CPU's (glibc's scalar sinf, cosf) 0.56. The f64 ones are
// within 4 f64 ulp, so rounding their result to f32 gives the correctly rounded value unless
// the exact one lies within 2^-26 f32 ulp of a midpoint (none of 2^20 samples). 2.5-3x
// libmvec's f32 time, about a sixth of XLA:CPU's.
#define WORKSHOP_VIA_F64(NAME, D2, D4)                                                   \
  __m128 NAME##F4(__m128 x) {                                                            \
    const __m128 lo = _mm_cvtpd_ps(D2(_mm_cvtps_pd(x)));                                 \
    const __m128 hi = _mm_cvtpd_ps(D2(_mm_cvtps_pd(_mm_movehl_ps(x, x))));               \
    return _mm_movelh_ps(lo, hi);                                                        \
  }                                                                                      \
  __attribute__((target("avx2"))) __m256 NAME##F8(__m256 x) {                            \
    const __m128 lo = _mm256_cvtpd_ps(D4(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));   \
    const __m128 hi = _mm256_cvtpd_ps(D4(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)))); \
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);                      \
  }
WORKSHOP_VIA_F64(Sin, _ZGVbN2v_sin, _ZGVdN4v_sin)
WORKSHOP_VIA_F64(Cos, _ZGVbN2v_cos, _ZGVdN4v_cos)
#undef WORKSHOP_VIA_F64

// f32 log, ours: libmvec's f32 log is up to 3.8 ulp off the correctly rounded result
// (XLA:CPU's 1.1) and its f64 one is 6x the time of its f32 one. In f64, without a table:
//   x = 2^k m, m in [sqrt(1/2), sqrt(2))   k and m from the bits (m - 1 and m + 1 exact)
//   log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172
//         = 2s + s^3 (2/3 + 2/5 s^2 + ... + 2/13 s^10)   the series: the first term left out,
//                                          2/15 s^15, is under 2^-39 of 2s
//   log x = k ln2 + log m
// Every f32 result is the correctly rounded one but where the exact value lies within
// ~2^-14 ulp of a midpoint (max 0.500 ulp over 2^20 samples: bench/accuracy). +-0 and
// subnormals of either sign (read as +-0, as DAZ would) give -inf, +inf gives +inf, other
// negative numbers and -inf NaN, NaN stays NaN: decided on the bits, per lane. (XLA:CPU's
// log of a negative subnormal is -inf, or NaN in arrays of a few elements.) About 3x libmvec's f32
// time (the two f64 divisions per 8 lanes).
constexpr int32_t kSqrtHalfBits = 0x3f3504f3;
constexpr double kLn2 = 0x1.62e42fefa39efp-1;

[[gnu::always_inline]] __attribute__((target("avx2,fma"))) inline __m256d LogHalf8(__m128 m,
                                                                                   __m128i k) {
  const __m256d md = _mm256_cvtps_pd(m);
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d s = _mm256_div_pd(_mm256_sub_pd(md, one), _mm256_add_pd(md, one));
  const __m256d s2 = _mm256_mul_pd(s, s);
  const __m256d s4 = _mm256_mul_pd(s2, s2);
  // The bracket in Estrin's form: three dependent FMAs, not Horner's five.
  const __m256d a = _mm256_fmadd_pd(_mm256_set1_pd(2.0 / 5), s2, _mm256_set1_pd(2.0 / 3));
  const __m256d b = _mm256_fmadd_pd(_mm256_set1_pd(2.0 / 9), s2, _mm256_set1_pd(2.0 / 7));
  const __m256d c = _mm256_fmadd_pd(_mm256_set1_pd(2.0 / 13), s2, _mm256_set1_pd(2.0 / 11));
  const __m256d p = _mm256_fmadd_pd(_mm256_fmadd_pd(c, s4, b), s4, a);
  const __m256d log_m = _mm256_fmadd_pd(_mm256_mul_pd(s, s2), p, _mm256_add_pd(s, s));
  return _mm256_fmadd_pd(_mm256_cvtepi32_pd(k), _mm256_set1_pd(kLn2), log_m);
}

__attribute__((target("avx2,fma"))) __m256 LogF8(__m256 x) {
  const __m256i ix = _mm256_castps_si256(x);
  const __m256i k = _mm256_srai_epi32(_mm256_sub_epi32(ix, _mm256_set1_epi32(kSqrtHalfBits)), 23);
  const __m256 m = _mm256_castsi256_ps(_mm256_sub_epi32(ix, _mm256_slli_epi32(k, 23)));
  const __m128 lo = _mm256_cvtpd_ps(LogHalf8(_mm256_castps256_ps128(m), _mm256_castsi256_si128(k)));
  const __m128 hi =
      _mm256_cvtpd_ps(LogHalf8(_mm256_extractf128_ps(m, 1), _mm256_extracti128_si256(k, 1)));
  const __m256 y = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
  // Special lanes: ix < the smallest normal (signed: negatives, zeros, subnormals) or >= +inf.
  const __m256i special = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), ix),
                                          _mm256_cmpgt_epi32(ix, _mm256_set1_epi32(0x7f7fffff)));
  if (_mm256_testz_si256(special, special)) return y;
  const __m256i mag = _mm256_and_si256(ix, _mm256_set1_epi32(0x7fffffff));
  const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), mag);
  const __m256i nan_in = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
  const __m256i negative =
      _mm256_andnot_si256(nan_in, _mm256_cmpgt_epi32(_mm256_setzero_si256(), ix));
  __m256 fix = _mm256_add_ps(x, x);  // +inf and NaN
  fix = _mm256_blendv_ps(fix, _mm256_set1_ps(__builtin_nanf("")), _mm256_castsi256_ps(negative));
  fix = _mm256_blendv_ps(fix, _mm256_set1_ps(-__builtin_inff()), _mm256_castsi256_ps(tiny));
  return _mm256_blendv_ps(y, fix, _mm256_castsi256_ps(special));
}

// The same on SSE2 (without FMA: within the same bound, not the same bits as LogF8).
[[gnu::always_inline]] inline __m128d LogHalf4(__m128 m, __m128i k) {
  const __m128d md = _mm_cvtps_pd(m);
  const __m128d one = _mm_set1_pd(1.0);
  const __m128d s = _mm_div_pd(_mm_sub_pd(md, one), _mm_add_pd(md, one));
  const __m128d s2 = _mm_mul_pd(s, s);
  const __m128d s4 = _mm_mul_pd(s2, s2);
  const __m128d a = _mm_add_pd(_mm_mul_pd(_mm_set1_pd(2.0 / 5), s2), _mm_set1_pd(2.0 / 3));
  const __m128d b = _mm_add_pd(_mm_mul_pd(_mm_set1_pd(2.0 / 9), s2), _mm_set1_pd(2.0 / 7));
  const __m128d c = _mm_add_pd(_mm_mul_pd(_mm_set1_pd(2.0 / 13), s2), _mm_set1_pd(2.0 / 11));
  const __m128d p = _mm_add_pd(_mm_mul_pd(_mm_add_pd(_mm_mul_pd(c, s4), b), s4), a);
  const __m128d log_m = _mm_add_pd(_mm_mul_pd(_mm_mul_pd(s, s2), p), _mm_add_pd(s, s));
  return _mm_add_pd(_mm_mul_pd(_mm_cvtepi32_pd(k), _mm_set1_pd(kLn2)), log_m);
}

__m128 Select4(__m128i mask, __m128 a, __m128 b) {  // mask ? a : b
  const __m128 m = _mm_castsi128_ps(mask);
  return _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b));
}

__m128 LogF4(__m128 x) {
  const __m128i ix = _mm_castps_si128(x);
  const __m128i k = _mm_srai_epi32(_mm_sub_epi32(ix, _mm_set1_epi32(kSqrtHalfBits)), 23);
  const __m128 m = _mm_castsi128_ps(_mm_sub_epi32(ix, _mm_slli_epi32(k, 23)));
  const __m128 lo = _mm_cvtpd_ps(LogHalf4(m, k));
  const __m128 hi = _mm_cvtpd_ps(LogHalf4(_mm_movehl_ps(m, m), _mm_shuffle_epi32(k, 0xee)));
  const __m128 y = _mm_movelh_ps(lo, hi);
  const __m128i special = _mm_or_si128(_mm_cmplt_epi32(ix, _mm_set1_epi32(0x00800000)),
                                       _mm_cmpgt_epi32(ix, _mm_set1_epi32(0x7f7fffff)));
  if (_mm_movemask_epi8(special) == 0) return y;
  const __m128i mag = _mm_and_si128(ix, _mm_set1_epi32(0x7fffffff));
  const __m128i tiny = _mm_cmplt_epi32(mag, _mm_set1_epi32(0x00800000));
  const __m128i nan_in = _mm_cmpgt_epi32(mag, _mm_set1_epi32(0x7f800000));
  const __m128i negative = _mm_andnot_si128(nan_in, _mm_cmplt_epi32(ix, _mm_setzero_si128()));
  __m128 fix = _mm_add_ps(x, x);
  fix = Select4(negative, _mm_set1_ps(__builtin_nanf("")), fix);
  fix = Select4(tiny, _mm_set1_ps(-__builtin_inff()), fix);
  return Select4(special, fix, y);
}

// One table row per VectorFn, in enum order. f32 exp and logistic have their own loop
// (exp_f32.h; VectorMap sends them there): no f32 entries.
struct Row {
  __m128 (*f4)(__m128);
  __m128d (*d2)(__m128d);
  __m256 (*f8)(__m256);
  __m256d (*d4)(__m256d);
};
const Row kTable[] = {
    {nullptr, ExpD2, nullptr, ExpD4},                                    // kExp
    {_ZGVbN4v_expm1f, _ZGVbN2v_expm1, _ZGVdN8v_expm1f, _ZGVdN4v_expm1},  // kExpm1
    {LogF4, _ZGVbN2v_log, LogF8, _ZGVdN4v_log},                          // kLog
    {_ZGVbN4v_log1pf, _ZGVbN2v_log1p, _ZGVdN8v_log1pf, _ZGVdN4v_log1p},  // kLog1p
    {_ZGVbN4v_tanhf, _ZGVbN2v_tanh, _ZGVdN8v_tanhf, _ZGVdN4v_tanh},      // kTanh
    {SinF4, _ZGVbN2v_sin, SinF8, _ZGVdN4v_sin},                          // kSin
    {CosF4, _ZGVbN2v_cos, CosF8, _ZGVdN4v_cos},                          // kCos
    {nullptr, LogisticD2, nullptr, LogisticD4},                          // kLogistic
};
const Row& RowOf(VectorFn fn) { return kTable[static_cast<int>(fn)]; }

// Maps full vectors of `Lanes` elements, then the tail through the same function on a
// zero-padded copy (so no element's result depends on where an array or block ends).
// A macro, not a template: the AVX2 intrinsics only inline into functions that are
// themselves compiled for AVX2, which a shared template (or lambda) is not.
#define WORKSHOP_MAP_LANES(T, LANES, LOAD, STORE)                         \
  int64_t i = 0;                                                          \
  for (; i + (LANES) <= n; i += (LANES)) STORE(out + i, f(LOAD(in + i))); \
  if (i < n) {                                                            \
    T tail[LANES] = {};                                                   \
    std::copy(in + i, in + n, tail);                                      \
    STORE(tail, f(LOAD(tail)));                                           \
    std::copy(tail, tail + (n - i), out + i);                             \
  }

__attribute__((target("avx2"))) void MapAvx2(VectorFn fn, const float* in, float* out, int64_t n) {
  const auto f = RowOf(fn).f8;
  WORKSHOP_MAP_LANES(float, 8, _mm256_loadu_ps, _mm256_storeu_ps)
}
__attribute__((target("avx2"))) void MapAvx2(VectorFn fn, const double* in, double* out,
                                             int64_t n) {
  const auto f = RowOf(fn).d4;
  WORKSHOP_MAP_LANES(double, 4, _mm256_loadu_pd, _mm256_storeu_pd)
}

}  // namespace

void VectorMap(VectorFn fn, const float* in, float* out, int64_t n) {
  if (fn == VectorFn::kExp) return ExpF32(in, out, n);  // Ours, not libmvec's.
  if (fn == VectorFn::kLogistic) return LogisticF32(in, out, n);
  if (UseAvx2()) return MapAvx2(fn, in, out, n);
  const auto f = RowOf(fn).f4;
  WORKSHOP_MAP_LANES(float, 4, _mm_loadu_ps, _mm_storeu_ps)
}

void VectorMap(VectorFn fn, const double* in, double* out, int64_t n) {
  if (UseAvx2()) return MapAvx2(fn, in, out, n);
  const auto f = RowOf(fn).d2;
  WORKSHOP_MAP_LANES(double, 2, _mm_loadu_pd, _mm_storeu_pd)
}

}  // namespace workshop

namespace workshop {

// The f32 functions of ours that generated fusions call (compiler/codegen/fusions.py LIBMVEC
// with a "workshop_" name), under the vector-function ABI names of a `workshop_logf` and a
// `workshop_cosf`: generated code and interpreter give each lane the same bits.
const void* OwnVectorFunction(std::string_view name) {
  if (name == "_ZGVdN8v_workshop_logf") return reinterpret_cast<const void*>(&LogF8);
  if (name == "_ZGVbN4v_workshop_logf") return reinterpret_cast<const void*>(&LogF4);
  if (name == "_ZGVdN8v_workshop_cosf") return reinterpret_cast<const void*>(&CosF8);
  if (name == "_ZGVbN4v_workshop_cosf") return reinterpret_cast<const void*>(&CosF4);
  if (name == "_ZGVdN8v_workshop_sinf") return reinterpret_cast<const void*>(&SinF8);
  if (name == "_ZGVbN4v_workshop_sinf") return reinterpret_cast<const void*>(&SinF4);
  return nullptr;
}

}  // namespace workshop
