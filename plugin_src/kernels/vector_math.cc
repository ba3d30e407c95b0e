#include "kernels/vector_math.h"

#include <emmintrin.h>

#include <algorithm>

// The SSE ("b") variants of the x86-64 vector-function ABI: 4 floats or 2 doubles.
extern "C" {
__m128 _ZGVbN4v_expf(__m128);
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
}

namespace workshop {
namespace {

// logistic(x) = 1 / (1 + exp(-x)), on top of exp.
__m128 LogisticF(__m128 x) {
  const __m128 one = _mm_set1_ps(1.0f);
  return _mm_div_ps(one, _mm_add_ps(one, _ZGVbN4v_expf(_mm_sub_ps(_mm_setzero_ps(), x))));
}
__m128d LogisticD(__m128d x) {
  const __m128d one = _mm_set1_pd(1.0);
  return _mm_div_pd(one, _mm_add_pd(one, _ZGVbN2v_exp(_mm_sub_pd(_mm_setzero_pd(), x))));
}

using F4 = __m128 (*)(__m128);
using D2 = __m128d (*)(__m128d);

F4 Pick(VectorFn fn, float) {
  switch (fn) {
    case VectorFn::kExp: return _ZGVbN4v_expf;
    case VectorFn::kExpm1: return _ZGVbN4v_expm1f;
    case VectorFn::kLog: return _ZGVbN4v_logf;
    case VectorFn::kLog1p: return _ZGVbN4v_log1pf;
    case VectorFn::kTanh: return _ZGVbN4v_tanhf;
    case VectorFn::kSin: return _ZGVbN4v_sinf;
    case VectorFn::kCos: return _ZGVbN4v_cosf;
    case VectorFn::kLogistic: return LogisticF;
  }
  return nullptr;
}

D2 Pick(VectorFn fn, double) {
  switch (fn) {
    case VectorFn::kExp: return _ZGVbN2v_exp;
    case VectorFn::kExpm1: return _ZGVbN2v_expm1;
    case VectorFn::kLog: return _ZGVbN2v_log;
    case VectorFn::kLog1p: return _ZGVbN2v_log1p;
    case VectorFn::kTanh: return _ZGVbN2v_tanh;
    case VectorFn::kSin: return _ZGVbN2v_sin;
    case VectorFn::kCos: return _ZGVbN2v_cos;
    case VectorFn::kLogistic: return LogisticD;
  }
  return nullptr;
}

}  // namespace

void VectorMap(VectorFn fn, const float* in, float* out, int64_t n) {
  const F4 f = Pick(fn, 0.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, f(_mm_loadu_ps(in + i)));
  if (i < n) {
    float tail[4] = {0, 0, 0, 0};
    std::copy(in + i, in + n, tail);
    _mm_storeu_ps(tail, f(_mm_loadu_ps(tail)));
    std::copy(tail, tail + (n - i), out + i);
  }
}

void VectorMap(VectorFn fn, const double* in, double* out, int64_t n) {
  const D2 f = Pick(fn, 0.0);
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) _mm_storeu_pd(out + i, f(_mm_loadu_pd(in + i)));
  if (i < n) {
    double tail[2] = {in[i], 0};
    _mm_storeu_pd(tail, f(_mm_loadu_pd(tail)));
    out[i] = tail[0];
  }
}

}  // namespace workshop
