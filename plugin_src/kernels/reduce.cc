// reduce: folds an operand over a set of dimensions with one of the recognised bodies
// (add, multiply, maximum, minimum, and, or) from an init value. Dtypes: pred, integers,
// f32, f64, and c64/c128 for add and multiply; the compiler computes f16/bf16 in f32.
//
// After merging neighbouring dims of the same kind, the operand is [outer dims..., inner]
// with each outer dim either kept or reduced. Two loops cover every case, both reading
// contiguous memory and both split over the thread pool by ranges of outputs:
//   * inner dim reduced (sum over the last axis, sum of everything): each output folds
//     contiguous runs with a multi-lane vector fold. A single long run is cut into fixed
//     blocks whose partial results are combined in order, so one output can use every core.
//   * inner dim kept (sum over a leading or middle axis): each output row is a vector of
//     accumulators, and whole input rows are added into it, one reduced index after the
//     other. Columns are processed in tiles that stay in L1 while the rows stream by.
// The summation order depends only on the shape, never on the thread count, so results are
// deterministic. Float sums are reassociated (vector lanes, blocks), as XLA's vectorized
// reductions also are.
#include <algorithm>
#include <memory>

#include "kernels/element_ops.h"
#include "kernels/kernel.h"
#include "kernels/strided.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

// Longest run folded in one piece (inner dim reduced); longer runs become blocks of it.
constexpr int64_t kBlock = 32 * 1024;
// Elements read per parallel chunk at least: a reduction only reads, so it streams more
// elements than kParallelGrain (sized for read + write) in the time of a chunk hand-off.
constexpr int64_t kReduceGrain = 4 * kParallelGrain;
// Width of the accumulator tile (inner dim kept), in bytes: a few KB, well inside L1.
constexpr int64_t kTileBytes = 4096;

// Walks sum(index[d] * strides[d]) over an index space in row-major order, starting at
// the linear position `start`.
class OffsetWalk {
 public:
  OffsetWalk(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
             int64_t start)
      : dims_(dims), strides_(strides), index_(dims.size(), 0) {
    for (size_t d = dims.size(); d-- > 0;) {
      index_[d] = start % dims[d];
      start /= dims[d];
      offset_ += index_[d] * strides[d];
    }
  }
  int64_t offset() const { return offset_; }
  void Next() {
    for (size_t d = dims_.size(); d-- > 0;) {
      offset_ += strides_[d];
      if (++index_[d] < dims_[d]) return;
      offset_ -= index_[d] * strides_[d];
      index_[d] = 0;
    }
  }

 private:
  const std::vector<int64_t>& dims_;
  const std::vector<int64_t>& strides_;
  std::vector<int64_t> index_;
  int64_t offset_ = 0;
};

// The operand's dims after merging: outer dims split by kind (input strides in elements),
// and the innermost, contiguous dim.
struct ReduceShape {
  std::vector<int64_t> kept_dims, kept_strides;
  std::vector<int64_t> reduced_dims, reduced_strides;
  int64_t inner = 1;
  bool inner_reduced = true;
  int64_t kept_count = 1, reduced_count = 1;  // Products of the outer dims of each kind.
};

ReduceShape Analyze(const Dims& dims, const IntList& reduced) {
  std::vector<std::vector<int64_t>> strides = {RowMajorStrides(dims),
                                               ReducedOutputStrides(dims, reduced)};
  const std::vector<int64_t> merged = CollapseDims(dims, strides);
  ReduceShape s;
  if (merged.empty()) return s;  // A single element.
  s.inner = merged.back();
  s.inner_reduced = strides[1].back() == 0;
  for (size_t d = 0; d + 1 < merged.size(); ++d) {
    if (strides[1][d] == 0) {
      s.reduced_dims.push_back(merged[d]);
      s.reduced_strides.push_back(strides[0][d]);
      s.reduced_count *= merged[d];
    } else {
      s.kept_dims.push_back(merged[d]);
      s.kept_strides.push_back(strides[0][d]);
      s.kept_count *= merged[d];
    }
  }
  return s;
}

// Folds n >= 1 contiguous elements into kLanes independent accumulators (128 bytes: 8 SSE
// registers, enough to hide the add latency), then 8, then one, and combines the lanes as
// a tree. Breaking the loop-carried dependency is what lets GCC vectorize the fold.
// Inlined: with short runs (64 elements) a call per output costs as much as the fold.
template <typename T, typename Op>
[[gnu::always_inline]] inline T Fold(const T* __restrict in, int64_t n, Op op) {
  constexpr int kLanes = std::max<int>(8, 128 / sizeof(T));
  constexpr int kNarrow = 8;
  if (n < kNarrow) {
    T acc = in[0];
    for (int64_t i = 1; i < n; ++i) acc = op(acc, in[i]);
    return acc;
  }
  int64_t i = 0;
  T lanes[kLanes];
  if (n >= kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = in[l];
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] = op(lanes[l], in[i + l]);
    }
    for (int w = kLanes / 2; w >= kNarrow; w /= 2) {
      for (int l = 0; l < w; ++l) lanes[l] = op(lanes[l], lanes[l + w]);
    }
  } else {
    for (int l = 0; l < kNarrow; ++l) lanes[l] = in[l];
    i = kNarrow;
  }
  for (; i + kNarrow <= n; i += kNarrow) {
    for (int l = 0; l < kNarrow; ++l) lanes[l] = op(lanes[l], in[i + l]);
  }
  for (; i < n; ++i) lanes[0] = op(lanes[0], in[i]);
  for (int w = kNarrow / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) lanes[l] = op(lanes[l], lanes[l + w]);
  }
  return lanes[0];
}

// Inner dim reduced: out[o] = init op (fold of o's runs). A lone run longer than kBlock is
// folded per block (in parallel) and the block results are folded in order.
template <typename T, typename Op>
void ReduceRuns(const ReduceShape& s, const T* in, T init, T* out, Op op) {
  const int64_t n = s.inner;
  const int64_t blocks = s.reduced_count == 1 ? (n + kBlock - 1) / kBlock : 1;
  std::unique_ptr<T[]> partial(blocks > 1 ? new T[s.kept_count * blocks] : nullptr);
  const int64_t work = s.reduced_count * std::min(n, kBlock);  // Elements per item.
  ThreadPool::Global().ParallelFor(
      s.kept_count * blocks, std::max<int64_t>(1, kReduceGrain / work),
      [&](int64_t first, int64_t end) {
        if (blocks > 1) {
          for (int64_t item = first; item < end; ++item) {
            const int64_t o = item / blocks, b = item % blocks;
            const T* run = in + OffsetWalk(s.kept_dims, s.kept_strides, o).offset();
            partial[item] = Fold(run + b * kBlock, std::min(kBlock, n - b * kBlock), op);
          }
          return;
        }
        OffsetWalk kept(s.kept_dims, s.kept_strides, first);
        if (s.reduced_count == 1) {  // One run per output (the common [kept, reduced]).
          for (int64_t o = first; o < end; ++o, kept.Next()) {
            out[o] = op(init, Fold(in + kept.offset(), n, op));
          }
          return;
        }
        for (int64_t o = first; o < end; ++o, kept.Next()) {
          T acc = init;
          OffsetWalk red(s.reduced_dims, s.reduced_strides, 0);
          for (int64_t r = 0; r < s.reduced_count; ++r, red.Next()) {
            acc = op(acc, Fold(in + kept.offset() + red.offset(), n, op));
          }
          out[o] = acc;
        }
      });
  if (blocks > 1) {
    for (int64_t o = 0; o < s.kept_count; ++o) {
      out[o] = op(init, Fold(partial.get() + o * blocks, blocks, op));
    }
  }
}

// acc[i] = acc[i] op rows[0][i] op rows[1][i] ... for `k` <= 4 rows, left to right.
template <typename T, typename Op>
void AccumulateRows(T* __restrict acc, const T* const* rows, int k, int64_t n, Op op) {
  const T* __restrict r0 = rows[0];
  const T* __restrict r1 = rows[1];
  const T* __restrict r2 = rows[2];
  const T* __restrict r3 = rows[3];
  switch (k) {
    case 4:
      for (int64_t i = 0; i < n; ++i) acc[i] = op(op(op(op(acc[i], r0[i]), r1[i]), r2[i]), r3[i]);
      break;
    case 3:
      for (int64_t i = 0; i < n; ++i) acc[i] = op(op(op(acc[i], r0[i]), r1[i]), r2[i]);
      break;
    case 2:
      for (int64_t i = 0; i < n; ++i) acc[i] = op(op(acc[i], r0[i]), r1[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) acc[i] = op(acc[i], r0[i]);
  }
}

// Inner dim kept: each output row (one per kept outer index) accumulates the input rows of
// all reduced indices in order; work items are (output row, column tile).
template <typename T, typename Op>
void ReduceRows(const ReduceShape& s, const T* in, T init, T* out, Op op) {
  const int64_t width = s.inner;
  const int64_t tile = std::max<int64_t>(kTileBytes / static_cast<int64_t>(sizeof(T)), 16);
  const int64_t tiles = (width + tile - 1) / tile;
  const int64_t work = s.reduced_count * std::min(width, tile);
  ThreadPool::Global().ParallelFor(
      s.kept_count * tiles, std::max<int64_t>(1, kReduceGrain / work),
      [&](int64_t first, int64_t end) {
        for (int64_t item = first; item < end; ++item) {
          const int64_t o = item / tiles, c0 = item % tiles * tile;
          const int64_t n = std::min(tile, width - c0);
          const T* base = in + OffsetWalk(s.kept_dims, s.kept_strides, o).offset() + c0;
          T* acc = out + o * width + c0;
          std::fill(acc, acc + n, init);
          OffsetWalk red(s.reduced_dims, s.reduced_strides, 0);
          const T* rows[4] = {base, base, base, base};
          for (int64_t r = 0; r < s.reduced_count;) {
            int k = 0;
            for (; k < 4 && r < s.reduced_count; ++k, ++r, red.Next()) {
              rows[k] = base + red.offset();
            }
            AccumulateRows(acc, rows, k, n, op);
          }
        }
      });
}

template <typename T, typename Op>
void ReduceLoop(const Tensor& in, const IntList& reduced_dims, T init, T* out,
                int64_t out_size, Op op) {
  if (in.num_elements() == 0) {
    std::fill(out, out + out_size, init);
    return;
  }
  const ReduceShape s = Analyze(*in.dims, reduced_dims);
  if (s.inner_reduced) {
    ReduceRuns(s, in.as<T>(), init, out, op);
  } else {
    ReduceRows(s, in.as<T>(), init, out, op);
  }
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
