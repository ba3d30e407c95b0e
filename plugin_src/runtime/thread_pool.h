// ThreadPool: the process-wide helper threads that split large kernels.
//
// Each device has its own worker thread, but a single big elementwise op or reduction
// should use every core. ParallelFor cuts [0, n) into chunks; the calling thread works on
// chunks too and returns once all are done, so a kernel stays a synchronous call. The pool
// has one helper per extra core this process may run on (HostParallelism: the affinity
// mask, as `taskset` or a container sets it, not the machine's core count) and is shared by
// all devices: when several devices run big kernels at once their chunks interleave in one
// queue, which shares the cores instead of oversubscribing them. Idle helpers, and a
// caller waiting for their chunks, poll before they sleep, unless polling is seen to take
// the core from another thread (runtime/spin.h). Parked helpers are woken as a tree
// (WakeHelpers): a ParallelFor's caller wakes at most kWakeFanOut, for queued tasks the
// polling helpers leave, and starts on its own chunk; a helper starting a task of a kernel
// with chunks still unclaimed wakes at most kWakeFanOut more, so a kernel's caller and
// helpers each make at most that many wake-up system calls before they work. XLA:CPU's
// work queue also fans out as a tree (xla/backends/cpu/runtime/work_queue.h,
// Worker::Parallelize: each worker schedules half of the workers left to it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/status.h"

namespace workshop {

// What a kernel does, in the units the cost model knows rates for. A kernel fills in the
// fields that describe it (a fusion: element operations; a GEMM: flops; a copy, gather or
// scatter: bytes read plus written; a reduction: elements read as element operations).
struct KernelWork {
  double element_ops = 0;   // Interpreted or generated element operations (work-weighted).
  double flops = 0;         // Multiply-adds count 2; in BLAS GEMMs.
  double bytes = 0;         // Bytes moved by copies, gathers, scatters.
  double cached_bytes = 0;  // Bytes read from the last-level cache (a loop's GEMV matrix).

  // Estimated nanoseconds on one thread, from the rates below.
  double Nanos() const;
};

// Rates of one thread, measured on the 2-core VM (AMD EPYC):
// the fusion interpreter runs about 0.085 ns per element operation (x * 2 + 1 on 2^20 f32:
// 2M operations in 170 µs of CPU); OpenBLAS sgemm reaches 88 GFLOP/s on a 3x3x64->64
// convolution's GEMMs (0.011 ns per flop) and 20 GFLOP/s on a 3-feature one (k = 27), so a
// flop is taken as 0.02 ns; memmove streams about 10 GB/s (0.1 ns per byte).
constexpr double kNanosPerElementOp = 0.085;
constexpr double kNanosPerFlop = 0.02;
constexpr double kNanosPerByte = 0.1;
// A GEMV reads a matrix that is in the last-level cache at about 66 GB/s (1x1024x1024 f32,
// 4 MiB, read again each call: 63 µs on the 2-core VM), a sixth of the streaming cost.
constexpr double kNanosPerCachedByte = 0.015;

// The least work, in nanoseconds of one thread, that one part carries: about twice the
// 21-31 µs it takes to wake a sleeping helper (spin.h), so a part spends at most a third
// of itself on its hand-off; XLA:CPU's parallel task assignment asks for 100K cycles
// (50 µs at 2 GHz) per part of a compute-bound loop. A part of less spends much of itself
// on the hand-off, and many such parts (an optimizer update over 100 parameter arrays:
// hundreds of kernels of 1K-60K elements) spend the program waiting on helpers instead of
// running it.
constexpr double kMinPartNanos = 45e3;
// The most a part must carry when it wakes a parked helper, whatever was measured (a
// process started under load should not stop splitting).
constexpr double kMaxParkedPartNanos = 4 * kMinPartNanos;

class MeasuredTime;

class ThreadPool {
 public:
  static ThreadPool& Global();

  // Calls fn(begin, end) on disjoint ranges covering [0, n), each at least `grain` long
  // (except possibly the last), possibly concurrently. Returns when all calls are done.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // ParallelFor over n items that together do `work`: PartsFor(work) ranges of about
  // n / parts items each (at most n). What every kernel splitting a loop calls, so that
  // the cost model alone decides how many threads a kernel takes.
  void ParallelFor(int64_t n, const KernelWork& work,
                   const std::function<void(int64_t, int64_t)>& fn);

  int num_threads() const { return static_cast<int>(threads_.size()) + 1; }

  // The cost model for a kernel's part count (docs/runtime.md, "Threads"): how
  // many threads should share `work` (KernelWork::Nanos of one thread): 1 below
  // kMinPartNanos, then one part per kMinPartNanos for each helper polling for a task now
  // (spinning_) and the caller, one per twice the measured wake-up of a parked helper beyond those
  // (this machine's, MeasureWakeNanos), never more parts than threads. Every kernel kind that
  // splits asks here: fusions, reductions, copies, gathers and scatters, dots and convolutions
  // (their BLAS calls run single-threaded, one per part: blas.h).
  int64_t PartsFor(const KernelWork& work) const;

  // PartsFor for a fusion of `work` element operations, one part carrying at least
  // `min_part_work` of them (kMinPartWork: the same kMinPartNanos at kNanosPerElementOp).
  int64_t PartsFor(int64_t work, int64_t min_part_work) const;
  // The same, with the estimate corrected by a kernel's own measurement (MeasuredTime).
  int64_t PartsFor(int64_t work, int64_t min_part_work, const MeasuredTime& measured) const;

  // PartsFor's count under the fixed kMinPartNanos: for kernels whose results depend on
  // how their work is cut (a dot's blocks choose GEMV, register tiles or GEMM by their
  // rows), so that the cut depends on the shape and the thread count only; PartsFor then
  // decides how many threads share those blocks.
  int64_t BlocksFor(const KernelWork& work) const;

 private:
  explicit ThreadPool(int helpers);
  void Loop(int helper);
  double MeasureWakeNanos();
  // PartsFor of one thread's nanoseconds.
  int64_t PartsForNanos(double nanos) const;
  // Wakes parked helpers for up to `wanted` queued tasks: at most kWakeFanOut, and none
  // beyond the queued tasks (anyone's) that outnumber the helpers polling now.
  void WakeHelpers(int64_t wanted);

  // The least work of a part that wakes a parked helper: twice the measured time from
  // queueing a task to a parked helper starting it (MeasureWakeNanos), clamped.
  double parked_min_part_nanos_ = kMinPartNanos;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> queued_{0};    // queue_.size(), for helpers polling without mu_.
  std::atomic<int64_t> spinning_{0};  // Helpers polling for a task, not parked in cv_.
};

// Parked helpers one thread wakes for a ParallelFor before it works on a chunk itself. A
// wake-up (futex, then an inter-processor interrupt under a hypervisor) cost the waker
// 15-20 µs each on the 13-core TPU host: a caller that woke 12 helpers one after another
// never ran a chunk of its own (WORKSHOP_POOL_TRACE, a 128x512x512 GEMM); with a fan-out
// of 2 it starts at about 20 µs and 12 helpers are running after three rounds.
constexpr int64_t kWakeFanOut = 2;

// Element operations one part of a fused kernel carries at least (PartsFor):
// kMinPartNanos / kNanosPerElementOp, rounded to a power of two.
constexpr int64_t kMinPartWork = 512 * 1024;

// Elements below which splitting a streaming kernel (a copy, a one-pass reduction, a
// gather) costs more than it saves, and the grain of its chunks: 64K f32s read and written
// are 512 KB, about kMinPartNanos at kNanosPerByte.
constexpr int64_t kParallelGrain = 64 * 1024;

// A kernel instance's measured one-thread time, which corrects the cost model's estimate
// upwards. The rates above are averages of one machine; a kernel that runs far slower per
// element (an interpreted row fusion of rows of 16 with a reduction per row, or any
// kernel on a core slower than the VM's: k-means' 20000x16 row-norm fusion is estimated
// at 82 µs, took 118 µs on the VM and 310 µs on the 13-core TPU host) would stay on one
// thread. A kernel keeps one of these per instruction (its prepared state) and records
// every run: its parts' summed busy time, a one-thread equivalent however many parts ran.
// Once kSamples are recorded, PartsFor takes the larger of the estimate and the least
// sample (the least: a first call's page faults and cold code, or a run slowed by another
// process, do not count, and warm runs correct cold ones). The part count then varies
// with the samples, as it already does call by call with PartsFor's polling term, so only
// kernels whose results do not depend on the cut may use this (fusions: fixed blocks or
// items; the cut decides only which thread computes which). WORKSHOP_POOL_TRACE writes
// each sample.
class MeasuredTime {
 public:
  static constexpr int64_t kSamples = 3;

  // Nanoseconds of one thread: the estimate, or the least recorded time if larger.
  double Nanos(double estimate) const;
  // Whether a run of `work` element operations (PartsFor's fusion units) is worth
  // timing: a kernel estimated far below a part would have to run 8x slower than its
  // estimate to split, and two clock reads (about 40 ns) are a visible share of a
  // microsecond kernel.
  static bool Worth(int64_t work) { return work >= kMinPartWork / 8; }
  void Record(int64_t nanos);

 private:
  std::atomic<int64_t> least_{std::numeric_limits<int64_t>::max()};
  std::atomic<int64_t> samples_{0};
};

// MeasuredTime's clock: steady_clock nanoseconds.
int64_t NowNanos();

// Runs worker() on `workers` pool threads at once (the caller among them) and returns the
// first error any of them returned (in the order they finished), or OK. For kernels that
// share a work queue among their parts (a counter each worker takes items from: fusion.cc),
// so a part that starts late does less. Each worker's scratch is charged to the memory the
// caller's execution is attributed to (MemoryAttribution), as the caller's own is.
Status RunWorkers(int64_t workers, const std::function<Status()>& worker);

// The CPUs this process may run on: its affinity mask (sched_getaffinity), bounded by a
// cgroup v2 CPU quota (cpu.max) when one is set; WORKSHOP_NUM_THREADS overrides both. At
// least 1.
int HostParallelism();

}  // namespace workshop
