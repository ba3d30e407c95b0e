// Complex-number construction and access: complex(re, im), real(z), imag(z).
//
//   complex: f32, f32 -> c64 or f64, f64 -> c128 (operands of one shape)
//   real, imag: c64 -> f32, c128 -> f64; on a real float operand (any float dtype,
//     f16/bf16 included) real is the operand and imag is zero.
#include <complex>
#include <cstring>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"

namespace workshop {
namespace {

template <int kPart>  // 0: real, 1: imaginary.
Status Part(KernelContext& ctx) {
  const Tensor& z = ctx.ins[0];
  const Tensor& out = ctx.outs[0];
  const int64_t n = z.num_elements();
  return DispatchComplex(
      z.dtype,
      [&](auto tag) -> Status {
        using R = typename decltype(tag)::value_type;
        // std::complex<R> is laid out as R[2] (guaranteed by the standard).
        const R* __restrict in = static_cast<const R*>(z.data);
        R* __restrict dst = out.as<R>();
        for (int64_t i = 0; i < n; ++i) dst[i] = in[2 * i + kPart];
        return Status();
      },
      [&]() -> Status {
        if (z.dtype != out.dtype) return UnsupportedDType(ctx, z.dtype);
        const int64_t bytes = n * ByteWidth(z.dtype);
        // +0.0 is all zero bits in every float format.
        if constexpr (kPart == 0) {
          std::memcpy(out.data, z.data, bytes);
        } else {
          std::memset(out.data, 0, bytes);
        }
        return Status();
      });
}

Status Complex(KernelContext& ctx) {
  const Tensor& re = ctx.ins[0];
  return DispatchFloat(
      re.dtype,
      [&](auto tag) -> Status {
        using R = decltype(tag);
        const R* __restrict a = re.as<R>();
        const R* __restrict b = ctx.ins[1].as<R>();
        R* __restrict out = static_cast<R*>(ctx.outs[0].data);
        for (int64_t i = 0, n = re.num_elements(); i < n; ++i) {
          out[2 * i] = a[i];
          out[2 * i + 1] = b[i];
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, re.dtype); });
}

WORKSHOP_REGISTER_KERNEL("real", Part<0>);
WORKSHOP_REGISTER_KERNEL("imag", Part<1>);
WORKSHOP_REGISTER_KERNEL("complex", Complex);

}  // namespace
}  // namespace workshop
