// SmallRowsProduct (small_rows.h): register tiles of sums, an AVX2+FMA clone chosen at load.
#include "kernels/dot/small_rows.h"

#include <algorithm>

#include "kernels/math/simd.h"

namespace workshop {
namespace {

// Matrix rows per block: the block's 16-column strips are read one after another, so a
// block (64 rows of a 2048-wide f32 matrix: 512 KB) is still in cache for the next strip.
// Also the longest running sum in a lane (small_rows.h).
constexpr int64_t kSmallRowsBlock = 64;

typedef float V8 __attribute__((vector_size(32), aligned(4)));

// Rows [0, R) x columns [j0, j0 + 16) over matrix rows [p0, p1), added to out (stored when
// p0 == 0). Two named vectors per row rather than an array: GCC keeps them in registers.
template <int R>
[[gnu::always_inline]] inline void Strip(const float* x, int64_t x_row, int64_t x_col,
                                         const float* w, int64_t ldw, int64_t p0, int64_t p1,
                                         int64_t j0, float* out, int64_t out_row, int64_t out_col) {
  V8 lo[R], hi[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) lo[i] = hi[i] = V8{};
  for (int64_t p = p0; p < p1; ++p) {
    const float* wp = w + p * ldw + j0;
    V8 w0, w1;
    __builtin_memcpy(&w0, wp, sizeof(V8));
    __builtin_memcpy(&w1, wp + 8, sizeof(V8));
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const float xi = x[i * x_row + p * x_col];
      lo[i] += xi * w0;
      hi[i] += xi * w1;
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int l = 0; l < 8; ++l) {
      float* o0 = out + i * out_row + (j0 + l) * out_col;
      float* o1 = out + i * out_row + (j0 + 8 + l) * out_col;
      *o0 = p0 == 0 ? lo[i][l] : *o0 + lo[i][l];
      *o1 = p0 == 0 ? hi[i][l] : *o1 + hi[i][l];
    }
  }
}

// R rows (1..4) by all columns: 16-column strips block by block, then the last columns
// (fewer than 16) one sum at a time, in the same blocks.
template <int R>
[[gnu::always_inline]] inline void Rows(const float* x, int64_t x_row, int64_t x_col,
                                        const float* w, int64_t ldw, int64_t k, int64_t cols,
                                        float* out, int64_t out_row, int64_t out_col) {
  const int64_t strips = cols / 16 * 16;
  for (int64_t p0 = 0; p0 < k; p0 += kSmallRowsBlock) {
    const int64_t p1 = std::min(k, p0 + kSmallRowsBlock);
    for (int64_t j0 = 0; j0 < strips; j0 += 16) {
      Strip<R>(x, x_row, x_col, w, ldw, p0, p1, j0, out, out_row, out_col);
    }
    for (int64_t j = strips; j < cols; ++j) {
      for (int i = 0; i < R; ++i) {
        float s = 0;
        for (int64_t p = p0; p < p1; ++p) s += x[i * x_row + p * x_col] * w[p * ldw + j];
        float* o = out + i * out_row + j * out_col;
        *o = p0 == 0 ? s : *o + s;
      }
    }
  }
}

}  // namespace

WORKSHOP_SIMD_CLONES_FMA void SmallRowsProduct(const float* x, int64_t x_row, int64_t x_col,
                                               int64_t rows, const float* w, int64_t ldw, int64_t k,
                                               int64_t cols, float* out, int64_t out_row,
                                               int64_t out_col) {
  // Four rows at a time: 8 accumulators, the matrix's 2 vectors and a broadcast fit AVX2's
  // 16 registers.
  for (int64_t i0 = 0; i0 < rows; i0 += 4) {
    const float* xi = x + i0 * x_row;
    float* oi = out + i0 * out_row;
    switch (std::min<int64_t>(4, rows - i0)) {
      case 1: Rows<1>(xi, x_row, x_col, w, ldw, k, cols, oi, out_row, out_col); break;
      case 2: Rows<2>(xi, x_row, x_col, w, ldw, k, cols, oi, out_row, out_col); break;
      case 3: Rows<3>(xi, x_row, x_col, w, ldw, k, cols, oi, out_row, out_col); break;
      default: Rows<4>(xi, x_row, x_col, w, ldw, k, cols, oi, out_row, out_col); break;
    }
  }
}

}  // namespace workshop
