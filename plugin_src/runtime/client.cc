#include "runtime/client.h"

#include <unistd.h>

#include <cstring>

#include "kernels/core/strided.h"
#include "runtime/compiler_bridge.h"
#include "runtime/serialize.h"

namespace workshop {
namespace {

Status CheckShape(DType dtype, const Dims& dims) {
  if (!IsSupported(dtype)) {
    return Unimplemented("workshop: buffers of element type ", DTypeName(dtype),
                         " are not supported");
  }
  for (int64_t d : dims) {
    if (d < 0) return InvalidArgument("workshop: negative dimension in ", ShapeString(dtype, dims));
  }
  int64_t bytes = 0;
  if (!CheckedByteSize(dtype, dims, &bytes)) {
    return InvalidArgument("workshop: the size of ", ShapeString(dtype, dims), " overflows int64 (",
                           dims.size(), " dimensions)");
  }
  return Status();
}

// Runs `copy(storage)` once `src` is ready (now, or on the thread that makes it ready) and
// completes the returned event with the outcome.
EventRef WhenReady(const std::shared_ptr<Buffer>& src, std::function<void(const Storage&)> copy) {
  EventRef done = Event::Create();
  src->ready()->OnReady([src, done, copy = std::move(copy)](const Status& status) {
    if (!status.ok()) return done->Set(status);
    std::shared_ptr<Storage> storage = src->storage();
    if (storage == nullptr) {
      return done->Set(
          InvalidArgument("workshop: the buffer was deleted before it could be "
                          "copied"));
    }
    copy(*storage);
    done->Set(Status());
  });
  return done;
}

}  // namespace

int64_t ClientOptions::DefaultDeviceMemoryLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * page_size / 4 * 3;
}

Client::Client(const ClientOptions& options)
    : process_index_(options.process_index),
      num_processes_(options.num_processes),
      group_(options.group) {
  const int total = options.num_devices * options.num_processes;
  for (int id = 0; id < total; ++id) {
    const int process = id / options.num_devices;
    const bool local = process == options.process_index;
    devices_.push_back(
        std::make_unique<Device>(this, id, total, process, id % options.num_devices, local));
    if (local) addressable_.push_back(devices_.back().get());
    for (MemoryKind kind : kMemoryKinds) {
      devices_.back()->memory(kind)->stats()->set_bytes_limit(options.device_memory_limit);
    }
  }
}

// Devices go in reverse order; each worker drains its queue before joining. The process
// group goes last (a queued collective may still use it).
Client::~Client() {
  while (!devices_.empty()) devices_.pop_back();
}

Device* Client::LookupDevice(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(devices_.size())) return nullptr;
  return devices_[id].get();
}

Status Client::BufferFromHost(const HostArray& host, Memory* memory, std::shared_ptr<Buffer>* out) {
  std::shared_ptr<Buffer> buffer;
  WORKSHOP_RETURN_IF_ERROR(
      CreateUninitialized(host.dtype, host.dims, memory, &buffer, host.device_layout));
  void* data = buffer->storage()->data();
  const int64_t width = ByteWidth(host.dtype);
  if (buffer->byte_size() == 0) {
    // Nothing to read: host.data may be NULL (memcpy from NULL is undefined even for 0).
  } else if (host.byte_strides.empty() && buffer->layout().empty()) {
    std::memcpy(data, host.data, buffer->byte_size());
  } else {
    StridedCopy(data, LayoutByteStrides(host.dims, buffer->layout(), width), host.data,
                host.byte_strides.empty() ? RowMajorStrides(host.dims, width) : host.byte_strides,
                width, host.dims);
  }
  *out = std::move(buffer);
  return Status();
}

Status Client::CreateUninitialized(DType dtype, const Dims& dims, Memory* memory,
                                   std::shared_ptr<Buffer>* out, MinorToMajor layout) {
  WORKSHOP_RETURN_IF_ERROR(CheckShape(dtype, dims));
  auto buffer =
      std::make_shared<Buffer>(dtype, dims, memory, Event::Ready(), nullptr, std::move(layout));
  std::shared_ptr<Storage> storage = Storage::Allocate(buffer->byte_size(), memory->stats());
  if (storage == nullptr) {
    return ResourceExhausted("workshop: out of memory for ", ShapeString(dtype, dims));
  }
  buffer->SetStorage(std::move(storage));
  *out = std::move(buffer);
  return Status();
}

Status Client::CreateView(void* data, DType dtype, const Dims& dims, Memory* memory,
                          std::function<void()> on_delete, std::shared_ptr<Buffer>* out,
                          MinorToMajor layout) {
  WORKSHOP_RETURN_IF_ERROR(CheckShape(dtype, dims));
  // Kernels access elements as typed values, which needs natural alignment (complex
  // types: that of their components).
  const int64_t alignment = std::min<int64_t>(ByteWidth(dtype), 8);
  if (data == nullptr || reinterpret_cast<uintptr_t>(data) % alignment != 0) {
    return InvalidArgument("workshop: a view of ", ShapeString(dtype, dims),
                           " needs a non-null "
                           "pointer aligned to ",
                           alignment, " bytes");
  }
  auto buffer =
      std::make_shared<Buffer>(dtype, dims, memory, Event::Ready(), nullptr, std::move(layout));
  buffer->SetStorage(Storage::View(data, buffer->byte_size(), std::move(on_delete)));
  *out = std::move(buffer);
  return Status();
}

Status Client::CopyToMemory(const std::shared_ptr<Buffer>& src, Memory* dst,
                            std::shared_ptr<Buffer>* out) {
  if (src->IsDeleted()) {
    return InvalidArgument("workshop: cannot copy a deleted buffer");
  }
  if (!dst->device()->addressable()) {
    return InvalidArgument("workshop: cannot copy into ", dst->DebugString(),
                           ", a device of "
                           "process ",
                           dst->device()->process_index(),
                           "; arrays move between "
                           "processes only through collectives");
  }
  auto copy =
      std::make_shared<Buffer>(src->dtype(), src->dims(), dst, Event::Create(), src->layout());
  // The callback runs when `src` is ready: at once, or on the producing device's worker.
  src->ready()->OnReady([src, copy, stats = dst->stats()](const Status& status) {
    if (!status.ok()) return copy->ready()->Set(status);
    std::shared_ptr<Storage> contents = src->storage();
    if (contents == nullptr) {
      return copy->ready()->Set(InvalidArgument("workshop: buffer deleted before its copy"));
    }
    std::shared_ptr<Storage> storage = Storage::Allocate(copy->byte_size(), stats);
    if (storage == nullptr) return copy->ready()->Set(ResourceExhausted("workshop: copy"));
    std::memcpy(storage->data(), contents->data(), copy->byte_size());
    copy->SetStorage(std::move(storage));
    copy->ready()->Set(Status());
  });
  *out = std::move(copy);
  return Status();
}

Status Client::CopyToHost(const std::shared_ptr<Buffer>& src, void* dst,
                          std::vector<int64_t> byte_strides, EventRef* done) {
  if (src->IsDeleted()) return InvalidArgument("workshop: the buffer was deleted");
  for (int64_t s : byte_strides) {
    if (s < 0) return InvalidArgument("workshop: negative host byte strides are not supported");
  }
  const int64_t size = src->byte_size();
  *done = WhenReady(
      src, [dst, size, width = ByteWidth(src->dtype()), dims = src->dims(), layout = src->layout(),
            strides = std::move(byte_strides)](const Storage& storage) {
        if (strides.empty() && layout.empty()) {
          std::memcpy(dst, storage.data(), size);
        } else if (size > 0) {
          StridedCopy(dst, strides.empty() ? RowMajorStrides(dims, width) : strides, storage.data(),
                      LayoutByteStrides(dims, layout, width), width, dims);
        }
      });
  return Status();
}

Status Client::CopyRawToHost(const std::shared_ptr<Buffer>& src, void* dst, int64_t offset,
                             int64_t size, EventRef* done) {
  if (src->IsDeleted()) return InvalidArgument("workshop: the buffer was deleted");
  if (offset < 0 || size < 0 || offset > src->byte_size() - size) {
    return InvalidArgument("workshop: raw copy of ", size, " bytes at offset ", offset,
                           " is outside the buffer's ", src->byte_size(), " bytes");
  }
  *done = WhenReady(src, [dst, offset, size](const Storage& storage) {
    // dst may be NULL for a copy of 0 bytes (memcpy to NULL is undefined even for 0).
    if (size > 0) std::memcpy(dst, static_cast<const char*>(storage.data()) + offset, size);
  });
  return Status();
}

Status Client::CreateAlias(DType dtype, const Dims& dims, Memory* memory,
                           std::shared_ptr<Buffer>* out) {
  WORKSHOP_RETURN_IF_ERROR(CheckShape(dtype, dims));
  *out = std::make_shared<Buffer>(dtype, dims, memory, Event::Create());
  return Status();
}

Status Client::FulfillAlias(const std::shared_ptr<Buffer>& alias,
                            const std::shared_ptr<Buffer>& source, Status error) {
  if (alias->ready()->IsReady()) {
    return FailedPrecondition("workshop: the alias buffer was already fulfilled");
  }
  if (source == nullptr) {
    alias->ready()->Set(std::move(error));
    return Status();
  }
  if (source->dtype() != alias->dtype() || source->dims() != alias->dims()) {
    return InvalidArgument("workshop: cannot fulfill an alias of ",
                           ShapeString(alias->dtype(), alias->dims()), " with a buffer of ",
                           ShapeString(source->dtype(), source->dims()));
  }
  if (source->layout() != alias->layout()) {  // The alias shares the source's storage.
    return InvalidArgument("workshop: cannot fulfill an alias in layout ",
                           LayoutString(alias->layout(), alias->dims().size()),
                           " with a buffer in layout ",
                           LayoutString(source->layout(), source->dims().size()));
  }
  source->ready()->OnReady([alias, source](const Status& status) {
    std::shared_ptr<Storage> storage = status.ok() ? source->storage() : nullptr;
    if (status.ok() && storage == nullptr) {
      return alias->ready()->Set(
          InvalidArgument("workshop: the buffer fulfilling an alias "
                          "was deleted"));
    }
    if (status.ok()) alias->SetStorage(std::move(storage));
    alias->ready()->Set(status);
  });
  return Status();
}

Status Client::Compile(const std::string& code, const std::string& format,
                       const std::string& options, std::unique_ptr<LoadedExecutable>* out) {
  std::shared_ptr<const Program> program;
  WORKSHOP_RETURN_IF_ERROR(
      CompileProgram(code, format, options, static_cast<int>(devices_.size()), &program));
  return Load(std::move(program), out);
}

Status Client::CompileProgram(const std::string& code, const std::string& format,
                              const std::string& options, int num_devices,
                              std::shared_ptr<const Program>* out, bool bounded_gil_wait) {
  auto program = std::make_shared<Program>();
  WORKSHOP_RETURN_IF_ERROR(
      bounded_gil_wait ? CompileWithPythonBounded(code, format, options, num_devices, program.get())
                       : CompileWithPython(code, format, options, num_devices, program.get()));
  *out = std::move(program);
  return Status();
}

Status Client::Load(std::shared_ptr<const Program> program,
                    std::unique_ptr<LoadedExecutable>* out) {
  std::vector<Device*> devices;
  for (const std::vector<int>& replica : program->device_assignment) {
    for (int id : replica) {
      Device* device = LookupDevice(id);
      if (device == nullptr) {
        return InvalidArgument("workshop: device assignment names device ", id,
                               " but the "
                               "client has ",
                               devices_.size(), " devices");
      }
      devices.push_back(device);
    }
  }
  // A program whose values cannot fit under the limit fails now, naming its need, rather
  // than at its first large allocation.
  const int64_t limit = devices.empty() ? 0 : devices[0]->memory()->stats()->bytes_limit();
  const int64_t peak = ComputeMemoryStats(*program).peak_bytes;
  if (limit > 0 && peak > limit) {
    return ResourceExhausted("workshop: ", program->name, " needs ", peak,
                             " bytes of device "
                             "memory at its peak, more than the device memory limit of ",
                             limit, " bytes (create option device_memory_limit)");
  }
  *out = std::make_unique<LoadedExecutable>(this, std::move(program), std::move(devices));
  return Status();
}

Status Client::DeserializeAndLoad(std::string_view blob, const std::string& options,
                                  std::unique_ptr<LoadedExecutable>* out) {
  SerializedProgram serialized;
  WORKSHOP_RETURN_IF_ERROR(DeserializeProgram(blob, &serialized));
  Program& stored = serialized.program;
  const int num_devices = static_cast<int>(devices_.size());
  if (!serialized.has_plan) {  // Another build wrote it: trust only the source.
    return Compile(stored.source_code, stored.source_format,
                   options.empty() ? stored.source_options : options, out);
  }
  if (!options.empty() && options != stored.source_options) {
    WORKSHOP_RETURN_IF_ERROR(RetargetWithPython(options, num_devices, &stored));
    stored.source_options = options;
  }
  return Load(std::make_shared<Program>(std::move(stored)), out);
}

void Client::Launch(const std::vector<Device*>& devices, std::vector<std::function<void()>> tasks) {
  std::lock_guard<std::mutex> lock(launch_mu_);
  for (size_t i = 0; i < devices.size(); ++i) devices[i]->worker().Schedule(std::move(tasks[i]));
}

Status Client::DmaMap(void* data, size_t size) {
  if (data == nullptr || size == 0) {
    return InvalidArgument("workshop: DmaMap needs a non-null pointer and a non-zero size");
  }
  std::lock_guard<std::mutex> lock(dma_mu_);
  if (!dma_mapped_.emplace(data, size).second) {
    return InvalidArgument("workshop: DmaMap: ", data, " is already mapped");
  }
  return Status();
}

Status Client::DmaUnmap(void* data) {
  std::lock_guard<std::mutex> lock(dma_mu_);
  if (dma_mapped_.erase(data) == 0) {
    return InvalidArgument("workshop: DmaUnmap: ", data, " was not mapped with DmaMap");
  }
  return Status();
}

}  // namespace workshop
