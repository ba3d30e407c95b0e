// Client, device, device description and memory entry points.
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "capi/api.h"
#include "capi/wrappers.h"

namespace workshop::capi {
namespace {

std::string_view NameOf(const PJRT_NamedValue& option) {
  return std::string_view(option.name, option.name_size);
}

// num_devices may arrive as an int64 (register_plugin options) or as a string
// (jax_pjrt_client_create_options="num_devices:2").
Status ParseNumDevices(const PJRT_NamedValue& option, int* out) {
  int64_t value = -1;
  if (option.type == PJRT_NamedValue_kInt64) {
    value = option.int64_value;
  } else if (option.type == PJRT_NamedValue_kString) {
    std::string text(option.string_value, option.value_size);
    char* end = nullptr;
    value = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') value = -1;
  }
  if (value < 1 || value > 1024) {
    return InvalidArgument("workshop: create option 'num_devices' must be an integer in "
                           "[1, 1024]");
  }
  *out = static_cast<int>(value);
  return Status();
}

// Bytes, as an int64 or a decimal string; 0 turns the limit off.
Status ParseMemoryLimit(const PJRT_NamedValue& option, int64_t* out) {
  int64_t value = -1;
  if (option.type == PJRT_NamedValue_kInt64) {
    value = option.int64_value;
  } else if (option.type == PJRT_NamedValue_kString) {
    std::string text(option.string_value, option.value_size);
    char* end = nullptr;
    errno = 0;
    value = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0) value = -1;
  }
  if (value < 0) {
    return InvalidArgument("workshop: create option 'device_memory_limit' must be a "
                           "non-negative integer (bytes; 0 = no limit)");
  }
  *out = value;
  return Status();
}

Status ParseOptions(const PJRT_NamedValue* options, size_t num_options,
                    ClientOptions* parsed) {
  std::string unknown;
  for (size_t i = 0; i < num_options; ++i) {
    if (NameOf(options[i]) == "num_devices") {
      WORKSHOP_RETURN_IF_ERROR(ParseNumDevices(options[i], &parsed->num_devices));
    } else if (NameOf(options[i]) == "device_memory_limit") {
      WORKSHOP_RETURN_IF_ERROR(ParseMemoryLimit(options[i], &parsed->device_memory_limit));
    } else {
      unknown += (unknown.empty() ? "'" : ", '") + std::string(NameOf(options[i])) + "'";
    }
  }
  if (!unknown.empty()) {
    return InvalidArgument("workshop: unknown client create option(s) ", unknown,
                           "; the supported options are 'num_devices' and "
                           "'device_memory_limit'");
  }
  return Status();
}

}  // namespace

// The KV-store callbacks are ignored: jaxlib leaves them uninitialized (garbage, not NULL)
// unless jax.distributed is active, and this plugin is single-process.
PJRT_Error* Client_Create(PJRT_Client_Create_Args* args) {
  ClientOptions options;
  WORKSHOP_RETURN_IF_PJRT_ERROR(ParseOptions(args->create_options, args->num_options, &options));
  auto wrapper = std::make_unique<PJRT_Client>();
  wrapper->client = std::make_unique<Client>(options);
  wrapper->topology = MakeTopology(options.num_devices);
  wrapper->topology->owned_by_client = true;
  // Memory ids number the device memories first, then the pinned_host ones (device.h).
  wrapper->memories.resize(options.num_devices * kMemoryKinds.size());
  for (const auto& device : wrapper->client->devices()) {
    auto pjrt_device = std::make_unique<PJRT_Device>();
    pjrt_device->device = device.get();
    pjrt_device->description = wrapper->topology->descriptions[device->id()];
    for (Memory& memory : device->memories()) {
      auto pjrt_memory = std::make_unique<PJRT_Memory>();
      pjrt_memory->memory = &memory;
      pjrt_memory->to_string = memory.ToString();
      pjrt_memory->debug_string = memory.DebugString();
      pjrt_memory->devices = {pjrt_device.get()};
      pjrt_device->memories.push_back(pjrt_memory.get());
      wrapper->memories[memory.id()] = pjrt_memory.get();
      wrapper->owned_memories.push_back(std::move(pjrt_memory));
    }
    wrapper->devices.push_back(pjrt_device.get());
    wrapper->owned_devices.push_back(std::move(pjrt_device));
  }
  args->client = wrapper.release();
  return nullptr;
}

// Waits for queued work (the device workers drain before joining), then frees everything.
PJRT_Error* Client_Destroy(PJRT_Client_Destroy_Args* args) {
  delete args->client;
  return nullptr;
}

PJRT_Error* Client_PlatformName(PJRT_Client_PlatformName_Args* args) {
  args->platform_name = Client::kPlatformName;
  args->platform_name_size = std::strlen(Client::kPlatformName);
  return nullptr;
}

PJRT_Error* Client_ProcessIndex(PJRT_Client_ProcessIndex_Args* args) {
  args->process_index = 0;
  return nullptr;
}

PJRT_Error* Client_PlatformVersion(PJRT_Client_PlatformVersion_Args* args) {
  const std::string& version = args->client->topology->platform_version;
  args->platform_version = version.data();
  args->platform_version_size = version.size();
  return nullptr;
}

PJRT_Error* Client_Devices(PJRT_Client_Devices_Args* args) {
  args->devices = args->client->devices.data();
  args->num_devices = args->client->devices.size();
  return nullptr;
}

PJRT_Error* Client_AddressableDevices(PJRT_Client_AddressableDevices_Args* args) {
  args->addressable_devices = args->client->devices.data();
  args->num_addressable_devices = args->client->devices.size();
  return nullptr;
}

PJRT_Error* Client_LookupDevice(PJRT_Client_LookupDevice_Args* args) {
  Device* device = args->client->client->LookupDevice(args->id);
  if (device == nullptr) {
    return ToPjrt(InvalidArgument("No matching device found for device_id ", args->id));
  }
  args->device = args->client->Wrap(device);
  return nullptr;
}

// Single process: the local hardware id is the global id.
PJRT_Error* Client_LookupAddressableDevice(PJRT_Client_LookupAddressableDevice_Args* args) {
  Device* device = args->client->client->LookupDevice(args->local_hardware_id);
  if (device == nullptr) {
    return ToPjrt(InvalidArgument("No matching device found for local_hardware_id ",
                                  args->local_hardware_id));
  }
  args->addressable_device = args->client->Wrap(device);
  return nullptr;
}

PJRT_Error* Client_AddressableMemories(PJRT_Client_AddressableMemories_Args* args) {
  args->addressable_memories = args->client->memories.data();
  args->num_addressable_memories = args->client->memories.size();
  return nullptr;
}

// Replica r, partition p runs on device (r * partitions + p) modulo the device count, the
// same round-robin XLA's CPU client uses.
PJRT_Error* Client_DefaultDeviceAssignment(PJRT_Client_DefaultDeviceAssignment_Args* args) {
  const size_t needed = static_cast<size_t>(args->num_replicas) * args->num_partitions;
  if (args->default_assignment_size < needed) {
    return ToPjrt(FailedPrecondition(
        "PJRT_Client_DefaultDeviceAssignment: `default_assignment_size` ",
        args->default_assignment_size, " < `num_replicas * num_partitions`, ",
        args->num_replicas, " * ", args->num_partitions, " = ", needed));
  }
  const size_t devices = args->client->devices.size();
  for (size_t i = 0; i < needed; ++i) args->default_assignment[i] = static_cast<int>(i % devices);
  return nullptr;
}

// The client's topology: it lives as long as the client, the caller must not destroy it.
PJRT_Error* Client_TopologyDescription(PJRT_Client_TopologyDescription_Args* args) {
  args->topology = args->client->topology.get();
  return nullptr;
}

PJRT_Error* Client_DmaMap(PJRT_Client_DmaMap_Args* args) {
  return ToPjrt(args->client->client->DmaMap(args->data, args->size));
}

PJRT_Error* Client_DmaUnmap(PJRT_Client_DmaUnmap_Args* args) {
  return ToPjrt(args->client->client->DmaUnmap(args->data));
}

PJRT_Error* DeviceDescription_Id(PJRT_DeviceDescription_Id_Args* args) {
  args->id = args->device_description->id;
  return nullptr;
}

PJRT_Error* DeviceDescription_ProcessIndex(PJRT_DeviceDescription_ProcessIndex_Args* args) {
  args->process_index = 0;
  return nullptr;
}

PJRT_Error* DeviceDescription_Attributes(PJRT_DeviceDescription_Attributes_Args* args) {
  args->attributes = args->device_description->attributes.data();
  args->num_attributes = args->device_description->attributes.size();
  return nullptr;
}

PJRT_Error* DeviceDescription_Kind(PJRT_DeviceDescription_Kind_Args* args) {
  args->device_kind = args->device_description->kind.data();
  args->device_kind_size = args->device_description->kind.size();
  return nullptr;
}

PJRT_Error* DeviceDescription_DebugString(PJRT_DeviceDescription_DebugString_Args* args) {
  args->debug_string = args->device_description->debug_string.data();
  args->debug_string_size = args->device_description->debug_string.size();
  return nullptr;
}

PJRT_Error* DeviceDescription_ToString(PJRT_DeviceDescription_ToString_Args* args) {
  args->to_string = args->device_description->to_string.data();
  args->to_string_size = args->device_description->to_string.size();
  return nullptr;
}

PJRT_Error* Device_GetDescription(PJRT_Device_GetDescription_Args* args) {
  args->device_description = args->device->description;
  return nullptr;
}

PJRT_Error* Device_IsAddressable(PJRT_Device_IsAddressable_Args* args) {
  args->is_addressable = true;
  return nullptr;
}

PJRT_Error* Device_LocalHardwareId(PJRT_Device_LocalHardwareId_Args* args) {
  args->local_hardware_id = args->device->device->id();
  return nullptr;
}

PJRT_Error* Device_AddressableMemories(PJRT_Device_AddressableMemories_Args* args) {
  args->memories = args->device->memories.data();
  args->num_memories = args->device->memories.size();
  return nullptr;
}

PJRT_Error* Device_DefaultMemory(PJRT_Device_DefaultMemory_Args* args) {
  args->memory = args->device->memories.front();
  return nullptr;
}

PJRT_Error* Memory_Id(PJRT_Memory_Id_Args* args) {
  args->id = args->memory->memory->id();
  return nullptr;
}

PJRT_Error* Memory_Kind(PJRT_Memory_Kind_Args* args) {
  const char* kind = args->memory->memory->kind_name();
  args->kind = kind;
  args->kind_size = std::strlen(kind);
  return nullptr;
}

PJRT_Error* Memory_Kind_Id(PJRT_Memory_Kind_Id_Args* args) {
  args->kind_id = static_cast<int>(args->memory->memory->kind());
  return nullptr;
}

PJRT_Error* Memory_DebugString(PJRT_Memory_DebugString_Args* args) {
  args->debug_string = args->memory->debug_string.data();
  args->debug_string_size = args->memory->debug_string.size();
  return nullptr;
}

PJRT_Error* Memory_ToString(PJRT_Memory_ToString_Args* args) {
  args->to_string = args->memory->to_string.data();
  args->to_string_size = args->memory->to_string.size();
  return nullptr;
}

PJRT_Error* Memory_AddressableByDevices(PJRT_Memory_AddressableByDevices_Args* args) {
  args->devices = args->memory->devices.data();
  args->num_devices = args->memory->devices.size();
  return nullptr;
}

// ---- Topologies: the devices of a machine without a client, for ahead-of-time
// compilation (PJRT_Compile). The topology name is ignored (there is one kind of
// machine); the create option "num_devices" sets its size, as for a client.

namespace {

constexpr std::string_view kTopologyTag = "workshop-topology-v1 num_devices=";

}  // namespace

PJRT_Error* TopologyDescription_Create(PJRT_TopologyDescription_Create_Args* args) {
  ClientOptions options;
  WORKSHOP_RETURN_IF_PJRT_ERROR(ParseOptions(args->create_options, args->num_options, &options));
  args->topology = MakeTopology(options.num_devices).release();
  return nullptr;
}

PJRT_Error* TopologyDescription_Destroy(PJRT_TopologyDescription_Destroy_Args* args) {
  if (args->topology->owned_by_client) {
    return ToPjrt(InvalidArgument("PJRT_TopologyDescription_Destroy: topology belongs to its "
                                  "client (PJRT_Client_TopologyDescription); it is destroyed "
                                  "with the client"));
  }
  delete args->topology;
  return nullptr;
}

PJRT_Error* TopologyDescription_PlatformName(PJRT_TopologyDescription_PlatformName_Args* args) {
  args->platform_name = Client::kPlatformName;
  args->platform_name_size = std::strlen(Client::kPlatformName);
  return nullptr;
}

PJRT_Error* TopologyDescription_PlatformVersion(
    PJRT_TopologyDescription_PlatformVersion_Args* args) {
  args->platform_version = args->topology->platform_version.data();
  args->platform_version_size = args->topology->platform_version.size();
  return nullptr;
}

PJRT_Error* TopologyDescription_GetDeviceDescriptions(
    PJRT_TopologyDescription_GetDeviceDescriptions_Args* args) {
  args->descriptions = args->topology->descriptions.data();
  args->num_descriptions = args->topology->descriptions.size();
  return nullptr;
}

PJRT_Error* TopologyDescription_Serialize(PJRT_TopologyDescription_Serialize_Args* args) {
  auto* serialized =
      new PJRT_SerializedTopology{StrCat(kTopologyTag, args->topology->num_devices)};
  args->serialized_bytes = serialized->bytes.data();
  args->serialized_bytes_size = serialized->bytes.size();
  args->serialized_topology = serialized;
  args->serialized_topology_deleter = [](PJRT_SerializedTopology* s) { delete s; };
  return nullptr;
}

PJRT_Error* TopologyDescription_Deserialize(PJRT_TopologyDescription_Deserialize_Args* args) {
  std::string_view bytes(args->serialized_topology, args->serialized_topology_size);
  int num_devices = 0;
  if (bytes.starts_with(kTopologyTag)) {
    std::string count(bytes.substr(kTopologyTag.size()));
    char* end = nullptr;
    num_devices = static_cast<int>(std::strtol(count.c_str(), &end, 10));
    if (count.empty() || *end != '\0') num_devices = 0;
  }
  if (num_devices < 1 || num_devices > 1024) {
    return ToPjrt(InvalidArgument("PJRT_TopologyDescription_Deserialize: not a serialized "
                                  "workshop topology"));
  }
  args->topology = MakeTopology(num_devices).release();
  return nullptr;
}

PJRT_Error* TopologyDescription_Attributes(PJRT_TopologyDescription_Attributes_Args* args) {
  args->attributes = args->topology->attributes.data();
  args->num_attributes = args->topology->attributes.size();
  return nullptr;
}

}  // namespace workshop::capi
