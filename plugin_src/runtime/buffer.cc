#include "runtime/buffer.h"

#include <cstring>
#include <string>

#include "kernels/core/strided.h"
#include "runtime/device.h"
#include "runtime/memory_pool.h"

namespace workshop {

std::shared_ptr<Storage> Storage::Allocate(size_t size, MemoryStatsRef stats) {
  // Charged before allocating, so an allocation past the memory's limit never touches
  // the host's memory.
  if (stats != nullptr && !stats->Reserve(static_cast<int64_t>(size))) return nullptr;
  void* data = MemoryPool::Global().Allocate(size);
  if (data == nullptr) {
    if (stats != nullptr) stats->Freed(static_cast<int64_t>(size));
    return nullptr;
  }
  auto storage = std::make_shared<Storage>(Key(), data, size);
  storage->stats_ = std::move(stats);
  return storage;
}

std::shared_ptr<Storage> Storage::View(void* data, size_t size, std::function<void()> release) {
  auto storage = std::make_shared<Storage>(Key(), data, size);
  storage->release_ = std::move(release);
  storage->is_view_ = true;
  return storage;
}

std::shared_ptr<Storage> Storage::Slice(std::shared_ptr<Storage> arena, size_t offset,
                                        size_t size) {
  auto storage = std::make_shared<Storage>(Key(), static_cast<char*>(arena->data()) + offset, size);
  storage->arena_ = std::move(arena);
  storage->is_view_ = true;
  return storage;
}

Storage::~Storage() {
  if (is_view_) {
    if (release_) release_();
    return;
  }
  if (stats_ != nullptr) stats_->Freed(static_cast<int64_t>(size_));
  MemoryPool::Global().Free(data_, size_);
}

MinorToMajor RowMajor(size_t rank) {
  MinorToMajor order(rank);
  for (size_t i = 0; i < rank; ++i) order[i] = static_cast<int64_t>(rank - 1 - i);
  return order;
}

bool IsRowMajor(const MinorToMajor& minor_to_major) {
  return minor_to_major.empty() || minor_to_major == RowMajor(minor_to_major.size());
}

std::vector<int64_t> LayoutByteStrides(const Dims& dims, const MinorToMajor& minor_to_major,
                                       int64_t width) {
  if (IsRowMajor(minor_to_major)) return RowMajorStrides(dims, width);
  std::vector<int64_t> strides(dims.size());
  int64_t stride = width;
  for (int64_t dim : minor_to_major) {
    strides[dim] = stride;
    stride *= dims[dim];
  }
  return strides;
}

void Relayout(void* dst, const MinorToMajor& dst_layout, const void* src,
              const MinorToMajor& src_layout, DType dtype, const Dims& dims) {
  const int64_t width = ByteWidth(dtype);
  if (NumElements(dims) == 0) return;
  if (IsRowMajor(dst_layout) == IsRowMajor(src_layout) &&
      (IsRowMajor(dst_layout) || dst_layout == src_layout)) {
    std::memcpy(dst, src, NumElements(dims) * width);
    return;
  }
  StridedCopy(dst, LayoutByteStrides(dims, dst_layout, width), src,
              LayoutByteStrides(dims, src_layout, width), width, dims);
}

std::string LayoutString(const MinorToMajor& minor_to_major, size_t rank) {
  const MinorToMajor order = minor_to_major.empty() ? RowMajor(rank) : minor_to_major;
  std::string text = "{";
  for (size_t i = 0; i < order.size(); ++i) {
    text += (i == 0 ? "" : ",") + std::to_string(order[i]);
  }
  return text + "}";
}

Buffer::Buffer(DType dtype, Dims dims, Memory* memory, EventRef ready, MinorToMajor layout)
    : dtype_(dtype),
      dims_(std::move(dims)),
      layout_(IsRowMajor(layout) ? MinorToMajor() : std::move(layout)),
      memory_(memory),
      ready_(std::move(ready)) {}

Buffer::Buffer(DType dtype, Dims dims, Memory* memory, EventRef ready,
               std::shared_ptr<Storage> storage, MinorToMajor layout)
    : dtype_(dtype),
      dims_(std::move(dims)),
      layout_(IsRowMajor(layout) ? MinorToMajor() : std::move(layout)),
      memory_(memory),
      ready_(std::move(ready)),
      storage_(std::move(storage)) {}

Device* Buffer::device() const { return memory_->device(); }

void Buffer::SetStorage(std::shared_ptr<Storage> storage) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!deleted_ || donated_) storage_ = std::move(storage);
}

std::shared_ptr<Storage> Buffer::storage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deleted_ ? nullptr : storage_;
}

void Buffer::Delete() {
  std::lock_guard<std::mutex> lock(mu_);
  if (deleted_) return;  // Already deleted, or donated to an execution that still needs it.
  deleted_ = true;
  storage_.reset();
}

bool Buffer::IsDeleted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deleted_;
}

std::shared_ptr<Storage> Buffer::Donate() {
  std::lock_guard<std::mutex> lock(mu_);
  if (deleted_) return nullptr;
  deleted_ = true;
  donated_ = true;
  return std::move(storage_);
}

std::shared_ptr<Storage> Buffer::TakeDonated() {
  std::lock_guard<std::mutex> lock(mu_);
  return donated_ ? std::move(storage_) : nullptr;
}

void Buffer::IncreaseExternalReferences() {
  std::lock_guard<std::mutex> lock(mu_);
  ++external_references_;
}

Status Buffer::DecreaseExternalReferences() {
  std::lock_guard<std::mutex> lock(mu_);
  if (external_references_ == 0) {
    return InvalidArgument(
        "Attempting to decrease reference on a buffer with zero reference count.");
  }
  --external_references_;
  return Status();
}

bool Buffer::HasExternalReferences() const {
  std::lock_guard<std::mutex> lock(mu_);
  return external_references_ > 0;
}

}  // namespace workshop
