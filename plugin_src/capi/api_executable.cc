// Compile, executable queries, serialization and Execute.
#include <cstring>

#include "capi/api.h"
#include "capi/wrappers.h"
#include "runtime/serialize.h"

PJRT_Executable::PJRT_Executable(std::shared_ptr<const workshop::Program> p)
    : program(std::move(p)) {
  const workshop::Plan& plan = program->plan;
  // The layouts are explicit (PrepareProgram made one per parameter and result).
  auto layout = [](const workshop::MinorToMajor& order, size_t rank) {
    return new PJRT_Layouts_MemoryLayout{order.empty() ? workshop::RowMajor(rank) : order, true};
  };
  for (size_t i = 0; i < plan.results.size(); ++i) {
    const workshop::SlotType& type = plan.slots[plan.results[i]];
    output_types.push_back(static_cast<PJRT_Buffer_Type>(type.dtype));
    output_dims.insert(output_dims.end(), type.dims.begin(), type.dims.end());
    output_dim_sizes.push_back(type.dims.size());
    output_layouts.emplace_back(layout(program->output_layouts[i], type.dims.size()));
  }
  for (const std::string& kind : program->output_memory_kinds) {
    output_memory_kinds.push_back(kind.c_str());
    output_memory_kind_sizes.push_back(kind.size());
  }
  for (size_t i = 0; i < plan.params.size(); ++i) {
    parameter_layouts.emplace_back(
        layout(program->parameter_layouts[i], plan.slots[plan.params[i]].dims.size()));
  }
  for (auto& layout : output_layouts) output_layout_ptrs.push_back(layout.get());
  for (auto& layout : parameter_layouts) parameter_layout_ptrs.push_back(layout.get());
  for (const auto& [name, value] : program->cost_analysis) {
    cost_properties.push_back(workshop::FloatValue(name.c_str(), static_cast<float>(value)));
  }
  memory_stats = workshop::ComputeMemoryStats(*program);
}

namespace workshop::capi {
namespace {

const Program& ProgramOf(const PJRT_Executable* executable) { return *executable->program; }

PJRT_LoadedExecutable* Wrap(PJRT_Client* client, std::unique_ptr<LoadedExecutable> executable) {
  auto* loaded = new PJRT_LoadedExecutable{std::move(executable), client, {}};
  for (Device* device : loaded->executable->devices()) {
    loaded->devices.push_back(client->Wrap(device));
  }
  return loaded;
}

std::string ProgramString(const PJRT_Program* program, const char* fn, Status* status) {
  if (program == nullptr) {
    *status = InvalidArgument(fn, ": no program was given");
    return "";
  }
  return std::string(program->code, program->code_size);
}

}  // namespace

PJRT_Error* Client_Compile(PJRT_Client_Compile_Args* args) {
  Status status;
  std::string code = ProgramString(args->program, "PJRT_Client_Compile", &status);
  WORKSHOP_RETURN_IF_PJRT_ERROR(status);
  std::unique_ptr<LoadedExecutable> executable;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->client->client->Compile(
      code, std::string(args->program->format, args->program->format_size),
      std::string(args->compile_options, args->compile_options_size), &executable));
  args->executable = Wrap(args->client, std::move(executable));
  return nullptr;
}

// Ahead-of-time compilation: for a machine shaped like `topology`, without loading. The
// result can be serialized and loaded into a client later (DeserializeAndLoad).
PJRT_Error* Compile(PJRT_Compile_Args* args) {
  Status status;
  std::string code = ProgramString(args->program, "PJRT_Compile", &status);
  WORKSHOP_RETURN_IF_PJRT_ERROR(status);
  if (args->topology == nullptr) {
    return ToPjrt(InvalidArgument("PJRT_Compile: no topology was given"));
  }
  std::shared_ptr<const Program> program;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      Client::CompileProgram(code, std::string(args->program->format, args->program->format_size),
                             std::string(args->compile_options, args->compile_options_size),
                             args->topology->num_devices, &program,
                             /*bounded_gil_wait=*/true));
  args->executable = new PJRT_Executable(std::move(program));
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
  args->num_outputs = ProgramOf(args->executable).plan.results.size();
  return nullptr;
}

// Plans are interpreted by the executor's kernels: no code is generated.
PJRT_Error* Executable_SizeOfGeneratedCodeInBytes(
    PJRT_Executable_SizeOfGeneratedCodeInBytes_Args* args) {
  args->size_in_bytes = 0;
  return nullptr;
}

// The compiler's per-op estimates (jax_plugins/workshop/compiler/cost.py), per device.
PJRT_Error* Executable_GetCostAnalysis(PJRT_Executable_GetCostAnalysis_Args* args) {
  args->properties = args->executable->cost_properties.data();
  args->num_properties = args->executable->cost_properties.size();
  return nullptr;
}

PJRT_Error* Executable_GetCompiledMemoryStats(PJRT_Executable_GetCompiledMemoryStats_Args* args) {
  const CompiledMemoryStats& stats = args->executable->memory_stats;
  args->generated_code_size_in_bytes = 0;
  args->argument_size_in_bytes = stats.argument_bytes;
  args->output_size_in_bytes = stats.output_bytes;
  args->alias_size_in_bytes = stats.alias_bytes;
  args->temp_size_in_bytes = stats.temp_bytes;
  args->host_generated_code_size_in_bytes = 0;
  args->host_argument_size_in_bytes = stats.host_argument_bytes;
  args->host_output_size_in_bytes = stats.host_output_bytes;
  args->host_alias_size_in_bytes = stats.host_alias_bytes;
  args->host_temp_size_in_bytes = 0;
  args->peak_memory_in_bytes = stats.peak_bytes;
  return nullptr;
}

PJRT_Error* Executable_OutputElementTypes(PJRT_Executable_OutputElementTypes_Args* args) {
  args->output_types = args->executable->output_types.data();
  args->num_output_types = args->executable->output_types.size();
  return nullptr;
}

PJRT_Error* Executable_OutputDimensions(PJRT_Executable_OutputDimensions_Args* args) {
  args->num_outputs = args->executable->output_dim_sizes.size();
  args->dims = args->executable->output_dims.data();
  args->dim_sizes = args->executable->output_dim_sizes.data();
  return nullptr;
}

PJRT_Error* Executable_OutputMemoryKinds(PJRT_Executable_OutputMemoryKinds_Args* args) {
  args->num_outputs = args->executable->output_memory_kinds.size();
  args->memory_kinds = args->executable->output_memory_kinds.data();
  args->memory_kind_sizes = args->executable->output_memory_kind_sizes.data();
  return nullptr;
}

// The per-partition program as MLIR text (format "mlir"), which jaxlib converts to HLO for
// compiled.as_text() and reads parameter and output shardings from
// (mhlo.spmd_parameters_shardings / mhlo.spmd_output_sharding). Called twice by jaxlib:
// with code == NULL for the size, then to fill its buffer.
PJRT_Error* Executable_OptimizedProgram(PJRT_Executable_OptimizedProgram_Args* args) {
  static constexpr std::string_view kFormat = "mlir";
  PJRT_Program* program = args->program;
  if (program == nullptr) {
    return ToPjrt(InvalidArgument("PJRT_Executable_OptimizedProgram: program is NULL"));
  }
  const std::string& text = ProgramOf(args->executable).optimized_program;
  if (text.empty()) {  // The compiler could not express this program's partitioning.
    return ToPjrt(Unimplemented("PJRT_Executable_OptimizedProgram: no optimized program for ",
                                ProgramOf(args->executable).name));
  }
  program->format = kFormat.data();
  program->format_size = kFormat.size();
  if (program->code == nullptr) {
    program->code_size = text.size();
    return nullptr;
  }
  if (program->code_size < text.size()) {
    return ToPjrt(InvalidArgument("PJRT_Executable_OptimizedProgram: code_size ",
                                  program->code_size, " is smaller than the program's ",
                                  text.size(), " bytes"));
  }
  std::memcpy(program->code, text.data(), text.size());
  program->code_size = text.size();
  return nullptr;
}

PJRT_Error* Executable_Fingerprint(PJRT_Executable_Fingerprint_Args* args) {
  const std::string& fingerprint = ProgramOf(args->executable).fingerprint;
  args->executable_fingerprint = fingerprint.data();
  args->executable_fingerprint_size = fingerprint.size();
  return nullptr;
}

// The format is in runtime/serialize.h: the plan plus the program it came from.
PJRT_Error* Executable_Serialize(PJRT_Executable_Serialize_Args* args) {
  auto* serialized = new PJRT_SerializedExecutable{SerializeProgram(ProgramOf(args->executable))};
  args->serialized_bytes = serialized->bytes.data();
  args->serialized_bytes_size = serialized->bytes.size();
  args->serialized_executable = serialized;
  args->serialized_executable_deleter = [](PJRT_SerializedExecutable* s) { delete s; };
  return nullptr;
}

PJRT_Error* Executable_DeserializeAndLoad(PJRT_Executable_DeserializeAndLoad_Args* args) {
  std::string options;
  if (args->overridden_serialized_compile_options != nullptr) {
    options.assign(args->overridden_serialized_compile_options,
                   args->overridden_serialized_compile_options_size);
  }
  std::unique_ptr<LoadedExecutable> executable;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->client->client->DeserializeAndLoad(
      std::string_view(args->serialized_executable, args->serialized_executable_size), options,
      &executable));
  args->loaded_executable = Wrap(args->client, std::move(executable));
  return nullptr;
}

PJRT_Error* LoadedExecutable_Destroy(PJRT_LoadedExecutable_Destroy_Args* args) {
  delete args->executable;
  return nullptr;
}

PJRT_Error* LoadedExecutable_GetExecutable(PJRT_LoadedExecutable_GetExecutable_Args* args) {
  args->executable = new PJRT_Executable(args->loaded_executable->executable->shared_program());
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

PJRT_Error* LoadedExecutable_Delete(PJRT_LoadedExecutable_Delete_Args* args) {
  args->executable->executable->Delete();
  return nullptr;
}

PJRT_Error* LoadedExecutable_IsDeleted(PJRT_LoadedExecutable_IsDeleted_Args* args) {
  args->is_deleted = args->executable->executable->IsDeleted();
  return nullptr;
}

// Deprecated in favour of PJRT_Executable_Fingerprint; the same value.
PJRT_Error* LoadedExecutable_Fingerprint(PJRT_LoadedExecutable_Fingerprint_Args* args) {
  const std::string& fingerprint = args->executable->executable->program().fingerprint;
  args->executable_fingerprint = fingerprint.data();
  args->executable_fingerprint_size = fingerprint.size();
  return nullptr;
}

PJRT_Error* LoadedExecutable_Execute(PJRT_LoadedExecutable_Execute_Args* args) {
  if (args->execute_device != nullptr) {
    return ToPjrt(
        Unimplemented("PJRT_LoadedExecutable_Execute: execute_device (portable "
                      "execution) is not supported"));
  }
  std::vector<int64_t> non_donatable;
  if (const PJRT_ExecuteOptions* options = args->options; options != nullptr) {
    if (options->num_send_ops > 0 || options->num_recv_ops > 0) {
      return ToPjrt(
          Unimplemented("PJRT_LoadedExecutable_Execute: send/recv callbacks are not "
                        "supported (programs with host transfers don't compile)"));
    }
    non_donatable.assign(
        options->non_donatable_input_indices,
        options->non_donatable_input_indices + options->num_non_donatable_input_indices);
  }
  std::vector<std::vector<std::shared_ptr<Buffer>>> arguments(args->num_devices);
  for (size_t d = 0; d < args->num_devices; ++d) {
    for (size_t i = 0; i < args->num_args; ++i) {
      arguments[d].push_back(args->argument_lists[d][i]->buffer);
    }
  }
  std::vector<std::vector<std::shared_ptr<Buffer>>> outputs;
  std::vector<EventRef> done;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      args->executable->executable->Execute(arguments, non_donatable, &outputs, &done));
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
