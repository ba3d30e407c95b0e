// Client, device, device description and memory entry points.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "capi/api.h"
#include "capi/wrappers.h"
#include "runtime/distributed.h"

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
    return InvalidArgument(
        "workshop: create option 'num_devices' must be an integer in "
        "[1, 1024]");
  }
  *out = static_cast<int>(value);
  return Status();
}

// An int64 option (or its decimal string) in [lo, hi].
Status ParseInt(const PJRT_NamedValue& option, int64_t lo, int64_t hi, int64_t* out) {
  int64_t value = lo - 1;
  if (option.type == PJRT_NamedValue_kInt64) {
    value = option.int64_value;
  } else if (option.type == PJRT_NamedValue_kString) {
    std::string text(option.string_value, option.value_size);
    char* end = nullptr;
    errno = 0;
    value = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0) value = lo - 1;
  }
  if (value < lo || value > hi) {
    return InvalidArgument("workshop: create option '", NameOf(option),
                           "' must be an "
                           "integer in [",
                           lo, ", ", hi, "]");
  }
  *out = value;
  return Status();
}

// What PJRT_Client_Create is asked for, beyond the client's own options.
struct CreateOptions {
  ClientOptions client;
  // jax.distributed: this process's index and the process count (num_nodes > 1 turns on
  // the multi-process client).
  int64_t node_id = 0, num_nodes = 1;
  std::string mpi_library;  // libmpi.so.12's path (jax_plugins.workshop sets it).
  // jax_plugins.workshop says the key-value callbacks are real (jax.distributed is active):
  // otherwise they are garbage, and num_nodes from the user's options alone must not make
  // us call them.
  bool has_store = false;
  int64_t timeout_seconds = 120;  // distributed_timeout.
};

// Our option names. JAX hands every plugin the same process-wide options
// (jax_pjrt_client_create_options, and on a Cloud TPU host jax/_src/cloud_tpu_init.py's
// ml_framework_name/ml_framework_version), so a name we do not know is usually meant for
// another plugin and is ignored; one that looks like a misspelling of ours is refused.
constexpr std::string_view kOptionNames[] = {
    "num_devices",         "device_memory_limit", "node_id",           "num_nodes",
    "distributed_timeout", "mpi_library",         "distributed_store", "partition_index"};

// Lower case with '-' and ' ' read as '_': "Num-Devices" is num_devices misspelt.
std::string Normalized(std::string_view name) {
  std::string out(name);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c == '-' || c == ' ') c = '_';
  }
  return out;
}

// Levenshtein distance, capped: names are short.
size_t EditDistance(std::string_view a, std::string_view b) {
  if (a.size() > 64 || b.size() > 64) return 64;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The option of ours that `name` (not one of ours) looks like a misspelling of, or empty:
// equal after Normalized, or within an edit distance of 2 (1 for names of 6 characters or
// fewer, so short foreign names are not caught).
std::string_view CloseOption(std::string_view name) {
  const std::string normalized = Normalized(name);
  for (std::string_view known : kOptionNames) {
    const size_t allowed = known.size() <= 6 ? 1 : 2;
    if (normalized == known || EditDistance(normalized, known) <= allowed) return known;
  }
  return {};
}

// A name any plugin could use: printable ASCII, not empty. Anything else is garbage from
// the caller, refused rather than ignored.
bool IsOptionName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// WORKSHOP_DEBUG=1 prints the create options that were ignored to stderr.
void DebugLog(const std::string& what) {
  static const bool on = [] {
    const char* value = std::getenv("WORKSHOP_DEBUG");
    return value != nullptr && *value != '\0' && std::string_view(value) != "0";
  }();
  if (on) std::fprintf(stderr, "workshop: %s\n", what.c_str());
}

Status ParseOptions(const PJRT_NamedValue* options, size_t num_options, CreateOptions* parsed) {
  std::string unknown;
  for (size_t i = 0; i < num_options; ++i) {
    const std::string_view name = NameOf(options[i]);
    if (name == "num_devices") {
      WORKSHOP_RETURN_IF_ERROR(ParseNumDevices(options[i], &parsed->client.num_devices));
    } else if (name == "device_memory_limit") {
      // Bytes; 0 turns the limit off.
      WORKSHOP_RETURN_IF_ERROR(ParseInt(options[i], 0, std::numeric_limits<int64_t>::max(),
                                        &parsed->client.device_memory_limit));
    } else if (name == "node_id") {
      WORKSHOP_RETURN_IF_ERROR(ParseInt(options[i], 0, 1 << 20, &parsed->node_id));
    } else if (name == "num_nodes") {
      WORKSHOP_RETURN_IF_ERROR(ParseInt(options[i], 1, 1 << 20, &parsed->num_nodes));
    } else if (name == "distributed_timeout") {
      WORKSHOP_RETURN_IF_ERROR(ParseInt(options[i], 1, 86400, &parsed->timeout_seconds));
    } else if (name == "mpi_library") {
      if (options[i].type != PJRT_NamedValue_kString) {
        return InvalidArgument("workshop: create option 'mpi_library' must be a string");
      }
      parsed->mpi_library.assign(options[i].string_value, options[i].value_size);
    } else if (name == "distributed_store") {
      int64_t value = 0;
      if (options[i].type == PJRT_NamedValue_kBool) {
        value = RawBool(options[i].bool_value) ? 1 : 0;
      } else {
        WORKSHOP_RETURN_IF_ERROR(ParseInt(options[i], 0, 1, &value));
      }
      parsed->has_store = value != 0;
    } else if (name == "partition_index") {
      // jax.distributed's slice index (multi-slice TPU jobs); one kind of machine here.
    } else if (!IsOptionName(name)) {
      unknown += StrCat(unknown.empty() ? "" : ", ", "'", name, "' (not an option name)");
    } else if (const std::string_view close = CloseOption(name); !close.empty()) {
      unknown += StrCat(unknown.empty() ? "" : ", ", "'", name, "' (did you mean '", close, "'?)");
    } else {
      DebugLog(StrCat("ignoring client create option '", name,
                      "' (not a workshop option; JAX passes every plugin the same options)"));
    }
  }
  if (!unknown.empty()) {
    return InvalidArgument("workshop: unknown client create option(s) ", unknown,
                           "; the supported options are 'num_devices', "
                           "'device_memory_limit', and with jax.distributed 'node_id', "
                           "'num_nodes', 'distributed_timeout' and 'mpi_library' (names "
                           "unlike these are ignored: they are meant for other plugins)");
  }
  if (parsed->node_id >= parsed->num_nodes) {
    return InvalidArgument("workshop: create option node_id ", parsed->node_id,
                           " is not below num_nodes ", parsed->num_nodes);
  }
  return Status();
}

// PJRT_CallbackError for the key-value callbacks: they report failures as our errors.
PJRT_Error* CallbackError(PJRT_Error_Code code, const char* message, size_t size) {
  return new PJRT_Error{Status(static_cast<Code>(code), std::string(message, size))};
}
PJRT_CallbackError callback_error = &CallbackError;

Status FromCallback(PJRT_Error* error, const std::string& what) {
  if (error == nullptr) return Status();
  Status status(error->status.code(), StrCat("workshop: ", what, ": ", error->status.message()));
  delete error;
  return status;
}

// jax.distributed's store, through the callbacks of PJRT_Client_Create_Args. jaxlib
// prefixes every key with the platform name and ":" ("workshop:workshop/process/0"), so
// ours cannot collide with another plugin's; `prefix` keeps the keys of successive
// clients of one job apart (the store refuses to overwrite a key).
class CallbackStore : public KeyValueStore {
 public:
  CallbackStore(const PJRT_Client_Create_Args& args, std::string prefix)
      : args_(args), prefix_(std::move(prefix)) {}

  Status Put(const std::string& relative_key, const std::string& value) override {
    const std::string key = prefix_ + relative_key;
    PJRT_KeyValuePutCallback_Args put{};
    put.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
    put.key = key.data();
    put.key_size = key.size();
    put.value = value.data();
    put.value_size = value.size();
    put.callback_error = &callback_error;
    put.user_arg = args_.kv_put_user_arg;
    return FromCallback(args_.kv_put_callback(&put), StrCat("key-value put of '", key, "'"));
  }

  Status Get(const std::string& relative_key, std::chrono::milliseconds timeout,
             std::string* value) override {
    const std::string key = prefix_ + relative_key;
    PJRT_KeyValueGetCallback_Args get{};
    get.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
    get.key = key.data();
    get.key_size = key.size();
    get.timeout_in_ms = static_cast<int>(timeout.count());
    get.callback_error = &callback_error;
    get.user_arg = args_.kv_get_user_arg;
    WORKSHOP_RETURN_IF_ERROR(
        FromCallback(args_.kv_get_callback(&get), StrCat("waited ", timeout.count() / 1000.0,
                                                         " s (create option distributed_timeout) "
                                                         "for key '",
                                                         key, "' from another process")));
    value->assign(get.value, get.value_size);
    if (get.value_deleter_callback != nullptr) get.value_deleter_callback(get.value);
    return Status();
  }

 private:
  const PJRT_Client_Create_Args& args_;
  const std::string prefix_;
};

}  // namespace
}  // namespace workshop::capi

// kernels/core/registry.cc: the generated op table's fingerprint (not included here, so a new op
// does not recompile this file).
extern "C" const char* WorkshopOpTableFingerprint();

namespace workshop::capi {
namespace {

// What every process must agree on before their devices can work together: the plugin
// build (version and the generated op table's fingerprint: a plan compiled in one process
// runs in all) and the device count (global device ids are p * num_devices + i).
struct Agreement {
  std::string build, devices;
  std::string Describe() const { return StrCat(build, " with ", devices, " devices"); }
};

Agreement Mine(const CreateOptions& options) {
  // Test hook: WORKSHOP_TEST_PRETEND_VERSION replaces the version this process reports to
  // its peers, so tests/runtime/test_multiprocess.py can start two processes of "different builds"
  // without building the plugin twice. Nothing else reads it.
  const char* pretend = std::getenv("WORKSHOP_TEST_PRETEND_VERSION");
  const std::string version = pretend != nullptr && *pretend != '\0' ? pretend : WORKSHOP_VERSION;
  return {StrCat("workshop ", version, " (op table ", WorkshopOpTableFingerprint(), ")"),
          StrCat(options.client.num_devices)};
}

// The published form is Describe()'s text (notebook 07 shows it); a peer's is split at
// its last " with " to say which part differs. A text that does not split (another
// plugin build may write another form) counts as a different build.
Agreement Parse(const std::string& text) {
  const std::string suffix = " devices";
  const size_t with = text.rfind(" with ");
  if (with == std::string::npos || text.size() < suffix.size() ||
      text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0 ||
      with + 6 > text.size() - suffix.size()) {
    return {text, ""};
  }
  return {text.substr(0, with), text.substr(with + 6, text.size() - suffix.size() - with - 6)};
}

// Processes publish their description, check everyone else's (a mismatch names both
// processes, both descriptions and what differs), and join the MPI group.
Status ConnectProcesses(const PJRT_Client_Create_Args& args, CreateOptions* options) {
  if (!options->has_store || args.kv_get_callback == nullptr || args.kv_put_callback == nullptr) {
    return InvalidArgument("workshop: num_nodes ", options->num_nodes,
                           " needs the key-value "
                           "store jax.distributed passes to PJRT_Client_Create: call "
                           "jax.distributed.initialize(...) in every process instead of "
                           "setting num_nodes yourself");
  }
  // The first client of the process uses keys workshop/...; one created after it (JAX
  // recreates its clients after jax.clear_backends()) workshop/client<k>/..., k counting
  // the process's multi-process clients, the same in every process that recreates in step.
  static std::atomic<int> clients{0};
  const int k = clients.fetch_add(1);
  CallbackStore store(args, k == 0 ? "workshop/" : StrCat("workshop/client", k, "/"));
  const std::chrono::milliseconds timeout(options->timeout_seconds * 1000);
  const Agreement mine = Mine(*options);
  WORKSHOP_RETURN_IF_ERROR(store.Put(StrCat("process/", options->node_id), mine.Describe()));
  for (int64_t q = 0; q < options->num_nodes; ++q) {
    if (q == options->node_id) continue;
    std::string text;
    WORKSHOP_RETURN_IF_ERROR(store.Get(StrCat("process/", q), timeout, &text));
    const Agreement theirs = Parse(text);
    if (theirs.build != mine.build) {
      return FailedPrecondition(
          "workshop: processes disagree on the plugin build: process ", options->node_id, " runs ",
          mine.Describe(), ", process ", q, " runs ", text,
          "; every process "
          "needs the same plugin version and op table (install and build the same "
          "checkout everywhere)");
    }
    if (theirs.devices != mine.devices) {
      return FailedPrecondition("workshop: processes disagree on the device count: process ",
                                options->node_id, " runs ", mine.Describe(), ", process ", q,
                                " runs ", text,
                                "; every process "
                                "needs the same create option num_devices");
    }
  }
  ProcessGroup::Options group_options;
  group_options.node_id = static_cast<int>(options->node_id);
  group_options.num_nodes = static_cast<int>(options->num_nodes);
  group_options.library = options->mpi_library;
  group_options.timeout = timeout;
  std::unique_ptr<ProcessGroup> group;
  WORKSHOP_RETURN_IF_ERROR(ProcessGroup::Connect(group_options, &store, &group));
  options->client.process_index = static_cast<int>(options->node_id);
  options->client.num_processes = static_cast<int>(options->num_nodes);
  options->client.group = std::move(group);
  return Status();
}

}  // namespace

// The KV-store callbacks are read only when num_nodes > 1: without jax.distributed jaxlib
// leaves them uninitialized (garbage, not NULL).
PJRT_Error* Client_Create(PJRT_Client_Create_Args* args) {
  CreateOptions create;
  WORKSHOP_RETURN_IF_PJRT_ERROR(ParseOptions(args->create_options, args->num_options, &create));
  if (create.num_nodes > 1) WORKSHOP_RETURN_IF_PJRT_ERROR(ConnectProcesses(*args, &create));
  const ClientOptions& options = create.client;
  const int total = options.num_devices * options.num_processes;
  auto wrapper = std::make_unique<PJRT_Client>();
  wrapper->client = std::make_unique<Client>(options);
  wrapper->topology = MakeTopology(total, options.num_devices);
  wrapper->topology->owned_by_client = true;
  // Memory ids number the device memories first, then the pinned_host ones (device.h).
  wrapper->memories.resize(total * kMemoryKinds.size());
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
    if (device->addressable()) wrapper->addressable_devices.push_back(pjrt_device.get());
    wrapper->devices.push_back(pjrt_device.get());
    wrapper->owned_devices.push_back(std::move(pjrt_device));
  }
  for (PJRT_Memory* memory : wrapper->memories) {
    if (memory->memory->device()->addressable()) wrapper->addressable_memories.push_back(memory);
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
  args->process_index = args->client->client->process_index();
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
  args->addressable_devices = args->client->addressable_devices.data();
  args->num_addressable_devices = args->client->addressable_devices.size();
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

// The local hardware id numbers this process's devices (the global id in one process).
PJRT_Error* Client_LookupAddressableDevice(PJRT_Client_LookupAddressableDevice_Args* args) {
  const auto& local = args->client->client->addressable_devices();
  Device* device =
      args->local_hardware_id >= 0 && args->local_hardware_id < static_cast<int64_t>(local.size())
          ? local[args->local_hardware_id]
          : nullptr;
  if (device == nullptr) {
    return ToPjrt(InvalidArgument("No matching device found for local_hardware_id ",
                                  args->local_hardware_id));
  }
  args->addressable_device = args->client->Wrap(device);
  return nullptr;
}

PJRT_Error* Client_AddressableMemories(PJRT_Client_AddressableMemories_Args* args) {
  args->addressable_memories = args->client->addressable_memories.data();
  args->num_addressable_memories = args->client->addressable_memories.size();
  return nullptr;
}

// Replica r, partition p runs on device (r * partitions + p) modulo the device count, the
// same round-robin XLA's CPU client uses.
PJRT_Error* Client_DefaultDeviceAssignment(PJRT_Client_DefaultDeviceAssignment_Args* args) {
  if (args->num_replicas < 0 || args->num_partitions < 0) {  // (-1) * (-1) passed as 1
    return ToPjrt(InvalidArgument("PJRT_Client_DefaultDeviceAssignment: num_replicas ",
                                  args->num_replicas, " and num_partitions ", args->num_partitions,
                                  " must not be negative"));
  }
  const size_t needed = static_cast<size_t>(args->num_replicas) * args->num_partitions;
  if (args->default_assignment_size < needed) {
    return ToPjrt(
        FailedPrecondition("PJRT_Client_DefaultDeviceAssignment: `default_assignment_size` ",
                           args->default_assignment_size, " < `num_replicas * num_partitions`, ",
                           args->num_replicas, " * ", args->num_partitions, " = ", needed));
  }
  const size_t devices = args->client->devices.size();
  if (devices == 0 && needed > 0) {  // i % devices below.
    return ToPjrt(
        FailedPrecondition("PJRT_Client_DefaultDeviceAssignment: the client has no devices"));
  }
  for (size_t i = 0; i < needed; ++i) args->default_assignment[i] = static_cast<int>(i % devices);
  return nullptr;
}

// The client's topology: it lives as long as the client, the caller must not destroy it.
PJRT_Error* Client_TopologyDescription(PJRT_Client_TopologyDescription_Args* args) {
  args->topology = args->client->topology.get();
  return nullptr;
}

// jax.distributed's coordination service reports every process's state (jaxlib calls this
// from a watcher thread, fatally on error). A peer that disconnected or failed breaks the
// process group, so collectives waiting for it fail now instead of at their timeout.
PJRT_Error* Client_UpdateGlobalProcessInfo(PJRT_Client_UpdateGlobalProcessInfo_Args* args) {
  ProcessGroup* group = args->client->client->group();
  if (group == nullptr) return nullptr;
  for (size_t i = 0; i < args->num_process_infos; ++i) {
    const PJRT_ProcessInfo& info = args->process_infos[i];
    if (info.task_id == group->rank()) continue;
    if (info.state == PJRT_ProcessState_kDisconnected || info.state == PJRT_ProcessState_kError) {
      group->Fail(
          Status(Code::kUnavailable,
                 StrCat("workshop: process ", info.task_id, " is ",
                        info.state == PJRT_ProcessState_kError ? "in error" : "disconnected",
                        " (jax.distributed's coordination service)",
                        info.error_message_size > 0 && info.error_message != nullptr
                            ? ": " + std::string(info.error_message, info.error_message_size)
                            : "")));
    }
  }
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
  args->process_index = args->device_description->process_index;
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
  args->is_addressable = args->device->device->addressable();
  return nullptr;
}

PJRT_Error* Device_LocalHardwareId(PJRT_Device_LocalHardwareId_Args* args) {
  // Another process's device has none here (-1, which jaxlib shows as None).
  args->local_hardware_id =
      args->device->device->addressable() ? args->device->device->local_id() : -1;
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
  CreateOptions options;
  WORKSHOP_RETURN_IF_PJRT_ERROR(ParseOptions(args->create_options, args->num_options, &options));
  args->topology = MakeTopology(options.client.num_devices).release();
  return nullptr;
}

PJRT_Error* TopologyDescription_Destroy(PJRT_TopologyDescription_Destroy_Args* args) {
  if (args->topology->owned_by_client) {
    return ToPjrt(
        InvalidArgument("PJRT_TopologyDescription_Destroy: topology belongs to its "
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
  auto* serialized = new PJRT_SerializedTopology{StrCat(kTopologyTag, args->topology->num_devices)};
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
    return ToPjrt(
        InvalidArgument("PJRT_TopologyDescription_Deserialize: not a serialized "
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
