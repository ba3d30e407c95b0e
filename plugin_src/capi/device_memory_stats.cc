// PJRT_Device_MemoryStats: what `jax.Device.memory_stats()` reports for a workshop device.
//
// The device's default ("device") memory: the bytes of the buffers in it plus the
// temporaries of running executions, the peak of that, the number of allocations and the
// largest one (runtime/memory_stats.h counts them), and its limit (create option
// device_memory_limit) when there is one. Then the memory pool that recycles their
// blocks (runtime/memory_pool.h; one per process, shared by the devices): pool_bytes is
// what it holds from the system (blocks handed out plus cached), peak_pool_bytes the peak
// of that, largest_free_block_bytes its largest cached block. A field the plugin does not
// know keeps its `*_is_set = false`, which jaxlib reports as -1. Notebook 05's exercise
// writes this file (its starting point is notebooks/exercises/device_memory_stats.cc);
// the argument checks (struct_size, a null device) happen before, in capi/check.h.
#include "capi/api.h"
#include "capi/wrappers.h"
#include "runtime/memory_pool.h"

namespace workshop::capi {

PJRT_Error* Device_MemoryStats(PJRT_Device_MemoryStats_Args* args) {
  const MemoryStats& stats = *args->device->device->memory()->stats();
  args->bytes_in_use = stats.bytes_in_use();
  args->peak_bytes_in_use = stats.peak_bytes_in_use();
  args->peak_bytes_in_use_is_set = true;
  args->num_allocs = stats.num_allocs();
  args->num_allocs_is_set = true;
  args->largest_alloc_size = stats.largest_alloc_size();
  args->largest_alloc_size_is_set = true;
  args->bytes_limit = stats.bytes_limit();
  args->bytes_limit_is_set = stats.bytes_limit() > 0;
  args->bytes_reserved_is_set = false;
  args->peak_bytes_reserved_is_set = false;
  args->bytes_reservable_limit_is_set = false;
  const MemoryPool::Counters pool = MemoryPool::Global().counters();
  args->largest_free_block_bytes = static_cast<int64_t>(pool.largest_cached);
  args->largest_free_block_bytes_is_set = true;
  args->pool_bytes = static_cast<int64_t>(pool.bytes_in_use + pool.bytes_cached);
  args->pool_bytes_is_set = true;
  args->peak_pool_bytes = static_cast<int64_t>(pool.peak_bytes_held);
  args->peak_pool_bytes_is_set = true;
  return nullptr;
}

}  // namespace workshop::capi
