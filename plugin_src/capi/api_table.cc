// The PJRT_Api table and GetPjrtApi, the plugin's one exported symbol.
//
// Every field of the 0.81 table is set, in header order: an implementation from api_*.cc or
// a stub that returns UNIMPLEMENTED naming the function and saying why. jaxlib calls some
// functions without checking for NULL, and reads the table only up to the version we
// declare, so a NULL slot or an over-reported version would crash the process.
#include "capi/api.h"
#include "capi/wrappers.h"

namespace workshop::capi {
namespace {

#define WORKSHOP_STUB(name, why)                                                  \
  PJRT_Error* Stub_##name(PJRT_##name##_Args*) {                                \
    return ToPjrt(Unimplemented("PJRT_" #name " is not implemented by the workshop " \
                                "plugin: " why));                                 \
  }

WORKSHOP_STUB(Device_MemoryStats,
              "memory statistics are not tracked yet")
WORKSHOP_STUB(Executable_SizeOfGeneratedCodeInBytes,
              "the plugin generates no code; plans are interpreted")
WORKSHOP_STUB(Executable_GetCostAnalysis,
              "cost analysis is not implemented yet")
WORKSHOP_STUB(Executable_OptimizedProgram,
              "the optimized program (HLO) is not produced yet")
WORKSHOP_STUB(Executable_Serialize,
              "executable serialization is not implemented yet")
WORKSHOP_STUB(LoadedExecutable_Delete,
              "not implemented yet; destroy the executable instead")
WORKSHOP_STUB(LoadedExecutable_IsDeleted,
              "not implemented yet; destroy the executable instead")
WORKSHOP_STUB(Executable_DeserializeAndLoad,
              "executable serialization is not implemented yet")
WORKSHOP_STUB(LoadedExecutable_Fingerprint,
              "deprecated; use PJRT_Executable_Fingerprint")
WORKSHOP_STUB(Buffer_GetMemoryLayout,
              "deprecated since API 0.54; layouts are row-major")
WORKSHOP_STUB(CopyToDeviceStream_Destroy,
              "cross-host send/recv streams do not exist in a single-process CPU plugin")
WORKSHOP_STUB(CopyToDeviceStream_AddChunk,
              "cross-host send/recv streams do not exist in a single-process CPU plugin")
WORKSHOP_STUB(CopyToDeviceStream_TotalBytes,
              "cross-host send/recv streams do not exist in a single-process CPU plugin")
WORKSHOP_STUB(CopyToDeviceStream_GranuleSize,
              "cross-host send/recv streams do not exist in a single-process CPU plugin")
WORKSHOP_STUB(CopyToDeviceStream_CurrentBytes,
              "cross-host send/recv streams do not exist in a single-process CPU plugin")
WORKSHOP_STUB(TopologyDescription_Create,
              "topology descriptions (ahead-of-time compilation) are not implemented yet")
WORKSHOP_STUB(TopologyDescription_Destroy,
              "topology descriptions (ahead-of-time compilation) are not implemented yet")
WORKSHOP_STUB(TopologyDescription_PlatformName,
              "topology descriptions (ahead-of-time compilation) are not implemented yet")
WORKSHOP_STUB(TopologyDescription_PlatformVersion,
              "topology descriptions (ahead-of-time compilation) are not implemented yet")
WORKSHOP_STUB(TopologyDescription_GetDeviceDescriptions,
              "topology descriptions (ahead-of-time compilation) are not implemented yet")
WORKSHOP_STUB(TopologyDescription_Serialize,
              "topology descriptions (ahead-of-time compilation) are not implemented yet")
WORKSHOP_STUB(TopologyDescription_Attributes,
              "topology descriptions (ahead-of-time compilation) are not implemented yet")
WORKSHOP_STUB(Compile,
              "ahead-of-time compilation against a topology is not implemented yet")
WORKSHOP_STUB(Client_CreateViewOfDeviceBuffer,
              "views of foreign device memory are not implemented yet")
WORKSHOP_STUB(Client_TopologyDescription,
              "topology descriptions (ahead-of-time compilation) are not implemented yet")
WORKSHOP_STUB(Executable_GetCompiledMemoryStats,
              "compiled memory statistics are not implemented yet")
WORKSHOP_STUB(ExecuteContext_Create,
              "execute contexts belong to the FFI extension, which is not advertised")
WORKSHOP_STUB(ExecuteContext_Destroy,
              "execute contexts belong to the FFI extension, which is not advertised")
WORKSHOP_STUB(Buffer_CopyRawToHost,
              "raw (offset) host copies are not implemented yet")
WORKSHOP_STUB(AsyncHostToDeviceTransferManager_Destroy,
              "the async host-to-device transfer manager is not implemented yet; jaxlib uses BufferFromHostBuffer")
WORKSHOP_STUB(AsyncHostToDeviceTransferManager_TransferData,
              "the async host-to-device transfer manager is not implemented yet; jaxlib uses BufferFromHostBuffer")
WORKSHOP_STUB(Client_CreateBuffersForAsyncHostToDevice,
              "the async host-to-device transfer manager is not implemented yet; jaxlib uses BufferFromHostBuffer")
WORKSHOP_STUB(AsyncHostToDeviceTransferManager_RetrieveBuffer,
              "the async host-to-device transfer manager is not implemented yet; jaxlib uses BufferFromHostBuffer")
WORKSHOP_STUB(AsyncHostToDeviceTransferManager_Device,
              "the async host-to-device transfer manager is not implemented yet; jaxlib uses BufferFromHostBuffer")
WORKSHOP_STUB(AsyncHostToDeviceTransferManager_BufferCount,
              "the async host-to-device transfer manager is not implemented yet; jaxlib uses BufferFromHostBuffer")
WORKSHOP_STUB(AsyncHostToDeviceTransferManager_BufferSize,
              "the async host-to-device transfer manager is not implemented yet; jaxlib uses BufferFromHostBuffer")
WORKSHOP_STUB(AsyncHostToDeviceTransferManager_SetBufferError,
              "the async host-to-device transfer manager is not implemented yet; jaxlib uses BufferFromHostBuffer")
WORKSHOP_STUB(AsyncHostToDeviceTransferManager_AddMetadata,
              "the async host-to-device transfer manager is not implemented yet; jaxlib uses BufferFromHostBuffer")
WORKSHOP_STUB(Client_DmaMap,
              "device memory is host memory, there is nothing to DMA-map")
WORKSHOP_STUB(Client_DmaUnmap,
              "device memory is host memory, there is nothing to DMA-map")
WORKSHOP_STUB(Client_UpdateGlobalProcessInfo,
              "this plugin is single-process")
WORKSHOP_STUB(TopologyDescription_Deserialize,
              "topology descriptions (ahead-of-time compilation) are not implemented yet")
WORKSHOP_STUB(Client_CreateAliasBuffer,
              "alias buffers are not implemented yet")
WORKSHOP_STUB(Client_FulfillAliasBuffer,
              "alias buffers are not implemented yet")
#undef WORKSHOP_STUB

const PJRT_Api kApi = {
    .struct_size = PJRT_Api_STRUCT_SIZE,
    .extension_start = nullptr,
    .pjrt_api_version = {.struct_size = PJRT_Api_Version_STRUCT_SIZE,
                         .extension_start = nullptr,
                         .major_version = PJRT_API_MAJOR,
                         .minor_version = PJRT_API_MINOR},
    .PJRT_Error_Destroy = Error_Destroy,
    .PJRT_Error_Message = Error_Message,
    .PJRT_Error_GetCode = Error_GetCode,
    .PJRT_Plugin_Initialize = Plugin_Initialize,
    .PJRT_Plugin_Attributes = Plugin_Attributes,
    .PJRT_Event_Destroy = Event_Destroy,
    .PJRT_Event_IsReady = Event_IsReady,
    .PJRT_Event_Error = Event_Error,
    .PJRT_Event_Await = Event_Await,
    .PJRT_Event_OnReady = Event_OnReady,
    .PJRT_Client_Create = Client_Create,
    .PJRT_Client_Destroy = Client_Destroy,
    .PJRT_Client_PlatformName = Client_PlatformName,
    .PJRT_Client_ProcessIndex = Client_ProcessIndex,
    .PJRT_Client_PlatformVersion = Client_PlatformVersion,
    .PJRT_Client_Devices = Client_Devices,
    .PJRT_Client_AddressableDevices = Client_AddressableDevices,
    .PJRT_Client_LookupDevice = Client_LookupDevice,
    .PJRT_Client_LookupAddressableDevice = Client_LookupAddressableDevice,
    .PJRT_Client_AddressableMemories = Client_AddressableMemories,
    .PJRT_Client_Compile = Client_Compile,
    .PJRT_Client_DefaultDeviceAssignment = Client_DefaultDeviceAssignment,
    .PJRT_Client_BufferFromHostBuffer = Client_BufferFromHostBuffer,
    .PJRT_DeviceDescription_Id = DeviceDescription_Id,
    .PJRT_DeviceDescription_ProcessIndex = DeviceDescription_ProcessIndex,
    .PJRT_DeviceDescription_Attributes = DeviceDescription_Attributes,
    .PJRT_DeviceDescription_Kind = DeviceDescription_Kind,
    .PJRT_DeviceDescription_DebugString = DeviceDescription_DebugString,
    .PJRT_DeviceDescription_ToString = DeviceDescription_ToString,
    .PJRT_Device_GetDescription = Device_GetDescription,
    .PJRT_Device_IsAddressable = Device_IsAddressable,
    .PJRT_Device_LocalHardwareId = Device_LocalHardwareId,
    .PJRT_Device_AddressableMemories = Device_AddressableMemories,
    .PJRT_Device_DefaultMemory = Device_DefaultMemory,
    .PJRT_Device_MemoryStats = Stub_Device_MemoryStats,
    .PJRT_Memory_Id = Memory_Id,
    .PJRT_Memory_Kind = Memory_Kind,
    .PJRT_Memory_DebugString = Memory_DebugString,
    .PJRT_Memory_ToString = Memory_ToString,
    .PJRT_Memory_AddressableByDevices = Memory_AddressableByDevices,
    .PJRT_Executable_Destroy = Executable_Destroy,
    .PJRT_Executable_Name = Executable_Name,
    .PJRT_Executable_NumReplicas = Executable_NumReplicas,
    .PJRT_Executable_NumPartitions = Executable_NumPartitions,
    .PJRT_Executable_NumOutputs = Executable_NumOutputs,
    .PJRT_Executable_SizeOfGeneratedCodeInBytes = Stub_Executable_SizeOfGeneratedCodeInBytes,
    .PJRT_Executable_GetCostAnalysis = Stub_Executable_GetCostAnalysis,
    .PJRT_Executable_OutputMemoryKinds = Executable_OutputMemoryKinds,
    .PJRT_Executable_OptimizedProgram = Stub_Executable_OptimizedProgram,
    .PJRT_Executable_Serialize = Stub_Executable_Serialize,
    .PJRT_LoadedExecutable_Destroy = LoadedExecutable_Destroy,
    .PJRT_LoadedExecutable_GetExecutable = LoadedExecutable_GetExecutable,
    .PJRT_LoadedExecutable_AddressableDevices = LoadedExecutable_AddressableDevices,
    .PJRT_LoadedExecutable_Delete = Stub_LoadedExecutable_Delete,
    .PJRT_LoadedExecutable_IsDeleted = Stub_LoadedExecutable_IsDeleted,
    .PJRT_LoadedExecutable_Execute = LoadedExecutable_Execute,
    .PJRT_Executable_DeserializeAndLoad = Stub_Executable_DeserializeAndLoad,
    .PJRT_LoadedExecutable_Fingerprint = Stub_LoadedExecutable_Fingerprint,
    .PJRT_Buffer_Destroy = Buffer_Destroy,
    .PJRT_Buffer_ElementType = Buffer_ElementType,
    .PJRT_Buffer_Dimensions = Buffer_Dimensions,
    .PJRT_Buffer_UnpaddedDimensions = Buffer_UnpaddedDimensions,
    .PJRT_Buffer_DynamicDimensionIndices = Buffer_DynamicDimensionIndices,
    .PJRT_Buffer_GetMemoryLayout = Stub_Buffer_GetMemoryLayout,
    .PJRT_Buffer_OnDeviceSizeInBytes = Buffer_OnDeviceSizeInBytes,
    .PJRT_Buffer_Device = Buffer_Device,
    .PJRT_Buffer_Memory = Buffer_Memory,
    .PJRT_Buffer_Delete = Buffer_Delete,
    .PJRT_Buffer_IsDeleted = Buffer_IsDeleted,
    .PJRT_Buffer_CopyToDevice = Buffer_CopyToDevice,
    .PJRT_Buffer_ToHostBuffer = Buffer_ToHostBuffer,
    .PJRT_Buffer_IsOnCpu = Buffer_IsOnCpu,
    .PJRT_Buffer_ReadyEvent = Buffer_ReadyEvent,
    .PJRT_Buffer_UnsafePointer = Buffer_UnsafePointer,
    .PJRT_Buffer_IncreaseExternalReferenceCount = Buffer_IncreaseExternalReferenceCount,
    .PJRT_Buffer_DecreaseExternalReferenceCount = Buffer_DecreaseExternalReferenceCount,
    .PJRT_Buffer_OpaqueDeviceMemoryDataPointer = Buffer_OpaqueDeviceMemoryDataPointer,
    .PJRT_CopyToDeviceStream_Destroy = Stub_CopyToDeviceStream_Destroy,
    .PJRT_CopyToDeviceStream_AddChunk = Stub_CopyToDeviceStream_AddChunk,
    .PJRT_CopyToDeviceStream_TotalBytes = Stub_CopyToDeviceStream_TotalBytes,
    .PJRT_CopyToDeviceStream_GranuleSize = Stub_CopyToDeviceStream_GranuleSize,
    .PJRT_CopyToDeviceStream_CurrentBytes = Stub_CopyToDeviceStream_CurrentBytes,
    .PJRT_TopologyDescription_Create = Stub_TopologyDescription_Create,
    .PJRT_TopologyDescription_Destroy = Stub_TopologyDescription_Destroy,
    .PJRT_TopologyDescription_PlatformName = Stub_TopologyDescription_PlatformName,
    .PJRT_TopologyDescription_PlatformVersion = Stub_TopologyDescription_PlatformVersion,
    .PJRT_TopologyDescription_GetDeviceDescriptions = Stub_TopologyDescription_GetDeviceDescriptions,
    .PJRT_TopologyDescription_Serialize = Stub_TopologyDescription_Serialize,
    .PJRT_TopologyDescription_Attributes = Stub_TopologyDescription_Attributes,
    .PJRT_Compile = Stub_Compile,
    .PJRT_Executable_OutputElementTypes = Executable_OutputElementTypes,
    .PJRT_Executable_OutputDimensions = Executable_OutputDimensions,
    .PJRT_Buffer_CopyToMemory = Buffer_CopyToMemory,
    .PJRT_Client_CreateViewOfDeviceBuffer = Stub_Client_CreateViewOfDeviceBuffer,
    .PJRT_Executable_Fingerprint = Executable_Fingerprint,
    .PJRT_Client_TopologyDescription = Stub_Client_TopologyDescription,
    .PJRT_Executable_GetCompiledMemoryStats = Stub_Executable_GetCompiledMemoryStats,
    .PJRT_Memory_Kind_Id = Memory_Kind_Id,
    .PJRT_ExecuteContext_Create = Stub_ExecuteContext_Create,
    .PJRT_ExecuteContext_Destroy = Stub_ExecuteContext_Destroy,
    .PJRT_Buffer_CopyRawToHost = Stub_Buffer_CopyRawToHost,
    .PJRT_AsyncHostToDeviceTransferManager_Destroy = Stub_AsyncHostToDeviceTransferManager_Destroy,
    .PJRT_AsyncHostToDeviceTransferManager_TransferData = Stub_AsyncHostToDeviceTransferManager_TransferData,
    .PJRT_Client_CreateBuffersForAsyncHostToDevice = Stub_Client_CreateBuffersForAsyncHostToDevice,
    .PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer = Stub_AsyncHostToDeviceTransferManager_RetrieveBuffer,
    .PJRT_AsyncHostToDeviceTransferManager_Device = Stub_AsyncHostToDeviceTransferManager_Device,
    .PJRT_AsyncHostToDeviceTransferManager_BufferCount = Stub_AsyncHostToDeviceTransferManager_BufferCount,
    .PJRT_AsyncHostToDeviceTransferManager_BufferSize = Stub_AsyncHostToDeviceTransferManager_BufferSize,
    .PJRT_AsyncHostToDeviceTransferManager_SetBufferError = Stub_AsyncHostToDeviceTransferManager_SetBufferError,
    .PJRT_AsyncHostToDeviceTransferManager_AddMetadata = Stub_AsyncHostToDeviceTransferManager_AddMetadata,
    .PJRT_Client_DmaMap = Stub_Client_DmaMap,
    .PJRT_Client_DmaUnmap = Stub_Client_DmaUnmap,
    .PJRT_Client_CreateUninitializedBuffer = Client_CreateUninitializedBuffer,
    .PJRT_Client_UpdateGlobalProcessInfo = Stub_Client_UpdateGlobalProcessInfo,
    .PJRT_TopologyDescription_Deserialize = Stub_TopologyDescription_Deserialize,
    .PJRT_Client_CreateAliasBuffer = Stub_Client_CreateAliasBuffer,
    .PJRT_Client_FulfillAliasBuffer = Stub_Client_FulfillAliasBuffer,
    .PJRT_LoadedExecutable_GetDeviceAssignment = LoadedExecutable_GetDeviceAssignment,
};

}  // namespace
}  // namespace workshop::capi

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  return &workshop::capi::kApi;
}
