// The handle allocator of handle.h.
#include "capi/handle.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <new>
#include <unordered_map>

namespace workshop::capi {
namespace {

// 16 bytes keep the object 16-byte aligned, as operator new's result.
struct alignas(16) Header {
  std::atomic<uint64_t> tag;
  uint64_t size;
};
static_assert(sizeof(Header) == 16);

// Enough that a handle destroyed within the last thousands of calls is still reported.
constexpr size_t kQuarantine = 4096;

struct Pool {
  std::mutex mu;
  std::unordered_map<size_t, std::deque<Header*>> freed;  // by object size, oldest first
};

Pool& ThePool() {
  static Pool* pool = new Pool;  // Never destroyed: handles may be released during exit.
  return *pool;
}

Header* HeaderOf(const void* object) {
  return const_cast<Header*>(reinterpret_cast<const Header*>(object) - 1);
}

}  // namespace

void* HandleAllocate(uint64_t tag, size_t size) {
  Header* header = nullptr;
  {
    Pool& pool = ThePool();
    std::lock_guard<std::mutex> lock(pool.mu);
    auto it = pool.freed.find(size);
    if (it != pool.freed.end() && it->second.size() > kQuarantine) {
      header = it->second.front();
      it->second.pop_front();
    }
  }
  if (header == nullptr) {
    header = static_cast<Header*>(::operator new(sizeof(Header) + size));
    header->size = size;
  }
  header->tag.store(tag, std::memory_order_release);
  return header + 1;
}

void HandleRelease(void* object, size_t size) {
  if (object == nullptr) return;
  Header* header = HeaderOf(object);
  header->tag.store(header->tag.load(std::memory_order_relaxed) & ~uint64_t{1},
                    std::memory_order_release);
  Pool& pool = ThePool();
  std::lock_guard<std::mutex> lock(pool.mu);
  pool.freed[size].push_back(header);
}

HandleState StateOfHandle(const void* object, uint64_t tag) {
  // Every handle is 16-byte aligned (the header's alignment) and lies above the lowest
  // address Linux maps (vm.mmap_min_addr, 64 KiB by default): anything else is a small
  // integer or a pointer into some object, and its header must not be read (a handle of
  // 0x10 would read address 0).
  const auto address = reinterpret_cast<uintptr_t>(object);
  if (address < (uintptr_t{1} << 16) || address % alignof(Header) != 0) {
    return HandleState::kOtherType;
  }
  const uint64_t found = HeaderOf(object)->tag.load(std::memory_order_acquire);
  if (found == tag) return HandleState::kLive;
  if (found == (tag & ~uint64_t{1})) return HandleState::kDestroyed;
  return HandleState::kOtherType;
}

}  // namespace workshop::capi
