// convolution: N-d convolution in any layout, with strides, padding (possibly negative),
// lhs (input) dilation, rhs (window) dilation, window reversal, feature groups and batch
// groups. Operands and result share one dtype (f32, f64 or an integer type).
//
// The compiler passes the dimension numbers as canonical orders (lhs [batch, feature,
// spatial...], rhs [out feature, in feature, spatial...], out [batch, feature,
// spatial...]; docs/design.md), so the kernel deals in strides, never in named layouts.
//
// Groups: the output features split into groups = feature_groups * batch_groups (one of
// the two is 1) of `group_out` features. Group q reads the input features
// [(q % G) * Cg, (q % G + 1) * Cg) of lhs batch element (q / G) * out_batch + n, where
// Cg = rhs in-feature size (so feature groups split the input features and batch
// groups split the lhs batch, as StableHLO specifies).
//
// Each (output batch element, group) is one matrix product
//   out[positions, group_out] = patches[positions, window * Cg] x filter[window * Cg, group_out]
// where row p of `patches` (im2col) holds output position p's window of input features,
// zeros for padding and dilation holes, features innermost so every copy is a
// contiguous run. Hence the lhs is first made feature-minor when it isn't (NCHW), the
// filter is packed once as [group][window...][Cg][group_out] (reversal applied there),
// and positions go in tiles so the patch matrix stays in cache while the GEMM reads it.
// f32/f64 multiply with OpenBLAS straight into the output when its positions and
// features form a matrix (NHWC-like, or NCHW-like as the transposed product); integers
// use a plain wrapping loop (no signed-overflow UB). 1x1 stride-1 convolutions read the
// lhs as the patch matrix directly.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <type_traits>

#include "kernels/dispatch.h"
#include "kernels/kernel.h"
#include "kernels/strided.h"
#include "kernels/window.h"
#include "runtime/buffer.h"

namespace workshop {
namespace {

// Elements of the patch matrix per tile: 256 KiB of f32, which stays in L2 cache.
constexpr int64_t kTileElements = 64 * 1024;

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

Status Canonicalize(const KernelContext& ctx, const Tensor& t, const char* name,
                    int64_t rank, Canonical* c) {
  const IntList& layout = ctx.instr.attr<IntList>(name);
  std::vector<bool> seen(t.rank(), false);
  bool ok = t.rank() == rank && static_cast<int64_t>(layout.size()) == rank;
  for (size_t i = 0; ok && i < layout.size(); ++i) {
    ok = layout[i] >= 0 && layout[i] < rank && !seen[layout[i]];
    if (ok) seen[layout[i]] = true;
  }
  if (!ok) {
    return InvalidArgument("workshop: convolution attribute '", name,
                           "' is not a dim order of ", ShapeString(t.dtype, *t.dims), " at ",
                           ctx.instr.loc);
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
                             lists.back()->size(), " entries for ", c->spatial,
                             " spatial dims at ", ctx.instr.loc);
    }
  }
  for (int64_t d = 0; d < c->spatial; ++d) {
    c->dims.push_back(WindowDim{c->lhs.size[2 + d], c->out.size[2 + d], c->rhs.size[2 + d],
                                (*lists[0])[d], (*lists[1])[d], (*lists[2])[d],
                                (*lists[3])[d]});
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
                          c->lhs.size[1] == g * c->group_in &&
                          c->out.size[1] == out_features && out_features % c->groups == 0 &&
                          c->lhs.size[0] == b * c->out_batch;
  if (!consistent) {
    const Tensor &lhs = ctx.ins[0], &rhs = ctx.ins[1], &out = ctx.outs[0];
    return InvalidArgument("workshop: convolution of ", ShapeString(lhs.dtype, *lhs.dims),
                           " and ", ShapeString(rhs.dtype, *rhs.dims), " into ",
                           ShapeString(out.dtype, *out.dims), " with feature_group_count ",
                           g, " and batch_group_count ", b, " has inconsistent dims at ",
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
  if (holder == nullptr) return ResourceExhausted("workshop: convolution scratch at ", ctx.instr.loc);
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
  if (holder == nullptr) return ResourceExhausted("workshop: convolution scratch at ", ctx.instr.loc);
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

// Fills `rows` rows of the patch matrix, starting at output position p0. `lhs` points at
// the batch element and group's first feature; taps[d] are WindowTaps of spatial dim d.
template <typename T>
void Im2Col(const Conv& c, const std::vector<std::vector<int64_t>>& taps, const T* lhs,
            int64_t p0, int64_t rows, T* patches) {
  const size_t n = c.dims.size();
  std::vector<int64_t> o(n), w(n, 0);
  for (size_t d = n, rest = p0; d-- > 0;) {
    o[d] = rest % c.dims[d].out;
    rest /= c.dims[d].out;
  }
  auto increment = [&](std::vector<int64_t>& index, int64_t WindowDim::*limit) {
    for (size_t d = n; d-- > 0;) {
      if (++index[d] < c.dims[d].*limit) return;
      index[d] = 0;
    }
  };
  T* dst = patches;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < c.window; ++i, dst += c.group_in) {
      int64_t offset = 0;
      bool inside = true;
      for (size_t d = 0; d < n; ++d) {
        const int64_t tap = taps[d][o[d] * c.dims[d].window + w[d]];
        inside = inside && tap >= 0;
        offset += tap;
      }
      if (inside) {
        std::copy_n(lhs + offset, c.group_in, dst);
      } else {
        std::fill_n(dst, c.group_in, T(0));
      }
      increment(w, &WindowDim::window);
    }
    increment(o, &WindowDim::out);
  }
}

// Writes a dense [rows, group_out] tile to the output positions p0.. of one batch
// element and group (`out` points at its first feature).
template <typename T>
void ScatterTile(const Conv& c, const T* tile, int64_t p0, int64_t rows, T* out) {
  const size_t n = c.dims.size();
  std::vector<int64_t> o(n);
  for (size_t d = n, rest = p0; d-- > 0;) {
    o[d] = rest % c.dims[d].out;
    rest /= c.dims[d].out;
  }
  const int64_t feature_stride = c.out.stride[1];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    for (size_t d = 0; d < n; ++d) offset += o[d] * c.out.stride[2 + d];
    for (int64_t j = 0; j < c.group_out; ++j) {
      out[offset + j * feature_stride] = tile[r * c.group_out + j];
    }
    for (size_t d = n; d-- > 0;) {
      if (++o[d] < c.dims[d].out) break;
      o[d] = 0;
    }
  }
}

// c[m, n] = a[m, k] b[k, n] (row strides lda, n, ldc), or with `transposed_c`, c holds
// the product transposed (c[j * ldc + i]).
template <typename T>
void GemmBlas(bool transposed_c, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
              const T* b, T* c, int64_t ldc) {
  const blasint M = static_cast<blasint>(m), N = static_cast<blasint>(n),
                K = static_cast<blasint>(k), LDA = static_cast<blasint>(lda),
                LDC = static_cast<blasint>(ldc);
  if constexpr (std::is_same_v<T, float>) {
    if (transposed_c) {
      scipy_cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, N, M, K, 1.0f, b, N, a, LDA,
                        0.0f, c, LDC);
    } else {
      scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, LDA, b,
                        N, 0.0f, c, LDC);
    }
  } else {
    if (transposed_c) {
      scipy_cblas_dgemm(CblasRowMajor, CblasTrans, CblasTrans, N, M, K, 1.0, b, N, a, LDA,
                        0.0, c, LDC);
    } else {
      scipy_cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0, a, LDA, b, N,
                        0.0, c, LDC);
    }
  }
}

// c[m, n] = a[m, k] b[k, n] in unsigned arithmetic, which wraps like XLA's integers
// without the UB of signed overflow (narrow types widen to 32 bits first so the product
// doesn't promote to int).
template <typename T>
void GemmLoop(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, T* c) {
  using U = std::conditional_t<(sizeof(T) < sizeof(uint32_t)), uint32_t, std::make_unsigned_t<T>>;
  std::fill_n(c, m * n, T(0));
  for (int64_t i = 0; i < m; ++i) {
    T* row = c + i * n;
    for (int64_t p = 0; p < k; ++p) {
      const U aip = static_cast<U>(a[i * lda + p]);
      const T* brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) {
        row[j] = static_cast<T>(static_cast<U>(row[j]) + aip * static_cast<U>(brow[j]));
      }
    }
  }
}

template <typename T>
Status RunConv(const KernelContext& ctx, Conv& c) {
  constexpr bool kBlas = std::is_same_v<T, float> || std::is_same_v<T, double>;
  const Tensor& result = ctx.outs[0];
  T* out = result.as<T>();
  if (result.num_elements() == 0) return Status();
  if (c.k == 0) {  // Empty window or no input features: every sum is empty.
    std::fill_n(out, result.num_elements(), T(0));
    return Status();
  }
  std::shared_ptr<Storage> lhs_holder, filter_holder, patch_holder, tile_holder;
  WORKSHOP_RETURN_IF_ERROR(MakeFeatureMinor(ctx, c, sizeof(T), lhs_holder));
  WORKSHOP_RETURN_IF_ERROR(PackFilter(ctx, c, sizeof(T), filter_holder));
  const T* filter = static_cast<const T*>(filter_holder->data());

  // A 1x1 window at stride 1 over unpadded, undilated input: the lhs is the patch matrix.
  const int64_t lhs_position_stride = PositionStride(c.lhs);
  bool direct = lhs_position_stride >= 0 && c.window == 1;
  for (const WindowDim& d : c.dims) {
    direct = direct && d.stride == 1 && d.pad_lo == 0 && d.base_dilation == 1 && d.in == d.out;
  }
  const int64_t tile_rows =
      direct ? c.positions : std::clamp<int64_t>(kTileElements / c.k, 1, c.positions);
  // Where the product goes: straight into the output as [positions, features] (feature
  // stride 1) or as its transpose (position stride 1), else via a tile and ScatterTile.
  const int64_t out_position_stride = PositionStride(c.out);
  const bool fits = c.k <= INT_MAX && c.group_out <= INT_MAX && tile_rows <= INT_MAX &&
                    lhs_position_stride <= INT_MAX && out_position_stride <= INT_MAX &&
                    c.out.stride[1] <= INT_MAX;
  if (kBlas && !fits) {
    return Unimplemented("workshop: convolution too large for 32-bit BLAS at ", ctx.instr.loc);
  }
  const bool rows_out = kBlas && out_position_stride >= 0 && c.out.stride[1] == 1;
  const bool cols_out = kBlas && !rows_out && (out_position_stride == 1 ||
                                               out_position_stride == 0);
  auto allocate = [&](std::shared_ptr<Storage>& holder, int64_t n) -> T* {
    holder = Storage::Allocate(n * sizeof(T));
    return holder ? static_cast<T*>(holder->data()) : nullptr;
  };
  T* patches = direct ? nullptr : allocate(patch_holder, tile_rows * c.k);
  T* tile = rows_out || cols_out ? nullptr : allocate(tile_holder, tile_rows * c.group_out);
  if ((!direct && patches == nullptr) || (!rows_out && !cols_out && tile == nullptr)) {
    return ResourceExhausted("workshop: convolution scratch at ", ctx.instr.loc);
  }
  std::vector<std::vector<int64_t>> taps;
  for (int64_t d = 0; d < c.spatial; ++d) taps.push_back(WindowTaps(c.dims[d], c.lhs.stride[2 + d]));

  const T* lhs = static_cast<const T*>(c.lhs.data);
  for (int64_t n = 0; n < c.out_batch; ++n) {
    for (int64_t q = 0; q < c.groups; ++q) {
      const int64_t lhs_batch = q / c.feature_groups * c.out_batch + n;
      const T* x = lhs + lhs_batch * c.lhs.stride[0] +
                   q % c.feature_groups * c.group_in * c.lhs.stride[1];
      const T* w = filter + q * c.k * c.group_out;
      T* y = out + n * c.out.stride[0] + q * c.group_out * c.out.stride[1];
      for (int64_t p0 = 0; p0 < c.positions; p0 += tile_rows) {
        const int64_t rows = std::min(tile_rows, c.positions - p0);
        const T* a = direct ? x + p0 * lhs_position_stride : patches;
        const int64_t lda = direct ? std::max(lhs_position_stride, c.k) : c.k;
        if (!direct) Im2Col(c, taps, x, p0, rows, patches);
        if constexpr (kBlas) {
          if (rows_out) {
            GemmBlas(false, rows, c.group_out, c.k, a, lda, w, y + p0 * out_position_stride,
                     std::max(out_position_stride, c.group_out));
          } else if (cols_out) {
            GemmBlas(true, rows, c.group_out, c.k, a, lda, w, y + p0,
                     std::max(c.out.stride[1], rows));
          } else {
            GemmBlas(false, rows, c.group_out, c.k, a, lda, w, tile, c.group_out);
            ScatterTile(c, tile, p0, rows, y);
          }
        } else {
          GemmLoop(rows, c.group_out, c.k, a, lda, w, tile);
          ScatterTile(c, tile, p0, rows, y);
        }
      }
    }
  }
  return Status();
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
  return DispatchNumeric(
      lhs.dtype, [&](auto tag) { return RunConv<decltype(tag)>(ctx, c); },
      [&] { return UnsupportedDType(ctx, lhs.dtype); });
}

WORKSHOP_REGISTER_KERNEL("convolution", Convolution);

}  // namespace
}  // namespace workshop
