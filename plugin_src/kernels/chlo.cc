// CHLO math that survives serialization (see compiler/rules/chlo.py): erf, the
// hyperbolic and inverse trigonometric/hyperbolic functions, and top_k.
//
//   erf                                          f32, f64
//   sinh cosh asin acos asinh acosh atanh        f32, f64, c64, c128
//   top_k   x [..., n] -> values [..., k], indices [..., k] (s32); attrs: k. Any
//           integer or float dtype. Largest first in the total order (NaN above +inf,
//           -0 below +0, -NaN last); equal keys in increasing index order.
//
// The elementwise functions are the C/C++ library's (glibc: correctly rounded or within
// an ulp or two, complex branch cuts as C99 Annex G specifies, like XLA's expansions),
// but for complex sinh and cosh, which are XLA:CPU's expansion (complex_math.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/optable.h"
#include "kernels/elementwise/element_ops.h"
#include "kernels/math/complex_math.h"

namespace workshop {
namespace {

template <typename T>
T SinhOf(T x) {
  if constexpr (kIsComplex<T>) {
    return ChloCoshSinh(x, typename T::value_type(-1));
  } else {
    return std::sinh(x);
  }
}

template <typename T>
T CoshOf(T x) {
  if constexpr (kIsComplex<T>) {
    return ChloCoshSinh(x, typename T::value_type(1));
  } else {
    return std::cosh(x);
  }
}

WORKSHOP_UNARY(Erf, "erf", std::erf(x))
// Complex sinh and cosh as stablehlo's CHLO decomposition that XLA:CPU runs
// (complex_math.h), for its values at the edges of the plane.
WORKSHOP_UNARY(Sinh, "sinh", SinhOf(x))
WORKSHOP_UNARY(Cosh, "cosh", CoshOf(x))
WORKSHOP_UNARY(Asin, "asin", std::asin(x))
WORKSHOP_UNARY(Acos, "acos", std::acos(x))
WORKSHOP_UNARY(Asinh, "asinh", std::asinh(x))
WORKSHOP_UNARY(Acosh, "acosh", std::acosh(x))
WORKSHOP_UNARY(Atanh, "atanh", std::atanh(x))
#undef WORKSHOP_UNARY

template <typename Op>
Status Unary(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  return DispatchFloatOrComplex(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        if constexpr (Op::template kSupports<T>) {
          const T* __restrict in = x.as<T>();
          T* __restrict out = ctx.outs[0].as<T>();
          Op op;
          for (int64_t i = 0, n = x.num_elements(); i < n; ++i) out[i] = op(in[i]);
          return Status();
        } else {
          return UnsupportedDType(ctx, x.dtype);
        }
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

WORKSHOP_REGISTER_KERNEL("erf", Unary<Erf>);
WORKSHOP_REGISTER_KERNEL("sinh", Unary<Sinh>);
WORKSHOP_REGISTER_KERNEL("cosh", Unary<Cosh>);
WORKSHOP_REGISTER_KERNEL("asin", Unary<Asin>);
WORKSHOP_REGISTER_KERNEL("acos", Unary<Acos>);
WORKSHOP_REGISTER_KERNEL("asinh", Unary<Asinh>);
WORKSHOP_REGISTER_KERNEL("acosh", Unary<Acosh>);
WORKSHOP_REGISTER_KERNEL("atanh", Unary<Atanh>);

// ---- top_k ----

// A key whose integer order is the total order of T: floats map their bits so that
// negative values (sign bit set) count down.
template <typename T>
auto TotalOrderKey(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    using S = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
    const S bits = std::bit_cast<S>(x);
    using U = std::make_unsigned_t<S>;
    const U magnitude_mask = static_cast<U>(std::numeric_limits<S>::max());
    return static_cast<S>(bits ^ static_cast<S>(bits < 0 ? magnitude_mask : 0));
  } else {
    return x;
  }
}

Status TopK(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  const Tensor& values = ctx.outs[0];
  const Tensor& indices = ctx.outs[1];
  const int64_t k = ctx.instr.attr<int64_t>("k");
  const int64_t n = x.rank() == 0 ? 0 : x.dims->back();
  if (x.rank() == 0 || values.dtype != x.dtype || indices.dtype != DType::kS32 || k > n || k < 0 ||
      n > std::numeric_limits<int32_t>::max() || values.num_elements() != indices.num_elements() ||
      (n > 0 && values.num_elements() != x.num_elements() / n * k)) {
    return InvalidArgument("workshop: top_k k=", k, " of ", ShapeString(x.dtype, *x.dims), " at ",
                           ctx.instr.loc);
  }
  if (values.num_elements() == 0) return Status();
  return DispatchNumeric(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        using Key = decltype(TotalOrderKey(T{}));
        std::vector<Key> keys(n);
        std::vector<int32_t> order(n);
        for (int64_t row = 0, rows = x.num_elements() / n; row < rows; ++row) {
          const T* in = x.as<T>() + row * n;
          for (int64_t i = 0; i < n; ++i) keys[i] = TotalOrderKey(in[i]);
          std::iota(order.begin(), order.end(), 0);
          std::partial_sort(order.begin(), order.begin() + k, order.end(),
                            [&](int32_t a, int32_t b) {
                              return keys[a] > keys[b] || (keys[a] == keys[b] && a < b);
                            });
          T* v = values.as<T>() + row * k;
          int32_t* idx = indices.as<int32_t>() + row * k;
          for (int64_t j = 0; j < k; ++j) {
            idx[j] = order[j];
            v[j] = in[order[j]];
          }
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

WORKSHOP_REGISTER_KERNEL("top_k", TopK);

}  // namespace
}  // namespace workshop
