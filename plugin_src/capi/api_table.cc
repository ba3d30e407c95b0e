// The PJRT_Api table, its extensions and GetPjrtApi, the plugin's one exported entry point.
//
// Every field of the 0.81 table is set, in header order: an implementation from api_*.cc or
// a stub that returns UNIMPLEMENTED naming the function and saying why. jaxlib calls some
// functions without checking for NULL, and reads the table only up to the version we
// declare, so a NULL slot or an over-reported version would crash the process. Each slot
// goes through check::Entry (check.h): argument and handle checks, exceptions turned into
// errors, then trace::Traced (trace.h), which records the call when tracing is on.
#include "capi/api.h"
#include "capi/check.h"
#include "capi/wrappers.h"

namespace workshop::capi {
// Defined in profiler_extension.cc (jax.profiler device timelines).
PJRT_Extension_Base* ProfilerExtension();
}  // namespace workshop::capi

namespace workshop::capi {
namespace {

#define WORKSHOP_STUB(name, why)                                                     \
  PJRT_Error* Stub_##name(PJRT_##name##_Args*) {                                     \
    return ToPjrt(Unimplemented("PJRT_" #name " is not implemented by the workshop " \
                                "plugin: " why));                                    \
  }

// A recv callback (host -> device transfer inside a running program) hands the plugin a
// stream to feed. Programs with send/recv don't compile here (JAX lowers host callbacks only
// for cpu/gpu/tpu), so the plugin never creates a stream and none of these can be called
// on a valid one.
#define WORKSHOP_STREAM_WHY                                                               \
  "copy-to-device streams exist only inside recv callbacks, and programs with send/recv " \
  "don't compile on this plugin"
WORKSHOP_STUB(CopyToDeviceStream_Destroy, WORKSHOP_STREAM_WHY)
WORKSHOP_STUB(CopyToDeviceStream_AddChunk, WORKSHOP_STREAM_WHY)
WORKSHOP_STUB(CopyToDeviceStream_TotalBytes, WORKSHOP_STREAM_WHY)
WORKSHOP_STUB(CopyToDeviceStream_GranuleSize, WORKSHOP_STREAM_WHY)
WORKSHOP_STUB(CopyToDeviceStream_CurrentBytes, WORKSHOP_STREAM_WHY)
#undef WORKSHOP_STREAM_WHY
#undef WORKSHOP_STUB

#define WORKSHOP_SLOT(name) \
  .PJRT_##name = check::Entry<"PJRT_" #name, PJRT_##name##_Args_STRUCT_SIZE, &name>
#define WORKSHOP_STUB_SLOT(name) \
  .PJRT_##name = check::Entry<"PJRT_" #name, PJRT_##name##_Args_STRUCT_SIZE, &Stub_##name>

// Extensions, chained from PJRT_Api::extension_start (extensions.h).
PJRT_Layouts_Extension kLayouts = {
    .base = {.struct_size = sizeof(PJRT_Layouts_Extension),
             .type = PJRT_Extension_Type_Layouts,
             .next = ProfilerExtension()},
    WORKSHOP_SLOT(Layouts_MemoryLayout_Destroy),
    WORKSHOP_SLOT(Layouts_MemoryLayout_Serialize),
    WORKSHOP_SLOT(Layouts_PJRT_Client_GetDefaultLayout),
    WORKSHOP_SLOT(Layouts_PJRT_Buffer_MemoryLayout),
    WORKSHOP_SLOT(Layouts_PJRT_Topology_GetDefaultLayout),
    WORKSHOP_SLOT(Layouts_PJRT_Executable_GetOutputLayouts),
    WORKSHOP_SLOT(Layouts_PJRT_Executable_GetParameterLayouts),
};

PJRT_MemoryDescriptions_Extension kMemoryDescriptions = {
    .base = {.struct_size = sizeof(PJRT_MemoryDescriptions_Extension),
             .type = PJRT_Extension_Type_MemoryDescriptions,
             .next = &kLayouts.base},
    WORKSHOP_SLOT(DeviceDescription_MemoryDescriptions),
    WORKSHOP_SLOT(MemoryDescription_Kind),
};

const PJRT_Api kApi = {
    .struct_size = PJRT_Api_STRUCT_SIZE,
    .extension_start = &kMemoryDescriptions.base,
    .pjrt_api_version = {.struct_size = PJRT_Api_Version_STRUCT_SIZE,
                         .extension_start = nullptr,
                         .major_version = PJRT_API_MAJOR,
                         .minor_version = PJRT_API_MINOR},
    WORKSHOP_SLOT(Error_Destroy),
    WORKSHOP_SLOT(Error_Message),
    WORKSHOP_SLOT(Error_GetCode),
    WORKSHOP_SLOT(Plugin_Initialize),
    WORKSHOP_SLOT(Plugin_Attributes),
    WORKSHOP_SLOT(Event_Destroy),
    WORKSHOP_SLOT(Event_IsReady),
    WORKSHOP_SLOT(Event_Error),
    WORKSHOP_SLOT(Event_Await),
    WORKSHOP_SLOT(Event_OnReady),
    WORKSHOP_SLOT(Client_Create),
    WORKSHOP_SLOT(Client_Destroy),
    WORKSHOP_SLOT(Client_PlatformName),
    WORKSHOP_SLOT(Client_ProcessIndex),
    WORKSHOP_SLOT(Client_PlatformVersion),
    WORKSHOP_SLOT(Client_Devices),
    WORKSHOP_SLOT(Client_AddressableDevices),
    WORKSHOP_SLOT(Client_LookupDevice),
    WORKSHOP_SLOT(Client_LookupAddressableDevice),
    WORKSHOP_SLOT(Client_AddressableMemories),
    WORKSHOP_SLOT(Client_Compile),
    WORKSHOP_SLOT(Client_DefaultDeviceAssignment),
    WORKSHOP_SLOT(Client_BufferFromHostBuffer),
    WORKSHOP_SLOT(DeviceDescription_Id),
    WORKSHOP_SLOT(DeviceDescription_ProcessIndex),
    WORKSHOP_SLOT(DeviceDescription_Attributes),
    WORKSHOP_SLOT(DeviceDescription_Kind),
    WORKSHOP_SLOT(DeviceDescription_DebugString),
    WORKSHOP_SLOT(DeviceDescription_ToString),
    WORKSHOP_SLOT(Device_GetDescription),
    WORKSHOP_SLOT(Device_IsAddressable),
    WORKSHOP_SLOT(Device_LocalHardwareId),
    WORKSHOP_SLOT(Device_AddressableMemories),
    WORKSHOP_SLOT(Device_DefaultMemory),
    WORKSHOP_SLOT(Device_MemoryStats),
    WORKSHOP_SLOT(Memory_Id),
    WORKSHOP_SLOT(Memory_Kind),
    WORKSHOP_SLOT(Memory_DebugString),
    WORKSHOP_SLOT(Memory_ToString),
    WORKSHOP_SLOT(Memory_AddressableByDevices),
    WORKSHOP_SLOT(Executable_Destroy),
    WORKSHOP_SLOT(Executable_Name),
    WORKSHOP_SLOT(Executable_NumReplicas),
    WORKSHOP_SLOT(Executable_NumPartitions),
    WORKSHOP_SLOT(Executable_NumOutputs),
    WORKSHOP_SLOT(Executable_SizeOfGeneratedCodeInBytes),
    WORKSHOP_SLOT(Executable_GetCostAnalysis),
    WORKSHOP_SLOT(Executable_OutputMemoryKinds),
    WORKSHOP_SLOT(Executable_OptimizedProgram),
    WORKSHOP_SLOT(Executable_Serialize),
    WORKSHOP_SLOT(LoadedExecutable_Destroy),
    WORKSHOP_SLOT(LoadedExecutable_GetExecutable),
    WORKSHOP_SLOT(LoadedExecutable_AddressableDevices),
    WORKSHOP_SLOT(LoadedExecutable_Delete),
    WORKSHOP_SLOT(LoadedExecutable_IsDeleted),
    WORKSHOP_SLOT(LoadedExecutable_Execute),
    WORKSHOP_SLOT(Executable_DeserializeAndLoad),
    WORKSHOP_SLOT(LoadedExecutable_Fingerprint),
    WORKSHOP_SLOT(Buffer_Destroy),
    WORKSHOP_SLOT(Buffer_ElementType),
    WORKSHOP_SLOT(Buffer_Dimensions),
    WORKSHOP_SLOT(Buffer_UnpaddedDimensions),
    WORKSHOP_SLOT(Buffer_DynamicDimensionIndices),
    WORKSHOP_SLOT(Buffer_GetMemoryLayout),
    WORKSHOP_SLOT(Buffer_OnDeviceSizeInBytes),
    WORKSHOP_SLOT(Buffer_Device),
    WORKSHOP_SLOT(Buffer_Memory),
    WORKSHOP_SLOT(Buffer_Delete),
    WORKSHOP_SLOT(Buffer_IsDeleted),
    WORKSHOP_SLOT(Buffer_CopyToDevice),
    WORKSHOP_SLOT(Buffer_ToHostBuffer),
    WORKSHOP_SLOT(Buffer_IsOnCpu),
    WORKSHOP_SLOT(Buffer_ReadyEvent),
    WORKSHOP_SLOT(Buffer_UnsafePointer),
    WORKSHOP_SLOT(Buffer_IncreaseExternalReferenceCount),
    WORKSHOP_SLOT(Buffer_DecreaseExternalReferenceCount),
    WORKSHOP_SLOT(Buffer_OpaqueDeviceMemoryDataPointer),
    WORKSHOP_STUB_SLOT(CopyToDeviceStream_Destroy),
    WORKSHOP_STUB_SLOT(CopyToDeviceStream_AddChunk),
    WORKSHOP_STUB_SLOT(CopyToDeviceStream_TotalBytes),
    WORKSHOP_STUB_SLOT(CopyToDeviceStream_GranuleSize),
    WORKSHOP_STUB_SLOT(CopyToDeviceStream_CurrentBytes),
    WORKSHOP_SLOT(TopologyDescription_Create),
    WORKSHOP_SLOT(TopologyDescription_Destroy),
    WORKSHOP_SLOT(TopologyDescription_PlatformName),
    WORKSHOP_SLOT(TopologyDescription_PlatformVersion),
    WORKSHOP_SLOT(TopologyDescription_GetDeviceDescriptions),
    WORKSHOP_SLOT(TopologyDescription_Serialize),
    WORKSHOP_SLOT(TopologyDescription_Attributes),
    WORKSHOP_SLOT(Compile),
    WORKSHOP_SLOT(Executable_OutputElementTypes),
    WORKSHOP_SLOT(Executable_OutputDimensions),
    WORKSHOP_SLOT(Buffer_CopyToMemory),
    WORKSHOP_SLOT(Client_CreateViewOfDeviceBuffer),
    WORKSHOP_SLOT(Executable_Fingerprint),
    WORKSHOP_SLOT(Client_TopologyDescription),
    WORKSHOP_SLOT(Executable_GetCompiledMemoryStats),
    WORKSHOP_SLOT(Memory_Kind_Id),
    WORKSHOP_SLOT(ExecuteContext_Create),
    WORKSHOP_SLOT(ExecuteContext_Destroy),
    WORKSHOP_SLOT(Buffer_CopyRawToHost),
    WORKSHOP_SLOT(AsyncHostToDeviceTransferManager_Destroy),
    WORKSHOP_SLOT(AsyncHostToDeviceTransferManager_TransferData),
    WORKSHOP_SLOT(Client_CreateBuffersForAsyncHostToDevice),
    WORKSHOP_SLOT(AsyncHostToDeviceTransferManager_RetrieveBuffer),
    WORKSHOP_SLOT(AsyncHostToDeviceTransferManager_Device),
    WORKSHOP_SLOT(AsyncHostToDeviceTransferManager_BufferCount),
    WORKSHOP_SLOT(AsyncHostToDeviceTransferManager_BufferSize),
    WORKSHOP_SLOT(AsyncHostToDeviceTransferManager_SetBufferError),
    WORKSHOP_SLOT(AsyncHostToDeviceTransferManager_AddMetadata),
    WORKSHOP_SLOT(Client_DmaMap),
    WORKSHOP_SLOT(Client_DmaUnmap),
    WORKSHOP_SLOT(Client_CreateUninitializedBuffer),
    WORKSHOP_SLOT(Client_UpdateGlobalProcessInfo),
    WORKSHOP_SLOT(TopologyDescription_Deserialize),
    WORKSHOP_SLOT(Client_CreateAliasBuffer),
    WORKSHOP_SLOT(Client_FulfillAliasBuffer),
    WORKSHOP_SLOT(LoadedExecutable_GetDeviceAssignment),
};

#undef WORKSHOP_SLOT
#undef WORKSHOP_STUB_SLOT

}  // namespace
}  // namespace workshop::capi

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  return &workshop::capi::kApi;
}
