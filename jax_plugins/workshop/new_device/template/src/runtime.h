// The __NAME__ runtime: the objects behind the PJRT C API (capi.cc defines the functions).
//
// A client owns N devices; each device has one memory ("device") and one queue, a worker
// thread that runs the device's work in order. Buffers live in a memory and carry a ready
// event; an execution enqueues one task per device, which waits for its arguments' events,
// runs the plan's kernels (kernels.cc) and sets its outputs' events.
//
// This "device" is the host CPU. Every place a real accelerator differs is marked
// REAL ACCELERATOR.
#pragma once

#include <pjrt_c_api.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace __NAME__ {

// An error inside the plugin. Thrown, and turned into a PJRT_Error at the C API's edge
// (capi.cc: Entry), so no exception crosses extern "C".
struct Error {
  PJRT_Error_Code code;
  std::string message;
};

template <typename... T>
std::string Cat(const T&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... T>
[[noreturn]] void Fail(PJRT_Error_Code code, const T&... parts) {
  throw Error{code, Cat(parts...)};
}

// The element types the runtime stores: name (as compiler.py writes it), PJRT type, size.
struct DType {
  const char* name;
  PJRT_Buffer_Type type;
  size_t size;
};
const DType& LookUp(PJRT_Buffer_Type type);    // UNIMPLEMENTED for others (s4, f8, ...)
const DType& LookUp(const std::string& name);

// An array's type: element type and dims (row-major, the only layout this plugin has).
struct Shape {
  PJRT_Buffer_Type type;
  std::vector<int64_t> dims;
  int64_t elements() const;
  size_t bytes() const { return elements() * LookUp(type).size; }
};

// A one-shot completion with an error or none. Callbacks run once it is set, on the
// thread that sets it (or at once, if it is set already).
class Event {
 public:
  static std::shared_ptr<Event> Ready();
  void Set(std::optional<Error> error = std::nullopt);
  std::optional<Error> Await() const;
  bool IsReady() const;
  std::optional<Error> error() const;
  void OnReady(std::function<void(const std::optional<Error>&)> callback);

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool ready_ = false;
  std::optional<Error> error_;
  std::vector<std::function<void(const std::optional<Error>&)>> callbacks_;
};
using EventRef = std::shared_ptr<Event>;

// One allocation of device memory.
// REAL ACCELERATOR: memory on the device (the driver's allocator), which the host cannot
// read: data moves only by the copies in capi.cc (BufferFromHostBuffer, ToHostBuffer,
// CopyToMemory), each a DMA on the device's queue.
struct Allocation {
  explicit Allocation(size_t size) : data(new std::byte[size > 0 ? size : 1]), size(size) {}
  std::unique_ptr<std::byte[]> data;  // never NULL, even for 0 bytes
  size_t size;
};

// A device's queue: one worker thread runs the tasks in the order they were enqueued.
// Destroying it runs what is queued first.
// REAL ACCELERATOR: the device's stream / command queue. Tasks become kernel launches and
// DMAs recorded on the stream, and events become the stream's events (the host does not
// wait in the worker for each step as this one does).
class Queue {
 public:
  Queue();
  ~Queue();
  void Enqueue(std::function<void()> task);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts after the fields it uses exist
};

// The meeting point of one execution's devices for collectives: each device publishes a
// pointer and waits for all; Abort wakes everyone with an error (one device's failure
// must not leave the others waiting forever).
// REAL ACCELERATOR: collectives run on the devices' interconnect (NCCL-like libraries);
// the runtime only sets up communicators per replica group.
class Rendezvous {
 public:
  explicit Rendezvous(int participants) : slots_(participants) {}
  // Publishes `data` as participant `rank`'s; returns all participants' pointers. Call
  // Done() after reading through them, before the next exchange.
  const std::vector<const std::byte*>& Exchange(int rank, const std::byte* data);
  void Done() { Wait(); }
  void Abort(const Error& error);

 private:
  void Wait();
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<const std::byte*> slots_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  std::optional<Error> aborted_;
};

// A view of one value while a plan runs.
struct Tensor {
  const Shape* shape;
  std::byte* data;
};

struct Step;
// What a kernel gets: its step, input and output views, and its position in the launch
// with the launch's rendezvous (for collectives).
struct KernelContext {
  int rank;
  Rendezvous* rendezvous;
};
using Kernel = void (*)(const Step& step, const std::vector<Tensor>& ins, Tensor& out,
                        KernelContext& context);
// The kernel `name` for result type `type`, or NULL (kernels.cc).
Kernel FindKernel(const std::string& name, PJRT_Buffer_Type type);
// Every kernel and the dtype names it takes ("any": it only moves bytes), for compiler.py.
std::vector<std::pair<std::string, std::vector<std::string>>> KernelTable();

// One step of a plan: out = kernel(ins).
struct Step {
  std::string kernel_name;
  int out;
  std::vector<int> ins;
  std::string data;                      // a constant's bytes
  std::vector<std::vector<int>> groups;  // a collective's replica groups (launch positions)
  Kernel kernel = nullptr;               // resolved at compile time
};

// A compiled program (compiler.py's plan), shared by PJRT_Executable and
// PJRT_LoadedExecutable.
// REAL ACCELERATOR: the device binary, and what launching it needs.
struct Program {
  std::string name, text, device_assignment, fingerprint;
  int num_replicas = 1, num_partitions = 1;
  std::vector<int> device_ids;  // launch position (replica-major) -> device id
  std::vector<Shape> values;    // parameters first
  int num_params = 0;
  std::vector<Step> steps;
  std::vector<int> outputs;
  std::vector<int> donated;  // parameter indices whose buffers the execution consumes
  // What the output queries hand out (pointers into these).
  std::vector<PJRT_Buffer_Type> output_types;
  std::vector<int64_t> output_dims;
  std::vector<size_t> output_dim_sizes;
  std::vector<const char*> output_kinds;
  std::vector<size_t> output_kind_sizes;
};

// Compiles through compiler.py (under the GIL); the program's kernels are resolved here.
std::shared_ptr<const Program> Compile(const std::string& code, const std::string& format,
                                       const std::string& options, int num_devices);

// Runs `program` on the host CPU, reading `params` and writing `outputs` (one tensor per
// parameter / output, in order); intermediates are allocated here.
void RunPlan(const Program& program, std::vector<Tensor> params, std::vector<Tensor> outputs,
         KernelContext& context);

// Writes the array `shape` into `dst`, dense and row-major, reading element i0..in from
// src + sum(i_d * byte_strides[d]): numpy's strides (negative or 0 too; NULL: dense).
// Transfers, broadcasts and slices are all this walk.
void CopyStrided(const std::byte* src, const int64_t* byte_strides, const Shape& shape,
                 std::byte* dst);

}  // namespace __NAME__

// The C API's opaque types, defined by this plugin. Pointers to them are what JAX holds.
struct PJRT_Error {
  __NAME__::Error error;
};
struct PJRT_Event {
  __NAME__::EventRef event;
};
struct PJRT_DeviceDescription {
  int id = 0;
  std::string kind, debug_string, to_string;
};
struct PJRT_Memory {
  int id = 0;
  PJRT_Device* device = nullptr;
  std::string kind = "device", debug_string, to_string;
};
struct PJRT_Device {
  PJRT_Client* client = nullptr;
  PJRT_DeviceDescription description;
  PJRT_Memory memory;
  PJRT_Memory* memories[1] = {&memory};
  std::unique_ptr<__NAME__::Queue> queue = std::make_unique<__NAME__::Queue>();
};
struct PJRT_Client {
  std::vector<std::unique_ptr<PJRT_Device>> owned_devices;  // destroyed last: queues drain
  std::vector<PJRT_Device*> devices;
  std::vector<PJRT_Memory*> memories;
  std::string platform_version;
  std::mutex launch_mu;  // every queue sees executions in the same order (collectives)
};
struct PJRT_Buffer {
  PJRT_Client* client = nullptr;
  PJRT_Device* device = nullptr;
  __NAME__::Shape shape;
  std::shared_ptr<__NAME__::Allocation> storage;  // NULL once deleted (or donated)
  __NAME__::EventRef ready;
  std::mutex mu;
  int external_references = 0;
};
struct PJRT_Executable {
  std::shared_ptr<const __NAME__::Program> program;
};
struct PJRT_LoadedExecutable {
  PJRT_Client* client = nullptr;
  std::shared_ptr<const __NAME__::Program> program;
  std::vector<PJRT_Device*> devices;  // launch position -> device
  std::atomic<bool> deleted{false};
};
