// Every PJRT C API function this plugin implements, by area. api_table.cc puts them (and a
// named UNIMPLEMENTED stub for each of the rest) into the PJRT_Api table.
#pragma once

#include "pjrt_c_api.h"

namespace workshop::capi {

#define WORKSHOP_DECLARE(name) PJRT_Error* name(PJRT_##name##_Args* args);

// api_core.cc: errors, events, plugin.
void Error_Destroy(PJRT_Error_Destroy_Args* args);
void Error_Message(PJRT_Error_Message_Args* args);
WORKSHOP_DECLARE(Error_GetCode)
WORKSHOP_DECLARE(Plugin_Initialize)
WORKSHOP_DECLARE(Plugin_Attributes)
WORKSHOP_DECLARE(Event_Destroy)
WORKSHOP_DECLARE(Event_IsReady)
WORKSHOP_DECLARE(Event_Error)
WORKSHOP_DECLARE(Event_Await)
WORKSHOP_DECLARE(Event_OnReady)

// api_client.cc: client, devices, memories.
WORKSHOP_DECLARE(Client_Create)
WORKSHOP_DECLARE(Client_Destroy)
WORKSHOP_DECLARE(Client_PlatformName)
WORKSHOP_DECLARE(Client_ProcessIndex)
WORKSHOP_DECLARE(Client_PlatformVersion)
WORKSHOP_DECLARE(Client_Devices)
WORKSHOP_DECLARE(Client_AddressableDevices)
WORKSHOP_DECLARE(Client_LookupDevice)
WORKSHOP_DECLARE(Client_LookupAddressableDevice)
WORKSHOP_DECLARE(Client_AddressableMemories)
WORKSHOP_DECLARE(Client_DefaultDeviceAssignment)
WORKSHOP_DECLARE(DeviceDescription_Id)
WORKSHOP_DECLARE(DeviceDescription_ProcessIndex)
WORKSHOP_DECLARE(DeviceDescription_Attributes)
WORKSHOP_DECLARE(DeviceDescription_Kind)
WORKSHOP_DECLARE(DeviceDescription_DebugString)
WORKSHOP_DECLARE(DeviceDescription_ToString)
WORKSHOP_DECLARE(Device_GetDescription)
WORKSHOP_DECLARE(Device_IsAddressable)
WORKSHOP_DECLARE(Device_LocalHardwareId)
WORKSHOP_DECLARE(Device_AddressableMemories)
WORKSHOP_DECLARE(Device_DefaultMemory)
WORKSHOP_DECLARE(Memory_Id)
WORKSHOP_DECLARE(Memory_Kind)
WORKSHOP_DECLARE(Memory_Kind_Id)
WORKSHOP_DECLARE(Memory_DebugString)
WORKSHOP_DECLARE(Memory_ToString)
WORKSHOP_DECLARE(Memory_AddressableByDevices)

// api_buffer.cc: buffers and transfers.
WORKSHOP_DECLARE(Client_BufferFromHostBuffer)
WORKSHOP_DECLARE(Client_CreateUninitializedBuffer)
WORKSHOP_DECLARE(Buffer_Destroy)
WORKSHOP_DECLARE(Buffer_ElementType)
WORKSHOP_DECLARE(Buffer_Dimensions)
WORKSHOP_DECLARE(Buffer_UnpaddedDimensions)
WORKSHOP_DECLARE(Buffer_DynamicDimensionIndices)
WORKSHOP_DECLARE(Buffer_OnDeviceSizeInBytes)
WORKSHOP_DECLARE(Buffer_Device)
WORKSHOP_DECLARE(Buffer_Memory)
WORKSHOP_DECLARE(Buffer_Delete)
WORKSHOP_DECLARE(Buffer_IsDeleted)
WORKSHOP_DECLARE(Buffer_CopyToDevice)
WORKSHOP_DECLARE(Buffer_CopyToMemory)
WORKSHOP_DECLARE(Buffer_ToHostBuffer)
WORKSHOP_DECLARE(Buffer_IsOnCpu)
WORKSHOP_DECLARE(Buffer_ReadyEvent)
WORKSHOP_DECLARE(Buffer_UnsafePointer)
WORKSHOP_DECLARE(Buffer_IncreaseExternalReferenceCount)
WORKSHOP_DECLARE(Buffer_DecreaseExternalReferenceCount)
WORKSHOP_DECLARE(Buffer_OpaqueDeviceMemoryDataPointer)

// api_executable.cc: compile and execute.
WORKSHOP_DECLARE(Client_Compile)
WORKSHOP_DECLARE(Executable_Destroy)
WORKSHOP_DECLARE(Executable_Name)
WORKSHOP_DECLARE(Executable_NumReplicas)
WORKSHOP_DECLARE(Executable_NumPartitions)
WORKSHOP_DECLARE(Executable_NumOutputs)
WORKSHOP_DECLARE(Executable_OutputElementTypes)
WORKSHOP_DECLARE(Executable_OutputDimensions)
WORKSHOP_DECLARE(Executable_OutputMemoryKinds)
WORKSHOP_DECLARE(Executable_Fingerprint)
WORKSHOP_DECLARE(LoadedExecutable_Destroy)
WORKSHOP_DECLARE(LoadedExecutable_GetExecutable)
WORKSHOP_DECLARE(LoadedExecutable_AddressableDevices)
WORKSHOP_DECLARE(LoadedExecutable_GetDeviceAssignment)
WORKSHOP_DECLARE(LoadedExecutable_Execute)

#undef WORKSHOP_DECLARE

}  // namespace workshop::capi
