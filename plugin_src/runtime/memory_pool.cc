#include "runtime/memory_pool.h"

#include <algorithm>
#include <cstdlib>

namespace workshop {
namespace {

size_t MaxCachedFromEnv() {
  if (const char* env = std::getenv("WORKSHOP_MEMORY_POOL_BYTES")) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0') return static_cast<size_t>(n);
  }
  return MemoryPool::kDefaultMaxCachedBytes;
}

}  // namespace

MemoryPool& MemoryPool::Global() {
  // Never destroyed: storages may be freed by worker threads during process exit.
  static auto* pool = new MemoryPool();
  return *pool;
}

MemoryPool::MemoryPool() : max_cached_bytes_(MaxCachedFromEnv()) {}

size_t MemoryPool::RoundUp(size_t size) {
  size = size == 0 ? 1 : size;  // aligned_alloc rejects 0
  if (size < kMinPooledBytes) return (size + kAlignment - 1) / kAlignment * kAlignment;
  // Four classes per power of two: steps of a quarter of the power of two below `size`
  // (1 KiB and up; 4 KiB, whole pages, from 16 KiB on).
  size_t power = kMinPooledBytes;
  while (power <= size / 2) power *= 2;
  const size_t step = power / 4;
  return (size + step - 1) / step * step;
}

void* MemoryPool::Allocate(size_t size) {
  const size_t rounded = RoundUp(size);
  if (rounded == kAlignment) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!small_.empty()) {
      void* data = small_.back();
      small_.pop_back();
      return data;
    }
  }
  const bool pooled = rounded >= kMinPooledBytes;
  if (pooled) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cached_.find(rounded);
    if (it != cached_.end() && !it->second.empty()) {
      void* data = it->second.back().data;  // The most recently freed: warmest in cache.
      it->second.pop_back();
      counters_.bytes_cached -= rounded;
      counters_.bytes_in_use += rounded;
      ++counters_.reuses;
      return data;
    }
  }
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (data != nullptr && pooled) {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.bytes_in_use += rounded;
    ++counters_.system_allocs;
    counters_.peak_bytes_held =
        std::max(counters_.peak_bytes_held, counters_.bytes_in_use + counters_.bytes_cached);
  }
  return data;
}

void* MemoryPool::EvictOldestLocked() {
  std::vector<Cached>* oldest = nullptr;
  size_t oldest_size = 0;
  for (auto& [size, blocks] : cached_) {
    if (!blocks.empty() &&
        (oldest == nullptr || blocks.front().freed_at < oldest->front().freed_at)) {
      oldest = &blocks;
      oldest_size = size;
    }
  }
  if (oldest == nullptr) return nullptr;
  void* data = oldest->front().data;
  oldest->erase(oldest->begin());
  counters_.bytes_cached -= oldest_size;
  ++counters_.evictions;
  return data;
}

void MemoryPool::Free(void* data, size_t size) {
  const size_t rounded = RoundUp(size);
  std::vector<void*> evicted;  // Unmapped after the lock: munmap of 256 MB takes a while.
  if (rounded == kAlignment) {
    std::lock_guard<std::mutex> lock(mu_);
    if (small_.size() < kMaxSmallBlocks) {
      small_.push_back(data);
      return;
    }
  } else if (rounded >= kMinPooledBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.bytes_in_use -= rounded;
    if (rounded <= max_cached_bytes_) {
      while (counters_.bytes_cached + rounded > max_cached_bytes_) {
        evicted.push_back(EvictOldestLocked());
      }
      cached_[rounded].push_back({data, ++tick_});
      counters_.bytes_cached += rounded;
      data = nullptr;
    }
  }
  for (void* block : evicted) std::free(block);
  std::free(data);
}

// What jax_plugins.workshop.memory_pool_counters() reads (ctypes): the Global() pool's
// counters (bytes_in_use, bytes_cached, peak_bytes_held, system_allocs, reuses, evictions,
// largest_cached, max_cached_bytes), the first min(n, 8) of them into out; returns the
// count (8), or -1 for a null `out` with n > 0.
extern "C" __attribute__((visibility("default"))) int64_t WorkshopMemoryPoolCounters(int64_t* out,
                                                                                     int64_t n) {
  if (out == nullptr && n > 0) return -1;
  const MemoryPool::Counters c = MemoryPool::Global().counters();
  const int64_t values[] = {static_cast<int64_t>(c.bytes_in_use),
                            static_cast<int64_t>(c.bytes_cached),
                            static_cast<int64_t>(c.peak_bytes_held),
                            c.system_allocs,
                            c.reuses,
                            c.evictions,
                            static_cast<int64_t>(c.largest_cached),
                            static_cast<int64_t>(MemoryPool::Global().max_cached_bytes())};
  constexpr int64_t kCount = sizeof(values) / sizeof(values[0]);
  for (int64_t i = 0; i < std::min(n, kCount); ++i) out[i] = values[i];
  return kCount;
}

MemoryPool::Counters MemoryPool::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  for (const auto& [size, blocks] : cached_) {
    if (!blocks.empty()) c.largest_cached = std::max(c.largest_cached, size);
  }
  return c;
}

}  // namespace workshop
