#include "runtime/memory_pool.h"

#include <cstdlib>

namespace workshop {

MemoryPool& MemoryPool::Global() {
  // Never destroyed: storages may be freed by worker threads during process exit.
  static auto* pool = new MemoryPool();
  return *pool;
}

size_t MemoryPool::RoundUp(size_t size) {
  // Page granularity for pooled sizes, so arrays of nearby sizes share blocks; cache-line
  // granularity (and never 0, which aligned_alloc rejects) below that.
  const size_t granule = size >= kMinPooledBytes ? 4096 : kAlignment;
  size = size == 0 ? 1 : size;
  return (size + granule - 1) / granule * granule;
}

void* MemoryPool::Allocate(size_t size) {
  const size_t rounded = RoundUp(size);
  if (rounded == kAlignment) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!small_.empty()) {
      void* data = small_.back();
      small_.pop_back();
      bytes_cached_ -= rounded;
      bytes_in_use_ += rounded;
      return data;
    }
  } else if (rounded >= kMinPooledBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cached_.find(rounded);
    if (it != cached_.end() && !it->second.empty()) {
      void* data = it->second.back();
      it->second.pop_back();
      bytes_cached_ -= rounded;
      bytes_in_use_ += rounded;
      return data;
    }
  }
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (data != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_in_use_ += rounded;
  }
  return data;
}

void MemoryPool::Free(void* data, size_t size) {
  const size_t rounded = RoundUp(size);
  {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_in_use_ -= rounded;
    if (rounded == kAlignment && small_.size() < kMaxSmallBlocks) {
      small_.push_back(data);
      bytes_cached_ += rounded;
      return;
    }
    if (rounded >= kMinPooledBytes && bytes_cached_ + rounded <= kMaxCachedBytes) {
      cached_[rounded].push_back(data);
      bytes_cached_ += rounded;
      return;
    }
  }
  std::free(data);
}

size_t MemoryPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_in_use_;
}

size_t MemoryPool::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_cached_;
}

}  // namespace workshop
