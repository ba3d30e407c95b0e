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
//     other; float sums and products instead add blocks of 16 rows and combine the block
//     rows pairwise (CascadeRows), so the error grows with log2 of the rows, not with
//     their count. Columns are processed in tiles that stay in L1 while the rows stream by.
// The summation order depends only on the shape, never on the thread count, so results are
// deterministic. Float sums are reassociated (vector lanes, blocks), as XLA's vectorized
// reductions also are. The lanes are explicit in the source, so the AVX2 clones of the
// loops (simd.h) compute the same order in wider registers: same bits on every CPU.
#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>

#include "kernels/core/attr_check.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"
#include "kernels/elementwise/element_ops.h"
#include "kernels/math/simd.h"
#include "kernels/reduce/reduce.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

// Longest run folded in one piece (inner dim reduced); longer runs become blocks of it.
constexpr int64_t kBlock = 32 * 1024;
// The cost model's work of reading `elements` of T (ThreadPool::PartsFor): a reduction
// only reads, so it streams twice the elements of a copy in the time of a chunk hand-off.
template <typename T>
KernelWork ReadWork(int64_t elements) {
  KernelWork work;
  work.bytes = static_cast<double>(elements) * sizeof(T) / 2;
  return work;
}
// Width of the accumulator tile (inner dim kept), in bytes: a few KB, well inside L1.
constexpr int64_t kTileBytes = 4096;

// Walks sum(index[d] * strides[d]) over an index space in row-major order, starting at
// the linear position `start`.
class OffsetWalk {
 public:
  OffsetWalk(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t start)
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
// a tree. Breaking the loop-carried dependency is what lets GCC vectorize the fold. Used
// for the element types without a vector fold (pred, complex).
template <typename T, typename Op>
[[gnu::always_inline]] inline T FoldLanes(const T* __restrict in, int64_t n, Op op) {
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

// Integer and float elements fold in GCC vector types of 32 bytes: one AVX2 register, or
// two SSE2 registers in the baseline clone. The lanes are explicit, so both clones (and
// every CPU) add in the same order. Arrays of scalar lanes (FoldLanes) leave GCC spilling
// them to the stack and reloading them piecewise, which stalls on store forwarding.
template <typename T>
using Vec [[gnu::vector_size(32)]] = T;

// acc = acc op v. Vectors pass by reference: by value, a 32-byte vector in a function
// compiled without AVX changes the ABI (-Wpsabi), even if the call is always inlined.
// maximum/minimum spell their NaN rule with vector masks.
template <typename Op, typename V>
[[gnu::always_inline]] inline void VecOp(Op, V& acc, const V& v) {
  if constexpr (std::is_same_v<Op, Maximum>) {
    acc = ((acc >= v) | (acc != acc)) ? acc : v;
  } else if constexpr (std::is_same_v<Op, Minimum>) {
    acc = ((acc <= v) | (acc != acc)) ? acc : v;
  } else if constexpr (std::is_same_v<Op, Add>) {
    acc += v;
  } else if constexpr (std::is_same_v<Op, Multiply>) {
    acc *= v;
  } else if constexpr (std::is_same_v<Op, And>) {
    acc &= v;
  } else {
    static_assert(std::is_same_v<Op, Or>, "a reducer without a vector form");
    acc |= v;
  }
}

// acc = acc op in[0 .. lanes), an unaligned load.
template <typename T, typename Op>
[[gnu::always_inline]] inline void VecFold(Op op, Vec<T>& acc, const T* in) {
  Vec<T> v;
  std::memcpy(&v, in, sizeof(v));
  VecOp(op, acc, v);
}

// n >= 1 elements: four vector accumulators (latency hiding), then one, then its lanes as
// a tree, then the last n % lanes elements in order.
template <typename T, typename Op>
[[gnu::always_inline]] inline T Fold(const T* __restrict in, int64_t n, Op op) {
  if constexpr (!kVectorLanes<T>) {
    return FoldLanes(in, n, op);
  } else {
    constexpr int64_t kW = sizeof(Vec<T>) / sizeof(T);
    T acc = in[0];
    int64_t i = 1;
    if (n >= kW) {
      Vec<T> a0;
      std::memcpy(&a0, in, sizeof(a0));
      i = kW;
      if (n >= 4 * kW) {
        Vec<T> a1, a2, a3;
        std::memcpy(&a1, in + kW, sizeof(a1));
        std::memcpy(&a2, in + 2 * kW, sizeof(a2));
        std::memcpy(&a3, in + 3 * kW, sizeof(a3));
        for (i = 4 * kW; i + 4 * kW <= n; i += 4 * kW) {
          VecFold<T>(op, a0, in + i);
          VecFold<T>(op, a1, in + i + kW);
          VecFold<T>(op, a2, in + i + 2 * kW);
          VecFold<T>(op, a3, in + i + 3 * kW);
        }
        VecOp(op, a0, a1);
        VecOp(op, a2, a3);
        VecOp(op, a0, a2);
      }
      for (; i + kW <= n; i += kW) VecFold<T>(op, a0, in + i);
      // Copied out through a second vector: taking a0's address would keep a0 in memory
      // inside the loops, through a store and a reload per iteration.
      const Vec<T> total = a0;
      T lanes[kW];
      std::memcpy(lanes, &total, sizeof(total));
      for (int64_t w = kW / 2; w >= 1; w /= 2) {
        for (int64_t l = 0; l < w; ++l) lanes[l] = op(lanes[l], lanes[l + w]);
      }
      acc = lanes[0];
    }
    for (; i < n; ++i) acc = op(acc, in[i]);
    return acc;
  }
}

// The hot fold loops as named functions, so that each gets an AVX2 clone (simd.h) into
// which Fold is inlined. FoldRows: out[o] = init op fold(in[o*n .. o*n + n)), the common
// [kept, reduced] layout where each output is one contiguous run.
// Rows shorter than a vector (max over rows of 4, a sum over rows of 3) are folded across
// rows instead: lane l of a vector holds row o + l, which takes its elements left to right,
// the order Fold uses for them, so the bits are the same. Row by row, the fold was a short
// chain of scalar compare-selects per output, and maximum/minimum on random data paid a
// mispredicted branch for most elements (18x XLA:CPU's time on argmax + max of (100000, 4)).
template <typename T, typename Op>
WORKSHOP_SIMD_CLONES void FoldRows(const T* __restrict in, int64_t rows, int64_t n, T init,
                                   T* __restrict out, Op op) {
  if constexpr (std::is_same_v<T, bool>) {
    // pred rows (jnp.any, jnp.all) fold as bytes of 0 and 1, on which or and and are
    // exact: add and maximum of pred are or, multiply and minimum are and.
    static_assert(sizeof(bool) == 1);
    const auto* bytes = reinterpret_cast<const uint8_t*>(in);
    auto* out_bytes = reinterpret_cast<uint8_t*>(out);
    const uint8_t init_byte = init ? 1 : 0;
    if constexpr (std::is_same_v<Op, Add> || std::is_same_v<Op, Maximum> ||
                  std::is_same_v<Op, Or>) {
      FoldRows<uint8_t>(bytes, rows, n, init_byte, out_bytes, Or{});
    } else {
      static_assert(
          std::is_same_v<Op, Multiply> || std::is_same_v<Op, Minimum> || std::is_same_v<Op, And>,
          "a pred reducer without a byte form");
      FoldRows<uint8_t>(bytes, rows, n, init_byte, out_bytes, And{});
    }
    return;
  }
  int64_t o = 0;
  if constexpr (kVectorLanes<T>) {
    constexpr int64_t kW = sizeof(Vec<T>) / sizeof(T);
    if (n < kW) {
      const Vec<T> inits = Vec<T>{} + init;
      for (; o + kW <= rows; o += kW) {
        const T* block = in + o * n;
        T column[kW];
        for (int64_t l = 0; l < kW; ++l) column[l] = block[l * n];
        Vec<T> acc;
        std::memcpy(&acc, column, sizeof(acc));
        for (int64_t j = 1; j < n; ++j) {
          for (int64_t l = 0; l < kW; ++l) column[l] = block[l * n + j];
          VecFold<T>(op, acc, column);
        }
        Vec<T> total = inits;
        VecOp(op, total, acc);
        std::memcpy(out + o, &total, sizeof(total));
      }
    }
  }
  for (; o < rows; ++o) out[o] = op(init, Fold(in + o * n, n, op));
}

// acc op fold(run 0) op fold(run 1) ... for `runs` runs of n elements at the offsets the
// walk visits: one output of a layout with reduced outer dims.
// Where the order of a fold changes its rounding: float and complex sums and products.
// The others (integers, pred, maximum/minimum, and/or) are exact in any order.
template <typename T, typename Op>
constexpr bool kRounds =
    (std::is_same_v<Op, Add> || std::is_same_v<Op, Multiply>) && !std::is_integral_v<T>;

// Pairwise (cascade) combination of a sequence of partial results, in the order they
// arrive: a binary counter of partials, level l holding the fold of 2^l of them, so each
// result passes through at most log2(count) combinations instead of count (Higham,
// "The accuracy of floating point summation", SIAM J. Sci. Comput. 14(4), 1993: pairwise
// summation's error bound grows with log2 n instead of n). The order depends on the count
// only, so results stay deterministic.
template <typename T, typename Op>
class Cascade {
 public:
  explicit Cascade(Op op) : op_(op) {}
  void Push(T v) {
    int l = 0;
    for (; used_ >> l & 1; ++l) v = op_(level_[l], v);
    used_ = (used_ & ~((uint64_t{1} << l) - 1)) | uint64_t{1} << l;
    level_[l] = v;
  }
  // Folds the levels from the smallest up: the fold of everything pushed (count >= 1).
  T Total() const {
    T acc{};
    bool any = false;
    for (int l = 0; l < 64; ++l) {
      if (used_ >> l & 1) {
        acc = any ? op_(level_[l], acc) : level_[l];
        any = true;
      }
    }
    return acc;
  }

 private:
  Op op_;
  uint64_t used_ = 0;
  T level_[64];
};

template <typename T, typename Op>
WORKSHOP_SIMD_CLONES T FoldWalk(const T* in, OffsetWalk& walk, int64_t runs, int64_t n, T acc,
                                Op op) {
  if constexpr (kRounds<T, Op>) {
    Cascade<T, Op> runs_total(op);
    for (int64_t r = 0; r < runs; ++r, walk.Next())
      runs_total.Push(Fold(in + walk.offset(), n, op));
    return op(acc, runs_total.Total());
  } else {
    for (int64_t r = 0; r < runs; ++r, walk.Next()) acc = op(acc, Fold(in + walk.offset(), n, op));
    return acc;
  }
}

// One run: a block of a long run, or the block results.
template <typename T, typename Op>
WORKSHOP_SIMD_CLONES T FoldRun(const T* in, int64_t n, Op op) {
  return Fold(in, n, op);
}

// Inner dim reduced: out[o] = init op (fold of o's runs). A lone run longer than kBlock is
// folded per block (in parallel) and the block results are folded in order.
template <typename T, typename Op>
void ReduceRuns(const ReduceShape& s, const T* in, T init, T* out, Op op) {
  const int64_t n = s.inner;
  const int64_t blocks = s.reduced_count == 1 ? (n + kBlock - 1) / kBlock : 1;
  std::unique_ptr<T[]> partial(blocks > 1 ? new T[s.kept_count * blocks] : nullptr);
  ThreadPool::Global().ParallelFor(
      s.kept_count * blocks, ReadWork<T>(s.kept_count * s.reduced_count * n),
      [&](int64_t first, int64_t end) {
        if (blocks > 1) {
          for (int64_t item = first; item < end; ++item) {
            const int64_t o = item / blocks, b = item % blocks;
            // No reduced outer dims: the kept dims are row-major over runs of n.
            partial[item] = FoldRun(in + o * n + b * kBlock, std::min(kBlock, n - b * kBlock), op);
          }
          return;
        }
        if (s.reduced_count == 1) {  // One run per output (the common [kept, reduced]).
          FoldRows(in + first * n, end - first, n, init, out + first, op);
          return;
        }
        OffsetWalk kept(s.kept_dims, s.kept_strides, first);
        for (int64_t o = first; o < end; ++o, kept.Next()) {
          OffsetWalk red(s.reduced_dims, s.reduced_strides, 0);
          out[o] = FoldWalk(in + kept.offset(), red, s.reduced_count, n, init, op);
        }
      });
  if (blocks > 1) {
    for (int64_t o = 0; o < s.kept_count; ++o) {
      out[o] = op(init, FoldRun(partial.get() + o * blocks, blocks, op));
    }
  }
}

// acc[i] = acc[i] op rows[0][i] op rows[1][i] ... for `k` <= 4 rows, left to right.
template <typename T, typename Op>
WORKSHOP_SIMD_CLONES void AccumulateRows(T* __restrict acc, const T* const* rows, int k, int64_t n,
                                         Op op) {
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

// Rows folded one after another into a block's accumulator row before the block joins
// the cascade: 16 keeps a column's sequential chain as short as XLA:CPU's tree-reduction
// rewriter leaves it (windows of 32, then a reduce of the window results), at one extra
// pass over the tile per 8 rows on average.
constexpr int64_t kCascadeBlock = 16;

// Levels a cascade of the blocks of `rows` rows can fill: the bits of the block count.
inline int64_t CascadeLevels(int64_t rows) {
  int64_t levels = 1;
  for (int64_t blocks = (rows + kCascadeBlock - 1) / kCascadeBlock; blocks > 1; blocks >>= 1) {
    ++levels;
  }
  return levels;
}

// acc[i] = op(acc[i], v[i]) for n elements.
template <typename T, typename Op>
WORKSHOP_SIMD_CLONES void CombineRow(T* __restrict acc, const T* __restrict v, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i) acc[i] = op(acc[i], v[i]);
}

// out[0..n) = init op (rows reduced pairwise): blocks of kCascadeBlock rows are folded
// left to right (AccumulateRows, four rows per pass), and the block rows are combined as
// a Cascade of rows, level l in scratch[l * n ..). Float sums and products only
// (kRounds): their error then grows with log2 of the row count, not with the count.
template <typename T, typename Op>
void CascadeRows(const T* base, OffsetWalk& red, int64_t count, int64_t n, T init, T* out,
                 T* scratch, Op op) {
  uint64_t used = 0;
  for (int64_t r0 = 0; r0 < count; r0 += kCascadeBlock) {
    // The block lands directly in the first free level: levels below it are merged in.
    int l = 0;
    while (used >> l & 1) ++l;
    T* block = scratch + l * n;
    std::copy(base + red.offset(), base + red.offset() + n, block);
    red.Next();
    const int64_t r_end = std::min(count, r0 + kCascadeBlock);
    const T* rows[4] = {base, base, base, base};
    for (int64_t r = r0 + 1; r < r_end;) {
      int k = 0;
      for (; k < 4 && r < r_end; ++k, ++r, red.Next()) rows[k] = base + red.offset();
      AccumulateRows(block, rows, k, n, op);
    }
    // Merge the full levels below l into it, smallest first as Cascade::Push does, so each
    // addition combines two partials of about the same size.
    for (int m = 0; m < l; ++m) CombineRow(block, scratch + m * n, n, op);
    used = (used & ~((uint64_t{1} << l) - 1)) | uint64_t{1} << l;
  }
  bool any = false;
  for (int l = 0; l < 64; ++l) {
    if (!(used >> l & 1)) continue;
    if (any) {
      CombineRow(out, scratch + l * n, n, op);
    } else {
      std::copy(scratch + l * n, scratch + (l + 1) * n, out);
      any = true;
    }
  }
  for (int64_t i = 0; i < n; ++i) out[i] = op(init, out[i]);
}

// Widest kept inner dim ReduceNarrowRows takes.
constexpr int64_t kNarrowWidth = 16;

// Few reduced rows over a narrow kept inner dim (a sum over a middle axis of 3: (4096, 3,
// 2) -> (4096, 2), a mixture's components): ReduceRows' set-up per (output row, tile),
// two walks and an allocation for a handful of elements, was a fifth of a Langevin
// sampler's time. Here ranges of output rows share one walk and the reduced rows'
// offsets are listed once; each element folds the reduced rows left to right, the order
// CascadeRows uses for up to kCascadeBlock rows (one block: the first row, the others
// accumulated in turn, then init op it), so the bits are the same. False when the shape
// is not of that form.
template <typename T, typename Op>
bool ReduceNarrowRows(const ReduceShape& s, const T* in, T init, T* out, Op op) {
  const int64_t width = s.inner, count = s.reduced_count;
  if (count > kCascadeBlock || count == 0 || width > kNarrowWidth) return false;
  int64_t reduced[kCascadeBlock];
  OffsetWalk red(s.reduced_dims, s.reduced_strides, 0);
  for (int64_t r = 0; r < count; ++r, red.Next()) reduced[r] = red.offset();
  ThreadPool::Global().ParallelFor(s.kept_count, ReadWork<T>(s.kept_count * count * width),
                                   [&](int64_t first, int64_t end) {
                                     OffsetWalk kept(s.kept_dims, s.kept_strides, first);
                                     for (int64_t o = first; o < end; ++o, kept.Next()) {
                                       const T* base = in + kept.offset();
                                       T* acc = out + o * width;
                                       for (int64_t c = 0; c < width; ++c) {
                                         if constexpr (kRounds<T, Op>) {
                                           T v = base[reduced[0] + c];
                                           for (int64_t r = 1; r < count; ++r)
                                             v = op(v, base[reduced[r] + c]);
                                           acc[c] = op(init, v);
                                         } else {
                                           T v = init;
                                           for (int64_t r = 0; r < count; ++r)
                                             v = op(v, base[reduced[r] + c]);
                                           acc[c] = v;
                                         }
                                       }
                                     }
                                   });
  return true;
}

// Inner dim kept: each output row (one per kept outer index) accumulates the input rows of
// all reduced indices in order; work items are (output row, column tile).
template <typename T, typename Op>
void ReduceRows(const ReduceShape& s, const T* in, T init, T* out, Op op) {
  if (ReduceNarrowRows(s, in, init, out, op)) return;
  const int64_t width = s.inner;
  const int64_t tile = std::max<int64_t>(kTileBytes / static_cast<int64_t>(sizeof(T)), 16);
  const int64_t tiles = (width + tile - 1) / tile;
  ThreadPool::Global().ParallelFor(
      s.kept_count * tiles, ReadWork<T>(s.kept_count * s.reduced_count * width),
      [&](int64_t first, int64_t end) {
        std::unique_ptr<T[]> scratch;
        if constexpr (kRounds<T, Op>) {
          scratch.reset(new T[CascadeLevels(s.reduced_count) * std::min(width, tile)]);
        }
        for (int64_t item = first; item < end; ++item) {
          const int64_t o = item / tiles, c0 = item % tiles * tile;
          const int64_t n = std::min(tile, width - c0);
          const T* base = in + OffsetWalk(s.kept_dims, s.kept_strides, o).offset() + c0;
          T* acc = out + o * width + c0;
          OffsetWalk red(s.reduced_dims, s.reduced_strides, 0);
          if constexpr (kRounds<T, Op>) {
            CascadeRows(base, red, s.reduced_count, n, init, acc, scratch.get(), op);
            continue;
          }
          std::fill(acc, acc + n, init);
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
void ReduceLoop(const Tensor& in, const IntList& reduced_dims, T init, T* out, int64_t out_size,
                Op op) {
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

template <typename T, typename Op>
void RowFoldOf(const void* in, int64_t rows, int64_t n, const void* init, void* out) {
  FoldRows(static_cast<const T*>(in), rows, n, *static_cast<const T*>(init), static_cast<T*>(out),
           Op{});
}

WORKSHOP_REGISTER_KERNEL("reduce", .fn = Reduce, .check = CheckReduction);

}  // namespace

Status CheckReduction(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  const Dims* in0 = c.In(0);
  if (in0 == nullptr) return Status();
  const IntList* dims = c.List("dims");
  if (dims == nullptr) return c.Fail("attribute 'dims' missing");
  std::vector<bool> reduced(in0->size(), false);
  for (int64_t a : *dims) {
    if (a < 0 || a >= static_cast<int64_t>(in0->size()) || reduced[a]) {
      return c.Fail("attribute 'dims' holds ", a, ", not a distinct axis of a rank-", in0->size(),
                    " array");
    }
    reduced[a] = true;
  }
  // Not a factor of the operand's checked size when a reduced dimension is 0.
  int64_t kept = 1;
  for (size_t d = 0; d < in0->size(); ++d) {
    if (!reduced[d] && __builtin_mul_overflow(kept, (*in0)[d], &kept)) {
      return c.Fail("the kept dimensions of the operand overflow int64");
    }
  }
  for (int out : instr.outs) {
    if (NumElements(plan.slots[out].dims) != kept) {
      return c.Fail("result slot ", out, " has ", NumElements(plan.slots[out].dims),
                    " elements; the reduction keeps ", kept);
    }
  }
  if (instr.op == "reduce") {  // reduce(x, init): one result of x's type, a scalar init.
    if (instr.ins.size() != 2 || instr.outs.size() != 1) {
      return c.Fail("takes (operand, init) and gives one result");
    }
    const DType type = plan.slots[instr.ins[0]].dtype;
    if (plan.slots[instr.ins[1]].dtype != type || plan.slots[instr.outs[0]].dtype != type ||
        NumElements(plan.slots[instr.ins[1]].dims) != 1) {
      return c.Fail("init and result must be ", DTypeName(type),
                    " like the operand, init a scalar");
    }
  }
  return Status();
}

RowFold FindRowFold(const std::string& body, DType dtype) {
  auto none = [] { return RowFold{nullptr}; };
  return DispatchReducer(
      body,
      [&](auto op) {
        using Op = decltype(op);
        return DispatchAllOrComplex(
            dtype,
            [](auto tag) {
              using T = decltype(tag);
              if constexpr (Op::template kSupports<T>) {
                return RowFold{&RowFoldOf<T, Op>};
              } else {
                return RowFold{nullptr};
              }
            },
            none);
      },
      none);
}

}  // namespace workshop
