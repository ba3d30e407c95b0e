#include "runtime/dtype.h"

namespace workshop {

int64_t ByteWidth(DType t) {
  switch (t) {
    case DType::kPred:
    case DType::kS8:
    case DType::kU8:
    case DType::kS4:
    case DType::kU4:
    case DType::kS2:
    case DType::kU2:
    case DType::kF8E5M2:
    case DType::kF8E4M3FN:
    case DType::kF8E4M3B11FNUZ:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E4M3:
    case DType::kF8E3M4:
    case DType::kF8E8M0FNU:
    case DType::kF4E2M1FN: return 1;
    case DType::kS16:
    case DType::kU16:
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kS32:
    case DType::kU32:
    case DType::kF32: return 4;
    case DType::kS64:
    case DType::kU64:
    case DType::kF64:
    case DType::kC64: return 8;
    case DType::kC128: return 16;
    case DType::kInvalid: break;
  }
  return 0;
}

std::string DTypeName(DType t) {
  static const char* const kNames[] = {
      "invalid",    "pred",   "s8",       "s16",           "s32",
      "s64",        "u8",     "u16",      "u32",           "u64",
      "f16",        "f32",    "f64",      "bf16",          "c64",
      "c128",       "f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz",
      "f8e4m3fnuz", "s4",     "u4",       "token",         "s2",
      "u2",         "f8e4m3", "f8e3m4",   "f8e8m0fnu",     "f4e2m1fn"};
  int code = static_cast<int>(t);
  if (code >= 0 && code < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return kNames[code];
  }
  return "type<" + std::to_string(code) + ">";
}

int64_t NumElements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

bool CheckedByteSize(DType t, const Dims& dims, int64_t* bytes) {
  int64_t n = ByteWidth(t);
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  // A zero dimension makes the product 0 whatever comes after, but the element count of
  // the other dimensions must still fit (XLA rejects such shapes too).
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (d != 0 && __builtin_mul_overflow(elements, d, &elements)) return false;
  }
  *bytes = n;
  return true;
}

bool CheckedStridedExtent(int64_t width, const Dims& dims, const std::vector<int64_t>& byte_strides,
                          int64_t* lowest, int64_t* end) {
  *lowest = *end = 0;
  for (int64_t d : dims) {
    if (d == 0) return true;
  }
  int64_t low = 0, high = width;
  for (size_t d = 0; d < dims.size() && d < byte_strides.size(); ++d) {
    int64_t reach = 0;
    if (dims[d] < 1 || __builtin_mul_overflow(dims[d] - 1, byte_strides[d], &reach) ||
        __builtin_add_overflow(reach < 0 ? low : high, reach, reach < 0 ? &low : &high)) {
      return false;
    }
  }
  *lowest = low;
  *end = high;
  return true;
}

std::string ShapeString(DType t, const Dims& dims) {
  std::string s = DTypeName(t) + "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace workshop
