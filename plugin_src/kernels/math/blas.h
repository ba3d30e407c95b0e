// OpenBLAS (scipy-openblas32) threading policy, shared by dot_general and convolution.
#pragma once

#include <cblas.h>

#include <complex>
#include <mutex>
#include <type_traits>

namespace workshop {

// OpenBLAS's own threads spin after each call, which stalls whatever else wants the cores
// (other devices' workers, the next kernel): measured here, a conv of ~55 GEMM calls went
// from ~60 ms to 0.5-1.2 s on a busy 2-core machine. So OpenBLAS runs single-threaded and
// big GEMMs are split over the plugin's own thread pool instead (dot.cc, convolution.cc),
// into as many parts as the cost model gives their flops (ThreadPool::PartsFor).
// Call before any BLAS call.
inline void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { scipy_openblas_set_num_threads(1); });
}

// C = alpha op(A) op(B) + beta C, row-major, for f32/f64/c64/c128: OpenBLAS's typed
// GEMMs behind one name (the complex ones take alpha and beta by pointer).
template <typename T>
void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, T alpha,
              const T* pa, blasint lda, const T* pb, blasint ldb, T beta, T* pc, blasint ldc) {
  if constexpr (std::is_same_v<T, float>) {
    scipy_cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc);
  } else if constexpr (std::is_same_v<T, double>) {
    scipy_cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc);
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    scipy_cblas_cgemm(CblasRowMajor, ta, tb, m, n, k, &alpha, pa, lda, pb, ldb, &beta, pc, ldc);
  } else {
    static_assert(std::is_same_v<T, std::complex<double>>, "no BLAS GEMM for this type");
    scipy_cblas_zgemm(CblasRowMajor, ta, tb, m, n, k, &alpha, pa, lda, pb, ldb, &beta, pc, ldc);
  }
}

// y = alpha op(A) x + beta y, row-major A of m x n, for f32/f64/c64/c128: OpenBLAS's typed
// GEMVs behind one name. dot_general's matrix-vector products (a batch-1 layer) go here
// rather than to BlasGemm, which packs the whole matrix into its panel layout before a
// one-row product; the GEMV reads it once, in place.
template <typename T>
void BlasGemv(CBLAS_TRANSPOSE ta, blasint m, blasint n, T alpha, const T* pa, blasint lda,
              const T* px, blasint incx, T beta, T* py, blasint incy) {
  if constexpr (std::is_same_v<T, float>) {
    scipy_cblas_sgemv(CblasRowMajor, ta, m, n, alpha, pa, lda, px, incx, beta, py, incy);
  } else if constexpr (std::is_same_v<T, double>) {
    scipy_cblas_dgemv(CblasRowMajor, ta, m, n, alpha, pa, lda, px, incx, beta, py, incy);
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    scipy_cblas_cgemv(CblasRowMajor, ta, m, n, &alpha, pa, lda, px, incx, &beta, py, incy);
  } else {
    static_assert(std::is_same_v<T, std::complex<double>>, "no BLAS GEMV for this type");
    scipy_cblas_zgemv(CblasRowMajor, ta, m, n, &alpha, pa, lda, px, incx, &beta, py, incy);
  }
}

}  // namespace workshop
