// Vectorized transcendental functions for f32 and f64, from glibc's libmvec.
//
// std::exp and friends are scalar calls: a tanh-heavy chain (gelu) spent most of its time in
// them. glibc's libmvec implements the x86-64 vector-function ABI (`_ZGVbN4v_logf` maps four
// floats at once, within 4 ulp of the correctly rounded result per glibc's manual). The
// plugin is built for baseline x86-64, so it picks the width at run time: the AVX2 entry
// points (`_ZGVdN8v_*`, 8 floats) when the CPU has AVX2 and FMA, the SSE ones otherwise.
// Needs glibc >= 2.35 (tanh, expm1, log1p variants arrived then). f32 sin and cos call the f64
// entry points and f32 log is ours, in f64 (vector_math.cc): 0.5 ulp where libmvec's f32
// ones are 1.9 and 3.8 and XLA:CPU's 0.56 and 1.1.
//
// Tails shorter than a vector go through the same vector function on a padded copy, so a
// value's result never depends on where a block boundary falls (fusion cuts arrays into
// blocks).
#pragma once

#include <cstdint>
#include <string_view>

namespace workshop {

enum class VectorFn { kExp, kExpm1, kLog, kLog1p, kTanh, kSin, kCos, kLogistic };

// out[i] = fn(in[i]) for i < n; `in` and `out` may be the same array. f32 kExp and
// kLogistic run our own loop (exp_f32.h), f32 kLog our own vector function, the rest libmvec's.
void VectorMap(VectorFn fn, const float* in, float* out, int64_t n);
void VectorMap(VectorFn fn, const double* in, double* out, int64_t n);

// Our own vector functions that generated code calls by their vector-ABI names
// (`_ZGVdN8v_workshop_logf`: 8 floats in ymm0, AVX2 and FMA; `_ZGVbN4v_workshop_logf`: 4 in
// xmm0, SSE2; likewise `..._workshop_cosf`); nullptr for any other name.
const void* OwnVectorFunction(std::string_view name);

}  // namespace workshop
