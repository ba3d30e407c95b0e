// The LAPACK custom calls of JAX's CPU lowerings of eigh, svd, eig, schur, hessenberg,
// tridiagonal, lu and QR with pivoting, and jaxlib's perturbed tridiagonal solve
// (jax/_src/lax/linalg.py; `jax_plugins/workshop/extensions/linalg.py` registers those
// lowerings for `workshop`, so sorting, phases and info -> NaN come from the same
// StableHLO as on the CPU backend). Each kernel has the semantics of jaxlib's
// lapack_<x><name>_ffi kernel (jaxlib/cpu/lapack_kernels.cc): the same LAPACK routine on
// every matrix of the batch, f32/f64/c64/c128 (R below is the real type of T), from the
// OpenBLAS the plugin links (scipy-openblas32: LAPACKE with the `scipy_` prefix).
// One file of about 860 lines on purpose: the routines share the batch walk, the
// row-major LAPACKE calls and the info handling, and the op table's `lapack` family maps
// to this one kernel file as every family does.
// Buffers are row-major; LAPACKE_*(LAPACK_ROW_MAJOR, ...) transposes in and out.
// Every kernel's last output (but geqp3's and the tridiagonal solve's) is info, s32
// [...batch]: LAPACK's info per matrix (0 = ok; LAPACKE's -1010 when it could not
// allocate its workspace).
//
//   lapack_evd    a [..., n, n]; attrs mode ('V'/'N'), uplo ('L'/'U'): syevd / heevd
//                 -> v [..., n, n] (eigenvectors in columns), w R[..., n] ascending, info
//   lapack_svd    a [..., m, n]; attrs mode ('A' full, 'S' reduced, 'N' no vectors),
//                 algorithm ("gesdd" or "gesvd")
//                 -> a (overwritten, as jaxlib), s R[..., k], u [..., m, m|k],
//                    vt [..., n|k, n], info; u and vt are zeros for mode 'N'
//   lapack_geev   a [..., n, n]; attrs compute_left, compute_right ('V'/'N')
//                 real T -> wr, wi [..., n], vl, vr complex [..., n, n], info: the packed
//                          conjugate pairs of LAPACK's real geev unpacked into complex
//                          columns (v_j = re + i im, v_{j+1} = re - i im)
//                 complex -> w [..., n], vl, vr [..., n, n], info
//                 vectors not asked for are zeros
//   lapack_gees   a [..., n, n]; attr mode ('V'/'N'), no sorting
//                 real T -> t, z [..., n, n], wr, wi [..., n], sdim, info
//                 complex -> t, z [..., n, n], w [..., n], sdim, info
//   lapack_gehrd  a [..., n, n]; attrs low, high (1-based, as LAPACK's ilo/ihi)
//                 -> a (H above the first subdiagonal, reflectors below), taus [..., n-1],
//                    info
//   lapack_sytrd  a [..., n, n]; attr uplo: sytrd / hetrd
//                 -> a (tridiagonal + reflectors), d R[..., n], e R[..., n-1],
//                    taus [..., n-1], info
//
//   lapack_getrf  a [..., m, n] -> a (L below the diagonal, unit diagonal implied; U on
//                 and above it), ipiv s32[..., min(m, n)] (1-based row swaps), info
//                 (> 0: U(info, info) is exactly zero; JAX keeps such factors)
//   tridiagonal_solve_perturbed
//                 dl, d, du [..., m] (sub-, main and superdiagonal; dl[0], du[m-1] unused),
//                 b [..., m, k] -> x [..., m, k] with T x = b: jaxlib's
//                 tridiagonal_solve_perturbed_ffi (lax.linalg.tridiagonal_solve with
//                 perturb_singular=True, which eigh_tridiagonal's inverse iteration uses).
//                 Not a LAPACK routine: LU with row pivoting chosen as xLAGTF chooses it, and
//                 xLAGTS's back substitution, where a pivot too small for 1/pivot or
//                 rhs/pivot to stay finite is moved away from zero, in steps of
//                 eps * max|U(i,j)| doubling each time, so a singular T still gives a
//                 finite x (the behaviour jaxlib documents for it).
//   lapack_geqp3  a [..., m, n], jpvt s32[..., n] (1-based; nonzero pins a column first)
//                 -> a (R and reflectors, as geqrf), jpvt (1-based pivots), taus [..., k]
//                 (no info: geqp3 cannot fail on valid arguments)
//
// Non-finite input: jaxlib calls LAPACK without LAPACKE's NaN screen (which answers
// info = -k without computing), so this library turns that screen off and LAPACK computes
// on NaN and Inf as it does under the CPU backend. Two exceptions, where a matrix with a
// NaN or Inf is not passed to LAPACK and gets info = -4 (LAPACK's answer for a bad `a`),
// which JAX's lowering turns into all NaN, the CPU backend's result for NaN input:
// gesdd/gesvd can loop forever on a matrix holding Inf (xBDSQR's threshold becomes NaN:
// Reference-LAPACK/lapack#1409, numpy/numpy#32591; the CPU backend hangs there), and geev
// answers NaN with info = -4 but prints "parameter number 4 had an illegal value" through
// xerbla on stdout (the CPU backend's results for Inf are all NaN too).
//
// Errors (INVALID_ARGUMENT naming op, shapes and location): shapes that don't match the
// above or don't fit LAPACK's 32-bit ints. The compiler has already checked dtypes
// (compiler/rules/lapack.py), so a dtype here that is not f32/f64/c64/c128 is also an error.
//
// One file, over 800 lines, on purpose: the nine kernels share the batch loop, the
// LAPACKE workspace queries and the info handling, and each is a short call sequence.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#define lapack_complex_float std::complex<float>
#define lapack_complex_double std::complex<double>
#include <lapacke.h>

#include "kernels/core/kernel.h"
#include "kernels/math/blas.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

using c64 = std::complex<float>;
using c128 = std::complex<double>;
constexpr int kRow = LAPACK_ROW_MAJOR;

template <typename T> struct RealOf {
  using type = T;
};
template <typename R> struct RealOf<std::complex<R>> {
  using type = R;
};
template <typename T> using Real = typename RealOf<T>::type;
template <typename T> constexpr bool kComplex = !std::is_same_v<T, Real<T>>;

// LAPACKE's NaN screen is a process-wide flag of the library; this plugin is its only
// user (scipy-openblas32 is loaded for the plugin alone), and the flag is set before any
// kernel can run.
const bool kNoNanCheck = (scipy_LAPACKE_set_nancheck(0), true);

// ---- LAPACKE by element type ----

lapack_int Evd(char j, char u, lapack_int n, float* a, float* w) {
  return scipy_LAPACKE_ssyevd(kRow, j, u, n, a, n, w);
}
lapack_int Evd(char j, char u, lapack_int n, double* a, double* w) {
  return scipy_LAPACKE_dsyevd(kRow, j, u, n, a, n, w);
}
lapack_int Evd(char j, char u, lapack_int n, c64* a, float* w) {
  return scipy_LAPACKE_cheevd(kRow, j, u, n, a, n, w);
}
lapack_int Evd(char j, char u, lapack_int n, c128* a, double* w) {
  return scipy_LAPACKE_zheevd(kRow, j, u, n, a, n, w);
}

#define WORKSHOP_GESDD(T, R, f)                                                                 \
  lapack_int Gesdd(char j, lapack_int m, lapack_int n, T* a, R* s, T* u, lapack_int ldu, T* vt, \
                   lapack_int ldvt) {                                                           \
    return f(kRow, j, m, n, a, n, s, u, ldu, vt, ldvt);                                         \
  }
WORKSHOP_GESDD(float, float, scipy_LAPACKE_sgesdd)
WORKSHOP_GESDD(double, double, scipy_LAPACKE_dgesdd)
WORKSHOP_GESDD(c64, float, scipy_LAPACKE_cgesdd)
WORKSHOP_GESDD(c128, double, scipy_LAPACKE_zgesdd)
#undef WORKSHOP_GESDD

#define WORKSHOP_GESVD(T, R, f)                                                                 \
  lapack_int Gesvd(char j, lapack_int m, lapack_int n, T* a, R* s, T* u, lapack_int ldu, T* vt, \
                   lapack_int ldvt, R* superb) {                                                \
    return f(kRow, j, j, m, n, a, n, s, u, ldu, vt, ldvt, superb);                              \
  }
WORKSHOP_GESVD(float, float, scipy_LAPACKE_sgesvd)
WORKSHOP_GESVD(double, double, scipy_LAPACKE_dgesvd)
WORKSHOP_GESVD(c64, float, scipy_LAPACKE_cgesvd)
WORKSHOP_GESVD(c128, double, scipy_LAPACKE_zgesvd)
#undef WORKSHOP_GESVD

lapack_int Geev(char l, char r, lapack_int n, float* a, float* wr, float* wi, float* vl,
                float* vr) {
  return scipy_LAPACKE_sgeev(kRow, l, r, n, a, n, wr, wi, vl, n, vr, n);
}
lapack_int Geev(char l, char r, lapack_int n, double* a, double* wr, double* wi, double* vl,
                double* vr) {
  return scipy_LAPACKE_dgeev(kRow, l, r, n, a, n, wr, wi, vl, n, vr, n);
}
lapack_int Geev(char l, char r, lapack_int n, c64* a, c64* w, c64* vl, c64* vr) {
  return scipy_LAPACKE_cgeev(kRow, l, r, n, a, n, w, vl, n, vr, n);
}
lapack_int Geev(char l, char r, lapack_int n, c128* a, c128* w, c128* vl, c128* vr) {
  return scipy_LAPACKE_zgeev(kRow, l, r, n, a, n, w, vl, n, vr, n);
}

lapack_int Gees(char j, lapack_int n, float* a, lapack_int* sdim, float* wr, float* wi, float* vs) {
  return scipy_LAPACKE_sgees(kRow, j, 'N', nullptr, n, a, n, sdim, wr, wi, vs, n);
}
lapack_int Gees(char j, lapack_int n, double* a, lapack_int* sdim, double* wr, double* wi,
                double* vs) {
  return scipy_LAPACKE_dgees(kRow, j, 'N', nullptr, n, a, n, sdim, wr, wi, vs, n);
}
lapack_int Gees(char j, lapack_int n, c64* a, lapack_int* sdim, c64* w, c64* vs) {
  return scipy_LAPACKE_cgees(kRow, j, 'N', nullptr, n, a, n, sdim, w, vs, n);
}
lapack_int Gees(char j, lapack_int n, c128* a, lapack_int* sdim, c128* w, c128* vs) {
  return scipy_LAPACKE_zgees(kRow, j, 'N', nullptr, n, a, n, sdim, w, vs, n);
}

lapack_int Gehrd(lapack_int n, lapack_int lo, lapack_int hi, float* a, float* tau) {
  return scipy_LAPACKE_sgehrd(kRow, n, lo, hi, a, n, tau);
}
lapack_int Gehrd(lapack_int n, lapack_int lo, lapack_int hi, double* a, double* tau) {
  return scipy_LAPACKE_dgehrd(kRow, n, lo, hi, a, n, tau);
}
lapack_int Gehrd(lapack_int n, lapack_int lo, lapack_int hi, c64* a, c64* tau) {
  return scipy_LAPACKE_cgehrd(kRow, n, lo, hi, a, n, tau);
}
lapack_int Gehrd(lapack_int n, lapack_int lo, lapack_int hi, c128* a, c128* tau) {
  return scipy_LAPACKE_zgehrd(kRow, n, lo, hi, a, n, tau);
}

lapack_int Sytrd(char u, lapack_int n, float* a, float* d, float* e, float* tau) {
  return scipy_LAPACKE_ssytrd(kRow, u, n, a, n, d, e, tau);
}
lapack_int Sytrd(char u, lapack_int n, double* a, double* d, double* e, double* tau) {
  return scipy_LAPACKE_dsytrd(kRow, u, n, a, n, d, e, tau);
}
lapack_int Sytrd(char u, lapack_int n, c64* a, float* d, float* e, c64* tau) {
  return scipy_LAPACKE_chetrd(kRow, u, n, a, n, d, e, tau);
}
lapack_int Sytrd(char u, lapack_int n, c128* a, double* d, double* e, c128* tau) {
  return scipy_LAPACKE_zhetrd(kRow, u, n, a, n, d, e, tau);
}

lapack_int Getrf(lapack_int m, lapack_int n, float* a, lapack_int* p, lapack_int lda) {
  return scipy_LAPACKE_sgetrf(kRow, m, n, a, lda, p);
}
lapack_int Getrf(lapack_int m, lapack_int n, double* a, lapack_int* p, lapack_int lda) {
  return scipy_LAPACKE_dgetrf(kRow, m, n, a, lda, p);
}
lapack_int Getrf(lapack_int m, lapack_int n, c64* a, lapack_int* p, lapack_int lda) {
  return scipy_LAPACKE_cgetrf(kRow, m, n, a, lda, p);
}
lapack_int Getrf(lapack_int m, lapack_int n, c128* a, lapack_int* p, lapack_int lda) {
  return scipy_LAPACKE_zgetrf(kRow, m, n, a, lda, p);
}

lapack_int Geqp3(lapack_int m, lapack_int n, float* a, lapack_int* p, float* tau) {
  return scipy_LAPACKE_sgeqp3(kRow, m, n, a, n, p, tau);
}
lapack_int Geqp3(lapack_int m, lapack_int n, double* a, lapack_int* p, double* tau) {
  return scipy_LAPACKE_dgeqp3(kRow, m, n, a, n, p, tau);
}
lapack_int Geqp3(lapack_int m, lapack_int n, c64* a, lapack_int* p, c64* tau) {
  return scipy_LAPACKE_cgeqp3(kRow, m, n, a, n, p, tau);
}
lapack_int Geqp3(lapack_int m, lapack_int n, c128* a, lapack_int* p, c128* tau) {
  return scipy_LAPACKE_zgeqp3(kRow, m, n, a, n, p, tau);
}

// ---- blocked LU over the plugin's pool ----
//
// OpenBLAS runs single-threaded here (blas.h), so one large getrf used one core while
// jaxlib's (OpenBLAS's threads) used all. BlockedGetrf is LAPACK's own right-looking
// blocked algorithm (dgetrf: Anderson et al., LAPACK Users' Guide, 3rd ed., 1999, sec.
// 3.4.2) with its level-3 steps split over the pool: for each panel of kLuBlock columns,
// getrf of the panel (partial pivoting over all rows below), the row swaps applied to
// the columns left and right of it, U12 = L11^-1 A12 (trsm, split by columns) and the
// trailing update A22 -= L21 U12 (gemm, split by rows), which holds 2/3 of the flops.

constexpr int64_t kLuBlock = 128;
// Below this many columns a single getrf call is as fast.
constexpr int64_t kBlockedLuMin = 384;

template <typename T>
void Trsm(int64_t m, int64_t n, const T* l, int64_t ldl, T* b, int64_t ldb) {
  const T one(1);
  auto M = static_cast<blasint>(m), N = static_cast<blasint>(n);
  auto L = static_cast<blasint>(ldl), B = static_cast<blasint>(ldb);
  if constexpr (std::is_same_v<T, float>) {
    scipy_cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, M, N, 1.0f, l,
                      L, b, B);
  } else if constexpr (std::is_same_v<T, double>) {
    scipy_cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, M, N, 1.0, l,
                      L, b, B);
  } else if constexpr (std::is_same_v<T, c64>) {
    scipy_cblas_ctrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, M, N, &one, l,
                      L, b, B);
  } else {
    scipy_cblas_ztrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, M, N, &one, l,
                      L, b, B);
  }
}

// Splits [0, extent) into one range per pool thread (at least `min_part` long) and runs
// fn(lo, hi) on each.
template <typename Fn>
void SplitOverPool(int64_t extent, int64_t min_part, const Fn& fn) {
  ThreadPool& pool = ThreadPool::Global();
  const int64_t parts = std::max<int64_t>(
      1, std::min<int64_t>(pool.num_threads(), extent / std::max<int64_t>(min_part, 1)));
  if (parts == 1) {
    if (extent > 0) fn(int64_t{0}, extent);
    return;
  }
  pool.ParallelFor(parts, 1, [&](int64_t first, int64_t end) {
    for (int64_t p = first; p < end; ++p) {
      const int64_t lo = extent * p / parts, hi = extent * (p + 1) / parts;
      if (lo < hi) fn(lo, hi);
    }
  });
}

// LU of the row-major m x n matrix a with partial pivoting, as getrf: ipiv (1-based, k =
// min(m, n) of them) and LAPACK's info (0, or the 1-based index of the first zero pivot).
template <typename T>
lapack_int BlockedGetrf(int64_t m, int64_t n, T* a, lapack_int* ipiv) {
  const int64_t k = std::min(m, n);
  lapack_int info = 0;
  for (int64_t j0 = 0; j0 < k; j0 += kLuBlock) {
    const int64_t jb = std::min(kLuBlock, k - j0);
    T* panel = a + j0 * n + j0;
    const lapack_int panel_info =
        Getrf(static_cast<lapack_int>(m - j0), static_cast<lapack_int>(jb), panel, ipiv + j0,
              static_cast<lapack_int>(n));
    if (panel_info < 0) return panel_info;
    if (info == 0 && panel_info > 0) info = panel_info + static_cast<lapack_int>(j0);
    for (int64_t i = j0; i < j0 + jb; ++i) ipiv[i] += static_cast<lapack_int>(j0);
    // The panel's row swaps, on the columns left and right of it.
    const int64_t right = j0 + jb;
    for (int64_t i = j0; i < j0 + jb; ++i) {
      const int64_t r = ipiv[i] - 1;
      if (r == i) continue;
      std::swap_ranges(a + i * n, a + i * n + j0, a + r * n);
      std::swap_ranges(a + i * n + right, a + i * n + n, a + r * n + right);
    }
    if (right >= n) continue;
    SplitOverPool(n - right, 64, [&](int64_t lo, int64_t hi) {
      Trsm<T>(jb, hi - lo, panel, n, a + j0 * n + right + lo, n);
    });
    if (right >= m) continue;
    SplitOverPool(m - right, 64, [&](int64_t lo, int64_t hi) {
      // A22 -= L21 U12.
      BlasGemm<T>(CblasNoTrans, CblasNoTrans, static_cast<blasint>(hi - lo),
                  static_cast<blasint>(n - right), static_cast<blasint>(jb), T(-1),
                  a + (right + lo) * n + j0, static_cast<blasint>(n), a + j0 * n + right,
                  static_cast<blasint>(n), T(1), a + (right + lo) * n + right,
                  static_cast<blasint>(n));
    });
  }
  return info;
}

// ---- shared checks ----

Status ShapeError(const KernelContext& ctx, const char* what) {
  std::string shapes;
  for (const Tensor& t : ctx.ins) shapes += " " + ShapeString(t.dtype, *t.dims);
  return InvalidArgument("workshop: ", ctx.instr.op, " of", shapes, ": ", what, " at ",
                         ctx.instr.loc);
}

// The batch size, rows and cols of operand 0, checked to fit LAPACK's ints, with `outs`
// outputs (the last one info, s32 with one element per matrix).
struct Batch {
  int64_t count, m, n;
};

bool Valid(const KernelContext& ctx, size_t outs, Batch* b) {
  if (ctx.ins.size() != 1 || ctx.outs.size() != outs) return false;
  const Dims& d = *ctx.ins[0].dims;
  if (d.size() < 2) return false;
  b->m = d[d.size() - 2];
  b->n = d.back();
  b->count = 1;
  for (size_t i = 0; i + 2 < d.size(); ++i) b->count *= d[i];
  constexpr int64_t kMax = std::numeric_limits<lapack_int>::max();
  const Tensor& info = ctx.outs.back();
  return b->m <= kMax && b->n <= kMax && b->m * b->n <= kMax && info.dtype == DType::kS32 &&
         info.num_elements() == b->count;
}

// Elements of output i (its dtype must be T's real or complex type as `Out` says).
template <typename Out>
bool OutIs(const KernelContext& ctx, size_t i, int64_t elements_per_matrix, int64_t count) {
  const Tensor& t = ctx.outs[i];
  return ByteWidth(t.dtype) == sizeof(Out) && t.num_elements() == elements_per_matrix * count;
}

template <typename Fn>
Status ByType(const KernelContext& ctx, Fn&& fn) {
  switch (ctx.ins[0].dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    case DType::kC64: return fn(c64{});
    case DType::kC128: return fn(c128{});
    default: return UnsupportedDType(ctx, ctx.ins[0].dtype);
  }
}

bool IsComplexOperand(const KernelContext& ctx) {
  return !ctx.ins.empty() && (ctx.ins[0].dtype == DType::kC64 || ctx.ins[0].dtype == DType::kC128);
}

template <typename T>
bool AllFinite(const T* x, int64_t count) {
  return std::all_of(x, x + count, [](const T& v) {
    if constexpr (kComplex<T>) {
      return std::isfinite(v.real()) && std::isfinite(v.imag());
    } else {
      return std::isfinite(v);
    }
  });
}

// Calls body(i) for every matrix i < count, split over the plugin's thread pool when the
// batch holds enough work (jaxlib splits its batch loops over XLA:CPU's intra-op threads
// too). `work` estimates one matrix's cost in flops (n^3 for an n x n factorization); a
// body must touch only matrix i's slices of the outputs and scratch of its own.
template <typename Body>
void ForEachMatrix(int64_t count, int64_t work, const Body& body) {
  // A LAPACKE call costs a few µs beyond its flops (workspace query, allocation, the
  // row-major transposes), counted here as 256 flops.
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (work + 256));
  if (count <= grain) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  ThreadPool::Global().ParallelFor(count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) body(i);
  });
}

char CharAttr(const KernelContext& ctx, const char* name) {
  return static_cast<char>(ctx.instr.attr<int64_t>(name));
}

// ---- kernels ----

Status EvdKernel(KernelContext& ctx) {
  Batch b;
  if (!Valid(ctx, 3, &b) || b.m != b.n) return ShapeError(ctx, "expected a [..., n, n]");
  const char mode = CharAttr(ctx, "mode"), uplo = CharAttr(ctx, "uplo");
  return ByType(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    const int64_t n = b.n;
    if (!OutIs<T>(ctx, 0, n * n, b.count) || !OutIs<Real<T>>(ctx, 1, n, b.count)) {
      return ShapeError(ctx, "outputs must be v [..., n, n], w [..., n]");
    }
    UseSingleThreadedBlas();
    T* v = ctx.outs[0].as<T>();
    std::copy_n(ctx.ins[0].as<T>(), b.count * n * n, v);
    ForEachMatrix(b.count, n * n * n, [&](int64_t i) {
      ctx.outs[2].as<int32_t>()[i] =
          n == 0 ? 0 : Evd(mode, uplo, n, v + i * n * n, ctx.outs[1].as<Real<T>>() + i * n);
    });
    return Status();
  });
}

Status SvdKernel(KernelContext& ctx) {
  Batch b;
  if (!Valid(ctx, 5, &b)) return ShapeError(ctx, "expected a [..., m, n]");
  const char mode = CharAttr(ctx, "mode");
  const bool gesvd = ctx.instr.attr<std::string>("algorithm") == "gesvd";
  return ByType(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    using R = Real<T>;
    const int64_t m = b.m, n = b.n, k = std::min(m, n);
    const int64_t ucols = mode == 'A' ? m : k, vtrows = mode == 'A' ? n : k;
    if (!OutIs<T>(ctx, 0, m * n, b.count) || !OutIs<R>(ctx, 1, k, b.count) ||
        (mode != 'N' &&
         (!OutIs<T>(ctx, 2, m * ucols, b.count) || !OutIs<T>(ctx, 3, vtrows * n, b.count)))) {
      return ShapeError(ctx, "outputs do not match the svd mode");
    }
    UseSingleThreadedBlas();
    T* a = ctx.outs[0].as<T>();
    std::copy_n(ctx.ins[0].as<T>(), b.count * m * n, a);
    T* u = ctx.outs[2].as<T>();
    T* vt = ctx.outs[3].as<T>();
    const int64_t u_size = ctx.outs[2].num_elements() / std::max<int64_t>(b.count, 1);
    const int64_t vt_size = ctx.outs[3].num_elements() / std::max<int64_t>(b.count, 1);
    std::fill_n(u, ctx.outs[2].num_elements(), T(0));
    std::fill_n(vt, ctx.outs[3].num_elements(), T(0));
    ForEachMatrix(b.count, m * n * k, [&](int64_t i) {
      T* ai = a + i * m * n;
      if (!AllFinite(ai, m * n)) {
        ctx.outs[4].as<int32_t>()[i] = -4;  // See "Non-finite input" above.
        return;
      }
      std::vector<R> superb(std::max<int64_t>(k, 1));
      T no_u = 0, no_vt = 0;  // LAPACK does not touch these for mode 'N'.
      T* ui = mode == 'N' ? &no_u : u + i * u_size;
      T* vti = mode == 'N' ? &no_vt : vt + i * vt_size;
      const lapack_int ldu = mode == 'N' ? 1 : ucols, ldvt = mode == 'N' ? 1 : n;
      R* s = ctx.outs[1].as<R>() + i * k;
      ctx.outs[4].as<int32_t>()[i] =
          gesvd ? Gesvd(mode, m, n, ai, s, ui, ldu, vti, ldvt, superb.data())
                : Gesdd(mode, m, n, ai, s, ui, ldu, vti, ldvt);
    });
    return Status();
  });
}

// Real geev packs a complex pair's vectors as columns (re, im) at j, j+1.
template <typename R>
void UnpackEigenvectors(int64_t n, const R* wi, const R* packed, std::complex<R>* out) {
  for (int64_t j = 0; j < n; ++j) {
    if (wi[j] != 0 && j + 1 < n) {
      for (int64_t r = 0; r < n; ++r) {
        const R re = packed[r * n + j], im = packed[r * n + j + 1];
        out[r * n + j] = {re, im};
        out[r * n + j + 1] = {re, -im};
      }
      ++j;
    } else {
      for (int64_t r = 0; r < n; ++r) out[r * n + j] = {packed[r * n + j], R(0)};
    }
  }
}

Status GeevKernel(KernelContext& ctx) {
  Batch b;
  if (!Valid(ctx, IsComplexOperand(ctx) ? 4 : 5, &b) || b.m != b.n) {
    return ShapeError(ctx, "expected a [..., n, n]");
  }
  const char left = CharAttr(ctx, "compute_left"), right = CharAttr(ctx, "compute_right");
  return ByType(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    using R = Real<T>;
    using C = std::complex<R>;
    const int64_t n = b.n, nn = n * n;
    constexpr size_t kW = kComplex<T> ? 1 : 2;  // Outputs before vl.
    if (!OutIs<T>(ctx, 0, n, b.count) || (!kComplex<T> && !OutIs<T>(ctx, 1, n, b.count)) ||
        !OutIs<C>(ctx, kW, nn, b.count) || !OutIs<C>(ctx, kW + 1, nn, b.count)) {
      return ShapeError(ctx, "outputs must be eigenvalues [..., n], vectors [..., n, n]");
    }
    UseSingleThreadedBlas();
    C* vl = ctx.outs[kW].as<C>();
    C* vr = ctx.outs[kW + 1].as<C>();
    std::fill_n(vl, b.count * nn, C(0));
    std::fill_n(vr, b.count * nn, C(0));
    ForEachMatrix(b.count, nn * n, [&](int64_t i) {
      int32_t& info = ctx.outs.back().as<int32_t>()[i];
      const T* ai = ctx.ins[0].as<T>() + i * nn;
      if (n == 0 || !AllFinite(ai, nn)) {
        info = n == 0 ? 0 : -4;  // See "Non-finite input" above.
        return;
      }
      std::vector<T> a(ai, ai + nn);        // geev overwrites its input.
      std::vector<T> vl_packed, vr_packed;  // Real T only.
      if constexpr (!kComplex<T>) {
        vl_packed.resize(nn);
        vr_packed.resize(nn);
      }
      if constexpr (kComplex<T>) {
        info =
            Geev(left, right, n, a.data(), ctx.outs[0].as<T>() + i * n, vl + i * nn, vr + i * nn);
      } else {
        R* wr = ctx.outs[0].as<R>() + i * n;
        R* wi = ctx.outs[1].as<R>() + i * n;
        info = Geev(left, right, n, a.data(), wr, wi, vl_packed.data(), vr_packed.data());
        if (info == 0 && left == 'V') UnpackEigenvectors(n, wi, vl_packed.data(), vl + i * nn);
        if (info == 0 && right == 'V') UnpackEigenvectors(n, wi, vr_packed.data(), vr + i * nn);
      }
    });
    return Status();
  });
}

Status GeesKernel(KernelContext& ctx) {
  Batch b;
  if (!Valid(ctx, IsComplexOperand(ctx) ? 5 : 6, &b) || b.m != b.n) {
    return ShapeError(ctx, "expected a [..., n, n]");
  }
  const char mode = CharAttr(ctx, "mode");
  return ByType(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    const int64_t n = b.n, nn = n * n;
    constexpr size_t kSdim = kComplex<T> ? 3 : 4;
    if (!OutIs<T>(ctx, 0, nn, b.count) || !OutIs<T>(ctx, 1, nn, b.count) ||
        !OutIs<T>(ctx, 2, n, b.count) || (!kComplex<T> && !OutIs<T>(ctx, 3, n, b.count)) ||
        !OutIs<int32_t>(ctx, kSdim, 1, b.count)) {
      return ShapeError(ctx, "outputs must be t, z [..., n, n], eigenvalues [..., n], sdim");
    }
    UseSingleThreadedBlas();
    T* t = ctx.outs[0].as<T>();
    T* z = ctx.outs[1].as<T>();
    std::copy_n(ctx.ins[0].as<T>(), b.count * nn, t);
    std::fill_n(z, b.count * nn, T(0));
    std::vector<T> no_z(1);
    for (int64_t i = 0; i < b.count; ++i) {
      lapack_int sdim = 0;
      int32_t& info = ctx.outs.back().as<int32_t>()[i];
      T* zi = mode == 'V' ? z + i * nn : no_z.data();
      if (n == 0) {
        info = 0;
      } else if constexpr (kComplex<T>) {
        info = Gees(mode, n, t + i * nn, &sdim, ctx.outs[2].as<T>() + i * n, zi);
      } else {
        info = Gees(mode, n, t + i * nn, &sdim, ctx.outs[2].as<T>() + i * n,
                    ctx.outs[3].as<T>() + i * n, zi);
      }
      ctx.outs[kSdim].as<int32_t>()[i] = sdim;
    }
    return Status();
  });
}

Status GehrdKernel(KernelContext& ctx) {
  Batch b;
  if (!Valid(ctx, 3, &b) || b.m != b.n) return ShapeError(ctx, "expected a [..., n, n]");
  const int64_t low = ctx.instr.attr<int64_t>("low"), high = ctx.instr.attr<int64_t>("high");
  return ByType(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    const int64_t n = b.n, taus = std::max<int64_t>(n - 1, 0);
    if (!OutIs<T>(ctx, 0, n * n, b.count) || !OutIs<T>(ctx, 1, taus, b.count)) {
      return ShapeError(ctx, "outputs must be a [..., n, n], taus [..., n-1]");
    }
    UseSingleThreadedBlas();
    T* a = ctx.outs[0].as<T>();
    std::copy_n(ctx.ins[0].as<T>(), b.count * n * n, a);
    std::vector<T> tau(std::max<int64_t>(n, 1));  // LAPACK writes n-1; keep one spare.
    for (int64_t i = 0; i < b.count; ++i) {
      int32_t& info = ctx.outs[2].as<int32_t>()[i];
      info = n == 0 ? 0 : Gehrd(n, low, high, a + i * n * n, tau.data());
      std::copy_n(tau.data(), taus, ctx.outs[1].as<T>() + i * taus);
    }
    return Status();
  });
}

Status SytrdKernel(KernelContext& ctx) {
  Batch b;
  if (!Valid(ctx, 5, &b) || b.m != b.n) return ShapeError(ctx, "expected a [..., n, n]");
  const char uplo = CharAttr(ctx, "uplo");
  return ByType(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    using R = Real<T>;
    const int64_t n = b.n, off = std::max<int64_t>(n - 1, 0);
    if (!OutIs<T>(ctx, 0, n * n, b.count) || !OutIs<R>(ctx, 1, n, b.count) ||
        !OutIs<R>(ctx, 2, off, b.count) || !OutIs<T>(ctx, 3, off, b.count)) {
      return ShapeError(ctx, "outputs must be a [..., n, n], d [..., n], e, taus [..., n-1]");
    }
    UseSingleThreadedBlas();
    T* a = ctx.outs[0].as<T>();
    std::copy_n(ctx.ins[0].as<T>(), b.count * n * n, a);
    std::vector<R> e(std::max<int64_t>(n, 1));
    std::vector<T> tau(std::max<int64_t>(n, 1));
    for (int64_t i = 0; i < b.count; ++i) {
      int32_t& info = ctx.outs[4].as<int32_t>()[i];
      info = n == 0
                 ? 0
                 : Sytrd(uplo, n, a + i * n * n, ctx.outs[1].as<R>() + i * n, e.data(), tau.data());
      std::copy_n(e.data(), off, ctx.outs[2].as<R>() + i * off);
      std::copy_n(tau.data(), off, ctx.outs[3].as<T>() + i * off);
    }
    return Status();
  });
}

Status GetrfKernel(KernelContext& ctx) {
  Batch b;
  if (!Valid(ctx, 3, &b)) return ShapeError(ctx, "expected a [..., m, n]");
  const int64_t m = b.m, n = b.n, k = std::min(m, n);
  const Tensor& ipiv = ctx.outs[1];
  if (ipiv.dtype != DType::kS32 || ipiv.num_elements() != k * b.count) {
    return ShapeError(ctx, "outputs must be a [..., m, n], ipiv s32[..., min(m, n)], info");
  }
  return ByType(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    if (!OutIs<T>(ctx, 0, m * n, b.count)) {
      return ShapeError(ctx, "outputs must be a [..., m, n], ipiv s32[..., min(m, n)], info");
    }
    UseSingleThreadedBlas();
    T* a = ctx.outs[0].as<T>();
    std::copy_n(ctx.ins[0].as<T>(), b.count * m * n, a);
    static_assert(sizeof(lapack_int) == sizeof(int32_t));
    if (k >= kBlockedLuMin && b.count < ThreadPool::Global().num_threads()) {
      // Few large matrices: each one over the whole pool.
      for (int64_t i = 0; i < b.count; ++i) {
        ctx.outs[2].as<int32_t>()[i] =
            BlockedGetrf(m, n, a + i * m * n, ipiv.as<lapack_int>() + i * k);
      }
      return Status();
    }
    ForEachMatrix(b.count, m * n * k, [&](int64_t i) {
      ctx.outs[2].as<int32_t>()[i] =
          k == 0 ? 0 : Getrf(m, n, a + i * m * n, ipiv.as<lapack_int>() + i * k, n);
    });
    return Status();
  });
}

Status Geqp3Kernel(KernelContext& ctx) {
  if (ctx.ins.size() != 2 || ctx.outs.size() != 3 || ctx.ins[0].dims->size() < 2) {
    return ShapeError(ctx, "expected a [..., m, n], jpvt [..., n]");
  }
  const Dims& d = *ctx.ins[0].dims;
  const int64_t m = d[d.size() - 2], n = d.back(), k = std::min(m, n);
  const int64_t count = m * n == 0 ? 0 : ctx.ins[0].num_elements() / (m * n);
  constexpr int64_t kMax = std::numeric_limits<lapack_int>::max();
  if (m * n > kMax || ctx.ins[1].dtype != DType::kS32 || ctx.outs[1].dtype != DType::kS32 ||
      ctx.ins[1].num_elements() != count * n || ctx.outs[1].num_elements() != count * n) {
    return ShapeError(ctx, "expected a [..., m, n], jpvt s32[..., n]");
  }
  return ByType(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    if (!OutIs<T>(ctx, 0, m * n, count) || !OutIs<T>(ctx, 2, k, count)) {
      return ShapeError(ctx, "outputs must be a [..., m, n], jpvt, taus [..., min(m, n)]");
    }
    UseSingleThreadedBlas();
    T* a = ctx.outs[0].as<T>();
    int32_t* p = ctx.outs[1].as<int32_t>();
    std::copy_n(ctx.ins[0].as<T>(), count * m * n, a);
    std::copy_n(ctx.ins[1].as<int32_t>(), count * n, p);
    std::vector<T> tau(std::max<int64_t>(k, 1));
    for (int64_t i = 0; i < count; ++i) {
      const lapack_int info = Geqp3(m, n, a + i * m * n, p + i * n, tau.data());
      if (info != 0) {
        return Internal("workshop: geqp3 failed with info ", info, " at ", ctx.instr.loc);
      }
      std::copy_n(tau.data(), k, ctx.outs[2].as<T>() + i * k);
    }
    return Status();
  });
}

// ---- tridiagonal_solve_perturbed ----

// xLAMCH's safe minimum (the smallest x with 1/x finite) and its reciprocal.
template <typename R>
constexpr R SafeMin() {
  constexpr R tiny = std::numeric_limits<R>::min();
  constexpr R small = R(1) / std::numeric_limits<R>::max();
  return small < tiny ? tiny : small * (R(1) + std::numeric_limits<R>::epsilon());
}

// Moves `pivot` away from zero (in the direction of its real part's sign, by `step`,
// doubling) until dividing `row` [k] by it cannot overflow; a pivot below the safe minimum
// with a row small enough is instead scaled up together with the row (xLAGTS, JOB = -1).
template <typename T>
void PerturbPivot(Real<T> step, T& pivot, T* row, int64_t k) {
  using R = Real<T>;
  constexpr R safemin = SafeMin<R>(), bignum = R(1) / safemin;
  R size = std::abs(pivot);
  if (size >= R(1)) return;  // Also NaN: it is passed on, never looped on.
  step = std::copysign(std::max(std::abs(step), safemin), std::real(pivot));
  R row_max = 0;
  for (int64_t j = 0; j < k; ++j) row_max = std::max(row_max, R(std::abs(row[j])));
  while (size < R(1)) {
    if (size < safemin && size != R(0) && !(row_max * safemin > size)) {
      pivot *= bignum;
      for (int64_t j = 0; j < k; ++j) row[j] *= bignum;
      return;
    }
    if (size >= safemin && !(row_max > size * bignum)) return;
    pivot += step;  // Terminates: |step| doubles past 1 in at most ~2100 steps.
    step *= R(2);
    size = std::abs(pivot);
  }
}

// One system: T [n x n] from dl, d, du; b, x [n, k] row-major (x may not alias b).
// u0, u1, u2: U's diagonal and two superdiagonals [n] each; row: scratch [k].
template <typename T>
void SolvePerturbed(int64_t n, int64_t k, const T* dl, const T* d, const T* du, const T* b, T* x,
                    T* u0, T* u1, T* u2, T* row) {
  using R = Real<T>;
  const R eps = std::numeric_limits<R>::epsilon();
  auto x_row = [&](int64_t i) { return x + i * k; };
  auto b_row = [&](int64_t i) { return b + i * k; };
  auto solve_row = [&](int64_t i, R step) {  // x[i] = row / u0[i], perturbing u0[i].
    T pivot = u0[i];
    PerturbPivot(step, pivot, row, k);
    const T inverse = T(1) / pivot;
    for (int64_t j = 0; j < k; ++j) x_row(i)[j] = row[j] * inverse;
  };
  if (n == 0) return;
  if (n == 1) {
    u0[0] = d[0];
    std::copy_n(b_row(0), k, row);
    T pivot = d[0];
    PerturbPivot(eps * R(std::abs(d[0])), pivot, row, k);
    for (int64_t j = 0; j < k; ++j) x[j] = row[j] / pivot;
    return;
  }
  std::fill_n(u0, n, T(0));
  std::fill_n(u1, n, T(0));
  std::fill_n(u2, n, T(0));
  u0[0] = d[0];
  u1[0] = du[0];
  R max_u = std::max(std::abs(u0[0]), std::abs(u1[0]));
  R scale1 = std::abs(u0[0]) + std::abs(u1[0]);  // Row scales for xLAGTF's pivot test.
  std::copy_n(b_row(0), k, x_row(0));
  for (int64_t i = 0; i + 1 < n; ++i) {
    const bool interior = i + 2 < n;
    u0[i + 1] = d[i + 1];
    R scale2 = std::abs(dl[i + 1]) + std::abs(u0[i + 1]) + (interior ? std::abs(du[i + 1]) : R(0));
    if (dl[i + 1] == T(0)) {
      scale1 = scale2;
      u1[i + 1] = du[i + 1];
      u2[i] = 0;
      std::copy_n(b_row(i + 1), k, x_row(i + 1));
    } else {
      const R piv1 = u0[i] == T(0) ? R(0) : std::abs(u0[i]) / scale1;
      const R piv2 = std::abs(dl[i + 1]) / scale2;
      if (piv2 <= piv1) {  // Keep row i as the pivot row.
        scale1 = scale2;
        const T factor = dl[i + 1] / u0[i];
        u0[i + 1] -= factor * u1[i];
        u1[i + 1] = du[i + 1];
        u2[i] = 0;
        for (int64_t j = 0; j < k; ++j) x_row(i + 1)[j] = b_row(i + 1)[j] - factor * x_row(i)[j];
      } else {  // Swap rows i and i + 1.
        const T factor = u0[i] / dl[i + 1];
        const T old_u1 = u1[i];
        u0[i] = dl[i + 1];
        u0[i + 1] = old_u1 - factor * d[i + 1];
        u1[i] = d[i + 1];
        if (interior) {
          u2[i] = du[i + 1];
          u1[i + 1] = -factor * du[i + 1];
        }
        for (int64_t j = 0; j < k; ++j) {
          const T xi = x_row(i)[j];
          x_row(i + 1)[j] = xi - factor * b_row(i + 1)[j];
          x_row(i)[j] = b_row(i + 1)[j];
        }
        scale1 = std::abs(u0[i + 1]) + std::abs(u1[i + 1]);
      }
    }
    if (interior) {
      max_u = std::max({max_u, R(std::abs(u0[i])), R(std::abs(u1[i])), R(std::abs(u2[i]))});
    }
  }
  max_u = std::max(max_u, R(std::abs(u0[n - 1])));
  const R step = eps * max_u;
  std::copy_n(x_row(n - 1), k, row);
  solve_row(n - 1, step);
  for (int64_t j = 0; j < k; ++j) row[j] = x_row(n - 2)[j] - u1[n - 2] * x_row(n - 1)[j];
  solve_row(n - 2, step);
  for (int64_t i = n - 3; i >= 0; --i) {
    for (int64_t j = 0; j < k; ++j) {
      row[j] = x_row(i)[j] - u1[i] * x_row(i + 1)[j] - u2[i] * x_row(i + 2)[j];
    }
    solve_row(i, step);
  }
}

Status TridiagonalSolvePerturbedKernel(KernelContext& ctx) {
  if (ctx.ins.size() != 4 || ctx.outs.size() != 1 || ctx.ins[3].dims->size() < 2) {
    return ShapeError(ctx, "expected dl, d, du [..., m], b [..., m, k]");
  }
  const Dims& bd = *ctx.ins[3].dims;
  const int64_t m = bd[bd.size() - 2], k = bd.back();
  const int64_t count = m * k == 0 ? 0 : ctx.ins[3].num_elements() / (m * k);
  for (size_t i = 0; i < 3; ++i) {
    if (ctx.ins[i].dtype != ctx.ins[3].dtype ||
        (count > 0 && ctx.ins[i].num_elements() != count * m)) {
      return ShapeError(ctx, "expected dl, d, du [..., m], b [..., m, k] of one dtype");
    }
  }
  if (ctx.outs[0].dtype != ctx.ins[3].dtype ||
      ctx.outs[0].num_elements() != ctx.ins[3].num_elements()) {
    return ShapeError(ctx, "the result must be [..., m, k] like b");
  }
  return ByType(ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    std::vector<T> scratch(3 * m + k);
    std::vector<T> b(m * k);  // The result may alias b (JAX does not, but be safe).
    for (int64_t i = 0; i < count; ++i) {
      std::copy_n(ctx.ins[3].as<T>() + i * m * k, m * k, b.data());
      SolvePerturbed<T>(m, k, ctx.ins[0].as<T>() + i * m, ctx.ins[1].as<T>() + i * m,
                        ctx.ins[2].as<T>() + i * m, b.data(), ctx.outs[0].as<T>() + i * m * k,
                        scratch.data(), scratch.data() + m, scratch.data() + 2 * m,
                        scratch.data() + 3 * m);
    }
    return Status();
  });
}

WORKSHOP_REGISTER_KERNEL("tridiagonal_solve_perturbed", TridiagonalSolvePerturbedKernel);

WORKSHOP_REGISTER_KERNEL("lapack_getrf", GetrfKernel);
WORKSHOP_REGISTER_KERNEL("lapack_geqp3", Geqp3Kernel);
WORKSHOP_REGISTER_KERNEL("lapack_evd", EvdKernel);
WORKSHOP_REGISTER_KERNEL("lapack_svd", SvdKernel);
WORKSHOP_REGISTER_KERNEL("lapack_geev", GeevKernel);
WORKSHOP_REGISTER_KERNEL("lapack_gees", GeesKernel);
WORKSHOP_REGISTER_KERNEL("lapack_gehrd", GehrdKernel);
WORKSHOP_REGISTER_KERNEL("lapack_sytrd", SytrdKernel);

}  // namespace
}  // namespace workshop
