#include "runtime/async_transfer.h"

#include <cstring>

namespace workshop {

Status AsyncTransfer::Create(const std::vector<Spec>& specs, Memory* memory,
                             std::unique_ptr<AsyncTransfer>* out) {
  std::unique_ptr<AsyncTransfer> transfer(new AsyncTransfer(memory));
  for (const Spec& spec : specs) {
    if (!IsSupported(spec.dtype)) {
      return Unimplemented("workshop: buffers of element type ", DTypeName(spec.dtype),
                           " are not supported");
    }
    for (int64_t d : spec.dims) {
      if (d < 0)
        return InvalidArgument("workshop: negative dimension in ",
                               ShapeString(spec.dtype, spec.dims));
    }
    int64_t bytes = 0;
    if (!CheckedByteSize(spec.dtype, spec.dims, &bytes)) {
      return InvalidArgument("workshop: the size of ", ShapeString(spec.dtype, spec.dims),
                             " overflows int64");
    }
    auto buffer = std::make_shared<Buffer>(spec.dtype, spec.dims, memory, Event::Create());
    std::shared_ptr<Storage> storage = Storage::Allocate(buffer->byte_size(), memory->stats());
    if (storage == nullptr) {
      return ResourceExhausted("workshop: out of memory for ", ShapeString(spec.dtype, spec.dims));
    }
    buffer->SetStorage(std::move(storage));
    transfer->buffers_.push_back(std::move(buffer));
  }
  transfer->progress_.resize(specs.size());
  *out = std::move(transfer);
  return Status();
}

Status AsyncTransfer::Check(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= buffers_.size()) {
    return InvalidArgument("workshop: buffer index ", index,
                           " is out of range for a transfer "
                           "of ",
                           buffers_.size(), " buffers");
  }
  return Status();
}

Status AsyncTransfer::BufferSize(int index, size_t* size) const {
  WORKSHOP_RETURN_IF_ERROR(Check(index));
  *size = buffers_[index]->byte_size();
  return Status();
}

Status AsyncTransfer::Retrieve(int index, std::shared_ptr<Buffer>* buffer) const {
  WORKSHOP_RETURN_IF_ERROR(Check(index));
  *buffer = buffers_[index];
  return Status();
}

Status AsyncTransfer::TransferData(int index, const void* data, int64_t offset, int64_t size,
                                   bool last) {
  WORKSHOP_RETURN_IF_ERROR(Check(index));
  const std::shared_ptr<Buffer>& buffer = buffers_[index];
  if (offset < 0 || size < 0 || offset > buffer->byte_size() - size) {
    return InvalidArgument("workshop: transfer of ", size, " bytes at offset ", offset,
                           " does not fit buffer ", index, " of ", buffer->byte_size(), " bytes");
  }
  Progress& progress = progress_[index];
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (progress.last_seen || progress.complete) {
      return FailedPrecondition("workshop: buffer ", index,
                                " of this transfer already had "
                                "its last piece or an error");
    }
    progress.last_seen = last;
    ++progress.in_flight;
  }
  std::shared_ptr<Storage> storage = buffer->storage();
  if (storage != nullptr && size > 0) {
    std::memcpy(static_cast<char*>(storage->data()) + offset, data, size);
  }
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done = --progress.in_flight == 0 && progress.last_seen && !progress.complete;
    progress.complete |= done;
  }
  if (done) buffer->ready()->Set(Status());
  return Status();
}

Status AsyncTransfer::SetError(int index, Status error) {
  WORKSHOP_RETURN_IF_ERROR(Check(index));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (progress_[index].complete) {
      return FailedPrecondition("workshop: buffer ", index,
                                " of this transfer is already "
                                "complete");
    }
    progress_[index].complete = true;
  }
  buffers_[index]->ready()->Set(std::move(error));
  return Status();
}

}  // namespace workshop
