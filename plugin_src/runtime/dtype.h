// Element types. The numbering is PJRT_Buffer_Type's, so the C API layer passes codes
// through unchanged (checked by static_asserts in capi/wrappers.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace workshop {

enum class DType : int {
  kInvalid = 0,
  kPred = 1,
  kS8 = 2,
  kS16 = 3,
  kS32 = 4,
  kS64 = 5,
  kU8 = 6,
  kU16 = 7,
  kU32 = 8,
  kU64 = 9,
  kF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kBF16 = 13,
  kC64 = 14,
  kC128 = 15,
  // 8-bit and narrower floats, one element per byte: buffers, constants and data
  // movement; the op table has no kernel computing on them (compile errors).
  kF8E5M2 = 16,
  kF8E4M3FN = 17,
  kF8E4M3B11FNUZ = 18,
  kF8E5M2FNUZ = 19,
  kF8E4M3FNUZ = 20,
  // Sub-byte integers, one element per byte (the value in the low bits, as ml_dtypes
  // stores them): buffers and data movement only; the compiler computes them in s8/u8.
  kS4 = 21,
  kU4 = 22,
  kS2 = 24,
  kU2 = 25,
  kF8E4M3 = 26,
  kF8E3M4 = 27,
  kF8E8M0FNU = 28,
  kF4E2M1FN = 29,
};

// Bytes per element; 0 for types this runtime cannot hold (f8, s4, token, ...).
int64_t ByteWidth(DType t);
// StableHLO spelling ("f32", "pred", ...); "type<N>" for unknown codes.
std::string DTypeName(DType t);
inline bool IsSupported(DType t) { return ByteWidth(t) != 0; }

using Dims = std::vector<int64_t>;
// A device layout as xla::Layout states it without tiles: `minor_to_major`, a permutation
// of the dims, fastest-varying first. Empty means the default, dense row-major
// ({rank-1, ..., 1, 0}). Functions on layouts: runtime/buffer.h.
using MinorToMajor = std::vector<int64_t>;
int64_t NumElements(const Dims& dims);
// The byte size of dense `dims` of `t`, or false when a dimension is negative or the
// element count or byte size overflows int64 (caller-supplied shapes: (2^32, 2^32, 16)
// f32 wrapped to 0 bytes, (2^61+1, 8) to 32, before this was checked).
bool CheckedByteSize(DType t, const Dims& dims, int64_t* bytes);
// The bytes a strided array of `dims` (elements of `width` bytes, `byte_strides[d]` apart
// along dimension d, any sign) touches, relative to its first element: [*lowest, *end).
// Both are 0 for an array without elements. False when an offset overflows int64 (a
// caller's stride of 2^62 over 4 elements wrapped the size computed for it, and a host
// copy then wrote 3 * 2^62 bytes away).
bool CheckedStridedExtent(int64_t width, const Dims& dims, const std::vector<int64_t>& byte_strides,
                          int64_t* lowest, int64_t* end);
// "f32[2,3]": used in every shape-related error message.
std::string ShapeString(DType t, const Dims& dims);

}  // namespace workshop
