// dot_general: batched matrix multiply with arbitrary batch and contracting dimensions.
//
// Each operand is viewed as [batch, rows, cols] with its free dims flattened into one
// matrix dim and its contracting dims into the other. When the free dims and the
// contracting dims each merge into one strided dim, one of them contiguous, the GEMM reads
// the operand in place (as normal or transposed, with a leading dimension and per-batch
// offsets; the compiler folds operand transposes into the dimension numbers to make use of
// this); otherwise the operand is first copied into (batch, free, contracting) order.
// f32/f64/c64/c128 go to OpenBLAS (scipy-openblas32); integers use a plain loop ordered i-k-j so
// the inner loop is contiguous. The compiler computes f16/bf16 dots in f32 and converts operands of
// mixed dtypes (preferred_element_type) to the result's, so both operands have the output dtype,
// except 8-bit integer operands into s32, which run as exact f32 GEMMs (NarrowIntGemm).
#include <cblas.h>

#include <complex>
#include <memory>
#include <type_traits>

#include "kernels/core/attr_check.h"
#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"
#include "kernels/dot/small_rows.h"
#include "kernels/math/blas.h"
#include "kernels/math/simd.h"
#include "runtime/buffer.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

// One operand as a stack of matrices [free, contract] (or [contract, free] when
// `transposed`) whose rows are `ld` elements apart and whose columns are contiguous, one
// per batch entry at element offset batch_offsets[b]. Such a view covers any layout where
// the free dims and the contracting dims each merge into one strided dim, one of the two
// contiguous: e.g. attention's q[b, s, h, d] read per (b, h) as [s, d] with ld = h * d.
struct MatrixView {
  const void* data;
  int64_t batch, free, contract;
  bool transposed;
  int64_t ld;
  std::vector<int64_t> batch_offsets;
  std::shared_ptr<Storage> scratch;  // Owns the data when the operand had to be permuted.
};

IntList FreeDims(int64_t rank, const IntList& batch, const IntList& contract) {
  IntList free;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contract.begin(), contract.end(), d) == contract.end()) {
      free.push_back(d);
    }
  }
  return free;
}

IntList Concat(std::initializer_list<const IntList*> parts) {
  IntList out;
  for (const IntList* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

int64_t Product(const Dims& dims, const IntList& which) {
  int64_t n = 1;
  for (int64_t d : which) n *= dims[d];
  return n;
}

// The stride of `which` (in that order) merged into one dim, or -1 if they don't merge.
// Size-1 dims are skipped; a group of extent 1 has stride 0 (any stride fits).
int64_t MergedStride(const Dims& dims, const std::vector<int64_t>& strides, const IntList& which) {
  int64_t stride = 0, expected = -1;
  for (int64_t d : which) {
    if (dims[d] == 1) continue;
    if (expected != -1 && strides[d] * dims[d] != expected) return -1;
    stride = strides[d];
    expected = stride;
  }
  return stride;
}

// Offsets of every batch entry: the batch dims in order, row-major.
std::vector<int64_t> BatchOffsets(const Dims& dims, const std::vector<int64_t>& strides,
                                  const IntList& batch) {
  std::vector<int64_t> offsets = {0};
  for (int64_t d : batch) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * dims[d]);
    for (int64_t base : offsets) {
      for (int64_t i = 0; i < dims[d]; ++i) next.push_back(base + i * strides[d]);
    }
    offsets = std::move(next);
  }
  return offsets;
}

Status MakeView(const Tensor& t, const IntList& batch, const IntList& contract, MatrixView* view) {
  const Dims& dims = *t.dims;
  const IntList free = FreeDims(t.rank(), batch, contract);
  const std::vector<int64_t> strides = RowMajorStrides(dims);
  *view = MatrixView{
      t.data, Product(dims, batch), Product(dims, free), Product(dims, contract), false, 0, {},
      nullptr};
  const int64_t free_stride = MergedStride(dims, strides, free);
  const int64_t contract_stride = MergedStride(dims, strides, contract);
  // BLAS wants ld >= the row length (and >= 1), which also rules out overlapping rows.
  if (contract_stride >= 0 && free_stride >= 0) {
    if (contract_stride <= 1 && free_stride >= std::max<int64_t>(view->contract, 1)) {
      view->ld = std::max<int64_t>(free_stride, std::max<int64_t>(view->contract, 1));
      view->batch_offsets = BatchOffsets(dims, strides, batch);
      return Status();
    }
    if (free_stride <= 1 && contract_stride >= std::max<int64_t>(view->free, 1)) {
      view->transposed = true;
      view->ld = std::max<int64_t>(contract_stride, std::max<int64_t>(view->free, 1));
      view->batch_offsets = BatchOffsets(dims, strides, batch);
      return Status();
    }
  }
  // Permute into dense (batch, free, contract) order.
  const int64_t width = ByteWidth(t.dtype);
  Dims permuted_dims;
  std::vector<int64_t> src_strides;
  for (int64_t d : Concat({&batch, &free, &contract})) {
    permuted_dims.push_back(dims[d]);
    src_strides.push_back(strides[d] * width);
  }
  view->scratch = Storage::Allocate(NumElements(dims) * width);
  if (view->scratch == nullptr) return ResourceExhausted("workshop: dot_general scratch");
  StridedCopy(view->scratch->data(), t.data, width, permuted_dims, src_strides);
  view->data = view->scratch->data();
  view->ld = std::max<int64_t>(view->contract, 1);
  view->batch_offsets.resize(view->batch);
  for (int64_t b = 0; b < view->batch; ++b) {
    view->batch_offsets[b] = b * view->free * view->contract;
  }
  return Status();
}

// How many rows (or columns) of C a block may have and still run as that many GEMVs rather
// than one GEMM. One always: a matrix-vector product (a batch-1 layer) read once in place
// beats GEMM, which packs the whole matrix into panels first (1x1024x1024 f32: 60 us
// against 250 us; 1x4096x4096: 3.1 ms against 9.4 ms, 2-core VM). Up to 4 when the matrix
// is out of cache (4 MiB or more): GEMM's packing pass then costs a trip to memory that up to
// 4 GEMV passes beat (2x2048x2048 f32: 0.65 ms against 1.5 ms; 4x2048x2048: 1.0 ms against
// 1.4 ms; 2x1024x1024, 4 MiB: 0.11 ms against 0.25 ms). A matrix in cache is packed cheaply,
// and OpenBLAS's GEMM beats repeated GEMVs there (2x512x512: 19 us against 28 us). f32 blocks
// of 3 to 8 rows mostly take SmallRowsProduct before this (GemmBlock).
constexpr int64_t kOutOfCacheBytes = int64_t{4} << 20;
// Largest GEMV matrix the cost model takes to be in the last-level cache (KernelWork
// cached_bytes): 32 MiB of L3 on the 2-core VM's EPYC, 16 of them for the matrix.
constexpr int64_t kCachedMatrixBytes = int64_t{16} << 20;
int64_t GemvRows(int64_t matrix_bytes) { return matrix_bytes >= kOutOfCacheBytes ? 4 : 1; }

template <typename T>
constexpr bool kHasBlas =
    std::is_same_v<T, float> || std::is_same_v<T, double> ||
    std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>;

// Block `part` of `parts` of one batch entry, C[m, n] = A B: a range of rows of C (or of
// columns when there are fewer rows). Slicing rows of A / columns of B keeps the leading
// dimensions.
template <typename T>
void GemmBlock(const MatrixView& a, const MatrixView& b, int64_t batch, int64_t part, int64_t parts,
               T* out) {
  const int64_t m = a.free, n = b.free, k = a.contract;
  const T* pa = static_cast<const T*>(a.data) + a.batch_offsets[batch];
  const T* pb = static_cast<const T*>(b.data) + b.batch_offsets[batch];
  T* pc = out + batch * m * n;
  const bool by_rows = m >= n;
  const int64_t extent = by_rows ? m : n;
  const int64_t lo = extent * part / parts, hi = extent * (part + 1) / parts;
  if (lo == hi) return;
  const int64_t rows = by_rows ? hi - lo : m, cols = by_rows ? n : hi - lo;
  if (by_rows) {
    pa += a.transposed ? lo : lo * a.ld;
    pc += lo * n;
  } else {
    pb += b.transposed ? lo : lo * b.ld;
    pc += lo;
  }
  if constexpr (kHasBlas<T>) {
    if (k == 0) {
      for (int64_t i = 0; i < rows; ++i) std::fill(pc + i * n, pc + i * n + cols, T(0));
      return;
    }
    // 3 to 8 rows (or columns) of an f32 C whose matrix operand has contiguous rows, too big
    // for OpenBLAS's unpacked small-matrix GEMM: register tiles (small_rows.h). Fewer rows
    // go to GEMVs below, which are faster there (2x1024x1024: 0.11 ms against 0.15).
    if constexpr (std::is_same_v<T, float>) {
      const bool big = rows * cols * k > kBlasSmallMatrixWork;
      if (big && b.transposed && rows >= 3 && rows <= kSmallRowsMax) {
        // c[i, j] = sum_p a[i, p] b[p, j] with b stored [k, n].
        SmallRowsProduct(pa, a.transposed ? 1 : a.ld, a.transposed ? a.ld : 1, rows, pb, b.ld, k,
                         cols, pc, n, 1);
        return;
      }
      if (big && a.transposed && cols >= 3 && cols <= kSmallRowsMax) {
        // c[i, j] = sum_p b[j, p] a[p, i] with a stored [k, m]: C's columns as the rows.
        SmallRowsProduct(pb, b.transposed ? 1 : b.ld, b.transposed ? b.ld : 1, cols, pa, a.ld, k,
                         rows, pc, 1, n);
        return;
      }
    }
    // A few rows or columns of C (matrix-vector products: a batch-1 layer, or a block of
    // one): one GEMV each, which reads the matrix in place where GEMM would first pack it.
    // C's block is zeroed first: with beta 0 a GEMV may scale y by it, and the output
    // buffer is uninitialized (NaN * 0 would stay NaN in builds whose scal propagates it).
    const int64_t width = static_cast<int64_t>(sizeof(T));
    if (rows <= GemvRows(cols * k * width)) {
      // c[i, j] = sum_p a[i, p] b[j, p]: b's view as the matrix, a's row i as the vector.
      for (int64_t i = 0; i < rows; ++i) {
        std::fill(pc + i * n, pc + i * n + cols, T(0));
        BlasGemv<T>(b.transposed ? CblasTrans : CblasNoTrans,
                    static_cast<blasint>(b.transposed ? k : cols),
                    static_cast<blasint>(b.transposed ? cols : k), T(1), pb,
                    static_cast<blasint>(b.ld), pa + (a.transposed ? i : i * a.ld),
                    static_cast<blasint>(a.transposed ? a.ld : 1), T(0), pc + i * n, 1);
      }
      return;
    }
    if (cols <= GemvRows(rows * k * width)) {
      // c[i, j] = sum_p a[i, p] b[j, p]: a's view as the matrix, b's row j as the vector;
      // C's columns are n apart.
      for (int64_t j = 0; j < cols; ++j) {
        for (int64_t i = 0; i < rows; ++i) pc[i * n + j] = T(0);
        BlasGemv<T>(
            a.transposed ? CblasTrans : CblasNoTrans, static_cast<blasint>(a.transposed ? k : rows),
            static_cast<blasint>(a.transposed ? rows : k), T(1), pa, static_cast<blasint>(a.ld),
            pb + (b.transposed ? j : j * b.ld), static_cast<blasint>(b.transposed ? b.ld : 1), T(0),
            pc + j, static_cast<blasint>(n));
      }
      return;
    }
    // b's untransposed view is [n, k] (free, contract): B transposed for C = A B.
    BlasGemm<T>(a.transposed ? CblasTrans : CblasNoTrans, b.transposed ? CblasNoTrans : CblasTrans,
                static_cast<blasint>(rows), static_cast<blasint>(cols), static_cast<blasint>(k),
                T(1), pa, static_cast<blasint>(a.ld), pb, static_cast<blasint>(b.ld), T(0), pc,
                static_cast<blasint>(n));
  } else {
    auto at = [&](int64_t i, int64_t p) {
      return a.transposed ? pa[p * a.ld + i] : pa[i * a.ld + p];
    };
    auto bt = [&](int64_t p, int64_t j) {
      return b.transposed ? pb[p * b.ld + j] : pb[j * b.ld + p];
    };
    for (int64_t i = 0; i < rows; ++i) {
      T* row = pc + i * n;
      std::fill(row, row + cols, T(0));
      for (int64_t p = 0; p < k; ++p) {
        const T aip = at(i, p);
        for (int64_t j = 0; j < cols; ++j) row[j] = static_cast<T>(row[j] + aip * bt(p, j));
      }
    }
  }
}

// A product whose blocks would be strided slices of stored rows at most this long (four
// 64-byte cache lines) takes at most kStridedSplitMaxBlocks blocks (Gemm).
constexpr int64_t kStridedSplitRowBytes = 256;
constexpr int64_t kStridedSplitMaxBlocks = 2;

// Batch entries of at most this many multiply-adds (m * n * k) are computed here, not by
// BLAS: a call per entry cost more than the entry (vmap(jnp.dot) over 10000 pairs of 16:
// 0.5 ms in sdot/sgemv calls against XLA:CPU's 0.13).
constexpr int64_t kTinyEntryWork = 2048;

// sum_p x[p * sx] * y[p * sy] for p < k, in eight interleaved partial sums (a blocked sum:
// no running sum longer than k / 8 terms) combined as a tree, then the last k % 8 terms.
// Products and sums round separately (no FMA in either clone), so every CPU gives the
// same bits.
template <typename T>
WORKSHOP_SIMD_CLONES T TinyDot(const T* x, int64_t sx, const T* y, int64_t sy, int64_t k) {
  constexpr int kLanes = 8;
  T lanes[kLanes] = {};
  int64_t p = 0;
  if (sx == 1 && sy == 1) {  // The contiguous case as its own loop, which vectorizes.
    for (; p + kLanes <= k; p += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += x[p + l] * y[p + l];
    }
  } else {
    for (; p + kLanes <= k; p += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += x[(p + l) * sx] * y[(p + l) * sy];
    }
  }
  for (int w = kLanes / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
  }
  T total = lanes[0];
  for (; p < k; ++p) total += x[p * sx] * y[p * sy];
  return total;
}

// Every entry of a batch of tiny products, C[b, i, j] = sum_p A[b, i, p] B[b, j, p], over
// ranges of entries on the pool.
template <typename T>
void TinyEntries(const MatrixView& a, const MatrixView& b, T* out) {
  const int64_t m = a.free, n = b.free, k = a.contract;
  // Element strides along the contraction, and between rows of C's operands.
  const int64_t a_step = a.transposed ? a.ld : 1, a_row = a.transposed ? 1 : a.ld;
  const int64_t b_step = b.transposed ? b.ld : 1, b_row = b.transposed ? 1 : b.ld;
  KernelWork work;
  work.flops = 2.0 * static_cast<double>(m * n * k) * static_cast<double>(a.batch);
  ThreadPool::Global().ParallelFor(a.batch, work, [&](int64_t first, int64_t end) {
    for (int64_t e = first; e < end; ++e) {
      const T* pa = static_cast<const T*>(a.data) + a.batch_offsets[e];
      const T* pb = static_cast<const T*>(b.data) + b.batch_offsets[e];
      T* pc = out + e * m * n;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          pc[i * n + j] = TinyDot(pa + i * a_row, a_step, pb + j * b_row, b_step, k);
        }
      }
    }
  });
}

// All of a dot's GEMMs in one ParallelFor, so a batch costs one hand-off to the pool,
// not one per entry (32 entries of 128x128x128, each split on its own, waited for the
// helper thread 32 times). Work items are blocks of entries: each entry big enough to
// split (ThreadPool::BlocksFor of its flops over 1: the shape and thread count decide the
// blocks, hence the bits; PartsFor how many threads share them) is cut into that many blocks, so
// that the threads' shares differ by at most one block whatever the batch size; small entries stay
// whole, several per chunk. OpenBLAS runs single-threaded inside (blas.h).
template <typename T>
void Gemm(const MatrixView& a, const MatrixView& b, T* out) {
  if (a.free == 0 || b.free == 0) return;
  if constexpr (std::is_floating_point_v<T>) {
    // Batched only: an unbatched product keeps BLAS, whose bits SmallGemv's direct GEMV
    // call must equal.
    if (a.batch > 1 && a.free * b.free * a.contract <= kTinyEntryWork) {
      TinyEntries(a, b, out);
      return;
    }
  }
  UseSingleThreadedBlas();
  const double flops = 2.0 * a.free * b.free * a.contract;
  ThreadPool& pool = ThreadPool::Global();
  KernelWork entry, all;
  entry.flops = flops;
  // A product of a few rows (up to kSmallRowsMax: GEMVs or SmallRowsProduct) does a few
  // flops per matrix element it reads: out of cache it runs at memory speed, not at the
  // GEMM flop rate (1x4096x4096 f32, 64 MiB: 6.1 ms on one thread, where 0.02 ns a flop
  // gives 0.67 ms; 1x1024x1024, 4 MiB: 63 us against 42). Such an entry's matrix bytes
  // are counted too, so it splits by the time it takes: at the last-level cache's rate up
  // to kCachedMatrixBytes (a loop's matrix, read again each iteration: a conjugate-gradient
  // step's 4 MiB GEMV at the streaming rate was cut into 10 blocks on the 13-core host, and
  // took longer there than on 2 cores: 94 against 74 us a step, XLA:CPU 55 on one thread).
  const int64_t big = std::max(a.free, b.free);
  const int64_t matrix_bytes = big * a.contract * static_cast<int64_t>(sizeof(T));
  if (std::min(a.free, b.free) <= kSmallRowsMax && matrix_bytes >= kOutOfCacheBytes) {
    (matrix_bytes <= kCachedMatrixBytes ? entry.cached_bytes : entry.bytes) =
        static_cast<double>(matrix_bytes);
  }
  all.flops = entry.flops * static_cast<double>(a.batch);
  all.bytes = entry.bytes * static_cast<double>(a.batch);
  all.cached_bytes = entry.cached_bytes * static_cast<double>(a.batch);
  // A block is a range of C's rows, or of its columns when there are fewer rows: no more
  // blocks than that (a dot product of two vectors stays whole).
  int64_t parts = std::min(pool.BlocksFor(entry), big);
  // When that range is a strided slice of the operand's storage (a transposed view: x.T @ g
  // with x [100000, 32]) and a stored row is a few cache lines, every block reads every
  // line of the matrix: blocks multiply the memory traffic. On the 13-core host x.T @ g
  // took 333 µs in 2 blocks, 458 in one and 1771 in 13 (a logistic regression's gradient
  // 1.2 against 3.8 ms), so such products take at most kStridedSplitMaxBlocks.
  const MatrixView& split = a.free >= b.free ? a : b;
  if (split.transposed && split.ld * static_cast<int64_t>(sizeof(T)) <= kStridedSplitRowBytes) {
    parts = std::min(parts, kStridedSplitMaxBlocks);
  }
  pool.ParallelFor(a.batch * parts, all, [&](int64_t first, int64_t end) {
    for (int64_t item = first; item < end; ++item) {
      GemmBlock(a, b, item / parts, item % parts, parts, out);
    }
  });
}

// ---- 8-bit integer operands into s32: exact f32 GEMMs over blocks of the contraction ----
//
// What quantized inference runs (s8 x s8 -> s32, preferred_element_type=int32). Every
// product of two 8-bit values is an integer of magnitude at most 2^14 (s8 x s8), 2^15
// (s8 x u8) or 2^16 (u8 x u8), so a sum of up to 2^24 / that bound of them, and every
// partial sum on the way in any order (FMA included), is an integer below 2^24 and exact
// in f32. OpenBLAS's sgemm over such blocks of the contraction gives each block's exact
// integer result; the blocks are added in int32. Results equal the integer loop's bit for
// bit, at sgemm's speed.

// Most contraction elements per exact f32 block for 8-bit operand dtypes a and b.
int64_t ExactF32Block(DType a, DType b) {
  const int64_t max_a = a == DType::kU8 ? 255 : 128, max_b = b == DType::kU8 ? 255 : 128;
  return (int64_t{1} << 24) / (max_a * max_b);
}

// The view's matrices as dense f32 [batch, free, contract], row-major.
template <typename In>
std::unique_ptr<float[]> DenseF32(const MatrixView& v) {
  std::unique_ptr<float[]> out(new float[std::max<int64_t>(v.batch * v.free * v.contract, 1)]);
  const In* in = static_cast<const In*>(v.data);
  ThreadPool::Global().ParallelFor(
      v.batch * v.free, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(v.contract, 1)),
      [&](int64_t first, int64_t end) {
        for (int64_t row = first; row < end; ++row) {
          const int64_t b = row / v.free, i = row % v.free;
          const In* base = in + v.batch_offsets[b];
          float* dst = out.get() + row * v.contract;
          if (v.transposed) {
            for (int64_t p = 0; p < v.contract; ++p)
              dst[p] = static_cast<float>(base[p * v.ld + i]);
          } else {
            for (int64_t p = 0; p < v.contract; ++p)
              dst[p] = static_cast<float>(base[i * v.ld + p]);
          }
        }
      });
  return out;
}

std::unique_ptr<float[]> DenseF32Of(DType dtype, const MatrixView& v) {
  return dtype == DType::kU8 ? DenseF32<uint8_t>(v) : DenseF32<int8_t>(v);
}

// out[batch, m, n] (s32) = A B for 8-bit operands (see above).
void NarrowIntGemm(const MatrixView& a, DType a_dtype, const MatrixView& b, DType b_dtype,
                   int32_t* out) {
  const int64_t m = a.free, n = b.free, k = a.contract, batch = a.batch;
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(out, out + batch * m * n, 0);
    return;
  }
  std::unique_ptr<float[]> fa = DenseF32Of(a_dtype, a), fb = DenseF32Of(b_dtype, b);
  std::unique_ptr<float[]> fc(new float[batch * m * n]);
  const int64_t block = ExactF32Block(a_dtype, b_dtype);
  for (int64_t p0 = 0; p0 < k; p0 += block) {
    const int64_t kc = std::min(block, k - p0);
    MatrixView va{fa.get() + p0, batch, m, kc, false, k, {}, nullptr};
    MatrixView vb{fb.get() + p0, batch, n, kc, false, k, {}, nullptr};
    va.batch_offsets.resize(batch);
    vb.batch_offsets.resize(batch);
    for (int64_t e = 0; e < batch; ++e) {
      va.batch_offsets[e] = e * m * k;
      vb.batch_offsets[e] = e * n * k;
    }
    Gemm(va, vb, fc.get());
    const bool first_block = p0 == 0;
    ThreadPool::Global().ParallelFor(batch * m * n, kParallelGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int32_t v = static_cast<int32_t>(fc[i]);
        // Wraps on overflow as the integer loop and XLA do (k beyond 2^17).
        out[i] =
            first_block
                ? v
                : static_cast<int32_t>(static_cast<uint32_t>(out[i]) + static_cast<uint32_t>(v));
      }
    });
  }
}

bool IsNarrowInt(DType t) { return t == DType::kS8 || t == DType::kU8; }

// A matrix-vector product of an in-cache f32/f64 matrix with no batch dims: the batch-1
// layer or attention step of a loop body (an RNN cell, a KV-cache decode step, a solver's
// matvec), one per iteration. The general path's set-up (operand views, the pool's cost
// model) costs about as much as a 64x64 product itself (fori_loop of tanh(W @ x), 1000
// steps on the 2-core VM: 0.51 ms against XLA:CPU's 0.19-0.22); here the operands' shapes
// give the one BLAS GEMV that path would call, with the same arguments (same bits).
// Returns false for any other dot, for a contraction of one element (the general path's
// view then drops the contracting dim and calls the GEMV the other way round), and for a
// matrix of at most kSmallRowsMax rows or columns left free, which the general path may
// give to other routines (SmallRowsProduct).
template <typename T>
bool SmallGemv(const Tensor& lhs, const Tensor& rhs, int64_t lhs_contract, int64_t rhs_contract,
               T* out) {
  // One operand is the matrix (rank 2), the other has one element per contraction index
  // (free size 1, so contiguous whatever its rank): the output is the matrix's free dim.
  const bool lhs_matrix = lhs.rank() == 2 && rhs.num_elements() == (*rhs.dims)[rhs_contract];
  const bool rhs_matrix = rhs.rank() == 2 && lhs.num_elements() == (*lhs.dims)[lhs_contract];
  if (lhs_matrix == rhs_matrix) return false;  // neither, or two vectors
  const Tensor& m = lhs_matrix ? lhs : rhs;
  const Tensor& v = lhs_matrix ? rhs : lhs;
  const bool rows_contracted = (lhs_matrix ? lhs_contract : rhs_contract) == 1;
  const int64_t rows = (*m.dims)[0], cols = (*m.dims)[1];
  const int64_t k = rows_contracted ? cols : rows, n = rows_contracted ? rows : cols;
  if (k <= 1 || n <= kSmallRowsMax) return false;
  KernelWork work;
  work.flops = 2.0 * static_cast<double>(k) * static_cast<double>(n);
  const int64_t bytes = k * n * static_cast<int64_t>(sizeof(T));
  if (bytes >= kOutOfCacheBytes || ThreadPool::Global().BlocksFor(work) > 1) return false;
  UseSingleThreadedBlas();
  std::fill(out, out + n, T(0));  // as GemmBlock: beta 0 may still scale what y held
  BlasGemv<T>(rows_contracted ? CblasNoTrans : CblasTrans, static_cast<blasint>(rows),
              static_cast<blasint>(cols), T(1), m.as<T>(), static_cast<blasint>(cols), v.as<T>(), 1,
              T(0), out, 1);
  return true;
}

Status DotGeneral(KernelContext& ctx) {
  const Tensor& lhs = ctx.ins[0];
  const Tensor& rhs = ctx.ins[1];
  if ((lhs.dtype == DType::kF32 || lhs.dtype == DType::kF64) && lhs.dtype == rhs.dtype &&
      lhs.dtype == ctx.outs[0].dtype && ctx.instr.attr<IntList>("lhs_batch").empty()) {
    const IntList& lc = ctx.instr.attr<IntList>("lhs_contract");
    const IntList& rc = ctx.instr.attr<IntList>("rhs_contract");
    if (lc.size() == 1 && rc.size() == 1 && (*lhs.dims)[lc[0]] == (*rhs.dims)[rc[0]]) {
      const bool done = lhs.dtype == DType::kF32
                            ? SmallGemv(lhs, rhs, lc[0], rc[0], ctx.outs[0].as<float>())
                            : SmallGemv(lhs, rhs, lc[0], rc[0], ctx.outs[0].as<double>());
      if (done) return Status();
    }
  }
  MatrixView a, b;
  WORKSHOP_RETURN_IF_ERROR(MakeView(lhs, ctx.instr.attr<IntList>("lhs_batch"),
                                    ctx.instr.attr<IntList>("lhs_contract"), &a));
  WORKSHOP_RETURN_IF_ERROR(MakeView(rhs, ctx.instr.attr<IntList>("rhs_batch"),
                                    ctx.instr.attr<IntList>("rhs_contract"), &b));
  if (IsNarrowInt(lhs.dtype) && IsNarrowInt(rhs.dtype) && ctx.outs[0].dtype == DType::kS32 &&
      a.batch == b.batch && a.contract == b.contract) {
    NarrowIntGemm(a, lhs.dtype, b, rhs.dtype, ctx.outs[0].as<int32_t>());
    return Status();
  }
  if (lhs.dtype != rhs.dtype || lhs.dtype != ctx.outs[0].dtype || a.batch != b.batch ||
      a.contract != b.contract) {
    return Unimplemented("workshop: dot_general of ", ShapeString(lhs.dtype, *lhs.dims), " and ",
                         ShapeString(rhs.dtype, *rhs.dims), " into ", DTypeName(ctx.outs[0].dtype),
                         " is not supported at ", ctx.instr.loc);
  }
  auto gemm = [&](auto tag) -> Status {
    Gemm(a, b, ctx.outs[0].as<decltype(tag)>());
    return Status();
  };
  return DispatchNumeric(lhs.dtype, gemm, [&] {
    return DispatchComplex(lhs.dtype, gemm, [&] { return UnsupportedDType(ctx, lhs.dtype); });
  });
}

// The kernel views each operand as [batch, free, contract] by its dimension numbers and
// writes batch x lhs free x rhs free elements: the numbers must be distinct axes of their
// operand that agree in size between the operands, and the result that many elements.
Status CheckDotGeneral(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  const Dims *in0 = c.In(0), *in1 = c.In(1), *out0 = c.Out(0);
  if (instr.ins.size() != 2 || out0 == nullptr) return Status();
  const IntList *lb = c.List("lhs_batch"), *lc = c.List("lhs_contract"), *rb = c.List("rhs_batch"),
                *rc = c.List("rhs_contract");
  if (lb == nullptr || lc == nullptr || rb == nullptr || rc == nullptr) {
    return c.Fail("dimension numbers missing");
  }
  if (lb->size() != rb->size() || lc->size() != rc->size()) {
    return c.Fail("batch or contracting dimensions differ in number between the operands");
  }
  // Each operand's batch and contracting axes: in range, none twice; returns the
  // product of its free dims, or -1.
  auto free_size = [&](const Dims& dims, const IntList& batch, const IntList& contract) {
    std::vector<bool> used(dims.size(), false);
    for (const IntList* list : {&batch, &contract}) {
      for (int64_t a : *list) {
        if (a < 0 || a >= static_cast<int64_t>(dims.size()) || used[a]) return int64_t{-1};
        used[a] = true;
      }
    }
    int64_t n = 1;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (!used[d]) n *= dims[d];
    }
    return n;
  };
  const int64_t lhs_free = free_size(*in0, *lb, *lc), rhs_free = free_size(*in1, *rb, *rc);
  if (lhs_free < 0 || rhs_free < 0) {
    return c.Fail("a dimension number is not an axis of its operand, or repeats");
  }
  int64_t batch = 1;
  for (size_t i = 0; i < lb->size(); ++i) {
    if ((*in0)[(*lb)[i]] != (*in1)[(*rb)[i]]) return c.Fail("batch dimension ", i, " differs");
    batch *= (*in0)[(*lb)[i]];
  }
  for (size_t i = 0; i < lc->size(); ++i) {
    if ((*in0)[(*lc)[i]] != (*in1)[(*rc)[i]]) {
      return c.Fail("contracting dimension ", i, " differs");
    }
  }
  // In 128 bits: each factor fits int64 (CheckedByteSize accepted its slot), the
  // product of factors from two operands need not.
  const __int128 want = static_cast<__int128>(batch) * lhs_free * rhs_free;
  if (static_cast<__int128>(NumElements(*out0)) != want) {
    return c.Fail("the result has ", NumElements(*out0),
                  " elements, not batch x lhs free x rhs free");
  }
  return Status();
}

WORKSHOP_REGISTER_KERNEL("dot_general", .fn = DotGeneral, .check = CheckDotGeneral);

}  // namespace
}  // namespace workshop
