// The floating-point mode of a thread: whether subnormals are flushed to zero.
//
// XLA:CPU runs computations with the SSE flush-to-zero and denormals-are-zero bits set
// (MXCSR FTZ|DAZ), so device workers and thread-pool helpers (every thread that runs
// kernels) do too, and float results match it bit for bit. The
// Python compiler must not inherit that mode from whichever thread calls Compile (jaxlib
// may compile on its thread pool, which has it set): numpy would then flush subnormal
// constants while parsing them.
#pragma once

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace workshop {

#if defined(__SSE__)
inline constexpr unsigned kFlushSubnormalBits = _MM_FLUSH_ZERO_ON | 0x0040 /* DAZ */;

// For the rest of the calling thread's life.
inline void FlushSubnormalsOnThisThread() { _mm_setcsr(_mm_getcsr() | kFlushSubnormalBits); }

// IEEE subnormals in a scope, restoring the previous mode on exit.
class ScopedIeeeSubnormals {
 public:
  ScopedIeeeSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~kFlushSubnormalBits); }
  ~ScopedIeeeSubnormals() { _mm_setcsr(saved_); }
  ScopedIeeeSubnormals(const ScopedIeeeSubnormals&) = delete;
  ScopedIeeeSubnormals& operator=(const ScopedIeeeSubnormals&) = delete;

 private:
  unsigned saved_;
};
// Flushed subnormals in a scope (a kernel run inline on a caller's thread), then restored.
class ScopedFlushSubnormals {
 public:
  ScopedFlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushSubnormalBits); }
  ~ScopedFlushSubnormals() { _mm_setcsr(saved_); }
  ScopedFlushSubnormals(const ScopedFlushSubnormals&) = delete;
  ScopedFlushSubnormals& operator=(const ScopedFlushSubnormals&) = delete;

 private:
  unsigned saved_;
};
#else
inline void FlushSubnormalsOnThisThread() {}
class ScopedIeeeSubnormals {};
class ScopedFlushSubnormals {};
#endif

}  // namespace workshop
