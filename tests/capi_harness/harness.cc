// A PJRT C API conformance harness: dlopens a plugin and checks, through its PJRT_Api
// table only, the behaviours XLA's pjrt_c_api_test checks (our own implementation of
// them, with the same inputs and error texts) plus what JAX relies on beyond them.
//
//   harness PLUGIN.so --inputs DIR --platform NAME [--python REPO] [--filter SUBSTR]
//
// DIR holds the programs and compile options (tests/capi_harness/inputs.py writes them
// with JAX, as jaxlib would send them). With --python, the harness embeds CPython with REPO
// on sys.path first: the workshop plugin compiles through its Python compiler. Without it,
// cases that compile are skipped for a plugin that needs Python.
//
// One file of about 1,600 lines on purpose: teach/conformance.py (notebook 01) compiles it
// with one compiler command and no build system, and its cases share the table-walking
// helpers at its top.
//
// Output: one line per case, "PASS name", "FAIL name: why" or "SKIP name: why" (SKIP: the
// plugin answered UNIMPLEMENTED for an optional feature), then a summary. Exit status 1
// if anything failed. Built by tests/conformance/test_conformance.py; never committed as a binary.
//
// One file, over 800 lines, on purpose: it is built by one g++ call in the test and run
// against two plugins; splitting it would add a build step for no reader's gain.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "capi/extensions.h"
#include "pjrt_c_api.h"

#ifdef WORKSHOP_HARNESS_PYTHON
#include <Python.h>
#endif

namespace {

// ---------------------------------------------------------------------------------------
// Outcomes.

struct Failure {
  std::string why;
};
struct Skip {
  std::string why;
};

template <typename... T>
std::string Cat(const T&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

#define EXPECT(cond, ...)                                               \
  if (!(cond)) throw Failure {                                          \
      Cat("line ", __LINE__, ": expected ", #cond, ". ", ##__VA_ARGS__) \
    }

// An error turned into data (and destroyed).
struct Error {
  int code = 0;  // 0: no error
  std::string message;
  bool ok() const { return code == 0; }
};

const char* CodeName(int code) {
  static const char* names[] = {"OK",
                                "CANCELLED",
                                "UNKNOWN",
                                "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED",
                                "NOT_FOUND",
                                "ALREADY_EXISTS",
                                "PERMISSION_DENIED",
                                "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION",
                                "ABORTED",
                                "OUT_OF_RANGE",
                                "UNIMPLEMENTED",
                                "INTERNAL",
                                "UNAVAILABLE",
                                "DATA_LOSS",
                                "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? names[code] : "?";
}

#define ARGS(Name, var)              \
  PJRT_##Name##_Args var;            \
  std::memset(&var, 0, sizeof(var)); \
  var.struct_size = PJRT_##Name##_Args_STRUCT_SIZE

// ---------------------------------------------------------------------------------------
// The harness: the plugin's table plus helpers every case uses. One client per case, as in
// XLA's fixtures (no options, no KV callbacks), destroyed after it.

class Harness {
 public:
  const PJRT_Api* api = nullptr;
  std::string inputs_dir, platform;
  bool can_compile = true;  // False: the plugin needs Python and none is embedded.
  PJRT_Client* client = nullptr;

  Error Take(PJRT_Error* error) const {
    Error out;
    if (error == nullptr) return out;
    ARGS(Error_GetCode, code);
    code.error = error;
    PJRT_Error* code_error = api->PJRT_Error_GetCode(&code);
    ARGS(Error_Message, message);
    message.error = error;
    api->PJRT_Error_Message(&message);
    out.code = code_error == nullptr ? code.code : -1;
    out.message.assign(message.message, message.message_size);
    ARGS(Error_Destroy, destroy);
    destroy.error = error;
    api->PJRT_Error_Destroy(&destroy);
    return out;
  }

  // Fails the case on error; UNIMPLEMENTED makes it a SKIP when `optional`.
  void Ok(PJRT_Error* error, const char* what, bool optional = false) const {
    Error e = Take(error);
    if (e.ok()) return;
    if (optional && e.code == PJRT_Error_Code_UNIMPLEMENTED) {
      throw Skip{Cat(what, ": UNIMPLEMENTED: ", e.message)};
    }
    throw Failure{Cat(what, " failed: ", CodeName(e.code), ": ", e.message)};
  }

  void NewClient() {
    ARGS(Client_Create, args);
    Ok(api->PJRT_Client_Create(&args), "PJRT_Client_Create");
    client = args.client;
  }
  void DestroyClient() {
    if (client == nullptr) return;
    ARGS(Client_Destroy, args);
    args.client = client;
    client = nullptr;
    Ok(api->PJRT_Client_Destroy(&args), "PJRT_Client_Destroy");
  }

  std::vector<PJRT_Device*> Devices() const {
    ARGS(Client_AddressableDevices, args);
    args.client = client;
    Ok(api->PJRT_Client_AddressableDevices(&args), "PJRT_Client_AddressableDevices");
    return {args.addressable_devices, args.addressable_devices + args.num_addressable_devices};
  }
  int DeviceId(PJRT_Device* device) const {
    ARGS(Device_GetDescription, desc);
    desc.device = device;
    Ok(api->PJRT_Device_GetDescription(&desc), "PJRT_Device_GetDescription");
    ARGS(DeviceDescription_Id, id);
    id.device_description = desc.device_description;
    Ok(api->PJRT_DeviceDescription_Id(&id), "PJRT_DeviceDescription_Id");
    return id.id;
  }
  std::vector<PJRT_Memory*> Memories(PJRT_Device* device) const {
    ARGS(Device_AddressableMemories, args);
    args.device = device;
    Ok(api->PJRT_Device_AddressableMemories(&args), "PJRT_Device_AddressableMemories");
    return {args.memories, args.memories + args.num_memories};
  }
  PJRT_Memory* DefaultMemory(PJRT_Device* device) const {
    ARGS(Device_DefaultMemory, args);
    args.device = device;
    Ok(api->PJRT_Device_DefaultMemory(&args), "PJRT_Device_DefaultMemory");
    return args.memory;
  }
  std::string MemoryKind(PJRT_Memory* memory) const {
    ARGS(Memory_Kind, args);
    args.memory = memory;
    Ok(api->PJRT_Memory_Kind(&args), "PJRT_Memory_Kind");
    return std::string(args.kind, args.kind_size);
  }
  // The device's memory of `kind`, or null.
  PJRT_Memory* MemoryOfKind(PJRT_Device* device, std::string_view kind) const {
    for (PJRT_Memory* m : Memories(device)) {
      if (MemoryKind(m) == kind) return m;
    }
    return nullptr;
  }

  void Await(PJRT_Event* event, const char* what = "PJRT_Event_Await") const {
    ARGS(Event_Await, args);
    args.event = event;
    Error e = Take(api->PJRT_Event_Await(&args));
    Destroy(event);
    if (!e.ok()) throw Failure{Cat(what, " failed: ", CodeName(e.code), ": ", e.message)};
  }
  void Destroy(PJRT_Event* event) const {
    ARGS(Event_Destroy, args);
    args.event = event;
    Ok(api->PJRT_Event_Destroy(&args), "PJRT_Event_Destroy");
  }
  void Destroy(PJRT_Buffer* buffer) const {
    ARGS(Buffer_Destroy, args);
    args.buffer = buffer;
    Ok(api->PJRT_Buffer_Destroy(&args), "PJRT_Buffer_Destroy");
  }
  void Destroy(PJRT_LoadedExecutable* executable) const {
    ARGS(LoadedExecutable_Destroy, args);
    args.executable = executable;
    Ok(api->PJRT_LoadedExecutable_Destroy(&args), "PJRT_LoadedExecutable_Destroy");
  }

  // f32 data to a device (or memory), waiting until the host data may be reused.
  PJRT_Buffer* FromHost(const void* data, PJRT_Buffer_Type type, std::vector<int64_t> dims,
                        PJRT_Device* device, PJRT_Memory* memory = nullptr,
                        const std::vector<int64_t>* byte_strides = nullptr,
                        PJRT_HostBufferSemantics semantics =
                            PJRT_HostBufferSemantics_kImmutableOnlyDuringCall) const {
    ARGS(Client_BufferFromHostBuffer, args);
    args.client = client;
    args.data = data;
    args.type = type;
    args.dims = dims.data();
    args.num_dims = dims.size();
    if (byte_strides != nullptr) {
      args.byte_strides = byte_strides->data();
      args.num_byte_strides = byte_strides->size();
    }
    args.host_buffer_semantics = semantics;
    args.device = device;
    args.memory = memory;
    Ok(api->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer");
    Await(args.done_with_host_buffer, "done_with_host_buffer");
    return args.buffer;
  }
  PJRT_Buffer* FromHost(const std::vector<float>& data, std::vector<int64_t> dims,
                        PJRT_Device* device) const {
    return FromHost(data.data(), PJRT_Buffer_Type_F32, std::move(dims), device);
  }

  // The buffer's bytes (row-major, or in `layout`), through a size query and a fill.
  std::vector<char> ToHost(PJRT_Buffer* buffer, PJRT_Buffer_MemoryLayout* layout = nullptr) const {
    ARGS(Buffer_ToHostBuffer, query);
    query.src = buffer;
    query.host_layout = layout;
    Ok(api->PJRT_Buffer_ToHostBuffer(&query), "PJRT_Buffer_ToHostBuffer (size query)");
    std::vector<char> out(query.dst_size);
    ARGS(Buffer_ToHostBuffer, args);
    args.src = buffer;
    args.host_layout = layout;
    char placeholder;
    args.dst = out.empty() ? &placeholder : out.data();  // As jaxlib does for size 0.
    args.dst_size = out.size();
    Ok(api->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
    EXPECT(args.event != nullptr, "ToHostBuffer returned no event");
    Await(args.event, "ToHostBuffer event");
    return out;
  }
  std::vector<float> ToHostF32(PJRT_Buffer* buffer) const {
    std::vector<char> bytes = ToHost(buffer);
    std::vector<float> out(bytes.size() / sizeof(float));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
    return out;
  }

  std::string Input(const std::string& name) const {
    std::ifstream in(inputs_dir + "/" + name, std::ios::binary);
    if (!in) throw Failure{Cat("cannot read input ", inputs_dir, "/", name)};
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  Error TryCompile(const std::string& code, std::string_view format, const std::string& options,
                   PJRT_LoadedExecutable** out) const {
    if (!can_compile) throw Skip{"compiling needs the embedded Python (--python)"};
    PJRT_Program program;
    std::memset(&program, 0, sizeof(program));
    program.struct_size = PJRT_Program_STRUCT_SIZE;
    program.code = const_cast<char*>(code.data());
    program.code_size = code.size();
    program.format = format.data();
    program.format_size = format.size();
    ARGS(Client_Compile, args);
    args.client = client;
    args.program = &program;
    args.compile_options = options.data();
    args.compile_options_size = options.size();
    Error e = Take(api->PJRT_Client_Compile(&args));
    if (e.ok()) *out = args.executable;
    return e;
  }
  PJRT_LoadedExecutable* Compile(const std::string& program_file,
                                 const std::string& options_file) const {
    PJRT_LoadedExecutable* executable = nullptr;
    Error e = TryCompile(Input(program_file), "mlir", Input(options_file), &executable);
    if (!e.ok()) throw Failure{Cat("compile failed: ", CodeName(e.code), ": ", e.message)};
    return executable;
  }

  size_t NumOutputs(PJRT_LoadedExecutable* loaded) const {
    PJRT_Executable* executable = Executable(loaded);
    ARGS(Executable_NumOutputs, args);
    args.executable = executable;
    Ok(api->PJRT_Executable_NumOutputs(&args), "PJRT_Executable_NumOutputs");
    DestroyExecutable(executable);
    return args.num_outputs;
  }
  PJRT_Executable* Executable(PJRT_LoadedExecutable* loaded) const {
    ARGS(LoadedExecutable_GetExecutable, args);
    args.loaded_executable = loaded;
    Ok(api->PJRT_LoadedExecutable_GetExecutable(&args), "PJRT_LoadedExecutable_GetExecutable");
    return args.executable;
  }
  void DestroyExecutable(PJRT_Executable* executable) const {
    ARGS(Executable_Destroy, args);
    args.executable = executable;
    Ok(api->PJRT_Executable_Destroy(&args), "PJRT_Executable_Destroy");
  }

  // Runs `loaded` with one argument row per device; waits for every device; returns the
  // output rows. Execute errors are returned in `error` when given, else fail the case.
  std::vector<std::vector<PJRT_Buffer*>> Execute(PJRT_LoadedExecutable* loaded,
                                                 const std::vector<std::vector<PJRT_Buffer*>>& rows,
                                                 const std::vector<int64_t>& non_donatable = {},
                                                 Error* error = nullptr) const {
    const size_t num_outputs = NumOutputs(loaded);
    std::vector<std::vector<PJRT_Buffer*>> outputs(rows.size(),
                                                   std::vector<PJRT_Buffer*>(num_outputs));
    std::vector<PJRT_Buffer* const*> arg_ptrs;
    std::vector<PJRT_Buffer**> out_ptrs;
    for (size_t d = 0; d < rows.size(); ++d) {
      arg_ptrs.push_back(rows[d].data());
      out_ptrs.push_back(outputs[d].data());
    }
    std::vector<PJRT_Event*> done(rows.size(), nullptr);
    PJRT_ExecuteOptions options;
    std::memset(&options, 0, sizeof(options));
    options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
    options.launch_id = 1;
    options.non_donatable_input_indices = non_donatable.data();
    options.num_non_donatable_input_indices = non_donatable.size();
    ARGS(LoadedExecutable_Execute, args);
    args.executable = loaded;
    args.options = &options;
    args.argument_lists = arg_ptrs.data();
    args.num_devices = rows.size();
    args.num_args = rows.empty() ? 0 : rows[0].size();
    args.output_lists = out_ptrs.data();
    args.device_complete_events = done.data();
    Error e = Take(api->PJRT_LoadedExecutable_Execute(&args));
    if (!e.ok()) {
      if (error != nullptr) {
        *error = e;
        return {};
      }
      throw Failure{Cat("execute failed: ", CodeName(e.code), ": ", e.message)};
    }
    for (PJRT_Event* event : done) {
      EXPECT(event != nullptr, "Execute left a device_complete_event unset");
      Await(event, "device_complete_event");
    }
    return outputs;
  }
};

// ---------------------------------------------------------------------------------------
// Cases from XLA's pjrt_c_api_test.cc (PjrtCApiTest, PjrtCApiBufferTest).

void ApiVersion(Harness& h) {
  EXPECT(h.api->pjrt_api_version.major_version == PJRT_API_MAJOR);
  EXPECT(h.api->pjrt_api_version.minor_version == PJRT_API_MINOR, "plugin minor ",
         h.api->pjrt_api_version.minor_version, ", header ", PJRT_API_MINOR);
}

void PlatformName(Harness& h) {
  ARGS(Client_PlatformName, args);
  args.client = h.client;
  h.Ok(h.api->PJRT_Client_PlatformName(&args), "PJRT_Client_PlatformName");
  const std::string name(args.platform_name, args.platform_name_size);
  EXPECT(name == h.platform, "got '", name, "'");
}

void ClientProcessIndex(Harness& h) {
  ARGS(Client_ProcessIndex, args);
  args.client = h.client;
  h.Ok(h.api->PJRT_Client_ProcessIndex(&args), "PJRT_Client_ProcessIndex");
  EXPECT(args.process_index == 0);
}

std::vector<PJRT_Device*> AllDevices(Harness& h) {
  ARGS(Client_Devices, args);
  args.client = h.client;
  h.Ok(h.api->PJRT_Client_Devices(&args), "PJRT_Client_Devices");
  return {args.devices, args.devices + args.num_devices};
}

void ClientDevices(Harness& h) {
  std::vector<PJRT_Device*> devices = AllDevices(h);
  EXPECT(!devices.empty());
  for (PJRT_Device* d : devices) EXPECT(h.DeviceId(d) >= 0);
}

void ClientAddressableDevices(Harness& h) {
  std::vector<PJRT_Device*> all = AllDevices(h), addressable = h.Devices();
  EXPECT(!addressable.empty());
  for (PJRT_Device* d : addressable) {
    EXPECT(h.DeviceId(d) >= 0);
    EXPECT(std::find(all.begin(), all.end(), d) != all.end());
  }
}

Error LookupDevice(Harness& h, int id, PJRT_Device** out) {
  ARGS(Client_LookupDevice, args);
  args.client = h.client;
  args.id = id;
  Error e = h.Take(h.api->PJRT_Client_LookupDevice(&args));
  *out = args.device;
  return e;
}

void LookupDeviceCase(Harness& h) {
  PJRT_Device* device = nullptr;
  Error e = LookupDevice(h, 0, &device);
  EXPECT(e.ok(), e.message);
  EXPECT(h.DeviceId(device) == 0);
}

void LookupAddressableDevice(Harness& h) {
  ARGS(Client_LookupAddressableDevice, args);
  args.client = h.client;
  args.local_hardware_id = 0;
  h.Ok(h.api->PJRT_Client_LookupAddressableDevice(&args), "PJRT_Client_LookupAddressableDevice");
  ARGS(Device_LocalHardwareId, id);
  id.device = args.addressable_device;
  h.Ok(h.api->PJRT_Device_LocalHardwareId(&id), "PJRT_Device_LocalHardwareId");
  EXPECT(id.local_hardware_id == 0);
}

void GetDefaultDeviceAssignmentNominal(Harness& h) {
  std::vector<int> assignment(2);
  ARGS(Client_DefaultDeviceAssignment, args);
  args.client = h.client;
  args.num_replicas = 2;
  args.num_partitions = 1;
  args.default_assignment_size = assignment.size();
  args.default_assignment = assignment.data();
  h.Ok(h.api->PJRT_Client_DefaultDeviceAssignment(&args), "DefaultDeviceAssignment");
}

void GetDefaultDeviceAssignmentBufferTooSmall(Harness& h) {
  std::vector<int> assignment(7);
  ARGS(Client_DefaultDeviceAssignment, args);
  args.client = h.client;
  args.num_replicas = 4;
  args.num_partitions = 2;
  args.default_assignment_size = assignment.size();
  args.default_assignment = assignment.data();
  Error e = h.Take(h.api->PJRT_Client_DefaultDeviceAssignment(&args));
  EXPECT(e.code == PJRT_Error_Code_FAILED_PRECONDITION, CodeName(e.code));
  EXPECT(e.message ==
             "PJRT_Client_DefaultDeviceAssignment: `default_assignment_size` 7 < "
             "`num_replicas * num_partitions`, 4 * 2 = 8",
         e.message);
}

void LookupDeviceNegativeId(Harness& h) {
  PJRT_Device* device = nullptr;
  Error e = LookupDevice(h, -1, &device);
  EXPECT(e.code == PJRT_Error_Code_INVALID_ARGUMENT, CodeName(e.code));
  EXPECT(e.message == "No matching device found for device_id -1", e.message);
}

void LookupDeviceOutOfRangeId(Harness& h) {
  const int n = static_cast<int>(AllDevices(h).size());
  PJRT_Device* device = nullptr;
  Error e = LookupDevice(h, n, &device);
  EXPECT(e.code == PJRT_Error_Code_INVALID_ARGUMENT, CodeName(e.code));
  EXPECT(e.message == Cat("No matching device found for device_id ", n), e.message);
}

void BufferTransferImmutableUntilTransferCompletes(Harness& h) {
  std::vector<float> data = {41, 42, 43, 44};
  std::vector<int64_t> dims = {4};
  ARGS(Client_BufferFromHostBuffer, args);
  args.client = h.client;
  args.data = data.data();
  args.type = PJRT_Buffer_Type_F32;
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  args.device = h.Devices()[0];
  h.Ok(h.api->PJRT_Client_BufferFromHostBuffer(&args), "BufferFromHostBuffer");
  h.Await(args.done_with_host_buffer);
  h.Destroy(args.buffer);
}

// XLA's test program: an add-one on tensor<f32>, in MHLO text.
constexpr std::string_view kAddOneMhlo = R"(
module {
  func.func @main(%arg0: tensor<f32>) -> tensor<f32> {
    %0 = mhlo.copy %arg0 : tensor<f32>
    %1 = mhlo.constant dense<1.000000e+00> : tensor<f32>
    %2 = mhlo.add %0, %1 : tensor<f32>
    return %2 : tensor<f32>
  }
})";

void CompileCase(Harness& h) {
  PJRT_LoadedExecutable* executable = nullptr;
  Error e = h.TryCompile(std::string(kAddOneMhlo), "mlir", h.Input("options_1x1.pb"), &executable);
  EXPECT(e.ok(), CodeName(e.code), ": ", e.message);
  // Beyond XLA's test: run it.
  float x = 41;
  PJRT_Buffer* arg = h.FromHost(&x, PJRT_Buffer_Type_F32, {}, h.Devices()[0]);
  auto out = h.Execute(executable, {{arg}});
  EXPECT(h.ToHostF32(out[0][0]) == std::vector<float>{42});
  h.Destroy(out[0][0]);
  h.Destroy(arg);
  h.Destroy(executable);
}

void CompileXlaComputation(Harness& h) {
  PJRT_LoadedExecutable* executable = nullptr;
  Error e = h.TryCompile(h.Input("tuple3.hlo.pb"), "hlo", h.Input("options_1x1.pb"), &executable);
  EXPECT(e.ok(), CodeName(e.code), ": ", e.message);
  h.Destroy(executable);
}

void CompileInvalidOption(Harness& h) {
  PJRT_LoadedExecutable* executable = nullptr;
  Error e = h.TryCompile(std::string(kAddOneMhlo), "mlir", "invalid compile options", &executable);
  EXPECT(e.code == PJRT_Error_Code_INVALID_ARGUMENT, CodeName(e.code), ": ", e.message);
  EXPECT(e.message.find("PJRT_Client_Compile: failed to deserialize CompileOptionsProto") !=
             std::string::npos,
         e.message);
}

void CompileInvalidProgramFormat(Harness& h) {
  PJRT_LoadedExecutable* executable = nullptr;
  Error e = h.TryCompile("", "invalid", "", &executable);
  EXPECT(e.code == PJRT_Error_Code_INVALID_ARGUMENT, CodeName(e.code), ": ", e.message);
  EXPECT(e.message == "Unknown program format 'invalid'.", e.message);
}

void PluginAttributes(Harness& h) {
  ARGS(Plugin_Attributes, args);
  h.Ok(h.api->PJRT_Plugin_Attributes(&args), "PJRT_Plugin_Attributes");
  std::set<std::string> names;
  for (size_t i = 0; i < args.num_attributes; ++i) {
    std::string name(args.attributes[i].name, args.attributes[i].name_size);
    EXPECT(names.insert(name).second, "duplicate attribute ", name);
  }
  for (const char* required :
       {"xla_version", "stablehlo_current_version", "stablehlo_minimum_version"}) {
    EXPECT(names.count(required) == 1, "missing ", required);
  }
}

PJRT_DeviceDescription* Description(Harness& h, PJRT_Device* device) {
  ARGS(Device_GetDescription, args);
  args.device = device;
  h.Ok(h.api->PJRT_Device_GetDescription(&args), "PJRT_Device_GetDescription");
  return args.device_description;
}

void DeviceId(Harness& h) { EXPECT(h.DeviceId(AllDevices(h)[0]) == 0); }

void DeviceProcessIndex(Harness& h) {
  ARGS(DeviceDescription_ProcessIndex, args);
  args.device_description = Description(h, AllDevices(h)[0]);
  h.Ok(h.api->PJRT_DeviceDescription_ProcessIndex(&args), "ProcessIndex");
  EXPECT(args.process_index == 0);
}

void DeviceIsAddressable(Harness& h) {
  ARGS(Device_IsAddressable, args);
  args.device = AllDevices(h)[0];
  h.Ok(h.api->PJRT_Device_IsAddressable(&args), "PJRT_Device_IsAddressable");
  EXPECT(args.is_addressable);
}

void DeviceLocalHardwareId(Harness& h) {
  ARGS(Device_LocalHardwareId, args);
  args.device = AllDevices(h)[0];
  h.Ok(h.api->PJRT_Device_LocalHardwareId(&args), "PJRT_Device_LocalHardwareId");
  EXPECT(args.local_hardware_id == 0);
}

template <typename Extension>
const Extension* FindExtension(const PJRT_Api* api, PJRT_Extension_Type type) {
  for (const PJRT_Extension_Base* e = api->extension_start; e != nullptr; e = e->next) {
    if (e->type == type) return reinterpret_cast<const Extension*>(e);
  }
  return nullptr;
}

void DeviceDescriptionAndMemoryDescriptions(Harness& h) {
  const auto* ext = FindExtension<PJRT_MemoryDescriptions_Extension>(
      h.api, PJRT_Extension_Type_MemoryDescriptions);
  // Extensions are optional; one that is there must describe every device's memories.
  if (ext == nullptr) throw Skip{"no MemoryDescriptions extension"};
  for (PJRT_Device* device : h.Devices()) {
    PJRT_DeviceDescription_MemoryDescriptions_Args args;
    std::memset(&args, 0, sizeof(args));
    args.struct_size = sizeof(args);
    args.device_description = Description(h, device);
    h.Ok(ext->PJRT_DeviceDescription_MemoryDescriptions(&args), "MemoryDescriptions");
    EXPECT(args.default_memory_index < args.num_memory_descriptions, "no default memory: index ",
           static_cast<int64_t>(args.default_memory_index), " of ", args.num_memory_descriptions);
    for (size_t i = 0; i < args.num_memory_descriptions; ++i) {
      PJRT_MemoryDescription_Kind_Args kind;
      std::memset(&kind, 0, sizeof(kind));
      kind.struct_size = sizeof(kind);
      kind.memory_description = args.memory_descriptions[i];
      h.Ok(ext->PJRT_MemoryDescription_Kind(&kind), "MemoryDescription_Kind");
      EXPECT(kind.kind_id != 0);
      EXPECT(kind.kind_size > 0);
    }
  }
}

// PjrtCApiBufferTest's fixture buffer: an uninitialized f32[4] on the first device.
PJRT_Buffer* Uninitialized(Harness& h) {
  std::vector<int64_t> dims = {4};
  ARGS(Client_CreateUninitializedBuffer, args);
  args.client = h.client;
  args.shape_dims = dims.data();
  args.shape_num_dims = dims.size();
  args.shape_element_type = PJRT_Buffer_Type_F32;
  args.device = h.Devices()[0];
  h.Ok(h.api->PJRT_Client_CreateUninitializedBuffer(&args), "CreateUninitializedBuffer");
  return args.buffer;
}

bool IsDeleted(Harness& h, PJRT_Buffer* buffer) {
  ARGS(Buffer_IsDeleted, args);
  args.buffer = buffer;
  h.Ok(h.api->PJRT_Buffer_IsDeleted(&args), "PJRT_Buffer_IsDeleted");
  return args.is_deleted;
}

void BufferIsDeleted(Harness& h) {
  PJRT_Buffer* buffer = Uninitialized(h);
  EXPECT(!IsDeleted(h, buffer));
  ARGS(Buffer_Delete, del);
  del.buffer = buffer;
  h.Ok(h.api->PJRT_Buffer_Delete(&del), "PJRT_Buffer_Delete");
  EXPECT(IsDeleted(h, buffer));
  h.Destroy(buffer);
}

void BufferGetOnDeviceSizeInBytes(Harness& h) {
  PJRT_Buffer* buffer = Uninitialized(h);
  ARGS(Buffer_OnDeviceSizeInBytes, args);
  args.buffer = buffer;
  h.Ok(h.api->PJRT_Buffer_OnDeviceSizeInBytes(&args), "OnDeviceSizeInBytes");
  EXPECT(args.on_device_size_in_bytes > 0);
  h.Destroy(buffer);
}

void BufferReadyEvent(Harness& h) {
  PJRT_Buffer* buffer = Uninitialized(h);
  ARGS(Buffer_ReadyEvent, args);
  args.buffer = buffer;
  h.Ok(h.api->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent");
  EXPECT(args.event != nullptr);
  ARGS(Event_Await, await);
  await.event = args.event;
  h.Ok(h.api->PJRT_Event_Await(&await), "PJRT_Event_Await");
  ARGS(Event_IsReady, ready);
  ready.event = args.event;
  h.Ok(h.api->PJRT_Event_IsReady(&ready), "PJRT_Event_IsReady");
  EXPECT(ready.is_ready);
  h.Destroy(args.event);
  h.Destroy(buffer);
}

void BufferToHostBufferNoHostLayout(Harness& h) {
  PJRT_Buffer* buffer = h.FromHost({41, 42, 43, 44}, {4}, h.Devices()[0]);
  EXPECT(h.ToHost(buffer).size() == 16);
  EXPECT(h.ToHostF32(buffer) == (std::vector<float>{41, 42, 43, 44}));
  h.Destroy(buffer);
}

void BufferIncreaseAndDecreaseReferenceCount(Harness& h) {
  PJRT_Buffer* buffer = Uninitialized(h);
  ARGS(Buffer_IncreaseExternalReferenceCount, inc);
  inc.buffer = buffer;
  h.Ok(h.api->PJRT_Buffer_IncreaseExternalReferenceCount(&inc), "Increase");
  ARGS(Buffer_DecreaseExternalReferenceCount, dec);
  dec.buffer = buffer;
  h.Ok(h.api->PJRT_Buffer_DecreaseExternalReferenceCount(&dec), "Decrease");
  h.Destroy(buffer);
}

void BufferDecreaseReferenceCountReturnsError(Harness& h) {
  PJRT_Buffer* buffer = Uninitialized(h);
  ARGS(Buffer_DecreaseExternalReferenceCount, dec);
  dec.buffer = buffer;
  Error e = h.Take(h.api->PJRT_Buffer_DecreaseExternalReferenceCount(&dec));
  EXPECT(e.code == PJRT_Error_Code_INVALID_ARGUMENT, CodeName(e.code));
  EXPECT(e.message == "Attempting to decrease reference on a buffer with zero reference count.",
         e.message);
  h.Destroy(buffer);
}

void BufferOpaqueDeviceMemoryDataPointer(Harness& h) {
  PJRT_Buffer* buffer = Uninitialized(h);
  ARGS(Buffer_OpaqueDeviceMemoryDataPointer, args);
  args.buffer = buffer;
  h.Ok(h.api->PJRT_Buffer_OpaqueDeviceMemoryDataPointer(&args), "OpaqueDeviceMemoryDataPointer");
  EXPECT(args.device_memory_ptr != nullptr);
  h.Destroy(buffer);
}

// ---------------------------------------------------------------------------------------
// What JAX relies on beyond XLA's tests.

// One Execute, one row: two outputs, each its own buffer on the device's default memory.
void ExecuteTwoOutputs(Harness& h) {
  PJRT_LoadedExecutable* exe = h.Compile("two_outputs.mlirbc", "options_1x1.pb");
  PJRT_Device* device = h.Devices()[0];
  PJRT_Buffer* a = h.FromHost({1, 2, 3, 4}, {4}, device);
  PJRT_Buffer* b = h.FromHost({10, 20, 30, 40}, {4}, device);
  auto out = h.Execute(exe, {{a, b}});
  EXPECT(out.size() == 1 && out[0].size() == 2);
  EXPECT(h.ToHostF32(out[0][0]) == (std::vector<float>{11, 22, 33, 44}));
  EXPECT(h.ToHostF32(out[0][1]) == (std::vector<float>{10, 40, 90, 160}));
  for (PJRT_Buffer* o : out[0]) {
    ARGS(Buffer_Memory, mem);
    mem.buffer = o;
    h.Ok(h.api->PJRT_Buffer_Memory(&mem), "PJRT_Buffer_Memory");
    EXPECT(mem.memory == h.DefaultMemory(device), "output not in the default memory");
    h.Destroy(o);
  }
  // Wrong argument count and shape are errors, not crashes.
  Error e;
  h.Execute(exe, {{a}}, {}, &e);
  EXPECT(!e.ok(), "one argument accepted for two");
  h.Destroy(a);
  h.Destroy(b);
  h.Destroy(exe);
}

// SPMD as JAX sends pmap and shard_map: one Execute with a row per device, a collective.
void ExecuteSpmdRows(Harness& h) {
  std::vector<PJRT_Device*> devices = h.Devices();
  if (devices.size() < 2) throw Skip{"needs 2 devices"};
  PJRT_LoadedExecutable* exe = h.Compile("spmd.mlirbc", "options_spmd.pb");
  ARGS(LoadedExecutable_AddressableDevices, ad);
  ad.executable = exe;
  h.Ok(h.api->PJRT_LoadedExecutable_AddressableDevices(&ad), "AddressableDevices");
  EXPECT(ad.num_addressable_devices == 2);
  PJRT_Buffer* x0 = h.FromHost({1, 2}, {2}, ad.addressable_devices[0]);
  PJRT_Buffer* x1 = h.FromHost({3, 4}, {2}, ad.addressable_devices[1]);
  auto out = h.Execute(exe, {{x0}, {x1}});
  EXPECT(out.size() == 2 && out[0].size() == 2);
  EXPECT(h.ToHostF32(out[0][0]) == (std::vector<float>{2, 4}));
  EXPECT(h.ToHostF32(out[1][0]) == (std::vector<float>{6, 8}));
  EXPECT(h.ToHostF32(out[0][1]) == (std::vector<float>{4, 6}));
  EXPECT(h.ToHostF32(out[1][1]) == (std::vector<float>{4, 6}));
  for (int d = 0; d < 2; ++d) {
    ARGS(Buffer_Device, dev);
    dev.buffer = out[d][0];
    h.Ok(h.api->PJRT_Buffer_Device(&dev), "PJRT_Buffer_Device");
    EXPECT(dev.device == ad.addressable_devices[d], "row ", d, " output on another device");
    for (PJRT_Buffer* o : out[d]) h.Destroy(o);
  }
  h.Destroy(x0);
  h.Destroy(x1);
  h.Destroy(exe);
}

// Donation: the donated input is deleted by Execute, unless listed as non-donatable.
void ExecuteDonation(Harness& h) {
  PJRT_LoadedExecutable* exe = h.Compile("donate.mlirbc", "options_1x1.pb");
  PJRT_Device* device = h.Devices()[0];
  PJRT_Buffer* kept = h.FromHost({1, 2, 3, 4}, {4}, device);
  auto out = h.Execute(exe, {{kept}}, /*non_donatable=*/{0});
  EXPECT(!IsDeleted(h, kept), "a non-donatable input was donated");
  EXPECT(h.ToHostF32(out[0][0]) == (std::vector<float>{2, 3, 4, 5}));
  h.Destroy(out[0][0]);
  PJRT_Buffer* donated = h.FromHost({1, 2, 3, 4}, {4}, device);
  out = h.Execute(exe, {{donated}});
  EXPECT(IsDeleted(h, donated), "the donated input is not deleted");
  EXPECT(h.ToHostF32(out[0][0]) == (std::vector<float>{2, 3, 4, 5}));
  // Using the donated buffer again is an error.
  Error e;
  h.Execute(exe, {{donated}}, {}, &e);
  EXPECT(!e.ok(), "a deleted buffer was accepted");
  h.Destroy(out[0][0]);
  h.Destroy(donated);
  h.Destroy(kept);
  h.Destroy(exe);
}

// numpy strides as jaxlib passes them: transposed, reversed, sliced; and zero-size arrays.
void HostBufferStrides(Harness& h) {
  PJRT_Device* device = h.Devices()[0];
  float m[3][4];  // m[i][j] = 10 i + j, read as its transpose f32[4,3]
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) m[i][j] = 10 * i + j;
  std::vector<int64_t> transposed = {4, 16};
  PJRT_Buffer* t = h.FromHost(&m[0][0], PJRT_Buffer_Type_F32, {4, 3}, device, nullptr, &transposed);
  std::vector<float> got = h.ToHostF32(t);
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 3; ++i) EXPECT(got[j * 3 + i] == m[i][j], "transposed ", j, ",", i);
  h.Destroy(t);
  std::vector<int64_t> reversed = {-16, 4};  // rows in reverse: data points at the last row
  PJRT_Buffer* r = h.FromHost(&m[2][0], PJRT_Buffer_Type_F32, {3, 4}, device, nullptr, &reversed);
  got = h.ToHostF32(r);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT(got[i * 4 + j] == m[2 - i][j], "reversed");
  h.Destroy(r);
  std::vector<int64_t> every_other = {16, 8};  // m[:, ::2]
  PJRT_Buffer* s =
      h.FromHost(&m[0][0], PJRT_Buffer_Type_F32, {3, 2}, device, nullptr, &every_other);
  got = h.ToHostF32(s);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) EXPECT(got[i * 2 + j] == m[i][2 * j], "sliced");
  h.Destroy(s);
  std::vector<int64_t> zero = {0, 0};
  PJRT_Buffer* z = h.FromHost(&m[0][0], PJRT_Buffer_Type_F32, {0, 3}, device, nullptr, &zero);
  EXPECT(h.ToHost(z).empty());
  h.Destroy(z);
}

// jaxlib passes device = NULL and the target memory.
void BufferFromHostToMemory(Harness& h) {
  PJRT_Device* device = h.Devices().back();
  float data[2] = {5, 6};
  PJRT_Buffer* b = h.FromHost(data, PJRT_Buffer_Type_F32, {2}, nullptr, h.DefaultMemory(device));
  ARGS(Buffer_Device, dev);
  dev.buffer = b;
  h.Ok(h.api->PJRT_Buffer_Device(&dev), "PJRT_Buffer_Device");
  EXPECT(dev.device == device);
  EXPECT(h.ToHostF32(b) == (std::vector<float>{5, 6}));
  h.Destroy(b);
}

struct Callback {
  std::mutex mu;
  std::condition_variable cv;
  bool called = false;
  int code = -1;

  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [this] { return called; });
  }
};

void OnReadyCallback(PJRT_Error* error, void* user_arg) {
  auto* cb = static_cast<std::pair<Callback*, const Harness*>*>(user_arg);
  Error e = cb->second->Take(error);  // The callback owns the error.
  std::lock_guard<std::mutex> lock(cb->first->mu);
  cb->first->code = e.code;
  cb->first->called = true;
  cb->first->cv.notify_all();
}

// jaxlib registers OnReady and destroys the event at once: the callback must still fire.
// The event belongs to a buffer of the async transfer manager, ready only once its last
// piece arrives (after the event is gone).
void OnReadyAfterDestroy(Harness& h) {
  std::vector<int64_t> dims = {4};
  PJRT_ShapeSpec spec;
  std::memset(&spec, 0, sizeof(spec));
  spec.struct_size = PJRT_ShapeSpec_STRUCT_SIZE;
  spec.dims = dims.data();
  spec.num_dims = 1;
  spec.element_type = PJRT_Buffer_Type_F32;
  ARGS(Client_CreateBuffersForAsyncHostToDevice, create);
  create.client = h.client;
  create.shape_specs = &spec;
  create.num_shape_specs = 1;
  create.memory = h.DefaultMemory(h.Devices()[0]);
  h.Ok(h.api->PJRT_Client_CreateBuffersForAsyncHostToDevice(&create),
       "CreateBuffersForAsyncHostToDevice", /*optional=*/true);
  PJRT_AsyncHostToDeviceTransferManager* manager = create.transfer_manager;
  ARGS(AsyncHostToDeviceTransferManager_RetrieveBuffer, retrieve);
  retrieve.transfer_manager = manager;
  retrieve.buffer_index = 0;
  h.Ok(h.api->PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(&retrieve), "Retrieve");
  ARGS(Buffer_ReadyEvent, ready);
  ready.buffer = retrieve.buffer_out;
  h.Ok(h.api->PJRT_Buffer_ReadyEvent(&ready), "PJRT_Buffer_ReadyEvent");
  Callback cb;
  std::pair<Callback*, const Harness*> user_arg{&cb, &h};
  ARGS(Event_OnReady, on_ready);
  on_ready.event = ready.event;
  on_ready.callback = OnReadyCallback;
  on_ready.user_arg = &user_arg;
  h.Ok(h.api->PJRT_Event_OnReady(&on_ready), "PJRT_Event_OnReady");
  h.Destroy(ready.event);
  EXPECT(!cb.called, "ready before its data arrived");
  float data[4] = {1, 2, 3, 4};
  for (int piece = 0; piece < 2; ++piece) {
    ARGS(AsyncHostToDeviceTransferManager_TransferData, transfer);
    transfer.transfer_manager = manager;
    transfer.buffer_index = 0;
    transfer.data = data + 2 * piece;
    transfer.offset = 8 * piece;
    transfer.transfer_size = 8;
    transfer.is_last_transfer = piece == 1;
    h.Ok(h.api->PJRT_AsyncHostToDeviceTransferManager_TransferData(&transfer), "TransferData");
    h.Await(transfer.done_with_h2d_transfer);
  }
  EXPECT(cb.Wait(), "OnReady callback never ran");
  EXPECT(cb.code == 0, CodeName(cb.code));
  EXPECT(h.ToHostF32(retrieve.buffer_out) == (std::vector<float>{1, 2, 3, 4}));
  h.Destroy(retrieve.buffer_out);
  ARGS(AsyncHostToDeviceTransferManager_Destroy, destroy);
  destroy.transfer_manager = manager;
  h.Ok(h.api->PJRT_AsyncHostToDeviceTransferManager_Destroy(&destroy), "Destroy manager");
}

// Device-to-device and device-to-host-memory copies (jax.device_put between devices and
// memory kinds).
void CopyToMemory(Harness& h) {
  std::vector<PJRT_Device*> devices = h.Devices();
  PJRT_Buffer* src = h.FromHost({7, 8, 9}, {3}, devices[0]);
  std::vector<PJRT_Memory*> targets = {h.DefaultMemory(devices.back())};
  if (PJRT_Memory* host = h.MemoryOfKind(devices[0], "pinned_host")) targets.push_back(host);
  for (PJRT_Memory* memory : targets) {
    ARGS(Buffer_CopyToMemory, copy);
    copy.buffer = src;
    copy.dst_memory = memory;
    h.Ok(h.api->PJRT_Buffer_CopyToMemory(&copy), "PJRT_Buffer_CopyToMemory");
    ARGS(Buffer_Memory, mem);
    mem.buffer = copy.dst_buffer;
    h.Ok(h.api->PJRT_Buffer_Memory(&mem), "PJRT_Buffer_Memory");
    EXPECT(mem.memory == memory, "copy landed in another memory");
    EXPECT(h.ToHostF32(copy.dst_buffer) == (std::vector<float>{7, 8, 9}));
    h.Destroy(copy.dst_buffer);
  }
  h.Destroy(src);
}

void ClientDestroyWithQueuedWork(Harness& h) {
  // Buffers and executables outliving the client is the caller's bug; destroying the
  // client while work is queued is not: it must wait for the work and succeed.
  PJRT_LoadedExecutable* exe = h.Compile("two_outputs.mlirbc", "options_1x1.pb");
  PJRT_Buffer* a = h.FromHost({1, 2, 3, 4}, {4}, h.Devices()[0]);
  PJRT_Buffer* b = h.FromHost({1, 1, 1, 1}, {4}, h.Devices()[0]);
  auto out = h.Execute(exe, {{a, b}});
  for (PJRT_Buffer* o : out[0]) h.Destroy(o);
  h.Destroy(a);
  h.Destroy(b);
  h.Destroy(exe);
  h.DestroyClient();  // Checked OK.
}

// ---------------------------------------------------------------------------------------
// The rest of the API, one feature per case (SKIP where a plugin says UNIMPLEMENTED).

void ExecutableQueries(Harness& h) {
  PJRT_LoadedExecutable* loaded = h.Compile("two_outputs.mlirbc", "options_1x1.pb");
  PJRT_Executable* exe = h.Executable(loaded);
  ARGS(Executable_Name, name);
  name.executable = exe;
  h.Ok(h.api->PJRT_Executable_Name(&name), "Name");
  EXPECT(name.executable_name_size > 0);
  ARGS(Executable_NumReplicas, replicas);
  replicas.executable = exe;
  h.Ok(h.api->PJRT_Executable_NumReplicas(&replicas), "NumReplicas");
  EXPECT(replicas.num_replicas == 1);
  ARGS(Executable_NumPartitions, partitions);
  partitions.executable = exe;
  h.Ok(h.api->PJRT_Executable_NumPartitions(&partitions), "NumPartitions");
  EXPECT(partitions.num_partitions == 1);
  ARGS(Executable_OutputElementTypes, types);
  types.executable = exe;
  h.Ok(h.api->PJRT_Executable_OutputElementTypes(&types), "OutputElementTypes");
  EXPECT(types.num_output_types == 2 && types.output_types[1] == PJRT_Buffer_Type_F32);
  ARGS(Executable_OutputDimensions, dims);
  dims.executable = exe;
  h.Ok(h.api->PJRT_Executable_OutputDimensions(&dims), "OutputDimensions");
  EXPECT(dims.num_outputs == 2 && dims.dim_sizes[0] == 1 && dims.dims[0] == 4);
  ARGS(Executable_Fingerprint, fingerprint);
  fingerprint.executable = exe;
  h.Ok(h.api->PJRT_Executable_Fingerprint(&fingerprint), "Fingerprint", true);
  EXPECT(fingerprint.executable_fingerprint_size > 0);
  ARGS(LoadedExecutable_GetDeviceAssignment, assignment);
  assignment.executable = loaded;
  h.Ok(h.api->PJRT_LoadedExecutable_GetDeviceAssignment(&assignment), "GetDeviceAssignment");
  EXPECT(assignment.serialized_bytes_size > 0);
  assignment.serialized_device_assignment_deleter(assignment.serialized_device_assignment);
  h.DestroyExecutable(exe);
  h.Destroy(loaded);
}

// UNIMPLEMENTED is allowed: jaxlib then assumes every output is in the default memory.
void ExecutableOutputMemoryKinds(Harness& h) {
  PJRT_LoadedExecutable* loaded = h.Compile("two_outputs.mlirbc", "options_1x1.pb");
  PJRT_Executable* exe = h.Executable(loaded);
  ARGS(Executable_OutputMemoryKinds, kinds);
  kinds.executable = exe;
  Error e = h.Take(h.api->PJRT_Executable_OutputMemoryKinds(&kinds));
  std::vector<std::string> got;  // Copied out: the kinds live as long as the executable.
  for (size_t i = 0; e.ok() && i < kinds.num_outputs; ++i) {
    got.emplace_back(kinds.memory_kinds[i], kinds.memory_kind_sizes[i]);
  }
  h.DestroyExecutable(exe);
  h.Destroy(loaded);
  if (e.code == PJRT_Error_Code_UNIMPLEMENTED) throw Skip{Cat("UNIMPLEMENTED: ", e.message)};
  EXPECT(e.ok(), CodeName(e.code), ": ", e.message);
  EXPECT(got == (std::vector<std::string>{"device", "device"}));
}

void ExecutableOptimizedProgram(Harness& h) {
  PJRT_LoadedExecutable* loaded = h.Compile("two_outputs.mlirbc", "options_1x1.pb");
  PJRT_Executable* exe = h.Executable(loaded);
  PJRT_Program program;
  std::memset(&program, 0, sizeof(program));
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  ARGS(Executable_OptimizedProgram, args);
  args.executable = exe;
  args.program = &program;
  h.Ok(h.api->PJRT_Executable_OptimizedProgram(&args), "OptimizedProgram (size)", true);
  std::string code(program.code_size, '\0');
  program.code = code.data();
  h.Ok(h.api->PJRT_Executable_OptimizedProgram(&args), "OptimizedProgram (fill)");
  const std::string format(program.format, program.format_size);
  EXPECT(format == "mlir" || format == "hlo_with_config", format);
  EXPECT(!code.empty());
  h.DestroyExecutable(exe);
  h.Destroy(loaded);
}

void ExecutableCostAndMemoryStats(Harness& h) {
  PJRT_LoadedExecutable* loaded = h.Compile("two_outputs.mlirbc", "options_1x1.pb");
  PJRT_Executable* exe = h.Executable(loaded);
  ARGS(Executable_GetCompiledMemoryStats, stats);
  stats.executable = exe;
  h.Ok(h.api->PJRT_Executable_GetCompiledMemoryStats(&stats), "GetCompiledMemoryStats", true);
  EXPECT(stats.argument_size_in_bytes == 32, stats.argument_size_in_bytes);
  // XLA's CPU plugin also counts the 16-byte table of its output tuple.
  EXPECT(stats.output_size_in_bytes >= 32, stats.output_size_in_bytes);
  ARGS(Executable_GetCostAnalysis, cost);
  cost.executable = exe;
  h.Ok(h.api->PJRT_Executable_GetCostAnalysis(&cost), "GetCostAnalysis", true);
  bool has_flops = false;
  for (size_t i = 0; i < cost.num_properties; ++i) {
    const PJRT_NamedValue& p = cost.properties[i];
    if (std::string(p.name, p.name_size) == "flops") {
      has_flops = true;
      EXPECT(p.type == PJRT_NamedValue_kFloat && p.float_value == 8, "flops ", p.float_value);
    }
  }
  EXPECT(has_flops, "no flops property");
  h.DestroyExecutable(exe);
  h.Destroy(loaded);
}

void SerializeAndDeserialize(Harness& h) {
  PJRT_LoadedExecutable* loaded = h.Compile("two_outputs.mlirbc", "options_1x1.pb");
  PJRT_Executable* exe = h.Executable(loaded);
  ARGS(Executable_Serialize, ser);
  ser.executable = exe;
  h.Ok(h.api->PJRT_Executable_Serialize(&ser), "Serialize", true);
  const std::string blob(ser.serialized_bytes, ser.serialized_bytes_size);
  ser.serialized_executable_deleter(ser.serialized_executable);
  h.DestroyExecutable(exe);
  h.Destroy(loaded);
  ARGS(Executable_DeserializeAndLoad, de);
  de.client = h.client;
  de.serialized_executable = blob.data();
  de.serialized_executable_size = blob.size();
  h.Ok(h.api->PJRT_Executable_DeserializeAndLoad(&de), "DeserializeAndLoad");
  PJRT_Buffer* a = h.FromHost({1, 2, 3, 4}, {4}, h.Devices()[0]);
  auto out = h.Execute(de.loaded_executable, {{a, a}});
  EXPECT(h.ToHostF32(out[0][1]) == (std::vector<float>{1, 4, 9, 16}));
  for (PJRT_Buffer* o : out[0]) h.Destroy(o);
  h.Destroy(a);
  h.Destroy(de.loaded_executable);
  // The persistent cache passes the compile options of the call that hit the cache, which
  // may name other devices: the executable must run where they say.
  std::vector<PJRT_Device*> devices = h.Devices();
  if (devices.size() >= 2) {
    const std::string options = h.Input("options_1x1_device1.pb");
    ARGS(Executable_DeserializeAndLoad, moved);
    moved.client = h.client;
    moved.serialized_executable = blob.data();
    moved.serialized_executable_size = blob.size();
    moved.overridden_serialized_compile_options = options.data();
    moved.overridden_serialized_compile_options_size = options.size();
    h.Ok(h.api->PJRT_Executable_DeserializeAndLoad(&moved), "DeserializeAndLoad (device 1)");
    ARGS(LoadedExecutable_AddressableDevices, where);
    where.executable = moved.loaded_executable;
    h.Ok(h.api->PJRT_LoadedExecutable_AddressableDevices(&where), "AddressableDevices");
    EXPECT(where.num_addressable_devices == 1 && h.DeviceId(where.addressable_devices[0]) == 1,
           "the overridden options' device assignment was ignored");
    PJRT_Buffer* b = h.FromHost({1, 2, 3, 4}, {4}, where.addressable_devices[0]);
    out = h.Execute(moved.loaded_executable, {{b, b}});
    EXPECT(h.ToHostF32(out[0][0]) == (std::vector<float>{2, 4, 6, 8}));
    for (PJRT_Buffer* o : out[0]) h.Destroy(o);
    h.Destroy(b);
    h.Destroy(moved.loaded_executable);
  }
  // Garbage is an error.
  ARGS(Executable_DeserializeAndLoad, bad);
  bad.client = h.client;
  bad.serialized_executable = "garbage";
  bad.serialized_executable_size = 7;
  Error e = h.Take(h.api->PJRT_Executable_DeserializeAndLoad(&bad));
  EXPECT(!e.ok(), "garbage deserialized");
}

void LoadedExecutableDelete(Harness& h) {
  PJRT_LoadedExecutable* loaded = h.Compile("two_outputs.mlirbc", "options_1x1.pb");
  ARGS(LoadedExecutable_Delete, del);
  del.executable = loaded;
  h.Ok(h.api->PJRT_LoadedExecutable_Delete(&del), "LoadedExecutable_Delete", true);
  ARGS(LoadedExecutable_IsDeleted, is);
  is.executable = loaded;
  h.Ok(h.api->PJRT_LoadedExecutable_IsDeleted(&is), "LoadedExecutable_IsDeleted");
  EXPECT(is.is_deleted);
  PJRT_Buffer* a = h.FromHost({1, 2, 3, 4}, {4}, h.Devices()[0]);
  Error e;
  h.Execute(loaded, {{a, a}}, {}, &e);
  EXPECT(!e.ok(), "a deleted executable ran");
  h.Destroy(a);
  h.Destroy(loaded);
}

void CopyRawToHost(Harness& h) {
  PJRT_Buffer* b = h.FromHost({1, 2, 3, 4}, {4}, h.Devices()[0]);
  float out[2] = {0, 0};
  ARGS(Buffer_CopyRawToHost, args);
  args.buffer = b;
  args.dst = out;
  args.offset = 4;
  args.transfer_size = 8;
  h.Ok(h.api->PJRT_Buffer_CopyRawToHost(&args), "CopyRawToHost", true);
  h.Await(args.event);
  EXPECT(out[0] == 2 && out[1] == 3);
  ARGS(Buffer_CopyRawToHost, bad);
  bad.buffer = b;
  bad.dst = out;
  bad.offset = 12;
  bad.transfer_size = 8;
  Error e = h.Take(h.api->PJRT_Buffer_CopyRawToHost(&bad));
  if (e.ok()) {  // An implementation may report the error through the event instead.
    ARGS(Event_Await, await);
    await.event = bad.event;
    e = h.Take(h.api->PJRT_Event_Await(&await));
    h.Destroy(bad.event);
  }
  EXPECT(!e.ok(), "an out-of-range raw copy succeeded");
  h.Destroy(b);
}

void HostLayoutColumnMajor(Harness& h) {
  float data[6] = {1, 2, 3, 4, 5, 6};  // f32[2,3]
  PJRT_Buffer* b = h.FromHost(data, PJRT_Buffer_Type_F32, {2, 3}, h.Devices()[0]);
  int64_t minor_to_major[2] = {0, 1};
  PJRT_Buffer_MemoryLayout layout;
  std::memset(&layout, 0, sizeof(layout));
  layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
  layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  layout.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
  layout.tiled.minor_to_major = minor_to_major;
  layout.tiled.minor_to_major_size = 2;
  ARGS(Buffer_ToHostBuffer, query);
  query.src = b;
  query.host_layout = &layout;
  Error e = h.Take(h.api->PJRT_Buffer_ToHostBuffer(&query));
  if (!e.ok()) throw Skip{Cat("column-major host layout: ", CodeName(e.code), ": ", e.message)};
  std::vector<char> bytes = h.ToHost(b, &layout);
  std::vector<float> got(6);
  std::memcpy(got.data(), bytes.data(), 24);
  EXPECT(got == (std::vector<float>{1, 4, 2, 5, 3, 6}), "got ", got[0], ",", got[1], ",", got[2],
         ",", got[3], ",", got[4], ",", got[5]);
  h.Destroy(b);
}

void ViewOfDeviceBuffer(Harness& h) {
  alignas(64) static float data[4] = {1, 2, 3, 4};
  static std::atomic<int> deleted{0};
  deleted = 0;
  std::vector<int64_t> dims = {4};
  ARGS(Client_CreateViewOfDeviceBuffer, args);
  args.client = h.client;
  args.device_buffer_ptr = data;
  args.dims = dims.data();
  args.num_dims = 1;
  args.element_type = PJRT_Buffer_Type_F32;
  args.memory = h.DefaultMemory(h.Devices()[0]);
  args.on_delete_callback = [](void*, void*) { ++deleted; };
  h.Ok(h.api->PJRT_Client_CreateViewOfDeviceBuffer(&args), "CreateViewOfDeviceBuffer", true);
  data[0] = 10;  // A view, not a copy.
  EXPECT(h.ToHostF32(args.buffer) == (std::vector<float>{10, 2, 3, 4}));
  h.Destroy(args.buffer);
  // The callback runs once nothing uses the memory any more: XLA's plugin may still be
  // finishing the transfer on its own thread when Destroy returns, so give it a moment.
  for (int i = 0; i < 200 && deleted == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT(deleted == 1, "on_delete_callback ran ", deleted.load(), " times");
}

void TopologyDescription(Harness& h) {
  ARGS(Client_TopologyDescription, args);
  args.client = h.client;
  h.Ok(h.api->PJRT_Client_TopologyDescription(&args), "Client_TopologyDescription", true);
  ARGS(TopologyDescription_PlatformName, name);
  name.topology = args.topology;
  h.Ok(h.api->PJRT_TopologyDescription_PlatformName(&name), "Topology PlatformName");
  EXPECT(std::string(name.platform_name, name.platform_name_size) == h.platform);
  ARGS(TopologyDescription_GetDeviceDescriptions, descs);
  descs.topology = args.topology;
  h.Ok(h.api->PJRT_TopologyDescription_GetDeviceDescriptions(&descs), "GetDeviceDescriptions");
  EXPECT(descs.num_descriptions == AllDevices(h).size());
  ARGS(TopologyDescription_Serialize, ser);
  ser.topology = args.topology;
  h.Ok(h.api->PJRT_TopologyDescription_Serialize(&ser), "Topology Serialize", true);
  EXPECT(ser.serialized_bytes_size > 0);
  const std::string bytes(ser.serialized_bytes, ser.serialized_bytes_size);
  ser.serialized_topology_deleter(ser.serialized_topology);
  ARGS(TopologyDescription_Deserialize, de);
  de.serialized_topology = bytes.data();
  de.serialized_topology_size = bytes.size();
  h.Ok(h.api->PJRT_TopologyDescription_Deserialize(&de), "Topology Deserialize", true);
  ARGS(TopologyDescription_Destroy, destroy);
  destroy.topology = de.topology;
  h.Ok(h.api->PJRT_TopologyDescription_Destroy(&destroy), "Topology Destroy");
}

// Ahead-of-time: compile for a standalone topology, serialize, load into a client.
void CompileAgainstTopology(Harness& h) {
  if (!h.can_compile) throw Skip{"compiling needs the embedded Python (--python)"};
  ARGS(TopologyDescription_Create, create);
  h.Ok(h.api->PJRT_TopologyDescription_Create(&create), "TopologyDescription_Create", true);
  const std::string code = h.Input("two_outputs.mlirbc"), options = h.Input("options_1x1.pb");
  PJRT_Program program;
  std::memset(&program, 0, sizeof(program));
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = const_cast<char*>(code.data());
  program.code_size = code.size();
  program.format = "mlir";
  program.format_size = 4;
  ARGS(Compile, compile);
  compile.topology = create.topology;
  compile.program = &program;
  compile.compile_options = options.data();
  compile.compile_options_size = options.size();
  h.Ok(h.api->PJRT_Compile(&compile), "PJRT_Compile", true);
  ARGS(Executable_Serialize, ser);
  ser.executable = compile.executable;
  h.Ok(h.api->PJRT_Executable_Serialize(&ser), "Serialize");
  ARGS(Executable_DeserializeAndLoad, de);
  de.client = h.client;
  de.serialized_executable = ser.serialized_bytes;
  de.serialized_executable_size = ser.serialized_bytes_size;
  h.Ok(h.api->PJRT_Executable_DeserializeAndLoad(&de), "DeserializeAndLoad");
  ser.serialized_executable_deleter(ser.serialized_executable);
  h.DestroyExecutable(compile.executable);
  ARGS(TopologyDescription_Destroy, destroy);
  destroy.topology = create.topology;
  h.Ok(h.api->PJRT_TopologyDescription_Destroy(&destroy), "Topology Destroy");
  PJRT_Buffer* a = h.FromHost({1, 2, 3, 4}, {4}, h.Devices()[0]);
  auto out = h.Execute(de.loaded_executable, {{a, a}});
  EXPECT(h.ToHostF32(out[0][0]) == (std::vector<float>{2, 4, 6, 8}));
  for (PJRT_Buffer* o : out[0]) h.Destroy(o);
  h.Destroy(a);
  h.Destroy(de.loaded_executable);
}

void DeviceMemoryStats(Harness& h) {
  PJRT_Device* device = h.Devices()[0];
  auto in_use = [&] {
    ARGS(Device_MemoryStats, args);
    args.device = device;
    h.Ok(h.api->PJRT_Device_MemoryStats(&args), "Device_MemoryStats", true);
    return args.bytes_in_use;
  };
  const int64_t before = in_use();
  std::vector<float> big(1 << 16, 1.0f);
  PJRT_Buffer* b = h.FromHost(big, {1 << 16}, device);
  EXPECT(in_use() >= before + (1 << 18), "bytes_in_use did not grow by the buffer");
  h.Destroy(b);
  EXPECT(in_use() == before, "bytes_in_use did not shrink back");
}

void LayoutsExtension(Harness& h) {
  const auto* ext = FindExtension<PJRT_Layouts_Extension>(h.api, PJRT_Extension_Type_Layouts);
  if (ext == nullptr) throw Skip{"no Layouts extension"};
  PJRT_Buffer* b = h.FromHost({1, 2, 3, 4, 5, 6}, {2, 3}, h.Devices()[0]);
  PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.buffer = b;
  h.Ok(ext->PJRT_Layouts_PJRT_Buffer_MemoryLayout(&args), "Buffer_MemoryLayout");
  PJRT_Layouts_MemoryLayout_Serialize_Args ser;
  std::memset(&ser, 0, sizeof(ser));
  ser.struct_size = sizeof(ser);
  ser.layout = args.layout;
  h.Ok(ext->PJRT_Layouts_MemoryLayout_Serialize(&ser), "MemoryLayout_Serialize");
  const std::string text(ser.serialized_bytes, ser.serialized_bytes_size);
  ser.serialized_layout_deleter(ser.serialized_layout);
  EXPECT(text == "{1,0}", text);
  PJRT_Layouts_MemoryLayout_Destroy_Args destroy;
  std::memset(&destroy, 0, sizeof(destroy));
  destroy.struct_size = sizeof(destroy);
  destroy.layout = args.layout;
  h.Ok(ext->PJRT_Layouts_MemoryLayout_Destroy(&destroy), "MemoryLayout_Destroy");
  h.Destroy(b);
}

// BufferFromHostBuffer with a column-major device layout: the buffer reports that layout
// (Layouts extension) and reads back row-major when no host layout is given. (Its device
// bytes differ: ours are column-major, XLA's CPU plugin keeps the host's row-major bytes
// under the {0,1} label; tests/compiler/test_layouts.py reads ours.)
void DeviceLayoutColumnMajor(Harness& h) {
  const auto* ext = FindExtension<PJRT_Layouts_Extension>(h.api, PJRT_Extension_Type_Layouts);
  if (ext == nullptr) throw Skip{"no Layouts extension"};
  float data[6] = {1, 2, 3, 4, 5, 6};  // f32[2,3]
  std::vector<int64_t> dims = {2, 3};
  int64_t minor_to_major[2] = {0, 1};
  PJRT_Buffer_MemoryLayout layout;
  std::memset(&layout, 0, sizeof(layout));
  layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
  layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  layout.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
  layout.tiled.minor_to_major = minor_to_major;
  layout.tiled.minor_to_major_size = 2;
  ARGS(Client_BufferFromHostBuffer, args);
  args.client = h.client;
  args.data = data;
  args.type = PJRT_Buffer_Type_F32;
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  args.device = h.Devices()[0];
  args.device_layout = &layout;
  Error e = h.Take(h.api->PJRT_Client_BufferFromHostBuffer(&args));
  if (!e.ok()) throw Skip{Cat("column-major device layout: ", CodeName(e.code), ": ", e.message)};
  h.Await(args.done_with_host_buffer, "done_with_host_buffer");
  PJRT_Buffer* b = args.buffer;

  PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args get;
  std::memset(&get, 0, sizeof(get));
  get.struct_size = sizeof(get);
  get.buffer = b;
  h.Ok(ext->PJRT_Layouts_PJRT_Buffer_MemoryLayout(&get), "Buffer_MemoryLayout");
  PJRT_Layouts_MemoryLayout_Serialize_Args ser;
  std::memset(&ser, 0, sizeof(ser));
  ser.struct_size = sizeof(ser);
  ser.layout = get.layout;
  h.Ok(ext->PJRT_Layouts_MemoryLayout_Serialize(&ser), "MemoryLayout_Serialize");
  const std::string text(ser.serialized_bytes, ser.serialized_bytes_size);
  ser.serialized_layout_deleter(ser.serialized_layout);
  EXPECT(text == "{0,1}", text);
  PJRT_Layouts_MemoryLayout_Destroy_Args destroy;
  std::memset(&destroy, 0, sizeof(destroy));
  destroy.struct_size = sizeof(destroy);
  destroy.layout = get.layout;
  h.Ok(ext->PJRT_Layouts_MemoryLayout_Destroy(&destroy), "MemoryLayout_Destroy");

  std::vector<char> bytes = h.ToHost(b);
  std::vector<float> got(6);
  std::memcpy(got.data(), bytes.data(), 24);
  EXPECT(got == (std::vector<float>{1, 2, 3, 4, 5, 6}), "row-major read: ", got[0], ",", got[1],
         ",", got[2], ",", got[3], ",", got[4], ",", got[5]);
  h.Destroy(b);
}

void MemoryKinds(Harness& h) {
  for (PJRT_Device* device : h.Devices()) {
    std::set<int> ids;
    for (PJRT_Memory* m : h.Memories(device)) {
      ARGS(Memory_Kind_Id, id);
      id.memory = m;
      h.Ok(h.api->PJRT_Memory_Kind_Id(&id), "Memory_Kind_Id");
      EXPECT(ids.insert(id.kind_id).second, "two memories of one device share kind id ",
             id.kind_id);
      ARGS(Memory_AddressableByDevices, by);
      by.memory = m;
      h.Ok(h.api->PJRT_Memory_AddressableByDevices(&by), "AddressableByDevices");
      EXPECT(std::find(by.devices, by.devices + by.num_devices, device) !=
             by.devices + by.num_devices);
    }
    EXPECT(h.MemoryKind(h.DefaultMemory(device)) == "device");
  }
}

void EventErrorOnReadyEvent(Harness& h) {
  PJRT_Buffer* b = h.FromHost({1}, {1}, h.Devices()[0]);
  ARGS(Buffer_ReadyEvent, ready);
  ready.buffer = b;
  h.Ok(h.api->PJRT_Buffer_ReadyEvent(&ready), "ReadyEvent");
  h.Await(ready.event);  // Also destroys it.
  ARGS(Buffer_ReadyEvent, again);
  again.buffer = b;
  h.Ok(h.api->PJRT_Buffer_ReadyEvent(&again), "ReadyEvent");
  ARGS(Event_IsReady, is_ready);
  is_ready.event = again.event;
  h.Ok(h.api->PJRT_Event_IsReady(&is_ready), "IsReady");
  EXPECT(is_ready.is_ready);
  ARGS(Event_Error, error);
  error.event = again.event;
  h.Ok(h.api->PJRT_Event_Error(&error), "Event_Error of a successful event");
  h.Destroy(again.event);
  h.Destroy(b);
}

// ---------------------------------------------------------------------------------------

struct Case {
  const char* name;
  void (*run)(Harness&);
};

const Case kCases[] = {
    // PjrtCApiTest
    {"ApiVersion", ApiVersion},
    {"PlatformName", PlatformName},
    {"ClientProcessIndex", ClientProcessIndex},
    {"ClientDevices", ClientDevices},
    {"ClientAddressableDevices", ClientAddressableDevices},
    {"LookupDevice", LookupDeviceCase},
    {"LookupAddressableDevice", LookupAddressableDevice},
    {"GetDefaultDeviceAssignmentNominal", GetDefaultDeviceAssignmentNominal},
    {"GetDefaultDeviceAssignmentBufferTooSmall", GetDefaultDeviceAssignmentBufferTooSmall},
    {"LookupDeviceNegativeId", LookupDeviceNegativeId},
    {"LookupDeviceOutOfRangeId", LookupDeviceOutOfRangeId},
    {"BufferTransferImmutableUntilTransferCompletes",
     BufferTransferImmutableUntilTransferCompletes},
    {"Compile", CompileCase},
    {"CompileXlaComputation", CompileXlaComputation},
    {"CompileInvalidOption", CompileInvalidOption},
    {"CompileInvalidProgramFormat", CompileInvalidProgramFormat},
    {"PluginAttributes", PluginAttributes},
    {"DeviceId", DeviceId},
    {"DeviceProcessIndex", DeviceProcessIndex},
    {"DeviceIsAddressable", DeviceIsAddressable},
    {"DeviceLocalHardwareId", DeviceLocalHardwareId},
    {"DeviceDescriptionAndMemoryDescriptions", DeviceDescriptionAndMemoryDescriptions},
    // PjrtCApiBufferTest
    {"BufferIsDeleted", BufferIsDeleted},
    {"BufferGetOnDeviceSizeInBytes", BufferGetOnDeviceSizeInBytes},
    {"BufferReadyEvent", BufferReadyEvent},
    {"BufferToHostBufferNoHostLayout", BufferToHostBufferNoHostLayout},
    {"BufferIncreaseAndDecreaseReferenceCount", BufferIncreaseAndDecreaseReferenceCount},
    {"BufferDecreaseReferenceCountReturnsError", BufferDecreaseReferenceCountReturnsError},
    {"BufferOpaqueDeviceMemoryDataPointer", BufferOpaqueDeviceMemoryDataPointer},
    // What JAX relies on
    {"ExecuteTwoOutputs", ExecuteTwoOutputs},
    {"ExecuteSpmdRows", ExecuteSpmdRows},
    {"ExecuteDonation", ExecuteDonation},
    {"HostBufferStrides", HostBufferStrides},
    {"BufferFromHostToMemory", BufferFromHostToMemory},
    {"OnReadyAfterDestroy", OnReadyAfterDestroy},
    {"CopyToMemory", CopyToMemory},
    {"ClientDestroyWithQueuedWork", ClientDestroyWithQueuedWork},
    // The rest of the API
    {"ExecutableQueries", ExecutableQueries},
    {"ExecutableOutputMemoryKinds", ExecutableOutputMemoryKinds},
    {"ExecutableOptimizedProgram", ExecutableOptimizedProgram},
    {"ExecutableCostAndMemoryStats", ExecutableCostAndMemoryStats},
    {"SerializeAndDeserialize", SerializeAndDeserialize},
    {"LoadedExecutableDelete", LoadedExecutableDelete},
    {"CopyRawToHost", CopyRawToHost},
    {"HostLayoutColumnMajor", HostLayoutColumnMajor},
    {"ViewOfDeviceBuffer", ViewOfDeviceBuffer},
    {"TopologyDescription", TopologyDescription},
    {"CompileAgainstTopology", CompileAgainstTopology},
    {"DeviceMemoryStats", DeviceMemoryStats},
    {"LayoutsExtension", LayoutsExtension},
    {"DeviceLayoutColumnMajor", DeviceLayoutColumnMajor},
    {"MemoryKinds", MemoryKinds},
    {"EventErrorOnReadyEvent", EventErrorOnReadyEvent},
};

int Usage() {
  std::fprintf(stderr,
               "usage: harness PLUGIN.so --inputs DIR --platform NAME [--python REPO] "
               "[--filter SUBSTRING] [--repeat N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  Harness h;
  const char* plugin = argv[1];
  std::string python_repo, filter;
  int repeat = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--inputs")
      h.inputs_dir = value;
    else if (flag == "--platform")
      h.platform = value;
    else if (flag == "--python")
      python_repo = value;
    else if (flag == "--filter")
      filter = value;
    else if (flag == "--repeat")
      repeat = std::stoi(value);
    else
      return Usage();
  }
#ifdef WORKSHOP_HARNESS_PYTHON
  if (!python_repo.empty()) {
    Py_InitializeEx(0);
    PyRun_SimpleString(Cat("import sys; sys.path.insert(0, '", python_repo, "')").c_str());
    PyEval_SaveThread();  // Plugins take the GIL themselves (PyGILState_Ensure).
  }
#endif
  void* library = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "dlopen(%s): %s\n", plugin, dlerror());
    return 2;
  }
  auto get_api = reinterpret_cast<const PJRT_Api* (*)()>(dlsym(library, "GetPjrtApi"));
  if (get_api == nullptr) {
    std::fprintf(stderr, "%s does not export GetPjrtApi\n", plugin);
    return 2;
  }
  h.api = get_api();
  // The workshop plugin compiles with Python; XLA's does not need any.
  h.can_compile = h.platform != "workshop" || !python_repo.empty();
  {
    ARGS(Plugin_Initialize, init);
    h.Ok(h.api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");
  }
  int passed = 0, failed = 0, skipped = 0;
  for (int round = 0; round < repeat; ++round) {
    for (const Case& c : kCases) {
      if (!filter.empty() && std::string(c.name).find(filter) == std::string::npos) continue;
      std::string outcome;
      try {
        h.NewClient();
        c.run(h);
        h.DestroyClient();
        outcome = "PASS";
        ++passed;
      } catch (const Failure& f) {
        outcome = Cat("FAIL ", c.name, ": ", f.why);
        ++failed;
      } catch (const Skip& s) {
        outcome = Cat("SKIP ", c.name, ": ", s.why);
        ++skipped;
      }
      if (h.client != nullptr) {
        try {
          h.DestroyClient();
        } catch (const Failure& f) {
          outcome += Cat(" (and Client_Destroy failed: ", f.why, ")");
        }
      }
      if (outcome == "PASS") outcome = Cat("PASS ", c.name);
      std::printf("%s\n", outcome.c_str());
      std::fflush(stdout);
    }
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  std::fflush(stdout);
  const int status = failed == 0 ? 0 : 1;
  // With an embedded interpreter, leave without finalizing it: jaxlib (imported by the
  // compiler) has threads of its own. Otherwise return normally, so that leak checkers run.
  if (!python_repo.empty()) std::_Exit(status);
  dlclose(library);
  return status;
}
