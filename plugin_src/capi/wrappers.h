// The C API's opaque types, defined as thin wrappers over runtime objects, plus the helpers
// every entry point uses. This is our counterpart of XLA's pjrt_c_api_wrapper_impl: all
// policy lives in runtime/, this layer only translates argument structs and errors.
#pragma once

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "capi/extensions.h"
#include "capi/handle.h"
#include "pjrt_c_api.h"
#include "runtime/async_transfer.h"
#include "runtime/buffer.h"
#include "runtime/client.h"
#include "runtime/executable.h"

// ---- Opaque types. ----

struct PJRT_Error {
  WORKSHOP_HANDLE(PJRT_Error)
  workshop::Status status;
};

struct PJRT_Event {
  WORKSHOP_HANDLE(PJRT_Event)
  workshop::EventRef event;
};

// One per memory kind, shared by every device description (a kind is the same everywhere).
// Allocated once and never freed; tagged so a handle of another type is refused.
struct PJRT_MemoryDescription {
  WORKSHOP_HANDLE(PJRT_MemoryDescription)
  workshop::MemoryKind kind;
};

// A device as a topology describes it: no runtime object behind it, so that a standalone
// topology (ahead-of-time compilation) can have them too.
struct PJRT_DeviceDescription {
  WORKSHOP_HANDLE(PJRT_DeviceDescription)
  int id;
  int process_index = 0;
  std::string kind, to_string, debug_string;
  std::vector<PJRT_NamedValue> attributes;
};

struct PJRT_TopologyDescription {
  WORKSHOP_HANDLE(PJRT_TopologyDescription)
  int num_devices;
  std::string platform_version;
  std::vector<std::unique_ptr<PJRT_DeviceDescription>> owned_descriptions;
  std::vector<PJRT_DeviceDescription*> descriptions;  // Indexed by device id.
  std::vector<PJRT_NamedValue> attributes;
  // The client's own topology (Client_TopologyDescription) lives as long as the client;
  // TopologyDescription_Destroy refuses it.
  bool owned_by_client = false;
};

struct PJRT_Memory {
  WORKSHOP_HANDLE(PJRT_Memory)
  workshop::Memory* memory;
  std::string to_string, debug_string;
  std::vector<PJRT_Device*> devices;  // Devices that can address this memory.
};

struct PJRT_Device {
  WORKSHOP_HANDLE(PJRT_Device)
  workshop::Device* device;
  PJRT_DeviceDescription* description;  // Owned by the client's topology.
  std::vector<PJRT_Memory*> memories;   // The default memory first.
};

struct PJRT_Client {
  WORKSHOP_HANDLE(PJRT_Client)
  std::unique_ptr<workshop::Client> client;
  std::unique_ptr<PJRT_TopologyDescription> topology;
  std::vector<std::unique_ptr<PJRT_Device>> owned_devices;
  std::vector<std::unique_ptr<PJRT_Memory>> owned_memories;
  std::vector<PJRT_Device*> devices;               // Indexed by device id (every process's).
  std::vector<PJRT_Memory*> memories;              // Indexed by memory id.
  std::vector<PJRT_Device*> addressable_devices;   // This process's, by local hardware id.
  std::vector<PJRT_Memory*> addressable_memories;  // Theirs, in memory id order.

  PJRT_Device* Wrap(const workshop::Device* device) const { return devices[device->id()]; }
  PJRT_Memory* Wrap(const workshop::Memory* memory) const { return memories[memory->id()]; }
};

struct PJRT_Buffer {
  WORKSHOP_HANDLE(PJRT_Buffer)
  PJRT_Buffer(std::shared_ptr<workshop::Buffer> b, PJRT_Client* c)
      : buffer(std::move(b)), client(c) {}

  std::shared_ptr<workshop::Buffer> buffer;
  PJRT_Client* client;
  // PJRT_Buffer_GetMemoryLayout hands out a pointer into this (the buffer's minor_to_major).
  std::once_flag layout_once;
  std::vector<int64_t> minor_to_major;
};

// A row-major layout of a given rank (the only layout this plugin uses). The caller owns
// (and destroys) those of the default-layout and buffer queries; an executable owns its
// parameter and output layouts, which PJRT_Layouts_MemoryLayout_Destroy refuses.
// A dense layout: a minor_to_major permutation (xla::Layout without tiles), explicit
// (never empty for rank > 0).
struct PJRT_Layouts_MemoryLayout {
  WORKSHOP_HANDLE(PJRT_Layouts_MemoryLayout)
  workshop::MinorToMajor minor_to_major;
  bool owned_by_executable = false;
};

// An executable without devices: everything the queries need, built once from the Program
// so concurrent queries only read.
struct PJRT_Executable {
  WORKSHOP_HANDLE(PJRT_Executable)
  explicit PJRT_Executable(std::shared_ptr<const workshop::Program> program);

  std::shared_ptr<const workshop::Program> program;
  std::vector<PJRT_Buffer_Type> output_types;
  std::vector<int64_t> output_dims;
  std::vector<size_t> output_dim_sizes;
  std::vector<const char*> output_memory_kinds;
  std::vector<size_t> output_memory_kind_sizes;
  std::vector<PJRT_NamedValue> cost_properties;
  workshop::CompiledMemoryStats memory_stats;
  std::vector<std::unique_ptr<PJRT_Layouts_MemoryLayout>> parameter_layouts, output_layouts;
  std::vector<PJRT_Layouts_MemoryLayout*> parameter_layout_ptrs, output_layout_ptrs;
};

struct PJRT_LoadedExecutable {
  WORKSHOP_HANDLE(PJRT_LoadedExecutable)
  std::shared_ptr<workshop::LoadedExecutable> executable;
  PJRT_Client* client;
  std::vector<PJRT_Device*> devices;
};

struct PJRT_AsyncHostToDeviceTransferManager {
  WORKSHOP_HANDLE(PJRT_AsyncHostToDeviceTransferManager)
  std::unique_ptr<workshop::AsyncTransfer> transfer;
  PJRT_Client* client;
};

// Carries per-execution user data for FFI handlers; this plugin has none, so it is empty.
struct PJRT_ExecuteContext {
  WORKSHOP_HANDLE(PJRT_ExecuteContext)
};

// The pending alias of PJRT_Client_CreateAliasBuffer, consumed by FulfillAliasBuffer.
struct PJRT_FulfillAliasBufferCallback {
  WORKSHOP_HANDLE(PJRT_FulfillAliasBufferCallback)
  std::shared_ptr<workshop::Buffer> alias;
};

// Owned byte strings handed out with a deleter.
struct PJRT_SerializedExecutable {
  std::string bytes;
};
struct PJRT_SerializedTopology {
  std::string bytes;
};
struct PJRT_Layouts_SerializedLayout {
  std::string bytes;
};

namespace workshop {

// The integer a caller stored in an enum field, read without loading the enum type: a
// value outside an enum's range is undefined behaviour to load (UBSan's -fsanitize=enum,
// part of -fsanitize=undefined, halts on it), and a hostile caller stores any value.
template <typename E>
int64_t RawEnum(const E& field) {
  static_assert(std::is_enum_v<E>);
  std::underlying_type_t<E> value;
  std::memcpy(&value, &field, sizeof value);
  return static_cast<int64_t>(value);
}

// A caller's bool field: any non-zero byte is true. Loading a bool that holds neither 0
// nor 1 is undefined behaviour (UBSan's bool check), and a C caller can store any byte.
inline bool RawBool(const bool& field) {
  unsigned char byte;
  std::memcpy(&byte, &field, 1);
  return byte != 0;
}

// ---- Errors. ----

// `status` with a message that is valid UTF-8 without NUL bytes: any other byte becomes
// "\xNN". Messages quote caller strings (option names, program formats, error texts), and
// jaxlib turns the message into a Python str, which must decode.
Status PrintableStatus(Status status);

// Null for OK: the C API's "no error".
inline PJRT_Error* ToPjrt(Status status) {
  if (status.ok()) return nullptr;
  return new PJRT_Error{PrintableStatus(std::move(status))};
}

#define WORKSHOP_RETURN_IF_PJRT_ERROR(expr)                   \
  do {                                                        \
    ::workshop::Status _st = (expr);                          \
    if (!_st.ok()) return ::workshop::ToPjrt(std::move(_st)); \
  } while (0)

// A PJRT_NamedValue viewing `name` (a string literal or otherwise longer-lived string).
PJRT_NamedValue Int64Value(const char* name, int64_t value);
// The attributes every device description reports (device_attributes.cc).
std::vector<PJRT_NamedValue> DeviceAttributes(int num_devices);
PJRT_NamedValue FloatValue(const char* name, float value);

// The memory a call targets: `memory` if given (jaxlib always passes it, with device =
// NULL), else the device's default memory. Either must be `client`'s.
Status TargetMemory(const PJRT_Client* client, PJRT_Device* device, PJRT_Memory* memory,
                    const char* fn, Memory** out);
// INVALID_ARGUMENT unless `device` is one of `client`'s: a buffer placed on another
// client's device would outlive that client's runtime (its memories and workers).
Status SameClient(const PJRT_Client* client, const Device* device, const char* fn);

// Byte strides of a host array of `dims` in `layout` (NULL or row-major: empty, meaning
// dense row-major). Tiled layouts without tiles (any dimension order) and strided layouts
// with non-negative strides are supported. `fn` names the caller in errors.
Status HostByteStrides(const PJRT_Buffer_MemoryLayout* layout, DType dtype, const Dims& dims,
                       const char* fn, std::vector<int64_t>* byte_strides);

// The client's topology description (devices and attributes) and a standalone one.
// With several processes, `num_devices` counts all of them and device d belongs to process
// d / devices_per_process.
std::unique_ptr<PJRT_TopologyDescription> MakeTopology(int num_devices,
                                                       int devices_per_process = 0);
std::string PlatformVersion(int num_devices);

static_assert(static_cast<int>(DType::kF32) == PJRT_Buffer_Type_F32);
static_assert(static_cast<int>(DType::kPred) == PJRT_Buffer_Type_PRED);
static_assert(static_cast<int>(DType::kC128) == PJRT_Buffer_Type_C128);
static_assert(static_cast<int>(Code::kUnimplemented) == PJRT_Error_Code_UNIMPLEMENTED);

}  // namespace workshop
