// XLA FFI handlers for tests/ops/test_ffi.py, built against jax.ffi.include_dir() as a user
// would (JAX's FFI tutorial: rms_norm), and registered for both workshop and cpu.
//
//   RmsNormF32/F64  x [..., n] -> y [..., n]: each row x / sqrt(mean(x^2) + eps);
//                   attr eps: f32. A rank-0 x is an InvalidArgument error.
//   Attrs           no operands -> f64[6]: (i64 k, bool flag, string length of mode,
//                   sum of i64 array arr, f64 scale, u8 small), to check attribute decoding.
//   Scale           x (any float buffer: f32/f64) -> x * 2, through AnyBuffer.
//   DictProbe       no operands -> f64[5]: from the dictionary attr cfg: its size, i64 k,
//                   f32 scale, the size of its nested dictionary inner and inner's i32 n
//                   (-1 for a missing or mistyped entry), to check dictionary attributes.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

template <ffi::DataType D>
ffi::Error RmsNorm(float eps, ffi::Buffer<D> x, ffi::ResultBuffer<D> y) {
  auto dims = x.dimensions();
  if (dims.size() == 0) return ffi::Error::InvalidArgument("RmsNorm input must be an array");
  const int64_t n = dims.back(), total = x.element_count();
  for (int64_t r = 0; n > 0 && r < total; r += n) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(x.typed_data()[r + i]) * x.typed_data()[r + i];
    const double scale = 1 / std::sqrt(sum / n + eps);
    for (int64_t i = 0; i < n; ++i) y->typed_data()[r + i] = x.typed_data()[r + i] * scale;
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RmsNormF32, RmsNorm<ffi::F32>,
    ffi::Ffi::Bind().Attr<float>("eps").Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RmsNormF64, RmsNorm<ffi::F64>,
    ffi::Ffi::Bind().Attr<float>("eps").Arg<ffi::Buffer<ffi::F64>>().Ret<ffi::Buffer<ffi::F64>>());

ffi::Error Attrs(int64_t k, bool flag, std::string_view mode, ffi::Span<const int64_t> arr,
                 double scale, uint8_t small, ffi::ResultBuffer<ffi::F64> out) {
  double sum = 0;
  for (int64_t v : arr) sum += v;
  double* o = out->typed_data();
  o[0] = k;
  o[1] = flag;
  o[2] = mode.size();
  o[3] = sum;
  o[4] = scale;
  o[5] = small;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(AttrsProbe, Attrs,
                              ffi::Ffi::Bind()
                                  .Attr<int64_t>("k")
                                  .Attr<bool>("flag")
                                  .Attr<std::string_view>("mode")
                                  .Attr<ffi::Span<const int64_t>>("arr")
                                  .Attr<double>("scale")
                                  .Attr<uint8_t>("small")
                                  .Ret<ffi::Buffer<ffi::F64>>());

ffi::Error ScaleImpl(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y) {
  const size_t n = x.element_count();
  if (x.element_type() == ffi::F32) {
    for (size_t i = 0; i < n; ++i) y->typed_data<float>()[i] = 2 * x.typed_data<float>()[i];
  } else if (x.element_type() == ffi::F64) {
    for (size_t i = 0; i < n; ++i) y->typed_data<double>()[i] = 2 * x.typed_data<double>()[i];
  } else {
    return ffi::Error(ffi::ErrorCode::kUnimplemented, "Scale: unsupported dtype");
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(Scale, ScaleImpl,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());

ffi::Error DictProbeImpl(ffi::Dictionary cfg, ffi::ResultBuffer<ffi::F64> out) {
  double* o = out->typed_data();
  auto k = cfg.get<int64_t>("k");
  auto scale = cfg.get<float>("scale");
  auto inner = cfg.get<ffi::Dictionary>("inner");
  o[0] = cfg.size();
  o[1] = k.has_value() ? double(*k) : -1;
  o[2] = scale.has_value() ? double(*scale) : -1;
  o[3] = inner.has_value() ? double(inner->size()) : -1;
  o[4] = -1;
  if (inner.has_value()) {
    auto n = inner->get<int32_t>("n");
    if (n.has_value()) o[4] = *n;
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    DictProbe, DictProbeImpl,
    ffi::Ffi::Bind().Attr<ffi::Dictionary>("cfg").Ret<ffi::Buffer<ffi::F64>>());
