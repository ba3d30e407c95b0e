#include "runtime/memory_stats.h"

namespace workshop {
namespace {

thread_local MemoryStatsRef current_attribution;

void RaiseTo(std::atomic<int64_t>& counter, int64_t value) {
  int64_t seen = counter.load(std::memory_order_relaxed);
  while (seen < value && !counter.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

void MemoryStats::Allocated(int64_t bytes) {
  const int64_t in_use = bytes_in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  num_allocs_.fetch_add(1, std::memory_order_relaxed);
  RaiseTo(peak_bytes_in_use_, in_use);
  RaiseTo(largest_alloc_size_, bytes);
}

bool MemoryStats::Reserve(int64_t bytes) {
  const int64_t limit = bytes_limit();
  const int64_t in_use = bytes_in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (limit > 0 && in_use > limit) {
    bytes_in_use_.fetch_sub(bytes, std::memory_order_relaxed);
    return false;
  }
  num_allocs_.fetch_add(1, std::memory_order_relaxed);
  RaiseTo(peak_bytes_in_use_, in_use);
  RaiseTo(largest_alloc_size_, bytes);
  return true;
}

void MemoryStats::Freed(int64_t bytes) {
  bytes_in_use_.fetch_sub(bytes, std::memory_order_relaxed);
}

MemoryAttribution::MemoryAttribution(MemoryStatsRef stats)
    : previous_(std::move(current_attribution)) {
  current_attribution = std::move(stats);
}

MemoryAttribution::~MemoryAttribution() { current_attribution = std::move(previous_); }

const MemoryStatsRef& MemoryAttribution::Current() { return current_attribution; }

}  // namespace workshop
