// Compile, executable queries and Execute.
#include <cstring>

#include "capi/api.h"
#include "capi/wrappers.h"

namespace workshop::capi {
namespace {

const Program& ProgramOf(const PJRT_Executable* executable) {
  return executable->executable->program();
}

}  // namespace

PJRT_Error* Client_Compile(PJRT_Client_Compile_Args* args) {
  WORKSHOP_CHECK_ARGS(PJRT_Client_Compile);
  const PJRT_Program* program = args->program;
  std::unique_ptr<LoadedExecutable> executable;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->client->client->Compile(
      std::string(program->code, program->code_size),
      std::string(program->format, program->format_size),
      std::string(args->compile_options, args->compile_options_size), &executable));
  auto* loaded = new PJRT_LoadedExecutable{std::move(executable), args->client, {}};
  for (Device* device : loaded->executable->devices()) {
    loaded->devices.push_back(args->client->Wrap(device));
  }
  args->executable = loaded;
  return nullptr;
}

PJRT_Error* Executable_Destroy(PJRT_Executable_Destroy_Args* args) {
  delete args->executable;
  return nullptr;
}

PJRT_Error* Executable_Name(PJRT_Executable_Name_Args* args) {
  const std::string& name = ProgramOf(args->executable).name;
  args->executable_name = name.data();
  args->executable_name_size = name.size();
  return nullptr;
}

PJRT_Error* Executable_NumReplicas(PJRT_Executable_NumReplicas_Args* args) {
  args->num_replicas = ProgramOf(args->executable).num_replicas;
  return nullptr;
}

PJRT_Error* Executable_NumPartitions(PJRT_Executable_NumPartitions_Args* args) {
  args->num_partitions = ProgramOf(args->executable).num_partitions;
  return nullptr;
}

PJRT_Error* Executable_NumOutputs(PJRT_Executable_NumOutputs_Args* args) {
  args->num_outputs = args->executable->executable->num_outputs();
  return nullptr;
}

PJRT_Error* Executable_OutputElementTypes(PJRT_Executable_OutputElementTypes_Args* args) {
  PJRT_Executable* e = args->executable;
  if (e->output_types.empty()) {
    const Plan& plan = ProgramOf(e).plan;
    for (int slot : plan.results) {
      e->output_types.push_back(static_cast<PJRT_Buffer_Type>(plan.slots[slot].dtype));
    }
  }
  args->output_types = e->output_types.data();
  args->num_output_types = e->output_types.size();
  return nullptr;
}

PJRT_Error* Executable_OutputDimensions(PJRT_Executable_OutputDimensions_Args* args) {
  PJRT_Executable* e = args->executable;
  if (e->output_dim_sizes.empty()) {
    const Plan& plan = ProgramOf(e).plan;
    for (int slot : plan.results) {
      const Dims& dims = plan.slots[slot].dims;
      e->output_dims.insert(e->output_dims.end(), dims.begin(), dims.end());
      e->output_dim_sizes.push_back(dims.size());
    }
  }
  args->num_outputs = e->output_dim_sizes.size();
  args->dims = e->output_dims.data();
  args->dim_sizes = e->output_dim_sizes.data();
  return nullptr;
}

// Every output lives in its device's one memory.
PJRT_Error* Executable_OutputMemoryKinds(PJRT_Executable_OutputMemoryKinds_Args* args) {
  PJRT_Executable* e = args->executable;
  if (e->output_memory_kinds.empty()) {
    const size_t n = e->executable->num_outputs();
    e->output_memory_kinds.assign(n, Memory::kKind);
    e->output_memory_kind_sizes.assign(n, std::strlen(Memory::kKind));
  }
  args->num_outputs = e->output_memory_kinds.size();
  args->memory_kinds = e->output_memory_kinds.data();
  args->memory_kind_sizes = e->output_memory_kind_sizes.data();
  return nullptr;
}

PJRT_Error* Executable_Fingerprint(PJRT_Executable_Fingerprint_Args* args) {
  const std::string& fingerprint = ProgramOf(args->executable).fingerprint;
  args->executable_fingerprint = fingerprint.data();
  args->executable_fingerprint_size = fingerprint.size();
  return nullptr;
}

PJRT_Error* LoadedExecutable_Destroy(PJRT_LoadedExecutable_Destroy_Args* args) {
  delete args->executable;
  return nullptr;
}

PJRT_Error* LoadedExecutable_GetExecutable(PJRT_LoadedExecutable_GetExecutable_Args* args) {
  args->executable = new PJRT_Executable{args->loaded_executable->executable, {}, {}, {}, {}, {}};
  return nullptr;
}

PJRT_Error* LoadedExecutable_AddressableDevices(
    PJRT_LoadedExecutable_AddressableDevices_Args* args) {
  args->addressable_devices = args->executable->devices.data();
  args->num_addressable_devices = args->executable->devices.size();
  return nullptr;
}

// The serialized DeviceAssignmentProto the compiler produced. It lives as long as the
// executable, so the deleter has nothing to free.
PJRT_Error* LoadedExecutable_GetDeviceAssignment(
    PJRT_LoadedExecutable_GetDeviceAssignment_Args* args) {
  const std::string& proto = args->executable->executable->program().device_assignment_proto;
  args->serialized_bytes = proto.data();
  args->serialized_bytes_size = proto.size();
  args->serialized_device_assignment = nullptr;
  args->serialized_device_assignment_deleter = [](PJRT_DeviceAssignmentSerialized*) {};
  return nullptr;
}

PJRT_Error* LoadedExecutable_Execute(PJRT_LoadedExecutable_Execute_Args* args) {
  WORKSHOP_CHECK_ARGS(PJRT_LoadedExecutable_Execute);
  if (args->execute_device != nullptr) {
    return ToPjrt(Unimplemented("PJRT_LoadedExecutable_Execute: execute_device (portable "
                                "execution) is not supported"));
  }
  std::vector<std::vector<std::shared_ptr<Buffer>>> arguments(args->num_devices);
  for (size_t d = 0; d < args->num_devices; ++d) {
    for (size_t i = 0; i < args->num_args; ++i) {
      arguments[d].push_back(args->argument_lists[d][i]->buffer);
    }
  }
  std::vector<std::vector<std::shared_ptr<Buffer>>> outputs;
  std::vector<EventRef> done;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->executable->executable->Execute(arguments, &outputs, &done));
  PJRT_Client* client = args->executable->client;
  for (size_t d = 0; d < outputs.size(); ++d) {
    for (size_t j = 0; j < outputs[d].size(); ++j) {
      args->output_lists[d][j] = new PJRT_Buffer{std::move(outputs[d][j]), client};
    }
    if (args->device_complete_events != nullptr) {
      args->device_complete_events[d] = new PJRT_Event{std::move(done[d])};
    }
  }
  return nullptr;
}

}  // namespace workshop::capi
