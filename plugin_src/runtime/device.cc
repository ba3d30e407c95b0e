#include "runtime/device.h"

#include "runtime/status.h"

namespace workshop {

const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kDevice: return "device";
    case MemoryKind::kPinnedHost: return "pinned_host";
  }
  return "unknown";
}

std::optional<MemoryKind> ParseMemoryKind(std::string_view name) {
  for (MemoryKind kind : kMemoryKinds) {
    if (name == MemoryKindName(kind)) return kind;
  }
  return std::nullopt;
}

Memory::Memory(int id, MemoryKind kind, Device* device) : id_(id), kind_(kind), device_(device) {}

std::string Memory::ToString() const {
  return StrCat("WorkshopMemory(id=", id_, ", kind=", kind_name(), ")");
}

std::string Memory::DebugString() const {
  return StrCat(Device::DebugString(device_->id()), ":", kind_name());
}

Device::Device(Client* client, int id, int num_devices, int process_index, int local_id,
               bool addressable)
    : client_(client),
      id_(id),
      process_index_(process_index),
      local_id_(local_id),
      memories_{Memory(id, MemoryKind::kDevice, this),
                Memory(num_devices + id, MemoryKind::kPinnedHost, this)},
      worker_(addressable ? std::make_unique<Worker>(StrCat("workshop-dev", id)) : nullptr) {}

Memory* Device::memory(MemoryKind kind) {
  for (Memory& memory : memories_) {
    if (memory.kind() == kind) return &memory;
  }
  return memory();
}

std::string Device::ToString(int id) { return StrCat("WorkshopDevice(id=", id, ")"); }

std::string Device::DebugString(int id) { return StrCat("workshop:", id); }

}  // namespace workshop
