// Handles that can tell whether they are still alive.
//
// Every handle type the C API hands out and later takes back (errors, events, buffers,
// executables, clients and what they own) declares WORKSHOP_HANDLE(Type): its objects are
// then allocated with a 16-byte header holding a per-type tag, and destroying one turns
// the tag into a "destroyed" tag instead of returning the memory to malloc. The checked
// entry (check.h) reads the tag before anything dereferences the handle, so a destroyed
// handle (double destroy, use after destroy) or a handle of another type is reported as
// INVALID_ARGUMENT, never dereferenced; under ASan these were heap-use-after-free.
//
// A pointer that cannot be a handle (below 64 KiB, or not 16-byte aligned) is reported as
// one of another type without reading anything. A handle whose owner (its PJRT_Client, for
// buffers, loaded executables and transfer managers) was destroyed is refused too
// (check.h): the runtime objects it points into are gone.
//
// Freed slots are recycled per size, oldest first, only after kQuarantine later frees, so
// a stale handle keeps reading "destroyed" for a long while; once its slot is reused it
// reads as the new live object (detection is best effort, never a crash: the memory stays
// ours). The cost is one mutex-protected list operation per allocation and release, about
// what malloc costs; nothing per call but one load.
#pragma once

#include <cstddef>
#include <cstdint>

namespace workshop::capi {

// FNV-1a of the type name: distinct per handle type, stable across builds.
constexpr uint64_t HandleTagOf(const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (; *name != '\0'; ++name) h = (h ^ static_cast<unsigned char>(*name)) * 1099511628211ull;
  return h | 1;  // Live tags are odd; a destroyed slot's tag is even (tag & ~1).
}

void* HandleAllocate(uint64_t tag, size_t size);
void HandleRelease(void* object, size_t size);

enum class HandleState { kLive, kDestroyed, kOtherType };
HandleState StateOfHandle(const void* object, uint64_t tag);

}  // namespace workshop::capi

#define WORKSHOP_HANDLE(Type)                                                  \
  static constexpr uint64_t kHandleTag = ::workshop::capi::HandleTagOf(#Type); \
  static constexpr const char* kHandleName = #Type;                            \
  static void* operator new(size_t size) {                                     \
    return ::workshop::capi::HandleAllocate(kHandleTag, size);                 \
  }                                                                            \
  static void operator delete(void* object, size_t size) {                     \
    ::workshop::capi::HandleRelease(object, size);                             \
  }
