#include "runtime/client.h"

#include <cstring>

#include "kernels/strided.h"
#include "runtime/compiler_bridge.h"

namespace workshop {

Client::Client(const ClientOptions& options) {
  for (int id = 0; id < options.num_devices; ++id) {
    devices_.push_back(std::make_unique<Device>(this, id));
  }
}

// Devices go in reverse order; each worker drains its queue before joining.
Client::~Client() {
  while (!devices_.empty()) devices_.pop_back();
}

Device* Client::LookupDevice(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(devices_.size())) return nullptr;
  return devices_[id].get();
}

Status Client::BufferFromHost(const HostArray& host, Memory* memory,
                              std::shared_ptr<Buffer>* out) {
  const int64_t width = ByteWidth(host.dtype);
  if (width == 0) {
    return Unimplemented("workshop: buffers of element type ", DTypeName(host.dtype),
                         " are not supported");
  }
  for (int64_t d : host.dims) {
    if (d < 0) return InvalidArgument("workshop: negative dimension in ",
                                      ShapeString(host.dtype, host.dims));
  }
  auto buffer = std::make_shared<Buffer>(host.dtype, host.dims, memory, Event::Ready());
  std::shared_ptr<Storage> storage = Storage::Allocate(buffer->byte_size());
  if (storage == nullptr) {
    return ResourceExhausted("workshop: out of memory for ",
                             ShapeString(host.dtype, host.dims));
  }
  if (host.byte_strides.empty()) {
    std::memcpy(storage->data(), host.data, buffer->byte_size());
  } else {
    StridedCopy(storage->data(), host.data, width, host.dims, host.byte_strides);
  }
  buffer->SetStorage(std::move(storage));
  *out = std::move(buffer);
  return Status();
}

Status Client::CopyToMemory(const std::shared_ptr<Buffer>& src, Memory* dst,
                            std::shared_ptr<Buffer>* out) {
  if (src->IsDeleted()) {
    return InvalidArgument("workshop: cannot copy a deleted buffer");
  }
  auto copy = std::make_shared<Buffer>(src->dtype(), src->dims(), dst, Event::Create());
  // The callback runs when `src` is ready: at once, or on the producing device's worker.
  src->ready()->OnReady([src, copy](const Status& status) {
    if (!status.ok()) return copy->ready()->Set(status);
    std::shared_ptr<Storage> contents = src->storage();
    if (contents == nullptr) {
      return copy->ready()->Set(InvalidArgument("workshop: buffer deleted before its copy"));
    }
    std::shared_ptr<Storage> storage = Storage::Allocate(copy->byte_size());
    if (storage == nullptr) return copy->ready()->Set(ResourceExhausted("workshop: copy"));
    std::memcpy(storage->data(), contents->data(), copy->byte_size());
    copy->SetStorage(std::move(storage));
    copy->ready()->Set(Status());
  });
  *out = std::move(copy);
  return Status();
}

Status Client::Compile(const std::string& code, const std::string& format,
                       const std::string& options, std::unique_ptr<LoadedExecutable>* out) {
  Program program;
  WORKSHOP_RETURN_IF_ERROR(CompileWithPython(code, format, options,
                                             static_cast<int>(devices_.size()), &program));
  std::vector<Device*> devices;
  for (const std::vector<int>& replica : program.device_assignment) {
    for (int id : replica) {
      Device* device = LookupDevice(id);
      if (device == nullptr) {
        return InvalidArgument("workshop: device assignment names device ", id, " but the "
                               "client has ", devices_.size(), " devices");
      }
      devices.push_back(device);
    }
  }
  *out = std::make_unique<LoadedExecutable>(this, std::move(program), std::move(devices));
  return Status();
}

void Client::Launch(const std::vector<Device*>& devices,
                    std::vector<std::function<void()>> tasks) {
  std::lock_guard<std::mutex> lock(launch_mu_);
  for (size_t i = 0; i < devices.size(); ++i) devices[i]->worker().Schedule(std::move(tasks[i]));
}

}  // namespace workshop
