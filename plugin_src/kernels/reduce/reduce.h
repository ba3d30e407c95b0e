// The reduce kernel's row fold, for kernels that reduce rows themselves (fusion.cc).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/dtype.h"

namespace workshop {

// out[r] = init op fold(in[r*n .. r*n + n)) for r in [0, rows): `rows` contiguous runs of
// n >= 1 elements of one dtype, init a single element. The order of the fold is the one
// the reduce kernel uses for a reduction over the last axis (runs of up to 32K elements),
// so a fused reduction gives the same bits as the unfused one. Single-threaded.
using RowFold = void (*)(const void* in, int64_t rows, int64_t n, const void* init, void* out);

// The row fold for a reduce body ("add", "maximum", ...: element_ops.h DispatchReducer)
// on `dtype`; null when the reduce kernel does not support the pair.
RowFold FindRowFold(const std::string& body, DType dtype);

}  // namespace workshop
