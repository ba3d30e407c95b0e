// Buffer entry points: host <-> device transfers, queries, deletion, references.
#include <cstring>

#include "capi/api.h"
#include "capi/wrappers.h"

namespace workshop::capi {
namespace {

PJRT_Buffer* Wrap(PJRT_Client* client, std::shared_ptr<Buffer> buffer) {
  return new PJRT_Buffer{std::move(buffer), client};
}

// jaxlib passes a Tiled layout with descending minor_to_major (row-major) and no tiles;
// that, or no layout, is what we can write.
Status CheckRowMajor(const PJRT_Buffer_MemoryLayout* layout, size_t rank, const char* fn) {
  if (layout == nullptr) return Status();
  if (layout->type == PJRT_Buffer_MemoryLayout_Type_Tiled) {
    const PJRT_Buffer_MemoryLayout_Tiled& tiled = layout->tiled;
    bool row_major = tiled.num_tiles == 0 && tiled.minor_to_major_size == rank;
    for (size_t i = 0; row_major && i < rank; ++i) {
      row_major = tiled.minor_to_major[i] == static_cast<int64_t>(rank - 1 - i);
    }
    if (row_major) return Status();
  }
  return InvalidArgument(fn, ": only dense row-major host layouts are supported");
}

// The memory a transfer targets: `memory` if given (jaxlib always passes it, with
// device = NULL), else the device's default memory.
Status TargetMemory(PJRT_Device* device, PJRT_Memory* memory, const char* fn,
                    Memory** out) {
  if (memory != nullptr) {
    *out = memory->memory;
  } else if (device != nullptr) {
    *out = device->device->memory();
  } else {
    return InvalidArgument(fn, ": neither a device nor a memory was given");
  }
  return Status();
}

}  // namespace

// Copies during the call whatever the host_buffer_semantics, which satisfies all four
// modes, so done_with_host_buffer is ready on return.
PJRT_Error* Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args* args) {
  WORKSHOP_CHECK_ARGS(PJRT_Client_BufferFromHostBuffer);
  Memory* memory = nullptr;
  WORKSHOP_RETURN_IF_PJRT_ERROR(TargetMemory(args->device, args->memory,
                                             "PJRT_Client_BufferFromHostBuffer", &memory));
  WORKSHOP_RETURN_IF_PJRT_ERROR(CheckRowMajor(args->device_layout, args->num_dims,
                                              "PJRT_Client_BufferFromHostBuffer"));
  HostArray host{args->data, static_cast<DType>(args->type),
                 Dims(args->dims, args->dims + args->num_dims), {}};
  if (args->byte_strides != nullptr && args->num_byte_strides > 0) {
    if (args->num_byte_strides != args->num_dims) {
      return ToPjrt(InvalidArgument("PJRT_Client_BufferFromHostBuffer: ",
                                    args->num_byte_strides, " byte strides for ",
                                    args->num_dims, " dimensions"));
    }
    host.byte_strides.assign(args->byte_strides, args->byte_strides + args->num_byte_strides);
  }
  std::shared_ptr<Buffer> buffer;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->client->client->BufferFromHost(host, memory, &buffer));
  args->buffer = Wrap(args->client, std::move(buffer));
  args->done_with_host_buffer = new PJRT_Event{Event::Ready()};
  return nullptr;
}

PJRT_Error* Client_CreateUninitializedBuffer(PJRT_Client_CreateUninitializedBuffer_Args* args) {
  WORKSHOP_CHECK_ARGS(PJRT_Client_CreateUninitializedBuffer);
  Memory* memory = nullptr;
  WORKSHOP_RETURN_IF_PJRT_ERROR(TargetMemory(args->device, args->memory,
                                             "PJRT_Client_CreateUninitializedBuffer", &memory));
  const DType dtype = static_cast<DType>(args->shape_element_type);
  if (!IsSupported(dtype)) {
    return ToPjrt(Unimplemented("PJRT_Client_CreateUninitializedBuffer: element type ",
                                DTypeName(dtype), " is not supported"));
  }
  Dims dims(args->shape_dims, args->shape_dims + args->shape_num_dims);
  auto buffer = std::make_shared<Buffer>(dtype, dims, memory, Event::Ready());
  std::shared_ptr<Storage> storage = Storage::Allocate(buffer->byte_size());
  if (storage == nullptr) {
    return ToPjrt(ResourceExhausted("PJRT_Client_CreateUninitializedBuffer: out of memory"));
  }
  buffer->SetStorage(std::move(storage));
  args->buffer = Wrap(args->client, std::move(buffer));
  return nullptr;
}

PJRT_Error* Buffer_Destroy(PJRT_Buffer_Destroy_Args* args) {
  delete args->buffer;
  return nullptr;
}

PJRT_Error* Buffer_ElementType(PJRT_Buffer_ElementType_Args* args) {
  args->type = static_cast<PJRT_Buffer_Type>(args->buffer->buffer->dtype());
  return nullptr;
}

PJRT_Error* Buffer_Dimensions(PJRT_Buffer_Dimensions_Args* args) {
  args->dims = args->buffer->buffer->dims().data();
  args->num_dims = args->buffer->buffer->dims().size();
  return nullptr;
}

// No padding: the unpadded dimensions are the dimensions.
PJRT_Error* Buffer_UnpaddedDimensions(PJRT_Buffer_UnpaddedDimensions_Args* args) {
  args->unpadded_dims = args->buffer->buffer->dims().data();
  args->num_dims = args->buffer->buffer->dims().size();
  return nullptr;
}

// All shapes are static.
PJRT_Error* Buffer_DynamicDimensionIndices(PJRT_Buffer_DynamicDimensionIndices_Args* args) {
  args->dynamic_dim_indices = nullptr;
  args->num_dynamic_dims = 0;
  return nullptr;
}

PJRT_Error* Buffer_OnDeviceSizeInBytes(PJRT_Buffer_OnDeviceSizeInBytes_Args* args) {
  args->on_device_size_in_bytes = args->buffer->buffer->byte_size();
  return nullptr;
}

PJRT_Error* Buffer_Device(PJRT_Buffer_Device_Args* args) {
  args->device = args->buffer->client->Wrap(args->buffer->buffer->device());
  return nullptr;
}

PJRT_Error* Buffer_Memory(PJRT_Buffer_Memory_Args* args) {
  args->memory = args->buffer->client->Wrap(args->buffer->buffer->memory());
  return nullptr;
}

PJRT_Error* Buffer_Delete(PJRT_Buffer_Delete_Args* args) {
  args->buffer->buffer->Delete();
  return nullptr;
}

PJRT_Error* Buffer_IsDeleted(PJRT_Buffer_IsDeleted_Args* args) {
  args->is_deleted = args->buffer->buffer->IsDeleted();
  return nullptr;
}

PJRT_Error* Buffer_CopyToDevice(PJRT_Buffer_CopyToDevice_Args* args) {
  std::shared_ptr<Buffer> copy;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->buffer->client->client->CopyToMemory(
      args->buffer->buffer, args->dst_device->device->memory(), &copy));
  args->dst_buffer = Wrap(args->buffer->client, std::move(copy));
  return nullptr;
}

PJRT_Error* Buffer_CopyToMemory(PJRT_Buffer_CopyToMemory_Args* args) {
  std::shared_ptr<Buffer> copy;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->buffer->client->client->CopyToMemory(
      args->buffer->buffer, args->dst_memory->memory, &copy));
  args->dst_buffer = Wrap(args->buffer->client, std::move(copy));
  return nullptr;
}

// With dst == NULL, a size query. Otherwise copies once the buffer is ready (now, or on the
// worker that produces it) and completes the returned event.
PJRT_Error* Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args* args) {
  WORKSHOP_CHECK_ARGS(PJRT_Buffer_ToHostBuffer);
  const std::shared_ptr<Buffer>& buffer = args->src->buffer;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      CheckRowMajor(args->host_layout, buffer->dims().size(), "PJRT_Buffer_ToHostBuffer"));
  const size_t size = buffer->byte_size();
  if (args->dst == nullptr) {
    args->dst_size = size;
    return nullptr;
  }
  if (args->dst_size < size) {
    return ToPjrt(InvalidArgument("PJRT_Buffer_ToHostBuffer: dst_size ", args->dst_size,
                                  " is smaller than the buffer's ", size, " bytes"));
  }
  if (buffer->IsDeleted()) {
    return ToPjrt(InvalidArgument("PJRT_Buffer_ToHostBuffer: the buffer was deleted"));
  }
  EventRef done = Event::Create();
  buffer->ready()->OnReady([buffer, dst = args->dst, size, done](const Status& status) {
    if (!status.ok()) return done->Set(status);
    std::shared_ptr<Storage> storage = buffer->storage();
    if (storage == nullptr) {
      return done->Set(InvalidArgument("PJRT_Buffer_ToHostBuffer: the buffer was deleted"));
    }
    std::memcpy(dst, storage->data(), size);
    done->Set(Status());
  });
  args->event = new PJRT_Event{std::move(done)};
  return nullptr;
}

// The memory is host RAM, but reporting true sends jaxlib down its zero-copy path (external
// references plus OpaqueDeviceMemoryDataPointer as a host pointer), which ties numpy arrays
// to device storage. Copying through ToHostBuffer keeps ownership simple.
PJRT_Error* Buffer_IsOnCpu(PJRT_Buffer_IsOnCpu_Args* args) {
  args->is_on_cpu = false;
  return nullptr;
}

PJRT_Error* Buffer_ReadyEvent(PJRT_Buffer_ReadyEvent_Args* args) {
  args->event = new PJRT_Event{args->buffer->buffer->ready()};
  return nullptr;
}

PJRT_Error* Buffer_UnsafePointer(PJRT_Buffer_UnsafePointer_Args* args) {
  std::shared_ptr<Storage> storage = args->buffer->buffer->storage();
  if (storage == nullptr) {
    return ToPjrt(FailedPrecondition(
        "PJRT_Buffer_UnsafePointer: the buffer is deleted or not yet computed"));
  }
  args->buffer_pointer = reinterpret_cast<uintptr_t>(storage->data());
  return nullptr;
}

PJRT_Error* Buffer_IncreaseExternalReferenceCount(
    PJRT_Buffer_IncreaseExternalReferenceCount_Args* args) {
  args->buffer->buffer->IncreaseExternalReferences();
  return nullptr;
}

PJRT_Error* Buffer_DecreaseExternalReferenceCount(
    PJRT_Buffer_DecreaseExternalReferenceCount_Args* args) {
  return ToPjrt(args->buffer->buffer->DecreaseExternalReferences());
}

PJRT_Error* Buffer_OpaqueDeviceMemoryDataPointer(
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args* args) {
  std::shared_ptr<Storage> storage = args->buffer->buffer->storage();
  if (storage == nullptr) {
    return ToPjrt(FailedPrecondition(
        "PJRT_Buffer_OpaqueDeviceMemoryDataPointer: the buffer is deleted or not yet "
        "computed"));
  }
  args->device_memory_ptr = storage->data();
  return nullptr;
}

}  // namespace workshop::capi
