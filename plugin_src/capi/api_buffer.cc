// Buffer entry points: host <-> device transfers, queries, deletion, references, views,
// alias buffers and the async host-to-device transfer manager.
#include <cstring>
#include <limits>

#include "capi/api.h"
#include "capi/wrappers.h"

namespace workshop::capi {
namespace {

PJRT_Buffer* Wrap(PJRT_Client* client, std::shared_ptr<Buffer> buffer) {
  return new PJRT_Buffer{std::move(buffer), client};
}

PJRT_Event* Wrap(EventRef event) { return new PJRT_Event{std::move(event)}; }

// A requested device layout: NULL (row-major) or tiled without tiles in any dimension
// order (a minor_to_major permutation, as xla::Layout; empty out: row-major). Strided
// device layouts are refused unless they are dense row-major, as XLA converts only tiled
// ones to an xla::Layout. Every entry that takes a caller's shape comes through here.
Status DeviceLayout(const PJRT_Buffer_MemoryLayout* layout, DType dtype, const Dims& dims,
                    const char* fn, MinorToMajor* minor_to_major) {
  minor_to_major->clear();
  // Before any size arithmetic on the caller's dims.
  int64_t bytes = 0;
  if (!CheckedByteSize(dtype, dims, &bytes)) {
    return InvalidArgument(fn, ": ", ShapeString(dtype, dims),
                           " has a negative dimension or "
                           "a size that overflows int64 (",
                           dims.size(), " dimensions)");
  }
  std::vector<int64_t> strides;
  WORKSHOP_RETURN_IF_ERROR(HostByteStrides(layout, dtype, dims, fn, &strides));
  if (strides.empty()) return Status();
  if (layout->type != PJRT_Buffer_MemoryLayout_Type_Tiled) {
    return InvalidArgument(fn,
                           ": a device layout given as byte strides must be dense "
                           "row-major; ",
                           ShapeString(dtype, dims),
                           " was asked for another "
                           "(give other layouts as tiled minor_to_major)");
  }
  // HostByteStrides checked it is a permutation of the dims, without tiles.
  minor_to_major->assign(layout->tiled.minor_to_major,
                         layout->tiled.minor_to_major + layout->tiled.minor_to_major_size);
  if (IsRowMajor(*minor_to_major)) minor_to_major->clear();
  return Status();
}

// For entries whose buffers are row-major only (alias buffers, async transfers).
Status CheckDeviceLayout(const PJRT_Buffer_MemoryLayout* layout, DType dtype, const Dims& dims,
                         const char* fn) {
  MinorToMajor minor_to_major;
  WORKSHOP_RETURN_IF_ERROR(DeviceLayout(layout, dtype, dims, fn, &minor_to_major));
  if (!minor_to_major.empty()) {
    return InvalidArgument(fn, ": these buffers are dense row-major; ", ShapeString(dtype, dims),
                           " was asked for layout ", LayoutString(minor_to_major, dims.size()));
  }
  return Status();
}

Dims DimsOf(const int64_t* dims, size_t num_dims) { return Dims(dims, dims + num_dims); }

}  // namespace

// Copies during the call whatever the host_buffer_semantics, which satisfies all four
// modes, so done_with_host_buffer is ready on return.
PJRT_Error* Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args* args) {
  constexpr const char* kFn = "PJRT_Client_BufferFromHostBuffer";
  Memory* memory = nullptr;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      TargetMemory(args->client, args->device, args->memory, kFn, &memory));
  HostArray host{
      args->data, static_cast<DType>(RawEnum(args->type)), DimsOf(args->dims, args->num_dims), {}};
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      DeviceLayout(args->device_layout, host.dtype, host.dims, kFn, &host.device_layout));
  if (args->byte_strides != nullptr && args->num_byte_strides > 0) {
    if (args->num_byte_strides != args->num_dims) {
      return ToPjrt(InvalidArgument(kFn, ": ", args->num_byte_strides, " byte strides for ",
                                    args->num_dims, " dimensions"));
    }
    host.byte_strides.assign(args->byte_strides, args->byte_strides + args->num_byte_strides);
  }
  // The bytes the copy reads from `data`: dense, or the span of the strides (any sign).
  int64_t lowest = 0, end = 0;
  if (host.byte_strides.empty()) {
    CheckedByteSize(host.dtype, host.dims, &end);  // Checked by CheckDeviceLayout.
  } else if (!CheckedStridedExtent(ByteWidth(host.dtype), host.dims, host.byte_strides, &lowest,
                                   &end)) {
    return ToPjrt(InvalidArgument(kFn, ": the byte strides of ", ShapeString(host.dtype, host.dims),
                                  " reach past 2^63 bytes"));
  }
  if (args->data == nullptr && end > lowest) {
    return ToPjrt(InvalidArgument(kFn, ": data is NULL but ", ShapeString(host.dtype, host.dims),
                                  " has ", end - lowest, " bytes to read"));
  }
  // Whether the caller's memory holds the span cannot be known, but a span that wraps
  // around the address space (a stride of -2^62 over 3 elements) holds nothing.
  const auto address = reinterpret_cast<uintptr_t>(args->data);
  const uint64_t below = lowest < 0 ? static_cast<uint64_t>(-(lowest + 1)) + 1 : 0;  // -lowest
  if (address < below ||
      std::numeric_limits<uintptr_t>::max() - address < static_cast<uint64_t>(end)) {
    return ToPjrt(InvalidArgument(kFn, ": the byte strides of ", ShapeString(host.dtype, host.dims),
                                  " reach from ", lowest, " to ", end,
                                  " bytes around data, outside the address space"));
  }
  std::shared_ptr<Buffer> buffer;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->client->client->BufferFromHost(host, memory, &buffer));
  args->buffer = Wrap(args->client, std::move(buffer));
  args->done_with_host_buffer = Wrap(Event::Ready());
  return nullptr;
}

PJRT_Error* Client_CreateUninitializedBuffer(PJRT_Client_CreateUninitializedBuffer_Args* args) {
  constexpr const char* kFn = "PJRT_Client_CreateUninitializedBuffer";
  Memory* memory = nullptr;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      TargetMemory(args->client, args->device, args->memory, kFn, &memory));
  const DType dtype = static_cast<DType>(RawEnum(args->shape_element_type));
  const Dims dims = DimsOf(args->shape_dims, args->shape_num_dims);
  MinorToMajor layout;
  WORKSHOP_RETURN_IF_PJRT_ERROR(DeviceLayout(args->shape_layout, dtype, dims, kFn, &layout));
  std::shared_ptr<Buffer> buffer;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      args->client->client->CreateUninitialized(dtype, dims, memory, &buffer, std::move(layout)));
  args->buffer = Wrap(args->client, std::move(buffer));
  return nullptr;
}

// Device memory is host memory, so any suitably aligned host pointer can back a buffer.
// `stream` (a GPU notion) must be 0: there is no work to wait for.
PJRT_Error* Client_CreateViewOfDeviceBuffer(PJRT_Client_CreateViewOfDeviceBuffer_Args* args) {
  constexpr const char* kFn = "PJRT_Client_CreateViewOfDeviceBuffer";
  if (args->stream != 0) {
    return ToPjrt(InvalidArgument(kFn, ": streams do not exist on this device; pass 0"));
  }
  Memory* memory = nullptr;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      TargetMemory(args->client, args->device, args->memory, kFn, &memory));
  const DType dtype = static_cast<DType>(RawEnum(args->element_type));
  const Dims dims = DimsOf(args->dims, args->num_dims);
  MinorToMajor layout;
  WORKSHOP_RETURN_IF_PJRT_ERROR(DeviceLayout(args->layout, dtype, dims, kFn, &layout));
  std::function<void()> on_delete;
  if (args->on_delete_callback != nullptr) {
    on_delete = [callback = args->on_delete_callback, data = args->device_buffer_ptr,
                 user_arg = args->on_delete_callback_arg] { callback(data, user_arg); };
  }
  std::shared_ptr<Buffer> buffer;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->client->client->CreateView(args->device_buffer_ptr, dtype,
                                                                 dims, memory, std::move(on_delete),
                                                                 &buffer, std::move(layout)));
  args->buffer = Wrap(args->client, std::move(buffer));
  return nullptr;
}

PJRT_Error* Client_CreateAliasBuffer(PJRT_Client_CreateAliasBuffer_Args* args) {
  constexpr const char* kFn = "PJRT_Client_CreateAliasBuffer";
  if (args->memory == nullptr) return ToPjrt(InvalidArgument(kFn, ": no memory was given"));
  WORKSHOP_RETURN_IF_PJRT_ERROR(SameClient(args->client, args->memory->memory->device(), kFn));
  const DType dtype = static_cast<DType>(RawEnum(args->shape_element_type));
  const Dims dims = DimsOf(args->shape_dims, args->shape_num_dims);
  WORKSHOP_RETURN_IF_PJRT_ERROR(CheckDeviceLayout(args->shape_layout, dtype, dims, kFn));
  std::shared_ptr<Buffer> alias;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      args->client->client->CreateAlias(dtype, dims, args->memory->memory, &alias));
  args->fulfill_alias_buffer_cb = new PJRT_FulfillAliasBufferCallback{alias};
  args->alias_buffer = Wrap(args->client, std::move(alias));
  return nullptr;
}

// Consumes the callback object whatever the outcome: each alias is fulfilled once. A
// refused call completes the alias with its error too: the callback is gone, so nothing
// else could, and whatever awaits the alias (a program queued on it) would wait forever.
PJRT_Error* Client_FulfillAliasBuffer(PJRT_Client_FulfillAliasBuffer_Args* args) {
  constexpr const char* kFn = "PJRT_Client_FulfillAliasBuffer";
  std::unique_ptr<PJRT_FulfillAliasBufferCallback> pending(args->fulfill_alias_buffer_cb);
  if (pending == nullptr) return ToPjrt(InvalidArgument(kFn, ": no callback was given"));
  if (args->status_code != PJRT_Error_Code_OK) {
    return ToPjrt(
        Client::FulfillAlias(pending->alias, nullptr,
                             Status(static_cast<Code>(args->status_code),
                                    std::string(args->error_message, args->error_message_size))));
  }
  Status status = SameClient(args->client, pending->alias->device(), kFn);
  if (status.ok() && args->buffer == nullptr) {
    status = InvalidArgument(kFn, ": OK status but no buffer");
  }
  if (status.ok()) status = SameClient(args->client, args->buffer->buffer->device(), kFn);
  if (status.ok()) status = Client::FulfillAlias(pending->alias, args->buffer->buffer, Status());
  if (!status.ok()) (void)Client::FulfillAlias(pending->alias, nullptr, status);
  return ToPjrt(std::move(status));
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

// Deprecated (jaxlib uses the Layouts extension), still answered: the buffer's layout.
PJRT_Error* Buffer_GetMemoryLayout(PJRT_Buffer_GetMemoryLayout_Args* args) {
  PJRT_Buffer* buffer = args->buffer;
  std::call_once(buffer->layout_once, [buffer] {
    const MinorToMajor& layout = buffer->buffer->layout();
    buffer->minor_to_major = layout.empty() ? RowMajor(buffer->buffer->dims().size()) : layout;
  });
  PJRT_Buffer_MemoryLayout& layout = args->layout;
  layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
  layout.extension_start = nullptr;
  layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  layout.tiled = PJRT_Buffer_MemoryLayout_Tiled{};
  layout.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
  layout.tiled.minor_to_major = buffer->minor_to_major.data();
  layout.tiled.minor_to_major_size = buffer->minor_to_major.size();
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
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      SameClient(args->buffer->client, args->dst_device->device, "PJRT_Buffer_CopyToDevice"));
  std::shared_ptr<Buffer> copy;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->buffer->client->client->CopyToMemory(
      args->buffer->buffer, args->dst_device->device->memory(), &copy));
  args->dst_buffer = Wrap(args->buffer->client, std::move(copy));
  return nullptr;
}

PJRT_Error* Buffer_CopyToMemory(PJRT_Buffer_CopyToMemory_Args* args) {
  WORKSHOP_RETURN_IF_PJRT_ERROR(SameClient(args->buffer->client, args->dst_memory->memory->device(),
                                           "PJRT_Buffer_CopyToMemory"));
  std::shared_ptr<Buffer> copy;
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->buffer->client->client->CopyToMemory(
      args->buffer->buffer, args->dst_memory->memory, &copy));
  args->dst_buffer = Wrap(args->buffer->client, std::move(copy));
  return nullptr;
}

// With dst == NULL, a size query: the bytes the host layout needs. Otherwise copies once
// the buffer is ready (now, or on the worker that produces it) and completes the event.
// host_layout may be NULL (row-major), tiled without tiles in any dimension order, or
// strided with non-negative strides.
PJRT_Error* Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args* args) {
  constexpr const char* kFn = "PJRT_Buffer_ToHostBuffer";
  const std::shared_ptr<Buffer>& buffer = args->src->buffer;
  std::vector<int64_t> strides;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      HostByteStrides(args->host_layout, buffer->dtype(), buffer->dims(), kFn, &strides));
  int64_t size = buffer->byte_size();
  if (!strides.empty()) {  // The extent of the strided array (HostByteStrides checked it).
    int64_t lowest = 0;
    CheckedStridedExtent(ByteWidth(buffer->dtype()), buffer->dims(), strides, &lowest, &size);
  }
  if (args->dst == nullptr) {
    args->dst_size = size;
    return nullptr;
  }
  if (static_cast<int64_t>(args->dst_size) < size) {
    return ToPjrt(InvalidArgument(kFn, ": dst_size ", args->dst_size, " is smaller than the ", size,
                                  " bytes of ", ShapeString(buffer->dtype(), buffer->dims())));
  }
  EventRef done;
  WORKSHOP_RETURN_IF_PJRT_ERROR(Client::CopyToHost(buffer, args->dst, std::move(strides), &done));
  args->event = Wrap(std::move(done));
  return nullptr;
}

PJRT_Error* Buffer_CopyRawToHost(PJRT_Buffer_CopyRawToHost_Args* args) {
  EventRef done;
  WORKSHOP_RETURN_IF_PJRT_ERROR(Client::CopyRawToHost(args->buffer->buffer, args->dst, args->offset,
                                                      args->transfer_size, &done));
  args->event = Wrap(std::move(done));
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
  args->event = Wrap(args->buffer->buffer->ready());
  return nullptr;
}

PJRT_Error* Buffer_UnsafePointer(PJRT_Buffer_UnsafePointer_Args* args) {
  std::shared_ptr<Storage> storage = args->buffer->buffer->storage();
  if (storage == nullptr) {
    return ToPjrt(
        FailedPrecondition("PJRT_Buffer_UnsafePointer: the buffer is deleted or not yet computed"));
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

// ---- The async host-to-device transfer manager (runtime/async_transfer.h).

PJRT_Error* Client_CreateBuffersForAsyncHostToDevice(
    PJRT_Client_CreateBuffersForAsyncHostToDevice_Args* args) {
  constexpr const char* kFn = "PJRT_Client_CreateBuffersForAsyncHostToDevice";
  if (args->memory == nullptr) return ToPjrt(InvalidArgument(kFn, ": no memory was given"));
  Memory* memory = nullptr;  // Also refuses another process's memory.
  WORKSHOP_RETURN_IF_PJRT_ERROR(TargetMemory(args->client, nullptr, args->memory, kFn, &memory));
  std::vector<AsyncTransfer::Spec> specs;
  for (size_t i = 0; i < args->num_shape_specs; ++i) {
    const PJRT_ShapeSpec& spec = args->shape_specs[i];
    specs.push_back(
        {static_cast<DType>(RawEnum(spec.element_type)), DimsOf(spec.dims, spec.num_dims)});
    if (args->device_layouts != nullptr && i < args->num_device_layouts) {
      WORKSHOP_RETURN_IF_PJRT_ERROR(
          CheckDeviceLayout(args->device_layouts[i], specs.back().dtype, specs.back().dims, kFn));
    }
  }
  std::unique_ptr<AsyncTransfer> transfer;
  WORKSHOP_RETURN_IF_PJRT_ERROR(AsyncTransfer::Create(specs, memory, &transfer));
  args->transfer_manager =
      new PJRT_AsyncHostToDeviceTransferManager{std::move(transfer), args->client};
  return nullptr;
}

// Buffers already retrieved stay valid; ones never completed stay not-ready forever, as in
// XLA, so their consumers should be given an error first (SetBufferError).
PJRT_Error* AsyncHostToDeviceTransferManager_Destroy(
    PJRT_AsyncHostToDeviceTransferManager_Destroy_Args* args) {
  delete args->transfer_manager;
  return nullptr;
}

PJRT_Error* AsyncHostToDeviceTransferManager_TransferData(
    PJRT_AsyncHostToDeviceTransferManager_TransferData_Args* args) {
  WORKSHOP_RETURN_IF_PJRT_ERROR(args->transfer_manager->transfer->TransferData(
      args->buffer_index, args->data, args->offset, args->transfer_size,
      RawBool(args->is_last_transfer)));
  args->done_with_h2d_transfer = Wrap(Event::Ready());  // Copied during the call.
  return nullptr;
}

PJRT_Error* AsyncHostToDeviceTransferManager_RetrieveBuffer(
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args* args) {
  std::shared_ptr<Buffer> buffer;
  WORKSHOP_RETURN_IF_PJRT_ERROR(
      args->transfer_manager->transfer->Retrieve(args->buffer_index, &buffer));
  args->buffer_out = Wrap(args->transfer_manager->client, std::move(buffer));
  return nullptr;
}

PJRT_Error* AsyncHostToDeviceTransferManager_Device(
    PJRT_AsyncHostToDeviceTransferManager_Device_Args* args) {
  PJRT_AsyncHostToDeviceTransferManager* manager = args->transfer_manager;
  args->device_out = manager->client->Wrap(manager->transfer->memory()->device());
  return nullptr;
}

PJRT_Error* AsyncHostToDeviceTransferManager_BufferCount(
    PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args* args) {
  args->buffer_count = args->transfer_manager->transfer->buffer_count();
  return nullptr;
}

PJRT_Error* AsyncHostToDeviceTransferManager_BufferSize(
    PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args* args) {
  return ToPjrt(
      args->transfer_manager->transfer->BufferSize(args->buffer_index, &args->buffer_size));
}

PJRT_Error* AsyncHostToDeviceTransferManager_SetBufferError(
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args* args) {
  Status error(static_cast<Code>(args->error_code),
               std::string(args->error_message, args->error_message_size));
  if (error.ok()) {
    return ToPjrt(
        InvalidArgument("PJRT_AsyncHostToDeviceTransferManager_SetBufferError: "
                        "the error code is OK"));
  }
  return ToPjrt(args->transfer_manager->transfer->SetError(args->buffer_index, std::move(error)));
}

// Transfer metadata is a hint for devices whose transfers need it (e.g. DMA engines);
// copies here need none, so it is accepted and dropped.
PJRT_Error* AsyncHostToDeviceTransferManager_AddMetadata(
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args*) {
  return nullptr;
}

}  // namespace workshop::capi
