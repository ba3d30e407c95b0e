// hard_silu(x) = x * min(max(x + 3, 0), 6) / 6 over f32, as one XLA FFI handler: notebook
// 06's exercise (its starting point is notebooks/exercises/hard_silu_kernel.cc).
//
// `jax.nn.hard_silu` (hard swish, MobileNetV3's activation) lowers to add, max, min,
// divide and multiply with broadcast constants: five elementwise ops, each a pass over
// memory when run one by one. Here each element is read once, computed in registers and
// written once. The operations are JAX's, in its order, each rounded to f32; XLA:CPU's
// results differ from that in the last bits (up to 2 ulps, measured).
// std::max/std::min keep a NaN first operand, as jnp.maximum/minimum propagate it, and
// compile to vector max/min instructions (a `x != x ? ...` test would stop the
// vectorizer: floating compares with short-circuit control flow).
//
//   Handler symbol: HardSilu.   Operand x: f32, any shape.   Result: f32, x's shape.
//   Errors: none beyond the binding's (it refuses a dtype other than f32).
#include <algorithm>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error HardSiluImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  const float* __restrict in = x.typed_data();
  float* __restrict out = y->typed_data();
  const int64_t n = static_cast<int64_t>(x.element_count());
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    out[i] = v * (std::min(std::max(v + 3.0f, 0.0f), 6.0f) / 6.0f);
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(HardSilu, HardSiluImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
