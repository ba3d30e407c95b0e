// The C API's opaque types, defined as thin wrappers over runtime objects, plus the helpers
// every entry point uses. This is our counterpart of XLA's pjrt_c_api_wrapper_impl: all
// policy lives in runtime/, this layer only translates argument structs and errors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pjrt_c_api.h"
#include "runtime/buffer.h"
#include "runtime/client.h"
#include "runtime/executable.h"

// ---- Opaque types. ----

struct PJRT_Error {
  workshop::Status status;
};

struct PJRT_Event {
  workshop::EventRef event;
};

struct PJRT_DeviceDescription {
  workshop::Device* device;
  std::string kind, to_string, debug_string;
  std::vector<PJRT_NamedValue> attributes;
};

struct PJRT_Memory {
  workshop::Memory* memory;
  std::string kind, to_string, debug_string;
  std::vector<PJRT_Device*> devices;  // Devices that can address this memory.
};

struct PJRT_Device {
  workshop::Device* device;
  PJRT_DeviceDescription description;
  std::vector<PJRT_Memory*> memories;
};

struct PJRT_Client {
  std::unique_ptr<workshop::Client> client;
  std::vector<std::unique_ptr<PJRT_Device>> owned_devices;
  std::vector<std::unique_ptr<PJRT_Memory>> owned_memories;
  std::vector<PJRT_Device*> devices;     // Indexed by device id.
  std::vector<PJRT_Memory*> memories;    // Indexed by memory id.
  std::string platform_version;

  PJRT_Device* Wrap(const workshop::Device* device) const { return devices[device->id()]; }
  PJRT_Memory* Wrap(const workshop::Memory* memory) const { return memories[memory->id()]; }
};

struct PJRT_Buffer {
  std::shared_ptr<workshop::Buffer> buffer;
  PJRT_Client* client;
};

struct PJRT_Executable {
  std::shared_ptr<workshop::LoadedExecutable> executable;
  // Filled on first use; each query hands out pointers into these.
  std::vector<PJRT_Buffer_Type> output_types;
  std::vector<int64_t> output_dims;
  std::vector<size_t> output_dim_sizes;
  std::vector<const char*> output_memory_kinds;
  std::vector<size_t> output_memory_kind_sizes;
};

struct PJRT_LoadedExecutable {
  std::shared_ptr<workshop::LoadedExecutable> executable;
  PJRT_Client* client;
  std::vector<PJRT_Device*> devices;
};

namespace workshop {

// ---- Errors. ----

// Null for OK: the C API's "no error".
inline PJRT_Error* ToPjrt(Status status) {
  if (status.ok()) return nullptr;
  return new PJRT_Error{std::move(status)};
}

#define WORKSHOP_RETURN_IF_PJRT_ERROR(expr)  \
  do {                                       \
    ::workshop::Status _st = (expr);         \
    if (!_st.ok()) return ::workshop::ToPjrt(std::move(_st)); \
  } while (0)

// Every Args struct starts with struct_size. jaxlib may be newer than our header and pass a
// larger struct (it only appends fields), so anything at least our size is accepted.
template <typename Args>
Status CheckStructSize(const Args* args, size_t expected, const char* function) {
  if (args == nullptr) return InvalidArgument(function, ": args is NULL");
  if (args->struct_size < expected) {
    return InvalidArgument(function, ": struct_size ", args->struct_size,
                           " is smaller than this plugin's ", expected,
                           " (a caller built against an older pjrt_c_api.h?)");
  }
  return Status();
}

#define WORKSHOP_CHECK_ARGS(Name) \
  WORKSHOP_RETURN_IF_PJRT_ERROR(  \
      ::workshop::CheckStructSize(args, Name##_Args_STRUCT_SIZE, #Name))

static_assert(static_cast<int>(DType::kF32) == PJRT_Buffer_Type_F32);
static_assert(static_cast<int>(DType::kPred) == PJRT_Buffer_Type_PRED);
static_assert(static_cast<int>(DType::kC128) == PJRT_Buffer_Type_C128);
static_assert(static_cast<int>(Code::kUnimplemented) == PJRT_Error_Code_UNIMPLEMENTED);

}  // namespace workshop
