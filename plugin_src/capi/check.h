// The checked entry every PJRT_Api slot goes through (api_table.cc), and what it checks per
// function. Included only by api_table.cc.
//
// Before an implementation runs, Entry<> checks, in this order:
//   * args is not NULL and args->struct_size is at least this plugin's size for the struct
//     (a larger struct comes from a newer caller and is accepted: fields are only appended);
//   * the function's CheckIn overload below: required handles are non-NULL and alive
//     (handle.h), and every (pointer, size) pair the function reads has a pointer unless
//     its size is 0 (std::string(nullptr, n) threw std::logic_error across extern "C"),
//     nested arrays of structs the call reads (shape specs, named values) are at least our
//     size, and enums the caller chooses (error codes, host buffer semantics) are in range;
// and it turns any C++ exception the implementation throws (bad_alloc included) into a
// PJRT_Error instead of letting it cross the C boundary (which aborts the process).
// Failures are INVALID_ARGUMENT naming the function, the argument and what was wrong. The
// implementations then only check what depends on the objects' state.
//
// The two void slots (Error_Destroy, Error_Message) cannot report: on a bad handle they do
// nothing / return a fixed message, which is what keeps jaxlib's error path from crashing.
#pragma once

#include <concepts>
#include <exception>
#include <new>

#include "capi/trace_describe.h"
#include "capi/wrappers.h"

namespace workshop::capi::check {

// Collects the first failure of a function's argument checks.
class Check {
 public:
  explicit Check(const char* function) : function_(function) {}
  bool ok() const { return status_.ok(); }
  Status& status() { return status_; }

  // A required handle: non-NULL, and alive and of its type where the type is tagged.
  template <typename T>
  void Handle(const T* handle, const char* field) {
    if (!ok()) return;
    if (handle == nullptr) return Fail(field, " is NULL");
    Tag(handle, field);
  }
  // A handle that may be NULL; if given it must be alive.
  template <typename T>
  void OptionalHandle(const T* handle, const char* field) {
    if (ok() && handle != nullptr) Tag(handle, field);
  }
  void Pointer(const void* pointer, const char* field) {
    if (ok() && pointer == nullptr) Fail(field, " is NULL");
  }
  // An input array or string of `size` elements: the pointer may be NULL only if size is 0.
  void Array(const void* pointer, size_t size, const char* field, const char* size_field) {
    if (ok() && pointer == nullptr && size != 0) {
      Fail(field, " is NULL but ", size_field, " is ", size);
    }
  }
  void NamedValues(const PJRT_NamedValue* values, size_t count, const char* field,
                   const char* count_field) {
    Array(values, count, field, count_field);
    for (size_t i = 0; ok() && values != nullptr && i < count; ++i) {
      const PJRT_NamedValue& v = values[i];
      if (v.struct_size < PJRT_NamedValue_STRUCT_SIZE) {
        Fail(field, "[", i, "].struct_size ", v.struct_size, " is smaller than this plugin's ",
             PJRT_NamedValue_STRUCT_SIZE);
      }
      if (v.name == nullptr && v.name_size != 0) Fail(field, "[", i, "].name is NULL");
      if (const int64_t type = RawEnum(v.type);
          type < PJRT_NamedValue_kString || type > PJRT_NamedValue_kBool) {
        Fail(field, "[", i, "].type is ", type, ", not a PJRT_NamedValue_Type");
      }
      if (!ok()) return;
      if (v.type == PJRT_NamedValue_kString && v.string_value == nullptr && v.value_size != 0) {
        Fail(field, "[", i, "].string_value is NULL");
      }
      if (v.type == PJRT_NamedValue_kInt64List && v.int64_array_value == nullptr &&
          v.value_size != 0) {
        Fail(field, "[", i, "].int64_array_value is NULL");
      }
    }
  }
  // The fast test the per-element loops use before building a field name for the error.
  template <typename T>
  static bool Alive(const T* handle) {
    return handle != nullptr && StateOfHandle(handle, T::kHandleTag) == HandleState::kLive &&
           OwnerAlive(handle);
  }
  // A caller's enum value: within [lo, hi].
  void Enum(int64_t value, int64_t lo, int64_t hi, const char* field) {
    if (ok() && (value < lo || value > hi)) {
      Fail(field, " is ", value, ", not one of the values in [", lo, ", ", hi, "]");
    }
  }
  // A nested struct the call reads: at least this plugin's size of it.
  void NestedSize(size_t struct_size, size_t ours, const char* field) {
    if (ok() && struct_size < ours) {
      Fail(field, "->struct_size ", struct_size, " is smaller than this plugin's ", ours);
    }
  }

  template <typename... Parts>
  void Fail(const Parts&... parts) {
    if (ok()) status_ = InvalidArgument(function_, ": ", parts...);
  }

 private:
  template <typename T>
  void Tag(const T* handle, const char* field) {
    if constexpr (requires { T::kHandleTag; }) {
      switch (StateOfHandle(handle, T::kHandleTag)) {
        case HandleState::kLive:
          if (!OwnerAlive(handle)) {
            Fail(field, " belongs to a destroyed PJRT_Client (a ", T::kHandleName,
                 " must be destroyed before its client)");
          }
          return;
        case HandleState::kDestroyed:
          return Fail(field, " is a destroyed ", T::kHandleName, " (used after its destroy)");
        case HandleState::kOtherType:
          return Fail(field, " is not a ", T::kHandleName,
                      " (a handle of another type, or not one of this plugin's)");
      }
    }
  }

  // Buffers, loaded executables and transfer managers point into their client's runtime
  // objects (devices, memories, workers), which die with it.
  template <typename T>
  static bool OwnerAlive(const T* handle) {
    if constexpr (requires {
                    { handle->client } -> std::convertible_to<const PJRT_Client*>;
                  }) {
      return StateOfHandle(handle->client, PJRT_Client::kHandleTag) == HandleState::kLive;
    }
    return true;
  }

  const char* function_;
  Status status_;
};

// No overload: only struct_size is checked (functions whose arguments are all outputs, and
// the stubs, which read nothing and answer UNIMPLEMENTED naming themselves).
#define WORKSHOP_CHECK_IN(Name) inline void CheckIn(const PJRT_##Name##_Args& a, Check& c)

// ---- Errors, events, plugin, execute contexts.
WORKSHOP_CHECK_IN(Error_GetCode) { c.Handle(a.error, "error"); }
WORKSHOP_CHECK_IN(Event_Destroy) { c.Handle(a.event, "event"); }
WORKSHOP_CHECK_IN(Event_IsReady) { c.Handle(a.event, "event"); }
WORKSHOP_CHECK_IN(Event_Error) { c.Handle(a.event, "event"); }
WORKSHOP_CHECK_IN(Event_Await) { c.Handle(a.event, "event"); }
WORKSHOP_CHECK_IN(Event_OnReady) {
  c.Handle(a.event, "event");
  c.Pointer(reinterpret_cast<const void*>(a.callback), "callback");
}
WORKSHOP_CHECK_IN(ExecuteContext_Destroy) { c.Handle(a.context, "context"); }

// ---- Client, devices, memories, topology.
WORKSHOP_CHECK_IN(Client_Create) {
  c.NamedValues(a.create_options, a.num_options, "create_options", "num_options");
}
#define WORKSHOP_CLIENT_ONLY(Name) \
  WORKSHOP_CHECK_IN(Name) { c.Handle(a.client, "client"); }
WORKSHOP_CLIENT_ONLY(Client_Destroy)
WORKSHOP_CLIENT_ONLY(Client_PlatformName)
WORKSHOP_CLIENT_ONLY(Client_ProcessIndex)
WORKSHOP_CLIENT_ONLY(Client_PlatformVersion)
WORKSHOP_CLIENT_ONLY(Client_TopologyDescription)
WORKSHOP_CLIENT_ONLY(Client_Devices)
WORKSHOP_CLIENT_ONLY(Client_AddressableDevices)
WORKSHOP_CLIENT_ONLY(Client_LookupDevice)
WORKSHOP_CLIENT_ONLY(Client_LookupAddressableDevice)
WORKSHOP_CLIENT_ONLY(Client_AddressableMemories)
WORKSHOP_CLIENT_ONLY(Client_DmaUnmap)
WORKSHOP_CHECK_IN(Client_UpdateGlobalProcessInfo) {
  c.Handle(a.client, "client");
  c.Array(a.process_infos, a.num_process_infos, "process_infos", "num_process_infos");
}
#undef WORKSHOP_CLIENT_ONLY
WORKSHOP_CHECK_IN(Client_DefaultDeviceAssignment) {
  c.Handle(a.client, "client");
  c.Array(a.default_assignment, a.default_assignment_size, "default_assignment",
          "default_assignment_size");
}
WORKSHOP_CHECK_IN(Client_DmaMap) {
  c.Handle(a.client, "client");
  c.Array(a.data, a.size, "data", "size");
}
WORKSHOP_CHECK_IN(DeviceDescription_Id) { c.Handle(a.device_description, "device_description"); }
WORKSHOP_CHECK_IN(DeviceDescription_ProcessIndex) {
  c.Handle(a.device_description, "device_description");
}
WORKSHOP_CHECK_IN(DeviceDescription_Attributes) {
  c.Handle(a.device_description, "device_description");
}
WORKSHOP_CHECK_IN(DeviceDescription_Kind) { c.Handle(a.device_description, "device_description"); }
WORKSHOP_CHECK_IN(DeviceDescription_DebugString) {
  c.Handle(a.device_description, "device_description");
}
WORKSHOP_CHECK_IN(DeviceDescription_ToString) {
  c.Handle(a.device_description, "device_description");
}
WORKSHOP_CHECK_IN(DeviceDescription_MemoryDescriptions) {
  c.Handle(a.device_description, "device_description");
}
WORKSHOP_CHECK_IN(MemoryDescription_Kind) { c.Handle(a.memory_description, "memory_description"); }
WORKSHOP_CHECK_IN(Device_GetDescription) { c.Handle(a.device, "device"); }
WORKSHOP_CHECK_IN(Device_IsAddressable) { c.Handle(a.device, "device"); }
WORKSHOP_CHECK_IN(Device_LocalHardwareId) { c.Handle(a.device, "device"); }
WORKSHOP_CHECK_IN(Device_AddressableMemories) { c.Handle(a.device, "device"); }
WORKSHOP_CHECK_IN(Device_DefaultMemory) { c.Handle(a.device, "device"); }
WORKSHOP_CHECK_IN(Device_MemoryStats) { c.Handle(a.device, "device"); }
WORKSHOP_CHECK_IN(Memory_Id) { c.Handle(a.memory, "memory"); }
WORKSHOP_CHECK_IN(Memory_Kind) { c.Handle(a.memory, "memory"); }
WORKSHOP_CHECK_IN(Memory_Kind_Id) { c.Handle(a.memory, "memory"); }
WORKSHOP_CHECK_IN(Memory_DebugString) { c.Handle(a.memory, "memory"); }
WORKSHOP_CHECK_IN(Memory_ToString) { c.Handle(a.memory, "memory"); }
WORKSHOP_CHECK_IN(Memory_AddressableByDevices) { c.Handle(a.memory, "memory"); }
WORKSHOP_CHECK_IN(TopologyDescription_Create) {
  c.Array(a.topology_name, a.topology_name_size, "topology_name", "topology_name_size");
  c.NamedValues(a.create_options, a.num_options, "create_options", "num_options");
}
WORKSHOP_CHECK_IN(TopologyDescription_Destroy) { c.Handle(a.topology, "topology"); }
WORKSHOP_CHECK_IN(TopologyDescription_PlatformName) { c.Handle(a.topology, "topology"); }
WORKSHOP_CHECK_IN(TopologyDescription_PlatformVersion) { c.Handle(a.topology, "topology"); }
WORKSHOP_CHECK_IN(TopologyDescription_GetDeviceDescriptions) { c.Handle(a.topology, "topology"); }
WORKSHOP_CHECK_IN(TopologyDescription_Serialize) { c.Handle(a.topology, "topology"); }
WORKSHOP_CHECK_IN(TopologyDescription_Attributes) { c.Handle(a.topology, "topology"); }
WORKSHOP_CHECK_IN(TopologyDescription_Deserialize) {
  c.Array(a.serialized_topology, a.serialized_topology_size, "serialized_topology",
          "serialized_topology_size");
}

// ---- Buffers and transfers.
// A caller's layout (NULL: the default): its type and the arrays of its variant. Its
// struct_size is not checked: jaxlib passes layouts with struct_size 0 (a ToHostBuffer of
// a PRNG key array in tests/sharding/test_sharding.py), and the layout is a fixed part of the 0.81
// header the Args' own struct_size already vouches for.
inline void Layout(Check& c, const PJRT_Buffer_MemoryLayout* layout, const char* field) {
  if (!c.ok() || layout == nullptr) return;
  const int64_t type = RawEnum(layout->type);
  if (type == PJRT_Buffer_MemoryLayout_Type_Tiled) {
    c.Array(layout->tiled.minor_to_major, layout->tiled.minor_to_major_size,
            StrCat(field, "->tiled.minor_to_major").c_str(), "minor_to_major_size");
  } else if (type == PJRT_Buffer_MemoryLayout_Type_Strides) {
    c.Array(layout->strides.byte_strides, layout->strides.num_byte_strides,
            StrCat(field, "->strides.byte_strides").c_str(), "num_byte_strides");
  } else {
    c.Fail(field, "->type is ", type, ", neither tiled nor strides");
  }
}
// An error code a caller hands the plugin to report later: a PJRT_Error_Code.
inline void ErrorCode(Check& c, int64_t code, const char* field) {
  c.Enum(code, PJRT_Error_Code_OK, PJRT_Error_Code_UNAUTHENTICATED, field);
}
// Far above any real array's rank (numpy's limit is 64; past rank 62 all but 62 dims must
// be 0 or 1 for the size to fit int64). It bounds how far a wrong count makes the plugin
// read from `dims`, and keeps dims + num_dims from wrapping: a num_dims of 2^62 wrapped
// the range to empty, and the call made a scalar.
constexpr size_t kMaxRank = 1024;
inline void ShapeDims(Check& c, const int64_t* dims, size_t num_dims, const char* field,
                      const char* count_field) {
  c.Array(dims, num_dims, field, count_field);
  if (c.ok() && num_dims > kMaxRank) {
    c.Fail(count_field, " is ", num_dims, ", above the largest rank this plugin takes (", kMaxRank,
           ")");
  }
}
WORKSHOP_CHECK_IN(Client_BufferFromHostBuffer) {
  c.Handle(a.client, "client");
  ShapeDims(c, a.dims, a.num_dims, "dims", "num_dims");
  c.Array(a.byte_strides, a.num_byte_strides, "byte_strides", "num_byte_strides");
  c.Enum(RawEnum(a.host_buffer_semantics), PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
         PJRT_HostBufferSemantics_kMutableZeroCopy, "host_buffer_semantics");
  Layout(c, a.device_layout, "device_layout");
  c.OptionalHandle(a.device, "device");
  c.OptionalHandle(a.memory, "memory");
}
WORKSHOP_CHECK_IN(Client_CreateUninitializedBuffer) {
  c.Handle(a.client, "client");
  ShapeDims(c, a.shape_dims, a.shape_num_dims, "shape_dims", "shape_num_dims");
  Layout(c, a.shape_layout, "shape_layout");
  c.OptionalHandle(a.device, "device");
  c.OptionalHandle(a.memory, "memory");
}
WORKSHOP_CHECK_IN(Client_CreateViewOfDeviceBuffer) {
  c.Handle(a.client, "client");
  ShapeDims(c, a.dims, a.num_dims, "dims", "num_dims");
  Layout(c, a.layout, "layout");
  c.OptionalHandle(a.device, "device");
  c.OptionalHandle(a.memory, "memory");
}
WORKSHOP_CHECK_IN(Client_CreateAliasBuffer) {
  c.Handle(a.client, "client");
  c.Handle(a.memory, "memory");
  ShapeDims(c, a.shape_dims, a.shape_num_dims, "shape_dims", "shape_num_dims");
  Layout(c, a.shape_layout, "shape_layout");
}
WORKSHOP_CHECK_IN(Client_FulfillAliasBuffer) {
  c.Handle(a.client, "client");
  c.Handle(a.fulfill_alias_buffer_cb, "fulfill_alias_buffer_cb");
  c.OptionalHandle(a.buffer, "buffer");
  c.Array(a.error_message, a.error_message_size, "error_message", "error_message_size");
  ErrorCode(c, RawEnum(a.status_code), "status_code");
}
WORKSHOP_CHECK_IN(Client_CreateBuffersForAsyncHostToDevice) {
  c.Handle(a.client, "client");
  c.Handle(a.memory, "memory");
  c.Array(a.shape_specs, a.num_shape_specs, "shape_specs", "num_shape_specs");
  c.Array(a.device_layouts, a.num_device_layouts, "device_layouts", "num_device_layouts");
  for (size_t i = 0; c.ok() && a.shape_specs != nullptr && i < a.num_shape_specs; ++i) {
    c.NestedSize(a.shape_specs[i].struct_size, PJRT_ShapeSpec_STRUCT_SIZE, "shape_specs[]");
    if (a.device_layouts != nullptr && i < a.num_device_layouts) {
      Layout(c, a.device_layouts[i], "device_layouts[]");
    }
    ShapeDims(c, a.shape_specs[i].dims, a.shape_specs[i].num_dims, "shape_specs[].dims",
              "shape_specs[].num_dims");
  }
}
#define WORKSHOP_BUFFER_ONLY(Name) \
  WORKSHOP_CHECK_IN(Name) { c.Handle(a.buffer, "buffer"); }
WORKSHOP_BUFFER_ONLY(Buffer_Destroy)
WORKSHOP_BUFFER_ONLY(Buffer_ElementType)
WORKSHOP_BUFFER_ONLY(Buffer_Dimensions)
WORKSHOP_BUFFER_ONLY(Buffer_UnpaddedDimensions)
WORKSHOP_BUFFER_ONLY(Buffer_DynamicDimensionIndices)
WORKSHOP_BUFFER_ONLY(Buffer_GetMemoryLayout)
WORKSHOP_BUFFER_ONLY(Buffer_OnDeviceSizeInBytes)
WORKSHOP_BUFFER_ONLY(Buffer_Device)
WORKSHOP_BUFFER_ONLY(Buffer_Memory)
WORKSHOP_BUFFER_ONLY(Buffer_Delete)
WORKSHOP_BUFFER_ONLY(Buffer_IsDeleted)
WORKSHOP_BUFFER_ONLY(Buffer_IsOnCpu)
WORKSHOP_BUFFER_ONLY(Buffer_ReadyEvent)
WORKSHOP_BUFFER_ONLY(Buffer_UnsafePointer)
WORKSHOP_BUFFER_ONLY(Buffer_IncreaseExternalReferenceCount)
WORKSHOP_BUFFER_ONLY(Buffer_DecreaseExternalReferenceCount)
WORKSHOP_BUFFER_ONLY(Buffer_OpaqueDeviceMemoryDataPointer)
WORKSHOP_BUFFER_ONLY(Layouts_PJRT_Buffer_MemoryLayout)
#undef WORKSHOP_BUFFER_ONLY
WORKSHOP_CHECK_IN(Buffer_CopyToDevice) {
  c.Handle(a.buffer, "buffer");
  c.Handle(a.dst_device, "dst_device");
}
WORKSHOP_CHECK_IN(Buffer_CopyToMemory) {
  c.Handle(a.buffer, "buffer");
  c.Handle(a.dst_memory, "dst_memory");
}
// dst == NULL is the size query.
WORKSHOP_CHECK_IN(Buffer_ToHostBuffer) {
  c.Handle(a.src, "src");
  Layout(c, a.host_layout, "host_layout");
}
WORKSHOP_CHECK_IN(Buffer_CopyRawToHost) {
  c.Handle(a.buffer, "buffer");
  c.Array(a.dst, a.transfer_size > 0 ? a.transfer_size : 0, "dst", "transfer_size");
}
#define WORKSHOP_MANAGER_ONLY(Name) \
  WORKSHOP_CHECK_IN(Name) { c.Handle(a.transfer_manager, "transfer_manager"); }
WORKSHOP_MANAGER_ONLY(AsyncHostToDeviceTransferManager_Destroy)
WORKSHOP_MANAGER_ONLY(AsyncHostToDeviceTransferManager_RetrieveBuffer)
WORKSHOP_MANAGER_ONLY(AsyncHostToDeviceTransferManager_Device)
WORKSHOP_MANAGER_ONLY(AsyncHostToDeviceTransferManager_BufferCount)
WORKSHOP_MANAGER_ONLY(AsyncHostToDeviceTransferManager_BufferSize)
#undef WORKSHOP_MANAGER_ONLY
WORKSHOP_CHECK_IN(AsyncHostToDeviceTransferManager_TransferData) {
  c.Handle(a.transfer_manager, "transfer_manager");
  c.Array(a.data, a.transfer_size > 0 ? a.transfer_size : 0, "data", "transfer_size");
}
WORKSHOP_CHECK_IN(AsyncHostToDeviceTransferManager_SetBufferError) {
  c.Handle(a.transfer_manager, "transfer_manager");
  c.Array(a.error_message, a.error_message_size, "error_message", "error_message_size");
  ErrorCode(c, RawEnum(a.error_code), "error_code");
}
WORKSHOP_CHECK_IN(AsyncHostToDeviceTransferManager_AddMetadata) {
  c.Handle(a.transfer_manager, "transfer_manager");
  c.NamedValues(a.transfer_metadata, a.num_metadata, "transfer_metadata", "num_metadata");
}

// ---- Compile and executables.
inline void Program(Check& c, const PJRT_Program* program) {
  c.Pointer(program, "program");
  if (!c.ok()) return;
  if (program->struct_size < PJRT_Program_STRUCT_SIZE) {
    return c.Fail("program->struct_size ", program->struct_size,
                  " is smaller than this plugin's PJRT_Program ", PJRT_Program_STRUCT_SIZE);
  }
  c.Array(program->code, program->code_size, "program->code", "program->code_size");
  c.Array(program->format, program->format_size, "program->format", "program->format_size");
}
WORKSHOP_CHECK_IN(Client_Compile) {
  c.Handle(a.client, "client");
  Program(c, a.program);
  c.Array(a.compile_options, a.compile_options_size, "compile_options", "compile_options_size");
}
WORKSHOP_CHECK_IN(Compile) {
  c.Handle(a.topology, "topology");
  c.OptionalHandle(a.client, "client");
  Program(c, a.program);
  c.Array(a.compile_options, a.compile_options_size, "compile_options", "compile_options_size");
}
WORKSHOP_CHECK_IN(Executable_DeserializeAndLoad) {
  c.Handle(a.client, "client");
  c.Array(a.serialized_executable, a.serialized_executable_size, "serialized_executable",
          "serialized_executable_size");
  c.Array(a.overridden_serialized_compile_options, a.overridden_serialized_compile_options_size,
          "overridden_serialized_compile_options", "overridden_serialized_compile_options_size");
}
#define WORKSHOP_EXECUTABLE_ONLY(Name) \
  WORKSHOP_CHECK_IN(Name) { c.Handle(a.executable, "executable"); }
WORKSHOP_EXECUTABLE_ONLY(Executable_Destroy)
WORKSHOP_EXECUTABLE_ONLY(Executable_Name)
WORKSHOP_EXECUTABLE_ONLY(Executable_NumReplicas)
WORKSHOP_EXECUTABLE_ONLY(Executable_NumPartitions)
WORKSHOP_EXECUTABLE_ONLY(Executable_NumOutputs)
WORKSHOP_EXECUTABLE_ONLY(Executable_SizeOfGeneratedCodeInBytes)
WORKSHOP_EXECUTABLE_ONLY(Executable_GetCostAnalysis)
WORKSHOP_EXECUTABLE_ONLY(Executable_GetCompiledMemoryStats)
WORKSHOP_EXECUTABLE_ONLY(Executable_OutputElementTypes)
WORKSHOP_EXECUTABLE_ONLY(Executable_OutputDimensions)
WORKSHOP_EXECUTABLE_ONLY(Executable_OutputMemoryKinds)
WORKSHOP_EXECUTABLE_ONLY(Executable_Fingerprint)
WORKSHOP_EXECUTABLE_ONLY(Executable_Serialize)
WORKSHOP_EXECUTABLE_ONLY(LoadedExecutable_Destroy)
WORKSHOP_EXECUTABLE_ONLY(LoadedExecutable_AddressableDevices)
WORKSHOP_EXECUTABLE_ONLY(LoadedExecutable_Delete)
WORKSHOP_EXECUTABLE_ONLY(LoadedExecutable_IsDeleted)
WORKSHOP_EXECUTABLE_ONLY(LoadedExecutable_Fingerprint)
WORKSHOP_EXECUTABLE_ONLY(LoadedExecutable_GetDeviceAssignment)
WORKSHOP_EXECUTABLE_ONLY(Layouts_PJRT_Executable_GetOutputLayouts)
WORKSHOP_EXECUTABLE_ONLY(Layouts_PJRT_Executable_GetParameterLayouts)
#undef WORKSHOP_EXECUTABLE_ONLY
WORKSHOP_CHECK_IN(Executable_OptimizedProgram) {
  c.Handle(a.executable, "executable");
  c.Pointer(a.program, "program");
}
WORKSHOP_CHECK_IN(LoadedExecutable_GetExecutable) {
  c.Handle(a.loaded_executable, "loaded_executable");
}
// Every argument buffer is checked here, so a destroyed one is reported by position: a
// loop over num_devices x num_args pointers, noise next to an execution.
WORKSHOP_CHECK_IN(LoadedExecutable_Execute) {
  c.Handle(a.executable, "executable");
  c.Array(a.argument_lists, a.num_devices, "argument_lists", "num_devices");
  c.Array(a.output_lists, a.num_devices, "output_lists", "num_devices");
  for (size_t d = 0; c.ok() && d < a.num_devices; ++d) {
    if (a.num_args > 0 && a.argument_lists[d] == nullptr) {
      return c.Fail("argument_lists[", d, "] is NULL but num_args is ", a.num_args);
    }
    // A program without results (only effects, e.g. jax.debug.print) has nothing to
    // write there, and jaxlib then passes NULL lists.
    if (a.output_lists[d] == nullptr && !a.executable->executable->program().plan.results.empty()) {
      return c.Fail("output_lists[", d, "] is NULL");
    }
    for (size_t i = 0; c.ok() && i < a.num_args; ++i) {
      const PJRT_Buffer* buffer = a.argument_lists[d][i];
      if (!Check::Alive(buffer)) {
        c.Handle(buffer, StrCat("argument_lists[", d, "][", i, "]").c_str());
      }
    }
  }
  if (c.ok() && a.options != nullptr) {
    if (a.options->struct_size < PJRT_ExecuteOptions_STRUCT_SIZE) {
      return c.Fail("options->struct_size ", a.options->struct_size,
                    " is smaller than this plugin's PJRT_ExecuteOptions ",
                    PJRT_ExecuteOptions_STRUCT_SIZE);
    }
    c.Array(a.options->non_donatable_input_indices, a.options->num_non_donatable_input_indices,
            "options->non_donatable_input_indices", "options->num_non_donatable_input_indices");
    if (c.ok() && a.options->num_non_donatable_input_indices > a.num_args) {
      c.Fail("options->num_non_donatable_input_indices is ",
             a.options->num_non_donatable_input_indices, ", more than the ", a.num_args,
             " arguments");
    }
  }
  c.OptionalHandle(a.execute_device, "execute_device");
}

// ---- Layouts extension.
WORKSHOP_CHECK_IN(Layouts_MemoryLayout_Destroy) { c.Handle(a.layout, "layout"); }
WORKSHOP_CHECK_IN(Layouts_MemoryLayout_Serialize) { c.Handle(a.layout, "layout"); }
WORKSHOP_CHECK_IN(Layouts_PJRT_Client_GetDefaultLayout) {
  c.Handle(a.client, "client");
  ShapeDims(c, a.dims, a.num_dims, "dims", "num_dims");
}
WORKSHOP_CHECK_IN(Layouts_PJRT_Topology_GetDefaultLayout) {
  c.Handle(a.topology_description, "topology_description");
  ShapeDims(c, a.dims, a.num_dims, "dims", "num_dims");
}

#undef WORKSHOP_CHECK_IN

PJRT_Error* FromException(const char* function, std::exception_ptr exception);
PJRT_Error* Rejected(const char* function, Status status);

// The entry behind every slot: `name` is the PJRT function name, `kSize` this plugin's
// struct_size of its Args, `Fn` the implementation.
template <trace::Name name, size_t kSize, auto Fn>
typename trace::FnTraits<decltype(Fn)>::Result Entry(
    typename trace::FnTraits<decltype(Fn)>::Args* args) {
  using Args = typename trace::FnTraits<decltype(Fn)>::Args;
  using Result = typename trace::FnTraits<decltype(Fn)>::Result;
  if constexpr (std::is_void_v<Result>) {
    // Error_Destroy / Error_Message: nothing can be reported, so a bad call is a no-op
    // (Error_Message answers with a fixed text rather than leaving garbage).
    if (args == nullptr || args->struct_size < kSize) return;
    if (args->error == nullptr ||
        StateOfHandle(args->error, PJRT_Error::kHandleTag) != HandleState::kLive) {
      if constexpr (requires { args->message; }) {
        static constexpr char kBad[] = "invalid PJRT_Error handle (NULL, destroyed or foreign)";
        args->message = kBad;
        args->message_size = sizeof(kBad) - 1;
      }
      return;
    }
    try {
      trace::Traced<name, Fn>(args);
    } catch (...) {
    }
  } else {
    if (args == nullptr) return Rejected(name.text, InvalidArgument(name.text, ": args is NULL"));
    if (args->struct_size < kSize) {
      return Rejected(name.text,
                      InvalidArgument(name.text, ": ", name.text, "_Args.struct_size ",
                                      args->struct_size, " is smaller than this plugin's ", kSize,
                                      " (a caller built against an older header?)"));
    }
    if constexpr (requires(const Args& a, Check& c) { CheckIn(a, c); }) {
      Check c(name.text);
      CheckIn(*args, c);
      if (!c.ok()) return Rejected(name.text, std::move(c.status()));
    }
    try {
      return trace::Traced<name, Fn>(args);
    } catch (...) {
      return FromException(name.text, std::current_exception());
    }
  }
}

}  // namespace workshop::capi::check
