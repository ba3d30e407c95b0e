// dot_general: batched matrix multiply with arbitrary batch and contracting dimensions.
//
// Each operand is viewed as [batch, rows, cols] with its free dims flattened into one
// matrix dim and its contracting dims into the other. When the free dims and the
// contracting dims each merge into one strided dim, one of them contiguous, the GEMM reads
// the operand in place (as normal or transposed, with a leading dimension and per-batch
// offsets; the compiler folds operand transposes into the dimension numbers to make use of
// this); otherwise the operand is first copied into (batch, free, contracting) order.
// f32/f64/c64/c128 go to OpenBLAS (scipy-openblas32); integers use a plain loop ordered i-k-j so the inner loop is
// contiguous. The compiler computes f16/bf16 dots in f32 and converts operands of mixed
// dtypes (preferred_element_type) to the result's, so both operands have the output dtype.
#include <cblas.h>

#include <complex>
#include <memory>

#include "kernels/blas.h"
#include "kernels/dispatch.h"
#include "kernels/kernel.h"
#include "kernels/strided.h"
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
int64_t MergedStride(const Dims& dims, const std::vector<int64_t>& strides,
                     const IntList& which) {
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

Status MakeView(const Tensor& t, const IntList& batch, const IntList& contract,
                MatrixView* view) {
  const Dims& dims = *t.dims;
  const IntList free = FreeDims(t.rank(), batch, contract);
  const std::vector<int64_t> strides = RowMajorStrides(dims);
  *view = MatrixView{t.data, Product(dims, batch), Product(dims, free),
                     Product(dims, contract), false, 0, {}, nullptr};
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

template <typename T>
constexpr bool kHasBlas = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                          std::is_same_v<T, std::complex<float>> ||
                          std::is_same_v<T, std::complex<double>>;

// C = A B for one row-major batch entry with BLAS: the complex GEMMs take alpha and beta
// by pointer.
template <typename T>
void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k,
              const T* pa, blasint lda, const T* pb, blasint ldb, T* pc, blasint ldc) {
  const T one(1), zero(0);
  if constexpr (std::is_same_v<T, float>) {
    scipy_cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, pa, lda, pb, ldb, 0.0f, pc, ldc);
  } else if constexpr (std::is_same_v<T, double>) {
    scipy_cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, pa, lda, pb, ldb, 0.0, pc, ldc);
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    scipy_cblas_cgemm(CblasRowMajor, ta, tb, m, n, k, &one, pa, lda, pb, ldb, &zero, pc, ldc);
  } else {
    scipy_cblas_zgemm(CblasRowMajor, ta, tb, m, n, k, &one, pa, lda, pb, ldb, &zero, pc, ldc);
  }
}

// Below this many flops a GEMM is not worth splitting.
constexpr double kParallelGemmFlops = 4e6;

// One batch entry, C[m, n] = A B, split over the thread pool by rows of C (or by columns
// when there are few rows). Slicing rows of A / columns of B keeps the leading dimensions.
template <typename T>
void BlasGemmParallel(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
                      int64_t k, const T* pa, blasint lda, const T* pb, blasint ldb, T* pc) {
  UseSingleThreadedBlas();
  ThreadPool& pool = ThreadPool::Global();
  const bool by_rows = m >= n;
  const int64_t extent = by_rows ? m : n;
  const int64_t parts = 2.0 * m * n * k < kParallelGemmFlops ? 1 : pool.num_threads();
  pool.ParallelFor(parts, 1, [&](int64_t first, int64_t end) {
    for (int64_t part = first; part < end; ++part) {
      const int64_t lo = extent * part / parts, hi = extent * (part + 1) / parts;
      if (lo == hi) continue;
      if (by_rows) {
        const T* a = ta == CblasTrans ? pa + lo : pa + lo * lda;
        BlasGemm<T>(ta, tb, hi - lo, n, k, a, lda, pb, ldb, pc + lo * n, n);
      } else {
        const T* b = tb == CblasTrans ? pb + lo * ldb : pb + lo;
        BlasGemm<T>(ta, tb, m, hi - lo, k, pa, lda, b, ldb, pc + lo, n);
      }
    }
  });
}

// One batch entry, C[m, n] = A B. `split` lets BLAS GEMMs split themselves over the pool
// (when the batch entries are not already spread over it).
template <typename T>
void GemmEntry(const MatrixView& a, const MatrixView& b, int64_t batch, T* out, bool split) {
  const int64_t m = a.free, n = b.free, k = a.contract;
  const T* pa = static_cast<const T*>(a.data) + a.batch_offsets[batch];
  const T* pb = static_cast<const T*>(b.data) + b.batch_offsets[batch];
  T* pc = out + batch * m * n;
  if (m == 0 || n == 0) return;
  if constexpr (kHasBlas<T>) {
    if (k == 0) {
      std::fill(pc, pc + m * n, T(0));
      return;
    }
    // b's untransposed view is [n, k] (free, contract): B transposed for C = A B.
    const auto ta = a.transposed ? CblasTrans : CblasNoTrans;
    const auto tb = b.transposed ? CblasNoTrans : CblasTrans;
    const auto lda = static_cast<blasint>(a.ld);
    const auto ldb = static_cast<blasint>(b.ld);
    if (split) {
      BlasGemmParallel<T>(ta, tb, m, n, k, pa, lda, pb, ldb, pc);
    } else {
      UseSingleThreadedBlas();
      BlasGemm<T>(ta, tb, m, n, k, pa, lda, pb, ldb, pc, n);
    }
  } else {
    auto at = [&](int64_t i, int64_t p) {
      return a.transposed ? pa[p * a.ld + i] : pa[i * a.ld + p];
    };
    auto bt = [&](int64_t p, int64_t j) {
      return b.transposed ? pb[p * b.ld + j] : pb[j * b.ld + p];
    };
    std::fill(pc, pc + m * n, T(0));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        const T aip = at(i, p);
        T* row = pc + i * n;
        for (int64_t j = 0; j < n; ++j) row[j] = static_cast<T>(row[j] + aip * bt(p, j));
      }
    }
  }
}

// A batch of small GEMMs (attention heads, batched matmul) is spread over the pool by
// batch entries; a single big one splits itself by rows or columns (BlasGemmParallel).
template <typename T>
void Gemm(const MatrixView& a, const MatrixView& b, T* out) {
  const double flops = 2.0 * a.free * b.free * a.contract;
  if (a.batch > 1 && flops < kParallelGemmFlops) {
    const auto grain = static_cast<int64_t>(kParallelGemmFlops / 2 / std::max(flops, 1.0)) + 1;
    ThreadPool::Global().ParallelFor(a.batch, grain, [&](int64_t first, int64_t end) {
      for (int64_t batch = first; batch < end; ++batch) GemmEntry(a, b, batch, out, false);
    });
    return;
  }
  for (int64_t batch = 0; batch < a.batch; ++batch) GemmEntry(a, b, batch, out, true);
}

Status DotGeneral(KernelContext& ctx) {
  const Tensor& lhs = ctx.ins[0];
  const Tensor& rhs = ctx.ins[1];
  MatrixView a, b;
  WORKSHOP_RETURN_IF_ERROR(MakeView(lhs, ctx.instr.attr<IntList>("lhs_batch"),
                                    ctx.instr.attr<IntList>("lhs_contract"), &a));
  WORKSHOP_RETURN_IF_ERROR(MakeView(rhs, ctx.instr.attr<IntList>("rhs_batch"),
                                    ctx.instr.attr<IntList>("rhs_contract"), &b));
  if (lhs.dtype != rhs.dtype || lhs.dtype != ctx.outs[0].dtype || a.batch != b.batch ||
      a.contract != b.contract) {
    return Unimplemented("workshop: dot_general of ", ShapeString(lhs.dtype, *lhs.dims),
                         " and ", ShapeString(rhs.dtype, *rhs.dims), " into ",
                         DTypeName(ctx.outs[0].dtype), " is not supported at ",
                         ctx.instr.loc);
  }
  auto gemm = [&](auto tag) -> Status {
    Gemm(a, b, ctx.outs[0].as<decltype(tag)>());
    return Status();
  };
  return DispatchNumeric(lhs.dtype, gemm, [&] {
    return DispatchComplex(lhs.dtype, gemm, [&] { return UnsupportedDType(ctx, lhs.dtype); });
  });
}

WORKSHOP_REGISTER_KERNEL("dot_general", DotGeneral);

}  // namespace
}  // namespace workshop
