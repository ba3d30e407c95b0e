// reduce: folds an operand over a set of dimensions with one of the recognised bodies
// (add, multiply, maximum, minimum, and, or) from an init value. Dtypes: pred, integers,
// f32, f64, and c64/c128 for add and multiply; the compiler computes f16/bf16 in f32.
//
// The loop runs over the operand in memory order and keeps, per row, either one running
// accumulator (the row's dim is reduced) or a row of the output (it is kept), so both the
// "sum over the last axis" and "sum over a leading axis" cases read contiguous memory.
#include <algorithm>

#include "kernels/element_ops.h"
#include "kernels/kernel.h"
#include "kernels/strided.h"

namespace workshop {
namespace {

// Folds n contiguous elements into `acc`. Eight independent lanes break the loop-carried
// dependency so GCC can keep them in vector registers; the lanes are combined at the end,
// which reassociates float sums (as XLA's vectorized reductions also do).
template <typename T, typename Op>
T FoldContiguous(const T* __restrict in, int64_t n, T acc, Op op) {
  constexpr int kLanes = 8;
  if (n < 2 * kLanes) {
    for (int64_t i = 0; i < n; ++i) acc = op(acc, in[i]);
    return acc;
  }
  T lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = in[l];
  int64_t i = kLanes;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = op(lanes[l], in[i + l]);
  }
  for (; i < n; ++i) lanes[0] = op(lanes[0], in[i]);
  for (int l = 0; l < kLanes; ++l) acc = op(acc, lanes[l]);
  return acc;
}

template <typename T, typename Op>
void ReduceLoop(const Tensor& in, const IntList& reduced_dims, T init, T* out,
                int64_t out_size, Op op) {
  std::fill(out, out + out_size, init);
  const Dims& dims = *in.dims;
  std::vector<int64_t> in_strides = RowMajorStrides(dims);
  // The output's stride along each operand dim: 0 where the dim is reduced away.
  std::vector<int64_t> out_strides(dims.size(), 0);
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (std::find(reduced_dims.begin(), reduced_dims.end(), static_cast<int64_t>(d)) ==
        reduced_dims.end()) {
      out_strides[d] = stride;
      stride *= dims[d];
    }
  }
  std::vector<std::vector<int64_t>> strides = {in_strides, out_strides};
  const std::vector<int64_t> rows = CollapseDims(dims, strides);
  const int64_t n = rows.empty() ? 1 : rows.back();
  const int64_t in_step = rows.empty() ? 0 : strides[0].back();
  const int64_t out_step = rows.empty() ? 0 : strides[1].back();
  const T* src = in.as<T>();
  ForEachRow(rows, strides, [&](const std::vector<int64_t>& offsets) {
    const T* row = src + offsets[0];
    T* dst = out + offsets[1];
    if (out_step == 0 && in_step == 1) {
      *dst = FoldContiguous(row, n, *dst, op);
    } else if (out_step == 0) {
      for (int64_t i = 0; i < n; ++i) *dst = op(*dst, row[i * in_step]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i * out_step] = op(dst[i * out_step], row[i * in_step]);
    }
  });
}

Status Reduce(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const Tensor& init = ctx.ins[1];
  const Tensor& out = ctx.outs[0];
  const std::string& body = ctx.instr.attr<std::string>("body");
  const IntList& dims = ctx.instr.attr<IntList>("dims");
  auto unsupported = [&] {
    return Unimplemented("workshop: reduce with body '", body, "' on ", DTypeName(in.dtype),
                         " is not supported at ", ctx.instr.loc);
  };
  return DispatchReducer(
      body,
      [&](auto op) -> Status {
        using Op = decltype(op);
        return DispatchAllOrComplex(
            in.dtype,
            [&](auto tag) -> Status {
              using T = decltype(tag);
              if constexpr (Op::template kSupports<T>) {
                ReduceLoop<T>(in, dims, init.as<T>()[0], out.as<T>(), out.num_elements(), op);
                return Status();
              } else {
                return unsupported();
              }
            },
            unsupported);
      },
      unsupported);
}

WORKSHOP_REGISTER_KERNEL("reduce", Reduce);

}  // namespace
}  // namespace workshop
