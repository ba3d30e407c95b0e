// The PJRT profiler extension: jaxlib's register_plugin_profiler finds it on the extension
// chain (api_table.cc) and drives it from jax.profiler sessions through the
// PLUGIN_Profiler_Api (create, start, stop, collect_data). The
// events come from runtime/profiler.h; collect_data returns them as a serialized XSpace.
// The ABI below is declared by hand, as in extensions.h, after XLA's
// xla/backends/profiler/plugin/profiler_c_api.h (PLUGIN_PROFILER_VERSION 1) and
// xla/pjrt/c/pjrt_c_api_profiler_extension.h (version 1); the wheel ships neither.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "pjrt_c_api.h"
#include "runtime/profiler.h"

extern "C" {

struct PLUGIN_Profiler {
  std::string collected;  // XSpace bytes between the two collect_data calls.
};
struct PLUGIN_Profiler_Error {
  std::string message;
};

struct PLUGIN_Profiler_Error_Destroy_Args {
  size_t struct_size;
  void* priv;
  PLUGIN_Profiler_Error* error;
};
struct PLUGIN_Profiler_Error_Message_Args {
  size_t struct_size;
  void* priv;
  const PLUGIN_Profiler_Error* error;
  const char* message;
  size_t message_size;
};
struct PLUGIN_Profiler_Error_GetCode_Args {
  size_t struct_size;
  void* priv;
  const PLUGIN_Profiler_Error* error;
  int code;
};
struct PLUGIN_Profiler_Create_Args {
  size_t struct_size;
  const char* options;
  size_t options_size;
  PLUGIN_Profiler* profiler;
};
struct PLUGIN_Profiler_Args {  // Destroy, Start, Stop: {struct_size, profiler}.
  size_t struct_size;
  PLUGIN_Profiler* profiler;
};
struct PLUGIN_Profiler_CollectData_Args {
  size_t struct_size;
  PLUGIN_Profiler* profiler;
  uint8_t* buffer;
  size_t buffer_size_in_bytes;
};

struct PLUGIN_Profiler_Api {
  size_t struct_size;
  void* priv;
  void (*error_destroy)(PLUGIN_Profiler_Error_Destroy_Args*);
  void (*error_message)(PLUGIN_Profiler_Error_Message_Args*);
  PLUGIN_Profiler_Error* (*error_get_code)(PLUGIN_Profiler_Error_GetCode_Args*);
  PLUGIN_Profiler_Error* (*create)(PLUGIN_Profiler_Create_Args*);
  PLUGIN_Profiler_Error* (*destroy)(PLUGIN_Profiler_Args*);
  PLUGIN_Profiler_Error* (*start)(PLUGIN_Profiler_Args*);
  PLUGIN_Profiler_Error* (*stop)(PLUGIN_Profiler_Args*);
  PLUGIN_Profiler_Error* (*collect_data)(PLUGIN_Profiler_CollectData_Args*);
};

struct PJRT_Profiler_Extension {
  size_t struct_size;
  PJRT_Extension_Type type;
  PJRT_Extension_Base* next;
  PLUGIN_Profiler_Api* profiler_api;
  int64_t traceme_context_id;
};

}  // extern "C"

namespace workshop::capi {
namespace {

// These functions are reached through the extension chain like the PJRT_Api slots, so they
// check their arguments as capi/check.h does for those: a NULL args is an error (or, for
// the functions that cannot return one, nothing happens).
PLUGIN_Profiler_Error* NullArgs() {
  return new PLUGIN_Profiler_Error{"workshop: profiler function called with args NULL"};
}
void ErrorDestroy(PLUGIN_Profiler_Error_Destroy_Args* args) {
  if (args != nullptr) delete args->error;
}
void ErrorMessage(PLUGIN_Profiler_Error_Message_Args* args) {
  if (args == nullptr || args->error == nullptr) return;
  args->message = args->error->message.data();
  args->message_size = args->error->message.size();
}
PLUGIN_Profiler_Error* ErrorGetCode(PLUGIN_Profiler_Error_GetCode_Args* args) {
  if (args == nullptr) return NullArgs();
  args->code = 13;  // INTERNAL: the only errors are "no profiler".
  return nullptr;
}
PLUGIN_Profiler_Error* NoProfiler() {
  return new PLUGIN_Profiler_Error{"workshop: profiler argument is null"};
}
PLUGIN_Profiler_Error* Create(PLUGIN_Profiler_Create_Args* args) {
  if (args == nullptr) return NullArgs();
  args->profiler = new PLUGIN_Profiler();
  return nullptr;
}
PLUGIN_Profiler_Error* Destroy(PLUGIN_Profiler_Args* args) {
  if (args == nullptr) return NullArgs();
  delete args->profiler;
  return nullptr;
}
PLUGIN_Profiler_Error* Start(PLUGIN_Profiler_Args* args) {
  if (args == nullptr) return NullArgs();
  if (args->profiler == nullptr) return NoProfiler();
  profiler::Start();
  return nullptr;
}
PLUGIN_Profiler_Error* Stop(PLUGIN_Profiler_Args* args) {
  if (args == nullptr) return NullArgs();
  if (args->profiler == nullptr) return NoProfiler();
  profiler::Stop();
  return nullptr;
}
PLUGIN_Profiler_Error* CollectData(PLUGIN_Profiler_CollectData_Args* args) {
  if (args == nullptr) return NullArgs();
  if (args->profiler == nullptr) return NoProfiler();
  std::string& collected = args->profiler->collected;
  // jaxlib's PluginTracer calls once with a null buffer and parses the buffer we point it
  // at (owned by the profiler object, alive until destroy); a caller passing its own
  // buffer gets a copy.
  if (args->buffer == nullptr) {
    collected = profiler::CollectXSpace();
    args->buffer = reinterpret_cast<uint8_t*>(collected.data());
  } else if (args->buffer != reinterpret_cast<uint8_t*>(collected.data())) {
    std::copy(collected.begin(), collected.end(), args->buffer);
  }
  args->buffer_size_in_bytes = collected.size();
  return nullptr;
}

PLUGIN_Profiler_Api kProfilerApi = {sizeof(PLUGIN_Profiler_Api),
                                    nullptr,
                                    ErrorDestroy,
                                    ErrorMessage,
                                    ErrorGetCode,
                                    Create,
                                    Destroy,
                                    Start,
                                    Stop,
                                    CollectData};

}  // namespace

PJRT_Profiler_Extension kProfilerExtension = {
    sizeof(PJRT_Profiler_Extension), PJRT_Extension_Type_Profiler, nullptr, &kProfilerApi, 0};

PJRT_Extension_Base* ProfilerExtension() {
  return reinterpret_cast<PJRT_Extension_Base*>(&kProfilerExtension);
}

}  // namespace workshop::capi
