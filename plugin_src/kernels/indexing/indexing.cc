// Window kernels: pad, reverse, dynamic_slice, dynamic_update_slice.
//
// All of them move bytes without looking at them, so they serve every dtype through
// StridedCopy (dispatched on element width). Static geometry (pad's crop, reverse's dims)
// comes precomputed from the compiler; the kernels check it against the buffers' shapes
// before touching memory, and clamp dynamic start indices as StableHLO specifies.
#include <cstring>

#include "kernels/core/attr_check.h"
#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"
#include "kernels/indexing/indices.h"

namespace workshop {
namespace {

std::vector<int64_t> ByteStrides(const Tensor& t) {
  return RowMajorStrides(*t.dims, ByteWidth(t.dtype));
}

Status BadAttrs(const KernelContext& ctx, const std::string& why) {
  return InvalidArgument("workshop: ", ctx.instr.op, " ", why, " at ", ctx.instr.loc);
}

// pad(x, value): the result is filled with `value`, then the part of x that survives
// negative padding is copied in. Operand element src_start[d] + i lands at result
// position dst_start[d] + i * dst_step[d] for i < counts[d] (dst_step = interior + 1).
Status Pad(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const Tensor& value = ctx.ins[1];
  const Tensor& out = ctx.outs[0];
  const IntList& src_start = ctx.instr.attr<IntList>("src_start");
  const IntList& dst_start = ctx.instr.attr<IntList>("dst_start");
  const IntList& dst_step = ctx.instr.attr<IntList>("dst_step");
  const IntList& counts = ctx.instr.attr<IntList>("counts");
  const size_t rank = in.dims->size();
  if (src_start.size() != rank || dst_start.size() != rank || dst_step.size() != rank ||
      counts.size() != rank || out.dims->size() != rank || value.num_elements() != 1 ||
      value.dtype != in.dtype || out.dtype != in.dtype) {
    return BadAttrs(ctx, "operands or attributes do not match the operand's rank");
  }
  bool empty = false;
  for (size_t d = 0; d < rank; ++d) {
    if (counts[d] == 0) {
      empty = true;
      continue;
    }
    if (counts[d] < 0 || src_start[d] < 0 || src_start[d] + counts[d] > (*in.dims)[d] ||
        dst_step[d] < 1 || dst_start[d] < 0 ||
        dst_start[d] + (counts[d] - 1) * dst_step[d] >= (*out.dims)[d]) {
      return BadAttrs(ctx, StrCat("window of dim ", d, " is out of bounds"));
    }
  }
  const int64_t width = ByteWidth(in.dtype);
  FillElements(out.data, out.num_elements(), value.data, width);
  if (empty) return Status();
  const std::vector<int64_t> in_strides = ByteStrides(in);
  std::vector<int64_t> out_strides = ByteStrides(out);
  int64_t src_offset = 0, dst_offset = 0;
  for (size_t d = 0; d < rank; ++d) {
    src_offset += src_start[d] * in_strides[d];
    dst_offset += dst_start[d] * out_strides[d];
    out_strides[d] *= dst_step[d];
  }
  StridedCopyPadInterior(static_cast<char*>(out.data) + dst_offset, out_strides,
                         static_cast<const char*>(in.data) + src_offset, in_strides, width, counts,
                         value.data);
  return Status();
}

// reverse: read each reversed dim from its last element with a negative stride.
Status Reverse(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const IntList& dims = ctx.instr.attr<IntList>("dims");
  if (*ctx.outs[0].dims != *in.dims || ctx.outs[0].dtype != in.dtype) {
    return BadAttrs(ctx, "result does not match the operand");
  }
  std::vector<int64_t> strides = ByteStrides(in);
  int64_t offset = 0;
  if (in.num_elements() != 0) {
    for (int64_t d : dims) {
      if (d < 0 || d >= in.rank()) {
        return BadAttrs(ctx, StrCat("dimension ", d, " is out of range"));
      }
      offset += ((*in.dims)[d] - 1) * strides[d];
      strides[d] = -strides[d];
    }
  }
  StridedCopy(ctx.outs[0].data, static_cast<const char*>(in.data) + offset, ByteWidth(in.dtype),
              *ctx.outs[0].dims, strides);
  return Status();
}

// The byte offset of the window of `window_dims` whose start indices are the scalar
// operands ins[first_start...], each clamped so the window fits in `array` (the spec's
// clamp(start, 0, dim - size)).
Status ClampedWindowOffset(const KernelContext& ctx, const Tensor& array, const Dims& window_dims,
                           size_t first_start, int64_t* offset) {
  const size_t rank = array.dims->size();
  if (ctx.ins.size() != first_start + rank || window_dims.size() != rank) {
    return BadAttrs(ctx, StrCat("expects ", rank, " start indices and a rank-", rank, " window"));
  }
  const std::vector<int64_t> strides = ByteStrides(array);
  *offset = 0;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t limit = (*array.dims)[d] - window_dims[d];
    if (limit < 0) {
      return BadAttrs(ctx, StrCat("window ", ShapeString(array.dtype, window_dims),
                                  " does not fit in ", ShapeString(array.dtype, *array.dims)));
    }
    int64_t start;
    Status s = ReadScalarIndex(ctx, ctx.ins[first_start + d], "start index", &start);
    if (!s.ok()) return s;
    *offset += ClampIndex(start, limit) * strides[d];
  }
  return Status();
}

// dynamic_slice(x, starts...): the result's shape is the slice size.
Status DynamicSlice(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const Tensor& out = ctx.outs[0];
  if (out.dtype != in.dtype) return BadAttrs(ctx, "result dtype does not match the operand");
  int64_t offset;
  Status s = ClampedWindowOffset(ctx, in, *out.dims, 1, &offset);
  if (!s.ok()) return s;
  StridedCopy(out.data, static_cast<const char*>(in.data) + offset, ByteWidth(in.dtype), *out.dims,
              ByteStrides(in));
  return Status();
}

// dynamic_update_slice(x, update, starts...): x with the clamped window replaced.
Status DynamicUpdateSlice(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const Tensor& update = ctx.ins[1];
  const Tensor& out = ctx.outs[0];
  if (update.dtype != in.dtype || out.dtype != in.dtype || *out.dims != *in.dims) {
    return BadAttrs(ctx, "update or result does not match the operand");
  }
  int64_t offset;
  Status s = ClampedWindowOffset(ctx, in, *update.dims, 2, &offset);
  if (!s.ok()) return s;
  const int64_t width = ByteWidth(in.dtype);
  // In place (`reuses_operand0`: the carry of a scan or fori_loop), only the window moves.
  if (out.data != in.data) std::memcpy(out.data, in.data, in.num_elements() * width);
  StridedCopy(static_cast<char*>(out.data) + offset, ByteStrides(out), update.data,
              ByteStrides(update), width, *update.dims);
  return Status();
}

// Each dimension's copied run (counts[d] elements from src_start[d], landing every
// dst_step[d] from dst_start[d]) lies within the operand and the result.
Status CheckPad(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  const Dims *in0 = c.In(0), *out0 = c.Out(0);
  if (in0 == nullptr || out0 == nullptr) return Status();
  const IntList *src = c.List("src_start"), *dst = c.List("dst_start"), *step = c.List("dst_step"),
                *counts = c.List("counts");
  if (src == nullptr || dst == nullptr || step == nullptr || counts == nullptr) {
    return Status();
  }
  const size_t rank = in0->size();
  if (src->size() != rank || dst->size() != rank || step->size() != rank ||
      counts->size() != rank || out0->size() != rank) {
    return c.Fail("pad attributes do not have one entry per dimension");
  }
  for (size_t d = 0; d < rank; ++d) {
    const int64_t n = (*counts)[d];
    if (n < 0) return c.Fail("attribute 'counts' holds ", n);
    if (n == 0) continue;
    const __int128 last_src = static_cast<__int128>((*src)[d]) + n - 1;
    const __int128 last_dst =
        static_cast<__int128>((*dst)[d]) + static_cast<__int128>(n - 1) * (*step)[d];
    if ((*src)[d] < 0 || last_src >= (*in0)[d] || (*dst)[d] < 0 || (*step)[d] < 1 ||
        last_dst >= (*out0)[d]) {
      return c.Fail("pad window of dimension ", d, " is out of bounds of its operand or result");
    }
  }
  return Status();
}

Status CheckReverse(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  return c.Axes("dims", c.In(0));
}

WORKSHOP_REGISTER_KERNEL("pad", .fn = Pad, .check = CheckPad);
WORKSHOP_REGISTER_KERNEL("reverse", .fn = Reverse, .check = CheckReverse);
WORKSHOP_REGISTER_KERNEL("dynamic_slice", DynamicSlice);
WORKSHOP_REGISTER_KERNEL("dynamic_update_slice", DynamicUpdateSlice, /*aliases_operand=*/false,
                         /*manages_outputs=*/false, /*reuses_operand0=*/true);

}  // namespace
}  // namespace workshop
