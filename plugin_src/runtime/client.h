// Client: the root runtime object (one per PJRT_Client): owns the devices and is the
// factory for buffers and executables.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/device.h"
#include "runtime/distributed.h"
#include "runtime/executable.h"

namespace workshop {

struct ClientOptions {
  int num_devices = 4;  // Per process.
  // Bytes each memory of each device may hold at once (create option
  // device_memory_limit; 0 = none). Default: 3/4 of physical memory, so one device
  // alone cannot push the host into swapping or the OOM killer.
  int64_t device_memory_limit = DefaultDeviceMemoryLimit();

  // Several processes (jax.distributed; create options node_id, num_nodes): this is
  // process `process_index` of `num_processes`, each with num_devices devices, connected
  // by `group`. Device ids are global: process p's devices are
  // [p * num_devices, (p + 1) * num_devices).
  int process_index = 0;
  int num_processes = 1;
  std::shared_ptr<ProcessGroup> group;

  static int64_t DefaultDeviceMemoryLimit();
};

// A host array as PJRT_Client_BufferFromHostBuffer describes it.
struct HostArray {
  const void* data;
  DType dtype;
  Dims dims;
  std::vector<int64_t> byte_strides;  // Empty: dense row-major.
  MinorToMajor device_layout;         // Of the buffer made from it; empty: row-major.
};

class Client {
 public:
  explicit Client(const ClientOptions& options);
  ~Client();

  static constexpr const char* kPlatformName = "workshop";
  // Every process's devices, by id.
  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  // This process's devices, by local hardware id.
  const std::vector<Device*>& addressable_devices() const { return addressable_; }
  // The device with (global) `id`, or null.
  Device* LookupDevice(int64_t id) const;
  int process_index() const { return process_index_; }
  int num_processes() const { return num_processes_; }
  // The processes' MPI group; null in a single process.
  ProcessGroup* group() const { return group_.get(); }

  // ---- Buffers. All copies from host memory happen during the call, which satisfies
  // every PJRT_HostBufferSemantics; the returned buffers are ready at once unless said.

  // Copies a host array (any byte strides: transposed, negative, zero) into `memory`, in
  // the layout `host.device_layout`.
  Status BufferFromHost(const HostArray& host, Memory* memory, std::shared_ptr<Buffer>* out);
  // A buffer with unspecified contents, in `layout` (empty: row-major).
  Status CreateUninitialized(DType dtype, const Dims& dims, Memory* memory,
                             std::shared_ptr<Buffer>* out, MinorToMajor layout = {});
  // A buffer over memory the caller owns (dense, in `layout`, 64-byte aligned like our
  // own); `on_delete` runs once no buffer or execution uses it any more.
  Status CreateView(void* data, DType dtype, const Dims& dims, Memory* memory,
                    std::function<void()> on_delete, std::shared_ptr<Buffer>* out,
                    MinorToMajor layout = {});
  // A new buffer in `dst` with `src`'s contents (and layout), filled once `src` is ready.
  Status CopyToMemory(const std::shared_ptr<Buffer>& src, Memory* dst,
                      std::shared_ptr<Buffer>* out);
  // Copies `src` to host memory `dst` once it is ready: every element, at `byte_strides`
  // (non-negative; empty means dense row-major). `done` completes after the copy.
  static Status CopyToHost(const std::shared_ptr<Buffer>& src, void* dst,
                           std::vector<int64_t> byte_strides, EventRef* done);
  // Copies bytes [offset, offset + size) of `src`'s contents (in its layout) to `dst`.
  static Status CopyRawToHost(const std::shared_ptr<Buffer>& src, void* dst, int64_t offset,
                              int64_t size, EventRef* done);
  // An alias buffer: not ready until FulfillAlias gives it another buffer's contents (or
  // an error).
  Status CreateAlias(DType dtype, const Dims& dims, Memory* memory, std::shared_ptr<Buffer>* out);
  // `source` null means: fail the alias with `error`.
  static Status FulfillAlias(const std::shared_ptr<Buffer>& alias,
                             const std::shared_ptr<Buffer>& source, Status error);

  // ---- Executables.

  // Compiles a program through the Python compiler (see compiler_bridge.h).
  Status Compile(const std::string& code, const std::string& format, const std::string& options,
                 std::unique_ptr<LoadedExecutable>* out);
  // Compiles for a machine of `num_devices` devices without loading (PJRT_Compile, with
  // `bounded_gil_wait`: CompileWithPythonBounded, compiler_bridge.h).
  static Status CompileProgram(const std::string& code, const std::string& format,
                               const std::string& options, int num_devices,
                               std::shared_ptr<const Program>* out, bool bounded_gil_wait = false);
  // Binds a compiled program to this client's devices.
  Status Load(std::shared_ptr<const Program> program, std::unique_ptr<LoadedExecutable>* out);
  // Loads a serialized executable (serialize.h), re-targeted to the device assignment of
  // `options` when given (a serialized CompileOptionsProto; empty keeps the stored one).
  Status DeserializeAndLoad(std::string_view blob, const std::string& options,
                            std::unique_ptr<LoadedExecutable>* out);

  // Queues tasks[i] on devices[i]'s worker. The launch lock makes every device see
  // launches in the same order, so partitions of two launches cannot wait for each other
  // in a collective. (Small single-device programs may skip this and run inline:
  // LoadedExecutable::Execute, Worker::TryClaim.)
  void Launch(const std::vector<Device*>& devices, std::vector<std::function<void()>> tasks);

  // ---- PJRT_Client_DmaMap/DmaUnmap. Devices read host memory directly, so mapping only
  // records the region (and unmapping checks it was mapped).
  Status DmaMap(void* data, size_t size);
  Status DmaUnmap(void* data);

 private:
  const int process_index_, num_processes_;
  const std::shared_ptr<ProcessGroup> group_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<Device*> addressable_;
  std::mutex launch_mu_;
  std::mutex dma_mu_;
  std::map<void*, size_t> dma_mapped_;  // Guarded by dma_mu_.
};

}  // namespace workshop
