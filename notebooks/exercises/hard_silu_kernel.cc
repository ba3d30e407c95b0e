// hard_silu(x) = x * min(max(x + 3, 0), 6) / 6 over f32, as one XLA FFI handler: notebook
// 06's exercise. Compute each element in registers, in JAX's order of operations (add 3,
// max with 0, min with 6, divide by 6, multiply by x), each rounded to f32.
//
//   Handler symbol: HardSilu.   Operand x: f32, any shape.   Result: f32, x's shape.
#include <algorithm>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error HardSiluImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  // TODO: y = hard_silu(x), element by element (x.typed_data(), y->typed_data(),
  // x.element_count()), then return ffi::Error::Success().
  (void)x;
  (void)y;
  return ffi::Error(ffi::ErrorCode::kUnimplemented, "hard_silu: not written yet (notebook 06)");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(HardSilu, HardSiluImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
