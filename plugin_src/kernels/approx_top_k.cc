// approx_top_k: the k largest (or smallest) elements along one dimension, with their
// indices, as XLA:CPU computes `custom_call @ApproxTopK` (jax.lax.approx_max_k/min_k off
// TPU): exactly and sorted, equal values by lower index first. XLA:CPU gives the same
// values; its order among equal values depends on the dtype, the direction and the size
// (its TopK kernel for f32 max_k, a sort otherwise: tests/ops/test_approx_top_k.py), and
// approx_max_k promises nothing about it.
// Notebook 03's exercise writes this file; compiler/rules/approx_top_k.py emits it.
//
//   ins:   x f32|f64 [d0, ..., n, ..., dr]   (n at dimension `dim`)
//   outs:  values  x's dtype [d0, ..., k, ..., dr]
//          indices s32       [d0, ..., k, ..., dr]
//   attrs: k (1 <= k <= n), dim, largest (1: GT as in approx_max_k, 0: LT)
//
// NaN is unordered under the comparator JAX emits (GT or LT), so where XLA:CPU puts NaNs
// is not specified; here they come last.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"

namespace workshop {
namespace {

Status ApproxTopK(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  const Tensor& values = ctx.outs[0];
  const Tensor& indices = ctx.outs[1];
  const int64_t k = ctx.instr.attr<int64_t>("k");
  const int64_t dim = ctx.instr.attr<int64_t>("dim");
  const bool largest = ctx.instr.attr<int64_t>("largest") != 0;
  if (dim < 0 || dim >= x.rank()) {
    return InvalidArgument("workshop: approx_top_k dim=", dim, " of ",
                           ShapeString(x.dtype, *x.dims), " at ", ctx.instr.loc);
  }
  const int64_t n = (*x.dims)[dim];
  // Elements between two neighbours along `dim`, and rows before it.
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.rank(); ++d) inner *= (*x.dims)[d];
  const int64_t outer = n == 0 || inner == 0 ? 0 : x.num_elements() / (n * inner);
  if (k < 1 || k > n || n > std::numeric_limits<int32_t>::max() ||
      values.dtype != x.dtype || indices.dtype != DType::kS32 ||
      values.num_elements() != outer * k * inner ||
      indices.num_elements() != values.num_elements()) {
    return InvalidArgument("workshop: approx_top_k k=", k, " along dimension ", dim, " of ",
                           ShapeString(x.dtype, *x.dims), " at ", ctx.instr.loc);
  }
  return DispatchFloat(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        std::vector<T> row(n);
        std::vector<int32_t> order(n);
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t j = 0; j < inner; ++j) {
            const T* in = x.as<T>() + o * n * inner + j;
            for (int64_t i = 0; i < n; ++i) row[i] = in[i * inner];
            std::iota(order.begin(), order.end(), 0);
            // Better first, then the lower index. NaN counts as worse than every number,
            // which keeps the order a strict weak ordering (std::partial_sort needs one)
            // whatever the data.
            std::partial_sort(order.begin(), order.begin() + k, order.end(),
                              [&](int32_t a, int32_t b) {
                                const T u = row[a], w = row[b];
                                if (u != u || w != w) return w != w && (u == u || a < b);
                                if (u != w) return largest ? u > w : u < w;
                                return a < b;
                              });
            T* v = values.as<T>() + o * k * inner + j;
            int32_t* idx = indices.as<int32_t>() + o * k * inner + j;
            for (int64_t i = 0; i < k; ++i) {
              v[i * inner] = row[order[i]];
              idx[i * inner] = order[i];
            }
          }
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

}  // namespace

WORKSHOP_REGISTER_KERNEL("approx_top_k", ApproxTopK);

}  // namespace workshop
