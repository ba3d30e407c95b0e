// OpenBLAS (scipy-openblas32) threading policy, shared by dot_general and convolution.
#pragma once

#include <cblas.h>

#include <mutex>

namespace workshop {

// Below this many flops a GEMM (or a convolution's GEMMs) is not worth splitting.
constexpr double kParallelGemmFlops = 4e6;

// OpenBLAS's own threads spin after each call, which stalls whatever else wants the cores
// (other devices' workers, the next kernel): measured here, a conv of ~55 GEMM calls went
// from ~60 ms to 0.5-1.2 s on a busy 2-core machine. So OpenBLAS runs single-threaded and
// big GEMMs are split over the plugin's own thread pool instead (dot.cc, convolution.cc).
// Call before any BLAS call.
inline void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { scipy_openblas_set_num_threads(1); });
}

}  // namespace workshop
