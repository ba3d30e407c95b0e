#include "runtime/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/float_mode.h"
#include "runtime/memory_stats.h"
#include "runtime/spin.h"

namespace workshop {

namespace {

// ceil(quota / period) of the cgroup v2 `cpu.max` of this process's cgroup ("max 100000"
// when unlimited: 0).
int CgroupCpuLimit() {
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cgroup, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  if (path.empty()) return 0;
  std::ifstream max("/sys/fs/cgroup" + path + "/cpu.max");
  std::string quota;
  double period = 0;
  if (!(max >> quota >> period) || quota == "max" || period <= 0) return 0;
  const double q = std::atof(quota.c_str());
  return q > 0 ? static_cast<int>(std::ceil(q / period)) : 0;
}

}  // namespace

int HostParallelism() {
  if (const char* env = std::getenv("WORKSHOP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return std::min(n, 1024);
  }
  int n = 0;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) n = CPU_COUNT(&mask);
  // hardware_concurrency counts the machine's online CPUs, whatever the mask says: under
  // `taskset -c 0-1` on 13 cores it said 13, and 12 helpers polled on 2 cores.
  if (n < 1) n = static_cast<int>(std::thread::hardware_concurrency());
  if (const int limit = CgroupCpuLimit(); limit > 0) n = std::min(n, limit);
  return std::max(n, 1);
}

ThreadPool& ThreadPool::Global() {
  // Never destroyed: detached helpers may still be parked in Loop() at process exit.
  static auto* pool = new ThreadPool(HostParallelism() - 1);
  return *pool;
}

double KernelWork::Nanos() const {
  return element_ops * kNanosPerElementOp + flops * kNanosPerFlop + bytes * kNanosPerByte +
         cached_bytes * kNanosPerCachedByte;
}

namespace {

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Which pool thread this is: its helper index, or -1 for any other thread (a device worker
// calling ParallelFor). For WORKSHOP_POOL_TRACE.
thread_local int64_t this_helper = -1;

// WORKSHOP_POOL_TRACE set, and neither empty nor "0" (as WORKSHOP_TRACE).
bool PoolTraceFromEnvironment() {
  const char* value = std::getenv("WORKSHOP_POOL_TRACE");
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

int64_t PartsOf(double nanos, double min_part_nanos, int64_t threads) {
  const double parts = std::floor(nanos / min_part_nanos);
  if (!(parts >= 1)) return 1;  // Also NaN.
  return parts >= threads ? threads : static_cast<int64_t>(parts);
}

// A fusion's `work` element operations as nanoseconds of one thread, scaled so that
// min_part_work of them make one part (kMinPartNanos).
double FusionNanos(int64_t work, int64_t min_part_work) {
  return static_cast<double>(work) * kMinPartNanos /
         static_cast<double>(std::max<int64_t>(min_part_work, 1));
}

}  // namespace

// Parts that polling helpers take cost no wake-up: one per kMinPartNanos, up to one more
// than there are helpers polling now (spinning_: helpers running another kernel's task or
// parked do not count); each part beyond those wakes a parked helper, so needs
// parked_min_part_nanos_ (twice the measured wake-up). The larger of the two counts.
int64_t ThreadPool::PartsFor(const KernelWork& work) const { return PartsForNanos(work.Nanos()); }

int64_t ThreadPool::PartsForNanos(double nanos) const {
  const int64_t parked = PartsOf(nanos, parked_min_part_nanos_, num_threads());
  if (parked_min_part_nanos_ <= kMinPartNanos) return parked;
  const int64_t awake = std::min(PartsOf(nanos, kMinPartNanos, num_threads()),
                                 1 + spinning_.load(std::memory_order_relaxed));
  return std::max(parked, awake);
}

int64_t ThreadPool::BlocksFor(const KernelWork& work) const {
  return PartsOf(work.Nanos(), kMinPartNanos, num_threads());
}

int64_t ThreadPool::PartsFor(int64_t work, int64_t min_part_work) const {
  return PartsForNanos(FusionNanos(work, min_part_work));
}

int64_t ThreadPool::PartsFor(int64_t work, int64_t min_part_work,
                             const MeasuredTime& measured) const {
  return PartsForNanos(measured.Nanos(FusionNanos(work, min_part_work)));
}

int64_t NowNanos() { return SteadyNanos(); }

double MeasuredTime::Nanos(double estimate) const {
  if (samples_.load(std::memory_order_acquire) < kSamples) return estimate;
  return std::max(estimate, static_cast<double>(least_.load(std::memory_order_relaxed)));
}

void MeasuredTime::Record(int64_t nanos) {
  int64_t least = least_.load(std::memory_order_relaxed);
  while (nanos < least && !least_.compare_exchange_weak(least, nanos, std::memory_order_relaxed)) {
  }
  const int64_t samples = samples_.fetch_add(1, std::memory_order_release) + 1;
  // WORKSHOP_POOL_TRACE: each sample, so that what PartsFor was told can be checked.
  static const bool trace = PoolTraceFromEnvironment();
  if (trace) {
    std::fprintf(stderr, "workshop pool: measured %lld us of one thread's work (sample %lld)\n",
                 static_cast<long long>(nanos / 1000), static_cast<long long>(samples));
  }
}

void ThreadPool::ParallelFor(int64_t n, const KernelWork& work,
                             const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t parts = std::min(PartsFor(work), std::max<int64_t>(n, 1));
  ParallelFor(n, (n + parts - 1) / parts, fn);
}

ThreadPool::ThreadPool(int helpers) {
  for (int i = 0; i < helpers; ++i) {
    threads_.emplace_back([this, i] { Loop(i); });
    // Named, so tools (top -H, /proc/<pid>/task/*/comm) and tests can tell them apart.
    pthread_setname_np(threads_.back().native_handle(), "workshop-pool");
    threads_.back().detach();
  }
  parked_min_part_nanos_ = std::clamp(2.0 * MeasureWakeNanos(), kMinPartNanos, kMaxParkedPartNanos);
}

// A low order statistic, over a few rounds, of the time from queueing a task to a parked helper
// starting it: what a kernel's extra part costs when the helpers have gone to sleep, as
// they have between the kernels of a loop whose steps take longer than the poll
// (kSpinBeforeSleep). 4-22 µs on the 2-core VM this project is measured on (spin.h's
// 21-31 µs is the median of a futex wake there; this takes the second fastest); idle virtual
// CPUs of a larger VM can take longer to wake, and a part of less work than twice that
// spends more than a third of itself waiting (an LSTM scan on the 13-core host, where it
// is about 50 µs, ran 1.45x slower on 2 cores than on 1 with kMinPartNanos alone). About
// 1.5 ms, once.
double ThreadPool::MeasureWakeNanos() {
  if (threads_.empty()) return 0;
  constexpr int kRounds = 7;
  std::vector<double> samples;
  for (int round = 0; round < kRounds; ++round) {
    std::this_thread::sleep_for(kSpinBeforeSleep * 2);  // Let the helpers park.
    auto started = std::make_shared<std::atomic<int64_t>>(-1);
    const auto queued = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back([started, queued] {
        started->store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - queued)
                           .count());
      });
      queued_.fetch_add(1, std::memory_order_relaxed);
    }
    cv_.notify_one();
    while (started->load() < 0) std::this_thread::yield();
    samples.push_back(static_cast<double>(started->load()));
  }
  // The second fastest: a round in which another process held the core measures the
  // load, not the wake-up (medians of 3.7 ms were seen on the loaded 2-core VM).
  std::sort(samples.begin(), samples.end());
  return samples[1];
}

void ThreadPool::WakeHelpers(int64_t wanted) {
  // Polling helpers take any queued task, not only this kernel's: what they leave is the
  // queue less the pollers, whoever queued it (several device threads entering the same
  // kernel of a pmap at once each see the same pollers).
  const int64_t unserved =
      queued_.load(std::memory_order_relaxed) - spinning_.load(std::memory_order_relaxed);
  const int64_t wake = std::min({wanted, unserved, kWakeFanOut});
  for (int64_t i = 0; i < wake; ++i) cv_.notify_one();
}

void ThreadPool::Loop(int helper) {
  FlushSubnormalsOnThisThread();  // Kernels run in the device workers' mode (float_mode.h).
  this_helper = helper;
  for (;;) {
    spinning_.fetch_add(1, std::memory_order_relaxed);
    SpinUntil([this] { return queued_.load(std::memory_order_relaxed) > 0; });
    spinning_.fetch_sub(1, std::memory_order_relaxed);
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty(); });
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  if (chunks <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  // Shared with helpers, which may dequeue their task after every chunk is already done.
  struct State {
    std::atomic<int64_t> next{0};
    int64_t chunks, chunk_size, n;
    const std::function<void(int64_t, int64_t)>* fn;
    std::atomic<int64_t> done{0};
    std::mutex mu;  // For sleeping on cv once polling `done` has run out.
    std::condition_variable cv;
    // WORKSHOP_POOL_TRACE: each chunk's start and end, ns after `began`, and the thread
    // that ran it (this_helper).
    std::vector<int64_t> spans;
    int64_t began = 0;
  };
  auto state = std::make_shared<State>();
  state->chunks = chunks;
  state->chunk_size = (n + chunks - 1) / chunks;
  state->n = n;
  state->fn = &fn;
  // WORKSHOP_POOL_TRACE=1: when each chunk started and ended, in µs after this call began,
  // and on which thread (one line on stderr per ParallelFor of 3 or more chunks): how long
  // the hand-off to the helpers takes on this machine (docs/performance.md, "Matrix
  // products").
  static const bool trace = PoolTraceFromEnvironment();
  if (trace) {
    state->spans.assign(3 * chunks, 0);  // Each chunk's three written once, read after `done`.
    state->began = SteadyNanos();
  }
  auto work = [this, state] {
    if (this_helper >= 0 && state->next.load(std::memory_order_relaxed) + 1 < state->chunks) {
      // A helper passes the wake-up on (the tree of WakeHelpers) for the tasks still
      // queued: those other helpers took are not, and a task of a kernel whose chunks
      // are all claimed wakes no one.
      WakeHelpers(queued_.load(std::memory_order_relaxed));
    }
    int64_t* span = state->spans.empty() ? nullptr : state->spans.data();
    for (int64_t c; (c = state->next.fetch_add(1)) < state->chunks;) {
      const int64_t begin = c * state->chunk_size;
      if (span != nullptr) span[3 * c] = SteadyNanos() - state->began;
      (*state->fn)(begin, std::min(state->n, begin + state->chunk_size));
      if (span != nullptr) {
        span[3 * c + 1] = SteadyNanos() - state->began;
        span[3 * c + 2] = this_helper;
      }
      if (state->done.fetch_add(1, std::memory_order_acq_rel) + 1 == state->chunks) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->cv.notify_all();
      }
    }
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t i = 1; i < chunks; ++i) queue_.push_back(work);
    queued_.fetch_add(chunks - 1, std::memory_order_relaxed);
  }
  // At most one helper per task (waking every helper for a kernel of two chunks made the
  // others take the lock, find nothing, and poll, on cores the kernel needed), and at most
  // kWakeFanOut of them from here: the helpers woken wake the rest.
  WakeHelpers(chunks - 1);
  work();
  auto all_done = [&] { return state->done.load(std::memory_order_acquire) == state->chunks; };
  if (!SpinUntil(all_done)) {
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, all_done);
  }
  if (trace && chunks >= 3) {
    const int64_t returned = SteadyNanos() - state->began;
    const std::vector<int64_t>& spans = state->spans;
    // "start-end@h": helper h ran the chunk; "@c" the caller.
    std::string line =
        "workshop pool: " + std::to_string(chunks) + " chunks (start-end us @thread):";
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t helper = spans[3 * c + 2];
      line += " " + std::to_string(spans[3 * c] / 1000) + "-" +
              std::to_string(spans[3 * c + 1] / 1000) + "@" +
              (helper < 0 ? std::string("c") : std::to_string(helper));
    }
    line += ", returned at " + std::to_string(returned / 1000) + "\n";
    std::fputs(line.c_str(), stderr);
  }
}

Status RunWorkers(int64_t workers, const std::function<Status()>& worker) {
  std::mutex error_mu;
  Status error;
  const MemoryStatsRef stats = MemoryAttribution::Current();
  ThreadPool::Global().ParallelFor(workers, 1, [&](int64_t, int64_t) {
    MemoryAttribution attribution(stats);  // Scratch on pool helpers counts for the device.
    Status status = worker();
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (error.ok()) error = std::move(status);
    }
  });
  return error;
}

}  // namespace workshop
