// Device timelines for jax.profiler (the PJRT profiler extension, capi/profiler_extension.cc).
//
// While a profiling session is active, every program a device runs and every kernel of
// its plan (sub-plans included: while bodies, fusion blocks are one kernel) is recorded as
// an event: device id, name, start and end in ns since the UNIX epoch (the clock of
// jaxlib's host events, so the timelines line up). When no session is active, recording
// costs one relaxed atomic load per kernel.
//
// CollectXSpace() serializes the recorded events as a tensorflow.profiler.XSpace protobuf
// (tsl/profiler/protobuf/xplane.proto): one XPlane "/device:CUSTOM:<id>" per device with
// line 1 "Programs" (one event per execution, the module name) and line 2 "Kernels" (one
// event per executed kernel: "<op> @ <location>", e.g. "dot_general @ f.py:3:8"), which
// jax.profiler writes into its trace and Perfetto shows as one track per line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace workshop::profiler {

bool Active();
void Start();  // Begins a session: clears earlier events.
void Stop();   // Ends recording; the events stay for CollectXSpace.
std::string CollectXSpace();

int64_t NowNs();
void Record(int device, int line, std::string_view name, int64_t start_ns, int64_t end_ns);

// The device whose program runs on this thread (set for the top-level run of a partition).
int CurrentDevice();
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();

 private:
  int previous_;
};

constexpr int kProgramLine = 1, kKernelLine = 2;

}  // namespace workshop::profiler
