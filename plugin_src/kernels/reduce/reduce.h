// The reduce kernel's row fold, for kernels that reduce rows themselves (fusion.cc).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/plan.h"
#include "runtime/status.h"

namespace workshop {

// Element types the reductions fold in GCC vector lanes (reduce.cc Fold and FoldRows,
// reduce_general.cc ArgFoldShortRows): integers and floats; pred and complex fold lane
// by lane in scalars.
template <typename T>
constexpr bool kVectorLanes = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// out[r] = init op fold(in[r*n .. r*n + n)) for r in [0, rows): `rows` contiguous runs of
// n >= 1 elements of one dtype, init a single element. The order of the fold is the one
// the reduce kernel uses for a reduction over the last axis (runs of up to 32K elements),
// so a fused reduction gives the same bits as the unfused one. Single-threaded.
using RowFold = void (*)(const void* in, int64_t rows, int64_t n, const void* init, void* out);

// The row fold for a reduce body ("add", "maximum", ...: element_ops.h DispatchReducer)
// on `dtype`; null when the reduce kernel does not support the pair.
RowFold FindRowFold(const std::string& body, DType dtype);

// The check hook (KernelDef::check) of the reductions (reduce, argmax, argmin,
// reduce_general): attribute `dims` holds distinct axes of operand 0 and every result
// holds the operand's kept dimensions, as many elements as their product. The kernels
// size their walk by the operand and `dims` and their writes by the result's type (a
// resealed flip of dims [2, 3] to [2, 2] wrote 8 times past a 12-element result: heap
// corruption, fuzzer seed 101, k=868). reduce also takes (operand, scalar init of its
// type) and gives one result of that type.
Status CheckReduction(const Plan& plan, const Instr& instr);

}  // namespace workshop
