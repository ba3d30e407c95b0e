// Dense linear algebra on stacks of matrices, through BLAS/LAPACK (OpenBLAS from
// scipy-openblas32, which exports LAPACK as scipy_LAPACKE_*): f32, f64, c64, c128.
//
//   cholesky            a [..., n, n] -> L (lower=1) or U, other triangle zeroed; a matrix
//                       that is not positive definite gives all NaN (as jnp.linalg does).
//   triangular_solve    a [..., m, m], b [..., m, k] (left_side) or [..., k, m] -> x with
//                       op(a) x = b (or x op(a) = b); attrs lower, unit_diagonal,
//                       transpose_a NO_TRANSPOSE | TRANSPOSE | ADJOINT. Only a's `lower`
//                       triangle is read.
//   geqrf               a [..., m, n] -> (R above the diagonal and Householder vectors
//                       below it [..., m, n], taus [..., min(m, n)]): LAPACK geqrf.
//   householder_product a [..., m, n], taus [..., k] -> Q [..., m, n]: LAPACK orgqr/ungqr.
//
// Buffers are row-major, LAPACK is column-major. Cholesky needs no copy: a row-major
// Hermitian matrix read column-major is its conjugate, whose upper factor is the
// transpose of our lower one, so potrf('U') on our buffer leaves L in place. QR is not
// symmetric in that way and transposes into a column-major scratch and back.
#include <cblas.h>

#include <complex>
#include <limits>
#include <type_traits>
#include <vector>

#define lapack_complex_float std::complex<float>
#define lapack_complex_double std::complex<double>
#include <lapacke.h>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"

namespace workshop {
namespace {

template <typename T>
constexpr bool kIsComplex = !std::is_floating_point_v<T>;

// The matrix dims of a rank >= 2 tensor and how many matrices it stacks.
struct Stack {
  int64_t count, rows, cols;
};

Stack StackOf(const Tensor& t) {
  const Dims& d = *t.dims;
  const int64_t rows = d[d.size() - 2], cols = d.back();
  return {rows * cols == 0 ? 0 : t.num_elements() / (rows * cols), rows, cols};
}

bool FitsLapackInt(const Stack& s) {
  constexpr int64_t kMax = std::numeric_limits<lapack_int>::max();
  return s.rows <= kMax && s.cols <= kMax && s.rows * s.cols <= kMax;
}

Status ShapeError(const KernelContext& ctx) {
  std::string shapes;
  for (const Tensor& t : ctx.ins) shapes += " " + ShapeString(t.dtype, *t.dims);
  return InvalidArgument("workshop: ", ctx.instr.op, " of", shapes,
                         " is not supported (shapes, dtypes or sizes) at ", ctx.instr.loc);
}

// ---- cholesky ----

template <typename T>
lapack_int Potrf(char uplo, lapack_int n, T* a) {
  if constexpr (std::is_same_v<T, float>) {
    return scipy_LAPACKE_spotrf_work(LAPACK_COL_MAJOR, uplo, n, a, n);
  } else if constexpr (std::is_same_v<T, double>) {
    return scipy_LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, uplo, n, a, n);
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    return scipy_LAPACKE_cpotrf_work(LAPACK_COL_MAJOR, uplo, n, a, n);
  } else {
    return scipy_LAPACKE_zpotrf_work(LAPACK_COL_MAJOR, uplo, n, a, n);
  }
}

template <typename T>
T NaNOf() {
  if constexpr (kIsComplex<T>) {
    using R = typename T::value_type;
    return T(std::numeric_limits<R>::quiet_NaN(), std::numeric_limits<R>::quiet_NaN());
  } else {
    return std::numeric_limits<T>::quiet_NaN();
  }
}

Status Cholesky(KernelContext& ctx) {
  const Tensor& a = ctx.ins[0];
  const Tensor& out = ctx.outs[0];
  const Stack s = StackOf(a);
  if (s.rows != s.cols || out.dtype != a.dtype || *out.dims != *a.dims || !FitsLapackInt(s)) {
    return ShapeError(ctx);
  }
  const bool lower = ctx.instr.attr<int64_t>("lower") != 0;
  return DispatchFloatOrComplex(
      a.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        const int64_t n = s.rows;
        std::copy_n(a.as<T>(), a.num_elements(), out.as<T>());
        for (int64_t b = 0; b < s.count; ++b) {
          T* m = out.as<T>() + b * n * n;
          const lapack_int info = Potrf(lower ? 'U' : 'L', static_cast<lapack_int>(n), m);
          if (info < 0) return Internal("workshop: potrf argument ", -info, " at ", ctx.instr.loc);
          if (info > 0) {
            std::fill(m, m + n * n, NaNOf<T>());  // Not positive definite.
            continue;
          }
          for (int64_t i = 0; i < n; ++i) {  // Zero the triangle potrf leaves untouched.
            T* row = m + i * n;
            if (lower) {
              std::fill(row + i + 1, row + n, T(0));
            } else {
              std::fill(row, row + i, T(0));
            }
          }
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, a.dtype); });
}

WORKSHOP_REGISTER_KERNEL("cholesky", Cholesky);

// ---- triangular_solve ----

template <typename T>
void Trsm(CBLAS_SIDE side, CBLAS_UPLO uplo, CBLAS_TRANSPOSE trans, CBLAS_DIAG diag, blasint rows,
          blasint cols, const T* a, blasint lda, T* b) {
  const T one(1);
  if constexpr (std::is_same_v<T, float>) {
    scipy_cblas_strsm(CblasRowMajor, side, uplo, trans, diag, rows, cols, 1.0f, a, lda, b, cols);
  } else if constexpr (std::is_same_v<T, double>) {
    scipy_cblas_dtrsm(CblasRowMajor, side, uplo, trans, diag, rows, cols, 1.0, a, lda, b, cols);
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    scipy_cblas_ctrsm(CblasRowMajor, side, uplo, trans, diag, rows, cols, &one, a, lda, b, cols);
  } else {
    scipy_cblas_ztrsm(CblasRowMajor, side, uplo, trans, diag, rows, cols, &one, a, lda, b, cols);
  }
}

Status TriangularSolve(KernelContext& ctx) {
  const Tensor& a = ctx.ins[0];
  const Tensor& b = ctx.ins[1];
  const Tensor& out = ctx.outs[0];
  const bool left = ctx.instr.attr<int64_t>("left_side") != 0;
  const std::string& transpose = ctx.instr.attr<std::string>("transpose_a");
  const Stack sa = StackOf(a), sb = StackOf(b);
  const int64_t m = sa.rows;
  if (sa.cols != m || (left ? sb.rows : sb.cols) != m || b.dtype != a.dtype ||
      out.dtype != a.dtype || *out.dims != *b.dims || !FitsLapackInt(sa) || !FitsLapackInt(sb) ||
      a.dims->size() != b.dims->size() ||
      !std::equal(a.dims->begin(), a.dims->end() - 2, b.dims->begin())) {
    return ShapeError(ctx);
  }
  // The batch from the leading dims: a count from element counts is 0 for a zero-size b
  // (no right-hand sides) however many matrices a stacks.
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < a.dims->size(); ++d) batch *= (*a.dims)[d];
  const CBLAS_TRANSPOSE trans = transpose == "NO_TRANSPOSE" ? CblasNoTrans
                                : transpose == "TRANSPOSE"  ? CblasTrans
                                                            : CblasConjTrans;
  const CBLAS_UPLO uplo = ctx.instr.attr<int64_t>("lower") ? CblasLower : CblasUpper;
  const CBLAS_DIAG diag = ctx.instr.attr<int64_t>("unit_diagonal") ? CblasUnit : CblasNonUnit;
  return DispatchFloatOrComplex(
      a.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        std::copy_n(b.as<T>(), b.num_elements(), out.as<T>());
        // BLAS rejects zero leading dims; nothing to solve then.
        if (batch == 0 || m == 0 || sb.rows == 0 || sb.cols == 0) return Status();
        for (int64_t i = 0; i < batch; ++i) {
          Trsm<T>(left ? CblasLeft : CblasRight, uplo, trans, diag, static_cast<blasint>(sb.rows),
                  static_cast<blasint>(sb.cols), a.as<T>() + i * m * m, static_cast<blasint>(m),
                  out.as<T>() + i * sb.rows * sb.cols);
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, a.dtype); });
}

WORKSHOP_REGISTER_KERNEL("triangular_solve", TriangularSolve);

// ---- QR: geqrf and householder_product ----

// Copies a rows x cols matrix between row-major and column-major order.
template <typename T>
void Transpose(const T* src, T* dst, int64_t rows, int64_t cols) {
  StridedCopy(dst, src, sizeof(T), {cols, rows},
              {static_cast<int64_t>(sizeof(T)), cols * static_cast<int64_t>(sizeof(T))});
}

// LAPACK's geqrf (query = work size when lwork == -1).
template <typename T>
lapack_int Geqrf(lapack_int m, lapack_int n, T* a, T* tau, T* work, lapack_int lwork) {
  if constexpr (std::is_same_v<T, float>) {
    return scipy_LAPACKE_sgeqrf_work(LAPACK_COL_MAJOR, m, n, a, m, tau, work, lwork);
  } else if constexpr (std::is_same_v<T, double>) {
    return scipy_LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, m, n, a, m, tau, work, lwork);
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    return scipy_LAPACKE_cgeqrf_work(LAPACK_COL_MAJOR, m, n, a, m, tau, work, lwork);
  } else {
    return scipy_LAPACKE_zgeqrf_work(LAPACK_COL_MAJOR, m, n, a, m, tau, work, lwork);
  }
}

// LAPACK's orgqr / ungqr.
template <typename T>
lapack_int Orgqr(lapack_int m, lapack_int n, lapack_int k, T* a, const T* tau, T* work,
                 lapack_int lwork) {
  if constexpr (std::is_same_v<T, float>) {
    return scipy_LAPACKE_sorgqr_work(LAPACK_COL_MAJOR, m, n, k, a, m, tau, work, lwork);
  } else if constexpr (std::is_same_v<T, double>) {
    return scipy_LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, m, n, k, a, m, tau, work, lwork);
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    return scipy_LAPACKE_cungqr_work(LAPACK_COL_MAJOR, m, n, k, a, m, tau, work, lwork);
  } else {
    return scipy_LAPACKE_zungqr_work(LAPACK_COL_MAJOR, m, n, k, a, m, tau, work, lwork);
  }
}

// Runs `factor(col_major_matrix, batch_index, work, lwork)` on each matrix of `in`,
// transposed into a scratch, and transposes the result into `out`. `factor` with
// lwork == -1 stores the optimal work size in work[0].
template <typename T, typename Factor>
Status ForEachColumnMajor(const KernelContext& ctx, const Tensor& in, const Tensor& out,
                          Factor factor) {
  const Stack s = StackOf(in);
  if (s.count == 0) return Status();
  std::vector<T> matrix(s.rows * s.cols);
  T query = T(0);
  lapack_int info = factor(matrix.data(), 0, &query, -1);
  std::vector<T> work(std::max<int64_t>(1, static_cast<int64_t>(std::real(query))));
  for (int64_t b = 0; info == 0 && b < s.count; ++b) {
    Transpose(in.as<T>() + b * s.rows * s.cols, matrix.data(), s.rows, s.cols);
    info = factor(matrix.data(), b, work.data(), static_cast<lapack_int>(work.size()));
    Transpose(matrix.data(), out.as<T>() + b * s.rows * s.cols, s.cols, s.rows);
  }
  if (info != 0)
    return Internal("workshop: ", ctx.instr.op, " LAPACK info ", info, " at ", ctx.instr.loc);
  return Status();
}

Status GeqrfKernel(KernelContext& ctx) {
  const Tensor& a = ctx.ins[0];
  const Tensor& out = ctx.outs[0];
  const Tensor& taus = ctx.outs[1];
  const Stack s = StackOf(a);
  const int64_t k = std::min(s.rows, s.cols);
  if (out.dtype != a.dtype || taus.dtype != a.dtype || *out.dims != *a.dims ||
      taus.num_elements() != s.count * k || !FitsLapackInt(s)) {
    return ShapeError(ctx);
  }
  const auto m = static_cast<lapack_int>(s.rows), n = static_cast<lapack_int>(s.cols);
  return DispatchFloatOrComplex(
      a.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        auto geqrf = [&](T* matrix, int64_t b, T* work, lapack_int lwork) {
          return Geqrf(m, n, matrix, taus.as<T>() + b * k, work, lwork);
        };
        return ForEachColumnMajor<T>(ctx, a, out, geqrf);
      },
      [&] { return UnsupportedDType(ctx, a.dtype); });
}

WORKSHOP_REGISTER_KERNEL("geqrf", GeqrfKernel);

Status HouseholderProduct(KernelContext& ctx) {
  const Tensor& a = ctx.ins[0];
  const Tensor& taus = ctx.ins[1];
  const Tensor& out = ctx.outs[0];
  const Stack s = StackOf(a);
  const int64_t k = taus.dims->empty() ? 0 : taus.dims->back();
  if (out.dtype != a.dtype || taus.dtype != a.dtype || *out.dims != *a.dims ||
      taus.num_elements() != s.count * k || !(s.rows >= s.cols && s.cols >= k) ||
      !FitsLapackInt(s)) {
    return ShapeError(ctx);
  }
  const auto m = static_cast<lapack_int>(s.rows), n = static_cast<lapack_int>(s.cols);
  return DispatchFloatOrComplex(
      a.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        auto orgqr = [&](T* matrix, int64_t b, T* work, lapack_int lwork) {
          return Orgqr(m, n, static_cast<lapack_int>(k), matrix, taus.as<T>() + b * k, work, lwork);
        };
        return ForEachColumnMajor<T>(ctx, a, out, orgqr);
      },
      [&] { return UnsupportedDType(ctx, a.dtype); });
}

WORKSHOP_REGISTER_KERNEL("householder_product", HouseholderProduct);

}  // namespace
}  // namespace workshop
