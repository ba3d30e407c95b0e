// approx_top_k: the k largest (or smallest) elements along one dimension, with their
// indices, as XLA:CPU computes `custom_call @ApproxTopK` (jax.lax.approx_max_k/min_k off
// TPU): exactly, sorted, ties to the lower index.
//
//   ins:   x f32|f64 [d0, ..., n, ..., dr]   (n at dimension `dim`)
//   outs:  values  x's dtype [d0, ..., k, ..., dr]
//          indices s32       [d0, ..., k, ..., dr]
//   attrs: k (1 <= k <= n), dim, largest (1: GT as in approx_max_k, 0: LT)
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"

namespace workshop {
namespace {

// TODO: Status ApproxTopK(KernelContext& ctx) { ... }

}  // namespace

// TODO: WORKSHOP_REGISTER_KERNEL("approx_top_k", ApproxTopK);

}  // namespace workshop
