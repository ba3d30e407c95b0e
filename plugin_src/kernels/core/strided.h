// Strided iteration: the one loop nest behind broadcast_in_dim, transpose, slice, reverse,
// host-buffer gathers and reductions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace workshop {

// Drops size-1 dimensions and merges neighbours that are contiguous in every operand, so
// that e.g. a dense copy becomes one long row. `strides[k][d]` is operand k's stride (in
// any unit) along dim d. Returns the simplified dims; strides are simplified in place.
std::vector<int64_t> CollapseDims(std::vector<int64_t> dims,
                                  std::vector<std::vector<int64_t>>& strides);

// Number of rows ForEachRow visits: the product of all dims but the last (1 for rank <= 1).
int64_t NumRows(const std::vector<int64_t>& dims);

// Calls `row(offsets)` for rows [begin, end) of `dims` in row-major order (see ForEachRow),
// so that a parallel caller can hand each thread its own range of rows.
template <typename RowFn>
void ForEachRowIn(const std::vector<int64_t>& dims,
                  const std::vector<std::vector<int64_t>>& strides, int64_t begin, int64_t end,
                  RowFn&& row) {
  const size_t operands = strides.size();
  std::vector<int64_t> offsets(operands, 0);
  const int64_t outer_rank = static_cast<int64_t>(dims.size()) - 1;
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  if (begin >= end) return;
  if (outer_rank <= 0) {
    row(offsets);
    return;
  }
  // Unravel `begin` into the starting index and offsets.
  std::vector<int64_t> index(outer_rank, 0);
  for (int64_t d = outer_rank - 1, rest = begin; d >= 0; --d) {
    index[d] = rest % dims[d];
    rest /= dims[d];
    for (size_t k = 0; k < operands; ++k) offsets[k] += index[d] * strides[k][d];
  }
  for (int64_t r = begin;;) {
    row(offsets);
    if (++r == end) return;
    // Odometer increment over the outer dims, updating offsets incrementally.
    for (int64_t d = outer_rank - 1; d >= 0; --d) {
      for (size_t k = 0; k < operands; ++k) offsets[k] += strides[k][d];
      if (++index[d] < dims[d]) break;
      for (size_t k = 0; k < operands; ++k) offsets[k] -= strides[k][d] * dims[d];
      index[d] = 0;
    }
  }
}

// Like ForEachRowIn, but calls `run(offsets, count)` once per stretch of `count`
// consecutive rows along the second-to-last dim (at most dims[rank - 2] of them),
// `offsets` locating the first: row i of the stretch is i * strides[k][rank - 2] further
// in operand k. A caller with short rows then steps pointers through the stretch instead
// of paying the odometer per row (rank <= 1: one stretch of the single row).
template <typename RunFn>
void ForEachRowRunIn(const std::vector<int64_t>& dims,
                     const std::vector<std::vector<int64_t>>& strides, int64_t begin, int64_t end,
                     RunFn&& run) {
  if (dims.size() < 2) {
    ForEachRowIn(dims, strides, begin, end,
                 [&](const std::vector<int64_t>& offsets) { run(offsets, int64_t{1}); });
    return;
  }
  // The stretches are the rows of `dims` without its last dim.
  const std::vector<int64_t> outer(dims.begin(), dims.end() - 1);
  std::vector<std::vector<int64_t>> outer_strides;
  for (const auto& s : strides) outer_strides.emplace_back(s.begin(), s.end() - 1);
  const int64_t m = outer.back();
  if (m == 0 || begin >= end) return;
  int64_t first_row = begin / m * m;  // Row index of the current stretch's first row.
  std::vector<int64_t> shifted;
  ForEachRowIn(outer, outer_strides, begin / m, (end + m - 1) / m,
               [&](const std::vector<int64_t>& offsets) {
                 const int64_t lo = std::max<int64_t>(begin - first_row, 0);
                 const int64_t hi = std::min<int64_t>(end - first_row, m);
                 first_row += m;
                 if (lo == 0) {
                   run(offsets, hi);
                   return;
                 }
                 shifted = offsets;  // Only the first stretch of a range starts mid-way.
                 for (size_t k = 0; k < shifted.size(); ++k)
                   shifted[k] += lo * outer_strides[k].back();
                 run(shifted, hi - lo);
               });
}

// Calls `row(offsets)` once per row of `dims` (all dims but the last), where offsets[k] is
// the position of the row's first element in operand k (sum of index * stride). The row
// itself, dims.back() long, is left to the caller's inner loop, which sees unit strides
// whenever the layout allows and so can vectorize. For rank 0, calls `row` once.
template <typename RowFn>
void ForEachRow(const std::vector<int64_t>& dims, const std::vector<std::vector<int64_t>>& strides,
                RowFn&& row) {
  ForEachRowIn(dims, strides, 0, NumRows(dims), row);
}

// Row-major strides of `dims`, in elements or, with `unit` = the element size, in bytes.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims, int64_t unit = 1);

// For a reduction of an array of `dims` over dimensions `reduced`: the stride of the
// (row-major, reduced dims removed) result along each dim of `dims`, 0 for reduced dims.
std::vector<int64_t> ReducedOutputStrides(const std::vector<int64_t>& dims,
                                          const std::vector<int64_t>& reduced);

// Sets `n` elements of `elem_size` bytes at `dst` to the element at `value`. A value
// whose bytes are all equal (zero, above all) is one memset, which writes large blocks
// without reading their lines in first: a 4 MiB zero fill takes half the time of a store
// loop (measured).
void FillElements(void* dst, int64_t n, const void* value, int64_t elem_size);

// Copies a strided array of `elem_size`-byte elements into dense row-major `dst`.
// `src_strides` are in bytes and may be zero (broadcast) or negative (reverse).
// After CollapseDims the copy takes one of these shapes: rows that are contiguous on both
// sides (memcpy), broadcast (fill), reversed or read with stride 2 (vectorized row loops);
// a transpose, where the source is contiguous along a dim other than the destination's
// (cache-blocked tiles, SIMD in-register transposes, staged through L1 when a stride is
// a multiple of 2 KiB); or anything else (element loop). Large copies split their rows or
// tiles over the ThreadPool.
void StridedCopy(void* dst, const void* src, int64_t elem_size, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& src_strides);

// The same between two strided arrays: `dst` may be a window of a larger array (pad,
// dynamic_update_slice). Byte strides, either sign.
void StridedCopy(void* dst, const std::vector<int64_t>& dst_strides, const void* src,
                 const std::vector<int64_t>& src_strides, int64_t elem_size,
                 const std::vector<int64_t>& dims);

// StridedCopy for pad with interior padding of 1 along the last dim: when the collapsed
// destination's last stride is 2 elements and the source's 1, it also stores `gap` (one
// element) between consecutive copied elements of a row, which lets the row loop store
// densely. Only for a destination whose gaps already hold `gap` and that no other thread
// writes (pad fills its result first); any other geometry is a plain StridedCopy.
void StridedCopyPadInterior(void* dst, const std::vector<int64_t>& dst_strides, const void* src,
                            const std::vector<int64_t>& src_strides, int64_t elem_size,
                            const std::vector<int64_t>& dims, const void* gap);

}  // namespace workshop
