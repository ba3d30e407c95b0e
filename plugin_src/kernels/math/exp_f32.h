// f32 exp and logistic as vectorizable loops (algorithm and error bound in exp_f32.cc).
#pragma once

#include <cstdint>

namespace workshop {

// out[i] = e^in[i] for i < n, within 1.04 ulp where the result is a normal float32. Results
// below the smallest normal (in[i] < ~-87.34) are +0, as FTZ (and XLA:CPU) make them; past
// the largest float (in[i] > ~88.72) +inf; NaN stays NaN, -inf gives +0. `in` and `out` may
// be the same array.
void ExpF32(const float* in, float* out, int64_t n);

// out[i] = 1 / (1 + e^-in[i]) for i < n, on the same exp: within 2.49 ulp where the result
// is a normal float32; the subnormal results (in[i] < ~-87.34) are flushed to +0 by the
// FTZ mode kernels run in, and in[i] < ~-88.72 gives +0 in any mode.
void LogisticF32(const float* in, float* out, int64_t n);

}  // namespace workshop
