// The call tracer: records every PJRT C API call (function, key arguments, result code,
// start, duration, thread) into a lock-protected ring buffer.
//
// Every slot of the PJRT_Api table (and of the extensions) points to Traced<name, impl>,
// which calls `impl` directly when tracing is off (one relaxed atomic load) and otherwise
// times it and records it. Key arguments come from DescribeIn/DescribeOut overloads in
// trace_describe.h, when one exists for the function's Args type.
//
// Turning it on: WORKSHOP_TRACE=1 in the environment (records from the moment jaxlib loads
// the plugin and also prints one line per call to stderr), or from Python with
// jax_plugins.workshop.trace(), which uses the exported C functions below through ctypes.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "pjrt_c_api.h"

namespace workshop::capi::trace {

// Key arguments as "key=value" words. Handles print as "kind@0x...": the Python side
// renumbers them (#1, #2, ...) in order of appearance, so printed traces are reproducible.
class Note {
 public:
  template <typename T>
  void Add(const char* key, const T& value);
  // "kind@0x...", or "role=kind@0x..." when the argument has a role (e.g. output=buffer@..).
  void Handle(const char* kind, const void* pointer, const char* role = nullptr);
  std::string& text() { return text_; }

 private:
  std::string text_;
};

extern std::atomic<bool> enabled;
inline bool Enabled() { return enabled.load(std::memory_order_relaxed); }

int64_t NowNs();  // steady_clock
void Record(const char* function, std::string args, int code, int64_t start_ns, int64_t end_ns);

template <typename Fn>
struct FnTraits;
template <typename R, typename A>
struct FnTraits<R (*)(A*)> {
  using Result = R;
  using Args = A;
};

}  // namespace workshop::capi::trace
