// The PJRT C API of the __NAME__ plugin: GetPjrtApi and the PJRT_Api table behind it.
//
// The table sets every slot of the pjrt_c_api.h it is built against, in the header's
// order: build/generated/pjrt_api_slots.inc lists them (setup.py writes it from the
// header). A function this file implements is an `IMPLEMENT(Name)` below; every other
// slot answers UNIMPLEMENTED naming itself. jaxlib calls some functions without checking
// for NULL and reads the table up to the minor version declared, so a NULL slot, or a
// version above the header's, would crash the process; neither can happen here.
//
// One file of about 850 lines on purpose: the generated project is a starting point a
// reader reads top to bottom, with the whole C API layer in one place (runtime.cc and
// kernels.cc hold the rest).
//
// Every call goes through Entry: `args` must be non-NULL and its struct_size at least
// this header's (a larger one is a newer caller's: fields are only appended); an Error
// or any C++ exception the implementation throws becomes a PJRT_Error.
#include <algorithm>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "runtime.h"

using namespace __NAME__;  // NOLINT: this file is the runtime's C face

namespace {

// ---- The checked entry.

// A string literal as a template argument (the function's name).
template <size_t N>
struct Name {
  constexpr Name(const char (&text)[N]) { std::copy_n(text, N, this->text); }
  char text[N];
};

// The implementation of the function taking `Args`; the primary template means "not
// implemented". Specializations come from IMPLEMENT below.
template <typename Args>
struct Impl {
  static constexpr bool kDefined = false;
};

#define IMPLEMENT(Name)                                   \
  template <>                                             \
  struct Impl<PJRT_##Name##_Args> {                       \
    static constexpr bool kDefined = true;                \
    static PJRT_Error* Run(PJRT_##Name##_Args* args);     \
  };                                                      \
  PJRT_Error* Impl<PJRT_##Name##_Args>::Run(PJRT_##Name##_Args* args)

thread_local const char* current_function = "";  // for messages: see Need()

PJRT_Error* ToPjrt(Error error) { return new PJRT_Error{std::move(error)}; }

template <typename Fn>
struct Slot;
template <typename R, typename Args>
struct Slot<R(Args*)> {
  template <Name name, size_t kSize>
  static R Entry(Args* args) {
    if constexpr (std::is_void_v<R>) {  // Error_Destroy, Error_Message: cannot report
      if (args != nullptr && args->struct_size >= kSize && args->error != nullptr) {
        Impl<Args>::Run(args);
      }
    } else {
      if (args == nullptr) return ToPjrt({PJRT_Error_Code_INVALID_ARGUMENT,
                                          Cat(name.text, ": args is NULL")});
      if (args->struct_size < kSize) {
        return ToPjrt({PJRT_Error_Code_INVALID_ARGUMENT,
                       Cat(name.text, ": struct_size ", args->struct_size,
                           " is smaller than this plugin's ", kSize)});
      }
      if constexpr (!Impl<Args>::kDefined) {
        return ToPjrt({PJRT_Error_Code_UNIMPLEMENTED,
                       Cat(name.text, " is not implemented by the __NAME__ plugin")});
      } else {
        current_function = name.text;
        try {
          return Impl<Args>::Run(args);
        } catch (Error& e) {
          return ToPjrt(std::move(e));
        } catch (const std::bad_alloc&) {
          return ToPjrt({PJRT_Error_Code_RESOURCE_EXHAUSTED, Cat(name.text, ": out of memory")});
        } catch (const std::exception& e) {
          return ToPjrt({PJRT_Error_Code_INTERNAL, Cat(name.text, ": ", e.what())});
        }
      }
    }
  }
};

// A required argument: INVALID_ARGUMENT naming the function and the field if NULL.
// (A production plugin also checks that handles are alive and of their type; the
// workshop plugin's capi/check.h and capi/handle.h show how.)
template <typename T>
T* Need(T* pointer, const char* field) {
  if (pointer == nullptr) Fail(PJRT_Error_Code_INVALID_ARGUMENT, current_function, ": ", field,
                               " is NULL");
  return pointer;
}
// An input (pointer, size) pair: the pointer may be NULL only for size 0.
void NeedArray(const void* pointer, size_t size, const char* field) {
  if (pointer == nullptr && size != 0) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, current_function, ": ", field, " is NULL but its ",
         "size is ", size);
  }
}

PJRT_Event* NewEvent(EventRef event) { return new PJRT_Event{std::move(event)}; }

PJRT_Buffer* NewBuffer(PJRT_Client* client, PJRT_Device* device, Shape shape, EventRef ready,
                       std::shared_ptr<Allocation> storage = nullptr) {
  auto* buffer = new PJRT_Buffer;
  buffer->client = client;
  buffer->device = device;
  buffer->storage = storage ? std::move(storage) : std::make_shared<Allocation>(shape.bytes());
  buffer->shape = std::move(shape);
  buffer->ready = std::move(ready);
  return buffer;
}

// Only the dense row-major layout (minor_to_major descending, no tiles) exists here.
void NeedRowMajor(const PJRT_Buffer_MemoryLayout* layout, size_t rank, const char* field) {
  if (layout == nullptr) return;
  bool row_major = layout->type == PJRT_Buffer_MemoryLayout_Type_Tiled &&
                   layout->tiled.num_tiles == 0 && layout->tiled.minor_to_major_size == rank;
  for (size_t i = 0; row_major && i < rank; ++i) {
    row_major = layout->tiled.minor_to_major[i] == static_cast<int64_t>(rank - 1 - i);
  }
  if (!row_major) {
    Fail(PJRT_Error_Code_UNIMPLEMENTED, current_function, ": ", field,
         " is not the row-major layout, the only one the __NAME__ plugin has");
  }
}

// ---- Errors.

template <>
struct Impl<PJRT_Error_Destroy_Args> {
  static constexpr bool kDefined = true;
  static void Run(PJRT_Error_Destroy_Args* args) { delete args->error; }
};
template <>
struct Impl<PJRT_Error_Message_Args> {
  static constexpr bool kDefined = true;
  static void Run(PJRT_Error_Message_Args* args) {
    args->message = args->error->error.message.data();
    args->message_size = args->error->error.message.size();
  }
};
IMPLEMENT(Error_GetCode) {
  args->code = Need(args->error, "error")->error.code;
  return nullptr;
}

// ---- Plugin.

IMPLEMENT(Plugin_Initialize) {
  (void)args;  // nothing to set up before the first client
  return nullptr;
}

// JAX serializes programs for the plugin at min(its StableHLO version, ours): the
// versions of the jaxlib whose bindings compiler.py reads programs with (setup.py).
IMPLEMENT(Plugin_Attributes) {
  static const int64_t kCurrent[] = {STABLEHLO_CURRENT_VERSION};
  static const int64_t kMinimum[] = {STABLEHLO_MINIMUM_VERSION};
  static const PJRT_NamedValue kAttributes[] = {
      {.struct_size = PJRT_NamedValue_STRUCT_SIZE, .extension_start = nullptr, .name = "xla_version", .name_size = 11,
       .type = PJRT_NamedValue_kInt64, .int64_value = 2, .value_size = 1},
      {.struct_size = PJRT_NamedValue_STRUCT_SIZE, .extension_start = nullptr, .name = "stablehlo_current_version",
       .name_size = 25, .type = PJRT_NamedValue_kInt64List, .int64_array_value = kCurrent,
       .value_size = 3},
      {.struct_size = PJRT_NamedValue_STRUCT_SIZE, .extension_start = nullptr, .name = "stablehlo_minimum_version",
       .name_size = 25, .type = PJRT_NamedValue_kInt64List, .int64_array_value = kMinimum,
       .value_size = 3},
  };
  args->attributes = kAttributes;
  args->num_attributes = 3;
  return nullptr;
}

// ---- Events.

PJRT_Error* ErrorOf(const std::optional<Error>& error) {
  return error ? ToPjrt(*error) : nullptr;
}

IMPLEMENT(Event_Destroy) {
  delete Need(args->event, "event");
  return nullptr;
}
IMPLEMENT(Event_IsReady) {
  args->is_ready = Need(args->event, "event")->event->IsReady();
  return nullptr;
}
IMPLEMENT(Event_Error) {
  const EventRef& event = Need(args->event, "event")->event;
  if (!event->IsReady()) Fail(PJRT_Error_Code_FAILED_PRECONDITION, "PJRT_Event_Error: not ready");
  return ErrorOf(event->error());
}
IMPLEMENT(Event_Await) { return ErrorOf(Need(args->event, "event")->event->Await()); }
// The callback may run after the caller destroyed the event (jaxlib does that): it holds
// the event's state, not the PJRT_Event. It owns the error it gets.
IMPLEMENT(Event_OnReady) {
  Need(reinterpret_cast<void*>(args->callback), "callback");
  Need(args->event, "event")->event->OnReady(
      [callback = args->callback, user_arg = args->user_arg](const std::optional<Error>& e) {
        callback(ErrorOf(e), user_arg);
      });
  return nullptr;
}

// ---- Client.

// Create option: num_devices (int64, default 4).
// REAL ACCELERATOR: open the driver, enumerate the devices and their memories.
IMPLEMENT(Client_Create) {
  NeedArray(args->create_options, args->num_options, "create_options");
  int64_t num_devices = 4;
  for (size_t i = 0; i < args->num_options; ++i) {
    const PJRT_NamedValue& option = args->create_options[i];
    const std::string_view name(option.name, option.name_size);
    if (name != "num_devices" || option.type != PJRT_NamedValue_kInt64) {
      Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Client_Create: unknown option '", name,
           "' (the __NAME__ plugin takes num_devices, an int64)");
    }
    num_devices = option.int64_value;
  }
  if (num_devices < 1 || num_devices > 1024) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Client_Create: num_devices is ", num_devices,
         ", not in [1, 1024]");
  }
  auto client = std::make_unique<PJRT_Client>();
  client->platform_version = "__NAME__ " PLUGIN_VERSION;
  for (int id = 0; id < num_devices; ++id) {
    auto device = std::make_unique<PJRT_Device>();
    device->client = client.get();
    device->description = {id, "__Name__ device", Cat("__Name__Device(id=", id, ")"),
                           Cat("__Name__Device(id=", id, ")")};
    device->memory.id = id;
    device->memory.device = device.get();
    device->memory.debug_string = Cat("__Name__Memory(id=", id, ", kind=device)");
    device->memory.to_string = device->memory.debug_string;
    client->devices.push_back(device.get());
    client->memories.push_back(&device->memory);
    client->owned_devices.push_back(std::move(device));
  }
  args->client = client.release();
  return nullptr;
}
// Waits for the queued work: each device's queue runs what it holds before its thread ends.
IMPLEMENT(Client_Destroy) {
  delete Need(args->client, "client");
  return nullptr;
}
IMPLEMENT(Client_PlatformName) {
  Need(args->client, "client");
  args->platform_name = "__NAME__";
  args->platform_name_size = std::strlen("__NAME__");
  return nullptr;
}
IMPLEMENT(Client_ProcessIndex) {
  Need(args->client, "client");
  args->process_index = 0;
  return nullptr;
}
IMPLEMENT(Client_PlatformVersion) {
  const std::string& version = Need(args->client, "client")->platform_version;
  args->platform_version = version.data();
  args->platform_version_size = version.size();
  return nullptr;
}
IMPLEMENT(Client_Devices) {
  PJRT_Client* client = Need(args->client, "client");
  args->devices = client->devices.data();
  args->num_devices = client->devices.size();
  return nullptr;
}
IMPLEMENT(Client_AddressableDevices) {
  PJRT_Client* client = Need(args->client, "client");
  args->addressable_devices = client->devices.data();
  args->num_addressable_devices = client->devices.size();
  return nullptr;
}
IMPLEMENT(Client_LookupDevice) {
  PJRT_Client* client = Need(args->client, "client");
  if (args->id < 0 || args->id >= static_cast<int>(client->devices.size())) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "No matching device found for device_id ", args->id);
  }
  args->device = client->devices[args->id];
  return nullptr;
}
IMPLEMENT(Client_LookupAddressableDevice) {
  PJRT_Client* client = Need(args->client, "client");
  const int id = args->local_hardware_id;
  if (id < 0 || id >= static_cast<int>(client->devices.size())) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "No matching device found for local_hardware_id ", id);
  }
  args->addressable_device = client->devices[id];
  return nullptr;
}
IMPLEMENT(Client_AddressableMemories) {
  PJRT_Client* client = Need(args->client, "client");
  args->addressable_memories = client->memories.data();
  args->num_addressable_memories = client->memories.size();
  return nullptr;
}
IMPLEMENT(Client_DefaultDeviceAssignment) {
  PJRT_Client* client = Need(args->client, "client");
  const int64_t replicas = args->num_replicas, partitions = args->num_partitions;
  if (args->default_assignment_size < static_cast<size_t>(replicas * partitions)) {
    Fail(PJRT_Error_Code_FAILED_PRECONDITION, "PJRT_Client_DefaultDeviceAssignment: ",
         "`default_assignment_size` ", args->default_assignment_size,
         " < `num_replicas * num_partitions`, ", replicas, " * ", partitions, " = ",
         replicas * partitions);
  }
  if (replicas < 1 || partitions < 1 ||
      replicas * partitions > static_cast<int64_t>(client->devices.size())) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Client_DefaultDeviceAssignment: ", replicas,
         " x ", partitions, " devices requested, the client has ", client->devices.size());
  }
  Need(args->default_assignment, "default_assignment");
  for (int i = 0; i < replicas * partitions; ++i) args->default_assignment[i] = i;
  return nullptr;
}

// ---- Compiling.

IMPLEMENT(Client_Compile) {
  PJRT_Client* client = Need(args->client, "client");
  const PJRT_Program* program = Need(args->program, "program");
  NeedArray(program->code, program->code_size, "program->code");
  NeedArray(program->format, program->format_size, "program->format");
  NeedArray(args->compile_options, args->compile_options_size, "compile_options");
  const std::string format(program->format, program->format_size);
  if (format != "mlir" && format != "hlo") {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "Unknown program format '", format, "'.");
  }
  auto loaded = std::make_unique<PJRT_LoadedExecutable>();
  loaded->client = client;
  loaded->program = Compile(std::string(program->code, program->code_size), format,
                            std::string(args->compile_options, args->compile_options_size),
                            client->devices.size());
  for (int id : loaded->program->device_ids) loaded->devices.push_back(client->devices[id]);
  args->executable = loaded.release();
  return nullptr;
}

// ---- Device descriptions, devices, memories.

IMPLEMENT(DeviceDescription_Id) {
  args->id = Need(args->device_description, "device_description")->id;
  return nullptr;
}
IMPLEMENT(DeviceDescription_ProcessIndex) {
  Need(args->device_description, "device_description");
  args->process_index = 0;
  return nullptr;
}
// REAL ACCELERATOR: what JAX users see as device attributes (core count, chip version...).
IMPLEMENT(DeviceDescription_Attributes) {
  Need(args->device_description, "device_description");
  args->attributes = nullptr;
  args->num_attributes = 0;
  return nullptr;
}
IMPLEMENT(DeviceDescription_Kind) {
  const std::string& kind = Need(args->device_description, "device_description")->kind;
  args->device_kind = kind.data();
  args->device_kind_size = kind.size();
  return nullptr;
}
IMPLEMENT(DeviceDescription_DebugString) {
  const std::string& text = Need(args->device_description, "device_description")->debug_string;
  args->debug_string = text.data();
  args->debug_string_size = text.size();
  return nullptr;
}
IMPLEMENT(DeviceDescription_ToString) {
  const std::string& text = Need(args->device_description, "device_description")->to_string;
  args->to_string = text.data();
  args->to_string_size = text.size();
  return nullptr;
}
IMPLEMENT(Device_GetDescription) {
  args->device_description = &Need(args->device, "device")->description;
  return nullptr;
}
IMPLEMENT(Device_IsAddressable) {
  Need(args->device, "device");
  args->is_addressable = true;
  return nullptr;
}
IMPLEMENT(Device_LocalHardwareId) {
  args->local_hardware_id = Need(args->device, "device")->description.id;
  return nullptr;
}
IMPLEMENT(Device_AddressableMemories) {
  args->memories = Need(args->device, "device")->memories;
  args->num_memories = 1;
  return nullptr;
}
IMPLEMENT(Device_DefaultMemory) {
  args->memory = &Need(args->device, "device")->memory;
  return nullptr;
}
IMPLEMENT(Memory_Id) {
  args->id = Need(args->memory, "memory")->id;
  return nullptr;
}
IMPLEMENT(Memory_Kind) {
  const std::string& kind = Need(args->memory, "memory")->kind;
  args->kind = kind.data();
  args->kind_size = kind.size();
  return nullptr;
}
IMPLEMENT(Memory_Kind_Id) {
  Need(args->memory, "memory");
  args->kind_id = 0;  // one kind of memory per device
  return nullptr;
}
IMPLEMENT(Memory_DebugString) {
  const std::string& text = Need(args->memory, "memory")->debug_string;
  args->debug_string = text.data();
  args->debug_string_size = text.size();
  return nullptr;
}
IMPLEMENT(Memory_ToString) {
  const std::string& text = Need(args->memory, "memory")->to_string;
  args->to_string = text.data();
  args->to_string_size = text.size();
  return nullptr;
}
IMPLEMENT(Memory_AddressableByDevices) {
  args->devices = &Need(args->memory, "memory")->device;
  args->num_devices = 1;
  return nullptr;
}

// ---- Executables.

IMPLEMENT(Executable_Destroy) {
  delete Need(args->executable, "executable");
  return nullptr;
}
IMPLEMENT(Executable_Name) {
  const std::string& name = Need(args->executable, "executable")->program->name;
  args->executable_name = name.data();
  args->executable_name_size = name.size();
  return nullptr;
}
IMPLEMENT(Executable_NumReplicas) {
  args->num_replicas = Need(args->executable, "executable")->program->num_replicas;
  return nullptr;
}
IMPLEMENT(Executable_NumPartitions) {
  args->num_partitions = Need(args->executable, "executable")->program->num_partitions;
  return nullptr;
}
IMPLEMENT(Executable_NumOutputs) {
  args->num_outputs = Need(args->executable, "executable")->program->outputs.size();
  return nullptr;
}
IMPLEMENT(Executable_OutputElementTypes) {
  const Program& program = *Need(args->executable, "executable")->program;
  args->output_types = const_cast<PJRT_Buffer_Type*>(program.output_types.data());
  args->num_output_types = program.output_types.size();
  return nullptr;
}
IMPLEMENT(Executable_OutputDimensions) {
  const Program& program = *Need(args->executable, "executable")->program;
  args->num_outputs = program.outputs.size();
  args->dims = program.output_dims.data();
  args->dim_sizes = program.output_dim_sizes.data();
  return nullptr;
}
IMPLEMENT(Executable_OutputMemoryKinds) {
  const Program& program = *Need(args->executable, "executable")->program;
  args->num_outputs = program.outputs.size();
  args->memory_kinds = program.output_kinds.data();
  args->memory_kind_sizes = program.output_kind_sizes.data();
  return nullptr;
}
// The program after compiler.py's passes, as MLIR text (what `.as_text()` of a compiled
// function shows). Two calls: code == NULL asks for the size.
IMPLEMENT(Executable_OptimizedProgram) {
  const Program& program = *Need(args->executable, "executable")->program;
  PJRT_Program* out = Need(args->program, "program");
  out->format = "mlir";
  out->format_size = 4;
  if (out->code == nullptr) {
    out->code_size = program.text.size();
    return nullptr;
  }
  if (out->code_size < program.text.size()) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Executable_OptimizedProgram: code_size ",
         out->code_size, " < ", program.text.size());
  }
  std::memcpy(out->code, program.text.data(), program.text.size());
  out->code_size = program.text.size();
  return nullptr;
}
// Equal programs compiled with equal options get equal fingerprints (JAX's caches key on it).
IMPLEMENT(Executable_Fingerprint) {
  const std::string& fingerprint = Need(args->executable, "executable")->program->fingerprint;
  args->executable_fingerprint = fingerprint.data();
  args->executable_fingerprint_size = fingerprint.size();
  return nullptr;
}
IMPLEMENT(LoadedExecutable_Destroy) {
  delete Need(args->executable, "executable");
  return nullptr;
}
IMPLEMENT(LoadedExecutable_GetExecutable) {
  args->executable =
      new PJRT_Executable{Need(args->loaded_executable, "loaded_executable")->program};
  return nullptr;
}
IMPLEMENT(LoadedExecutable_AddressableDevices) {
  PJRT_LoadedExecutable* executable = Need(args->executable, "executable");
  args->addressable_devices = executable->devices.data();
  args->num_addressable_devices = executable->devices.size();
  return nullptr;
}
IMPLEMENT(LoadedExecutable_Delete) {
  Need(args->executable, "executable")->deleted = true;
  return nullptr;
}
IMPLEMENT(LoadedExecutable_IsDeleted) {
  args->is_deleted = Need(args->executable, "executable")->deleted.load();
  return nullptr;
}
IMPLEMENT(LoadedExecutable_GetDeviceAssignment) {
  const std::string& proto = Need(args->executable, "executable")->program->device_assignment;
  args->serialized_bytes = proto.data();
  args->serialized_bytes_size = proto.size();
  args->serialized_device_assignment = nullptr;  // the bytes live as long as the program
  args->serialized_device_assignment_deleter = [](PJRT_DeviceAssignmentSerialized*) {};
  return nullptr;
}

// One execution: a task per device row on that device's queue. Arguments are checked
// here, so a wrong call fails before anything is enqueued; outputs are allocated now and
// become ready when their device's task has run.
IMPLEMENT(LoadedExecutable_Execute) {
  PJRT_LoadedExecutable* executable = Need(args->executable, "executable");
  const Program& program = *executable->program;
  if (executable->deleted) {
    Fail(PJRT_Error_Code_FAILED_PRECONDITION, "PJRT_LoadedExecutable_Execute: the executable "
         "was deleted (PJRT_LoadedExecutable_Delete)");
  }
  std::vector<PJRT_Device*> devices = executable->devices;
  if (args->execute_device != nullptr && devices.size() == 1) devices = {args->execute_device};
  if (args->num_devices != devices.size()) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_LoadedExecutable_Execute: ", args->num_devices,
         " argument lists for an executable on ", devices.size(), " devices");
  }
  if (args->num_args != static_cast<size_t>(program.num_params)) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_LoadedExecutable_Execute: ", args->num_args,
         " arguments for a program of ", program.num_params, " parameters");
  }
  NeedArray(args->argument_lists, args->num_devices, "argument_lists");
  NeedArray(args->output_lists, args->num_devices, "output_lists");
  std::vector<bool> donate(program.num_params, false);
  for (int i : program.donated) donate[i] = true;
  if (const PJRT_ExecuteOptions* options = args->options) {
    NeedArray(options->non_donatable_input_indices, options->num_non_donatable_input_indices,
              "options->non_donatable_input_indices");
    for (size_t i = 0; i < options->num_non_donatable_input_indices; ++i) {
      const int64_t index = options->non_donatable_input_indices[i];
      if (index >= 0 && index < program.num_params) donate[index] = false;
    }
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    for (size_t i = 0; i < args->num_args; ++i) {
      const PJRT_Buffer* buffer = Need(args->argument_lists[d], "argument_lists[d]")[i];
      const Shape& want = program.values[i];
      if (buffer == nullptr || buffer->storage == nullptr) {
        Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_LoadedExecutable_Execute: argument ", i,
             " of device row ", d, " is NULL or a deleted (or donated) buffer");
      }
      if (buffer->shape.type != want.type || buffer->shape.dims != want.dims) {
        Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_LoadedExecutable_Execute: argument ", i,
             " has type ", LookUp(buffer->shape.type).name, " rank ", buffer->shape.dims.size(),
             "; the program takes ", LookUp(want.type).name, " rank ", want.dims.size());
      }
      if (buffer->device != devices[d]) {
        Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_LoadedExecutable_Execute: argument ", i,
             " of device row ", d, " is on ", buffer->device->description.to_string, ", not ",
             devices[d]->description.to_string);
      }
    }
  }
  // A donated buffer is consumed: passing it again in the same call is an error (as in XLA).
  for (size_t d = 0; d < devices.size(); ++d) {
    for (size_t i = 0; i < args->num_args; ++i) {
      for (size_t k = 0; donate[i] && k < args->num_args; ++k) {
        if (k != i && args->argument_lists[d][k] == args->argument_lists[d][i]) {
          Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_LoadedExecutable_Execute: argument ", i,
               " of device row ", d, " is donated and also passed as argument ", k);
        }
      }
    }
  }
  auto rendezvous = std::make_shared<Rendezvous>(devices.size());
  std::lock_guard<std::mutex> lock(executable->client->launch_mu);
  for (size_t d = 0; d < devices.size(); ++d) {
    // What the task keeps alive: the arguments' memory (a donated buffer is deleted now,
    // its memory lives on in the task), their ready events, the outputs.
    std::vector<std::shared_ptr<Allocation>> inputs;
    std::vector<EventRef> waits;
    for (size_t i = 0; i < args->num_args; ++i) {
      PJRT_Buffer* buffer = args->argument_lists[d][i];
      inputs.push_back(buffer->storage);
      waits.push_back(buffer->ready);
      if (donate[i]) buffer->storage = nullptr;
    }
    std::vector<PJRT_Buffer*> outputs;
    for (int out : program.outputs) {
      outputs.push_back(NewBuffer(executable->client, devices[d], program.values[out],
                                  std::make_shared<Event>()));
      args->output_lists[d][outputs.size() - 1] = outputs.back();
    }
    auto done = std::make_shared<Event>();
    if (args->device_complete_events != nullptr) args->device_complete_events[d] = NewEvent(done);
    std::vector<std::pair<std::shared_ptr<Allocation>, EventRef>> results;
    for (PJRT_Buffer* b : outputs) results.push_back({b->storage, b->ready});
    devices[d]->queue->Enqueue([program = executable->program, rank = static_cast<int>(d),
                                rendezvous, inputs, waits, results, done] {
      std::optional<Error> error;
      for (const EventRef& wait : waits) {
        if (!error) error = wait->Await();
      }
      if (!error) {
        try {
          std::vector<Tensor> params, outs;
          for (size_t i = 0; i < inputs.size(); ++i) {
            params.push_back({&program->values[i], inputs[i]->data.get()});
          }
          for (size_t i = 0; i < results.size(); ++i) {
            outs.push_back({&program->values[program->outputs[i]], results[i].first->data.get()});
          }
          KernelContext context{rank, rendezvous.get()};
          RunPlan(*program, params, outs, context);
        } catch (const Error& e) {
          error = e;
        }
      }
      if (error) rendezvous->Abort(*error);  // the other devices' collectives stop waiting
      for (const auto& [storage, ready] : results) ready->Set(error);
      done->Set(error);
    });
  }
  return nullptr;
}

// ---- Buffers.

PJRT_Device* DeviceOf(PJRT_Device* device, PJRT_Memory* memory) {
  if (memory != nullptr) return memory->device;
  return Need(device, "device (or memory)");
}

// The host -> device transfer. The copy is done before returning, so every host buffer
// semantics is honoured and the host buffer is free at once.
// REAL ACCELERATOR: copy into a staging buffer (or pin the host memory), enqueue the DMA
// on the device's queue, and set done_with_host_buffer / the buffer's ready event when
// it has finished.
IMPLEMENT(Client_BufferFromHostBuffer) {
  PJRT_Client* client = Need(args->client, "client");
  NeedArray(args->dims, args->num_dims, "dims");
  NeedArray(args->byte_strides, args->num_byte_strides, "byte_strides");
  NeedRowMajor(args->device_layout, args->num_dims, "device_layout");
  if (args->byte_strides != nullptr && args->num_byte_strides != args->num_dims) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Client_BufferFromHostBuffer: ",
         args->num_byte_strides, " byte_strides for ", args->num_dims, " dims");
  }
  Shape shape{args->type, std::vector<int64_t>(args->dims, args->dims + args->num_dims)};
  for (int64_t d : shape.dims) {
    if (d < 0) Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Client_BufferFromHostBuffer: dim ", d);
  }
  LookUp(shape.type);  // UNIMPLEMENTED for types this plugin does not store
  auto storage = std::make_shared<Allocation>(shape.bytes());
  if (shape.elements() > 0) {
    CopyStrided(static_cast<const std::byte*>(Need(args->data, "data")), args->byte_strides,
                shape, storage->data.get());
  }
  args->buffer = NewBuffer(client, DeviceOf(args->device, args->memory), std::move(shape),
                           Event::Ready(), std::move(storage));
  args->done_with_host_buffer = NewEvent(Event::Ready());
  return nullptr;
}
IMPLEMENT(Client_CreateUninitializedBuffer) {
  PJRT_Client* client = Need(args->client, "client");
  NeedArray(args->shape_dims, args->shape_num_dims, "shape_dims");
  NeedRowMajor(args->shape_layout, args->shape_num_dims, "shape_layout");
  Shape shape{args->shape_element_type,
              std::vector<int64_t>(args->shape_dims, args->shape_dims + args->shape_num_dims)};
  LookUp(shape.type);
  args->buffer = NewBuffer(client, DeviceOf(args->device, args->memory), std::move(shape),
                           Event::Ready());
  return nullptr;
}
IMPLEMENT(Buffer_Destroy) {
  delete Need(args->buffer, "buffer");
  return nullptr;
}
IMPLEMENT(Buffer_ElementType) {
  args->type = Need(args->buffer, "buffer")->shape.type;
  return nullptr;
}
IMPLEMENT(Buffer_Dimensions) {
  const std::vector<int64_t>& dims = Need(args->buffer, "buffer")->shape.dims;
  args->dims = dims.data();
  args->num_dims = dims.size();
  return nullptr;
}
IMPLEMENT(Buffer_UnpaddedDimensions) {
  const std::vector<int64_t>& dims = Need(args->buffer, "buffer")->shape.dims;
  args->unpadded_dims = dims.data();
  args->num_dims = dims.size();
  return nullptr;
}
IMPLEMENT(Buffer_DynamicDimensionIndices) {
  Need(args->buffer, "buffer");
  args->dynamic_dim_indices = nullptr;
  args->num_dynamic_dims = 0;
  return nullptr;
}
IMPLEMENT(Buffer_OnDeviceSizeInBytes) {
  args->on_device_size_in_bytes = Need(args->buffer, "buffer")->shape.bytes();
  return nullptr;
}
IMPLEMENT(Buffer_Device) {
  args->device = Need(args->buffer, "buffer")->device;
  return nullptr;
}
IMPLEMENT(Buffer_Memory) {
  args->memory = &Need(args->buffer, "buffer")->device->memory;
  return nullptr;
}
// The memory goes once no queued task uses it (tasks hold their own reference).
IMPLEMENT(Buffer_Delete) {
  Need(args->buffer, "buffer")->storage = nullptr;
  return nullptr;
}
IMPLEMENT(Buffer_IsDeleted) {
  args->is_deleted = Need(args->buffer, "buffer")->storage == nullptr;
  return nullptr;
}
// Not a CPU buffer: JAX reads it through ToHostBuffer, never through a raw pointer.
IMPLEMENT(Buffer_IsOnCpu) {
  Need(args->buffer, "buffer");
  args->is_on_cpu = false;
  return nullptr;
}
IMPLEMENT(Buffer_ReadyEvent) {
  args->event = NewEvent(Need(args->buffer, "buffer")->ready);
  return nullptr;
}
IMPLEMENT(Buffer_OpaqueDeviceMemoryDataPointer) {
  PJRT_Buffer* buffer = Need(args->buffer, "buffer");
  if (buffer->storage == nullptr) {
    Fail(PJRT_Error_Code_FAILED_PRECONDITION, current_function, ": the buffer is deleted");
  }
  args->device_memory_ptr = buffer->storage->data.get();
  return nullptr;
}
IMPLEMENT(Buffer_IncreaseExternalReferenceCount) {
  PJRT_Buffer* buffer = Need(args->buffer, "buffer");
  std::lock_guard<std::mutex> lock(buffer->mu);
  ++buffer->external_references;
  return nullptr;
}
IMPLEMENT(Buffer_DecreaseExternalReferenceCount) {
  PJRT_Buffer* buffer = Need(args->buffer, "buffer");
  std::lock_guard<std::mutex> lock(buffer->mu);
  if (buffer->external_references == 0) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT,
         "Attempting to decrease reference on a buffer with zero reference count.");
  }
  --buffer->external_references;
  return nullptr;
}

// The device -> host transfer, on the buffer's queue after the work that writes it.
// dst == NULL asks for the size.
// REAL ACCELERATOR: a DMA from device memory into the host buffer.
IMPLEMENT(Buffer_ToHostBuffer) {
  PJRT_Buffer* buffer = Need(args->src, "src");
  NeedRowMajor(args->host_layout, buffer->shape.dims.size(), "host_layout");
  const size_t bytes = buffer->shape.bytes();
  if (args->dst == nullptr) {
    args->dst_size = bytes;
    return nullptr;
  }
  if (args->dst_size < bytes) {
    Fail(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Buffer_ToHostBuffer: dst_size ",
         args->dst_size, " < the buffer's ", bytes, " bytes");
  }
  if (buffer->storage == nullptr) {
    Fail(PJRT_Error_Code_FAILED_PRECONDITION, "PJRT_Buffer_ToHostBuffer: the buffer is deleted");
  }
  auto done = std::make_shared<Event>();
  buffer->device->queue->Enqueue(
      [storage = buffer->storage, ready = buffer->ready, dst = args->dst, bytes, done] {
        std::optional<Error> error = ready->Await();
        if (!error) std::memcpy(dst, storage->data.get(), bytes);
        done->Set(error);
      });
  args->event = NewEvent(done);
  return nullptr;
}

// A device -> device copy, on the source's queue.
// REAL ACCELERATOR: a peer-to-peer DMA (or through the host), ordered on both queues.
PJRT_Buffer* CopyTo(PJRT_Buffer* buffer, PJRT_Device* device) {
  if (buffer->storage == nullptr) {
    Fail(PJRT_Error_Code_FAILED_PRECONDITION, current_function, ": the buffer is deleted");
  }
  PJRT_Buffer* copy = NewBuffer(buffer->client, device, buffer->shape, std::make_shared<Event>());
  buffer->device->queue->Enqueue([src = buffer->storage, ready = buffer->ready,
                                  dst = copy->storage, copied = copy->ready] {
    std::optional<Error> error = ready->Await();
    if (!error) std::memcpy(dst->data.get(), src->data.get(), src->size);
    copied->Set(error);
  });
  return copy;
}
IMPLEMENT(Buffer_CopyToDevice) {
  args->dst_buffer = CopyTo(Need(args->buffer, "buffer"), Need(args->dst_device, "dst_device"));
  return nullptr;
}
IMPLEMENT(Buffer_CopyToMemory) {
  args->dst_buffer = CopyTo(Need(args->buffer, "buffer"),
                            Need(args->dst_memory, "dst_memory")->device);
  return nullptr;
}

// ---- The table.

#define PJRT_API_SLOT(Name) \
  .PJRT_##Name = &Slot<PJRT_##Name>::Entry<"PJRT_" #Name, PJRT_##Name##_Args_STRUCT_SIZE>,

const PJRT_Api kApi = {
    .struct_size = PJRT_Api_STRUCT_SIZE,
    .extension_start = nullptr,
    .pjrt_api_version = {.struct_size = PJRT_Api_Version_STRUCT_SIZE,
                         .extension_start = nullptr,
                         .major_version = PJRT_API_MAJOR,
                         .minor_version = PJRT_API_MINOR},
#include "pjrt_api_slots.inc"
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() { return &kApi; }
