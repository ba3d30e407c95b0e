// f32 tanh as one vectorizable loop (algorithm and error bound in tanh_f32.cc).
#pragma once

#include <cstdint>

namespace workshop {

// out[i] = tanh(in[i]) for i < n, within 2 ulp; +-0, subnormals and NaN pass through, +-inf
// gives +-1. `in` and `out` may be the same array.
void TanhF32(const float* in, float* out, int64_t n);

}  // namespace workshop
