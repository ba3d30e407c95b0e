// MemoryStats: live-allocation counters of one Memory (PJRT_Device_MemoryStats).
//
// Every Storage records which MemoryStats it was charged to and credits it back when freed,
// whichever thread frees it. Allocations made inside an execution (kernel outputs,
// intermediates, scratch) don't know their memory; the execution installs a
// MemoryAttribution on its worker thread, which charges them to the device's memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace workshop {

class MemoryStats {
 public:
  void Allocated(int64_t bytes);
  // Allocated(bytes) unless that would take bytes_in_use past the limit; then nothing
  // changes and it returns false.
  bool Reserve(int64_t bytes);
  void Freed(int64_t bytes);

  // 0: no limit. A memory's limit (ClientOptions::device_memory_limit) bounds what its
  // buffers and running executions hold at once: a program or a corrupt executable asking
  // for more fails with RESOURCE_EXHAUSTED naming the op instead of exhausting the host
  // (one program took 12 GB in 1 GB intermediates before an address-space limit hit).
  void set_bytes_limit(int64_t bytes) { bytes_limit_.store(bytes, std::memory_order_relaxed); }
  int64_t bytes_limit() const { return bytes_limit_.load(std::memory_order_relaxed); }

  int64_t bytes_in_use() const { return bytes_in_use_.load(std::memory_order_relaxed); }
  int64_t peak_bytes_in_use() const { return peak_bytes_in_use_.load(std::memory_order_relaxed); }
  int64_t num_allocs() const { return num_allocs_.load(std::memory_order_relaxed); }
  int64_t largest_alloc_size() const { return largest_alloc_size_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> bytes_in_use_{0};
  std::atomic<int64_t> peak_bytes_in_use_{0};
  std::atomic<int64_t> num_allocs_{0};  // Allocations ever made, not live ones.
  std::atomic<int64_t> largest_alloc_size_{0};
  std::atomic<int64_t> bytes_limit_{0};
};

using MemoryStatsRef = std::shared_ptr<MemoryStats>;

// While alive, Storage::Allocate on this thread charges `stats` unless told otherwise.
// Nests: the destructor restores the previous attribution.
class MemoryAttribution {
 public:
  explicit MemoryAttribution(MemoryStatsRef stats);
  ~MemoryAttribution();
  MemoryAttribution(const MemoryAttribution&) = delete;
  MemoryAttribution& operator=(const MemoryAttribution&) = delete;

  // The innermost attribution on this thread; null if none.
  static const MemoryStatsRef& Current();

 private:
  MemoryStatsRef previous_;
};

}  // namespace workshop
