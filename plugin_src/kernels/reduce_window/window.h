// Window geometry shared by convolution, reduce_window and select_and_scatter.
//
// Along one dimension, output element `o` and window position `w` read the padded,
// base-dilated operand at i = o * stride + w * window_dilation - pad_lo. That position is
// an operand element (index i / base_dilation) only if 0 <= i <= (in - 1) * base_dilation
// and i is a multiple of base_dilation; otherwise it is padding or a dilation hole, which
// the window ops skip. (convolution: lhs_dilation = base dilation, rhs_dilation = window
// dilation; its skipped positions read zeros.)
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/core/kernel.h"

namespace workshop {

struct WindowDim {
  int64_t in = 1, out = 1, window = 1, stride = 1, pad_lo = 0;
  int64_t base_dilation = 1, window_dilation = 1;
};

// Checks strides and dilations are positive and sizes non-negative (anything else would
// divide by zero or index out of range); INVALID_ARGUMENT naming the op otherwise.
Status CheckWindowDims(const KernelContext& ctx, const std::vector<WindowDim>& dims);

// The operand index that output `o` reads at window position `w` along `d`, or -1 where
// it reads padding or a base-dilation hole. Computed on the fly: a table over (o, w)
// would take O(out * window) memory.
inline int64_t WindowTap(const WindowDim& d, int64_t o, int64_t w) {
  const int64_t i = o * d.stride + w * d.window_dilation - d.pad_lo;
  if (i < 0 || i > (d.in - 1) * d.base_dilation) return -1;
  if (d.base_dilation == 1) return i;
  return i % d.base_dilation == 0 ? i / d.base_dilation : -1;
}

// The outputs along one dimension whose window position `w` reads an operand element:
// `count` of them, first output `out_begin`, then every `out_step`-th, reading operand
// indices in_begin, in_begin + in_step, ...
struct WindowRun {
  int64_t out_begin = 0, out_step = 1, in_begin = 0, in_step = 0, count = 0;
};
WindowRun WindowRunAt(const WindowDim& d, int64_t w);

}  // namespace workshop
