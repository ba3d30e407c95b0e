// convolution: N-d convolution in any layout, with strides, padding (possibly negative),
// lhs (input) dilation, rhs (window) dilation, window reversal, feature groups and batch
// groups. Operands and result share one dtype (f32, f64 or an integer type).
//
// The compiler passes the dimension numbers as canonical orders (lhs [batch, feature,
// spatial...], rhs [out feature, in feature, spatial...], out [batch, feature,
// spatial...]; docs/plan.md), so the kernel deals in strides, never in named layouts.
//
// Groups: the output features split into groups = feature_groups * batch_groups (one of
// the two is 1) of `group_out` features. Group q reads the input features
// [(q % G) * Cg, (q % G + 1) * Cg) of lhs batch element (q / G) * out_batch + n, where
// Cg = rhs in-feature size (so feature groups split the input features and batch
// groups split the lhs batch, as StableHLO specifies).
//
// Each group is one matrix product over rows = (output batch element, position) pairs:
//   out[rows, group_out] = patches[rows, window * Cg] x filter[window * Cg, group_out]
// where a row of `patches` (im2col) holds that output position's window of input
// features, zeros for padding and dilation holes, features innermost so every copy is a
// contiguous run. Hence the lhs is first made feature-minor when it isn't (NCHW), and
// the filter is packed once as [group][window...][Cg][group_out] (reversal applied
// there). The product runs in tiles of rows (and, for huge filters, of window
// positions, accumulating) so the patch block stays in cache while the GEMM reads it.
// Rows are ordered batch-major or position-major, whichever makes the output a strided
// matrix, so f32/f64 GEMMs (OpenBLAS) write straight into it: NHWC-like outputs as
// [rows, features], NCHW-like ones as the transposed product, HWIO filter gradients
// position-major; other layouts go through a dense tile. Integers use a plain wrapping
// loop (no signed-overflow UB). 1x1 stride-1 convolutions read the lhs as the patch
// matrix directly. Depthwise convolutions (one input feature per group) skip the GEMM:
// a direct loop accumulates all features of a window tap at once.
#include "kernels/math/blas.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"
#include "kernels/reduce_window/window.h"
#include "runtime/buffer.h"
#include "runtime/memory_stats.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

// Elements of the patch matrix per tile at most (2 MiB of f32): small enough to stay in
// cache between im2col and the GEMM, large enough that OpenBLAS repacks the filter rarely.
constexpr int64_t kTileElements = 128 * 1024;
// GEMM calls get at least this many rows when there are that many: OpenBLAS repacks the
// filter block on each call (k * group_out elements, against rows * k * group_out
// multiply-adds), so below 64 rows the packing starts to show.
constexpr int64_t kMinTileRows = 64;
// Tiles per part when a convolution is split (ThreadPool::BlocksFor): the parts take tiles
// from a shared counter, so with several each, parts that run unevenly (border tiles, a
// core taken by another process) even out. Cutting the rows into one tile per part gave
// a 16x32x32x3 -> 32 convolution (k = 27: one tile of all 16384 rows by the cache bound)
// a single part whatever the core count.
constexpr int64_t kTilesPerPart = 4;

// An operand in canonical dim order (see the header comment); strides in elements.
struct Canonical {
  std::vector<int64_t> size, stride;
  const void* data = nullptr;
};

struct Conv {
  int64_t spatial = 0;
  Canonical lhs, rhs, out;
  std::vector<WindowDim> dims;  // Per spatial dim: lhs/out/rhs sizes and the window.
  IntList reversal;
  int64_t feature_groups = 1, groups = 1;
  int64_t group_in = 0, group_out = 0, out_batch = 0;
  int64_t window = 1;     // Window positions: the product of rhs spatial sizes.
  int64_t k = 0;          // Patch length: window * group_in.
  int64_t positions = 1;  // The product of out spatial sizes.
};

Status Canonicalize(const KernelContext& ctx, const Tensor& t, const char* name, int64_t rank,
                    Canonical* c) {
  const IntList& layout = ctx.instr.attr<IntList>(name);
  std::vector<bool> seen(t.rank(), false);
  bool ok = t.rank() == rank && static_cast<int64_t>(layout.size()) == rank;
  for (size_t i = 0; ok && i < layout.size(); ++i) {
    ok = layout[i] >= 0 && layout[i] < rank && !seen[layout[i]];
    if (ok) seen[layout[i]] = true;
  }
  if (!ok) {
    return InvalidArgument("workshop: convolution attribute '", name, "' is not a dim order of ",
                           ShapeString(t.dtype, *t.dims), " at ", ctx.instr.loc);
  }
  const std::vector<int64_t> strides = RowMajorStrides(*t.dims);
  for (int64_t d : layout) {
    c->size.push_back((*t.dims)[d]);
    c->stride.push_back(strides[d]);
  }
  c->data = t.data;
  return Status();
}

Status ParseConv(const KernelContext& ctx, Conv* c) {
  const int64_t rank = static_cast<int64_t>(ctx.instr.attr<IntList>("lhs_layout").size());
  c->spatial = rank - 2;
  WORKSHOP_RETURN_IF_ERROR(Canonicalize(ctx, ctx.ins[0], "lhs_layout", rank, &c->lhs));
  WORKSHOP_RETURN_IF_ERROR(Canonicalize(ctx, ctx.ins[1], "rhs_layout", rank, &c->rhs));
  WORKSHOP_RETURN_IF_ERROR(Canonicalize(ctx, ctx.outs[0], "out_layout", rank, &c->out));
  const char* names[] = {"strides", "pad_lo", "lhs_dilation", "rhs_dilation", "reversal"};
  std::vector<const IntList*> lists;
  for (const char* name : names) {
    lists.push_back(&ctx.instr.attr<IntList>(name));
    if (static_cast<int64_t>(lists.back()->size()) != c->spatial) {
      return InvalidArgument("workshop: convolution attribute '", name, "' has ",
                             lists.back()->size(), " entries for ", c->spatial, " spatial dims at ",
                             ctx.instr.loc);
    }
  }
  for (int64_t d = 0; d < c->spatial; ++d) {
    c->dims.push_back(WindowDim{c->lhs.size[2 + d], c->out.size[2 + d], c->rhs.size[2 + d],
                                (*lists[0])[d], (*lists[1])[d], (*lists[2])[d], (*lists[3])[d]});
    c->window *= c->rhs.size[2 + d];
    c->positions *= c->out.size[2 + d];
  }
  c->reversal = *lists[4];
  WORKSHOP_RETURN_IF_ERROR(CheckWindowDims(ctx, c->dims));

  const int64_t g = ctx.instr.attr<int64_t>("feature_groups");
  const int64_t b = ctx.instr.attr<int64_t>("batch_groups");
  c->feature_groups = g;
  c->groups = g * b;
  c->group_in = c->rhs.size[1];
  c->out_batch = c->out.size[0];
  c->k = c->window * c->group_in;
  const int64_t out_features = c->rhs.size[0];
  const bool consistent = g >= 1 && b >= 1 && (g == 1 || b == 1) &&
                          c->lhs.size[1] == g * c->group_in && c->out.size[1] == out_features &&
                          out_features % c->groups == 0 && c->lhs.size[0] == b * c->out_batch;
  if (!consistent) {
    const Tensor &lhs = ctx.ins[0], &rhs = ctx.ins[1], &out = ctx.outs[0];
    return InvalidArgument("workshop: convolution of ", ShapeString(lhs.dtype, *lhs.dims), " and ",
                           ShapeString(rhs.dtype, *rhs.dims), " into ",
                           ShapeString(out.dtype, *out.dims), " with feature_group_count ", g,
                           " and batch_group_count ", b, " has inconsistent dims at ",
                           ctx.instr.loc);
  }
  c->group_out = out_features / c->groups;
  return Status();
}

// The stride between consecutive output positions when the spatial dims (index 2.. of a
// Canonical) flatten into one: each non-unit dim's stride is the next inner one's stride
// times its size. 0 if there is at most one position, -1 if they don't flatten.
int64_t PositionStride(const Canonical& c) {
  int64_t inner = 0, expected = 0;
  for (size_t d = c.size.size(); d-- > 2;) {
    if (c.size[d] == 1) continue;
    if (inner == 0) {
      inner = c.stride[d];
    } else if (c.stride[d] != expected) {
      return -1;
    }
    expected = c.stride[d] * c.size[d];
  }
  return inner;
}

// Copies the lhs into [batch][spatial...][feature] order unless it already is feature-minor.
Status MakeFeatureMinor(const KernelContext& ctx, Conv& c, int64_t width,
                        std::shared_ptr<Storage>& holder) {
  if (c.lhs.stride[1] == 1 || c.lhs.size[1] <= 1) return Status();
  Dims dims = {c.lhs.size[0]};
  std::vector<int64_t> src_strides = {c.lhs.stride[0] * width};
  for (int64_t d = 0; d < c.spatial; ++d) {
    dims.push_back(c.lhs.size[2 + d]);
    src_strides.push_back(c.lhs.stride[2 + d] * width);
  }
  dims.push_back(c.lhs.size[1]);
  src_strides.push_back(c.lhs.stride[1] * width);
  holder = Storage::Allocate(NumElements(dims) * width);
  if (holder == nullptr) {
    return ResourceExhausted("workshop: convolution scratch at ", ctx.instr.loc);
  }
  StridedCopy(holder->data(), c.lhs.data, width, dims, src_strides);
  const std::vector<int64_t> strides = RowMajorStrides(dims);
  c.lhs.data = holder->data();
  c.lhs.stride[0] = strides[0];
  c.lhs.stride[1] = 1;
  for (int64_t d = 0; d < c.spatial; ++d) c.lhs.stride[2 + d] = strides[1 + d];
  return Status();
}

// Packs the filter as [group][window...][group_in][group_out], reversing reversed dims.
Status PackFilter(const KernelContext& ctx, const Conv& c, int64_t width,
                  std::shared_ptr<Storage>& holder) {
  holder = Storage::Allocate(c.groups * c.k * c.group_out * width);
  if (holder == nullptr) {
    return ResourceExhausted("workshop: convolution scratch at ", ctx.instr.loc);
  }
  Dims dims;
  std::vector<int64_t> strides;
  int64_t start = 0;  // In elements.
  for (int64_t d = 0; d < c.spatial; ++d) {
    const int64_t size = c.rhs.size[2 + d], stride = c.rhs.stride[2 + d];
    dims.push_back(size);
    strides.push_back((c.reversal[d] ? -stride : stride) * width);
    if (c.reversal[d] && size > 0) start += (size - 1) * stride;
  }
  dims.push_back(c.group_in);
  strides.push_back(c.rhs.stride[1] * width);
  dims.push_back(c.group_out);
  strides.push_back(c.rhs.stride[0] * width);
  const char* rhs = static_cast<const char*>(c.rhs.data);
  char* dst = static_cast<char*>(holder->data());
  for (int64_t q = 0; q < c.groups; ++q) {
    StridedCopy(dst + q * c.k * c.group_out * width,
                rhs + (start + q * c.group_out * c.rhs.stride[0]) * width, width, dims, strides);
  }
  return Status();
}

// A row-major multi-index over the output positions or the window positions of a Conv.
class Odometer {
 public:
  Odometer(const Conv& c, int64_t WindowDim::* limit, int64_t start = 0)
      : dims_(c.dims), limit_(limit), index_(dims_.size()) {
    Seek(start);
  }
  int64_t operator[](size_t d) const { return index_[d]; }
  // Moves to the `flat`-th index in row-major order.
  void Seek(int64_t flat) {
    for (size_t d = dims_.size(); d-- > 0;) {
      index_[d] = flat % dims_[d].*limit_;
      flat /= dims_[d].*limit_;
    }
  }
  void Next() {
    for (size_t d = index_.size(); d-- > 0;) {
      if (++index_[d] < dims_[d].*limit_) return;
      index_[d] = 0;
    }
  }

 private:
  const std::vector<WindowDim>& dims_;
  int64_t WindowDim::* limit_;
  std::vector<int64_t> index_;
};

// The lhs offset that output position `o` reads at window position `w`, or -1 for
// padding and dilation holes.
int64_t TapOffset(const Conv& c, const Odometer& o, const Odometer& w) {
  int64_t offset = 0;
  for (int64_t d = 0; d < c.spatial; ++d) {
    const int64_t index = WindowTap(c.dims[d], o[d], w[d]);
    if (index < 0) return -1;
    offset += index * c.lhs.stride[2 + d];
  }
  return offset;
}

// The offset of spatial position `o` in operand `t` (t's spatial sizes must bound o).
int64_t SpatialOffset(const Canonical& t, const Odometer& o) {
  int64_t offset = 0;
  for (size_t d = 2; d < t.stride.size(); ++d) offset += o[d - 2] * t.stride[d];
  return offset;
}

// acc + a * b. Integers wrap like XLA's, computed unsigned to avoid signed-overflow UB
// (narrow types widen to 32 bits first so the product doesn't promote to int).
template <typename T>
T MulAdd(T acc, T a, T b) {
  if constexpr (!std::is_integral_v<T>) {  // floats and complex
    return acc + a * b;
  } else {
    using U = std::conditional_t<(sizeof(T) < sizeof(uint32_t)), uint32_t, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(acc) + static_cast<U>(a) * static_cast<U>(b));
  }
}

// The GEMM rows of one group: (output batch element n, position p) pairs, either
// batch-major (r = n * positions + p) or position-major (r = p * out_batch + n),
// whichever makes the output a strided matrix (NHWC forward: batch-major; HWIO filter
// gradients: position-major).
class RowCursor {
 public:
  RowCursor(const Conv& c, bool position_major, int64_t r)
      : c_(c),
        position_major_(position_major),
        n_(position_major ? r % c.out_batch : r / c.positions),
        p_(position_major ? r / c.out_batch : r % c.positions),
        o_(c, &WindowDim::out, p_) {}
  int64_t batch() const { return n_; }
  const Odometer& position() const { return o_; }
  void Next() {
    if (position_major_) {
      if (++n_ < c_.out_batch) return;
      n_ = 0;
      o_.Next();
    } else {
      o_.Next();
      if (++p_ < c_.positions) return;
      p_ = 0;
      ++n_;
    }
  }

 private:
  const Conv& c_;
  bool position_major_;
  int64_t n_, p_;
  Odometer o_;
};

// The lhs of group q's batch element n, at the group's first feature.
template <typename T>
const T* GroupLhs(const Conv& c, int64_t q, int64_t n) {
  const int64_t batch = q / c.feature_groups * c.out_batch + n;
  return static_cast<const T*>(c.lhs.data) + batch * c.lhs.stride[0] +
         q % c.feature_groups * c.group_in * c.lhs.stride[1];
}

// A run of lhs elements that im2col copies for an interior row (one whose window lies
// inside the lhs): `length` elements from the window's first tap + `src` to the patch
// row + `dst`.
struct TapRun {
  int64_t src, dst, length;
};

// The runs of window positions [w_begin, w_end): one per tap (group_in features), merged
// where consecutive taps are adjacent in the lhs (a 3x3 window over 3 features: 3 runs of
// 9 elements instead of 9 of 3). Empty when lhs dilation puts holes in windows.
std::vector<TapRun> TapRuns(const Conv& c, int64_t w_begin, int64_t w_end) {
  std::vector<TapRun> runs;
  for (const WindowDim& d : c.dims) {
    if (d.base_dilation != 1) return runs;
  }
  Odometer w(c, &WindowDim::window, w_begin);
  for (int64_t i = w_begin; i < w_end; ++i, w.Next()) {
    int64_t src = 0;
    for (int64_t d = 0; d < c.spatial; ++d) {
      src += w[d] * c.dims[d].window_dilation * c.lhs.stride[2 + d];
    }
    const int64_t dst = (i - w_begin) * c.group_in;
    if (!runs.empty() && runs.back().src + runs.back().length == src) {
      runs.back().length += c.group_in;  // dst is adjacent too: taps fill rows in order.
    } else {
      runs.push_back({src, dst, c.group_in});
    }
  }
  return runs;
}

// The lhs offset of output position `o`'s first window tap if its whole window lies
// inside the lhs (no padding; no lhs dilation, which TapRuns checks), else -1.
int64_t InteriorOffset(const Conv& c, const Odometer& o) {
  int64_t offset = 0;
  for (int64_t d = 0; d < c.spatial; ++d) {
    const WindowDim& dim = c.dims[d];
    const int64_t first = o[d] * dim.stride - dim.pad_lo;
    if (first < 0 || first + (dim.window - 1) * dim.window_dilation >= dim.in) return -1;
    offset += first * c.lhs.stride[2 + d];
  }
  return offset;
}

// Fills the patch matrix [rows, (w_end - w_begin) * group_in] of group q for GEMM rows
// r0.. and window positions [w_begin, w_end). Interior rows copy TapRuns; border rows
// (padding) and lhs-dilated ones look up every tap.
template <typename T>
void Im2Col(const Conv& c, int64_t q, bool position_major, int64_t r0, int64_t rows,
            int64_t w_begin, int64_t w_end, T* patches) {
  T* dst = patches;
  const int64_t row_length = (w_end - w_begin) * c.group_in;
  const std::vector<TapRun> runs = TapRuns(c, w_begin, w_end);
  Odometer w(c, &WindowDim::window);
  for (RowCursor r(c, position_major, r0); rows-- > 0; r.Next(), dst += row_length) {
    const T* lhs = GroupLhs<T>(c, q, r.batch());
    if (const int64_t base = runs.empty() ? -1 : InteriorOffset(c, r.position()); base >= 0) {
      for (const TapRun& run : runs) std::copy_n(lhs + base + run.src, run.length, dst + run.dst);
      continue;
    }
    w.Seek(w_begin);
    T* tap = dst;
    for (int64_t i = w_begin; i < w_end; ++i, w.Next(), tap += c.group_in) {
      const int64_t offset = TapOffset(c, r.position(), w);
      if (offset >= 0) {
        std::copy_n(lhs + offset, c.group_in, tap);
      } else {
        std::fill_n(tap, c.group_in, T(0));
      }
    }
  }
}

// The output offset of GEMM row r's first feature in group q.
int64_t OutRowOffset(const Conv& c, const RowCursor& r, int64_t q) {
  return r.batch() * c.out.stride[0] + q * c.group_out * c.out.stride[1] +
         SpatialOffset(c.out, r.position());
}

// Writes a dense [rows, group_out] tile of group q, GEMM rows r0.., to the output.
template <typename T>
void ScatterTile(const Conv& c, const T* tile, int64_t q, bool position_major, int64_t r0,
                 int64_t rows, T* out) {
  RowCursor r(c, position_major, r0);
  for (int64_t i = 0; i < rows; ++i, r.Next()) {
    T* y = out + OutRowOffset(c, r, q);
    for (int64_t j = 0; j < c.group_out; ++j) y[j * c.out.stride[1]] = tile[i * c.group_out + j];
  }
}

// Depthwise convolution (one input feature per group): per output position, adds each
// window tap's whole feature row times that tap's filter row, so the inner loop runs
// over contiguous features instead of one tiny GEMM per group. `filter` is packed
// [group][window][1][group_out]. Output positions (all batch elements') are split into
// ThreadPool::PartsFor parts, each with its own accumulator.
template <typename T>
void DepthwiseConv(const Conv& c, const T* filter, T* out) {
  const int64_t groups = c.groups, m = c.group_out, features = groups * m;
  std::vector<T> rows(c.window * features);  // [window][feature].
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < c.window; ++i) {
      std::copy_n(filter + (g * c.window + i) * m, m, rows.data() + i * features + g * m);
    }
  }
  const T* lhs = static_cast<const T*>(c.lhs.data);
  const int64_t total = c.out_batch * c.positions;
  KernelWork work;
  work.element_ops = 2.0 * total * c.window * features;
  ThreadPool& pool = ThreadPool::Global();
  const int64_t parts = pool.PartsFor(work);
  pool.ParallelFor(total, (total + parts - 1) / parts, [&](int64_t first, int64_t end) {
    std::vector<T> acc(features);
    Odometer o(c, &WindowDim::out, first % c.positions), w(c, &WindowDim::window);
    for (int64_t flat = first; flat < end; ++flat, o.Next()) {
      const int64_t n = flat / c.positions;
      if (flat > first && flat % c.positions == 0) o.Seek(0);
      const T* x = lhs + n * c.lhs.stride[0];
      std::fill(acc.begin(), acc.end(), T(0));
      w.Seek(0);
      for (int64_t i = 0; i < c.window; ++i, w.Next()) {
        const int64_t offset = TapOffset(c, o, w);
        if (offset < 0) continue;
        const T* in = x + offset;
        const T* f = rows.data() + i * features;
        if (m == 1) {
          for (int64_t g = 0; g < groups; ++g) acc[g] = MulAdd(acc[g], in[g], f[g]);
        } else {
          for (int64_t g = 0; g < groups; ++g) {
            for (int64_t j = 0; j < m; ++j) {
              acc[g * m + j] = MulAdd(acc[g * m + j], in[g], f[g * m + j]);
            }
          }
        }
      }
      T* dst = out + n * c.out.stride[0] + SpatialOffset(c.out, o);
      for (int64_t f = 0; f < features; ++f) dst[f * c.out.stride[1]] = acc[f];
    }
  });
}

// c[m, n] = a[m, k] b[k, n] (+ c if `accumulate`), row strides lda, n and ldc; with
// `transposed_c`, c holds the result transposed (element (i, j) at c[j * ldc + i]).
template <typename T>
void GemmBlas(bool transposed_c, bool accumulate, int64_t m, int64_t n, int64_t k, const T* a,
              int64_t lda, const T* b, T* c, int64_t ldc) {
  const blasint M = static_cast<blasint>(m), N = static_cast<blasint>(n),
                K = static_cast<blasint>(k), LDA = static_cast<blasint>(lda),
                LDC = static_cast<blasint>(ldc);
  const T beta = accumulate ? T(1) : T(0);
  // The transposed result is b^T a^T, with both operands read transposed.
  const auto ta = transposed_c ? CblasTrans : CblasNoTrans;
  const T* first = transposed_c ? b : a;
  const T* second = transposed_c ? a : b;
  const blasint ld_first = transposed_c ? N : LDA, ld_second = transposed_c ? LDA : N;
  const blasint rows = transposed_c ? N : M, cols = transposed_c ? M : N;
  UseSingleThreadedBlas();
  if constexpr (std::is_same_v<T, float>) {
    scipy_cblas_sgemm(CblasRowMajor, ta, ta, rows, cols, K, 1.0f, first, ld_first, second,
                      ld_second, beta, c, LDC);
  } else {
    scipy_cblas_dgemm(CblasRowMajor, ta, ta, rows, cols, K, 1.0, first, ld_first, second, ld_second,
                      beta, c, LDC);
  }
}

// c[m, n] = a[m, k] b[k, n] (+ c if `accumulate`) for integers: a plain loop ordered
// i-k-j so the inner loop is contiguous.
template <typename T>
void GemmLoop(bool accumulate, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
              T* c) {
  if (!accumulate) std::fill_n(c, m * n, T(0));
  for (int64_t i = 0; i < m; ++i) {
    T* row = c + i * n;
    for (int64_t p = 0; p < k; ++p) {
      const T aip = a[i * lda + p];
      const T* brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) row[j] = MulAdd(row[j], aip, brow[j]);
    }
  }
}

// The offset step between consecutive GEMM rows of an operand whose positions step by
// `position_stride` (PositionStride) and batch elements by `batch_stride`, if uniform
// over all rows in that order; -1 otherwise.
int64_t RowStride(const Conv& c, bool position_major, int64_t position_stride,
                  int64_t batch_stride) {
  // The inner index of the row order varies fastest; the outer one steps after it wraps.
  const int64_t inner_count = position_major ? c.out_batch : c.positions;
  const int64_t outer_count = position_major ? c.positions : c.out_batch;
  const int64_t inner = position_major ? batch_stride : position_stride;
  const int64_t outer = position_major ? position_stride : batch_stride;
  if (inner_count == 1) return outer;
  if (inner < 0) return -1;
  return outer_count == 1 || outer == inner_count * inner ? inner : -1;
}

// How the GEMM rows of a group are laid out: their order, and the row stride of the
// output (and of the lhs, for 1x1 windows) over runs of `segment` rows.
struct RowPlan {
  bool position_major = false;
  int64_t segment = 0;      // Tiles never straddle a multiple of this.
  int64_t out_stride = -1;  // -1: not a strided matrix; write via ScatterTile.
  int64_t lhs_stride = -1;  // -1: not a strided matrix; use im2col.
};

RowPlan PlanRows(const Conv& c) {
  const int64_t out_positions = PositionStride(c.out);
  const int64_t lhs_positions = PositionStride(c.lhs);
  // A 1x1 window at stride 1 over unpadded, undilated input reads the lhs positions as is.
  bool direct = c.window == 1 && lhs_positions >= 0;
  for (const WindowDim& d : c.dims) {
    direct = direct && d.stride == 1 && d.pad_lo == 0 && d.base_dilation == 1 && d.in == d.out;
  }
  RowPlan plan;
  for (bool position_major : {false, true}) {
    plan.out_stride = RowStride(c, position_major, out_positions, c.out.stride[0]);
    if (plan.out_stride >= 0) {  // All of a group's rows form one matrix.
      plan.position_major = position_major;
      plan.segment = c.out_batch * c.positions;
      if (direct) plan.lhs_stride = RowStride(c, position_major, lhs_positions, c.lhs.stride[0]);
      return plan;
    }
  }
  // One matrix per batch element, if its positions flatten.
  plan.segment = c.positions;
  plan.out_stride = out_positions;
  if (direct) plan.lhs_stride = lhs_positions;
  return plan;
}

// The im2col + GEMM convolution of the header comment; `filter` is packed by PackFilter.
// Tiles are [rows, window positions] blocks of the patch matrix; a filter too large for
// one tile is split along its window positions and the partial products accumulated.
template <typename T>
Status GemmConv(const KernelContext& ctx, const Conv& c, const T* filter, T* out) {
  constexpr bool kBlas = std::is_same_v<T, float> || std::is_same_v<T, double>;
  const RowPlan plan = PlanRows(c);
  const bool direct = plan.lhs_stride >= 0;
  // Where the product goes: straight into the output as [rows, features] (feature stride
  // 1) or as its transpose (row stride 1), else via a dense tile and ScatterTile.
  const bool rows_out = kBlas && plan.out_stride >= 0 && c.out.stride[1] == 1;
  const bool cols_out = kBlas && !rows_out && (plan.out_stride == 1 || plan.out_stride == 0);
  // The cost model decides the parts (GEMM flops plus the patch matrix written and read);
  // the tiles are cut so that each part gets kTilesPerPart of them, within the cache bound.
  // The cut comes from BlocksFor, which the shape and thread count alone decide: a tile's
  // rows are its GEMM's M, and OpenBLAS's bits depend on M (a GEMM cut into row tiles of
  // other heights differs in the last bits), so PartsFor, which also depends on whether
  // the helpers are awake, only chooses how many threads share the tiles.
  const int64_t total_rows = c.out_batch * c.positions;
  KernelWork work;
  work.flops = 2.0 * total_rows * c.groups * c.k * c.group_out;
  work.bytes = direct ? 0.0 : 2.0 * total_rows * c.groups * c.k * sizeof(T);
  ThreadPool& pool = ThreadPool::Global();
  const int64_t blocks = pool.BlocksFor(work);
  int64_t tile_rows = std::max(kMinTileRows, kTileElements / c.k);
  if (blocks > 1) {
    const int64_t segments = c.groups * (total_rows / plan.segment);
    const int64_t per_segment = (blocks * kTilesPerPart + segments - 1) / segments;
    tile_rows =
        std::min(tile_rows, std::max(kMinTileRows, (plan.segment + per_segment - 1) / per_segment));
  }
  tile_rows = std::min(plan.segment, tile_rows);
  const int64_t tile_window =
      direct ? 1 : std::clamp<int64_t>(kTileElements / (tile_rows * c.group_in), 1, c.window);
  const int64_t lhs_ld = std::max(plan.lhs_stride, c.k);
  const int64_t ldc =
      rows_out ? std::max(plan.out_stride, c.group_out) : std::max(c.out.stride[1], tile_rows);
  for (int64_t v : {tile_rows, tile_window * c.group_in, c.group_out, lhs_ld, ldc}) {
    if (kBlas && v > INT_MAX) {
      return Unimplemented("workshop: convolution too large for 32-bit BLAS at ", ctx.instr.loc);
    }
  }
  // Work items: tiles of output rows. They write disjoint rows of the output, so threads
  // take them from a shared counter, each with its own patch and tile scratch. A 3x3x64->64
  // conv on 4x56x56x64 f32 took 10.8 ms on one thread (XLA:CPU: 9.5 ms, also one).
  struct Item {
    int64_t q, r0, rows;
  };
  std::vector<Item> items;
  for (int64_t q = 0; q < c.groups; ++q) {
    for (int64_t segment = 0; segment < total_rows; segment += plan.segment) {
      const int64_t segment_end = segment + plan.segment;
      for (int64_t r0 = segment; r0 < segment_end; r0 += tile_rows) {
        items.push_back({q, r0, std::min(tile_rows, segment_end - r0)});
      }
    }
  }
  const int64_t workers =
      std::min<int64_t>(pool.PartsFor(work), static_cast<int64_t>(items.size()));
  std::atomic<int64_t> next{0};
  std::atomic<bool> out_of_memory{false};
  const MemoryStatsRef stats = MemoryAttribution::Current();
  pool.ParallelFor(workers, 1, [&](int64_t, int64_t) {
    MemoryAttribution attribution(stats);  // Scratch on pool helpers counts for the device.
    std::shared_ptr<Storage> patch_holder, tile_holder;
    auto allocate = [&](std::shared_ptr<Storage>& holder, int64_t n) -> T* {
      holder = Storage::Allocate(n * sizeof(T));
      return holder ? static_cast<T*>(holder->data()) : nullptr;
    };
    T* patches = direct ? nullptr : allocate(patch_holder, tile_rows * tile_window * c.group_in);
    T* tile = rows_out || cols_out ? nullptr : allocate(tile_holder, tile_rows * c.group_out);
    if ((!direct && patches == nullptr) || (!rows_out && !cols_out && tile == nullptr)) {
      out_of_memory = true;
      return;
    }
    for (int64_t i; (i = next.fetch_add(1)) < static_cast<int64_t>(items.size());) {
      const auto [q, r0, rows] = items[i];
      const RowCursor first(c, plan.position_major, r0);
      T* y = out + OutRowOffset(c, first, q);
      for (int64_t w0 = 0; w0 < c.window; w0 += tile_window) {
        const int64_t w1 = std::min(c.window, w0 + tile_window);
        const int64_t k = (w1 - w0) * c.group_in;
        const T* a = patches;
        const int64_t lda = direct ? lhs_ld : k;
        if (direct) {
          // Direct: lhs positions are output positions.
          a = GroupLhs<T>(c, q, first.batch()) + SpatialOffset(c.lhs, first.position());
        } else {
          Im2Col(c, q, plan.position_major, r0, rows, w0, w1, patches);
        }
        const T* b = filter + (q * c.k + w0 * c.group_in) * c.group_out;
        const bool accumulate = w0 > 0;
        if constexpr (kBlas) {
          if (rows_out || cols_out) {
            GemmBlas(cols_out, accumulate, rows, c.group_out, k, a, lda, b, y, ldc);
          } else {
            GemmBlas(false, accumulate, rows, c.group_out, k, a, lda, b, tile, c.group_out);
          }
        } else {
          GemmLoop(accumulate, rows, c.group_out, k, a, lda, b, tile);
        }
      }
      if (tile != nullptr) ScatterTile(c, tile, q, plan.position_major, r0, rows, out);
    }
  });
  if (out_of_memory) return ResourceExhausted("workshop: convolution scratch at ", ctx.instr.loc);
  return Status();
}

template <typename T>
Status RunConv(const KernelContext& ctx, Conv& c) {
  const Tensor& result = ctx.outs[0];
  T* out = result.as<T>();
  if (result.num_elements() == 0) return Status();
  if (c.k == 0) {  // Empty window or no input features: every sum is empty.
    std::fill_n(out, result.num_elements(), T(0));
    return Status();
  }
  std::shared_ptr<Storage> lhs_holder, filter_holder;
  WORKSHOP_RETURN_IF_ERROR(MakeFeatureMinor(ctx, c, sizeof(T), lhs_holder));
  WORKSHOP_RETURN_IF_ERROR(PackFilter(ctx, c, sizeof(T), filter_holder));
  const T* filter = static_cast<const T*>(filter_holder->data());
  if (c.group_in == 1 && c.feature_groups > 1) {
    DepthwiseConv(c, filter, out);
    return Status();
  }
  return GemmConv(ctx, c, filter, out);
}

Status Convolution(KernelContext& ctx) {
  const Tensor& lhs = ctx.ins[0];
  if (ctx.ins[1].dtype != lhs.dtype || ctx.outs[0].dtype != lhs.dtype) {
    return Unimplemented("workshop: convolution of ", DTypeName(lhs.dtype), " and ",
                         DTypeName(ctx.ins[1].dtype), " into ", DTypeName(ctx.outs[0].dtype),
                         " is not supported at ", ctx.instr.loc);
  }
  Conv c;
  WORKSHOP_RETURN_IF_ERROR(ParseConv(ctx, &c));
  auto run = [&](auto tag) { return RunConv<decltype(tag)>(ctx, c); };
  return DispatchNumeric(lhs.dtype, run, [&] {
    return DispatchComplex(lhs.dtype, run, [&] { return UnsupportedDType(ctx, lhs.dtype); });
  });
}

WORKSHOP_REGISTER_KERNEL("convolution", Convolution);

}  // namespace
}  // namespace workshop
