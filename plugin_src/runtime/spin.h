// Spin-then-park: a thread that has just run out of work polls for more for a short
// while before it sleeps in the kernel.
//
// Waking a sleeping thread (futex) took 21-31 µs (median) on the 2-core VM this project is
// measured on, and a jitted call pays it up to three times: caller -> device worker,
// worker -> pool helper, worker -> caller. A back-to-back call hands the device its next
// program about 40 µs after the last one finished, so a worker or helper that polls for
// that long is still awake when it arrives. Eigen's thread pool, under XLA:CPU, spins
// before parking for the same reason. Polling yields the core every few iterations, so a
// runnable thread that has real work (the Python caller, another device) is not starved;
// and when a yield does hand the core to another thread (it returns late), the cores are
// oversubscribed (more runnable threads than cores: another process, another backend's
// pool, several devices at once) and the poller sleeps at once instead: threads polling
// against each other there delayed the helper whose chunk a kernel waited for by whole
// scheduler time slices (an optimizer update over 100 arrays took 3x longer on 4-13
// cores than on 2).
#pragma once

#include <sched.h>

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace workshop {

// How long an idle thread polls before it sleeps.
inline constexpr std::chrono::microseconds kSpinBeforeSleep{100};
// A sched_yield that returns this much later ran another thread: stop polling. With no
// other runnable thread on the core it returns in about a microsecond.
inline constexpr std::chrono::microseconds kYieldRanAnother{20};

// Polls `ready()` until it returns true (then returns true), kSpinBeforeSleep has passed
// or a yield ran another thread (then returns false). The caller re-checks under its lock
// before sleeping either way.
template <typename Ready>
bool SpinUntil(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    if (i % 16 == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now > deadline) return false;
      sched_yield();
      if (std::chrono::steady_clock::now() - now > kYieldRanAnother) return false;
    } else {
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#endif
    }
  }
}

}  // namespace workshop
