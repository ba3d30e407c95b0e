// Storage and Buffer: device memory and the PJRT buffer that names it.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/event.h"
#include "runtime/memory_stats.h"

namespace workshop {

class Device;
class Memory;

// A dense block of device memory from the MemoryPool (its element order is the owning
// Buffer's layout, row-major unless the buffer says otherwise), 64-byte aligned so
// kernels can use aligned vector loads. Shared (shared_ptr) between a Buffer and the
// executions that read it, so a buffer deleted while an execution is queued stays alive
// until that execution is done.
class Storage {
 public:
  // Allocates `size` bytes (uninitialized), charged to `stats` (default: this thread's
  // MemoryAttribution, if any). Returns null when the allocation fails.
  static std::shared_ptr<Storage> Allocate(size_t size,
                                           MemoryStatsRef stats = MemoryAttribution::Current());
  // Memory the runtime does not own (PJRT_Client_CreateViewOfDeviceBuffer): `release` runs
  // when the last reference is dropped, on whichever thread drops it.
  static std::shared_ptr<Storage> View(void* data, size_t size, std::function<void()> release);
  // `size` bytes at byte `offset` of `arena` (a temporary's place in a call's arena,
  // runtime/buffer_assignment.h), keeping the arena alive while the slice is.
  static std::shared_ptr<Storage> Slice(std::shared_ptr<Storage> arena, size_t offset, size_t size);
  // Public for make_shared (object and control block in one allocation); the key keeps
  // construction to Allocate and View.
  class Key {
    friend class Storage;
    Key() = default;
  };
  Storage(Key, void* data, size_t size) : data_(data), size_(size) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_;
  size_t size_;
  MemoryStatsRef stats_;            // Owned allocations only.
  std::function<void()> release_;   // Views only.
  std::shared_ptr<Storage> arena_;  // Slices only.
  bool is_view_ = false;
};

// Layouts (MinorToMajor, dtype.h). A buffer in a layout other than row-major holds its
// elements in that order; kernels only ever see row-major (LoadedExecutable::Execute
// converts on the way in and out).

// {rank-1, ..., 0}.
MinorToMajor RowMajor(size_t rank);
// Whether `minor_to_major` (empty or a permutation) is the row-major order.
bool IsRowMajor(const MinorToMajor& minor_to_major);
// The byte stride of each dim of `dims` stored densely in `minor_to_major` order (empty:
// row-major) with elements `width` bytes wide.
std::vector<int64_t> LayoutByteStrides(const Dims& dims, const MinorToMajor& minor_to_major,
                                       int64_t width);
// Copies the `dtype[dims]` array at `src`, stored in layout `src_layout`, to `dst` in
// `dst_layout` (either empty: row-major); a memcpy when the two orders agree.
void Relayout(void* dst, const MinorToMajor& dst_layout, const void* src,
              const MinorToMajor& src_layout, DType dtype, const Dims& dims);
// "{1,0}": xla::Layout's text form (a row-major one when `minor_to_major` is empty).
std::string LayoutString(const MinorToMajor& minor_to_major, size_t rank);

// A PJRT buffer: an array of `dtype[dims]` on one device, stored in `layout()`. Its
// contents may not exist yet (the output of a queued execution): `ready()` fires once they
// do, or with the error that prevented them. Thread-safe.
class Buffer {
 public:
  // `layout` empty or row-major: dense row-major (stored as empty).
  Buffer(DType dtype, Dims dims, Memory* memory, EventRef ready, MinorToMajor layout = {});
  // A buffer whose contents exist already (`ready` is complete).
  Buffer(DType dtype, Dims dims, Memory* memory, EventRef ready, std::shared_ptr<Storage> storage,
         MinorToMajor layout = {});

  DType dtype() const { return dtype_; }
  const Dims& dims() const { return dims_; }
  // The order of the elements in storage(); empty: row-major.
  const MinorToMajor& layout() const { return layout_; }
  int64_t byte_size() const { return NumElements(dims_) * ByteWidth(dtype_); }
  Memory* memory() const { return memory_; }
  Device* device() const;
  const EventRef& ready() const { return ready_; }

  // Called once by the producer, before it sets `ready()`.
  void SetStorage(std::shared_ptr<Storage> storage);
  // The contents; null if deleted or not yet produced.
  std::shared_ptr<Storage> storage() const;

  // Drops the contents (PJRT_Buffer_Delete). Running executions keep their own reference.
  void Delete();
  bool IsDeleted() const;
  // Donation: marks the buffer deleted (IsDeleted() is true from now on) and moves its
  // contents to the caller. If the contents are not produced yet, returns null and keeps
  // them, when they arrive, for one TakeDonated() call by the execution that consumes them.
  std::shared_ptr<Storage> Donate();
  std::shared_ptr<Storage> TakeDonated();

  // External references (DLPack, zero-copy views) pin the contents.
  void IncreaseExternalReferences();
  Status DecreaseExternalReferences();
  bool HasExternalReferences() const;

 private:
  const DType dtype_;
  const Dims dims_;
  const MinorToMajor layout_;
  Memory* const memory_;
  const EventRef ready_;

  mutable std::mutex mu_;
  std::shared_ptr<Storage> storage_;
  bool deleted_ = false;
  bool donated_ = false;
  int external_references_ = 0;
};

}  // namespace workshop
