// MemoryPool: recycles large device allocations.
//
// A fresh multi-megabyte allocation comes from mmap, and the kernel that first writes it
// takes a page fault per 4 KiB page: for a 64 MB elementwise output that costs more than
// the arithmetic (measured here: numpy writing a fresh 64 MB array takes 12 ms, writing a
// reused one under 5 ms). Freed blocks of at least kMinPooledBytes are kept, by exact
// rounded size, up to a total of kMaxCachedBytes, and handed out again. So are blocks of
// one cache line (scalars, small vectors: an interpreted loop's bookkeeping allocates
// one per instruction per iteration), up to kMaxSmallBlocks: aligned_alloc serves a
// 64-byte-aligned block by carving it out of a larger chunk and freeing the rest, and
// that churn (malloc_consolidate, unlink_chunk) was 40% of an interpreted loop's time.
// Other sizes go straight to aligned_alloc. Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace workshop {

class MemoryPool {
 public:
  static constexpr size_t kAlignment = 64;  // A cache line; the widest vector (AVX-512).
  static constexpr size_t kMinPooledBytes = 256 * 1024;
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;
  static constexpr size_t kMaxSmallBlocks = size_t{1} << 16;  // 4 MiB of kAlignment blocks

  static MemoryPool& Global();

  // `size` bytes, kAlignment-aligned; null when out of memory. Release with Free(p, size).
  void* Allocate(size_t size);
  void Free(void* data, size_t size);

  // Bytes currently handed out and cached, for PJRT_Device_MemoryStats.
  size_t bytes_in_use() const;
  size_t bytes_cached() const;

 private:
  static size_t RoundUp(size_t size);

  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> cached_;  // Rounded size -> free blocks.
  std::vector<void*> small_;                               // Free blocks of kAlignment bytes.
  size_t bytes_cached_ = 0;
  size_t bytes_in_use_ = 0;
};

}  // namespace workshop
