// The two PJRT C API extensions this plugin provides, declared here because the
// xla-cpu-pjrt wheel ships only pjrt_c_api.h. An extension is a struct that starts like
// PJRT_Extension_Base ({struct_size, type, next}) and is found by walking the chain from
// PJRT_Api::extension_start; these declarations follow the ABI of XLA's
// pjrt_c_api_layouts_extension.h (version 4) and pjrt_c_api_memory_descriptions_extension.h
// (version 1), field for field, which is what jaxlib reads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pjrt_c_api.h"

extern "C" {

// ---------------------------------- Layouts ----------------------------------
// A layout object the plugin owns; jaxlib only ever serializes it (to the text form of an
// xla::Layout, e.g. "{1,0}") and destroys it.

typedef struct PJRT_Layouts_MemoryLayout PJRT_Layouts_MemoryLayout;
typedef struct PJRT_Layouts_SerializedLayout PJRT_Layouts_SerializedLayout;

struct PJRT_Layouts_MemoryLayout_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Layouts_MemoryLayout* layout;
};

struct PJRT_Layouts_MemoryLayout_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Layouts_MemoryLayout* layout;
  const char* serialized_bytes;                                              // out
  size_t serialized_bytes_size;                                              // out
  PJRT_Layouts_SerializedLayout* serialized_layout;                          // out
  void (*serialized_layout_deleter)(PJRT_Layouts_SerializedLayout* layout);  // out
};

struct PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Layouts_MemoryLayout* layout;  // out, caller destroys
};

struct PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Layouts_MemoryLayout* layout;  // out, caller destroys
};

struct PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology_description;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Layouts_MemoryLayout* layout;  // out, caller destroys
};

// The layouts are owned by the executable (jaxlib never destroys them).
struct PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;                   // out
  PJRT_Layouts_MemoryLayout** layouts;  // out
};

struct PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_parameters;                // out
  PJRT_Layouts_MemoryLayout** layouts;  // out
};

#define WORKSHOP_LAYOUTS_FN(name) typedef PJRT_Error* name(name##_Args* args);
WORKSHOP_LAYOUTS_FN(PJRT_Layouts_MemoryLayout_Destroy)
WORKSHOP_LAYOUTS_FN(PJRT_Layouts_MemoryLayout_Serialize)
WORKSHOP_LAYOUTS_FN(PJRT_Layouts_PJRT_Client_GetDefaultLayout)
WORKSHOP_LAYOUTS_FN(PJRT_Layouts_PJRT_Buffer_MemoryLayout)
WORKSHOP_LAYOUTS_FN(PJRT_Layouts_PJRT_Topology_GetDefaultLayout)
WORKSHOP_LAYOUTS_FN(PJRT_Layouts_PJRT_Executable_GetOutputLayouts)
WORKSHOP_LAYOUTS_FN(PJRT_Layouts_PJRT_Executable_GetParameterLayouts)
#undef WORKSHOP_LAYOUTS_FN

typedef struct PJRT_Layouts_Extension {
  PJRT_Extension_Base base;
  PJRT_Layouts_MemoryLayout_Destroy* PJRT_Layouts_MemoryLayout_Destroy;
  PJRT_Layouts_MemoryLayout_Serialize* PJRT_Layouts_MemoryLayout_Serialize;
  PJRT_Layouts_PJRT_Client_GetDefaultLayout* PJRT_Layouts_PJRT_Client_GetDefaultLayout;
  PJRT_Layouts_PJRT_Buffer_MemoryLayout* PJRT_Layouts_PJRT_Buffer_MemoryLayout;
  PJRT_Layouts_PJRT_Topology_GetDefaultLayout* PJRT_Layouts_PJRT_Topology_GetDefaultLayout;
  PJRT_Layouts_PJRT_Executable_GetOutputLayouts* PJRT_Layouts_PJRT_Executable_GetOutputLayouts;
  PJRT_Layouts_PJRT_Executable_GetParameterLayouts*
      PJRT_Layouts_PJRT_Executable_GetParameterLayouts;
} PJRT_Layouts_Extension;

// ----------------------------- Memory descriptions -----------------------------
// The memories a device (description) has, without a client: what ahead-of-time
// compilation against a topology can place data in.

typedef struct PJRT_MemoryDescription PJRT_MemoryDescription;

struct PJRT_DeviceDescription_MemoryDescriptions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const PJRT_MemoryDescription* const* memory_descriptions;  // out
  size_t num_memory_descriptions;                            // out
  size_t default_memory_index;  // out; (size_t)-1 if there is no default
};

struct PJRT_MemoryDescription_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_MemoryDescription* memory_description;
  const char* kind;  // out, lives as long as the description
  size_t kind_size;  // out
  int kind_id;       // out
};

typedef PJRT_Error* PJRT_DeviceDescription_MemoryDescriptions(
    PJRT_DeviceDescription_MemoryDescriptions_Args* args);
typedef PJRT_Error* PJRT_MemoryDescription_Kind(PJRT_MemoryDescription_Kind_Args* args);

typedef struct PJRT_MemoryDescriptions_Extension {
  PJRT_Extension_Base base;
  PJRT_DeviceDescription_MemoryDescriptions* PJRT_DeviceDescription_MemoryDescriptions;
  PJRT_MemoryDescription_Kind* PJRT_MemoryDescription_Kind;
} PJRT_MemoryDescriptions_Extension;

// The struct sizes a caller fills in (offset of the last field plus its size, as the
// header's PJRT_DEFINE_STRUCT_TRAITS computes them), for the checked entry.
#define WORKSHOP_EXT_SIZE(type, last) \
  constexpr size_t type##_STRUCT_SIZE = PJRT_STRUCT_SIZE(type, last);
WORKSHOP_EXT_SIZE(PJRT_Layouts_MemoryLayout_Destroy_Args, layout)
WORKSHOP_EXT_SIZE(PJRT_Layouts_MemoryLayout_Serialize_Args, serialized_layout_deleter)
WORKSHOP_EXT_SIZE(PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args, layout)
WORKSHOP_EXT_SIZE(PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args, layout)
WORKSHOP_EXT_SIZE(PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args, layout)
WORKSHOP_EXT_SIZE(PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args, layouts)
WORKSHOP_EXT_SIZE(PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args, layouts)
WORKSHOP_EXT_SIZE(PJRT_DeviceDescription_MemoryDescriptions_Args, default_memory_index)
WORKSHOP_EXT_SIZE(PJRT_MemoryDescription_Kind_Args, kind_id)
#undef WORKSHOP_EXT_SIZE

}  // extern "C"
