// A product of a few rows by a matrix whose rows are contiguous, for dot_general (dot.cc).
#pragma once

#include <cstdint>

namespace workshop {

// out[i * out_row + j * out_col] = sum_p x[i * x_row + p * x_col] * w[p * ldw + j] for
// i < rows, j < cols, p < k (rows, cols, k >= 1): a few f32 vectors times a matrix
// [k, cols] whose rows are ldw elements apart, read in place. `out` must not overlap the
// inputs.
//
// Why not BLAS: OpenBLAS's GEMM packs the whole matrix into panels before a product of a
// few rows (unless it is under 100^3 multiply-adds), and its GEMV reads the matrix once
// per row. This keeps a 4 x 16 tile of sums in AVX2 registers while it reads a block of the
// matrix's rows, each element once per 4 rows (the loop XLA:CPU generates for such
// products). Measured (2-core VM, f32, ms): 4x512x512 0.037 (GEMM 0.064, 4 GEMVs 0.050),
// 8x512x512 0.068 (0.085), 4x1024x1024 0.086 (0.14 as GEMVs), 8x2048x2048 1.7 (2.7).
//
// Accuracy: each sum adds blocks of kSmallRowsBlock products (in vector lanes, FMA in the
// AVX2 clone) and then the blocks' partial sums, so no running sum is longer than
// kSmallRowsBlock plus k / kSmallRowsBlock terms.
void SmallRowsProduct(const float* x, int64_t x_row, int64_t x_col, int64_t rows, const float* w,
                      int64_t ldw, int64_t k, int64_t cols, float* out, int64_t out_row,
                      int64_t out_col);

// The most rows dot_general gives SmallRowsProduct (from 3: fewer run faster as GEMVs).
inline constexpr int64_t kSmallRowsMax = 8;

// Products of rows x cols x k multiply-adds up to this are left to OpenBLAS's GEMM, which
// runs them without packing (its small-matrix kernels: 2x512x512 f32 in 19 us, against
// 64 us for 4x512x512 where it packs).
inline constexpr int64_t kBlasSmallMatrixWork = 100 * 100 * 100;

}  // namespace workshop
