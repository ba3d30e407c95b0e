// Helpers shared by the api_*.cc files (declared in wrappers.h).
#include "capi/wrappers.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string_view>

namespace workshop {

PJRT_NamedValue Int64Value(const char* name, int64_t value) {
  PJRT_NamedValue v{};
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = name;
  v.name_size = std::strlen(name);
  v.type = PJRT_NamedValue_kInt64;
  v.int64_value = value;
  v.value_size = 1;
  return v;
}

PJRT_NamedValue FloatValue(const char* name, float value) {
  PJRT_NamedValue v = Int64Value(name, 0);
  v.type = PJRT_NamedValue_kFloat;
  v.float_value = value;
  return v;
}

namespace {

// The length of the well-formed UTF-8 sequence starting at s[i] (RFC 3629, section 4:
// no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
size_t Utf8Length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  if (b >= 0x01 && b <= 0x7F) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

Status PrintableStatus(Status status) {
  const std::string& message = status.message();
  size_t i = 0;
  while (i < message.size() && Utf8Length(message, i) != 0) i += Utf8Length(message, i);
  if (i == message.size()) return status;
  std::string out = message.substr(0, i);
  static constexpr char kHex[] = "0123456789abcdef";
  while (i < message.size()) {
    if (const size_t n = Utf8Length(message, i); n != 0) {
      out.append(message, i, n);
      i += n;
    } else {
      const auto b = static_cast<unsigned char>(message[i++]);
      out += {'\\', 'x', kHex[b >> 4], kHex[b & 15]};
    }
  }
  return Status(status.code(), std::move(out));
}

Status TargetMemory(const PJRT_Client* client, PJRT_Device* device, PJRT_Memory* memory,
                    const char* fn, Memory** out) {
  if (memory != nullptr) {
    *out = memory->memory;
  } else if (device != nullptr) {
    *out = device->device->memory();
  } else {
    return InvalidArgument(fn, ": neither a device nor a memory was given");
  }
  WORKSHOP_RETURN_IF_ERROR(SameClient(client, (*out)->device(), fn));
  if (!(*out)->device()->addressable()) {
    return InvalidArgument(fn, ": ", (*out)->DebugString(), " belongs to process ",
                           (*out)->device()->process_index(),
                           "; only this process's "
                           "devices are addressable here");
  }
  return Status();
}

Status SameClient(const PJRT_Client* client, const Device* device, const char* fn) {
  if (device->client() != client->client.get()) {
    return InvalidArgument(fn, ": ", Device::DebugString(device->id()),
                           " belongs to another "
                           "PJRT_Client; "
                           "buffers move between clients only through the host");
  }
  return Status();
}

namespace {

Status TiledByteStrides(const PJRT_Buffer_MemoryLayout_Tiled& tiled, DType dtype, const Dims& dims,
                        const char* fn, std::vector<int64_t>* byte_strides) {
  const size_t rank = dims.size();
  if (tiled.minor_to_major_size != rank) {  // Before reading the caller's array.
    return InvalidArgument(fn, ": a layout's minor_to_major has ", tiled.minor_to_major_size,
                           " entries for ", ShapeString(dtype, dims));
  }
  std::vector<int64_t> order(tiled.minor_to_major,
                             tiled.minor_to_major + tiled.minor_to_major_size);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(rank);
  std::iota(iota.begin(), iota.end(), 0);
  if (tiled.num_tiles != 0 || sorted != iota) {
    return InvalidArgument(fn, ": layouts must be dense (a permutation of the ", rank,
                           " dimensions, no tiles) for ", ShapeString(dtype, dims));
  }
  // Dense in the given dimension order: the most minor dimension has the element stride.
  byte_strides->assign(rank, 0);
  int64_t stride = ByteWidth(dtype);
  for (int64_t d : order) {
    (*byte_strides)[d] = stride;
    stride *= dims[d];
  }
  return Status();
}

}  // namespace

Status HostByteStrides(const PJRT_Buffer_MemoryLayout* layout, DType dtype, const Dims& dims,
                       const char* fn, std::vector<int64_t>* byte_strides) {
  byte_strides->clear();
  if (layout == nullptr) return Status();
  const size_t rank = dims.size();
  if (layout->type == PJRT_Buffer_MemoryLayout_Type_Strides) {
    const PJRT_Buffer_MemoryLayout_Strides& strides = layout->strides;
    if (strides.num_byte_strides != rank) {
      return InvalidArgument(fn, ": ", strides.num_byte_strides, " byte strides for ",
                             ShapeString(dtype, dims));
    }
    byte_strides->assign(strides.byte_strides, strides.byte_strides + rank);
    for (int64_t stride : *byte_strides) {
      if (stride < 0) {
        return InvalidArgument(fn, ": negative byte strides are not supported (",
                               ShapeString(dtype, dims), ")");
      }
    }
    int64_t lowest = 0, end = 0;
    if (!CheckedStridedExtent(ByteWidth(dtype), dims, *byte_strides, &lowest, &end)) {
      return InvalidArgument(fn, ": the byte strides of ", ShapeString(dtype, dims),
                             " reach past 2^63 bytes");
    }
  } else {  // Tiled (check.h refuses any other type).
    WORKSHOP_RETURN_IF_ERROR(TiledByteStrides(layout->tiled, dtype, dims, fn, byte_strides));
  }
  // Dense row-major (strides of size-1 dimensions don't matter): say so with no strides.
  int64_t dense = ByteWidth(dtype);
  bool row_major = true;
  for (size_t d = rank; d-- > 0;) {
    row_major &= dims[d] <= 1 || (*byte_strides)[d] == dense;
    dense *= dims[d];
  }
  if (row_major) byte_strides->clear();
  return Status();
}
std::string PlatformVersion(int num_devices) {
  return StrCat("workshop ", WORKSHOP_VERSION, " (", num_devices, " virtual CPU devices)");
}

std::unique_ptr<PJRT_TopologyDescription> MakeTopology(int num_devices, int devices_per_process) {
  auto topology = std::make_unique<PJRT_TopologyDescription>();
  topology->num_devices = num_devices;
  topology->platform_version = PlatformVersion(num_devices);
  topology->attributes = {Int64Value("num_devices", num_devices)};
  for (int id = 0; id < num_devices; ++id) {
    auto description = std::make_unique<PJRT_DeviceDescription>();
    description->id = id;
    description->process_index = devices_per_process > 0 ? id / devices_per_process : 0;
    description->kind = Device::kKind;
    description->to_string = Device::ToString(id);
    description->debug_string = Device::DebugString(id);
    description->attributes = DeviceAttributes(num_devices);
    topology->descriptions.push_back(description.get());
    topology->owned_descriptions.push_back(std::move(description));
  }
  return topology;
}

}  // namespace workshop
