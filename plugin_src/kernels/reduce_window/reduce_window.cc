// reduce_window (pooling, cumulative reductions) and select_and_scatter (max-pool
// gradient), plus the window geometry of window.h.
//
// Both ops walk the output in rows (every index fixed but the last) and, per row, every
// window position; along the last dimension a window position reads an arithmetic run
// of operand elements (WindowRunAt), so the innermost loops are strided or, for NHWC
// pooling (window 1 over channels), contiguous. Padding and base-dilation holes are
// skipped, so the init value is folded into each output exactly once, as XLA does.
#include "kernels/reduce_window/window.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/core/attr_check.h"
#include "kernels/core/strided.h"
#include "kernels/elementwise/element_ops.h"
#include "kernels/math/half.h"
#include "runtime/thread_pool.h"

namespace workshop {

namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

// The input extent a window position may read: the base-dilated operand, without padding.
int64_t DilatedSize(const WindowDim& d) { return (d.in - 1) * d.base_dilation + 1; }

}  // namespace

Status CheckWindowDims(const KernelContext& ctx, const std::vector<WindowDim>& dims) {
  for (const WindowDim& d : dims) {
    if (d.stride < 1 || d.base_dilation < 1 || d.window_dilation < 1 || d.window < 0) {
      return InvalidArgument("workshop: ", ctx.instr.op, " with window ", d.window, ", stride ",
                             d.stride, ", dilations ", d.base_dilation, "/", d.window_dilation,
                             " at ", ctx.instr.loc);
    }
    // Every index the walk computes (o * stride + w * window_dilation - pad_lo, and the
    // dilated operand extent) must fit int64_t; only crafted attributes come near.
    const __int128 reach =
        static_cast<__int128>(std::max<int64_t>(d.out - 1, 0)) * d.stride +
        static_cast<__int128>(std::max<int64_t>(d.window - 1, 0)) * d.window_dilation +
        (d.pad_lo < 0 ? -static_cast<__int128>(d.pad_lo) : d.pad_lo) +
        static_cast<__int128>(std::max<int64_t>(d.in - 1, 0)) * d.base_dilation;
    if (reach > (static_cast<__int128>(1) << 62)) {
      return InvalidArgument("workshop: ", ctx.instr.op, " with window ", d.window, ", stride ",
                             d.stride, ", padding ", d.pad_lo, " reaches past 2^62 elements at ",
                             ctx.instr.loc);
    }
  }
  return Status();
}

namespace {

std::pair<int64_t, int64_t> ReadingWindowPositions(const WindowDim& d) {
  // Output o reads operand index o * stride + w * window_dilation - pad_lo, which must lie
  // in [0, DilatedSize) for some o in [0, out).
  if (d.out == 0 || d.in == 0) return {0, 0};
  const int64_t lo =
      std::max<int64_t>(0, CeilDiv(d.pad_lo - (d.out - 1) * d.stride, d.window_dilation));
  const int64_t hi =
      std::min(d.window, FloorDiv(d.pad_lo + DilatedSize(d) - 1, d.window_dilation) + 1);
  return {lo, std::max(lo, hi)};
}

}  // namespace

WindowRun WindowRunAt(const WindowDim& d, int64_t w) {
  const int64_t offset = w * d.window_dilation - d.pad_lo;  // i = o * stride + offset.
  const int64_t first = std::max<int64_t>(0, CeilDiv(-offset, d.stride));
  const int64_t last = std::min(d.out - 1, FloorDiv(DilatedSize(d) - 1 - offset, d.stride));
  // Along the run, i advances by stride; it lands on an element every `step` outputs.
  const int64_t step = d.base_dilation / std::gcd(d.stride, d.base_dilation);
  for (int64_t o = first; o <= last && o < first + step; ++o) {
    const int64_t i = o * d.stride + offset;
    if (i % d.base_dilation == 0) {
      return WindowRun{o, step, i / d.base_dilation, step * d.stride / d.base_dilation,
                       (last - o) / step + 1};
    }
  }
  return WindowRun{};
}

namespace {

// The walk over a window op's output rows and window positions, for dense row-major
// operand and output (rank >= 1).
class WindowWalk {
 public:
  explicit WindowWalk(std::vector<WindowDim> dims) : dims_(std::move(dims)) {
    std::vector<int64_t> in_dims;
    for (const WindowDim& d : dims_) in_dims.push_back(d.in);
    in_strides_ = RowMajorStrides(in_dims);
    for (const WindowDim& d : dims_) positions_.push_back(ReadingWindowPositions(d));
    for (int64_t w = positions_.back().first; w < positions_.back().second; ++w) {
      runs_.push_back(WindowRunAt(dims_.back(), w));
    }
  }

  int64_t row_length() const { return dims_.back().out; }

  // Output rows (every output dim but the last) and window positions over them.
  int64_t rows() const {
    return Product([](const WindowDim& d) { return d.out; });
  }
  int64_t window_positions() const { return OuterPositions() * static_cast<int64_t>(runs_.size()); }

  // For each output row in [first, end), in row-major order, calls run(row_offset,
  // in_offset, WindowRun) for every window position (row-major) that reads at least one
  // operand element, then done(row_offset). Offsets are in elements; the run's indices add
  // to in_offset. Rows write only their own output row, so ranges may run concurrently.
  template <typename RunFn, typename DoneFn>
  void ForEach(RunFn&& run, DoneFn&& done, int64_t first = 0, int64_t end = -1) const {
    const size_t outer = dims_.size() - 1;
    const int64_t window = OuterPositions();
    if (end < 0) end = rows();
    if (first >= end || row_length() == 0) return;
    std::vector<int64_t> o(outer, 0), w(outer, 0);
    for (size_t d = 0; d < outer; ++d) w[d] = positions_[d].first;
    for (int64_t rest = first, d = static_cast<int64_t>(outer) - 1; d >= 0; --d) {
      o[d] = rest % dims_[d].out;
      rest /= dims_[d].out;
    }
    for (int64_t row = first; row < end; ++row) {
      for (int64_t k = 0; k < window; ++k) {
        int64_t in_offset = 0;
        bool inside = true;
        for (size_t d = 0; d < outer && inside; ++d) {
          const int64_t index = WindowTap(dims_[d], o[d], w[d]);
          inside = index >= 0;
          in_offset += index * in_strides_[d];
        }
        if (inside) {
          for (const WindowRun& r : runs_) {
            if (r.count > 0) run(row * row_length(), in_offset, r);
          }
        }
        for (size_t d = outer; d-- > 0;) {  // Row-major over the reading positions.
          if (++w[d] < positions_[d].second) break;
          w[d] = positions_[d].first;
        }
      }
      done(row * row_length());
      Increment(o, [&](size_t d) { return dims_[d].out; });
    }
  }

 private:
  // The product of `of(d)` over every dim but the last.
  template <typename Of>
  int64_t Product(Of&& of) const {
    int64_t product = 1;
    for (size_t d = 0; d + 1 < dims_.size(); ++d) product *= of(dims_[d]);
    return product;
  }

  template <typename Limit>
  static void Increment(std::vector<int64_t>& index, Limit&& limit) {
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < limit(d)) return;
      index[d] = 0;
    }
  }

  // Window positions that read nothing in the outer dims (all padding) are skipped.
  int64_t OuterPositions() const {
    int64_t product = 1;
    for (size_t d = 0; d + 1 < dims_.size(); ++d) {
      product *= positions_[d].second - positions_[d].first;
    }
    return product;
  }

  std::vector<WindowDim> dims_;
  // Per dim, the window positions [first, second) that can read an operand element
  // (ReadingWindowPositions): the walk's cost is bounded by the operand and output, not
  // by the window, however large the padding makes it.
  std::vector<std::pair<int64_t, int64_t>> positions_;
  std::vector<int64_t> in_strides_;
  std::vector<WindowRun> runs_;  // Per window position along the last dim.
};

// Reads the per-dimension window attributes (dilations only if `dilations`) into
// WindowDims over operand dims `in` and output dims `out`. Rank 0 becomes one dim of
// size 1.
Status ParseWindow(const KernelContext& ctx, const Dims& in, const Dims& out, bool dilations,
                   std::vector<WindowDim>* dims) {
  if (in.size() != out.size()) {
    return InvalidArgument("workshop: ", ctx.instr.op, " of rank ", in.size(), " into rank ",
                           out.size(), " at ", ctx.instr.loc);
  }
  dims->assign(std::max<size_t>(in.size(), 1), WindowDim{});
  auto read = [&](const char* name, int64_t WindowDim::* field) -> Status {
    const IntList& values = ctx.instr.attr<IntList>(name);
    if (values.size() != in.size()) {
      return InvalidArgument("workshop: ", ctx.instr.op, " attribute '", name, "' has ",
                             values.size(), " entries for rank ", in.size(), " at ", ctx.instr.loc);
    }
    for (size_t d = 0; d < values.size(); ++d) (*dims)[d].*field = values[d];
    return Status();
  };
  WORKSHOP_RETURN_IF_ERROR(read("window", &WindowDim::window));
  WORKSHOP_RETURN_IF_ERROR(read("strides", &WindowDim::stride));
  WORKSHOP_RETURN_IF_ERROR(read("pad_lo", &WindowDim::pad_lo));
  if (dilations) {
    WORKSHOP_RETURN_IF_ERROR(read("base_dilation", &WindowDim::base_dilation));
    WORKSHOP_RETURN_IF_ERROR(read("window_dilation", &WindowDim::window_dilation));
  }
  for (size_t d = 0; d < in.size(); ++d) {
    (*dims)[d].in = in[d];
    (*dims)[d].out = out[d];
  }
  return CheckWindowDims(ctx, *dims);
}

// A cumulative reduction: JAX lowers cumsum/cumprod/cummax/cummin along axis a of length
// n to a window of n over that axis, padded by n - 1 before (or, reversed, after) it.
// As a window that costs O(n^2); as a scan, O(n).
struct Scan {
  size_t axis;
  bool reverse;
};

std::optional<Scan> AsScan(const std::vector<WindowDim>& dims) {
  std::optional<Scan> scan;
  for (size_t a = 0; a < dims.size(); ++a) {
    const WindowDim& d = dims[a];
    if (d.stride != 1 || d.base_dilation != 1 || d.window_dilation != 1) return std::nullopt;
    if (d.window == 1 && d.pad_lo == 0 && d.out == d.in) continue;
    const bool spans = d.window == d.in && d.out == d.in && d.in > 1;
    if (scan || !spans || (d.pad_lo != 0 && d.pad_lo != d.in - 1)) return std::nullopt;
    scan = Scan{a, d.pad_lo == 0};
  }
  return scan;
}

// The accumulator of a scan over T with `Op`: float sums and products of f32 and c64 run
// in double precision and are rounded once per output, so the n-th result carries about
// one rounding of T instead of n (the error of n sequential float sums grows with n;
// XLA:CPU runs JAX's associative_scan, whose error grows with log2 n). Sums of f64 and
// c128 are compensated instead (Acc = T, see ScanAdd). The rest are exact in any order.
template <typename T>
struct ScanAcc {
  using type = T;
};
template <>
struct ScanAcc<float> {
  using type = double;
};
template <>
struct ScanAcc<std::complex<float>> {
  using type = std::complex<double>;
};

template <typename T, typename Op>
constexpr bool kWidenedScan = (std::is_same_v<Op, Add> || std::is_same_v<Op, Multiply>) &&
                              !std::is_same_v<typename ScanAcc<T>::type, T>;
template <typename T, typename Op>
constexpr bool kCompensatedScan =
    std::is_same_v<Op, Add> &&
    (std::is_same_v<T, double> || std::is_same_v<T, std::complex<double>>);

// s + x with its rounding error accumulated in c (Neumaier's variant of Kahan summation:
// Neumaier, ZAMM 54, 1974), per real component; s + c is the sum to about one rounding.
inline void NeumaierAdd(double& s, double& c, double x) {
  const double t = s + x;
  c += std::fabs(s) >= std::fabs(x) ? (s - t) + x : (x - t) + s;
  s = t;
}

// One lane of a scan: `inner` independent columns. Row j of the scan is x[j*inner ..).
template <typename T, typename Op>
void ScanColumns(const T* x, T* y, int64_t n, int64_t inner, bool reverse, T init, Op op) {
  auto row = [&](int64_t j) { return (reverse ? n - 1 - j : j) * inner; };
  if constexpr (kWidenedScan<T, Op>) {
    using Acc = typename ScanAcc<T>::type;
    std::vector<Acc> acc(inner, static_cast<Acc>(init));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = row(j);
      for (int64_t k = 0; k < inner; ++k) {
        acc[k] = op(acc[k], static_cast<Acc>(x[at + k]));
        y[at + k] = static_cast<T>(acc[k]);
      }
    }
  } else if constexpr (kCompensatedScan<T, Op>) {
    constexpr int kParts = std::is_same_v<T, double> ? 1 : 2;  // Real components.
    std::vector<double> sum(inner * kParts), comp(inner * kParts, 0.0);
    const double* init_parts = reinterpret_cast<const double*>(&init);
    for (int64_t k = 0; k < inner * kParts; ++k) sum[k] = init_parts[k % kParts];
    for (int64_t j = 0; j < n; ++j) {
      const double* xs = reinterpret_cast<const double*>(x + row(j));
      double* ys = reinterpret_cast<double*>(y + row(j));
      for (int64_t k = 0; k < inner * kParts; ++k) {
        NeumaierAdd(sum[k], comp[k], xs[k]);
        ys[k] = sum[k] + comp[k];
      }
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = row(j);
      const int64_t prev = at + (reverse ? inner : -inner);
      if (j == 0) {
        for (int64_t k = 0; k < inner; ++k) y[at + k] = op(init, x[at + k]);
      } else {
        for (int64_t k = 0; k < inner; ++k) y[at + k] = op(y[prev + k], x[at + k]);
      }
    }
  }
}

// Columns per work item of a scan: contiguous, and enough of them to be worth a hand-off.
constexpr int64_t kScanColumnTile = 256;

template <typename T, typename Op>
void ScanLoop(const std::vector<WindowDim>& dims, Scan scan, const T* in, T init, T* out, Op op) {
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d < scan.axis) outer *= dims[d].in;
    if (d > scan.axis) inner *= dims[d].in;
  }
  const int64_t n = dims[scan.axis].in;
  // An empty output (a zero-size dim other than the axis) has nothing to scan; the tile
  // below would be 0 and its count a division by zero (SIGFPE).
  if (outer == 0 || inner == 0) return;
  // Work items: (outer index, tile of columns); each scans its columns along the axis
  // with a strided row (inner elements apart), so the order of every column's operations
  // is the same whatever the split.
  const int64_t tile = std::min(inner, kScanColumnTile);
  const int64_t tiles = (inner + tile - 1) / tile;
  KernelWork work;  // Reads and writes every element once.
  work.bytes = 2.0 * outer * n * inner * sizeof(T);
  ThreadPool::Global().ParallelFor(outer * tiles, work, [&](int64_t first, int64_t end) {
    // Not std::vector: vector<bool> has no data().
    std::unique_ptr<T[]> xs, ys;
    for (int64_t item = first; item < end; ++item) {
      const int64_t b = item / tiles, c0 = item % tiles * tile;
      const int64_t w = std::min(tile, inner - c0);
      const T* x = in + b * n * inner + c0;
      T* y = out + b * n * inner + c0;
      if (w == inner) {
        ScanColumns(x, y, n, inner, scan.reverse, init, op);
        continue;
      }
      // A tile of a wider row: gathered into a dense [n, w] block and scattered back.
      if (!xs) {
        xs.reset(new T[n * tile]);
        ys.reset(new T[n * tile]);
      }
      for (int64_t j = 0; j < n; ++j) std::copy(x + j * inner, x + j * inner + w, &xs[j * w]);
      ScanColumns(xs.get(), ys.get(), n, w, scan.reverse, init, op);
      for (int64_t j = 0; j < n; ++j) std::copy(&ys[j * w], &ys[j * w] + w, y + j * inner);
    }
  });
}

// `Op` on f32 with each result rounded to the 16-bit float type `H` (Float16 or
// BFloat16) and widened back: the body of a reduce_window declared on H, one rounding per
// application as XLA:CPU. Not Add or Multiply, so scans accumulate in f32 step by step.
template <typename Op, typename H>
struct RoundedOp {
  Op op;
  float operator()(float a, float b) const {
    const float r = op(a, b);
    if constexpr (std::is_same_v<H, BFloat16>) {
      return ToFloat(ToBFloat16(r));
    } else {
      return ToFloat(ToFloat16(r));
    }
  }
};

// y[k] = op(y[k], x[k]) for k < n. The output and operand never overlap (the output is a
// fresh buffer).
template <typename T, typename Op>
void CombineRun(T* __restrict y, const T* __restrict x, int64_t n, Op op) {
  for (int64_t k = 0; k < n; ++k) y[k] = op(y[k], x[k]);
}

// A dim the window passes through unchanged: window 1, stride 1, no padding or dilation.
bool PassesThrough(const WindowDim& d) {
  return d.window == 1 && d.stride == 1 && d.pad_lo == 0 && d.base_dilation == 1 && d.in == d.out;
}

template <typename T, typename Op>
void ReduceWindowLoop(const std::vector<WindowDim>& dims, const T* in, T init, T* out, Op op) {
  if (std::optional<Scan> scan = AsScan(dims)) return ScanLoop(dims, *scan, in, init, out, op);
  // Trailing dims the window passes through (NHWC pooling's channels) become the element:
  // the walk runs over the other dims with blocks of `block` contiguous elements, so a
  // 2x2 max-pool over 32 channels visits each window position once per output row of
  // blocks, not once per 32 channels (16x32x32x32 f32: the walk took most of 0.27 ms).
  std::vector<WindowDim> walk_dims = dims;
  int64_t block = 1;
  while (walk_dims.size() >= 2 && PassesThrough(walk_dims.back())) {
    block *= walk_dims.back().in;
    walk_dims.pop_back();
  }
  if (block == 0) return;  // An empty output.
  const WindowWalk walk(walk_dims);
  const int64_t row_length = walk.row_length() * block;
  // Ranges of output rows split over the pool by the cost model, each element visit a read
  // and a write of the output row (max-pool 3x3/2 of 16x56x56x64 f32: 2.1 ms on one
  // thread; XLA:CPU 1.9 ms on two).
  KernelWork work;
  work.bytes = 2.0 * walk.rows() * row_length * walk.window_positions() * sizeof(T);
  ThreadPool::Global().ParallelFor(walk.rows(), work, [&](int64_t first, int64_t end) {
    std::fill(out + first * row_length, out + end * row_length, init);
    walk.ForEach(
        [&](int64_t row, int64_t in_offset, const WindowRun& r) {
          T* y = out + (row + r.out_begin) * block;
          const T* x = in + (in_offset + r.in_begin) * block;
          if (block > 1) {
            for (int64_t k = 0; k < r.count; ++k) {
              CombineRun(y + k * r.out_step * block, x + k * r.in_step * block, block, op);
            }
          } else if (r.out_step == 1 && r.in_step == 1) {
            CombineRun(y, x, r.count, op);
          } else {
            for (int64_t k = 0; k < r.count; ++k) {
              y[k * r.out_step] = op(y[k * r.out_step], x[k * r.in_step]);
            }
          }
        },
        [](int64_t) {}, first, end);
  });
}

Status ReduceWindow(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const Tensor& init = ctx.ins[1];
  const Tensor& out = ctx.outs[0];
  std::vector<WindowDim> dims;
  WORKSHOP_RETURN_IF_ERROR(ParseWindow(ctx, *in.dims, *out.dims, true, &dims));
  const std::string& body = ctx.instr.attr<std::string>("body");
  auto unsupported = [&] {
    return Unimplemented("workshop: reduce_window with body '", body, "' on ", DTypeName(in.dtype),
                         " is not supported at ", ctx.instr.loc);
  };
  if (init.dtype != in.dtype || out.dtype != in.dtype) return unsupported();
  // A 16-bit float reduce_window runs in f32 (legalize.py) with each body result rounded
  // to its type, as XLA:CPU's (rules/reduce_window.py sets round_to).
  const auto round_attr = ctx.instr.attrs.find("round_to");
  const DType round_to = round_attr == ctx.instr.attrs.end()
                             ? DType::kInvalid
                             : static_cast<DType>(ctx.instr.attr<int64_t>("round_to"));
  return DispatchReducer(
      body,
      [&](auto op) -> Status {
        using Op = decltype(op);
        return DispatchAllOrComplex(
            in.dtype,
            [&](auto tag) -> Status {
              using T = decltype(tag);
              if constexpr (Op::template kSupports<T>) {
                if constexpr (std::is_same_v<T, float>) {
                  // Both walks fold each output's window in row-major order, as
                  // XLA:CPU (which the rounding makes visible).
                  auto rounded = [&](auto round_op) {
                    ReduceWindowLoop<T>(dims, in.as<T>(), init.as<T>()[0], out.as<T>(), round_op);
                    return Status();
                  };
                  if (round_to == DType::kBF16) return rounded(RoundedOp<Op, BFloat16>{op});
                  if (round_to == DType::kF16) return rounded(RoundedOp<Op, Float16>{op});
                }
                ReduceWindowLoop<T>(dims, in.as<T>(), init.as<T>()[0], out.as<T>(), op);
                return Status();
              } else {
                return unsupported();
              }
            },
            unsupported);
      },
      unsupported);
}

// Calls fn(keep) with keep(current, candidate) true when select_and_scatter's select
// body, `current DIRECTION candidate`, keeps the current selection.
template <typename Fn, typename Fallback>
auto DispatchSelect(const std::string& direction, Fn&& fn, Fallback&& fallback) {
  if (direction == "GE") return fn([](auto a, auto b) { return a >= b; });
  if (direction == "GT") return fn([](auto a, auto b) { return a > b; });
  if (direction == "LE") return fn([](auto a, auto b) { return a <= b; });
  if (direction == "LT") return fn([](auto a, auto b) { return a < b; });
  return fallback();
}

// For each source element, selects one operand element of its window: the first
// in-bounds one, replaced by each later candidate unless keep(selected, candidate); then
// scatters the source value into the result there. Windows entirely in padding select
// nothing.
template <typename T, typename Keep, typename Op>
void SelectAndScatterLoop(const std::vector<WindowDim>& dims, const T* operand, const T* source,
                          T init, T* out, int64_t out_size, Keep keep, Op op) {
  std::fill(out, out + out_size, init);
  WindowWalk walk(dims);
  // Per output of the row: the selected value and its operand offset (-1: none yet).
  // Float selections start as NaN, which no comparison keeps, so the first candidate
  // wins without a separate test and the loop needs no branch.
  const T none = kIsFloat<T> ? std::numeric_limits<T>::quiet_NaN() : T(0);
  std::vector<T> best(walk.row_length(), none);
  std::vector<int64_t> where(walk.row_length(), -1);
  walk.ForEach(
      [&](int64_t, int64_t in_offset, const WindowRun& r) {
        const int64_t first = in_offset + r.in_begin;
        const T* __restrict x = operand + first;
        T* __restrict b = best.data() + r.out_begin;
        int64_t* __restrict at = where.data() + r.out_begin;
        auto select = [&](int64_t o, int64_t i) {
          bool take = !keep(b[o], x[i]);
          if constexpr (!kIsFloat<T>) take = take || at[o] < 0;
          b[o] = take ? x[i] : b[o];
          at[o] = take ? first + i : at[o];
        };
        if (r.out_step == 1 && r.in_step == 1) {  // NHWC pooling: runs over channels.
          for (int64_t k = 0; k < r.count; ++k) select(k, k);
        } else {
          for (int64_t k = 0; k < r.count; ++k) select(k * r.out_step, k * r.in_step);
        }
      },
      [&](int64_t row) {
        for (size_t o = 0; o < where.size(); ++o) {
          if (where[o] >= 0) out[where[o]] = op(out[where[o]], source[row + o]);
          where[o] = -1;
          best[o] = none;
        }
      });
}

Status SelectAndScatter(KernelContext& ctx) {
  const Tensor& operand = ctx.ins[0];
  const Tensor& source = ctx.ins[1];
  const Tensor& init = ctx.ins[2];
  const Tensor& out = ctx.outs[0];
  const std::string& body = ctx.instr.attr<std::string>("body");
  const std::string& select = ctx.instr.attr<std::string>("select");
  auto unsupported = [&] {
    return Unimplemented("workshop: select_and_scatter with select '", select,
                         "' and scatter body '", body, "' on ", DTypeName(operand.dtype),
                         " is not supported at ", ctx.instr.loc);
  };
  if (*out.dims != *operand.dims) {
    return InvalidArgument("workshop: select_and_scatter of ",
                           ShapeString(operand.dtype, *operand.dims), " into ",
                           ShapeString(out.dtype, *out.dims), " at ", ctx.instr.loc);
  }
  if (source.dtype != operand.dtype || init.dtype != operand.dtype || out.dtype != operand.dtype) {
    return unsupported();
  }
  std::vector<WindowDim> dims;
  WORKSHOP_RETURN_IF_ERROR(ParseWindow(ctx, *operand.dims, *source.dims, false, &dims));
  return DispatchSelect(
      select,
      [&](auto keep) -> Status {
        return DispatchReducer(
            body,
            [&](auto op) -> Status {
              using Op = decltype(op);
              return DispatchNumeric(
                  operand.dtype,
                  [&](auto tag) -> Status {
                    using T = decltype(tag);
                    if constexpr (Op::template kSupports<T>) {
                      SelectAndScatterLoop<T>(dims, operand.as<T>(), source.as<T>(),
                                              init.as<T>()[0], out.as<T>(), out.num_elements(),
                                              keep, op);
                      return Status();
                    } else {
                      return unsupported();
                    }
                  },
                  unsupported);
            },
            unsupported);
      },
      unsupported);
}

// One entry per operand dimension in each window list; sizes, strides and dilations at
// least 1. pad_lo may be negative, bounded so the window arithmetic cannot overflow.
Status CheckReduceWindow(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  for (const char* key : {"window", "strides", "base_dilation", "window_dilation"}) {
    WORKSHOP_RETURN_IF_ERROR(c.PerDim(key, c.In(0), 1));
  }
  return c.PerDim("pad_lo", c.In(0), std::numeric_limits<int64_t>::min() / 4);
}

Status CheckSelectAndScatter(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  WORKSHOP_RETURN_IF_ERROR(c.PerDim("window", c.In(0), 1));
  WORKSHOP_RETURN_IF_ERROR(c.PerDim("strides", c.In(0), 1));
  return c.PerDim("pad_lo", c.In(0), std::numeric_limits<int64_t>::min() / 4);
}

WORKSHOP_REGISTER_KERNEL("reduce_window", .fn = ReduceWindow, .check = CheckReduceWindow);
WORKSHOP_REGISTER_KERNEL("select_and_scatter", .fn = SelectAndScatter,
                         .check = CheckSelectAndScatter);

}  // namespace
}  // namespace workshop
