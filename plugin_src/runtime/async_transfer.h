// AsyncTransfer: buffers whose contents arrive in pieces
// (PJRT_Client_CreateBuffersForAsyncHostToDevice and the transfer manager functions).
//
// The buffers exist, with their storage, from the start; each is "not ready" until its
// last piece (TransferData with is_last_transfer) and every piece still being copied have
// arrived, or an error is set, so executions may already be queued on them. Pieces are
// copied during the call, so every TransferData's done event is ready on return.
// Thread-safe: pieces of one buffer may arrive from several threads at once.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/device.h"

namespace workshop {

class AsyncTransfer {
 public:
  struct Spec {
    DType dtype;
    Dims dims;
  };
  // Allocates one buffer per spec in `memory`.
  static Status Create(const std::vector<Spec>& specs, Memory* memory,
                       std::unique_ptr<AsyncTransfer>* out);

  size_t buffer_count() const { return buffers_.size(); }
  Memory* memory() const { return memory_; }
  // Errors: an index out of range.
  Status BufferSize(int index, size_t* size) const;
  // The buffer, for the caller to own. It may be retrieved before it is complete.
  Status Retrieve(int index, std::shared_ptr<Buffer>* buffer) const;
  // Copies `size` bytes to byte `offset` of buffer `index`; `last` completes the buffer.
  // Errors: bad index or range, or the buffer already completed (or failed).
  Status TransferData(int index, const void* data, int64_t offset, int64_t size, bool last);
  // Completes buffer `index` with `error`, which every consumer then sees.
  Status SetError(int index, Status error);

 private:
  AsyncTransfer(Memory* memory) : memory_(memory) {}
  Status Check(int index) const;

  struct Progress {
    bool last_seen = false;  // The piece marked last has started.
    int in_flight = 0;       // Pieces being copied.
    bool complete = false;   // The ready event is set.
  };

  Memory* const memory_;
  std::vector<std::shared_ptr<Buffer>> buffers_;
  std::mutex mu_;
  std::vector<Progress> progress_;  // Guarded by mu_.
};

}  // namespace workshop
