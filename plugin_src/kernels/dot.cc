// dot_general: batched matrix multiply with arbitrary batch and contracting dimensions.
//
// Each operand is viewed as [batch, rows, cols] with its free dims flattened into one
// matrix dim and its contracting dims into the other. When the operand's dims are already
// in (batch, free, contracting) or (batch, contracting, free) order that view is free and
// the GEMM reads it directly (as normal or transposed); otherwise the operand is first
// copied into (batch, free, contracting) order. f32/f64/c64/c128 go to OpenBLAS
// (scipy-openblas32); integers use a plain loop ordered i-k-j so the inner loop is
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

// One operand as a stack of row-major matrices.
struct MatrixView {
  const void* data;
  int64_t batch, free, contract;
  bool transposed;  // Stored as [batch, contract, free].
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

bool IsIdentity(const IntList& order) {
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
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

Status MakeView(const Tensor& t, const IntList& batch, const IntList& contract,
                MatrixView* view) {
  const Dims& dims = *t.dims;
  const IntList free = FreeDims(t.rank(), batch, contract);
  *view = MatrixView{t.data, Product(dims, batch), Product(dims, free),
                     Product(dims, contract), false, nullptr};
  const IntList normal = Concat({&batch, &free, &contract});
  if (IsIdentity(normal)) return Status();
  if (IsIdentity(Concat({&batch, &contract, &free}))) {
    view->transposed = true;
    return Status();
  }
  // Permute into (batch, free, contract) order.
  const int64_t width = ByteWidth(t.dtype);
  Dims permuted_dims;
  std::vector<int64_t> src_strides;
  const std::vector<int64_t> strides = RowMajorStrides(dims);
  for (int64_t d : normal) {
    permuted_dims.push_back(dims[d]);
    src_strides.push_back(strides[d] * width);
  }
  view->scratch = Storage::Allocate(NumElements(dims) * width);
  if (view->scratch == nullptr) return ResourceExhausted("workshop: dot_general scratch");
  StridedCopy(view->scratch->data(), t.data, width, permuted_dims, src_strides);
  view->data = view->scratch->data();
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
  const T* pa = static_cast<const T*>(a.data) + batch * m * k;
  const T* pb = static_cast<const T*>(b.data) + batch * n * k;
  T* pc = out + batch * m * n;
  if (m == 0 || n == 0) return;
  if constexpr (kHasBlas<T>) {
    if (k == 0) {
      std::fill(pc, pc + m * n, T(0));
      return;
    }
    // b's "normal" view is [n, k] (free, contract): that is B transposed for C = A B.
    const auto ta = a.transposed ? CblasTrans : CblasNoTrans;
    const auto tb = b.transposed ? CblasNoTrans : CblasTrans;
    const blasint lda = static_cast<blasint>(a.transposed ? m : k);
    const blasint ldb = static_cast<blasint>(b.transposed ? n : k);
    if (split) {
      BlasGemmParallel<T>(ta, tb, m, n, k, pa, lda, pb, ldb, pc);
    } else {
      UseSingleThreadedBlas();
      BlasGemm<T>(ta, tb, m, n, k, pa, lda, pb, ldb, pc, n);
    }
  } else {
    auto at = [&](int64_t i, int64_t p) { return a.transposed ? pa[p * m + i] : pa[i * k + p]; };
    auto bt = [&](int64_t p, int64_t j) { return b.transposed ? pb[p * n + j] : pb[j * k + p]; };
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
