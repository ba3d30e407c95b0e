#include "runtime/device.h"

#include "runtime/status.h"

namespace workshop {

std::string Memory::ToString() const {
  return StrCat("WorkshopMemory(id=", id_, ", kind=", kKind, ")");
}

std::string Memory::DebugString() const {
  return StrCat("workshop:", device_->id(), ":", kKind);
}

Device::Device(Client* client, int id)
    : client_(client), id_(id), memory_(id, this), worker_(StrCat("workshop-dev", id)) {}

std::string Device::ToString() const { return StrCat("WorkshopDevice(id=", id_, ")"); }

std::string Device::DebugString() const { return StrCat("workshop:", id_); }

}  // namespace workshop
