// The op table on the C++ side: generated from jax_plugins/workshop/compiler/optable.py
// by setup.py (plugin_src/generated/op_table.h), so the two languages cannot drift.
//
// Element functors declare `kSupports<T> = optable::Supports<T>("op")`: the table, not the
// functor, says which dtypes a kernel is instantiated for, and a dtype the table claims
// that the functor's expression cannot compute is a build error. Only the ops of
// optable.FUNCTOR_OPS (the functor ops of FUNCTOR_FAMILIES) are here
// (generated/functor_dtypes.h), so a new op of another family does not recompile every
// kernel with a functor; registry.cc includes the whole table (generated/op_table.h).
#pragma once

#include <complex>
#include <cstdint>
#include <string_view>

#include "generated/functor_dtypes.h"
#include "kernels/math/half.h"
#include "runtime/dtype.h"

namespace workshop::optable {

template <typename T>
constexpr DType kDTypeOf = DType::kInvalid;
template <> inline constexpr DType kDTypeOf<bool> = DType::kPred;
template <> inline constexpr DType kDTypeOf<int8_t> = DType::kS8;
template <> inline constexpr DType kDTypeOf<int16_t> = DType::kS16;
template <> inline constexpr DType kDTypeOf<int32_t> = DType::kS32;
template <> inline constexpr DType kDTypeOf<int64_t> = DType::kS64;
template <> inline constexpr DType kDTypeOf<uint8_t> = DType::kU8;
template <> inline constexpr DType kDTypeOf<uint16_t> = DType::kU16;
template <> inline constexpr DType kDTypeOf<uint32_t> = DType::kU32;
template <> inline constexpr DType kDTypeOf<uint64_t> = DType::kU64;
template <> inline constexpr DType kDTypeOf<Float16> = DType::kF16;
template <> inline constexpr DType kDTypeOf<float> = DType::kF32;
template <> inline constexpr DType kDTypeOf<double> = DType::kF64;
template <> inline constexpr DType kDTypeOf<BFloat16> = DType::kBF16;
template <> inline constexpr DType kDTypeOf<std::complex<float>> = DType::kC64;
template <> inline constexpr DType kDTypeOf<std::complex<double>> = DType::kC128;

// Whether the table lists C++ element type T for kernel `op`.
template <typename T>
constexpr bool Supports(std::string_view op) {
  return kDTypeOf<T> != DType::kInvalid && functors::Supports(op, static_cast<int>(kDTypeOf<T>));
}

}  // namespace workshop::optable
