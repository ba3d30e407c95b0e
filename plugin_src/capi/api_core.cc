// Errors, events and plugin-level entry points.
#include <cstring>

#include "capi/api.h"
#include "capi/wrappers.h"

namespace workshop::capi {

void Error_Destroy(PJRT_Error_Destroy_Args* args) { delete args->error; }

void Error_Message(PJRT_Error_Message_Args* args) {
  const std::string& message = args->error->status.message();
  args->message = message.data();
  args->message_size = message.size();
}

PJRT_Error* Error_GetCode(PJRT_Error_GetCode_Args* args) {
  args->code = static_cast<PJRT_Error_Code>(args->error->status.code());
  return nullptr;
}

PJRT_Error* Plugin_Initialize(PJRT_Plugin_Initialize_Args*) { return nullptr; }

// The StableHLO versions come from the jaxlib the plugin was built against (setup.py reads
// them and passes them as macros): the compiler deserializes with that jaxlib's bindings, so
// its current version is the newest we can read. jaxlib serializes programs at
// min(our current, its own current).
PJRT_Error* Plugin_Attributes(PJRT_Plugin_Attributes_Args* args) {
  // Static: jaxlib keeps pointers into this list for the life of the process.
  static const int64_t kCurrent[] = {WORKSHOP_STABLEHLO_CURRENT_VERSION};
  static const int64_t kMinimum[] = {WORKSHOP_STABLEHLO_MINIMUM_VERSION};
  static const PJRT_NamedValue kAttributes[] = {
      {.struct_size = PJRT_NamedValue_STRUCT_SIZE,
       .extension_start = nullptr,
       .name = "xla_version",
       .name_size = std::strlen("xla_version"),
       .type = PJRT_NamedValue_kInt64,
       .int64_value = 2,
       .value_size = 1},
      {.struct_size = PJRT_NamedValue_STRUCT_SIZE,
       .extension_start = nullptr,
       .name = "stablehlo_current_version",
       .name_size = std::strlen("stablehlo_current_version"),
       .type = PJRT_NamedValue_kInt64List,
       .int64_array_value = kCurrent,
       .value_size = 3},
      {.struct_size = PJRT_NamedValue_STRUCT_SIZE,
       .extension_start = nullptr,
       .name = "stablehlo_minimum_version",
       .name_size = std::strlen("stablehlo_minimum_version"),
       .type = PJRT_NamedValue_kInt64List,
       .int64_array_value = kMinimum,
       .value_size = 3},
  };
  args->attributes = kAttributes;
  args->num_attributes = sizeof(kAttributes) / sizeof(kAttributes[0]);
  return nullptr;
}

PJRT_Error* Event_Destroy(PJRT_Event_Destroy_Args* args) {
  delete args->event;
  return nullptr;
}

PJRT_Error* Event_IsReady(PJRT_Event_IsReady_Args* args) {
  args->is_ready = args->event->event->IsReady();
  return nullptr;
}

PJRT_Error* Event_Error(PJRT_Event_Error_Args* args) {
  const EventRef& event = args->event->event;
  if (!event->IsReady()) {
    return ToPjrt(FailedPrecondition("PJRT_Event_Error: the event is not ready yet"));
  }
  return ToPjrt(event->Await());
}

PJRT_Error* Event_Await(PJRT_Event_Await_Args* args) { return ToPjrt(args->event->event->Await()); }

// The callback gets its own PJRT_Error (it owns and destroys it), and captures only the
// shared event state, so it still fires if the caller destroys the PJRT_Event first.
PJRT_Error* Event_OnReady(PJRT_Event_OnReady_Args* args) {
  args->event->event->OnReady([callback = args->callback, user_arg = args->user_arg](
                                  const Status& status) { callback(ToPjrt(status), user_arg); });
  return nullptr;
}

// An execute context carries user data to FFI handlers during one execution. The plugin
// runs no FFI handlers, so a context has nothing to carry, but it is a valid object that
// Execute accepts (PJRT_ExecuteOptions::context) and ignores.
PJRT_Error* ExecuteContext_Create(PJRT_ExecuteContext_Create_Args* args) {
  args->context = new PJRT_ExecuteContext{};
  return nullptr;
}

PJRT_Error* ExecuteContext_Destroy(PJRT_ExecuteContext_Destroy_Args* args) {
  delete args->context;
  return nullptr;
}

}  // namespace workshop::capi
