// Client: the root runtime object (one per PJRT_Client): owns the devices and is the
// factory for buffers and executables.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/device.h"
#include "runtime/executable.h"

namespace workshop {

struct ClientOptions {
  int num_devices = 4;
};

// How BufferFromHost may treat the caller's memory (PJRT_HostBufferSemantics). This
// runtime always copies during the call, which satisfies every mode.
struct HostArray {
  const void* data;
  DType dtype;
  Dims dims;
  std::vector<int64_t> byte_strides;  // Empty: dense row-major.
};

class Client {
 public:
  explicit Client(const ClientOptions& options);
  ~Client();

  static constexpr const char* kPlatformName = "workshop";
  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  // The device with `id`, or null.
  Device* LookupDevice(int64_t id) const;

  // Copies a host array (any byte strides: transposed, negative, zero) into a new buffer
  // in `memory`. The returned buffer is ready at once.
  Status BufferFromHost(const HostArray& host, Memory* memory, std::shared_ptr<Buffer>* out);
  // A new buffer in `dst` with `src`'s contents, filled once `src` is ready.
  Status CopyToMemory(const std::shared_ptr<Buffer>& src, Memory* dst,
                      std::shared_ptr<Buffer>* out);

  // Compiles a program through the Python compiler (see compiler_bridge.h).
  Status Compile(const std::string& code, const std::string& format,
                 const std::string& options, std::unique_ptr<LoadedExecutable>* out);

  // Queues tasks[i] on devices[i]'s worker. The launch lock makes every device see
  // launches in the same order, so partitions of two launches cannot wait for each other
  // in a collective.
  void Launch(const std::vector<Device*>& devices, std::vector<std::function<void()>> tasks);

 private:
  std::vector<std::unique_ptr<Device>> devices_;
  std::mutex launch_mu_;
};

}  // namespace workshop
