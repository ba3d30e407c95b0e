

#include "kernels/core/strided.h"

#include <algorithm>
#include <cstring>

#include "kernels/core/dispatch.h"
#include "kernels/math/simd.h"
#include "runtime/thread_pool.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace workshop {

std::vector<int64_t> CollapseDims(std::vector<int64_t> dims,
                                  std::vector<std::vector<int64_t>>& strides) {
  for (int64_t d : dims) {
    if (d == 0) {  // Empty: one zero-length dim, so callers' loops do nothing.
      for (auto& s : strides) s = {0};
      return {0};
    }
  }
  std::vector<int64_t> out_dims;
  std::vector<std::vector<int64_t>> out_strides(strides.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    bool mergeable = !out_dims.empty();
    for (size_t k = 0; k < strides.size() && mergeable; ++k) {
      mergeable = out_strides[k].back() == strides[k][d] * dims[d];
    }
    if (mergeable) {
      out_dims.back() *= dims[d];
      for (size_t k = 0; k < strides.size(); ++k) out_strides[k].back() = strides[k][d];
    } else {
      out_dims.push_back(dims[d]);
      for (size_t k = 0; k < strides.size(); ++k) out_strides[k].push_back(strides[k][d]);
    }
  }
  strides = std::move(out_strides);
  return out_dims;
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims, int64_t unit) {
  std::vector<int64_t> strides(dims.size());
  int64_t stride = unit;
  for (size_t d = dims.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= dims[d];
  }
  return strides;
}

std::vector<int64_t> ReducedOutputStrides(const std::vector<int64_t>& dims,
                                          const std::vector<int64_t>& reduced) {
  std::vector<int64_t> strides(dims.size(), 0);
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(d)) == reduced.end()) {
      strides[d] = stride;
      stride *= dims[d];
    }
  }
  return strides;
}

int64_t NumRows(const std::vector<int64_t>& dims) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < dims.size(); ++d) rows *= dims[d];
  return rows;
}

namespace {

// std::fill's loop, also compiled with AVX2's 32-byte stores (a clone).
template <typename T>
WORKSHOP_SIMD_CLONES void FillLoop(T* __restrict out, int64_t count, const T* value) {
  const T v = *value;
  for (int64_t i = 0; i < count; ++i) out[i] = v;
}

// `count` copies of `value` at `out`; see FillElements.
template <typename T>
void FillRow(T* out, int64_t count, const T& value) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  if (std::all_of(bytes, bytes + sizeof(T), [&](unsigned char b) { return b == bytes[0]; })) {
    std::memset(out, bytes[0], count * sizeof(T));
  } else {
    FillLoop(out, count, &value);
  }
}

// Bytes below which a copy stays on the calling thread: kParallelGrain f32s' worth, the
// size at which a chunk hand-off stops dominating.
constexpr int64_t kParallelBytes = kParallelGrain * 4;

// Runs fn(begin, end) over [0, items), split across the pool when the copy has at least
// `min_bytes`.
template <typename Fn>
void SplitItems(int64_t items, int64_t bytes_per_item, int64_t min_bytes, Fn&& fn) {
  if (items * bytes_per_item < min_bytes) {
    fn(int64_t{0}, items);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kParallelBytes / std::max<int64_t>(1, bytes_per_item));
  ThreadPool::Global().ParallelFor(items, grain, fn);
}

// --- Rows: contiguous, broadcast, reversed, every other element, or strided element by
// element. ---

// d[i] = s[-i], i < n: a reverse along the contiguous dim. Typed, so that GCC vectorizes it
// with lane permutes (pshufd for 4 bytes; the AVX2 clone also pshufb for 1 and 2); the
// byte-wise memcpy loop it replaces took 1.6 ns per f32 (1024x1024 x[:, ::-1], 9x the CPU
// backend).
template <typename T>
WORKSHOP_SIMD_CLONES void ReverseRow(T* __restrict d, const T* __restrict s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = s[-i];
}

// d[i] = s[2 * i], i < n: a slice with stride 2 (x[..., ::2], the real parts of
// interleaved pairs). GCC vectorizes the even-lane gather with shuffles.
template <typename T>
WORKSHOP_SIMD_CLONES void EvenElementsRow(T* __restrict d, const T* __restrict s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = s[2 * i];
}

template <typename T>
void CopyRows(char* dst, const char* src, const std::vector<int64_t>& dims,
              const std::vector<std::vector<int64_t>>& strides) {
  const size_t rank = dims.size();
  const int64_t n = rank == 0 ? 1 : dims.back();
  const int64_t dst_step = rank == 0 ? 0 : strides[0].back();
  const int64_t src_step = rank == 0 ? 0 : strides[1].back();
  constexpr int64_t kSize = sizeof(T);
  const int64_t dst_row = rank >= 2 ? strides[0][rank - 2] : 0;
  const int64_t src_row = rank >= 2 ? strides[1][rank - 2] : 0;
  // Typed loads and stores need T's alignment at every row start (host buffers may have
  // odd byte strides); otherwise the row loops copy bytes.
  bool aligned = reinterpret_cast<uintptr_t>(dst) % alignof(T) == 0 &&
                 reinterpret_cast<uintptr_t>(src) % alignof(T) == 0;
  for (const auto& operand : strides) {
    for (int64_t x : operand) aligned = aligned && x % int64_t{alignof(T)} == 0;
  }
  // Elements [first, first + count) of `rows` consecutive rows (dst_row, src_row bytes
  // apart) from d and s. The kind of row is decided once, outside the row loop.
  auto copy = [&](char* d, const char* s, int64_t rows, int64_t first, int64_t count) {
    d += first * dst_step;
    s += first * src_step;
    if (dst_step == kSize && src_step == kSize) {
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(d + r * dst_row, s + r * src_row, count * kSize);
      }
    } else if (dst_step == kSize && src_step == 0) {
      for (int64_t r = 0; r < rows; ++r) {
        T value;
        std::memcpy(&value, s + r * src_row, kSize);
        FillRow(reinterpret_cast<T*>(d + r * dst_row), count, value);
      }
    } else if (dst_step == kSize && (src_step == -kSize || src_step == 2 * kSize) && aligned) {
      const auto row_fn = src_step < 0 ? &ReverseRow<T> : &EvenElementsRow<T>;
      for (int64_t r = 0; r < rows; ++r) {
        row_fn(reinterpret_cast<T*>(d + r * dst_row), reinterpret_cast<const T*>(s + r * src_row),
               count);
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < count; ++i) {
          std::memcpy(d + r * dst_row + i * dst_step, s + r * src_row + i * src_step, kSize);
        }
      }
    }
  };
  // Plain copies are bound by memory bandwidth, which a second thread raises less than a
  // hand-off costs until the copy is a few MiB (8x64x8x64 f32 rows, 1 MiB, got slower).
  constexpr int64_t kMinParallelBytes = 8 * kParallelBytes;
  const int64_t rows = NumRows(dims);
  if (rows >= 16 || n * kSize < 2 * kParallelBytes) {
    // Work items are rows, visited in stretches along the second-to-last dim: short rows
    // (a 0213 transpose moves 64-float rows) cost little more than their memcpy.
    SplitItems(rows, n * kSize, kMinParallelBytes, [&](int64_t begin, int64_t end) {
      ForEachRowRunIn(dims, strides, begin, end,
                      [&](const std::vector<int64_t>& offsets, int64_t count) {
                        copy(dst + offsets[0], src + offsets[1], count, 0, n);
                      });
    });
    return;
  }
  // A few long rows (a dense copy collapses to one): work items are pieces of rows, so
  // that they still split across threads.
  const int64_t pieces = std::clamp<int64_t>(n * kSize / kParallelBytes, 1, 16);
  const int64_t piece = (n + pieces - 1) / pieces;
  SplitItems(rows * pieces, piece * kSize, kMinParallelBytes, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / pieces, first = item % pieces * piece;
      ForEachRowIn(dims, strides, row, row + 1, [&](const std::vector<int64_t>& offsets) {
        copy(dst + offsets[0], src + offsets[1], 1, first, std::min(n, first + piece) - first);
      });
    }
  });
}

// d[2i] = s[i] for i < n, and v between them: a row of pad's interior padding of 1. The
// gaps already hold v (pad fills first), so a call may cover any part of a row; storing
// them again makes the stores dense, which GCC vectorizes as interleaving shuffles. The
// strided scalar stores it replaces took 0.85 ns per f32 (lax.pad interior 1 of
// 1024x1024: 2x the CPU backend).
template <typename T>
WORKSHOP_SIMD_CLONES void InterleaveRow(T* __restrict d, const T* __restrict s, int64_t n,
                                        const T* v) {
  const T gap = *v;
  for (int64_t i = 0; i + 1 < n; ++i) {
    d[2 * i] = s[i];
    d[2 * i + 1] = gap;
  }
  if (n > 0) d[2 * (n - 1)] = s[n - 1];
}

// --- Transposes: a 2-D block where the source is contiguous along one dim (a) and the
// destination along the other (b): dst[i * dst_a + j] = src[i + j * src_b], in elements.
// Walking either side with a large stride touches a new cache line (and, past 4 KiB, a
// new page) per element, so the block is cut into tiles whose lines all stay in L1, and
// within a tile SIMD registers transpose kMicro x kMicro sub-blocks. ---

// Tile side: one 64-byte cache line of elements (8 to 32 of them). Both sides of a
// power-of-two transpose stride by a multiple of 4 KiB, so all of a tile's source lines
// (and all its destination lines) fall into the same L1 set: larger tiles evict their own
// lines before the next sub-block uses them (measured: 1024x1024 f32 is 1.8x slower with
// 64-element tiles than with 16).
template <typename T>
constexpr int64_t kTile = std::clamp<int64_t>(64 / sizeof(T), 8, 32);

// Element-by-element tile: the edges, and widths without a SIMD sub-block.
template <typename T>
void TransposeScalar(T* __restrict dst, int64_t dst_a, const T* __restrict src, int64_t src_b,
                     int64_t na, int64_t nb) {
  for (int64_t i = 0; i < na; ++i) {
    for (int64_t j = 0; j < nb; ++j) dst[i * dst_a + j] = src[i + j * src_b];
  }
}

// In-register transposes of one kMicro x kMicro sub-block (SSE2 is baseline on x86-64).
template <typename T>
struct Micro {
  static constexpr int64_t kSize = 0;  // None: TransposeTile stays scalar.
};

#if defined(__SSE2__)
inline __m128i Load(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline void Store(void* p, __m128i v) { _mm_storeu_si128(static_cast<__m128i*>(p), v); }

template <>
struct Micro<uint64_t> {
  static constexpr int64_t kSize = 2;
  static void Run(uint64_t* dst, int64_t dst_a, const uint64_t* src, int64_t src_b) {
    const __m128i r0 = Load(src), r1 = Load(src + src_b);
    Store(dst, _mm_unpacklo_epi64(r0, r1));
    Store(dst + dst_a, _mm_unpackhi_epi64(r0, r1));
  }
};

template <>
struct Micro<uint32_t> {
  static constexpr int64_t kSize = 4;
  static void Run(uint32_t* dst, int64_t dst_a, const uint32_t* src, int64_t src_b) {
    const __m128i r0 = Load(src), r1 = Load(src + src_b), r2 = Load(src + 2 * src_b),
                  r3 = Load(src + 3 * src_b);
    const __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpacklo_epi32(r2, r3),
                  t2 = _mm_unpackhi_epi32(r0, r1), t3 = _mm_unpackhi_epi32(r2, r3);
    Store(dst, _mm_unpacklo_epi64(t0, t1));
    Store(dst + dst_a, _mm_unpackhi_epi64(t0, t1));
    Store(dst + 2 * dst_a, _mm_unpacklo_epi64(t2, t3));
    Store(dst + 3 * dst_a, _mm_unpackhi_epi64(t2, t3));
  }
};

template <>
struct Micro<uint16_t> {
  static constexpr int64_t kSize = 8;
  static void Run(uint16_t* dst, int64_t dst_a, const uint16_t* src, int64_t src_b) {
    __m128i r[8], t[8];
    for (int k = 0; k < 8; ++k) r[k] = Load(src + k * src_b);
    // Three rounds of interleaving: 16-, 32-, then 64-bit pairs.
    for (int k = 0; k < 4; ++k) {
      t[k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
      t[k + 4] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 4; ++k) {
      r[k] = _mm_unpacklo_epi32(t[2 * k], t[2 * k + 1]);
      r[k + 4] = _mm_unpackhi_epi32(t[2 * k], t[2 * k + 1]);
    }
    for (int k = 0; k < 4; ++k) {
      t[k] = _mm_unpacklo_epi64(r[2 * k], r[2 * k + 1]);
      t[k + 4] = _mm_unpackhi_epi64(r[2 * k], r[2 * k + 1]);
    }
    // Row a of the result is t[] in the order the rounds leave it.
    constexpr int kOrder[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    for (int k = 0; k < 8; ++k) Store(dst + k * dst_a, t[kOrder[k]]);
  }
};

template <>
struct Micro<uint8_t> {
  static constexpr int64_t kSize = 16;
  static void Run(uint8_t* dst, int64_t dst_a, const uint8_t* src, int64_t src_b) {
    __m128i r[16], t[16];
    for (int k = 0; k < 16; ++k) r[k] = Load(src + k * src_b);
    // Four rounds of interleaving (8-, 16-, 32-, 64-bit pairs) as for Micro<uint16_t>.
    for (int k = 0; k < 8; ++k) {
      t[k] = _mm_unpacklo_epi8(r[2 * k], r[2 * k + 1]);
      t[k + 8] = _mm_unpackhi_epi8(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 8; ++k) {
      r[k] = _mm_unpacklo_epi16(t[2 * k], t[2 * k + 1]);
      r[k + 8] = _mm_unpackhi_epi16(t[2 * k], t[2 * k + 1]);
    }
    for (int k = 0; k < 8; ++k) {
      t[k] = _mm_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
      t[k + 8] = _mm_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 8; ++k) {
      r[k] = _mm_unpacklo_epi64(t[2 * k], t[2 * k + 1]);
      r[k + 8] = _mm_unpackhi_epi64(t[2 * k], t[2 * k + 1]);
    }
    // Each round sends a row's low half to the first half of the registers: result row a
    // sits at the 4-bit reversal of a.
    constexpr int kOrder[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
    for (int k = 0; k < 16; ++k) Store(dst + k * dst_a, r[kOrder[k]]);
  }
};
#endif

// One tile (na, nb <= kTile), written straight to the destination: SIMD sub-blocks,
// scalar edges.
template <typename T>
void TransposeTile(T* dst, int64_t dst_a, const T* src, int64_t src_b, int64_t na, int64_t nb) {
  constexpr int64_t m = Micro<T>::kSize;
  if constexpr (m > 0) {
    const int64_t ma = na - na % m, mb = nb - nb % m;
    for (int64_t i = 0; i < ma; i += m) {
      for (int64_t j = 0; j < mb; j += m) {
        Micro<T>::Run(dst + i * dst_a + j, dst_a, src + i + j * src_b, src_b);
      }
    }
    TransposeScalar(dst + mb, dst_a, src + mb * src_b, src_b, ma, nb - mb);
    TransposeScalar(dst + ma * dst_a, dst_a, src + ma, src_b, na - ma, nb);
  } else {
    TransposeScalar(dst, dst_a, src, src_b, na, nb);
  }
}

// A full kTile x kTile tile through a staging buffer in L1: pass 1 consumes the source m
// rows at a time, all of each row's line, pass 2 writes each destination line whole.
// TransposeTile instead revisits every destination line kTile/m times; when a side's
// byte stride is a multiple of 2 KiB its kTile lines share at most two of L1's 64 sets,
// more than their 8 ways hold, so each revisit misses. See StageTiles for when it pays.
template <typename T>
void TransposeTileStaged(T* dst, int64_t dst_a, const T* src, int64_t src_b) {
  constexpr int64_t t = kTile<T>, m = Micro<T>::kSize;
  static_assert(m > 0 && t % m == 0);
  alignas(64) T buf[t * t];
  for (int64_t j = 0; j < t; j += m) {
    for (int64_t i = 0; i < t; i += m) {
      Micro<T>::Run(buf + i * t + j, t, src + i + j * src_b, src_b);
    }
  }
  for (int64_t i = 0; i < t; ++i) std::memcpy(dst + i * dst_a, buf + i * t, sizeof(T) * t);
}

// Whether full tiles go through TransposeTileStaged: when a side's byte stride is a
// multiple of 2 KiB (rows of a power of two, 512 floats or more) and the block is at least
// 1 MiB. Measured single-threaded on the 2-core EPYC VM (tools/strided_bench.py), staged
// against direct: f32 1024^2 0.81x, 2048^2 0.51x, 4096^2 0.56x; f64 1024^2 0.71x; u16
// 2048^2 0.48x; other strides (1000, 1100, 3000) only got slower (1.1-1.4x at 1000-1100),
// as did blocks that stay in L2 (f64 256^2: 1.23x).
template <typename T>
bool StageTiles(int64_t na, int64_t nb, int64_t dst_a, int64_t src_b) {
  constexpr int64_t kSetSpan = 2048, kMinBytes = 1 << 20;
  constexpr int64_t size = sizeof(T);
  return Micro<T>::kSize > 0 && na * nb * size >= kMinBytes &&
         ((dst_a * size) % kSetSpan == 0 || (src_b * size) % kSetSpan == 0);
}

// The transpose copy: `dims`/`strides` (elements) are the collapsed batch dims, each
// holding one na x nb block. Work items are (batch index, band of kTile a-rows).
template <typename T>
void CopyTransposed(T* dst, const T* src, const std::vector<int64_t>& dims,
                    const std::vector<std::vector<int64_t>>& strides, int64_t na, int64_t nb,
                    int64_t dst_a, int64_t src_b) {
  const int64_t bands = (na + kTile<T> - 1) / kTile<T>;
  int64_t batch = 1;
  for (int64_t d : dims) batch *= d;
  const bool staged = StageTiles<T>(na, nb, dst_a, src_b);
  auto items = [&](int64_t begin, int64_t end) {
    // A trailing unit dim makes each batch index a "row" of ForEachRowIn.
    std::vector<int64_t> batch_dims = dims;
    batch_dims.push_back(1);
    std::vector<std::vector<int64_t>> batch_strides = strides;
    for (auto& s : batch_strides) s.push_back(0);
    const int64_t first = begin / bands;
    const int64_t last = (end + bands - 1) / bands;
    int64_t item = first * bands;
    ForEachRowIn(batch_dims, batch_strides, first, last, [&](const std::vector<int64_t>& off) {
      for (int64_t band = 0; band < bands; ++band, ++item) {
        if (item < begin || item >= end) continue;
        const int64_t i = band * kTile<T>;
        const int64_t ta = std::min(kTile<T>, na - i);
        T* d = dst + off[0] + i * dst_a;
        const T* s = src + off[1] + i;
        int64_t j = 0;
        if constexpr (Micro<T>::kSize > 0) {
          if (staged && ta == kTile<T>) {
            for (; j + kTile<T> <= nb; j += kTile<T>) {
              TransposeTileStaged(d + j, dst_a, s + j * src_b, src_b);
            }
          }
        }
        for (; j < nb; j += kTile<T>) {
          TransposeTile(d + j, dst_a, s + j * src_b, src_b, ta, std::min(kTile<T>, nb - j));
        }
      }
    });
  };
  SplitItems(batch * bands, kTile<T> * nb * int64_t{sizeof(T)}, 2 * kParallelBytes, items);
}

// Recognizes a transpose among collapsed dims (byte strides): the source is contiguous
// along one dim (a) and the destination along another (b). Removes a and b from
// `dims`/`strides`, which keep the batch dims, in elements.
template <typename T>
bool SplitTranspose(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>>& strides,
                    int64_t* na, int64_t* nb, int64_t* dst_a, int64_t* src_b) {
  constexpr int64_t kSize = sizeof(T);
  const size_t rank = dims.size();
  // A broadcast along the destination's rows is a fill, better done by CopyRows.
  if (rank < 2 || strides[1][rank - 1] == 0) return false;
  for (const auto& s : strides) {
    for (int64_t x : s) {
      if (x % kSize != 0) return false;
    }
  }
  const auto contiguous = [&](const std::vector<int64_t>& s) {
    return static_cast<size_t>(std::find(s.begin(), s.end(), kSize) - s.begin());
  };
  const size_t a = contiguous(strides[1]), b = contiguous(strides[0]);
  if (a == rank || b == rank || a == b) return false;
  *na = dims[a];
  *nb = dims[b];
  *dst_a = strides[0][a] / kSize;
  *src_b = strides[1][b] / kSize;
  for (size_t d : {std::max(a, b), std::min(a, b)}) {
    dims.erase(dims.begin() + d);
    for (auto& s : strides) s.erase(s.begin() + d);
  }
  for (auto& s : strides) {
    for (int64_t& x : s) x /= kSize;
  }
  return true;
}

template <typename T>
void Copy(char* dst, const char* src, const std::vector<int64_t>& dims,
          const std::vector<std::vector<int64_t>>& strides) {
  std::vector<int64_t> batch_dims = dims;
  std::vector<std::vector<int64_t>> batch_strides = strides;
  int64_t na, nb, dst_a, src_b;
  if (reinterpret_cast<uintptr_t>(dst) % alignof(T) == 0 &&
      reinterpret_cast<uintptr_t>(src) % alignof(T) == 0 &&
      SplitTranspose<T>(batch_dims, batch_strides, &na, &nb, &dst_a, &src_b)) {
    CopyTransposed<T>(reinterpret_cast<T*>(dst), reinterpret_cast<const T*>(src), batch_dims,
                      batch_strides, na, nb, dst_a, src_b);
    return;
  }
  CopyRows<T>(dst, src, dims, strides);
}

}  // namespace

void FillElements(void* dst, int64_t n, const void* value, int64_t elem_size) {
  DispatchByteWidth(
      elem_size,
      [&](auto tag) {
        using T = decltype(tag);
        T v;
        std::memcpy(&v, value, sizeof(T));
        FillRow(static_cast<T*>(dst), n, v);
      },
      [] {});
}

void StridedCopy(void* dst, const void* src, int64_t elem_size, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& src_strides) {
  StridedCopy(dst, RowMajorStrides(dims, elem_size), src, src_strides, elem_size, dims);
}

void StridedCopy(void* dst, const std::vector<int64_t>& dst_strides, const void* src,
                 const std::vector<int64_t>& src_strides, int64_t elem_size,
                 const std::vector<int64_t>& dims) {
  std::vector<std::vector<int64_t>> strides = {dst_strides, src_strides};
  std::vector<int64_t> collapsed = CollapseDims(dims, strides);
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  DispatchByteWidth(
      elem_size, [&](auto tag) { Copy<decltype(tag)>(d, s, collapsed, strides); }, [] {});
}

void StridedCopyPadInterior(void* dst, const std::vector<int64_t>& dst_strides, const void* src,
                            const std::vector<int64_t>& src_strides, int64_t elem_size,
                            const std::vector<int64_t>& dims, const void* gap) {
  std::vector<std::vector<int64_t>> strides = {dst_strides, src_strides};
  const std::vector<int64_t> collapsed = CollapseDims(dims, strides);
  const size_t rank = collapsed.size();
  const bool interleaved =
      rank >= 1 && strides[0].back() == 2 * elem_size && strides[1].back() == elem_size;
  const bool done =
      interleaved &&
      DispatchByteWidth(
          elem_size,
          [&](auto tag) {
            using T = decltype(tag);
            if constexpr (sizeof(T) > 8) {
              return false;
            } else {
              bool aligned = reinterpret_cast<uintptr_t>(dst) % alignof(T) == 0 &&
                             reinterpret_cast<uintptr_t>(src) % alignof(T) == 0 &&
                             reinterpret_cast<uintptr_t>(gap) % alignof(T) == 0;
              for (const auto& operand : strides) {
                for (int64_t x : operand) aligned = aligned && x % int64_t{alignof(T)} == 0;
              }
              if (!aligned) return false;
              char* d = static_cast<char*>(dst);
              const char* s = static_cast<const char*>(src);
              const int64_t n = collapsed.back();
              const int64_t dst_row = rank >= 2 ? strides[0][rank - 2] : 0;
              const int64_t src_row = rank >= 2 ? strides[1][rank - 2] : 0;
              // Rows split over the pool like CopyRows' (writes 2n elements per row).
              SplitItems(NumRows(collapsed), 2 * n * int64_t{sizeof(T)}, 8 * kParallelBytes,
                         [&](int64_t begin, int64_t end) {
                           ForEachRowRunIn(
                               collapsed, strides, begin, end,
                               [&](const std::vector<int64_t>& offsets, int64_t count) {
                                 for (int64_t r = 0; r < count; ++r) {
                                   InterleaveRow(
                                       reinterpret_cast<T*>(d + offsets[0] + r * dst_row),
                                       reinterpret_cast<const T*>(s + offsets[1] + r * src_row), n,
                                       static_cast<const T*>(gap));
                                 }
                               });
                         });
              return true;
            }
          },
          [] { return false; });
  if (!done) StridedCopy(dst, dst_strides, src, src_strides, elem_size, dims);
}

}  // namespace workshop
