// MemoryPool: recycles large device allocations.
//
// A fresh multi-megabyte allocation comes from mmap, and the kernel that first writes it
// takes a page fault per 4 KiB page: for a 64 MB elementwise output that costs more than
// the arithmetic (measured here: numpy writing a fresh 64 MB array takes 12 ms, writing a
// reused one under 5 ms). Freed blocks of at least kMinPooledBytes (a page) are kept and
// handed out again; smaller ones go straight to malloc, whose free lists recycle them
// within pages it keeps. Blocks of a few pages up to 256 KiB used to go to malloc too, and
// a worker thread's malloc arena gives the free pages at its top back to the system
// (heap trimming: madvise(MADV_DONTNEED)), so an optimizer update over 100 arrays of
// 4-240 KB faulted its outputs' pages in again on every call. Blocks of one cache line
// (scalars, small vectors: an interpreted loop's bookkeeping allocates one per instruction
// per iteration) are kept too, up to kMaxSmallBlocks: aligned_alloc serves a 64-byte-aligned
// block by carving it out of a larger chunk and freeing the rest, and that churn
// (malloc_consolidate, unlink_chunk) was 40% of an interpreted loop's time. Thread-safe.
//
// Blocks come in size classes, four per power of two (as jemalloc's: at most 25% more than
// asked, 12% on average), so arrays of nearby sizes (a batch of 1000 and one of 1024, the
// last partial batch) share blocks. The cache holds at most max_cached_bytes() (1 GiB,
// WORKSHOP_MEMORY_POOL_BYTES overrides it) and evicts the blocks freed longest ago to make
// room for the one just freed: the pool follows the program running now. It used to keep
// exact sizes and refuse new ones once full, so after other programs had filled it, a
// program whose temporaries had other sizes got a fresh mmap, 64K page faults and a
// munmap per 256 MB temporary on every call (logsumexp of (2048, 32000): 29 ms in a fresh
// process, 94-101 ms after the rest of a benchmark had run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace workshop {

class MemoryPool {
 public:
  static constexpr size_t kAlignment = 64;  // A cache line; the widest vector (AVX-512).
  static constexpr size_t kMinPooledBytes = 4096;
  static constexpr size_t kDefaultMaxCachedBytes = size_t{1} << 30;
  static constexpr size_t kMaxSmallBlocks = size_t{1} << 16;  // 4 MiB of kAlignment blocks

  static MemoryPool& Global();

  // `size` bytes, kAlignment-aligned; null when out of memory. Release with Free(p, size).
  void* Allocate(size_t size);
  void Free(void* data, size_t size);

  // What the pool holds, for PJRT_Device_MemoryStats and tests. Sizes are class sizes.
  struct Counters {
    size_t bytes_in_use = 0;     // Pooled-size blocks handed out.
    size_t bytes_cached = 0;     // Free blocks kept for reuse.
    size_t peak_bytes_held = 0;  // Peak of in use + cached.
    int64_t system_allocs = 0;   // Pooled-size blocks taken from the system.
    int64_t reuses = 0;          // Pooled-size requests served from the cache.
    int64_t evictions = 0;       // Cached blocks given back to make room.
    size_t largest_cached = 0;   // Largest free block kept.
  };
  Counters counters() const;
  size_t max_cached_bytes() const { return max_cached_bytes_; }

  // The size a request of `size` bytes occupies (its class from kMinPooledBytes on).
  static size_t RoundUp(size_t size);

 private:
  MemoryPool();
  void* EvictOldestLocked();  // Takes the oldest cached block out; the caller frees it.

  struct Cached {
    void* data;
    uint64_t freed_at;  // Tick of the Free that cached it: eviction takes the smallest.
  };
  const size_t max_cached_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<Cached>> cached_;  // Class size -> free blocks.
  std::vector<void*> small_;                                // Free blocks of kAlignment bytes.
  uint64_t tick_ = 0;
  Counters counters_;
};

}  // namespace workshop
