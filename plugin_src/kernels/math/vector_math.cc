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
__m128 _ZGVbN4v_logf(__m128);
__m128 _ZGVbN4v_log1pf(__m128);
__m128 _ZGVbN4v_tanhf(__m128);
__m128 _ZGVbN4v_sinf(__m128);
__m128 _ZGVbN4v_cosf(__m128);
__m128d _ZGVbN2v_exp(__m128d);
__m128d _ZGVbN2v_expm1(__m128d);
__m128d _ZGVbN2v_log(__m128d);
__m128d _ZGVbN2v_log1p(__m128d);
__m128d _ZGVbN2v_tanh(__m128d);
__m128d _ZGVbN2v_sin(__m128d);
__m128d _ZGVbN2v_cos(__m128d);
__m256 _ZGVdN8v_expm1f(__m256);
__m256 _ZGVdN8v_logf(__m256);
__m256 _ZGVdN8v_log1pf(__m256);
__m256 _ZGVdN8v_tanhf(__m256);
__m256 _ZGVdN8v_sinf(__m256);
__m256 _ZGVdN8v_cosf(__m256);
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
    {_ZGVbN4v_logf, _ZGVbN2v_log, _ZGVdN8v_logf, _ZGVdN4v_log},          // kLog
    {_ZGVbN4v_log1pf, _ZGVbN2v_log1p, _ZGVdN8v_log1pf, _ZGVdN4v_log1p},  // kLog1p
    {_ZGVbN4v_tanhf, _ZGVbN2v_tanh, _ZGVdN8v_tanhf, _ZGVdN4v_tanh},      // kTanh
    {_ZGVbN4v_sinf, _ZGVbN2v_sin, _ZGVdN8v_sinf, _ZGVdN4v_sin},          // kSin
    {_ZGVbN4v_cosf, _ZGVbN2v_cos, _ZGVdN8v_cosf, _ZGVdN4v_cos},          // kCos
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
