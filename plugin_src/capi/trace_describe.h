// The key arguments the tracer records, per function (see trace.h), and Traced<>, the
// wrapper every table slot points to. Included only by api_table.cc.
//
// DescribeIn runs before the call and may read only inputs; DescribeOut runs after a
// successful call and may read outputs. A function without an overload is recorded by name
// only. Neither may dereference a handle the call destroys.
#pragma once

#include <algorithm>
#include <sstream>

#include "capi/trace.h"
#include "capi/wrappers.h"

namespace workshop::capi::trace {

template <typename T>
void Note::Add(const char* key, const T& value) {
  std::ostringstream out;
  out << value;
  if (!text_.empty()) text_ += ' ';
  text_ += key;
  text_ += '=';
  text_ += out.str();
}

namespace describe {

inline std::string Shape(PJRT_Buffer_Type type, const int64_t* dims, size_t num_dims) {
  return ShapeString(static_cast<DType>(type), Dims(dims, dims + num_dims));
}
inline std::string Shape(const Buffer& buffer) {
  return ShapeString(buffer.dtype(), buffer.dims());
}
// "device:2" / "pinned_host:2": the kind and the device it belongs to.
inline std::string Where(const PJRT_Memory* memory) {
  return StrCat(memory->memory->kind_name(), ":", memory->memory->device()->id());
}
inline void Buffer(Note& n, const char* key, const PJRT_Buffer* buffer) {
  n.Handle(key, buffer);
  n.Add("shape", Shape(*buffer->buffer));
}

}  // namespace describe

#define WORKSHOP_TRACE_IN(Name) inline void DescribeIn(const PJRT_##Name##_Args& a, Note& n)
#define WORKSHOP_TRACE_OUT(Name) inline void DescribeOut(const PJRT_##Name##_Args& a, Note& n)

// ---- Client, devices, memories.
WORKSHOP_TRACE_IN(Client_Create) {
  for (size_t i = 0; i < a.num_options; ++i) {
    n.Add("option", std::string(a.create_options[i].name, a.create_options[i].name_size));
  }
}
WORKSHOP_TRACE_OUT(Client_Create) { n.Add("devices", a.client->devices.size()); }
WORKSHOP_TRACE_OUT(Client_PlatformName) {
  n.Add("name", std::string(a.platform_name, a.platform_name_size));
}
WORKSHOP_TRACE_OUT(Client_Devices) { n.Add("count", a.num_devices); }
WORKSHOP_TRACE_OUT(Client_AddressableDevices) { n.Add("count", a.num_addressable_devices); }
WORKSHOP_TRACE_OUT(Client_AddressableMemories) { n.Add("count", a.num_addressable_memories); }
WORKSHOP_TRACE_IN(Client_LookupDevice) { n.Add("id", a.id); }
WORKSHOP_TRACE_IN(Client_LookupAddressableDevice) { n.Add("local_id", a.local_hardware_id); }
WORKSHOP_TRACE_IN(Client_DefaultDeviceAssignment) {
  n.Add("replicas", a.num_replicas);
  n.Add("partitions", a.num_partitions);
}
WORKSHOP_TRACE_IN(Device_GetDescription) { n.Add("device", a.device->device->id()); }
WORKSHOP_TRACE_IN(Device_IsAddressable) { n.Add("device", a.device->device->id()); }
WORKSHOP_TRACE_IN(Device_LocalHardwareId) { n.Add("device", a.device->device->id()); }
WORKSHOP_TRACE_IN(Device_AddressableMemories) { n.Add("device", a.device->device->id()); }
WORKSHOP_TRACE_OUT(Device_AddressableMemories) { n.Add("count", a.num_memories); }
WORKSHOP_TRACE_IN(Device_DefaultMemory) { n.Add("device", a.device->device->id()); }
WORKSHOP_TRACE_IN(Device_MemoryStats) { n.Add("device", a.device->device->id()); }
WORKSHOP_TRACE_OUT(Device_MemoryStats) { n.Add("bytes_in_use", a.bytes_in_use); }
WORKSHOP_TRACE_IN(DeviceDescription_Id) { n.Add("device", a.device_description->id); }
WORKSHOP_TRACE_IN(DeviceDescription_Attributes) { n.Add("device", a.device_description->id); }
WORKSHOP_TRACE_IN(Memory_Kind) { n.Add("memory", describe::Where(a.memory)); }
WORKSHOP_TRACE_IN(Memory_Kind_Id) { n.Add("memory", describe::Where(a.memory)); }
WORKSHOP_TRACE_IN(Memory_Id) { n.Add("memory", describe::Where(a.memory)); }
WORKSHOP_TRACE_IN(Memory_AddressableByDevices) { n.Add("memory", describe::Where(a.memory)); }
WORKSHOP_TRACE_IN(Memory_ToString) { n.Add("memory", describe::Where(a.memory)); }
WORKSHOP_TRACE_IN(Memory_DebugString) { n.Add("memory", describe::Where(a.memory)); }

// ---- Buffers and transfers.
WORKSHOP_TRACE_IN(Client_BufferFromHostBuffer) {
  n.Add("shape", describe::Shape(a.type, a.dims, a.num_dims));
  if (a.memory != nullptr) n.Add("memory", describe::Where(a.memory));
  if (a.device != nullptr) n.Add("device", a.device->device->id());
  n.Add("semantics", static_cast<int>(a.host_buffer_semantics));
}
WORKSHOP_TRACE_OUT(Client_BufferFromHostBuffer) { n.Handle("buffer", a.buffer, "new"); }
WORKSHOP_TRACE_IN(Client_CreateUninitializedBuffer) {
  n.Add("shape", describe::Shape(a.shape_element_type, a.shape_dims, a.shape_num_dims));
}
WORKSHOP_TRACE_OUT(Client_CreateUninitializedBuffer) { n.Handle("buffer", a.buffer, "new"); }
WORKSHOP_TRACE_IN(Client_CreateViewOfDeviceBuffer) {
  n.Add("shape", describe::Shape(a.element_type, a.dims, a.num_dims));
}
WORKSHOP_TRACE_OUT(Client_CreateViewOfDeviceBuffer) { n.Handle("buffer", a.buffer, "new"); }
WORKSHOP_TRACE_IN(Buffer_Destroy) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_IN(Buffer_Delete) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_IN(Buffer_IsDeleted) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_OUT(Buffer_IsDeleted) { n.Add("deleted", a.is_deleted); }
WORKSHOP_TRACE_IN(Buffer_ElementType) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_IN(Buffer_Dimensions) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_IN(Buffer_Device) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_OUT(Buffer_Device) { n.Add("device", a.device->device->id()); }
WORKSHOP_TRACE_IN(Buffer_Memory) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_OUT(Buffer_Memory) { n.Add("memory", describe::Where(a.memory)); }
WORKSHOP_TRACE_IN(Buffer_IsOnCpu) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_IN(Buffer_ReadyEvent) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_OUT(Buffer_ReadyEvent) { n.Handle("event", a.event); }
WORKSHOP_TRACE_IN(Buffer_OnDeviceSizeInBytes) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_IN(Buffer_UnsafePointer) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_IN(Buffer_DynamicDimensionIndices) { n.Handle("buffer", a.buffer); }
WORKSHOP_TRACE_IN(Buffer_CopyToMemory) {
  describe::Buffer(n, "buffer", a.buffer);
  n.Add("to", describe::Where(a.dst_memory));
}
WORKSHOP_TRACE_OUT(Buffer_CopyToMemory) { n.Handle("buffer", a.dst_buffer, "copy"); }
WORKSHOP_TRACE_IN(Buffer_CopyToDevice) {
  describe::Buffer(n, "buffer", a.buffer);
  n.Add("to_device", a.dst_device->device->id());
}
WORKSHOP_TRACE_OUT(Buffer_CopyToDevice) { n.Handle("buffer", a.dst_buffer, "copy"); }
WORKSHOP_TRACE_IN(Buffer_ToHostBuffer) {
  describe::Buffer(n, "buffer", a.src);
  if (a.dst == nullptr) n.Add("query", "size");
}
WORKSHOP_TRACE_OUT(Buffer_ToHostBuffer) {
  if (a.dst == nullptr) {
    n.Add("dst_size", a.dst_size);
  } else {
    n.Handle("event", a.event);
  }
}
WORKSHOP_TRACE_IN(Buffer_CopyRawToHost) {
  n.Handle("buffer", a.buffer);
  n.Add("offset", a.offset);
  n.Add("size", a.transfer_size);
}

// ---- Events.
WORKSHOP_TRACE_IN(Event_OnReady) { n.Handle("event", a.event); }
WORKSHOP_TRACE_IN(Event_IsReady) { n.Handle("event", a.event); }
WORKSHOP_TRACE_OUT(Event_IsReady) { n.Add("ready", a.is_ready); }
WORKSHOP_TRACE_IN(Event_Error) { n.Handle("event", a.event); }
WORKSHOP_TRACE_IN(Event_Await) { n.Handle("event", a.event); }
WORKSHOP_TRACE_IN(Event_Destroy) { n.Handle("event", a.event); }

// ---- Compile and executables.
WORKSHOP_TRACE_IN(Client_Compile) {
  if (a.program == nullptr) return;
  n.Add("format", std::string(a.program->format, a.program->format_size));
  n.Add("code_bytes", a.program->code_size);
  n.Add("options_bytes", a.compile_options_size);
}
WORKSHOP_TRACE_OUT(Client_Compile) {
  n.Handle("executable", a.executable, "new");
  n.Add("name", a.executable->executable->program().name);
}
WORKSHOP_TRACE_IN(Compile) {
  if (a.program == nullptr) return;
  n.Add("format", std::string(a.program->format, a.program->format_size));
  n.Add("code_bytes", a.program->code_size);
}
WORKSHOP_TRACE_IN(Executable_DeserializeAndLoad) {
  n.Add("bytes", a.serialized_executable_size);
  n.Add("options_bytes", a.overridden_serialized_compile_options_size);
}
WORKSHOP_TRACE_OUT(Executable_DeserializeAndLoad) {
  n.Handle("executable", a.loaded_executable, "new");
  n.Add("name", a.loaded_executable->executable->program().name);
}
WORKSHOP_TRACE_IN(LoadedExecutable_GetExecutable) { n.Handle("executable", a.loaded_executable); }
WORKSHOP_TRACE_IN(LoadedExecutable_AddressableDevices) { n.Handle("executable", a.executable); }
WORKSHOP_TRACE_OUT(LoadedExecutable_AddressableDevices) {
  n.Add("count", a.num_addressable_devices);
}
WORKSHOP_TRACE_IN(LoadedExecutable_GetDeviceAssignment) { n.Handle("executable", a.executable); }
WORKSHOP_TRACE_IN(LoadedExecutable_Destroy) { n.Handle("executable", a.executable); }
WORKSHOP_TRACE_IN(LoadedExecutable_Delete) { n.Handle("executable", a.executable); }
WORKSHOP_TRACE_IN(LoadedExecutable_Execute) {
  n.Handle("executable", a.executable);
  n.Add("name", a.executable->executable->program().name);
  n.Add("devices", a.num_devices);
  n.Add("args", a.num_args);
  if (a.options != nullptr && a.options->num_non_donatable_input_indices > 0) {
    n.Add("non_donatable", a.options->num_non_donatable_input_indices);
  }
}
WORKSHOP_TRACE_OUT(LoadedExecutable_Execute) {
  n.Add("outputs", a.executable->executable->num_outputs());
  if (a.num_devices > 0 && a.executable->executable->num_outputs() > 0) {
    n.Handle("buffer", a.output_lists[0][0], "output");
  }
}
WORKSHOP_TRACE_OUT(Executable_Name) {
  n.Add("name", std::string(a.executable_name, a.executable_name_size));
}
WORKSHOP_TRACE_OUT(Executable_NumOutputs) { n.Add("outputs", a.num_outputs); }
WORKSHOP_TRACE_OUT(Executable_NumPartitions) { n.Add("partitions", a.num_partitions); }
WORKSHOP_TRACE_OUT(Executable_NumReplicas) { n.Add("replicas", a.num_replicas); }
WORKSHOP_TRACE_IN(Executable_OptimizedProgram) {
  if (a.program == nullptr) return;
  n.Add("step", a.program->code == nullptr ? "size" : "fill");
}
WORKSHOP_TRACE_OUT(Executable_OptimizedProgram) { n.Add("bytes", a.program->code_size); }
WORKSHOP_TRACE_OUT(Executable_Serialize) { n.Add("bytes", a.serialized_bytes_size); }
WORKSHOP_TRACE_OUT(Executable_GetCostAnalysis) { n.Add("properties", a.num_properties); }

#undef WORKSHOP_TRACE_IN
#undef WORKSHOP_TRACE_OUT

// A string literal as a template argument: Traced<"PJRT_Client_Create", &Client_Create>.
template <size_t N>
struct Name {
  constexpr Name(const char (&s)[N]) { std::copy_n(s, N, text); }
  char text[N];
};

// The wrapper every slot points to: `name` is the PJRT function name, `Fn` the
// implementation. Errors are recorded with their code; void functions record 0.
template <Name name, auto Fn>
typename FnTraits<decltype(Fn)>::Result Traced(typename FnTraits<decltype(Fn)>::Args* args) {
  using Args = typename FnTraits<decltype(Fn)>::Args;
  using Result = typename FnTraits<decltype(Fn)>::Result;
  if (!Enabled()) return Fn(args);
  Note note;
  if constexpr (requires(const Args& a, Note& n) { DescribeIn(a, n); }) {
    if (args != nullptr) DescribeIn(*args, note);
  }
  const int64_t start = NowNs();
  if constexpr (std::is_void_v<Result>) {
    Fn(args);
    Record(name.text, std::move(note.text()), 0, start, NowNs());
  } else {
    PJRT_Error* error = Fn(args);
    const int64_t end = NowNs();
    int code = 0;
    if (error != nullptr) {
      code = static_cast<int>(error->status.code());
      note.Add("error", error->status.message());
    } else if constexpr (requires(const Args& a, Note& n) { DescribeOut(a, n); }) {
      DescribeOut(*args, note);
    }
    Record(name.text, std::move(note.text()), code, start, end);
    return error;
  }
}

}  // namespace workshop::capi::trace
